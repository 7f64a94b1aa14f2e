//! A node's BMC, reached over the management network with IPMI v2.0 (RMCP+,
//! `ipmitool -I lanplus`): the chassis power state, and power
//! control (on, off, cycle, reset, soft). The cluster uses it for the operator's
//! `nodectl node power` and to fence a node before rebuilding its data.
//!
//! ipmi-rs speaks the protocol; it is blocking, so every exchange runs on
//! tokio's blocking pool under a deadline of its own, and a panic inside it (a
//! BMC answering garbage) becomes an error, never a dead daemon. What ipmi-rs
//! lacks (chassis status and control, session privilege) is sent as raw
//! messages.
//!
//! BMCs hold few sessions (four to a few dozen) and ipmi-rs cannot close the
//! sessions it opens, so each [`Link`] keeps its one session and reuses it. A
//! BMC times idle sessions out and then drops their packets unanswered: a
//! reused session that fails is taken for stale, and the request is sent once
//! more on a new one (nothing ran on the stale one).
//!
//! One request at a time per BMC, and never queued: a request waits at most
//! [`QUEUE`] for the BMC to be free, else it is refused as busy, so a slow or
//! silent BMC holds at most one blocking thread and no request runs long after
//! its caller was told it failed. A command is not sent at all once its
//! [`DEADLINE`] has passed (a slow session set-up); one sent whose answer does
//! not come is reported as of unknown outcome.

mod local;
mod probe;
mod sensors;

pub use local::LocalBmc;

use cairn_adminapi::{PowerAction, PowerState};
use ipmi_rs::connection::{IpmiConnection, LogicalUnit, Message, Request, RequestTargetAddress};
use ipmi_rs::rmcp::Rmcp;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zeroize::Zeroizing;

/// How a BMC request fails.
#[derive(Debug, thiserror::Error)]
pub enum BmcError {
    #[error("BMC address {0:?} is not HOST:PORT")]
    Address(String),
    #[error("BMC at {addr} does not answer: {why}")]
    Unreachable { addr: String, why: String },
    #[error(
        "BMC at {addr} refused the session ({why}): check the user and password; the user \
         needs the administrator privilege"
    )]
    Auth { addr: String, why: String },
    #[error("BMC at {addr} refused {what}: completion code {cc:#04x} ({})", cc_meaning(*.cc))]
    Refused {
        addr: String,
        what: &'static str,
        cc: u8,
    },
    #[error("BMC at {addr} answered {what} with something that is not IPMI: {why}")]
    Garbage {
        addr: String,
        what: &'static str,
        why: String,
    },
    #[error(
        "BMC at {addr} did not answer {what} within {secs} s: it may or may not have been \
         carried out (ask for the power state)"
    )]
    TimedOut {
        addr: String,
        what: &'static str,
        secs: u64,
    },
    #[error(
        "BMC at {addr} does not offer IPMI v2.0 (RMCP+) sessions: Cairn sends no password to it \
         (IPMI v1.5 would carry it in clear or not check it); enable IPMI v2.0 on the BMC"
    )]
    Insecure { addr: String },
    #[error("BMC at {addr} is busy with another request; {what} was not sent (try again)")]
    Busy { addr: String, what: &'static str },
    #[error("BMC at {addr} took too long to open a session; {what} was not sent")]
    NotSent { addr: String, what: &'static str },
    #[error(
        "BMC at {addr} has no free session for another login ({why}); sessions left open \
         time out in a minute or so"
    )]
    NoSession { addr: String, why: String },
}

/// What a completion code says, for the codes a power request meets.
fn cc_meaning(cc: u8) -> &'static str {
    match cc {
        0xc0 => "busy",
        0xc1 => "command not supported",
        0xc3 => "timed out",
        0xcc => "invalid data field",
        0xd4 => "insufficient privilege",
        0xd5 => "not supported in the present state",
        _ => "see the IPMI specification",
    }
}

/// The Chassis Control command's data byte (IPMI 2.0, 28.3).
fn control_code(action: PowerAction) -> u8 {
    match action {
        PowerAction::Off => 0,
        PowerAction::On => 1,
        PowerAction::Cycle => 2,
        PowerAction::Reset => 3,
        PowerAction::Soft => 5,
    }
}

