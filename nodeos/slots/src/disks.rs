//! Which disks are in use: mounted (directly, through a partition, or through a device
//! mapper / md holder), used as swap, holding the running system, or carrying a Cairn
//! system image. Read from `/proc/self/mountinfo`, `/proc/swaps` and `/sys/block`, all
//! paths given by the caller.
//!
//! Garbage in any of those files never panics: an unreadable line is skipped and a disk
//! whose attributes cannot be read is reported with what could be read.

use crate::{io_err, SlotError};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// Where the kernel's views of disks and mounts are. Tests point these at temp dirs.
#[derive(Clone, Debug)]
pub struct HostPaths {
    /// `/sys`
    pub sys: PathBuf,
    /// `/proc/self/mountinfo`
    pub mountinfo: PathBuf,
    /// `/proc/swaps`
    pub swaps: PathBuf,
    /// `/dev`
    pub dev: PathBuf,
}

impl HostPaths {
    /// The running system's paths.
    pub fn system() -> HostPaths {
        HostPaths::under(Path::new("/"))
    }

    /// The same layout below `root` (a fake tree in tests).
    pub fn under(root: &Path) -> HostPaths {
        HostPaths {
            sys: root.join("sys"),
            mountinfo: root.join("proc/self/mountinfo"),
            swaps: root.join("proc/swaps"),
            dev: root.join("dev"),
        }
    }
}

/// A `major:minor` device number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct DevNum {
    pub major: u32,
    pub minor: u32,
}

impl DevNum {
    pub fn parse(s: &str) -> Option<DevNum> {
        let (a, b) = s.trim().split_once(':')?;
        Some(DevNum {
            major: a.parse().ok()?,
            minor: b.parse().ok()?,
        })
    }
}

impl fmt::Display for DevNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// One mount from mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub dev: DevNum,
    pub mount_point: String,
    pub fstype: String,
    pub source: String,
}

/// Parse `/proc/self/mountinfo` text. Lines that do not parse are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let dev = DevNum::parse(f.get(2)?)?;
            let mount_point = unescape_octal(f.get(4)?);
            let mut r = right.split(' ');
            let fstype = r.next()?.to_string();
            let source = unescape_octal(r.next().unwrap_or(""));
            Some(Mount {
                dev,
                mount_point,
                fstype,
                source,
            })
        })
        .collect()
}

/// Parse `/proc/swaps` text: the swap device or file of each line after the header.
pub fn parse_swaps(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(unescape_octal))
        .collect()
}

/// mountinfo and swaps escape space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                // Three octal digits can exceed 255 (`\777`); such bytes are kept as written.
                let v = oct.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A partition of a disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Partition {
    pub name: String,
    pub dev: Option<DevNum>,
    /// GPT partition name (`PARTNAME` in the uevent), e.g. `cairn-a`.
    pub partlabel: Option<String>,
}

/// A whole disk from `/sys/block`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Disk {
    pub name: String,
    pub dev: Option<DevNum>,
    pub size_bytes: u64,
    pub partitions: Vec<Partition>,
}

/// Why a disk must not be written or claimed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiskUse {
    /// `(device, mount point)` of every mount on the disk, its partitions or holders.
    pub mounts: Vec<(String, String)>,
    /// Swap areas on the disk.
    pub swap: Vec<String>,
    /// Holds `/`, `/var/lib/cairn`, `/efi`, `/boot` or `/usr`: the running system.
    pub system: bool,
    /// Partitions labelled as a Cairn system image (`cairn-a`, `cairn-b`, `cairn-state`).
    pub cairn_partitions: Vec<String>,
    /// Device-mapper / md devices built on the disk.
    pub holders: Vec<String>,
}

