//! The node's own BMC, in-band through the kernel's IPMI driver (`/dev/ipmi0`:
//! modules ipmi_msghandler, ipmi_devintf, ipmi_si; KCS on most servers and on
//! QEMU's `ipmi-bmc-sim`): its identity, its watchdog (armed by mgmtd and
//! kicked while mgmtd is alive, so a hung daemon gets the node reset), and its
//! event log (SEL), where drive failures are written as standard "Drive Slot:
//! Drive Fault" events that `ipmitool sel list` and any BMC tool show.

use crate::{parse_identity, BmcError, BmcIdentity};
use ipmi_rs::connection::{IpmiConnection, LogicalUnit, Message, Request, RequestTargetAddress};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the local device answers within.
const LOCAL_TIMEOUT: Duration = Duration::from_secs(5);

/// The node's own BMC.
pub struct LocalBmc {
    path: PathBuf,
    dev: Mutex<ipmi_rs::File>,
    /// One walk of the sensors at a time (see `Link`).
    walk: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for LocalBmc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalBmc({})", self.path.display())
    }
}

/// IPMI's "software ID" of system software (generator id 0x41: software id
/// 0x20, shifted, with the software bit): who the SEL says wrote an event.
const SYSTEM_SOFTWARE: u8 = 0x41;

impl LocalBmc {
    /// Opens the device; an error when it is absent or the driver is not loaded.
    pub fn open(path: &Path) -> Result<LocalBmc, BmcError> {
        let dev = ipmi_rs::File::new(path, LOCAL_TIMEOUT).map_err(|e| BmcError::Unreachable {
            addr: path.display().to_string(),
            why: e.to_string(),
        })?;
        Ok(LocalBmc {
            path: path.to_path_buf(),
            dev: Mutex::new(dev),
            walk: tokio::sync::Mutex::new(()),
        })
    }

    /// The device it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }

    async fn request(
        self: &Arc<Self>,
        netfn: u8,
        cmd: u8,
        data: Vec<u8>,
        what: &'static str,
    ) -> Result<Vec<u8>, BmcError> {
        let me = self.clone();
        let job = tokio::task::spawn_blocking(move || {
            let mut dev = me.dev.lock().unwrap_or_else(|e| e.into_inner());
            let mut req = Request::new(
                Message::new_raw(netfn, cmd, data),
                RequestTargetAddress::Bmc(LogicalUnit::Zero),
            );
            dev.send_recv(&mut req).map(|r| (r.cc(), r.data().to_vec()))
        });
        let deadline = LOCAL_TIMEOUT + Duration::from_secs(1);
        match tokio::time::timeout(deadline, job).await {
            Ok(Ok(Ok((0, data)))) => Ok(data),
            Ok(Ok(Ok((cc, _)))) => Err(BmcError::Refused {
                addr: self.name(),
                what,
                cc,
            }),
            Ok(Ok(Err(e))) => Err(BmcError::Unreachable {
                addr: self.name(),
                why: format!("{what}: {e}"),
            }),
            Ok(Err(e)) => Err(BmcError::Garbage {
                addr: self.name(),
                what,
                why: format!("the IPMI client failed: {e}"),
            }),
            Err(_) => Err(BmcError::TimedOut {
                addr: self.name(),
                what,
                secs: deadline.as_secs(),
            }),
        }
    }

    pub async fn identity(self: &Arc<Self>) -> Result<BmcIdentity, BmcError> {
        let d = self.request(0x06, 0x01, vec![], "get device id").await?;
        parse_identity(&d).ok_or_else(|| BmcError::Garbage {
            addr: self.name(),
            what: "get device id",
            why: "fewer than 11 bytes".into(),
        })
    }

    /// The BMC's threshold sensors and their readings.
    pub async fn sensors(self: &Arc<Self>) -> Result<Vec<cairn_adminapi::SensorView>, BmcError> {
        let name = self.name();
        let _walk = crate::sensors::one_walk(&self.walk, &name).await?;
        crate::sensors::read(&name, |n, c, d, w| self.request(n, c, d, w)).await
    }

    /// Arms the watchdog: a hard reset unless [`kick`](Self::kick)ed within
    /// `timeout` (at most 6553 s). Set Watchdog Timer, then Reset Watchdog Timer
    /// to start it (IPMI 2.0, 27.5 and 27.6).
    pub async fn arm_watchdog(self: &Arc<Self>, timeout: Duration) -> Result<(), BmcError> {
        let tenths = u16::try_from(timeout.as_millis() / 100)
            .unwrap_or(u16::MAX)
            .max(10);
        let [lo, hi] = tenths.to_le_bytes();
        // Timer use 4 (SMS/OS); action 1 (hard reset), no pre-timeout interrupt;
        // clear the SMS/OS expiration flag; the countdown in 100 ms units.
        let set = vec![0x04, 0x01, 0x00, 0x10, lo, hi];
        self.request(0x06, 0x24, set, "set watchdog timer").await?;
        self.kick().await
    }

    /// Restarts the watchdog's countdown.
    pub async fn kick(self: &Arc<Self>) -> Result<(), BmcError> {
        self.request(0x06, 0x22, vec![], "reset watchdog timer")
            .await
            .map(drop)
    }

    /// Stops the watchdog (a clean stop of mgmtd must not reset the node).
    pub async fn disarm_watchdog(self: &Arc<Self>) -> Result<(), BmcError> {
        // Timer use 4, bit 6 clear: the timer stops; action 0: none.
        let set = vec![0x04, 0x00, 0x00, 0x10, 0x64, 0x00];
        self.request(0x06, 0x24, set, "set watchdog timer")
            .await
            .map(drop)
    }

    /// Writes "Drive Slot `slot`: Drive Fault, asserted" to the SEL (a system
    /// event record, sensor type 0x0D, sensor-specific offset 1).
    pub async fn log_drive_fault(self: &Arc<Self>, slot: u8) -> Result<(), BmcError> {
        self.add_sel(0x0d, slot, 0x01).await
    }

    /// Writes an "OS Boot: boot completed" event (sensor type 0x1F, offset 1):
    /// the node's software is up.
    pub async fn log_started(self: &Arc<Self>) -> Result<(), BmcError> {
        self.add_sel(0x1f, 0, 0x01).await
    }

    async fn add_sel(
        self: &Arc<Self>,
        sensor_type: u8,
        sensor: u8,
        offset: u8,
    ) -> Result<(), BmcError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32)
            .to_le_bytes();
        // Record id (the BMC assigns it), type 2 (system event), timestamp,
        // generator id, event message format 4 (IPMI 2.0), sensor type and
        // number, event type 0x6F (sensor-specific, assertion), event data.
        let mut rec = vec![0x00, 0x00, 0x02];
        rec.extend_from_slice(&now);
        rec.extend_from_slice(&[
            SYSTEM_SOFTWARE,
            0x00,
            0x04,
            sensor_type,
            sensor,
            0x6f,
            offset,
            0xff,
            0xff,
        ]);
        self.request(0x0a, 0x44, rec, "add SEL entry")
            .await
            .map(drop)
    }
}
