//! Submission and completion queue rings, and PRP construction.
//!
//! A ring lives in DMA memory the controller reads (SQ) or writes (CQ). The
//! driver owns the SQ tail and the CQ head; the controller reports the SQ head in
//! every completion, and marks new CQ entries by flipping the phase tag on each
//! pass around the ring. Both values that come from the device (SQ head, CQ
//! contents) are validated here: garbage is an error, never an index out of range.

#![deny(unsafe_code)]

use crate::device::DeviceAccess;
use crate::hw::DmaRegion;
use crate::spec::{self, Command, Completion, CQE_SIZE, PAGE, SQE_SIZE};
use std::sync::atomic::{fence, Ordering};

/// Byte offset of a queue's doorbell in BAR0: SQ y tail at 2y, CQ y head at 2y+1,
/// in units of the doorbell stride.
pub fn doorbell(qid: u16, completion: bool, stride: usize) -> usize {
    spec::reg::DOORBELLS + (2 * qid as usize + completion as usize) * stride
}

/// A submission queue: the driver writes entries at the tail and rings the doorbell.
#[derive(Debug)]
pub struct SubmissionQueue {
    pub qid: u16,
    mem: DmaRegion,
    base: usize,
    entries: u16,
    tail: u16,
    head: u16,
    doorbell: usize,
    unrung: bool,
}

impl SubmissionQueue {
    /// A queue of `entries` slots at byte `base` of `mem`.
    pub fn new(qid: u16, entries: u16, mem: DmaRegion, base: usize, stride: usize) -> Self {
        SubmissionQueue {
            qid,
            mem,
            base,
            entries,
            tail: 0,
            head: 0,
            doorbell: doorbell(qid, false, stride),
            unrung: false,
        }
    }

    /// IOVA of the ring (for Create I/O SQ / ASQ).
    pub fn iova(&self) -> u64 {
        self.mem.iova() + self.base as u64
    }

    pub fn entries(&self) -> u16 {
        self.entries
    }

    fn used(&self) -> u16 {
        (self.tail + self.entries - self.head) % self.entries
    }

    /// Slots free for new entries (one slot always stays empty: full != empty).
    pub fn free_slots(&self) -> u16 {
        self.entries - 1 - self.used()
    }

    /// Writes `cmd` at the tail; false when the ring is full.
    pub fn push(&mut self, cmd: &Command) -> bool {
        if self.free_slots() == 0 {
            return false;
        }
        let off = self.base + self.tail as usize * SQE_SIZE;
        if !self.mem.write(off, &cmd.encode()) {
            return false;
        }
        self.tail = (self.tail + 1) % self.entries;
        self.unrung = true;
        true
    }

    /// Tells the controller about new entries (one doorbell write per batch).
    pub fn ring(&mut self, dev: &dyn DeviceAccess) {
        if self.unrung {
            // The entries must be visible in memory before the doorbell reaches
            // the device. On x86-64 (TSO) stores are not reordered with later
            // stores, uncached MMIO included, so a compiler barrier is all it
            // takes (as Linux's writel); a port to a weakly ordered CPU needs a
            // device store barrier here.
            fence(Ordering::Release);
            dev.write32(self.doorbell, self.tail as u32);
            self.unrung = false;
        }
    }

    /// Records the SQ head reported by a completion. It must lie between the head
    /// we knew and our tail; anything else is a protocol violation.
    pub fn set_head(&mut self, head: u16) -> Result<(), String> {
        if head >= self.entries {
            return Err(format!(
                "SQ {} head {head} outside a ring of {}",
                self.qid, self.entries
            ));
        }
        let advance = (head + self.entries - self.head) % self.entries;
        if advance > self.used() {
            return Err(format!(
                "SQ {} head {head} passes the tail {} (head was {})",
                self.qid, self.tail, self.head
            ));
        }
        self.head = head;
        Ok(())
    }
}

/// A completion queue: the controller writes entries, the driver consumes them at
/// the head while their phase tag matches the pass it expects.
#[derive(Debug)]
pub struct CompletionQueue {
    mem: DmaRegion,
    base: usize,
    entries: u16,
    head: u16,
    phase: bool,
    doorbell: usize,
    unrung: bool,
}

