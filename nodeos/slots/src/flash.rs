//! Flashing a whole disk image (`cairn.img`) onto a device: refuse a disk in use, copy,
//! fsync, read back, compare.

use crate::disks::{disk_of, usage, HostPaths};
use crate::{copy_hashing, hash_open_file, io_err, sync_and_drop_cache, SlotError};
use indicatif::ProgressBar;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// What [`flash`] wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FlashReport {
    pub device: String,
    pub bytes: u64,
    /// sha256 of the image, equal to that of the first `bytes` bytes read back.
    pub sha256: String,
}

/// Refuse a device that is (or has a partition, or a holder) mounted, used as swap, or
/// is the disk of the running system. A path the kernel does not list as a disk or
/// partition (an image file) is not checked.
pub fn check_target(host: &HostPaths, device: &Path) -> Result<(), SlotError> {
    let Some((disk, _partition)) = disk_of(host, device)? else {
        return Ok(());
    };
    let all = usage(host)?;
    if let Some((_, u)) = all.get(&disk) {
        if let Some(reason) = u.busy_reason() {
            let on = if device
                .file_name()
                .is_some_and(|n| n.to_string_lossy() == disk)
            {
                String::new()
            } else {
                format!(" (on disk {disk})")
            };
            return Err(SlotError::Refused {
                device: format!("{}{on}", device.display()),
                reason,
            });
        }
    }
    Ok(())
}

/// Copy `image` onto `device` (which must exist), fsync, read it back and compare
/// sha256. Unless `force`, [`check_target`] must pass first.
pub fn flash(
    image: &Path,
    device: &Path,
    host: &HostPaths,
    force: bool,
    progress: &ProgressBar,
) -> Result<FlashReport, SlotError> {
    if !force {
        check_target(host, device)?;
    }
    let mut src = File::open(image).map_err(io_err(image))?;
    let len = src.metadata().map_err(io_err(image))?.len();
    // No create and no truncate: the target is a disk, or an image file standing in for one.
    let mut out = OpenOptions::new()
        .write(true)
        .open(device)
        .map_err(io_err(device))?;
    let meta = out.metadata().map_err(io_err(device))?;
    if meta.file_type().is_block_device() {
        let capacity = out.seek(SeekFrom::End(0)).map_err(io_err(device))?;
        out.seek(SeekFrom::Start(0)).map_err(io_err(device))?;
        if len > capacity {
            return Err(SlotError::TooLarge {
                what: image.display().to_string(),
                size: len,
                target: device.display().to_string(),
                capacity,
            });
        }
    }
    progress.set_length(len);
    let sha256 = copy_hashing(&mut src, image, &mut out, device, len, progress)?;
    out.flush().map_err(io_err(device))?;
    sync_and_drop_cache(&out, device)?;
    drop(out);
    let mut back = File::open(device).map_err(io_err(device))?;
    let readback = hash_open_file(&mut back, device, len, &ProgressBar::hidden())?;
    if readback != sha256 {
        return Err(SlotError::Verify {
            what: format!("{} read back", device.display()),
            expected: sha256,
            actual: readback,
        });
    }
    Ok(FlashReport {
        device: device.display().to_string(),
        bytes: len,
        sha256,
    })
}
