//! The DMA buffer pool: lends [`DmaBuf`]s carved out of DMA regions.
//!
//! Regions are 2 MiB (one huge page) chunks, allocated from the device on demand
//! and kept for the pool's life; a buffer is a power-of-two run of 4 KiB pages
//! inside one chunk (size classes 4 KiB .. 2 MiB, one free list each, no
//! coalescing: the datapath's sizes repeat). Larger buffers get a region of their
//! own that is unmapped when they come back. A buffer returns to its free list
//! when its `DmaBuf` is dropped, from any thread.
//!
//! It lives in `hw` because its bookkeeping is what makes lending sound: a range is
//! lent to at most one `DmaBuf` at a time. Each queue pair has its own pool, so the
//! pool's mutex is uncontended on the I/O path (it is taken once per allocation and
//! once per drop, not per command).

use super::DmaRegion;
use crate::{NvmeError, Result};
use cairn_blockdev::{DmaBuf, DmaDomain, DmaHome, DMA_ALIGN};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

/// Size of the regions small buffers are carved from.
pub const CHUNK: usize = super::HUGE_PAGE;
const CLASSES: usize = 10; // 4 KiB << 0 ..= 4 KiB << 9 = 2 MiB

/// Allocates a DMA region of at least the given length in the pool's domain.
pub type RegionAllocator = Arc<dyn Fn(usize) -> Result<DmaRegion> + Send + Sync>;

#[derive(Debug, Default)]
struct PoolState {
    chunks: Vec<DmaRegion>,
    /// Free buffers per class: (host address, IOVA).
    free: [Vec<(usize, u64)>; CLASSES],
    /// Next unused offset in the last chunk.
    bump: usize,
    /// Buffers larger than a chunk, by IOVA: their own region.
    big: HashMap<u64, DmaRegion>,
    mapped: usize,
    lent: usize,
}

struct PoolInner {
    name: String,
    domain: DmaDomain,
    limit: usize,
    alloc: RegionAllocator,
    state: Mutex<PoolState>,
}

impl std::fmt::Debug for PoolInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaPool")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .finish()
    }
}

impl PoolInner {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // The state stays consistent across a panicking holder: every update is
        // a single push/pop/insert.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn class_of(len: usize) -> usize {
    let pages = len.div_ceil(DMA_ALIGN).max(1);
    pages.next_power_of_two().trailing_zeros() as usize
}

impl DmaHome for PoolInner {
    fn give_back(&self, ptr: NonNull<u8>, len: usize, iova: u64) {
        let mut st = self.lock();
        st.lent = st.lent.saturating_sub(len);
        if len > CHUNK {
            if let Some(r) = st.big.remove(&iova) {
                st.mapped = st.mapped.saturating_sub(r.len());
            }
            // Dropping the region unmaps it from the IOMMU and frees it.
            return;
        }
        st.free[class_of(len)].push((ptr.as_ptr() as usize, iova));
    }
}

/// A pool of DMA buffers in one DMA domain. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct DmaPool {
    inner: Arc<PoolInner>,
}

impl DmaPool {
    /// A pool named `name` (for errors) that maps at most `limit` bytes.
    pub fn new(name: String, domain: DmaDomain, limit: usize, alloc: RegionAllocator) -> Self {
        DmaPool {
            inner: Arc::new(PoolInner {
                name,
                domain,
                limit,
                alloc,
                state: Mutex::new(PoolState::default()),
            }),
        }
    }

    /// The domain whose IOVAs the buffers carry.
    pub fn domain(&self) -> DmaDomain {
        self.inner.domain
    }

    /// Bytes mapped / bytes lent right now.
    pub fn usage(&self) -> (usize, usize) {
        let st = self.inner.lock();
        (st.mapped, st.lent)
    }

    fn exhausted(&self, want: usize) -> NvmeError {
        NvmeError::Dma(format!(
            "pool of {} exhausted: {want} more bytes would pass its limit of {} bytes",
            self.inner.name, self.inner.limit
        ))
    }