/// What the BMC says it is (Get Device ID).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BmcIdentity {
    pub device_id: u8,
    pub device_revision: u8,
    pub firmware: String,
    pub ipmi_version: String,
    pub manufacturer_id: u32,
    pub product_id: u16,
}

/// What a failed session set-up says, by ipmi-rs's error (its Debug text names
/// the step and the BMC's status code).
fn activation_error(addr: &str, why: String) -> BmcError {
    let addr = addr.to_string();
    let has = |words: &[&str]| words.iter().any(|w| why.contains(w));
    if has(&["InsufficientResources", "NoAvailableSlot"]) {
        BmcError::NoSession { addr, why }
    } else if has(&[
        "Unauthorized",
        "AuthenticationFailed",
        "InvalidName",
        "InvalidRole",
        "Integrity",
        "UnknownUser",
    ]) {
        BmcError::Auth { addr, why }
    } else if has(&["Io(", "Receive", "Send", "Socket", "Bind"]) {
        BmcError::Unreachable { addr, why }
    } else {
        // A Pong that is not one, an RMCP header or a session message that does
        // not parse: whatever answers is not an IPMI BMC.
        BmcError::Garbage {
            addr,
            what: "a session",
            why,
        }
    }
}

/// Get Device ID's answer (IPMI 2.0, 20.1); none if too short.
fn parse_identity(d: &[u8]) -> Option<BmcIdentity> {
    if d.len() < 11 {
        return None;
    }
    let bcd = |b: u8| format!("{}{}", b >> 4, b & 0x0f);
    Some(BmcIdentity {
        device_id: d[0],
        device_revision: d[1] & 0x0f,
        firmware: format!("{}.{}", d[2] & 0x7f, bcd(d[3])),
        ipmi_version: format!("{}.{}", d[4] & 0x0f, d[4] >> 4),
        manufacturer_id: u32::from_le_bytes([d[6], d[7], d[8] & 0x0f, 0]),
        product_id: u16::from_le_bytes([d[9], d[10]]),
    })
}

/// Where a BMC answers and who to log in as.
#[derive(Clone)]
pub struct BmcTarget {
    /// `host:port` of its RMCP+ service (UDP, normally port 623).
    pub address: String,
    pub user: String,
    pub password: Zeroizing<String>,
}

impl std::fmt::Debug for BmcTarget {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BmcTarget({}@{})", self.user, self.address)
    }
}

impl BmcTarget {
    /// Checks the address's form (a name is resolved at each session).
    pub fn check_address(address: &str) -> Result<(), BmcError> {
        let bad = || BmcError::Address(address.to_string());
        let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(bad());
        }
        if host
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_')))
        {
            return Err(bad());
        }
        Ok(())
    }
}

/// How long one UDP exchange waits for its answer.
const EXCHANGE: Duration = Duration::from_secs(2);
/// After this, a command not yet sent (a slow session set-up, a retry on a new
/// session) is not sent at all.
const DEADLINE: Duration = Duration::from_secs(8);
/// How long a request waits for its BMC to finish another one.
const QUEUE: Duration = Duration::from_secs(2);

/// One BMC and its session.
#[derive(Debug)]
pub struct Link {
    target: BmcTarget,
    session: Mutex<Option<Rmcp>>,
    /// One request at a time (see the crate's documentation).
    turn: Arc<tokio::sync::Semaphore>,
    /// One walk of the sensors at a time: two would cancel each other's SDR
    /// reservation, and queue ahead of a power request.
    walk: tokio::sync::Mutex<()>,
}

impl Link {
    pub fn new(target: BmcTarget) -> Link {
        Link {
            target,
            session: Mutex::new(None),
            turn: Arc::new(tokio::sync::Semaphore::new(1)),
            walk: tokio::sync::Mutex::new(()),
        }
    }

    pub async fn power_state(self: &Arc<Self>) -> Result<PowerState, BmcError> {
        let data = self.request(0x00, 0x01, vec![], "chassis status").await?;
        let first = data
            .first()
            .ok_or_else(|| self.garbage("chassis status", "no data"))?;
        Ok(if first & 1 == 1 {
            PowerState::On
        } else {
            PowerState::Off
        })
    }

