//! Replication of a bucket to another cluster (S3's cross-region replication,
//! MinIO's bucket replication): the rules, and the queue of what is still to
//! ship.
//!
//! A bucket's rules (prefix → destination endpoint, bucket, credentials) live in
//! its record; replication needs versioning enabled, and versioning is then not
//! suspended. Every new version a rule takes (a write, or a delete marker if the
//! rule ships them) is queued in the same transaction that makes it, under
//! (bucket, its version sequence number): the queue is as durable as the write,
//! replicated with the metadata, and read in the order the versions were made.
//! The shipper (on the Raft leader, see `cairn_replication`) sends them and
//! reports each batch with [`ReplicationDone`](crate::Mutation::ReplicationDone),
//! which removes what was shipped and records the failures, to be tried again.
//! Versions made before the rules were set are not shipped (as in S3): the
//! rules remember the sequence number they started at.

use crate::records::{BucketRecord, VersionStamp, Versioning};
use crate::{Applied, MetaError, SYSTEM};
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

/// The user-metadata entry naming the source version a replica is of: how a
/// retried shipment finds it already there, and how a Cairn destination
/// answers `x-amz-replication-status: REPLICA`.
pub const REPLICA_OF: &str = "cairn-replica-of";

/// (bucket, version sequence number) → [`Pending`].
pub(crate) const QUEUE: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("replication_queue");

/// Where a rule ships to: an S3 endpoint (another Cairn cluster or any S3
/// service), its bucket and the credentials to write there.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationTarget {
    /// `http://host:port` (path-style requests are made).
    pub endpoint: String,
    pub bucket: String,
    /// The region requests are signed for.
    pub region: String,
    pub access_key: String,
    /// The secret key, wrapped by the master key (hex; AAD: the access key).
    pub sealed_secret: String,
}

impl std::fmt::Debug for ReplicationTarget {
    // Never print a secret, even wrapped.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ReplicationTarget({} bucket {} as {})",
            self.endpoint, self.bucket, self.access_key
        )
    }
}

/// One rule: the keys under `prefix` go to `target`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationRule {
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// Delete markers are shipped too (S3's `DeleteMarkerReplication`).
    #[serde(default)]
    pub delete_markers: bool,
    pub target: ReplicationTarget,
}

/// A bucket's replication: its rules, the first matching one taking a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replication {
    pub rules: Vec<ReplicationRule>,
    /// Versions numbered above this are shipped (set when the rules apply).
    #[serde(default)]
    pub since_seq: u64,
}

impl Replication {
    /// The rule that takes `key`, if any.
    pub fn rule_for(&self, key: &str) -> Option<&ReplicationRule> {
        self.rules.iter().find(|r| key.starts_with(&r.prefix))
    }
}

/// A version still to ship.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub key: String,
    /// The version's id (the shipper reads it by this).
    pub version_id: String,
    /// A delete marker: shipped as a DELETE.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marker: bool,
    pub size: u64,
    /// When the version was made (the lag is counted from it).
    pub modified_ms: i64,
    /// The rule that took it.
    pub rule: String,
    /// Failed attempts so far, and the last one's error.
    #[serde(default)]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What has been shipped from a bucket (kept in the system table).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Shipped {
    pub versions: u64,
    pub bytes: u64,
    /// The last batch that shipped anything, by the shipper's clock.
    pub last_ms: i64,
    /// Bytes per second of the last batch.
    pub rate_bps: u64,
}

/// A bucket's replication as `nodectl replication status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicationStatus {
    /// Versions and bytes still to ship.
    pub backlog: u64,
    pub backlog_bytes: u64,
    /// When the oldest version still to ship was made.
    pub oldest_ms: Option<i64>,
    /// Versions whose last attempt failed, and the newest such error.
    pub failing: u64,
    pub last_error: Option<String>,
    pub shipped: Shipped,
}

/// The state S3 reports as `x-amz-replication-status` for a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShipState {
    Pending,
    /// Its last attempt failed; it is tried again.
    Failed,
    Completed,
}

fn stats_key(bucket: &str) -> String {
    format!("replication/{bucket}")
}

/// Checks rules before they are set; gives them their starting number.
pub(crate) fn configure(
    tx: &redb::WriteTransaction,
    b: &BucketRecord,
    r: &Option<Replication>,
) -> Result<Option<Replication>, MetaError> {
    let Some(r) = r else {
        return Ok(None);
    };
    if b.versioning != Some(Versioning::Enabled) {
        return Err(MetaError::LockState(
            "replication needs versioning enabled on the bucket".into(),
        ));
    }
    if r.rules.is_empty() {
        return Err(MetaError::InvalidLock(
            "a replication configuration needs a rule".into(),
        ));
    }
    let mut r = r.clone();
    r.since_seq = match &b.replication {
        // Rules changed: what was already taken stays taken.
        Some(old) => old.since_seq,
        None => crate::versions::last_seq(tx)?,
    };
    Ok(Some(r))
}

/// Queues version `stamp` of `key`, made now, if the bucket's rules take it.
pub(crate) fn enqueue(
    tx: &redb::WriteTransaction,
    rules: Option<&Replication>,
    (bucket, key): (&str, &str),
    stamp: &VersionStamp,
    (marker, size, modified_ms): (bool, u64, i64),
) -> Result<(), MetaError> {
    let Some(rule) = rules.and_then(|r| r.rule_for(key)) else {
        return Ok(());
    };
    let Some(id) = &stamp.id else {
        return Ok(());
    };
    if marker && !rule.delete_markers {
        return Ok(());
    }
    let p = Pending {
        key: key.to_string(),
        version_id: id.clone(),
        marker,
        size,
        modified_ms,
        rule: rule.id.clone(),
        attempts: 0,
        error: None,
    };
    tx.open_table(QUEUE)?
        .insert((bucket, stamp.seq), serde_json::to_vec(&p)?.as_slice())?;
    Ok(())
}

