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
//! A failure is `status` (the [`FailureCode`]), then `message str`.
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

use crate::{
    ChunkId, ChunkVersion, DriveReport, DriveSpace, DriveState, Failure, FailureCode, ProtoError,
    Reply, Request, Response,
};
use bytes::{Buf, BufMut, Bytes, BytesMut};

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
/// Longest string sent in a reply (reasons, device names, identity fields).
pub(crate) const MAX_TEXT: usize = 1024;

const STATUS_OK: u8 = 0;

/// Whether a frame carries requests or responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Request = 1,
    Response = 2,
}

/// A frame whose header has been checked; the body is decoded by the side that
/// knows what it expects.
#[derive(Clone, Debug)]
pub struct Frame {
    pub kind: FrameKind,
    pub request_id: u64,
    pub count: u16,
    /// The operations, still encoded; slices of it become payloads without a copy.
    pub body: Bytes,
}

impl Frame {
    /// Decodes the body as a request batch.
    pub fn requests(&self) -> Result<Vec<Request>, ProtoError> {
        if self.kind != FrameKind::Request {
            return Err(ProtoError::Malformed("expected a request frame"));
        }
        let mut r = Reader(self.body.clone());
        let mut ops = Vec::with_capacity(self.count as usize);
        for _ in 0..self.count {
            ops.push(decode_request(&mut r)?);
        }
        r.finish()?;
        Ok(ops)
    }

    /// Decodes the body as a response batch.
    pub fn responses(&self) -> Result<Vec<Response>, ProtoError> {
        if self.kind != FrameKind::Response {
            return Err(ProtoError::Malformed("expected a response frame"));
        }
        let mut r = Reader(self.body.clone());
        let mut out = Vec::with_capacity(self.count as usize);
        for _ in 0..self.count {
            out.push(decode_response(&mut r)?);
        }
        r.finish()?;
        Ok(out)
    }
}

/// The whole length (length field included) of the frame at the front of `buf`,
/// once its 4-byte length has arrived; checked against the limits, so a reader
/// can decide what to admit before it reads the body.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, ProtoError> {
    let Some(l) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
    if len > MAX_FRAME {
        return Err(ProtoError::TooLarge(len));
    }
    if len < HEADER {
        return Err(ProtoError::Malformed("frame shorter than its header"));
    }
    Ok(Some(4 + len))
}

/// Takes one whole frame off the front of `buf`, or returns `Ok(None)` when more
/// bytes are needed. The length is checked first, and nothing is reserved for
/// it: the caller's buffer grows only with the bytes that actually arrive, so a
/// peer that announces 64 MiB and sends four bytes costs four bytes.
pub fn decode_frame(buf: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
    let Some(total) = frame_len(buf)? else {
        return Ok(None);
    };
    let len = total - 4;
    if buf.len() < total {
        return Ok(None);
    }
    buf.advance(4);
    let mut frame = buf.split_to(len).freeze();
    let version = frame.get_u8();
    if version != PROTOCOL_VERSION {
        return Err(ProtoError::Version(version));
    }
    let kind = match frame.get_u8() {
        1 => FrameKind::Request,
        2 => FrameKind::Response,
        _ => return Err(ProtoError::Malformed("unknown frame kind")),
    };
    let count = frame.get_u16_le();
    if count as usize > MAX_OPS {
        return Err(ProtoError::Malformed("too many operations in one batch"));
    }
    let request_id = frame.get_u64_le();
    Ok(Some(Frame {
        kind,
        request_id,
        count,
        body: frame,
    }))
}

