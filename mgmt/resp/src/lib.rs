//! The RESP front end: Redis's wire protocol (RESP2) over the object store.
//!
//! Owns the translation between Redis commands and objects: a tenant's keys are
//! the objects of one reserved bucket of that tenant ([`bucket_for`]), each value
//! one object, so a SET is committed through the same Raft-ordered metadata as an
//! S3 PUT and is visible through every node once acknowledged. It keeps no values
//! of its own: hot values are served from the object store's RAM tier, which is
//! reached only through a manifest looked up after the metadata barrier, so a
//! value served from RAM is always the one the cluster holds now.

mod codec;
mod commands;
mod expiry;
mod keys;
mod keyspace;
mod metrics;
mod pools;
mod reply;
mod shared;
mod write;

pub use codec::{Intake, Limits};
pub use expiry::{sweep, SWEEP_EVERY};
pub use keys::{bucket_for, decode_key, encode_key};
pub use metrics::RespMetrics;

use cairn_objects::ObjectStore;
use std::sync::Arc;
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};

/// Errors of the RESP front end.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("RESP listener: {0}")]
    Listen(std::io::Error),
    #[error("connection: {0}")]
    Io(std::io::Error),
    /// The client closed the connection in the middle of a command.
    #[error("connection closed mid-command")]
    Eof,
    /// Input that cannot be framed: answered with `-ERR Protocol error` and the
    /// connection closed, since the rest of the stream cannot be trusted.
    #[error("Protocol error: {0}")]
    Protocol(String),
    #[error(transparent)]
    Objects(#[from] cairn_objects::ObjectError),
    /// A key the keyspace cannot hold (answered with `-ERR`).
    #[error("{0}")]
    BadKey(String),
}

/// What a RESP server is given.
#[derive(Clone, Debug)]
pub struct RespConfig {
    /// The credential table S3 uses: `AUTH user pass` is an access key and its secret.
    pub keys: cairn_s3::Keys,
    /// The access key `AUTH pass` (no user) stands for: the root key.
    pub default_user: String,
    pub limits: Limits,
    /// Connections served at once; one more is told so and closed, as Redis
    /// does at `maxclients` (so a flood of idle connections cannot take every
    /// file descriptor and task of the node).
    pub max_clients: usize,
    /// Bytes of values being received at once, by every connection together
    /// (see [`Intake`]).
    pub intake_bytes: u64,
    /// Where its counters go (INFO reads them too).
    pub metrics: RespMetrics,
}

impl RespConfig {
    /// Values up to 512 MiB, as Redis allows.
    pub fn new(keys: cairn_s3::Keys, default_user: String) -> RespConfig {
        RespConfig {
            keys,
            default_user,
            limits: Limits {
                max_value: 512 << 20,
                max_command: 1 << 30,
            },
            max_clients: 10_000,
            intake_bytes: 1 << 30,
            metrics: RespMetrics::default(),
        }
    }
}

/// Serves RESP on `listener` until `shutdown` resolves; then stops accepting and
/// gives open connections up to 10 s to finish the command in progress.
pub async fn serve(
    listener: TcpListener,
    store: Arc<ObjectStore>,
    cfg: RespConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RespError> {
    let shared = Arc::new(shared::Shared::new(cfg.intake_bytes, cfg.metrics.clone()));
    let cfg = Arc::new(cfg);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let sweeper = tokio::spawn(expiry::sweeper(store.clone(), {
        let mut stop = stop_rx.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    }));
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (socket, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("RESP accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = socket.set_nodelay(true);
        // Reap finished connections first, so only live ones count.
        while conns.try_join_next().is_some() {}
        shared.stats.connections.inc();
        if conns.len() >= cfg.max_clients {
            shared.stats.rejected.inc();
            tracing::warn!(%peer, max = cfg.max_clients, "RESP connection refused: too many clients");
            // Not one of `conns`: a refusal is not a client to drain.
            tokio::spawn(async move {
                let mut socket = socket;
                let _ = tokio::time::timeout(
                    std::time::Duration::from_secs(1),
                    socket.write_all(b"-ERR max number of clients reached\r\n"),
                )
                .await;
            });
            continue;
        }
        let (store, cfg, stop) = (store.clone(), cfg.clone(), stop_rx.clone());
        let shared = shared.clone();
        conns.spawn(async move {
            let _live = shared.stats.connected();
            if let Err(e) = connection(socket, store, cfg, shared.clone(), stop).await {
                tracing::debug!(%peer, "RESP connection ended: {e}");
            }
        });
    }
    let _ = stop_tx.send(true);
    let _ = sweeper.await;
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(std::time::Duration::from_secs(10), drain)
        .await
        .is_err()
    {
        tracing::warn!("RESP connections still open after 10 s; closing");
        conns.abort_all();
    }
    Ok(())
}

/// One client: commands are read and answered in order (pipelining is free: the
/// replies queue in a bounded buffer that is flushed whenever no further command
/// is already buffered). Replies are written with `await`, so a client that stops
/// reading stops being read from: the server buffers at most one buffer's worth.
async fn connection(
    socket: TcpStream,
    store: Arc<ObjectStore>,
    cfg: Arc<RespConfig>,
    shared: Arc<shared::Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RespError> {
    let (rd, wr) = socket.into_split();
    let mut rd = BufReader::with_capacity(64 << 10, rd);
    let mut wr = BufWriter::with_capacity(64 << 10, wr);
    let mut session = commands::Session::new(store, cfg.clone(), shared.clone());
    loop {
        if rd.buffer().is_empty() {
            wr.flush().await.map_err(RespError::Io)?;
            if *stop.borrow() {
                return Ok(());
            }
        }
        let cmd = tokio::select! {
            c = codec::read_command(&mut rd, cfg.limits, Some(&shared.intake)) => c,
            // At shutdown a connection waiting for its next command is closed; a
            // command only partly received is dropped unanswered, never partly
            // run (commands run outside this select, so they always finish).
            _ = stop.changed(), if rd.buffer().is_empty() => return Ok(()),
        };
        // Held until the command has run: its values stay counted against the
        // intake budget while they are being stored.
        let cmd = match cmd {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            // Best effort: a client that half-closed mid-command may still read.
            Err(e @ (RespError::Protocol(_) | RespError::Eof)) => {
                let m = match &e {
                    RespError::Protocol(m) => m.as_str(),
                    _ => "unexpected end of input",
                };
                let _ = wr
                    .write_all(format!("-ERR Protocol error: {m}\r\n").as_bytes())
                    .await;
                let _ = wr.flush().await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if cmd.args.is_empty() {
            continue;
        }
        if session.run(&cmd.args, &mut wr).await? == commands::Next::Close {
            wr.flush().await.map_err(RespError::Io)?;
            return Ok(());
        }
    }
}
