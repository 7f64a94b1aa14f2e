//! Handing NVMe controllers to vfio-pci for the userspace driver, through sysfs:
//! `driver_override`, unbind from the current driver, bind to vfio-pci; and handing
//! them back to the kernel's `nvme` driver on request ([`release`]), for maintenance
//! with the kernel's tools (nvme-cli firmware updates, secure erase) or to take a
//! drive out of Cairn.
//!
//! The sysfs and procfs roots are parameters, so tests run against fake trees. Nothing
//! is unbound unless the driver it goes to can take the device (vfio-pci: loaded, IOMMU
//! group present; nvme: loaded): a controller left without any driver would be a drive
//! lost for this boot.

use crate::drives::is_pci_address;
use crate::NodeosError;
pub use cairn_sysutil::pci::driver_of;
use cairn_sysutil::pci::{device_dir, iommu_group, PciError};
use std::path::{Path, PathBuf};

pub const VFIO_DRIVER: &str = "vfio-pci";
/// The kernel's NVMe driver, which [`release`] gives controllers back to.
pub const NVME_DRIVER: &str = "nvme";
/// PCI class of an NVMe controller (mass storage, non-volatile memory, NVMe).
const NVME_CLASS: u32 = 0x010802;

/// What [`bind`] did to one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub pci_address: String,
    /// The IOMMU group: datapathd opens `/dev/vfio/<group>`.
    pub iommu_group: String,
    /// The driver it was taken from (`nvme`), `None` if it had none or was already on
    /// vfio-pci.
    pub previous_driver: Option<String>,
    pub already_bound: bool,
}

fn pci(bdf: &str) -> impl FnOnce(PciError) -> NodeosError + '_ {
    move |e| err(bdf, e.to_string())
}

fn err(bdf: &str, message: impl Into<String>) -> NodeosError {
    NodeosError::Vfio {
        device: bdf.to_string(),
        message: message.into(),
    }
}

/// Bind `bdf` to vfio-pci. Checks first that the device exists, has an IOMMU group and
/// that vfio-pci is loaded; then sets `driver_override` (so no other driver grabs it on
/// a rescan), unbinds the current driver and binds vfio-pci.
pub fn bind(sys: &Path, bdf: &str) -> Result<Binding, NodeosError> {
    if !is_pci_address(bdf) {
        return Err(err(bdf, "not a PCI address (DDDD:BB:DD.F)"));
    }
    let dev = device_dir(sys, bdf);
    if !dev.exists() {
        return Err(err(bdf, format!("{} does not exist", dev.display())));
    }
    let group = iommu_group(sys, bdf).ok_or_else(|| {
        err(
            bdf,
            "no IOMMU group: enable the IOMMU (intel_iommu=on / amd_iommu=on, VT-d in firmware) \
             or use datapath.backend = \"uring\"",
        )
    })?;
    let current = driver_of(sys, bdf);
    if current.as_deref() == Some(VFIO_DRIVER) {
        return Ok(Binding {
            pci_address: bdf.to_string(),
            iommu_group: group,
            previous_driver: None,
            already_bound: true,
        });
    }
    let previous = cairn_sysutil::pci::bind_driver(sys, bdf, VFIO_DRIVER).map_err(pci(bdf))?;
    Ok(Binding {
        pci_address: bdf.to_string(),
        iommu_group: group,
        previous_driver: previous,
        already_bound: false,
    })
}

/// Check that `bdf` ended up on vfio-pci (the kernel binds synchronously on the `bind`
/// write, so this reads the result, it does not wait for it).
pub fn verify(sys: &Path, bdf: &str) -> Result<(), NodeosError> {
    verify_driver(sys, bdf, VFIO_DRIVER)
}

/// Check that `bdf` is bound to `driver` now.
fn verify_driver(sys: &Path, bdf: &str, driver: &str) -> Result<(), NodeosError> {
    match driver_of(sys, bdf) {
        Some(d) if d == driver => Ok(()),
        Some(d) => Err(err(
            bdf,
            format!("still bound to {d} after binding to {driver}"),
        )),
        None => Err(err(bdf, format!("no driver after binding to {driver}"))),
    }
}

/// What [`release`] did to one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub pci_address: String,
    /// It was on the nvme driver already; nothing was unbound.
    pub already_released: bool,
}

