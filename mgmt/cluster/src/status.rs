//! Raft's view of the group, for status.

use crate::{Cluster, NodeId};
use serde::Serialize;
use std::collections::BTreeSet;

/// Raft's view, for status.
#[derive(Clone, Debug, Serialize)]
pub struct RaftStatus {
    pub node_id: NodeId,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    pub last_applied: u64,
    /// The last entry in this node's log (appended, maybe not yet committed).
    pub last_log_index: u64,
    /// On the leader only: each member's log index known to match the leader's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matched: Vec<(NodeId, u64)>,
}

impl Cluster {
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
            last_log_index: m.last_log_index.unwrap_or(0),
            matched: m
                .replication
                .iter()
                .flatten()
                .map(|(id, log)| (*id, log.map(|l| l.index).unwrap_or(0)))
                .collect(),
        }
    }
}
