//! The admin API: what `nodectl` (and later the SSH console) call. Every route but
//! `/healthz` needs the node's bearer token.

use crate::cluster::{resolve_node, ClusterNode, ClusterStatus};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use cairn_chunkproto::{ChunkClient, DriveReport, DriveState, Reply, Request};
use cairn_objects::{ObjectStore, StoreStatus};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// One drive as the operator sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriveStatus {
    pub index: u16,
    pub device: String,
    /// `healthy` or `failed` (then `reason` says why).
    pub state: String,
    pub reason: String,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub allocated_bytes: u64,
    pub chunks: u64,
    /// `uring`, `nvme` or `ram`; empty when unknown. This and the fields below are
    /// known for the node's own drives (`/v1/drives`, and `/v1/status` of a single
    /// node); `default` so a newer nodectl reads an older mgmtd's answers.
    #[serde(default)]
    pub backend: String,
    /// A path, or a PCI address and namespace.
    #[serde(default)]
    pub location: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub firmware: Option<String>,
    /// Puts are refused for want of space (deletes still work); known for the
    /// node's own drives.
    #[serde(default)]
    pub full: bool,
    /// Free segments, and how many of them only deletes and compaction may use.
    #[serde(default)]
    pub free_segments: Option<u64>,
    #[serde(default)]
    pub reserve_segments: Option<u64>,
    /// What the drive's last open found damaged on disk, if anything.
    #[serde(default)]
    pub damage_at_open: Option<DamageAtOpen>,
}

/// Damage the chunk store found and worked around when it opened the drive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamageAtOpen {
    /// Segments whose header, summary or footer was damaged (rescanned).
    pub damaged_segments: u64,
    /// Damaged batches followed by valid data (the valid data was kept).
    pub corrupt_batches: u64,
    /// Chunk records lost to damage: repair rebuilds them from other drives.
    pub corrupt_records: u64,
    /// Records kept from inside damaged batches.
    pub salvaged_records: u64,
    /// Incomplete last batches dropped as torn writes (never acknowledged).
    pub torn_batches: u64,
}

impl From<DriveReport> for DriveStatus {
    fn from(r: DriveReport) -> Self {
        DriveStatus {
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
            backend: r.backend,
            location: r.location,
            model: r.model,
            serial: r.serial,
            firmware: r.firmware,
            full: r.space.as_ref().is_some_and(|s| s.full),
            free_segments: r.space.as_ref().map(|s| s.free_segments),
            reserve_segments: r.space.as_ref().map(|s| s.reserve_segments),
            damage_at_open: r
                .space
                .map(|s| DamageAtOpen {
                    damaged_segments: s.damaged_segments,
                    corrupt_batches: s.corrupt_batches,
                    corrupt_records: s.corrupt_records,
                    salvaged_records: s.salvaged_records,
                    torn_batches: s.torn_batches,
                })
                .filter(|d| *d != DamageAtOpen::default()),
        }
    }
}

/// The node's own drives, for `nodectl drives` (`GET /v1/drives`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeDrives {
    pub drives: Vec<DriveStatus>,
}

/// The node's own datapathd: where `/v1/drives` asks, in single-node and cluster
/// mode alike (and before the node has joined a cluster).
#[derive(Clone, Debug)]
pub(crate) struct LocalDatapath {
    pub client: ChunkClient,
    /// Drives it serves, indices `0..drives`.
    pub drives: u16,
}

impl LocalDatapath {
    /// Every drive's report, identity included. `DriveDetails` goes only to this
    /// node's datapathd, never through the fabric to peers: a peer running an older
    /// datapathd would close the connection on the unknown operation (see
    /// cairn-chunkproto's codec documentation).
    async fn drives(&self) -> Result<Vec<DriveStatus>, Failure> {
        let unavailable = |e: String| {
            fail(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("datapath at {} unavailable: {e}", self.client.addr()),
            )
        };
        let ops = (0..self.drives)
            .map(|drive| Request::DriveDetails { drive })
            .collect();
        let replies = self
            .client
            .call(ops)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let mut out = Vec::with_capacity(replies.len());
        for (drive, r) in (0..self.drives).zip(replies) {
            match r {
                Ok(Reply::DriveDetails(d)) => out.push(d.into()),
                Ok(other) => {
                    return Err(unavailable(format!(
                        "drive {drive}: unexpected reply {other:?}"
                    )))
                }
                Err(f) => return Err(unavailable(format!("drive {drive}: {f}"))),
            }
        }
        Ok(out)
    }
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
    /// Multipart uploads aborted for being older than `--abort-uploads-after`.
    #[serde(default)]
    pub aborted_uploads: u64,
    /// Fragments found bad when read (by clients or the scrubber).
    #[serde(default)]
    pub bad_fragments: u64,
    /// The scrubber: state, the pass under way, the last one.
    #[serde(default)]
    pub scrub: Option<cairn_objects::ScrubStatus>,
    /// Objects fully protected, short of fragments (a drive failed, or a write
    /// that found a drive full), or lost, as the manifests and the drives' states
    /// say now (a single node; a cluster member's are in `cluster status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_protection: Option<cairn_objects::ProtectionReport>,
}

