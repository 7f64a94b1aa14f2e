//! Recovery at open: rebuilds the index from sealed summaries, rescans segments that
//! were never sealed or whose header, summary or footer is damaged, and salvages
//! every batch and record that verifies.
//!
//! Damage costs as little as the format allows: a bad batch followed by valid ones
//! is corruption, not a tail; it is skipped (by its own length when its header
//! verifies, else by probing the following block boundaries for a valid batch) and
//! every record inside it whose header and payload checksums verify is kept. A bad
//! batch with nothing valid after it is a torn write (a batch is acknowledged only
//! after its write completed, so a torn one never was) or damage, which look the
//! same: its records that verify are kept either way (an unacknowledged one is
//! merely unreferenced), the rest dropped and counted as torn. A clean close seals
//! the open segment, so after a clean stop this case cannot hide damage. Rescanned segments are then sealed, so nothing is appended after a tail.
//!
//! Seq rules, which keep stale records of an earlier use of a segment out:
//! - Log segment with a valid header: every record of this use has a seq above the
//!   header's open seq; anything at or below it is stale and ignored.
//! - Compaction segment (records keep their older seqs): seqs must rise from block 1
//!   on, and when the footer survives no more records than it counts are taken. An
//!   unsealed compaction target (zero or stale footer) crashed before sealing, so its
//!   sources were never released: it is freed as before.
//! - Unknown header (the block is damaged; its kind and open seq are lost): the
//!   floor is 0 and seqs must rise. Records of a log use are above every record of an
//!   earlier use, so stale ones behind them are refused. Behind a compaction use's
//!   records a stale record with a higher seq could be taken if the release's trim
//!   left it (trims of files and RAM zero; most SSDs do too). Such a record is an
//!   exact, verified older record: it loses to any newer record of its chunk, and
//!   can bring back a deleted chunk only if that chunk's tombstone was already
//!   compacted away. The segment is re-stamped with a fresh header (kind compaction,
//!   a new open seq above every record) and sealed, so the next open reads it
//!   normally. A header block that is not zero but looks nothing like a header (no
//!   more than 16 non-zero bytes, under half the magic, no footer) is a free
//!   segment's zero block hit by damage: it is freed, never scanned, since a free
//!   segment holds only stale records.

