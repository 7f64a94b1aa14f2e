//! A drive as a reactor owns it: its chunk store, its health, and one turn's
//! operations run against it (all writes of the turn one group commit, then the
//! reads together).

use cairn_blockdev::BlockDevice;
use cairn_chunkproto::{
    DriveReport, DriveSpace, DriveState, Failure, FailureCode, ReactorLoad, Reply, Request,
    Response, LAZY_FLUSH,
};
use cairn_chunkstore::{ChunkStore, StoreError, WriteOp, WriteOutcome};
use cairn_types::DriveIndex;
use std::sync::Arc;

use crate::reactor::Work;

/// Most ids one List answers (keeps a response well under the frame limit).
const MAX_LIST: usize = 65_536;

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
}

impl Drive {
    fn mark_failed(&mut self, why: String) {
        if self.failed.is_none() {
            tracing::error!(drive = self.index, "drive failed: {why}");
            self.failed = Some(why);
        }
    }

    fn report(&self, load: &ReactorLoad) -> DriveReport {
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
    fn failure(&mut self, e: StoreError) -> Failure {
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

    fn failed_response(&self) -> Failure {
        Failure::new(
            FailureCode::DriveFailed,
            format!(
                "drive {} failed: {}",
                self.index,
                self.failed.as_deref().unwrap_or("")
            ),
        )
    }

    /// Runs one turn's operations for this drive: `batches` are the messages, each
    /// answered in its own order. All writes of the turn are one group commit.
    pub(crate) fn run(&mut self, batches: Vec<Work>, load: &ReactorLoad) {
        let mut results: Vec<Vec<Option<Response>>> = batches
            .iter()
            .map(|(ops, _)| (0..ops.len()).map(|_| None).collect())
            .collect();
        self.check_health_if_unhealthy_store();
        // Writes first, all messages together.
        let mut wpos = Vec::new();
        let mut writes = Vec::new();
        for (b, (ops, _)) in batches.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                match op {
                    Request::Put {
                        id,
                        tenant,
                        key_id,
                        payload,
                        durable,
                        ..
                    } => {
                        wpos.push((b, i));
                        writes.push(WriteOp::Put {
                            id: *id,
                            tenant: *tenant,
                            key_id: *key_id,
                            payload: payload.as_ref(),
                            durable: *durable,
                        });
                    }
                    Request::Delete { id, tenant, .. } => {
                        wpos.push((b, i));
                        writes.push(WriteOp::Delete {
                            id: *id,
                            tenant: *tenant,
                        });
                    }
                    Request::DeleteVersion {
                        id, tenant, seq, ..
                    } => {
                        wpos.push((b, i));
                        writes.push(WriteOp::DeleteVersion {
                            id: *id,
                            tenant: *tenant,
                            seq: *seq,
                        });
                    }
                    _ => {}
                }
            }
        }
        if !writes.is_empty() {
            if let (None, Some((_, store))) = (&self.failed, &mut self.open) {
                let out = store.write_batch(&writes);
                for ((&(b, i), r), w) in wpos.iter().zip(out).zip(&writes) {
                    let versioned = matches!(w, WriteOp::DeleteVersion { .. });
                    results[b][i] = Some(match r {
                        Ok(WriteOutcome::Put) => Ok(Reply::Put),
                        Ok(WriteOutcome::Delete { existed }) if versioned => {
                            Ok(Reply::DeleteVersion { deleted: existed })
                        }
                        Ok(WriteOutcome::Delete { existed }) => Ok(Reply::Delete { existed }),
                        Err(e) => Err(self.failure(e)),
                    });
                }
            } else {
                for &(b, i) in &wpos {
                    results[b][i] = Some(Err(self.failed_response()));
                }
            }
        }
        drop(writes);
        // Reads: gets of the turn in flight together; the rest from the index.
        let mut gpos = Vec::new();
        let mut gets = Vec::new();
        for (b, (ops, _)) in batches.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                let r = match op {
                    Request::Put { .. }
                    | Request::Delete { .. }
                    | Request::DeleteVersion { .. } => continue,
                    Request::DriveInfo { .. } => Ok(Reply::DriveInfo(self.report(load))),
                    Request::DriveDetails { .. } => Ok(Reply::DriveDetails(self.report(load))),
                    _ if self.failed.is_some() || self.open.is_none() => {
                        Err(self.failed_response())
                    }
                    Request::Get { id, tenant, .. } => {
                        gpos.push((b, i));
                        gets.push((*id, *tenant));
                        continue;
                    }
                    Request::Stat { id, tenant, .. } => match self.store().stat(*id, *tenant) {
                        Ok((len, crc32c)) => Ok(Reply::Stat { len, crc32c }),
                        Err(e) => Err(self.failure(e)),
                    },
                    Request::List { after, limit, .. } => {
                        match self.store().list(*after, (*limit as usize).min(MAX_LIST)) {
                            Ok(chunks) => Ok(Reply::List { chunks }),
                            Err(e) => Err(self.failure(e)),
                        }
                    }
                    Request::ListVersions { after, limit, .. } => match self
                        .store()
                        .list_versions(*after, (*limit as usize).min(MAX_LIST))
                    {
                        Ok(chunks) => Ok(Reply::ListVersions { chunks }),
                        Err(e) => Err(self.failure(e)),
                    },
                };
                results[b][i] = Some(r);
            }
        }
        if let (false, Some((_, store))) = (gets.is_empty(), &mut self.open) {
            let out = store.get_many(&gets);
            for (&(b, i), r) in gpos.iter().zip(out) {
                results[b][i] = Some(match r {
                    Ok(payload) => Ok(Reply::Get { payload }),
                    Err(e) => Err(self.failure(e)),
                });
            }
        }
        for ((_, reply), res) in batches.into_iter().zip(results) {
            let res = res
                .into_iter()
                .map(|r| {
                    r.unwrap_or_else(|| {
                        Err(Failure::new(FailureCode::Io, "operation not executed"))
                    })
                })
                .collect();
            // The connection may be gone; its answers are simply dropped.
            let _ = reply.send(res);
        }
        self.check_health_if_unhealthy_store();
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
    fn store(&self) -> &ChunkStore {
        match &self.open {
            Some((_, s)) => s,
            None => unreachable!("a drive that failed at open is marked failed"),
        }
    }

    fn check_health_if_unhealthy_store(&mut self) {
        if self.failed.is_none() {
            if let Some(why) = self.open.as_ref().and_then(|(_, s)| s.failed()) {
                let why = why.to_string();
                self.mark_failed(why);
            }
        }
    }
}
