//! The audited core: every `unsafe` of the crate lives in this module.
//!
//! What is here, and nothing else:
//! - [`DmaRegion`]: memory a device reaches by DMA (hugepages or locked pages), with
//!   its IO virtual address, accessed only through raw-pointer copies and volatile
//!   loads/stores (never through Rust references, since the device may write it at
//!   any time), every access bounds-checked;
//! - [`Bar`]: a memory-mapped register window (BAR0), volatile 32-bit accesses,
//!   bounds-checked (an out-of-range read returns all ones like a missing device);
//! - [`pool`]: the DMA buffer pool that lends [`DmaBuf`]s out of DMA regions; it is
//!   here because lending the same bytes twice would alias two owned buffers;
//! - [`vfio`]: the VFIO container, group and device ioctls, PCI config space, the
//!   BAR mapping and IOMMU mappings.
//!
//! The driver above (queues, PRPs, commands, timeouts, the emulator) is safe Rust and
//! only sees these types' safe methods.

#![allow(unsafe_code)]

pub mod pool;
pub mod vfio;

use crate::{NvmeError, Result};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// Size of a huge page (x86-64 default hugetlb size).
pub const HUGE_PAGE: usize = 2 << 20;

/// Undoes an IOMMU mapping when the last handle of a region goes away.
pub trait IommuUnmap: Send + Sync + std::fmt::Debug {
    fn unmap(&self, iova: u64, len: usize);
}

/// How host memory for DMA is backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Huge pages (MAP_HUGETLB), falling back to locked ordinary pages with a
    /// warning when none are reserved.
    HugeOrLocked,
    /// Ordinary pages (the emulator: nothing needs them pinned).
    Ordinary,
}

/// An anonymous private mapping, unmapped on drop.
#[derive(Debug)]
struct HostMemory {
    ptr: NonNull<u8>,
    len: usize,
    huge: bool,
}

// SAFETY: the mapping is owned by this value alone; raw pointers to it are only
// dereferenced through DmaRegion's bounds-checked accessors.
unsafe impl Send for HostMemory {}
// SAFETY: see Send; shared access goes through raw-pointer copies, not references.
unsafe impl Sync for HostMemory {}

static WARNED_NO_HUGEPAGES: AtomicBool = AtomicBool::new(false);

fn mmap_anon(len: usize, huge: bool) -> std::io::Result<NonNull<u8>> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
    if huge {
        flags |= libc::MAP_HUGETLB;
    }
    // SAFETY: a new anonymous mapping at an address the kernel chooses: it cannot
    // overlap or alter any memory this process already uses.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap returned null"))
}

