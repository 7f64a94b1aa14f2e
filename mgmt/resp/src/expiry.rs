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

use crate::commands::{now, Session};
use crate::reply::{error, int};
use crate::RespError;
use bytes::Bytes;
use cairn_meta::{MetaError, ObjectRecord, Precondition, WriteId};
use cairn_objects::{ObjectError, ObjectStore};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWrite;

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

/// How often EXPIRE and PERSIST try again when a write to the same key landed
/// between their read and their change (theirs is then refused, never lost).
const RETRIES: usize = 5;

impl Session {
    /// `EXPIRE|PEXPIRE|EXPIREAT|PEXPIREAT key n [NX|XX|GT|LT]`: the key's bytes are
    /// untouched; only its expiry changes, conditional on the write it read (a
    /// SET meanwhile wins, and the command reads again).
    pub(crate) async fn expire<W: AsyncWrite + Unpin>(
        &self,
        tenant: u64,
        name: &str,
        key: &Bytes,
        n: &Bytes,
        opts: &[Bytes],
        w: &mut W,
    ) -> Result<(), RespError> {
        let Some(n) = std::str::from_utf8(n)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        else {
            return error(w, "ERR value is not an integer or out of range").await;
        };
        let at = match name {
            "EXPIRE" => n.checked_mul(1000).and_then(|ms| ms.checked_add(now())),
            "PEXPIRE" => n.checked_add(now()),
            "EXPIREAT" => n.checked_mul(1000),
            _ => Some(n),
        };
        let Some(at) = at else {
            let lower = name.to_ascii_lowercase();
            return error(w, &format!("ERR invalid expire time in '{lower}' command")).await;
        };
        let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
        for o in opts {
            match o.to_ascii_uppercase().as_slice() {
                b"NX" => nx = true,
                b"XX" => xx = true,
                b"GT" => gt = true,
                b"LT" => lt = true,
                _ => {
                    let o = String::from_utf8_lossy(o);
                    return error(w, &format!("ERR Unsupported option {o}")).await;
                }
            }
        }
        if nx && (xx || gt || lt) {
            return error(
                w,
                "ERR NX and XX, GT or LT options at the same time are not compatible",
            )
            .await;
        }
        if gt && lt {
            return error(
                w,
                "ERR GT and LT options at the same time are not compatible",
            )
            .await;
        }
        for _ in 0..RETRIES {
            let rec = self.lookup(tenant, std::slice::from_ref(key)).await?;
            let Some(rec) = rec.into_iter().next().flatten() else {
                return int(w, 0).await;
            };
            let current = expiry(&rec);
            // A key without an expiry counts as living forever for GT and LT.
            let allowed = match current {
                None => !xx && !gt,
                Some(c) => !nx && (!gt || at > c) && (!lt || at < c),
            };
            if !allowed {
                return int(w, 0).await;
            }
            let done = if at <= now() {
                // A time already past deletes the key, as Redis does.
                self.store
                    .delete_object(
                        tenant,
                        &self.pool.bucket,
                        &self.pool.object_key(key)?,
                        this_write(&rec),
                    )
                    .await
            } else {
                let mut meta = rec.user_meta.clone();
                meta.insert(EXPIRES.into(), at.to_string());
                self.replace(tenant, key, &rec, meta).await
            };
            match done {
                Ok(()) => return int(w, 1).await,
                Err(ObjectError::Meta(MetaError::PreconditionFailed)) => continue,
                Err(ObjectError::Meta(MetaError::NoSuchKey(_))) => return int(w, 0).await,
                Err(e) => return Err(e.into()),
            }
        }
        error(w, "ERR the key kept changing; try again").await
    }

    /// `PERSIST key`: drops the key's expiry.
    pub(crate) async fn persist<W: AsyncWrite + Unpin>(
        &self,
        tenant: u64,
        key: &Bytes,
        w: &mut W,
    ) -> Result<(), RespError> {
        self.edit_meta(tenant, key, w, |meta| meta.remove(EXPIRES).is_some())
            .await
    }

    /// Changes a key's user metadata with `edit` (which answers whether it
    /// changed anything), bytes untouched, conditional on the write read: a write
    /// meanwhile wins and the key is read again. Answers `:1` when it changed,
    /// `:0` when the key is missing or `edit` left it as it was.
    pub(crate) async fn edit_meta<W: AsyncWrite + Unpin>(
        &self,
        tenant: u64,
        key: &Bytes,
        w: &mut W,
        edit: impl Fn(&mut BTreeMap<String, String>) -> bool,
    ) -> Result<(), RespError> {
        for _ in 0..RETRIES {
            let rec = self.lookup(tenant, std::slice::from_ref(key)).await?;
            let Some(rec) = rec.into_iter().next().flatten() else {
                return int(w, 0).await;
            };
            let mut meta = rec.user_meta.clone();
            if !edit(&mut meta) {
                return int(w, 0).await;
            }
            match self.replace(tenant, key, &rec, meta).await {
                Ok(()) => return int(w, 1).await,
                Err(ObjectError::Meta(MetaError::PreconditionFailed)) => continue,
                Err(ObjectError::Meta(MetaError::NoSuchKey(_))) => return int(w, 0).await,
                Err(e) => return Err(e.into()),
            }
        }
        error(w, "ERR the key kept changing; try again").await
    }

    /// The key is one [`Session::lookup`] found, so it maps to an object key.
    async fn replace(
        &self,
        tenant: u64,
        key: &[u8],
        rec: &ObjectRecord,
        meta: BTreeMap<String, String>,
    ) -> Result<(), ObjectError> {
        let Ok(object) = self.pool.object_key(key) else {
            return Err(ObjectError::Meta(MetaError::NoSuchKey(
                String::from_utf8_lossy(key).into_owned(),
            )));
        };
        self.store
            .replace_meta(tenant, &self.pool.bucket, &object, WriteId::of(rec), meta)
            .await
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
        // The tenants' default keyspaces and their KV pools.
        if !name.starts_with("_resp.") && b.kv.is_none() {
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
