//! Compaction: packs the live records of sparse sealed segments into fresh ones
//! and frees the sources; segments with nothing live left are released without a
//! target (so a full drive whose chunks were deleted gets its space back even with
//! no free segment).
//!
//! A round fills one target with records taken first-fit from the sources, the
//! sparsest first, and frees every source it emptied. A source that did not fit
//! whole is left partly drained (its moved records now live in the target, the
//! rest stay where they are) and goes first in the next round. Moving only whole
//! segments would never free anything once deletes are spread evenly: two
//! half-live segments do not fit into one, and a drive filled, thinned by half and
//! filled again stayed full at half its capacity.

use crate::format::*;
use crate::store::{ChunkStore, Entry, Io, Seg, SegState, MAX_BATCH_BYTES};
use crate::Result;
use cairn_types::ChunkId;
use std::collections::{BTreeSet, HashMap};

/// What one round did.
struct Round {
    /// Sources freed.
    released: usize,
    /// The segment it filled, if it wrote one.
    target: Option<u32>,
}

impl ChunkStore {
    /// Compacts when free segments run low (a quarter or less); for idle reactors.
    /// One round per call, so the reactor gets back to its queues in between.
    pub fn maybe_compact(&mut self) -> Result<usize> {
        if self.failed.is_some() || self.free.len() as u64 * 4 > self.sb.segment_count {
            return Ok(0);
        }
        let before = self.free.len();
        self.compact_round(0.5, &BTreeSet::new())?;
        Ok(self.free.len().saturating_sub(before))
    }

    /// Compacts sealed segments whose live fraction is below `max_live_ratio` for as
    /// long as rounds free anything. Returns how many segments were freed, net of
    /// the targets.
    pub fn compact(&mut self, max_live_ratio: f64) -> Result<usize> {
        self.compact_until(max_live_ratio, usize::MAX)
    }

    /// Compacts until `want_free` segments are free or no round can free more.
    pub(crate) fn compact_until(&mut self, max_live_ratio: f64, want_free: usize) -> Result<usize> {
        self.check_ok()?;
        // Releasing a segment must not pull it from under a read in flight.
        self.settle();
        let before = self.free.len();
        // Targets written by this call are not sources again in it.
        let mut filled = BTreeSet::new();
        for _ in 0..self.segs.len() {
            if self.free.len() >= want_free {
                break;
            }
            match self.compact_round(max_live_ratio, &filled)? {
                Some(Round { released: 0, .. }) | None => break,
                Some(Round { target, .. }) => filled.extend(target),
            }
        }
        Ok(self.free.len().saturating_sub(before))
    }

    /// One round: copies live records (verbatim, seqs kept) of the sparsest sealed
    /// segments into one fresh segment, seals it, and only then frees the sources
    /// it emptied durably. `None` when nothing is worth moving.
    fn compact_round(
        &mut self,
        max_live_ratio: f64,
        skip: &BTreeSet<u32>,
    ) -> Result<Option<Round>> {
        self.check_ok()?;
        let ss = self.sb.segment_size;
        let usable = ss - 2 * BLOCK as u64;
        let mut cands: Vec<u32> = (0..self.segs.len() as u32)
            .filter(|&s| {
                let g = &self.segs[s as usize];
                g.state == SegState::Sealed
                    && !skip.contains(&s)
                    && (g.live as f64) < max_live_ratio * usable as f64
            })
            .collect();
        if cands.is_empty() {
            return Ok(None);
        }
        cands.sort_by_key(|&s| self.segs[s as usize].live);
        // What each candidate would carry over, oldest first.
        let cand_set: BTreeSet<u32> = cands.iter().copied().collect();
        let mut carry: HashMap<u32, Vec<(ChunkId, Entry, RecordKind)>> = HashMap::new();
        for (id, e) in &self.index {
            if cand_set.contains(&e.seg) {
                carry
                    .entry(e.seg)
                    .or_default()
                    .push((*id, *e, RecordKind::Put));
            }
        }
        for (id, e) in &self.tombs {
            if cand_set.contains(&e.seg) {
                carry
                    .entry(e.seg)
                    .or_default()
                    .push((*id, *e, RecordKind::Tombstone));
            }
        }
        for recs in carry.values_mut() {
            recs.sort_by_key(|(_, e, _)| e.seq);
        }
        // Moving is worth it only if the candidates' records fit into fewer
        // segments than they take: otherwise rounds would shuffle them for ever.
        let total: u64 = carry
            .values()
            .flatten()
            .map(|(_, e, _)| record_len(e.plen))
            .sum();
        let records: usize = carry.values().map(Vec::len).sum();
        if Plan::bytes_for(total, records) > (cands.len() as u64 - 1) * (usable - BLOCK as u64) {
            return Ok(None);
        }
        // First fit, sparsest source first.
        let mut plan = Plan::new(ss);
        let mut emptied = Vec::new();
        let mut drained = 0usize;
        let mut moves: Vec<(ChunkId, Entry, RecordKind)> = Vec::new();
        for &s in &cands {
            let recs = carry.remove(&s).unwrap_or_default();
            let mut left = 0;
            let mut took = 0;
            for r in recs {
                if plan.take(record_len(r.1.plen)) {
                    moves.push(r);
                    took += 1;
                } else {
                    left += 1;
                }
            }
            if left == 0 {
                emptied.push(s);
            } else if took > 0 {
                drained += 1;
            }
        }
        if emptied.is_empty() {
            // Only drained (or nothing fitted): frees nothing.
            return Ok(None);
        }
        let emptied_set: BTreeSet<u32> = emptied.iter().copied().collect();
        // A tombstone from an emptied source is kept while some other segment may
        // still hold an older record of its chunk.
        let older_elsewhere = |seq: u64, segs: &[Seg]| {
            segs.iter().enumerate().any(|(i, g)| {
                g.state != SegState::Free && !emptied_set.contains(&(i as u32)) && g.min_seq < seq
            })
        };
        let mut dropped_tombs = Vec::new();
        moves.retain(|(id, e, k)| {
            let drop = *k == RecordKind::Tombstone
                && emptied_set.contains(&e.seg)
                && !older_elsewhere(e.seq, &self.segs);
            if drop {
                dropped_tombs.push(*id);
            }
            !drop
        });
        let target = if moves.is_empty() {
            None
        } else if emptied.len() + drained < 2 || self.free.is_empty() {
            // One source rewritten alone frees nothing; and with no target (never
            // so while the reserve holds) nothing can move.
            return Ok(None);
        } else {
            match self.move_records(&mut moves)? {
                Some(t) => Some(t),
                None => return Ok(None),
            }
        };
        for id in dropped_tombs {
            self.tombs.remove(&id);
        }
        for &s in &emptied {
            self.release(s)?;
        }
        tracing::debug!(device = %self.device.name, freed = emptied.len(), drained, target, records = moves.len(), "compacted");
        Ok(Some(Round {
            released: emptied.len(),
            target,
        }))
    }