/// What the admin API manages.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Single(Arc<ObjectStore>),
    Cluster(Arc<ClusterNode>),
}

#[derive(Clone)]
pub(crate) struct App {
    target: Target,
    local: LocalDatapath,
    token: Arc<String>,
    data: PathBuf,
}

pub(crate) type Failure = (StatusCode, String);

fn fail(code: StatusCode, e: impl std::fmt::Display) -> Failure {
    (code, format!("{e}\n"))
}

/// A failure of the node itself (its metadata unreadable, say).
pub(crate) fn internal(e: impl std::fmt::Display) -> Failure {
    fail(StatusCode::INTERNAL_SERVER_ERROR, e)
}

impl App {
    pub(crate) fn store(&self) -> Result<Arc<ObjectStore>, Failure> {
        match &self.target {
            Target::Single(s) => Ok(s.clone()),
            Target::Cluster(c) => c.store.get().cloned().ok_or_else(|| {
                fail(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "this node is not part of a cluster yet: run `nodectl cluster init` or `nodectl cluster join`",
                )
            }),
        }
    }

    fn cluster(&self) -> Result<Arc<ClusterNode>, Failure> {
        match &self.target {
            Target::Cluster(c) => Ok(c.clone()),
            Target::Single(_) => Err(fail(
                StatusCode::CONFLICT,
                "this node runs in single-node mode (start mgmtd with --internal for a cluster)",
            )),
        }
    }

    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), Failure> {
        if authorized(self, headers) {
            Ok(())
        } else {
            Err(fail(
                StatusCode::UNAUTHORIZED,
                "missing or wrong admin token",
            ))
        }
    }
}

pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    target: Target,
    local: LocalDatapath,
    token: String,
    data: PathBuf,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/status", get(status))
        .route("/v1/drives", get(drives))
        .route("/v1/scrub", get(crate::scrub::status))
        .route("/v1/scrub/start", post(crate::scrub::start))
        .route("/v1/scrub/pause", post(crate::scrub::pause))
        .route("/v1/gc", get(crate::gc::status))
        .route("/v1/gc/run", post(crate::gc::run))
        .route("/v1/cluster/init", post(cluster_init))
        .route("/v1/cluster/join", post(cluster_join))
        .route("/v1/cluster/status", get(cluster_status))
        .route("/v1/cluster/token", get(cluster_token))
        .route("/v1/cluster/drain", post(cluster_drain))
        .route("/v1/cluster/remove", post(cluster_remove))
        .with_state(App {
            target,
            local,
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
    app.check(&headers)?;
    let store = app.store()?;
    let s: StoreStatus = store
        .status()
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?;
    // A single node's drives are its own datapathd's: ask it what they are too. A
    // cluster member lists every drive of the cluster by cluster-wide id, through
    // the fabric, with state and space only.
    let reports = match &app.target {
        Target::Single(_) => app.local.drives().await.map_err(|(_, e)| e),
        Target::Cluster(_) => store
            .drive_reports()
            .await
            .map(|r| r.into_iter().map(DriveStatus::from).collect())
            .map_err(|e| e.to_string()),
    };
    // A single node counts its objects short of protection here (a member's
    // count is the cluster's, in `cluster status`), by the drive states just
    // reported (the store's own view of them may lag by a poll).
    let protection = match (&app.target, &reports) {
        (Target::Single(_), Ok(drives)) => {
            let failed: std::collections::HashSet<u16> = drives
                .iter()
                .filter(|d| d.state != "healthy")
                .map(|d| d.index)
                .collect();
            let gone = move |d: u16| {
                if failed.contains(&d) {
                    cairn_objects::FragmentState::Missing
                } else {
                    cairn_objects::FragmentState::Good
                }
            };
            Some(store.protection(&gone).map_err(internal)?)
        }
        _ => None,
    };
    let short = protection
        .as_ref()
        .is_some_and(|p| p.degraded > 0 || p.lost > 0);
    let (health, drives) = match reports {
        Ok(drives) => {
            let failed = drives.iter().any(|d| d.state != "healthy");
            let full = drives.iter().any(|d| d.full);
            // The last scrub found damage it could not rebuild: some object is
            // less protected than it should be until repair catches up.
            let scrub_left = store
                .scrubber()
                .status()
                .last
                .is_some_and(|p| p.unrepaired > 0);
            let h = if failed || scrub_left {
                "degraded"
            } else if full {
                // Serving reads and deletes; refusing new data (objects written
                // as it filled may be short of a fragment: the objects line says).
                "full"
            } else if short {
                // Every drive well, yet objects lack fragments: repair has not
                // placed them yet.
                "degraded"
            } else {
                "healthy"
            };
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
            store.config().small_object >> 10,
            s.replicas
        ),
        replicas: s.replicas,
        degraded_reads: s.degraded_reads,
        repaired_fragments: s.repaired_fragments,
        unreadable_reads: s.unreadable,
        collected_chunks: s.collected_chunks,
        aborted_uploads: s.aborted_uploads,
        bad_fragments: s.bad_fragments,
        scrub: Some(store.scrubber().status()),
        objects_protection: protection,
    }))
}

