//! Poll-mode reactors: each owns some drives' chunk stores, outright.
//!
//! A reactor's loop: drain the mailbox (every message that arrived since the last
//! turn), run all writes per drive as one group commit and the reads of the turn
//! together, answer, check drive health every 500 ms, and then either spin (work
//! just happened, or `--poll spin`) or sleep on the mailbox with a timeout, so an
//! idle daemon costs ~0% CPU. No locks are shared between reactors; the mailbox is
//! the only way in.

use crate::{Config, DatapathError, PollMode, Result};
use cairn_blockdev::BlockDevice;
use cairn_chunkproto::{
    DriveReport, DriveSpace, DriveState, Failure, FailureCode, ReactorLoad, Reply, Request,
    Response, LAZY_FLUSH,
};
use cairn_chunkstore::{ChunkStore, StoreError, WriteOp, WriteOutcome};
use cairn_types::DriveIndex;
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a reactor keeps spinning after its last piece of work.
const IDLE_SPIN: Duration = Duration::from_micros(200);
/// Longest sleep: bounds the delay of health checks.
const IDLE_SLEEP: Duration = Duration::from_millis(100);
const HEALTH_EVERY: Duration = Duration::from_millis(500);
/// Most ids one List answers (keeps a response well under the frame limit).
const MAX_LIST: usize = 65_536;

/// One message's operations and where their answers go.
type Work = (Vec<Request>, oneshot::Sender<Vec<Response>>);

/// A message to a reactor.
pub enum Msg {
    /// Operations on one drive owned by the reactor; answered in order.
    Batch {
        drive: DriveIndex,
        ops: Vec<Request>,
        reply: oneshot::Sender<Vec<Response>>,
    },
    /// Finish queued work, close the stores, stop.
    Shutdown,
}

/// Where each drive lives; cheap to clone into connection tasks.
#[derive(Clone)]
pub struct Router {
    /// Reactor index of each drive.
    owner: Arc<Vec<usize>>,
    mailboxes: Arc<Vec<mpsc::Sender<Msg>>>,
}

impl Router {
    pub fn drives(&self) -> usize {
        self.owner.len()
    }

    /// Sends one drive's operations to its reactor.
    pub fn send(
        &self,
        drive: DriveIndex,
        ops: Vec<Request>,
    ) -> Option<oneshot::Receiver<Vec<Response>>> {
        let r = *self.owner.get(drive as usize)?;
        let (tx, rx) = oneshot::channel();
        self.mailboxes[r]
            .send(Msg::Batch {
                drive,
                ops,
                reply: tx,
            })
            .ok()?;
        Some(rx)
    }
}

