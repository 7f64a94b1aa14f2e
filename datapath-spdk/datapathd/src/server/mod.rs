//! The chunk service: TCP in, reactors behind.
//!
//! Per connection, a reader admits and decodes frames and spawns one task per
//! batch; the task splits the batch by drive, sends each part to the drive's
//! reactor, gathers the answers and hands the encoded reply frames to the
//! connection's writer. Batches are pipelined (replies may overtake each other; the
//! client matches request ids). A frame that does not decode closes that
//! connection only.
//!
//! Two listeners: `--listen` for the node's own mgmtd (TCP meant for loopback,
//! where every connection must first prove the node-local key, see
//! `cairn_chunkproto::auth`) and, in a cluster, `--peer-listen` for other nodes,
//! where every connection must complete a TLS handshake with a certificate from the
//! cluster CA. Either way, not a byte of the chunk protocol is read before.
//!
//! Limits, so that a client (even an authenticated, buggy one) can neither grow
//! the service's memory nor stall its replies:
//!
//! * at most `--max-connections` connections (256), of which at most a quarter (and
//!   at most 64) still in their handshake; more are closed at accept, logged;
//! * `--handshake-timeout` (5 s) for the key handshake, 10 s for TLS; a failed
//!   handshake is logged with the peer's address and counted;
//! * a connection with nothing in flight that sends nothing for `--idle-timeout`
//!   (300 s) is closed, and so is one that takes longer than `--frame-timeout`
//!   (30 s) to finish a frame it began, or to take a reply frame;
//! * bytes: every frame is admitted for its length, and every reply for its length,
//!   before a byte of it is read, from `--max-conn-buffered` (128 MiB) per
//!   connection and `--max-buffered` (512 MiB) for the service (see `budget`);
//!   at most 64 batches in flight per connection; a frame is at most `MAX_FRAME`;
//! * a batch of gets is read in waves of at most a frame of reply, each sent as a
//!   frame before the next is read, as many frames as it takes; the gets past
//!   `MAX_BATCH_REPLY` (1 GiB) are refused by name before they are read (see
//!   `batch`). Every batch is answered.

mod batch;
mod budget;
mod conn;

use crate::reactor::Router;
use crate::{Config, Result};
use budget::{bump, Held, Stats};
use bytes::Bytes;
use cairn_chunkproto::auth::{self, LocalKey};
use cairn_chunkproto::MAX_FRAME;
use cairn_pki::tls::NodeTls;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// How long shutdown waits for in-flight batches.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a peer may take to finish its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the TLS directory is re-read.
const TLS_RELOAD: Duration = Duration::from_secs(2);
/// Most connections in their handshake at once (and at most a quarter of the cap).
const MAX_HANDSHAKES: usize = 64;
/// How often the counters are logged, when they changed.
const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// Per-connection limits.
#[derive(Clone, Copy, Debug)]
struct Limits {
    idle: Duration,
    frame: Duration,
    handshake: Duration,
    /// Bytes one connection may hold.
    conn_bytes: usize,
}

/// What a connection needs of the service.
#[derive(Clone)]
struct Ctx {
    router: Router,
    stop: watch::Receiver<bool>,
    limits: Limits,
    /// The service's bytes.
    global: Arc<Semaphore>,
    stats: Arc<Stats>,
}

/// One reply frame on its way to the socket, and the bytes it holds.
struct Out {
    parts: Vec<Bytes>,
    #[allow(dead_code)] // held until the frame is written
    held: Held,
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
                cairn_pki::tls::CERT_FILE,
                cairn_pki::tls::KEY_FILE,
                cairn_pki::tls::PEERS_FILE,
            ]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap_or_default())
            .collect::<Vec<_>>()
            .concat();
            if !stamp.is_empty() && last.as_ref() != Some(&stamp) {
                let loaded = NodeTls::load(&dir)
                    .and_then(|t| t.map(|t| t.server_config(true)).transpose())
                    .and_then(|cfg| Ok((cfg, cairn_pki::tls::load_peers(&dir)?)));
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
    ctx: Ctx,
    handshaking: OwnedSemaphorePermit,
) {
    let peer = stream.peer_addr().ok();
    let Some(peer_tls) = acceptor.borrow().clone() else {
        tracing::debug!(
            ?peer,
            "peer connection refused: this node has no certificate yet"
        );
        return;
    };
    let stats = ctx.stats.clone();
    let refused = |why: String| {
        let n = bump(&stats.refused_handshake);
        tracing::warn!(?peer, refused_handshakes = n, "peer refused: {why}");
    };
    let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, peer_tls.acceptor.accept(stream));
    let handshake = handshake.await;
    drop(handshaking);
    match handshake {
        Ok(Ok(tls)) => {
            let Some(fp) = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| cairn_pki::tls::cert_sha256(c))
            else {
                return;
            };
            let member = |t: &Option<PeerTls>| {
                t.as_ref()
                    .is_some_and(|t| t.members.as_ref().is_none_or(|m| m.contains(&fp)))
            };
            if !member(&acceptor.borrow()) {
                refused("its certificate is not a current member's".into());
                return;
            }
            // A node removed from the cluster loses the connections it holds too.
            let mut members = acceptor.clone();
            tokio::select! {
                _ = conn::serve(tls, ctx, peer.map(|p| p.to_string()).unwrap_or_default()) => {}
                _ = members.wait_for(|t| !member(t)) => {
                    tracing::warn!(?peer, "peer dropped: its certificate is no longer a member's");
                }
            }
        }
        Ok(Err(e)) => refused(format!("TLS handshake failed: {e}")),
        Err(_) => refused("TLS handshake timed out".into()),
    }
}

