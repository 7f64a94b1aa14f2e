//! The drive report: the frozen version-1 layout both drive replies start with,
//! and the tagged fields that follow it in a `DriveDetails` reply.

use super::reader::Reader;
use super::*;
use crate::{DriveReport, DriveSpace, DriveState, ProtoError, ReactorLoad};
use bytes::{BufMut, BytesMut};

/// Writes the version-1 drive report (the body of a `DriveInfo` reply); returns
/// its length.
pub(super) fn put_report(head: &mut BytesMut, d: &DriveReport) -> usize {
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

/// The version-1 drive report; the identity fields are left unknown.
pub(super) fn read_report(r: &mut Reader) -> Result<DriveReport, ProtoError> {
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
        reactor: None,
    })
}

/// The tagged fields of a `DriveDetails` reply (the whole of `r`).
pub(super) fn read_details(r: &mut Reader, d: &mut DriveReport) -> Result<(), ProtoError> {
    let mut seen = 0u32;
    while !r.0.is_empty() {
        let tag = r.u8()?;
        let value = r.string()?;
        if (TAG_BACKEND..=TAG_REACTOR_QUEUE_DEPTH).contains(&tag) {
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
            TAG_REACTOR..=TAG_REACTOR_QUEUE_DEPTH => {
                let n: u64 = value
                    .parse()
                    .map_err(|_| ProtoError::Malformed("reactor field is not a number"))?;
                let l = d.reactor.get_or_insert_with(ReactorLoad::default);
                match tag {
                    TAG_REACTOR => l.reactor = n,
                    TAG_REACTOR_BUSY_NS => l.busy_ns = n,
                    TAG_REACTOR_TURNS => l.turns = n,
                    TAG_REACTOR_BATCHES => l.batches = n,
                    TAG_REACTOR_OPS => l.ops = n,
                    _ => l.queue_depth = n,
                }
            }
            // A field of a later version: skipped, so it needs no new operation.
            _ => {}
        }
    }
    Ok(())
}
