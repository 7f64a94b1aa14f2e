//! What a drive says it is (model, serial, firmware), for operators.
//!
//! The NVMe driver fills this from Identify Controller; the io_uring backend reads it
//! from sysfs for block devices. Both sources are outside our control (a controller
//! writes whatever it likes into Identify data, and sysfs attributes are whatever the
//! kernel driver exposes), so every string goes through [`DeviceIdentity::clean`]:
//! bounded, printable, trimmed, and `None` when nothing is left.

use std::io::Read;
use std::path::Path;

/// Longest identity string kept (NVMe's model is 40 bytes, SCSI's 16; anything
/// longer is not an identity string).
const MAX_LEN: usize = 128;

/// Model, serial number and firmware revision of a device, where known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub model: Option<String>,
    pub serial: Option<String>,
    pub firmware: Option<String>,
}

impl DeviceIdentity {
    /// A display-safe identity string: control characters and the replacement
    /// character of undecodable bytes are dropped, whitespace (including NVMe's space
    /// padding) trimmed, at most 128 characters kept; empty is `None`.
    pub fn clean(raw: &str) -> Option<String> {
        let s: String = raw
            .chars()
            .filter(|c| !c.is_control() && *c != char::REPLACEMENT_CHARACTER)
            .take(MAX_LEN)
            .collect();
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_string())
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.model.is_none() && self.serial.is_none() && self.firmware.is_none()
    }
}

/// Reads a sysfs attribute; `None` when it is missing, unreadable or blank.
fn attr(path: &Path) -> Option<String> {
    let mut buf = Vec::new();
    // Attributes are at most a page; reading more would only follow a bad link.
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_end(&mut buf)
        .ok()?;
    DeviceIdentity::clean(&String::from_utf8_lossy(&buf))
}

/// Major and minor number of a `dev_t` (glibc's encoding, which Linux uses).
fn major_minor(rdev: u64) -> (u64, u64) {
    let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff);
    let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff);
    (major, minor)
}

