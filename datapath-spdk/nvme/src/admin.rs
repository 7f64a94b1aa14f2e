//! The admin queue: one command at a time, polled to completion with a deadline.
//!
//! Admin commands are rare (bring-up, queue creation and deletion, Abort), so the
//! admin queue sits behind the controller's mutex and each command is waited for
//! synchronously. The I/O path never takes that mutex except to abort a command
//! that already timed out.

#![deny(unsafe_code)]

use crate::device::DeviceAccess;
use crate::hw::DmaRegion;
use crate::queue::{CompletionQueue, SubmissionQueue};
use crate::spec::{self, admin, csts, Command, Completion, PAGE, SQE_SIZE};
use crate::{NvmeError, Result};
use std::time::{Duration, Instant};

/// The admin submission/completion queue pair and a page for command data.
#[derive(Debug)]
pub struct AdminQueue {
    sq: SubmissionQueue,
    cq: CompletionQueue,
    mem: DmaRegion,
    data_off: usize,
    next_cid: u16,
    name: String,
}

impl AdminQueue {
    /// Allocates the rings (`entries` each) and a data page.
    pub fn new(dev: &dyn DeviceAccess, entries: u16, stride: usize) -> Result<Self> {
        let sq_bytes = (entries as usize * SQE_SIZE).next_multiple_of(PAGE);
        let cq_bytes = (entries as usize * spec::CQE_SIZE).next_multiple_of(PAGE);
        let mem = dev.alloc_dma(sq_bytes + cq_bytes + PAGE)?;
        Ok(AdminQueue {
            sq: SubmissionQueue::new(0, entries, mem.clone(), 0, stride),
            cq: CompletionQueue::new(0, entries, mem.clone(), sq_bytes, stride),
            data_off: sq_bytes + cq_bytes,
            mem,
            next_cid: 0,
            name: dev.name().to_string(),
        })
    }

    pub fn sq_iova(&self) -> u64 {
        self.sq.iova()
    }

    pub fn cq_iova(&self) -> u64 {
        self.cq.iova()
    }

    pub fn entries(&self) -> u16 {
        self.sq.entries()
    }

    /// IOVA of the data page (PRP1 of Identify and the like).
    pub fn data_iova(&self) -> u64 {
        self.mem.iova() + self.data_off as u64
    }

    /// Copies the data page out.
    pub fn data(&self, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.min(PAGE)];
        self.mem.read(self.data_off, &mut b);
        b
    }

    /// Submits `cmd` and polls for its completion; an error status is an error.
    pub fn execute(
        &mut self,
        dev: &dyn DeviceAccess,
        mut cmd: Command,
        what: &str,
        timeout: Duration,
    ) -> Result<Completion> {
        cmd.cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1);
        if !self.sq.push(&cmd) {
            // Only stale entries of timed-out commands can fill it: drain them.
            self.drain();
            if !self.sq.push(&cmd) {
                return Err(NvmeError::Timeout(
                    self.name.clone(),
                    format!("admin queue full ({what})"),
                ));
            }
        }
        self.sq.ring(dev);
        let deadline = Instant::now() + timeout;
        let mut spins = 0u32;
        loop {
            if let Some(c) = self.cq.peek() {
                self.cq.advance();
                self.cq.ring(dev);
                if c.sq_id != 0 {
                    return Err(NvmeError::Protocol(
                        self.name.clone(),
                        format!("admin completion names SQ {}", c.sq_id),
                    ));
                }
                self.sq
                    .set_head(c.sq_head)
                    .map_err(|m| NvmeError::Protocol(self.name.clone(), m))?;
                if c.cid != cmd.cid {
                    // A late completion of an earlier, timed-out command.
                    tracing::debug!(ctrl = %self.name, cid = c.cid, "stale admin completion dropped");
                    continue;
                }
                if !c.status.is_success() {
                    return Err(NvmeError::Command {
                        ctrl: self.name.clone(),
                        what: what.to_string(),
                        status: c.status,
                    });
                }
                return Ok(c);
            }
            spins += 1;
            if spins.is_multiple_of(1024) {
                let st = dev.read32(spec::reg::CSTS);
                if st == u32::MAX {
                    return Err(NvmeError::Failed(
                        self.name.clone(),
                        format!("not responding during {what} (removed?)"),
                    ));
                }
                if st & csts::CFS != 0 {
                    return Err(NvmeError::Failed(
                        self.name.clone(),
                        format!("controller fatal status during {what}"),
                    ));
                }
                if Instant::now() >= deadline {
                    return Err(NvmeError::Timeout(
                        self.name.clone(),
                        format!("{what} did not complete in {timeout:?}"),
                    ));
                }
                if spins >= 1 << 16 {
                    // Slow device (or an emulated one under TCG): stop burning CPU.
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Consumes whatever completions are there (stale ones).
    fn drain(&mut self) {
        while let Some(c) = self.cq.peek() {
            self.cq.advance();
            let _ = self.sq.set_head(c.sq_head);
        }
    }

    /// Identify with the given CNS and NSID; returns the 4 KiB page.
    pub fn identify(
        &mut self,
        dev: &dyn DeviceAccess,
        cns: u32,
        nsid: u32,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.mem.fill(self.data_off, PAGE, 0);
        let mut c = Command::new(admin::IDENTIFY);
        c.nsid = nsid;
        c.prp1 = self.data_iova();
        c.cdw10 = cns;
        self.execute(
            dev,
            c,
            &format!("identify (CNS {cns}, NSID {nsid})"),
            timeout,
        )?;
        Ok(self.data(PAGE))
    }
}
