//! The RESP front end's wiring, kept apart from `run` so the daemon's start paths
//! each gain one bind and one serve.

use crate::{io_err, MgmtError};
use cairn_objects::ObjectStore;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Binds the RESP port when one is configured, before serving, so a port in use
/// fails the start as S3's does.
pub(crate) async fn bind(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, MgmtError> {
    match addr {
        None => Ok(None),
        Some(a) => Ok(Some(
            TcpListener::bind(a)
                .await
                .map_err(io_err(format!("bind RESP on {a}")))?,
        )),
    }
}

/// Serves RESP (when bound) with S3's credential table; `AUTH pass` alone is the
/// root access key's secret.
pub(crate) async fn serve(
    listener: Option<TcpListener>,
    store: Arc<ObjectStore>,
    keys: cairn_s3::Keys,
    root_access_key: String,
    (max_clients, intake_bytes, metrics): (usize, u64, cairn_resp::RespMetrics),
    stop: impl std::future::Future<Output = ()>,
) {
    let Some(listener) = listener else { return };
    if let Ok(a) = listener.local_addr() {
        tracing::info!(resp_addr = %a, "RESP serving");
    }
    let cfg = cairn_resp::RespConfig {
        max_clients,
        intake_bytes,
        metrics,
        ..cairn_resp::RespConfig::new(keys, root_access_key)
    };
    if let Err(e) = cairn_resp::serve(listener, store, cfg, stop).await {
        tracing::error!("RESP stopped: {e}");
    }
}
