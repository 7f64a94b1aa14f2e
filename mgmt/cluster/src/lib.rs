//! The cluster: membership, the cluster map and replicated metadata.
//!
//! One Raft group (openraft) carries every metadata mutation and every map change
//! in one log. Voters are up to five nodes; every other node is a learner, so every
//! node holds a full, current replica of the metadata and the map and serves reads
//! from it after a read barrier (the leader confirms its commit index; the reader
//! waits until it has applied that far). Writes are forwarded to the leader. A
//! minority partition therefore cannot commit anything: it cannot elect a leader,
//! and a stale leader cannot confirm its commit index.
//!
//! This crate never touches object bytes, and never decides placement: it only
//! orders and replicates decisions made by the layers above.
//!
//! The modules follow the layer's concerns, so each can be read on its own:
//! `node` (this node's id, Raft instance and applied map), `transport` (its TLS
//! identity and peer connections), `join` (creating a cluster or entering one),
//! `propose` and `barrier` (writes and reads through the leader), `election`
//! (when a voter campaigns: after a pre-vote), `heartbeat`
//! and `voters` (the background duties: reports, failure detection, voter
//! management), `status` (the view for operators), and `routes` and `internal`
//! (the API members speak to each other).

mod barrier;
mod election;
mod error;
mod heartbeat;
mod internal;
mod join;
mod log_store;
pub mod map;
mod network;
mod node;
mod propose;
mod routes;
mod state_machine;
mod status;
mod transport;
mod types;
mod voters;

pub use error::ClusterError;
pub use join::{JoinReply, JoinRequest};
pub use map::{
    ClusterMap, DriveRecord, MapChange, NodeAdvert, NodeId, NodeRecord, NodeState, Protection,
};
pub use node::{Cluster, ClusterConfig};
pub use status::RaftStatus;
pub use transport::{Certified, Transport};
pub use types::{Command, Outcome, ProposeRefused};
pub use voters::MAX_VOTERS;
