//! One drive's chunk store: a Haystack-style, checksummed log of chunk records.
//!
//! A [`ChunkStore`] owns one drive's [`QueuePair`](cairn_blockdev::QueuePair) and its in-memory index
//! (chunk id -> segment, offset, length, seq, tenant). It is owned by exactly one
//! reactor thread and is not `Sync`; nothing in it locks. On disk: a superblock,
//! then fixed-size segments; each segment is filled by group-committed batches of
//! self-describing records (puts and tombstones) and, when full, sealed with a
//! summary so the index rebuilds at open without reading payloads. The byte layout
//! is in [`format`] and datapath-spdk/README.md.
//!
//! Damage found at open costs as little as the format allows (see `recovery.rs`):
//! a bad batch followed by valid ones is skipped and every record in it whose own
//! checksums verify is kept, so one flipped byte costs at most the chunk it hit
//! (which then reads as `NotFound`, for the layer above to repair from other
//! drives); of a bad last batch with nothing valid after it (a torn write, or
//! damage) every record that verifies is kept too. A clean close seals the open
//! segment, so nothing acknowledged is ever in an unsealed tail after a clean stop. Segments whose header, summary or footer is damaged
//! are rescanned rather than freed. What was found is logged and counted in
//! [`Report`].
//!
//! Space: the last two free segments are a reserve that puts never take: one for
//! compaction's target, one for tombstones, so deletes succeed on a full drive.
//! Puts get `NoSpace` before the reserve is touched (and [`Report::full`] says so);
//! a segment opened from the reserve for tombstones takes no puts until compaction
//! (run on demand by the next write) has made the reserve whole again, which it
//! does by releasing the segments whose chunks were deleted.
//!
//! What it must never do: acknowledge a write before it is durable (every batch is
//! one FUA write and callers get results only after it completes); return bytes
//! whose checksums or identity (chunk id, tenant) do not verify (they are reported
//! as [`StoreError::Corrupt`]); serve one tenant's chunk to another (that is
//! [`StoreError::NotFound`]); rewrite a block that holds acknowledged data (batches
//! are block-padded and appended; segments are reused only after being freed
//! durably); or panic on anything read from the device.

mod compact;
mod flight;
pub mod format;
mod recovery;
mod store;
mod write;

pub use flight::Ticket;
pub use format::{Probe, Superblock};
pub use store::{ChunkStore, FormatParams, Report, WriteOp, WriteOutcome};

/// Errors of the chunk store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such chunk, or it belongs to another tenant.
    #[error("chunk not found")]
    NotFound,
    /// Stored bytes failed verification; they are never returned as data.
    #[error("corrupt chunk: {0}")]
    Corrupt(String),
    /// No free segment and nothing to compact.
    #[error("no space left on the drive")]
    NoSpace,
    /// A payload larger than a segment can hold.
    #[error("chunk of {0} bytes exceeds the largest storable ({1})")]
    TooLarge(usize, usize),
    /// The chunk id exists and belongs to another tenant.
    #[error("chunk id is in use by another tenant")]
    TenantConflict,
    /// An on-disk structure does not parse (also the parsers' error).
    #[error("malformed on-disk structure: {0}")]
    Malformed(&'static str),
    /// Block 0 holds something that is not a Cairn superblock: never formatted over.
    #[error("device holds a foreign or damaged superblock")]
    Foreign,
    /// Block 0 is blank: the device was never formatted.
    #[error("device is not formatted")]
    NotFormatted,
    /// The superblock does not describe this device.
    #[error("superblock mismatch: {0}")]
    Mismatch(String),
    /// The device failed an I/O.
    #[error("I/O error: {0}")]
    Io(#[from] cairn_blockdev::BlockError),
    /// An earlier I/O error failed the store; it serves nothing more.
    #[error("store failed: {0}")]
    Failed(String),
}

/// Result of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