impl DiskUse {
    /// Why writing the whole disk would destroy something in use, or `None` when it is free.
    /// A Cairn image that is not mounted is not a reason: re-flashing it is normal.
    pub fn busy_reason(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.system {
            why.push("it holds the running system".to_string());
        }
        if !self.mounts.is_empty() {
            let m: Vec<String> = self
                .mounts
                .iter()
                .map(|(d, p)| format!("{d} on {p}"))
                .collect();
            why.push(format!("mounted ({})", m.join(", ")));
        }
        if !self.swap.is_empty() {
            why.push(format!("used as swap ({})", self.swap.join(", ")));
        }
        if !self.holders.is_empty() {
            why.push(format!("in use by {}", self.holders.join(", ")));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// Mount points whose disk is the running system.
const SYSTEM_MOUNTS: [&str; 5] = ["/", "/var/lib/cairn", "/efi", "/boot", "/usr"];
/// Partition labels of a Cairn system disk.
const CAIRN_LABELS: [&str; 3] = ["cairn-a", "cairn-b", "cairn-state"];

/// Every whole disk in `<sys>/block`.
pub fn disks(sys: &Path) -> Result<Vec<Disk>, SlotError> {
    let dir = sys.join("block");
    let mut out = Vec::new();
    for de in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
        let de = de.map_err(io_err(&dir))?;
        let name = de.file_name().to_string_lossy().into_owned();
        let path = dir.join(&name);
        let mut partitions = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&path) {
            for p in rd.flatten() {
                let pp = p.path();
                if pp.join("partition").exists() {
                    partitions.push(Partition {
                        name: p.file_name().to_string_lossy().into_owned(),
                        dev: read_dev(&pp),
                        partlabel: uevent_value(&pp, "PARTNAME"),
                    });
                }
            }
        }
        partitions.sort_by(|a, b| a.name.cmp(&b.name));
        out.push(Disk {
            dev: read_dev(&path),
            size_bytes: read_sectors(&path).unwrap_or(0),
            name,
            partitions,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// `<dir>/dev` as a device number.
pub fn read_dev(dir: &Path) -> Option<DevNum> {
    std::fs::read_to_string(dir.join("dev"))
        .ok()
        .and_then(|s| DevNum::parse(&s))
}

/// `<dir>/size` (in 512-byte sectors, whatever the logical block size) as bytes.
pub fn read_sectors(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("size"))
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?
        .checked_mul(512)
}

fn uevent_value(dir: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("uevent")).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix('='))
            .map(|v| v.trim().to_string())
    })
}

/// The use of every disk, by disk name.
pub fn usage(host: &HostPaths) -> Result<BTreeMap<String, (Disk, DiskUse)>, SlotError> {
    let mounts = match std::fs::read_to_string(&host.mountinfo) {
        Ok(t) => parse_mountinfo(&t),
        Err(e) => return Err(io_err(&host.mountinfo)(e)),
    };
    // No swap file means no swap (kernels without CONFIG_SWAP).
    let swaps = std::fs::read_to_string(&host.swaps)
        .map(|t| parse_swaps(&t))
        .unwrap_or_default();
    let swap_names: BTreeSet<String> = swaps
        .iter()
        .filter_map(|s| {
            let p = Path::new(s);
            let p = p
                .strip_prefix("/dev")
                .map(|rel| host.dev.join(rel))
                .unwrap_or_else(|_| p.to_path_buf());
            // /dev/mapper/x and /dev/disk/by-* are symlinks to the kernel name.
            let real = std::fs::canonicalize(&p).unwrap_or(p);
            real.file_name().map(|n| n.to_string_lossy().into_owned())
        })
        .collect();
    let mut out = BTreeMap::new();
    for disk in disks(&host.sys)? {
        let mut u = DiskUse::default();
        let mut names: Vec<(String, Option<DevNum>)> = vec![(disk.name.clone(), disk.dev)];
        names.extend(disk.partitions.iter().map(|p| (p.name.clone(), p.dev)));
        // Holders (dm-crypt, LVM, md) stack on the disk or a partition; a mount or swap
        // on any of them is a use of this disk.
        let mut i = 0;
        while i < names.len() {
            let (n, _) = names[i].clone();
            for h in holders(&host.sys, &n, &disk.name) {
                if !names.iter().any(|(x, _)| *x == h) {
                    u.holders.push(h.clone());
                    let dev = read_dev(&host.sys.join("block").join(&h));
                    names.push((h, dev));
                }
            }
            i += 1;
        }
        for (n, dev) in &names {
            if swap_names.contains(n) {
                u.swap.push(format!("/dev/{n}"));
            }
            let Some(dev) = dev else { continue };
            for m in mounts.iter().filter(|m| m.dev == *dev) {
                u.mounts.push((format!("/dev/{n}"), m.mount_point.clone()));
                if SYSTEM_MOUNTS.contains(&m.mount_point.as_str()) {
                    u.system = true;
                }
            }
        }
        u.cairn_partitions = disk
            .partitions
            .iter()
            .filter(|p| {
                p.partlabel
                    .as_deref()
                    .is_some_and(|l| CAIRN_LABELS.contains(&l))
            })
            .map(|p| p.name.clone())
            .collect();
        out.insert(disk.name.clone(), (disk, u));
    }
    Ok(out)
}

