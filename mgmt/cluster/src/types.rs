//! What the Raft log carries, and openraft's type configuration.

use crate::map::MapChange;
use cairn_meta::{Applied, MetaError, Mutation, Proposal};
use cairn_pki::Secrets;
use serde::{Deserialize, Serialize};

/// One entry of the cluster's log: a metadata change or a map change. Both kinds
/// share one log so that, e.g., a manifest naming a drive can never be ordered
/// before the map change that created the drive.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Command {
    /// A metadata change without a request id (logs written before request ids).
    Meta(Mutation),
    /// A metadata change applied at most once under its request id.
    MetaOnce(Proposal),
    Map(MapChange),
    /// The cluster CA and join secret, replicated so that whichever node leads can
    /// admit a joiner. They travel only between certified members and are never
    /// shown by the map or status.
    Secrets(Secrets),
}

/// Why the node a proposal was forwarded to did not answer with an outcome; typed
/// so that the proposer can tell "not appended anywhere" from "may be in the log".
#[derive(Clone, Debug, Serialize, Deserialize, thiserror::Error)]
pub enum ProposeRefused {
    /// That node is not the leader: it appended nothing.
    #[error("not the leader")]
    NotLeader,
    /// Raft failed after accepting the entry, or for a reason that does not say
    /// whether it was appended.
    #[error("raft: {0}")]
    Raft(String),
}

/// What applying a [`Command`] produced, returned to the proposer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Outcome {
    Meta(Result<Applied, MetaError>),
    /// The map epoch after the change, or why it was refused.
    Map(Result<u64, String>),
    /// Blank and membership entries.
    None,
}

openraft::declare_raft_types!(
    /// Cairn's Raft types.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Vec<u8>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<u64>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type Vote = openraft::Vote<u64>;
pub type StorageError = openraft::StorageError<u64>;
pub type StoredMembership = openraft::StoredMembership<u64, openraft::BasicNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<u64, openraft::BasicNode>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
