//! The write path: group commit of puts and tombstones into the open segment, and
//! the reserve of free segments that puts never take (so deletes work on a full
//! drive and compaction always has a target).

use crate::flight::{PlacedBatch, Then, Ticket};
use crate::format::*;
use crate::store::{
    ChunkStore, Entry, Io, WriteOp, WriteOutcome, COMPACTION_RESERVE, MAX_BATCH_BYTES, RESERVE,
};
use crate::{Result, StoreError};
use cairn_blockdev::BlockError;
use cairn_types::{ChunkId, TenantId};
use std::collections::HashMap;

impl ChunkStore {
    pub(crate) fn fits(&self, s: u32, batch_len: usize, records: usize) -> bool {
        let seg = &self.segs[s as usize];
        seg.write_off
            + round_block(batch_len as u64)
            + summary_len(seg.entries.len() + records)
            + BLOCK as u64
            <= self.sb.segment_size
    }

    /// Whether puts may go into the open segment: not while it came from the reserve
    /// and the reserve is not whole again.
    pub(crate) fn open_takes_puts(&self) -> bool {
        self.open.is_some() && (!self.open_from_reserve || self.free.len() >= RESERVE)
    }

    /// Compaction until `want_free` segments are free, to make room for a write;
    /// its failure is only logged (the write then finds no room).
    fn compact_for_space(&mut self, want_free: usize) {
        if let Err(e) = self.compact_until(0.9, want_free) {
            tracing::warn!(device = %self.device.name, "compaction for space failed: {e}");
        }
    }

    /// The open segment for a write, opening one if needed. Puts never take the
    /// reserve; tombstones may take all of it but compaction's target.
    fn ensure_open(&mut self, put: bool) -> Result<u32> {
        if let Some(s) = self.open {
            if put && !self.open_takes_puts() {
                self.compact_for_space(RESERVE);
                if !self.open_takes_puts() {
                    return Err(StoreError::NoSpace);
                }
            }
            if self.free.len() >= RESERVE {
                self.open_from_reserve = false;
            }
            return Ok(s);
        }
        let keep = if put { RESERVE } else { COMPACTION_RESERVE };
        if self.free.len() <= keep {
            self.compact_for_space(keep + 1);
        }
        if self.free.len() <= keep {
            return Err(StoreError::NoSpace);
        }
        let s = self.open_segment(SegKind::Log)?;
        self.open = Some(s);
        self.open_from_reserve = self.free.len() < RESERVE;
        if self.open_from_reserve {
            tracing::info!(device = %self.device.name, segment = s, "drive full: segment opened from the reserve for deletes");
        }
        Ok(s)
    }

    /// Applies a durable record to the index; says whether the chunk existed.
    pub(crate) fn apply(&mut self, s: u32, off: u32, h: &RecordHeader) -> bool {
        let size = record_len(h.payload_len);
        let seg = &mut self.segs[s as usize];
        seg.used += size;
        seg.min_seq = seg.min_seq.min(h.seq);
        seg.entries.push(SummaryEntry {
            seq: h.seq,
            id: h.id,
            tenant: h.tenant,
            offset: off,
            payload_len: h.payload_len,
            payload_crc: h.payload_crc,
            kind: h.kind,
        });
        let entry = Entry {
            seg: s,
            off,
            plen: h.payload_len,
            crc: h.payload_crc,
            seq: h.seq,
            tenant: h.tenant,
        };
        let old = match h.kind {
            RecordKind::Put => {
                self.segs[s as usize].live += size;
                self.tombs.remove(&h.id);
                self.index.insert(h.id, entry)
            }
            RecordKind::Tombstone => {
                self.tombs.insert(h.id, entry);
                self.index.remove(&h.id)
            }
        };
        if let Some(o) = old {
            let seg = &mut self.segs[o.seg as usize];
            seg.live = seg.live.saturating_sub(record_len(o.plen));
        }
        old.is_some()
    }

