//! One turn of a drive's work, in phases (split phase): the turn's writes go to
//! the drive as one group commit; once that is durable, the reads the index
//! answers (stat, list, reports) are answered and the gets go to the drive
//! together; once they are verified, every message is answered in its own order.
//!
//! Small work runs a turn to its end at once (`Drive::run`). Large work starts
//! a turn and leaves it in flight (`Drive::begin`): the reactor goes on with the
//! other drives and with small reads on this one while the device works, and
//! moves the turn on as its I/O completes (`Drive::progress`).

use crate::drive::Drive;
use crate::reactor::Work;
use cairn_chunkproto::{Failure, FailureCode, ReactorLoad, Reply, Request, Response};
use cairn_chunkstore::{Ticket, WriteOp, WriteOutcome};
use cairn_types::ChunkId;
use std::collections::HashSet;

/// Most ids one List answers (keeps a response well under the frame limit).
const MAX_LIST: usize = 65_536;

/// A turn: its messages, the answers so far, and what it waits for.
pub(crate) struct Turn {
    batches: Vec<Work>,
    results: Vec<Vec<Option<Response>>>,
    /// Chunks the turn writes or deletes: a small read of one waits for the
    /// turn, so it never sees the chunk as it was before a write that was sent
    /// to this drive before it.
    pub(crate) writes: HashSet<ChunkId>,
    phase: Phase,
}

enum Phase {
    /// The group commit in flight; (message, op, a versioned delete) of each write.
    Writing {
        ticket: Ticket,
        wpos: Vec<(usize, usize, bool)>,
    },
    /// The gets in flight; (message, op) of each.
    Reading {
        ticket: Ticket,
        gpos: Vec<(usize, usize)>,
    },
    /// Everything answered but not yet sent.
    Answer,
}

impl Drive {
    /// Runs one turn to its end: `batches` are the messages, each answered in
    /// its own order. All writes of the turn are one group commit.
    pub(crate) fn run(&mut self, batches: Vec<Work>, load: &ReactorLoad) {
        let t = self.start(batches, load);
        let left = self.advance(t, true, load);
        debug_assert!(left.is_none(), "a blocking turn ends");
    }

    /// Starts a turn of large work and leaves it in flight.
    pub(crate) fn begin(&mut self, batches: Vec<Work>, load: &ReactorLoad) {
        debug_assert!(self.turn.is_none(), "one turn of large work at a time");
        let t = self.start(batches, load);
        self.turn = self.advance(t, false, load);
    }

    /// Moves the turn in flight on as far as its I/O has completed.
    pub(crate) fn progress(&mut self, load: &ReactorLoad) {
        if let Some(t) = self.turn.take() {
            self.turn = self.advance(t, false, load);
        }
    }

