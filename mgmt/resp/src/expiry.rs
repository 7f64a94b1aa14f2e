//! Expired keys: a key past its expiry (`SET ... EX|PX`) is a miss at once, and
//! its object is deleted — when a command finds it (as Redis's lazy expiry), and
//! by a sweep every [`SWEEP_EVERY`] over every tenant's keyspace (Redis's active
//! expiry), so expired keys stop holding space and counting against quotas.
//!
//! Every delete is conditional on the write found expired — its ETag and its
//! expiry (the ETag alone would not do: it is the MD5 of the value, so a key set
//! again to the same value without an expiry would match) — so a key written
//! again meanwhile (by any node, or by this one) is never deleted; in a cluster
//! every node sweeps, and a delete that another node made first fails its
//! condition harmlessly.

use cairn_meta::{ObjectRecord, Precondition};
use cairn_objects::ObjectStore;
use std::sync::Arc;
use std::time::Duration;

/// The user metadata that holds a key's expiry, in ms since the Unix epoch.
pub(crate) const EXPIRES: &str = "resp-expires-ms";
/// How often the whole keyspace is swept.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// The most keys one sweep deletes (the rest wait for the next).
const SWEEP_MAX: usize = 10_000;

/// When `rec` expires, if it does.
pub(crate) fn expiry(rec: &ObjectRecord) -> Option<i64> {
    rec.user_meta.get(EXPIRES).and_then(|s| s.parse().ok())
}

/// Whether `rec` has expired at `now_ms`.
pub(crate) fn expired(rec: &ObjectRecord, now_ms: i64) -> bool {
    expiry(rec).is_some_and(|at| at <= now_ms)
}

/// Deletes the expired object `key` of `bucket` (an S3 name of `tenant`'s) if it
/// is still the version found expired; in the background.
pub(crate) fn forget(
    store: &Arc<ObjectStore>,
    tenant: u64,
    bucket: String,
    key: String,
    rec: &ObjectRecord,
) {
    let store = store.clone();
    let cond = this_write(rec);
    tokio::spawn(async move {
        if let Err(e) = store.delete_object(tenant, &bucket, &key, cond).await {
            tracing::debug!(%bucket, %key, "expired key kept: {e}");
        }
    });
}

/// The condition that the current version of a key is still `rec`, the write
/// found expired: its ETag and its expiry.
pub(crate) fn this_write(rec: &ObjectRecord) -> Precondition {
    Precondition {
        if_match: Some(rec.etag.clone()),
        if_meta: rec
            .user_meta
            .get(EXPIRES)
            .map(|v| (EXPIRES.to_string(), v.clone())),
        ..Default::default()
    }
}

/// Sweeps every RESP keyspace every [`SWEEP_EVERY`] until `stop` resolves.
pub(crate) async fn sweeper(store: Arc<ObjectStore>, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = &mut stop => return,
        }
        match sweep(&store).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, "RESP expired keys swept"),
            Err(e) => tracing::debug!("RESP expiry sweep: {e}"),
        }
    }
}

/// One sweep: deletes expired keys (at most [`SWEEP_MAX`]); answers how many.
pub async fn sweep(store: &ObjectStore) -> Result<usize, cairn_objects::ObjectError> {
    let now = cairn_meta::now_ms();
    let mut deleted = 0;
    for (id, b) in store.meta().buckets()? {
        let name = cairn_meta::bucket_name(&id).to_string();
        if !name.starts_with("_resp.") {
            continue;
        }
        let mut after = None;
        loop {
            let page = store.meta().list(&id, "", after, None, 1000)?;
            for (key, rec) in page.objects.iter().filter(|(_, r)| expired(r, now)) {
                let cond = this_write(rec);
                if store
                    .delete_object(b.tenant, &name, key, cond)
                    .await
                    .is_ok()
                {
                    deleted += 1;
                }
                if deleted >= SWEEP_MAX {
                    return Ok(deleted);
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(deleted)
}
