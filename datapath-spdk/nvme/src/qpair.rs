//! One I/O queue pair: the `nvme` backend of [`QueuePair`].
//!
//! Owned by one reactor thread; nothing in it is shared with another queue pair.
//! The only shared state it touches on the I/O path is the controller's `failed`
//! flag (read, written once in the controller's life); the admin mutex is taken
//! only to abort a command that already timed out, and when the queue is created
//! or deleted.
//!
//! A request (one `submit_*` call with its tag) becomes one or more commands
//! ("pieces"): transfers are split at the controller's maximum transfer size,
//! Write Zeroes at 65536 blocks. Pieces wait in a backlog when the ring or the
//! command ids run out and go out as completions free them. A request completes
//! when every piece has a result; a piece's error fails the request.
//!
//! Buffers: a buffer from this device's DMA pool (`alloc_buf`) is used in place
//! (its IOVA goes into the PRPs); any other buffer is copied through a pool
//! buffer ("bounce"). The buffer goes back to the caller with the completion,
//! except when the device may still write into it (a command that was aborted
//! and then declared lost): then the driver keeps it until the late completion
//! arrives or the queue is deleted, and the completion carries no buffer.

#![deny(unsafe_code)]

use crate::controller::{NamespaceInfo, Shared};
use crate::hw::pool::DmaPool;
use crate::hw::DmaRegion;
use crate::queue::{build_prps, prp_list_pages, CompletionQueue, PrpListSpace, SubmissionQueue};
use crate::spec::{self, admin, nvm, sc, Command, PAGE, SQE_SIZE};
use crate::{NvmeError, Result};
use cairn_blockdev::{BlockError, Completion, DmaBuf, IoKind, QueuePair};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often (at most) the slow path runs: health, removal and timeouts.
const CHECK_EVERY: Duration = Duration::from_millis(1);
/// Blocks per Write Zeroes command (NLB is 16 bits, 0-based).
const MAX_ZEROES_BLOCKS: u64 = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Issued,
    /// Timed out; an Abort was sent.
    Aborting,
    /// No completion even after the abort: its request was failed, but the id
    /// (and the buffer) stay reserved until a completion shows up.
    Lost,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    req: u32,
    deadline: Instant,
}

#[derive(Debug)]
struct Request {
    tag: u64,
    kind: IoKind,
    /// What the device reads or writes (the caller's pool buffer, or a bounce buffer).
    dma: Option<DmaBuf>,
    /// The caller's own buffer when `dma` is a bounce buffer.
    user: Option<DmaBuf>,
    /// What a successful request reports (the buffer length; 0 for the others).
    bytes: usize,
    /// Pieces without a result yet.
    unresolved: u32,
    /// Pieces the device may still touch.
    outstanding: u32,
    error: Option<BlockError>,
    reported: bool,
}

/// One command of a request, before it has a command id and PRPs.
#[derive(Debug, Clone, Copy)]
struct Piece {
    req: u32,
    opcode: u8,
    slba: u64,
    blocks: u64,
    fua: bool,
    /// IOVA and length of the data, for reads and writes.
    data: Option<(u64, usize)>,
}

/// An NVMe I/O submission/completion queue pair on one namespace.
pub struct NvmeQueuePair {
    ctrl: Arc<Shared>,
    ns: NamespaceInfo,
    qid: u16,
    sq: SubmissionQueue,
    cq: CompletionQueue,
    /// Ring memory and the PRP list pages, one run of pages per command id.
    mem: DmaRegion,
    prp_off: usize,
    prp_pages: usize,
    pool: DmaPool,
    slots: Vec<Slot>,
    free_cids: Vec<u16>,
    requests: Vec<Option<Request>>,
    free_reqs: Vec<u32>,
    backlog: VecDeque<Piece>,
    done: Vec<Completion>,
    /// Requests submitted and not yet reported.
    active: usize,
    lost: usize,
    zeroes: Option<DmaBuf>,
    polls: u32,
    next_check: Instant,
    /// A coarse clock for command deadlines, read when a burst starts on an idle
    /// queue and on every slow-path run (at most ~1 ms apart while commands are
    /// in flight and the queue is polled), so a submission costs no clock read.
    clock: Instant,
    deleted: bool,
}

