//! An async, pipelining client for the chunk service.
//!
//! Each client keeps a few TCP connections to one datapathd and spreads batches over
//! them round-robin; on each connection, batches are pipelined and matched to their
//! responses by request id (a reply larger than a frame is gathered from several
//! frames, see [`crate::Reassembly`]). A broken connection fails its outstanding calls and is
//! re-dialled on the next call, so a restarted datapathd is picked up without help.
//! A client for a peer node speaks mutual TLS ([`ChunkClient::with_tls`]); the
//! node's own mgmtd talks to its datapathd over loopback TCP after proving the
//! node-local key ([`ChunkClient::local`], see [`crate::auth`]). There is no
//! unauthenticated client.

use crate::codec::{decode_frame, encode_request_batch};
use crate::{ProtoError, Reassembly, Request, Response, MAX_FRAME};
use bytes::BytesMut;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// A call waiting for its reply, and the part of the reply that has arrived.
struct Waiter {
    tx: oneshot::Sender<Result<Vec<Response>, ProtoError>>,
    reply: Reassembly,
}

/// The calls waiting on one connection; `None` once the connection has failed
/// and its calls were answered. A call that finds it so is not sent there: it
/// would wait for its whole timeout on a connection no task reads.
type Pending = Arc<Mutex<Option<HashMap<u64, Waiter>>>>;

struct Call {
    request_id: u64,
    parts: Vec<bytes::Bytes>,
}

#[derive(Clone)]
struct Conn {
    tx: mpsc::Sender<Call>,
    pending: Pending,
}

/// A client of one datapathd's chunk service.
#[derive(Clone)]
pub struct ChunkClient {
    addr: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    key: Option<crate::auth::LocalKey>,
    timeout: Duration,
    slots: Arc<Vec<tokio::sync::Mutex<Option<Conn>>>>,
    next_slot: Arc<AtomicUsize>,
    next_id: Arc<AtomicU64>,
}

impl std::fmt::Debug for ChunkClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkClient")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ChunkClient {
    /// A client of this node's own chunk service at `addr`, proving `key` on each
    /// of its `connections` TCP connections (opened lazily). Calls fail after
    /// `timeout` without an answer.
    pub fn local(
        addr: impl Into<String>,
        connections: usize,
        timeout: Duration,
        key: crate::auth::LocalKey,
    ) -> Self {
        ChunkClient {
            key: Some(key),
            ..ChunkClient::unconnected(addr, connections, timeout)
        }
    }

    fn unconnected(addr: impl Into<String>, connections: usize, timeout: Duration) -> Self {
        let slots = (0..connections.max(1))
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        ChunkClient {
            addr: addr.into(),
            tls: None,
            key: None,
            timeout,
            slots: Arc::new(slots),
            next_slot: Arc::new(AtomicUsize::new(0)),
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// A client for a peer's chunk service, over mutual TLS with `tls` (see
    /// [`cairn_pki::tls::NodeTls::client_config`]).
    pub fn with_tls(
        addr: impl Into<String>,
        connections: usize,
        timeout: Duration,
        tls: Arc<rustls::ClientConfig>,
    ) -> Self {
        ChunkClient {
            tls: Some(tls),
            ..ChunkClient::unconnected(addr, connections, timeout)
        }
    }

    /// The address this client calls.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends one batch and waits for its results, in request order.
    pub async fn call(&self, ops: Vec<Request>) -> Result<Vec<Response>, ProtoError> {
        let n = ops.len();
        let request_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let parts = encode_request_batch(request_id, &ops)?;
        drop(ops);
        let (tx, rx) = oneshot::channel();
        let mut waiter = Some(Waiter {
            tx,
            reply: Reassembly::new(n),
        });
        // A connection that failed since it was handed out takes no call; the
        // next one is dialled afresh (nothing was sent, so trying again is safe).
        let mut conn = None;
        for _ in 0..2 {
            let c = self.conn().await?;
            let registered = match (lock(&c.pending).as_mut(), waiter.take()) {
                (Some(map), Some(w)) => {
                    map.insert(request_id, w);
                    true
                }
                (None, w) => {
                    waiter = w;
                    false
                }
                (Some(_), None) => false,
            };
            if registered {
                conn = Some(c);
                break;
            }
        }
        let Some(conn) = conn else {
            return Err(ProtoError::Closed);
        };
        if conn.tx.send(Call { request_id, parts }).await.is_err() {
            forget(&conn.pending, request_id);
            return Err(ProtoError::Closed);
        }
        let res = match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(res)) => res,
            Ok(Err(_)) => Err(ProtoError::Closed),
            Err(_) => {
                forget(&conn.pending, request_id);
                Err(ProtoError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("chunk service {} did not answer in time", self.addr),
                )))
            }
        }?;
        if res.len() != n {
            return Err(ProtoError::Mismatch(
                "result count differs from request count",
            ));
        }
        Ok(res)
    }

    async fn conn(&self) -> Result<Conn, ProtoError> {
        let i = self.next_slot.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut slot = self.slots[i].lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.tx.is_closed() && lock(&c.pending).is_some() {
                return Ok(c.clone());
            }
        }
        let timed_out = || {
            ProtoError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("connect to {} timed out", self.addr),
            ))
        };
        let stream = tokio::time::timeout(self.timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| timed_out())??;
        stream.set_nodelay(true)?;
        let conn = match &self.tls {
            None => {
                let mut stream = stream;
                let Some(key) = &self.key else {
                    return Err(ProtoError::Auth("no chunk key".into()));
                };
                crate::auth::client_handshake(&mut stream, key).await?;
                spawn_conn(stream)
            }
            Some(cfg) => {
                let name = cairn_pki::tls::server_name(&self.addr)
                    .map_err(|e| ProtoError::Io(std::io::Error::other(e.to_string())))?;
                let connector = tokio_rustls::TlsConnector::from(cfg.clone());
                let tls = tokio::time::timeout(self.timeout, connector.connect(name, stream))
                    .await
                    .map_err(|_| timed_out())??;
                spawn_conn(tls)
            }
        };
        *slot = Some(conn.clone());
        Ok(conn)
    }
}