/// Encodes a request batch. Payloads are returned as separate buffers so the
/// caller can write them vectored, without copying them into the frame.
pub fn encode_request_batch(request_id: u64, ops: &[Request]) -> Result<Vec<Bytes>, ProtoError> {
    if ops.len() > MAX_OPS {
        return Err(ProtoError::Malformed("too many operations in one batch"));
    }
    let mut parts = Vec::new();
    let mut head = BytesMut::with_capacity(64 + ops.len() * 40);
    head.put_u32_le(0); // patched below
    head.put_u8(PROTOCOL_VERSION);
    head.put_u8(FrameKind::Request as u8);
    head.put_u16_le(ops.len() as u16);
    head.put_u64_le(request_id);
    let mut total = HEADER;
    for op in ops {
        match op {
            Request::Put {
                drive,
                id,
                tenant,
                key_id,
                payload,
            } => {
                head.put_u8(OP_PUT);
                head.put_u16_le(*drive);
                head.put_slice(&id.0);
                head.put_u64_le(*tenant);
                head.put_u32_le(*key_id);
                head.put_u32_le(payload_len(payload)?);
                total += 1 + 2 + 16 + 8 + 4 + 4 + payload.len();
                // Flush the header bytes so far, then the payload as its own part.
                parts.push(head.split().freeze());
                parts.push(payload.clone());
            }
            Request::Get { drive, id, tenant }
            | Request::Delete { drive, id, tenant }
            | Request::Stat { drive, id, tenant } => {
                let code = match op {
                    Request::Get { .. } => OP_GET,
                    Request::Delete { .. } => OP_DELETE,
                    _ => OP_STAT,
                };
                head.put_u8(code);
                head.put_u16_le(*drive);
                head.put_slice(&id.0);
                head.put_u64_le(*tenant);
                total += 1 + 2 + 16 + 8;
            }
            Request::List {
                drive,
                after,
                limit,
            }
            | Request::ListVersions {
                drive,
                after,
                limit,
            } => {
                head.put_u8(if matches!(op, Request::List { .. }) {
                    OP_LIST
                } else {
                    OP_LIST_VERSIONS
                });
                head.put_u16_le(*drive);
                head.put_slice(&after.0);
                head.put_u32_le(*limit);
                total += 1 + 2 + 16 + 4;
            }
            Request::DeleteVersion {
                drive,
                id,
                tenant,
                seq,
            } => {
                head.put_u8(OP_DELETE_VERSION);
                head.put_u16_le(*drive);
                head.put_slice(&id.0);
                head.put_u64_le(*tenant);
                head.put_u64_le(*seq);
                total += 1 + 2 + 16 + 8 + 8;
            }
            Request::DriveInfo { drive } | Request::DriveDetails { drive } => {
                head.put_u8(if matches!(op, Request::DriveInfo { .. }) {
                    OP_DRIVE_INFO
                } else {
                    OP_DRIVE_DETAILS
                });
                head.put_u16_le(*drive);
                total += 1 + 2;
            }
        }
    }
    if !head.is_empty() {
        parts.push(head.freeze());
    }
    patch_len(&mut parts, total)?;
    Ok(parts)
}

