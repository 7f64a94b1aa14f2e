//! What mgmtd believes about each drive's health, refreshed from the datapath.
//!
//! Placement consults it so new stripes avoid failed drives, and reads consult it so
//! a fragment on a failed drive is treated as missing at once instead of costing a
//! round trip. It is advisory: the datapath is the authority, and any operation that
//! comes back `DriveFailed` updates it immediately.

use crate::Fabric;
use cairn_chunkproto::{DriveReport, DriveState, Reply, Request};
use std::sync::RwLock;
use std::time::Duration;

/// Health of the drives, by cluster-wide id. A drive not yet heard of counts as
/// healthy: the first failed operation or report marks it.
#[derive(Debug, Default)]
pub struct DriveHealth {
    healthy: RwLock<Vec<bool>>,
}

impl DriveHealth {
    pub fn new(drives: u16) -> DriveHealth {
        DriveHealth {
            healthy: RwLock::new(vec![true; drives as usize]),
        }
    }

    /// Which drives are healthy, by id (at least `len` entries).
    pub fn snapshot(&self, len: usize) -> Vec<bool> {
        let mut v = self
            .healthy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if v.len() < len {
            v.resize(len, true);
        }
        v
    }

    pub fn is_healthy(&self, drive: u16) -> bool {
        self.healthy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(drive as usize)
            .copied()
            .unwrap_or(true)
    }

    fn set(&self, drive: u16, ok: bool) -> bool {
        let mut v = self.healthy.write().unwrap_or_else(|e| e.into_inner());
        let i = drive as usize;
        if v.len() <= i {
            v.resize(i + 1, true);
        }
        std::mem::replace(&mut v[i], ok)
    }

    pub fn mark_failed(&self, drive: u16) {
        if self.set(drive, false) {
            tracing::warn!(drive, "drive marked failed");
        }
    }

    pub fn update(&self, reports: &[DriveReport]) {
        for r in reports {
            {
                let ok = r.state == DriveState::Healthy;
                if self.set(r.drive, ok) != ok {
                    if ok {
                        tracing::info!(drive = r.drive, "drive healthy");
                    } else {
                        tracing::warn!(drive = r.drive, reason = %r.reason, "drive failed");
                    }
                }
            }
        }
    }
}

/// Polls in a row a drive must be unreachable before it counts as down. A node
/// that has just joined cannot reach its peers' datapathd until they have loaded
/// its certificate (they re-read the member list every 2 s): one failed poll is
/// no evidence, and counting it would make a fresh node refuse writes. A drive
/// whose datapathd answers that it failed is marked at once.
const UNREACHABLE_POLLS: u32 = 3;

pub(crate) fn spawn_poller(health: std::sync::Arc<DriveHealth>, chunks: Fabric) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut misses: std::collections::HashMap<u16, u32> = Default::default();
        loop {
            tick.tick().await;
            let drives = chunks.drives();
            let ops = drives
                .iter()
                .map(|&drive| Request::DriveInfo { drive })
                .collect();
            if let Ok(res) = chunks.call(ops).await {
                for (drive, r) in drives.into_iter().zip(res) {
                    match r {
                        Ok(Reply::DriveInfo(d)) => {
                            misses.remove(&drive);
                            health.update(&[d]);
                        }
                        // Unreachable (its node is down) or failed: not healthy,
                        // once it has stayed so for a few polls.
                        Err(_) => {
                            let n = misses.entry(drive).or_insert(0);
                            *n += 1;
                            if *n >= UNREACHABLE_POLLS && health.set(drive, false) {
                                tracing::warn!(drive, "drive unreachable");
                            }
                        }
                        Ok(_) => {}
                    }
                }
            }
        }
    });
}
