//! A drive as a reactor owns it: its chunk store, its health, and one turn's
//! operations run against it (all writes of the turn one group commit, then the
//! reads together).

use cairn_blockdev::BlockDevice;
use cairn_chunkproto::{
    DriveReport, DriveSpace, DriveState, Failure, FailureCode, ReactorLoad, LAZY_FLUSH,
};
use cairn_chunkstore::{ChunkStore, StoreError};
use cairn_types::DriveIndex;
use std::sync::Arc;

/// Where a drive failed at open is, for its reports.
pub(crate) struct Unopened {
    pub(crate) name: String,
    pub(crate) backend: &'static str,
    pub(crate) location: String,
}

pub(crate) struct Drive {
    pub(crate) index: DriveIndex,
    /// `None` for a drive that failed at open (then `failed` says why).
    pub(crate) open: Option<(Arc<dyn BlockDevice>, ChunkStore)>,
    pub(crate) unopened: Option<Unopened>,
    pub(crate) failed: Option<String>,
    /// Large work in flight on the drive (see `turn.rs`).
    pub(crate) turn: Option<crate::turn::Turn>,
}

impl Drive {
    fn mark_failed(&mut self, why: String) {
        if self.failed.is_none() {
            tracing::error!(drive = self.index, "drive failed: {why}");
            self.failed = Some(why);
        }
    }

    pub(crate) fn report(&self, load: &ReactorLoad) -> DriveReport {
        let Some((_, store)) = &self.open else {
            let u = self.unopened.as_ref();
            return DriveReport {
                drive: self.index,
                state: DriveState::Failed,
                capacity: 0,
                live_bytes: 0,
                allocated_bytes: 0,
                chunks: 0,
                reason: self.failed.clone().unwrap_or_default(),
                device: u.map(|u| u.name.clone()).unwrap_or_default(),
                backend: u.map(|u| u.backend.to_string()).unwrap_or_default(),
                location: u.map(|u| u.location.clone()).unwrap_or_default(),
                model: None,
                serial: None,
                firmware: None,
                space: None,
                reactor: Some(*load),
            };
        };
        let r = store.report();
        // The store's view of its device: read once at open, so a report never
        // touches sysfs or the controller, and a failed drive still says what it is.
        let dev = store.device();
        DriveReport {
            drive: self.index,
            state: if self.failed.is_some() {
                DriveState::Failed
            } else {
                DriveState::Healthy
            },
            capacity: r.capacity,
            live_bytes: r.live_bytes,
            allocated_bytes: r.allocated_bytes,
            chunks: r.chunks,
            reason: self.failed.clone().unwrap_or_default(),
            device: dev.name.clone(),
            backend: dev.backend.to_string(),
            location: dev.location.clone(),
            model: dev.identity.model.clone(),
            serial: dev.identity.serial.clone(),
            firmware: dev.identity.firmware.clone(),
            space: Some(DriveSpace {
                free_segments: r.free_segments,
                reserve_segments: r.reserve_segments,
                full: r.full,
                damaged_segments: r.damaged_segments_at_open,
                corrupt_batches: r.corrupt_batches_at_open,
                corrupt_records: r.corrupt_records_at_open,
                salvaged_records: r.salvaged_records_at_open,
                torn_batches: r.torn_batches_at_open,
                formatted_at_open: r.formatted_at_open,
                dropped_since_open: r.dropped_since_open,
            }),
            reactor: Some(*load),
        }
    }

    /// Flushes the drive's write-back records that have waited `LAZY_FLUSH`; a
    /// failed flush fails the drive (what it acknowledged may be lost, and reads
    /// and repair must treat its chunks as gone).
    pub(crate) fn flush_write_back(&mut self) {
        if self.failed.is_some() {
            return;
        }
        if let Some((_, store)) = &mut self.open {
            if let Err(e) = store.flush_older_than(LAZY_FLUSH) {
                self.mark_failed(format!("flushing write-back data: {e}"));
            }
        }
    }

    pub(crate) fn check_health(&mut self) {
        if self.failed.is_some() {
            return;
        }
        let Some((dev, store)) = &self.open else {
            return;
        };
        if let Err(e) = dev.check() {
            self.mark_failed(e.to_string());
        } else if let Some(why) = store.failed() {
            self.mark_failed(why.to_string());
        }
    }

    /// Maps a store error to the wire, failing the drive on I/O errors.
    pub(crate) fn failure(&mut self, e: StoreError) -> Failure {
        let code = match &e {
            StoreError::NotFound => FailureCode::NotFound,
            StoreError::Corrupt(_) => FailureCode::Corrupt,
            StoreError::NoSpace => FailureCode::NoSpace,
            StoreError::TooLarge(..) | StoreError::TenantConflict => FailureCode::BadRequest,
            StoreError::Io(_) | StoreError::Failed(_) => {
                self.mark_failed(e.to_string());
                FailureCode::DriveFailed
            }
            _ => FailureCode::Io,
        };
        Failure::new(code, e.to_string())
    }

    pub(crate) fn failed_response(&self) -> Failure {
        Failure::new(
            FailureCode::DriveFailed,
            format!(
                "drive {} failed: {}",
                self.index,
                self.failed.as_deref().unwrap_or("")
            ),
        )
    }

    /// The length of a chunk held here for `tenant` (0 if none): what a Get of
    /// it will read, known from the index without touching the drive.
    pub(crate) fn chunk_len(&self, id: cairn_types::ChunkId, tenant: cairn_types::TenantId) -> u64 {
        match (&self.failed, &self.open) {
            (None, Some((_, store))) => store.stat(id, tenant).map_or(0, |(len, _)| u64::from(len)),
            _ => 0,
        }
    }

    /// The open store; only called where `failed` is `None` (and a drive that
    /// failed at open always has `failed` set).
    pub(crate) fn store(&self) -> &ChunkStore {
        match &self.open {
            Some((_, s)) => s,
            None => unreachable!("a drive that failed at open is marked failed"),
        }
    }

    pub(crate) fn check_health_if_unhealthy_store(&mut self) {
        if self.failed.is_none() {
            if let Some(why) = self.open.as_ref().and_then(|(_, s)| s.failed()) {
                let why = why.to_string();
                self.mark_failed(why);
            }
        }
    }
}