/// Encodes a response batch, one result per request in request order. Each reply
/// names its operation, so a client that pairs results wrongly gets an error
/// rather than misreading bytes.
pub fn encode_response_batch(
    request_id: u64,
    results: &[Response],
) -> Result<Vec<Bytes>, ProtoError> {
    if results.len() > MAX_OPS {
        return Err(ProtoError::Malformed("too many results in one batch"));
    }
    let mut parts = Vec::new();
    let mut head = BytesMut::with_capacity(64 + results.len() * 16);
    head.put_u32_le(0);
    head.put_u8(PROTOCOL_VERSION);
    head.put_u8(FrameKind::Response as u8);
    head.put_u16_le(results.len() as u16);
    head.put_u64_le(request_id);
    let mut total = HEADER;
    for res in results {
        match res {
            Err(f) => {
                let msg = truncate_utf8(&f.message, MAX_TEXT);
                head.put_u8(f.code as u8);
                head.put_u16_le(msg.len() as u16);
                head.put_slice(msg.as_bytes());
                total += 1 + 2 + msg.len();
            }
            Ok(reply) => {
                head.put_u8(STATUS_OK);
                total += 1;
                match reply {
                    Reply::Put => {
                        head.put_u8(OP_PUT);
                        total += 1;
                    }
                    Reply::Get { payload } => {
                        head.put_u8(OP_GET);
                        head.put_u32_le(payload_len(payload)?);
                        total += 1 + 4 + payload.len();
                        parts.push(head.split().freeze());
                        parts.push(payload.clone());
                    }
                    Reply::Delete { existed } => {
                        head.put_u8(OP_DELETE);
                        head.put_u8(u8::from(*existed));
                        total += 2;
                    }
                    Reply::Stat { len, crc32c } => {
                        head.put_u8(OP_STAT);
                        head.put_u32_le(*len);
                        head.put_u32_le(*crc32c);
                        total += 9;
                    }
                    Reply::List { chunks } => {
                        head.put_u8(OP_LIST);
                        head.put_u32_le(chunks.len() as u32);
                        for (id, tenant) in chunks {
                            head.put_slice(&id.0);
                            head.put_u64_le(*tenant);
                        }
                        total += 1 + 4 + 24 * chunks.len();
                    }
                    Reply::ListVersions { chunks } => {
                        head.put_u8(OP_LIST_VERSIONS);
                        head.put_u32_le(chunks.len() as u32);
                        for c in chunks {
                            head.put_slice(&c.id.0);
                            head.put_u64_le(c.tenant);
                            head.put_u64_le(c.seq);
                        }
                        total += 1 + 4 + 32 * chunks.len();
                    }
                    Reply::DeleteVersion { deleted } => {
                        head.put_u8(OP_DELETE_VERSION);
                        head.put_u8(u8::from(*deleted));
                        total += 2;
                    }
                    Reply::DriveInfo(d) => {
                        head.put_u8(OP_DRIVE_INFO);
                        total += 1 + put_report(&mut head, d);
                    }
                    Reply::DriveDetails(d) => {
                        head.put_u8(OP_DRIVE_DETAILS);
                        total += 1 + put_report(&mut head, d);
                        let fields = [
                            (TAG_BACKEND, Some(d.backend.as_str())),
                            (TAG_LOCATION, Some(d.location.as_str())),
                            (TAG_MODEL, d.model.as_deref()),
                            (TAG_SERIAL, d.serial.as_deref()),
                            (TAG_FIRMWARE, d.firmware.as_deref()),
                        ];
                        let space = d.space.map(|sp| {
                            [
                                (TAG_FREE_SEGMENTS, sp.free_segments),
                                (TAG_RESERVE_SEGMENTS, sp.reserve_segments),
                                (TAG_FULL, sp.full as u64),
                                (TAG_DAMAGED_SEGMENTS, sp.damaged_segments),
                                (TAG_CORRUPT_BATCHES, sp.corrupt_batches),
                                (TAG_CORRUPT_RECORDS, sp.corrupt_records),
                                (TAG_SALVAGED_RECORDS, sp.salvaged_records),
                                (TAG_TORN_BATCHES, sp.torn_batches),
                                (TAG_FORMATTED_AT_OPEN, sp.formatted_at_open as u64),
                                (TAG_DROPPED_SINCE_OPEN, sp.dropped_since_open),
                            ]
                            .map(|(t, n)| (t, n.to_string()))
                        });
                        let mut ext = BytesMut::new();
                        for (tag, v) in space.iter().flatten() {
                            ext.put_u8(*tag);
                            ext.put_u16_le(v.len() as u16);
                            ext.put_slice(v.as_bytes());
                        }
                        for (tag, v) in fields {
                            // Unknown (None or blank) is said by leaving the field out.
                            let Some(v) = v.filter(|v| !v.is_empty()) else {
                                continue;
                            };
                            let v = truncate_utf8(v, MAX_TEXT);
                            ext.put_u8(tag);
                            ext.put_u16_le(v.len() as u16);
                            ext.put_slice(v.as_bytes());
                        }
                        // At most 5 x (3 + MAX_TEXT) + 8 x 23 bytes: fits the u16 length.
                        head.put_u16_le(ext.len() as u16);
                        head.put_slice(&ext);
                        total += 2 + ext.len();
                    }
                }
            }
        }
    }
    if !head.is_empty() {
        parts.push(head.freeze());
    }
    patch_len(&mut parts, total)?;
    Ok(parts)
}

/// Writes the version-1 drive report (the body of a `DriveInfo` reply); returns
/// its length.
fn put_report(head: &mut BytesMut, d: &DriveReport) -> usize {
    head.put_u16_le(d.drive);
    head.put_u8(d.state as u8);
    head.put_u64_le(d.capacity);
    head.put_u64_le(d.live_bytes);
    head.put_u64_le(d.allocated_bytes);
    head.put_u64_le(d.chunks);
    let reason = truncate_utf8(&d.reason, MAX_TEXT);
    let device = truncate_utf8(&d.device, MAX_TEXT);
    head.put_u16_le(reason.len() as u16);
    head.put_slice(reason.as_bytes());
    head.put_u16_le(device.len() as u16);
    head.put_slice(device.as_bytes());
    2 + 1 + 32 + 2 + reason.len() + 2 + device.len()
}

fn payload_len(p: &Bytes) -> Result<u32, ProtoError> {
    if p.len() > MAX_FRAME {
        return Err(ProtoError::TooLarge(p.len()));
    }
    Ok(p.len() as u32)
}

fn patch_len(parts: &mut [Bytes], total: usize) -> Result<(), ProtoError> {
    if total > MAX_FRAME {
        return Err(ProtoError::TooLarge(total));
    }
    let first = parts
        .first_mut()
        .ok_or(ProtoError::Malformed("empty frame"))?;
    let mut b = BytesMut::from(&first[..]);
    b[..4].copy_from_slice(&(total as u32).to_le_bytes());
    *first = b.freeze();
    Ok(())
}

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

