//! io_uring backend: O_DIRECT on a regular file or a block device.
//!
//! Each queue pair owns its own ring (no sharing between reactors); the file
//! descriptor is shared through an `Arc<File>` so it outlives every ring using it.

use crate::{
    check_range, BlockDevice, BlockError, Completion, DeviceIdentity, DeviceInfo, DmaBuf, IoKind,
    QueuePair, Result,
};
use io_uring::{opcode, types, IoUring};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const RING_ENTRIES: u32 = 128;
const BLOCK: u32 = 4096;

/// A file or block device driven through io_uring.
#[derive(Debug)]
pub struct UringDevice {
    file: Arc<File>,
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    is_block: bool,
    direct: bool,
    /// Read once at open: sysfs is not consulted on the report path.
    identity: DeviceIdentity,
}

impl UringDevice {
    /// Opens `path`. When it does not exist and `create_size` is given, creates a
    /// sparse file of that size (rounded down to 4 KiB). O_DIRECT is used where the
    /// filesystem supports it (tmpfs on older kernels does not: then the page cache
    /// is used and durability comes from RWF_DSYNC / fdatasync alone).
    pub fn open(path: &Path, create_size: Option<u64>) -> Result<Self> {
        if !path.exists() {
            let size = create_size
                .ok_or_else(|| BlockError::Failed(format!("{} does not exist", path.display())))?;
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| BlockError::io(format!("create {}", path.display()), e))?;
            f.set_len(size - size % BLOCK as u64)
                .map_err(|e| BlockError::io(format!("size {}", path.display()), e))?;
            f.sync_all()
                .map_err(|e| BlockError::io(format!("sync {}", path.display()), e))?;
        }
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (mut file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                open(false).map_err(|e| BlockError::io(format!("open {}", path.display()), e))?,
                false,
            ),
            Err(e) => return Err(BlockError::io(format!("open {}", path.display()), e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| BlockError::io(format!("stat {}", path.display()), e))?;
        let is_block = meta.file_type().is_block_device();
        let size = if is_block {
            file.seek(SeekFrom::End(0))
                .map_err(|e| BlockError::io(format!("size of {}", path.display()), e))?
        } else {
            meta.len()
        };
        let size = size - size % BLOCK as u64;
        if size == 0 {
            return Err(BlockError::Failed(format!("{} is empty", path.display())));
        }
        let identity = if is_block {
            crate::block_device_identity(Path::new("/sys"), meta.rdev())
        } else {
            DeviceIdentity::default()
        };
        Ok(UringDevice {
            file: Arc::new(file),
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
            size,
            is_block,
            direct,
            identity,
        })
    }

    /// Whether O_DIRECT is in use.
    pub fn is_direct(&self) -> bool {
        self.direct
    }
}

