//! One batch, from its decoded operations to its reply frames.
//!
//! Writes and the other small operations run first, all together (one message
//! per drive, as before; a reactor runs a message's writes before its reads, so a
//! get after a put of the same chunk in one batch still sees it). Then the batch
//! gives back its request's bytes, and the gets run in *waves*: the chunks' lengths
//! are looked up in the index first (`Stat`, no I/O), results are grouped in
//! request order into waves of at most a frame of reply, and each wave reserves
//! its reply's bytes, reads its chunks, and goes out as one response frame before
//! the next wave is read. So a batch asking for gigabytes is streamed at the pace
//! the client takes it, holding one wave at a time; a reply that fits in a frame
//! is one frame, as it always was (a client that predates split replies sees no
//! change for it); a larger one is several frames (see
//! `cairn_chunkproto::Reassembly`); and the gets past [`MAX_BATCH_REPLY`] are
//! refused by name, before they are read.

use super::budget::{Budget, Held};
use super::Out;
use crate::reactor::Router;
use cairn_chunkproto::{
    encode_response_frames, response_len, Failure, FailureCode, Reply, Request, Response,
    MAX_BATCH_REPLY, MAX_FRAME,
};
use cairn_types::DriveIndex;
use std::collections::BTreeMap;
use tokio::sync::mpsc;

/// Reply bytes one wave of gets may read and hold: what one frame carries.
pub(super) const WAVE_BYTES: usize = MAX_FRAME - FRAME_HEAD;
/// Chunk ids all the `List`s of one batch may return together (1.5 MiB of reply).
const MAX_LISTED: usize = 65_536;
/// Bytes of a response frame around its results.
const FRAME_HEAD: usize = 16;

/// Runs one batch and sends its reply frames to the connection's writer.
/// `request` holds the request frame's bytes; it is given back once the
/// operations that carry payloads are done.
pub(super) async fn run(
    router: &Router,
    budget: &Budget,
    out: &mpsc::Sender<Out>,
    request_id: u64,
    ops: Vec<Request>,
    request: Held,
) {
    let n = ops.len();
    let mut results: Vec<Option<Response>> = (0..n).map(|_| None).collect();
    let mut gets: Vec<Option<Request>> = (0..n).map(|_| None).collect();
    let (mut idx, mut others) = (Vec::new(), Vec::new());
    let mut listed = 0usize;
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Request::Get { .. } => gets[i] = Some(op),
            Request::List { limit, .. } | Request::ListVersions { limit, .. } => {
                let room = MAX_LISTED - listed;
                if limit > 0 && room == 0 {
                    results[i] = Some(Err(Failure::new(
                        FailureCode::BadRequest,
                        format!("a batch lists at most {MAX_LISTED} chunk ids: list in several"),
                    )));
                    continue;
                }
                let limit = (limit as usize).min(room);
                listed += limit;
                idx.push(i);
                others.push(match op {
                    Request::List { drive, after, .. } => Request::List {
                        drive,
                        after,
                        limit: limit as u32,
                    },
                    Request::ListVersions { drive, after, .. } => Request::ListVersions {
                        drive,
                        after,
                        limit: limit as u32,
                    },
                    other => other,
                });
            }
            _ => {
                idx.push(i);
                others.push(op);
            }
        }
    }
    if !others.is_empty() {
        for (i, r) in idx.into_iter().zip(execute(router, others).await) {
            results[i] = Some(r);
        }
    }
    // The payloads are written and dropped: the request's bytes are free.
    drop(request);

    let planned = plan(router, &mut results, &gets).await;
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        let mut bytes = planned[start];
        while end < n && bytes + planned[end] <= WAVE_BYTES {
            bytes += planned[end];
            end += 1;
        }
        let Some(mut held) = budget.reserve(FRAME_HEAD + bytes).await else {
            return;
        };
        let wave: Vec<(usize, Request)> = (start..end)
            .filter_map(|i| gets[i].take().map(|g| (i, g)))
            .filter(|(i, _)| results[*i].is_none())
            .collect();
        if !wave.is_empty() {
            let (wi, wops): (Vec<usize>, Vec<Request>) = wave.into_iter().unzip();
            for (i, r) in wi.into_iter().zip(execute(router, wops).await) {
                results[i] = Some(r);
            }
        }
        let res: Vec<Response> = results[start..end]
            .iter_mut()
            .map(|r| match r.take() {
                // A chunk that grew past a frame since its length was looked up.
                Some(r) if FRAME_HEAD + response_len(&r) > MAX_FRAME => Err(too_large(MAX_FRAME)),
                Some(r) => r,
                None => Err(no_answer()),
            })
            .collect();
        // A chunk replaced by a larger one since the lookup: take what it needs
        // if it is free, and otherwise run over by that much for this wave.
        let need = FRAME_HEAD + res.iter().map(response_len).sum::<usize>();
        if need > held.bytes() {
            if let Some(more) = budget.try_reserve(need - held.bytes()) {
                held.merge(more);
            }
        }
        if !send(out, request_id, &res, held).await {
            return;
        }
        start = end;
    }
    if n == 0 {
        if let Some(held) = budget.reserve(FRAME_HEAD).await {
            send(out, request_id, &[], held).await;
        }
    }
}

