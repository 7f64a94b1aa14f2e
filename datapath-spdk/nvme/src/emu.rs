//! An emulated NVMe controller, in-process: the same registers, queues, PRPs and
//! commands as a real one, memory-backed namespaces, and fault injection. The
//! driver runs on it unchanged (it is a [`DeviceAccess`]), so `cargo test`
//! exercises the driver's logic without a VM.
//!
//! Submissions are processed synchronously, inside the doorbell write, on the
//! caller's thread. Why: tests are deterministic (a command has run when the
//! doorbell write returns), nothing spins on a second core of a shared 2-core
//! machine, and the benchmark measures driver + device on one core. Real
//! controllers are asynchronous; the faults that need time (slow commands) are
//! modelled by holding completions and delivering them at the first register
//! access after they are due. The driver reads CSTS from its slow path while it
//! waits (to see fatal status), which is what lets time move here. Several queue
//! pairs on several threads share one controller: its state is behind one mutex,
//! as a real controller serialises its own work, and the driver's queues still
//! share nothing with each other.
//!
//! DMA goes through an emulated IOMMU: [`EmulatedController::alloc_dma`] hands
//! out IOVAs that are not host addresses, and every PRP is translated through
//! that table, so a driver that put a host pointer or a stale IOVA in a command
//! gets a Data Transfer Error, as with a real IOMMU.

#![deny(unsafe_code)]

use crate::device::DeviceAccess;
use crate::hw::{Backing, DmaRegion, WeakDmaRegion};
use crate::spec::{
    self, admin, cc, cns, csts, feature, nvm, reg, sc, Cap, Command, Completion,
    IdentifyController, IdentifyNamespace, Status, CQE_SIZE, PAGE, SQE_SIZE,
};
use crate::Result;
use cairn_blockdev::DmaDomain;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{fence, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One emulated namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmuNamespace {
    /// LBA size as a power of two: 9 (512 B) or 12 (4 KiB).
    pub lba_shift: u8,
    /// Size in logical blocks.
    pub blocks: u64,
}

impl EmuNamespace {
    /// A namespace of `bytes` (rounded down) in blocks of `1 << lba_shift`.
    pub fn bytes(lba_shift: u8, bytes: u64) -> Self {
        EmuNamespace {
            lba_shift,
            blocks: bytes >> lba_shift,
        }
    }
}

/// What the emulated controller reports and allows.
#[derive(Debug, Clone)]
pub struct EmuConfig {
    /// Identify Controller's serial number, model and firmware revision (what
    /// operators see of the drive; truncated to 20, 40 and 8 bytes).
    pub serial: String,
    pub model: String,
    pub firmware: String,
    /// Namespaces 1, 2, ... in order.
    pub namespaces: Vec<EmuNamespace>,
    /// CAP.MQES + 1.
    pub max_queue_entries: u32,
    /// Identify MDTS (0 = no limit; else 4 KiB << mdts).
    pub mdts: u8,
    /// I/O queue pairs granted at most.
    pub max_io_queues: u16,
    pub write_zeroes: bool,
    pub dataset_management: bool,
    pub volatile_write_cache: bool,
    /// CAP.TO in 500 ms units.
    pub timeout_500ms: u8,
    /// CAP.DSTRD (doorbell stride 4 << dstrd).
    pub dstrd: u8,
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            serial: "CAIRN-EMU-0".into(),
            model: "Cairn emulated NVMe".into(),
            firmware: "1.0".into(),
            namespaces: vec![EmuNamespace::bytes(12, 64 << 20)],
            max_queue_entries: 1024,
            mdts: 5,
            max_io_queues: 16,
            write_zeroes: true,
            dataset_management: true,
            volatile_write_cache: true,
            timeout_500ms: 2,
            dstrd: 0,
        }
    }
}

/// A way to break the next completion (a broken or malicious controller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// A command id the driver never used.
    UnknownCid,
    /// Another submission queue's id.
    WrongSqId,
    /// An SQ head pointer outside the ring.
    BadSqHead,
    /// The command's own id twice: the second copy is for a command not in flight.
    Duplicate,
    /// The phase tag of the previous pass: the entry looks old and is never seen.
    WrongPhase,
}

