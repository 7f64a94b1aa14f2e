//! Creating a cluster, and entering one: the joiner asks a member with the join
//! token, and the leader admits it and signs its certificate.

use crate::error::{error_chain, raft_err};
use crate::node::now_ms;
use crate::{Cluster, ClusterError, Command, MapChange, NodeAdvert, Protection};
use cairn_pki::{ca, Secrets};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// A join request, sent to any member.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JoinRequest {
    pub token: String,
    pub node: NodeAdvert,
    /// The joiner's public key ([`cairn_pki::ca::NodeKey::public_hex`]); its private key
    /// stays on the joiner.
    pub public_key: String,
}

/// What a joiner receives: the CA and its own certificate.
#[derive(Clone, Serialize, Deserialize)]
pub struct JoinReply {
    pub cluster_id: String,
    pub ca_pem: String,
    pub cert_pem: String,
    /// The cluster's master key (hex), which wraps the tenants' keys: every
    /// member needs it to read encrypted data. Sent only over the join's TLS,
    /// pinned to the CA the token names.
    #[serde(default)]
    pub master_key: String,
}

impl std::fmt::Debug for JoinReply {
    // The master key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JoinReply(cluster {})", self.cluster_id)
    }
}

impl Cluster {
    /// Creates a cluster with this node as its only member; returns a join token.
    ///
    /// Resumable: a creation cut off part way (the node stopped between its
    /// steps) is finished by calling it again, under the name it was started
    /// with. Refused once the node is a member, or when its Raft log belongs to
    /// another cluster (it was being admitted somewhere).
    pub async fn init(
        &self,
        cluster_id: &str,
        protection: Protection,
    ) -> Result<String, ClusterError> {
        if self.is_member() {
            return Err(ClusterError::AlreadyMember(self.map().cluster_id.clone()));
        }
        // The cluster's master key is made with it (kept if this node has one).
        if !cairn_envelope::MasterKey::exists(&self.cfg.master_key) {
            cairn_envelope::MasterKey::generate()?.store(&self.cfg.master_key)?;
        }
        if !self.raft.is_initialized().await.map_err(raft_err)? {
            let members = std::collections::BTreeMap::from([(
                self.id,
                BasicNode {
                    addr: self.cfg.advert.internal.clone(),
                },
            )]);
            self.raft.initialize(members).await.map_err(raft_err)?;
        } else if self.raft_status().voters != [self.id] {
            return Err(ClusterError::AlreadyMember(self.map().cluster_id.clone()));
        }
        self.raft
            .wait(Some(Duration::from_secs(20)))
            .current_leader(self.id, "init")
            .await
            .map_err(raft_err)?;
        let secrets = match self.secrets() {
            Some(s) => s,
            None => {
                let s = ca::new_ca(cluster_id)?;
                self.propose(Command::Secrets(s.clone())).await?;
                s
            }
        };
        let created = self.map().cluster_id.clone();
        let cluster_id = if created.is_empty() {
            self.propose_map(MapChange::Create {
                cluster_id: cluster_id.to_string(),
                protection,
            })
            .await?;
            cluster_id.to_string()
        } else {
            created
        };
        // The first member certifies itself with the CA it just made.
        let key = ca::NodeKey::generate()?;
        let cert = issue(&secrets, &cluster_id, &self.advert(), &key.public_hex())?;
        self.transport
            .install(&secrets.ca_cert_pem, &cert, &key.private_pem())?;
        self.propose_map(MapChange::AddNode {
            node: NodeAdvert {
                cert: ca::fingerprint(&cert)?,
                ..self.advert()
            },
            at_ms: now_ms(),
            joining: false,
        })
        .await?;
        Ok(ca::token(&secrets)?)
    }

