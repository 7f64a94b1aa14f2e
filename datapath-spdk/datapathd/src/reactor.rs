//! Poll-mode reactors: each owns some drives' chunk stores, outright.
//!
//! A reactor's loop: drain the mailbox (every message that arrived since the last
//! turn) into its queue, run the small work that may run now, start the large
//! work of every drive that has none in flight, move the turns in flight on as
//! their I/O completes, check drive health every 500 ms, and then either spin
//! (work just happened, or `--poll spin`), nap briefly (I/O in flight), or sleep
//! on the mailbox with a timeout, so an idle daemon costs ~0% CPU. No locks are
//! shared between reactors; the mailbox is the only way in.
//!
//! Small before large, and beside it: a turn of large work (one tenant's
//! stripes, a megabyte or more per drive, written and flushed) takes
//! milliseconds on the device. It is left in flight (split phase, `turn.rs`),
//! and small work runs meanwhile: at once on the other drives, and on the
//! drive itself when it only reads chunks the turn does not write. Small work
//! that writes waits for the drive's turn to end (one write in flight per
//! drive's log), and so does anything queued after it on the same chunk.

use crate::drive::{Drive, Unopened};
use crate::{Config, DatapathError, PollMode, Result};
use cairn_blockdev::BlockDevice;
use cairn_chunkproto::{Failure, FailureCode, ReactorLoad, Request, Response};
use cairn_chunkstore::ChunkStore;
use cairn_types::{ChunkId, DriveIndex};
use std::collections::{BTreeMap, HashSet};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a reactor keeps spinning after its last piece of work.
const IDLE_SPIN: Duration = Duration::from_micros(200);
/// Longest sleep: bounds the delay of health checks.
const IDLE_SLEEP: Duration = Duration::from_millis(100);
const HEALTH_EVERY: Duration = Duration::from_millis(500);
/// A message moving at least this many bytes (written, or read as the index
/// knows them) is large work: it is started after every drive's small work and
/// left in flight. A stripe's fragment (1 MiB by default) is large; a small
/// object's copy, a KV value of a few pages, metadata calls are small.
const LARGE_WORK: u64 = 256 << 10;
/// How long a reactor with I/O in flight and nothing else to do sleeps on its
/// mailbox before it looks at the drives' completions again.
const IN_FLIGHT_NAP: Duration = Duration::from_micros(50);

/// One message's operations and where their answers go.
pub(crate) type Work = (Vec<Request>, oneshot::Sender<Vec<Response>>);

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
                turn: None,
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
                turn: None,
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

/// Work waiting for its turn, small and large apart (see the module's doc).
#[derive(Default)]
struct Queue {
    small: BTreeMap<DriveIndex, Vec<Work>>,
    large: BTreeMap<DriveIndex, Vec<Work>>,
}

impl Queue {
    fn is_empty(&self) -> bool {
        self.small.is_empty() && self.large.is_empty()
    }

    /// Queues one message. Small work that names a chunk already in the
    /// drive's queued large work (or lists the drive's chunks) goes behind it:
    /// a message never overtakes an earlier one on what they both touch.
    fn push(&mut self, drive: Option<&Drive>, drive_index: DriveIndex, work: Work) {
        let bytes: u64 = work
            .0
            .iter()
            .map(|op| match op {
                Request::Put { payload, .. } => payload.len() as u64,
                Request::Get { id, tenant, .. } => drive.map_or(0, |d| d.chunk_len(*id, *tenant)),
                _ => 0,
            })
            .sum();
        let behind_large = self.large.get(&drive_index).is_some_and(|queued| {
            work.0.iter().any(|op| match chunk_of(op) {
                Some(id) => queued
                    .iter()
                    .any(|(ops, _)| ops.iter().any(|q| chunk_of(q) == Some(id))),
                // Lists see the whole drive.
                None => matches!(op, Request::List { .. } | Request::ListVersions { .. }),
            })
        });
        let class = if bytes >= LARGE_WORK || behind_large {
            &mut self.large
        } else {
            &mut self.small
        };
        class.entry(drive_index).or_default().push(work);
    }

    /// The small work that may run now. On a drive with a turn in flight
    /// (`busy` holds the chunks it writes) that is a message that only reads,
    /// and reads nothing the turn writes or a message held before it writes;
    /// the rest stays queued, in order, until the turn ends.
    fn take_small(
        &mut self,
        busy: &BTreeMap<DriveIndex, &HashSet<ChunkId>>,
    ) -> BTreeMap<DriveIndex, Vec<Work>> {
        let mut run = std::mem::take(&mut self.small);
        for (d, writes) in busy {
            let Some(queued) = run.remove(d) else {
                continue;
            };
            let mut now = Vec::new();
            let mut held = Vec::new();
            let mut held_writes: HashSet<ChunkId> = HashSet::new();
            for w in queued {
                let may_run = w.0.iter().all(|op| match op {
                    Request::Get { id, .. } | Request::Stat { id, .. } => {
                        !writes.contains(id) && !held_writes.contains(id)
                    }
                    Request::DriveInfo { .. } | Request::DriveDetails { .. } => true,
                    _ => false,
                });
                if may_run {
                    now.push(w);
                } else {
                    held_writes.extend(w.0.iter().filter_map(chunk_of));
                    held.push(w);
                }
            }
            if !now.is_empty() {
                run.insert(*d, now);
            }
            if !held.is_empty() {
                self.small.insert(*d, held);
            }
        }
        run
    }