    /// Reads and verifies `moves` (sorted here by seq, as a compaction segment's
    /// records must be), writes them into a fresh segment, seals it, and points the
    /// index at the copies. A record that no longer verifies is carried on as a
    /// tombstone. `None` (nothing written) if they would not fit after all.
    fn move_records(&mut self, moves: &mut [(ChunkId, Entry, RecordKind)]) -> Result<Option<u32>> {
        let ss = self.sb.segment_size;
        moves.sort_by_key(|(_, e, _)| e.seq);
        let lens: Vec<usize> = moves
            .iter()
            .map(|(_, e, _)| record_len(e.plen) as usize)
            .collect();
        let layout = batches(&lens);
        let body: u64 = layout
            .iter()
            .map(|r| round_block((BATCH_HEADER + lens[r.clone()].iter().sum::<usize>()) as u64))
            .sum();
        if BLOCK as u64 + body + summary_len(moves.len()) + BLOCK as u64 > ss {
            tracing::error!(device = %self.device.name, records = moves.len(), "compaction planned more than a segment holds; skipped");
            return Ok(None);
        }
        // Read and verify everything before touching the target.
        let ios = moves
            .iter()
            .map(|(_, e, _)| {
                let abs = self.sb.segment_offset(e.seg) + e.off as u64;
                let start = abs - abs % BLOCK as u64;
                Io::Read {
                    off: start,
                    len: round_block(abs + record_len(e.plen)) - start,
                }
            })
            .collect();
        let bufs = self.io(ios);
        let mut records: Vec<Vec<u8>> = Vec::with_capacity(moves.len());
        let mut lost = Vec::new();
        for (i, ((id, e, k), r)) in moves.iter().zip(bufs).enumerate() {
            let buf = r?;
            let abs = self.sb.segment_offset(e.seg) + e.off as u64;
            let rel = (abs % BLOCK as u64) as usize;
            let len = record_len(e.plen) as usize;
            let raw = buf.as_slice().get(rel..rel + len).unwrap_or(&[]);
            let ok = match parse_record(raw) {
                Ok((h, _)) => h.id == *id && h.seq == e.seq && h.kind == *k,
                Err(_) => false,
            };
            if ok {
                records.push(raw.to_vec());
                continue;
            }
            // A bad record must not pin its segment (a full drive could then never
            // reclaim space). Its bytes are lost whatever we do; it is carried on
            // as a tombstone of the same sequence (shorter, so the planned layout
            // still holds), no older record of the chunk comes back at the next
            // start, and the chunk reads as missing, which the layer above
            // rebuilds from other fragments.
            tracing::error!(
                device = %self.device.name,
                chunk = %id,
                segment = e.seg,
                "corrupt record found by compaction: the chunk is dropped (repair rebuilds it)"
            );
            let tomb = RecordHeader {
                kind: RecordKind::Tombstone,
                id: *id,
                tenant: e.tenant,
                key_id: 0,
                payload_len: 0,
                payload_crc: crc32c::crc32c(&[]),
                seq: e.seq,
            };
            let mut rec = tomb.encode().to_vec();
            rec.resize(record_len(0) as usize, 0);
            records.push(rec);
            lost.push(i);
        }
        // The sources' live bytes, before the lost records turn into tombstones.
        for (id, e, k) in moves.iter() {
            if *k == RecordKind::Put && self.index.get(id).is_some_and(|x| x.seq == e.seq) {
                let src = &mut self.segs[e.seg as usize];
                src.live = src.live.saturating_sub(record_len(e.plen));
            }
        }
        for i in lost {
            let (_, e, k) = &mut moves[i];
            e.plen = 0;
            e.crc = crc32c::crc32c(&[]);
            *k = RecordKind::Tombstone;
            self.open_stats.dropped_by_compaction += 1;
        }
        let t = self.open_segment(SegKind::Compaction)?;
        let mut new_locs = Vec::with_capacity(records.len());
        for range in batches(&records.iter().map(Vec::len).collect::<Vec<_>>()) {
            let blen = BATCH_HEADER + records[range.clone()].iter().map(Vec::len).sum::<usize>();
            let mut buf = self.qp.alloc_buf(blen)?;
            let b = buf.as_mut_slice();
            let mut pos = BATCH_HEADER;
            let wo = self.segs[t as usize].write_off;
            for r in &records[range.clone()] {
                b[pos..pos + r.len()].copy_from_slice(r);
                new_locs.push((wo as usize + pos) as u32);
                pos += r.len();
            }
            let bh = BatchHeader {
                records: range.len() as u32,
                len: blen as u32,
                first_seq: moves[range.start].1.seq,
                body_crc: crc32c::crc32c(&b[BATCH_HEADER..blen]),
            };
            b[..BATCH_HEADER].copy_from_slice(&bh.encode());
            self.write(self.sb.segment_offset(t) + wo, buf)?;
            self.segs[t as usize].write_off = wo + round_block(blen as u64);
        }
        // Record the moves in the target's summary, then seal it durably.
        for ((id, e, k), off) in moves.iter().zip(&new_locs) {
            let seg = &mut self.segs[t as usize];
            seg.used += record_len(e.plen);
            seg.min_seq = seg.min_seq.min(e.seq);
            seg.entries.push(SummaryEntry {
                seq: e.seq,
                id: *id,
                tenant: e.tenant,
                offset: *off,
                payload_len: e.plen,
                payload_crc: e.crc,
                kind: *k,
            });
        }
        self.seal(t)?;
        for ((id, e, k), off) in moves.iter().zip(&new_locs) {
            let moved = Entry {
                seg: t,
                off: *off,
                ..*e
            };
            match k {
                RecordKind::Put => {
                    self.index.insert(*id, moved);
                    self.segs[t as usize].live += record_len(e.plen);
                }
                RecordKind::Tombstone => {
                    // A put found corrupt above: its chunk is gone from the index.
                    if self.index.get(id).is_some_and(|x| x.seq == e.seq) {
                        self.index.remove(id);
                    }
                    self.tombs.insert(*id, moved);
                }
            }
        }
        Ok(Some(t))
    }
}

