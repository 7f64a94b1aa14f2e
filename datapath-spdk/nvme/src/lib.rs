//! Cairn's userspace NVMe driver: a poll-mode driver over VFIO, written to the
//! NVMe 1.4 specification, and the `nvme` backend of the datapath's
//! [`BlockDevice`](cairn_blockdev::BlockDevice) / [`QueuePair`](cairn_blockdev::QueuePair).
//!
//! Layers, bottom up:
//! - [`hw`]: the audited core and the only `unsafe` code of the crate: DMA memory
//!   (hugepages, IOVAs), the DMA buffer pool, MMIO, VFIO ioctls;
//! - [`DeviceAccess`]: BAR0 registers and DMA allocation, implemented by
//!   [`VfioDevice`] and by the in-process [`EmulatedController`];
//! - `queue` (SQ/CQ rings, PRPs), `admin` (the admin queue), `controller`
//!   (bring-up, namespaces, failure), `qpair` (one I/O queue pair per reactor):
//!   safe Rust, `#![deny(unsafe_code)]`.
//!
//! What it owns: the controllers it opened, their queues and DMA memory. What it
//! must never do: panic or misbehave on anything a controller writes (completions
//! are validated: queue id, command id, SQ head, phase); hand back a buffer the
//! device may still write into; complete an I/O it did not see complete. A
//! controller that breaks the protocol, reports fatal status or goes away is
//! failed for good: its I/O fails with `BlockError::Failed` and `check()` says why.

#![deny(unsafe_code)]

mod admin;
pub mod bench;
mod controller;
mod device;
pub mod emu;
mod error;
pub mod hw;
mod qpair;
mod queue;
pub mod spec;
pub mod sysfs;

pub use controller::{DriverConfig, NamespaceInfo, NvmeController, NvmeNamespace};
pub use device::DeviceAccess;
pub use emu::{EmuConfig, EmuNamespace, EmulatedController, Fault};
pub use error::{NvmeError, Result};
pub use hw::vfio::VfioDevice;
pub use qpair::NvmeQueuePair;
pub use sysfs::{bind_vfio, find_nvme_controllers, unbind_vfio, Bdf};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// An NVMe drive as given on a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriveSpec {
    /// Namespace `nsid` of the controller at `bdf` (bound to vfio-pci).
    Pci { bdf: Bdf, nsid: u32 },
    /// An in-process emulated controller with one namespace of `size` bytes in
    /// 4 KiB blocks (tests and demos; nothing survives the process).
    Emulated { size: u64 },
}

impl std::str::FromStr for DriveSpec {
    type Err = NvmeError;
    /// `0000:00:04.0`, `0000:00:04.0/ns2`, `nvme:0000:00:04.0/ns1`, `emu:64M`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = |m: &str| NvmeError::BadDrive(s.to_string(), m.to_string());
        if let Some(size) = s.strip_prefix("emu:") {
            let size = parse_size(size).ok_or_else(|| bad("bad size after emu:"))?;
            if size < 1 << 20 {
                return Err(bad("an emulated drive needs at least 1 MiB"));
            }
            return Ok(DriveSpec::Emulated { size });
        }
        let rest = s.strip_prefix("nvme:").unwrap_or(s);
        let (addr, nsid) = match rest.split_once('/') {
            Some((a, ns)) => {
                let n = ns
                    .strip_prefix("ns")
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| bad("namespace must be nsN with N >= 1"))?;
                (a, n)
            }
            None => (rest, 1),
        };
        Ok(DriveSpec::Pci {
            bdf: addr.parse()?,
            nsid,
        })
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last()? {
        'K' | 'k' => (&t[..t.len() - 1], 1u64 << 10),
        'M' | 'm' => (&t[..t.len() - 1], 1 << 20),
        'G' | 'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// Opens NVMe drives, bringing up each controller once however many of its
/// namespaces are named.
#[derive(Debug)]
pub struct DriveOpener {
    sysfs: PathBuf,
    config: DriverConfig,
    controllers: HashMap<Bdf, NvmeController>,
    /// Emulated controllers made so far: each gets its own serial number.
    emulated: usize,
}

impl DriveOpener {
    /// An opener that finds devices under `sysfs` (normally `/sys`).
    pub fn new(sysfs: impl Into<PathBuf>, config: DriverConfig) -> Self {
        DriveOpener {
            sysfs: sysfs.into(),
            config,
            controllers: HashMap::new(),
            emulated: 0,
        }
    }

    /// The controller at `bdf`, opened through VFIO on first use.
    pub fn controller(&mut self, bdf: Bdf) -> Result<NvmeController> {
        if let Some(c) = self.controllers.get(&bdf) {
            return Ok(c.clone());
        }
        let dev = VfioDevice::open(&bdf, &self.sysfs)?;
        let c = NvmeController::new(Arc::new(dev), self.config.clone())?;
        self.controllers.insert(bdf, c.clone());
        Ok(c)
    }

    /// Opens a drive given as a [`DriveSpec`] string.
    pub fn open(&mut self, spec: &str) -> Result<NvmeNamespace> {
        match spec.parse::<DriveSpec>()? {
            DriveSpec::Pci { bdf, nsid } => self.controller(bdf)?.namespace(nsid),
            DriveSpec::Emulated { size } => {
                let serial = format!("CAIRN-EMU-{}", self.emulated);
                self.emulated += 1;
                let emu = EmulatedController::new(EmuConfig {
                    serial,
                    namespaces: vec![EmuNamespace::bytes(12, size)],
                    ..EmuConfig::default()
                });
                NvmeController::new(Arc::new(emu), self.config.clone())?.namespace(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_specs() {
        let b: Bdf = "0000:00:04.0".parse().unwrap();
        assert_eq!(
            "0000:00:04.0".parse::<DriveSpec>().unwrap(),
            DriveSpec::Pci { bdf: b, nsid: 1 }
        );
        assert_eq!(
            "nvme:0000:00:04.0/ns3".parse::<DriveSpec>().unwrap(),
            DriveSpec::Pci { bdf: b, nsid: 3 }
        );
        assert_eq!(
            "emu:64M".parse::<DriveSpec>().unwrap(),
            DriveSpec::Emulated { size: 64 << 20 }
        );
        assert_eq!(
            "emu:67108864".parse::<DriveSpec>().unwrap(),
            DriveSpec::Emulated { size: 64 << 20 }
        );
        for bad in [
            "0000:00:04.0/ns0",
            "0000:00:04.0/x",
            "nvme:zz",
            "emu:1K",
            "emu:",
            "/dev/nvme0n1",
        ] {
            assert!(bad.parse::<DriveSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn emulated_drives_have_distinct_serials() {
        use cairn_blockdev::BlockDevice;
        let mut o = DriveOpener::new("/nonexistent", DriverConfig::default());
        let a = o.open("emu:2M").unwrap().info();
        let b = o.open("emu:2M").unwrap().info();
        assert_eq!(a.identity.serial.as_deref(), Some("CAIRN-EMU-0"));
        assert_eq!(b.identity.serial.as_deref(), Some("CAIRN-EMU-1"));
        assert_eq!(a.identity.model.as_deref(), Some("Cairn emulated NVMe"));
        assert_eq!(a.location, "emu:CAIRN-EMU-0/ns1");
        assert_eq!(a.name, "nvme:emu:CAIRN-EMU-0/ns1");
    }
}