/// The shipper's report of a batch: `done` shipped (or found shipped), `failed`
/// tried and refused, with why.
pub(crate) fn done(
    tx: &redb::WriteTransaction,
    bucket: &str,
    done: &[u64],
    failed: &[(u64, String)],
    (bytes, elapsed_ms, now_ms): (u64, u64, i64),
) -> Result<Applied, MetaError> {
    let mut q = tx.open_table(QUEUE)?;
    let mut versions = 0;
    for seq in done {
        if q.remove((bucket, *seq))?.is_some() {
            versions += 1;
        }
    }
    for (seq, why) in failed {
        let got = q.get((bucket, *seq))?.map(|v| v.value().to_vec());
        if let Some(v) = got {
            let mut p: Pending = serde_json::from_slice(&v)?;
            p.attempts += 1;
            p.error = Some(why.clone());
            q.insert((bucket, *seq), serde_json::to_vec(&p)?.as_slice())?;
        }
    }
    if versions > 0 {
        let mut sys = tx.open_table(SYSTEM)?;
        let key = stats_key(bucket);
        let mut s: Shipped = match sys.get(key.as_str())? {
            Some(v) => serde_json::from_slice(v.value())?,
            None => Shipped::default(),
        };
        s.versions += versions;
        s.bytes += bytes;
        s.last_ms = now_ms;
        s.rate_bps = bytes * 1000 / elapsed_ms.max(1);
        sys.insert(key.as_str(), serde_json::to_vec(&s)?.as_slice())?;
    }
    Ok(Applied::default())
}

/// Forgets a bucket's queue and figures (its rules removed, or it is gone).
pub(crate) fn drop_bucket(tx: &redb::WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    let mut q = tx.open_table(QUEUE)?;
    let seqs: Vec<u64> = q
        .range((bucket, 0)..=(bucket, u64::MAX))?
        .map(|e| e.map(|(k, _)| k.value().1))
        .collect::<Result<_, _>>()?;
    for s in seqs {
        q.remove((bucket, s))?;
    }
    tx.open_table(SYSTEM)?.remove(stats_key(bucket).as_str())?;
    Ok(())
}

impl crate::MetaStore {
    /// Up to `max` versions of `bucket` still to ship, oldest first.
    pub fn replication_pending(
        &self,
        bucket: &str,
        max: usize,
    ) -> Result<Vec<(u64, Pending)>, MetaError> {
        let tx = self.db.begin_read()?;
        let q = tx.open_table(QUEUE)?;
        let mut out = Vec::new();
        for e in q.range((bucket, 0)..=(bucket, u64::MAX))?.take(max) {
            let (k, v) = e?;
            out.push((k.value().1, serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    /// The next batch to ship: the oldest queued version of each of up to
    /// `keys` keys, oldest first, reading at most `scan` entries (so that a
    /// key with many versions waiting, or one that cannot ship, does not hide
    /// every other key behind it).
    pub fn replication_batch(
        &self,
        bucket: &str,
        keys: usize,
        scan: usize,
    ) -> Result<Vec<(u64, Pending)>, MetaError> {
        let tx = self.db.begin_read()?;
        let q = tx.open_table(QUEUE)?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for e in q.range((bucket, 0)..=(bucket, u64::MAX))?.take(scan) {
            let (k, v) = e?;
            let p: Pending = serde_json::from_slice(v.value())?;
            if seen.insert(p.key.clone()) {
                out.push((k.value().1, p));
                if out.len() == keys {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Where version `stamp` of a bucket replicating as `r` stands, if it is one
    /// the rules take (made since they were set).
    pub fn ship_state(
        &self,
        bucket: &str,
        r: &Replication,
        key: &str,
        stamp: &VersionStamp,
    ) -> Result<Option<ShipState>, MetaError> {
        if stamp.seq <= r.since_seq || r.rule_for(key).is_none() || stamp.id.is_none() {
            return Ok(None);
        }
        let tx = self.db.begin_read()?;
        let q = tx.open_table(QUEUE)?;
        Ok(Some(match q.get((bucket, stamp.seq))? {
            None => ShipState::Completed,
            Some(v) => match serde_json::from_slice::<Pending>(v.value())?.error {
                Some(_) => ShipState::Failed,
                None => ShipState::Pending,
            },
        }))
    }

    /// The bucket's backlog and what it has shipped.
    pub fn replication_status(&self, bucket: &str) -> Result<ReplicationStatus, MetaError> {
        let tx = self.db.begin_read()?;
        let q = tx.open_table(QUEUE)?;
        let mut s = ReplicationStatus::default();
        for e in q.range((bucket, 0)..=(bucket, u64::MAX))? {
            let (_, v) = e?;
            let p: Pending = serde_json::from_slice(v.value())?;
            s.backlog += 1;
            s.backlog_bytes += p.size;
            s.oldest_ms = Some(s.oldest_ms.map_or(p.modified_ms, |o| o.min(p.modified_ms)));
            if p.error.is_some() {
                s.failing += 1;
                s.last_error = p.error;
            }
        }
        if let Some(v) = tx.open_table(SYSTEM)?.get(stats_key(bucket).as_str())? {
            s.shipped = serde_json::from_slice(v.value())?;
        }
        Ok(s)
    }
}