impl BlockDevice for UringDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            block_size: BLOCK,
            num_blocks: self.size / BLOCK as u64,
            name: format!("uring:{}", self.path.display()),
            backend: "uring",
            location: self.path.display().to_string(),
            identity: self.identity.clone(),
        }
    }

    fn open_queue(&self) -> Result<Box<dyn QueuePair>> {
        let ring = IoUring::new(RING_ENTRIES).map_err(|e| BlockError::io("io_uring_setup", e))?;
        Ok(Box::new(UringQueue {
            ring,
            file: self.file.clone(),
            size: self.size,
            is_block: self.is_block,
            inflight: HashMap::new(),
            next_id: 1,
            unsubmitted: 0,
            immediate: Vec::new(),
        }))
    }

    fn check(&self) -> Result<()> {
        // A removed or replaced file keeps working through our descriptor, silently
        // diverging from what operators see: treat it as a failed drive.
        let m = std::fs::metadata(&self.path)
            .map_err(|e| BlockError::Failed(format!("{} is gone: {e}", self.path.display())))?;
        if m.dev() != self.dev || m.ino() != self.ino {
            return Err(BlockError::Failed(format!(
                "{} was replaced by another file",
                self.path.display()
            )));
        }
        if !self.is_block {
            let now = self
                .file
                .metadata()
                .map_err(|e| BlockError::io("fstat", e))?
                .len();
            if now < self.size {
                return Err(BlockError::Failed(format!(
                    "{} truncated to {now} bytes (expected {})",
                    self.path.display(),
                    self.size
                )));
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Slot {
    tag: u64,
    kind: IoKind,
    len: usize,
    buf: Option<DmaBuf>,
}

struct UringQueue {
    ring: IoUring,
    file: Arc<File>,
    size: u64,
    is_block: bool,
    inflight: HashMap<u64, Slot>,
    next_id: u64,
    unsubmitted: usize,
    /// Completions produced without the kernel (trim on a block device).
    immediate: Vec<Completion>,
}

impl std::fmt::Debug for UringQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UringQueue({} in flight)", self.inflight.len())
    }
}

impl UringQueue {
    fn push(&mut self, entry: io_uring::squeue::Entry, slot: Slot) -> Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        let entry = entry.user_data(id);
        loop {
            // SAFETY: every pointer in `entry` refers to the DmaBuf moved into `slot`,
            // which is stored in `self.inflight` below and only released after the
            // kernel has posted this entry's completion (in poll); the descriptor is
            // kept alive by `self.file`. The ring outlives the submission (drop of
            // the queue waits for in-flight I/O).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                break;
            }
            // Submission queue full: hand what we have to the kernel and retry.
            self.ring
                .submit()
                .map_err(|e| BlockError::io("io_uring_enter", e))?;
            self.unsubmitted = 0;
        }
        self.unsubmitted += 1;
        self.inflight.insert(id, slot);
        Ok(())
    }

    fn submit_pending(&mut self) -> Result<()> {
        if self.unsubmitted > 0 {
            self.ring
                .submit()
                .map_err(|e| BlockError::io("io_uring_enter", e))?;
            self.unsubmitted = 0;
        }
        Ok(())
    }

    fn fd(&self) -> types::Fd {
        types::Fd(self.file.as_raw_fd())
    }
}

impl QueuePair for UringQueue {
    fn submit_read(&mut self, tag: u64, offset: u64, mut buf: DmaBuf) -> Result<()> {
        check_range(self.size, BLOCK as u64, offset, buf.len() as u64)?;
        let len = buf.len();
        let e = opcode::Read::new(self.fd(), buf.as_mut_ptr(), len as u32)
            .offset(offset)
            .build();
        self.push(
            e,
            Slot {
                tag,
                kind: IoKind::Read,
                len,
                buf: Some(buf),
            },
        )
    }

    fn submit_write(&mut self, tag: u64, offset: u64, buf: DmaBuf, fua: bool) -> Result<()> {
        check_range(self.size, BLOCK as u64, offset, buf.len() as u64)?;
        let len = buf.len();
        let flags = if fua { libc::RWF_DSYNC } else { 0 };
        let e = opcode::Write::new(self.fd(), buf.as_slice().as_ptr(), len as u32)
            .offset(offset)
            .rw_flags(flags)
            .build();
        self.push(
            e,
            Slot {
                tag,
                kind: IoKind::Write,
                len,
                buf: Some(buf),
            },
        )
    }

    fn submit_flush(&mut self, tag: u64) -> Result<()> {
        let e = opcode::Fsync::new(self.fd())
            .flags(types::FsyncFlags::DATASYNC)
            .build();
        self.push(
            e,
            Slot {
                tag,
                kind: IoKind::Flush,
                len: 0,
                buf: None,
            },
        )
    }

    fn submit_trim(&mut self, tag: u64, offset: u64, len: u64) -> Result<()> {
        check_range(self.size, BLOCK as u64, offset, len)?;
        if self.is_block {
            // BLKDISCARD is an optimisation we do not need yet.
            self.immediate.push(Completion {
                tag,
                kind: IoKind::Trim,
                result: Ok(0),
                buf: None,
            });
            return Ok(());
        }
        let e = opcode::Fallocate::new(self.fd(), len)
            .offset(offset)
            .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
            .build();
        self.push(
            e,
            Slot {
                tag,
                kind: IoKind::Trim,
                len: 0,
                buf: None,
            },
        )
    }

