//! Raft's RPCs over the internal HTTP API (HTTPS with mutual TLS once the node has
//! its certificate). Bodies are JSON; a snapshot travels as one request whose body
//! is a length-prefixed JSON header followed by the raw snapshot bytes.

use crate::types::{Snapshot, SnapshotMeta, TypeConfig, Vote};
use crate::Transport;
use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{de::DeserializeOwned, Serialize};
use std::future::Future;
use std::sync::Arc;

/// Makes one [`Conn`] per peer.
#[derive(Clone, Debug)]
pub struct Network {
    pub(crate) transport: Arc<Transport>,
}

/// RPCs to one peer.
#[derive(Debug)]
pub struct Conn {
    transport: Arc<Transport>,
    addr: String,
    /// The node the RPCs are for: the receiver refuses RPCs meant for another id, so
    /// a replacement node at a former member's address is never taken for it.
    target: u64,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Conn;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Conn {
        Conn {
            transport: self.transport.clone(),
            addr: node.addr.clone(),
            target,
        }
    }
}

/// The header of a snapshot request.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct SnapshotHeader {
    pub vote: Vote,
    pub meta: SnapshotMeta,
}

impl Conn {
    async fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64>>> {
        let client = self
            .transport
            .client()
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let resp = client
            .post(
                self.transport
                    .url(&self.addr, &format!("{path}?to={}", self.target)),
            )
            .timeout(option.hard_ttl())
            .json(req)
            .send()
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        if !resp.status().is_success() {
            let e = std::io::Error::other(format!("{path}: HTTP {}", resp.status()));
            // Another node answers at this address (the target was replaced): back
            // off as from an unreachable node instead of retrying at once.
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        let body: Result<Resp, RaftError<u64>> = resp
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        body.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(0, e)))
    }
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.post("/raft/append", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.post("/raft/vote", &rpc, &option).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<TypeConfig, Fatal<u64>>> {
        let header = serde_json::to_vec(&SnapshotHeader {
            vote,
            meta: snapshot.meta.clone(),
        })
        .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let mut body = Vec::with_capacity(4 + header.len() + snapshot.snapshot.len());
        body.extend_from_slice(&(header.len() as u32).to_be_bytes());
        body.extend_from_slice(&header);
        body.extend_from_slice(&snapshot.snapshot);
        let client = self
            .transport
            .client()
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?;
        let resp = client
            .post(
                self.transport
                    .url(&self.addr, &format!("/raft/snapshot?to={}", self.target)),
            )
            .timeout(option.hard_ttl().max(std::time::Duration::from_secs(60)))
            .body(body)
            .send()
            .await
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?;
        if !resp.status().is_success() {
            let e = std::io::Error::other(format!("snapshot: HTTP {}", resp.status()));
            return Err(StreamingError::Network(NetworkError::new(&e)));
        }
        let r: Result<SnapshotResponse<u64>, Fatal<u64>> = resp
            .json()
            .await
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        r.map_err(|e| StreamingError::RemoteError(openraft::error::RemoteError::new(0, e)))
    }
}
