//! The chunk service's wire protocol.
//!
//! `datapathd` serves chunks over TCP; `mgmtd` (and later the peers) call it. This
//! crate owns the frame format, its codec and an async client. It knows nothing of
//! objects, buckets or placement, and it must never trust a byte it decodes: every
//! length is checked against the frame before it is used, so a hostile peer can
//! only earn itself a closed connection.
//!
//! # Frame
//!
//! All integers are little-endian.
//!
//! ```text
//! u32 len          bytes that follow this field (at most MAX_FRAME)
//! u8  version      PROTOCOL_VERSION
//! u8  kind         1 = request batch, 2 = response batch
//! u16 count        operations in the batch
//! u64 request_id   echoed in the response; lets a connection pipeline batches
//! ... count operations
//! ```
//!
//! A batch amortises one round trip and one reactor wake-up over many chunks (all the
//! fragments of a stripe, say); responses come back in request order. A reply that
//! does not fit in one frame comes in several frames with the same request id, each
//! holding the next results (see [`Reassembly`]); a batch's whole reply is at most
//! [`MAX_BATCH_REPLY`] bytes.
//!
//! On the node-local listener, the connection first carries the key handshake of
//! [`auth`]; on the peer listener, a mutual TLS handshake ([`cairn_pki::tls`]).

pub mod auth;
mod client;
mod codec;
mod reply;

pub use client::ChunkClient;
pub use codec::{
    decode_frame, encode_request_batch, encode_response_batch, frame_len, Frame, FrameKind,
    MAX_BATCH_REPLY, MAX_FRAME, MAX_OPS, PROTOCOL_VERSION,
};
#[doc(hidden)]
pub use reply::fuzz_reassembly;
pub use reply::{encode_response_frames, response_len, Reassembly};

use bytes::Bytes;
use cairn_types::{ChunkId, ChunkVersion, DriveIndex, TenantId};
use std::fmt;
use std::time::Duration;

/// How soon a write-back put (`Request::Put` with `durable: false`) is made
/// durable at the latest.
pub const LAZY_FLUSH: Duration = Duration::from_millis(200);

/// Errors of the chunk protocol.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The peer sent a frame that does not parse; the connection must be closed.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// The frame announces more bytes than any valid frame may have.
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME}")]
    TooLarge(usize),
    /// The peer speaks another protocol version.
    #[error("unsupported protocol version {0}")]
    Version(u8),
    /// The connection failed or closed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The server answered with a batch that does not match the request.
    #[error("response does not match request: {0}")]
    Mismatch(&'static str),
    /// The connection closed while a call was outstanding.
    #[error("connection to chunk service closed")]
    Closed,
    /// The node-local credential was missing, wrong or unreadable.
    #[error("chunk service authentication: {0}")]
    Auth(String),
}

/// One operation of a request batch.
#[derive(Clone, PartialEq, Eq)]
pub enum Request {
    /// Store a chunk. Durable: acknowledged only once it is on stable media.
    /// Not durable (a cache pool's write-back): acknowledged once the drive has
    /// it in volatile memory (its write cache, the host's page cache); the node
    /// makes it durable within [`LAZY_FLUSH`], and before any later durable write.
    /// Putting an existing id replaces it (repair rewrites a fragment this way).
    Put {
        drive: DriveIndex,
        id: ChunkId,
        tenant: TenantId,
        key_id: u32,
        payload: Bytes,
        durable: bool,
    },
    /// Read a chunk; the checksum is verified before a byte is returned.
    Get {
        drive: DriveIndex,
        id: ChunkId,
        tenant: TenantId,
    },
    /// Delete a chunk (a tombstone in the log).
    Delete {
        drive: DriveIndex,
        id: ChunkId,
        tenant: TenantId,
    },
    /// Length and checksum of a chunk, without reading its payload.
    Stat {
        drive: DriveIndex,
        id: ChunkId,
        tenant: TenantId,
    },
    /// Up to `limit` chunks with ids greater than `after`, in id order, of every
    /// tenant, each with its tenant (used by the garbage collector, which runs as
    /// the node itself and deletes an orphan under its owner's tenant).
    List {
        drive: DriveIndex,
        after: ChunkId,
        limit: u32,
    },
    /// Like `List`, with each chunk's version: the sequence number of the write
    /// that made it (kept by compaction), so the collector can tell a chunk it saw
    /// before from one written again since under the same id.
    ListVersions {
        drive: DriveIndex,
        after: ChunkId,
        limit: u32,
    },
    /// Deletes a chunk only while it is still the version `seq` (a chunk written
    /// again since under the same id is kept): the collector's delete, which may
    /// never take a write that raced with its decision.
    DeleteVersion {
        drive: DriveIndex,
        id: ChunkId,
        tenant: TenantId,
        seq: u64,
    },
    /// The state and space of one drive.
    DriveInfo { drive: DriveIndex },
    /// `DriveInfo` plus what the drive is: backend, location, model, serial,
    /// firmware (answered with [`Reply::DriveDetails`]). A separate operation so
    /// that the `DriveInfo` reply keeps its version-1 layout for older peers; see
    /// the codec's documentation.
    DriveDetails { drive: DriveIndex },
}

