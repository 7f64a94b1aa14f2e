//! The scrubber: `GET /v1/scrub`, `POST /v1/scrub/start` and `POST /v1/scrub/pause`
//! answer a [`ScrubStatus`]. cairn-objects' scrubber keeps its status in these
//! types, and mgmtd keeps the last [`ScrubPass`] on disk as JSON across restarts.

use serde::{Deserialize, Serialize};

/// What the scrubber is doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScrubState {
    #[default]
    Idle,
    Running,
    Paused,
}

/// One pass, running or finished.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubPass {
    pub started_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<i64>,
    /// Objects in the metadata when the pass started.
    pub objects_total: u64,
    /// Objects examined so far.
    pub objects: u64,
    /// Fragments and copies read and checked.
    pub fragments: u64,
    pub bytes: u64,
    /// Found bad: unreadable, missing, the wrong length or not matching the
    /// manifest's checksum.
    pub bad: u64,
    /// Bad ones rebuilt, written back and verified.
    pub repaired: u64,
    /// Bad ones that could not be rebuilt now (too few good fragments, or the
    /// write failed): left to repair and counted again by the next pass.
    pub unrepaired: u64,
    /// Fragments not checked because their drive was failed or unreachable
    /// during the pass: the next pass comes soon (minutes), not a week later.
    #[serde(default)]
    pub skipped: u64,
}

/// The scrubber's status, as the admin API shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScrubStatus {
    pub state: ScrubState,
    pub rate_bytes_per_s: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_s: Option<u64>,
    /// Completed passes since this process started.
    pub passes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<ScrubPass>,
    /// The last completed pass (kept across restarts by mgmtd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<ScrubPass>,
    /// When the next pass starts on its own, unless paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_ms: Option<i64>,
    /// A whole pass is owed: one was started (by damage found, the schedule or an
    /// operator) and has not completed. Kept across restarts by mgmtd, so a pass
    /// cut short by a crash — or damage reported by a datapathd that then crashed
    /// again before the pass — is run at the next start.
    #[serde(default)]
    pub owed: bool,
}