/// The identity of the block device with device number `rdev`, from the sysfs tree
/// at `sys` (normally `/sys`; a parameter so tests use a fake tree).
///
/// `sys/dev/block/MAJ:MIN` leads to the device (a partition leads to its disk).
/// `device/` beside it is the hardware: for an NVMe namespace the controller (or,
/// with native multipath, the subsystem), both with `model`, `serial` and
/// `firmware_rev`; for SCSI/SATA `model` and `rev`; virtio-blk has `serial` on the
/// disk itself. An NVMe namespace whose link leads elsewhere falls back to its
/// controller in `sys/class/nvme/nvmeX`. Nothing found is all `None`, never an error:
/// identity is for operators and must not keep a drive from opening.
pub fn block_device_identity(sys: &Path, rdev: u64) -> DeviceIdentity {
    let (major, minor) = major_minor(rdev);
    let Ok(mut disk) = std::fs::canonicalize(sys.join(format!("dev/block/{major}:{minor}"))) else {
        return DeviceIdentity::default();
    };
    if disk.join("partition").exists() {
        if let Some(parent) = disk.parent() {
            disk = parent.to_path_buf();
        }
    }
    let device = disk.join("device");
    let mut id = DeviceIdentity {
        model: attr(&device.join("model")),
        serial: attr(&device.join("serial")).or_else(|| attr(&disk.join("serial"))),
        firmware: attr(&device.join("firmware_rev")).or_else(|| attr(&device.join("rev"))),
    };
    let name = disk
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(rest) = name.strip_prefix("nvme") {
        let num: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !num.is_empty() {
            let ctrl = sys.join("class/nvme").join(format!("nvme{num}"));
            id.model = id.model.or_else(|| attr(&ctrl.join("model")));
            id.serial = id.serial.or_else(|| attr(&ctrl.join("serial")));
            id.firmware = id.firmware.or_else(|| attr(&ctrl.join("firmware_rev")));
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn rdev(major: u64, minor: u64) -> u64 {
        // The inverse of major_minor for small numbers.
        (major << 8) | (minor & 0xff) | ((minor & !0xff) << 12)
    }

    /// /sys with an NVMe namespace (259:0, controller nvme0, one partition 259:1),
    /// a SATA disk (8:0) and a virtio disk (254:0).
    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path();
        let w = |p: &str, s: &[u8]| {
            let p = sys.join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, s).unwrap();
        };
        // NVMe: devices/pci/nvme/nvme0/nvme0n1, the controller's attributes padded.
        w(
            "devices/pci0000:00/0000:00:04.0/nvme/nvme0/model",
            b"QEMU NVMe Ctrl                          \n",
        );
        w(
            "devices/pci0000:00/0000:00:04.0/nvme/nvme0/serial",
            b"SN-A0   \n",
        );
        w(
            "devices/pci0000:00/0000:00:04.0/nvme/nvme0/firmware_rev",
            b"8.2.0   \n",
        );
        let ns = sys.join("devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1");
        fs::create_dir_all(ns.join("nvme0n1p1")).unwrap();
        fs::write(ns.join("nvme0n1p1/partition"), "1\n").unwrap();
        symlink("..", ns.join("device")).unwrap();
        // SATA: model and rev, no serial attribute.
        w(
            "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/model",
            b"Samsung SSD 870 \n",
        );
        w(
            "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/rev",
            b"2B6Q\n",
        );
        let sda =
            sys.join("devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda");
        fs::create_dir_all(&sda).unwrap();
        symlink("../..", sda.join("device")).unwrap();
        // virtio: serial on the disk, garbage in the model.
        w(
            "devices/pci0000:00/0000:00:05.0/virtio1/block/vda/serial",
            b"VIRTIO-7\n",
        );
        w(
            "devices/pci0000:00/0000:00:05.0/virtio1/block/vda/device/model",
            b"\x01\x02\xff\xfe\n",
        );
        fs::create_dir_all(sys.join("dev/block")).unwrap();
        for (mm, target) in [
            (
                "259:0",
                "../../devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1",
            ),
            (
                "259:1",
                "../../devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1/nvme0n1p1",
            ),
            (
                "8:0",
                "../../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda",
            ),
            (
                "254:0",
                "../../devices/pci0000:00/0000:00:05.0/virtio1/block/vda",
            ),
        ] {
            symlink(target, sys.join("dev/block").join(mm)).unwrap();
        }
        t
    }

    #[test]
    fn identity_of_nvme_sata_and_virtio_disks() {
        let t = tree();
        let sys = t.path();
        let nvme = DeviceIdentity {
            model: Some("QEMU NVMe Ctrl".into()),
            serial: Some("SN-A0".into()),
            firmware: Some("8.2.0".into()),
        };
        assert_eq!(block_device_identity(sys, rdev(259, 0)), nvme);
        // A partition reports its disk.
        assert_eq!(block_device_identity(sys, rdev(259, 1)), nvme);
        assert_eq!(
            block_device_identity(sys, rdev(8, 0)),
            DeviceIdentity {
                model: Some("Samsung SSD 870".into()),
                serial: None,
                firmware: Some("2B6Q".into()),
            }
        );
        assert_eq!(
            block_device_identity(sys, rdev(254, 0)),
            DeviceIdentity {
                model: None,
                serial: Some("VIRTIO-7".into()),
                firmware: None,
            }
        );
        // Unknown device numbers, and no sysfs at all: nothing, no error.
        assert!(block_device_identity(sys, rdev(7, 3)).is_empty());
        assert!(block_device_identity(&sys.join("nope"), rdev(259, 0)).is_empty());
    }

    #[test]
    fn nvme_namespace_falls_back_to_its_controller_class_entry() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path();
        fs::create_dir_all(sys.join("block/nvme3n2")).unwrap();
        fs::create_dir_all(sys.join("class/nvme/nvme3")).unwrap();
        fs::write(sys.join("class/nvme/nvme3/model"), "Cairn Test Drive\n").unwrap();
        fs::write(sys.join("class/nvme/nvme3/serial"), "S3\n").unwrap();
        fs::create_dir_all(sys.join("dev/block")).unwrap();
        symlink("../../block/nvme3n2", sys.join("dev/block/259:7")).unwrap();
        let id = block_device_identity(sys, rdev(259, 7));
        assert_eq!(id.model.as_deref(), Some("Cairn Test Drive"));
        assert_eq!(id.serial.as_deref(), Some("S3"));
        assert_eq!(id.firmware, None);
    }

    #[test]
    fn major_minor_matches_the_kernel_encoding() {
        assert_eq!(major_minor(rdev(259, 0)), (259, 0));
        assert_eq!(major_minor(rdev(8, 17)), (8, 17));
        assert_eq!(major_minor(rdev(4095, 1 << 19)), (4095, 1 << 19));
    }

    #[test]
    fn cleaning_keeps_printable_text_only() {
        assert_eq!(DeviceIdentity::clean("  X1  \0\0"), Some("X1".into()));
        assert_eq!(DeviceIdentity::clean("\u{1}\u{fffd}\n "), None);
        assert_eq!(DeviceIdentity::clean("a\u{7}b"), Some("ab".into()));
        let long = "m".repeat(1000);
        assert_eq!(DeviceIdentity::clean(&long).unwrap().len(), MAX_LEN);
    }
}