    /// A zeroed buffer of at least `len` bytes (rounded up to 4 KiB).
    pub fn alloc(&self, len: usize) -> Result<DmaBuf> {
        let len = len
            .max(1)
            .checked_next_multiple_of(DMA_ALIGN)
            .ok_or_else(|| NvmeError::Dma(format!("buffer of {len} bytes")))?;
        let mut st = self.inner.lock();
        let (region, off) = if len > CHUNK {
            if st.mapped + len > self.inner.limit {
                return Err(self.exhausted(len));
            }
            // Allocating under the lock keeps the limit exact; it is the rare path.
            let r = (self.inner.alloc)(len)?;
            st.mapped += r.len();
            st.big.insert(r.iova(), r.clone());
            (r, 0)
        } else {
            let class = class_of(len);
            let size = DMA_ALIGN << class;
            if let Some((addr, iova)) = st.free[class].pop() {
                st.lent += len;
                drop(st);
                return Ok(self.lend_free(addr, iova, len));
            }
            // Split the smallest larger free buffer: its upper halves go to the
            // free lists below it, its first `size` bytes are lent.
            if let Some(c) = (class + 1..CLASSES).find(|&c| !st.free[c].is_empty()) {
                if let Some((addr, iova)) = st.free[c].pop() {
                    for k in (class..c).rev() {
                        let half = DMA_ALIGN << k;
                        st.free[k].push((addr + half, iova + half as u64));
                    }
                    st.lent += len;
                    drop(st);
                    return Ok(self.lend_free(addr, iova, len));
                }
            }
            let need_chunk = st.chunks.is_empty() || st.bump + size > CHUNK;
            if need_chunk {
                if st.mapped + CHUNK > self.inner.limit {
                    return Err(self.exhausted(CHUNK));
                }
                let r = (self.inner.alloc)(CHUNK)?;
                st.mapped += r.len();
                st.chunks.push(r);
                st.bump = 0;
            }
            let Some(r) = st.chunks.last().cloned() else {
                return Err(NvmeError::Dma("no chunk".into()));
            };
            let off = st.bump;
            st.bump += size;
            (r, off)
        };
        st.lent += len;
        drop(st);
        // Fresh chunk memory is zero already (anonymous mapping), but a chunk's
        // tail may have been carved before; zeroing is cheap next to the I/O.
        region.fill(off, len, 0);
        // SAFETY: [off, off+len) is inside `region` (bump/big allocation above) and
        // was never lent before (the bump offset only grows; a big region is new).
        // The region stays alive while the pool does (kept in chunks/big), and the
        // DmaBuf holds the pool through `home`. It is lent to this buffer alone
        // until give_back puts it on a free list.
        Ok(unsafe {
            DmaBuf::from_pool(
                NonNull::new_unchecked(region.base().add(off)),
                len,
                region.iova() + off as u64,
                self.inner.domain,
                self.inner.clone(),
            )
        })
    }

    fn lend_free(&self, addr: usize, iova: u64, len: usize) -> DmaBuf {
        let p = addr as *mut u8;
        // SAFETY: (addr, iova) came off a free list: a range of class size >= len
        // inside a chunk this pool keeps alive, given back by its previous DmaBuf's
        // drop and popped exactly once (under the lock) for this buffer. Zeroing
        // it first keeps the zeroed-buffer contract.
        unsafe {
            std::ptr::write_bytes(p, 0, len);
            DmaBuf::from_pool(
                NonNull::new_unchecked(p),
                len,
                iova,
                self.inner.domain,
                self.inner.clone(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::Backing;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn pool(limit: usize) -> DmaPool {
        let next = Arc::new(AtomicU64::new(0x1_0000_0000));
        DmaPool::new(
            "test".into(),
            DmaDomain::new(),
            limit,
            Arc::new(move |len| {
                let n = next.clone();
                DmaRegion::allocate(len, Backing::Ordinary, move |_, l| {
                    Ok((n.fetch_add(l as u64 + 4096, Ordering::Relaxed), None))
                })
            }),
        )
    }

    #[test]
    fn buffers_are_zeroed_reused_and_distinct() {
        let p = pool(64 << 20);
        let d = p.domain();
        let mut a = p.alloc(4096).unwrap();
        let b = p.alloc(5000).unwrap();
        assert_eq!(b.len(), 8192);
        let (ia, ib) = (a.iova(d).unwrap(), b.iova(d).unwrap());
        assert!(ia + 4096 <= ib || ib + 8192 <= ia, "overlap");
        a.as_mut_slice().fill(0xaa);
        drop(a);
        let a2 = p.alloc(100).unwrap();
        assert_eq!(a2.iova(d), Some(ia), "reused from the free list");
        assert!(a2.as_slice().iter().all(|&x| x == 0), "zeroed on reuse");
        assert_eq!(p.usage().1, 4096 + 8192);
        drop((a2, b));
        assert_eq!(p.usage(), (CHUNK, 0));
    }

    #[test]
    fn big_buffers_get_their_own_region_and_limits_hold() {
        let p = pool(8 << 20);
        let big = p.alloc(5 << 20).unwrap();
        assert_eq!(big.len(), 5 << 20);
        assert!(big.iova(p.domain()).is_some());
        assert!(p.usage().0 >= 5 << 20);
        assert!(matches!(p.alloc(4 << 20), Err(NvmeError::Dma(_))));
        drop(big);
        assert_eq!(
            p.usage().0,
            0,
            "a big region is unmapped when it comes back"
        );
        let many: Vec<_> = (0..4).map(|_| p.alloc(2 << 20).unwrap()).collect();
        assert!(matches!(p.alloc(4096), Err(NvmeError::Dma(_))));
        drop(many);
        // Buffers dropped on another thread come home too.
        let b = p.alloc(4096).unwrap();
        std::thread::spawn(move || drop(b)).join().unwrap();
        assert_eq!(p.usage().1, 0);
    }
}