    /// A member started with other addresses than the map records (a single node
    /// restarted with an internal API for others to join at, or moved) tells the
    /// cluster: the map's record and, when this node leads, its Raft membership
    /// entry. Drive ids and the certificate are kept (`MapChange::AddNode`).
    pub async fn reannounce(&self) -> Result<(), ClusterError> {
        let a = self.advert();
        let moved = match self.map().nodes.get(&self.id) {
            Some(n) => n.internal != a.internal || n.chunk != a.chunk || n.s3 != a.s3,
            None => return Ok(()),
        };
        if !moved {
            return Ok(());
        }
        tracing::info!(internal = %a.internal, chunk = %a.chunk, s3 = %a.s3, "this node's addresses changed: telling the cluster");
        self.propose_map(MapChange::AddNode {
            node: NodeAdvert {
                cert: String::new(),
                ..a.clone()
            },
            at_ms: now_ms(),
            joining: false,
        })
        .await?;
        if self.raft_status().leader == Some(self.id) {
            let nodes = std::collections::BTreeMap::from([(
                self.id,
                BasicNode {
                    addr: a.internal.clone(),
                },
            )]);
            self.raft
                .change_membership(openraft::ChangeMembers::SetNodes(nodes), false)
                .await
                .map_err(raft_err)?;
        }
        Ok(())
    }

    /// A join token for this cluster (members only).
    pub fn token(&self) -> Result<String, ClusterError> {
        let s = self.secrets().ok_or(ClusterError::NotMember)?;
        Ok(ca::token(&s)?)
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
    /// The node holds its reports until the caller says it is [`Cluster::ready`]
    /// (its chunk service trusts the cluster), so it enters the map down.
    pub async fn request_join(&self, seed: &str, token: &str) -> Result<String, ClusterError> {
        self.reporting
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let joined = self.join_via(seed, token).await;
        if joined.is_err() {
            self.ready();
        }
        joined
    }

    async fn join_via(&self, seed: &str, token: &str) -> Result<String, ClusterError> {
        let (ca_fp, _) = ca::parse_token(token)?;
        let key = ca::NodeKey::generate()?;
        let tls = cairn_pki::tls::pinned_ca_client_config(ca_fp)
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
        let master = cairn_envelope::MasterKey::from_hex(&reply.master_key).ok_or_else(|| {
            ClusterError::JoinRefused("the join reply carries no valid master key".into())
        })?;
        let got = cairn_pki::tls::pem_cert_sha256(&reply.ca_pem, "the CA in the join reply")?;
        if got != ca_fp {
            return Err(ClusterError::JoinRefused(
                "the cluster answered with a CA other than the token's".into(),
            ));
        }
        // Kept before the certificate: a member never lacks the key. A node
        // holding another key is refused (its file is left as it is).
        master.store(&self.cfg.master_key)?;
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
    pub(crate) async fn admit(&self, req: JoinRequest) -> Result<JoinReply, ClusterError> {
        let secrets = self.secrets().ok_or(ClusterError::NotMember)?;
        ca::check_token(&secrets, &req.token)?;
        let master = cairn_envelope::MasterKey::load(&self.cfg.master_key)?;
        let cluster_id = self.map().cluster_id.clone();
        let cert_pem = issue(&secrets, &cluster_id, &req.node, &req.public_key)?;
        let known = self.map().nodes.contains_key(&req.node.id);
        // The map names the certificate: peers accept it while the node is listed.
        self.propose_map(MapChange::AddNode {
            node: NodeAdvert {
                cert: ca::fingerprint(&cert_pem)?,
                ..req.node.clone()
            },
            at_ms: now_ms(),
            joining: true,
        })
        .await?;
        if known {
            // A member joining again keeps its state: a fresh grace period.
            self.seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(req.node.id, Instant::now());
        }
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
            master_key: master.to_hex().to_string(),
        })
    }
}

/// A certificate for the node `advert` describes, named by its id and every
/// address it advertises.
fn issue(
    secrets: &Secrets,
    cluster_id: &str,
    advert: &crate::NodeAdvert,
    public_key_hex: &str,
) -> Result<String, ClusterError> {
    let addrs = [
        advert.internal.as_str(),
        advert.chunk.as_str(),
        advert.s3.as_str(),
    ];
    let names = ca::NodeNames {
        id: advert.id,
        addrs: &addrs,
    };
    Ok(ca::issue(secrets, cluster_id, names, public_key_hex)?)
}
