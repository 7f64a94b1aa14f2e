//! The chunk store proper: its state, format, segment lifecycle, reads and
//! reports. Writes (group commit and the reserve) are in `write.rs`, open and
//! recovery in `recovery.rs`, compaction in `compact.rs`.
//!
//! I/O goes through the queue pair in groups (`flight.rs`): a group commit or a
//! set of gets can be handed to the queue and collected later (split phase), so a
//! reactor serves small reads while a large write or read is on the device; the
//! synchronous calls (`write_batch`, `get_many`) are the same groups, waited for.
//! Reads of one group run in parallel on the queue.

use crate::flight::{Done, Flight, Then};
use crate::format::*;
use crate::recovery::OpenStats;
use crate::{Result, StoreError};
use bytes::Bytes;
use cairn_blockdev::{BlockDevice, Completion, DeviceInfo, DmaBuf, QueuePair};
use cairn_types::{ChunkId, ChunkVersion, TenantId};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::time::{Duration, Instant};

/// Largest single write; bigger batches are split (each piece is still durable
/// before anything is acknowledged).
pub(crate) const MAX_BATCH_BYTES: usize = 8 << 20;
/// Free segments only compaction may take (its target).
pub(crate) const COMPACTION_RESERVE: usize = 1;
/// Free segments only tombstones (and compaction) may take, so deletes succeed on a
/// full drive. One segment holds `segment_size / 4096 - 3` delete batches (each any
/// number of tombstones); when it fills, compaction frees the segments whose
/// chunks were deleted before another is taken.
pub(crate) const DELETE_RESERVE: usize = 1;
/// Free segments puts never take.
pub(crate) const RESERVE: usize = COMPACTION_RESERVE + DELETE_RESERVE;
/// A device that does not complete an I/O in this long is treated as failed.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Identity and geometry for formatting a drive.
#[derive(Clone, Debug)]
pub struct FormatParams {
    pub drive_uuid: [u8; 16],
    pub node_id: [u8; 16],
    pub cluster_id: [u8; 16],
    pub drive_index: u16,
    /// Bytes per segment (a multiple of 4 KiB, at least 64 KiB).
    pub segment_size: u64,
}

/// One write of a group-committed batch.
#[derive(Clone, Copy, Debug)]
pub enum WriteOp<'a> {
    /// `durable: false` (write-back): see [`ChunkStore::write_batch`].
    Put {
        id: ChunkId,
        tenant: TenantId,
        key_id: u32,
        payload: &'a [u8],
        durable: bool,
    },
    Delete {
        id: ChunkId,
        tenant: TenantId,
    },
    /// Deletes the chunk only while it is the version written with sequence
    /// number `seq` and no earlier op of the batch touched it (see the chunk
    /// protocol's `DeleteVersion`); otherwise nothing is written and the outcome
    /// is `Delete { existed: false }`.
    DeleteVersion {
        id: ChunkId,
        tenant: TenantId,
        seq: u64,
    },
}

/// The result of one durable write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    Put,
    Delete { existed: bool },
}

/// Space accounting, for `DriveInfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Bytes of the device given to segments.
    pub capacity: u64,
    /// Bytes of live put records (header + payload).
    pub live_bytes: u64,
    /// Bytes of segments in use (open or sealed).
    pub allocated_bytes: u64,
    /// Live chunks.
    pub chunks: u64,
    pub free_segments: u64,
    pub segments: u64,
    /// Free segments puts never take: compaction's target and deletes' tombstones.
    pub reserve_segments: u64,
    /// No room for puts: they are refused with `NoSpace` until deletes and
    /// compaction free a segment (mgmt should say "full" and place elsewhere).
    pub full: bool,
    /// What the last open found. Segments whose header, summary or footer was
    /// damaged (their records were rescanned).
    pub damaged_segments_at_open: u64,
    /// Damaged batches followed by valid data (corruption, not a torn tail);
    /// adjacent batches whose headers are unreadable count as one.
    pub corrupt_batches_at_open: u64,
    /// Records lost in damaged batches: those whose header verified but whose
    /// payload did not (their chunk ids are logged), and those whose own header is
    /// unreadable (ids unknown; exact when the batch header verifies, else the seqs
    /// between the neighbouring valid batches that no record found has, capped by
    /// what the damaged bytes could hold).
    pub corrupt_records_at_open: u64,
    /// Records kept from inside damaged batches.
    pub salvaged_records_at_open: u64,
    /// Unreadable last batches dropped as torn writes (never acknowledged).
    pub torn_batches_at_open: u64,
    /// Blank and formatted by this start: every chunk it should hold is missing.
    pub formatted_at_open: bool,
    /// Corrupt records dropped by compaction since the open (their chunks read as
    /// missing until rebuilt).
    pub dropped_since_open: u64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) seg: u32,
    pub(crate) off: u32,
    pub(crate) plen: u32,
    pub(crate) crc: u32,
    pub(crate) seq: u64,
    pub(crate) tenant: TenantId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegState {
    Free,
    Open,
    Sealed,
}

