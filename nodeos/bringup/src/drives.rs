//! Data drive discovery: block devices and NVMe controllers from sysfs, matched against
//! `drives.claim` / `drives.all_nvme`, never the boot disk nor a disk in use.
//!
//! Drives are identified by serial, not by kernel name: `nvmeXnY` names follow probe
//! order, which changes between boots. Hence `all_nvme` lists drives sorted by serial.

use crate::{read_attr, NodeosError, Paths};
use cairn_nodeconfig::{Backend, DriveMatch, Drives};
use cairn_slots::DiskUse;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a claimed drive is to datapathd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriveKind {
    /// An NVMe namespace through the kernel driver (`uring` backend).
    Nvme,
    /// Any other block device (`uring` backend).
    Disk,
    /// An NVMe controller bound to vfio-pci (`nvme` backend); `path` is its PCI address.
    NvmeVfio,
}

/// One entry of `/run/cairn/drives.json`; `index` is the datapathd drive index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedDrive {
    pub index: usize,
    pub path: String,
    pub kind: DriveKind,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub size_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
}

/// A whole-disk block device from `/sys/block`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockDevice {
    pub name: String,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub size_bytes: u64,
    /// NVMe controllers behind it (`nvme0`), empty for other devices.
    pub controllers: Vec<String>,
}

impl BlockDevice {
    pub fn is_nvme(&self) -> bool {
        !self.controllers.is_empty() || self.name.starts_with("nvme")
    }
}

/// An NVMe controller from `/sys/class/nvme`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmeController {
    pub name: String,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub transport: Option<String>,
    /// PCI address (`0000:00:04.0`) for `transport == "pcie"`.
    pub pci_address: Option<String>,
}

