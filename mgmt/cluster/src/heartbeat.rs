//! The background duties: every node reports to the leader; the leader marks
//! the nodes it has not heard from down and manages the voters (see `voters`).

use crate::node::now_ms;
use crate::{Cluster, ClusterError, MapChange, NodeState};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Cluster {
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
                    // every node up gets a fresh grace period. A node down (or a
                    // joiner not ready yet) must report to be up again: taking it
                    // for seen would mark it up untried.
                    let now = Instant::now();
                    let mut seen = me.seen.lock().unwrap_or_else(|e| e.into_inner());
                    for n in me.map().nodes.values() {
                        if n.state == NodeState::Up {
                            seen.insert(n.id, now);
                        }
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
                } else if !me.reporting.load(std::sync::atomic::Ordering::Relaxed) {
                    // A joiner not ready to take data yet (see `ready`).
                } else if let Err(e) = me.report().await {
                    tracing::debug!("heartbeat: {e}");
                }
            }
        });
    }

    /// Whether this node holds its reports (a joiner not yet ready for data).
    pub fn reports_held(&self) -> bool {
        !self.reporting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This node is ready to take data: it reports to the leader again, which
    /// marks it up (and peers then route to it).
    pub fn ready(&self) {
        if self.reports_held() {
            tracing::info!("this node's chunk service trusts the cluster: reporting as up");
        }
        self.reporting
            .store(true, std::sync::atomic::Ordering::Relaxed);
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
}
