//! Replies: one result per request, each naming its operation.

use super::frame::{patch_len, payload_len, FrameKind};
use super::reader::Reader;
use super::report::{put_report, read_details, read_report};
use super::*;
use crate::{Failure, FailureCode, ProtoError, Reply, Response};
use bytes::{BufMut, Bytes, BytesMut};
use cairn_types::ChunkVersion;

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
                        let reactor = d.reactor.map(|l| {
                            [
                                (TAG_REACTOR, l.reactor),
                                (TAG_REACTOR_BUSY_NS, l.busy_ns),
                                (TAG_REACTOR_TURNS, l.turns),
                                (TAG_REACTOR_BATCHES, l.batches),
                                (TAG_REACTOR_OPS, l.ops),
                                (TAG_REACTOR_QUEUE_DEPTH, l.queue_depth),
                            ]
                            .map(|(t, n)| (t, n.to_string()))
                        });
                        let mut ext = BytesMut::new();
                        for (tag, v) in space.iter().flatten().chain(reactor.iter().flatten()) {
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
                        // At most 5 x (3 + MAX_TEXT) + 16 x 23 bytes: fits the u16 length.
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

pub(super) fn decode_response(r: &mut Reader) -> Result<Response, ProtoError> {
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
