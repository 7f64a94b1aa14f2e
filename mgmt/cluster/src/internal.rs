//! The internal API's listener: HTTPS with mutual TLS.
//!
//! A connection that presents a certificate from the cluster CA (rustls has
//! already checked the chain during the handshake) reaches the member routes:
//! Raft, proposals, read index, heartbeats. A connection without one reaches only
//! `/cluster/join`, which the join token guards. A client certificate from another
//! CA fails the handshake. Until this node holds a certificate itself, it accepts
//! nothing: there is nothing a stranger may ask of a node outside any cluster.

use crate::Cluster;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Cluster {
    /// Serves the internal API on `listener` until `stop` resolves.
    pub async fn serve_internal(
        self: &Arc<Self>,
        listener: TcpListener,
        stop: impl Future<Output = ()>,
    ) {
        let (members, public) = self.router();
        let full = members.merge(public.clone());
        let mut conns = JoinSet::new();
        tokio::pin!(stop);
        loop {
            let (stream, peer) = tokio::select! {
                _ = &mut stop => break,
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
                acc = listener.accept() => match acc {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("internal API accept: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
            };
            let Some(certified) = self.transport.certified() else {
                tracing::debug!(%peer, "internal connection refused: no certificate yet");
                continue;
            };
            let (full, public) = (full.clone(), public.clone());
            conns.spawn(async move {
                let acceptor = tokio_rustls::TlsAcceptor::from(certified.server.clone());
                let tls =
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::warn!(%peer, "internal API: TLS handshake refused: {e}");
                            return;
                        }
                        Err(_) => return,
                    };
                let member = tls.get_ref().1.peer_certificates().is_some();
                let app = if member { full } else { public };
                let svc = hyper_util::service::TowerToHyperService::new(app);
                if let Err(e) = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await
                {
                    tracing::debug!(%peer, "internal API connection: {e}");
                }
            });
        }
    }
}