use crate::format::*;
use crate::store::{read_sync, run, ChunkStore, Entry, Io, Seg, SegState};
use crate::{Result, StoreError};
use cairn_blockdev::BlockDevice;
use cairn_types::ChunkId;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What an open found damaged, dropped and salvaged (see [`crate::Report`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OpenStats {
    pub damaged_segments: u64,
    pub corrupt_batches: u64,
    pub corrupt_records: u64,
    pub salvaged_records: u64,
    pub torn_batches: u64,
    /// The drive was blank and formatted by this start (a new or replaced disk).
    pub formatted: bool,
    /// Corrupt records compaction has dropped since the open.
    pub dropped_by_compaction: u64,
}

/// The result of scanning a segment's data.
#[derive(Default)]
struct Scan {
    entries: Vec<SummaryEntry>,
    /// Segment offset just past the last accepted batch or record (block aligned).
    end: u64,
    /// Records whose header verified but whose payload did not: (chunk, seq).
    lost: Vec<(ChunkId, u64)>,
    stats: OpenStats,
}

/// How to scan one segment.
struct ScanRule<'a> {
    device: &'a str,
    seg: u32,
    /// Every record's seq must be above this (and rise).
    floor: u64,
    /// Take at most this many records.
    max_records: usize,
    /// A bad tail at or past this segment offset is a summary, not a torn batch.
    quiet_from: u64,
}

/// A header block that is not a valid header but is not all zero: does it look like
/// a damaged header of a segment in use, or like a free segment's zero block hit by
/// damage?
fn looks_in_use(b: &[u8], footer_ok: bool) -> bool {
    let magic = b.iter().zip(SEG_MAGIC).filter(|(x, m)| **x == *m).count();
    let nonzero = b.iter().filter(|&&x| x != 0).count();
    footer_ok || magic >= 4 || nonzero > 16
}

impl ChunkStore {
    /// Opens a formatted device and rebuilds the index: sealed segments from their
    /// summaries; unsealed ones, and any whose header, summary or footer is damaged,
    /// by scanning their records (see the module documentation). Rescanned segments
    /// are then sealed, so nothing is ever appended after a torn tail.
    pub fn open(dev: &dyn BlockDevice) -> Result<Self> {
        let info = dev.info();
        let mut qp = dev.open_queue()?;
        let b0 = read_sync(qp.as_mut(), 0, BLOCK as u64)?;
        let sb = match Superblock::probe(b0.as_slice()) {
            Probe::Cairn(sb) => sb,
            Probe::Blank => return Err(StoreError::NotFormatted),
            Probe::Foreign => return Err(StoreError::Foreign),
        };
        let end = sb.data_offset + sb.segment_count * sb.segment_size;
        if end > info.size() {
            return Err(StoreError::Mismatch(format!(
                "superblock describes {end} bytes, device has {}",
                info.size()
            )));
        }
        let n = sb.segment_count as u32;
        let ss = sb.segment_size;
        let blk = BLOCK as u64;
        // Headers and footers of every segment, in one parallel round.
        let mut ios = Vec::with_capacity(2 * n as usize);
        for s in 0..n {
            ios.push(Io::Read {
                off: sb.segment_offset(s),
                len: blk,
            });
            ios.push(Io::Read {
                off: sb.segment_offset(s) + ss - blk,
                len: blk,
            });
        }
        let mut blocks = run(qp.as_mut(), ios).into_iter();
        let mut segs = vec![Seg::free(); n as usize];
        let mut all: Vec<(u32, SummaryEntry)> = Vec::new();
        let mut lost: Vec<(ChunkId, u64)> = Vec::new();
        let mut stats = OpenStats::default();
        let mut max_seq = 0u64;
        let mut to_free = Vec::new();
        let mut to_seal = Vec::new();
        let mut restamp = Vec::new();
        let name = info.name.clone();
        for s in 0..n {
            let (Some(h), Some(f)) = (blocks.next(), blocks.next()) else {
                break;
            };
            let (h, f) = (h?, f?);
            let (h, f) = (h.as_slice(), f.as_slice());
            let footer_raw = SegmentFooter::decode(f);
            let footer = footer_raw.as_ref().ok().copied().filter(|ft| {
                let so = ft.summary_offset as u64;
                ft.index == s && so >= blk && so < ss - blk && so.is_multiple_of(blk)
            });
            let hdr = match SegmentHeader::decode(h) {
                Ok(hdr) if hdr.index == s => Some(hdr),
                _ if h.iter().all(|&x| x == 0) => continue, // free
                _ if !looks_in_use(h, footer.is_some()) => {
                    tracing::warn!(device = %name, segment = s, "segment header block damaged but holds no header: a free segment, freed again");
                    stats.damaged_segments += 1;
                    to_free.push(s);
                    continue;
                }
                _ => {
                    tracing::error!(device = %name, segment = s, "segment header damaged: salvaging the segment's records");
                    stats.damaged_segments += 1;
                    None
                }
            };
            if let Some(hdr) = hdr {
                max_seq = max_seq.max(hdr.open_seq);
            }
            let base = sb.segment_offset(s);
            let matching = footer.filter(|ft| hdr.is_some_and(|h| h.open_seq == ft.open_seq));
            if let (Some(hdr), Some(ft)) = (hdr, matching) {
                let so = ft.summary_offset as u64;
                let sum = read_sync(qp.as_mut(), base + so, ss - blk - so)?;
                match parse_summary(sum.as_slice(), ft.entries, ft.summary_crc) {
                    Ok(e) => {
                        let seg = &mut segs[s as usize];
                        seg.open_seq = hdr.open_seq;
                        seg.state = SegState::Sealed;
                        all.extend(e.into_iter().map(|x| (s, x)));
                        continue;
                    }
                    Err(e) => {
                        tracing::error!(device = %name, segment = s, "segment summary damaged ({e}): rescanning its records");
                        stats.damaged_segments += 1;
                    }
                }
            }
            let mut rule = ScanRule {
                device: &name,
                seg: s,
                floor: 0,
                max_records: usize::MAX,
                quiet_from: ss - blk,
            };
            let mut limit = ss - blk;
            if let Some(ft) = matching {
                limit = ft.summary_offset as u64;
                rule.max_records = ft.entries as usize;
            }
            match hdr {
                Some(h) if h.kind == SegKind::Log => rule.floor = h.open_seq,
                Some(_) if matching.is_none() => {
                    // A compaction target without its footer: if the footer block is
                    // zero or an earlier use's, compaction crashed before sealing and
                    // its sources are intact: the partial copy is dropped. A footer
                    // block that is neither is damage: the sources may be gone.
                    let stale = f.iter().all(|&x| x == 0) || footer_raw.is_ok();
                    if stale {
                        to_free.push(s);
                        continue;
                    }
                    tracing::error!(device = %name, segment = s, "compaction segment footer damaged: rescanning its records");
                    stats.damaged_segments += 1;
                }
                Some(_) => {}
                None => {
                    if let Some(ft) = footer {
                        rule.quiet_from = ft.summary_offset as u64;
                    }
                }
            }
            let region = read_sync(qp.as_mut(), base + blk, limit - blk)?;
            let out = scan(region.as_slice(), &rule);
            add_stats(&mut stats, &out.stats);
            lost.extend(out.lost.iter().copied());
            max_seq = max_seq.max(out.lost.iter().map(|x| x.1).max().unwrap_or(0));
            if out.entries.is_empty() {
                if hdr.is_none() {
                    tracing::warn!(device = %name, segment = s, "damaged segment holds no verifiable record: freed");
                }
                to_free.push(s);
                continue;
            }
            let seg = &mut segs[s as usize];
            seg.state = SegState::Open;
            seg.open_seq = hdr.map_or(0, |h| h.open_seq);
            seg.write_off = out.end.max(blk);
            seg.entries = out.entries.clone();
            all.extend(out.entries.into_iter().map(|x| (s, x)));
            to_seal.push(s);
            if hdr.is_none() {
                restamp.push(s);
            }
        }
        // Highest seq wins; equal seqs (a compaction copy and its source) are the
        // same record, either copy will do.
        let mut best: HashMap<ChunkId, (u32, SummaryEntry)> = HashMap::new();
        for (s, e) in all {
            max_seq = max_seq.max(e.seq);
            let seg = &mut segs[s as usize];
            seg.used += record_len(e.payload_len);
            seg.min_seq = seg.min_seq.min(e.seq);
            match best.get(&e.id) {
                Some((_, b)) if b.seq >= e.seq => {}
                _ => {
                    best.insert(e.id, (s, e));
                }
            }
        }
        // A record known lost hides any older record of its chunk: that would be an
        // outdated version. (Its summary no longer lists the lost record, so after
        // another restart the older one is served again: the layer above has repaired
        // the chunk by then with a newer record, or it never will.)
        for (id, seq) in &lost {
            if best.get(id).is_some_and(|(_, b)| b.seq < *seq) {
                tracing::error!(device = %name, chunk = %id, "newest record lost; an older record of the chunk is not served");
                best.remove(id);
            }
        }
        let mut index = BTreeMap::new();
        let mut tombs = HashMap::new();
        for (id, (s, e)) in best {
            let entry = Entry {
                seg: s,
                off: e.offset,
                plen: e.payload_len,
                crc: e.payload_crc,
                seq: e.seq,
                tenant: e.tenant,
            };
            match e.kind {
                RecordKind::Put => {
                    segs[s as usize].live += record_len(e.payload_len);
                    index.insert(id, entry);
                }
                RecordKind::Tombstone => {
                    tombs.insert(id, entry);
                }
            }
        }
        let mut store = ChunkStore {
            qp,
            device: info,
            sb,
            segs,
            free: BTreeSet::new(),
            open: None,
            open_from_reserve: false,
            index,
            tombs,
            next_seq: max_seq + 1,
            failed: None,
            open_stats: stats,
            unflushed_since: None,
            flights: Default::default(),
            done: Default::default(),
            // Above the tags used at open (each synchronous call there counts from 0).
            next_tag: 1 << 32,
        };
        for s in to_free {
            store.release(s)?;
        }
        // Segments whose header was lost get a new open seq above every record (kind
        // compaction: the records keep their older seqs). The summary and footer go
        // first, the header last: a crash between the two leaves the header still
        // damaged and the next open salvages the segment again, whereas a fresh
        // header beside the earlier footer would look like a compaction target that
        // crashed before sealing, and be freed.
        for &s in &restamp {
            store.segs[s as usize].open_seq = store.next_seq;
            store.next_seq += 1;
        }
        for s in to_seal {
            let seg = &store.segs[s as usize];
            if seg.write_off + summary_len(seg.entries.len()) + blk > ss {
                // Cannot happen for what a writer wrote; never write a summary over
                // records. Kept unsealed on disk (rescanned at every open), closed here.
                tracing::error!(device = %store.device.name, segment = s, "salvaged records leave no room for a summary; segment left unsealed");
                let seg = &mut store.segs[s as usize];
                seg.state = SegState::Sealed;
                seg.entries = Vec::new();
                continue;
            }
            store.seal(s)?;
            if restamp.contains(&s) {
                let mut b = store.qp.alloc_buf(BLOCK)?;
                b.as_mut_slice()[..SEG_HEADER_LEN].copy_from_slice(
                    &SegmentHeader {
                        index: s,
                        kind: SegKind::Compaction,
                        open_seq: store.segs[s as usize].open_seq,
                    }
                    .encode(),
                );
                store.write(store.sb.segment_offset(s), b)?;
            }
        }
        for (i, s) in store.segs.iter().enumerate() {
            if s.state == SegState::Free {
                store.free.insert(i as u32);
            }
        }
        let st = &store.open_stats;
        if *st != OpenStats::default() {
            tracing::warn!(device = %store.device.name, damaged_segments = st.damaged_segments, corrupt_batches = st.corrupt_batches, corrupt_records = st.corrupt_records, salvaged_records = st.salvaged_records, torn_batches = st.torn_batches, "chunk store opened with damage");
        }
        tracing::debug!(device = %store.device.name, chunks = store.index.len(), free = store.free.len(), "chunk store open");
        Ok(store)
    }
}

fn add_stats(a: &mut OpenStats, b: &OpenStats) {
    a.damaged_segments += b.damaged_segments;
    a.corrupt_batches += b.corrupt_batches;
    a.corrupt_records += b.corrupt_records;
    a.salvaged_records += b.salvaged_records;
    a.torn_batches += b.torn_batches;
}

/// A valid batch at `pos` whose records all lie above `last`.
fn batch_at(region: &[u8], pos: usize, last: u64) -> Option<(Vec<(usize, RecordHeader)>, usize)> {
    let b = region.get(pos..)?;
    if b.get(..4)? != BATCH_MAGIC {
        return None;
    }
    let (recs, len) = parse_batch(b).ok()?;
    (recs.first()?.1.seq > last).then_some((recs, len))
}

/// What a batch header at the start of `b` claims, if the header verifies.
fn batch_header(b: &[u8]) -> Option<BatchHeader> {
    BatchHeader::decode(b)
        .ok()
        .filter(|h| h.len as usize >= BATCH_HEADER)
}

/// Records of a damaged stretch `region[from..to]` that were not even found,
/// because their own header is unreadable: their chunk ids are unknown, but they
/// are lost all the same and must be counted.
///
/// Exact when the batch header verifies (it says how many records it holds).
/// Otherwise from the seqs: the stretch lies between the record before it
/// (`last`) and the next valid batch (`next_seq`), and a drive's records take
/// consecutive seqs, so the seqs in between that no found record has are the lost
/// ones, also at the stretch's edges. That is exact while one segment is being
/// written at a time; since a segment opening or a compaction elsewhere on the
/// drive also takes seqs, the count is capped by what the stretch's unexplained
/// bytes could hold (each record takes at least `record_len(0)`).
fn unreadable_records(
    region: &[u8],
    (from, to): (usize, usize),
    found: &[(usize, RecordHeader, bool)],
    claimed: Option<&BatchHeader>,
    (last, next_seq): (u64, u64),
) -> u64 {
    if let Some(c) = claimed {
        return u64::from(c.records).saturating_sub(found.len() as u64);
    }
    let inside: u64 = found
        .windows(2)
        .map(|w| w[1].1.seq.saturating_sub(w[0].1.seq + 1))
        .sum();
    let by_seq = next_seq
        .saturating_sub(last.saturating_add(1))
        .saturating_sub(found.len() as u64);
    let to = to.min(region.len());
    let used = region[from.min(to)..to]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |p| p + 1);
    let explained = BATCH_HEADER as u64
        + found
            .iter()
            .map(|(_, h, _)| record_len(h.payload_len))
            .sum::<u64>();
    let by_bytes = (used as u64).saturating_sub(explained) / record_len(0);
    inside.max(by_seq.min(by_bytes))
}