/// A bounds-checked cursor over a frame body.
struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize) -> Result<(), ProtoError> {
        if self.0.len() < n {
            Err(ProtoError::Malformed(
                "operation runs past the end of the frame",
            ))
        } else {
            Ok(())
        }
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }
    fn u16(&mut self) -> Result<u16, ProtoError> {
        self.need(2)?;
        Ok(self.0.get_u16_le())
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        self.need(4)?;
        Ok(self.0.get_u32_le())
    }
    fn u64(&mut self) -> Result<u64, ProtoError> {
        self.need(8)?;
        Ok(self.0.get_u64_le())
    }
    fn id(&mut self) -> Result<ChunkId, ProtoError> {
        self.need(16)?;
        let mut id = [0u8; 16];
        self.0.copy_to_slice(&mut id);
        Ok(ChunkId(id))
    }
    fn bytes(&mut self, n: usize) -> Result<Bytes, ProtoError> {
        self.need(n)?;
        Ok(self.0.split_to(n))
    }
    fn string(&mut self) -> Result<String, ProtoError> {
        let n = self.u16()? as usize;
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Malformed("string is not UTF-8"))
    }
    fn finish(&self) -> Result<(), ProtoError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::Malformed(
                "trailing bytes after the last operation",
            ))
        }
    }
}

fn decode_request(r: &mut Reader) -> Result<Request, ProtoError> {
    let op = r.u8()?;
    let drive = r.u16()?;
    Ok(match op {
        OP_PUT => {
            let id = r.id()?;
            let tenant = r.u64()?;
            let key_id = r.u32()?;
            let len = r.u32()? as usize;
            let payload = r.bytes(len)?;
            Request::Put {
                drive,
                id,
                tenant,
                key_id,
                payload,
            }
        }
        OP_GET => Request::Get {
            drive,
            id: r.id()?,
            tenant: r.u64()?,
        },
        OP_DELETE => Request::Delete {
            drive,
            id: r.id()?,
            tenant: r.u64()?,
        },
        OP_STAT => Request::Stat {
            drive,
            id: r.id()?,
            tenant: r.u64()?,
        },
        OP_LIST => Request::List {
            drive,
            after: r.id()?,
            limit: r.u32()?,
        },
        OP_LIST_VERSIONS => Request::ListVersions {
            drive,
            after: r.id()?,
            limit: r.u32()?,
        },
        OP_DELETE_VERSION => Request::DeleteVersion {
            drive,
            id: r.id()?,
            tenant: r.u64()?,
            seq: r.u64()?,
        },
        OP_DRIVE_INFO => Request::DriveInfo { drive },
        OP_DRIVE_DETAILS => Request::DriveDetails { drive },
        _ => return Err(ProtoError::Malformed("unknown opcode")),
    })
}

fn decode_response(r: &mut Reader) -> Result<Response, ProtoError> {
    let status = r.u8()?;
    if status != STATUS_OK {
        let code =
            FailureCode::from_u8(status).ok_or(ProtoError::Malformed("unknown status code"))?;
        let message = r.string()?;
        return Ok(Err(Failure { code, message }));
    }
    let op = r.u8()?;
    Ok(Ok(match op {
        OP_PUT => Reply::Put,
        OP_GET => {
            let len = r.u32()? as usize;
            Reply::Get {
                payload: r.bytes(len)?,
            }
        }
        OP_DELETE => Reply::Delete {
            existed: r.u8()? != 0,
        },
        OP_STAT => Reply::Stat {
            len: r.u32()?,
            crc32c: r.u32()?,
        },
        OP_LIST => {
            let n = r.u32()? as usize;
            r.need(n.saturating_mul(24))?;
            let mut chunks = Vec::with_capacity(n);
            for _ in 0..n {
                chunks.push((r.id()?, r.u64()?));
            }
            Reply::List { chunks }
        }
        OP_LIST_VERSIONS => {
            let n = r.u32()? as usize;
            r.need(n.saturating_mul(32))?;
            let mut chunks = Vec::with_capacity(n);
            for _ in 0..n {
                chunks.push(ChunkVersion {
                    id: r.id()?,
                    tenant: r.u64()?,
                    seq: r.u64()?,
                });
            }
            Reply::ListVersions { chunks }
        }
        OP_DELETE_VERSION => Reply::DeleteVersion {
            deleted: r.u8()? != 0,
        },
        OP_DRIVE_INFO => Reply::DriveInfo(read_report(r)?),
        OP_DRIVE_DETAILS => {
            let mut d = read_report(r)?;
            let len = r.u16()? as usize;
            read_details(&mut Reader(r.bytes(len)?), &mut d)?;
            Reply::DriveDetails(d)
        }
        _ => return Err(ProtoError::Malformed("unknown reply opcode")),
    }))
}

