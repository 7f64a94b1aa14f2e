//! Moving a PCI function between kernel drivers through sysfs: to vfio-pci for
//! Cairn's userspace NVMe driver, and back to `nvme` for the kernel's tools. The
//! sysfs root is a parameter, so tests run against a fake tree.
//!
//! The order matters: `driver_override` is written *before* the current driver is
//! unbound, so that nothing probing the function in between (a rescan, a hotplug
//! event) hands it to another driver; and a function is unbound only when the
//! driver it goes to is loaded — a controller left with no driver is a drive lost
//! until the next boot.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Why a function could not be moved.
#[derive(Debug)]
pub enum PciError {
    /// No such function under `bus/pci/devices`.
    NoDevice(PathBuf),
    /// The target driver is not loaded (its directory is missing).
    DriverNotLoaded { driver: String, dir: PathBuf },
    /// A sysfs attribute could not be written.
    Attr { path: PathBuf, source: io::Error },
    /// Binding to the driver failed; the kernel was asked to probe a driver for it
    /// instead (`probe` says how that went).
    Bind {
        bind: Box<PciError>,
        probe: Option<Box<PciError>>,
    },
}

impl fmt::Display for PciError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PciError::NoDevice(p) => write!(f, "{} does not exist", p.display()),
            PciError::DriverNotLoaded { driver, dir } => {
                write!(f, "{driver} is not loaded ({} is missing)", dir.display())
            }
            PciError::Attr { path, source } => write!(f, "write to {}: {source}", path.display()),
            PciError::Bind { bind, probe: None } => write!(
                f,
                "{bind}; asked the kernel to probe a driver for it instead"
            ),
            PciError::Bind {
                bind,
                probe: Some(p),
            } => write!(f, "{bind}; {p}; it has no driver until the next boot"),
        }
    }
}

impl std::error::Error for PciError {}

/// `bus/pci/devices/<bdf>` under the sysfs root.
pub fn device_dir(sys: &Path, bdf: &str) -> PathBuf {
    sys.join("bus/pci/devices").join(bdf)
}

/// The driver a function is bound to, from its `driver` link.
pub fn driver_of(sys: &Path, bdf: &str) -> Option<String> {
    let link = std::fs::read_link(device_dir(sys, bdf).join("driver")).ok()?;
    link.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// The function's IOMMU group (what `/dev/vfio/<group>` is named after).
pub fn iommu_group(sys: &Path, bdf: &str) -> Option<String> {
    let link = std::fs::read_link(device_dir(sys, bdf).join("iommu_group")).ok()?;
    link.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Writes a sysfs attribute: one write to an existing file (a missing attribute is
/// an error, never created).
pub fn write_attr(path: &Path, value: &str) -> Result<(), PciError> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|source| PciError::Attr {
            path: path.to_path_buf(),
            source,
        })
}

fn driver_dir(sys: &Path, driver: &str) -> Result<PathBuf, PciError> {
    let dir = sys.join("bus/pci/drivers").join(driver);
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(PciError::DriverNotLoaded {
            driver: driver.to_string(),
            dir,
        })
    }
}

/// Binds `bdf` to `driver`: the override, then unbind from the current driver,
/// then bind. Returns the driver it was taken from (`None`: it had none). A
/// function already on `driver` is left as it is (`Ok(None)` and nothing written).
pub fn bind_driver(sys: &Path, bdf: &str, driver: &str) -> Result<Option<String>, PciError> {
    let dev = device_dir(sys, bdf);
    if !dev.exists() {
        return Err(PciError::NoDevice(dev));
    }
    let current = driver_of(sys, bdf);
    if current.as_deref() == Some(driver) {
        return Ok(None);
    }
    let target = driver_dir(sys, driver)?;
    write_attr(&dev.join("driver_override"), driver)?;
    if current.is_some() {
        write_attr(&dev.join("driver/unbind"), bdf)?;
    }
    write_attr(&target.join("bind"), bdf)?;
    Ok(current)
}

/// Gives `bdf` back to `driver` (clearing the override that names another one):
/// clear `driver_override`, unbind, bind. If the bind fails the kernel is asked to
/// probe a driver for it, so it is not left with none.
pub fn release_to(sys: &Path, bdf: &str, driver: &str) -> Result<(), PciError> {
    let dev = device_dir(sys, bdf);
    if !dev.exists() {
        return Err(PciError::NoDevice(dev));
    }
    let target = driver_dir(sys, driver)?;
    // "\n" clears the override (an empty write is refused by the kernel).
    write_attr(&dev.join("driver_override"), "\n")?;
    if driver_of(sys, bdf).is_some() {
        write_attr(&dev.join("driver/unbind"), bdf)?;
    }
    if let Err(bind) = write_attr(&target.join("bind"), bdf) {
        let probe = write_attr(&sys.join("bus/pci/drivers_probe"), bdf).err();
        return Err(PciError::Bind {
            bind: Box::new(bind),
            probe: probe.map(Box::new),
        });
    }
    Ok(())
}
