//! Owned, block-aligned I/O buffers.
//!
//! A [`DmaBuf`] is either on the heap (what io_uring and the RAM device use) or lent
//! by a device's DMA pool (the userspace NVMe driver: hugepage memory mapped for the
//! device, with a known IO virtual address). Either way the owner of the `DmaBuf`
//! owns the bytes; a pool buffer goes back to its pool when dropped. A device that
//! can only do DMA from its own memory uses [`DmaBuf::iova`] to see whether a buffer
//! is already addressable by it, so the chunk store can fill buffers from
//! [`crate::QueuePair::alloc_buf`] and the driver never copies them.

use crate::{BlockError, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Alignment (and length granularity) of every [`DmaBuf`]: the largest logical block
/// size we support, and what O_DIRECT and NVMe PRPs need.
pub const DMA_ALIGN: usize = 4096;

/// Where a pool buffer returns when its [`DmaBuf`] is dropped. Implemented by a
/// device's DMA pool; `give_back` receives exactly what `DmaBuf::from_pool` was given.
pub trait DmaHome: Send + Sync + std::fmt::Debug {
    /// Takes back the memory of a dropped buffer.
    fn give_back(&self, ptr: NonNull<u8>, len: usize, iova: u64);
}

/// An address space in which IO virtual addresses are valid (one per VFIO
/// container or emulated controller). Buffers carry the domain they were mapped in,
/// so a device never uses an IOVA that belongs to another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DmaDomain(u64);

impl DmaDomain {
    /// A new, process-unique domain.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        DmaDomain(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for DmaDomain {
    fn default() -> Self {
        Self::new()
    }
}

enum Backing {
    /// From the global allocator with `Layout(len, DMA_ALIGN)`.
    Heap,
    /// Lent by a device's pool.
    Pool {
        iova: u64,
        domain: DmaDomain,
        home: Arc<dyn DmaHome>,
    },
}

/// An owned, zero-initialised buffer aligned to [`DMA_ALIGN`] whose length is a
/// multiple of it. Handed to a queue by value, so nothing can touch it while the
/// device does.
pub struct DmaBuf {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: DmaBuf uniquely owns its memory (like Box<[u8]>): heap memory, or a pool
// region lent to it alone until it is given back. Moving it to another thread moves
// that ownership; the pool's `DmaHome` is itself Send + Sync.
unsafe impl Send for DmaBuf {}

impl DmaBuf {
    /// A zeroed heap buffer of at least `len` bytes (rounded up to [`DMA_ALIGN`], at
    /// least one block).
    pub fn zeroed(len: usize) -> Result<Self> {
        let len = round_len(len)?;
        let layout = Layout::from_size_align(len, DMA_ALIGN).map_err(|_| BlockError::Alloc(len))?;
        // SAFETY: the layout has a non-zero size (len >= DMA_ALIGN) and a valid
        // power-of-two alignment, as alloc_zeroed requires.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(BlockError::Alloc(len))?;
        Ok(DmaBuf {
            ptr,
            len,
            backing: Backing::Heap,
        })
    }

    /// Wraps memory lent by a device's DMA pool.
    ///
    /// # Safety
    ///
    /// `ptr` must be aligned to [`DMA_ALIGN`] and valid for reads and writes of `len`
    /// bytes (a non-zero multiple of [`DMA_ALIGN`]), initialised, and used by nothing
    /// else until `home.give_back(ptr, len, iova)` is called from this buffer's
    /// drop. `iova` must be the address at which the devices of `domain` reach it.
    pub unsafe fn from_pool(
        ptr: NonNull<u8>,
        len: usize,
        iova: u64,
        domain: DmaDomain,
        home: Arc<dyn DmaHome>,
    ) -> Self {
        DmaBuf {
            ptr,
            len,
            backing: Backing::Pool { iova, domain, home },
        }
    }

    /// Length in bytes (a multiple of [`DMA_ALIGN`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a buffer holds at least one block.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The IO virtual address of the buffer in `domain`, when it was lent by a pool
    /// of that domain (`None` for heap buffers and other domains' buffers).
    pub fn iova(&self, domain: DmaDomain) -> Option<u64> {
        match &self.backing {
            Backing::Pool {
                iova, domain: d, ..
            } if *d == domain => Some(*iova),
            _ => None,
        }
    }

    /// Whether the buffer came from a device's DMA pool.
    pub fn is_pooled(&self) -> bool {
        matches!(self.backing, Backing::Pool { .. })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised bytes owned by self (zeroed at heap
        // allocation, or initialised by the pool per from_pool's contract); the
        // shared borrow of self prevents concurrent mutation through this handle.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; the exclusive borrow of self makes this the only
        // reference to the memory.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Raw pointer for a device to write into; valid while `self` lives.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Zeroes the whole buffer (for reuse).
    pub fn clear(&mut self) {
        self.as_mut_slice().fill(0);
    }
}

impl AsRef<[u8]> for DmaBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

fn round_len(len: usize) -> Result<usize> {
    len.max(1)
        .checked_next_multiple_of(DMA_ALIGN)
        .ok_or(BlockError::Alloc(len))
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        match &self.backing {
            Backing::Heap => {
                if let Ok(layout) = Layout::from_size_align(self.len, DMA_ALIGN) {
                    // SAFETY: ptr was allocated in zeroed() with exactly this layout
                    // and is freed only here, once.
                    unsafe { dealloc(self.ptr.as_ptr(), layout) };
                }
            }
            Backing::Pool { iova, home, .. } => home.give_back(self.ptr, self.len, *iova),
        }
    }
}

impl std::fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.backing {
            Backing::Heap => write!(f, "DmaBuf({} bytes)", self.len),
            Backing::Pool { iova, .. } => write!(f, "DmaBuf({} bytes @ iova {iova:#x})", self.len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn aligned_and_rounded() {
        let mut b = DmaBuf::zeroed(5000).unwrap();
        assert_eq!(b.len(), 8192);
        assert_eq!(b.as_mut_ptr() as usize % DMA_ALIGN, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[8191] = 7;
        assert_eq!(b.as_slice()[8191], 7);
        assert_eq!(DmaBuf::zeroed(0).unwrap().len(), DMA_ALIGN);
        assert!(!b.is_pooled());
        assert_eq!(b.iova(DmaDomain::new()), None);
    }

    /// A pool of one heap block that records what comes back.
    #[derive(Debug, Default)]
    struct OneBlock {
        back: Mutex<Vec<(usize, usize, u64)>>,
    }

    impl DmaHome for OneBlock {
        fn give_back(&self, ptr: NonNull<u8>, len: usize, iova: u64) {
            self.back
                .lock()
                .unwrap()
                .push((ptr.as_ptr() as usize, len, iova));
        }
    }

    #[test]
    fn pool_buffers_carry_their_iova_and_go_home() {
        let home = Arc::new(OneBlock::default());
        let mut backing = DmaBuf::zeroed(DMA_ALIGN).unwrap();
        let ptr = NonNull::new(backing.as_mut_ptr()).unwrap();
        let domain = DmaDomain::new();
        // SAFETY: `backing` outlives the pool buffer (dropped below first) and is not
        // touched while the buffer lives.
        let mut b = unsafe { DmaBuf::from_pool(ptr, DMA_ALIGN, 0x10_0000, domain, home.clone()) };
        assert_eq!(b.iova(domain), Some(0x10_0000));
        assert_eq!(b.iova(DmaDomain::new()), None, "another domain's IOVA");
        b.as_mut_slice()[0] = 1;
        drop(b);
        assert_eq!(backing.as_slice()[0], 1);
        assert_eq!(
            home.back.lock().unwrap().as_slice(),
            &[(ptr.as_ptr() as usize, DMA_ALIGN, 0x10_0000)]
        );
    }
}
