//! This node's membership: its id, its Raft instance and the map it has applied.

use crate::election;
use crate::error::raft_err;
use crate::state_machine::{Shared, StateMachine};
use crate::types::Raft;
use crate::{log_store, network, ClusterError, ClusterMap, NodeAdvert, NodeId, Transport};
use cairn_meta::MetaStore;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Settings of the cluster layer.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Where the Raft log and the node id live.
    pub state_dir: PathBuf,
    /// What this node tells the cluster about itself (`id` is ignored: the node's
    /// own id is used).
    pub advert: NodeAdvert,
    /// How often a node reports to the leader.
    pub heartbeat: Duration,
    /// Silence after which the leader marks a node down.
    pub down_after: Duration,
    /// The cluster's master key file (see `cairn_envelope`): made by the node
    /// that creates the cluster, handed to each joiner in its join reply.
    pub master_key: PathBuf,
}

/// This node's membership in the cluster.
pub struct Cluster {
    // Crate-visible: each concern's module (join, propose, voters, ...) adds its
    // own `impl Cluster` working on these.
    pub(crate) id: NodeId,
    pub(crate) raft: Raft,
    pub(crate) shared: Arc<Shared>,
    pub(crate) transport: Arc<Transport>,
    pub(crate) cfg: ClusterConfig,
    /// The leader's failure detector: when each node last reported.
    pub(crate) seen: Mutex<HashMap<NodeId, Instant>>,
    /// The Raft log, read by pre-votes (openraft holds a clone).
    pub(crate) log: log_store::LogStore,
    /// When a leader this node follows last spoke to it (see `election`).
    pub(crate) leader_contact: Mutex<Instant>,
    /// Whether this node reports to the leader. A joiner holds its reports
    /// until its chunk service trusts the cluster's certificates: it enters the
    /// map down, and the first report makes it up, so no peer places data on a
    /// chunk service that would still refuse it (see [`Cluster::ready`]).
    pub(crate) reporting: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cluster({:016x})", self.id)
    }
}

pub(crate) fn now_ms() -> i64 {
    cairn_meta::now_ms()
}

impl Cluster {
    /// Opens the node's Raft state (creating a node id on first start).
    pub async fn open(
        cfg: ClusterConfig,
        meta: MetaStore,
        transport: Arc<Transport>,
    ) -> Result<Arc<Cluster>, ClusterError> {
        std::fs::create_dir_all(&cfg.state_dir).map_err(|e| ClusterError::State(e.to_string()))?;
        let id = node_id(&cfg.state_dir)?;
        let log = log_store::LogStore::open(&cfg.state_dir.join("raft.redb"))
            .map_err(|e| ClusterError::State(e.to_string()))?;
        let (sm, shared) = StateMachine::open(meta).map_err(raft_err)?;
        let config = openraft::Config {
            cluster_name: "cairn".into(),
            heartbeat_interval: 250,
            election_timeout_min: election::ELECTION_MIN.as_millis() as u64,
            election_timeout_max: election::ELECTION_MAX.as_millis() as u64,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(20_000),
            max_in_snapshot_log_to_keep: 2_000,
            // `election` campaigns instead, after a pre-vote.
            enable_elect: false,
            ..Default::default()
        }
        .validate()
        .map_err(raft_err)?;
        let network = network::Network {
            transport: transport.clone(),
        };
        let raft = Raft::new(id, Arc::new(config), network, log.clone(), sm)
            .await
            .map_err(raft_err)?;
        let cluster = Arc::new(Cluster {
            id,
            raft,
            shared,
            transport,
            cfg,
            seen: Mutex::new(HashMap::new()),
            reporting: std::sync::atomic::AtomicBool::new(true),
            log,
            leader_contact: Mutex::new(Instant::now()),
        });
        cluster.spawn_elections();
        Ok(cluster)
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// How this node reaches its peers (and its TLS identity).
    pub fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    /// Stops this node's Raft (it stops voting, replicating and answering).
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }

    /// The map as this node last applied it.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.shared.map.borrow().clone()
    }

    /// Changes of the map.
    pub fn watch_map(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.shared.map.subscribe()
    }

    /// Whether this node belongs to a cluster yet.
    pub fn is_member(&self) -> bool {
        self.map().nodes.contains_key(&self.id)
    }

    pub(crate) fn advert(&self) -> NodeAdvert {
        let mut a = NodeAdvert {
            id: self.id,
            ..self.cfg.advert.clone()
        };
        if a.domain.is_empty() {
            // By default each node is its own failure domain.
            a.domain = format!("node-{:016x}", self.id);
        }
        a
    }

    pub(crate) fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }
}

/// The node's id: random on first start, then read back.
fn node_id(dir: &std::path::Path) -> Result<NodeId, ClusterError> {
    let p = dir.join("node-id");
    match std::fs::read_to_string(&p) {
        Ok(s) => u64::from_str_radix(s.trim(), 16)
            .map_err(|_| ClusterError::State(format!("{} is not a node id", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Never 0: openraft and the map use ids as keys, and 0 reads as "none".
            let id = rand::random::<u64>() | 1 << 63;
            let tmp = p.with_extension("tmp");
            std::fs::write(&tmp, format!("{id:016x}\n"))
                .and_then(|()| std::fs::rename(&tmp, &p))
                .map_err(|e| ClusterError::State(e.to_string()))?;
            Ok(id)
        }
        Err(e) => Err(ClusterError::State(e.to_string())),
    }
}
