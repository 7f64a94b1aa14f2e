//! The frame around a batch: its length, version, kind, count and request id.

use super::reader::Reader;
use super::request::decode_request;
use super::response::decode_response;
use super::{HEADER, MAX_FRAME, MAX_OPS, PROTOCOL_VERSION};
use crate::{ProtoError, Request, Response};
use bytes::{Buf, Bytes, BytesMut};

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

pub(super) fn payload_len(p: &Bytes) -> Result<u32, ProtoError> {
    if p.len() > MAX_FRAME {
        return Err(ProtoError::TooLarge(p.len()));
    }
    Ok(p.len() as u32)
}

pub(super) fn patch_len(parts: &mut [Bytes], total: usize) -> Result<(), ProtoError> {
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
