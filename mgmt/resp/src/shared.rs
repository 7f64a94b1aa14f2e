//! What every connection of a node's RESP server shares: the intake budget, the
//! counters INFO reports, and SCAN's cursors.

use crate::codec::Intake;
use std::time::Duration;

/// How long an unused SCAN cursor is remembered.
const CURSOR_IDLE: Duration = Duration::from_secs(600);
/// The most SCAN cursors remembered at once (the oldest are forgotten first).
const CURSORS: u64 = 100_000;

pub(crate) struct Shared {
    pub intake: Intake,
    /// The counters INFO and `/metrics` report.
    pub stats: crate::metrics::RespMetrics,
    /// SCAN's cursors: clients parse a cursor as an integer (redis-py does), and
    /// a position in a keyspace is a key, so the number names the last key
    /// returned, here. A cursor is this node's: a SCAN continued through another
    /// node is told the cursor is invalid.
    pub cursors: moka::sync::Cache<u64, Cursor>,
}

/// Where a SCAN stopped.
#[derive(Clone, Debug)]
pub(crate) struct Cursor {
    pub tenant: u64,
    /// The last object key returned (encoded, see [`crate::encode_key`]).
    pub after: String,
}

impl Shared {
    pub fn new(intake_bytes: u64, stats: crate::metrics::RespMetrics) -> Shared {
        Shared {
            intake: Intake::new(intake_bytes),
            stats,
            cursors: moka::sync::Cache::builder()
                .max_capacity(CURSORS)
                .time_to_idle(CURSOR_IDLE)
                .build(),
        }
    }
}
