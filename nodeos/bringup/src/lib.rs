//! nodeos: turns a booted Cairn root into a serving node. Reads the node config, sets the
//! hostname, network, hugepages and sysctls, finds the data drives (binding NVMe
//! controllers to vfio-pci for the userspace backend) and writes what `datapathd` and
//! `mgmtd` start from.
//!
//! Every system path is a field of [`Paths`], and mounts go through the [`Mounter`] trait,
//! so the logic runs in `cargo test` against fake `/proc`, `/sys` and `/run` trees. This
//! crate must never guess a config (no config means maintenance mode), never claim the
//! boot disk or a disk in use, and never panic on what it reads from the system.

pub mod bringup;
pub mod console;
pub mod daemons;
pub mod drives;
pub mod net;
pub mod ready;
pub mod source;
pub mod system;
pub mod vfio;

pub use bringup::{bring_up, Outcome};

use std::path::{Path, PathBuf};

/// Where nodeos reads and writes. [`Paths::system`] on a node; temp dirs in tests.
#[derive(Clone, Debug)]
pub struct Paths {
    /// `/proc`
    pub proc: PathBuf,
    /// `/sys`
    pub sys: PathBuf,
    /// `/dev` (the config volume is looked up in `<dev>/disk/by-label`).
    pub dev: PathBuf,
    /// `/run/cairn`: env files, drives.json, the maintenance marker.
    pub run: PathBuf,
    /// `/var/lib/cairn`: the state partition.
    pub state: PathBuf,
    /// `/dev/console`: where operators at the console see what happened.
    pub console: PathBuf,
}

impl Paths {
    pub fn system() -> Paths {
        Paths {
            proc: "/proc".into(),
            sys: "/sys".into(),
            dev: "/dev".into(),
            run: "/run/cairn".into(),
            state: "/var/lib/cairn".into(),
            console: "/dev/console".into(),
        }
    }

    /// The same layout below `root`.
    pub fn under(root: &Path) -> Paths {
        Paths {
            proc: root.join("proc"),
            sys: root.join("sys"),
            dev: root.join("dev"),
            run: root.join("run/cairn"),
            state: root.join("var/lib/cairn"),
            console: root.join("dev/console"),
        }
    }

    pub fn by_label(&self) -> PathBuf {
        self.dev.join("disk/by-label")
    }

    pub fn maintenance_marker(&self) -> PathBuf {
        self.run.join("maintenance")
    }

    /// The disk views cairn-slots reads.
    pub fn host(&self) -> cairn_slots::HostPaths {
        cairn_slots::HostPaths {
            sys: self.sys.clone(),
            mountinfo: self.proc.join("self/mountinfo"),
            swaps: self.proc.join("swaps"),
            dev: self.dev.clone(),
        }
    }
}

/// Everything that can stop bring-up. Each names the file, field or link involved.
#[derive(Debug, thiserror::Error)]
pub enum NodeosError {
    #[error(transparent)]
    Config(#[from] cairn_nodeconfig::ConfigError),
    #[error("{path}: {err}")]
    Io {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("mount {what}: {message}")]
    Mount { what: String, message: String },
    #[error("network: {0}")]
    Network(String),
    #[error("sysctl {key}: {message}")]
    Sysctl { key: String, message: String },
    #[error("drives: {0}")]
    Drives(String),
    #[error("vfio: {device}: {message}")]
    Vfio { device: String, message: String },
    #[error("{0}")]
    Disks(#[from] cairn_slots::SlotError),
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
    #[error("not ready after {seconds} s: {last}")]
    NotReady { seconds: u64, last: String },
}

pub(crate) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> NodeosError + '_ {
    move |err| NodeosError::Io {
        path: path.display().to_string(),
        err,
    }
}

/// Read a small sysfs/procfs attribute, trimmed. `None` when absent or unreadable:
/// sysfs attributes come and go with drivers, and garbage must not stop bring-up.
pub(crate) fn read_attr(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let s = String::from_utf8_lossy(&bytes).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Write a file with mode 0600 atomically (temp file, fsync, rename).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), NodeosError> {
    write_file(path, bytes, 0o600)
}

pub(crate) fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), NodeosError> {
    cairn_sysutil::write_atomic(path, bytes, Some(mode)).map_err(io_err(path))
}