impl std::fmt::Debug for NvmeQueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeQueuePair")
            .field("ctrl", &self.ctrl.name)
            .field("nsid", &self.ns.nsid)
            .field("qid", &self.qid)
            .field("active", &self.active)
            .finish()
    }
}

impl NvmeQueuePair {
    pub(crate) fn new(ctrl: Arc<Shared>, ns: NamespaceInfo) -> Result<Self> {
        if ctrl.is_failed() {
            return Err(NvmeError::Failed(ctrl.name.clone(), ctrl.failure()));
        }
        let entries = ctrl
            .config
            .io_queue_entries
            .min(ctrl.cap.mqes().min(4096) as u16)
            .max(2);
        let cids = entries as usize - 1;
        let prp_pages = prp_list_pages(ctrl.max_transfer / PAGE).max(1);
        let sq_bytes = (entries as usize * SQE_SIZE).next_multiple_of(PAGE);
        let cq_bytes = (entries as usize * spec::CQE_SIZE).next_multiple_of(PAGE);
        let prp_off = sq_bytes + cq_bytes;
        let mem = ctrl.dev.alloc_dma(prp_off + cids * prp_pages * PAGE)?;
        let stride = ctrl.stride();
        let qid = ctrl.take_qid()?;
        let sq = SubmissionQueue::new(qid, entries, mem.clone(), 0, stride);
        let cq = CompletionQueue::new(qid, entries, mem.clone(), sq_bytes, stride);

        let mut c = Command::new(admin::CREATE_IO_CQ);
        c.prp1 = cq.iova();
        c.cdw10 = (entries as u32 - 1) << 16 | qid as u32;
        c.cdw11 = 1; // physically contiguous, interrupts off: we poll
        if let Err(e) = ctrl.admin(c, &format!("create I/O CQ {qid}")) {
            ctrl.put_qid(qid);
            return Err(e);
        }
        let mut c = Command::new(admin::CREATE_IO_SQ);
        c.prp1 = sq.iova();
        c.cdw10 = (entries as u32 - 1) << 16 | qid as u32;
        c.cdw11 = (qid as u32) << 16 | 1;
        if let Err(e) = ctrl.admin(c, &format!("create I/O SQ {qid}")) {
            let mut d = Command::new(admin::DELETE_IO_CQ);
            d.cdw10 = qid as u32;
            let _ = ctrl.admin(d, &format!("delete I/O CQ {qid}"));
            ctrl.put_qid(qid);
            return Err(e);
        }
        let dev = ctrl.dev.clone();
        let pool = DmaPool::new(
            format!("{} queue {qid}", ctrl.name),
            ctrl.dev.dma_domain(),
            ctrl.config.pool_limit,
            Arc::new(move |len| dev.alloc_dma(len)),
        );
        let now = Instant::now();
        Ok(NvmeQueuePair {
            ns,
            qid,
            sq,
            cq,
            mem,
            prp_off,
            prp_pages,
            pool,
            slots: vec![
                Slot {
                    state: SlotState::Free,
                    req: 0,
                    deadline: now,
                };
                cids
            ],
            free_cids: (0..cids as u16).rev().collect(),
            requests: Vec::new(),
            free_reqs: Vec::new(),
            backlog: VecDeque::new(),
            done: Vec::new(),
            active: 0,
            lost: 0,
            zeroes: None,
            polls: 0,
            next_check: now + CHECK_EVERY,
            clock: now,
            deleted: false,
            ctrl,
        })
    }

    /// The hardware queue id.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// The DMA pool of this queue (what `alloc_buf` lends from).
    pub fn pool(&self) -> &DmaPool {
        &self.pool
    }

