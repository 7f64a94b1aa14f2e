//! Writes: every proposal goes through the leader, and an outcome that may have
//! been lost on the way is reported as unknown, never as refused.

use crate::{Cluster, ClusterError, Command, MapChange, Outcome, ProposeRefused};
use cairn_meta::{Commit, MetaError, Proposal};
use openraft::error::{ClientWriteError, RaftError};
use std::time::{Duration, Instant};

/// How long a proposal is retried (and one forward waited for).
const PROPOSE_DEADLINE: Duration = Duration::from_secs(10);

/// Why a forward to the leader produced no outcome.
enum Forward {
    /// The leader never got the command.
    NotSent(ClusterError),
    /// It may have been appended to the leader's log.
    MaybeAppended(ClusterError),
}

impl Cluster {
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
            self.crash_mid_commit();
            let err = match self.raft.client_write(cmd.clone()).await {
                Ok(resp) => return Ok(resp.data),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                    match f.leader_node {
                        Some(node) => match self.forward(&node.addr, &cmd).await {
                            Ok((o, index)) => {
                                self.caught_up_to(index, deadline).await;
                                return Ok(o);
                            }
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

    /// Failpoint: when this node leads, it dies a few milliseconds after taking
    /// the entry into its log, while it replicates (a leader change between append
    /// and commit: the entry may or may not survive the election).
    pub(crate) fn crash_mid_commit(&self) {
        fail::fail_point!("cluster::leader-crash-mid-commit", |_| {
            if self.is_leader() {
                tracing::warn!("failpoint cluster::leader-crash-mid-commit fired: aborting soon");
                std::thread::spawn(|| {
                    std::thread::sleep(Duration::from_millis(rand::random::<u64>() % 20));
                    std::process::abort();
                });
            }
        });
    }

    /// Waits until this member has applied what the leader applied a forwarded
    /// command at (`None`: a leader that does not say; a read barrier then), so
    /// a write through any member is applied there when it is answered, as a
    /// leader's own is. The command is committed either way: a member that
    /// cannot catch up in time says so in its log and answers all the same.
    async fn caught_up_to(&self, index: Option<u64>, deadline: Instant) {
        let r = match index {
            Some(i) => self.wait_applied(i, deadline).await,
            None => self.read_barrier().await,
        };
        if let Err(e) = r {
            tracing::warn!("a forwarded write committed but is not applied here yet: {e}");
        }
    }

    async fn forward(&self, addr: &str, cmd: &Command) -> Result<(Outcome, Option<u64>), Forward> {
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
        // The connection reset before the leader read the request: to the proposer
        // this looks like a reset after it, so it may have been appended.
        fail::fail_point!("cluster::forward-reset-before-send", |_| {
            tracing::warn!("failpoint cluster::forward-reset-before-send fired");
            Err(Forward::MaybeAppended(ClusterError::Peer {
                peer: addr.to_string(),
                msg: "injected: connection reset before the leader read it".into(),
            }))
        });
        let answer = client
            .post(self.transport.url(addr, "/cluster/propose"))
            .timeout(PROPOSE_DEADLINE)
            .json(cmd)
            .send()
            .await
            .map_err(peer)?;
        let index = answer
            .headers()
            .get(crate::routes::APPLIED_INDEX)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let r: Result<Outcome, ProposeRefused> = answer.json().await.map_err(peer)?;
        // The leader has answered: losing the answer now is "timed out after the
        // leader committed".
        fail::fail_point!("cluster::forward-reply-lost", |_| {
            tracing::warn!("failpoint cluster::forward-reply-lost fired");
            Err(Forward::MaybeAppended(ClusterError::Peer {
                peer: addr.to_string(),
                msg: "injected: the leader's answer was lost".into(),
            }))
        });
        r.map(|o| (o, index)).map_err(|refused| {
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

    fn leads(&self) -> bool {
        self.is_leader()
    }
}
