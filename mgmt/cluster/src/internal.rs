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
use tower::ServiceExt;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Cluster {
    /// Whether a peer presenting `cert` (already verified against the cluster CA
    /// by the handshake) is a member: its certificate must be one the map names.
    /// A node not yet in the map cannot tell and accepts any cluster certificate:
    /// that is how the leader's first Raft messages reach a joiner.
    fn admits(&self, cert_sha256_hex: &str) -> bool {
        let map = self.map();
        !map.nodes.contains_key(&self.id) || map.knows_cert(cert_sha256_hex)
    }

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
            let (full, public, me) = (full.clone(), public.clone(), self.clone());
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
                let fingerprint = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| cairn_pki::ca::hex(&cairn_pki::tls::cert_sha256(c)));
                // Decided per request, not per connection: a node removed from the
                // map loses the member routes on connections it already holds.
                let svc = tower::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let member = fingerprint.as_deref().is_some_and(|fp| me.admits(fp));
                    let app = if member { full.clone() } else { public.clone() };
                    app.oneshot(req)
                });
                let svc = hyper_util::service::TowerToHyperService::new(svc);
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