    fn check_range(&self, offset: u64, len: u64) -> std::result::Result<(u64, u64), BlockError> {
        // LBA sizes are powers of two: masks and shifts, no divisions on the hot path.
        let shift = self.ns.lba_size.trailing_zeros();
        let mask = (1u64 << shift) - 1;
        if (offset | len) & mask != 0 || len == 0 {
            return Err(BlockError::Invalid(format!(
                "offset {offset} / length {len} not aligned to the {}-byte LBA",
                self.ns.lba_size
            )));
        }
        let size = self.ns.blocks << shift;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok((offset >> shift, len >> shift)),
            _ => Err(BlockError::Invalid(format!(
                "range {offset}+{len} beyond the namespace end {size}"
            ))),
        }
    }

    fn check_usable(&self) -> std::result::Result<(), BlockError> {
        if self.ctrl.is_failed() {
            return Err(self.ctrl.failed_error());
        }
        if self.deleted {
            return Err(BlockError::Failed("queue pair was deleted".into()));
        }
        Ok(())
    }

    fn new_request(
        &mut self,
        tag: u64,
        kind: IoKind,
        dma: Option<DmaBuf>,
        user: Option<DmaBuf>,
    ) -> u32 {
        let bytes = match kind {
            IoKind::Read | IoKind::Write => dma.as_ref().map_or(0, |b| b.len()),
            _ => 0,
        };
        let r = Request {
            tag,
            kind,
            dma,
            user,
            bytes,
            unresolved: 0,
            outstanding: 0,
            error: None,
            reported: false,
        };
        self.active += 1;
        match self.free_reqs.pop() {
            Some(i) => {
                self.requests[i as usize] = Some(r);
                i
            }
            None => {
                self.requests.push(Some(r));
                (self.requests.len() - 1) as u32
            }
        }
    }

    /// Queues the pieces of a request and sends what fits.
    fn enqueue(&mut self, req: u32, pieces: impl Iterator<Item = Piece>) {
        let mut n = 0u32;
        for p in pieces {
            self.backlog.push_back(p);
            n += 1;
        }
        if let Some(r) = self.requests[req as usize].as_mut() {
            r.unresolved = n;
            r.outstanding = n;
        }
        if n == 0 {
            self.settle(req);
        }
        self.pump();
    }

    /// The IOVA of a data buffer: in place when it is ours, else via a bounce
    /// buffer (filled for writes).
    fn dma_for(
        &mut self,
        buf: DmaBuf,
        write: bool,
    ) -> std::result::Result<(DmaBuf, Option<DmaBuf>), BlockError> {
        if buf.iova(self.pool.domain()).is_some() {
            return Ok((buf, None));
        }
        self.ctrl
            .bounces
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut bounce = self.pool.alloc(buf.len())?;
        if write {
            bounce.as_mut_slice().copy_from_slice(buf.as_slice());
        }
        Ok((bounce, Some(buf)))
    }

    fn submit_rw(
        &mut self,
        tag: u64,
        offset: u64,
        buf: DmaBuf,
        write: bool,
        fua: bool,
    ) -> std::result::Result<(), BlockError> {
        self.check_usable()?;
        let (slba, blocks) = self.check_range(offset, buf.len() as u64)?;
        let (dma, user) = self.dma_for(buf, write)?;
        let Some(iova) = dma.iova(self.pool.domain()) else {
            return Err(BlockError::Invalid("buffer has no IOVA".into()));
        };
        let kind = if write { IoKind::Write } else { IoKind::Read };
        let shift = self.ns.lba_size.trailing_zeros();
        let len = dma.len().min((blocks as usize) << shift);
        let req = self.new_request(tag, kind, Some(dma), user);
        let step = self.ctrl.max_transfer;
        let opcode = if write { nvm::WRITE } else { nvm::READ };
        self.enqueue(
            req,
            (0..len).step_by(step).map(move |off| {
                let n = step.min(len - off);
                Piece {
                    req,
                    opcode,
                    slba: slba + (off >> shift) as u64,
                    blocks: (n >> shift) as u64,
                    fua,
                    data: Some((iova + off as u64, n)),
                }
            }),
        );
        Ok(())
    }

    /// Writes backlog pieces into the ring while command ids and ring slots
    /// last. The doorbell is rung by `poll`/`wait` (one MMIO write per batch, like
    /// the uring backend's deferred `io_uring_enter`): a doorbell write is the
    /// expensive part of a submission, and a VM exit in a guest.
    fn pump(&mut self) {
        if self.ctrl.is_failed() {
            return;
        }
        if self.slots.len() == self.free_cids.len() {
            self.clock = Instant::now(); // nothing in flight: the clock may be stale
        }
        while let Some(p) = self.backlog.front().copied() {
            if self.free_cids.is_empty() || self.sq.free_slots() == 0 {
                break;
            }
            let Some(cid) = self.free_cids.pop() else {
                break;
            };
            self.backlog.pop_front();
            let mut c = Command::new(p.opcode);
            c.cid = cid;
            c.nsid = self.ns.nsid;
            let space = PrpListSpace {
                mem: &self.mem,
                off: self.prp_off + cid as usize * self.prp_pages * PAGE,
                pages: self.prp_pages,
            };
            let built = match p.opcode {
                nvm::READ | nvm::WRITE => match p.data {
                    Some((iova, len)) => build_prps(iova, len, &space).map(|(a, b)| {
                        c.prp1 = a;
                        c.prp2 = b;
                        c.cdw10 = p.slba as u32;
                        c.cdw11 = (p.slba >> 32) as u32;
                        c.cdw12 = (p.blocks as u32).wrapping_sub(1) & 0xffff;
                        if p.fua {
                            c.cdw12 |= nvm::FUA;
                        }
                    }),
                    None => Err("read/write without data".into()),
                },
                nvm::WRITE_ZEROES => {
                    c.cdw10 = p.slba as u32;
                    c.cdw11 = (p.slba >> 32) as u32;
                    c.cdw12 = (p.blocks as u32).wrapping_sub(1) & 0xffff;
                    Ok(())
                }
                nvm::DATASET_MANAGEMENT => {
                    // The range list goes in this command's PRP list page.
                    let range = spec::encode_dsm_range(p.slba, p.blocks as u32);
                    if space.mem.fill(space.off, PAGE, 0) && space.mem.write(space.off, &range) {
                        c.prp1 = space.mem.iova() + space.off as u64;
                        c.cdw10 = 0; // one range
                        c.cdw11 = nvm::DSM_DEALLOCATE;
                        Ok(())
                    } else {
                        Err("DSM range outside its page".into())
                    }
                }
                _ => Ok(()), // flush
            };
            if let Err(m) = built {
                self.free_cids.push(cid);
                self.piece_result(p.req, Err(BlockError::Invalid(m)), true);
                continue;
            }
            if !self.sq.push(&c) {
                self.free_cids.push(cid);
                self.backlog.push_front(p);
                break;
            }
            self.slots[cid as usize] = Slot {
                state: SlotState::Issued,
                req: p.req,
                deadline: self.clock + self.ctrl.config.io_timeout,
            };
        }
    }

    /// Rings the SQ doorbell for whatever `pump` wrote since the last ring.
    fn ring(&mut self) {
        if !self.ctrl.is_failed() {
            self.sq.ring(self.ctrl.dev.as_ref());
        }
    }

    /// Records one piece's outcome. `device_done` is false when the piece is
    /// given up on while the device may still touch its memory.
    fn piece_result(
        &mut self,
        req: u32,
        result: std::result::Result<(), BlockError>,
        device_done: bool,
    ) {
        let Some(r) = self.requests.get_mut(req as usize).and_then(Option::as_mut) else {
            return;
        };
        r.unresolved = r.unresolved.saturating_sub(1);
        if device_done {
            r.outstanding = r.outstanding.saturating_sub(1);
        }
        if let Err(e) = result {
            if r.error.is_none() {
                r.error = Some(e);
            }
        }
        self.settle(req);
    }

    /// A late completion of a piece already given up on.
    fn late_piece(&mut self, req: u32) {
        if let Some(r) = self.requests.get_mut(req as usize).and_then(Option::as_mut) {
            r.outstanding = r.outstanding.saturating_sub(1);
        }
        self.settle(req);
    }

    /// Reports a request once every piece has a result; frees it once the device
    /// can no longer touch its memory.
    fn settle(&mut self, req: u32) {
        let Some(r) = self.requests.get_mut(req as usize).and_then(Option::as_mut) else {
            return;
        };
        if !r.reported && r.unresolved == 0 {
            r.reported = true;
            self.active -= 1;
            let result = match r.error.take() {
                Some(e) => Err(e),
                None => Ok(r.bytes),
            };
            let buf = if r.outstanding == 0 {
                match (r.user.take(), r.dma.take()) {
                    (Some(mut user), Some(bounce)) => {
                        if r.kind == IoKind::Read && result.is_ok() {
                            user.as_mut_slice().copy_from_slice(bounce.as_slice());
                        }
                        Some(user)
                    }
                    (None, dma) => dma,
                    (user, None) => user,
                }
            } else {
                // The device may still write the DMA buffer: keep it; a bounced
                // caller buffer was never exposed and can go back.
                r.user.take()
            };
            self.done.push(Completion {
                tag: r.tag,
                kind: r.kind,
                result,
                buf,
            });
        }
        if r.reported && r.outstanding == 0 {
            self.requests[req as usize] = None;
            self.free_reqs.push(req);
        }
    }

    /// Consumes the completion queue. Returns false after a protocol violation
    /// (the controller is then failed).
    fn reap(&mut self) -> bool {
        let mut any = false;
        while let Some(c) = self.cq.peek() {
            self.cq.advance();
            any = true;
            if c.sq_id != self.qid {
                self.violation(format!(
                    "completion on CQ {} names SQ {}",
                    self.qid, c.sq_id
                ));
                return false;
            }
            if let Err(m) = self.sq.set_head(c.sq_head) {
                self.violation(m);
                return false;
            }
            let Some(slot) = self.slots.get(c.cid as usize).copied() else {
                self.violation(format!(
                    "completion for command id {} that does not exist",
                    c.cid
                ));
                return false;
            };
            if slot.state == SlotState::Free {
                self.violation(format!(
                    "completion for command id {} that is not in flight",
                    c.cid
                ));
                return false;
            }
            self.slots[c.cid as usize].state = SlotState::Free;
            self.free_cids.push(c.cid);
            if slot.state == SlotState::Lost {
                self.lost -= 1;
                self.late_piece(slot.req);
                continue;
            }
            let result = if c.status.is_success() {
                Ok(())
            } else if slot.state == SlotState::Aborting && c.status == sc::ABORT_REQUESTED {
                Err(timeout_error(
                    &self.ctrl.name,
                    self.qid,
                    c.cid,
                    self.ctrl.config.io_timeout,
                    "aborted",
                ))
            } else {
                Err(BlockError::Io {
                    context: format!("{} qid {} cid {}", self.ctrl.name, self.qid, c.cid),
                    source: std::io::Error::other(format!("command failed: {}", c.status)),
                })
            };
            self.piece_result(slot.req, result, true);
        }
        if any {
            self.cq.ring(self.ctrl.dev.as_ref());
        }
        true
    }

    fn violation(&mut self, m: String) {
        let e = NvmeError::Protocol(self.ctrl.name.clone(), m);
        self.ctrl.fail(&e.to_string());
        self.fail_all();
    }

    /// Fails everything in flight and queued (the controller failed; its DMA is
    /// stopped, so every buffer can go back).
    fn fail_all(&mut self) {
        let err = self.ctrl.failed_error();
        self.backlog.clear();
        for s in self.slots.iter_mut() {
            s.state = SlotState::Free;
        }
        self.free_cids = (0..self.slots.len() as u16).rev().collect();
        self.lost = 0;
        for i in 0..self.requests.len() {
            if let Some(r) = self.requests[i].as_mut() {
                r.unresolved = 0;
                r.outstanding = 0;
                if r.error.is_none() {
                    r.error = Some(match &err {
                        BlockError::Failed(m) => BlockError::Failed(m.clone()),
                        other => BlockError::Failed(other.to_string()),
                    });
                }
                self.settle(i as u32);
            }
        }
    }

    /// Health, removal and timeouts; at most every [`CHECK_EVERY`].
    fn slow_path(&mut self, now: Instant) {
        self.next_check = now + CHECK_EVERY;
        self.clock = now;
        if self.active == 0 && self.lost == 0 {
            return;
        }
        if self.ctrl.check_status().is_err() {
            self.fail_all();
            return;
        }
        // A completion posted since the last look is not a timeout (the thread may
        // have been descheduled past a deadline while it sat in the queue).
        if !self.reap() {
            return;
        }
        for cid in 0..self.slots.len() {
            let s = self.slots[cid];
            if now < s.deadline {
                continue;
            }
            match s.state {
                SlotState::Issued => {
                    tracing::warn!(ctrl = %self.ctrl.name, qid = self.qid, cid, "command timed out; aborting it");
                    let mut c = Command::new(admin::ABORT);
                    c.cdw10 = (cid as u32) << 16 | self.qid as u32;
                    match self
                        .ctrl
                        .admin(c, &format!("abort of qid {} cid {cid}", self.qid))
                    {
                        Ok(r) if r.dw0 & 1 == 0 => {
                            tracing::info!(ctrl = %self.ctrl.name, qid = self.qid, cid, "abort accepted")
                        }
                        Ok(_) => {
                            tracing::warn!(ctrl = %self.ctrl.name, qid = self.qid, cid, "controller did not abort the command")
                        }
                        Err(e) => {
                            tracing::warn!(ctrl = %self.ctrl.name, qid = self.qid, cid, "abort failed: {e}")
                        }
                    }
                    if self.ctrl.is_failed() {
                        self.fail_all();
                        return;
                    }
                    let slot = &mut self.slots[cid];
                    slot.state = SlotState::Aborting;
                    slot.deadline = Instant::now() + self.ctrl.config.io_timeout;
                }
                SlotState::Aborting => {
                    tracing::error!(ctrl = %self.ctrl.name, qid = self.qid, cid, "command lost: no completion after abort");
                    self.slots[cid].state = SlotState::Lost;
                    self.lost += 1;
                    let e = timeout_error(
                        &self.ctrl.name,
                        self.qid,
                        cid as u16,
                        self.ctrl.config.io_timeout,
                        "lost (no completion after abort)",
                    );
                    self.piece_result(s.req, Err(e), false);
                }
                SlotState::Free | SlotState::Lost => {}
            }
        }
        if self.lost > self.slots.len() / 2 {
            self.ctrl.fail(&format!(
                "{} commands lost on queue {}",
                self.lost, self.qid
            ));
            self.fail_all();
        }
    }

    fn maybe_slow_path(&mut self, idle: bool) {
        self.polls = self.polls.wrapping_add(1);
        if idle || self.polls.is_multiple_of(64) {
            let now = Instant::now();
            if now >= self.next_check {
                self.slow_path(now);
            }
        }
    }

    fn zero_buffer(&mut self) -> std::result::Result<u64, BlockError> {
        if self.zeroes.is_none() {
            self.zeroes = Some(self.pool.alloc(self.ctrl.max_transfer)?);
        }
        self.zeroes
            .as_ref()
            .and_then(|b| b.iova(self.pool.domain()))
            .ok_or_else(|| BlockError::Invalid("zero buffer has no IOVA".into()))
    }

    /// Deletes the hardware queues. Afterwards the controller no longer touches
    /// this queue's memory or buffers.
    fn delete(&mut self) -> bool {
        if self.deleted {
            return true;
        }
        self.deleted = true;
        if self.ctrl.is_failed() {
            return true; // DMA already stopped
        }
        let mut d = Command::new(admin::DELETE_IO_SQ);
        d.cdw10 = self.qid as u32;
        let ok_sq = self
            .ctrl
            .admin(d, &format!("delete I/O SQ {}", self.qid))
            .is_ok();
        let mut d = Command::new(admin::DELETE_IO_CQ);
        d.cdw10 = self.qid as u32;
        let ok_cq = ok_sq
            && self
                .ctrl
                .admin(d, &format!("delete I/O CQ {}", self.qid))
                .is_ok();
        ok_cq || self.ctrl.is_failed()
    }
}

