//! The on-disk format: layouts, encoders and total (never panicking) parsers.
//!
//! All integers little-endian. See datapath-spdk/README.md for the byte maps.
//! Every parser takes `&[u8]` of any length and content and answers with a value or
//! `StoreError::Malformed`; they are fuzzed (`fuzz/chunk_record_parse`) and
//! smoke-tested with random input in the unit tests.

use crate::StoreError;
use cairn_types::ChunkId;

/// The store's block: the unit of alignment of every write.
pub const BLOCK: usize = 4096;
/// Format version written into every structure.
pub const FORMAT_VERSION: u16 = 1;
/// Segments start here; the first MiB holds the superblock (and room to grow).
pub const DATA_OFFSET: u64 = 1 << 20;

pub const SB_MAGIC: [u8; 8] = *b"CAIRNSB1";
pub const SEG_MAGIC: [u8; 8] = *b"CAIRNSG1";
pub const FOOTER_MAGIC: [u8; 8] = *b"CAIRNSF1";
pub const BATCH_MAGIC: [u8; 4] = *b"CBAT";
pub const RECORD_MAGIC: [u8; 4] = *b"CREC";

pub const SB_LEN: usize = 100;
pub const SEG_HEADER_LEN: usize = 32;
pub const FOOTER_LEN: usize = 40;
pub const BATCH_HEADER: usize = 32;
pub const RECORD_HEADER: usize = 64;
pub const SUMMARY_ENTRY: usize = 48;

fn crc(b: &[u8]) -> u32 {
    crc32c::crc32c(b)
}

fn malformed(why: &'static str) -> StoreError {
    StoreError::Malformed(why)
}

/// Bounds-checked little-endian field access; `None` past the end.
struct R<'a>(&'a [u8]);
impl R<'_> {
    fn arr<const N: usize>(&self, at: usize) -> Result<[u8; N], StoreError> {
        self.0
            .get(at..at.checked_add(N).ok_or(malformed("offset overflow"))?)
            .and_then(|s| s.try_into().ok())
            .ok_or(malformed("structure runs past the buffer"))
    }
    fn u16(&self, at: usize) -> Result<u16, StoreError> {
        Ok(u16::from_le_bytes(self.arr(at)?))
    }
    fn u32(&self, at: usize) -> Result<u32, StoreError> {
        Ok(u32::from_le_bytes(self.arr(at)?))
    }
    fn u64(&self, at: usize) -> Result<u64, StoreError> {
        Ok(u64::from_le_bytes(self.arr(at)?))
    }
    fn crc_ok(&self, len: usize) -> Result<(), StoreError> {
        let body = self
            .0
            .get(..len)
            .ok_or(malformed("structure runs past the buffer"))?;
        if crc(body) != self.u32(len)? {
            return Err(malformed("checksum mismatch"));
        }
        Ok(())
    }
}

/// Rounds up to the block size.
pub fn round_block(n: u64) -> u64 {
    n.div_ceil(BLOCK as u64) * BLOCK as u64
}

/// The drive's identity and geometry, in block 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub drive_uuid: [u8; 16],
    pub node_id: [u8; 16],
    pub cluster_id: [u8; 16],
    pub drive_index: u16,
    pub segment_size: u64,
    pub segment_count: u64,
    pub data_offset: u64,
}

