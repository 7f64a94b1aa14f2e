//! The datapath's block-device layer.
//!
//! A [`BlockDevice`] is one drive; a [`QueuePair`] is one submission/completion queue
//! on it, owned by exactly one reactor thread (it is `Send`, never shared). I/O is
//! split-phase: submit with a caller-chosen tag and an owned, block-aligned
//! [`DmaBuf`], then [`QueuePair::poll`] (non-blocking) or [`QueuePair::wait`]
//! (blocking, for an idle reactor) to collect [`Completion`]s, which hand the buffer
//! back. Backends here are [`UringDevice`] (io_uring, O_DIRECT, on a file or block
//! device) and [`RamDevice`] (memory, with fault injection for tests); the userspace
//! NVMe driver (crate `cairn-nvme`) implements the same traits. Buffers should come
//! from [`QueuePair::alloc_buf`]: a device with its own DMA memory (NVMe over VFIO)
//! lends buffers it can reach without a copy; the others return heap buffers.
//!
//! This crate owns buffers and queues, nothing about what is stored in them. It must
//! never complete an I/O it did not perform (a short or failed I/O is reported as
//! such), and never free a buffer the kernel may still be writing into. The only
//! `unsafe` code is the aligned allocation in [`DmaBuf`] (and its constructor for
//! pool memory) and the io_uring submissions, each with its `// SAFETY:` argument.

mod dma;
mod identity;
mod ram;
mod uring;

pub use dma::{DmaBuf, DmaDomain, DmaHome, DMA_ALIGN};
pub use identity::{block_device_identity, DeviceIdentity};
pub use ram::{RamDevice, RamFault};
pub use uring::UringDevice;

use std::time::Duration;

/// Errors of the block-device layer.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// The operating system reported an error.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The request is not aligned to the block size or lies outside the device.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The device is gone, truncated, or otherwise unusable.
    #[error("device failed: {0}")]
    Failed(String),
    /// A fault injected by a test.
    #[error("injected fault: {0}")]
    Injected(&'static str),
    /// An aligned buffer could not be allocated.
    #[error("cannot allocate a DMA buffer of {0} bytes")]
    Alloc(usize),
}

impl BlockError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BlockError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result of this crate.
pub type Result<T, E = BlockError> = std::result::Result<T, E>;

/// What a device is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Logical block size in bytes; every offset and length is a multiple of it.
    pub block_size: u32,
    /// Number of logical blocks.
    pub num_blocks: u64,
    /// Short name for logs and reports, e.g. `uring:/var/lib/cairn/d0`.
    pub name: String,
    /// The backend driving it: `uring`, `nvme` or `ram`.
    pub backend: &'static str,
    /// Where it is, without the backend: a path (`/dev/nvme0n1`), or a PCI address
    /// and namespace (`0000:00:04.0/ns1`).
    pub location: String,
    /// What the hardware says it is; all `None` for files and memory.
    pub identity: DeviceIdentity,
}

impl DeviceInfo {
    /// Size of the device in bytes.
    pub fn size(&self) -> u64 {
        self.num_blocks * self.block_size as u64
    }
}

/// One drive. Implementations are shared between threads only to open queues and
/// to check health; all I/O goes through a [`QueuePair`].
pub trait BlockDevice: Send + Sync + std::fmt::Debug {
    /// Geometry and name.
    fn info(&self) -> DeviceInfo;
    /// Opens a new queue pair, to be owned by one thread.
    fn open_queue(&self) -> Result<Box<dyn QueuePair>>;
    /// Cheap health check (called every few hundred milliseconds): is the device
    /// still the one we opened, at the size we opened it?
    fn check(&self) -> Result<()> {
        Ok(())
    }
    /// A zeroed buffer of at least `len` bytes that this device can do I/O on
    /// without a copy (a heap buffer unless the device has its own DMA memory).
    fn alloc_buf(&self, len: usize) -> Result<DmaBuf> {
        DmaBuf::zeroed(len)
    }
}

/// What an I/O did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

/// A finished I/O.
#[derive(Debug)]
pub struct Completion {
    /// The tag given at submission.
    pub tag: u64,
    pub kind: IoKind,
    /// Bytes transferred (0 for flush/trim), or the error.
    pub result: Result<usize>,
    /// The buffer given at submission, returned for reuse (reads: now filled).
    pub buf: Option<DmaBuf>,
}

/// A submission/completion queue on one device, owned by one reactor thread.
pub trait QueuePair: Send + std::fmt::Debug {
    /// Reads `buf.len()` bytes at byte `offset` into `buf`.
    fn submit_read(&mut self, tag: u64, offset: u64, buf: DmaBuf) -> Result<()>;
    /// Writes `buf` at byte `offset`; with `fua` the completion means the data is
    /// on stable media (io_uring: `RWF_DSYNC`).
    fn submit_write(&mut self, tag: u64, offset: u64, buf: DmaBuf, fua: bool) -> Result<()>;
    /// Makes every completed write durable.
    fn submit_flush(&mut self, tag: u64) -> Result<()>;
    /// Tells the device that a byte range no longer holds data (best effort).
    fn submit_trim(&mut self, tag: u64, offset: u64, len: u64) -> Result<()>;
    /// Appends finished I/Os to `completions` without blocking; returns how many.
    fn poll(&mut self, completions: &mut Vec<Completion>) -> Result<usize>;
    /// Blocks until at least one I/O completes or `timeout` passes. Returns at once
    /// when nothing is in flight.
    fn wait(&mut self, timeout: Duration) -> Result<()>;
    /// I/Os submitted and not yet returned by `poll`.
    fn in_flight(&self) -> usize;
    /// Makes a byte range read back as zeroes. Devices without a cheaper way
    /// refuse it (the caller then writes zeroed buffers).
    fn submit_write_zeroes(&mut self, tag: u64, offset: u64, len: u64) -> Result<()> {
        let _ = (tag, offset, len);
        Err(BlockError::Invalid(
            "write zeroes is not supported by this device".into(),
        ))
    }
    /// A zeroed buffer of at least `len` bytes that this queue's device can do I/O
    /// on without a copy (see [`BlockDevice::alloc_buf`]).
    fn alloc_buf(&self, len: usize) -> Result<DmaBuf> {
        DmaBuf::zeroed(len)
    }
}

pub(crate) fn check_range(info_size: u64, block: u64, offset: u64, len: u64) -> Result<()> {
    if !offset.is_multiple_of(block) || !len.is_multiple_of(block) {
        return Err(BlockError::Invalid(format!(
            "offset {offset} / length {len} not aligned to {block}"
        )));
    }
    match offset.checked_add(len) {
        Some(end) if end <= info_size => Ok(()),
        _ => Err(BlockError::Invalid(format!(
            "range {offset}+{len} beyond device end {info_size}"
        ))),
    }
}
