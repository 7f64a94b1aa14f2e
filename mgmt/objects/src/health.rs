//! What mgmtd believes about each drive's health, refreshed from the datapath.
//!
//! Placement consults it so new stripes avoid failed drives, and reads consult it so
//! a fragment on a failed drive is treated as missing at once instead of costing a
//! round trip. It is advisory: the datapath is the authority, and any operation that
//! comes back `DriveFailed` updates it immediately.

use cairn_chunkproto::{ChunkClient, DriveReport, DriveState, Reply, Request};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Health of the node's drives.
#[derive(Debug)]
pub struct DriveHealth {
    healthy: Vec<AtomicBool>,
}

impl DriveHealth {
    pub fn new(drives: u16) -> DriveHealth {
        DriveHealth {
            healthy: (0..drives).map(|_| AtomicBool::new(true)).collect(),
        }
    }

    /// Which drives are healthy, by index.
    pub fn snapshot(&self) -> Vec<bool> {
        self.healthy
            .iter()
            .map(|h| h.load(Ordering::Relaxed))
            .collect()
    }

    pub fn is_healthy(&self, drive: u16) -> bool {
        self.healthy
            .get(drive as usize)
            .is_some_and(|h| h.load(Ordering::Relaxed))
    }

    pub fn mark_failed(&self, drive: u16) {
        if let Some(h) = self.healthy.get(drive as usize) {
            if h.swap(false, Ordering::Relaxed) {
                tracing::warn!(drive, "drive marked failed");
            }
        }
    }

    pub fn update(&self, reports: &[DriveReport]) {
        for r in reports {
            if let Some(h) = self.healthy.get(r.drive as usize) {
                let ok = r.state == DriveState::Healthy;
                if h.swap(ok, Ordering::Relaxed) != ok {
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

pub(crate) fn spawn_poller(health: std::sync::Arc<DriveHealth>, chunks: ChunkClient) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let ops = (0..health.healthy.len() as u16)
                .map(|drive| Request::DriveInfo { drive })
                .collect();
            if let Ok(res) = chunks.call(ops).await {
                let reports: Vec<_> = res
                    .into_iter()
                    .filter_map(|r| match r {
                        Ok(Reply::DriveInfo(d)) => Some(d),
                        _ => None,
                    })
                    .collect();
                health.update(&reports);
            }
        }
    });
}
