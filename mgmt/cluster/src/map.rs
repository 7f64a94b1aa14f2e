//! The cluster map: which nodes and drives exist, where they answer, what state they
//! are in, and how data is protected. It changes only through committed Raft
//! entries ([`MapChange`]), applied in log order on every node, so every node that
//! has applied the same index holds the same map.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A node's id: random at first start, kept in the node's state directory.
pub type NodeId = u64;

/// A node as the map knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub id: NodeId,
    /// Internal API (Raft, membership), `host:port`.
    pub internal: String,
    /// The node's chunk service as peers reach it, `host:port`.
    pub chunk: String,
    /// The node's S3 endpoint, `host:port`.
    pub s3: String,
    /// Failure domain: no two fragments of a stripe share one.
    pub domain: String,
    /// Relative share of new data (drives' capacity by default).
    pub weight: u32,
    pub drives: Vec<DriveRecord>,
    pub state: NodeState,
    /// When `state` last changed (ms since the epoch, as the proposer saw it).
    pub since_ms: i64,
    /// Being emptied by the operator: serves reads, takes no new data, and repair
    /// moves its fragments elsewhere. Independent of `state`, so a draining node
    /// that goes down and comes back is still draining.
    pub draining: bool,
    /// SHA-256 (hex) of the certificate the cluster issued to the node. Peers
    /// accept a member's connection only with a certificate named here, so a
    /// removed node's certificate stops working the moment it leaves the map.
    #[serde(default)]
    pub cert: String,
}

/// A drive as the map knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveRecord {
    /// Cluster-wide drive id: what manifests record.
    pub id: u16,
    /// The drive's index on its node's chunk service.
    pub local: u16,
    pub capacity: u64,
}

/// What a node is doing, as the cluster decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Answering heartbeats; takes new data.
    Up,
    /// Missed heartbeats; its fragments count as missing until it returns or repair
    /// replaces them.
    Down,
}

/// How data is protected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protection {
    /// Erasure code of large objects.
    pub k: u8,
    pub m: u8,
    /// Copies of small objects.
    pub replicas: u8,
}

/// The cluster map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Empty until the cluster is created.
    pub cluster_id: String,
    /// Bumped by every change.
    pub epoch: u64,
    pub protection: Option<Protection>,
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    /// The next cluster-wide drive id to hand out (ids are never reused, so a
    /// manifest can never name a drive that was replaced by another).
    pub next_drive: u16,
}

/// What a joining node announces about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAdvert {
    pub id: NodeId,
    pub internal: String,
    pub chunk: String,
    pub s3: String,
    pub domain: String,
    /// (local index, capacity) of each drive.
    pub drives: Vec<(u16, u64)>,
    /// SHA-256 (hex) of its certificate; empty keeps the one the map has.
    #[serde(default)]
    pub cert: String,
}

/// One change to the map, proposed through Raft.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapChange {
    /// The first entry of a cluster.
    Create {
        cluster_id: String,
        protection: Protection,
    },
    /// A node joins, or a known node re-announces its addresses and drives.
    AddNode {
        node: NodeAdvert,
        at_ms: i64,
        /// A node new to the map enters it down, until its first report: it
        /// takes no data before its chunk service is ready for its peers.
        #[serde(default)]
        joining: bool,
    },
    SetState {
        node: NodeId,
        state: NodeState,
        at_ms: i64,
    },
    Drain {
        node: NodeId,
    },
    Remove {
        node: NodeId,
    },
    SetProtection(Protection),
}

impl ClusterMap {
    /// Applies one change; the map is unchanged when it is refused.
    pub fn apply(&mut self, change: &MapChange) -> Result<(), String> {
        match change {
            MapChange::Create {
                cluster_id,
                protection,
            } => {
                if !self.cluster_id.is_empty() {
                    return Err(format!("cluster {} already exists", self.cluster_id));
                }
                self.cluster_id = cluster_id.clone();
                self.protection = Some(*protection);
            }
            MapChange::AddNode {
                node,
                at_ms,
                joining,
            } => {
                let old = self.nodes.get(&node.id);
                let mut drives = Vec::with_capacity(node.drives.len());
                let mut next = self.next_drive;
                for &(local, capacity) in &node.drives {
                    // A drive keeps its cluster id across re-announcements.
                    let id = old
                        .and_then(|o| o.drives.iter().find(|d| d.local == local))
                        .map(|d| d.id);
                    let id = match id {
                        Some(id) => id,
                        None => {
                            let id = next;
                            next = next
                                .checked_add(1)
                                .filter(|&n| n != cairn_meta::UNPLACED)
                                .ok_or("no drive ids left")?;
                            id
                        }
                    };
                    drives.push(DriveRecord {
                        id,
                        local,
                        capacity,
                    });
                }
                let capacity_gib: u64 = node.drives.iter().map(|d| d.1 >> 30).sum();
                let (state, since_ms, draining) = match old {
                    Some(o) if o.state == NodeState::Up => (o.state, o.since_ms, o.draining),
                    Some(o) => (NodeState::Up, *at_ms, o.draining),
                    None if *joining => (NodeState::Down, *at_ms, false),
                    None => (NodeState::Up, *at_ms, false),
                };
                let cert = match (node.cert.is_empty(), old) {
                    (false, _) => node.cert.clone(),
                    (true, Some(o)) => o.cert.clone(),
                    (true, None) => String::new(),
                };
                self.next_drive = next;
                self.nodes.insert(
                    node.id,
                    NodeRecord {
                        id: node.id,
                        internal: node.internal.clone(),
                        chunk: node.chunk.clone(),
                        s3: node.s3.clone(),
                        domain: node.domain.clone(),
                        weight: capacity_gib.clamp(1, u32::MAX as u64) as u32,
                        drives,
                        state,
                        since_ms,
                        draining,
                        cert,
                    },
                );
            }
            MapChange::SetState { node, state, at_ms } => {
                let n = self
                    .nodes
                    .get_mut(node)
                    .ok_or_else(|| format!("no node {node:016x}"))?;
                if n.state == *state {
                    return Ok(());
                }
                n.state = *state;
                n.since_ms = *at_ms;
            }
            MapChange::Drain { node } => {
                self.nodes
                    .get_mut(node)
                    .ok_or_else(|| format!("no node {node:016x}"))?
                    .draining = true;
            }
            MapChange::Remove { node } => {
                self.nodes
                    .remove(node)
                    .ok_or_else(|| format!("no node {node:016x}"))?;
            }
            MapChange::SetProtection(p) => self.protection = Some(*p),
        }
        self.epoch += 1;
        Ok(())
    }

