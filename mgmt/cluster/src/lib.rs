//! The cluster: membership, the cluster map and replicated metadata.
//!
//! One Raft group (openraft) carries every metadata mutation and every map change
//! in one log. Voters are up to five nodes; every other node is a learner, so every
//! node holds a full, current replica of the metadata and the map and serves reads
//! from it after a read barrier (the leader confirms its commit index; the reader
//! waits until it has applied that far). Writes are forwarded to the leader. A
//! minority partition therefore cannot commit anything: it cannot elect a leader,
//! and a stale leader cannot confirm its commit index.
//!
//! This crate never touches object bytes, and never decides placement: it only
//! orders and replicates decisions made by the layers above.

mod internal;
mod log_store;
pub mod map;
mod network;
pub mod pki;
mod state_machine;
mod types;

pub use map::{
    ClusterMap, DriveRecord, MapChange, NodeAdvert, NodeId, NodeRecord, NodeState, Protection,
};
pub use types::{Command, Outcome, ProposeRefused, Secrets};

use crate::network::SnapshotHeader;
use crate::state_machine::{Shared, StateMachine};
use crate::types::{Raft, Snapshot};
use axum::extract::{Query, State};
use axum::routing::post;
use axum::Json;
use cairn_chunkproto::tls::NodeTls;
use cairn_meta::{Commit, MetaError, MetaStore, Proposal};
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::{BasicNode, ChangeMembers};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Most voters the Raft group keeps; the rest of the nodes are learners.
pub const MAX_VOTERS: usize = 5;

/// Errors of the cluster layer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("no quorum: {0}")]
    NoQuorum(String),
    /// A proposal may have been appended to a leader's log, but its outcome was
    /// lost (a timeout or reset after sending, a leader change before commit).
    #[error("outcome unknown: {0}")]
    Unknown(String),
    #[error("this node is not part of a cluster")]
    NotMember,
    #[error("this node is already part of cluster {0}")]
    AlreadyMember(String),
    #[error("join refused: {0}")]
    JoinRefused(String),
    #[error("peer {peer}: {msg}")]
    Peer { peer: String, msg: String },
    #[error("the map change was refused: {0}")]
    Refused(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("state directory: {0}")]
    State(String),
    #[error("certificates: {0}")]
    Pki(String),
    #[error("this node has no certificate yet: it reaches peers only once it has created or joined a cluster")]
    NotCertified,
}

impl From<ClusterError> for MetaError {
    fn from(e: ClusterError) -> MetaError {
        MetaError::Unavailable(e.to_string())
    }
}

/// How long a proposal is retried (and one forward waited for).
const PROPOSE_DEADLINE: Duration = Duration::from_secs(10);

/// Why a forward to the leader produced no outcome.
enum Forward {
    /// The leader never got the command.
    NotSent(ClusterError),
    /// It may have been appended to the leader's log.
    MaybeAppended(ClusterError),
}

/// How a node talks to its peers: HTTPS with mutual TLS, once the node holds a
/// certificate from the cluster CA. Before that (a node not yet in a cluster) it
/// can reach no peer and no peer can reach it, except a seed during its join.
#[derive(Debug)]
pub struct Transport {
    dir: PathBuf,
    state: watch::Sender<Option<Arc<Certified>>>,
}

/// A node's TLS identity and the configurations made from it.
#[derive(Debug)]
pub struct Certified {
    pub node: NodeTls,
    /// Server side of the internal API: client certificates optional (a joiner has
    /// none), checked per connection by [`Cluster::serve_internal`].
    pub server: Arc<rustls::ServerConfig>,
    /// Client side of every node-to-node connection (internal API, chunk service).
    pub client: Arc<rustls::ClientConfig>,
    http: reqwest::Client,
}

impl Certified {
    fn new(node: NodeTls) -> Result<Certified, ClusterError> {
        let tls = |e: cairn_chunkproto::tls::TlsError| ClusterError::Pki(e.to_string());
        let client = node.client_config().map_err(tls)?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls((*client).clone())
            .build()
            .map_err(|e| ClusterError::Pki(format!("HTTPS client: {e}")))?;
        Ok(Certified {
            server: node.server_config(false).map_err(tls)?,
            client,
            http,
            node,
        })
    }
}