fn timeout_error(ctrl: &str, qid: u16, cid: u16, t: Duration, what: &str) -> BlockError {
    BlockError::Io {
        context: format!("{ctrl} qid {qid} cid {cid}"),
        source: std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("command timed out after {t:?} and was {what}"),
        ),
    }
}

impl QueuePair for NvmeQueuePair {
    fn submit_read(
        &mut self,
        tag: u64,
        offset: u64,
        buf: DmaBuf,
    ) -> std::result::Result<(), BlockError> {
        self.submit_rw(tag, offset, buf, false, false)
    }

    fn submit_write(
        &mut self,
        tag: u64,
        offset: u64,
        buf: DmaBuf,
        fua: bool,
    ) -> std::result::Result<(), BlockError> {
        self.submit_rw(tag, offset, buf, true, fua)
    }

    fn submit_flush(&mut self, tag: u64) -> std::result::Result<(), BlockError> {
        self.check_usable()?;
        let req = self.new_request(tag, IoKind::Flush, None, None);
        self.enqueue(
            req,
            std::iter::once(Piece {
                req,
                opcode: nvm::FLUSH,
                slba: 0,
                blocks: 0,
                fua: false,
                data: None,
            }),
        );
        Ok(())
    }

    fn submit_trim(
        &mut self,
        tag: u64,
        offset: u64,
        len: u64,
    ) -> std::result::Result<(), BlockError> {
        self.check_usable()?;
        let (slba, blocks) = self.check_range(offset, len)?;
        let req = self.new_request(tag, IoKind::Trim, None, None);
        if self.ctrl.id.oncs & spec::oncs::DATASET_MANAGEMENT == 0 {
            // Trim is advisory: without Dataset Management it is a no-op.
            self.enqueue(req, std::iter::empty());
            return Ok(());
        }
        let step = u32::MAX as u64;
        self.enqueue(
            req,
            (0..blocks).step_by(step as usize).map(move |o| Piece {
                req,
                opcode: nvm::DATASET_MANAGEMENT,
                slba: slba + o,
                blocks: step.min(blocks - o),
                fua: false,
                data: None,
            }),
        );
        Ok(())
    }

