//! What every Cairn process asks of the operating system, done once and done the
//! same way everywhere: files replaced or created so that a power cut leaves either
//! the old content or the new, never a torn or empty file, with the mode a secret
//! needs from its first byte.
//!
//! And moving PCI functions between drivers ([`pci`]): to vfio-pci and back; the
//! machine's memory and sizes as operators write them ([`memory`]); and where a
//! daemon's log goes ([`logging`]).
//!
//! Why one crate at the bottom: the daemons, the CLI and the boot-time bring-up
//! each had their own helper, with different guarantees (one never synced, one was
//! not atomic, two files shared a temporary name). This crate depends on no other
//! Cairn crate (only on the logging crates every daemon links anyway).

pub mod logging;
pub mod memory;
pub mod pci;

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces (or creates) `path` with `bytes`, with `mode` (`None`: what the
/// umask gives, for file systems such as the ESP's FAT that refuse a chmod):
/// written to a temporary file of its own in the same directory, synced, renamed
/// over `path`, and the directory synced. A reader sees the old file or the new
/// one; after a crash, the same. The parent directory is created if missing.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let dir = parent(path);
    std::fs::create_dir_all(&dir)?;
    let tmp = write_temp(&dir, path, bytes, mode)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(&dir)
}

/// Creates `path` with `bytes` unless it exists: returns whether this call made
/// it. Complete or absent, never partial (a temporary file, synced, then
/// hard-linked into place, which fails if another process got there first — the
/// first writer wins and both then read the same content).
pub fn create_once(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<bool> {
    let dir = parent(path);
    std::fs::create_dir_all(&dir)?;
    let tmp = write_temp(&dir, path, bytes, mode)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(&dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Syncs a directory, so that a rename or link in it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A fresh temporary file next to `path` (a name no other writer, thread or
/// process, uses; hidden, and not ending in the target's extension, so a loader
/// scanning the directory ignores it), holding `bytes`, synced, with `mode`.
fn write_temp(dir: &Path, path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let res = (|| {
        let mut o = OpenOptions::new();
        o.write(true).create_new(true);
        if let Some(m) = mode {
            o.mode(m);
        }
        let mut f = o.open(&tmp)?;
        if let Some(m) = mode {
            // The umask may have narrowed the mode: the file gets exactly `m`.
            f.set_permissions(std::fs::Permissions::from_mode(m))?;
        }
        f.write_all(bytes)?;
        f.sync_all()
    })();
    match res {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Opens the store at `path` with `open`, creating it atomically when absent:
/// `open` then runs on a temporary name and must leave the new store durable (its
/// first commit synced) before it returns, and only then is the file renamed into
/// place. A crash during creation leaves at most the temporary file, replaced at
/// the next try, never a half-made store at `path` that no later start can open. A
/// file at `path` holding nothing but zeros (or nothing) is such a half-made store,
/// left by a crash in an earlier version, and is treated as absent.
pub fn open_or_create<T, E: From<io::Error>>(
    path: &Path,
    open: impl Fn(&Path) -> Result<T, E>,
) -> Result<T, E> {
    if path.exists() && !never_written(path)? {
        return open(path);
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".creating");
    let tmp = std::path::PathBuf::from(tmp);
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let made = open(&tmp)?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(made)
}

/// Whether the file holds only zero bytes: created, never written.
fn never_written(path: &Path) -> io::Result<bool> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(true);
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
    }
}

/// Lowers the calling thread's CPU priority to `nice` (0 to 19; higher yields
/// more): under contention the scheduler gives it a smaller share, idle cores
/// it still uses in full. On Linux, `setpriority(PRIO_PROCESS, 0, ..)` applies
/// to the calling thread only (each thread is its own task), which is what a
/// pool of bulk-work threads wants.
pub fn lower_thread_priority(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn write_atomic_replaces_with_the_mode_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/secret.key");
        write_atomic(&p, b"one", Some(0o600)).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert_eq!(mode_of(&p), 0o600);
        write_atomic(&p, b"two", Some(0o644)).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(mode_of(&p), 0o644);
        let left: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn create_once_keeps_the_first_writer() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("token");
        assert!(create_once(&p, b"first", Some(0o600)).unwrap());
        assert!(!create_once(&p, b"second", Some(0o600)).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        assert_eq!(mode_of(&p), 0o600);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn concurrent_writers_never_share_a_temporary_or_tear_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_atomic(p, &[t; 4096], None).unwrap();
                    }
                });
            }
            for _ in 0..200 {
                if let Ok(b) = std::fs::read(&p) {
                    assert_eq!(b.len(), 4096);
                    assert!(b.iter().all(|&x| x == b[0]), "a torn file");
                }
            }
        });
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// Creates a "store": a file whose first byte says it was initialised.
    fn make(p: &Path) -> io::Result<Vec<u8>> {
        if !p.exists() {
            std::fs::write(p, b"store")?;
        }
        std::fs::read(p)
    }

    #[test]
    fn open_or_create_makes_the_file_under_another_name_first() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("meta.redb");
        let seen = open_or_create(&p, |at| {
            assert_ne!(at, p.as_path(), "created in place");
            make(at)
        })
        .unwrap();
        assert_eq!(seen, b"store");
        assert_eq!(std::fs::read(&p).unwrap(), b"store");
        assert!(!d.path().join("meta.redb.creating").exists());
        // Opened in place from then on.
        std::fs::write(&p, b"data").unwrap();
        let seen = open_or_create(&p, |at| {
            assert_eq!(at, p.as_path());
            make(at)
        })
        .unwrap();
        assert_eq!(seen, b"data");
    }

    #[test]
    fn a_half_made_store_is_made_again() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("meta.redb");
        // A crash during creation by an earlier version: the file exists, zeros.
        std::fs::write(&p, vec![0u8; 200_000]).unwrap();
        assert_eq!(open_or_create(&p, make).unwrap(), b"store");
        // An empty file, and a leftover temporary from a crash in this version.
        std::fs::write(&p, b"").unwrap();
        std::fs::write(d.path().join("meta.redb.creating"), b"half").unwrap();
        assert_eq!(open_or_create(&p, make).unwrap(), b"store");
        // A failed creation leaves no file at the path.
        std::fs::remove_file(&p).unwrap();
        let r: io::Result<()> = open_or_create(&p, |_| Err(io::Error::other("disk full")));
        assert!(r.is_err());
        assert!(!p.exists());
    }
}