    /// The BMC's threshold sensors and their readings (see [`sensors`]).
    pub async fn sensors(self: &Arc<Self>) -> Result<Vec<cairn_adminapi::SensorView>, BmcError> {
        let addr = &self.target.address;
        let _walk = sensors::one_walk(&self.walk, addr).await?;
        sensors::read(addr, |n, c, d, w| self.request(n, c, d, w)).await
    }

    pub async fn power(self: &Arc<Self>, action: PowerAction) -> Result<(), BmcError> {
        self.request(0x00, 0x02, vec![control_code(action)], "chassis control")
            .await
            .map(drop)
    }

    fn garbage(&self, what: &'static str, why: impl Into<String>) -> BmcError {
        BmcError::Garbage {
            addr: self.target.address.clone(),
            what,
            why: why.into(),
        }
    }

    /// One request, on the blocking pool: when the BMC is free within
    /// [`QUEUE`], sent only before [`DEADLINE`].
    async fn request(
        self: &Arc<Self>,
        netfn: u8,
        cmd: u8,
        data: Vec<u8>,
        what: &'static str,
    ) -> Result<Vec<u8>, BmcError> {
        let addr = || self.target.address.clone();
        let permit = match tokio::time::timeout(QUEUE, self.turn.clone().acquire_owned()).await {
            Ok(Ok(p)) => p,
            _ => return Err(BmcError::Busy { addr: addr(), what }),
        };
        let link = self.clone();
        let send_by = std::time::Instant::now() + DEADLINE;
        // The permit goes with the job: the BMC is free again when the job
        // ends, not when its caller stops waiting.
        let job = tokio::task::spawn_blocking(move || {
            let _turn = permit;
            link.exchange(netfn, cmd, &data, what, send_by)
        });
        // Sent at the latest at the deadline, answered within an exchange.
        let wait = DEADLINE + EXCHANGE + Duration::from_secs(1);
        match tokio::time::timeout(wait, job).await {
            Ok(Ok(r)) => r,
            // ipmi-rs panicked on what the BMC sent.
            Ok(Err(e)) => Err(self.garbage(what, format!("the IPMI client failed: {e}"))),
            Err(_) => Err(BmcError::TimedOut {
                addr: addr(),
                what,
                secs: wait.as_secs(),
            }),
        }
    }

    fn exchange(
        &self,
        netfn: u8,
        cmd: u8,
        data: &[u8],
        what: &'static str,
        send_by: std::time::Instant,
    ) -> Result<Vec<u8>, BmcError> {
        let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let reused = session.is_some();
        for attempt in 0..2 {
            let rmcp = match session.as_mut() {
                Some(r) => r,
                None => session.insert(self.open()?),
            };
            if std::time::Instant::now() >= send_by {
                return Err(BmcError::NotSent {
                    addr: self.target.address.clone(),
                    what,
                });
            }
            let mut req = Request::new(
                Message::new_raw(netfn, cmd, data.to_vec()),
                RequestTargetAddress::Bmc(LogicalUnit::Zero),
            );
            match rmcp.send_recv(&mut req) {
                Ok(resp) if resp.cc() == 0 => return Ok(resp.data().to_vec()),
                Ok(resp) => {
                    return Err(BmcError::Refused {
                        addr: self.target.address.clone(),
                        what,
                        cc: resp.cc(),
                    })
                }
                Err(e) => {
                    *session = None;
                    if !(reused && attempt == 0) {
                        return Err(BmcError::Unreachable {
                            addr: self.target.address.clone(),
                            why: format!("{what}: {e:?}"),
                        });
                    }
                    tracing::debug!(bmc = %self.target.address, "stale BMC session, opening another");
                }
            }
        }
        unreachable!("the loop returns on its second pass")
    }

    /// A new RMCP+ session, raised to the operator privilege (what chassis
    /// control needs).
    fn open(&self) -> Result<Rmcp, BmcError> {
        let addr = self.target.address.clone();
        probe::require_rmcp_plus(&addr, EXCHANGE)?;
        let mut rmcp = Rmcp::new(addr.as_str(), EXCHANGE).map_err(|e| BmcError::Unreachable {
            addr: addr.clone(),
            why: e.to_string(),
        })?;
        rmcp.activate(
            true,
            Some(&self.target.user),
            Some(self.target.password.as_bytes()),
        )
        .map_err(|e| activation_error(&addr, format!("{e:?}")))?;
        let mut req = Request::new(
            Message::new_raw(0x06, 0x3b, vec![0x03]),
            RequestTargetAddress::Bmc(LogicalUnit::Zero),
        );
        match rmcp.send_recv(&mut req) {
            Ok(r) if r.cc() == 0 => Ok(rmcp),
            Ok(r) => Err(BmcError::Refused {
                addr,
                what: "the operator privilege",
                cc: r.cc(),
            }),
            Err(e) => Err(BmcError::Unreachable {
                addr,
                why: format!("set session privilege: {e:?}"),
            }),
        }
    }
}