/// A fault to inject into I/O commands (admin commands are never affected, so
/// Abort keeps working). `opcode: None` matches any I/O command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next `count` matching commands execute but post no completion.
    LoseCompletion { opcode: Option<u8>, count: u32 },
    /// The next `count` matching commands fail with `status` without executing.
    FailWith {
        opcode: Option<u8>,
        status: Status,
        count: u32,
    },
    /// The next `count` matching commands execute and complete after `delay`.
    Slow {
        opcode: Option<u8>,
        delay: Duration,
        count: u32,
    },
    /// The next `count` matching commands execute and complete only when aborted
    /// or released ([`EmulatedController::release_held`]).
    Hold { opcode: Option<u8>, count: u32 },
    /// The next I/O command sets CSTS.CFS; nothing completes any more.
    FatalOnNextIo,
    /// The next matching command's completion is corrupted.
    Corrupt { opcode: Option<u8>, how: Corruption },
}

impl Fault {
    fn opcode(&self) -> Option<u8> {
        match *self {
            Fault::LoseCompletion { opcode, .. }
            | Fault::FailWith { opcode, .. }
            | Fault::Slow { opcode, .. }
            | Fault::Hold { opcode, .. }
            | Fault::Corrupt { opcode, .. } => opcode,
            Fault::FatalOnNextIo => None,
        }
    }

    /// Uses one shot; true when the rule is spent.
    fn consume(&mut self) -> bool {
        match self {
            Fault::LoseCompletion { count, .. }
            | Fault::FailWith { count, .. }
            | Fault::Slow { count, .. }
            | Fault::Hold { count, .. } => {
                *count = count.saturating_sub(1);
                *count == 0
            }
            Fault::FatalOnNextIo | Fault::Corrupt { .. } => true,
        }
    }
}

/// Counters of what the controller saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmuStats {
    pub admin_commands: u64,
    pub io_commands: u64,
    pub reads: u64,
    pub writes: u64,
    pub fua_writes: u64,
    pub flushes: u64,
    pub write_zeroes: u64,
    pub dataset_management: u64,
    pub aborts: u64,
    /// Commands whose PRP2 was a PRP list, and lists chained to a next page.
    pub prp_lists: u64,
    pub chained_prp_lists: u64,
    /// Largest data transfer of one command, in bytes.
    pub max_transfer: usize,
    /// I/O queue pairs created over the controller's life.
    pub queues_created: u64,
}

#[derive(Debug, Clone, Copy)]
struct Sq {
    base: u64,
    entries: u16,
    head: u16,
    cqid: u16,
}

#[derive(Debug, Clone, Copy)]
struct Cq {
    base: u64,
    entries: u16,
    tail: u16,
    head: u16,
    phase: bool,
}

#[derive(Debug, Clone, Copy)]
struct Post {
    cqid: u16,
    sqid: u16,
    cid: u16,
    status: Status,
    dw0: u32,
    corrupt: Option<Corruption>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    post: Post,
    /// None: until aborted or released.
    due: Option<Instant>,
}

enum Delivery {
    Now(Option<Corruption>),
    Lost,
    Held(Option<Instant>),
}

#[derive(Debug)]
struct Iommu {
    next: u64,
    map: BTreeMap<u64, (usize, WeakDmaRegion)>,
}

#[derive(Debug)]
struct Emu {
    cfg: EmuConfig,
    cap: Cap,
    cc: u32,
    csts: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    sqs: Vec<Option<Sq>>,
    cqs: Vec<Option<Cq>>,
    ns: Vec<Vec<u8>>,
    granted: u16,
    faults: Vec<Fault>,
    reverse: bool,
    held: Vec<Held>,
    overflow: VecDeque<Post>,
    fatal: bool,
    quiesced: bool,
    removed: bool,
    stats: EmuStats,
}

