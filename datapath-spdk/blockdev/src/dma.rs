//! Owned, block-aligned I/O buffers.

use crate::{BlockError, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment (and length granularity) of every [`DmaBuf`]: the largest logical block
/// size we support, and what O_DIRECT and NVMe PRPs need.
pub const DMA_ALIGN: usize = 4096;

/// An owned, zero-initialised buffer aligned to [`DMA_ALIGN`] whose length is a
/// multiple of it. Handed to a queue by value, so nothing can touch it while the
/// device does.
pub struct DmaBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: DmaBuf uniquely owns its allocation (like Box<[u8]>); moving it to another
// thread moves that ownership, and no other handle to the memory exists.
unsafe impl Send for DmaBuf {}

impl DmaBuf {
    /// A zeroed buffer of at least `len` bytes (rounded up to [`DMA_ALIGN`], at
    /// least one block).
    pub fn zeroed(len: usize) -> Result<Self> {
        let len = len
            .max(1)
            .checked_next_multiple_of(DMA_ALIGN)
            .ok_or(BlockError::Alloc(len))?;
        let layout = Layout::from_size_align(len, DMA_ALIGN).map_err(|_| BlockError::Alloc(len))?;
        // SAFETY: the layout has a non-zero size (len >= DMA_ALIGN) and a valid
        // power-of-two alignment, as alloc_zeroed requires.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(BlockError::Alloc(len))?;
        Ok(DmaBuf { ptr, len })
    }

    /// Length in bytes (a multiple of [`DMA_ALIGN`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a buffer holds at least one block.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised (zeroed at allocation) bytes owned by
        // self; the shared borrow of self prevents concurrent mutation.
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

impl Drop for DmaBuf {
    fn drop(&mut self) {
        if let Ok(layout) = Layout::from_size_align(self.len, DMA_ALIGN) {
            // SAFETY: ptr was allocated in zeroed() with exactly this layout and is
            // freed only here, once.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl std::fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DmaBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_rounded() {
        let mut b = DmaBuf::zeroed(5000).unwrap();
        assert_eq!(b.len(), 8192);
        assert_eq!(b.as_mut_ptr() as usize % DMA_ALIGN, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[8191] = 7;
        assert_eq!(b.as_slice()[8191], 7);
        assert_eq!(DmaBuf::zeroed(0).unwrap().len(), DMA_ALIGN);
    }
}