    /// Group commit: writes all `ops` as (normally) one durable write and returns one
    /// result per op, in order, only after the data is on stable media.
    ///
    /// Write-back: when every op is a put with `durable: false`, the batch is
    /// written without FUA and answered once the device has it (in its volatile
    /// cache); it is flushed by [`ChunkStore::flush_older_than`], by [`ChunkStore::close`],
    /// or before the next durable write, whichever comes first. A batch with any
    /// durable op is durable as a whole.
    pub fn write_batch(&mut self, ops: &[WriteOp<'_>]) -> Vec<Result<WriteOutcome>> {
        let t = self.begin_write(ops);
        self.end_write(t)
    }

    /// [`ChunkStore::write_batch`] in two phases: everything up to the last
    /// batch's write is done here (a group larger than one batch, or one that
    /// seals a segment, writes the earlier parts before returning); the last
    /// batch is handed to the queue, and its records enter the index when it
    /// completes. Answered by [`ChunkStore::end_write`]. Waits first for
    /// whatever is in flight (see `flight.rs`).
    pub fn begin_write(&mut self, ops: &[WriteOp<'_>]) -> Ticket {
        self.settle();
        let write_back = ops
            .iter()
            .all(|op| matches!(op, WriteOp::Put { durable: false, .. }));
        let mut results: Vec<Option<Result<WriteOutcome>>> = (0..ops.len()).map(|_| None).collect();
        if let Err(e) = self.check_ok() {
            for r in &mut results {
                *r = Some(Err(StoreError::Failed(e.to_string())));
            }
            return self.submit(
                Vec::new(),
                Then::Write {
                    results,
                    batch: None,
                },
            );
        }
        // Plan: decide each op against the index as updated by the ops before it.
        let mut view: HashMap<ChunkId, Option<TenantId>> = HashMap::new();
        let mut plan: Vec<(usize, RecordHeader, &[u8])> = Vec::new();
        let max = self.max_payload();
        for (i, op) in ops.iter().enumerate() {
            let (id, tenant) = match op {
                WriteOp::Put { id, tenant, .. }
                | WriteOp::Delete { id, tenant }
                | WriteOp::DeleteVersion { id, tenant, .. } => (*id, *tenant),
            };
            let owner = match view.get(&id) {
                Some(o) => *o,
                None => self.index.get(&id).map(|e| e.tenant),
            };
            match op {
                WriteOp::Put {
                    key_id, payload, ..
                } => {
                    if payload.len() > max {
                        results[i] = Some(Err(StoreError::TooLarge(payload.len(), max)));
                    } else if owner.is_some_and(|t| t != tenant) {
                        results[i] = Some(Err(StoreError::TenantConflict));
                    } else {
                        view.insert(id, Some(tenant));
                        let h = RecordHeader {
                            kind: RecordKind::Put,
                            id,
                            tenant,
                            key_id: *key_id,
                            payload_len: payload.len() as u32,
                            payload_crc: crc32c::crc32c(payload),
                            seq: 0,
                        };
                        plan.push((i, h, payload));
                    }
                }
                WriteOp::Delete { .. } | WriteOp::DeleteVersion { .. } => {
                    // A versioned delete needs the very write it names: untouched
                    // by this batch so far, and with that sequence number.
                    let version_holds = match op {
                        WriteOp::DeleteVersion { seq, .. } => {
                            !view.contains_key(&id)
                                && self.index.get(&id).is_some_and(|e| e.seq == *seq)
                        }
                        _ => true,
                    };
                    if owner == Some(tenant) && version_holds {
                        view.insert(id, None);
                        let h = RecordHeader {
                            kind: RecordKind::Tombstone,
                            id,
                            tenant,
                            key_id: 0,
                            payload_len: 0,
                            payload_crc: crc32c::crc32c(&[]),
                            seq: 0,
                        };
                        plan.push((i, h, &[]));
                    } else {
                        // Absent, or another tenant's: nothing to delete, nothing written.
                        results[i] = Some(Ok(WriteOutcome::Delete { existed: false }));
                    }
                }
            }
        }
        let mut i = 0;
        while i < plan.len() {
            let is_put = plan[i].1.kind == RecordKind::Put;
            let s = match self.ensure_open(is_put) {
                Ok(s) => s,
                Err(StoreError::NoSpace) if is_put => {
                    // No room for puts: every remaining put is refused, the deletes
                    // still go (they may use the reserve).
                    for (k, h, p) in plan.split_off(i) {
                        if h.kind == RecordKind::Put {
                            results[k] = Some(Err(StoreError::NoSpace));
                        } else {
                            plan.push((k, h, p));
                        }
                    }
                    continue;
                }
                Err(e) => {
                    let msg = e.to_string();
                    for (k, _, _) in &plan[i..] {
                        results[*k] = Some(Err(match e {
                            StoreError::NoSpace => StoreError::NoSpace,
                            _ => StoreError::Failed(msg.clone()),
                        }));
                    }
                    break;
                }
            };
            let puts_ok = self.open_takes_puts();
            let mut j = i;
            let mut blen = BATCH_HEADER;
            while j < plan.len() {
                if !puts_ok && plan[j].1.kind == RecordKind::Put {
                    break;
                }
                let nb = blen + record_len(plan[j].1.payload_len) as usize;
                if nb > MAX_BATCH_BYTES && j > i {
                    break;
                }
                if !self.fits(s, nb, j - i + 1) {
                    break;
                }
                blen = nb;
                j += 1;
            }
            if j == i && self.segs[s as usize].entries.is_empty() {
                // Cannot happen for a validated size; never loop on it.
                let (k, h, _) = &plan[i];
                results[*k] = Some(Err(StoreError::TooLarge(h.payload_len as usize, max)));
                i += 1;
                continue;
            }
            if j == i {
                // Not even one more record fits: seal and roll to a fresh segment.
                if let Err(e) = self.seal(s) {
                    let msg = e.to_string();
                    for (k, _, _) in &plan[i..] {
                        results[*k] = Some(Err(StoreError::Failed(msg.clone())));
                    }
                    break;
                }
                continue;
            }
            // Lay the records out in one buffer: this is the one copy of a payload.
            let mut buf = match self.qp.alloc_buf(blen) {
                Ok(b) => b,
                Err(e) => {
                    for (k, _, _) in &plan[i..] {
                        results[*k] = Some(Err(StoreError::Io(BlockError::Alloc(blen))));
                    }
                    tracing::error!("{e}");
                    break;
                }
            };
            let first_seq = self.next_seq;
            let mut records = Vec::with_capacity(j - i);
            {
                let b = buf.as_mut_slice();
                let mut pos = BATCH_HEADER;
                for (k, h, payload) in &mut plan[i..j] {
                    h.seq = self.next_seq;
                    self.next_seq += 1;
                    b[pos..pos + RECORD_HEADER].copy_from_slice(&h.encode());
                    b[pos + RECORD_HEADER..pos + RECORD_HEADER + payload.len()]
                        .copy_from_slice(payload);
                    records.push((*k, *h, pos));
                    pos += record_len(h.payload_len) as usize;
                }
                let bh = BatchHeader {
                    records: (j - i) as u32,
                    len: blen as u32,
                    first_seq,
                    body_crc: crc32c::crc32c(&b[BATCH_HEADER..blen]),
                };
                b[..BATCH_HEADER].copy_from_slice(&bh.encode());
            }
            let placed = PlacedBatch {
                seg: s,
                off: self.segs[s as usize].write_off,
                len: blen,
                write_back,
                records,
            };
            let at = self.sb.segment_offset(s) + placed.off;
            if j == plan.len() {
                // The last batch: in flight when this returns.
                if !write_back {
                    // See `io`: no durable write over volatile records.
                    if let Err(e) = self.flush_if_unflushed() {
                        let msg = e.to_string();
                        for (k, _, _) in &plan[i..] {
                            results[*k] = Some(Err(StoreError::Failed(msg.clone())));
                        }
                        break;
                    }
                }
                return self.submit(
                    vec![Io::Write {
                        off: at,
                        buf,
                        fua: !write_back,
                    }],
                    Then::Write {
                        results,
                        batch: Some(placed),
                    },
                );
            }
            let written = self.write_as(at, buf, !write_back);
            let failed = written.is_err();
            self.commit_batch(&placed, written, &mut results);
            if failed {
                for (k, _, _) in &plan[j..] {
                    results[*k] = Some(Err(StoreError::Failed("an earlier batch failed".into())));
                }
                break;
            }
            i = j;
        }
        self.submit(
            Vec::new(),
            Then::Write {
                results,
                batch: None,
            },
        )
    }
}
