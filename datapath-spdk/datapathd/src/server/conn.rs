//! One authenticated connection: a reader that admits and decodes frames, a task
//! per batch, and a writer.
//!
//! The reader learns a frame's length from its first four bytes and reserves that
//! many bytes of the budget before it reads the body (waiting, without reading,
//! while the service is full). A frame has `--frame-timeout` from its first byte
//! to its last, that wait included: whatever stalls it, the connection is closed
//! and its bytes given back, so stalled clients cannot hold the budget (or a
//! place in the queue for it) for longer than that. The buffer
//! grows only as bytes arrive, and never holds more than the admitted frame, or
//! [`SLACK`] bytes while the next frame's length is not known yet. So a client
//! that announces 64 MiB and stalls costs the bytes it sent, and is cut off after
//! the frame timeout.

use super::budget::{bump, Budget, Held};
use super::{batch, Ctx, Out};
use bytes::BytesMut;
use cairn_chunkproto::{decode_frame, frame_len};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// Batches one connection may have in flight.
const MAX_INFLIGHT: usize = 64;
/// Bytes read ahead of the admitted frame (to learn the next frame's length).
const SLACK: usize = 64 << 10;
/// Most bytes the buffer grows by before one read.
const READ_CHUNK: usize = 1 << 20;

/// Serves one connection whose client has proved itself, until it closes, breaks
/// a limit, or the service stops.
pub(super) async fn serve<S>(stream: S, ctx: Ctx, peer: String)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    /// Counts the connection open for as long as it is (also when it is dropped
    /// mid-way, as a peer that leaves the cluster is).
    struct Open(Arc<super::Stats>);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
    ctx.stats.open.fetch_add(1, Ordering::Relaxed);
    let _open = Open(ctx.stats.clone());
    run(stream, ctx, &peer).await;
}

