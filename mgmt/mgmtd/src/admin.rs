//! The admin API: what `nodectl` (and later the SSH console) call. Every route but
//! `/healthz` passes the access layer first ([`crate::access`]: the token, the
//! role its action needs, the audit), so no handler checks anything. The routes, and every body they take
//! and answer, are cairn-adminapi's: the handlers here serialize exactly those
//! types, and every failure is a [`Failure`] (an `ErrorBody` with its status).

use crate::cluster::{resolve_node, ClusterNode};
pub(crate) use crate::failure::Failure;
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::routing::{delete, get, patch, post, put};
use axum::{Json, Router};
use cairn_adminapi::{
    routes, ClusterStatus, DamageAtOpen, DriveStatus, ErrorKind, InitRequest, JoinRequest,
    NodeDrives, NodeRequest, NodeStatus, TokenReply,
};
use cairn_chunkproto::{ChunkClient, DriveReport, DriveState, Reply, Request};
use cairn_objects::{ObjectStore, StoreStatus};
use std::path::PathBuf;
use std::sync::Arc;

/// A drive's report from datapathd as the operator sees it.
fn drive_status(r: DriveReport) -> DriveStatus {
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
        reactor: r.reactor.map(|l| cairn_adminapi::ReactorLoad {
            reactor: l.reactor,
            busy_ns: l.busy_ns,
            turns: l.turns,
            batches: l.batches,
            ops: l.ops,
            queue_depth: l.queue_depth,
        }),
    }
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
    pub(crate) async fn drives(&self) -> Result<Vec<DriveStatus>, Failure> {
        let unavailable = |e: String| {
            Failure::new(
                ErrorKind::Unavailable,
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
                Ok(Reply::DriveDetails(d)) => out.push(drive_status(d)),
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

#[derive(Clone)]
pub(crate) struct App {
    node: Arc<ClusterNode>,
    local: LocalDatapath,
    token: Arc<String>,
    data: PathBuf,
    metrics: Arc<crate::metrics::Metrics>,
    sessions: Arc<crate::access::SessionTokens>,
    throughput: Arc<crate::page::Throughput>,
    refusals: Arc<crate::audit::Refusals>,
}

impl App {
    pub(crate) fn refusals(&self) -> &crate::audit::Refusals {
        &self.refusals
    }

    pub(crate) fn store(&self) -> Result<Arc<ObjectStore>, Failure> {
        self.node.store.get().cloned().ok_or_else(|| {
            Failure::new(
                ErrorKind::Unavailable,
                "this node is not part of a cluster yet: run `nodectl cluster init` or `nodectl cluster join`",
            )
        })
    }

    /// The cluster map as this node last applied it.
    pub(crate) fn cluster_map(&self) -> Arc<cairn_cluster::ClusterMap> {
        self.node.cluster.map()
    }

    pub(crate) fn cluster(&self) -> &Arc<cairn_cluster::Cluster> {
        &self.node.cluster
    }

    pub(crate) fn node(&self) -> &ClusterNode {
        &self.node
    }

    pub(crate) fn sessions(&self) -> &crate::access::SessionTokens {
        &self.sessions
    }

    pub(crate) fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    pub(crate) fn throughput(&self) -> &crate::page::Throughput {
        &self.throughput
    }

    /// Repair as this node has done it.
    pub(crate) fn repair_stats(&self) -> crate::cluster::RepairStats {
        self.node
            .repair
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This node's own drives, as its datapathd reports them.
    pub(crate) async fn local_drives(&self) -> Result<Vec<DriveStatus>, Failure> {
        self.local.drives().await
    }

    /// The cluster is this node alone (a single-node appliance): its drives are
    /// the cluster's, so `status` can say what its own datapathd says of them.
    fn alone(&self) -> bool {
        let map = self.node.cluster.map();
        map.nodes.len() == 1 && map.nodes.contains_key(&self.node.cluster.id())
    }

    /// The node's own admin token (from its state directory).
    pub(crate) fn local_token(&self) -> &str {
        &self.token
    }
}

/// What the admin API's handlers share.
pub(crate) struct AppParts {
    pub node: Arc<ClusterNode>,
    pub local: LocalDatapath,
    /// The node's own admin token.
    pub token: String,
    pub data: PathBuf,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub sessions: Arc<crate::access::SessionTokens>,
}

/// Serves the admin API on `listener`, and over TLS on `tls` (a listener, the
/// node's TLS directory, and when to stop) when given.
pub(crate) async fn serve<F: std::future::Future<Output = ()> + Send + 'static>(
    listener: tokio::net::TcpListener,
    tls: Option<(tokio::net::TcpListener, PathBuf, F)>,
    parts: AppParts,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let state = App {
        node: parts.node,
        local: parts.local,
        token: Arc::new(parts.token),
        data: parts.data,
        metrics: parts.metrics,
        sessions: parts.sessions,
        throughput: Default::default(),
        refusals: Default::default(),
    };
    // The audit's folded failures: swept every quarter minute, and all of them
    // once the listeners have drained.
    let (sweep_stop, swept) = tokio::sync::oneshot::channel::<()>();
    let sweeper = tokio::spawn(crate::audit::sweep(state.clone(), async move {
        let _ = swept.await;
    }));
    // The status page's chart: sampled whether or not anyone looks.
    let sampler = tokio::spawn({
        let (t, m) = (state.throughput.clone(), state.metrics.clone());
        async move { t.sample(|| m.s3_bytes()).await }
    });
    let app = Router::new()
        .route(routes::HEALTHZ, get(|| async { "ok" }))
        .route(routes::METRICS, get(crate::metrics::serve))
        .route(routes::STATUS, get(status))
        .route(routes::DRIVES, get(drives))
        .route(routes::SCRUB, get(crate::scrub::status))
        .route(routes::SCRUB_START, post(crate::scrub::start))
        .route(routes::SCRUB_PAUSE, post(crate::scrub::pause))
        .route(routes::GC, get(crate::gc::status))
        .route(routes::GC_RUN, post(crate::gc::run))
        .route(routes::CLUSTER_INIT, post(cluster_init))
        .route(routes::CLUSTER_JOIN, post(cluster_join))
        .route(routes::CLUSTER_STATUS, get(cluster_status))
        .route(routes::CLUSTER_TOKEN, get(cluster_token))
        .route(routes::CLUSTER_DRAIN, post(cluster_drain))
        .route(routes::CLUSTER_REMOVE, post(cluster_remove))
        .route(
            routes::TENANTS,
            get(crate::tenants::list).post(crate::tenants::create),
        )
        .route(
            routes::TENANT,
            get(crate::tenants::show)
                .patch(crate::tenants::set_disabled)
                .delete(crate::tenants::delete),
        )
        .route(
            routes::USERS,
            get(crate::tenants::users).post(crate::tenants::create_user),
        )
        .route(
            routes::USER,
            patch(crate::tenants::set_user_disabled).delete(crate::tenants::delete_user),
        )
        .route(routes::USER_KEYS, post(crate::tenants::create_key))
        .route(routes::KEYS, get(crate::tenants::keys))
        .route(routes::KEY, delete(crate::tenants::revoke_key))
        .route(routes::TENANT_QUOTA, put(crate::tenants::set_quota))
        .route(routes::TENANT_QOS, put(crate::tenants::set_qos))
        .route(routes::BUCKETS, get(crate::tenants::buckets))
        .route(routes::BUCKET_QUOTA, put(crate::tenants::set_bucket_quota))
        .route(
            routes::SNAPSHOTS,
            get(crate::snapshots::list).post(crate::snapshots::create),
        )
        .route(routes::SNAPSHOT, delete(crate::snapshots::delete))
        .route(
            routes::REPLICATION,
            get(crate::replication::show)
                .put(crate::replication::set)
                .delete(crate::replication::remove),
        )
        .route(routes::EXPORTS, get(crate::tenants::exports))
        .route(
            routes::BUCKET_EXPORT,
            put(crate::tenants::set_export).delete(crate::tenants::remove_export),
        )
        .route(
            routes::KV_POOLS,
            get(crate::kv::pools).post(crate::kv::create),
        )
        .route(routes::KV_POOL, delete(crate::kv::delete))
        .route(routes::KV_STATS, get(crate::kv::stats))
        .route(
            routes::ADMIN_TOKENS,
            get(crate::access::tokens).post(crate::access::create_token),
        )
        .route(routes::ADMIN_TOKEN, delete(crate::access::revoke_token))
        .route(routes::AUDIT, get(crate::access::audit_list))
        .route(routes::PAGE, get(crate::page::page))
        .route(
            routes::ADMIN_CERTS,
            get(crate::certs::list).post(crate::certs::issue),
        )
        .route(routes::ADMIN_CERT, delete(crate::certs::revoke))
        .route(
            routes::SSH_KEYS,
            get(crate::ssh_keys::list).post(crate::ssh_keys::add),
        )
        .route(routes::SSH_KEY, delete(crate::ssh_keys::remove))
        .route(routes::BMCS, get(crate::bmc::list))
        .route(
            routes::NODE_BMC,
            get(crate::bmc::show)
                .put(crate::bmc::set)
                .delete(crate::bmc::clear),
        )
        .route(
            routes::NODE_POWER,
            get(crate::bmc::power_status).post(crate::bmc::power),
        )
        .route(routes::NODE_SENSORS, get(crate::sensors::list))
        // Every matched route passes the access layer (authentication, the
        // action's role, audit); unmatched ones fall through to the 404.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::access::guard,
        ))
        .fallback(|| async { Failure::new(ErrorKind::NotFound, "no such route") })
        .with_state(state);
    let tls_task =
        tls.map(|(l, dir, stop)| tokio::spawn(crate::certs::serve_tls(l, dir, app.clone(), stop)));
    crate::listen::serve(
        listener,
        "admin API",
        move |tcp, _| {
            let router = app.clone();
            async move { Some((Box::new(tcp) as Box<dyn crate::listen::Stream>, router)) }
        },
        shutdown,
    )
    .await;
    sampler.abort();
    let _ = sweep_stop.send(());
    let _ = sweeper.await;
    if let Some(t) = tls_task {
        let _ = t.await;
    }
}

/// The kernel's host name (what node.toml's `hostname` set on an image node).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

pub(crate) async fn status(State(app): State<App>) -> Result<Json<NodeStatus>, Failure> {
    let store = app.store()?;
    let s: StoreStatus = store.status().await?;
    // A single node's drives are its own datapathd's: ask it what they are too. A
    // cluster member lists every drive of the cluster by cluster-wide id, through
    // the fabric, with state and space only.
    let alone = app.alone();
    let reports = if alone {
        app.local
            .drives()
            .await
            .map_err(|f| f.message().to_string())
    } else {
        store
            .drive_reports()
            .await
            .map(|r| r.into_iter().map(drive_status).collect())
            .map_err(|e| e.to_string())
    };
    // A single node counts its objects short of protection here (a member's
    // count is the cluster's, in `cluster status`), by the drive states just
    // reported (the store's own view of them may lag by a poll).
    let protection = match (alone, &reports) {
        (true, Ok(drives)) => {
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
            Some(store.protection(&gone)?)
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
        hostname: hostname(),
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
        lifecycle: Some({
            let c = store.counters();
            cairn_adminapi::LifecycleStatus {
                expired: c
                    .lifecycle_expired
                    .load(std::sync::atomic::Ordering::Relaxed),
                aborted: c
                    .lifecycle_aborted
                    .load(std::sync::atomic::Ordering::Relaxed),
                passes: c
                    .lifecycle_passes
                    .load(std::sync::atomic::Ordering::Relaxed),
                last_pass_ms: c
                    .lifecycle_last_pass_ms
                    .load(std::sync::atomic::Ordering::Relaxed),
            }
        }),
        objects_protection: protection,
        alerts: app.node().sensors.alerts(),
    }))
}