/// A node-local client: proves the key, then is served.
async fn accept_local(
    mut stream: TcpStream,
    peer: std::net::SocketAddr,
    key: LocalKey,
    ctx: Ctx,
    handshaking: OwnedSemaphorePermit,
) {
    let r = auth::server_handshake_within(&mut stream, &key, ctx.limits.handshake).await;
    drop(handshaking);
    if let Err(e) = r {
        let n = bump(&ctx.stats.refused_handshake);
        tracing::warn!(%peer, refused_handshakes = n, "local chunk client refused: {e}");
        return;
    }
    tracing::debug!(%peer, "connection open");
    conn::serve(stream, ctx, peer.to_string()).await;
    tracing::debug!(%peer, "connection closed");
}

/// The byte budgets, kept above what one frame and one wave need.
fn byte_caps(cfg: &Config) -> (usize, usize) {
    let floor = MAX_FRAME + (1 << 20);
    let conn = usize::try_from(cfg.max_conn_buffered)
        .unwrap_or(usize::MAX)
        .clamp(floor, u32::MAX as usize);
    let global = usize::try_from(cfg.max_buffered)
        .unwrap_or(usize::MAX)
        .clamp(2 * floor, Semaphore::MAX_PERMITS);
    if conn as u64 != cfg.max_conn_buffered || global as u64 != cfg.max_buffered {
        tracing::warn!(conn, global, "byte budgets raised to what one frame needs");
    }
    (conn.min(global), global)
}

/// The node-local key, read or created (before the drives are opened, so a bad
/// key file stops the start at once).
pub fn local_key(cfg: &Config) -> Result<LocalKey> {
    LocalKey::load_or_create(&cfg.local_key).map_err(|e| {
        crate::DatapathError::Config(format!("chunk key {}: {e}", cfg.local_key.display()))
    })
}

pub async fn serve(cfg: &Config, router: Router, key: LocalKey) -> Result<()> {
    let (conn_bytes, global_bytes) = byte_caps(cfg);
    let limits = Limits {
        idle: Duration::from_secs(cfg.idle_timeout.max(1)),
        frame: Duration::from_secs(cfg.frame_timeout.max(1)),
        handshake: Duration::from_secs(cfg.handshake_timeout.max(1)),
        conn_bytes,
    };
    let max_conns = cfg.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max_conns));
    let handshakes = Arc::new(Semaphore::new((max_conns / 4).clamp(1, MAX_HANDSHAKES)));
    let global = Arc::new(Semaphore::new(global_bytes));
    let stats = Arc::new(Stats::default());
    let listener = TcpListener::bind(&cfg.listen).await?;
    let addr = listener.local_addr()?;
    if let Some(p) = &cfg.ready_file {
        // Atomic: a reader sees no file or the whole address.
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, format!("{addr}\n"))?;
        std::fs::rename(&tmp, p)?;
    }
    tracing::info!(
        %addr,
        drives = router.drives(),
        max_connections = max_conns,
        conn_bytes,
        global_bytes,
        "chunk service listening (node-local key)"
    );
    let (peer_listener, acceptor) = match &cfg.peer_listen {
        Some(p) => {
            let l = TcpListener::bind(p).await?;
            tracing::info!(addr = %l.local_addr()?, "peer chunk service listening (mutual TLS)");
            let dir = cfg.tls_dir.clone().unwrap_or_default();
            (Some(l), watch_tls(dir))
        }
        None => (None, watch::channel(None).1),
    };
    // A connection slot, and a handshake slot until its client has proved itself.
    let admit = |peer: std::net::SocketAddr| {
        let slot = slots.clone().try_acquire_owned().ok();
        let shake = handshakes.clone().try_acquire_owned().ok();
        match (slot, shake) {
            (Some(slot), Some(shake)) => Some((slot, shake)),
            (slot, _) => {
                let n = bump(&stats.refused_full);
                let why = if slot.is_none() {
                    "too many open"
                } else {
                    "too many in their handshake"
                };
                tracing::warn!(%peer, max = max_conns, refused_full = n, "connection refused: {why}");
                None
            }
        }
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let ctx = Ctx {
        router,
        stop: stop_rx,
        limits,
        global: global.clone(),
        stats: stats.clone(),
    };
    let mut conns = JoinSet::new();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut summary =
        tokio::time::interval_at(tokio::time::Instant::now() + SUMMARY_EVERY, SUMMARY_EVERY);
    let mut last_summary = String::new();
    loop {
        tokio::select! {
            _ = sigterm.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
            _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); break; }
            acc = listener.accept() => match acc {
                Ok((stream, peer)) => {
                    let Some((slot, shake)) = admit(peer) else { continue };
                    let _ = stream.set_nodelay(true);
                    let (key, ctx) = (key.clone(), ctx.clone());
                    conns.spawn(async move {
                        let _slot = slot;
                        accept_local(stream, peer, key, ctx, shake).await
                    });
                }
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            acc = accept_on(peer_listener.as_ref()) => match acc {
                Ok((stream, peer)) => {
                    let Some((slot, shake)) = admit(peer) else { continue };
                    let _ = stream.set_nodelay(true);
                    let (acceptor, ctx) = (acceptor.clone(), ctx.clone());
                    conns.spawn(async move {
                        let _slot = slot;
                        accept_peer(stream, acceptor, ctx, shake).await
                    });
                }
                Err(e) => {
                    tracing::warn!("accept (peers): {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = summary.tick() => {
                let s = stats.summary(global_bytes - global.available_permits());
                if s != last_summary {
                    tracing::info!("chunk service: {s}");
                    last_summary = s;
                }
            }
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
