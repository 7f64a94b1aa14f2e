//! Before any credential is sent: does the BMC speak IPMI v2.0 (RMCP+)?
//!
//! ipmi-rs 0.6 falls back to IPMI v1.5 on its own when a BMC does not claim
//! v2.0, and v1.5's "straight password" authentication sends the password in
//! clear (an outside attack's fake BMC collected it this way), while v1.5 with
//! no authentication accepts any password. Cairn speaks RMCP+ only. The guard
//! is the patched ipmi-rs (`mgmt/vendor/ipmi-rs`), which refuses rather than
//! falls back, even for a host that answers v2.0 to one question and v1.5 to the
//! next. This probe comes first so that a v1.5-only BMC gets an error that says
//! what is wrong: it asks in the clear and with no credential (Get Channel
//! Authentication Capabilities, outside a session, IPMI 2.0 22.13, as
//! `ipmitool -I lanplus` does).

use crate::BmcError;
use std::net::{ToSocketAddrs, UdpSocket};
use std::time::Duration;

/// The request: RMCP (version 6, no ack, class IPMI), a v1.5 session header
/// with no authentication, session 0, and Get Channel Authentication
/// Capabilities (App 0x38) for the current channel with v2.0 data asked for
/// (0x8e), at the administrator privilege.
const ASK: [u8; 23] = [
    0x06, 0x00, 0xff, 0x07, // RMCP
    0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x09, // session: auth none, seq, id, length
    0x20, 0x18, 0xc8, 0x81, 0x00, 0x38, 0x8e, 0x04, 0xb5, // the message
];

/// Fails unless the BMC at `addr` says it accepts IPMI v2.0 (RMCP+) sessions.
pub(crate) fn require_rmcp_plus(addr: &str, wait: Duration) -> Result<(), BmcError> {
    let unreachable = |why: String| BmcError::Unreachable {
        addr: addr.to_string(),
        why,
    };
    let target = addr
        .to_socket_addrs()
        .map_err(|e| unreachable(e.to_string()))?
        .next()
        .ok_or_else(|| unreachable("the name resolves to no address".into()))?;
    let local = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = UdpSocket::bind(local).map_err(|e| unreachable(e.to_string()))?;
    socket
        .connect(target)
        .and_then(|()| socket.set_read_timeout(Some(wait)))
        .and_then(|()| socket.send(&ASK).map(drop))
        .map_err(|e| unreachable(format!("channel capabilities: {e}")))?;
    let mut buf = [0u8; 256];
    let n = socket
        .recv(&mut buf)
        .map_err(|e| unreachable(format!("no answer to the channel capabilities: {e}")))?;
    match offers_v2(&buf[..n]) {
        Some(true) => Ok(()),
        Some(false) => Err(BmcError::Insecure {
            addr: addr.to_string(),
        }),
        None => Err(BmcError::Garbage {
            addr: addr.to_string(),
            what: "channel capabilities",
            why: "not an IPMI answer".into(),
        }),
    }
}

/// Whether the answer offers v2.0 connections; none if it is not an answer.
fn offers_v2(b: &[u8]) -> Option<bool> {
    // RMCP header, then the session header: 10 bytes with no authentication,
    // 26 with (auth type, sequence, session id, 16-byte code, length).
    if b.len() < 5 || b[3] & 0x1f != 0x07 {
        return None;
    }
    let msg = 4 + if b[4] == 0 { 10 } else { 26 };
    // rqAddr, netFn/LUN, checksum, rsAddr, seq/LUN, command, completion code,
    // then the data: channel, auth types, auth status, extended capabilities.
    let m = b.get(msg..)?;
    if m.len() < 11 || m[1] >> 2 != 0x07 || m[5] != 0x38 || m[6] != 0x00 {
        return None;
    }
    let (types, extended) = (m[8], m[10]);
    Some(types & 0x80 != 0 && extended & 0x02 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(types: u8, extended: u8) -> Vec<u8> {
        let mut b = vec![0x06, 0x00, 0xff, 0x07, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 16];
        b.extend([0x81, 0x1c, 0x63, 0x20, 0x00, 0x38, 0x00]);
        b.extend([0x01, types, 0x00, extended, 0, 0, 0, 0, 0x00]);
        b
    }

    #[test]
    fn only_a_bmc_offering_v2_passes() {
        assert_eq!(offers_v2(&answer(0x80 | 0x14, 0x03)), Some(true));
        // v1.5 only: straight password or MD5, no v2.0 connections.
        assert_eq!(offers_v2(&answer(0x14, 0x01)), Some(false));
        assert_eq!(offers_v2(&answer(0x80 | 0x14, 0x01)), Some(false));
        assert_eq!(offers_v2(&answer(0x01, 0x00)), Some(false));
        // Not IPMI, or a refusal.
        assert_eq!(offers_v2(b"junk"), None);
        let mut refused = answer(0x80, 0x03);
        refused[20] = 0xc1;
        assert_eq!(offers_v2(&refused), None);
    }
}
