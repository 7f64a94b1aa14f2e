//! mgmtd in a cluster: the internal API, the cluster-wide chunk fabric built from
//! the map, the object store over the Raft log, repair, and the admin routes that
//! `nodectl cluster ...` calls.

use crate::MgmtError;
use cairn_adminapi::{ClusterStatus, NodeView, ProtectionReport, RepairView};
use cairn_chunkproto::ChunkClient;
use cairn_cluster::{
    Cluster, ClusterError, ClusterMap, MapChange, NodeId, NodeState, Protection, RaftStatus,
};
use cairn_objects::{FragmentState, ObjectStore, Route};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Cluster settings of one node.
#[derive(Clone, Debug)]
pub struct ClusterOpts {
    /// Internal API listen (and advertised) address.
    pub internal: std::net::SocketAddr,
    /// The chunk service as peers reach it.
    pub chunk_advertise: String,
    /// Failure domain (default: the node itself).
    pub domain: Option<String>,
    /// Silence after which a node is marked down.
    pub down_after: Duration,
    /// How long a down node's fragments wait before they are rebuilt elsewhere.
    pub repair_grace: Duration,
    /// How often the repairer scans.
    pub repair_every: Duration,
}

impl ClusterOpts {
    /// A single node's: a cluster of one, its internal API on loopback (nothing
    /// outside the machine needs it until the node takes joins).
    pub(crate) fn alone(cfg: &crate::Config) -> ClusterOpts {
        ClusterOpts {
            internal: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            chunk_advertise: cfg.datapath.clone(),
            domain: None,
            down_after: Duration::from_secs(5),
            repair_grace: Duration::from_secs(60),
            repair_every: cfg.repair_every,
        }
    }
}

/// Makes a single node the one member of its own cluster, at its first start
/// (or finishes that, if a start was cut off part way): the protection is the
/// node's `--ec`/`--replicas`, the cluster's name the start of the node's id.
pub(crate) async fn form_alone(
    c: &Cluster,
    store: &cairn_objects::StoreConfig,
) -> Result<(), MgmtError> {
    if c.is_member() {
        return Ok(());
    }
    let id = id_hex(c.id())[..8].to_string();
    let protection = Protection {
        k: store.ec.0,
        m: store.ec.1,
        replicas: store.replicas,
    };
    c.init(&id, protection).await?;
    tracing::info!(cluster = %id, "a single node: formed a cluster of one");
    Ok(())
}

/// A single node deletes every unreferenced chunk on its drives before it
/// serves, so a node that filled up, or crashed mid-write, has its space back
/// before the first request. Safe only here: nothing else writes to its drives
/// (its internal API is on loopback, so no node can join meanwhile) and no
/// write of its own is in flight; the metadata is made current first, so an
/// entry committed before a crash but not yet applied still counts.
async fn collect_before_serving(store: &ObjectStore) {
    if let Err(e) = store.sync().await {
        tracing::warn!("orphan collection skipped: metadata not current: {e}");
        return;
    }
    match store.collect_garbage().await {
        Ok(0) => {}
        Ok(n) => tracing::info!("removed {n} orphan chunks left by interrupted writes"),
        Err(e) => tracing::warn!("orphan collection skipped: {e}"),
    }
}

/// The node's cluster side, shared with the admin API.
pub struct ClusterNode {
    pub cluster: Arc<Cluster>,
    pub store: OnceLock<Arc<ObjectStore>>,
    pub repair: Mutex<RepairStats>,
    pub opts: ClusterOpts,
    /// The node's state directory.
    pub data: std::path::PathBuf,
    /// The BMCs this node has talked to, one session each.
    pub bmcs: cairn_bmc::Links,
    /// Down nodes fencing has already warned about (once each, not every pass).
    pub fence_warned: Mutex<HashSet<(NodeId, crate::bmc::Warned)>>,
    /// The node's own BMC, in-band, once opened (see `local_bmc`).
    pub(crate) local_bmc: OnceLock<Arc<cairn_bmc::LocalBmc>>,
    /// What this node's sensors last read (see `sensors`).
    pub(crate) sensors: crate::sensors::Watch,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterNode({:?})", self.cluster)
    }
}

