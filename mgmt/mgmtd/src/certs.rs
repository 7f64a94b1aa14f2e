//! The admin API over mutual TLS: client certificates signed by the cluster CA
//! (`nodectl cert issue`, `POST /v1/admin/certs`), whose SHA-256 the cluster
//! keeps with a role in its replicated metadata (so revoking is forgetting it,
//! at once on every node), and the TLS listener that serves the same API with
//! the node's own certificate (`mgmtd --admin-tls ADDR`).
//!
//! The TLS listener takes clients with or without a certificate: a client
//! without one authenticates with a bearer token as on the plain listener. A
//! certificate of the cluster CA that the table does not name (a node's own,
//! a revoked one) stands for no one.

use crate::access::Principal;
use crate::admin::{App, Body, Failure};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use cairn_adminapi::{AdminCertView, ErrorKind, IssuedAdminCert, NewAdminCert};
use cairn_meta::{AdminCertRecord, AdminChange};
use std::time::Duration;

/// The SHA-256 (hex) of the client certificate a TLS connection presented, put
/// on each of its requests for the access layer.
#[derive(Clone, Debug)]
pub(crate) struct PeerCert(pub(crate) Option<String>);

fn view(sha256: String, r: AdminCertRecord) -> AdminCertView {
    AdminCertView {
        id: sha256[..16.min(sha256.len())].to_string(),
        sha256,
        name: r.name,
        role: r.role,
        not_after_ms: r.not_after_ms,
        created_ms: r.created_ms,
        created_by: r.created_by,
    }
}

/// `POST /v1/admin/certs`.
pub(crate) async fn issue(
    State(app): State<App>,
    Extension(by): Extension<Principal>,
    body: Body<NewAdminCert>,
) -> Result<Json<IssuedAdminCert>, Failure> {
    let Json(req) = body?;
    let fits = |c: char| c.is_ascii_alphanumeric() || "._@:+-".contains(c);
    if req.name.is_empty() || req.name.len() > 64 || !req.name.chars().all(fits) {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "a certificate's name is 1 to 64 of A-Z a-z 0-9 . _ @ : + -",
        ));
    }
    let days = req.days.unwrap_or(365);
    if !(1..=3650).contains(&days) {
        return Err(Failure::new(ErrorKind::Invalid, "days: 1 to 3650"));
    }
    let store = app.store()?;
    let secrets = app
        .cluster()
        .secrets()
        .ok_or_else(|| Failure::new(ErrorKind::Unavailable, "this node has no cluster CA yet"))?;
    let cluster_id = app.cluster_map().cluster_id.clone();
    let cert_pem =
        cairn_pki::ca::issue_admin(&secrets, &cluster_id, &req.name, days, &req.public_key_hex)
            .map_err(|e| Failure::new(ErrorKind::Invalid, e.to_string()))?;
    let sha256 = cairn_pki::ca::fingerprint(&cert_pem)
        .map_err(|e| Failure::new(ErrorKind::Internal, e.to_string()))?;
    let now = cairn_meta::now_ms();
    let record = AdminCertRecord {
        name: req.name,
        role: req.role,
        not_after_ms: now + i64::from(days) * 86_400_000,
        created_ms: now,
        created_by: by.who,
    };
    store
        .change_admin(AdminChange::CreateCert {
            sha256: sha256.clone(),
            record: record.clone(),
        })
        .await?;
    Ok(Json(IssuedAdminCert {
        view: view(sha256, record),
        cert_pem,
        ca_pem: secrets.ca_cert_pem,
    }))
}

/// `GET /v1/admin/certs`.
pub(crate) async fn list(State(app): State<App>) -> Result<Json<Vec<AdminCertView>>, Failure> {
    let store = crate::tenants::current(&app).await?;
    let mut out: Vec<_> = store
        .meta()
        .admin_certs()?
        .into_iter()
        .map(|(s, r)| view(s, r))
        .collect();
    out.sort_by_key(|c| c.created_ms);
    Ok(Json(out))
}

/// `DELETE /v1/admin/certs/{id}`: by id (a prefix of 8 or more hex digits of
/// the SHA-256, naming one certificate) or the whole SHA-256.
pub(crate) async fn revoke(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<bool>, Failure> {
    let store = crate::tenants::current(&app).await?;
    let id = id.to_ascii_lowercase();
    let hits: Vec<String> = store
        .meta()
        .admin_certs()?
        .into_iter()
        .map(|(s, _)| s)
        .filter(|s| id.len() >= 8 && s.starts_with(&id))
        .collect();
    let sha256 = match hits.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(Failure::new(
                ErrorKind::NotFound,
                format!("no admin certificate {id}"),
            ))
        }
        _ => {
            return Err(Failure::new(
                ErrorKind::Invalid,
                format!("{id} names several certificates: give more digits"),
            ))
        }
    };
    store
        .change_admin(AdminChange::DeleteCert { sha256 })
        .await?;
    Ok(Json(true))
}

/// The principal a client certificate stands for: named in the table, not
/// expired.
pub(crate) fn principal(app: &App, sha256: &str) -> Option<Principal> {
    let store = app.store().ok()?;
    let rec = store.meta().admin_cert(sha256).ok()??;
    if rec.not_after_ms <= cairn_meta::now_ms() {
        return None;
    }
    Some(Principal {
        who: format!("cert:{} ({})", rec.name, &sha256[..16.min(sha256.len())]),
        role: rec.role,
        tenant: None,
    })
}

/// Serves `router` over TLS on `listener` with the node's certificate (read
/// from `tls_dir` once the node has one), until `stop`; connections in hand
/// get up to 10 s to finish (see [`crate::listen`] for the limits).
pub(crate) async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls_dir: std::path::PathBuf,
    router: axum::Router,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    // A node has its certificate once it is a member (a single node at once).
    let tls = loop {
        match cairn_pki::tls::NodeTls::load(&tls_dir) {
            Ok(Some(t)) => break t,
            Ok(None) => {}
            Err(e) => tracing::warn!("admin TLS: {e}"),
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    let config = match tls.server_config(false) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("admin TLS not served: {e}");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tracing::info!(addr = ?listener.local_addr().ok(), "admin API over TLS (client certificates or tokens)");
    crate::listen::serve(
        listener,
        "admin TLS",
        move |tcp, peer| {
            let (acceptor, router) = (acceptor.clone(), router.clone());
            async move {
                let stream =
                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, "admin TLS handshake: {e}");
                            return None;
                        }
                        Err(_) => return None,
                    };
                let cert = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| cairn_pki::ca::hex(&cairn_pki::tls::cert_sha256(c)));
                let router = router.layer(axum::Extension(PeerCert(cert)));
                Some((Box::new(stream) as Box<dyn crate::listen::Stream>, router))
            }
        },
        stop,
    )
    .await;
}