#[derive(Clone, Debug)]
pub(crate) struct Seg {
    pub(crate) state: SegState,
    pub(crate) open_seq: u64,
    /// Next write position within the segment (block aligned).
    pub(crate) write_off: u64,
    /// Records written to this segment; kept only while it is open (for the summary).
    pub(crate) entries: Vec<SummaryEntry>,
    /// Bytes of live put records.
    pub(crate) live: u64,
    /// Bytes of all records written.
    pub(crate) used: u64,
    /// Lowest seq of any record in the segment (u64::MAX when none).
    pub(crate) min_seq: u64,
}

impl Seg {
    pub(crate) fn free() -> Self {
        Seg {
            state: SegState::Free,
            open_seq: 0,
            write_off: BLOCK as u64,
            entries: Vec::new(),
            live: 0,
            used: 0,
            min_seq: u64::MAX,
        }
    }
}

pub(crate) enum Io {
    Read {
        off: u64,
        len: u64,
    },
    /// `fua`: complete only once on stable media.
    Write {
        off: u64,
        buf: DmaBuf,
        fua: bool,
    },
    Trim {
        off: u64,
        len: u64,
    },
    Flush,
}

/// One drive's chunk store. See the crate documentation.
pub struct ChunkStore {
    pub(crate) qp: Box<dyn QueuePair>,
    pub(crate) sb: Superblock,
    /// The device as it was at open (backend, location, identity, geometry).
    pub(crate) device: DeviceInfo,
    pub(crate) segs: Vec<Seg>,
    pub(crate) free: BTreeSet<u32>,
    pub(crate) open: Option<u32>,
    /// The open segment was taken from the reserve (for tombstones): puts stay out of
    /// it until the reserve is whole again.
    pub(crate) open_from_reserve: bool,
    pub(crate) index: BTreeMap<ChunkId, Entry>,
    /// Chunks whose newest record is a tombstone, and where that tombstone lives.
    pub(crate) tombs: HashMap<ChunkId, Entry>,
    pub(crate) next_seq: u64,
    pub(crate) failed: Option<String>,
    /// What the last open found damaged or salvaged.
    pub(crate) open_stats: OpenStats,
    /// Since when write-back records sit in the device's volatile cache, not
    /// yet flushed (none: everything written is durable).
    pub(crate) unflushed_since: Option<Instant>,
    /// Groups of I/O in flight, by the tag of their first I/O (`flight.rs`).
    pub(crate) flights: BTreeMap<u64, Flight>,
    /// Finished groups' answers, kept until their ticket is redeemed.
    pub(crate) done: HashMap<u64, Done>,
    pub(crate) next_tag: u64,
}

impl std::fmt::Debug for ChunkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkStore")
            .field("device", &self.device.name)
            .field("chunks", &self.index.len())
            .field("failed", &self.failed)
            .finish()
    }
}

impl ChunkStore {
    /// Reads block 0 of a device.
    pub fn probe(dev: &dyn BlockDevice) -> Result<Probe> {
        let mut qp = dev.open_queue()?;
        let b = read_sync(qp.as_mut(), 0, BLOCK as u64)?;
        Ok(Superblock::probe(b.as_slice()))
    }

