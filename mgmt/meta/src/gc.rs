//! The collector's epoch: what lets a node delete a chunk no manifest references
//! without ever taking one that a write still in flight is about to commit.
//!
//! Why an epoch in the log, not a time: a chunk written but not yet committed looks
//! exactly like garbage. A grace period by the clock only guesses how long a write
//! can take. Instead every mutation that makes new chunks part of the metadata
//! (`PutObject`, `PutPart`, `MoveFragments`) says in which epoch its chunks were
//! written (`written_in`, read from the writer's local metadata before the first
//! chunk goes out), and the state machine refuses it once the epoch has advanced
//! twice since ([`MetaError::WriteExpired`]). The collector advances the epoch
//! through the log at most once per interval ([`Mutation::AdvanceGcEpoch`], a
//! compare-and-set, so a cluster of collectors advances it once). A chunk the
//! collector saw unreferenced after a read barrier at epoch `e`, and still sees
//! unreferenced, unchanged, once its local metadata is at epoch `e + 2`, can never
//! be referenced again: any write that made it started at an epoch `<= e`, and its
//! commit, if it had been applied before the advance, would be visible; applied
//! after, it is refused. The delete itself names the chunk's version, so a chunk
//! written again under the same id since (repair reuses ids) is kept.
//!
//! A write therefore has at least one interval (an hour by default) from its first
//! chunk to its commit; one that takes longer fails cleanly and frees what it
//! wrote, and the client retries.

use crate::{Applied, MetaError, SYSTEM};
use redb::ReadableTable;

const KEY: &str = "gc.epoch";

/// The collector's epoch and when it last advanced (by the proposer's clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GcEpoch {
    pub epoch: u64,
    pub advanced_ms: i64,
}

pub(crate) fn read<T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
) -> Result<GcEpoch, MetaError> {
    match t.get(KEY)? {
        Some(v) => Ok(serde_json::from_slice(v.value())?),
        None => Ok(GcEpoch::default()),
    }
}

/// Refuses a mutation whose chunks were written two or more epochs ago.
pub(crate) fn check_written_in(
    tx: &redb::WriteTransaction,
    written_in: Option<u64>,
) -> Result<(), MetaError> {
    let Some(w) = written_in else {
        return Ok(());
    };
    let now = read(&tx.open_table(SYSTEM)?)?.epoch;
    if w.saturating_add(1) < now {
        return Err(MetaError::WriteExpired {
            written_in: w,
            epoch: now,
        });
    }
    Ok(())
}

/// Advances the epoch from `from` to `from + 1` if it is still `from` and at least
/// `min_interval_ms` passed since the last advance; otherwise changes nothing and
/// fails with `PreconditionFailed` (another collector advanced it, or too soon).
pub(crate) fn advance(
    tx: &redb::WriteTransaction,
    from: u64,
    now_ms: i64,
    min_interval_ms: i64,
) -> Result<Applied, MetaError> {
    let mut t = tx.open_table(SYSTEM)?;
    let cur = read(&t)?;
    if cur.epoch != from || now_ms.saturating_sub(cur.advanced_ms) < min_interval_ms {
        return Err(MetaError::PreconditionFailed);
    }
    let next = GcEpoch {
        epoch: from + 1,
        advanced_ms: now_ms,
    };
    t.insert(KEY, serde_json::to_vec(&next)?.as_slice())?;
    Ok(Applied::default())
}
