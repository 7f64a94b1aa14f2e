//! The chunk service: TCP in, reactors behind.
//!
//! Per connection, a reader decodes frames and spawns one task per batch; the task
//! splits the batch by drive, sends each part to the drive's reactor, gathers the
//! answers and hands the encoded response to the connection's writer. Batches are
//! pipelined (responses may overtake each other; the client matches request ids).
//! A frame that does not decode closes that connection only.
//!
//! Two listeners: `--listen` for the node's own mgmtd (TCP meant for loopback,
//! where every connection must first prove the node-local key, see
//! `cairn_chunkproto::auth`) and, in a cluster, `--peer-listen` for other nodes,
//! where every connection must complete a TLS handshake with a certificate from the
//! cluster CA. Either way, not a byte of the chunk protocol is read before.
//!
//! Limits, so that a client (even an authenticated, buggy one) cannot hold the
//! service: at most `--max-connections` connections; a connection with nothing in
//! flight that sends nothing for `--idle-timeout` is closed, and so is one that
//! takes longer than `--frame-timeout` to finish a frame it began, or to take a
//! reply; at most 64 batches in flight per connection; a frame is at most
//! `MAX_FRAME` bytes. A batch of gets is read in waves of 16 and stops reading
//! once its reply would pass `MAX_FRAME`: the gets that do not fit are answered
//! with a `BadRequest` failure saying so (never silence), so one small request can
//! make the service hold at most one frame plus one wave of chunks.

use crate::reactor::Router;
use crate::{Config, Result};
use bytes::{Bytes, BytesMut};
use cairn_chunkproto::auth::{self, LocalKey};
use cairn_chunkproto::tls::NodeTls;
use cairn_chunkproto::{
    decode_frame, encode_response_batch, DriveIndex, Failure, FailureCode, Reply, Request,
    Response, MAX_FRAME,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

/// Batches one connection may have in flight.
const MAX_INFLIGHT: usize = 64;
/// How long shutdown waits for in-flight batches.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a peer may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the TLS directory is re-read.
const TLS_RELOAD: Duration = Duration::from_secs(2);
/// Operations of a get batch executed at once (a whole stripe's fragments).
const WAVE: usize = 16;
/// What a reply may hold: a frame, less room for per-operation headers.
const REPLY_BUDGET: usize = MAX_FRAME - (256 << 10);

/// Per-connection timeouts.
#[derive(Clone, Copy, Debug)]
struct Limits {
    idle: Duration,
    frame: Duration,
}

/// The peer listener's TLS acceptor, once the node has a certificate, and the
/// certificates of the cluster's current members (`None`: any of the CA's).
#[derive(Clone)]
struct PeerTls {
    acceptor: tokio_rustls::TlsAcceptor,
    members: Option<Arc<std::collections::HashSet<[u8; 32]>>>,
}
type Acceptor = watch::Receiver<Option<PeerTls>>;

/// Keeps the acceptor in step with the TLS directory: a certificate written there
/// (at cluster init or join) is picked up without a restart, a bad one is logged
/// and the previous one kept.
fn watch_tls(dir: std::path::PathBuf) -> Acceptor {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let mut last: Option<Vec<u8>> = None;
        loop {
            let stamp = [
                cairn_chunkproto::tls::CERT_FILE,
                cairn_chunkproto::tls::KEY_FILE,
                cairn_chunkproto::tls::PEERS_FILE,
            ]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap_or_default())
            .collect::<Vec<_>>()
            .concat();
            if !stamp.is_empty() && last.as_ref() != Some(&stamp) {
                let loaded = NodeTls::load(&dir)
                    .and_then(|t| t.map(|t| t.server_config(true)).transpose())
                    .and_then(|cfg| Ok((cfg, cairn_chunkproto::tls::load_peers(&dir)?)));
                match loaded {
                    Ok((Some(cfg), members)) => {
                        tracing::info!(
                            dir = %dir.display(),
                            members = members.as_ref().map(|m| m.len()),
                            "peer TLS certificate loaded"
                        );
                        tx.send_replace(Some(PeerTls {
                            acceptor: tokio_rustls::TlsAcceptor::from(cfg),
                            members: members.map(Arc::new),
                        }));
                        last = Some(stamp);
                    }
                    Ok((None, _)) => {}
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), "peer TLS material unusable: {e}");
                        last = Some(stamp);
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(TLS_RELOAD).await;
        }
    });
    rx
}