    /// Formats a blank device (refuses anything else) and opens it.
    pub fn format(dev: &dyn BlockDevice, p: &FormatParams) -> Result<Self> {
        match Self::probe(dev)? {
            Probe::Blank => {}
            Probe::Cairn(_) | Probe::Foreign => return Err(StoreError::Foreign),
        }
        if p.segment_size < 16 * BLOCK as u64
            || !p.segment_size.is_multiple_of(BLOCK as u64)
            || p.segment_size > u32::MAX as u64
        {
            return Err(StoreError::Mismatch(format!(
                "bad segment size {}",
                p.segment_size
            )));
        }
        let info = dev.info();
        let count = info.size().saturating_sub(DATA_OFFSET) / p.segment_size;
        // Puts need one segment beyond the reserve.
        if count < RESERVE as u64 + 1 {
            return Err(StoreError::Mismatch(format!(
                "device of {} bytes holds fewer than {} segments of {}",
                info.size(),
                RESERVE + 1,
                p.segment_size
            )));
        }
        let sb = Superblock {
            drive_uuid: p.drive_uuid,
            node_id: p.node_id,
            cluster_id: p.cluster_id,
            drive_index: p.drive_index,
            segment_size: p.segment_size,
            segment_count: count,
            data_offset: DATA_OFFSET,
        };
        let mut qp = dev.open_queue()?;
        // Segment headers first (a blank superblock does not prove blank segments),
        // the superblock last: a crash mid-format leaves a blank device.
        let mut ios = Vec::new();
        for s in 0..count as u32 {
            ios.push(Io::Write {
                off: sb.segment_offset(s),
                buf: qp.alloc_buf(BLOCK)?,
                fua: true,
            });
        }
        for r in run(qp.as_mut(), ios) {
            r?;
        }
        let mut b = qp.alloc_buf(BLOCK)?;
        b.as_mut_slice()[..SB_LEN].copy_from_slice(&sb.encode());
        write_sync(qp.as_mut(), 0, b)?;
        drop(qp);
        let mut store = Self::open(dev)?;
        store.open_stats.formatted = true;
        Ok(store)
    }