async fn run<S>(stream: S, ctx: Ctx, peer: &str)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let Ctx {
        router,
        mut stop,
        limits,
        global,
        stats,
    } = ctx;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let budget = Budget::new(global, limits.conn_bytes);
    let (out_tx, mut out_rx) = mpsc::channel::<Out>(MAX_INFLIGHT);
    let writer_stats = stats.clone();
    let writer_peer = peer.to_string();
    let writer = tokio::spawn(async move {
        while let Some(out) = out_rx.recv().await {
            for p in &out.parts {
                // A client that does not take its replies is dropped, not waited on.
                match tokio::time::timeout(limits.frame, wr.write_all(p)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(peer = %writer_peer, "write to client failed: {e}");
                        return;
                    }
                    Err(_) => {
                        let n = bump(&writer_stats.closed_slow);
                        tracing::warn!(peer = %writer_peer, closed_slow = n, "client does not take its replies: connection closed");
                        return;
                    }
                }
            }
            // The reply's bytes are given back once they are on the socket.
            drop(out);
        }
        let _ = wr.shutdown().await;
    });
    let inflight = Arc::new(Semaphore::new(MAX_INFLIGHT));
    let mut tasks = JoinSet::new();
    let mut buf = BytesMut::new();
    // The frame at the front of `buf` once admitted: its whole length, its bytes
    // and its batch slot.
    let mut admitted: Option<(usize, Held, OwnedSemaphorePermit)> = None;
    let mut last_read = Instant::now();
    // When the first byte of the frame now arriving came.
    let mut frame_began: Option<Instant> = None;
    'conn: loop {
        loop {
            if admitted.is_none() {
                let total = match frame_len(&buf) {
                    Ok(Some(t)) => t,
                    Ok(None) => break,
                    Err(e) => {
                        let n = bump(&stats.closed_malformed);
                        tracing::warn!(%peer, closed_malformed = n, "malformed frame, closing connection: {e}");
                        break 'conn;
                    }
                };
                // A batch slot first, then bytes: nothing is held while waiting
                // for a slot (the batches that hold them may wait for bytes).
                // The slot is this connection's own affair: its wait is not
                // the frame's time. The wait for room is: a frame that cannot be
                // admitted in time is dropped like a slow one, so clients stalled
                // ahead in the queue do not hold it.
                let (permit, began) = match inflight.clone().try_acquire_owned() {
                    Ok(p) => (p, *frame_began.get_or_insert_with(Instant::now)),
                    Err(_) => {
                        let p = tokio::select! {
                            p = inflight.clone().acquire_owned() => p,
                            _ = stop.changed() => break 'conn,
                        };
                        let Ok(p) = p else { break 'conn };
                        (p, *frame_began.insert(Instant::now()))
                    }
                };
                let deadline = (began + limits.frame).into();
                let held = tokio::select! {
                    h = budget.reserve(total) => h,
                    _ = tokio::time::sleep_until(deadline) => {
                        let n = bump(&stats.closed_slow);
                        tracing::warn!(%peer, closed_slow = n, "no room for a frame in time: connection closed");
                        break 'conn;
                    }
                    _ = stop.changed() => break 'conn,
                };
                let Some(held) = held else { break 'conn };
                admitted = Some((total, held, permit));
            }
            match &admitted {
                Some((total, _, _)) if buf.len() >= *total => {}
                _ => break,
            }
            let (frame, held, permit) = match (decode_frame(&mut buf), admitted.take()) {
                (Ok(Some(f)), Some((_, held, permit))) => (f, held, permit),
                (Err(e), _) => {
                    let n = bump(&stats.closed_malformed);
                    tracing::warn!(%peer, closed_malformed = n, "malformed frame, closing connection: {e}");
                    break 'conn;
                }
                _ => break 'conn,
            };
            frame_began = None;
            let ops = match frame.requests() {
                Ok(ops) => ops,
                Err(e) => {
                    let n = bump(&stats.closed_malformed);
                    tracing::warn!(%peer, closed_malformed = n, "malformed request batch, closing connection: {e}");
                    break 'conn;
                }
            };
            let id = frame.request_id;
            drop(frame);
            let (router, budget, out) = (router.clone(), budget.clone(), out_tx.clone());
            tasks.spawn(async move {
                batch::run(&router, &budget, &out, id, ops, held).await;
                drop(permit);
            });
        }
        if buf.is_empty() {
            frame_began = None;
        } else if frame_began.is_none() {
            frame_began = Some(Instant::now());
        }
        // Reap finished batch tasks so the set does not grow without bound.
        while tasks.try_join_next().is_some() {}
        // Read no further than the admitted frame, or a little to learn the
        // next frame's length.
        let limit = match &admitted {
            Some((total, _, _)) => (*total).max(SLACK),
            None => SLACK,
        };
        let room = limit.saturating_sub(buf.len()).max(1);
        if buf.capacity() - buf.len() < room.min(READ_CHUNK) {
            buf.reserve(room.min(READ_CHUNK.max(buf.len())));
        }
        // Only a client we are not working for can be idle; a frame it began
        // must be finished in time whatever else is going on.
        let deadline = match frame_began {
            Some(t) => Some((t + limits.frame, true)),
            None if tasks.is_empty() => Some((last_read + limits.idle, false)),
            None => None,
        };
        let expired = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let mut limited = (&mut rd).take(room as u64);
        tokio::select! {
            r = limited.read_buf(&mut buf) => match r {
                Ok(0) => break,
                Ok(_) => last_read = Instant::now(),
                Err(e) => { tracing::debug!(%peer, "read from client failed: {e}"); break; }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = expired => {
                if deadline.is_some_and(|d| d.1) {
                    let n = bump(&stats.closed_slow);
                    tracing::warn!(%peer, closed_slow = n, "a frame took too long to arrive: connection closed");
                } else {
                    let n = bump(&stats.closed_idle);
                    tracing::info!(%peer, closed_idle = n, "idle chunk connection closed");
                }
                break;
            }
            _ = stop.changed() => break,
        }
    }
    drop(admitted);
    // Finish what was accepted, then close.
    while tasks.join_next().await.is_some() {}
    drop(out_tx);
    let _ = writer.await;
}