/// The BMCs this node talks to, one [`Link`] (one session) each.
#[derive(Debug, Default)]
pub struct Links {
    links: Mutex<HashMap<(String, String), Arc<Link>>>,
}

impl Links {
    /// Keeps `link` (one whose session was just proven) as its target's, in
    /// place of any older one.
    pub fn adopt(&self, link: Arc<Link>) {
        let key = (link.target.address.clone(), link.target.user.clone());
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, link);
    }

    /// The link to this target; a changed password gets a new one.
    pub fn get(&self, target: &BmcTarget) -> Arc<Link> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let key = (target.address.clone(), target.user.clone());
        match links.get(&key) {
            Some(l) if l.target.password == target.password => l.clone(),
            _ => {
                let l = Arc::new(Link::new(target.clone()));
                links.insert(key, l.clone());
                l
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        for ok in ["127.0.0.1:623", "bmc-3.mgmt:623", "[fe80::1]:623"] {
            assert!(BmcTarget::check_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "127.0.0.1",
            ":623",
            "h:0",
            "h:99999",
            "h x:623",
            "h;rm:1",
        ] {
            assert!(BmcTarget::check_address(bad).is_err(), "{bad}");
        }
    }

    /// A BMC that answers every packet with noise: an error, not a panic nor a hang.
    #[tokio::test]
    async fn a_bmc_answering_garbage_is_an_error() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                let noise: Vec<u8> = (0..n.max(40)).map(|i| (i * 37 + 11) as u8).collect();
                let _ = sock.send_to(&noise, from);
            }
        });
        let link = Arc::new(Link::new(BmcTarget {
            address: addr,
            user: "admin".into(),
            password: Zeroizing::new("pw".into()),
        }));
        let t = std::time::Instant::now();
        let e = link.power_state().await.unwrap_err();
        assert!(
            t.elapsed() <= DEADLINE + EXCHANGE + Duration::from_secs(1),
            "{e}"
        );
        assert!(!matches!(e, BmcError::Address(_)), "{e}");
    }

    /// Many callers at a silent BMC: one request runs, the others are refused as
    /// busy at once; none outlives its bound, and none is queued to run later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_bmc_takes_one_request_at_a_time() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let link = Arc::new(Link::new(BmcTarget {
            address: sock.local_addr().unwrap().to_string(),
            user: "admin".into(),
            password: Zeroizing::new("pw".into()),
        }));
        let t = std::time::Instant::now();
        let calls: Vec<_> = (0..20)
            .map(|_| {
                let l = link.clone();
                tokio::spawn(async move { l.power(PowerAction::Off).await })
            })
            .collect();
        let mut busy = 0;
        for c in calls {
            if let Err(BmcError::Busy { .. }) = c.await.unwrap() {
                busy += 1;
            }
        }
        assert!(busy >= 18, "{busy} of 20 refused as busy");
        assert!(
            t.elapsed() <= DEADLINE + EXCHANGE + QUEUE + Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        drop(sock);
    }

    /// Nothing listening: the request fails within its deadline.
    #[tokio::test]
    async fn a_silent_bmc_times_out() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap().to_string();
        let link = Arc::new(Link::new(BmcTarget {
            address: addr,
            user: "admin".into(),
            password: Zeroizing::new("pw".into()),
        }));
        let t = std::time::Instant::now();
        let e = link.power(PowerAction::Off).await.unwrap_err();
        assert!(
            t.elapsed() <= DEADLINE + EXCHANGE + Duration::from_secs(1),
            "{e}"
        );
        assert!(
            matches!(e, BmcError::Unreachable { .. } | BmcError::TimedOut { .. }),
            "{e}"
        );
        drop(sock);
    }
}
