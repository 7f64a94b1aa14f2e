//! Poll-mode reactors: each owns some drives' chunk stores, outright.
//!
//! A reactor's loop: drain the mailbox (every message that arrived since the last
//! turn) into its queue, run the queued small work of every drive and then one
//! drive's large work (per drive, all writes one group commit, then the reads
//! together), answer, check drive health every 500 ms, and then either spin (work
//! just happened, or `--poll spin`) or sleep on the mailbox with a timeout, so an
//! idle daemon costs ~0% CPU. No locks are shared between reactors; the mailbox is
//! the only way in.
//!
//! Small before large: a reactor runs its drives one after another, and a turn
//! holding one tenant's stripes (a megabyte or more per drive, written and
//! flushed) takes tens of milliseconds. A 4 KiB request that arrived during it
//! used to wait for the whole turn and then for the large work queued beside it
//! in the next. Now it waits for at most one drive's large group.

use crate::drive::{Drive, Unopened};
use crate::{Config, DatapathError, PollMode, Result};
use cairn_blockdev::BlockDevice;
use cairn_chunkproto::{Failure, FailureCode, ReactorLoad, Request, Response};
use cairn_chunkstore::ChunkStore;
use cairn_types::{ChunkId, DriveIndex};
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
/// A message moving at least this many bytes (written, or read as the index
/// knows them) is large work: it runs after every drive's small work, one
/// drive at a time. A stripe's fragment (1 MiB by default) is large; a small
/// object's copy, a KV value of a few pages, metadata calls are small.
const LARGE_WORK: u64 = 256 << 10;

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

/// Work waiting for its turn, small and large apart (see the module's doc).
#[derive(Default)]
struct Queue {
    small: BTreeMap<DriveIndex, Vec<Work>>,
    large: BTreeMap<DriveIndex, Vec<Work>>,
    /// The drive whose large work ran last: the next large group is the next
    /// drive's, round robin, so one drive's stream cannot hold up another's.
    last_large: Option<DriveIndex>,
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

    fn take_small(&mut self) -> BTreeMap<DriveIndex, Vec<Work>> {
        std::mem::take(&mut self.small)
    }

    /// The next drive's large work, round robin from the last one served.
    fn take_large(&mut self) -> Option<(DriveIndex, Vec<Work>)> {
        let next = match self.last_large {
            Some(last) => self
                .large
                .range(last + 1..)
                .next()
                .or_else(|| self.large.iter().next()),
            None => self.large.iter().next(),
        }
        .map(|(d, _)| *d)?;
        self.last_large = Some(next);
        self.large.remove(&next).map(|w| (next, w))
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

/// Runs one drive's queued messages, or answers them as misrouted.
fn run_on(
    drives: &mut BTreeMap<DriveIndex, Drive>,
    d: DriveIndex,
    batches: Vec<Work>,
    load: &ReactorLoad,
) {
    match drives.get_mut(&d) {
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
        let busy = !queue.is_empty();
        let turn_started = Instant::now();
        if busy {
            load.turns += 1;
            // Every drive's small work (per drive one group commit), then one
            // drive's large work; what arrives meanwhile is queued next turn.
            for (d, batches) in queue.take_small() {
                run_on(&mut drives, d, batches, &load);
            }
            if let Some((d, batches)) = queue.take_large() {
                run_on(&mut drives, d, batches, &load);
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
        // Shutting down finishes the queued work first.
        if stopping && queue.is_empty() {
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
        let small = q.take_small();
        assert_eq!(small.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(ids(&small[&0]), vec![3]);
        assert_eq!(ids(&small[&1]), vec![4]);
        assert!(q.take_small().is_empty());
        // Large work, round robin over the drives.
        let (d, w) = q.take_large().unwrap();
        assert_eq!((d, ids(&w)), (0, vec![1]));
        q.push(None, 0, work(vec![put(0, 6, 1 << 20)]));
        assert_eq!(q.take_large().unwrap().0, 1);
        assert_eq!(q.take_large().unwrap().0, 2);
        assert_eq!(q.take_large().unwrap().0, 0, "back to the first drive");
        assert!(q.take_large().is_none());
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
        let small = q.take_small();
        assert_eq!(ids(&small[&0]), vec![2]);
        assert_eq!(small[&1].len(), 1);
        let (_, large) = q.take_large().unwrap();
        assert_eq!(
            ids(&large),
            vec![1, 1, 0],
            "the write, then the delete and the list, in order"
        );
    }
}