    fn poll(&mut self, completions: &mut Vec<Completion>) -> Result<usize> {
        self.submit_pending()?;
        let mut n = self.immediate.len();
        completions.append(&mut self.immediate);
        for cqe in self.ring.completion() {
            let Some(slot) = self.inflight.remove(&cqe.user_data()) else {
                continue;
            };
            let res = cqe.result();
            let result = if res < 0 {
                Err(BlockError::io(
                    format!("{:?}", slot.kind),
                    std::io::Error::from_raw_os_error(-res),
                ))
            } else if (res as usize) < slot.len {
                // O_DIRECT never transfers part of a block-aligned request unless the
                // device ended (truncated file): report it, never pad it.
                Err(BlockError::Failed(format!(
                    "short {:?}: {res} of {} bytes",
                    slot.kind, slot.len
                )))
            } else {
                Ok(res as usize)
            };
            completions.push(Completion {
                tag: slot.tag,
                kind: slot.kind,
                result,
                buf: slot.buf,
            });
            n += 1;
        }
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> Result<()> {
        if self.inflight.is_empty() || !self.immediate.is_empty() {
            return Ok(());
        }
        self.unsubmitted = 0;
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => Ok(()),
            Err(e) => Err(BlockError::io("io_uring_enter (wait)", e)),
        }
    }

    fn in_flight(&self) -> usize {
        self.inflight.len() + self.immediate.len()
    }
}

impl Drop for UringQueue {
    fn drop(&mut self) {
        // The kernel may still write into buffers we own: wait for every in-flight
        // I/O before the buffers (and the ring) are freed.
        let mut sink = Vec::new();
        let mut tries = 0;
        while !self.inflight.is_empty() && tries < 10_000 {
            let _ = self.wait(Duration::from_millis(10));
            let _ = self.poll(&mut sink);
            sink.clear();
            tries += 1;
        }
        if !self.inflight.is_empty() {
            // Leak rather than free memory the kernel might still touch.
            std::mem::forget(std::mem::take(&mut self.inflight));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(dev: &dyn BlockDevice) {
        let mut q = dev.open_queue().unwrap();
        let mut w = DmaBuf::zeroed(8192).unwrap();
        w.as_mut_slice()[..5].copy_from_slice(b"hello");
        w.as_mut_slice()[8191] = 9;
        q.submit_write(1, 4096, w, true).unwrap();
        q.submit_flush(2).unwrap();
        let mut done = Vec::new();
        while done.len() < 2 {
            q.wait(Duration::from_millis(100)).unwrap();
            q.poll(&mut done).unwrap();
        }
        assert!(done.iter().all(|c| c.result.is_ok()), "{done:?}");
        done.clear();
        q.submit_read(3, 4096, DmaBuf::zeroed(8192).unwrap())
            .unwrap();
        while done.is_empty() {
            q.wait(Duration::from_millis(100)).unwrap();
            q.poll(&mut done).unwrap();
        }
        let b = done.pop().unwrap();
        assert_eq!(b.tag, 3);
        let buf = b.buf.unwrap();
        assert_eq!(&buf.as_slice()[..5], b"hello");
        assert_eq!(buf.as_slice()[8191], 9);
        // Out of range and misaligned requests are refused up front.
        assert!(q
            .submit_read(4, dev.info().size(), DmaBuf::zeroed(4096).unwrap())
            .is_err());
        assert!(q
            .submit_read(4, 100, DmaBuf::zeroed(4096).unwrap())
            .is_err());
        q.submit_trim(5, 4096, 4096).unwrap();
        done.clear();
        while done.is_empty() {
            q.wait(Duration::from_millis(100)).unwrap();
            q.poll(&mut done).unwrap();
        }
        assert!(done[0].result.is_ok());
    }

    #[test]
    fn uring_file_roundtrip_and_health() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d0");
        let dev = UringDevice::open(&p, Some(1 << 20)).unwrap();
        let info = dev.info();
        assert_eq!(info.size(), 1 << 20);
        assert_eq!(info.backend, "uring");
        assert_eq!(info.location, p.display().to_string());
        // A plain file has no hardware identity.
        assert!(info.identity.is_empty());
        roundtrip(&dev);
        dev.check().unwrap();
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(4096).unwrap();
        assert!(dev.check().is_err());
        f.set_len(1 << 20).unwrap();
        dev.check().unwrap();
        std::fs::remove_file(&p).unwrap();
        assert!(dev.check().is_err());
    }

    #[test]
    fn ram_roundtrip_and_faults() {
        let dev = crate::RamDevice::new(1 << 20);
        roundtrip(&dev);
        let mut q = dev.open_queue().unwrap();
        dev.inject(Some(crate::RamFault::FailWrites));
        q.submit_write(1, 0, DmaBuf::zeroed(4096).unwrap(), true)
            .unwrap();
        let mut done = Vec::new();
        q.poll(&mut done).unwrap();
        assert!(done[0].result.is_err());
    }
}
