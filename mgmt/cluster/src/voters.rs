//! Which nodes vote: the leader keeps the group at its size with nodes that are up,
//! and an operator removes a node for good.

use crate::error::raft_err;
use crate::node::now_ms;
use crate::{Cluster, ClusterError, MapChange, NodeId, NodeState};
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use std::collections::BTreeSet;
use std::time::Duration;

/// Most voters the Raft group keeps; the rest of the nodes are learners.
pub const MAX_VOTERS: usize = 5;

/// How long an operator's membership change waits for one already in flight.
const CHANGE_WAIT: Duration = Duration::from_secs(15);

impl Cluster {
    /// Removes a node from the map and from the Raft group. A membership change
    /// already in flight (a join, a promotion by [`Cluster::manage_voters`]) is
    /// waited out for up to [`CHANGE_WAIT`]: an operator's remove right after a
    /// join is ordinary, not an error.
    pub async fn remove_node(&self, node: NodeId) -> Result<(), ClusterError> {
        let deadline = tokio::time::Instant::now() + CHANGE_WAIT;
        loop {
            match self.try_remove_node(node).await {
                Err(ClusterError::Busy(why)) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(ClusterError::Busy(why));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                done => return done,
            }
        }
    }

    async fn try_remove_node(&self, node: NodeId) -> Result<(), ClusterError> {
        // Read afresh each try: a change that just committed may have made the
        // node a voter (or a learner) since the last one.
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
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                ChangeMembershipError::InProgress(p),
            ))) => Err(ClusterError::Busy(p.to_string())),
            Err(e) => Err(raft_err(e)),
        }
    }

    /// Keeps up to [`MAX_VOTERS`] voters, preferring nodes that are up: a voter down
    /// for three detector periods is replaced by an up learner, and learners are
    /// promoted while there are fewer voters than that.
    pub(crate) async fn manage_voters(&self) -> Result<(), ClusterError> {
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
}