/// Names of the devices holding `name` (a disk in `/sys/block/<name>`, or a partition in
/// `/sys/block/<disk>/<name>`).
fn holders(sys: &Path, name: &str, disk: &str) -> Vec<String> {
    let direct = sys.join("block").join(name).join("holders");
    let part = sys.join("block").join(disk).join(name).join("holders");
    let dir = if direct.is_dir() { direct } else { part };
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|d| d.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The whole-disk name behind a device node (`/dev/sdb`, `/dev/sdb1`, a
/// `/dev/disk/by-id/...` link): `(disk, is_partition)`. `None` when the path is not a
/// block device the kernel lists (a regular file, say).
pub fn disk_of(host: &HostPaths, device: &Path) -> Result<Option<(String, bool)>, SlotError> {
    let real = std::fs::canonicalize(device).map_err(io_err(device))?;
    let Some(name) = real.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(None);
    };
    for d in disks(&host.sys)? {
        if d.name == name {
            return Ok(Some((d.name, false)));
        }
        if d.partitions.iter().any(|p| p.name == name) {
            return Ok(Some((d.name, true)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let t = "22 1 259:2 / / ro,relatime shared:1 - erofs /dev/nvme0n1p2 ro\n\
                 30 22 259:4 / /var/lib/cairn rw shared:2 - ext4 /dev/nvme0n1p4 rw\n\
                 31 22 8:17 / /mnt/my\\040stick rw - vfat /dev/sdb1 rw\n\
                 garbage line\n\
                 40 22 x:y / /bad rw - tmpfs tmpfs rw\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 3);
        assert_eq!(
            m[0].dev,
            DevNum {
                major: 259,
                minor: 2
            }
        );
        assert_eq!(m[0].fstype, "erofs");
        assert_eq!(m[2].mount_point, "/mnt/my stick");
        assert_eq!(m[2].source, "/dev/sdb1");
    }

    #[test]
    fn swaps_lines() {
        let t = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                 /dev/sda2                               partition\t1048572\t\t0\t\t-2\n\
                 /swap\\040file  file 100 0 -3\n";
        assert_eq!(parse_swaps(t), vec!["/dev/sda2", "/swap file"]);
        assert!(parse_swaps("").is_empty());
    }

    #[test]
    fn octal_unescape_is_total() {
        assert_eq!(unescape_octal("a\\"), "a\\");
        assert_eq!(unescape_octal("a\\04"), "a\\04");
        assert_eq!(unescape_octal("a\\999"), "a\\999");
        assert_eq!(unescape_octal("\\134x"), "\\x");
        assert_eq!(unescape_octal("\\777é"), "\\777é");
        assert_eq!(unescape_octal("é\\0"), "é\\0");
    }

    #[test]
    fn devnum() {
        assert_eq!(
            DevNum::parse("259:0\n"),
            Some(DevNum {
                major: 259,
                minor: 0
            })
        );
        assert_eq!(DevNum::parse("259"), None);
        assert_eq!(DevNum::parse("a:b"), None);
    }
}
