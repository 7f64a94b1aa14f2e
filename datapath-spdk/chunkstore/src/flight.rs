//! I/O in flight (split phase): a store call hands its I/Os to the queue and
//! returns a [`Ticket`]; the reactor goes on with other work, calls
//! [`ChunkStore::poll`], and collects the answer once the ticket is done. A group
//! commit's last batch updates the index only when the device has completed it,
//! and a read group verifies each buffer against the index entry it was read for.
//!
//! What may be in flight together, and why it is safe:
//! - reads with anything: a read addresses a record the index held when it was
//!   submitted, and a record's blocks are rewritten only after its segment is
//!   released, which a write or compaction does, and both first wait for
//!   everything in flight ([`ChunkStore::settle`]);
//! - at most one write: the log is appended in order, and a later batch landing
//!   before an earlier torn one would leave a hole that the next open must take
//!   for damage rather than a torn tail;
//! - a store-internal synchronous call (compaction's reads) waits for its own
//!   I/Os only; what else completes meanwhile is kept for its ticket;
//! - a flush never beside a write: it covers only the writes completed before
//!   it was submitted, so a write-back batch completing during it would be
//!   counted as flushed when it may not be.

use crate::format::{record_len, round_block, RecordHeader, RecordKind};
use crate::store::{submit_io, verify, ChunkStore, Entry, Io, WriteOutcome, IO_TIMEOUT};
use crate::{Result, StoreError};
use bytes::Bytes;
use cairn_blockdev::{Completion, DmaBuf};
use cairn_types::{ChunkId, TenantId};
use std::time::{Duration, Instant};

/// A group of I/Os handed to the queue; its answer is taken with
/// [`ChunkStore::end_write`] or [`ChunkStore::end_reads`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[must_use = "a ticket's answer must be taken, or its results are kept for ever"]
pub struct Ticket(u64);

/// One group in flight: its I/Os carry the tags `first..first + out.len()`.
pub(crate) struct Flight {
    out: Vec<Option<Result<DmaBuf>>>,
    pending: usize,
    since: Instant,
    then: Then,
}

/// What a group's completion does.
pub(crate) enum Then {
    /// The buffers go back to a store-internal caller as they are.
    Raw,
    /// A group commit: the outcomes decided so far, and the last batch, whose
    /// records enter the index once it is durable.
    Write {
        results: Vec<Option<Result<WriteOutcome>>>,
        batch: Option<PlacedBatch>,
    },
    /// Gets: what each buffer must hold.
    Reads {
        out: Vec<Option<Result<Bytes>>>,
        /// (position in the request, chunk, its index entry, record's offset in the buffer)
        wanted: Vec<(usize, ChunkId, Entry, usize)>,
    },
}

/// A finished group's answer.
pub(crate) enum Done {
    Raw(Vec<Result<DmaBuf>>),
    Write(Vec<Result<WriteOutcome>>),
    Reads(Vec<Result<Bytes>>),
}

/// A batch laid out in a segment: where it goes and the records in it.
pub(crate) struct PlacedBatch {
    pub(crate) seg: u32,
    /// Offset of the batch in the segment.
    pub(crate) off: u64,
    pub(crate) len: usize,
    /// Written without FUA: flushed later (see `write_batch`).
    pub(crate) write_back: bool,
    /// (operation's position, its record header, the record's offset in the batch)
    pub(crate) records: Vec<(usize, RecordHeader, usize)>,
}

impl ChunkStore {
    /// Hands `ios` to the queue as one group.
    pub(crate) fn submit(&mut self, ios: Vec<Io>, then: Then) -> Ticket {
        let first = self.next_tag;
        // An empty group still needs a ticket of its own.
        self.next_tag += ios.len().max(1) as u64;
        let mut out: Vec<Option<Result<DmaBuf>>> = (0..ios.len()).map(|_| None).collect();
        let mut pending = 0;
        for (i, io) in ios.into_iter().enumerate() {
            match submit_io(self.qp.as_mut(), first + i as u64, io) {
                Ok(()) => pending += 1,
                Err(e) => out[i] = Some(Err(e.into())),
            }
        }
        let flight = Flight {
            out,
            pending,
            since: Instant::now(),
            then,
        };
        if pending == 0 {
            self.finish(first, flight);
        } else {
            self.flights.insert(first, flight);
            // A queue may hold submissions until it is polled (io_uring hands
            // them to the kernel then): start them now, not at the next look.
            self.poll();
        }
        Ticket(first)
    }

