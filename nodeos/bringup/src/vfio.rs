//! Handing NVMe controllers to vfio-pci for the userspace driver, through sysfs:
//! `driver_override`, unbind from the current driver, bind to vfio-pci.
//!
//! The sysfs root is a parameter, so tests run against a fake tree. Nothing is unbound
//! unless vfio-pci can take the device (driver loaded, IOMMU group present): a controller
//! left without any driver would be a drive lost for this boot.

use crate::drives::is_pci_address;
use crate::NodeosError;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const VFIO_DRIVER: &str = "vfio-pci";

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

fn device_dir(sys: &Path, bdf: &str) -> PathBuf {
    sys.join("bus/pci/devices").join(bdf)
}

fn err(bdf: &str, message: impl Into<String>) -> NodeosError {
    NodeosError::Vfio {
        device: bdf.to_string(),
        message: message.into(),
    }
}

/// The driver a PCI device is bound to, from its `driver` link.
pub fn driver_of(sys: &Path, bdf: &str) -> Option<String> {
    let link = std::fs::read_link(device_dir(sys, bdf).join("driver")).ok()?;
    link.file_name().map(|n| n.to_string_lossy().into_owned())
}

fn iommu_group(sys: &Path, bdf: &str) -> Option<String> {
    let link = std::fs::read_link(device_dir(sys, bdf).join("iommu_group")).ok()?;
    link.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Write a sysfs attribute: one write, no create (a missing attribute is an error).
fn write_attr(path: &Path, value: &str, bdf: &str) -> Result<(), NodeosError> {
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| err(bdf, format!("write `{value}` to {}: {e}", path.display())))
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
    let vfio_dir = sys.join("bus/pci/drivers").join(VFIO_DRIVER);
    if !vfio_dir.is_dir() {
        return Err(err(
            bdf,
            format!(
                "{VFIO_DRIVER} is not loaded ({} is missing)",
                vfio_dir.display()
            ),
        ));
    }
    write_attr(&dev.join("driver_override"), VFIO_DRIVER, bdf)?;
    if current.is_some() {
        write_attr(&dev.join("driver/unbind"), bdf, bdf)?;
    }
    write_attr(&vfio_dir.join("bind"), bdf, bdf)?;
    Ok(Binding {
        pci_address: bdf.to_string(),
        iommu_group: group,
        previous_driver: current,
        already_bound: false,
    })
}

/// Check that `bdf` ended up on vfio-pci (the kernel binds synchronously on the `bind`
/// write, so this reads the result, it does not wait for it).
pub fn verify(sys: &Path, bdf: &str) -> Result<(), NodeosError> {
    match driver_of(sys, bdf) {
        Some(d) if d == VFIO_DRIVER => Ok(()),
        Some(d) => Err(err(
            bdf,
            format!("still bound to {d} after binding to {VFIO_DRIVER}"),
        )),
        None => Err(err(
            bdf,
            format!("no driver after binding to {VFIO_DRIVER}"),
        )),
    }
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
