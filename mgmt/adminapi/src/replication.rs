//! Bucket replication (`/v1/tenants/{tenant}/buckets/{bucket}/replication`):
//! the rules shipping a bucket's new versions to another cluster, and where
//! the shipping stands.

use serde::{Deserialize, Serialize};

/// One rule as set: the keys under `prefix` go to `bucket` at `endpoint`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationRuleSpec {
    pub id: String,
    #[serde(default)]
    pub prefix: String,
    /// `http://host:port` of the destination's S3 service.
    pub endpoint: String,
    pub bucket: String,
    #[serde(default = "default_region")]
    pub region: String,
    pub access_key: String,
    /// Kept wrapped by the cluster's master key; never shown again.
    pub secret_key: String,
    /// Delete markers are shipped too.
    #[serde(default = "yes")]
    pub delete_markers: bool,
}

impl std::fmt::Debug for ReplicationRuleSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ReplicationRuleSpec({} {:?} → {} {})",
            self.id, self.prefix, self.endpoint, self.bucket
        )
    }
}

fn default_region() -> String {
    "us-east-1".into()
}

fn yes() -> bool {
    true
}

/// `PUT /v1/tenants/{tenant}/buckets/{bucket}/replication`: the rules, in
/// order (the first whose prefix a key has takes it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationSpec {
    pub rules: Vec<ReplicationRuleSpec>,
}

/// A rule as shown (no secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationRuleView {
    pub id: String,
    pub prefix: String,
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key: String,
    pub delete_markers: bool,
}

/// A bucket's replication: its rules, its backlog and what it shipped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicationView {
    pub bucket: String,
    pub rules: Vec<ReplicationRuleView>,
    /// Versions (and their bytes) still to ship.
    pub backlog: u64,
    pub backlog_bytes: u64,
    /// How long the oldest version still to ship has waited, in milliseconds
    /// (0 with nothing to ship).
    pub lag_ms: u64,
    /// Versions whose last attempt failed (they are tried again), and the
    /// newest such error.
    pub failing: u64,
    pub last_error: Option<String>,
    pub shipped_versions: u64,
    pub shipped_bytes: u64,
    /// Bytes per second of the last batch that shipped anything, and when.
    pub rate_bps: u64,
    pub last_shipped_ms: i64,
}
