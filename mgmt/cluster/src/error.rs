//! The layer's errors, and how they reach the metadata store.

use cairn_meta::MetaError;

/// Errors of the cluster layer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("no quorum: {0}")]
    NoQuorum(String),
    /// A proposal may have been appended to a leader's log, but its outcome was
    /// lost (a timeout or reset after sending, a leader change before commit).
    #[error("outcome unknown: {0}")]
    Unknown(String),
    #[error("this node is not part of a cluster")]
    NotMember,
    #[error("this node is already part of cluster {0}")]
    AlreadyMember(String),
    #[error("join refused: {0}")]
    JoinRefused(String),
    #[error("peer {peer}: {msg}")]
    Peer { peer: String, msg: String },
    /// Another membership change is still in flight; try again shortly.
    #[error("a membership change is already in progress: {0}")]
    Busy(String),
    #[error("the map change was refused: {0}")]
    Refused(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("state directory: {0}")]
    State(String),
    #[error("certificates: {0}")]
    Pki(String),
    #[error("master key: {0}")]
    MasterKey(#[from] cairn_envelope::EnvelopeError),
    #[error("this node has no certificate yet: it reaches peers only once it has created or joined a cluster")]
    NotCertified,
}

impl From<cairn_pki::PkiError> for ClusterError {
    fn from(e: cairn_pki::PkiError) -> ClusterError {
        use cairn_pki::PkiError::*;
        match e {
            // What a joiner sent: the join is refused, not the node's PKI broken.
            BadPublicKey | MalformedToken | WrongToken => ClusterError::JoinRefused(e.to_string()),
            e => ClusterError::Pki(e.to_string()),
        }
    }
}

impl From<ClusterError> for MetaError {
    fn from(e: ClusterError) -> MetaError {
        MetaError::Unavailable(e.to_string())
    }
}

pub(crate) fn raft_err<E: std::fmt::Display>(e: E) -> ClusterError {
    ClusterError::Raft(e.to_string())
}

/// A reqwest error with its causes (the TLS reason is usually two levels down).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
