//! The management daemon of one node.
//!
//! Owns the wiring: it opens the metadata store, connects to the node's datapathd,
//! collects orphans left by crashes, and serves the S3 front end and the admin API
//! (which `nodectl` uses). It owns no policy of its own: protection, placement and
//! repair live in `cairn-objects`, the S3 protocol in `cairn-s3`, the admin API's
//! routes and wire types in `cairn-adminapi` (the handlers here serialize exactly
//! those), the node's secrets in `cairn-credentials`.

mod access;
mod admin;
mod audit;
mod bmc;
mod certs;
mod cluster;
#[cfg(feature = "failpoints")]
mod failpoints;
mod failure;
mod gc;
mod keys;
mod kv;
mod listen;
mod local_bmc;
mod metrics;
mod page;
mod replication;
mod resp;
mod scrub;
mod sensors;
mod snapshots;
mod ssh_keys;
mod tenants;

pub use cluster::ClusterOpts;

use cairn_credentials::{load_or_create_admin_token, CredentialError, RootCredentials};

use cairn_chunkproto::ChunkClient;
use cairn_meta::MetaStore;
use cairn_objects::{ObjectStore, StoreConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Errors of mgmtd.
#[derive(Debug, thiserror::Error)]
pub enum MgmtError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Meta(#[from] cairn_meta::MetaError),
    #[error(transparent)]
    Objects(#[from] cairn_objects::ObjectError),
    #[error("datapath at {addr} did not answer within {secs} s: {why}")]
    DatapathUnreachable {
        addr: String,
        secs: u64,
        why: String,
    },
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    #[error(transparent)]
    Cluster(#[from] cairn_cluster::ClusterError),
    /// A node id (or prefix) that names no node of the map.
    #[error("no node {0}")]
    NoSuchNode(String),
    #[error("{0} matches several nodes")]
    AmbiguousNode(String),
    #[error("node {node} still holds {held} fragments: drain it first (or --force)")]
    NodeHoldsFragments { node: String, held: u64 },
    #[error(transparent)]
    S3Domain(#[from] cairn_s3::BadDomain),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MgmtError {
    let what = what.into();
    move |source| MgmtError::Io { what, source }
}

/// How mgmtd is run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node's state directory: metadata, credentials, admin token.
    pub data: PathBuf,
    pub s3: SocketAddr,
    /// Domains for virtual-hosted-style S3 requests.
    pub s3_domains: Vec<String>,
    pub admin: SocketAddr,
    /// Set: RESP (Redis protocol) served here, over the same objects as S3.
    pub resp: Option<SocketAddr>,
    /// Where the NFS server (MOUNT and NFS on one port) listens; none: no NFS.
    pub nfs: Option<SocketAddr>,
    /// Set: the admin API is also served here over TLS with the node's
    /// certificate, to clients with an admin certificate or a token.
    pub admin_tls: Option<SocketAddr>,
    /// Set: the SSH admin console served here.
    pub ssh: Option<SocketAddr>,
    /// Authorized-keys files of the SSH console beyond `DATA/ssh/authorized_keys`.
    pub ssh_authorized_keys: Vec<PathBuf>,
    /// The SSH console's break-glass (`sh COMMAND` for admin keys, logged).
    pub ssh_break_glass: bool,
    /// The node's own BMC device (`/dev/ipmi0` on an appliance): its watchdog
    /// and event log are used when it is there (see `local_bmc`).
    pub bmc_device: Option<PathBuf>,
    /// The BMC watchdog's timeout; zero leaves the watchdog alone.
    pub bmc_watchdog: Duration,
    /// How often the node's BMC sensors are read (see `sensors`).
    pub sensor_every: Duration,
    /// RESP connections served at once (more are refused, as Redis's maxclients).
    pub resp_max_clients: usize,
    /// Bytes of RESP values being received at once (see `cairn_resp::Intake`).
    pub resp_intake: u64,
    /// The node's datapathd chunk service.
    pub datapath: String,
    /// The node-local chunk key file shared with datapathd (created if missing).
    pub datapath_key: PathBuf,
    pub store: StoreConfig,
    /// How often a single node's repair pass runs (a cluster's: `ClusterOpts`).
    pub repair_every: Duration,
    /// Written once the listeners are up: `{"s3": ADDR, "admin": ADDR}` (and
    /// `"resp": ADDR`, `"nfs": ADDR` when RESP, NFS are served).
    pub ready_file: Option<PathBuf>,
    /// Set: the node runs as a cluster member (it serves S3 once it has joined or
    /// created a cluster).
    pub cluster: Option<ClusterOpts>,
}

/// Runs mgmtd until SIGINT or SIGTERM.
///
/// There is one start path: a node is always a member of a cluster. A single
/// node (no `cluster` settings) is a cluster of one, created at its first start
/// with its internal API on loopback; its data directory is the same as any
/// member's, so it can later take joins (restarted with `--internal` on an
/// address the others reach) without a migration. A data directory made before
/// nodes were clusters of one holds its objects in the same metadata store, with
/// manifests naming local drive numbers: the one-member cluster gives the node's
/// drives exactly those ids (the first node's drives are numbered from 0 in
/// order), so they read on unchanged.
pub async fn run(cfg: Config, root: RootCredentials) -> Result<(), MgmtError> {
    std::fs::create_dir_all(&cfg.data).map_err(io_err(format!("create {}", cfg.data.display())))?;
    #[cfg(feature = "failpoints")]
    failpoints::watch(cfg.data.join("failpoints"));
    let meta = MetaStore::open(&cfg.data.join("meta.redb"))?;
    // A missing or wrong master key stops the start, before anything serves.
    keys::at_start(&keys::path(&cfg.data), &meta)?;
    let key = cairn_chunkproto::auth::LocalKey::load_or_create(&cfg.datapath_key)
        .map_err(|e| MgmtError::Config(format!("chunk key {}: {e}", cfg.datapath_key.display())))?;
    let local = ChunkClient::local(cfg.datapath.clone(), 4, Duration::from_secs(30), key);
    let (opts, alone) = match cfg.cluster.clone() {
        Some(opts) => (opts, false),
        None => {
            // The settings a cluster of one is created with are checked here,
            // against this node's drives, as a cluster checks them at a write.
            cfg.store.validate()?;
            (ClusterOpts::alone(&cfg), true)
        }
    };
    run_cluster(cfg, opts, alone, root, meta, local).await
}

/// Runs mgmtd as a cluster member until SIGINT or SIGTERM.
async fn run_cluster(
    cfg: Config,
    opts: ClusterOpts,
    alone: bool,
    root: RootCredentials,
    meta: MetaStore,
    local: ChunkClient,
) -> Result<(), MgmtError> {
    // This node's drives, as the cluster will know them.
    let probe = ObjectStore::new(
        meta.clone(),
        Arc::new(meta.clone()),
        cairn_objects::Fabric::single(local.clone(), cfg.store.drives),
        cfg.store.clone(),
    )?;
    wait_for_datapath(&probe, &cfg.datapath, Duration::from_secs(60)).await?;
    let drives: Vec<(u16, u64)> = probe
        .drive_reports()
        .await?
        .into_iter()
        .map(|d| (d.drive, d.capacity))
        .collect();
    drop(probe);
    // The configured ports first: the internal API of a single node takes an
    // ephemeral port, which must never be one of them. S3 and RESP serve once
    // this node is a member (after `cluster init` or `cluster join`, or at once
    // when it already was one).
    let s3_listener = tokio::net::TcpListener::bind(cfg.s3)
        .await
        .map_err(io_err(format!("bind S3 on {}", cfg.s3)))?;
    let s3_addr = s3_listener.local_addr().map_err(io_err("S3 address"))?;
    let resp_listener = resp::bind(cfg.resp).await?;
    let resp_addr = resp_listener.as_ref().and_then(|l| l.local_addr().ok());
    let nfs_listener = match cfg.nfs {
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .map_err(io_err(format!("bind NFS on {a}")))?,
        ),
        None => None,
    };
    let nfs_addr = nfs_listener.as_ref().and_then(|l| l.local_addr().ok());
    let admin_listener = tokio::net::TcpListener::bind(cfg.admin)
        .await
        .map_err(io_err(format!("bind admin API on {}", cfg.admin)))?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(io_err("admin address"))?;
    let internal = tokio::net::TcpListener::bind(opts.internal)
        .await
        .map_err(io_err(format!("bind internal API on {}", opts.internal)))?;
    let internal_addr = internal.local_addr().map_err(io_err("internal address"))?;
    // The node's certificate (once it has one) lives beside its state; datapathd
    // is pointed at the same directory for its peer listener.
    let transport = Arc::new(
        cairn_cluster::Transport::open(cfg.data.join("tls"))
            .map_err(|e| MgmtError::Config(format!("TLS material: {e}")))?,
    );
    let ccfg = cairn_cluster::ClusterConfig {
        state_dir: cfg.data.join("cluster"),
        advert: cairn_cluster::NodeAdvert {
            id: 0,
            internal: internal_addr.to_string(),
            chunk: opts.chunk_advertise.clone(),
            s3: cfg.s3.to_string(),
            domain: opts.domain.clone().unwrap_or_default(),
            drives,
            cert: String::new(),
        },
        heartbeat: Duration::from_millis(500),
        down_after: opts.down_after,
        master_key: keys::path(&cfg.data),
    };
    let c = cairn_cluster::Cluster::open(ccfg, meta.clone(), transport)
        .await
        .map_err(|e| MgmtError::Config(format!("cluster state: {e}")))?;
    if opts.domain.is_none() {
        tracing::info!(node = %cluster::id_hex(c.id()), "failure domain: the node itself");
    }
    c.start();
    if alone {
        cluster::form_alone(&c, &cfg.store).await?;
    }
    if c.is_member() {
        // Addresses may differ from the map's (a single node's loopback port
        // changes at each start): retried in the background until told.
        let c = c.clone();
        tokio::spawn(async move {
            while let Err(e) = c.reannounce().await {
                tracing::debug!("re-announcing this node's addresses: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    let node = Arc::new(cluster::ClusterNode {
        cluster: c.clone(),
        store: std::sync::OnceLock::new(),
        repair: Default::default(),
        opts: opts.clone(),
        data: cfg.data.clone(),
        bmcs: Default::default(),
        fence_warned: Default::default(),
        local_bmc: Default::default(),
        sensors: Default::default(),
    });
    // Two stops: the front ends (S3, RESP, admin) first; the internal API (Raft
    // appends, forwarded proposals) only once they have drained, since a write in
    // hand waits to see its own commit applied here, which takes the appends.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (internal_stop_tx, internal_stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let internal_task = tokio::spawn({
        let stop = stopped(internal_stop_rx);
        let c = c.clone();
        async move { c.serve_internal(internal, stop).await }
    });

    let local_datapath = admin::LocalDatapath {
        client: local.clone(),
        drives: cfg.store.drives,
    };
    let token = load_or_create_admin_token(&cfg.data)?;
    let admin_tls = match cfg.admin_tls {
        Some(addr) => Some((
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(io_err(format!(
                    "bind the admin API's TLS listener on {addr}"
                )))?,
            cfg.data.join("tls"),
        )),
        None => None,
    };
    let admin_tls_addr = match &admin_tls {
        Some((l, _)) => Some(l.local_addr().map_err(io_err("admin TLS address"))?),
        None => None,
    };
    let (s3_metrics, resp_metrics) = (
        cairn_s3::S3Metrics::default(),
        cairn_resp::RespMetrics::default(),
    );
    let metrics = Arc::new(metrics::Metrics::new(&s3_metrics, &resp_metrics));
    let sessions = Arc::new(access::SessionTokens::new(meta.clone()));
    let admin_task = tokio::spawn(admin::serve(
        admin_listener,
        admin_tls.map(|(l, dir)| (l, dir, stopped(stop_rx.clone()))),
        admin::AppParts {
            node: node.clone(),
            local: local_datapath.clone(),
            token,
            data: cfg.data.clone(),
            metrics,
            sessions: sessions.clone(),
        },
        stopped(stop_rx.clone()),
    ));
    let console_task = match cfg.ssh {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(io_err(format!("bind SSH console on {addr}")))?;
            let console = cairn_console::ConsoleConfig {
                state: cfg.data.clone(),
                authorized_keys: cfg.ssh_authorized_keys.clone(),
                admin: admin_addr.to_string(),
                nodectl: nodectl_binary(),
                break_glass: cfg.ssh_break_glass,
                // A `nodectl dev up` node logs to files beside its state.
                log_dir: cfg
                    .data
                    .parent()
                    .map(|d| d.join("logs"))
                    .filter(|d| d.is_dir()),
            };
            tracing::info!(ssh_addr = %addr, "SSH console serving");
            Some(tokio::spawn(cairn_console::serve(
                listener,
                console,
                sessions,
                stopped(stop_rx.clone()),
            )))
        }
        None => None,
    };
    let mut keys = HashMap::new();
    keys.insert(
        root.access_key.clone(),
        cairn_s3::Credential {
            secret: root.secret_key.clone(),
            tenant: cairn_meta::ROOT_TENANT,
        },
    );
    // The tenants' keys are read from the (replicated) metadata at each request.
    let keys = cairn_s3::Keys::new(keys).with_tenants(meta.clone());
    // Checked before anything serves: a bad domain stops the start.
    let domains = cairn_s3::Domains::new(cfg.s3_domains.clone())?;
    let s3_task = tokio::spawn({
        let node = node.clone();
        let stop = stopped(stop_rx.clone());
        let (s3_stop, resp_stop) = (stopped(stop_rx.clone()), stopped(stop_rx.clone()));
        let store_cfg = cfg.store.clone();
        let root_key = root.access_key.clone();
        let resp_limits = (cfg.resp_max_clients, cfg.resp_intake, resp_metrics);
        async move {
            let store = tokio::select! {
                s = node.become_member(meta, local, store_cfg, alone) => s,
                _ = stop => return,
            };
            match store {
                Ok(store) => {
                    // Tenants' access-key secrets are wrapped by the master key.
                    if let Some(p) = store.key_provider() {
                        keys.set_key_provider(p);
                    }
                    let (reached, of) = store.wait_for_fabric(Duration::from_secs(10)).await;
                    if reached < of {
                        tracing::warn!("serving S3 with {reached} of {of} up drives reachable");
                    }
                    tracing::info!(%s3_addr, "S3 serving for the cluster");
                    // NFS serves the same buckets from the same store.
                    if let Some(l) = nfs_listener {
                        if let Err(e) = cairn_nfs::NfsServer::serve(l, store.clone()) {
                            tracing::error!("cannot serve NFS: {e}");
                        }
                    }
                    // RESP lives and stops with S3: both wait for membership, and
                    // both drain their requests at stop, while the cluster still
                    // commits (it shuts down after them).
                    let resp = resp::serve(
                        resp_listener,
                        store.clone(),
                        keys.clone(),
                        root_key,
                        resp_limits,
                        resp_stop,
                    );
                    let s3 =
                        cairn_s3::serve(s3_listener, store, keys, domains, s3_metrics, s3_stop);
                    if let (Err(e), ()) = tokio::join!(s3, resp) {
                        tracing::error!("S3 stopped: {e}");
                    }
                }
                Err(e) => tracing::error!("cannot serve S3: {e}"),
            }
        }
    });
    // A single node is ready once it serves (its store built, orphans collected),
    // as it was before it was a cluster of one: what waits on the ready file
    // (nodectl, tests, the image) may call S3 and `status` at once. A member
    // that has yet to join is ready as soon as its admin API answers, since
    // joining it takes that API.
    if alone {
        while node.store.get().is_none() && !s3_task.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if let Some(p) = &cfg.ready_file {
        let mut body = serde_json::json!({
            "s3": s3_addr.to_string(),
            "admin": admin_addr.to_string(),
            "internal": internal_addr.to_string(),
            "node_id": cluster::id_hex(c.id()),
        });
        if let Some(a) = admin_tls_addr {
            body["admin_tls"] = a.to_string().into();
        }
        if let Some(a) = resp_addr {
            body["resp"] = a.to_string().into();
        }
        if let Some(a) = nfs_addr {
            body["nfs"] = a.to_string().into();
        }
        write_atomic(p, body.to_string().as_bytes())?;
    }
    tracing::info!(%admin_addr, %internal_addr, node = %cluster::id_hex(c.id()), "mgmtd up");
    let bmc_task = match &cfg.bmc_device {
        Some(dev) => local_bmc::open(dev).await.map(|bmc| {
            let _ = node.local_bmc.set(bmc.clone());
            tokio::spawn(local_bmc::run(
                bmc,
                cfg.bmc_watchdog,
                local_datapath.clone(),
                stopped(stop_rx.clone()),
            ))
        }),
        None => None,
    };
    let sensor_task = tokio::spawn(sensors::watch(
        node.clone(),
        cfg.sensor_every,
        stopped(stop_rx.clone()),
    ));
    wait_for_signal().await;
    tracing::info!("mgmtd stopping");
    let _ = stop_tx.send(true);
    // The watchdog is disarmed first: a clean stop must not reset the node.
    if let Some(t) = bmc_task {
        let _ = t.await;
    }
    sensor_task.abort();
    // S3 and RESP finish what they have in hand (each gives up after 10 s).
    let _ = s3_task.await;
    let _ = admin_task.await;
    if let Some(t) = console_task {
        let _ = t.await;
    }
    let _ = internal_stop_tx.send(true);
    let _ = internal_task.await;
    c.shutdown().await;
    Ok(())
}

/// The nodectl the SSH console runs: `CAIRN_NODECTL`, else the one beside this
/// mgmtd (both are installed together, in the image and in a build's target).
fn nodectl_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("CAIRN_NODECTL") {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .map(|e| e.with_file_name("nodectl"))
        .unwrap_or_else(|_| PathBuf::from("nodectl"))
}

async fn wait_for_datapath(
    store: &ObjectStore,
    addr: &str,
    limit: Duration,
) -> Result<(), MgmtError> {
    let start = Instant::now();
    loop {
        match store.drive_reports().await {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() >= limit => {
                return Err(MgmtError::DatapathUnreachable {
                    addr: addr.to_string(),
                    secs: limit.as_secs(),
                    why: e.to_string(),
                })
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Writes a file so that readers (and a restart after a crash) see the old
/// content or the new, never a torn file.
pub fn write_atomic(path: &std::path::Path, data: &[u8]) -> Result<(), MgmtError> {
    cairn_sysutil::write_atomic(path, data, None)
        .map_err(io_err(format!("write {}", path.display())))
}