/// Repair as this node has done it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RepairStats {
    pub passes: u64,
    pub rebuilt_fragments: u64,
    pub rebuilt_bytes: u64,
    pub deferred_last_pass: u64,
    /// Rebuild rate of the last pass that rebuilt anything.
    pub last_rate_mib_s: f64,
    /// Bytes missing cluster-wide as `status` last measured them (newest last,
    /// the last `PROGRESS_WINDOW`): the ETA comes from how fast they fall.
    #[serde(skip)]
    pub missing: std::collections::VecDeque<(Instant, u64)>,
}

/// How far back the repair ETA looks for progress: an ETA is shown only while the
/// bytes missing cluster-wide fell within this window, never from a rate measured
/// before repair stalled (an ETA frozen at "42 s" for minutes said nothing).
const PROGRESS_WINDOW: Duration = Duration::from_secs(30);
/// The least history an ETA is computed from.
const PROGRESS_MIN: Duration = Duration::from_secs(3);

impl RepairStats {
    /// Records `missing` bytes now; returns the ETA and what repair is doing.
    fn progress(&mut self, missing: u64) -> (Option<f64>, &'static str) {
        let now = Instant::now();
        self.missing.push_back((now, missing));
        while self
            .missing
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > PROGRESS_WINDOW)
        {
            self.missing.pop_front();
        }
        if missing == 0 {
            return (None, "idle");
        }
        let (t0, b0) = self.missing.front().copied().unwrap_or((now, missing));
        let dt = now.duration_since(t0);
        if dt < PROGRESS_MIN {
            return (None, "measuring");
        }
        if b0 > missing {
            let rate = (b0 - missing) as f64 / dt.as_secs_f64();
            (Some(missing as f64 / rate), "repairing")
        } else {
            (None, "waiting")
        }
    }
}

pub(crate) fn id_hex(id: NodeId) -> String {
    format!("{id:016x}")
}

/// The drive view the object layer needs, from the map.
fn fragment_state(
    map: &ClusterMap,
    drive: u16,
    grace: Duration,
    held: &HashSet<NodeId>,
) -> FragmentState {
    match map.drive(drive) {
        None => FragmentState::Lost,
        Some((n, _)) if n.draining => FragmentState::Lost,
        // Waiting to be fenced before its data is rebuilt (crate::bmc).
        Some((n, _)) if held.contains(&n.id) => FragmentState::Missing,
        Some((n, _)) if n.state == NodeState::Down => {
            if cairn_meta::now_ms() - n.since_ms > grace.as_millis() as i64 {
                FragmentState::Lost
            } else {
                FragmentState::Missing
            }
        }
        Some(_) => FragmentState::Good,
    }
}

/// Tells datapathd which certificates belong to members now (see
/// `cairn_pki::tls::PEERS_FILE`). Only nodes with a recorded certificate are
/// listed; until every node has one (maps from before certificates were recorded)
/// no list is written, and datapathd accepts any certificate of the cluster CA.
fn write_members(transport: &cairn_cluster::Transport, map: &ClusterMap) {
    let fps: Vec<&str> = map.nodes.values().map(|n| n.cert.as_str()).collect();
    if fps.iter().any(|f| f.is_empty()) {
        return;
    }
    if let Err(e) = transport.write_members(&fps) {
        tracing::warn!("cannot record the members' certificates for datapathd: {e}");
    }
}