    /// The drive's superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The device the store lives on, as it was when the store was opened.
    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }

    /// Why the store failed, if it did.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Largest payload a chunk may have on this drive.
    pub fn max_payload(&self) -> usize {
        // A fresh segment: header block, one batch, a one-entry summary, footer.
        let room = self.sb.segment_size - 3 * BLOCK as u64 - summary_len(1);
        (room - BATCH_HEADER as u64 - RECORD_HEADER as u64 - 8).min(u32::MAX as u64) as usize
    }

    pub(crate) fn check_ok(&self) -> Result<()> {
        match &self.failed {
            Some(why) => Err(StoreError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    pub(crate) fn io(&mut self, ios: Vec<Io>) -> Vec<Result<DmaBuf>> {
        // A durable write never lands while write-back records before it are
        // still volatile: otherwise a power loss could keep the later write and
        // lose the earlier records under it, a hole in the log that the next
        // open would take for corruption rather than a torn tail. A write or
        // flush first waits for a write in flight: that keeps one write in flight
        // per log, and a flush covers only the writes completed before it is
        // submitted, so a write-back batch completing during it would be counted
        // as flushed when it may not be.
        if ios
            .iter()
            .any(|io| matches!(io, Io::Write { .. } | Io::Flush))
            && self.write_in_flight()
        {
            self.settle();
        }
        if ios
            .iter()
            .any(|io| matches!(io, Io::Write { fua: true, .. }))
        {
            if let Err(e) = self.flush_if_unflushed() {
                return ios
                    .iter()
                    .map(|_| Err(StoreError::Failed(e.to_string())))
                    .collect();
            }
        }
        let n = ios.len();
        let t = self.submit(ios, Then::Raw);
        self.end_raw(t, n)
    }

    /// Makes every write so far durable (write-back records included).
    pub fn flush(&mut self) -> Result<()> {
        self.check_ok()?;
        // `io` waits for a write in flight first (see there). A failed flush fails the store (in the group's completion).
        match self.io(vec![Io::Flush]).pop() {
            Some(Ok(_)) => {
                self.unflushed_since = None;
                Ok(())
            }
            Some(Err(e)) => Err(StoreError::Failed(e.to_string())),
            None => Err(StoreError::Malformed("no completion")),
        }
    }

    /// Flushes write-back records, if any, before a durable write.
    pub(crate) fn flush_if_unflushed(&mut self) -> Result<()> {
        match self.unflushed_since {
            Some(_) => self.flush(),
            None => Ok(()),
        }
    }

    /// Flushes write-back records once they have waited `age` or more.
    /// Never waits for a write in flight: the flush comes at the next look
    /// after it completed.
    pub fn flush_older_than(&mut self, age: Duration) -> Result<()> {
        match self.unflushed_since {
            Some(t) if t.elapsed() >= age && !self.write_in_flight() => self.flush(),
            _ => Ok(()),
        }
    }

    pub(crate) fn write(&mut self, off: u64, buf: DmaBuf) -> Result<()> {
        self.write_as(off, buf, true)
    }

    /// One write; `fua: false` is a write-back batch's (see `write_batch`).
    pub(crate) fn write_as(&mut self, off: u64, buf: DmaBuf, fua: bool) -> Result<()> {
        self.io(vec![Io::Write { off, buf, fua }])
            .pop()
            .unwrap_or(Err(StoreError::Malformed("no completion")))?;
        Ok(())
    }

    /// Durably marks a segment free (zeroed header) and gives its space back.
    pub(crate) fn release(&mut self, s: u32) -> Result<()> {
        let off = self.sb.segment_offset(s);
        self.write(off, self.qp.alloc_buf(BLOCK)?)?;
        // Punching the rest is only an optimisation (and drops the stale footer).
        let _ = self.io(vec![Io::Trim {
            off: off + BLOCK as u64,
            len: self.sb.segment_size - BLOCK as u64,
        }]);
        self.segs[s as usize] = Seg::free();
        self.free.insert(s);
        if self.open == Some(s) {
            self.open = None;
        }
        Ok(())
    }

    pub(crate) fn open_segment(&mut self, kind: SegKind) -> Result<u32> {
        let s = self.free.pop_first().ok_or(StoreError::NoSpace)?;
        let open_seq = self.next_seq;
        self.next_seq += 1;
        let mut b = self.qp.alloc_buf(BLOCK)?;
        b.as_mut_slice()[..SEG_HEADER_LEN].copy_from_slice(
            &SegmentHeader {
                index: s,
                kind,
                open_seq,
            }
            .encode(),
        );
        if let Err(e) = self.write(self.sb.segment_offset(s), b) {
            self.free.insert(s);
            return Err(e);
        }
        let seg = &mut self.segs[s as usize];
        *seg = Seg::free();
        seg.state = SegState::Open;
        seg.open_seq = open_seq;
        Ok(s)
    }

    /// Writes the summary and footer into the segment's tail.
    pub(crate) fn seal(&mut self, s: u32) -> Result<()> {
        let ss = self.sb.segment_size;
        let seg = &self.segs[s as usize];
        let slen = summary_len(seg.entries.len());
        let mut buf = self.qp.alloc_buf((slen + BLOCK as u64) as usize)?;
        let b = buf.as_mut_slice();
        for (i, e) in seg.entries.iter().enumerate() {
            e.encode_into(&mut b[i * SUMMARY_ENTRY..(i + 1) * SUMMARY_ENTRY]);
        }
        let crc = crc32c::crc32c(&b[..seg.entries.len() * SUMMARY_ENTRY]);
        let summary_offset = ss - BLOCK as u64 - slen;
        let footer = SegmentFooter {
            index: s,
            open_seq: seg.open_seq,
            entries: seg.entries.len() as u32,
            summary_offset: summary_offset as u32,
            summary_crc: crc,
        };
        b[slen as usize..slen as usize + FOOTER_LEN].copy_from_slice(&footer.encode());
        self.write(self.sb.segment_offset(s) + summary_offset, buf)?;
        let seg = &mut self.segs[s as usize];
        seg.state = SegState::Sealed;
        seg.entries = Vec::new();
        if self.open == Some(s) {
            self.open = None;
        }
        Ok(())
    }

    /// Reads one chunk.
    pub fn get(&mut self, id: ChunkId, tenant: TenantId) -> Result<Bytes> {
        self.get_many(&[(id, tenant)])
            .pop()
            .unwrap_or(Err(StoreError::NotFound))
    }

    /// Reads several chunks with their I/Os in flight together. Every payload is
    /// verified (header crc, payload crc, chunk id, tenant, seq) before it is returned.
    pub fn get_many(&mut self, reqs: &[(ChunkId, TenantId)]) -> Vec<Result<Bytes>> {
        let t = self.begin_reads(reqs);
        self.end_reads(t)
    }

    /// Length and crc32c of a chunk's payload, from the index (no read).
    pub fn stat(&self, id: ChunkId, tenant: TenantId) -> Result<(u32, u32)> {
        self.check_ok()?;
        match self.index.get(&id) {
            Some(e) if e.tenant == tenant => Ok((e.plen, e.crc)),
            _ => Err(StoreError::NotFound),
        }
    }

    /// Up to `limit` live chunks with ids greater than `after`, in id order, of every
    /// tenant, each with its tenant.
    pub fn list(&self, after: ChunkId, limit: usize) -> Result<Vec<(ChunkId, TenantId)>> {
        self.check_ok()?;
        Ok(self
            .index
            .range((Bound::Excluded(after), Bound::Unbounded))
            .take(limit)
            .map(|(k, e)| (*k, e.tenant))
            .collect())
    }

    /// Like [`list`](Self::list), with the sequence number of the write that made
    /// each chunk (its version; compaction keeps it).
    pub fn list_versions(&self, after: ChunkId, limit: usize) -> Result<Vec<ChunkVersion>> {
        self.check_ok()?;
        Ok(self
            .index
            .range((Bound::Excluded(after), Bound::Unbounded))
            .take(limit)
            .map(|(k, e)| ChunkVersion {
                id: *k,
                tenant: e.tenant,
                seq: e.seq,
            })
            .collect())
    }

    /// Space accounting.
    pub fn report(&self) -> Report {
        let ss = self.sb.segment_size;
        let used = self
            .segs
            .iter()
            .filter(|s| s.state != SegState::Free)
            .count() as u64;
        let st = &self.open_stats;
        Report {
            capacity: self.sb.segment_count * ss,
            live_bytes: self.segs.iter().map(|s| s.live).sum(),
            allocated_bytes: used * ss,
            chunks: self.index.len() as u64,
            free_segments: self.free.len() as u64,
            segments: self.sb.segment_count,
            reserve_segments: RESERVE as u64,
            full: !self.open_takes_puts() && self.free.len() <= RESERVE,
            damaged_segments_at_open: st.damaged_segments,
            corrupt_batches_at_open: st.corrupt_batches,
            corrupt_records_at_open: st.corrupt_records,
            salvaged_records_at_open: st.salvaged_records,
            torn_batches_at_open: st.torn_batches,
            formatted_at_open: st.formatted,
            dropped_since_open: st.dropped_by_compaction,
        }
    }

    /// Closes the store: seals the open segment and flushes (write-back records
    /// become durable here at the latest), then drops the queue.
    pub fn close(mut self) -> Result<()> {
        self.settle();
        // Seal the open segment: after a clean stop every record is then in a
        // summary, so damage to the last batch can never be mistaken at the next
        // open for a torn (unacknowledged) write.
        if let (None, Some(s)) = (&self.failed, self.open) {
            if let Err(e) = self.seal(s) {
                tracing::warn!(device = %self.device.name, segment = s, "sealing the open segment at close: {e}");
            }
        }
        if self.failed.is_none() {
            self.qp.submit_flush(u64::MAX)?;
            let mut done = Vec::new();
            let t = Instant::now();
            while done.is_empty() && t.elapsed() < IO_TIMEOUT {
                self.qp.wait(Duration::from_millis(100))?;
                self.qp.poll(&mut done)?;
            }
        }
        Ok(())
    }
}

/// The payload of the record at `rel` in `buf`, once its header crc, payload
/// crc and identity (chunk id, tenant, seq, length) match the index entry.
pub(crate) fn verify(buf: DmaBuf, rel: usize, id: &ChunkId, e: &Entry) -> Result<Bytes> {
    let raw = buf.as_slice().get(rel..).unwrap_or(&[]);
    let (h, payload) =
        parse_record(raw).map_err(|m| StoreError::Corrupt(format!("chunk {id}: {m}")))?;
    if h.id != *id
        || h.tenant != e.tenant
        || h.seq != e.seq
        || h.kind != RecordKind::Put
        || h.payload_len != e.plen
        || h.payload_crc != e.crc
    {
        return Err(StoreError::Corrupt(format!(
            "chunk {id}: record identity does not match the index"
        )));
    }
    if buf.is_pooled() {
        // A device's DMA pool is bounded: its buffers are never lent to an
        // answer that may wait on a slow client.
        return Ok(Bytes::copy_from_slice(payload));
    }
    // Served from the buffer the device read into, without a copy.
    let start = rel + RECORD_HEADER;
    let end = start + payload.len();
    Ok(Bytes::from_owner(buf).slice(start..end))
}

pub(crate) fn read_sync(qp: &mut dyn QueuePair, off: u64, len: u64) -> Result<DmaBuf> {
    run(qp, vec![Io::Read { off, len }])
        .pop()
        .unwrap_or(Err(StoreError::Malformed("no completion")))
}

pub(crate) fn write_sync(qp: &mut dyn QueuePair, off: u64, buf: DmaBuf) -> Result<()> {
    run(
        qp,
        vec![Io::Write {
            off,
            buf,
            fua: true,
        }],
    )
    .pop()
    .unwrap_or(Err(StoreError::Malformed("no completion")))?;
    Ok(())
}

/// Hands one I/O to the queue under `tag` (a read gets a fresh buffer).
pub(crate) fn submit_io(
    qp: &mut dyn QueuePair,
    tag: u64,
    io: Io,
) -> std::result::Result<(), cairn_blockdev::BlockError> {
    match io {
        Io::Read { off, len } => qp
            .alloc_buf(len as usize)
            .and_then(|b| qp.submit_read(tag, off, b)),
        Io::Write { off, buf, fua } => qp.submit_write(tag, off, buf, fua),
        Io::Trim { off, len } => qp.submit_trim(tag, off, len),
        Io::Flush => qp.submit_flush(tag),
    }
}

/// Submits every I/O, then collects all completions. Results are
/// in submission order (a flush/trim yields an empty buffer placeholder).
pub(crate) fn run(qp: &mut dyn QueuePair, ios: Vec<Io>) -> Vec<Result<DmaBuf>> {
    let n = ios.len();
    let mut out: Vec<Option<Result<DmaBuf>>> = (0..n).map(|_| None).collect();
    let mut pending = 0usize;
    for (i, io) in ios.into_iter().enumerate() {
        match submit_io(qp, i as u64, io) {
            Ok(()) => pending += 1,
            Err(e) => out[i] = Some(Err(e.into())),
        }
    }
    let mut done: Vec<Completion> = Vec::new();
    let start = Instant::now();
    while pending > 0 {
        done.clear();
        let got = match qp.poll(&mut done) {
            Ok(g) => g,
            Err(e) => {
                let msg = e.to_string();
                return out
                    .into_iter()
                    .map(|o| o.unwrap_or_else(|| Err(StoreError::Failed(msg.clone()))))
                    .collect();
            }
        };
        for c in done.drain(..) {
            let i = c.tag as usize;
            if i < n && out[i].is_none() {
                pending -= 1;
                out[i] = Some(match c.result {
                    Ok(_) => match c.buf {
                        Some(b) => Ok(b),
                        None => DmaBuf::zeroed(0).map_err(Into::into),
                    },
                    Err(e) => Err(e.into()),
                });
            }
        }
        if got == 0 && pending > 0 {
            if start.elapsed() > IO_TIMEOUT {
                break;
            }
            if let Err(e) = qp.wait(Duration::from_millis(100)) {
                tracing::warn!("queue wait failed: {e}");
            }
        }
    }
    out.into_iter()
        .map(|o| o.unwrap_or_else(|| Err(StoreError::Failed("I/O timed out".into()))))
        .collect()
}
