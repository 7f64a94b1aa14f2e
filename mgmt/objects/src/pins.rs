//! Extents being streamed to clients by this node. A free waits (after its grace
//! period, and at most an hour) until no read of its extents is in progress, so a
//! slow client downloading an object that was overwritten or deleted meanwhile gets
//! the whole old version, not a body cut off when the grace ran out.
//!
//! Only this node's reads are seen: in a cluster, a read served by another node
//! than the one that committed the overwrite is covered by the grace period alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest a free waits for reads in progress.
pub(crate) const MAX_PIN_WAIT: Duration = Duration::from_secs(3600);

#[derive(Clone, Debug, Default)]
pub(crate) struct Readers(Arc<Mutex<HashMap<u128, usize>>>);

/// Held by a read stream: its extents are pinned until it is dropped.
pub(crate) struct ReadPin {
    readers: Readers,
    extents: Vec<u128>,
}

impl Readers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, usize>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn pin(&self, extents: impl Iterator<Item = u128>) -> ReadPin {
        let extents: Vec<u128> = extents.collect();
        let mut m = self.lock();
        for &e in &extents {
            *m.entry(e).or_default() += 1;
        }
        ReadPin {
            readers: self.clone(),
            extents,
        }
    }

    pub(crate) fn any_pinned(&self, extents: &[u128]) -> bool {
        let m = self.lock();
        extents.iter().any(|e| m.contains_key(e))
    }

    /// Waits until none of `extents` is being read, or `limit` has passed.
    pub(crate) async fn wait_unpinned(&self, extents: &[u128], limit: Duration) {
        let start = tokio::time::Instant::now();
        while self.any_pinned(extents) && start.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        let mut m = self.readers.lock();
        for e in &self.extents {
            if let Some(n) = m.get_mut(e) {
                *n -= 1;
                if *n == 0 {
                    m.remove(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_free_waits_for_the_last_reader() {
        let r = Readers::default();
        let a = r.pin([1u128, 2].into_iter());
        let b = r.pin([2u128].into_iter());
        assert!(r.any_pinned(&[2]));
        drop(a);
        assert!(!r.any_pinned(&[1]) && r.any_pinned(&[2]));
        let waiter = tokio::spawn({
            let r = r.clone();
            async move { r.wait_unpinned(&[2], Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished());
        drop(b);
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
