//! The lifecycle worker: each bucket's lifecycle rules carried out in the
//! background. A current object a rule selects expires once its age passes the
//! rule's days (counted S3's way: from the write, rounded up to the next
//! midnight UTC) or the rule's date passes; a multipart upload not completed
//! within a rule's days is aborted and its parts freed.
//!
//! A deletion names the very write found expired (`Precondition::if_write`), so
//! a key written again meanwhile, even with the same bytes, keeps its new
//! object. In a cluster every node runs the worker: a second deletion of the
//! same write is refused harmlessly, as the reaper of abandoned uploads is.

use crate::{ObjectError, ObjectStore};
use cairn_meta::{LifecycleRule, MetaError, Mutation, Precondition, WriteId};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Objects read from the metadata at once by a pass.
const PAGE: usize = 1000;

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LifecyclePass {
    pub expired: u64,
    pub aborted: u64,
}

/// When something `days` days older than `since_ms` is due: S3 adds the days and
/// rounds up to the next day boundary (midnight UTC for real days).
fn due(since_ms: i64, days: u32, day: Duration) -> i64 {
    let day_ms = (day.as_millis() as i64).max(1);
    let at = since_ms.saturating_add(day_ms.saturating_mul(days as i64));
    at.div_euclid(day_ms)
        .saturating_add((at.rem_euclid(day_ms) != 0) as i64)
        .saturating_mul(day_ms)
}

/// Whether `rule` expires a current object written at `modified_ms`, by `now_ms`.
fn expires(rule: &LifecycleRule, modified_ms: i64, now_ms: i64, day: Duration) -> bool {
    let by_age = rule
        .expiration_days
        .is_some_and(|d| due(modified_ms, d, day) <= now_ms);
    let by_date = rule.expiration_date_ms.is_some_and(|d| d <= now_ms);
    by_age || by_date
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
        let mut pass = LifecyclePass::default();
        for (bucket, b) in self.meta.buckets()? {
            let rules: Vec<&LifecycleRule> = b.lifecycle.iter().filter(|r| r.enabled).collect();
            if rules.is_empty() {
                continue;
            }
            pass.expired += self
                .expire_objects(&bucket, b.tenant, &rules, now_ms, day)
                .await?;
            pass.aborted += self
                .abort_incomplete(&bucket, b.tenant, &rules, now_ms, day)
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

    async fn expire_objects(
        &self,
        bucket: &str,
        tenant: u64,
        rules: &[&LifecycleRule],
        now_ms: i64,
        day: Duration,
    ) -> Result<u64, ObjectError> {
        let mut expired = 0;
        let mut after = String::new();
        loop {
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
                let hit = rules.iter().any(|r| {
                    r.selects(&key, rec.size, &rec.tags) && expires(r, rec.modified_ms, now_ms, day)
                });
                if !hit {
                    continue;
                }
                let m = Mutation::DeleteObject {
                    bucket: bucket.to_string(),
                    key: key.clone(),
                    cond: Precondition {
                        if_write: Some(WriteId::of(&rec)),
                        ..Default::default()
                    },
                };
                match self.commit(tenant, m, Vec::new()).await {
                    Ok(_) => {
                        expired += 1;
                        tracing::info!(%bucket, %key, "lifecycle: expired");
                    }
                    // Written again, or deleted, since it was read: not this write.
                    Err(ObjectError::Meta(
                        MetaError::PreconditionFailed | MetaError::NoSuchKey(_),
                    )) => {}
                    Err(e) => return Err(e),
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
        rules: &[&LifecycleRule],
        now_ms: i64,
        day: Duration,
    ) -> Result<u64, ObjectError> {
        let mut aborted = 0;
        for (upload_id, u) in self.meta.uploads(bucket)? {
            let hit = rules.iter().any(|r| {
                u.key.starts_with(&r.prefix)
                    && r.abort_incomplete_days
                        .is_some_and(|d| due(u.created_ms, d, day) <= now_ms)
            });
            if !hit {
                continue;
            }
            let m = Mutation::AbortUpload {
                bucket: bucket.to_string(),
                upload_id: upload_id.clone(),
            };
            match self.commit(tenant, m, Vec::new()).await {
                Ok(_) => {
                    aborted += 1;
                    tracing::info!(%bucket, %upload_id, key = %u.key, "lifecycle: incomplete upload aborted");
                }
                Err(ObjectError::Meta(MetaError::NoSuchUpload(_))) => {}
                Err(e) => return Err(e),
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
            if let Err(e) = self.lifecycle_pass(cairn_meta::now_ms(), day).await {
                tracing::warn!("lifecycle pass: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);
    const DAY_MS: i64 = 86_400_000;

    #[test]
    fn days_count_to_the_next_midnight() {
        // Written at 10:00 on day 3: one day later is day 4 10:00, rounded up to
        // the start of day 5.
        let written = 3 * DAY_MS + 10 * 3_600_000;
        assert_eq!(due(written, 1, DAY), 5 * DAY_MS);
        // Written exactly at midnight: exactly the days later.
        assert_eq!(due(3 * DAY_MS, 2, DAY), 5 * DAY_MS);
        // Short test days round the same way.
        assert_eq!(due(1500, 2, Duration::from_secs(1)), 4000);
    }

    #[test]
    fn a_rule_expires_by_age_or_by_date() {
        let by_age = LifecycleRule {
            enabled: true,
            expiration_days: Some(1),
            ..Default::default()
        };
        assert!(!expires(&by_age, 0, DAY_MS - 1, DAY));
        assert!(expires(&by_age, 0, DAY_MS, DAY));
        let by_date = LifecycleRule {
            enabled: true,
            expiration_date_ms: Some(10 * DAY_MS),
            ..Default::default()
        };
        assert!(!expires(&by_date, 0, 10 * DAY_MS - 1, DAY));
        assert!(expires(&by_date, 9 * DAY_MS, 10 * DAY_MS, DAY));
        let neither = LifecycleRule {
            enabled: true,
            abort_incomplete_days: Some(1),
            ..Default::default()
        };
        assert!(!expires(&neither, 0, i64::MAX, DAY));
    }
}