/// NVMe controllers (PCI class 0x010802) bound to vfio-pci, in address order: what
/// `nodeos release-drives` without arguments releases.
pub fn vfio_nvme_controllers(sys: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(sys.join("bus/pci/devices")) else {
        return Vec::new();
    };
    let mut out: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|bdf| is_pci_address(bdf))
        .filter(|bdf| {
            let class = crate::read_attr(&device_dir(sys, bdf).join("class")).unwrap_or_default();
            u32::from_str_radix(class.trim_start_matches("0x"), 16).ok() == Some(NVME_CLASS)
                && driver_of(sys, bdf).as_deref() == Some(VFIO_DRIVER)
        })
        .collect();
    out.sort();
    out
}

/// Processes holding the VFIO group `group` open (`<proc>/<pid>/fd/*` linking to
/// `/dev/vfio/<group>`): datapathd, while it drives the controller. Processes whose
/// descriptors cannot be read are skipped.
pub fn vfio_group_users(proc: &Path, group: &str) -> Vec<u32> {
    let target = PathBuf::from("/dev/vfio").join(group);
    let Ok(rd) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_dir(proc.join(pid.to_string()).join("fd"))
                .map(|fds| {
                    fds.flatten()
                        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == target))
                })
                .unwrap_or(false)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Give `bdf` back to the kernel's nvme driver: clear `driver_override` (it names
