//! Bucket snapshots (`/v1/tenants/{tenant}/buckets/{bucket}/snapshots`): named,
//! read-only views of a bucket as it was when each was made, read through S3
//! under `.snapshot/NAME/` (and over NFS in the same place).

use serde::{Deserialize, Serialize};

/// `POST /v1/tenants/{tenant}/buckets/{bucket}/snapshots`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSnapshot {
    /// 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot or a dash.
    pub name: String,
}

/// A snapshot as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotView {
    pub name: String,
    pub created_ms: i64,
    /// Its number in the bucket's version sequence (later snapshots have
    /// greater ones).
    pub seq: u64,
    /// Where S3 reads it: `.snapshot/NAME/` in the bucket.
    pub prefix: String,
}

/// A bucket's snapshots, oldest first, and what is kept for them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotsView {
    pub bucket: String,
    pub snapshots: Vec<SnapshotView>,
    /// Versions that writes and deletes replaced since, kept because a
    /// snapshot sees them: not counted in the bucket's usage.
    pub kept_versions: u64,
    pub kept_bytes: u64,
}