/// `GET /v1/drives`: the node's own drives with what they are, state and space.
async fn drives(State(app): State<App>, headers: HeaderMap) -> Result<Json<NodeDrives>, Failure> {
    app.check(&headers)?;
    Ok(Json(NodeDrives {
        drives: app.local.drives().await?,
    }))
}

/// `POST /v1/cluster/init`.
#[derive(Debug, Deserialize)]
pub struct InitRequest {
    pub cluster_id: Option<String>,
    /// `K+M`, default 4+2.
    pub ec: Option<String>,
    pub replicas: Option<u8>,
}

/// A join token, as `init` and `token` return it.
#[derive(Debug, Serialize, Deserialize)]
pub struct TokenReply {
    pub cluster_id: String,
    pub token: String,
}

fn parse_ec(s: &str) -> Result<(u8, u8), Failure> {
    let bad = || fail(StatusCode::BAD_REQUEST, format!("{s:?} is not K+M"));
    let (k, m) = s.split_once('+').ok_or_else(bad)?;
    let k: u8 = k.trim().parse().map_err(|_| bad())?;
    let m: u8 = m.trim().parse().map_err(|_| bad())?;
    if k == 0 || k as u16 + m as u16 > 32 {
        return Err(bad());
    }
    Ok((k, m))
}

async fn cluster_init(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<InitRequest>,
) -> Result<Json<TokenReply>, Failure> {
    app.check(&headers)?;
    let node = app.cluster()?;
    let (k, m) = parse_ec(req.ec.as_deref().unwrap_or("4+2"))?;
    let replicas = req.replicas.unwrap_or(3);
    if replicas == 0 {
        return Err(fail(StatusCode::BAD_REQUEST, "replicas must be at least 1"));
    }
    let id = req
        .cluster_id
        .unwrap_or_else(|| format!("{:08x}", rand::random::<u32>()));
    let token = node
        .cluster
        .init(&id, cairn_cluster::Protection { k, m, replicas })
        .await
        .map_err(|e| fail(StatusCode::CONFLICT, e))?;
    Ok(Json(TokenReply {
        cluster_id: id,
        token,
    }))
}

/// `POST /v1/cluster/join`.
#[derive(Debug, Deserialize)]
pub struct JoinRequest {
    /// The internal address of any member.
    pub seed: String,
    pub token: String,
}

async fn cluster_join(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<JoinRequest>,
) -> Result<Json<TokenReply>, Failure> {
    app.check(&headers)?;
    let node = app.cluster()?;
    if node.cluster.is_member() {
        return Err(fail(
            StatusCode::CONFLICT,
            format!(
                "already a member of cluster {}",
                node.cluster.map().cluster_id
            ),
        ));
    }
    let cluster_id = node
        .cluster
        .request_join(&req.seed, &req.token)
        .await
        .map_err(|e| fail(StatusCode::BAD_GATEWAY, e))?;
    node.cluster
        .wait_member(std::time::Duration::from_secs(60))
        .await
        .map_err(|e| fail(StatusCode::GATEWAY_TIMEOUT, e))?;
    Ok(Json(TokenReply {
        cluster_id,
        token: req.token,
    }))
}

async fn cluster_status(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<ClusterStatus>, Failure> {
    app.check(&headers)?;
    let node = app.cluster()?;
    node.status()
        .await
        .map(Json)
        .map_err(|e| fail(StatusCode::SERVICE_UNAVAILABLE, e))
}

async fn cluster_token(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<TokenReply>, Failure> {
    app.check(&headers)?;
    let node = app.cluster()?;
    let token = node
        .cluster
        .token()
        .map_err(|e| fail(StatusCode::CONFLICT, e))?;
    Ok(Json(TokenReply {
        cluster_id: node.cluster.map().cluster_id.clone(),
        token,
    }))
}

/// `POST /v1/cluster/drain` and `/remove`.
#[derive(Debug, Deserialize)]
pub struct NodeRequest {
    /// Node id (hex, or a unique prefix).
    pub node: String,
    #[serde(default)]
    pub force: bool,
}

async fn cluster_drain(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<NodeRequest>,
) -> Result<Json<u64>, Failure> {
    app.check(&headers)?;
    let node = app.cluster()?;
    let id =
        resolve_node(&node.cluster.map(), &req.node).map_err(|e| fail(StatusCode::NOT_FOUND, e))?;
    node.drain(id)
        .await
        .map(Json)
        .map_err(|e| fail(StatusCode::CONFLICT, e))
}

async fn cluster_remove(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<NodeRequest>,
) -> Result<Json<bool>, Failure> {
    app.check(&headers)?;
    let node = app.cluster()?;
    let id =
        resolve_node(&node.cluster.map(), &req.node).map_err(|e| fail(StatusCode::NOT_FOUND, e))?;
    node.remove(id, req.force)
        .await
        .map(|()| Json(true))
        .map_err(|e| fail(StatusCode::CONFLICT, e))
}