/// Routes for every drive of the map; clients to peers are kept across map changes.
/// Peers are reached over mutual TLS only: before this node has its certificate,
/// only its own drives are routed.
fn routes(
    map: &ClusterMap,
    me: NodeId,
    local: &ChunkClient,
    peers: &mut HashMap<String, ChunkClient>,
    tls: Option<&cairn_cluster::Certified>,
) -> Vec<Route> {
    let domains: Vec<&str> = {
        let mut d: Vec<&str> = map.nodes.values().map(|n| n.domain.as_str()).collect();
        d.sort();
        d.dedup();
        d
    };
    // One failure domain (a single node, or every node in one rack): its drives
    // are the domains, as on a single node, or a stripe could take one fragment.
    let by_drive = domains.len() == 1;
    let mut out = Vec::new();
    // Only nodes that are up are routed: a down node's address may already belong
    // to its replacement, which must never be asked for the old node's drives.
    for n in map.nodes.values().filter(|n| n.state == NodeState::Up) {
        let client = if n.id == me {
            local.clone()
        } else if let Some(tls) = tls {
            peers
                .entry(n.chunk.clone())
                .or_insert_with(|| {
                    ChunkClient::with_tls(
                        n.chunk.clone(),
                        2,
                        Duration::from_secs(10),
                        tls.client.clone(),
                    )
                })
                .clone()
        } else {
            continue;
        };
        let domain = domains.iter().position(|d| *d == n.domain).unwrap_or(0) as u32;
        for d in &n.drives {
            out.push(Route {
                drive: d.id,
                node: n.id,
                own: n.id == me,
                local: d.local,
                client: client.clone(),
                domain: if by_drive { d.id as u32 } else { domain },
                placeable: !n.draining,
                // New data follows capacity: a drive twice as large takes twice
                // the stripes (weighted rendezvous in cairn_objects::place).
                weight: u32::try_from(d.capacity >> 30).unwrap_or(u32::MAX).max(1),
            });
        }
    }
    out
}

