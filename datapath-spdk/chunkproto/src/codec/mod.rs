//! Encoding and decoding of frames. Decoding is total: any byte string either
//! yields a frame or a `ProtoError`, never a panic (fuzzed by `fuzz/chunkproto`).
//!
//! # Operations (all integers little-endian; `str` = `u16 len` + UTF-8 bytes)
//!
//! ```text
//! request                                   reply (after status 0)
//! 1 Put      drive u16, id [16], tenant u64,  1
//!            key u32, len u32, payload
//! 2 Get      drive u16, id [16], tenant u64   2, len u32, payload
//! 3 Delete   drive u16, id [16], tenant u64   3, existed u8
//! 4 Stat     drive u16, id [16], tenant u64   4, len u32, crc32c u32
//! 5 List     drive u16, after [16], limit u32 5, n u32, n x (id [16], tenant u64)
//! 6 DriveInfo    drive u16                    6, REPORT
//! 7 DriveDetails drive u16                    7, REPORT, ext_len u16, ext_len bytes
//!                                                of fields: tag u8, len u16, UTF-8
//! 8 ListVersions drive u16, after [16],       8, n u32, n x (id [16], tenant u64,
//!                limit u32                                     seq u64)
//! 9 DeleteVersion drive u16, id [16],         9, deleted u8
//!                tenant u64, seq u64
//! REPORT = drive u16, state u8 (0 healthy, 1 failed), capacity u64, live u64,
//!          allocated u64, chunks u64, reason str, device str
//! ```
//!
//! A failure is `status` (the [`FailureCode`](crate::FailureCode)), then `message str`.
//!
//! # Versioning of the drive report
//!
//! Replies are concatenated in a batch with no length per operation, so a field
//! appended to an existing reply would make every older decoder misread the rest of
//! the batch (and the health poller of an older mgmtd in the cluster would then see
//! every drive of this node as failed). So the `DriveInfo` reply (op 6) is frozen in
//! its version-1 layout, and what the drive *is* travels in a new operation,
//! `DriveDetails` (op 7), asked for only by clients that understand it. Its reply is
//! the same report followed by a length-prefixed block of tagged fields:
//!
//! | tag | field |
//! |---|---|
//! | 1 | backend (`uring`, `nvme`, `ram`) |
//! | 2 | location (path, or PCI address and namespace) |
//! | 3 | model |
//! | 4 | serial number |
//! | 5 | firmware revision |
//! | 6 | free segments (decimal) |
//! | 7 | reserve: free segments puts never take (decimal) |
//! | 8 | full: puts refused for lack of space (`0` or `1`) |
//! | 9 | segments found damaged at the last open (decimal) |
//! | 10 | corrupt batches found at the last open (decimal) |
//! | 11 | corrupt records (chunks known lost) at the last open (decimal) |
//! | 12 | records salvaged from damaged batches at the last open (decimal) |
//! | 13 | torn batches dropped at the last open (decimal) |
//!
//! Tags 6..=13 are decoded into [`DriveSpace`](crate::DriveSpace) (present when any
//! of them is; a number that does not parse is malformed; an older datapathd sends
//! none and an older client skips them). Every field is optional (absent =
//! unknown), unknown tags are skipped, so later
//! versions add tags without a new operation; a repeated tag, a field running past
//! the block or the block past the frame, or text that is not UTF-8 is malformed.
//! Compatibility: an old client never sends op 7 and reads op 6 as before; a new
//! client reads op 6 from anyone (the identity is then unknown). A new client
//! sending op 7 to a datapathd that predates it gets the connection closed
//! ("unknown opcode"), so mgmtd sends op 7 only to its own node's datapathd, which
//! is updated with it, never across the cluster.
//!
//! The code follows the table: the constants below are the wire's numbers, kept
//! together so the layout can be checked against them in one place; `frame` is
//! the header and the batch around the operations, `request` and `response` the
//! operations in each direction, `report` the drive report both replies share,
//! and `reader` the bounds-checked cursor every decoder reads through.

mod frame;
mod reader;
mod report;
mod request;
mod response;
#[cfg(test)]
mod tests;

pub use frame::{decode_frame, frame_len, Frame, FrameKind};
pub use request::encode_request_batch;
pub use response::encode_response_batch;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u8 = 1;
/// Largest frame accepted, header included: a batch of full stripes plus slack.
pub const MAX_FRAME: usize = 64 << 20;
/// Most operations in one batch.
pub const MAX_OPS: usize = 4096;
/// Most bytes of response frames one batch may be answered with (a reply larger
/// than a frame comes in several; see [`crate::Reassembly`]). The server refuses
/// the gets past it up front; the client gives up on a reply that passes it.
pub const MAX_BATCH_REPLY: usize = 1 << 30;

/// Bytes of a frame's header after its length field.
pub(crate) const HEADER: usize = 1 + 1 + 2 + 8;

const OP_PUT: u8 = 1;
const OP_GET: u8 = 2;
const OP_DELETE: u8 = 3;
const OP_STAT: u8 = 4;
const OP_LIST: u8 = 5;
const OP_DRIVE_INFO: u8 = 6;
const OP_DRIVE_DETAILS: u8 = 7;
const OP_LIST_VERSIONS: u8 = 8;
const OP_DELETE_VERSION: u8 = 9;
/// A put acknowledged before it is durable (see `Request::Put`).
const OP_PUT_WRITE_BACK: u8 = 10;

/// Tags of the `DriveDetails` reply's fields.
const TAG_BACKEND: u8 = 1;
const TAG_LOCATION: u8 = 2;
const TAG_MODEL: u8 = 3;
const TAG_SERIAL: u8 = 4;
const TAG_FIRMWARE: u8 = 5;
const TAG_FREE_SEGMENTS: u8 = 6;
const TAG_RESERVE_SEGMENTS: u8 = 7;
const TAG_FULL: u8 = 8;
const TAG_DAMAGED_SEGMENTS: u8 = 9;
const TAG_CORRUPT_BATCHES: u8 = 10;
const TAG_CORRUPT_RECORDS: u8 = 11;
const TAG_SALVAGED_RECORDS: u8 = 12;
const TAG_TORN_BATCHES: u8 = 13;
const TAG_FORMATTED_AT_OPEN: u8 = 14;
const TAG_DROPPED_SINCE_OPEN: u8 = 15;
const TAG_REACTOR: u8 = 16;
const TAG_REACTOR_BUSY_NS: u8 = 17;
const TAG_REACTOR_TURNS: u8 = 18;
const TAG_REACTOR_BATCHES: u8 = 19;
const TAG_REACTOR_OPS: u8 = 20;
const TAG_REACTOR_QUEUE_DEPTH: u8 = 21;
/// Longest string sent in a reply (reasons, device names, identity fields).
pub(crate) const MAX_TEXT: usize = 1024;

const STATUS_OK: u8 = 0;

pub(crate) fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