/// `GET /v1/drives`: the node's own drives with what they are, state and space.
async fn drives(State(app): State<App>) -> Result<Json<NodeDrives>, Failure> {
    Ok(Json(NodeDrives {
        drives: app.local.drives().await?,
    }))
}

fn parse_ec(s: &str) -> Result<(u8, u8), Failure> {
    let bad = || Failure::new(ErrorKind::Invalid, format!("{s:?} is not K+M"));
    let (k, m) = s.split_once('+').ok_or_else(bad)?;
    let k: u8 = k.trim().parse().map_err(|_| bad())?;
    let m: u8 = m.trim().parse().map_err(|_| bad())?;
    if k == 0 || k as u16 + m as u16 > 32 {
        return Err(bad());
    }
    Ok((k, m))
}

/// A route's JSON body, read after the token is checked (so a caller without it
/// learns nothing about the body).
pub(crate) type Body<T> = Result<Json<T>, JsonRejection>;

async fn cluster_init(
    State(app): State<App>,
    body: Body<InitRequest>,
) -> Result<Json<TokenReply>, Failure> {
    let Json(req) = body?;
    let node = &app.node;
    let (k, m) = parse_ec(req.ec.as_deref().unwrap_or("4+2"))?;
    let replicas = req.replicas.unwrap_or(3);
    if replicas == 0 {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "replicas must be at least 1",
        ));
    }
    let id = req
        .cluster_id
        .unwrap_or_else(|| format!("{:08x}", rand::random::<u32>()));
    let token = node
        .cluster
        .init(&id, cairn_cluster::Protection { k, m, replicas })
        .await?;
    Ok(Json(TokenReply {
        cluster_id: id,
        token,
    }))
}