/// vfio-pci and would keep nvme off), unbind vfio-pci, bind nvme. Checks first that
/// the device exists, is on vfio-pci (a device on any other driver is not ours to
/// move), that the nvme driver is loaded, and, unless `force`, that no process holds
/// its VFIO group open: unbinding a device datapathd still drives makes the kernel
/// ask datapathd for it back, which fails that drive there (a hot unplug).
pub fn release(sys: &Path, proc: &Path, bdf: &str, force: bool) -> Result<Release, NodeosError> {
    if !is_pci_address(bdf) {
        return Err(err(bdf, "not a PCI address (DDDD:BB:DD.F)"));
    }
    let dev = device_dir(sys, bdf);
    if !dev.exists() {
        return Err(err(bdf, format!("{} does not exist", dev.display())));
    }
    let current = driver_of(sys, bdf);
    match current.as_deref() {
        Some(NVME_DRIVER) => {
            return Ok(Release {
                pci_address: bdf.to_string(),
                already_released: true,
            })
        }
        Some(VFIO_DRIVER) | None => {}
        Some(other) => {
            return Err(err(
                bdf,
                format!("bound to {other}, not {VFIO_DRIVER}: left alone"),
            ))
        }
    }
    let nvme_dir = sys.join("bus/pci/drivers").join(NVME_DRIVER);
    if !nvme_dir.is_dir() {
        return Err(err(
            bdf,
            format!(
                "the {NVME_DRIVER} driver is not loaded ({} is missing; modprobe nvme)",
                nvme_dir.display()
            ),
        ));
    }
    if !force {
        if let Some(group) = iommu_group(sys, bdf) {
            let users = vfio_group_users(proc, &group);
            if !users.is_empty() {
                return Err(err(
                    bdf,
                    format!(
                        "in use: /dev/vfio/{group} is open in process {} (datapathd?); stop cairn-datapathd first, or use --force",
                        users
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
    }
    cairn_sysutil::pci::release_to(sys, bdf, NVME_DRIVER).map_err(pci(bdf))?;
    Ok(Release {
        pci_address: bdf.to_string(),
        already_released: false,
    })
}

/// Check that `bdf` ended up on the nvme driver after [`release`].
pub fn verify_released(sys: &Path, bdf: &str) -> Result<(), NodeosError> {
    verify_driver(sys, bdf, NVME_DRIVER)
}

/// `nodeos release-drives [BDF...]`: releases the named controllers, or with none
/// named every NVMe controller on vfio-pci, each verified to be on nvme afterwards.
/// Loads the nvme driver with `modprobe` first when it is missing (a node running
/// the `nvme` backend never loads it). One result per controller, in order; an error
/// on one does not stop the others.
pub fn release_drives(
    paths: &crate::Paths,
    bdfs: &[String],
    force: bool,
    modprobe: Option<&Path>,
) -> Vec<(String, Result<Release, NodeosError>)> {
    let targets = if bdfs.is_empty() {
        vfio_nvme_controllers(&paths.sys)
    } else {
        bdfs.to_vec()
    };
    if !targets.is_empty() && !paths.sys.join("bus/pci/drivers").join(NVME_DRIVER).is_dir() {
        if let Some(mp) = modprobe {
            match std::process::Command::new(mp).arg(NVME_DRIVER).status() {
                Ok(s) if s.success() => {}
                Ok(s) => tracing::warn!("{} {NVME_DRIVER}: {s}", mp.display()),
                Err(e) => tracing::warn!("{} {NVME_DRIVER}: {e}", mp.display()),
            }
        }
    }
    targets
        .into_iter()
        .map(|bdf| {
            let r = release(&paths.sys, &paths.proc, &bdf, force).and_then(|r| {
                if !r.already_released {
                    verify_released(&paths.sys, &bdf)?;
                    tracing::info!(pci = %bdf, "NVMe controller released to the nvme driver");
                }
                Ok(r)
            });
            (bdf, r)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    const BDF: &str = "0000:00:04.0";

    /// A PCI device bound to `nvme`, in IOMMU group 7, and the vfio-pci driver directory.
    fn tree(with_group: bool, with_vfio: bool) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path();
        let drivers = sys.join("bus/pci/drivers");
        fs::create_dir_all(drivers.join("nvme")).unwrap();
        fs::write(drivers.join("nvme/unbind"), "").unwrap();
        if with_vfio {
            fs::create_dir_all(drivers.join(VFIO_DRIVER)).unwrap();
            fs::write(drivers.join(VFIO_DRIVER).join("bind"), "").unwrap();
        }
        fs::create_dir_all(sys.join("kernel/iommu_groups/7")).unwrap();
        let dev = sys.join("bus/pci/devices").join(BDF);
        fs::create_dir_all(&dev).unwrap();
        fs::write(dev.join("driver_override"), "(null)\n").unwrap();
        symlink("../../drivers/nvme", dev.join("driver")).unwrap();
        if with_group {
            symlink("../../../kernel/iommu_groups/7", dev.join("iommu_group")).unwrap();
        }
        d
    }

    #[test]
    fn binding_writes_override_unbind_and_bind() {
        let d = tree(true, true);
        let sys = d.path();
        let b = bind(sys, BDF).unwrap();
        assert_eq!(b.iommu_group, "7");
        assert_eq!(b.previous_driver.as_deref(), Some("nvme"));
        assert!(!b.already_bound);
        let dev = sys.join("bus/pci/devices").join(BDF);
        assert_eq!(
            fs::read_to_string(dev.join("driver_override")).unwrap(),
            VFIO_DRIVER
        );
        assert_eq!(
            fs::read_to_string(sys.join("bus/pci/drivers/nvme/unbind")).unwrap(),
            BDF
        );
        assert_eq!(
            fs::read_to_string(sys.join("bus/pci/drivers/vfio-pci/bind")).unwrap(),
            BDF
        );
        // The fake kernel did not move the link: verification says so.
        let e = verify(sys, BDF).unwrap_err().to_string();
        assert!(e.contains("still bound to nvme"), "{e}");
        // Once the device is on vfio-pci, verification passes and a second bind is a no-op.
        fs::remove_file(dev.join("driver")).unwrap();
        symlink("../../drivers/vfio-pci", dev.join("driver")).unwrap();
        verify(sys, BDF).unwrap();
        fs::write(sys.join("bus/pci/drivers/vfio-pci/bind"), "").unwrap();
        assert!(bind(sys, BDF).unwrap().already_bound);
        assert_eq!(
            fs::read_to_string(sys.join("bus/pci/drivers/vfio-pci/bind")).unwrap(),
            ""
        );
    }

    #[test]
    fn nothing_is_unbound_without_an_iommu_group() {
        let d = tree(false, true);
        let e = bind(d.path(), BDF).unwrap_err().to_string();
        assert!(e.contains("no IOMMU group"), "{e}");
        assert_eq!(
            fs::read_to_string(d.path().join("bus/pci/drivers/nvme/unbind")).unwrap(),
            ""
        );
    }

    #[test]
    fn nothing_is_unbound_without_vfio_pci() {
        let d = tree(true, false);
        let e = bind(d.path(), BDF).unwrap_err().to_string();
        assert!(e.contains("vfio-pci is not loaded"), "{e}");
        let dev = d.path().join("bus/pci/devices").join(BDF);
        assert_eq!(
            fs::read_to_string(dev.join("driver_override")).unwrap(),
            "(null)\n"
        );
    }

    #[test]
    fn bad_addresses_are_refused() {
        let d = tree(true, true);
        for bad in [
            "",
            "0000:00:04",
            "../../../etc",
            "0000:00:04.0/x",
            "zzzz:00:04.0",
        ] {
            assert!(bind(d.path(), bad).is_err(), "{bad}");
        }
        assert!(bind(d.path(), "0000:00:05.0")
            .unwrap_err()
            .to_string()
            .contains("does not exist"));
    }
}
