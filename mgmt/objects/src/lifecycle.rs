//! The lifecycle worker: each bucket's lifecycle rules carried out in the
//! background. A current object a rule selects expires once its age passes the
//! rule's days (counted S3's way: from the write, rounded up to the next
//! midnight UTC) or the rule's date passes; a multipart upload not completed
//! within a rule's days is aborted and its parts freed. In a versioned bucket,
//! an expiry makes a delete marker (the metadata's doing); a noncurrent version
//! goes for good once it has been noncurrent for a rule's noncurrent days with
//! the rule's number of newer noncurrent versions kept; a delete marker that
//! is its key's only version left goes where a rule says
//! ExpiredObjectDeleteMarker.
//!
//! The worker only proposes: each deletion is a `Mutation::Expire` that the
//! metadata checks again as it applies, against the bucket's rules and the
//! object as they are then. A rule deleted or narrowed during a pass, a tag
//! taken off, a key written again (even with the same bytes): the deletion is
//! refused and nothing is lost. In a cluster the Raft leader runs the passes;
//! a second deletion of the same write (two nodes running a pass across a
//! change of leader) is refused just as harmlessly.

use crate::{ObjectError, ObjectStore};
use cairn_meta::{noncurrent_ages, Expiry, LifecycleRule, MetaError, Mutation, Version, WriteId};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Objects read from the metadata at once by a pass (the bucket's rules are read
/// again before each page).
const PAGE: usize = 1000;

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LifecyclePass {
    pub expired: u64,
    pub aborted: u64,
}

impl ObjectStore {
    /// One pass of every bucket's lifecycle rules at `now_ms`, with days of
    /// length `day` (a day, except in tests).
    pub async fn lifecycle_pass(
        &self,
        now_ms: i64,
        day: Duration,
    ) -> Result<LifecyclePass, ObjectError> {
        self.sync().await?;
        let day_ms = (day.as_millis() as i64).max(1);
        let mut pass = LifecyclePass::default();
        for (bucket, b) in self.meta.buckets()? {
            if !b.lifecycle.iter().any(|r| r.enabled) {
                continue;
            }
            pass.expired += self
                .expire_objects(&bucket, b.tenant, now_ms, day_ms)
                .await?;
            pass.aborted += self
                .abort_incomplete(&bucket, b.tenant, now_ms, day_ms)
                .await?;
            // (An expiry by days also takes delete markers left alone.)
            let for_versions = |r: &LifecycleRule| {
                r.noncurrent_days.is_some()
                    || r.expired_delete_marker
                    || r.expiration_days.is_some()
            };
            if b.versioning.is_some() && b.lifecycle.iter().any(for_versions) {
                pass.expired += self
                    .expire_versions(&bucket, b.tenant, now_ms, day_ms)
                    .await?;
            }
        }
        let c = &self.counters;
        c.lifecycle_expired
            .fetch_add(pass.expired, Ordering::Relaxed);
        c.lifecycle_aborted
            .fetch_add(pass.aborted, Ordering::Relaxed);
        c.lifecycle_passes.fetch_add(1, Ordering::Relaxed);
        c.lifecycle_last_pass_ms
            .store(now_ms.max(0) as u64, Ordering::Relaxed);
        Ok(pass)
    }

    /// The bucket's enabled rules as the metadata has them now.
    fn rules_now(&self, bucket: &str) -> Result<Vec<LifecycleRule>, ObjectError> {
        Ok(self
            .meta
            .bucket(bucket)?
            .map(|b| b.lifecycle.into_iter().filter(|r| r.enabled).collect())
            .unwrap_or_default())
    }

    /// Proposes `what`; true if it applied, false if the metadata found it no
    /// longer due (or already done).
    async fn expire(
        &self,
        tenant: u64,
        bucket: &str,
        what: Expiry,
        now_ms: i64,
        day_ms: i64,
    ) -> Result<bool, ObjectError> {
        let m = Mutation::Expire {
            bucket: bucket.to_string(),
            what,
            now_ms,
            day_ms,
        };
        match self.commit(tenant, m, Vec::new()).await {
            Ok(_) => Ok(true),
            Err(ObjectError::Meta(
                MetaError::PreconditionFailed
                | MetaError::NoSuchKey(_)
                | MetaError::NoSuchUpload(_),
            )) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn expire_objects(
        &self,
        bucket: &str,
        tenant: u64,
        now_ms: i64,
        day_ms: i64,
    ) -> Result<u64, ObjectError> {
        let mut expired = 0;
        let mut after = String::new();
        loop {
            let rules = self.rules_now(bucket)?;
            if rules.is_empty() {
                return Ok(expired);
            }
            let page = self.meta.objects_after(Some((bucket, &after)), PAGE)?;
            let ours: Vec<_> = page
                .into_iter()
                .take_while(|(b, _, _)| b == bucket)
                .collect();
            let Some((_, last, _)) = ours.last() else {
                return Ok(expired);
            };
            after = last.clone();
            let full = ours.len() == PAGE;
            for (_, key, rec) in ours {
                if !rules.iter().any(|r| r.expires(&key, &rec, now_ms, day_ms)) {
                    continue;
                }
                let what = Expiry::Object {
                    key: key.clone(),
                    of: WriteId::of(&rec),
                };
                if self.expire(tenant, bucket, what, now_ms, day_ms).await? {
                    expired += 1;
                    tracing::info!(%bucket, %key, "lifecycle: expired");
                }
            }
            if !full {
                return Ok(expired);
            }
        }
    }

    /// Noncurrent versions and lone delete markers the rules take. The listing
    /// gives each key's versions newest first; a key a page boundary may cut
    /// is left to the next page, so each version is judged with its whole key
    /// in view.
    async fn expire_versions(
        &self,
        bucket: &str,
        tenant: u64,
        now_ms: i64,
        day_ms: i64,
    ) -> Result<u64, ObjectError> {
        let mut expired = 0;
        let mut after: Option<String> = None;
        loop {
            let rules = self.rules_now(bucket)?;
            if rules.is_empty() {
                return Ok(expired);
            }
            let page = self
                .meta
                .list_versions(bucket, "", after.as_deref(), None, None, PAGE)?;
            let full = page.next.is_some();
            // The page's versions, grouped by key (each key's newest first).
            let mut keys: Vec<(String, Vec<Version>)> = Vec::new();
            for e in page.entries {
                match keys.last_mut() {
                    Some((k, vs)) if *k == e.key => vs.push(e.version),
                    _ => keys.push((e.key, vec![e.version])),
                }
            }
            // The last key of a full page may go on in the next: it is judged
            // there (the next page resumes after the key before it); a key that
            // fills a page alone is read whole.
            if full && keys.len() > 1 {
                keys.pop();
            } else if full {
                if let Some((k, vs)) = keys.first_mut() {
                    *vs = self.meta.versions_of_key(bucket, k)?;
                }
            }
            let Some(last) = keys.last().map(|(k, _)| k.clone()) else {
                return Ok(expired);
            };
            for (key, versions) in keys {
                for id in versions_due(&key, &versions, &rules, now_ms, day_ms) {
                    let what = Expiry::Version {
                        key: key.clone(),
                        id: id.clone(),
                    };
                    if self.expire(tenant, bucket, what, now_ms, day_ms).await? {
                        expired += 1;
                        tracing::info!(%bucket, %key, version = %id, "lifecycle: version removed");
                    }
                }
            }
            if !full {
                return Ok(expired);
            }
            after = Some(last);
        }
    }

    async fn abort_incomplete(
        &self,
        bucket: &str,
        tenant: u64,
        now_ms: i64,
        day_ms: i64,
    ) -> Result<u64, ObjectError> {
        let rules = self.rules_now(bucket)?;
        let mut aborted = 0;
        for (upload_id, u) in self.meta.uploads(bucket)? {
            if !rules.iter().any(|r| r.aborts(&u, now_ms, day_ms)) {
                continue;
            }
            let what = Expiry::Upload {
                upload_id: upload_id.clone(),
            };
            if self.expire(tenant, bucket, what, now_ms, day_ms).await? {
                aborted += 1;
                tracing::info!(%bucket, %upload_id, key = %u.key, "lifecycle: incomplete upload aborted");
            }
        }
        Ok(aborted)
    }

    /// Runs a lifecycle pass every `every`, days being `day` long.
    pub(crate) async fn lifecycle_loop(self: Arc<Self>, every: Duration, day: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // One node does it for the cluster: the leader, whose proposals are
            // not forwarded. (Were two to run a pass at once through a change of
            // leader, the metadata refuses each deletion after the first.)
            if !self.log.leads() {
                continue;
            }
            if let Err(e) = self.lifecycle_pass(cairn_meta::now_ms(), day).await {
                tracing::warn!("lifecycle pass: {e}");
            }
        }
    }
}

/// The ids of the versions of `key` (all of them, newest first) the rules take
/// now: a hint; each removal is judged again as it applies.
fn versions_due(
    key: &str,
    all: &[Version],
    rules: &[LifecycleRule],
    now_ms: i64,
    day_ms: i64,
) -> Vec<String> {
    all.iter()
        .zip(noncurrent_ages(all))
        .filter(|(v, age)| match (v, age) {
            // (Object lock keeps a version whatever the rules.)
            (Version::Object(o), Some(age)) => {
                o.lock.refuses(now_ms, false).is_none()
                    && rules
                        .iter()
                        .any(|r| r.expires_noncurrent(key, o, *age, now_ms, day_ms))
            }
            (Version::DeleteMarker { modified_ms, .. }, None) => {
                all.len() == 1
                    && rules
                        .iter()
                        .any(|r| r.removes_lone_marker(key, *modified_ms, now_ms, day_ms))
            }
            _ => false,
        })
        .map(|(v, _)| v.stamp().shown().to_string())
        .collect()
}