/// The emulated controller. Share it as `Arc<EmulatedController>`: the driver gets
/// it as its [`DeviceAccess`], the test keeps it to inject faults and look at the
/// namespaces.
#[derive(Debug)]
pub struct EmulatedController {
    name: String,
    domain: DmaDomain,
    bar_len: usize,
    state: Mutex<Emu>,
    iommu: Mutex<Iommu>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmulatedController {
    /// A controller, disabled (as after power-on), with zeroed namespaces.
    pub fn new(cfg: EmuConfig) -> Self {
        let queues = cfg.max_io_queues.max(1);
        let stride = 4usize << cfg.dstrd;
        let bar_len = (reg::DOORBELLS + 2 * stride * (queues as usize + 1)).next_multiple_of(PAGE);
        let ns = cfg
            .namespaces
            .iter()
            .map(|n| vec![0u8; (n.blocks << n.lba_shift) as usize])
            .collect();
        EmulatedController {
            name: format!("emu:{}", cfg.serial),
            domain: DmaDomain::new(),
            bar_len,
            iommu: Mutex::new(Iommu {
                next: 0x10_0000_0000,
                map: BTreeMap::new(),
            }),
            state: Mutex::new(Emu {
                cap: Cap::encode(cfg.max_queue_entries, cfg.timeout_500ms, cfg.dstrd),
                cc: 0,
                csts: 0,
                aqa: 0,
                asq: 0,
                acq: 0,
                sqs: vec![None; queues as usize + 1],
                cqs: vec![None; queues as usize + 1],
                ns,
                granted: 0,
                faults: Vec::new(),
                reverse: false,
                held: Vec::new(),
                overflow: VecDeque::new(),
                fatal: false,
                quiesced: false,
                removed: false,
                stats: EmuStats::default(),
                cfg,
            }),
        }
    }

    /// Adds a fault rule (rules are tried in the order added).
    pub fn inject(&self, f: Fault) {
        lock(&self.state).faults.push(f);
    }

    /// Drops every fault rule not yet used.
    pub fn clear_faults(&self) {
        lock(&self.state).faults.clear();
    }

    /// Completes the commands of each doorbell write in reverse order.
    pub fn set_reverse_completion(&self, on: bool) {
        lock(&self.state).reverse = on;
    }

    /// Posts every held completion now (out of order with respect to later ones).
    pub fn release_held(&self) {
        let mut st = lock(&self.state);
        let held = std::mem::take(&mut st.held);
        for h in held {
            self.post(&mut st, h.post);
        }
    }

    /// Commands whose completion is held.
    pub fn held(&self) -> usize {
        lock(&self.state).held.len()
    }

    /// Sets controller fatal status now.
    pub fn set_fatal(&self) {
        let mut st = lock(&self.state);
        st.csts |= csts::CFS;
        st.fatal = true;
        st.held.clear();
    }

    /// The device disappears: registers read all ones, nothing completes.
    pub fn surprise_remove(&self) {
        let mut st = lock(&self.state);
        st.removed = true;
        st.held.clear();
    }

    /// Counters so far.
    pub fn stats(&self) -> EmuStats {
        lock(&self.state).stats.clone()
    }

    /// Runs `f` on the bytes of namespace `nsid` (None when there is none).
    pub fn with_namespace<R>(&self, nsid: u32, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        let mut st = lock(&self.state);
        let data = st.ns.get_mut((nsid as usize).checked_sub(1)?)?;
        Some(f(data))
    }

    fn translate(&self, iova: u64, len: usize) -> Option<(DmaRegion, usize)> {
        let t = lock(&self.iommu);
        let (&base, (rlen, weak)) = t.map.range(..=iova).next_back()?;
        let off = (iova - base) as usize;
        if off.checked_add(len)? > *rlen {
            return None;
        }
        Some((weak.upgrade()?, off))
    }

    /// Calls `f(region, region offset, transfer offset, length)` for each
    /// IOVA-contiguous run of the data described by PRP1/PRP2 (NVMe 1.4 §4.3).
    fn walk_prps(
        &self,
        st: &mut Emu,
        prp1: u64,
        prp2: u64,
        len: usize,
        mut f: impl FnMut(&DmaRegion, usize, usize, usize) -> bool,
    ) -> std::result::Result<(), Status> {
        let mut run: Option<(u64, usize, usize)> = None; // (iova, xfer off, len)
        let mut flush = |run: &mut Option<(u64, usize, usize)>| -> std::result::Result<(), Status> {
            if let Some((iova, xoff, n)) = run.take() {
                let (r, off) = self.translate(iova, n).ok_or(sc::DATA_TRANSFER_ERROR)?;
                if !f(&r, off, xoff, n) {
                    return Err(sc::DATA_TRANSFER_ERROR);
                }
            }
            Ok(())
        };
        let mut add = |run: &mut Option<(u64, usize, usize)>, iova: u64, xoff: usize, n: usize| {
            if let Some((a, _, l)) = run {
                if *a + *l as u64 == iova {
                    *l += n;
                    return Ok(());
                }
            }
            flush(run)?;
            *run = Some((iova, xoff, n));
            Ok(())
        };
        let first = (PAGE - (prp1 as usize % PAGE)).min(len);
        add(&mut run, prp1, 0, first)?;
        let mut done = first;
        if done < len {
            let rest = len - done;
            if rest <= PAGE {
                if !prp2.is_multiple_of(PAGE as u64) {
                    return Err(sc::INVALID_FIELD);
                }
                add(&mut run, prp2, done, rest)?;
            } else {
                st.stats.prp_lists += 1;
                if !prp2.is_multiple_of(8) {
                    return Err(sc::INVALID_FIELD);
                }
                let mut list = prp2;
                let mut left = rest.div_ceil(PAGE); // entries still needed
                while left > 0 {
                    let slot = (list as usize % PAGE) / 8;
                    let (r, off) = self.translate(list, 8).ok_or(sc::DATA_TRANSFER_ERROR)?;
                    let e = r.read_u64(off).ok_or(sc::DATA_TRANSFER_ERROR)?;
                    if slot == PAGE / 8 - 1 && left > 1 {
                        // Last entry of a list page with more to come: a chain.
                        if !e.is_multiple_of(8) {
                            return Err(sc::INVALID_FIELD);
                        }
                        st.stats.chained_prp_lists += 1;
                        list = e;
                        continue;
                    }
                    if !e.is_multiple_of(PAGE as u64) {
                        return Err(sc::INVALID_FIELD);
                    }
                    let n = (len - done).min(PAGE);
                    add(&mut run, e, done, n)?;
                    done += n;
                    left -= 1;
                    list += 8;
                }
            }
        }
        flush(&mut run)
    }

    fn read_sqe(&self, base: u64, idx: u16) -> Option<Command> {
        let (r, off) = self.translate(base + idx as u64 * SQE_SIZE as u64, SQE_SIZE)?;
        let mut b = [0u8; SQE_SIZE];
        r.read(off, &mut b).then(|| Command::decode(&b))
    }

    fn post(&self, st: &mut Emu, p: Post) {
        if st.fatal || st.quiesced || st.removed {
            return;
        }
        let Some(Some(cq)) = st.cqs.get(p.cqid as usize).copied() else {
            return;
        };
        if (cq.tail + 1) % cq.entries == cq.head {
            st.overflow.push_back(p);
            return;
        }
        let sq_head = st
            .sqs
            .get(p.sqid as usize)
            .copied()
            .flatten()
            .map_or(0, |s| s.head);
        let mut c = Completion {
            dw0: p.dw0,
            sq_head,
            sq_id: p.sqid,
            cid: p.cid,
            phase: cq.phase,
            status: p.status,
        };
        match p.corrupt {
            Some(Corruption::UnknownCid) => c.cid = 0xfff0,
            Some(Corruption::WrongSqId) => c.sq_id = p.sqid.wrapping_add(7),
            Some(Corruption::BadSqHead) => c.sq_head = 0xfffe,
            Some(Corruption::WrongPhase) => c.phase = !cq.phase,
            Some(Corruption::Duplicate) | None => {}
        }
        let Some((r, off)) = self.translate(cq.base + cq.tail as u64 * CQE_SIZE as u64, CQE_SIZE)
        else {
            return;
        };
        let b = c.encode();
        // Everything before the phase tag first, as a device's single write would
        // appear to a reader that checks the tag first.
        r.write(off, &b[..12]);
        fence(Ordering::Release);
        r.write_u32(off + 12, u32::from_le_bytes([b[12], b[13], b[14], b[15]]));
        let mut cq = cq;
        cq.tail += 1;
        if cq.tail == cq.entries {
            cq.tail = 0;
            cq.phase = !cq.phase;
        }
        st.cqs[p.cqid as usize] = Some(cq);
        if p.corrupt == Some(Corruption::Duplicate) {
            self.post(st, Post { corrupt: None, ..p });
        }
    }

    /// Delivers held completions that are due and queued ones that now fit.
    fn service(&self, st: &mut Emu) {
        if !st.held.is_empty() {
            let now = Instant::now();
            let mut i = 0;
            while i < st.held.len() {
                if st.held[i].due.is_some_and(|d| d <= now) {
                    let h = st.held.swap_remove(i);
                    self.post(st, h.post);
                } else {
                    i += 1;
                }
            }
        }
        let n = st.overflow.len();
        for _ in 0..n {
            if let Some(p) = st.overflow.pop_front() {
                self.post(st, p);
            }
        }
    }

    fn ring_sq(&self, st: &mut Emu, qid: u16, tail: u32) {
        let Some(Some(mut sq)) = st.sqs.get(qid as usize).copied() else {
            return;
        };
        if tail >= sq.entries as u32 {
            return; // invalid doorbell value: ignored (a real controller logs an event)
        }
        let mut batch = Vec::new();
        while sq.head != tail as u16 {
            let cmd = self.read_sqe(sq.base, sq.head);
            sq.head = (sq.head + 1) % sq.entries;
            st.sqs[qid as usize] = Some(sq);
            let Some(cmd) = cmd else {
                // The SQ memory is gone: a real controller would report fatal status.
                st.csts |= csts::CFS;
                st.fatal = true;
                return;
            };
            let (status, dw0, delivery) = if qid == 0 {
                st.stats.admin_commands += 1;
                let (s, d) = self.admin(st, &cmd);
                (s, d, Delivery::Now(None))
            } else {
                st.stats.io_commands += 1;
                self.io(st, &cmd)
            };
            if st.fatal {
                return;
            }
            // Admin commands may delete or create queues: reload ours.
            match st.sqs.get(qid as usize).copied().flatten() {
                Some(s) => sq = s,
                None => return,
            }
            let post = Post {
                cqid: sq.cqid,
                sqid: qid,
                cid: cmd.cid,
                status,
                dw0,
                corrupt: None,
            };
            match delivery {
                Delivery::Now(corrupt) => {
                    let p = Post { corrupt, ..post };
                    if st.reverse {
                        batch.push(p);
                    } else {
                        self.post(st, p);
                    }
                }
                Delivery::Lost => {}
                Delivery::Held(due) => st.held.push(Held { post, due }),
            }
        }
        for p in batch.into_iter().rev() {
            self.post(st, p);
        }
    }

    fn admin(&self, st: &mut Emu, c: &Command) -> (Status, u32) {
        let ok = (Status::SUCCESS, 0);
        match c.opcode {
            admin::IDENTIFY => {
                let page = match c.cdw10 & 0xff {
                    cns::CONTROLLER => IdentifyController {
                        vid: 0x1b36,
                        serial: st.cfg.serial.clone(),
                        model: st.cfg.model.clone(),
                        firmware: st.cfg.firmware.clone(),
                        mdts: st.cfg.mdts,
                        cntlid: 1,
                        version: 0x0001_0400,
                        acl: 3,
                        sqes: 0x66,
                        cqes: 0x44,
                        nn: st.cfg.namespaces.len() as u32,
                        oncs: if st.cfg.dataset_management {
                            spec::oncs::DATASET_MANAGEMENT
                        } else {
                            0
                        } | if st.cfg.write_zeroes {
                            spec::oncs::WRITE_ZEROES
                        } else {
                            0
                        },
                        vwc: st.cfg.volatile_write_cache,
                    }
                    .encode(),
                    cns::NAMESPACE => {
                        match st.cfg.namespaces.get((c.nsid as usize).wrapping_sub(1)) {
                            Some(n) => IdentifyNamespace::encode_simple(n.blocks, n.lba_shift),
                            None => return (sc::INVALID_NAMESPACE, 0),
                        }
                    }
                    cns::ACTIVE_NAMESPACES => {
                        let mut b = vec![0u8; PAGE];
                        let ids = (1..=st.cfg.namespaces.len() as u32).filter(|&n| n > c.nsid);
                        for (i, n) in ids.take(1024).enumerate() {
                            b[4 * i..4 * i + 4].copy_from_slice(&n.to_le_bytes());
                        }
                        b
                    }
                    _ => return (sc::INVALID_FIELD, 0),
                };
                match self.walk_prps(st, c.prp1, c.prp2, PAGE, |r, off, x, n| {
                    r.write(off, &page[x..x + n])
                }) {
                    Ok(()) => ok,
                    Err(s) => (s, 0),
                }
            }
            admin::SET_FEATURES | admin::GET_FEATURES => {
                if c.cdw10 & 0xff == feature::NUMBER_OF_QUEUES {
                    if c.opcode == admin::SET_FEATURES {
                        let want = (c.cdw11 & 0xffff).min(c.cdw11 >> 16) as u16;
                        st.granted = want.saturating_add(1).min(st.cfg.max_io_queues);
                    }
                    let g = st.granted.max(1) as u32 - 1;
                    return (Status::SUCCESS, g << 16 | g);
                }
                ok
            }
            admin::CREATE_IO_CQ => {
                let qid = (c.cdw10 & 0xffff) as u16;
                let entries = (c.cdw10 >> 16) + 1;
                if qid == 0 || qid > st.granted || st.cqs[qid as usize].is_some() {
                    return (sc::INVALID_QUEUE_ID, 0);
                }
                if entries < 2 || entries > st.cap.mqes() {
                    return (sc::INVALID_QUEUE_SIZE, 0);
                }
                if c.cdw11 & 1 == 0 || !c.prp1.is_multiple_of(PAGE as u64) {
                    return (sc::INVALID_FIELD, 0);
                }
                if self
                    .translate(c.prp1, entries as usize * CQE_SIZE)
                    .is_none()
                {
                    return (sc::DATA_TRANSFER_ERROR, 0);
                }
                st.cqs[qid as usize] = Some(Cq {
                    base: c.prp1,
                    entries: entries as u16,
                    tail: 0,
                    head: 0,
                    phase: true,
                });
                ok
            }
            admin::CREATE_IO_SQ => {
                let qid = (c.cdw10 & 0xffff) as u16;
                let entries = (c.cdw10 >> 16) + 1;
                let cqid = (c.cdw11 >> 16) as u16;
                if qid == 0 || qid > st.granted || st.sqs[qid as usize].is_some() {
                    return (sc::INVALID_QUEUE_ID, 0);
                }
                if cqid == 0 || st.cqs.get(cqid as usize).copied().flatten().is_none() {
                    return (sc::INVALID_CQ, 0);
                }
                if entries < 2 || entries > st.cap.mqes() {
                    return (sc::INVALID_QUEUE_SIZE, 0);
                }
                if c.cdw11 & 1 == 0 || !c.prp1.is_multiple_of(PAGE as u64) {
                    return (sc::INVALID_FIELD, 0);
                }
                if self
                    .translate(c.prp1, entries as usize * SQE_SIZE)
                    .is_none()
                {
                    return (sc::DATA_TRANSFER_ERROR, 0);
                }
                st.sqs[qid as usize] = Some(Sq {
                    base: c.prp1,
                    entries: entries as u16,
                    head: 0,
                    cqid,
                });
                st.stats.queues_created += 1;
                ok
            }
            admin::DELETE_IO_SQ => {
                let qid = (c.cdw10 & 0xffff) as u16;
                if qid == 0 || st.sqs.get(qid as usize).copied().flatten().is_none() {
                    return (sc::INVALID_QUEUE_ID, 0);
                }
                // Commands still held are aborted by the deletion.
                let (mine, rest): (Vec<Held>, Vec<Held>) =
                    st.held.drain(..).partition(|h| h.post.sqid == qid);
                st.held = rest;
                for h in mine {
                    self.post(
                        st,
                        Post {
                            status: sc::ABORTED_SQ_DELETION,
                            ..h.post
                        },
                    );
                }
                st.sqs[qid as usize] = None;
                ok
            }
            admin::DELETE_IO_CQ => {
                let qid = (c.cdw10 & 0xffff) as u16;
                if qid == 0 || st.cqs.get(qid as usize).copied().flatten().is_none() {
                    return (sc::INVALID_QUEUE_ID, 0);
                }
                if st.sqs.iter().flatten().any(|s| s.cqid == qid) {
                    return (Status::new(1, 0x0c), 0); // invalid queue deletion
                }
                st.cqs[qid as usize] = None;
                st.overflow.retain(|p| p.cqid != qid);
                ok
            }
            admin::ABORT => {
                st.stats.aborts += 1;
                let sqid = (c.cdw10 & 0xffff) as u16;
                let cid = (c.cdw10 >> 16) as u16;
                match st
                    .held
                    .iter()
                    .position(|h| h.post.sqid == sqid && h.post.cid == cid)
                {
                    Some(i) => {
                        let h = st.held.swap_remove(i);
                        self.post(
                            st,
                            Post {
                                status: sc::ABORT_REQUESTED,
                                ..h.post
                            },
                        );
                        (Status::SUCCESS, 0)
                    }
                    None => (Status::SUCCESS, 1), // not aborted
                }
            }
            admin::GET_LOG_PAGE => {
                let len = ((((c.cdw10 >> 16) & 0xfff) + 1) * 4) as usize;
                let zero = vec![0u8; len.min(PAGE)];
                match self.walk_prps(st, c.prp1, c.prp2, zero.len(), |r, off, x, n| {
                    r.write(off, &zero[x..x + n])
                }) {
                    Ok(()) => ok,
                    Err(s) => (s, 0),
                }
            }
            _ => (sc::INVALID_OPCODE, 0),
        }
    }

    fn io(&self, st: &mut Emu, c: &Command) -> (Status, u32, Delivery) {
        let mut delivery = Delivery::Now(None);
        if let Some(i) = st
            .faults
            .iter()
            .position(|f| f.opcode().is_none_or(|o| o == c.opcode))
        {
            let f = st.faults[i];
            if st.faults[i].consume() {
                st.faults.remove(i);
            }
            match f {
                Fault::FailWith { status, .. } => return (status, 0, Delivery::Now(None)),
                Fault::FatalOnNextIo => {
                    st.csts |= csts::CFS;
                    st.fatal = true;
                    st.held.clear();
                    return (Status::SUCCESS, 0, Delivery::Lost);
                }
                Fault::LoseCompletion { .. } => delivery = Delivery::Lost,
                Fault::Slow { delay, .. } => {
                    delivery = Delivery::Held(Some(Instant::now() + delay))
                }
                Fault::Hold { .. } => delivery = Delivery::Held(None),
                Fault::Corrupt { how, .. } => delivery = Delivery::Now(Some(how)),
            }
        }
        (self.execute(st, c), 0, delivery)
    }

    fn execute(&self, st: &mut Emu, c: &Command) -> Status {
        let Some(ns) = st
            .cfg
            .namespaces
            .get((c.nsid as usize).wrapping_sub(1))
            .copied()
        else {
            return sc::INVALID_NAMESPACE;
        };
        let nsi = c.nsid as usize - 1;
        let slba = c.cdw10 as u64 | (c.cdw11 as u64) << 32;
        let nlb = (c.cdw12 & 0xffff) as u64 + 1;
        let in_range = slba.checked_add(nlb).is_some_and(|e| e <= ns.blocks);
        match c.opcode {
            nvm::READ | nvm::WRITE => {
                if !in_range {
                    return sc::LBA_OUT_OF_RANGE;
                }
                let len = (nlb << ns.lba_shift) as usize;
                if st.cfg.mdts != 0 && len > PAGE << st.cfg.mdts {
                    return sc::INVALID_FIELD; // beyond MDTS
                }
                st.stats.max_transfer = st.stats.max_transfer.max(len);
                let base = (slba << ns.lba_shift) as usize;
                let mut data = std::mem::take(&mut st.ns[nsi]);
                let write = c.opcode == nvm::WRITE;
                let r = self.walk_prps(st, c.prp1, c.prp2, len, |r, off, x, n| {
                    let d = &mut data[base + x..base + x + n];
                    if write {
                        r.read(off, d)
                    } else {
                        r.write(off, d)
                    }
                });
                st.ns[nsi] = data;
                if write {
                    st.stats.writes += 1;
                    if c.cdw12 & nvm::FUA != 0 {
                        st.stats.fua_writes += 1;
                    }
                } else {
                    st.stats.reads += 1;
                }
                match r {
                    Ok(()) => Status::SUCCESS,
                    Err(s) => s,
                }
            }
            nvm::FLUSH => {
                st.stats.flushes += 1;
                Status::SUCCESS
            }
            nvm::WRITE_ZEROES if st.cfg.write_zeroes => {
                if !in_range {
                    return sc::LBA_OUT_OF_RANGE;
                }
                st.stats.write_zeroes += 1;
                let (a, b) = (
                    (slba << ns.lba_shift) as usize,
                    ((slba + nlb) << ns.lba_shift) as usize,
                );
                st.ns[nsi][a..b].fill(0);
                Status::SUCCESS
            }
            nvm::DATASET_MANAGEMENT if st.cfg.dataset_management => {
                st.stats.dataset_management += 1;
                let ranges = (c.cdw10 & 0xff) as usize + 1;
                let mut list = vec![0u8; ranges * 16];
                let r = self.walk_prps(st, c.prp1, c.prp2, list.len(), |r, off, x, n| {
                    r.read(off, &mut list[x..x + n])
                });
                if let Err(s) = r {
                    return s;
                }
                if c.cdw11 & nvm::DSM_DEALLOCATE == 0 {
                    return Status::SUCCESS;
                }
                for k in 0..ranges {
                    let mut e = [0u8; 16];
                    e.copy_from_slice(&list[16 * k..16 * k + 16]);
                    let (s, n) = spec::decode_dsm_range(&e);
                    if s.checked_add(n as u64).is_none_or(|end| end > ns.blocks) {
                        return sc::LBA_OUT_OF_RANGE;
                    }
                    // Deallocated blocks read back as zeroes here.
                    let (a, b) = (
                        (s << ns.lba_shift) as usize,
                        ((s + n as u64) << ns.lba_shift) as usize,
                    );
                    st.ns[nsi][a..b].fill(0);
                }
                Status::SUCCESS
            }
            _ => sc::INVALID_OPCODE,
        }
    }

    fn write_cc(&self, st: &mut Emu, v: u32) {
        let old = st.cc;
        st.cc = v;
        if old & cc::EN == 0 && v & cc::EN != 0 {
            let sqe = (st.aqa & 0xfff) as u16 + 1;
            let cqe = ((st.aqa >> 16) & 0xfff) as u16 + 1;
            let valid = sqe >= 2
                && cqe >= 2
                && self.translate(st.asq, sqe as usize * SQE_SIZE).is_some()
                && self.translate(st.acq, cqe as usize * CQE_SIZE).is_some();
            if !valid {
                st.csts |= csts::CFS;
                st.fatal = true;
                return;
            }
            st.sqs[0] = Some(Sq {
                base: st.asq,
                entries: sqe,
                head: 0,
                cqid: 0,
            });
            st.cqs[0] = Some(Cq {
                base: st.acq,
                entries: cqe,
                tail: 0,
                head: 0,
                phase: true,
            });
            st.csts |= csts::RDY;
        } else if old & cc::EN != 0 && v & cc::EN == 0 {
            // Controller reset: every queue and pending completion is gone.
            st.sqs.iter_mut().for_each(|q| *q = None);
            st.cqs.iter_mut().for_each(|q| *q = None);
            st.held.clear();
            st.overflow.clear();
            st.granted = 0;
            st.csts = 0;
            st.fatal = false;
        }
        if v & cc::SHN_MASK != 0 {
            st.csts = (st.csts & !csts::SHST_MASK) | csts::SHST_COMPLETE;
        }
    }
}

impl DeviceAccess for EmulatedController {
    fn name(&self) -> &str {
        &self.name
    }

