//! The admin API's connections, plain and TLS alike: what one client may hold
//! before it has even authenticated.
//!
//! Why not `axum::serve`: it sets no limit on the header phase, so a client that
//! opens connections and never finishes a request holds a file descriptor each
//! for as long as it likes; enough of them exhaust the process's descriptors and
//! S3 stops accepting too. Here a request's headers must arrive within
//! [`HEADER_READ`] (as on the S3 port), and at most [`MAX_CONNECTIONS`] are open
//! per listener: past that a new connection is closed at once, so the admin port
//! can never take the descriptors the data ports need.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

/// A client that has not sent a whole request head by then is dropped.
pub(crate) const HEADER_READ: Duration = Duration::from_secs(30);
/// Open connections per admin listener (the API is an operator's, not a
/// workload's: a few dozen is already a lot).
pub(crate) const MAX_CONNECTIONS: usize = 256;
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Logged at the first refusal and every 1000th after, not per
            // connection: a flood must not become a flood of log lines.
            if refused.is_multiple_of(1000) {
                tracing::warn!(%peer, open = MAX_CONNECTIONS, "{name}: too many connections, refusing new ones ({refused} so far)");
            }
            refused += 1;
            continue;
        };
        let accepted = handshake(tcp, peer);
        let (conn, watcher) = (conn.clone(), graceful.watcher());
        tokio::spawn(async move {
            let _slot = slot;
            let Some((stream, router)) = accepted.await else {
                return;
            };
            let svc = hyper_util::service::TowerToHyperService::new(router);
            let c = conn.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            if let Err(e) = watcher.watch(c.into_owned()).await {
                tracing::debug!(%peer, "{name} connection: {e}");
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