    fn submit_write_zeroes(
        &mut self,
        tag: u64,
        offset: u64,
        len: u64,
    ) -> std::result::Result<(), BlockError> {
        self.check_usable()?;
        let (slba, blocks) = self.check_range(offset, len)?;
        if self.ctrl.id.oncs & spec::oncs::WRITE_ZEROES != 0 {
            let req = self.new_request(tag, IoKind::WriteZeroes, None, None);
            self.enqueue(
                req,
                (0..blocks)
                    .step_by(MAX_ZEROES_BLOCKS as usize)
                    .map(move |o| Piece {
                        req,
                        opcode: nvm::WRITE_ZEROES,
                        slba: slba + o,
                        blocks: MAX_ZEROES_BLOCKS.min(blocks - o),
                        fua: false,
                        data: None,
                    }),
            );
            return Ok(());
        }
        // No Write Zeroes: write from one zeroed buffer the device only reads.
        let iova = self.zero_buffer()?;
        let req = self.new_request(tag, IoKind::WriteZeroes, None, None);
        let lba = self.ns.lba_size as u64;
        let step = self.ctrl.max_transfer as u64 / lba;
        self.enqueue(
            req,
            (0..blocks).step_by(step as usize).map(move |o| {
                let n = step.min(blocks - o);
                Piece {
                    req,
                    opcode: nvm::WRITE,
                    slba: slba + o,
                    blocks: n,
                    fua: false,
                    data: Some((iova, (n * lba) as usize)),
                }
            }),
        );
        Ok(())
    }

