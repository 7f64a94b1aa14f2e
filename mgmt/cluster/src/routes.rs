//! The internal API's routes: what members ask of each other (Raft RPCs,
//! forwarded proposals, read index, heartbeats) and the join a stranger may ask.

use crate::election::PreVote;
use crate::network::SnapshotHeader;
use crate::types::{self, Snapshot};
use crate::{Cluster, Command, JoinReply, JoinRequest, NodeId, Outcome, ProposeRefused};
use axum::extract::{Query, State};
use axum::routing::post;
use axum::Json;
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};
use serde::Deserialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Cluster {
    /// The internal API: Raft RPCs, proposals, read index, join and heartbeats. The
    /// caller serves it behind mTLS (only `/cluster/join` may be reached by a
    /// caller without a node certificate; it is guarded by the join token).
    pub fn router(self: &Arc<Self>) -> (axum::Router, axum::Router) {
        let members = axum::Router::new()
            .route("/raft/append", post(append))
            .route("/raft/vote", post(vote))
            .route("/raft/prevote", post(prevote))
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
    let resp = c.raft.append_entries(req).await;
    if matches!(&resp, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
        c.heard_from_leader();
    }
    Ok(Json(resp))
}

async fn prevote(State(c): Api, Query(to): Query<To>, Json(req): Json<PreVote>) -> Rpc<bool> {
    addressed(&c, &to)?;
    Ok(Json(c.grant_prevote(&req)))
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
    let resp = c.raft.install_full_snapshot(header.vote, snap).await;
    if resp.is_ok() {
        c.heard_from_leader();
    }
    Ok(Json(resp))
}

/// Header of a propose answer: the log index the command was applied at, so the
/// forwarding member can wait until it has applied that far too (a member that
/// predates it answers without; the forwarder then takes a read barrier).
pub(crate) const APPLIED_INDEX: &str = "x-cairn-applied-index";

async fn propose(
    State(c): Api,
    Json(cmd): Json<Command>,
) -> (
    [(&'static str, String); 1],
    Json<Result<Outcome, ProposeRefused>>,
) {
    // Only the leader answers; a forwarded proposal is not forwarded again.
    c.crash_mid_commit();
    let (index, r) = match c.raft.client_write(cmd).await {
        Ok(r) => (r.log_id.index.to_string(), Ok(r.data)),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
            (String::new(), Err(ProposeRefused::NotLeader))
        }
        Err(e) => (String::new(), Err(ProposeRefused::Raft(e.to_string()))),
    };
    ([(APPLIED_INDEX, index)], Json(r))
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