/// The version-1 drive report; the identity fields are left unknown.
fn read_report(r: &mut Reader) -> Result<DriveReport, ProtoError> {
    let drive = r.u16()?;
    let state = match r.u8()? {
        0 => DriveState::Healthy,
        1 => DriveState::Failed,
        _ => return Err(ProtoError::Malformed("unknown drive state")),
    };
    Ok(DriveReport {
        drive,
        state,
        capacity: r.u64()?,
        live_bytes: r.u64()?,
        allocated_bytes: r.u64()?,
        chunks: r.u64()?,
        reason: r.string()?,
        device: r.string()?,
        backend: String::new(),
        location: String::new(),
        model: None,
        serial: None,
        firmware: None,
        space: None,
    })
}

/// The tagged fields of a `DriveDetails` reply (the whole of `r`).
fn read_details(r: &mut Reader, d: &mut DriveReport) -> Result<(), ProtoError> {
    let mut seen = 0u32;
    while !r.0.is_empty() {
        let tag = r.u8()?;
        let value = r.string()?;
        if (TAG_BACKEND..=TAG_DROPPED_SINCE_OPEN).contains(&tag) {
            if seen & (1 << tag) != 0 {
                return Err(ProtoError::Malformed("repeated drive detail field"));
            }
            seen |= 1 << tag;
        }
        match tag {
            TAG_BACKEND => d.backend = value,
            TAG_LOCATION => d.location = value,
            TAG_MODEL => d.model = Some(value),
            TAG_SERIAL => d.serial = Some(value),
            TAG_FIRMWARE => d.firmware = Some(value),
            TAG_FREE_SEGMENTS..=TAG_DROPPED_SINCE_OPEN => {
                let n: u64 = value
                    .parse()
                    .map_err(|_| ProtoError::Malformed("drive detail field is not a number"))?;
                let sp = d.space.get_or_insert_with(DriveSpace::default);
                match tag {
                    TAG_FREE_SEGMENTS => sp.free_segments = n,
                    TAG_RESERVE_SEGMENTS => sp.reserve_segments = n,
                    TAG_FULL if n <= 1 => sp.full = n == 1,
                    TAG_FULL => return Err(ProtoError::Malformed("drive full is not 0 or 1")),
                    TAG_DAMAGED_SEGMENTS => sp.damaged_segments = n,
                    TAG_CORRUPT_BATCHES => sp.corrupt_batches = n,
                    TAG_CORRUPT_RECORDS => sp.corrupt_records = n,
                    TAG_SALVAGED_RECORDS => sp.salvaged_records = n,
                    TAG_TORN_BATCHES => sp.torn_batches = n,
                    TAG_FORMATTED_AT_OPEN if n <= 1 => sp.formatted_at_open = n == 1,
                    TAG_FORMATTED_AT_OPEN => {
                        return Err(ProtoError::Malformed("formatted at open is not 0 or 1"))
                    }
                    _ => sp.dropped_since_open = n,
                }
            }
            // A field of a later version: skipped, so it needs no new operation.
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(parts: Vec<Bytes>) -> BytesMut {
        let mut b = BytesMut::new();
        for p in parts {
            b.extend_from_slice(&p);
        }
        b
    }

    fn sample_requests() -> Vec<Request> {
        vec![
            Request::Put {
                drive: 2,
                id: ChunkId::from_u128(7),
                tenant: 9,
                key_id: 3,
                payload: Bytes::from(vec![0xab; 5000]),
            },
            Request::Get {
                drive: 1,
                id: ChunkId::from_u128(u128::MAX),
                tenant: 0,
            },
            Request::Delete {
                drive: 0,
                id: ChunkId::from_u128(1),
                tenant: 4,
            },
            Request::Stat {
                drive: 3,
                id: ChunkId::from_u128(2),
                tenant: 4,
            },
            Request::List {
                drive: 3,
                after: ChunkId::MIN,
                limit: 100,
            },
            Request::ListVersions {
                drive: 2,
                after: ChunkId::from_u128(5),
                limit: 7,
            },
            Request::DeleteVersion {
                drive: 1,
                id: ChunkId::from_u128(9),
                tenant: 4,
                seq: u64::MAX - 1,
            },
            Request::DriveInfo { drive: 5 },
            Request::DriveDetails { drive: 6 },
        ]
    }

    #[test]
    fn requests_round_trip() {
        let ops = sample_requests();
        let mut buf = join(encode_request_batch(42, &ops).unwrap());
        let frame = decode_frame(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty());
        assert_eq!(frame.request_id, 42);
        assert_eq!(frame.requests().unwrap(), ops);
    }

    #[test]
    fn responses_round_trip() {
        let res: Vec<Response> = vec![
            Ok(Reply::Put),
            Ok(Reply::Get {
                payload: Bytes::from_static(b"hello"),
            }),
            Ok(Reply::Delete { existed: true }),
            Ok(Reply::Stat {
                len: 5,
                crc32c: 0xdead_beef,
            }),
            Ok(Reply::List {
                chunks: vec![(ChunkId::from_u128(1), 3), (ChunkId::from_u128(2), 4)],
            }),
            Ok(Reply::ListVersions {
                chunks: vec![ChunkVersion {
                    id: ChunkId::from_u128(3),
                    tenant: 5,
                    seq: 77,
                }],
            }),
            Ok(Reply::DeleteVersion { deleted: true }),
            Ok(Reply::DriveInfo(DriveReport {
                drive: 1,
                state: DriveState::Failed,
                capacity: 10,
                live_bytes: 3,
                allocated_bytes: 4,
                chunks: 2,
                reason: "truncated".into(),
                device: "uring:/tmp/d1".into(),
                ..unknown_identity()
            })),
            Ok(Reply::DriveDetails(details())),
            Err(Failure::new(FailureCode::Corrupt, "crc mismatch")),
        ];
        let mut buf = join(encode_response_batch(7, &res).unwrap());
        let frame = decode_frame(&mut buf).unwrap().unwrap();
        assert_eq!(frame.responses().unwrap(), res);
    }

    /// A report with every identity field unknown (what a `DriveInfo` reply decodes to).
    fn unknown_identity() -> DriveReport {
        DriveReport {
            drive: 0,
            state: DriveState::Healthy,
            capacity: 0,
            live_bytes: 0,
            allocated_bytes: 0,
            chunks: 0,
            reason: String::new(),
            device: String::new(),
            backend: String::new(),
            location: String::new(),
            model: None,
            serial: None,
            firmware: None,
            space: None,
        }
    }

    fn details() -> DriveReport {
        DriveReport {
            drive: 2,
            state: DriveState::Healthy,
            capacity: 64 << 20,
            live_bytes: 5000,
            allocated_bytes: 1 << 20,
            chunks: 3,
            reason: String::new(),
            device: "nvme:0000:00:04.0/ns1".into(),
            backend: "nvme".into(),
            location: "0000:00:04.0/ns1".into(),
            model: Some("QEMU NVMe Ctrl".into()),
            serial: Some("SN-A0".into()),
            firmware: Some("8.2.0".into()),
            space: Some(DriveSpace {
                free_segments: 12,
                reserve_segments: 2,
                full: false,
                damaged_segments: 1,
                corrupt_batches: 2,
                corrupt_records: 3,
                salvaged_records: 40,
                torn_batches: 1,
                formatted_at_open: true,
                dropped_since_open: 2,
            }),
        }
    }

    /// One response frame holding `replies`, as raw bytes.
    fn response_bytes(replies: Vec<Response>) -> BytesMut {
        join(encode_response_batch(9, &replies).unwrap())
    }

    /// A response frame of `count` operations whose body is `body`.
    fn raw_response(count: u16, body: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_u32_le((HEADER + body.len()) as u32);
        b.put_u8(PROTOCOL_VERSION);
        b.put_u8(FrameKind::Response as u8);
        b.put_u16_le(count);
        b.put_u64_le(9);
        b.put_slice(body);
        b
    }

    fn decode_responses(mut b: BytesMut) -> Result<Vec<Response>, ProtoError> {
        decode_frame(&mut b)?
            .ok_or(ProtoError::Malformed("incomplete"))?
            .responses()
    }

    #[test]
    fn drive_info_keeps_the_version_1_layout() {
        // The bytes an old decoder expects, written out by hand: identity fields of
        // the report must not leak into a DriveInfo reply.
        let mut v1 = vec![STATUS_OK, OP_DRIVE_INFO];
        v1.extend_from_slice(&2u16.to_le_bytes());
        v1.push(0);
        for n in [64u64 << 20, 5000, 1 << 20, 3] {
            v1.extend_from_slice(&n.to_le_bytes());
        }
        v1.extend_from_slice(&0u16.to_le_bytes());
        v1.extend_from_slice(&21u16.to_le_bytes());
        v1.extend_from_slice(b"nvme:0000:00:04.0/ns1");
        let got = response_bytes(vec![Ok(Reply::DriveInfo(details()))]);
        assert_eq!(&got[4 + HEADER..], &v1[..]);
        // And it decodes with the identity unknown.
        match &decode_responses(got).unwrap()[0] {
            Ok(Reply::DriveInfo(d)) => {
                assert_eq!(d.capacity, 64 << 20);
                assert_eq!(d.device, "nvme:0000:00:04.0/ns1");
                assert_eq!((d.backend.as_str(), d.location.as_str()), ("", ""), "{d:?}");
                assert_eq!((&d.model, &d.serial, &d.firmware), (&None, &None, &None));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn drive_details_round_trip_with_any_fields_absent() {
        let full = details();
        let mut none = details();
        none.backend.clear();
        none.location.clear();
        none.model = None;
        none.serial = None;
        none.firmware = None;
        none.space = None;
        let mut some = details();
        some.model = None;
        some.firmware = None;
        // Each inside a batch with a reply after it: the fields are self-delimiting.
        for d in [full, none, some] {
            let res = vec![
                Ok(Reply::DriveDetails(d.clone())),
                Ok(Reply::Stat { len: 1, crc32c: 2 }),
            ];
            assert_eq!(decode_responses(response_bytes(res.clone())).unwrap(), res);
        }
        // Over-long identity strings are cut on a character boundary, not refused.
        let mut long = details();
        long.model = Some("é".repeat(1000));
        match &decode_responses(response_bytes(vec![Ok(Reply::DriveDetails(long))])).unwrap()[0] {
            Ok(Reply::DriveDetails(d)) => {
                assert_eq!(d.model.as_deref(), Some("é".repeat(512).as_str()))
            }
            other => panic!("{other:?}"),
        }
    }

    /// The body of a DriveDetails reply up to its fields block.
    fn details_head() -> Vec<u8> {
        let b = response_bytes(vec![Ok(Reply::DriveInfo(details()))]);
        let mut v = b[4 + HEADER..].to_vec();
        v[1] = OP_DRIVE_DETAILS;
        v
    }

    fn with_fields(fields: &[u8]) -> BytesMut {
        let mut body = details_head();
        body.extend_from_slice(&(fields.len() as u16).to_le_bytes());
        body.extend_from_slice(fields);
        raw_response(1, &body)
    }

    fn field(tag: u8, v: &[u8]) -> Vec<u8> {
        let mut f = vec![tag];
        f.extend_from_slice(&(v.len() as u16).to_le_bytes());
        f.extend_from_slice(v);
        f
    }

    #[test]
    fn drive_details_skip_unknown_fields_and_refuse_bad_ones() {
        // A later version's field (tag 42) is skipped; known ones are read.
        let fields = [field(42, b"future"), field(TAG_SERIAL, b"S1")].concat();
        match &decode_responses(with_fields(&fields)).unwrap()[0] {
            Ok(Reply::DriveDetails(d)) => {
                assert_eq!(d.serial.as_deref(), Some("S1"));
                assert_eq!(d.model, None);
                assert_eq!(d.backend, "");
            }
            other => panic!("{other:?}"),
        }
        // An empty block: every field unknown.
        assert!(decode_responses(with_fields(&[])).is_ok());
        let bad: Vec<Vec<u8>> = vec![
            // Repeated field.
            [field(TAG_MODEL, b"a"), field(TAG_MODEL, b"b")].concat(),
            // Not UTF-8.
            field(TAG_MODEL, &[0xff, 0xfe]),
            // A field longer than the block.
            {
                let mut f = field(TAG_MODEL, b"abc");
                f[1] = 200;
                f
            },
            // A tag without its length.
            vec![TAG_MODEL],
            vec![TAG_MODEL, 1],
        ];
        for f in bad {
            assert!(
                matches!(
                    decode_responses(with_fields(&f)),
                    Err(ProtoError::Malformed(_))
                ),
                "{f:?}"
            );
        }
        // A block length running past the frame.
        let mut body = details_head();
        body.extend_from_slice(&1000u16.to_le_bytes());
        body.extend_from_slice(&field(TAG_MODEL, b"x"));
        assert!(decode_responses(raw_response(1, &body)).is_err());
        // A block length shorter than its fields leaves trailing bytes.
        let mut body = details_head();
        body.extend_from_slice(&2u16.to_le_bytes());
        body.extend_from_slice(&field(TAG_MODEL, b"x"));
        assert!(decode_responses(raw_response(1, &body)).is_err());
    }

    #[test]
    fn drive_space_fields_are_numbers() {
        // Any of them makes the space known, the rest reading 0.
        let fields = [field(TAG_FREE_SEGMENTS, b"7"), field(TAG_FULL, b"1")].concat();
        match &decode_responses(with_fields(&fields)).unwrap()[0] {
            Ok(Reply::DriveDetails(d)) => assert_eq!(
                d.space,
                Some(DriveSpace {
                    free_segments: 7,
                    full: true,
                    ..DriveSpace::default()
                })
            ),
            other => panic!("{other:?}"),
        }
        match &decode_responses(with_fields(&field(TAG_SERIAL, b"S1"))).unwrap()[0] {
            Ok(Reply::DriveDetails(d)) => assert_eq!(d.space, None),
            other => panic!("{other:?}"),
        }
        for f in [
            field(TAG_FREE_SEGMENTS, b"x"),
            field(TAG_TORN_BATCHES, b"-1"),
            field(TAG_FULL, b"2"),
            [field(TAG_FULL, b"0"), field(TAG_FULL, b"0")].concat(),
        ] {
            assert!(
                matches!(
                    decode_responses(with_fields(&f)),
                    Err(ProtoError::Malformed(_))
                ),
                "{f:?}"
            );
        }
    }

    #[test]
    fn truncated_and_garbled_drive_reports_are_errors_not_panics() {
        let full = response_bytes(vec![
            Ok(Reply::DriveDetails(details())),
            Ok(Reply::DriveInfo(details())),
        ]);
        let body = &full[4 + HEADER..];
        // Every truncation of the body (with the frame length fixed up) fails cleanly.
        for cut in 0..body.len() {
            let r = decode_responses(raw_response(2, &body[..cut]));
            assert!(r.is_err(), "cut at {cut} decoded: {r:?}");
        }
        // Every single-byte corruption either decodes or is an error: never a panic.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..body.len() {
            for _ in 0..8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut b = body.to_vec();
                b[i] = x as u8;
                let _ = decode_responses(raw_response(2, &b));
            }
        }
        // A failed-state report with a bad state byte is malformed.
        let mut b = body.to_vec();
        b[4] = 7;
        assert!(matches!(
            decode_responses(raw_response(2, &b)),
            Err(ProtoError::Malformed("unknown drive state"))
        ));
    }

    #[test]
    fn partial_frames_wait_for_more_bytes() {
        let full = join(encode_request_batch(1, &sample_requests()).unwrap());
        for cut in 0..full.len() {
            let mut b = BytesMut::from(&full[..cut]);
            assert!(decode_frame(&mut b).unwrap().is_none(), "cut at {cut}");
        }
        // A frame announced at the limit, of which a few bytes came: nothing is
        // reserved for the rest.
        let mut b = BytesMut::with_capacity(16);
        b.put_u32_le((MAX_FRAME - 4) as u32);
        b.put_slice(&[PROTOCOL_VERSION, 1, 0, 0]);
        assert!(decode_frame(&mut b).unwrap().is_none());
        assert!(b.capacity() < 4096, "reserved {}", b.capacity());
        assert_eq!(frame_len(&b).unwrap(), Some(MAX_FRAME));
    }

    #[test]
    fn oversized_and_garbage_frames_are_errors() {
        let mut b = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 1, 1][..]);
        assert!(matches!(decode_frame(&mut b), Err(ProtoError::TooLarge(_))));
        let mut b = BytesMut::from(&[3, 0, 0, 0, 1, 1, 0][..]);
        assert!(decode_frame(&mut b).is_err());
        // A count that promises more operations than the body holds.
        let mut b = BytesMut::new();
        b.put_u32_le(HEADER as u32);
        b.put_u8(PROTOCOL_VERSION);
        b.put_u8(1);
        b.put_u16_le(3);
        b.put_u64_le(0);
        let frame = decode_frame(&mut b).unwrap().unwrap();
        assert!(frame.requests().is_err());
        // A Put whose payload length lies.
        let mut parts = encode_request_batch(1, &sample_requests()[..1]).unwrap();
        let mut first = BytesMut::from(&parts[0][..]);
        let n = first.len();
        first[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
        parts[0] = first.freeze();
        let mut b = join(parts);
        let frame = decode_frame(&mut b).unwrap().unwrap();
        assert!(frame.requests().is_err());
    }
}
