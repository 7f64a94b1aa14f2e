//! The admin API's connections, plain and TLS alike: what one client may hold
//! before it has even authenticated.
//!
//! Why not `axum::serve`: it sets no limit on the header phase, so a client that
//! opens connections and never finishes a request holds a file descriptor each
//! for as long as it likes; enough of them exhaust the process's descriptors and
//! S3 stops accepting too. Here a request's headers must arrive within
//! [`HEADER_READ`] (as on the S3 port), a connection on which nothing moves
//! for [`IDLE`] with no request in hand is closed (hyper's header limit starts
//! only at a request's first byte: a client that connects and sends nothing, or
//! only an HTTP/2 preface, would hold its connection for good), and at most
//! [`MAX_CONNECTIONS`] are open per listener, [`PER_CLIENT`] per client
//! address: past that a new connection is closed at once, so the admin port can
//! never take the descriptors the data ports need, and one client keeping its
//! connections alive cannot lock the others out.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A client that has not sent a whole request head by then is dropped.
pub(crate) const HEADER_READ: Duration = Duration::from_secs(30);
/// A connection with no request in hand on which no byte moved for this long
/// is closed (a long request, a `join` that waits, is never cut).
pub(crate) const IDLE: Duration = Duration::from_secs(30);
/// Open connections per admin listener (the API is an operator's, not a
/// workload's: a few dozen is already a lot).
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Open connections per client address and listener: one client keeping
/// connections alive (a ping every 20 s) cannot take them all.
pub(crate) const PER_CLIENT: usize = 32;
/// Connections still open at shutdown get this long to finish.
const DRAIN: Duration = Duration::from_secs(10);

/// A connection's byte stream once accepted (TCP, or TLS over it).
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// What a handshake yields: the stream to speak HTTP on and the router for it
/// (which may carry what the handshake learnt, e.g. the client's certificate).
pub(crate) type Accepted = Option<(Box<dyn Stream>, axum::Router)>;

/// Serves connections from `listener` until `stop`: each goes through
/// `handshake` (which may refuse it), then HTTP/1 or 2 with the header limit.
pub(crate) async fn serve<H, Fut>(
    listener: TcpListener,
    name: &'static str,
    handshake: H,
    stop: impl Future<Output = ()>,
) where
    H: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = Accepted> + Send + 'static,
{
    tokio::pin!(stop);
    let mut conn =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    conn.http1()
        .max_buf_size(64 << 10)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ);
    let conn = Arc::new(conn);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let per_client: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut refused = 0u64;
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("{name} accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let admitted = match Share::take(&per_client, peer.ip()) {
            None => Err(format!("from one client (at most {PER_CLIENT})")),
            Some(mine) => (slots.clone().try_acquire_owned())
                .map(|slot| (slot, mine))
                .map_err(|_| format!("in all (at most {MAX_CONNECTIONS})")),
        };
        let (slot, mine) = match admitted {
            Ok(a) => a,
            Err(limit) => {
                // Logged at the first refusal and every 1000th after, not per
                // connection: a flood must not become a flood of log lines.
                if refused.is_multiple_of(1000) {
                    tracing::warn!(%peer, "{name}: too many connections {limit}, refusing new ones ({refused} so far)");
                }
                refused += 1;
                continue;
            }
        };
        let accepted = handshake(tcp, peer);
        let (conn, watcher) = (conn.clone(), graceful.watcher());
        tokio::spawn(async move {
            let (_slot, _mine) = (slot, mine);
            let Some((stream, router)) = accepted.await else {
                return;
            };
            let activity = Arc::new(Activity::default());
            let busy = activity.clone();
            let router = router.layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let busy = busy.clone();
                    async move {
                        let _in_hand = busy.begin();
                        next.run(req).await
                    }
                },
            ));
            let stream = Noted {
                inner: stream,
                activity: activity.clone(),
            };
            let svc = hyper_util::service::TowerToHyperService::new(router);
            let c = conn.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            tokio::select! {
                r = watcher.watch(c.into_owned()) => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, "{name} connection: {e}");
                    }
                }
                _ = activity.idle() => tracing::debug!(%peer, "{name}: idle connection closed"),
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("{name}: connections still open after {DRAIN:?}");
    }
}

/// What a connection is doing: when a byte last moved, and how many requests
/// are in hand.
#[derive(Debug)]
struct Activity {
    born: std::time::Instant,
    /// Milliseconds since `born` of the last byte read or written.
    last: AtomicU64,
    in_hand: AtomicUsize,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            born: std::time::Instant::now(),
            last: AtomicU64::new(0),
            in_hand: AtomicUsize::new(0),
        }
    }
}

/// A request in hand, until dropped (also when its future is).
struct InHand(Arc<Activity>);

impl Drop for InHand {
    fn drop(&mut self) {
        self.0.in_hand.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

impl Activity {
    fn touch(&self) {
        let now = self.born.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    fn begin(self: &Arc<Self>) -> InHand {
        self.in_hand.fetch_add(1, Ordering::Relaxed);
        InHand(self.clone())
    }

    /// Returns once the connection has been idle for [`IDLE`].
    async fn idle(&self) {
        loop {
            tokio::time::sleep(IDLE / 6).await;
            let now = self.born.elapsed().as_millis() as u64;
            let quiet = now.saturating_sub(self.last.load(Ordering::Relaxed));
            if self.in_hand.load(Ordering::Relaxed) == 0 && quiet >= IDLE.as_millis() as u64 {
                return;
            }
        }
    }
}

/// A stream that notes in its [`Activity`] each time bytes move.
struct Noted<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Noted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Noted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One client's share of a listener's connections, given back when dropped.
struct Share {
    clients: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl Share {
    /// A connection for `ip`, unless it holds [`PER_CLIENT`] already.
    fn take(clients: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr) -> Option<Share> {
        let mut c = clients.lock().unwrap_or_else(|p| p.into_inner());
        let n = c.entry(ip).or_default();
        if *n >= PER_CLIENT {
            return None;
        }
        *n += 1;
        Some(Share {
            clients: clients.clone(),
            ip,
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut c = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = c.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.ip);
            }
        }
    }
}
