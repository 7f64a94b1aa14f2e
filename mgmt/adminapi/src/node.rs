//! The node and its drives: `GET /v1/status` and `GET /v1/drives`.

use crate::{ProtectionReport, ScrubStatus};
use serde::{Deserialize, Serialize};

/// One drive as the operator sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriveStatus {
    pub index: u16,
    pub device: String,
    /// `healthy` or `failed` (then `reason` says why).
    pub state: String,
    pub reason: String,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub allocated_bytes: u64,
    pub chunks: u64,
    /// `uring`, `nvme` or `ram`; empty when unknown. This and the fields below are
    /// known for the node's own drives (`/v1/drives`, and `/v1/status` of a single
    /// node); `default` so a newer nodectl reads an older mgmtd's answers.
    #[serde(default)]
    pub backend: String,
    /// A path, or a PCI address and namespace.
    #[serde(default)]
    pub location: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub firmware: Option<String>,
    /// Puts are refused for want of space (deletes still work); known for the
    /// node's own drives.
    #[serde(default)]
    pub full: bool,
    /// Free segments, and how many of them only deletes and compaction may use.
    #[serde(default)]
    pub free_segments: Option<u64>,
    #[serde(default)]
    pub reserve_segments: Option<u64>,
    /// What the drive's last open found damaged on disk, if anything.
    #[serde(default)]
    pub damage_at_open: Option<DamageAtOpen>,
    /// The work of the datapathd reactor serving the drive (node's own drives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reactor: Option<ReactorLoad>,
}

/// The work of one datapathd reactor since datapathd started: counters a
/// reader turns into rates (busy seconds per second is its utilisation,
/// batches per turn its mean queue depth).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReactorLoad {
    pub reactor: u64,
    pub busy_ns: u64,
    pub turns: u64,
    pub batches: u64,
    pub ops: u64,
    /// Messages in the mailbox when the report was made.
    pub queue_depth: u64,
}

/// Damage the chunk store found and worked around when it opened the drive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamageAtOpen {
    /// Segments whose header, summary or footer was damaged (rescanned).
    pub damaged_segments: u64,
    /// Damaged batches followed by valid data (the valid data was kept).
    pub corrupt_batches: u64,
    /// Chunk records lost to damage: repair rebuilds them from other drives.
    pub corrupt_records: u64,
    /// Records kept from inside damaged batches.
    pub salvaged_records: u64,
    /// Incomplete last batches dropped as torn writes (never acknowledged).
    pub torn_batches: u64,
}

/// The node's own drives, for `nodectl drives` (`GET /v1/drives`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeDrives {
    pub drives: Vec<DriveStatus>,
}

/// The node, for `nodectl status` (`GET /v1/status`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeStatus {
    /// `healthy`, `degraded` (a drive failed, data still protected or readable),
    /// `full` (new data refused) or `unavailable` (the datapath does not answer).
    pub health: String,
    /// The machine's host name (node.toml's `hostname` on an image node).
    #[serde(default)]
    pub hostname: String,
    pub data_dir: String,
    pub drives: Vec<DriveStatus>,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub objects: u64,
    pub buckets: u64,
    pub protection: String,
    pub replicas: u8,
    pub degraded_reads: u64,
    pub repaired_fragments: u64,
    pub unreadable_reads: u64,
    pub collected_chunks: u64,
    /// Multipart uploads aborted for being older than `--abort-uploads-after`.
    #[serde(default)]
    pub aborted_uploads: u64,
    /// Fragments found bad when read (by clients or the scrubber).
    #[serde(default)]
    pub bad_fragments: u64,
    /// The scrubber: state, the pass under way, the last one.
    #[serde(default)]
    pub scrub: Option<ScrubStatus>,
    /// The lifecycle worker: what this node's passes did.
    #[serde(default)]
    pub lifecycle: Option<LifecycleStatus>,
    /// Objects fully protected, short of fragments (a drive failed, or a write
    /// that found a drive full), or lost, as the manifests and the drives' states
    /// say now (a single node; a cluster member's are in `cluster status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_protection: Option<ProtectionReport>,
    /// The node's hardware alerts: a BMC sensor past a threshold, or sensors
    /// that cannot be read (what `nodectl node sensors` shows in full).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<String>,
}

/// What a node's lifecycle worker did since mgmtd started.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LifecycleStatus {
    /// Objects deleted by expiration rules.
    pub expired: u64,
    /// Incomplete multipart uploads aborted.
    pub aborted: u64,
    pub passes: u64,
    /// When the last pass ran, ms since the epoch (0: none yet).
    pub last_pass_ms: u64,
}