impl Request {
    /// The drive the operation addresses.
    pub fn drive(&self) -> DriveIndex {
        match self {
            Request::Put { drive, .. }
            | Request::Get { drive, .. }
            | Request::Delete { drive, .. }
            | Request::Stat { drive, .. }
            | Request::List { drive, .. }
            | Request::ListVersions { drive, .. }
            | Request::DeleteVersion { drive, .. }
            | Request::DriveInfo { drive }
            | Request::DriveDetails { drive } => *drive,
        }
    }
}

impl fmt::Debug for Request {
    // Payloads are elided: a debug line must not dump a megabyte of data.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::Put {
                drive,
                id,
                tenant,
                key_id,
                payload,
                durable,
            } => write!(
                f,
                "Put(drive={drive}, id={id}, tenant={tenant}, key={key_id}, {} bytes{})",
                payload.len(),
                if *durable { "" } else { ", write-back" }
            ),
            Request::Get { drive, id, tenant } => {
                write!(f, "Get(drive={drive}, id={id}, tenant={tenant})")
            }
            Request::Delete { drive, id, tenant } => {
                write!(f, "Delete(drive={drive}, id={id}, tenant={tenant})")
            }
            Request::Stat { drive, id, tenant } => {
                write!(f, "Stat(drive={drive}, id={id}, tenant={tenant})")
            }
            Request::List {
                drive,
                after,
                limit,
            } => write!(f, "List(drive={drive}, after={after}, limit={limit})"),
            Request::ListVersions {
                drive,
                after,
                limit,
            } => write!(
                f,
                "ListVersions(drive={drive}, after={after}, limit={limit})"
            ),
            Request::DeleteVersion {
                drive,
                id,
                tenant,
                seq,
            } => write!(
                f,
                "DeleteVersion(drive={drive}, id={id}, tenant={tenant}, seq={seq})"
            ),
            Request::DriveInfo { drive } => write!(f, "DriveInfo(drive={drive})"),
            Request::DriveDetails { drive } => write!(f, "DriveDetails(drive={drive})"),
        }
    }
}

/// Why an operation failed. The codes are part of the wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FailureCode {
    /// No such chunk (or it belongs to another tenant).
    NotFound = 1,
    /// The stored bytes fail their checksum; never returned as data.
    Corrupt = 2,
    /// The drive is failed or missing.
    DriveFailed = 3,
    /// The drive has no room for the chunk.
    NoSpace = 4,
    /// The request is well-formed but invalid (unknown drive, oversized chunk).
    BadRequest = 5,
    /// An I/O error other than the above.
    Io = 6,
}

impl FailureCode {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => FailureCode::NotFound,
            2 => FailureCode::Corrupt,
            3 => FailureCode::DriveFailed,
            4 => FailureCode::NoSpace,
            5 => FailureCode::BadRequest,
            6 => FailureCode::Io,
            _ => return None,
        })
    }
}

/// A failed operation: a code for the caller's logic and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub code: FailureCode,
    pub message: String,
}

impl Failure {
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

/// Health of a drive as the datapath sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DriveState {
    /// Serving reads and writes.
    Healthy = 0,
    /// Failed: missing, truncated, or returning I/O errors. Serves nothing.
    Failed = 1,
}