/// A compaction target being planned: whether records still fit, counted with
/// room to spare for batch headers, block padding and the summary.
struct Plan {
    segment_size: u64,
    bytes: u64,
    records: usize,
}

impl Plan {
    fn new(segment_size: u64) -> Self {
        Plan {
            segment_size,
            bytes: 0,
            records: 0,
        }
    }

    /// Takes a record of `len` bytes if it fits.
    fn take(&mut self, len: u64) -> bool {
        let need = Self::bytes_for(self.bytes + len, self.records + 1);
        if 2 * BLOCK as u64 + need > self.segment_size {
            return false;
        }
        self.bytes += len;
        self.records += 1;
        true
    }

    /// An upper bound on what `records` records of `bytes` take in a segment
    /// besides its header and footer blocks. Batches are cut greedily at
    /// `MAX_BATCH_BYTES`, so any two neighbours hold more than that: there are at
    /// most `2 * bytes / MAX_BATCH_BYTES + 1` of them, each with a header and
    /// less than a block of padding.
    fn bytes_for(bytes: u64, records: usize) -> u64 {
        let batches = (records as u64).min(2 * bytes / (MAX_BATCH_BYTES - BATCH_HEADER) as u64 + 1);
        bytes + batches * (BATCH_HEADER + BLOCK) as u64 + summary_len(records)
    }
}

/// Cuts records of these lengths, in order, into batches the way they are written:
/// greedily, each at most `MAX_BATCH_BYTES` unless one record alone is larger.
fn batches(lens: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lens.len() {
        let mut j = i;
        let mut blen = BATCH_HEADER;
        while j < lens.len() && (j == i || blen + lens[j] <= MAX_BATCH_BYTES) {
            blen += lens[j];
            j += 1;
        }
        out.push(i..j);
        i = j;
    }
    out
}
