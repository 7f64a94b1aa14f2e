//! PCI addresses and the sysfs side of VFIO: finding NVMe controllers and binding
//! them to vfio-pci (and back). The sysfs root is a parameter so these run against
//! a temporary directory in tests; on a node it is `/sys`.

#![deny(unsafe_code)]

use crate::{NvmeError, Result};
use std::fmt;
use std::path::Path;

/// PCI class code of an NVMe controller (mass storage, non-volatile memory, NVMe).
pub const NVME_CLASS: u32 = 0x010802;

/// A PCI address, `DDDD:BB:DD.F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bdf {
    pub domain: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl std::str::FromStr for Bdf {
    type Err = NvmeError;
    /// Parses `DDDD:BB:DD.F` or `BB:DD.F` (domain 0).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || NvmeError::BadAddress(s.to_string());
        let parts: Vec<&str> = s.split(':').collect();
        let (dom, bus, rest) = match parts.as_slice() {
            [d, b, r] => (*d, *b, *r),
            [b, r] => ("0", *b, *r),
            _ => return Err(bad()),
        };
        let (dev, func) = rest.split_once('.').ok_or_else(bad)?;
        let hex = |x: &str, max: u32| {
            if x.is_empty() || x.len() > 4 {
                return Err(bad());
            }
            u32::from_str_radix(x, 16)
                .ok()
                .filter(|&v| v <= max)
                .ok_or_else(bad)
        };
        Ok(Bdf {
            domain: hex(dom, 0xffff)? as u16,
            bus: hex(bus, 0xff)? as u8,
            device: hex(dev, 0x1f)? as u8,
            function: hex(func, 7)? as u8,
        })
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// The driver bound to a function, if any.
pub fn bound_driver(sysfs: &Path, bdf: &Bdf) -> Option<String> {
    cairn_sysutil::pci::driver_of(sysfs, &bdf.to_string())
}

/// Binds a PCI function to vfio-pci (override, unbind, bind: see
/// [`cairn_sysutil::pci`]). Idempotent.
pub fn bind_vfio(sysfs: &Path, bdf: &Bdf) -> Result<()> {
    cairn_sysutil::pci::bind_driver(sysfs, &bdf.to_string(), "vfio-pci")?;
    Ok(())
}

/// Gives a function back to the kernel's nvme driver, clearing the override.
pub fn unbind_vfio(sysfs: &Path, bdf: &Bdf) -> Result<()> {
    Ok(cairn_sysutil::pci::release_to(
        sysfs,
        &bdf.to_string(),
        "nvme",
    )?)
}

/// Every PCI function whose class is NVMe, in address order.
pub fn find_nvme_controllers(sysfs: &Path) -> Result<Vec<Bdf>> {
    let dir = sysfs.join("bus/pci/devices");
    let entries = std::fs::read_dir(&dir).map_err(|source| NvmeError::Sysfs {
        path: dir.display().to_string(),
        source,
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(bdf) = e.file_name().to_str().and_then(|n| n.parse::<Bdf>().ok()) else {
            continue;
        };
        let class = std::fs::read_to_string(e.path().join("class")).unwrap_or_default();
        let class = u32::from_str_radix(class.trim().trim_start_matches("0x"), 16).ok();
        if class == Some(NVME_CLASS) {
            out.push(bdf);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_parse_and_print() {
        let b: Bdf = "0000:00:04.0".parse().unwrap();
        assert_eq!(
            b,
            Bdf {
                domain: 0,
                bus: 0,
                device: 4,
                function: 0
            }
        );
        assert_eq!(b.to_string(), "0000:00:04.0");
        assert_eq!(
            "3a:1f.7".parse::<Bdf>().unwrap().to_string(),
            "0000:3a:1f.7"
        );
        for bad in [
            "",
            "00:04",
            "0000:00:20.0",
            "0000:00:04.8",
            "x:00:04.0",
            "0:0:0:0.0",
            "00000:00:04.0",
        ] {
            assert!(bad.parse::<Bdf>().is_err(), "{bad}");
        }
    }

    /// A fake sysfs with one NVMe function bound to `nvme` and one NIC.
    fn fake_sysfs() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["bus/pci/drivers/nvme", "bus/pci/drivers/vfio-pci"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        let nvme = r.join("bus/pci/devices/0000:00:04.0");
        std::fs::create_dir_all(&nvme).unwrap();
        std::fs::write(nvme.join("class"), "0x010802\n").unwrap();
        // The attributes the kernel provides (written, never created).
        for a in [
            "bus/pci/drivers/nvme/bind",
            "bus/pci/drivers/nvme/unbind",
            "bus/pci/drivers/vfio-pci/bind",
            "bus/pci/drivers/vfio-pci/unbind",
            "bus/pci/drivers_probe",
            "bus/pci/devices/0000:00:04.0/driver_override",
        ] {
            std::fs::write(r.join(a), "").unwrap();
        }
        std::os::unix::fs::symlink(r.join("bus/pci/drivers/nvme"), nvme.join("driver")).unwrap();
        let nic = r.join("bus/pci/devices/0000:00:03.0");
        std::fs::create_dir_all(&nic).unwrap();
        std::fs::write(nic.join("class"), "0x020000\n").unwrap();
        t
    }

    #[test]
    fn bind_writes_override_unbind_and_bind() {
        let t = fake_sysfs();
        let r = t.path();
        let b: Bdf = "0000:00:04.0".parse().unwrap();
        assert_eq!(find_nvme_controllers(r).unwrap(), vec![b]);
        assert_eq!(bound_driver(r, &b).as_deref(), Some("nvme"));
        bind_vfio(r, &b).unwrap();
        let read = |p: &str| std::fs::read_to_string(r.join(p)).unwrap();
        assert_eq!(read("bus/pci/drivers/nvme/unbind"), "0000:00:04.0");
        assert_eq!(
            read("bus/pci/devices/0000:00:04.0/driver_override"),
            "vfio-pci"
        );
        assert_eq!(read("bus/pci/drivers/vfio-pci/bind"), "0000:00:04.0");
        // Once bound to vfio-pci, binding again writes nothing.
        let dev = r.join("bus/pci/devices/0000:00:04.0");
        std::fs::remove_file(dev.join("driver")).unwrap();
        std::os::unix::fs::symlink(r.join("bus/pci/drivers/vfio-pci"), dev.join("driver")).unwrap();
        std::fs::write(r.join("bus/pci/drivers/vfio-pci/bind"), "").unwrap();
        bind_vfio(r, &b).unwrap();
        assert_eq!(read("bus/pci/drivers/vfio-pci/bind"), "");
        unbind_vfio(r, &b).unwrap();
        assert_eq!(read("bus/pci/drivers/vfio-pci/unbind"), "0000:00:04.0");
        assert_eq!(read("bus/pci/devices/0000:00:04.0/driver_override"), "\n");
        assert_eq!(read("bus/pci/drivers/nvme/bind"), "0000:00:04.0");
        let missing: Bdf = "0000:00:09.0".parse().unwrap();
        assert!(matches!(bind_vfio(r, &missing), Err(NvmeError::Bind(_))));
    }
}