/// A joiner's chunk service reads the member list (`write_members`) every two
/// seconds; until it has, it refuses its peers. So the joiner reports as up only
/// once its chunk service accepts this node's own certificate over the peer port,
/// as any member's connection would be (the list names every member): a write
/// placed on it from then on is not refused. Gives up waiting after 30 s (and
/// reports anyway, so a node whose check cannot pass is not kept out for good).
async fn until_trusted(
    cluster: Arc<cairn_cluster::Cluster>,
    tls: Option<Arc<cairn_cluster::Certified>>,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let me = cluster.id();
    while Instant::now() < deadline {
        let map = cluster.map();
        let (Some(tls), Some(n)) = (&tls, map.nodes.get(&me)) else {
            break;
        };
        let Some(d) = n.drives.first() else { break };
        let client = ChunkClient::with_tls(
            n.chunk.clone(),
            1,
            Duration::from_secs(2),
            tls.client.clone(),
        );
        let asked = client
            .call(vec![cairn_chunkproto::Request::DriveInfo {
                drive: d.local,
            }])
            .await;
        if matches!(asked.as_deref(), Ok([Ok(_)])) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.ready();
}

impl ClusterNode {
    /// Once this node is a member: builds the object store over the cluster and
    /// keeps its fabric in step with the map. Returns the store.
    pub async fn become_member(
        self: &Arc<Self>,
        meta: cairn_meta::MetaStore,
        local: ChunkClient,
        mut store_cfg: cairn_objects::StoreConfig,
        alone: bool,
    ) -> Result<Arc<ObjectStore>, MgmtError> {
        let mut rx = self.cluster.watch_map();
        let me = self.cluster.id();
        rx.wait_for(|m| m.nodes.contains_key(&me) && m.protection.is_some())
            .await
            .map_err(|e| MgmtError::Config(format!("cluster map: {e}")))?;
        let map = self.cluster.map();
        if let Some(p) = map.protection {
            store_cfg.ec = (p.k, p.m);
            store_cfg.replicas = p.replicas;
        }
        // Drives come from the map, not from this node's count.
        store_cfg.drives = 0;
        let fabric = cairn_objects::Fabric::default();
        let mut peers = HashMap::new();
        let mut tls_rx = self.cluster.transport().watch();
        let tls = tls_rx.borrow_and_update().clone();
        fabric.set_routes(routes(&map, me, &local, &mut peers, tls.as_deref()));
        let transport = self.cluster.transport().clone();
        write_members(&transport, &map);
        if self.cluster.reports_held() {
            tokio::spawn(until_trusted(self.cluster.clone(), tls.clone()));
        }
        let key_path = crate::keys::path(&self.data);
        let (master, made) = crate::keys::for_member(&key_path, &meta, alone).await?;
        let store = ObjectStore::new(meta, self.cluster.clone(), fabric.clone(), store_cfg)?;
        crate::keys::adopt(&store, master, &key_path, made).await?;
        if alone {
            collect_before_serving(&store).await;
        }
        let _ = self.store.set(store.clone());
        crate::scrub::keep_last_pass(&store, &self.data);
        store.start_background();
        cairn_replication::Shipper::new(store.clone()).spawn(std::time::Duration::from_millis(250));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    r = tls_rx.changed() => {
                        if r.is_err() { return }
                        // A new identity: connections made with the old one go.
                        peers.clear();
                    }
                }
                let map = rx.borrow_and_update().clone();
                let tls = tls_rx.borrow_and_update().clone();
                fabric.set_routes(routes(&map, me, &local, &mut peers, tls.as_deref()));
                write_members(&transport, &map);
            }
        });
        let node = self.clone();
        tokio::spawn(async move { node.repair_loop().await });
        Ok(store)
    }

    async fn repair_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.opts.repair_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(store) = self.store.get().cloned() else {
                continue;
            };
            // Repair decisions read local metadata: make it current first.
            if store.sync().await.is_err() {
                continue;
            }
            let map = self.cluster.map();
            let grace = self.opts.repair_grace;
            let held = crate::bmc::fence_before_repair(&self, &store, &map, grace).await;
            let up: Vec<NodeId> = map
                .nodes
                .values()
                .filter(|n| n.state == NodeState::Up)
                .map(|n| n.id)
                .collect();
            let me = self.cluster.id();
            let started = Instant::now();
            let res = store
                .repair_pass(&|d| fragment_state(&map, d, grace, &held), &|b, k| {
                    cairn_objects::repairer(b, k, &up) == Some(me)
                })
                .await;
            let mut st = self.repair.lock().unwrap_or_else(|e| e.into_inner());
            st.passes += 1;
            match res {
                Ok(p) => {
                    st.rebuilt_fragments += p.rebuilt_fragments;
                    st.rebuilt_bytes += p.rebuilt_bytes;
                    st.deferred_last_pass = p.deferred;
                    if p.rebuilt_bytes > 0 {
                        let secs = started.elapsed().as_secs_f64().max(1e-3);
                        st.last_rate_mib_s = p.rebuilt_bytes as f64 / secs / (1 << 20) as f64;
                        tracing::info!(
                            fragments = p.rebuilt_fragments,
                            mib = p.rebuilt_bytes >> 20,
                            rate_mib_s = st.last_rate_mib_s,
                            "repair pass"
                        );
                    }
                }
                Err(e) => tracing::warn!("repair pass failed: {e}"),
            }
        }
    }

    /// The status the operator sees.
    pub async fn status(&self) -> Result<ClusterStatus, MgmtError> {
        let rs: RaftStatus = self.cluster.raft_status();
        let map = self.cluster.map();
        let grace = self.opts.repair_grace;
        let report = match self.store.get() {
            Some(store) => {
                let _ = store.sync().await;
                store.protection(&|d| fragment_state(&map, d, grace, &HashSet::new()))?
            }
            None => ProtectionReport::default(),
        };
        let (repair, (eta, repair_state)) = {
            let mut st = self.repair.lock().unwrap_or_else(|e| e.into_inner());
            let progress = st.progress(report.bytes_missing);
            (st.clone(), progress)
        };
        let p = map.protection.unwrap_or(Protection {
            k: 0,
            m: 0,
            replicas: 0,
        });
        Ok(ClusterStatus {
            cluster_id: map.cluster_id.clone(),
            epoch: map.epoch,
            this_node: id_hex(self.cluster.id()),
            leader: rs.leader.map(id_hex),
            term: rs.term,
            protection: format!(
                "erasure {}+{}, {} replicas for small objects",
                p.k, p.m, p.replicas
            ),
            nodes: map
                .nodes
                .values()
                .map(|n| NodeView {
                    id: id_hex(n.id),
                    state: match n.state {
                        NodeState::Up => "up".into(),
                        NodeState::Down => "down".into(),
                    },
                    draining: n.draining,
                    voter: rs.voters.contains(&n.id),
                    leader: rs.leader == Some(n.id),
                    s3: n.s3.clone(),
                    internal: n.internal.clone(),
                    domain: n.domain.clone(),
                    drives: n.drives.len(),
                    since_ms: n.since_ms,
                })
                .collect(),
            fully_protected: report.degraded == 0 && report.lost == 0,
            objects: report.into(),
            repair: RepairView {
                rebuilt_fragments: repair.rebuilt_fragments,
                rebuilt_bytes: repair.rebuilt_bytes,
                rate_mib_s: repair.last_rate_mib_s,
                eta_seconds: eta,
                state: repair_state.into(),
            },
        })
    }

    /// Drains a node: it takes no new data, and repair moves its fragments.
    pub async fn drain(&self, node: NodeId) -> Result<u64, ClusterError> {
        self.cluster.propose_map(MapChange::Drain { node }).await
    }

    /// Removes a node. Refused while any manifest still names one of its drives,
    /// unless `force` (then its fragments count as lost and are rebuilt).
    pub async fn remove(&self, node: NodeId, force: bool) -> Result<(), MgmtError> {
        let map = self.cluster.map();
        let n = map
            .nodes
            .get(&node)
            .ok_or_else(|| MgmtError::NoSuchNode(id_hex(node)))?;
        if !force {
            if let Some(store) = self.store.get() {
                let _ = store.sync().await;
                let theirs: Vec<u16> = n.drives.iter().map(|d| d.id).collect();
                let held = store.fragments_on(&theirs)?;
                if held > 0 {
                    return Err(MgmtError::NodeHoldsFragments {
                        node: id_hex(node),
                        held,
                    });
                }
            }
        }
        self.cluster.remove_node(node).await?;
        // Its BMC record goes with it: a removed node is never fenced.
        if let Some(store) = self.store.get() {
            match store
                .change_admin(cairn_meta::AdminChange::ClearBmc { node })
                .await
            {
                Ok(())
                | Err(cairn_objects::ObjectError::Meta(cairn_meta::MetaError::NoSuchBmc(_))) => {}
                Err(e) => {
                    tracing::warn!(node = %id_hex(node), "removed, but its BMC record stays: {e}")
                }
            }
        }
        Ok(())
    }
}

