//! The lifecycle worker: each bucket's lifecycle rules carried out in the
//! background. A current object a rule selects expires once its age passes the
//! rule's days (counted S3's way: from the write, rounded up to the next
//! midnight UTC) or the rule's date passes; a multipart upload not completed
//! within a rule's days is aborted and its parts freed.
//!
//! The worker only proposes: each deletion is a `Mutation::Expire` that the
//! metadata checks again as it applies, against the bucket's rules and the
//! object as they are then. A rule deleted or narrowed during a pass, a tag
//! taken off, a key written again (even with the same bytes): the deletion is
//! refused and nothing is lost. In a cluster the Raft leader runs the passes;
//! a second deletion of the same write (two nodes running a pass across a
//! change of leader) is refused just as harmlessly.

use crate::{ObjectError, ObjectStore};
use cairn_meta::{Expiry, LifecycleRule, MetaError, Mutation, WriteId};
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
