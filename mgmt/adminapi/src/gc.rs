//! The collector: `GET /v1/gc` answers a [`GcStatus`]; `POST /v1/gc/run` (query
//! [`GcRunQuery`]) starts a round in the background and answers the status from
//! before it. cairn-objects' collector reports in these types.

use serde::{Deserialize, Serialize};

/// What one round found and did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GcRound {
    pub started_ms: i64,
    pub finished_ms: i64,
    /// Only looked: nothing deleted, the epoch not advanced.
    pub dry_run: bool,
    /// The epoch this round's metadata was at.
    pub epoch: u64,
    /// Chunks on this node's healthy drives.
    pub listed: u64,
    /// Of them, referenced by no manifest or part.
    pub unreferenced: u64,
    /// Unreferenced chunks seen long enough ago: deleted (or, in a dry run, that
    /// would be).
    pub deleted: u64,
    /// Unreferenced chunks not yet old enough (seen first in a recent epoch).
    pub waiting: u64,
    /// Deletes that found the chunk written again since (kept) or gone.
    pub kept: u64,
    /// Drives skipped (failed or unreachable).
    pub drives_skipped: u64,
    /// Why the round stopped short (metadata unreachable, say), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The collector's status.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GcStatus {
    /// Seconds between rounds (0: on demand only).
    pub every_secs: u64,
    pub running: bool,
    /// The epoch this node's metadata is at, and when it last advanced.
    pub epoch: u64,
    pub epoch_advanced_ms: i64,
    /// Chunks remembered as unreferenced, waiting for the epoch to move on.
    pub candidates: u64,
    pub rounds: u64,
    /// Chunks deleted by all rounds since the start.
    pub deleted_total: u64,
    pub last: Option<GcRound>,
}

/// The query of `POST /v1/gc/run`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcRunQuery {
    /// Only report what would be deleted.
    #[serde(default)]
    pub dry_run: bool,
}
