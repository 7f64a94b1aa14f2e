//! When a voter campaigns: elections behind a pre-vote.
//!
//! openraft 0.9 campaigns as soon as a follower's election timer fires, so a node
//! cut off from the others raises its term again and again, and when the partition
//! heals the first reply it sends carries that term and makes the leader step down
//! (openraft#1770): seconds without a leader, on a cluster that was fine. The fix
//! upstream, `enable_pre_vote`, exists only in 0.10, which is not released. So
//! openraft's own timer is off (`enable_elect: false`) and this module decides when
//! to campaign, the way Raft's pre-vote does (Ongaro's thesis, 9.6):
//!
//! - A voter that has not heard from a leader for an election timeout (random in
//!   2–3 s, drawn again after each try) asks every other voter whether it would vote
//!   for it (`/raft/prevote`). Nothing changes state on either side.
//! - A voter says yes only if it is not the leader, has not heard from a leader for
//!   openraft's leader lease (2 s: sooner, openraft itself would refuse the real
//!   vote), and the candidate's log is at least as up to date as its own.
//! - Only with a yes from a quorum of every voter configuration (itself included)
//!   does the candidate trigger openraft's election, which raises its term.
//!
//! A node that cannot win therefore never raises its term: a minority keeps the term
//! it had, and rejoins the majority's leader when the partition heals. A peer that
//! predates this endpoint (404, during a rolling upgrade) counts as a yes: it still
//! campaigns on its own timer, as before.

use crate::types::LogId;
use crate::{Cluster, NodeId};
use openraft::ServerState;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// openraft's election timeout range, which this module now applies.
pub(crate) const ELECTION_MIN: Duration = Duration::from_millis(1000);
pub(crate) const ELECTION_MAX: Duration = Duration::from_millis(2000);
/// How long a candidate waits for each voter's answer.
const PREVOTE_TIMEOUT: Duration = Duration::from_millis(500);
const TICK: Duration = Duration::from_millis(100);

/// "Would you vote for me?"
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct PreVote {
    pub candidate: NodeId,
    pub last_log_id: Option<LogId>,
}

/// How long a voter keeps to the leader it heard from: openraft refuses a real
/// vote for this long after the leader last spoke (its leader lease, which is its
/// `election_timeout_max`), so a pre-vote granted any sooner would start an
/// election the voters then refuse, and the candidates would split the next term.
pub(crate) const LEADER_LEASE: Duration = ELECTION_MAX;

/// A candidate's wait without a leader before it asks: past the lease, plus a
/// random spread so that one voter usually asks first.
fn election_timeout() -> Duration {
    let span = (ELECTION_MAX - ELECTION_MIN).as_millis() as u64;
    LEADER_LEASE + Duration::from_millis(rand::random::<u64>() % span.max(1))
}

impl Cluster {
    /// Records that a leader this node accepts spoke to it (an append or a snapshot
    /// it did not refuse for a higher term).
    pub(crate) fn heard_from_leader(&self) {
        *self
            .leader_contact
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn since_leader(&self) -> Duration {
        self.leader_contact
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    /// This node's answer to a pre-vote.
    pub(crate) fn grant_prevote(&self, req: &PreVote) -> bool {
        let leading = self.raft.metrics().borrow().state == ServerState::Leader;
        let mine = self.log.last_log_id().ok().flatten();
        let grant = !leading && self.since_leader() >= LEADER_LEASE && req.last_log_id >= mine;
        tracing::debug!(candidate = %format!("{:016x}", req.candidate), grant, leading,
            ?mine, theirs = ?req.last_log_id, "pre-vote");
        grant
    }

    /// Runs the election timer for as long as this node's Raft lives.
    pub(crate) fn spawn_elections(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut timeout = election_timeout();
            let mut next_try = Instant::now();
            loop {
                tick.tick().await;
                let Some(me) = weak.upgrade() else { return };
                let (state, configs) = {
                    let m = me.raft.metrics().borrow().clone();
                    let configs: Vec<BTreeSet<NodeId>> =
                        m.membership_config.membership().get_joint_config().clone();
                    (m.state, configs)
                };
                if state == ServerState::Shutdown {
                    return;
                }
                if state == ServerState::Leader {
                    me.heard_from_leader();
                    continue;
                }
                if !configs.iter().any(|c| c.contains(&me.id)) {
                    continue; // a learner never campaigns
                }
                let alone = configs.iter().all(|c| c.len() == 1);
                // The only voter needs nobody's leave, and waiting would only delay
                // a single node's start; but one try at a time (an election in
                // progress is not started over on the next tick).
                if Instant::now() < next_try || (!alone && me.since_leader() < timeout) {
                    continue;
                }
                // A leader may have won while the pre-vote waited for slow or
                // unreachable voters (up to PREVOTE_TIMEOUT): campaigning then would
                // unseat it, so ask again whether one has spoken since.
                if alone || (me.prevote_quorum(&configs).await && me.since_leader() >= LEADER_LEASE)
                {
                    tracing::info!("election timeout passed and a quorum would vote: campaigning");
                    if let Err(e) = me.raft.trigger().elect().await {
                        tracing::warn!("election: {e}");
                        return;
                    }
                }
                timeout = election_timeout();
                next_try = Instant::now() + timeout;
            }
        });
    }

    /// Asks every other voter; true if a quorum of every configuration says yes.
    async fn prevote_quorum(self: &Arc<Self>, configs: &[BTreeSet<NodeId>]) -> bool {
        let Ok(client) = self.transport.client() else {
            return false;
        };
        let req = PreVote {
            candidate: self.id,
            last_log_id: match self.log.last_log_id() {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("pre-vote: reading the log: {e}");
                    return false;
                }
            },
        };
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let peers: BTreeSet<NodeId> = configs.iter().flatten().copied().collect();
        let mut asks = tokio::task::JoinSet::new();
        for p in peers.into_iter().filter(|&p| p != self.id) {
            let Some(node) = membership.membership().get_node(&p) else {
                continue;
            };
            let ask = client
                .post(
                    self.transport
                        .url(&node.addr, &format!("/raft/prevote?to={p}")),
                )
                .timeout(PREVOTE_TIMEOUT)
                .json(&req);
            asks.spawn(async move {
                let yes = match ask.send().await {
                    // A peer from before pre-votes: it campaigns on its own timer.
                    Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => true,
                    Ok(r) if r.status().is_success() => r.json::<bool>().await.unwrap_or(false),
                    _ => false,
                };
                (p, yes)
            });
        }
        let mut granted = BTreeSet::new();
        while let Some(answer) = asks.join_next().await {
            if let Ok((p, true)) = answer {
                granted.insert(p);
            }
        }
        granted.insert(self.id);
        let quorum = configs
            .iter()
            .all(|c| c.iter().filter(|v| granted.contains(v)).count() * 2 > c.len());
        tracing::debug!(?granted, quorum, "pre-vote");
        quorum
    }
}