/// What block 0 holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// All zero: never formatted.
    Blank,
    /// A valid Cairn superblock.
    Cairn(Superblock),
    /// Something else, or a damaged superblock: never formatted over.
    Foreign,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SB_LEN] {
        let mut b = [0u8; SB_LEN];
        b[0..8].copy_from_slice(&SB_MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.drive_uuid);
        b[32..48].copy_from_slice(&self.node_id);
        b[48..64].copy_from_slice(&self.cluster_id);
        b[64..66].copy_from_slice(&self.drive_index.to_le_bytes());
        b[72..80].copy_from_slice(&self.segment_size.to_le_bytes());
        b[80..88].copy_from_slice(&self.segment_count.to_le_bytes());
        b[88..96].copy_from_slice(&self.data_offset.to_le_bytes());
        let c = crc(&b[..96]);
        b[96..100].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, StoreError> {
        let r = R(b);
        if r.arr::<8>(0)? != SB_MAGIC {
            return Err(malformed("bad superblock magic"));
        }
        r.crc_ok(96)?;
        if r.u16(8)? != FORMAT_VERSION {
            return Err(malformed("unsupported superblock version"));
        }
        if r.u32(12)? as usize != BLOCK {
            return Err(malformed("unsupported block size"));
        }
        let sb = Superblock {
            drive_uuid: r.arr(16)?,
            node_id: r.arr(32)?,
            cluster_id: r.arr(48)?,
            drive_index: r.u16(64)?,
            segment_size: r.u64(72)?,
            segment_count: r.u64(80)?,
            data_offset: r.u64(88)?,
        };
        if sb.segment_size < 4 * BLOCK as u64
            || !sb.segment_size.is_multiple_of(BLOCK as u64)
            || sb.segment_size > u32::MAX as u64
            || !sb.data_offset.is_multiple_of(BLOCK as u64)
            || sb.segment_count == 0
            || sb.segment_count > 1 << 24
        {
            return Err(malformed("superblock geometry out of range"));
        }
        Ok(sb)
    }

    /// Classifies block 0.
    pub fn probe(b: &[u8]) -> Probe {
        if b.iter().all(|&x| x == 0) {
            return Probe::Blank;
        }
        match Superblock::decode(b) {
            Ok(sb) => Probe::Cairn(sb),
            Err(_) => Probe::Foreign,
        }
    }

    /// Byte offset of a segment on the device.
    pub fn segment_offset(&self, seg: u32) -> u64 {
        self.data_offset + seg as u64 * self.segment_size
    }
}

/// What a segment is being filled with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegKind {
    /// New writes (record seqs all above `open_seq`).
    Log = 1,
    /// Records copied by compaction (they keep their older seqs).
    Compaction = 2,
}

/// Block 0 of a segment in use; an all-zero block means "free".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub index: u32,
    pub kind: SegKind,
    /// A seq consumed when the segment was opened: unique per use of the segment,
    /// so a footer left by an earlier use never matches.
    pub open_seq: u64,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEG_HEADER_LEN] {
        let mut b = [0u8; SEG_HEADER_LEN];
        b[0..8].copy_from_slice(&SEG_MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[10] = self.kind as u8;
        b[12..16].copy_from_slice(&self.index.to_le_bytes());
        b[16..24].copy_from_slice(&self.open_seq.to_le_bytes());
        let c = crc(&b[..28]);
        b[28..32].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, StoreError> {
        let r = R(b);
        if r.arr::<8>(0)? != SEG_MAGIC {
            return Err(malformed("bad segment magic"));
        }
        r.crc_ok(28)?;
        if r.u16(8)? != FORMAT_VERSION {
            return Err(malformed("unsupported segment version"));
        }
        let kind = match r.arr::<1>(10)?[0] {
            1 => SegKind::Log,
            2 => SegKind::Compaction,
            _ => return Err(malformed("unknown segment kind")),
        };
        Ok(SegmentHeader {
            index: r.u32(12)?,
            kind,
            open_seq: r.u64(16)?,
        })
    }
}

/// The last block of a sealed segment: where its summary is and its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentFooter {
    pub index: u32,
    pub open_seq: u64,
    pub entries: u32,
    /// Offset of the summary within the segment.
    pub summary_offset: u32,
    pub summary_crc: u32,
}

impl SegmentFooter {
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut b = [0u8; FOOTER_LEN];
        b[0..8].copy_from_slice(&FOOTER_MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.index.to_le_bytes());
        b[16..24].copy_from_slice(&self.open_seq.to_le_bytes());
        b[24..28].copy_from_slice(&self.entries.to_le_bytes());
        b[28..32].copy_from_slice(&self.summary_offset.to_le_bytes());
        b[32..36].copy_from_slice(&self.summary_crc.to_le_bytes());
        let c = crc(&b[..36]);
        b[36..40].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, StoreError> {
        let r = R(b);
        if r.arr::<8>(0)? != FOOTER_MAGIC {
            return Err(malformed("bad footer magic"));
        }
        r.crc_ok(36)?;
        if r.u16(8)? != FORMAT_VERSION {
            return Err(malformed("unsupported footer version"));
        }
        Ok(SegmentFooter {
            index: r.u32(12)?,
            open_seq: r.u64(16)?,
            entries: r.u32(24)?,
            summary_offset: r.u32(28)?,
            summary_crc: r.u32(32)?,
        })
    }
}