impl CompletionQueue {
    /// A queue of `entries` slots at byte `base` of `mem` (which must be zeroed:
    /// phase 0 means "not yet written" on the first pass).
    pub fn new(qid: u16, entries: u16, mem: DmaRegion, base: usize, stride: usize) -> Self {
        CompletionQueue {
            mem,
            base,
            entries,
            head: 0,
            phase: true,
            doorbell: doorbell(qid, true, stride),
            unrung: false,
        }
    }

    pub fn iova(&self) -> u64 {
        self.mem.iova() + self.base as u64
    }

    /// The entry at the head, if the controller has written it on this pass.
    pub fn peek(&self) -> Option<Completion> {
        let off = self.base + self.head as usize * CQE_SIZE;
        let dw3 = self.mem.read_u32(off + 12)?;
        if ((dw3 >> 16) & 1 == 1) != self.phase {
            return None;
        }
        // Read the rest only after seeing the phase tag flip.
        fence(Ordering::Acquire);
        let mut b = [0u8; CQE_SIZE];
        if !self.mem.read(off, &mut b) {
            return None;
        }
        Some(Completion::decode(&b))
    }

    /// Consumes the entry at the head.
    pub fn advance(&mut self) {
        self.head += 1;
        if self.head == self.entries {
            self.head = 0;
            self.phase = !self.phase;
        }
        self.unrung = true;
    }

    /// Tells the controller which entries it may reuse.
    pub fn ring(&mut self, dev: &dyn DeviceAccess) {
        if self.unrung {
            dev.write32(self.doorbell, self.head as u32);
            self.unrung = false;
        }
    }
}

/// Space for one command's PRP list: `pages` pages at byte `off` of `mem`.
#[derive(Debug)]
pub struct PrpListSpace<'a> {
    pub mem: &'a DmaRegion,
    pub off: usize,
    pub pages: usize,
}

/// PRP entries per list page.
const PRPS_PER_PAGE: usize = PAGE / 8;

/// How many list pages a transfer of `pages` memory pages needs at most.
pub fn prp_list_pages(pages: usize) -> usize {
    if pages <= 2 {
        0
    } else {
        (pages - 1).div_ceil(PRPS_PER_PAGE - 1)
    }
}

