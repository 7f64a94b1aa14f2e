//! Helpers shared by the integration tests: a device on both backends that can be
//! reopened and damaged, and deterministic chunk contents.
#![allow(dead_code)]

use cairn_blockdev::{BlockDevice, RamDevice, UringDevice};
use cairn_chunkstore::format::{SegmentFooter, SegmentHeader, BLOCK};
use cairn_chunkstore::{
    format, ChunkStore, FormatParams, Report, StoreError, WriteOp, WriteOutcome,
};
use cairn_types::ChunkId;
use std::path::PathBuf;

pub const DATA_MB: u64 = format::DATA_OFFSET;

pub const SEG: u64 = 256 << 10;

/// A device that can be reopened ("restart") on the same bytes.
pub enum Backend {
    Ram(RamDevice),
    // The directory is held only so it is deleted when the test ends.
    File(#[allow(dead_code)] tempfile::TempDir, PathBuf),
}

impl Backend {
    pub fn ram(size: u64) -> Self {
        Backend::Ram(RamDevice::new(size))
    }
    pub fn file(size: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("drive");
        UringDevice::open(&p, Some(size)).unwrap();
        Backend::File(dir, p)
    }
    pub fn both(size: u64) -> Vec<Backend> {
        vec![Backend::ram(size), Backend::file(size)]
    }
    pub fn dev(&self) -> Box<dyn BlockDevice> {
        match self {
            Backend::Ram(r) => Box::new(r.clone()),
            Backend::File(_, p) => Box::new(UringDevice::open(p, None).unwrap()),
        }
    }
    pub fn format(&self) -> ChunkStore {
        ChunkStore::format(self.dev().as_ref(), &params()).unwrap()
    }
    pub fn open(&self) -> ChunkStore {
        ChunkStore::open(self.dev().as_ref()).unwrap()
    }
    /// Applies `f` to the raw bytes.
    pub fn poke(&self, f: impl FnOnce(&mut Vec<u8>)) {
        match self {
            Backend::Ram(r) => r.with_data(f),
            Backend::File(_, p) => {
                let mut d = std::fs::read(p).unwrap();
                f(&mut d);
                std::fs::write(p, d).unwrap();
            }
        }
    }
}

pub fn params() -> FormatParams {
    FormatParams {
        drive_uuid: [7; 16],
        node_id: [1; 16],
        cluster_id: [2; 16],
        drive_index: 0,
        segment_size: SEG,
    }
}

pub fn id(n: u128) -> ChunkId {
    ChunkId::from_u128(n)
}

pub fn data(n: u128, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u128 * 31 + n * 7) as u8).collect()
}

pub fn put(s: &mut ChunkStore, n: u128, len: usize) {
    let d = data(n, len);
    let r = s.write_batch(&[WriteOp::Put {
        id: id(n),
        tenant: 1,
        key_id: 0,
        payload: &d,
        durable: true,
    }]);
    assert_eq!(r[0].as_ref().unwrap(), &WriteOutcome::Put);
}

pub fn assert_has(s: &mut ChunkStore, n: u128, len: usize) {
    let got = s.get(id(n), 1).unwrap_or_else(|e| panic!("chunk {n}: {e}"));
    assert_eq!(&got[..], &data(n, len)[..], "chunk {n}");
}

impl Backend {
    /// A copy of the raw bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.poke(|d| out = d.clone());
        out
    }
    /// Puts raw bytes back.
    pub fn restore(&self, snap: &[u8]) {
        self.poke(|d| d.copy_from_slice(snap));
    }
    pub fn ram_dev(&self) -> Option<&RamDevice> {
        match self {
            Backend::Ram(r) => Some(r),
            Backend::File(..) => None,
        }
    }
}

pub fn try_put(s: &mut ChunkStore, n: u128, len: usize) -> Result<WriteOutcome, StoreError> {
    let d = data(n, len);
    s.write_batch(&[WriteOp::Put {
        id: id(n),
        tenant: 1,
        key_id: 0,
        payload: &d,
        durable: true,
    }])
    .pop()
    .unwrap()
}

pub fn delete(s: &mut ChunkStore, n: u128) -> Result<WriteOutcome, StoreError> {
    s.write_batch(&[WriteOp::Delete {
        id: id(n),
        tenant: 1,
    }])
    .pop()
    .unwrap()
}

/// Puts of chunks `ns` with payloads `ds`, for tenant 1.
pub fn put_ops<'a>(ns: &[u128], ds: &'a [Vec<u8>]) -> Vec<WriteOp<'a>> {
    ns.iter()
        .zip(ds)
        .map(|(&n, d)| WriteOp::Put {
            id: id(n),
            tenant: 1,
            key_id: 0,
            payload: d,
            durable: true,
        })
        .collect()
}

/// A small deterministic PRNG (xorshift64), so a failing case can be replayed.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub fn put_batch(s: &mut ChunkStore, ns: &[u128], len: usize) {
    let ds: Vec<Vec<u8>> = ns.iter().map(|&n| data(n, len)).collect();
    let ops = put_ops(ns, &ds);
    for r in s.write_batch(&ops) {
        r.unwrap();
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct Counts {
    pub damaged_segments: u64,
    pub corrupt_batches: u64,
    pub corrupt_records: u64,
    pub salvaged: u64,
    pub torn: u64,
}

pub fn counts(r: &Report) -> Counts {
    Counts {
        damaged_segments: r.damaged_segments_at_open,
        corrupt_batches: r.corrupt_batches_at_open,
        corrupt_records: r.corrupt_records_at_open,
        salvaged: r.salvaged_records_at_open,
        torn: r.torn_batches_at_open,
    }
}

/// Segment headers and footers of a raw image.
pub fn segments(d: &[u8]) -> Vec<(usize, Option<SegmentHeader>, Option<SegmentFooter>)> {
    let sb = format::Superblock::decode(&d[..BLOCK]).unwrap();
    (0..sb.segment_count as u32)
        .map(|s| {
            let base = sb.segment_offset(s) as usize;
            let ss = sb.segment_size as usize;
            (
                base,
                SegmentHeader::decode(&d[base..base + BLOCK]).ok(),
                SegmentFooter::decode(&d[base + ss - BLOCK..base + ss]).ok(),
            )
        })
        .collect()
}

/// 24 chunks of 50 kB, then all but every fourth deleted: sealed segments that
/// are mostly dead, for compaction to reclaim.
pub fn sparse_segments(s: &mut ChunkStore) {
    for n in 0..24 {
        put(s, n, 50_000);
    }
    let dels: Vec<_> = (0..24)
        .filter(|n| n % 4 != 0)
        .map(|n| WriteOp::Delete {
            id: id(n),
            tenant: 1,
        })
        .collect();
    assert!(s.write_batch(&dels).iter().all(|r| r.is_ok()));
}