    fn start(&mut self, batches: Vec<Work>, load: &ReactorLoad) -> Turn {
        let mut t = Turn {
            results: batches
                .iter()
                .map(|(ops, _)| (0..ops.len()).map(|_| None).collect())
                .collect(),
            batches,
            writes: HashSet::new(),
            phase: Phase::Answer,
        };
        self.check_health_if_unhealthy_store();
        // Writes first, all messages together.
        let mut wpos = Vec::new();
        let mut writes = Vec::new();
        for (b, (ops, _)) in t.batches.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                let w = match op {
                    Request::Put {
                        id,
                        tenant,
                        key_id,
                        payload,
                        durable,
                        ..
                    } => WriteOp::Put {
                        id: *id,
                        tenant: *tenant,
                        key_id: *key_id,
                        payload: payload.as_ref(),
                        durable: *durable,
                    },
                    Request::Delete { id, tenant, .. } => WriteOp::Delete {
                        id: *id,
                        tenant: *tenant,
                    },
                    Request::DeleteVersion {
                        id, tenant, seq, ..
                    } => WriteOp::DeleteVersion {
                        id: *id,
                        tenant: *tenant,
                        seq: *seq,
                    },
                    _ => continue,
                };
                let (WriteOp::Put { id, .. }
                | WriteOp::Delete { id, .. }
                | WriteOp::DeleteVersion { id, .. }) = w;
                t.writes.insert(id);
                wpos.push((b, i, matches!(w, WriteOp::DeleteVersion { .. })));
                writes.push(w);
            }
        }
        if writes.is_empty() {
            t.phase = self.start_reads(&t.batches, &mut t.results, load);
            return t;
        }
        let store = match (&self.failed, &mut self.open) {
            (None, Some((_, store))) => Some(store),
            _ => None,
        };
        if let Some(store) = store {
            let ticket = store.begin_write(&writes);
            t.phase = Phase::Writing { ticket, wpos };
        } else {
            drop(writes);
            for &(b, i, _) in &wpos {
                t.results[b][i] = Some(Err(self.failed_response()));
            }
            t.phase = self.start_reads(&t.batches, &mut t.results, load);
        }
        t
    }

    /// Answers what the index answers and hands the gets to the drive.
    fn start_reads(
        &mut self,
        batches: &[Work],
        results: &mut [Vec<Option<Response>>],
        load: &ReactorLoad,
    ) -> Phase {
        let mut gpos = Vec::new();
        let mut gets = Vec::new();
        for (b, (ops, _)) in batches.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                let r = match op {
                    Request::Put { .. }
                    | Request::Delete { .. }
                    | Request::DeleteVersion { .. } => continue,
                    Request::DriveInfo { .. } => Ok(Reply::DriveInfo(self.report(load))),
                    Request::DriveDetails { .. } => Ok(Reply::DriveDetails(self.report(load))),
                    _ if self.failed.is_some() || self.open.is_none() => {
                        Err(self.failed_response())
                    }
                    Request::Get { id, tenant, .. } => {
                        gpos.push((b, i));
                        gets.push((*id, *tenant));
                        continue;
                    }
                    Request::Stat { id, tenant, .. } => match self.store().stat(*id, *tenant) {
                        Ok((len, crc32c)) => Ok(Reply::Stat { len, crc32c }),
                        Err(e) => Err(self.failure(e)),
                    },
                    Request::List { after, limit, .. } => {
                        match self.store().list(*after, (*limit as usize).min(MAX_LIST)) {
                            Ok(chunks) => Ok(Reply::List { chunks }),
                            Err(e) => Err(self.failure(e)),
                        }
                    }
                    Request::ListVersions { after, limit, .. } => match self
                        .store()
                        .list_versions(*after, (*limit as usize).min(MAX_LIST))
                    {
                        Ok(chunks) => Ok(Reply::ListVersions { chunks }),
                        Err(e) => Err(self.failure(e)),
                    },
                };
                results[b][i] = Some(r);
            }
        }
        match (gets.is_empty(), &mut self.open) {
            (false, Some((_, store))) => Phase::Reading {
                ticket: store.begin_reads(&gets),
                gpos,
            },
            _ => Phase::Answer,
        }
    }

    /// Moves a turn on; with `block`, to its end. Returns it if it still waits.
    fn advance(&mut self, mut t: Turn, block: bool, load: &ReactorLoad) -> Option<Turn> {
        if !block {
            if let Some((_, store)) = &mut self.open {
                store.poll();
            }
        }
        loop {
            let ticket = match &t.phase {
                Phase::Writing { ticket, .. } | Phase::Reading { ticket, .. } => Some(*ticket),
                Phase::Answer => None,
            };
            if let (Some(ticket), false, Some((_, store))) = (ticket, block, &self.open) {
                if !store.is_done(ticket) {
                    return Some(t);
                }
            }
            match std::mem::replace(&mut t.phase, Phase::Answer) {
                Phase::Writing { ticket, wpos } => {
                    let out = match &mut self.open {
                        Some((_, store)) => store.end_write(ticket),
                        None => Vec::new(),
                    };
                    let mut out = out.into_iter();
                    for (b, i, versioned) in wpos {
                        t.results[b][i] = Some(match out.next() {
                            Some(Ok(WriteOutcome::Put)) => Ok(Reply::Put),
                            Some(Ok(WriteOutcome::Delete { existed })) if versioned => {
                                Ok(Reply::DeleteVersion { deleted: existed })
                            }
                            Some(Ok(WriteOutcome::Delete { existed })) => {
                                Ok(Reply::Delete { existed })
                            }
                            Some(Err(e)) => Err(self.failure(e)),
                            None => Err(Failure::new(FailureCode::Io, "write left unanswered")),
                        });
                    }
                    t.phase = self.start_reads(&t.batches, &mut t.results, load);
                }
                Phase::Reading { ticket, gpos } => {
                    let out = match &mut self.open {
                        Some((_, store)) => store.end_reads(ticket),
                        None => Vec::new(),
                    };
                    let mut out = out.into_iter();
                    for (b, i) in gpos {
                        t.results[b][i] = Some(match out.next() {
                            Some(Ok(payload)) => Ok(Reply::Get { payload }),
                            Some(Err(e)) => Err(self.failure(e)),
                            None => Err(Failure::new(FailureCode::Io, "read left unanswered")),
                        });
                    }
                }
                Phase::Answer => {
                    for ((_, reply), res) in t.batches.into_iter().zip(t.results) {
                        let res = res
                            .into_iter()
                            .map(|r| {
                                r.unwrap_or_else(|| {
                                    Err(Failure::new(FailureCode::Io, "operation not executed"))
                                })
                            })
                            .collect();
                        // The connection may be gone; its answers are simply dropped.
                        let _ = reply.send(res);
                    }
                    self.check_health_if_unhealthy_store();
                    return None;
                }
            }
        }
    }
}