/// Put or tombstone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    Put = 1,
    Tombstone = 2,
}

/// The self-describing header in front of every payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: RecordKind,
    pub id: ChunkId,
    pub tenant: u64,
    pub key_id: u32,
    pub payload_len: u32,
    pub payload_crc: u32,
    pub seq: u64,
}

/// Bytes a record occupies: header + payload, padded to 8.
pub fn record_len(payload_len: u32) -> u64 {
    (RECORD_HEADER as u64 + payload_len as u64).next_multiple_of(8)
}

impl RecordHeader {
    pub fn encode(&self) -> [u8; RECORD_HEADER] {
        let mut b = [0u8; RECORD_HEADER];
        b[0..4].copy_from_slice(&RECORD_MAGIC);
        b[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[6] = self.kind as u8;
        b[8..24].copy_from_slice(&self.id.0);
        b[24..32].copy_from_slice(&self.tenant.to_le_bytes());
        b[32..36].copy_from_slice(&self.key_id.to_le_bytes());
        b[36..40].copy_from_slice(&self.payload_len.to_le_bytes());
        b[40..44].copy_from_slice(&self.payload_crc.to_le_bytes());
        b[48..56].copy_from_slice(&self.seq.to_le_bytes());
        let c = crc(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses and verifies a record header (not the payload).
    pub fn decode(b: &[u8]) -> Result<Self, StoreError> {
        let r = R(b);
        if r.arr::<4>(0)? != RECORD_MAGIC {
            return Err(malformed("bad record magic"));
        }
        r.crc_ok(60)?;
        if r.u16(4)? != FORMAT_VERSION {
            return Err(malformed("unsupported record version"));
        }
        let kind = match r.arr::<1>(6)?[0] {
            1 => RecordKind::Put,
            2 => RecordKind::Tombstone,
            _ => return Err(malformed("unknown record kind")),
        };
        let h = RecordHeader {
            kind,
            id: ChunkId(r.arr(8)?),
            tenant: r.u64(24)?,
            key_id: r.u32(32)?,
            payload_len: r.u32(36)?,
            payload_crc: r.u32(40)?,
            seq: r.u64(48)?,
        };
        if h.kind == RecordKind::Tombstone && h.payload_len != 0 {
            return Err(malformed("tombstone with a payload"));
        }
        Ok(h)
    }
}

/// Parses one record at the start of `b` and verifies header and payload checksums.
/// This is the parser every read goes through.
pub fn parse_record(b: &[u8]) -> Result<(RecordHeader, &[u8]), StoreError> {
    let h = RecordHeader::decode(b)?;
    let payload = b
        .get(RECORD_HEADER..RECORD_HEADER + h.payload_len as usize)
        .ok_or(malformed("payload runs past the buffer"))?;
    if crc(payload) != h.payload_crc {
        return Err(malformed("payload checksum mismatch"));
    }
    Ok((h, payload))
}

/// The header of one group-committed write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub records: u32,
    /// Bytes of header plus records (before block padding).
    pub len: u32,
    pub first_seq: u64,
    /// crc32c of the bytes after this header, up to `len`.
    pub body_crc: u32,
}

impl BatchHeader {
    pub fn encode(&self) -> [u8; BATCH_HEADER] {
        let mut b = [0u8; BATCH_HEADER];
        b[0..4].copy_from_slice(&BATCH_MAGIC);
        b[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&self.records.to_le_bytes());
        b[12..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_seq.to_le_bytes());
        b[24..28].copy_from_slice(&self.body_crc.to_le_bytes());
        let c = crc(&b[..28]);
        b[28..32].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// The header at the start of `b`, if its magic, checksum and version hold
    /// (the batch's body is not checked: see [`parse_batch`]).
    pub fn decode(b: &[u8]) -> Result<Self, StoreError> {
        let r = R(b);
        if r.arr::<4>(0)? != BATCH_MAGIC {
            return Err(malformed("bad batch magic"));
        }
        r.crc_ok(28)?;
        if r.u16(4)? != FORMAT_VERSION {
            return Err(malformed("unsupported batch version"));
        }
        Ok(BatchHeader {
            records: r.u32(8)?,
            len: r.u32(12)?,
            first_seq: r.u64(16)?,
            body_crc: r.u32(24)?,
        })
    }
}

/// Parses a whole batch at the start of `b`: its header, the checksum over the whole
/// batch (so a torn write is rejected as a unit) and every record in it, whose seqs
/// must rise. Returns the records with their offsets in `b`, and the batch length.
pub fn parse_batch(b: &[u8]) -> Result<(Vec<(usize, RecordHeader)>, usize), StoreError> {
    let h = BatchHeader::decode(b)?;
    let count = h.records as usize;
    let len = h.len as usize;
    let body = b
        .get(BATCH_HEADER..len.max(BATCH_HEADER))
        .ok_or(malformed("batch runs past the buffer"))?;
    if crc(body) != h.body_crc {
        return Err(malformed("batch checksum mismatch"));
    }
    if count > len / RECORD_HEADER {
        return Err(malformed("batch record count out of range"));
    }
    let mut out = Vec::with_capacity(count);
    let mut pos = BATCH_HEADER;
    let mut last_seq = None;
    for _ in 0..count {
        let slice = b
            .get(pos..len)
            .ok_or(malformed("record runs past its batch"))?;
        let (h, _) = parse_record(slice)?;
        if last_seq.is_some_and(|s| h.seq <= s) {
            return Err(malformed("record seqs do not rise"));
        }
        last_seq = Some(h.seq);
        out.push((pos, h));
        pos = pos
            .checked_add(record_len(h.payload_len) as usize)
            .ok_or(malformed("offset overflow"))?;
    }
    if pos != len.next_multiple_of(8) && pos != len {
        return Err(malformed("batch length disagrees with its records"));
    }
    Ok((out, len))
}

/// One line of a segment summary: enough to rebuild the index without reading
/// payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryEntry {
    pub seq: u64,
    pub id: ChunkId,
    pub tenant: u64,
    /// Offset of the record within its segment.
    pub offset: u32,
    pub payload_len: u32,
    pub payload_crc: u32,
    pub kind: RecordKind,
}

impl SummaryEntry {
    pub fn encode_into(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..24].copy_from_slice(&self.id.0);
        b[24..32].copy_from_slice(&self.tenant.to_le_bytes());
        b[32..36].copy_from_slice(&self.offset.to_le_bytes());
        b[36..40].copy_from_slice(&self.payload_len.to_le_bytes());
        b[40..44].copy_from_slice(&self.payload_crc.to_le_bytes());
        b[44] = self.kind as u8;
    }

    pub fn decode(b: &[u8]) -> Result<Self, StoreError> {
        let r = R(b);
        Ok(SummaryEntry {
            seq: r.u64(0)?,
            id: ChunkId(r.arr(8)?),
            tenant: r.u64(24)?,
            offset: r.u32(32)?,
            payload_len: r.u32(36)?,
            payload_crc: r.u32(40)?,
            kind: match r.arr::<1>(44)?[0] {
                1 => RecordKind::Put,
                2 => RecordKind::Tombstone,
                _ => return Err(malformed("unknown summary entry kind")),
            },
        })
    }
}

/// Bytes the summary of `n` entries takes, block aligned.
pub fn summary_len(n: usize) -> u64 {
    round_block((n * SUMMARY_ENTRY) as u64)
}

/// Parses `count` summary entries and checks their crc.
pub fn parse_summary(b: &[u8], count: u32, want_crc: u32) -> Result<Vec<SummaryEntry>, StoreError> {
    let n = (count as usize)
        .checked_mul(SUMMARY_ENTRY)
        .ok_or(malformed("summary too long"))?;
    let body = b
        .get(..n)
        .ok_or(malformed("summary runs past the buffer"))?;
    if crc(body) != want_crc {
        return Err(malformed("summary checksum mismatch"));
    }
    body.chunks_exact(SUMMARY_ENTRY)
        .map(SummaryEntry::decode)
        .collect()
}

/// Everything a fuzzer can throw at: every parser in this module over one input.
/// Never panics.
pub fn fuzz_parse(data: &[u8]) {
    let _ = Superblock::probe(data);
    let _ = SegmentHeader::decode(data);
    let _ = SegmentFooter::decode(data);
    let _ = parse_record(data);
    let _ = parse_batch(data);
    if let Some((&n, rest)) = data.split_first() {
        let _ = parse_summary(rest, n as u32, 0);
        let _ = parse_summary(
            rest,
            n as u32,
            crc(rest.get(..n as usize * SUMMARY_ENTRY).unwrap_or(&[])),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, payload: &[u8]) -> Vec<u8> {
        let h = RecordHeader {
            kind: RecordKind::Put,
            id: ChunkId::from_u128(seq as u128),
            tenant: 7,
            key_id: 1,
            payload_len: payload.len() as u32,
            payload_crc: crc(payload),
            seq,
        };
        let mut v = h.encode().to_vec();
        v.extend_from_slice(payload);
        v.resize(record_len(payload.len() as u32) as usize, 0);
        v
    }

    fn batch(recs: &[Vec<u8>]) -> Vec<u8> {
        let mut body: Vec<u8> = recs.concat();
        let len = (BATCH_HEADER + body.len()) as u32;
        let h = BatchHeader {
            records: recs.len() as u32,
            len,
            first_seq: 1,
            body_crc: crc(&body),
        };
        let mut v = h.encode().to_vec();
        v.append(&mut body);
        v
    }

    #[test]
    fn structures_round_trip() {
        let sb = Superblock {
            drive_uuid: [1; 16],
            node_id: [2; 16],
            cluster_id: [3; 16],
            drive_index: 4,
            segment_size: 1 << 20,
            segment_count: 10,
            data_offset: DATA_OFFSET,
        };
        assert_eq!(Superblock::probe(&sb.encode()), Probe::Cairn(sb.clone()));
        assert_eq!(Superblock::probe(&[0; 4096]), Probe::Blank);
        assert_eq!(Superblock::probe(b"\x7fELF...."), Probe::Foreign);
        let b = batch(&[record(1, b"abc"), record(2, b""), record(3, &[9; 100])]);
        let (recs, len) = parse_batch(&b).unwrap();
        assert_eq!(len, b.len());
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[2].1.seq, 3);
        let (h, p) = parse_record(&b[recs[0].0..]).unwrap();
        assert_eq!((h.seq, p), (1, &b"abc"[..]));
    }

    #[test]
    fn damage_is_detected() {
        let b = batch(&[record(1, b"abc"), record(2, b"defg")]);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(parse_batch(&c).is_err(), "flip at {i} went unnoticed");
        }
        for cut in 0..b.len() {
            assert!(parse_batch(&b[..cut]).is_err(), "cut at {cut}");
        }
        // Seqs that do not rise are refused even with valid checksums.
        assert!(parse_batch(&batch(&[record(5, b"a"), record(5, b"b")])).is_err());
    }

    /// The stable stand-in for the fuzzer: many random and mutated inputs, no panic.
    #[test]
    fn fuzz_smoke() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds = [
            batch(&[record(1, b"abc"), record(2, &[7; 300])]),
            record(9, b"hello").to_vec(),
            SegmentFooter {
                index: 1,
                open_seq: 2,
                entries: 3,
                summary_offset: 4,
                summary_crc: 5,
            }
            .encode()
            .to_vec(),
        ];
        for i in 0..100_000u32 {
            let r = next();
            let mut input = if i % 4 == 0 {
                let n = (r % 600) as usize;
                (0..n).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                let mut s = seeds[(r % 3) as usize].clone();
                for _ in 0..(1 + next() % 4) {
                    let at = (next() as usize) % s.len();
                    s[at] = next() as u8;
                }
                if next() % 3 == 0 {
                    s.truncate((next() as usize) % (s.len() + 1));
                }
                s
            };
            fuzz_parse(&input);
            input.reverse();
            fuzz_parse(&input);
        }
    }
}