/// Block devices backed by hardware: those with a `device` link (loop, dm, md, zram and
/// ram disks have none).
pub fn block_devices(sys: &Path) -> Vec<BlockDevice> {
    let dir = sys.join("block");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        tracing::warn!("cannot read {}", dir.display());
        return Vec::new();
    };
    let mut out = Vec::new();
    for de in rd.flatten() {
        let name = de.file_name().to_string_lossy().into_owned();
        let path = dir.join(&name);
        let device = path.join("device");
        if !device.exists() {
            continue;
        }
        let controllers = nvme_controllers_of(sys, &name, &device);
        let (serial, model) = if let Some(c) = controllers.first() {
            let cd = sys.join("class/nvme").join(c);
            (
                read_attr(&cd.join("serial")).or_else(|| read_attr(&device.join("serial"))),
                read_attr(&cd.join("model")).or_else(|| read_attr(&device.join("model"))),
            )
        } else {
            (
                read_attr(&device.join("serial")).or_else(|| read_attr(&path.join("serial"))),
                read_attr(&device.join("model")),
            )
        };
        out.push(BlockDevice {
            size_bytes: cairn_slots::disks::read_sectors(&path).unwrap_or(0),
            name,
            serial,
            model,
            controllers,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The controllers behind an NVMe block device. Its `device` link points at the
/// controller (`nvme0`), or with native multipath at the subsystem (`nvme-subsys0`), whose
/// directory lists its controllers.
fn nvme_controllers_of(sys: &Path, name: &str, device: &Path) -> Vec<String> {
    let target = std::fs::canonicalize(device).ok();
    let tname = target
        .as_ref()
        .and_then(|t| t.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if is_ctrl_name(&tname) {
        return vec![tname];
    }
    if tname.starts_with("nvme-subsys") {
        if let Some(t) = &target {
            let mut v: Vec<String> = std::fs::read_dir(t)
                .map(|rd| {
                    rd.flatten()
                        .map(|d| d.file_name().to_string_lossy().into_owned())
                        .filter(|n| is_ctrl_name(n))
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            return v;
        }
    }
    // No usable link: `nvme0n1` belongs to `nvme0` when that controller exists.
    if let Some(rest) = name.strip_prefix("nvme") {
        let num: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let ctrl = format!("nvme{num}");
        if !num.is_empty() && sys.join("class/nvme").join(&ctrl).exists() {
            return vec![ctrl];
        }
    }
    Vec::new()
}

fn is_ctrl_name(n: &str) -> bool {
    n.strip_prefix("nvme")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Every controller in `/sys/class/nvme`.
pub fn nvme_controllers(sys: &Path) -> Vec<NvmeController> {
    let dir = sys.join("class/nvme");
    let mut out: Vec<NvmeController> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|d| d.file_name().to_string_lossy().into_owned())
                .filter(|n| is_ctrl_name(n))
                .map(|name| {
                    let cd = dir.join(&name);
                    let transport = read_attr(&cd.join("transport"));
                    let pci_address = if transport.as_deref() == Some("pcie") {
                        read_attr(&cd.join("address")).filter(|a| is_pci_address(a))
                    } else {
                        None
                    };
                    NvmeController {
                        serial: read_attr(&cd.join("serial")),
                        model: read_attr(&cd.join("model")),
                        transport,
                        pci_address,
                        name,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// `DDDD:BB:DD.F`, hex digits.
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// Why a device is not a candidate, by block device name.
fn exclusions(
    usage: &BTreeMap<String, (cairn_slots::disks::Disk, DiskUse)>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, (_, u)) in usage {
        if let Some(r) = u.busy_reason() {
            out.insert(name.clone(), r);
        } else if !u.cairn_partitions.is_empty() {
            out.insert(
                name.clone(),
                format!(
                    "it holds a Cairn system image ({}); wipe it to use it as a data drive",
                    u.cairn_partitions.join(", ")
                ),
            );
        }
    }
    out
}

fn matches(rule: &DriveMatch, serial: Option<&str>, model: Option<&str>, path_ok: bool) -> bool {
    rule.serial
        .as_deref()
        .is_none_or(|s| Some(s.trim()) == serial)
        && rule
            .model
            .as_deref()
            .is_none_or(|m| Some(m.trim()) == model)
        && (rule.path.is_none() || path_ok)
}

/// Does a claim's `path` name block device `name`? Compared after resolving symlinks
/// (`/dev/disk/by-id/...`) below the given `/dev`.
fn path_names(dev: &Path, rule_path: &Path, name: &str) -> bool {
    let local = rule_path
        .strip_prefix("/dev")
        .map(|r| dev.join(r))
        .unwrap_or_else(|_| rule_path.to_path_buf());
    if local == dev.join(name) {
        return true;
    }
    match (
        std::fs::canonicalize(&local),
        std::fs::canonicalize(dev.join(name)),
    ) {
        (Ok(a), Ok(b)) => a == b,
        (Ok(a), Err(_)) => a.file_name().is_some_and(|n| n.to_string_lossy() == name),
        _ => false,
    }
}

/// Claim drives for the `uring` backend: block devices, in claim order (all NVMe
/// namespaces by serial for `all_nvme`). A claim that names the boot disk or a disk in
/// use is an error; `all_nvme` skips those with a log line.
pub fn claim_block_devices(
    paths: &Paths,
    drives: &Drives,
) -> Result<Vec<ClaimedDrive>, NodeosError> {
    let usage = cairn_slots::disks::usage(&paths.host())?;
    let excluded = exclusions(&usage);
    let devices = block_devices(&paths.sys);
    let mut chosen: Vec<&BlockDevice> = Vec::new();
    if drives.all_nvme {
        let mut nvme: Vec<&BlockDevice> = devices.iter().filter(|d| d.is_nvme()).collect();
        nvme.sort_by(|a, b| (&a.serial, &a.name).cmp(&(&b.serial, &b.name)));
        for d in nvme {
            match excluded.get(&d.name) {
                Some(why) => tracing::info!("not claiming /dev/{}: {why}", d.name),
                None => chosen.push(d),
            }
        }
    }
    for (i, rule) in drives.claim.iter().enumerate() {
        let mut hits: Vec<&BlockDevice> = devices
            .iter()
            .filter(|d| {
                let path_ok = rule
                    .path
                    .as_deref()
                    .is_some_and(|p| path_names(&paths.dev, p, &d.name));
                matches(rule, d.serial.as_deref(), d.model.as_deref(), path_ok)
            })
            .collect();
        hits.sort_by(|a, b| (&a.serial, &a.name).cmp(&(&b.serial, &b.name)));
        if hits.is_empty() {
            // A dead drive must not keep the node down; the daemons see the smaller set.
            tracing::warn!("drives.claim[{i}] matches no device");
        }
        for d in hits {
            if let Some(why) = excluded.get(&d.name) {
                return Err(NodeosError::Drives(format!(
                    "drives.claim[{i}] matches /dev/{}, which is not usable: {why}",
                    d.name
                )));
            }
            if !chosen.iter().any(|c| c.name == d.name) {
                chosen.push(d);
            }
        }
    }
    Ok(chosen
        .into_iter()
        .enumerate()
        .map(|(index, d)| ClaimedDrive {
            index,
            path: format!("/dev/{}", d.name),
            kind: if d.is_nvme() {
                DriveKind::Nvme
            } else {
                DriveKind::Disk
            },
            serial: d.serial.clone(),
            model: d.model.clone(),
            size_bytes: d.size_bytes,
            pci_address: d.controllers.first().and_then(|c| {
                read_attr(&paths.sys.join("class/nvme").join(c).join("address"))
                    .filter(|a| is_pci_address(a))
            }),
        })
        .collect())
}

/// Claim NVMe controllers for the `nvme` (userspace) backend, by PCI address. A
/// controller is a candidate when it is on PCIe and none of its namespaces is the boot
/// disk, in use, or a Cairn image. Controllers already bound to vfio-pci (a second run in
/// the same boot) are taken from the previous `drives.json`, since the kernel no longer
/// shows their serial. Controllers of one subsystem share a serial; only the first is
/// claimed, so datapathd never drives one namespace through two controllers.
pub fn claim_nvme_controllers(
    paths: &Paths,
    drives: &Drives,
    previous: &[ClaimedDrive],
) -> Result<Vec<ClaimedDrive>, NodeosError> {
    let usage = cairn_slots::disks::usage(&paths.host())?;
    let excluded = exclusions(&usage);
    let blocks = block_devices(&paths.sys);
    struct Candidate {
        serial: Option<String>,
        model: Option<String>,
        pci: String,
        size: u64,
        namespaces: Vec<String>,
        blocked: Option<String>,
    }
    let mut cands: Vec<Candidate> = Vec::new();
    for c in nvme_controllers(&paths.sys) {
        let Some(pci) = c.pci_address.clone() else {
            tracing::info!(
                "{} is not a PCIe controller ({}); not usable by the nvme backend",
                c.name,
                c.transport.as_deref().unwrap_or("unknown transport")
            );
            continue;
        };
        let ns: Vec<&BlockDevice> = blocks
            .iter()
            .filter(|b| b.controllers.contains(&c.name))
            .collect();
        let blocked = ns.iter().find_map(|b| {
            excluded
                .get(&b.name)
                .map(|why| format!("its namespace /dev/{} is not usable: {why}", b.name))
        });
        cands.push(Candidate {
            serial: c.serial,
            model: c.model,
            pci,
            size: ns.iter().map(|b| b.size_bytes).sum(),
            namespaces: ns.iter().map(|b| b.name.clone()).collect(),
            blocked,
        });
    }
    for p in previous.iter().filter(|p| p.kind == DriveKind::NvmeVfio) {
        let Some(pci) = p.pci_address.clone() else {
            continue;
        };
        let bound = crate::vfio::driver_of(&paths.sys, &pci).as_deref() == Some("vfio-pci");
        if bound && !cands.iter().any(|c| c.pci == pci) {
            cands.push(Candidate {
                serial: p.serial.clone(),
                model: p.model.clone(),
                pci,
                size: p.size_bytes,
                namespaces: Vec::new(),
                blocked: None,
            });
        }
    }
    let mut chosen: Vec<&Candidate> = Vec::new();
    // Controllers of one subsystem report the subsystem's serial.
    let is_dup = |chosen: &[&Candidate], c: &Candidate| {
        chosen
            .iter()
            .any(|x| x.pci == c.pci || (x.serial.is_some() && x.serial == c.serial))
    };
    let mut order: Vec<&Candidate> = cands.iter().collect();
    order.sort_by(|a, b| (&a.serial, &a.pci).cmp(&(&b.serial, &b.pci)));
    if drives.all_nvme {
        for c in &order {
            if let Some(why) = &c.blocked {
                tracing::info!("not claiming NVMe controller {}: {why}", c.pci);
            } else if !is_dup(&chosen, c) {
                chosen.push(c);
            }
        }
    }
    for (i, rule) in drives.claim.iter().enumerate() {
        let hits: Vec<&&Candidate> = order
            .iter()
            .filter(|c| {
                let path_ok = rule
                    .path
                    .as_deref()
                    .is_some_and(|p| c.namespaces.iter().any(|n| path_names(&paths.dev, p, n)));
                matches(rule, c.serial.as_deref(), c.model.as_deref(), path_ok)
            })
            .collect();
        if hits.is_empty() {
            tracing::warn!("drives.claim[{i}] matches no NVMe controller");
        }
        for c in hits {
            if let Some(why) = &c.blocked {
                return Err(NodeosError::Drives(format!(
                    "drives.claim[{i}] matches NVMe controller {}, but {why}",
                    c.pci
                )));
            }
            if !is_dup(&chosen, c) {
                chosen.push(c);
            }
        }
    }
    Ok(chosen
        .into_iter()
        .enumerate()
        .map(|(index, c)| ClaimedDrive {
            index,
            path: c.pci.clone(),
            kind: DriveKind::NvmeVfio,
            serial: c.serial.clone(),
            model: c.model.clone(),
            size_bytes: c.size,
            pci_address: Some(c.pci.clone()),
        })
        .collect())
}

/// Claim drives for the configured backend.
pub fn claim(
    paths: &Paths,
    drives: &Drives,
    backend: Backend,
    previous: &[ClaimedDrive],
) -> Result<Vec<ClaimedDrive>, NodeosError> {
    let claimed = match backend {
        Backend::Uring => claim_block_devices(paths, drives)?,
        Backend::Nvme => claim_nvme_controllers(paths, drives, previous)?,
    };
    if claimed.is_empty() && !drives.allow_empty {
        return Err(NodeosError::Drives(
            "no drive matches the config (set drives.allow_empty = true to start without one)"
                .into(),
        ));
    }
    Ok(claimed)
}

/// `drives.json` of an earlier run in this boot, if any (garbage reads as none).
pub fn read_drives_json(path: &Path) -> Vec<ClaimedDrive> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

pub fn drives_json_path(run: &Path) -> PathBuf {
    run.join("drives.json")
}