    /// Takes what the device has completed, without blocking, and finishes the
    /// groups it completes. Says whether any group finished.
    pub fn poll(&mut self) -> bool {
        if self.flights.is_empty() {
            return false;
        }
        let mut completed: Vec<Completion> = Vec::new();
        let mut finished = false;
        if let Err(e) = self.qp.poll(&mut completed) {
            // The queue itself failed: nothing in flight will complete.
            let msg = e.to_string();
            for (first, mut f) in std::mem::take(&mut self.flights) {
                for o in f.out.iter_mut().filter(|o| o.is_none()) {
                    *o = Some(Err(StoreError::Failed(msg.clone())));
                }
                self.finish(first, f);
                finished = true;
            }
            return finished;
        }
        for c in completed {
            let Some((&first, f)) = self.flights.range_mut(..=c.tag).next_back() else {
                continue; // an I/O given up on (timed out), or the close's flush
            };
            let i = (c.tag - first) as usize;
            if i >= f.out.len() || f.out[i].is_some() {
                continue;
            }
            f.out[i] = Some(match c.result {
                Ok(_) => match c.buf {
                    Some(b) => Ok(b),
                    None => DmaBuf::zeroed(0).map_err(Into::into),
                },
                Err(e) => Err(e.into()),
            });
            f.pending -= 1;
            if f.pending == 0 {
                if let Some(f) = self.flights.remove(&first) {
                    self.finish(first, f);
                }
                finished = true;
            }
        }
        // A device that does not complete an I/O in IO_TIMEOUT is treated as
        // failed (its buffers stay with the queue until it does).
        let late: Vec<u64> = self
            .flights
            .iter()
            .filter(|(_, f)| f.since.elapsed() > IO_TIMEOUT)
            .map(|(first, _)| *first)
            .collect();
        for first in late {
            if let Some(mut f) = self.flights.remove(&first) {
                for o in f.out.iter_mut().filter(|o| o.is_none()) {
                    *o = Some(Err(StoreError::Failed("I/O timed out".into())));
                }
                self.finish(first, f);
                finished = true;
            }
        }
        finished
    }

    /// Whether the ticket's answer is ready (call [`ChunkStore::poll`] first).
    pub fn is_done(&self, t: Ticket) -> bool {
        self.done.contains_key(&t.0)
    }

    /// Whether a group commit's last batch is in flight.
    pub(crate) fn write_in_flight(&self) -> bool {
        self.flights
            .values()
            .any(|f| matches!(f.then, Then::Write { batch: Some(_), .. }))
    }

    /// Whether any group is in flight.
    pub fn in_flight(&self) -> bool {
        !self.flights.is_empty()
    }

    /// Blocks until the ticket is done; `None` for a ticket this store never gave.
    pub(crate) fn wait(&mut self, t: Ticket) -> Option<Done> {
        loop {
            if let Some(d) = self.done.remove(&t.0) {
                return Some(d);
            }
            if !self.flights.contains_key(&t.0) {
                return None;
            }
            self.look();
        }
    }

    /// Waits until nothing is in flight (answers stay kept for their tickets).
    pub(crate) fn settle(&mut self) {
        while !self.flights.is_empty() {
            self.look();
        }
    }

    /// One look at the queue for a blocking caller: finish what completed, or
    /// sleep until something does (at most 100 ms).
    fn look(&mut self) {
        if !self.poll() {
            if let Err(e) = self.qp.wait(Duration::from_millis(100)) {
                tracing::warn!(device = %self.device.name, "queue wait failed: {e}");
            }
        }
    }

    /// The outcome of each op of a group commit, once it is durable (blocks
    /// until then).
    pub fn end_write(&mut self, t: Ticket) -> Vec<Result<WriteOutcome>> {
        match self.wait(t) {
            Some(Done::Write(r)) => r,
            _ => Vec::new(),
        }
    }

    /// Each get's verified payload (blocks until the reads are done).
    pub fn end_reads(&mut self, t: Ticket) -> Vec<Result<Bytes>> {
        match self.wait(t) {
            Some(Done::Reads(r)) => r,
            _ => Vec::new(),
        }
    }

