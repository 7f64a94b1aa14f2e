//! Compaction: merges sparse sealed segments into one fresh segment and frees them;
//! segments with nothing live left are released without a target (so a full drive
//! whose chunks were deleted gets its space back even with no free segment).

use crate::format::*;
use crate::store::{ChunkStore, Entry, Io, Seg, SegState, MAX_BATCH_BYTES};
use crate::Result;
use cairn_chunkproto::ChunkId;
use std::collections::{BTreeSet, HashMap};

impl ChunkStore {
    /// Compacts when free segments run low (a quarter or less); for idle reactors.
    pub fn maybe_compact(&mut self) -> Result<usize> {
        if self.failed.is_some() || self.free.len() as u64 * 4 > self.sb.segment_count {
            return Ok(0);
        }
        self.compact(0.5)
    }

    /// One compaction round: copies the live records of sealed segments whose live
    /// fraction is below `max_live_ratio` into one fresh segment (verbatim, seqs
    /// kept), seals it, and only then frees the sources durably. Returns how many
    /// segments were freed (net of the target).
    pub fn compact(&mut self, max_live_ratio: f64) -> Result<usize> {
        self.check_ok()?;
        let ss = self.sb.segment_size;
        let usable = ss - 2 * BLOCK as u64;
        let mut cands: Vec<u32> = (0..self.segs.len() as u32)
            .filter(|&s| {
                let g = &self.segs[s as usize];
                g.state == SegState::Sealed && (g.live as f64) < max_live_ratio * usable as f64
            })
            .collect();
        if cands.is_empty() {
            return Ok(0);
        }
        cands.sort_by_key(|&s| self.segs[s as usize].live);
        // What each candidate would carry over.
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
        // Greedily pick sources whose records fit one segment.
        let mut picked = Vec::new();
        let mut bytes = 0u64;
        let mut count = 0usize;
        for &s in &cands {
            let recs = carry.get(&s).map(Vec::as_slice).unwrap_or(&[]);
            let b: u64 = recs.iter().map(|(_, e, _)| record_len(e.plen)).sum();
            // Generous slack for batch headers and block padding.
            let need = bytes + b + (recs.len() as u64 / 64 + 2) * BLOCK as u64;
            if BLOCK as u64 + need + summary_len(count + recs.len()) + BLOCK as u64 > ss {
                continue;
            }
            bytes += b;
            count += recs.len();
            picked.push(s);
        }
        if picked.is_empty() {
            return Ok(0);
        }
        let picked_set: BTreeSet<u32> = picked.iter().copied().collect();
        // A tombstone is kept while some other segment may still hold an older
        // record of its chunk.
        let older_elsewhere = |seq: u64, segs: &[Seg]| {
            segs.iter().enumerate().any(|(i, g)| {
                g.state != SegState::Free && !picked_set.contains(&(i as u32)) && g.min_seq < seq
            })
        };
        let mut moves: Vec<(ChunkId, Entry, RecordKind)> = Vec::new();
        let mut dropped_tombs = Vec::new();
        for s in &picked {
            for (id, e, k) in carry.remove(s).unwrap_or_default() {
                if k == RecordKind::Tombstone && !older_elsewhere(e.seq, &self.segs) {
                    dropped_tombs.push(id);
                } else {
                    moves.push((id, e, k));
                }
            }
        }
        if moves.is_empty() {
            // Nothing left alive: the sources are simply freed.
            for id in dropped_tombs {
                self.tombs.remove(&id);
            }
            for &s in &picked {
                self.release(s)?;
            }
            return Ok(picked.len());
        }
        if picked.len() < 2 {
            // Rewriting one segment into another frees nothing.
            return Ok(0);
        }
        if self.free.is_empty() {
            // No target (never so while the reserve holds).
            return Ok(0);
        }
        moves.sort_by_key(|(_, e, _)| e.seq);
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
            // as a tombstone of the same sequence, so no older record of the chunk
            // comes back at the next start, and the chunk reads as missing, which
            // the layer above rebuilds from other fragments.
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
        for i in lost {
            let (_, e, k) = &mut moves[i];
            e.plen = 0;
            e.crc = crc32c::crc32c(&[]);
            *k = RecordKind::Tombstone;
            self.open_stats.dropped_by_compaction += 1;
        }
        let t = self.open_segment(SegKind::Compaction)?;
        let mut new_locs = Vec::with_capacity(records.len());
        let mut i = 0;
        while i < records.len() {
            let mut j = i;
            let mut blen = BATCH_HEADER;
            while j < records.len() && (j == i || blen + records[j].len() <= MAX_BATCH_BYTES) {
                blen += records[j].len();
                j += 1;
            }
            let mut buf = self.qp.alloc_buf(blen)?;
            let b = buf.as_mut_slice();
            let mut pos = BATCH_HEADER;
            let wo = self.segs[t as usize].write_off;
            for r in &records[i..j] {
                b[pos..pos + r.len()].copy_from_slice(r);
                new_locs.push((wo as usize + pos) as u32);
                pos += r.len();
            }
            let bh = BatchHeader {
                records: (j - i) as u32,
                len: blen as u32,
                first_seq: moves[i].1.seq,
                body_crc: crc32c::crc32c(&b[BATCH_HEADER..blen]),
            };
            b[..BATCH_HEADER].copy_from_slice(&bh.encode());
            self.write(self.sb.segment_offset(t) + wo, buf)?;
            self.segs[t as usize].write_off = wo + round_block(blen as u64);
            i = j;
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
        for id in dropped_tombs {
            self.tombs.remove(&id);
        }
        for &s in &picked {
            self.release(s)?;
        }
        tracing::debug!(device = %self.device.name, sources = picked.len(), target = t, records = moves.len(), "compacted");
        Ok(picked.len() - 1)
    }
}
