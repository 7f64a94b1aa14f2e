//! What every connection of a node's RESP server shares: the intake budget, the
//! counters INFO reports, and SCAN's cursors.

use crate::codec::Intake;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long an unused SCAN cursor is remembered.
const CURSOR_IDLE: Duration = Duration::from_secs(600);
/// The most SCAN cursors remembered at once (the oldest are forgotten first).
const CURSORS: u64 = 100_000;

pub(crate) struct Shared {
    pub intake: Intake,
    pub stats: Stats,
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

/// Counters since the server started, for INFO.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub connections: AtomicU64,
    pub connected: AtomicU64,
    pub rejected: AtomicU64,
    pub commands: AtomicU64,
    /// Keys a GET or MGET found, and did not.
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

/// Counts a connection as connected while it lives.
pub(crate) struct Connected<'a>(&'a AtomicU64);

impl Drop for Connected<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Stats {
    pub fn connected(&self) -> Connected<'_> {
        self.connected.fetch_add(1, Ordering::Relaxed);
        Connected(&self.connected)
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

impl Shared {
    pub fn new(intake_bytes: u64) -> Shared {
        Shared {
            intake: Intake::new(intake_bytes),
            stats: Stats::default(),
            cursors: moka::sync::Cache::builder()
                .max_capacity(CURSORS)
                .time_to_idle(CURSOR_IDLE)
                .build(),
        }
    }
}
