//! Bucket replication to another cluster: the shipper.
//!
//! The rules and the queue of versions still to ship are the metadata's
//! (`cairn_meta::replication`): a version is queued in the transaction that
//! makes it. The shipper runs on the Raft leader (as the lifecycle worker
//! does); each pass takes, for every replicating bucket, the oldest queued
//! versions, ships the oldest of each key (so a key's versions arrive in the
//! order they were made: a key's next version waits until the one before it is
//! through), several keys at once, and reports the batch through the log, which
//! removes what was shipped and records what failed, to be tried again. A
//! destination that is down holds the backlog, nothing is dropped; a leader
//! change resumes from the queue.
//!
//! Delivery is at least once: a batch shipped but not yet reported when the
//! leader fails is shipped again. A version tried before is first looked for at
//! the destination (its replica names the source version in its metadata,
//! [`cairn_meta::REPLICA_OF`]; a delete marker shows as nothing there), so a
//! retry does not make a second copy.

mod remote;

use cairn_meta::{BucketRecord, Pending, Version, REPLICA_OF};
use cairn_objects::{ObjectError, ObjectStore};
use futures::StreamExt;
use remote::{Remote, There};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a version was not shipped.
#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    #[error("{0}")]
    Config(String),
    #[error("the destination is unreachable: {0}")]
    Link(String),
    #[error("the destination refused it: HTTP {status} {code}")]
    Refused { status: u16, code: String },
    #[error(transparent)]
    Store(#[from] ObjectError),
    /// No rule takes the version's key any more (the rules were changed).
    #[error("no rule takes the key any more")]
    Unruled,
}

impl From<cairn_meta::MetaError> for ShipError {
    fn from(e: cairn_meta::MetaError) -> ShipError {
        ShipError::Store(e.into())
    }
}

/// Keys shipped per batch (the oldest queued version of each).
const BATCH: usize = 256;
/// Queue entries read at most to find them.
const SCAN: usize = 10_000;
/// How long a destination found versioned is not asked again.
const VERSIONED_FOR: Duration = Duration::from_secs(30);
/// Versions in flight per bucket.
const PARALLEL: usize = 8;
/// The longest a bucket whose destination failed every shipment waits.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Ships replicating buckets' new versions.
pub struct Shipper {
    store: Arc<ObjectStore>,
    http: reqwest::Client,
    /// Buckets whose last batch failed whole: when to try again, and the wait.
    backoff: Mutex<HashMap<String, (Instant, Duration)>>,
    /// Buckets this shipper has shipped a batch of since it last became the
    /// leader. Before that, the oldest queued versions may be ones another
    /// shipper sent but did not report (it crashed, or lost the lead): each is
    /// looked for at the destination first.
    trusted: Mutex<HashSet<String>>,
    /// Destinations (endpoint, bucket) found versioned, and when.
    versioned: Mutex<HashMap<(String, String), Instant>>,
}

impl std::fmt::Debug for Shipper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shipper")
    }
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    pub shipped: u64,
    pub failed: u64,
}

impl Shipper {
    pub fn new(store: Arc<ObjectStore>) -> Shipper {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(PARALLEL)
            .build()
            .unwrap_or_default();
        Shipper {
            store,
            http,
            backoff: Mutex::default(),
            trusted: Mutex::default(),
            versioned: Mutex::default(),
        }
    }

    /// Ships while this node leads: each replicating bucket in a task of its
    /// own (a destination that stalls holds up its own buckets only), a
    /// bucket's next batch at once after one that shipped (catching up), else
    /// after `every`.
    pub fn spawn(self, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = Arc::new(self);
        tokio::spawn(async move {
            let mut running: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
            loop {
                running.retain(|_, t| !t.is_finished());
                if !me.store.leads() {
                    me.trusted.lock().unwrap_or_else(|e| e.into_inner()).clear();
                } else {
                    match me.store.meta().buckets() {
                        Ok(buckets) => {
                            for (bucket, rec) in buckets {
                                if rec.replication.is_none()
                                    || running.contains_key(&bucket)
                                    || me.waiting(&bucket)
                                {
                                    continue;
                                }
                                let task = tokio::spawn(me.clone().drain(bucket.clone(), rec));
                                running.insert(bucket, task);
                            }
                        }
                        Err(e) => tracing::warn!("replication: reading the buckets: {e}"),
                    }
                }
                tokio::time::sleep(every).await;
            }
        })
    }

