//! The bytes the chunk service holds, reserved before they are read or produced,
//! and the service's counters.
//!
//! Two pools of bytes: one per connection (`--max-conn-buffered`) and one for the
//! whole service (`--max-buffered`); every reservation takes from both, the
//! connection's first. What is reserved: each request frame, for its declared
//! length, before its body is read (the buffer itself grows only as bytes
//! arrive), until the batch's writes and other operations are done; and each
//! reply, before the chunks it carries are read, until it is written to the
//! socket. A task never waits for bytes while it holds any (a batch gives its
//! request's back before it reserves its reply), so waiting cannot deadlock:
//! whoever holds bytes is reading a frame the client is sending, executing, or
//! writing to a client that is reading — and a client that stops doing either is
//! cut off by the frame timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A connection's share of the service's bytes.
#[derive(Clone, Debug)]
pub(super) struct Budget {
    conn: Arc<Semaphore>,
    global: Arc<Semaphore>,
    conn_cap: usize,
}

/// Bytes reserved; given back when dropped.
#[derive(Debug)]
pub(super) struct Held {
    conn: OwnedSemaphorePermit,
    global: OwnedSemaphorePermit,
}

impl Budget {
    /// A new connection's budget of `conn_cap` bytes, within `global`.
    pub(super) fn new(global: Arc<Semaphore>, conn_cap: usize) -> Budget {
        Budget {
            conn: Arc::new(Semaphore::new(conn_cap)),
            global,
            conn_cap,
        }
    }

    /// Waits until `n` bytes are free in both pools and holds them. A request
    /// for more than the connection may hold at all is cut to that (no frame or
    /// wave needs more; the configuration keeps the caps above a frame). `None`
    /// only if a pool were closed, which they never are.
    pub(super) async fn reserve(&self, n: usize) -> Option<Held> {
        let n = n.min(self.conn_cap).min(u32::MAX as usize) as u32;
        let conn = self.conn.clone().acquire_many_owned(n).await.ok()?;
        let global = self.global.clone().acquire_many_owned(n).await.ok()?;
        Some(Held { conn, global })
    }

    /// `n` more bytes if they are free now.
    pub(super) fn try_reserve(&self, n: usize) -> Option<Held> {
        let n = u32::try_from(n).ok()?;
        let conn = self.conn.clone().try_acquire_many_owned(n).ok()?;
        let global = self.global.clone().try_acquire_many_owned(n).ok()?;
        Some(Held { conn, global })
    }
}

impl Held {
    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.conn.num_permits()
    }

    /// Splits off `n` bytes (all that is held, if less).
    pub(super) fn split(&mut self, n: usize) -> Option<Held> {
        let n = n.min(self.bytes());
        Some(Held {
            conn: self.conn.split(n)?,
            global: self.global.split(n)?,
        })
    }

    /// Adds `other`'s bytes to these (of the same connection).
    pub(super) fn merge(&mut self, other: Held) {
        self.conn.merge(other.conn);
        self.global.merge(other.global);
    }
}

/// What the service counts; logged when it changes (at most once a minute) and
/// in the warnings themselves.
#[derive(Debug, Default)]
pub(super) struct Stats {
    /// Connections now open (after their handshake).
    pub open: AtomicU64,
    /// Local clients that failed the key handshake; peers that failed TLS.
    pub refused_handshake: AtomicU64,
    /// Connections closed at accept: too many open, or in their handshake.
    pub refused_full: AtomicU64,
    /// Connections closed for idleness.
    pub closed_idle: AtomicU64,
    /// Connections closed for a frame not finished, or a reply not taken, in time.
    pub closed_slow: AtomicU64,
    /// Connections closed for a frame that does not decode.
    pub closed_malformed: AtomicU64,
}

/// Adds one to a counter and returns the new count.
pub(super) fn bump(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed) + 1
}

impl Stats {
    /// The counters, for the log.
    pub(super) fn summary(&self, reserved: usize) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{} open, {} bytes reserved; refused: {} handshakes, {} at the cap; closed: {} idle, {} slow, {} malformed",
            g(&self.open),
            reserved,
            g(&self.refused_handshake),
            g(&self.refused_full),
            g(&self.closed_idle),
            g(&self.closed_slow),
            g(&self.closed_malformed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_take_from_both_pools_and_give_back() {
        let global = Arc::new(Semaphore::new(100));
        let a = Budget::new(global.clone(), 60);
        let b = Budget::new(global.clone(), 60);
        let mut h = a.reserve(50).await.unwrap();
        assert!(a.try_reserve(20).is_none(), "the connection's cap");
        let hb = b.reserve(50).await.unwrap();
        assert!(b.try_reserve(1).is_none(), "the service's cap");
        let part = h.split(30).unwrap();
        assert_eq!((h.bytes(), part.bytes()), (20, 30));
        drop(part);
        assert_eq!(global.available_permits(), 30);
        let more = a.try_reserve(10).unwrap();
        h.merge(more);
        assert_eq!(h.bytes(), 30);
        // More than a connection may hold is cut to its cap.
        drop((h, hb));
        assert_eq!(a.reserve(1000).await.unwrap().bytes(), 60);
        assert_eq!(global.available_permits(), 100);
    }
}