/// PRP1 and PRP2 for `len` bytes (a non-zero multiple of [`PAGE`]) at the
/// page-aligned, IOVA-contiguous address `iova`; writes a PRP list (chained
/// through the last entry of each page when one page is not enough) into `list`
/// when the transfer spans more than two pages.
pub fn build_prps(iova: u64, len: usize, list: &PrpListSpace<'_>) -> Result<(u64, u64), String> {
    if len == 0 || !len.is_multiple_of(PAGE) || !iova.is_multiple_of(PAGE as u64) {
        return Err(format!(
            "transfer of {len} bytes at {iova:#x} is not page aligned"
        ));
    }
    let pages = len / PAGE;
    match pages {
        1 => return Ok((iova, 0)),
        2 => return Ok((iova, iova + PAGE as u64)),
        _ => {}
    }
    if prp_list_pages(pages) > list.pages {
        return Err(format!(
            "transfer of {len} bytes needs more than {} PRP list pages",
            list.pages
        ));
    }
    let entries = pages - 1;
    let mut i = 0; // next data page (1-based into the transfer, minus one)
    let mut page = 0;
    while i < entries {
        let page_off = list.off + page * PAGE;
        let left = entries - i;
        let here = if left <= PRPS_PER_PAGE {
            left
        } else {
            PRPS_PER_PAGE - 1
        };
        for k in 0..here {
            let addr = iova + ((i + k + 1) * PAGE) as u64;
            if !list.mem.write_u64(page_off + 8 * k, addr) {
                return Err("PRP list outside its space".into());
            }
        }
        i += here;
        if i < entries {
            let next = list.mem.iova() + (list.off + (page + 1) * PAGE) as u64;
            if !list.mem.write_u64(page_off + 8 * (PRPS_PER_PAGE - 1), next) {
                return Err("PRP list outside its space".into());
            }
            page += 1;
        }
    }
    Ok((iova, list.mem.iova() + list.off as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::Backing;

    fn region(len: usize, iova: u64) -> DmaRegion {
        DmaRegion::allocate(len, Backing::Ordinary, move |_, _| Ok((iova, None))).unwrap()
    }

    #[test]
    fn sq_flow_control_and_head_validation() {
        let mut sq = SubmissionQueue::new(1, 4, region(4096, 0x10000), 0, 4);
        assert_eq!(sq.free_slots(), 3);
        for _ in 0..3 {
            assert!(sq.push(&Command::new(1)));
        }
        assert!(!sq.push(&Command::new(1)), "full");
        assert!(sq.set_head(4).is_err(), "outside the ring");
        sq.set_head(2).unwrap();
        assert_eq!(sq.free_slots(), 2);
        assert!(sq.set_head(1).is_err(), "backwards past the tail");
        sq.set_head(3).unwrap();
        assert!(sq.push(&Command::new(1)));
        assert!(sq.push(&Command::new(1)));
        assert_eq!(sq.tail, 1, "wrapped");
        sq.set_head(1).unwrap();
        assert_eq!(sq.free_slots(), 3);
    }

    #[test]
    fn cq_phase_and_wrap() {
        let mem = region(4096, 0x20000);
        let mut cq = CompletionQueue::new(1, 2, mem.clone(), 0, 4);
        assert!(cq.peek().is_none(), "zeroed memory is not a completion");
        let post = |slot: usize, cid: u16, phase: bool| {
            let c = Completion {
                dw0: 0,
                sq_head: 0,
                sq_id: 1,
                cid,
                phase,
                status: spec::Status::SUCCESS,
            };
            mem.write(slot * CQE_SIZE, &c.encode());
        };
        post(0, 7, true);
        assert_eq!(cq.peek().unwrap().cid, 7);
        cq.advance();
        assert!(cq.peek().is_none());
        post(1, 8, true);
        cq.advance();
        // Second pass: phase 1 entries left from the first pass are stale.
        assert!(cq.peek().is_none());
        post(0, 9, false);
        assert_eq!(cq.peek().unwrap().cid, 9);
    }

    #[test]
    fn prps_one_two_list_and_chain() {
        let list_mem = region(4 * PAGE, 0x8000_0000);
        let space = PrpListSpace {
            mem: &list_mem,
            off: PAGE,
            pages: 3,
        };
        let d = 0x4000_0000u64;
        assert_eq!(build_prps(d, PAGE, &space).unwrap(), (d, 0));
        assert_eq!(
            build_prps(d, 2 * PAGE, &space).unwrap(),
            (d, d + PAGE as u64)
        );
        assert!(build_prps(d + 512, PAGE, &space).is_err());
        assert!(build_prps(d, 100, &space).is_err());
        let (p1, p2) = build_prps(d, 5 * PAGE, &space).unwrap();
        assert_eq!((p1, p2), (d, 0x8000_0000 + PAGE as u64));
        for k in 0..4 {
            assert_eq!(
                list_mem.read_u64(PAGE + 8 * k),
                Some(d + (k as u64 + 1) * PAGE as u64)
            );
        }
        // 1024 pages: 1023 entries = 511 + chain, then 512 in the second page.
        let (_, p2) = build_prps(d, 1024 * PAGE, &space).unwrap();
        assert_eq!(p2, 0x8000_0000 + PAGE as u64);
        assert_eq!(
            list_mem.read_u64(PAGE + 8 * 511),
            Some(0x8000_0000 + 2 * PAGE as u64),
            "chain pointer"
        );
        assert_eq!(
            list_mem.read_u64(2 * PAGE),
            Some(d + 512 * PAGE as u64),
            "first entry of the second list page"
        );
        assert_eq!(
            list_mem.read_u64(2 * PAGE + 8 * 511),
            Some(d + 1023 * PAGE as u64)
        );
        assert_eq!(prp_list_pages(1024), 3);
        assert!(
            build_prps(d, 4096 * PAGE, &space).is_err(),
            "too many pages"
        );
    }
}
