//! A/B slots of a Cairn node: which slot booted, the inactive one, writing an update bundle
//! to it (verified by reading the partition back), the systemd-boot entries with boot
//! counting on the ESP, rollback, and flashing a whole image to a disk.
//!
//! Every path (ESP root, partition, sysfs, mountinfo) is a parameter, so all of it runs
//! against regular files in tests. This crate must never write `cairn-state`, never arm a
//! boot entry for a slot whose contents did not verify, and never write to a disk that is
//! mounted or holds the running system unless the caller forces it.

pub mod bundle;
pub mod disks;
pub mod esp;
pub mod flash;

pub use bundle::{apply_update, Bundle, Manifest, PartitionPath, SlotDevice, UpdateReport};
pub use disks::{DiskUse, HostPaths};
pub use esp::{BootState, Esp, SlotInfo};
pub use flash::{flash, FlashReport};

use sha2::{Digest, Sha256};
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

/// One of the two root slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Slot {
    A,
    B,
}

impl Slot {
    pub const ALL: [Slot; 2] = [Slot::A, Slot::B];

    pub fn letter(self) -> char {
        match self {
            Slot::A => 'a',
            Slot::B => 'b',
        }
    }
    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }
    /// The slot named by `cairn.slot=` on a kernel command line.
    pub fn from_cmdline(cmdline: &str) -> Option<Slot> {
        cmdline
            .split_ascii_whitespace()
            .find_map(|w| w.strip_prefix("cairn.slot="))
            .and_then(Slot::parse)
    }
    pub fn parse(s: &str) -> Option<Slot> {
        match s {
            "a" | "A" => Some(Slot::A),
            "b" | "B" => Some(Slot::B),
            _ => None,
        }
    }
    /// The GPT partition label of the slot's root filesystem.
    pub fn partlabel(self) -> String {
        format!("cairn-{}", self.letter())
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

/// The slot the running system booted from, read from a kernel command line file
/// (`/proc/cmdline`).
pub fn booted_slot(cmdline_file: &Path) -> Result<Slot, SlotError> {
    let text = std::fs::read_to_string(cmdline_file).map_err(io_err(cmdline_file))?;
    Slot::from_cmdline(&text).ok_or(SlotError::NoBootedSlot)
}

/// Everything that can fail in slot handling.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("{path}: {err}")]
    Io {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("update bundle {path}: {message}")]
    Bundle { path: String, message: String },
    #[error("{what}: sha256 mismatch: expected {expected}, got {actual}")]
    Verify {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{what} ({size} bytes) does not fit in {target} ({capacity} bytes)")]
    TooLarge {
        what: String,
        size: u64,
        target: String,
        capacity: u64,
    },
    #[error("refusing {device}: {reason} (use --force to override)")]
    Refused { device: String, reason: String },
    #[error("boot entries in {path}: {message}")]
    Esp { path: String, message: String },
    #[error("no cairn.slot= on the kernel command line: not booted from a Cairn slot")]
    NoBootedSlot,
    #[error("{path}: {message}")]
    Sysfs { path: String, message: String },
}

pub(crate) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> SlotError + '_ {
    move |err| SlotError::Io {
        path: path.display().to_string(),
        err,
    }
}

/// Copy size of every streaming loop: large enough to keep a disk busy, small enough
/// not to matter in memory.
pub(crate) const CHUNK: usize = 1 << 20;

/// Copy exactly `len` bytes from `src` to `dst`, returning their sha256. A short source is
/// an error (a truncated bundle member or image must never count as written).
pub(crate) fn copy_hashing(
    src: &mut dyn Read,
    src_name: &Path,
    dst: &mut dyn Write,
    dst_name: &Path,
    len: u64,
    progress: &indicatif::ProgressBar,
) -> Result<String, SlotError> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut left = len;
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        let n = src.read(&mut buf[..want]).map_err(io_err(src_name))?;
        if n == 0 {
            return Err(SlotError::Io {
                path: src_name.display().to_string(),
                err: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("ended {left} bytes early"),
                ),
            });
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n]).map_err(io_err(dst_name))?;
        left -= n as u64;
        progress.inc(n as u64);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The sha256 of the first `len` bytes of `path` (all of it when `len` is `None`), read
/// past the page cache where the kernel allows it, so a read-back checks the medium and
/// not the copy we just wrote into memory.
pub(crate) fn hash_file_prefix(
    path: &Path,
    len: Option<u64>,
    progress: &indicatif::ProgressBar,
) -> Result<String, SlotError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    let len = match len {
        Some(l) => l,
        None => f.metadata().map_err(io_err(path))?.len(),
    };
    hash_open_file(&mut f, path, len, progress)
}

/// The sha256 of the first `len` bytes of an open file, read past the page cache where
/// the kernel allows it. Fewer than `len` bytes is an error.
pub(crate) fn hash_open_file(
    f: &mut File,
    name: &Path,
    len: u64,
    progress: &indicatif::ProgressBar,
) -> Result<String, SlotError> {
    drop_cache(f);
    copy_hashing(f, name, &mut std::io::sink(), name, len, progress)
}

/// Flush `f` to stable storage and ask the kernel to forget its cached pages.
pub(crate) fn sync_and_drop_cache(f: &File, path: &Path) -> Result<(), SlotError> {
    f.sync_all().map_err(io_err(path))?;
    drop_cache(f);
    Ok(())
}

fn drop_cache(f: &File) {
    // Advice only: on a file system or device that ignores it the read-back still
    // compares what the kernel returns, which is the best a process can do.
    let _ = nix::fcntl::posix_fadvise(f, 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED);
}

/// Write `bytes` to `path` so that a power cut leaves the old file or the new one: a
/// temporary file in the same directory, fsync, rename, fsync of the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SlotError> {
    // No mode: the ESP's FAT refuses a chmod. The temporary's name ends in `.tmp`,
    // which systemd-boot ignores (it only reads `*.conf`).
    cairn_sysutil::write_atomic(path, bytes, None).map_err(io_err(path))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), SlotError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_from_cmdline() {
        assert_eq!(
            Slot::from_cmdline("root=PARTLABEL=cairn-b cairn.slot=b quiet"),
            Some(Slot::B)
        );
        assert_eq!(Slot::from_cmdline("cairn.slot=A"), Some(Slot::A));
        assert_eq!(Slot::from_cmdline("cairn.slot=c"), None);
        assert_eq!(Slot::from_cmdline("root=/dev/sda1"), None);
        assert_eq!(Slot::A.other(), Slot::B);
        assert_eq!(Slot::B.partlabel(), "cairn-b");
    }

    #[test]
    fn booted_slot_names_missing_marker() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cmdline");
        std::fs::write(&p, "console=ttyS0\n").unwrap();
        assert!(matches!(booted_slot(&p), Err(SlotError::NoBootedSlot)));
        std::fs::write(&p, "console=ttyS0 cairn.slot=a\n").unwrap();
        assert_eq!(booted_slot(&p).unwrap(), Slot::A);
    }

    #[test]
    fn copy_refuses_short_source() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        let mut src: &[u8] = b"abc";
        let mut out = Vec::new();
        let pb = indicatif::ProgressBar::hidden();
        let e = copy_hashing(&mut src, &p, &mut out, &p, 5, &pb).unwrap_err();
        assert!(e.to_string().contains("2 bytes early"), "{e}");
        let mut src: &[u8] = b"abc";
        let h = copy_hashing(&mut src, &p, &mut out, &p, 3, &pb).unwrap();
        assert_eq!(h, hex::encode(Sha256::digest(b"abc")));
    }
}
