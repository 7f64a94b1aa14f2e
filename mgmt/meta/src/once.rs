//! At-most-once application: request ids, the window of applied requests, and the
//! three outcomes a proposer can learn.
//!
//! Why: a proposer that loses its answer (a forward to the Raft leader times out, a
//! connection resets, a leader changes between append and commit) does not know
//! whether its mutation committed. Retrying blindly could apply it twice, and
//! freeing what it wrote could leave a committed manifest pointing at deleted
//! chunks. So every proposal carries a [`RequestId`]; the state machine records the
//! outcome of each id it applies (in the same transaction as the mutation) and
//! answers a repeat with the first outcome instead of applying again. A proposer
//! left with [`Commit::Unknown`] settles it with [`Mutation::Fence`] under the same
//! id: if the original committed, the fence returns its outcome; if not, the fence
//! takes the id first, and the original, should it ever reach the log later, is
//! refused as [`MetaError::Fenced`].
//!
//! The window is bounded by count ([`REQUEST_WINDOW`]), evicted oldest first by
//! the order of application, so every replica evicts the same ids.

use crate::{Applied, MetaError, Mutation};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

/// request id (16 bytes, big-endian) -> (application order, outcome as JSON)
pub(crate) const REQUESTS: TableDefinition<&[u8], (u64, &[u8])> = TableDefinition::new("requests");
/// application order -> request id, for eviction oldest first.
pub(crate) const REQUEST_ORDER: TableDefinition<u64, &[u8]> = TableDefinition::new("request_order");

/// Applied requests remembered. A retry or fence arrives within seconds of the
/// original; 100 000 ids cover minutes of a busy node's writes at a few MB of
/// metadata.
pub const REQUEST_WINDOW: u64 = 100_000;

/// Identifies one logical mutation across retries and forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RequestId(pub u128);

impl RequestId {
    /// A fresh random id (128 bits: collisions are not a practical concern).
    pub fn random() -> RequestId {
        RequestId(rand::random())
    }

    fn key(&self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A mutation under its request id: what a proposer hands to a [`crate::MetaLog`].
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Proposal {
    pub request: RequestId,
    pub mutation: Mutation,
}

impl Proposal {
    pub fn new(mutation: Mutation) -> Proposal {
        Proposal {
            request: RequestId::random(),
            mutation,
        }
    }

    /// The fence that settles the outcome of the proposal made under `request`.
    pub fn fence(request: RequestId) -> Proposal {
        Proposal {
            request,
            mutation: Mutation::Fence,
        }
    }
}

/// What a proposer learns. Only `Committed` and `Rejected` are answers; `Unknown`
/// means the mutation may yet be (or already have been) applied, so nothing it
/// would free and nothing it wrote may be freed on the strength of it.
#[derive(Debug)]
pub enum Commit {
    /// Applied, durably (in a cluster: committed by a quorum and applied here).
    Committed(Applied),
    /// Definitely not applied, and never will be under this request id.
    Rejected(MetaError),
    /// The answer was lost; see [`Proposal::fence`].
    Unknown(String),
}

/// Applies `m` under `request` inside `tx`: a request already in the window gets
/// its recorded outcome and nothing is applied again.
pub(crate) fn apply_once(
    tx: &redb::WriteTransaction,
    request: Option<RequestId>,
    m: &Mutation,
) -> Result<Applied, MetaError> {
    let Some(request) = request else {
        return crate::apply(tx, m);
    };
    let key = request.key();
    let seen = {
        let requests = tx.open_table(REQUESTS)?;
        let v = requests.get(key.as_slice())?;
        v.map(|v| v.value().1.to_vec())
    };
    if let Some(outcome) = seen {
        return serde_json::from_slice::<Result<Applied, MetaError>>(&outcome)?;
    }
    let outcome = match m {
        Mutation::Fence => Err(MetaError::Fenced),
        m => crate::apply(tx, m),
    };
    let mut order = tx.open_table(REQUEST_ORDER)?;
    let seq = order.last()?.map(|(k, _)| k.value() + 1).unwrap_or(0);
    let mut requests = tx.open_table(REQUESTS)?;
    requests.insert(
        key.as_slice(),
        (seq, serde_json::to_vec(&outcome)?.as_slice()),
    )?;
    order.insert(seq, key.as_slice())?;
    while order.len()? > REQUEST_WINDOW {
        let Some((_, old)) = order.pop_first()? else {
            break;
        };
        requests.remove(old.value())?;
    }
    outcome
}