async fn cluster_join(
    State(app): State<App>,
    body: Body<JoinRequest>,
) -> Result<Json<TokenReply>, Failure> {
    let Json(req) = body?;
    let node = &app.node;
    if node.cluster.is_member() {
        return Err(Failure::new(
            ErrorKind::Conflict,
            format!(
                "already a member of cluster {}",
                node.cluster.map().cluster_id
            ),
        ));
    }
    let cluster_id = node.cluster.request_join(&req.seed, &req.token).await?;
    node.cluster
        .wait_member(std::time::Duration::from_secs(60))
        .await?;
    Ok(Json(TokenReply {
        cluster_id,
        token: req.token,
    }))
}

pub(crate) async fn cluster_status(State(app): State<App>) -> Result<Json<ClusterStatus>, Failure> {
    let node = &app.node;
    Ok(Json(node.status().await?))
}

async fn cluster_token(State(app): State<App>) -> Result<Json<TokenReply>, Failure> {
    let node = &app.node;
    let token = node.cluster.token()?;
    Ok(Json(TokenReply {
        cluster_id: node.cluster.map().cluster_id.clone(),
        token,
    }))
}

/// Answers the map epoch that drains the node.
async fn cluster_drain(
    State(app): State<App>,
    body: Body<NodeRequest>,
) -> Result<Json<u64>, Failure> {
    let Json(req) = body?;
    let node = &app.node;
    let id = resolve_node(&node.cluster.map(), &req.node)?;
    Ok(Json(node.drain(id).await?))
}

async fn cluster_remove(
    State(app): State<App>,
    body: Body<NodeRequest>,
) -> Result<Json<bool>, Failure> {
    let Json(req) = body?;
    let node = &app.node;
    let id = resolve_node(&node.cluster.map(), &req.node)?;
    node.remove(id, req.force).await?;
    Ok(Json(true))
}
