//! Cluster membership: `/v1/cluster/...`, behind `nodectl cluster ...` and
//! `nodectl node drain|remove`.

use crate::ProtectionReportView;
use serde::{Deserialize, Serialize};

/// One node in `cluster status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeView {
    /// The node id, 16 hex digits.
    pub id: String,
    /// `up` or `down`.
    pub state: String,
    pub draining: bool,
    pub voter: bool,
    pub leader: bool,
    pub s3: String,
    pub internal: String,
    pub domain: String,
    pub drives: usize,
    pub since_ms: i64,
}

/// `GET /v1/cluster/status`: the map, Raft, protection and repair as this member
/// sees them. A node not in a cluster yet answers with an empty `cluster_id`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub cluster_id: String,
    pub epoch: u64,
    pub this_node: String,
    pub leader: Option<String>,
    pub term: u64,
    pub protection: String,
    pub nodes: Vec<NodeView>,
    pub objects: ProtectionReportView,
    /// Every object has every fragment: nothing degraded or lost.
    pub fully_protected: bool,
    pub repair: RepairView,
}

/// Repair in `cluster status`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RepairView {
    /// This node's share, since it started.
    pub rebuilt_fragments: u64,
    pub rebuilt_bytes: u64,
    pub rate_mib_s: f64,
    /// Bytes still to rebuild, cluster-wide, divided by how fast they fell over the
    /// last 30 s; none while nothing falls.
    pub eta_seconds: Option<f64>,
    /// `idle` (nothing missing), `repairing` (bytes missing fall: see the ETA),
    /// `waiting` (they did not fall in the last 30 s: fragments on nodes down within
    /// their repair grace, or no drive can take them), `measuring` (too little
    /// history yet: ask again in a few seconds).
    #[serde(default)]
    pub state: String,
}

/// The body of `POST /v1/cluster/init`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct InitRequest {
    /// Default: random.
    pub cluster_id: Option<String>,
    /// `K+M`, default 4+2.
    pub ec: Option<String>,
    /// Copies of small objects, default 3.
    pub replicas: Option<u8>,
}

/// The body of `POST /v1/cluster/join`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JoinRequest {
    /// The internal address of any member.
    pub seed: String,
    pub token: String,
}

/// A join token, as `init`, `join` and `token` answer it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TokenReply {
    pub cluster_id: String,
    pub token: String,
}

/// The body of `POST /v1/cluster/drain` and `/v1/cluster/remove`. Drain answers
/// the map epoch that drains the node (a JSON number); remove answers `true`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeRequest {
    /// Node id (hex, or a unique prefix).
    pub node: String,
    /// Remove even if the node still holds fragments (remove only).
    #[serde(default)]
    pub force: bool,
}