/// The next block boundary after `pos` holding a valid batch above `last`, with the
/// seq of its first record.
fn next_batch(region: &[u8], pos: usize, last: u64) -> Option<(usize, u64)> {
    (pos + BLOCK..region.len())
        .step_by(BLOCK)
        .find_map(|p| batch_at(region, p, last).map(|(r, _)| (p, r[0].1.seq)))
}

fn entry(h: &RecordHeader, seg_off: usize) -> SummaryEntry {
    SummaryEntry {
        seq: h.seq,
        id: h.id,
        tenant: h.tenant,
        offset: seg_off as u32,
        payload_len: h.payload_len,
        payload_crc: h.payload_crc,
        kind: h.kind,
    }
}

/// Verified record headers in `region[from..to]` with seqs in `(last, upper)`, at
/// 8-byte steps: (offset, header, payload verifies).
fn records_in(
    region: &[u8],
    from: usize,
    to: usize,
    last: u64,
    upper: u64,
) -> Vec<(usize, RecordHeader, bool)> {
    let mut out = Vec::new();
    let to = to.min(region.len());
    let mut last = last;
    let mut off = from;
    while off + RECORD_HEADER <= to {
        if region[off..off + 4] != RECORD_MAGIC {
            off += 8;
            continue;
        }
        match RecordHeader::decode(&region[off..to]) {
            Ok(h) if h.seq > last && h.seq < upper => {
                let ok = parse_record(&region[off..to]).is_ok();
                out.push((off, h, ok));
                last = h.seq;
                off = off.saturating_add(record_len(h.payload_len) as usize);
            }
            _ => off += 8,
        }
    }
    out
}

