//! Reads: the read barrier that makes a read on any node see every write
//! acknowledged before it.

use crate::error::raft_err;
use crate::{Cluster, ClusterError};
use openraft::error::RaftError;
use std::time::{Duration, Instant};

impl Cluster {
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

    pub(crate) async fn wait_applied(
        &self,
        index: u64,
        deadline: Instant,
    ) -> Result<(), ClusterError> {
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
}