    /// Ships batches of one bucket while they ship something (and this node
    /// leads); backs the bucket off when a whole batch failed.
    async fn drain(self: Arc<Self>, bucket: String, rec: BucketRecord) {
        loop {
            if !self.store.leads() {
                return;
            }
            let p = match self.bucket(&bucket, &rec).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(%bucket, "replication: {e}");
                    Pass {
                        shipped: 0,
                        failed: 1,
                    }
                }
            };
            self.settle(&bucket, p);
            if p.shipped == 0 {
                return;
            }
        }
    }

    /// Records a batch's outcome for the bucket's backoff.
    fn settle(&self, bucket: &str, p: Pass) {
        let mut backoff = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        if p.failed > 0 && p.shipped == 0 {
            let wait = backoff
                .get(bucket)
                .map_or(Duration::from_millis(250), |(_, w)| {
                    (*w * 2).min(MAX_BACKOFF)
                });
            backoff.insert(bucket.to_string(), (Instant::now() + wait, wait));
        } else {
            backoff.remove(bucket);
        }
    }

    fn waiting(&self, bucket: &str) -> bool {
        let backoff = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        backoff
            .get(bucket)
            .is_some_and(|(at, _)| Instant::now() < *at)
    }

    async fn bucket(&self, bucket: &str, rec: &BucketRecord) -> Result<Pass, ShipError> {
        let Some(r) = &rec.replication else {
            return Ok(Pass::default());
        };
        // The oldest version of each key, so a key's versions go in order.
        let batch = self.store.meta().replication_batch(bucket, BATCH, SCAN)?;
        if batch.is_empty() {
            return Ok(Pass::default());
        }
        // Every version goes by the rule that takes its key now (rules may
        // have been replaced since it was queued); none: no longer shipped.
        let needed: HashSet<&str> = batch
            .iter()
            .filter_map(|(_, p)| r.rule_for(&p.key).map(|r| r.id.as_str()))
            .collect();
        let mut remotes = HashMap::new();
        for rule in r.rules.iter().filter(|r| needed.contains(r.id.as_str())) {
            let remote = self.remote(rule).await.map_err(|e| e.to_string());
            remotes.insert(rule.id.clone(), remote);
        }
        let trusted = self
            .trusted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(bucket);
        let started = Instant::now();
        let results: Vec<(u64, Result<u64, ShipError>)> = futures::stream::iter(batch)
            .map(|(seq, p)| {
                let rule = r.rule_for(&p.key).map(|r| r.id.clone());
                let remote = rule.and_then(|id| remotes.get(&id).cloned());
                async move {
                    let shipped = match remote {
                        Some(Ok(remote)) => {
                            let look = !trusted || p.attempts > 0;
                            self.ship(rec.tenant, bucket, &remote, &p, look).await
                        }
                        Some(Err(e)) => Err(ShipError::Config(e)),
                        // No rule takes the key any more: dropped, not shipped.
                        None => Err(ShipError::Unruled),
                    };
                    (seq, shipped)
                }
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        let (mut done, mut failed, mut bytes) = (Vec::new(), Vec::new(), 0);
        let mut dropped = 0;
        for (seq, r) in results {
            match r {
                Ok(n) => {
                    done.push(seq);
                    bytes += n;
                }
                Err(ShipError::Unruled) => {
                    done.push(seq);
                    dropped += 1;
                }
                Err(e) => {
                    tracing::warn!(%bucket, seq, "replication: {e}");
                    failed.push((seq, e.to_string()));
                }
            }
        }
        let pass = Pass {
            shipped: done.len() as u64 - dropped,
            failed: failed.len() as u64,
        };
        let elapsed = started.elapsed().as_millis() as u64;
        let reported = self
            .store
            .report_shipped(rec.tenant, bucket, done, failed, (bytes, elapsed))
            .await;
        if let Err(e) = reported {
            // What was shipped stays queued: looked for before it is sent again.
            self.trusted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(bucket);
            return Err(e.into());
        }
        self.trusted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(bucket.to_string());
        Ok(pass)
    }

    /// The destination of `rule`, checked to keep versions (S3 requires
    /// versioning at the destination too: without it every shipment would
    /// replace the one before; refused, reported and retried until it is
    /// enabled). A destination found versioned is not asked again for a while.
    async fn remote(&self, rule: &cairn_meta::ReplicationRule) -> Result<Arc<Remote>, ShipError> {
        let t = &rule.target;
        let secret = self.store.open_target_secret(t)?;
        let remote = Remote::new(self.http.clone(), t, &secret)?;
        let at = (t.endpoint.clone(), t.bucket.clone());
        let fresh = self
            .versioned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&at)
            .is_some_and(|when| when.elapsed() < VERSIONED_FOR);
        if !fresh {
            if !remote.versioned().await? {
                return Err(ShipError::Config(format!(
                    "the destination bucket {} does not have versioning enabled",
                    t.bucket
                )));
            }
            self.versioned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(at, Instant::now());
        }
        Ok(Arc::new(remote))
    }

    /// Whether the destination's latest version of the key is already this
    /// one: a delete marker for a marker; for an object, a replica naming this
    /// source version with its size (and, for a single-PUT source, its MD5
    /// ETag), so that a forged name alone does not pass for the bytes.
    async fn there_already(
        &self,
        bucket: &str,
        remote: &Remote,
        p: &Pending,
    ) -> Result<bool, ShipError> {
        let there = remote.head(&p.key).await?;
        Ok(match there {
            There::Marker => p.marker,
            There::Nothing => false,
            There::Object {
                replica_of,
                size,
                etag,
            } => {
                if p.marker || replica_of.as_deref() != Some(&p.version_id) {
                    return Ok(false);
                }
                let version = self
                    .store
                    .meta()
                    .object_version(bucket, &p.key, &p.version_id)?;
                match version {
                    Some((Version::Object(rec), _)) => {
                        let md5 = !rec.etag.contains('-');
                        size == Some(rec.size) && (!md5 || etag.as_deref() == Some(&rec.etag))
                    }
                    _ => true,
                }
            }
        })
    }

    /// Ships one version; the bytes sent. With `look`, the destination is
    /// asked first whether it has it already.
    async fn ship(
        &self,
        tenant: u64,
        bucket: &str,
        remote: &Remote,
        p: &Pending,
        look: bool,
    ) -> Result<u64, ShipError> {
        if look {
            // Shipped before the failure that was recorded (or the report lost)?
            if self.there_already(bucket, remote, p).await? {
                return Ok(0);
            }
        }
        if p.marker {
            remote.delete(&p.key).await?;
            return Ok(0);
        }
        let version = self
            .store
            .meta()
            .object_version(bucket, &p.key, &p.version_id)?;
        // Deleted by its id before it was shipped: nothing to send.
        let Some((Version::Object(rec), _)) = version else {
            return Ok(0);
        };
        let mut headers = vec![(format!("x-amz-meta-{REPLICA_OF}"), p.version_id.clone())];
        if let Some(ct) = &rec.content_type {
            headers.push(("content-type".into(), ct.clone()));
        }
        // (The name replication keeps for itself is not the client's to send on.)
        for (k, v) in rec.user_meta.iter().filter(|(k, _)| *k != REPLICA_OF) {
            headers.push((format!("x-amz-meta-{k}"), v.clone()));
        }
        for (k, v) in &rec.headers {
            headers.push((k.clone(), v.clone()));
        }
        // Object lock travels with the version (the destination bucket must
        // have object lock, as S3 requires; else it refuses, and says so).
        if let Some(r) = rec.lock.retention {
            let mode = match r.mode {
                cairn_meta::LockMode::Governance => "GOVERNANCE",
                cairn_meta::LockMode::Compliance => "COMPLIANCE",
            };
            headers.push(("x-amz-object-lock-mode".into(), mode.into()));
            headers.push((
                "x-amz-object-lock-retain-until-date".into(),
                rfc3339(r.until_ms),
            ));
        }
        if rec.lock.legal_hold {
            headers.push(("x-amz-object-lock-legal-hold".into(), "ON".into()));
        }
        if !rec.tags.is_empty() {
            let tags: Vec<String> = rec
                .tags
                .iter()
                .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
                .collect();
            headers.push(("x-amz-tagging".into(), tags.join("&")));
        }
        let body = reqwest::Body::wrap_stream(self.store.read(tenant, &rec, 0, rec.size));
        remote.put(&p.key, rec.size, body, headers).await?;
        Ok(rec.size)
    }
}

/// `ms` since the epoch as RFC 3339 (UTC, milliseconds), as
/// `x-amz-object-lock-retain-until-date` takes it.
fn rfc3339(ms: i64) -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_default()
}

fn escape(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            super::rfc3339(4_102_444_799_000),
            "2099-12-31T23:59:59.000Z"
        );
    }
}