impl Transport {
    /// The transport of a node whose TLS material lives in `dir` (loaded now when
    /// the node already has a certificate).
    pub fn open(dir: PathBuf) -> Result<Transport, ClusterError> {
        let loaded = NodeTls::load(&dir).map_err(|e| ClusterError::Pki(e.to_string()))?;
        let state = match loaded {
            Some(node) => Some(Arc::new(Certified::new(node)?)),
            None => None,
        };
        Ok(Transport {
            dir,
            state: watch::channel(state).0,
        })
    }

    /// Checks and installs the node's certificate: written to the TLS directory
    /// (where datapathd picks it up too), then used for every new connection.
    pub fn install(&self, ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<(), ClusterError> {
        let node = NodeTls::from_pem(ca_pem, cert_pem, key_pem)
            .map_err(|e| ClusterError::Pki(e.to_string()))?;
        let certified = Certified::new(node)?;
        use cairn_chunkproto::tls::{CA_FILE, CERT_FILE, KEY_FILE};
        let st = |e: std::io::Error| ClusterError::State(format!("{}: {e}", self.dir.display()));
        std::fs::create_dir_all(&self.dir).map_err(st)?;
        // The certificate goes last: readers take its presence to mean "complete".
        write_private(&self.dir.join(CA_FILE), ca_pem, 0o644).map_err(st)?;
        write_private(&self.dir.join(KEY_FILE), key_pem, 0o600).map_err(st)?;
        write_private(&self.dir.join(CERT_FILE), cert_pem, 0o644).map_err(st)?;
        self.state.send_replace(Some(Arc::new(certified)));
        Ok(())
    }

    /// Records the certificates of the current members (SHA-256, hex) for the
    /// node's datapathd, which refuses peers not listed.
    pub fn write_members(&self, fingerprints: &[&str]) -> Result<(), ClusterError> {
        let st = |e: std::io::Error| ClusterError::State(format!("{}: {e}", self.dir.display()));
        std::fs::create_dir_all(&self.dir).map_err(st)?;
        let mut body = fingerprints.join("\n");
        body.push('\n');
        write_private(
            &self.dir.join(cairn_chunkproto::tls::PEERS_FILE),
            &body,
            0o644,
        )
        .map_err(st)
    }

    /// The node's TLS identity, once it has one.
    pub fn certified(&self) -> Option<Arc<Certified>> {
        self.state.borrow().clone()
    }

    /// Changes of the identity (installed at init or join).
    pub fn watch(&self) -> watch::Receiver<Option<Arc<Certified>>> {
        self.state.subscribe()
    }

    pub fn client(&self) -> Result<reqwest::Client, ClusterError> {
        self.certified()
            .map(|c| c.http.clone())
            .ok_or(ClusterError::NotCertified)
    }

    pub fn url(&self, addr: &str, path: &str) -> String {
        format!("https://{addr}{path}")
    }
}

/// Writes a file atomically and durably with `mode`.
fn write_private(path: &std::path::Path, body: &str, mode: u32) -> std::io::Result<()> {
    cairn_sysutil::write_atomic(path, body.as_bytes(), Some(mode))
}

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
}

/// A join request, sent to any member.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JoinRequest {
    pub token: String,
    pub node: NodeAdvert,
    /// The joiner's public key ([`pki::NodeKey::public_hex`]); its private key
    /// stays on the joiner.
    pub public_key: String,
}

/// What a joiner receives: the CA and its own certificate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JoinReply {
    pub cluster_id: String,
    pub ca_pem: String,
    pub cert_pem: String,
}

/// Raft's view, for status.
#[derive(Clone, Debug, Serialize)]
pub struct RaftStatus {
    pub node_id: NodeId,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    pub last_applied: u64,
}

/// This node's membership in the cluster.
pub struct Cluster {
    id: NodeId,
    raft: Raft,
    shared: Arc<Shared>,
    transport: Arc<Transport>,
    cfg: ClusterConfig,
    /// The leader's failure detector: when each node last reported.
    seen: Mutex<HashMap<NodeId, Instant>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cluster({:016x})", self.id)
    }
}

