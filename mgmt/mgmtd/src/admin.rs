//! The admin API: what `nodectl` (and later the SSH console) call. Every route but
//! `/healthz` needs the node's bearer token.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use cairn_chunkproto::DriveState;
use cairn_objects::{ObjectStore, StoreStatus};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// One drive as the operator sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriveStatus {
    pub index: u16,
    pub device: String,
    pub state: String,
    pub reason: String,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub allocated_bytes: u64,
    pub chunks: u64,
}

/// The node, for `nodectl status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeStatus {
    /// `healthy`, `degraded` (a drive failed, data still protected or readable), or
    /// `unavailable` (the datapath does not answer).
    pub health: String,
    pub data_dir: String,
    pub drives: Vec<DriveStatus>,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub objects: u64,
    pub buckets: u64,
    pub protection: String,
    pub replicas: u8,
    pub degraded_reads: u64,
    pub repaired_fragments: u64,
    pub unreadable_reads: u64,
    pub collected_chunks: u64,
}

#[derive(Clone)]
struct App {
    store: Arc<ObjectStore>,
    token: Arc<String>,
    data: PathBuf,
}

pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<ObjectStore>,
    token: String,
    data: PathBuf,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/status", get(status))
        .with_state(App {
            store,
            token: Arc::new(token),
            data,
        });
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!("admin API stopped: {e}");
    }
}

fn authorized(app: &App, headers: &HeaderMap) -> bool {
    let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(t) = v.strip_prefix("Bearer ") else {
        return false;
    };
    // Constant-time comparison: the token is a secret.
    let (a, b) = (t.as_bytes(), app.token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn status(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<NodeStatus>, (StatusCode, String)> {
    if !authorized(&app, &headers) {
        return Err((
            StatusCode::UNAUTHORIZED,
            "missing or wrong admin token\n".into(),
        ));
    }
    let s: StoreStatus = app
        .store
        .status()
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?;
    let (health, drives) = match app.store.drive_reports().await {
        Ok(reports) => {
            let drives: Vec<DriveStatus> = reports
                .into_iter()
                .map(|r| DriveStatus {
                    index: r.drive,
                    device: r.device,
                    state: match r.state {
                        DriveState::Healthy => "healthy".into(),
                        DriveState::Failed => "failed".into(),
                    },
                    reason: r.reason,
                    capacity_bytes: r.capacity,
                    used_bytes: r.live_bytes,
                    allocated_bytes: r.allocated_bytes,
                    chunks: r.chunks,
                })
                .collect();
            let failed = drives.iter().any(|d| d.state != "healthy");
            let h = if failed { "degraded" } else { "healthy" };
            (h.to_string(), drives)
        }
        Err(e) => {
            tracing::warn!("status: datapath unavailable: {e}");
            ("unavailable".to_string(), Vec::new())
        }
    };
    Ok(Json(NodeStatus {
        health,
        data_dir: app.data.display().to_string(),
        capacity_bytes: drives.iter().map(|d| d.capacity_bytes).sum(),
        used_bytes: drives.iter().map(|d| d.used_bytes).sum(),
        drives,
        objects: s.objects,
        buckets: s.buckets,
        protection: format!(
            "erasure {} above {} KiB, {} replicas up to it",
            s.ec,
            app.store.config().small_object >> 10,
            s.replicas
        ),
        replicas: s.replicas,
        degraded_reads: s.degraded_reads,
        repaired_fragments: s.repaired_fragments,
        unreadable_reads: s.unreadable,
        collected_chunks: s.collected_chunks,
    }))
}