    pub(crate) fn end_raw(&mut self, t: Ticket, n: usize) -> Vec<Result<DmaBuf>> {
        match self.wait(t) {
            Some(Done::Raw(r)) => r,
            _ => (0..n)
                .map(|_| Err(StoreError::Malformed("no completion")))
                .collect(),
        }
    }

    /// Hands the gets' reads to the queue; answered by [`ChunkStore::end_reads`].
    /// Every payload is verified (header crc, payload crc, chunk id, tenant,
    /// seq) before it is returned.
    pub fn begin_reads(&mut self, reqs: &[(ChunkId, TenantId)]) -> Ticket {
        let mut out: Vec<Option<Result<Bytes>>> = (0..reqs.len()).map(|_| None).collect();
        let mut ios = Vec::new();
        let mut wanted = Vec::new();
        if let Err(e) = self.check_ok() {
            for o in &mut out {
                *o = Some(Err(StoreError::Failed(e.to_string())));
            }
        } else {
            for (i, (id, tenant)) in reqs.iter().enumerate() {
                match self.index.get(id) {
                    Some(e) if e.tenant == *tenant => {
                        let abs = self.sb.segment_offset(e.seg) + e.off as u64;
                        let start = abs - abs % crate::format::BLOCK as u64;
                        let end = round_block(abs + record_len(e.plen));
                        ios.push(Io::Read {
                            off: start,
                            len: end - start,
                        });
                        wanted.push((i, *id, *e, (abs - start) as usize));
                    }
                    _ => out[i] = Some(Err(StoreError::NotFound)),
                }
            }
        }
        self.submit(ios, Then::Reads { out, wanted })
    }

    /// Applies a durable batch's records to the index (or, if it failed, fails
    /// its ops).
    pub(crate) fn commit_batch(
        &mut self,
        b: &PlacedBatch,
        written: Result<()>,
        results: &mut [Option<Result<WriteOutcome>>],
    ) {
        match written {
            Ok(()) => {
                if b.write_back {
                    self.unflushed_since.get_or_insert_with(Instant::now);
                }
                for (k, h, placed) in &b.records {
                    let existed = self.apply(b.seg, (b.off as usize + placed) as u32, h);
                    results[*k] = Some(Ok(match h.kind {
                        RecordKind::Put => WriteOutcome::Put,
                        RecordKind::Tombstone => WriteOutcome::Delete { existed },
                    }));
                }
                self.segs[b.seg as usize].write_off = b.off + round_block(b.len as u64);
            }
            Err(e) => {
                let msg = e.to_string();
                for (k, _, _) in &b.records {
                    results[*k] = Some(Err(StoreError::Failed(msg.clone())));
                }
            }
        }
    }

    /// A group is complete: fail the store on an I/O error, then do what the
    /// group's completion does and keep the answer for its ticket.
    fn finish(&mut self, first: u64, f: Flight) {
        let bufs: Vec<Result<DmaBuf>> = f
            .out
            .into_iter()
            .map(|o| o.unwrap_or(Err(StoreError::Malformed("no completion"))))
            .collect();
        for r in &bufs {
            if let Err(e) = r {
                if self.failed.is_none() {
                    let msg = e.to_string();
                    tracing::error!(device = %self.device.name, "I/O error, failing the store: {msg}");
                    self.failed = Some(msg);
                }
            }
        }
        let done = match f.then {
            Then::Raw => Done::Raw(bufs),
            Then::Write { mut results, batch } => {
                if let Some(b) = batch {
                    let written = bufs
                        .into_iter()
                        .next()
                        .unwrap_or(Err(StoreError::Malformed("no completion")))
                        .map(drop);
                    self.commit_batch(&b, written, &mut results);
                }
                Done::Write(
                    results
                        .into_iter()
                        .map(|r| {
                            r.unwrap_or(Err(StoreError::Malformed("operation left unanswered")))
                        })
                        .collect(),
                )
            }
            Then::Reads { mut out, wanted } => {
                for ((i, id, e, rel), r) in wanted.into_iter().zip(bufs) {
                    out[i] = Some(r.and_then(|buf| verify(buf, rel, &id, &e)));
                }
                Done::Reads(
                    out.into_iter()
                        .map(|r| r.unwrap_or(Err(StoreError::NotFound)))
                        .collect(),
                )
            }
        };
        self.done.insert(first, done);
    }
}