/// The state and space of one drive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriveReport {
    pub drive: DriveIndex,
    pub state: DriveState,
    /// Bytes of the device given to the chunk log.
    pub capacity: u64,
    /// Bytes held by live chunk records.
    pub live_bytes: u64,
    /// Bytes in segments that are not free (live plus garbage awaiting compaction).
    pub allocated_bytes: u64,
    /// Live chunks.
    pub chunks: u64,
    /// What failed it, when it is failed.
    pub reason: String,
    /// The backend and path, for operators.
    pub device: String,
    /// The backend driving it (`uring`, `nvme`, `ram`). This and the fields below
    /// travel only in a `DriveDetails` reply: empty / `None` in a `DriveInfo`
    /// reply, and whenever the server did not say.
    pub backend: String,
    /// Where it is: a path (`/dev/nvme0n1`, a file), or a PCI address and
    /// namespace (`0000:00:04.0/ns1`).
    pub location: String,
    /// Model, serial number and firmware revision, where the hardware reports them
    /// (NVMe Identify, sysfs); `None` for files and memory.
    pub model: Option<String>,
    pub serial: Option<String>,
    pub firmware: Option<String>,
    /// Free space and the damage the drive's last open found. Like the identity,
    /// travels only in a `DriveDetails` reply: `None` in a `DriveInfo` reply and
    /// whenever the server did not say.
    pub space: Option<DriveSpace>,
    /// How busy the reactor serving the drive is; `DriveDetails` only, like
    /// `space`.
    pub reactor: Option<ReactorLoad>,
}

/// The work of the reactor thread that serves a drive, since datapathd started
/// (the same figures for every drive of that reactor). Counters only grow, so a
/// reader takes rates over any interval: busy time per second is the reactor's
/// utilisation, batches per turn its mean queue depth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReactorLoad {
    /// Which reactor (thread `reactor-N`).
    pub reactor: u64,
    /// Nanoseconds spent serving: operations, flushes, health checks and
    /// compaction; not spinning idle or sleeping.
    pub busy_ns: u64,
    /// Turns that had work (each one group commit per drive).
    pub turns: u64,
    /// Messages (batches of operations) served.
    pub batches: u64,
    /// Operations served.
    pub ops: u64,
    /// Messages in the turn that answers this report (this one included): how
    /// deep the mailbox was just now.
    pub queue_depth: u64,
}

/// A drive's free segments, its reserve, whether it is full, and what the chunk
/// store found damaged when it last opened the drive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveSpace {
    pub free_segments: u64,
    /// Free segments puts never take (compaction's target, deletes' tombstones).
    pub reserve_segments: u64,
    /// Puts are refused for lack of space until deletes and compaction free some.
    pub full: bool,
    /// Segments whose header, summary or footer was damaged (rescanned).
    pub damaged_segments: u64,
    /// Damaged batches followed by valid data.
    pub corrupt_batches: u64,
    /// Records known lost (header intact, payload damaged).
    pub corrupt_records: u64,
    /// Records kept from inside damaged batches.
    pub salvaged_records: u64,
    /// Unreadable last batches dropped as torn writes (never acknowledged).
    pub torn_batches: u64,
    /// The drive was blank and formatted by this start of datapathd.
    pub formatted_at_open: bool,
    /// Corrupt records compaction has dropped since the drive was opened.
    pub dropped_since_open: u64,
}

/// The successful result of one operation.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    Put,
    Get {
        payload: Bytes,
    },
    Delete {
        existed: bool,
    },
    Stat {
        len: u32,
        crc32c: u32,
    },
    List {
        chunks: Vec<(ChunkId, TenantId)>,
    },
    ListVersions {
        chunks: Vec<ChunkVersion>,
    },
    /// Whether the version named was there and is now deleted.
    DeleteVersion {
        deleted: bool,
    },
    /// State and space; the identity fields of the report are not sent.
    DriveInfo(DriveReport),
    /// The whole report, identity included.
    DriveDetails(DriveReport),
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Put => write!(f, "Put"),
            Reply::Get { payload } => write!(f, "Get({} bytes)", payload.len()),
            Reply::Delete { existed } => write!(f, "Delete(existed={existed})"),
            Reply::Stat { len, crc32c } => write!(f, "Stat(len={len}, crc={crc32c:08x})"),
            Reply::List { chunks } => write!(f, "List({} chunks)", chunks.len()),
            Reply::ListVersions { chunks } => write!(f, "ListVersions({} chunks)", chunks.len()),
            Reply::DeleteVersion { deleted } => write!(f, "DeleteVersion(deleted={deleted})"),
            Reply::DriveInfo(r) | Reply::DriveDetails(r) => write!(f, "{r:?}"),
        }
    }
}

/// One operation's outcome in a response batch.
pub type Response = Result<Reply, Failure>;