/// Scans a segment's data (`region` starts at the segment's block 1).
fn scan(region: &[u8], rule: &ScanRule<'_>) -> Scan {
    let mut out = Scan {
        end: BLOCK as u64,
        ..Scan::default()
    };
    let (dev, seg) = (rule.device, rule.seg);
    let mut pos = 0usize;
    let mut last = rule.floor;
    while pos < region.len() && out.entries.len() < rule.max_records {
        if let Some((recs, len)) = batch_at(region, pos, last) {
            for (off, h) in recs.iter().take(rule.max_records - out.entries.len()) {
                out.entries.push(entry(h, BLOCK + pos + off));
                last = h.seq;
            }
            pos = round_block((pos + len) as u64) as usize;
            out.end = (BLOCK + pos) as u64;
            continue;
        }
        let seg_off = (BLOCK + pos) as u64;
        let claimed = batch_header(&region[pos..]);
        let Some((next, next_seq)) = next_batch(region, pos, last) else {
            // Nothing valid follows: the tail.
            let blk_end = (pos + BLOCK).min(region.len());
            if seg_off < rule.quiet_from && region[pos..blk_end].iter().any(|&x| x != 0) {
                // A torn write (never acknowledged) or, after a clean stop or in a
                // sealed segment, damage: the two cannot be told apart here. Every
                // record in it that verifies on its own is kept either way (keeping
                // a record that was never acknowledged loses nothing: it is
                // unreferenced and collected), so a flipped byte in the last batch
                // costs only the chunk it hit.
                let ext = claimed
                    .as_ref()
                    .map_or(region.len(), |c| pos.saturating_add(c.len as usize));
                let found = records_in(region, pos, ext, last, u64::MAX);
                let unreadable = unreadable_records(
                    region,
                    (pos, ext),
                    &found,
                    claimed.as_ref(),
                    (last, u64::MAX),
                );
                let mut kept = 0u64;
                let mut dropped = Vec::new();
                for (off, h, ok) in found {
                    if out.entries.len() >= rule.max_records {
                        break;
                    }
                    if ok {
                        out.entries.push(entry(&h, BLOCK + off));
                        out.end = out.end.max(round_block(
                            (BLOCK + off) as u64 + record_len(h.payload_len),
                        ));
                        kept += 1;
                    } else {
                        out.lost.push((h.id, h.seq));
                        dropped.push(h.id.to_string());
                    }
                }
                out.stats.salvaged_records += kept;
                tracing::warn!(device = %dev, segment = seg, offset = seg_off, kept, dropped = ?dropped, unreadable_headers = unreadable, "unreadable last batch of the segment: a torn write if the node crashed (never acknowledged), damage if it had stopped cleanly; records that verify were kept");
                out.stats.torn_batches += 1;
            }
            break;
        };
        // A damaged batch: skip it by its own length when its header verifies, else
        // to the next valid batch; keep every record in it that verifies.
        let stop = match &claimed {
            Some(c) => round_block(pos.saturating_add(c.len as usize) as u64)
                .clamp((pos + BLOCK) as u64, next as u64) as usize,
            None => next,
        };
        out.stats.corrupt_batches += 1;
        let mut kept = 0;
        let mut lost_ids = Vec::new();
        let found = records_in(region, pos, stop, last, next_seq);
        let unreadable = unreadable_records(
            region,
            (pos, stop),
            &found,
            claimed.as_ref(),
            (last, next_seq),
        );
        for (off, h, ok) in found {
            if out.entries.len() >= rule.max_records {
                break;
            }
            last = h.seq;
            if ok {
                out.entries.push(entry(&h, BLOCK + off));
                out.end = round_block((BLOCK + off) as u64 + record_len(h.payload_len));
                kept += 1;
            } else {
                tracing::error!(device = %dev, segment = seg, offset = BLOCK + off, chunk = %h.id, seq = h.seq, "record payload corrupt: chunk lost on this drive");
                out.lost.push((h.id, h.seq));
                lost_ids.push(h.id.to_string());
            }
        }
        out.stats.salvaged_records += kept;
        out.stats.corrupt_records += lost_ids.len() as u64 + unreadable;
        tracing::error!(device = %dev, segment = seg, offset = seg_off, bytes = stop - pos, salvaged = kept, lost = ?lost_ids, unreadable_headers = unreadable, header_ok = claimed.is_some(), "corrupt batch skipped; valid data follows");
        pos = stop;
        out.end = out.end.max((BLOCK + pos) as u64);
    }
    out
}