/// Accepts on `listener`, or never when there is none.
async fn accept_on(
    listener: Option<&TcpListener>,
) -> std::io::Result<(TcpStream, std::net::SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

async fn accept_peer(
    stream: TcpStream,
    acceptor: Acceptor,
    router: Router,
    stop: watch::Receiver<bool>,
    limits: Limits,
) {
    let peer = stream.peer_addr().ok();
    let Some(peer_tls) = acceptor.borrow().clone() else {
        tracing::debug!(
            ?peer,
            "peer connection refused: this node has no certificate yet"
        );
        return;
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, peer_tls.acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let Some(fp) = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| cairn_chunkproto::tls::cert_sha256(c))
            else {
                return;
            };
            let member = |t: &Option<PeerTls>| {
                t.as_ref()
                    .is_some_and(|t| t.members.as_ref().is_none_or(|m| m.contains(&fp)))
            };
            if !member(&acceptor.borrow()) {
                tracing::warn!(
                    ?peer,
                    "peer refused: its certificate is not a current member's"
                );
                return;
            }
            // A node removed from the cluster loses the connections it holds too.
            let mut members = acceptor.clone();
            tokio::select! {
                _ = connection(tls, router, stop, limits) => {}
                _ = members.wait_for(|t| !member(t)) => {
                    tracing::warn!(?peer, "peer dropped: its certificate is no longer a member's");
                }
            }
        }
        Ok(Err(e)) => tracing::warn!(?peer, "peer TLS handshake refused: {e}"),
        Err(_) => tracing::warn!(?peer, "peer TLS handshake timed out"),
    }
}

pub async fn serve(cfg: &Config, router: Router) -> Result<()> {
    let key = LocalKey::load_or_create(&cfg.local_key).map_err(|e| {
        crate::DatapathError::Config(format!("chunk key {}: {e}", cfg.local_key.display()))
    })?;
    let limits = Limits {
        idle: Duration::from_secs(cfg.idle_timeout.max(1)),
        frame: Duration::from_secs(cfg.frame_timeout.max(1)),
    };
    let slots = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    let listener = TcpListener::bind(&cfg.listen).await?;
    let addr = listener.local_addr()?;
    if let Some(p) = &cfg.ready_file {
        // Atomic: a reader sees no file or the whole address.
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, format!("{addr}\n"))?;
        std::fs::rename(&tmp, p)?;
    }
    tracing::info!(%addr, drives = router.drives(), "chunk service listening (node-local key)");
    let (peer_listener, acceptor) = match &cfg.peer_listen {
        Some(p) => {
            let l = TcpListener::bind(p).await?;
            tracing::info!(addr = %l.local_addr()?, "peer chunk service listening (mutual TLS)");
            let dir = cfg.tls_dir.clone().unwrap_or_default();
            (Some(l), watch_tls(dir))
        }
        None => (None, watch::channel(None).1),
    };
    let slot = |peer: std::net::SocketAddr| {
        let s = slots.clone().try_acquire_owned().ok();
        if s.is_none() {
            tracing::warn!(%peer, max = cfg.max_connections, "connection refused: too many open");
        }
        s
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = sigterm.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
            _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); break; }
            acc = listener.accept() => match acc {
                Ok((mut stream, peer)) => {
                    let Some(slot) = slot(peer) else { continue };
                    let _ = stream.set_nodelay(true);
                    let router = router.clone();
                    let stop = stop_rx.clone();
                    let key = key.clone();
                    conns.spawn(async move {
                        let _slot = slot;
                        if let Err(e) = auth::server_handshake(&mut stream, &key).await {
                            tracing::warn!(%peer, "local connection refused: {e}");
                            return;
                        }
                        tracing::debug!(%peer, "connection open");
                        connection(stream, router, stop, limits).await;
                        tracing::debug!(%peer, "connection closed");
                    });
                }
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            acc = accept_on(peer_listener.as_ref()) => match acc {
                Ok((stream, peer)) => {
                    let Some(slot) = slot(peer) else { continue };
                    let _ = stream.set_nodelay(true);
                    let (acceptor, router, stop) = (acceptor.clone(), router.clone(), stop_rx.clone());
                    conns.spawn(async move {
                        let _slot = slot;
                        accept_peer(stream, acceptor, router, stop, limits).await
                    });
                }
                Err(e) => {
                    tracing::warn!("accept (peers): {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    drop(peer_listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("in-flight batches did not finish in time");
    }
    Ok(())
}

async fn connection<S>(stream: S, router: Router, mut stop: watch::Receiver<bool>, limits: Limits)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<Bytes>>(MAX_INFLIGHT);
    let writer = tokio::spawn(async move {
        while let Some(parts) = out_rx.recv().await {
            for p in parts {
                // A client that does not take its replies is dropped, not waited on.
                match tokio::time::timeout(limits.frame, wr.write_all(&p)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!("write to client failed: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!("client does not read its replies: connection closed");
                        return;
                    }
                }
            }
        }
        let _ = wr.shutdown().await;
    });
    let permits = Arc::new(Semaphore::new(MAX_INFLIGHT));
    let mut tasks = JoinSet::new();
    let mut buf = BytesMut::with_capacity(1 << 20);
    let mut last_read = Instant::now();
    // When the frame now in `buf` began to arrive.
    let mut frame_began: Option<Instant> = None;
    'conn: loop {
        loop {
            match decode_frame(&mut buf) {
                Ok(Some(frame)) => {
                    let ops = match frame.requests() {
                        Ok(ops) => ops,
                        Err(e) => {
                            tracing::error!("malformed request batch, closing connection: {e}");
                            break 'conn;
                        }
                    };
                    let Ok(permit) = permits.clone().acquire_owned().await else {
                        break 'conn;
                    };
                    let router = router.clone();
                    let out = out_tx.clone();
                    let id = frame.request_id;
                    tasks.spawn(async move {
                        let res = execute_bounded(&router, ops).await;
                        match encode_response_batch(id, &res) {
                            Ok(parts) => {
                                let _ = out.send(parts).await;
                            }
                            Err(e) => {
                                tracing::error!(request_id = id, "cannot encode response: {e}")
                            }
                        }
                        drop(permit);
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::error!("malformed frame, closing connection: {e}");
                    break 'conn;
                }
            }
        }
        frame_began = if buf.is_empty() {
            None
        } else {
            frame_began.or(Some(Instant::now()))
        };
        // Reap finished batch tasks so the set does not grow without bound.
        while tasks.try_join_next().is_some() {}
        if buf.capacity() - buf.len() < 64 << 10 {
            buf.reserve(1 << 20);
        }
        // Only a client we are not working for can be idle; a frame it began
        // must be finished in time whatever else is going on.
        let deadline = match frame_began {
            Some(t) => Some((t + limits.frame, "a frame took too long to arrive")),
            None if tasks.is_empty() => Some((last_read + limits.idle, "idle")),
            None => None,
        };
        let expired = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) => break,
                Ok(_) => last_read = Instant::now(),
                Err(e) => { tracing::debug!("read from client failed: {e}"); break; }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = expired => {
                let why = deadline.map(|d| d.1).unwrap_or_default();
                tracing::info!("closing a chunk connection: {why}");
                break;
            }
            _ = stop.changed() => break,
        }
    }
    // Finish what was accepted, then close.
    while tasks.join_next().await.is_some() {}
    drop(out_tx);
    let _ = writer.await;
}