/// The running reactors.
pub struct Reactors {
    router: Router,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Reactors {
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// Stops every reactor after the work already queued, and waits for them.
    pub fn shutdown(self) {
        for m in self.router.mailboxes.iter() {
            let _ = m.send(Msg::Shutdown);
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A drive as datapathd opened it: ready, or failed at open (damaged superblock,
/// device gone) and served as failed so the other drives carry on.
pub enum DriveSlot {
    Ready(Arc<dyn BlockDevice>, Box<ChunkStore>),
    Failed {
        name: String,
        backend: &'static str,
        location: String,
        why: String,
    },
}

/// Where a drive failed at open is, for its reports.
struct Unopened {
    name: String,
    backend: &'static str,
    location: String,
}

struct Drive {
    index: DriveIndex,
    /// `None` for a drive that failed at open (then `failed` says why).
    open: Option<(Arc<dyn BlockDevice>, ChunkStore)>,
    unopened: Option<Unopened>,
    failed: Option<String>,
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
    fn flush_write_back(&mut self) {
        if self.failed.is_some() {
            return;
        }
        if let Some((_, store)) = &mut self.open {
            if let Err(e) = store.flush_older_than(LAZY_FLUSH) {
                self.mark_failed(format!("flushing write-back data: {e}"));
            }
        }
    }

    fn check_health(&mut self) {
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
    fn run(&mut self, batches: Vec<Work>, load: &ReactorLoad) {
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

/// Starts the reactors and deals the drives to them.
pub fn start(drives: Vec<DriveSlot>, cfg: &Config) -> Result<Reactors> {
    let n = cfg.reactors.max(1);
    if let Some(cores) = &cfg.cores {
        if cores.0.len() < n {
            return Err(DatapathError::Config(format!(
                "--cores lists {} cores for {n} reactors",
                cores.0.len()
            )));
        }
    }
    let mut per: Vec<Vec<Drive>> = (0..n).map(|_| Vec::new()).collect();
    let mut owner = Vec::new();
    for (i, slot) in drives.into_iter().enumerate() {
        owner.push(i % n);
        let index = i as DriveIndex;
        per[i % n].push(match slot {
            DriveSlot::Ready(dev, store) => Drive {
                index,
                open: Some((dev, *store)),
                unopened: None,
                failed: None,
            },
            DriveSlot::Failed {
                name,
                backend,
                location,
                why,
            } => Drive {
                index,
                open: None,
                unopened: Some(Unopened {
                    name,
                    backend,
                    location,
                }),
                failed: Some(why),
            },
        });
    }
    let mut mailboxes = Vec::new();
    let mut threads = Vec::new();
    for (r, drives) in per.into_iter().enumerate() {
        let (tx, rx) = mpsc::channel();
        mailboxes.push(tx);
        let core = cfg.cores.as_ref().map(|c| c.0[r]);
        let mode = cfg.poll;
        let t = std::thread::Builder::new()
            .name(format!("reactor-{r}"))
            .spawn(move || {
                if let Some(c) = core {
                    match crate::sys::pin_to_core(c) {
                        Ok(()) => tracing::info!(reactor = r, core = c, "pinned"),
                        Err(e) => tracing::warn!(reactor = r, core = c, "cannot pin: {e}"),
                    }
                }
                reactor_loop(r, drives, rx, mode)
            })?;
        threads.push(t);
    }
    Ok(Reactors {
        router: Router {
            owner: Arc::new(owner),
            mailboxes: Arc::new(mailboxes),
        },
        threads,
    })
}

fn reactor_loop(r: usize, drives: Vec<Drive>, rx: mpsc::Receiver<Msg>, mode: PollMode) {
    let mut drives: BTreeMap<DriveIndex, Drive> =
        drives.into_iter().map(|d| (d.index, d)).collect();
    tracing::info!(reactor = r, drives = ?drives.keys().collect::<Vec<_>>(), ?mode, "reactor running");
    let mut last_work = Instant::now();
    let mut last_health = Instant::now();
    let mut stopping = false;
    let mut pending: Vec<Msg> = Vec::new();
    let mut load = ReactorLoad {
        reactor: r as u64,
        ..ReactorLoad::default()
    };
    loop {
        // Drain the mailbox: everything that arrived is one turn (one group commit
        // per drive).
        loop {
            match rx.try_recv() {
                Ok(m) => pending.push(m),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    stopping = true;
                    break;
                }
            }
        }
        let busy = !pending.is_empty();
        let turn_started = Instant::now();
        if busy {
            load.turns += 1;
            load.queue_depth = pending.len() as u64;
            load.batches += pending.len() as u64;
            load.ops += pending
                .iter()
                .map(|m| match m {
                    Msg::Batch { ops, .. } => ops.len() as u64,
                    Msg::Shutdown => 0,
                })
                .sum::<u64>();
            let mut by_drive: BTreeMap<DriveIndex, Vec<Work>> = BTreeMap::new();
            for m in pending.drain(..) {
                match m {
                    Msg::Batch { drive, ops, reply } => {
                        by_drive.entry(drive).or_default().push((ops, reply))
                    }
                    Msg::Shutdown => stopping = true,
                }
            }
            for (d, batches) in by_drive {
                match drives.get_mut(&d) {
                    Some(drive) => drive.run(batches, &load),
                    None => {
                        for (ops, reply) in batches {
                            let _ = reply.send(
                                ops.iter()
                                    .map(|_| {
                                        Err(Failure::new(
                                            FailureCode::BadRequest,
                                            format!("drive {d} is not on this reactor"),
                                        ))
                                    })
                                    .collect(),
                            );
                        }
                    }
                }
            }
            last_work = Instant::now();
        }
        // Write-back records reach stable media within about LAZY_FLUSH (this
        // runs every turn, and an idle reactor wakes at least every IDLE_SLEEP).
        for d in drives.values_mut() {
            d.flush_write_back();
        }
        if last_health.elapsed() >= HEALTH_EVERY {
            for d in drives.values_mut() {
                d.check_health();
            }
            last_health = Instant::now();
        }
        if busy {
            load.busy_ns += turn_started.elapsed().as_nanos() as u64;
        }
        if stopping {
            break;
        }
        if busy || mode == PollMode::Spin || last_work.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
            continue;
        }
        // Idle: background compaction first, then sleep until a message or timeout.
        let compaction_started = Instant::now();
        let mut compacted = false;
        for d in drives.values_mut() {
            if let (None, Some((_, store))) = (&d.failed, &mut d.open) {
                match store.maybe_compact() {
                    Ok(n) if n > 0 => compacted = true,
                    Ok(_) => {}
                    Err(e) => tracing::warn!(drive = d.index, "compaction: {e}"),
                }
            }
        }
        if compacted {
            load.busy_ns += compaction_started.elapsed().as_nanos() as u64;
            continue;
        }
        match rx.recv_timeout(IDLE_SLEEP) {
            Ok(m) => pending.push(m),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => stopping = true,
        }
    }
    for (i, d) in drives {
        if let Some((_, store)) = d.open {
            if let Err(e) = store.close() {
                tracing::warn!(drive = i, "close: {e}");
            }
        }
    }
    tracing::info!(reactor = r, "reactor stopped");
}