    fn bar0_len(&self) -> usize {
        self.bar_len
    }

    fn read32(&self, off: usize) -> u32 {
        let mut st = lock(&self.state);
        if st.removed {
            return u32::MAX;
        }
        self.service(&mut st);
        match off {
            reg::CAP => st.cap.0 as u32,
            o if o == reg::CAP + 4 => (st.cap.0 >> 32) as u32,
            reg::VS => 0x0001_0400,
            reg::CC => st.cc,
            reg::CSTS => st.csts,
            reg::AQA => st.aqa,
            reg::ASQ => st.asq as u32,
            o if o == reg::ASQ + 4 => (st.asq >> 32) as u32,
            reg::ACQ => st.acq as u32,
            o if o == reg::ACQ + 4 => (st.acq >> 32) as u32,
            o if o < self.bar_len => 0,
            _ => u32::MAX,
        }
    }

    fn write32(&self, off: usize, v: u32) {
        let mut st = lock(&self.state);
        if st.removed || st.quiesced {
            return;
        }
        self.service(&mut st);
        match off {
            reg::CC => self.write_cc(&mut st, v),
            reg::AQA => st.aqa = v,
            reg::ASQ => st.asq = (st.asq & !0xffff_ffff) | v as u64,
            o if o == reg::ASQ + 4 => st.asq = (st.asq & 0xffff_ffff) | (v as u64) << 32,
            reg::ACQ => st.acq = (st.acq & !0xffff_ffff) | v as u64,
            o if o == reg::ACQ + 4 => st.acq = (st.acq & 0xffff_ffff) | (v as u64) << 32,
            o if o >= reg::DOORBELLS && o < self.bar_len => {
                if st.fatal || st.cc & cc::EN == 0 {
                    return;
                }
                let stride = 4usize << st.cfg.dstrd;
                let rel = o - reg::DOORBELLS;
                if !rel.is_multiple_of(stride) {
                    return;
                }
                let idx = rel / stride;
                let qid = (idx / 2) as u16;
                if idx.is_multiple_of(2) {
                    self.ring_sq(&mut st, qid, v);
                } else if let Some(Some(cq)) = st.cqs.get_mut(qid as usize) {
                    if v < cq.entries as u32 {
                        cq.head = v as u16;
                    }
                    self.service(&mut st);
                }
            }
            _ => {}
        }
    }

    fn dma_domain(&self) -> DmaDomain {
        self.domain
    }

    fn alloc_dma(&self, len: usize) -> Result<DmaRegion> {
        let r = DmaRegion::allocate(len, Backing::Ordinary, |_, len| {
            let mut t = lock(&self.iommu);
            let iova = t.next;
            // Gaps between regions: a transfer that runs past a buffer faults.
            t.next = (iova + len as u64 + (2 << 20)).next_multiple_of(2 << 20);
            Ok((iova, None))
        })?;
        let mut t = lock(&self.iommu);
        t.map.retain(|_, (_, w)| w.is_alive());
        t.map.insert(r.iova(), (r.len(), r.downgrade()));
        Ok(r)
    }

    fn quiesce(&self) {
        lock(&self.state).quiesced = true;
    }
}