    /// The large work of every drive `idle` says has no turn in flight.
    fn take_large(&mut self, idle: impl Fn(DriveIndex) -> bool) -> Vec<(DriveIndex, Vec<Work>)> {
        let ready: Vec<DriveIndex> = self.large.keys().copied().filter(|d| idle(*d)).collect();
        ready
            .into_iter()
            .filter_map(|d| self.large.remove(&d).map(|w| (d, w)))
            .collect()
    }
}

fn chunk_of(op: &Request) -> Option<ChunkId> {
    match op {
        Request::Put { id, .. }
        | Request::Get { id, .. }
        | Request::Delete { id, .. }
        | Request::Stat { id, .. }
        | Request::DeleteVersion { id, .. } => Some(*id),
        Request::List { .. }
        | Request::ListVersions { .. }
        | Request::DriveInfo { .. }
        | Request::DriveDetails { .. } => None,
    }
}

/// Runs one drive's queued messages (small work) or starts them (large work,
/// left in flight), or answers them as misrouted.
fn run_on(
    drives: &mut BTreeMap<DriveIndex, Drive>,
    d: DriveIndex,
    batches: Vec<Work>,
    large: bool,
    load: &ReactorLoad,
) {
    match drives.get_mut(&d) {
        Some(drive) if large => drive.begin(batches, load),
        Some(drive) => drive.run(batches, load),
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

fn reactor_loop(r: usize, drives: Vec<Drive>, rx: mpsc::Receiver<Msg>, mode: PollMode) {
    let mut drives: BTreeMap<DriveIndex, Drive> =
        drives.into_iter().map(|d| (d.index, d)).collect();
    tracing::info!(reactor = r, drives = ?drives.keys().collect::<Vec<_>>(), ?mode, "reactor running");
    let mut last_work = Instant::now();
    let mut last_health = Instant::now();
    let mut stopping = false;
    let mut queue = Queue::default();
    let mut load = ReactorLoad {
        reactor: r as u64,
        ..ReactorLoad::default()
    };
    let mut arrived: Vec<Msg> = Vec::new();
    loop {
        // Drain the mailbox into the queue.
        loop {
            match rx.try_recv() {
                Ok(m) => arrived.push(m),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    stopping = true;
                    break;
                }
            }
        }
        if !arrived.is_empty() {
            load.queue_depth = arrived.len() as u64;
        }
        for m in arrived.drain(..) {
            match m {
                Msg::Batch { drive, ops, reply } => {
                    load.batches += 1;
                    load.ops += ops.len() as u64;
                    queue.push(drives.get(&drive), drive, (ops, reply));
                }
                Msg::Shutdown => stopping = true,
            }
        }
        let turn_started = Instant::now();
        // Small work that may run now, then large work started on every drive
        // with none in flight, then the turns in flight moved on.
        let busy: BTreeMap<DriveIndex, &HashSet<ChunkId>> = drives
            .iter()
            .filter_map(|(d, drive)| drive.turn.as_ref().map(|t| (*d, &t.writes)))
            .collect();
        let small = queue.take_small(&busy);
        let mut ran = !small.is_empty();
        if ran {
            load.turns += 1;
        }
        for (d, batches) in small {
            run_on(&mut drives, d, batches, false, &load);
        }
        // Small work held behind a turn goes first: no new large work starts
        // on this reactor's drives until it has run.
        let large = if queue.small.is_empty() {
            queue.take_large(|d| drives.get(&d).is_none_or(|x| x.turn.is_none()))
        } else {
            Vec::new()
        };
        ran |= !large.is_empty();
        for (d, batches) in large {
            load.turns += 1;
            run_on(&mut drives, d, batches, true, &load);
        }
        let mut in_flight = false;
        for d in drives.values_mut().filter(|d| d.turn.is_some()) {
            d.progress(&load);
            match d.turn {
                Some(_) => in_flight = true,
                None => ran = true,
            }
        }
        if ran {
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
        if ran {
            load.busy_ns += turn_started.elapsed().as_nanos() as u64;
        }
        // Shutting down finishes the queued work first.
        if stopping && queue.is_empty() && !in_flight {
            break;
        }
        if ran || mode == PollMode::Spin || last_work.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
            continue;
        }
        if in_flight || !queue.is_empty() {
            // The device is working: wake for a message at once, or soon to
            // look at completions.
            match rx.recv_timeout(IN_FLIGHT_NAP) {
                Ok(m) => arrived.push(m),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => stopping = true,
            }
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
            Ok(m) => arrived.push(m),
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn put(drive: DriveIndex, id: u8, len: usize) -> Request {
        Request::Put {
            drive,
            id: ChunkId([id; 16]),
            tenant: 1,
            key_id: 0,
            payload: Bytes::from(vec![0; len]),
            durable: true,
        }
    }

    fn work(ops: Vec<Request>) -> Work {
        (ops, oneshot::channel().0)
    }

    /// The first op's chunk byte of each queued message, in order.
    fn ids(batches: &[Work]) -> Vec<u8> {
        batches
            .iter()
            .map(|(ops, _)| chunk_of(&ops[0]).map_or(0, |c| c.0[0]))
            .collect()
    }

    #[test]
    fn small_work_runs_first_and_large_one_drive_at_a_time() {
        let mut q = Queue::default();
        q.push(None, 0, work(vec![put(0, 1, 1 << 20)]));
        q.push(None, 1, work(vec![put(1, 2, 1 << 20)]));
        q.push(None, 0, work(vec![put(0, 3, 4096)]));
        q.push(None, 1, work(vec![put(1, 4, 4096), put(1, 5, 4096)]));
        // Many small puts in one message add up to large work.
        q.push(
            None,
            2,
            work((0..64).map(|i| put(2, 10 + i, 4096)).collect()),
        );
        let small = q.take_small(&BTreeMap::new());
        assert_eq!(small.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(ids(&small[&0]), vec![3]);
        assert_eq!(ids(&small[&1]), vec![4]);
        assert!(q.take_small(&BTreeMap::new()).is_empty());
        // Large work starts on every drive without a turn in flight.
        let large = q.take_large(|d| d != 1);
        assert_eq!(
            large.iter().map(|(d, w)| (*d, ids(w))).collect::<Vec<_>>(),
            vec![(0, vec![1]), (2, vec![10])]
        );
        q.push(None, 0, work(vec![put(0, 6, 1 << 20)]));
        let large = q.take_large(|_| true);
        assert_eq!(
            large.iter().map(|(d, _)| *d).collect::<Vec<_>>(),
            vec![0, 1],
            "drive 1's work waited for its turn to end"
        );
        assert!(q.take_large(|_| true).is_empty());
        assert!(q.is_empty());
    }

    fn get(drive: DriveIndex, id: u8) -> Request {
        Request::Get {
            drive,
            id: ChunkId([id; 16]),
            tenant: 1,
        }
    }

    #[test]
    fn beside_a_turn_in_flight_only_reads_of_what_it_does_not_write_run() {
        let mut q = Queue::default();
        // Drive 0's turn in flight writes chunk 1.
        let turn_writes: HashSet<ChunkId> = [ChunkId([1; 16])].into_iter().collect();
        let busy: BTreeMap<DriveIndex, &HashSet<ChunkId>> = [(0, &turn_writes)].into();
        q.push(None, 0, work(vec![get(0, 2)]));
        q.push(None, 0, work(vec![get(0, 1)])); // reads what the turn writes
        q.push(None, 0, work(vec![put(0, 3, 4096)])); // a write: one in flight per log
        q.push(None, 0, work(vec![get(0, 3)])); // behind the held write of 3
        q.push(None, 0, work(vec![get(0, 4), get(0, 5)]));
        q.push(None, 1, work(vec![put(1, 1, 4096)])); // another drive: not held
        let now = q.take_small(&busy);
        assert_eq!(ids(&now[&0]), vec![2, 4]);
        assert_eq!(ids(&now[&1]), vec![1]);
        // The held ones wait, in order, and run once the turn has ended.
        assert!(q.take_small(&busy).is_empty());
        let later = q.take_small(&BTreeMap::new());
        assert_eq!(ids(&later[&0]), vec![1, 3, 3]);
        assert!(q.is_empty());
    }

    #[test]
    fn small_work_on_a_chunk_in_queued_large_work_stays_behind_it() {
        let mut q = Queue::default();
        q.push(None, 0, work(vec![put(0, 1, 1 << 20)]));
        // A delete of the chunk being written, and a list of the drive, wait
        // for the write; work on other chunks or drives does not.
        q.push(
            None,
            0,
            work(vec![Request::Delete {
                drive: 0,
                id: ChunkId([1; 16]),
                tenant: 1,
            }]),
        );
        q.push(
            None,
            0,
            work(vec![Request::List {
                drive: 0,
                after: ChunkId::MIN,
                limit: 10,
            }]),
        );
        q.push(None, 0, work(vec![put(0, 2, 4096)]));
        q.push(
            None,
            1,
            work(vec![Request::List {
                drive: 1,
                after: ChunkId::MIN,
                limit: 10,
            }]),
        );
        let small = q.take_small(&BTreeMap::new());
        assert_eq!(ids(&small[&0]), vec![2]);
        assert_eq!(small[&1].len(), 1);
        let (_, large) = q.take_large(|_| true).remove(0);
        assert_eq!(
            ids(&large),
            vec![1, 1, 0],
            "the write, then the delete and the list, in order"
        );
    }
}