fn raft_err<E: std::fmt::Display>(e: E) -> ClusterError {
    ClusterError::Raft(e.to_string())
}

fn now_ms() -> i64 {
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
            election_timeout_min: 1000,
            election_timeout_max: 2000,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(20_000),
            max_in_snapshot_log_to_keep: 2_000,
            ..Default::default()
        }
        .validate()
        .map_err(raft_err)?;
        let network = network::Network {
            transport: transport.clone(),
        };
        let raft = Raft::new(id, Arc::new(config), network, log, sm)
            .await
            .map_err(raft_err)?;
        Ok(Arc::new(Cluster {
            id,
            raft,
            shared,
            transport,
            cfg,
            seen: Mutex::new(HashMap::new()),
        }))
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

    fn advert(&self) -> NodeAdvert {
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

    /// Creates a cluster with this node as its only member; returns a join token.
    pub async fn init(
        &self,
        cluster_id: &str,
        protection: Protection,
    ) -> Result<String, ClusterError> {
        if self.raft.is_initialized().await.map_err(raft_err)? {
            return Err(ClusterError::AlreadyMember(self.map().cluster_id.clone()));
        }
        let members = std::collections::BTreeMap::from([(
            self.id,
            BasicNode {
                addr: self.cfg.advert.internal.clone(),
            },
        )]);
        self.raft.initialize(members).await.map_err(raft_err)?;
        self.raft
            .wait(Some(Duration::from_secs(20)))
            .current_leader(self.id, "init")
            .await
            .map_err(raft_err)?;
        let secrets = pki::new_ca(cluster_id)?;
        self.propose(Command::Secrets(secrets.clone())).await?;
        self.propose_map(MapChange::Create {
            cluster_id: cluster_id.to_string(),
            protection,
        })
        .await?;
        // The first member certifies itself with the CA it just made.
        let key = pki::NodeKey::generate()?;
        let cert = pki::issue(&secrets, cluster_id, &self.advert(), &key.public_hex())?;
        self.transport
            .install(&secrets.ca_cert_pem, &cert, &key.private_pem())?;
        self.propose_map(MapChange::AddNode {
            node: NodeAdvert {
                cert: pki::fingerprint(&cert)?,
                ..self.advert()
            },
            at_ms: now_ms(),
        })
        .await?;
        pki::token(&secrets)
    }

    /// A join token for this cluster (members only).
    pub fn token(&self) -> Result<String, ClusterError> {
        let s = self.secrets().ok_or(ClusterError::NotMember)?;
        pki::token(&s)
    }

    /// The replicated secrets (members only).
    pub fn secrets(&self) -> Option<Secrets> {
        self.shared
            .secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Asks the member at `seed` (its internal address, `host:port`) to admit this
    /// node, over TLS that checks the seed against the CA fingerprint in `token`;
    /// then installs the certificate the cluster signed for this node's own key.
    /// The caller then waits with [`Cluster::wait_member`].
    pub async fn request_join(&self, seed: &str, token: &str) -> Result<String, ClusterError> {
        let (ca_fp, _) = pki::parse_token(token)?;
        let key = pki::NodeKey::generate()?;
        let tls = cairn_chunkproto::tls::pinned_ca_client_config(ca_fp)
            .map_err(|e| ClusterError::Pki(e.to_string()))?;
        let client = reqwest::Client::builder()
            .use_preconfigured_tls((*tls).clone())
            .build()
            .map_err(|e| ClusterError::Pki(format!("HTTPS client: {e}")))?;
        let seed = seed.trim_start_matches("https://").trim_end_matches('/');
        let peer = |msg: String| ClusterError::Peer {
            peer: seed.to_string(),
            msg,
        };
        let req = JoinRequest {
            token: token.trim().to_string(),
            node: self.advert(),
            public_key: key.public_hex(),
        };
        let r: Result<JoinReply, String> = client
            .post(self.transport.url(seed, "/cluster/join"))
            .timeout(Duration::from_secs(60))
            .json(&req)
            .send()
            .await
            .map_err(|e| peer(error_chain(&e)))?
            .json()
            .await
            .map_err(|e| peer(e.to_string()))?;
        let reply = r.map_err(ClusterError::JoinRefused)?;
        let got = rustls::pki_types::pem::PemObject::from_pem_slice(reply.ca_pem.as_bytes())
            .map(|der: rustls::pki_types::CertificateDer| cairn_chunkproto::tls::cert_sha256(&der))
            .map_err(|e| ClusterError::Pki(format!("the CA in the join reply: {e}")))?;
        if got != ca_fp {
            return Err(ClusterError::JoinRefused(
                "the cluster answered with a CA other than the token's".into(),
            ));
        }
        self.transport
            .install(&reply.ca_pem, &reply.cert_pem, &key.private_pem())?;
        Ok(reply.cluster_id)
    }

    /// Waits until this node has applied a map that lists it.
    pub async fn wait_member(&self, timeout: Duration) -> Result<(), ClusterError> {
        let mut rx = self.watch_map();
        let id = self.id;
        tokio::time::timeout(timeout, rx.wait_for(|m| m.nodes.contains_key(&id)))
            .await
            .map_err(|_| ClusterError::NoQuorum("timed out waiting for the map".into()))?
            .map_err(raft_err)?;
        Ok(())
    }

    /// On the leader: admits a joiner (checks the token, issues its certificate,
    /// adds it to the map and to Raft as a learner).
    async fn admit(&self, req: JoinRequest) -> Result<JoinReply, ClusterError> {
        let secrets = self.secrets().ok_or(ClusterError::NotMember)?;
        pki::check_token(&secrets, &req.token)?;
        let cluster_id = self.map().cluster_id.clone();
        let cert_pem = pki::issue(&secrets, &cluster_id, &req.node, &req.public_key)?;
        // The map names the certificate: peers accept it while the node is listed.
        self.propose_map(MapChange::AddNode {
            node: NodeAdvert {
                cert: pki::fingerprint(&cert_pem)?,
                ..req.node.clone()
            },
            at_ms: now_ms(),
        })
        .await?;
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(req.node.id, Instant::now());
        let is_known = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .nodes()
            .any(|(id, _)| *id == req.node.id);
        if !is_known {
            // Not blocking: the learner catches up from the log (or a snapshot)
            // while the joiner installs its certificate.
            self.raft
                .add_learner(
                    req.node.id,
                    BasicNode {
                        addr: req.node.internal.clone(),
                    },
                    false,
                )
                .await
                .map_err(raft_err)?;
        }
        Ok(JoinReply {
            cluster_id,
            ca_pem: secrets.ca_cert_pem.clone(),
            cert_pem,
        })
    }

    /// Proposes a map change; returns the new epoch.
    pub async fn propose_map(&self, change: MapChange) -> Result<u64, ClusterError> {
        match self.propose(Command::Map(change)).await? {
            Outcome::Map(r) => r.map_err(ClusterError::Refused),
            o => Err(ClusterError::Raft(format!("unexpected outcome {o:?}"))),
        }
    }

    /// Proposes a command and waits until it is committed and applied; forwards to
    /// the leader when this node is not it. Retries while an election is under way.
    ///
    /// Retrying is safe only for commands applied at most once (`MetaOnce`, map
    /// changes checked against the map). When it gives up after the command may
    /// have reached a leader's log, the error is [`ClusterError::Unknown`]: the
    /// command may still commit, and the caller must not act as if it had not.
    pub async fn propose(&self, cmd: Command) -> Result<Outcome, ClusterError> {
        let deadline = Instant::now() + PROPOSE_DEADLINE;
        let mut maybe_appended = false;
        loop {
            let err = match self.raft.client_write(cmd.clone()).await {
                Ok(resp) => return Ok(resp.data),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                    match f.leader_node {
                        Some(node) => match self.forward(&node.addr, &cmd).await {
                            Ok(o) => return Ok(o),
                            Err(Forward::NotSent(e)) => e,
                            Err(Forward::MaybeAppended(e)) => {
                                maybe_appended = true;
                                e
                            }
                        },
                        None => ClusterError::NoQuorum("no leader".into()),
                    }
                }
                Err(e) => {
                    // This node led and accepted the entry, or failed in a way
                    // that does not say it did not.
                    maybe_appended = true;
                    ClusterError::Raft(e.to_string())
                }
            };
            if Instant::now() >= deadline {
                let msg = err.to_string();
                return Err(if maybe_appended {
                    ClusterError::Unknown(msg)
                } else {
                    match err {
                        ClusterError::Raft(m) | ClusterError::Peer { msg: m, .. } => {
                            ClusterError::NoQuorum(m)
                        }
                        e => e,
                    }
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn forward(&self, addr: &str, cmd: &Command) -> Result<Outcome, Forward> {
        let peer = |e: reqwest::Error| {
            let not_sent = e.is_connect() || e.is_builder();
            let err = ClusterError::Peer {
                peer: addr.to_string(),
                msg: e.to_string(),
            };
            if not_sent {
                Forward::NotSent(err)
            } else {
                Forward::MaybeAppended(err)
            }
        };
        let client = self.transport.client().map_err(Forward::NotSent)?;
        let r: Result<Outcome, ProposeRefused> = client
            .post(self.transport.url(addr, "/cluster/propose"))
            .timeout(PROPOSE_DEADLINE)
            .json(cmd)
            .send()
            .await
            .map_err(peer)?
            .json()
            .await
            .map_err(peer)?;
        // The leader has answered: losing the answer now is "timed out after the
        // leader committed".
        fail::fail_point!("cluster::forward-reply-lost", |_| {
            Err(Forward::MaybeAppended(ClusterError::Peer {
                peer: addr.to_string(),
                msg: "injected: the leader's answer was lost".into(),
            }))
        });
        r.map_err(|refused| {
            let err = ClusterError::Peer {
                peer: addr.to_string(),
                msg: refused.to_string(),
            };
            match refused {
                ProposeRefused::NotLeader => Forward::NotSent(err),
                ProposeRefused::Raft(_) => Forward::MaybeAppended(err),
            }
        })
    }

    /// Returns once this node has applied every entry committed before the call:
    /// a read after it sees every write acknowledged before it, on any node.
    pub async fn read_barrier(&self) -> Result<(), ClusterError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let err = match self.raft.get_read_log_id().await {
                Ok((read, _)) => {
                    return self
                        .wait_applied(read.map(|l| l.index).unwrap_or(0), deadline)
                        .await
                }
                Err(RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(
                    f,
                ))) => match f.leader_node {
                    Some(node) => match self.remote_read_index(&node.addr).await {
                        Ok(idx) => return self.wait_applied(idx, deadline).await,
                        Err(e) => e,
                    },
                    None => ClusterError::NoQuorum("no leader".into()),
                },
                Err(e) => ClusterError::NoQuorum(e.to_string()),
            };
            if Instant::now() >= deadline {
                return Err(match err {
                    ClusterError::Raft(m) | ClusterError::Peer { msg: m, .. } => {
                        ClusterError::NoQuorum(m)
                    }
                    e => e,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_applied(&self, index: u64, deadline: Instant) -> Result<(), ClusterError> {
        let mut rx = self.shared.applied.subscribe();
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        tokio::time::timeout(left, rx.wait_for(|&a| a >= index))
            .await
            .map_err(|_| ClusterError::NoQuorum(format!("not caught up to index {index}")))?
            .map_err(raft_err)?;
        Ok(())
    }

    async fn remote_read_index(&self, addr: &str) -> Result<u64, ClusterError> {
        let peer = |e: reqwest::Error| ClusterError::Peer {
            peer: addr.to_string(),
            msg: e.to_string(),
        };
        let r: Result<u64, String> = self
            .transport
            .client()?
            .post(self.transport.url(addr, "/cluster/read_index"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(peer)?
            .json()
            .await
            .map_err(peer)?;
        r.map_err(|msg| ClusterError::Peer {
            peer: addr.to_string(),
            msg,
        })
    }

    /// Raft's view of the group.
    pub fn raft_status(&self) -> RaftStatus {
        let m = self.raft.metrics().borrow().clone();
        let voters: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
        let learners = m
            .membership_config
            .membership()
            .learner_ids()
            .filter(|id| !voters.contains(id))
            .collect();
        RaftStatus {
            node_id: self.id,
            leader: m.current_leader,
            term: m.current_term,
            voters: voters.into_iter().collect(),
            learners,
            last_applied: m.last_applied.map(|l| l.index).unwrap_or(0),
        }
    }

    fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    /// Removes a node from the map and from the Raft group.
    pub async fn remove_node(&self, node: NodeId) -> Result<(), ClusterError> {
        let voters: BTreeSet<NodeId> = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect();
        if voters.contains(&node) {
            let rest: BTreeSet<NodeId> = voters.iter().copied().filter(|&v| v != node).collect();
            if rest.is_empty() {
                return Err(ClusterError::Refused("cannot remove the last voter".into()));
            }
            self.change_membership(ChangeMembers::ReplaceAllVoters(rest))
                .await?;
        }
        self.change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([node])))
            .await?;
        self.propose_map(MapChange::Remove { node }).await?;
        Ok(())
    }

    async fn change_membership(
        &self,
        change: ChangeMembers<NodeId, BasicNode>,
    ) -> Result<(), ClusterError> {
        // retain: a voter replaced while it is down stays a learner, so the leader
        // keeps replicating to it; when it comes back it learns from the log that it
        // no longer votes (instead of campaigning alone), catches up, and can be
        // promoted again. `remove_node` removes it for good with RemoveNodes after.
        match self.raft.change_membership(change.clone(), true).await {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(
                ClusterError::NoQuorum("membership changes run on the leader; retry there".into()),
            ),
            Err(e) => Err(raft_err(e)),
        }
    }

    /// Starts the background duties: reporting to the leader, and (while leader)
    /// failure detection and voter management.
    pub fn start(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(me.cfg.heartbeat);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut was_leader = false;
            loop {
                tick.tick().await;
                if !me.is_member() {
                    continue;
                }
                let leader = me.is_leader();
                if leader && !was_leader {
                    // A new leader knows nothing of who reported to the old one:
                    // everyone gets a fresh grace period.
                    let now = Instant::now();
                    let mut seen = me.seen.lock().unwrap_or_else(|e| e.into_inner());
                    for id in me.map().nodes.keys() {
                        seen.insert(*id, now);
                    }
                }
                was_leader = leader;
                if leader {
                    me.seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(me.id, Instant::now());
                    if let Err(e) = me.detect().await {
                        tracing::debug!("failure detector: {e}");
                    }
                    if let Err(e) = me.manage_voters().await {
                        tracing::debug!("voter management: {e}");
                    }
                } else if let Err(e) = me.report().await {
                    tracing::debug!("heartbeat: {e}");
                }
            }
        });
    }

    async fn report(&self) -> Result<(), ClusterError> {
        let leader = self.raft.metrics().borrow().current_leader;
        let Some(leader) = leader else {
            return Ok(());
        };
        let Some(node) = self.map().nodes.get(&leader).cloned() else {
            return Ok(());
        };
        self.transport
            .client()?
            .post(self.transport.url(&node.internal, "/cluster/heartbeat"))
            .timeout(Duration::from_secs(2))
            .json(&self.id)
            .send()
            .await
            .map_err(|e| ClusterError::Peer {
                peer: node.internal.clone(),
                msg: e.to_string(),
            })?;
        Ok(())
    }

    async fn detect(&self) -> Result<(), ClusterError> {
        let map = self.map();
        let changes: Vec<MapChange> = {
            let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            map.nodes
                .values()
                .filter_map(|n| {
                    let fresh = seen
                        .get(&n.id)
                        .is_some_and(|t| t.elapsed() < self.cfg.down_after);
                    let want = if fresh {
                        NodeState::Up
                    } else {
                        NodeState::Down
                    };
                    (want != n.state).then_some(MapChange::SetState {
                        node: n.id,
                        state: want,
                        at_ms: now_ms(),
                    })
                })
                .collect()
        };
        for c in changes {
            tracing::warn!(?c, "node state change");
            self.propose_map(c).await?;
        }
        Ok(())
    }

    /// Keeps up to [`MAX_VOTERS`] voters, preferring nodes that are up: a voter down
    /// for three detector periods is replaced by an up learner, and learners are
    /// promoted while there are fewer voters than that.
    async fn manage_voters(&self) -> Result<(), ClusterError> {
        let map = self.map();
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        if membership.get_joint_config().len() > 1 {
            return Ok(()); // a change is already in flight
        }
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let up = |id: &NodeId| map.nodes.get(id).is_some_and(|n| n.state == NodeState::Up);
        let long_down = |id: &NodeId| {
            map.nodes.get(id).is_some_and(|n| {
                n.state == NodeState::Down
                    && now_ms() - n.since_ms > 3 * self.cfg.down_after.as_millis() as i64
            })
        };
        let learners: Vec<NodeId> = membership
            .learner_ids()
            .filter(|id| !voters.contains(id) && up(id))
            .collect();
        let caught_up = |l: &NodeId| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(l).cloned().flatten())
                .is_some_and(|matched| {
                    m.last_log_index
                        .is_some_and(|last| last.saturating_sub(matched.index) < 100)
                })
        };
        // Only a learner that has caught up is promoted, so the change commits fast;
        // a long-down voter is dropped only when such a learner takes its place, so
        // the group never shrinks (a smaller group tolerates fewer failures).
        let mut spare: Vec<NodeId> = learners.into_iter().filter(caught_up).collect();
        let mut want = voters.clone();
        for v in voters.iter().filter(|v| long_down(v)) {
            if let Some(l) = spare.pop() {
                want.remove(v);
                want.insert(l);
            }
        }
        while want.len() < MAX_VOTERS {
            match spare.pop() {
                Some(l) => {
                    want.insert(l);
                }
                None => break,
            }
        }
        if want != voters {
            tracing::info!(?voters, ?want, "changing voters");
            self.change_membership(ChangeMembers::ReplaceAllVoters(want))
                .await?;
        }
        Ok(())
    }

    /// The internal API: Raft RPCs, proposals, read index, join and heartbeats. The
    /// caller serves it behind mTLS (only `/cluster/join` may be reached by a
    /// caller without a node certificate; it is guarded by the join token).
    pub fn router(self: &Arc<Self>) -> (axum::Router, axum::Router) {
        let members = axum::Router::new()
            .route("/raft/append", post(append))
            .route("/raft/vote", post(vote))
            .route("/raft/snapshot", post(snapshot))
            .route("/cluster/propose", post(propose))
            .route("/cluster/read_index", post(read_index))
            .route("/cluster/heartbeat", post(heartbeat))
            .with_state(self.clone());
        let public = axum::Router::new()
            .route("/cluster/join", post(join))
            .with_state(self.clone());
        (members, public)
    }
}

#[async_trait::async_trait]
impl cairn_meta::MetaLog for Cluster {
    async fn propose(&self, p: Proposal) -> Commit {
        match self.propose(Command::MetaOnce(p)).await {
            Ok(Outcome::Meta(Ok(applied))) => Commit::Committed(applied),
            Ok(Outcome::Meta(Err(e))) => Commit::Rejected(e),
            Ok(o) => Commit::Unknown(format!("unexpected outcome {o:?}")),
            Err(ClusterError::Unknown(why)) => Commit::Unknown(why),
            // Never appended to any log: definitely not applied.
            Err(e) => Commit::Rejected(e.into()),
        }
    }

    async fn barrier(&self) -> Result<(), MetaError> {
        Ok(self.read_barrier().await?)
    }
}

type Api = State<Arc<Cluster>>;

/// The node a Raft RPC is addressed to.
#[derive(Deserialize)]
struct To {
    to: NodeId,
}

/// Refuses an RPC meant for another node (e.g. the member this address had before
/// it was wiped and rejoined under a new id): answering it would look to the leader
/// like that member's log going backwards.
fn addressed(c: &Cluster, to: &To) -> Result<(), (axum::http::StatusCode, String)> {
    if to.to == c.id {
        Ok(())
    } else {
        Err((
            axum::http::StatusCode::MISDIRECTED_REQUEST,
            format!("this is node {:016x}, not {:016x}", c.id, to.to),
        ))
    }
}

type Rpc<T> = Result<Json<T>, (axum::http::StatusCode, String)>;

async fn append(
    State(c): Api,
    Query(to): Query<To>,
    Json(req): Json<AppendEntriesRequest<types::TypeConfig>>,
) -> Rpc<Result<openraft::raft::AppendEntriesResponse<u64>, RaftError<u64>>> {
    addressed(&c, &to)?;
    Ok(Json(c.raft.append_entries(req).await))
}

async fn vote(
    State(c): Api,
    Query(to): Query<To>,
    Json(req): Json<VoteRequest<u64>>,
) -> Rpc<Result<openraft::raft::VoteResponse<u64>, RaftError<u64>>> {
    addressed(&c, &to)?;
    Ok(Json(c.raft.vote(req).await))
}

async fn snapshot(
    State(c): Api,
    Query(to): Query<To>,
    body: bytes::Bytes,
) -> Rpc<Result<openraft::raft::SnapshotResponse<u64>, openraft::error::Fatal<u64>>> {
    addressed(&c, &to)?;
    let parsed = (|| {
        let len = u32::from_be_bytes(body.get(..4)?.try_into().ok()?) as usize;
        let header: SnapshotHeader = serde_json::from_slice(body.get(4..4 + len)?).ok()?;
        Some((header, body.get(4 + len..)?.to_vec()))
    })();
    let Some((header, data)) = parsed else {
        return Err((
            axum::http::StatusCode::BAD_REQUEST,
            "malformed snapshot request".into(),
        ));
    };
    let snap = Snapshot {
        meta: header.meta,
        snapshot: Box::new(data),
    };
    Ok(Json(c.raft.install_full_snapshot(header.vote, snap).await))
}

async fn propose(State(c): Api, Json(cmd): Json<Command>) -> Json<Result<Outcome, ProposeRefused>> {
    // Only the leader answers; a forwarded proposal is not forwarded again.
    Json(match c.raft.client_write(cmd).await {
        Ok(r) => Ok(r.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
            Err(ProposeRefused::NotLeader)
        }
        Err(e) => Err(ProposeRefused::Raft(e.to_string())),
    })
}

async fn read_index(State(c): Api) -> Json<Result<u64, String>> {
    Json(match c.raft.get_read_log_id().await {
        Ok((read, _)) => Ok(read.map(|l| l.index).unwrap_or(0)),
        Err(e) => Err(e.to_string()),
    })
}

async fn heartbeat(State(c): Api, Json(node): Json<NodeId>) -> Json<bool> {
    c.seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(node, Instant::now());
    Json(c.is_leader())
}

async fn join(State(c): Api, Json(req): Json<JoinRequest>) -> Json<Result<JoinReply, String>> {
    if !c.is_leader() {
        // Forward to the leader with this node's own client.
        let leader = c.raft.metrics().borrow().current_leader;
        let addr = leader.and_then(|l| c.map().nodes.get(&l).map(|n| n.internal.clone()));
        let Some(addr) = addr else {
            return Json(Err("no leader".into()));
        };
        let client = match c.transport.client() {
            Ok(client) => client,
            Err(e) => return Json(Err(e.to_string())),
        };
        let r = client
            .post(c.transport.url(&addr, "/cluster/join"))
            .timeout(Duration::from_secs(60))
            .json(&req)
            .send()
            .await;
        return Json(match r {
            Ok(resp) => resp
                .json::<Result<JoinReply, String>>()
                .await
                .unwrap_or_else(|e| Err(e.to_string())),
            Err(e) => Err(e.to_string()),
        });
    }
    Json(c.admit(req).await.map_err(|e| e.to_string()))
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

/// A reqwest error with its causes (the TLS reason is usually two levels down).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