/// Runs one batch so that its reply fits in a frame: batches of gets are read in
/// waves, and the gets past what a reply can carry are refused, not read.
async fn execute_bounded(router: &Router, ops: Vec<Request>) -> Vec<Response> {
    if !ops.iter().any(|o| matches!(o, Request::Get { .. })) {
        return execute(router, ops).await;
    }
    let n = ops.len();
    let mut out: Vec<Response> = Vec::with_capacity(n);
    let mut bytes = 0usize;
    let mut rest = ops.into_iter().peekable();
    while rest.peek().is_some() {
        let wave: Vec<Request> = if bytes >= REPLY_BUDGET {
            // Full: the remaining gets are refused, everything else still runs.
            let left: Vec<Request> = rest.by_ref().collect();
            let (idx, others): (Vec<usize>, Vec<Request>) = left
                .iter()
                .enumerate()
                .filter(|(_, o)| !matches!(o, Request::Get { .. }))
                .map(|(i, o)| (i, o.clone()))
                .unzip();
            let mut done = execute(router, others).await.into_iter();
            let mut j = idx.iter().peekable();
            for i in 0..left.len() {
                if j.peek() == Some(&&i) {
                    j.next();
                    out.push(done.next().unwrap_or_else(|| Err(no_answer())));
                } else {
                    out.push(Err(too_large()));
                }
            }
            break;
        } else {
            rest.by_ref().take(WAVE).collect()
        };
        for r in execute(router, wave).await {
            bytes += reply_len(&r);
            out.push(r);
        }
    }
    // The wave that crossed the budget may have overshot: drop gets from the
    // end of the reply until it fits.
    let mut total: usize = out.iter().map(reply_len).sum();
    for r in out.iter_mut().rev() {
        if total <= REPLY_BUDGET {
            break;
        }
        if matches!(r, Ok(Reply::Get { .. })) {
            total -= reply_len(r);
            *r = Err(too_large());
            total += reply_len(r);
        }
    }
    out
}

/// About what one result takes in a reply frame.
fn reply_len(r: &Response) -> usize {
    64 + match r {
        Ok(Reply::Get { payload }) => payload.len(),
        Err(f) => f.message.len(),
        _ => 0,
    }
}

fn too_large() -> Failure {
    Failure::new(
        FailureCode::BadRequest,
        format!("reply would exceed {MAX_FRAME} bytes: ask for fewer chunks per batch"),
    )
}

fn no_answer() -> Failure {
    Failure::new(FailureCode::Io, "no answer")
}

/// Runs one batch: split by drive, one message per drive, answers back in order.
async fn execute(router: &Router, ops: Vec<Request>) -> Vec<Response> {
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
