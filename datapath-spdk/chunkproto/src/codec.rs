//! Encoding and decoding of frames. Decoding is total: any byte string either
//! yields a frame or a `ProtoError`, never a panic (fuzzed by `fuzz/chunkproto`).

use crate::{
    ChunkId, DriveReport, DriveState, Failure, FailureCode, ProtoError, Reply, Request, Response,
};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u8 = 1;
/// Largest frame accepted, header included: a batch of full stripes plus slack.
pub const MAX_FRAME: usize = 64 << 20;
/// Most operations in one batch.
pub const MAX_OPS: usize = 4096;

const HEADER: usize = 1 + 1 + 2 + 8;

const OP_PUT: u8 = 1;
const OP_GET: u8 = 2;
const OP_DELETE: u8 = 3;
const OP_STAT: u8 = 4;
const OP_LIST: u8 = 5;
const OP_DRIVE_INFO: u8 = 6;

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

/// Takes one whole frame off the front of `buf`, or returns `Ok(None)` when more
/// bytes are needed. The length is checked before anything is allocated.
pub fn decode_frame(buf: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME {
        return Err(ProtoError::TooLarge(len));
    }
    if len < HEADER {
        return Err(ProtoError::Malformed("frame shorter than its header"));
    }
    if buf.len() < 4 + len {
        // Reserve once so a large frame is read without repeated reallocation.
        buf.reserve(4 + len - buf.len());
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
            } => {
                head.put_u8(OP_LIST);
                head.put_u16_le(*drive);
                head.put_slice(&after.0);
                head.put_u32_le(*limit);
                total += 1 + 2 + 16 + 4;
            }
            Request::DriveInfo { drive } => {
                head.put_u8(OP_DRIVE_INFO);
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
                let msg = truncate_utf8(&f.message, 1024);
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
                    Reply::DriveInfo(d) => {
                        head.put_u8(OP_DRIVE_INFO);
                        head.put_u16_le(d.drive);
                        head.put_u8(d.state as u8);
                        head.put_u64_le(d.capacity);
                        head.put_u64_le(d.live_bytes);
                        head.put_u64_le(d.allocated_bytes);
                        head.put_u64_le(d.chunks);
                        let reason = truncate_utf8(&d.reason, 1024);
                        let device = truncate_utf8(&d.device, 1024);
                        head.put_u16_le(reason.len() as u16);
                        head.put_slice(reason.as_bytes());
                        head.put_u16_le(device.len() as u16);
                        head.put_slice(device.as_bytes());
                        total += 1 + 2 + 1 + 32 + 2 + reason.len() + 2 + device.len();
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

fn truncate_utf8(s: &str, max: usize) -> &str {
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
        OP_DRIVE_INFO => Request::DriveInfo { drive },
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
        OP_DRIVE_INFO => {
            let drive = r.u16()?;
            let state = match r.u8()? {
                0 => DriveState::Healthy,
                1 => DriveState::Failed,
                _ => return Err(ProtoError::Malformed("unknown drive state")),
            };
            Reply::DriveInfo(DriveReport {
                drive,
                state,
                capacity: r.u64()?,
                live_bytes: r.u64()?,
                allocated_bytes: r.u64()?,
                chunks: r.u64()?,
                reason: r.string()?,
                device: r.string()?,
            })
        }
        _ => return Err(ProtoError::Malformed("unknown reply opcode")),
    }))
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
            Request::DriveInfo { drive: 5 },
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
            Ok(Reply::DriveInfo(DriveReport {
                drive: 1,
                state: DriveState::Failed,
                capacity: 10,
                live_bytes: 3,
                allocated_bytes: 4,
                chunks: 2,
                reason: "truncated".into(),
                device: "uring:/tmp/d1".into(),
            })),
            Err(Failure::new(FailureCode::Corrupt, "crc mismatch")),
        ];
        let mut buf = join(encode_response_batch(7, &res).unwrap());
        let frame = decode_frame(&mut buf).unwrap().unwrap();
        assert_eq!(frame.responses().unwrap(), res);
    }

    #[test]
    fn partial_frames_wait_for_more_bytes() {
        let full = join(encode_request_batch(1, &sample_requests()).unwrap());
        for cut in 0..full.len() {
            let mut b = BytesMut::from(&full[..cut]);
            assert!(decode_frame(&mut b).unwrap().is_none(), "cut at {cut}");
        }
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