    fn poll(
        &mut self,
        completions: &mut Vec<Completion>,
    ) -> std::result::Result<usize, BlockError> {
        self.ring();
        let before = self.done.len();
        let mut idle = true;
        // Completions the controller posted before any failure are real results.
        if !self.deleted && self.reap() {
            idle = self.done.len() == before;
            self.pump();
            self.ring();
        }
        if self.ctrl.is_failed() {
            if self.active > 0 {
                self.fail_all();
            }
        } else {
            self.maybe_slow_path(idle);
        }
        let n = self.done.len();
        completions.append(&mut self.done);
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> std::result::Result<(), BlockError> {
        self.ring();
        if self.active == 0 || !self.done.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let mut spins = 0u32;
        loop {
            if self.cq.peek().is_some() || self.ctrl.is_failed() {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                let now = Instant::now();
                if now >= self.next_check {
                    self.slow_path(now);
                    if !self.done.is_empty() {
                        return Ok(());
                    }
                }
                if now >= deadline {
                    return Ok(());
                }
            }
            std::hint::spin_loop();
        }
    }

    fn in_flight(&self) -> usize {
        self.active + self.done.len()
    }

    fn alloc_buf(&self, len: usize) -> std::result::Result<DmaBuf, BlockError> {
        Ok(self.pool.alloc(len)?)
    }
}

impl Drop for NvmeQueuePair {
    fn drop(&mut self) {
        // Let what is in flight finish (bounded), then delete the queues.
        let deadline = Instant::now() + self.ctrl.config.io_timeout.min(Duration::from_secs(5));
        let mut sink = Vec::new();
        while self.active > 0 && !self.ctrl.is_failed() && Instant::now() < deadline {
            let _ = self.wait(Duration::from_millis(10));
            let _ = self.poll(&mut sink);
            sink.clear();
        }
        if self.delete() {
            self.ctrl.put_qid(self.qid);
        } else {
            // The controller may still write into this memory: leak it rather
            // than let it be reused.
            tracing::error!(ctrl = %self.ctrl.name, qid = self.qid, "queue deletion failed; leaking its DMA memory");
            std::mem::forget(self.mem.clone());
            std::mem::forget(std::mem::take(&mut self.requests));
            std::mem::forget(self.pool.clone());
        }
    }
}
