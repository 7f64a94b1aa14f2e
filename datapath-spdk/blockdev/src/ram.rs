//! A device in memory, for tests: I/O completes at submission, and faults can be
//! injected to exercise the error and crash paths of the layers above.
//!
//! It models a volatile write cache: a write without FUA is readable at once
//! but is lost by [`RamDevice::power_loss`] unless a flush came after it.

use crate::{
    check_range, BlockDevice, BlockError, Completion, DeviceInfo, DmaBuf, IoKind, QueuePair, Result,
};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A fault to inject into a [`RamDevice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamFault {
    /// Every read and write fails.
    FailAll,
    /// Every write fails (reads still work).
    FailWrites,
    /// The next write stores only its first `keep` bytes and fails: a torn write,
    /// as a crash in the middle of it would leave.
    TearNextWrite { keep: usize },
}

#[derive(Debug)]
struct Inner {
    data: Vec<u8>,
    fault: Option<RamFault>,
    /// Writes without FUA since the last flush, as (offset, the bytes they
    /// replaced): what a power loss undoes.
    volatile: Vec<(usize, Vec<u8>)>,
    /// Durable writes (FUA, trims) made while `volatile` was not empty, as
    /// (offset, bytes): a power loss keeps them over the undone ones.
    durable_after: Vec<(usize, Vec<u8>)>,
}

impl Inner {
    fn store(&mut self, o: usize, bytes: &[u8], fua: bool) {
        if !fua {
            self.volatile
                .push((o, self.data[o..o + bytes.len()].to_vec()));
        } else if !self.volatile.is_empty() {
            self.durable_after.push((o, bytes.to_vec()));
        }
        self.data[o..o + bytes.len()].copy_from_slice(bytes);
    }
}

/// A memory-backed device. Clones share the same bytes, so a test can drop a store
/// ("crash") and open it again on the same data.
#[derive(Debug, Clone)]
pub struct RamDevice {
    inner: Arc<Mutex<Inner>>,
    block_size: u32,
    name: String,
}

impl RamDevice {
    /// A zeroed device of `size` bytes (rounded down to the 4 KiB block).
    pub fn new(size: u64) -> Self {
        let size = size - size % 4096;
        RamDevice {
            inner: Arc::new(Mutex::new(Inner {
                data: vec![0; size as usize],
                fault: None,
                volatile: Vec::new(),
                durable_after: Vec::new(),
            })),
            block_size: 4096,
            name: format!("ram:{size}"),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The data stays consistent even if a test thread panicked holding it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn size(&self) -> u64 {
        self.lock().data.len() as u64
    }

    /// Sets (or clears) the injected fault.
    pub fn inject(&self, fault: Option<RamFault>) {
        self.lock().fault = fault;
    }

    /// Writes not yet made durable by a flush.
    pub fn unflushed(&self) -> usize {
        self.lock().volatile.len()
    }

    /// The power fails: every write without FUA since the last flush is lost
    /// (its bytes go back to what they were); durable writes stay.
    pub fn power_loss(&self) {
        let mut g = self.lock();
        let g = &mut *g;
        for (o, old) in g.volatile.drain(..).rev() {
            g.data[o..o + old.len()].copy_from_slice(&old);
        }
        for (o, new) in g.durable_after.drain(..) {
            g.data[o..o + new.len()].copy_from_slice(&new);
        }
    }

    /// Runs `f` on the raw bytes (to corrupt them, or inspect them).
    pub fn with_data<R>(&self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        f(&mut self.lock().data)
    }
}

impl BlockDevice for RamDevice {
    fn info(&self) -> DeviceInfo {
        let size = self.lock().data.len() as u64;
        DeviceInfo {
            block_size: self.block_size,
            num_blocks: size / self.block_size as u64,
            name: self.name.clone(),
            backend: "ram",
            location: "memory".into(),
            identity: Default::default(),
        }
    }

    fn open_queue(&self) -> Result<Box<dyn QueuePair>> {
        Ok(Box::new(RamQueue {
            dev: self.clone(),
            done: Vec::new(),
        }))
    }
}

#[derive(Debug)]
struct RamQueue {
    dev: RamDevice,
    done: Vec<Completion>,
}

impl RamQueue {
    fn finish(&mut self, tag: u64, kind: IoKind, result: Result<usize>, buf: Option<DmaBuf>) {
        self.done.push(Completion {
            tag,
            kind,
            result,
            buf,
        });
    }
}

impl QueuePair for RamQueue {
    fn submit_read(&mut self, tag: u64, offset: u64, mut buf: DmaBuf) -> Result<()> {
        check_range(self.dev.size(), 4096, offset, buf.len() as u64)?;
        let result = {
            let g = self.dev.lock();
            check_range(g.data.len() as u64, 4096, offset, buf.len() as u64).and_then(|_| {
                if g.fault == Some(RamFault::FailAll) {
                    return Err(BlockError::Injected("read failed"));
                }
                let o = offset as usize;
                let n = buf.len();
                buf.as_mut_slice().copy_from_slice(&g.data[o..o + n]);
                Ok(n)
            })
        };
        self.finish(tag, IoKind::Read, result, Some(buf));
        Ok(())
    }

    fn submit_write(&mut self, tag: u64, offset: u64, buf: DmaBuf, fua: bool) -> Result<()> {
        check_range(self.dev.size(), 4096, offset, buf.len() as u64)?;
        let result = {
            let mut g = self.dev.lock();
            let size = g.data.len() as u64;
            check_range(size, 4096, offset, buf.len() as u64).and_then(|_| {
                let o = offset as usize;
                match g.fault {
                    Some(RamFault::FailAll) | Some(RamFault::FailWrites) => {
                        Err(BlockError::Injected("write failed"))
                    }
                    Some(RamFault::TearNextWrite { keep }) => {
                        let keep = keep.min(buf.len());
                        g.store(o, &buf.as_slice()[..keep], fua);
                        g.fault = None;
                        Err(BlockError::Injected("torn write"))
                    }
                    None => {
                        g.store(o, buf.as_slice(), fua);
                        Ok(buf.len())
                    }
                }
            })
        };
        self.finish(tag, IoKind::Write, result, Some(buf));
        Ok(())
    }

    fn submit_flush(&mut self, tag: u64) -> Result<()> {
        let mut g = self.dev.lock();
        let result = match g.fault {
            Some(RamFault::FailAll) => Err(BlockError::Injected("flush failed")),
            _ => {
                g.volatile.clear();
                g.durable_after.clear();
                Ok(0)
            }
        };
        drop(g);
        self.finish(tag, IoKind::Flush, result, None);
        Ok(())
    }

    fn submit_trim(&mut self, tag: u64, offset: u64, len: u64) -> Result<()> {
        check_range(self.dev.size(), 4096, offset, len)?;
        let result = {
            let mut g = self.dev.lock();
            check_range(g.data.len() as u64, 4096, offset, len).map(|_| {
                let (o, n) = (offset as usize, len as usize);
                if g.volatile.is_empty() {
                    g.data[o..o + n].fill(0);
                } else {
                    g.store(o, &vec![0; n], true);
                }
                0
            })
        };
        self.finish(tag, IoKind::Trim, result, None);
        Ok(())
    }

    fn poll(&mut self, completions: &mut Vec<Completion>) -> Result<usize> {
        let n = self.done.len();
        completions.append(&mut self.done);
        Ok(n)
    }

    fn wait(&mut self, _timeout: Duration) -> Result<()> {
        // Everything completes at submission: there is never anything to wait for.
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }
}