impl HostMemory {
    fn alloc(len: usize, backing: Backing) -> Result<Self> {
        let page = if backing == Backing::HugeOrLocked {
            HUGE_PAGE
        } else {
            4096
        };
        let len = len
            .max(1)
            .checked_next_multiple_of(page)
            .ok_or_else(|| NvmeError::Dma(format!("region of {len} bytes")))?;
        if backing == Backing::HugeOrLocked {
            match mmap_anon(len, true) {
                Ok(ptr) => {
                    return Ok(HostMemory {
                        ptr,
                        len,
                        huge: true,
                    })
                }
                Err(e) => {
                    if !WARNED_NO_HUGEPAGES.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "no hugepages for DMA memory ({e}); using locked 4 KiB pages \
                             (reserve some: echo N > /proc/sys/vm/nr_hugepages)"
                        );
                    }
                }
            }
        }
        let ptr = mmap_anon(len, false)
            .map_err(|e| NvmeError::Dma(format!("mmap of {len} bytes: {e}")))?;
        let mem = HostMemory {
            ptr,
            len,
            huge: false,
        };
        if backing == Backing::HugeOrLocked {
            // VFIO pins what it maps anyway; locking keeps the fallback honest
            // when the memory is used before it is mapped.
            // SAFETY: mlock only changes residency of our own mapping [ptr, ptr+len).
            let rc = unsafe { libc::mlock(mem.ptr.as_ptr().cast(), mem.len) };
            if rc != 0 {
                tracing::warn!(
                    "mlock of {len} bytes of DMA memory failed: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(mem)
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: [ptr, ptr+len) is the mapping created in alloc, unmapped once here;
        // no DmaRegion handle (the only users) outlives this value.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[derive(Debug)]
struct RegionInner {
    mem: HostMemory,
    iova: u64,
    unmap: Option<Arc<dyn IommuUnmap>>,
}

impl Drop for RegionInner {
    fn drop(&mut self) {
        // The device must lose access before the memory goes back to the system.
        if let Some(u) = &self.unmap {
            u.unmap(self.iova, self.mem.len);
        }
    }
}

/// Memory a device reaches by DMA at [`DmaRegion::iova`]. Cloning shares it; it is
/// unmapped from the IOMMU and freed when the last handle goes.
#[derive(Debug, Clone)]
pub struct DmaRegion {
    inner: Arc<RegionInner>,
}

/// A handle that does not keep a region alive (the emulator's IOMMU table).
#[derive(Debug, Clone)]
pub struct WeakDmaRegion(Weak<RegionInner>);

impl WeakDmaRegion {
    pub fn upgrade(&self) -> Option<DmaRegion> {
        self.0.upgrade().map(|inner| DmaRegion { inner })
    }

    /// Whether the region still exists.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

impl DmaRegion {
    /// Allocates host memory for DMA. `map` is called with (host address, length)
    /// and returns the IOVA and the unmapper (or an error, and the memory is freed).
    pub fn allocate(
        len: usize,
        backing: Backing,
        map: impl FnOnce(u64, usize) -> Result<(u64, Option<Arc<dyn IommuUnmap>>)>,
    ) -> Result<Self> {
        let mem = HostMemory::alloc(len, backing)?;
        let (iova, unmap) = map(mem.ptr.as_ptr() as u64, mem.len)?;
        Ok(DmaRegion {
            inner: Arc::new(RegionInner { mem, iova, unmap }),
        })
    }

    /// Length in bytes (rounded up to the page size).
    pub fn len(&self) -> usize {
        self.inner.mem.len
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// IO virtual address of byte 0.
    pub fn iova(&self) -> u64 {
        self.inner.iova
    }

    /// Whether the memory is huge pages.
    pub fn is_huge(&self) -> bool {
        self.inner.mem.huge
    }

    pub fn downgrade(&self) -> WeakDmaRegion {
        WeakDmaRegion(Arc::downgrade(&self.inner))
    }

    fn base(&self) -> *mut u8 {
        self.inner.mem.ptr.as_ptr()
    }

    fn in_range(&self, off: usize, len: usize) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len())
    }

    /// Copies `dst.len()` bytes at `off` out of the region; false when out of range.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.in_range(off, dst.len()) {
            return false;
        }
        // SAFETY: [off, off+len) lies inside the live mapping (checked above; self
        // keeps it alive); dst is a distinct Rust buffer. A raw copy never forms a
        // reference to memory a device may be writing.
        unsafe { std::ptr::copy_nonoverlapping(self.base().add(off), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies `src` into the region at `off`; false when out of range.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if !self.in_range(off, src.len()) {
            return false;
        }
        // SAFETY: as in read, in the other direction.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base().add(off), src.len()) };
        true
    }

    /// Sets `len` bytes at `off` to `byte`; false when out of range.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> bool {
        if !self.in_range(off, len) {
            return false;
        }
        // SAFETY: [off, off+len) lies inside the live mapping (checked above).
        unsafe { std::ptr::write_bytes(self.base().add(off), byte, len) };
        true
    }

    /// Volatile load of a little-endian u32 at a 4-byte aligned `off`.
    pub fn read_u32(&self, off: usize) -> Option<u32> {
        if !off.is_multiple_of(4) || !self.in_range(off, 4) {
            return None;
        }
        // SAFETY: in range and aligned (checked; the mapping is page aligned); a
        // volatile load because the device writes this memory behind our back.
        Some(u32::from_le(unsafe {
            std::ptr::read_volatile(self.base().add(off).cast::<u32>())
        }))
    }

    /// Volatile store of a little-endian u32 at a 4-byte aligned `off`.
    pub fn write_u32(&self, off: usize, v: u32) -> bool {
        if !off.is_multiple_of(4) || !self.in_range(off, 4) {
            return false;
        }
        // SAFETY: in range and aligned (checked); volatile so the store is not
        // elided or merged: a device reads it.
        unsafe { std::ptr::write_volatile(self.base().add(off).cast::<u32>(), v.to_le()) };
        true
    }

    /// Store of a little-endian u64 at an 8-byte aligned `off` (PRP list entries).
    pub fn write_u64(&self, off: usize, v: u64) -> bool {
        if !off.is_multiple_of(8) || !self.in_range(off, 8) {
            return false;
        }
        // SAFETY: in range and aligned (checked).
        unsafe { std::ptr::write_volatile(self.base().add(off).cast::<u64>(), v.to_le()) };
        true
    }

    /// Load of a little-endian u64 at an 8-byte aligned `off`.
    pub fn read_u64(&self, off: usize) -> Option<u64> {
        if !off.is_multiple_of(8) || !self.in_range(off, 8) {
            return None;
        }
        // SAFETY: in range and aligned (checked).
        Some(u64::from_le(unsafe {
            std::ptr::read_volatile(self.base().add(off).cast::<u64>())
        }))
    }
}

/// A memory-mapped register window (BAR0 of a PCI function).
#[derive(Debug)]
pub struct Bar {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: MMIO registers are accessed only with volatile 32-bit loads and stores
// through the raw pointer; the hardware serialises them, so sharing is sound.
unsafe impl Send for Bar {}
// SAFETY: see Send.
unsafe impl Sync for Bar {}

impl Bar {
    /// Length of the window.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// 32-bit register read; all ones outside the window (what a PCI read of a
    /// missing device returns).
    pub fn read32(&self, off: usize) -> u32 {
        if !off.is_multiple_of(4) || off.checked_add(4).is_none_or(|e| e > self.len) {
            return u32::MAX;
        }
        // SAFETY: aligned and inside the mapping (checked), which lives as long as
        // self (replaced, never unmapped, on device release).
        u32::from_le(unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(off).cast::<u32>()) })
    }

    /// 32-bit register write; ignored outside the window.
    pub fn write32(&self, off: usize, v: u32) {
        if !off.is_multiple_of(4) || off.checked_add(4).is_none_or(|e| e > self.len) {
            return;
        }
        // SAFETY: as in read32.
        unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(off).cast::<u32>(), v.to_le()) };
    }

    /// Replaces the device mapping by anonymous zeroed memory at the same address,
    /// atomically: a racing doorbell write from another thread lands in that memory
    /// instead of faulting, and the device file is no longer referenced by the
    /// mapping (so the kernel can take the device away).
    pub fn detach(&self) -> std::io::Result<()> {
        // SAFETY: MAP_FIXED over exactly our own mapping [ptr, ptr+len): no other
        // memory is affected, and the address stays valid for the accessors.
        let p = unsafe {
            libc::mmap(
                self.ptr.as_ptr().cast(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        // SAFETY: the mapping made in vfio::map_bar, unmapped once here.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A non-blocking eventfd (the VFIO device request notification).
#[derive(Debug)]
pub struct EventFd(std::os::fd::OwnedFd);

impl EventFd {
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Ok(EventFd(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        }))
    }

    pub fn raw(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }

    /// Whether the event fired since the last call (consumes it).
    pub fn fired(&self) -> bool {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into v, which lives across the call.
        let n = unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
        n == 8 && v > 0
    }

    /// Signals the event (tests).
    pub fn signal(&self) {
        let v = 1u64;
        // SAFETY: writes 8 bytes from v, which lives across the call.
        unsafe { libc::write(self.raw(), (&v as *const u64).cast(), 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(len: usize) -> DmaRegion {
        DmaRegion::allocate(len, Backing::Ordinary, |_, _| Ok((0x1000, None))).unwrap()
    }

    #[test]
    fn accessors_are_bounds_checked() {
        let r = region(4096);
        assert_eq!(r.len(), 4096);
        assert!(r.write(4090, &[1, 2, 3, 4, 5, 6]));
        assert!(!r.write(4091, &[0; 6]));
        assert!(!r.write(usize::MAX, &[0; 2]));
        let mut b = [0u8; 6];
        assert!(r.read(4090, &mut b));
        assert_eq!(b, [1, 2, 3, 4, 5, 6]);
        assert!(r.write_u32(8, 0xdead_beef));
        assert_eq!(r.read_u32(8), Some(0xdead_beef));
        assert_eq!(r.read_u32(9), None, "misaligned");
        assert_eq!(r.read_u32(4096), None);
        assert!(r.write_u64(16, 7));
        assert_eq!(r.read_u64(16), Some(7));
        assert!(r.fill(0, 4096, 0));
        assert_eq!(r.read_u32(8), Some(0));
        assert!(!r.fill(1, 4096, 0));
    }

    #[test]
    fn unmap_runs_when_the_last_handle_goes() {
        #[derive(Debug, Default)]
        struct Log(std::sync::Mutex<Vec<(u64, usize)>>);
        impl IommuUnmap for Log {
            fn unmap(&self, iova: u64, len: usize) {
                self.0.lock().unwrap().push((iova, len));
            }
        }
        let log = Arc::new(Log::default());
        let l2 = log.clone();
        let r = DmaRegion::allocate(100, Backing::Ordinary, move |_, _| {
            Ok((0x2000, Some(l2 as Arc<dyn IommuUnmap>)))
        })
        .unwrap();
        let weak = r.downgrade();
        let r2 = r.clone();
        drop(r);
        assert!(log.0.lock().unwrap().is_empty());
        assert!(weak.upgrade().is_some());
        drop(r2);
        assert_eq!(log.0.lock().unwrap().as_slice(), &[(0x2000, 4096)]);
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn eventfd_fires_once() {
        let e = EventFd::new().unwrap();
        assert!(!e.fired());
        e.signal();
        assert!(e.fired());
        assert!(!e.fired());
    }
}
