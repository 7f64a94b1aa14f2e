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
}

impl From<cairn_meta::MetaError> for ShipError {
    fn from(e: cairn_meta::MetaError) -> ShipError {
        ShipError::Store(e.into())
    }
}

/// Versions read from a bucket's queue per pass.
const BATCH: usize = 256;
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
        }
    }

    /// Runs passes while this node leads: at once again after a pass that
    /// shipped something (catching up), else every `every`.
    pub fn spawn(self, every: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let busy = match self.store.leads() {
                    true => match self.pass().await {
                        Ok(p) => p.shipped > 0,
                        Err(e) => {
                            tracing::warn!("replication pass: {e}");
                            false
                        }
                    },
                    false => false,
                };
                if !busy {
                    tokio::time::sleep(every).await;
                }
            }
        })
    }

    /// One batch of every replicating bucket.
    pub async fn pass(&self) -> Result<Pass, ShipError> {
        let mut pass = Pass::default();
        for (bucket, rec) in self.store.meta().buckets()? {
            if rec.replication.is_none() || self.waiting(&bucket) {
                continue;
            }
            let p = self.bucket(&bucket, &rec).await?;
            let mut backoff = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
            if p.failed > 0 && p.shipped == 0 {
                let wait = backoff
                    .get(&bucket)
                    .map_or(Duration::from_millis(250), |(_, w)| {
                        (*w * 2).min(MAX_BACKOFF)
                    });
                backoff.insert(bucket.clone(), (Instant::now() + wait, wait));
            } else {
                backoff.remove(&bucket);
            }
            pass.shipped += p.shipped;
            pass.failed += p.failed;
        }
        Ok(pass)
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
        let queued = self.store.meta().replication_pending(bucket, BATCH)?;
        // The oldest version of each key, so a key's versions go in order.
        let mut keys = HashSet::new();
        let batch: Vec<(u64, Pending)> = queued
            .into_iter()
            .filter(|(_, p)| keys.insert(p.key.clone()))
            .collect();
        if batch.is_empty() {
            return Ok(Pass::default());
        }
        let mut remotes = HashMap::new();
        for rule in &r.rules {
            let secret = self.store.open_target_secret(&rule.target)?;
            let remote = Remote::new(self.http.clone(), &rule.target, &secret);
            remotes.insert(rule.id.clone(), remote.map(Arc::new));
        }
        let started = Instant::now();
        let results: Vec<(u64, Result<u64, ShipError>)> = futures::stream::iter(batch)
            .map(|(seq, p)| {
                let remote = remotes.get(&p.rule).map(|r| r.as_ref().map(Arc::clone));
                async move {
                    let shipped = match remote {
                        Some(Ok(remote)) => self.ship(rec.tenant, bucket, &remote, &p).await,
                        Some(Err(e)) => Err(ShipError::Config(e.to_string())),
                        // Its rule was removed: nothing takes it any more.
                        None => Ok(0),
                    };
                    (seq, shipped)
                }
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        let (mut done, mut failed, mut bytes) = (Vec::new(), Vec::new(), 0);
        for (seq, r) in results {
            match r {
                Ok(n) => {
                    done.push(seq);
                    bytes += n;
                }
                Err(e) => {
                    tracing::warn!(%bucket, seq, "replication: {e}");
                    failed.push((seq, e.to_string()));
                }
            }
        }
        let pass = Pass {
            shipped: done.len() as u64,
            failed: failed.len() as u64,
        };
        let elapsed = started.elapsed().as_millis() as u64;
        self.store
            .report_shipped(rec.tenant, bucket, done, failed, (bytes, elapsed))
            .await?;
        Ok(pass)
    }

    /// Ships one version; the bytes sent.
    async fn ship(
        &self,
        tenant: u64,
        bucket: &str,
        remote: &Remote,
        p: &Pending,
    ) -> Result<u64, ShipError> {
        if p.attempts > 0 {
            // Shipped before the failure that was recorded (or the report lost)?
            let there = remote.head(&p.key).await?;
            let already = match &there {
                There::Nothing => p.marker,
                There::Object { replica_of } => replica_of.as_deref() == Some(&p.version_id),
            };
            if already {
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
        for (k, v) in &rec.user_meta {
            headers.push((format!("x-amz-meta-{k}"), v.clone()));
        }
        for (k, v) in &rec.headers {
            headers.push((k.clone(), v.clone()));
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

fn escape(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
