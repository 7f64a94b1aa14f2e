//! Request operations: what a client asks of a datapathd.

use super::frame::{patch_len, payload_len, FrameKind};
use super::reader::Reader;
use super::*;
use crate::{ProtoError, Request};
use bytes::{BufMut, Bytes, BytesMut};

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
                durable,
            } => {
                head.put_u8(if *durable { OP_PUT } else { OP_PUT_WRITE_BACK });
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

pub(super) fn decode_request(r: &mut Reader) -> Result<Request, ProtoError> {
    let op = r.u8()?;
    let drive = r.u16()?;
    Ok(match op {
        OP_PUT | OP_PUT_WRITE_BACK => {
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
                durable: op == OP_PUT,
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