/// Reads the node id a cluster command names: full hex id or a unique prefix.
pub fn resolve_node(map: &ClusterMap, s: &str) -> Result<NodeId, MgmtError> {
    let s = s.trim().to_lowercase();
    // An empty prefix names every node: a script's empty variable must not
    // power off (or drain) the only node there is.
    if s.is_empty() {
        return Err(MgmtError::NoSuchNode("(none given)".into()));
    }
    let hits: Vec<NodeId> = map
        .nodes
        .keys()
        .copied()
        .filter(|id| id_hex(*id).starts_with(&s))
        .collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => Err(MgmtError::NoSuchNode(s)),
        _ => Err(MgmtError::AmbiguousNode(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ago(secs: u64) -> Instant {
        Instant::now() - Duration::from_secs(secs)
    }

    #[test]
    fn the_repair_eta_comes_only_from_recent_progress() {
        let mut st = RepairStats::default();
        assert_eq!(st.progress(0), (None, "idle"));
        // No history yet.
        let mut st = RepairStats::default();
        assert_eq!(st.progress(1000), (None, "measuring"));
        // 1000 bytes fell by 500 in 10 s: 50 B/s, 500 left, 10 s to go.
        let mut st = RepairStats::default();
        st.missing.push_back((ago(10), 1000));
        let (eta, state) = st.progress(500);
        assert_eq!(state, "repairing");
        assert!((eta.unwrap() - 10.0).abs() < 0.5, "{eta:?}");
        // Fast progress long ago, none within the window: no frozen ETA.
        let mut st = RepairStats {
            last_rate_mib_s: 100.0,
            ..Default::default()
        };
        st.missing.push_back((ago(120), 1 << 30));
        st.missing.push_back((ago(20), 500));
        assert_eq!(st.progress(500), (None, "waiting"));
        assert_eq!(
            st.missing.len(),
            2,
            "samples older than the window are dropped"
        );
        // More missing than before (another node went down): waiting, not negative.
        let mut st = RepairStats::default();
        st.missing.push_back((ago(10), 100));
        assert_eq!(st.progress(900), (None, "waiting"));
    }
}