/// Drops a call's waiter (it gave up, or was never sent).
fn forget(pending: &Pending, request_id: u64) {
    if let Some(map) = lock(pending).as_mut() {
        map.remove(&request_id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned map only means another task panicked mid-insert; the map is
    // still consistent for our use (insert/remove of whole entries).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn spawn_conn<S>(stream: S) -> Conn
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::channel::<Call>(256);
    let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));

    // Closes the connection to calls (under the same lock a call registers
    // under, so none slips in after) and fails those waiting.
    let fail_all = |pending: &Pending, why: &str| {
        let drained = lock(pending).take().unwrap_or_default();
        for (_, w) in drained {
            let _ = w.tx.send(Err(ProtoError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                why.to_string(),
            ))));
        }
    };

    let p = pending.clone();
    let writer = tokio::spawn(async move {
        while let Some(call) = rx.recv().await {
            for part in &call.parts {
                if let Err(e) = wr.write_all(part).await {
                    tracing::warn!(
                        request_id = call.request_id,
                        "chunk client write failed: {e}"
                    );
                    fail_all(&p, "write to chunk service failed");
                    return;
                }
            }
        }
    });

    let p = pending.clone();
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(1 << 20);
        let why = loop {
            match decode_frame(&mut buf) {
                Ok(Some(frame)) => {
                    let mut guard = lock(&p);
                    let Some(pending) = guard.as_mut() else {
                        break "the connection failed".to_string();
                    };
                    // A reply to a call that timed out (or was refused) is dropped.
                    let Some(w) = pending.get_mut(&frame.request_id) else {
                        continue;
                    };
                    let done = match w.reply.push(&frame) {
                        Ok(false) => continue,
                        Ok(true) => Ok(()),
                        Err(e) => Err(e),
                    };
                    if let Some(w) = pending.remove(&frame.request_id) {
                        let _ = w.tx.send(done.map(|()| w.reply.into_results()));
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => break format!("bad frame from chunk service: {e}"),
            }
            // The server is trusted with its frame length (at most MAX_FRAME):
            // room for the whole frame is made once rather than in doublings.
            let want = match crate::frame_len(&buf) {
                Ok(Some(total)) if total > buf.len() => (total - buf.len()).min(MAX_FRAME),
                _ => 1 << 20,
            };
            if buf.capacity() - buf.len() < (64 << 10).min(want) {
                buf.reserve(want.max(64 << 10));
            }
            match rd.read_buf(&mut buf).await {
                Ok(0) => break "chunk service closed the connection".to_string(),
                Ok(_) => {}
                Err(e) => break format!("read from chunk service failed: {e}"),
            }
        };
        writer.abort();
        fail_all(&p, &why);
    });

    Conn { tx, pending }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A connection whose server went away answers its calls and takes no
    /// more: a call that raced with its failure once waited out the whole
    /// timeout (30 s in mgmtd) on a connection nobody read.
    #[tokio::test]
    async fn a_failed_connection_takes_no_call_and_the_next_is_dialled() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let conn = spawn_conn(ours);
        drop(theirs);
        let t = Instant::now();
        while lock(&conn.pending).is_some() {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the failure was not seen"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A client holding the failed connection dials afresh (here: nothing
        // listens, so it fails at once) instead of waiting for its timeout.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let client = ChunkClient::unconnected(addr, 1, Duration::from_secs(30));
        *client.slots[0].lock().await = Some(conn);
        let t = Instant::now();
        let r = client.call(Vec::new()).await;
        assert!(r.is_err());
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