/// The reply bytes each result will take: exact for the operations already run,
/// the indexed length for a get. The gets past [`MAX_BATCH_REPLY`] are refused
/// here, so they are never read.
async fn plan(
    router: &Router,
    results: &mut [Option<Response>],
    gets: &[Option<Request>],
) -> Vec<usize> {
    let (idx, stats): (Vec<usize>, Vec<Request>) = gets
        .iter()
        .enumerate()
        .filter_map(|(i, g)| match g {
            Some(Request::Get { drive, id, tenant }) => Some((
                i,
                Request::Stat {
                    drive: *drive,
                    id: *id,
                    tenant: *tenant,
                },
            )),
            _ => None,
        })
        .unzip();
    let mut get_len = BTreeMap::new();
    if !stats.is_empty() {
        for (i, r) in idx.into_iter().zip(execute(router, stats).await) {
            // A failed lookup: the get fails too (or finds a chunk put since,
            // which the wave then makes room for).
            let len = match r {
                Ok(Reply::Stat { len, .. }) => 6 + len as usize,
                _ => 64,
            };
            get_len.insert(i, len);
        }
    }
    let mut total = 0usize;
    let mut over = false;
    let mut planned = Vec::with_capacity(results.len());
    for (i, r) in results.iter_mut().enumerate() {
        let mut len = match (&*r, get_len.get(&i)) {
            (Some(r), _) => response_len(r),
            (None, Some(&l)) => l,
            (None, None) => 64,
        };
        if r.is_none() && (over || total + len > MAX_BATCH_REPLY) {
            over = true;
            let refused = Err(too_large(MAX_BATCH_REPLY));
            len = response_len(&refused);
            *r = Some(refused);
        }
        total += len;
        planned.push(len);
    }
    planned
}

/// Hands the results to the writer as one or more frames, each with its share of
/// the bytes held. False when the connection is gone.
async fn send(out: &mpsc::Sender<Out>, request_id: u64, res: &[Response], mut held: Held) -> bool {
    let frames = match encode_response_frames(request_id, res) {
        Ok(f) => f,
        Err(e) => {
            // Every result was checked to fit a frame: this is a bug, said loudly.
            tracing::error!(request_id, "cannot encode a reply: {e}");
            let failed: Vec<Response> = res
                .iter()
                .map(|_| Err(Failure::new(FailureCode::Io, "reply not encodable")))
                .collect();
            match encode_response_frames(request_id, &failed) {
                Ok(f) => f,
                Err(_) => return false,
            }
        }
    };
    for parts in frames {
        let len = parts.iter().map(bytes::Bytes::len).sum();
        let Some(share) = held.split(len) else {
            return false;
        };
        if out.send(Out { parts, held: share }).await.is_err() {
            return false;
        }
    }
    true
}

fn too_large(limit: usize) -> Failure {
    Failure::new(
        FailureCode::BadRequest,
        format!("reply would exceed {limit} bytes: ask for fewer chunks per batch"),
    )
}

fn no_answer() -> Failure {
    Failure::new(FailureCode::Io, "no answer")
}

/// Runs operations: split by drive, one message per drive, answers back in order.
pub(super) async fn execute(router: &Router, ops: Vec<Request>) -> Vec<Response> {
    let n = ops.len();
    let mut results: Vec<Option<Response>> = (0..n).map(|_| None).collect();
    let mut by_drive: BTreeMap<DriveIndex, (Vec<usize>, Vec<Request>)> = BTreeMap::new();
    for (i, op) in ops.into_iter().enumerate() {
        let d = op.drive();
        if d as usize >= router.drives() {
            results[i] = Some(Err(Failure::new(
                FailureCode::BadRequest,
                format!("no drive {d}"),
            )));
            continue;
        }
        let e = by_drive.entry(d).or_default();
        e.0.push(i);
        e.1.push(op);
    }
    let mut waits = Vec::new();
    for (d, (idx, ops)) in by_drive {
        waits.push((idx, router.send(d, ops)));
    }
    for (idx, rx) in waits {
        let answers = match rx {
            Some(rx) => rx.await.ok(),
            None => None,
        };
        match answers {
            Some(a) if a.len() == idx.len() => {
                for (i, r) in idx.into_iter().zip(a) {
                    results[i] = Some(r);
                }
            }
            _ => {
                for i in idx {
                    results[i] = Some(Err(Failure::new(
                        FailureCode::DriveFailed,
                        "reactor unavailable",
                    )));
                }
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(no_answer())))
        .collect()
}