    /// The node holding a cluster-wide drive id, and the drive's local index.
    pub fn drive(&self, id: u16) -> Option<(&NodeRecord, u16)> {
        self.nodes
            .values()
            .find_map(|n| n.drives.iter().find(|d| d.id == id).map(|d| (n, d.local)))
    }

    /// Whether a certificate (by its SHA-256, hex) belongs to a node of the map.
    pub fn knows_cert(&self, sha256_hex: &str) -> bool {
        !sha256_hex.is_empty() && self.nodes.values().any(|n| n.cert == sha256_hex)
    }

    /// Number of nodes in each state.
    pub fn count(&self, state: NodeState) -> usize {
        self.nodes.values().filter(|n| n.state == state).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advert(id: NodeId, drives: u16) -> NodeAdvert {
        NodeAdvert {
            id,
            internal: format!("127.0.0.{id}:9002"),
            chunk: format!("127.0.0.{id}:7411"),
            s3: format!("127.0.0.{id}:9000"),
            domain: format!("node-{id}"),
            drives: (0..drives).map(|d| (d, 8 << 30)).collect(),
            cert: format!("{id:064x}"),
        }
    }

    #[test]
    fn drive_ids_are_unique_stable_and_never_reused() {
        let mut m = ClusterMap::default();
        m.apply(&MapChange::AddNode {
            node: advert(1, 2),
            at_ms: 0,
            joining: false,
        })
        .unwrap();
        m.apply(&MapChange::AddNode {
            node: advert(2, 2),
            at_ms: 0,
            joining: false,
        })
        .unwrap();
        assert_eq!(m.drive(3).map(|(n, l)| (n.id, l)), Some((2, 1)));
        // Re-announcing keeps ids; a new drive gets a fresh one.
        m.apply(&MapChange::AddNode {
            node: advert(1, 3),
            at_ms: 0,
            joining: false,
        })
        .unwrap();
        let ids: Vec<u16> = m.nodes[&1].drives.iter().map(|d| d.id).collect();
        assert_eq!(ids, vec![0, 1, 4]);
        m.apply(&MapChange::Remove { node: 2 }).unwrap();
        m.apply(&MapChange::AddNode {
            node: advert(3, 1),
            at_ms: 0,
            joining: false,
        })
        .unwrap();
        assert_eq!(m.nodes[&3].drives[0].id, 5);
        assert_eq!(m.epoch, 5);
    }

    #[test]
    fn refused_changes_leave_the_map_alone() {
        let mut m = ClusterMap::default();
        let p = Protection {
            k: 4,
            m: 2,
            replicas: 3,
        };
        m.apply(&MapChange::Create {
            cluster_id: "c".into(),
            protection: p,
        })
        .unwrap();
        let before = m.clone();
        assert!(m
            .apply(&MapChange::Create {
                cluster_id: "d".into(),
                protection: p
            })
            .is_err());
        assert!(m.apply(&MapChange::Remove { node: 9 }).is_err());
        assert_eq!(m, before);
    }

    #[test]
    fn draining_is_sticky_against_the_detector() {
        let mut m = ClusterMap::default();
        m.apply(&MapChange::AddNode {
            node: advert(1, 1),
            at_ms: 0,
            joining: false,
        })
        .unwrap();
        m.apply(&MapChange::Drain { node: 1 }).unwrap();
        for s in [NodeState::Down, NodeState::Up] {
            m.apply(&MapChange::SetState {
                node: 1,
                state: s,
                at_ms: 1,
            })
            .unwrap();
            assert_eq!(m.nodes[&1].state, s);
            assert!(m.nodes[&1].draining, "drain survives down/up");
        }
        m.apply(&MapChange::AddNode {
            node: advert(1, 1),
            at_ms: 2,
            joining: false,
        })
        .unwrap();
        assert!(m.nodes[&1].draining, "drain survives a re-announcement");
    }

    #[test]
    fn certificates_are_known_while_their_node_is_in_the_map() {
        let mut m = ClusterMap::default();
        m.apply(&MapChange::AddNode {
            node: advert(1, 1),
            at_ms: 0,
            joining: false,
        })
        .unwrap();
        let fp = format!("{:064x}", 1);
        assert!(m.knows_cert(&fp));
        assert!(!m.knows_cert(""));
        // A re-announcement without a certificate keeps it.
        let mut again = advert(1, 1);
        again.cert.clear();
        m.apply(&MapChange::AddNode {
            node: again,
            at_ms: 1,
            joining: false,
        })
        .unwrap();
        assert!(m.knows_cert(&fp));
        m.apply(&MapChange::Remove { node: 1 }).unwrap();
        assert!(
            !m.knows_cert(&fp),
            "a removed node's certificate is refused"
        );
    }
}
