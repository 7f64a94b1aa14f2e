//! Update bundles (`cairn.update`) and writing one to the inactive slot.
//!
//! A bundle is a tar of exactly four regular files at its top level: `manifest.json`,
//! `root.erofs`, `vmlinuz`, `initrd.img`. The manifest gives the version and the size and
//! sha256 of the other three:
//!
//! ```json
//! {"format": 1, "version": "0.2.0", "cmdline": "console=ttyS0",
//!  "files": {"root.erofs": {"size": 123, "sha256": "<64 hex>"}, "vmlinuz": {...}, "initrd.img": {...}}}
//! ```
//!
//! [`Bundle::open`] reads the whole tar and checks every member before anything is
//! written; [`apply_update`] then disarms the inactive slot, writes its partition, reads it
//! back, and only when every byte matches the manifest arms its boot entry.

use crate::esp::Esp;
use crate::{
    copy_hashing, hash_file_prefix, hash_open_file, io_err, sync_and_drop_cache, write_atomic,
    Slot, SlotError,
};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};

/// The members a bundle carries besides its manifest.
pub const MEMBERS: [&str; 3] = ["root.erofs", "vmlinuz", "initrd.img"];
/// The manifest's member name.
pub const MANIFEST: &str = "manifest.json";
/// The manifest format this code reads.
pub const FORMAT: u32 = 1;
/// A manifest is a few hundred bytes; anything far larger is not one.
const MANIFEST_MAX: u64 = 64 << 10;

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(default = "default_format")]
    pub format: u32,
    /// Shown by `nodectl node slots`, written to `cairn/<slot>/version`.
    pub version: String,
    /// Kernel options after `root=` and `cairn.slot=`; absent: the booted slot's options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    pub files: BTreeMap<String, FileDigest>,
}

fn default_format() -> u32 {
    FORMAT
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    pub size: u64,
    pub sha256: String,
}

/// Where a member's bytes are inside the tar file.
#[derive(Clone, Copy, Debug)]
struct Member {
    offset: u64,
    size: u64,
}

/// A bundle whose every member matched its manifest when it was opened.
#[derive(Debug)]
pub struct Bundle {
    path: PathBuf,
    pub manifest: Manifest,
    members: BTreeMap<String, Member>,
}

impl Bundle {
    /// Read and verify a bundle: the manifest parses, lists exactly [`MEMBERS`], and each
    /// member is a regular file of the listed size and sha256. Nothing else is accepted.
    pub fn open(path: &Path, progress: &ProgressBar) -> Result<Bundle, SlotError> {
        let bad = |message: String| SlotError::Bundle {
            path: path.display().to_string(),
            message,
        };
        let file = File::open(path).map_err(io_err(path))?;
        let mut archive = tar::Archive::new(file);
        let mut manifest_text: Option<String> = None;
        let mut found: BTreeMap<String, (Member, String)> = BTreeMap::new();
        let entries = archive
            .entries()
            .map_err(|e| bad(format!("not a tar archive: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| bad(format!("not a readable tar archive: {e}")))?;
            let kind = entry.header().entry_type();
            let raw = entry
                .path()
                .map_err(|e| bad(format!("member with a bad name: {e}")))?
                .into_owned();
            if kind.is_dir() && member_name(&raw).is_none() {
                continue; // `./` and the like
            }
            let name = member_name(&raw)
                .ok_or_else(|| bad(format!("unexpected member {}", raw.display())))?;
            if !(kind.is_file() || kind == tar::EntryType::Continuous) {
                return Err(bad(format!("member {name} is not a regular file")));
            }
            if name == MANIFEST {
                if manifest_text.is_some() {
                    return Err(bad(format!("{MANIFEST} appears twice")));
                }
                if entry.size() > MANIFEST_MAX {
                    return Err(bad(format!(
                        "{MANIFEST} is larger than {MANIFEST_MAX} bytes"
                    )));
                }
                let mut t = String::new();
                entry
                    .read_to_string(&mut t)
                    .map_err(|e| bad(format!("{MANIFEST}: {e}")))?;
                manifest_text = Some(t);
                continue;
            }
            if !MEMBERS.contains(&name.as_str()) {
                return Err(bad(format!("unexpected member {name}")));
            }
            if found.contains_key(&name) {
                return Err(bad(format!("member {name} appears twice")));
            }
            let m = Member {
                offset: entry.raw_file_position(),
                size: entry.size(),
            };
            let sha = copy_hashing(
                &mut entry,
                Path::new(&name),
                &mut std::io::sink(),
                path,
                m.size,
                progress,
            )
            .map_err(|e| bad(format!("member {name}: {e}")))?;
            found.insert(name, (m, sha));
        }
        let text = manifest_text.ok_or_else(|| bad(format!("no {MANIFEST}")))?;
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| bad(format!("{MANIFEST}: {e}")))?;
        check_manifest(&manifest).map_err(|m| bad(format!("{MANIFEST}: {m}")))?;
        let mut members = BTreeMap::new();
        for name in MEMBERS {
            let want = manifest
                .files
                .get(name)
                .ok_or_else(|| bad(format!("{MANIFEST}: files does not list {name}")))?;
            let (m, sha) = found
                .remove(name)
                .ok_or_else(|| bad(format!("member {name} is missing")))?;
            if m.size != want.size {
                return Err(bad(format!(
                    "member {name} is {} bytes, the manifest says {}",
                    m.size, want.size
                )));
            }
            if !sha.eq_ignore_ascii_case(&want.sha256) {
                return Err(SlotError::Verify {
                    what: format!("update bundle {} member {name}", path.display()),
                    expected: want.sha256.to_ascii_lowercase(),
                    actual: sha,
                });
            }
            members.insert(name.to_string(), m);
        }
        Ok(Bundle {
            path: path.to_path_buf(),
            manifest,
            members,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of a member (one of [`MEMBERS`]).
    pub fn size(&self, name: &str) -> u64 {
        self.members.get(name).map(|m| m.size).unwrap_or(0)
    }

    fn reader(&self, name: &str) -> Result<(impl Read, u64, String), SlotError> {
        let m = self
            .members
            .get(name)
            .copied()
            .ok_or_else(|| SlotError::Bundle {
                path: self.path.display().to_string(),
                message: format!("member {name} is missing"),
            })?;
        let mut f = File::open(&self.path).map_err(io_err(&self.path))?;
        f.seek(SeekFrom::Start(m.offset))
            .map_err(io_err(&self.path))?;
        // open() checked that the manifest lists every member it recorded.
        let want = self
            .manifest
            .files
            .get(name)
            .map(|d| d.sha256.to_ascii_lowercase())
            .unwrap_or_default();
        Ok((f.take(m.size), m.size, want))
    }
}

/// `./vmlinuz` and `vmlinuz` name the same member; anything with a directory does not.
fn member_name(p: &Path) -> Option<String> {
    let mut parts = p
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| match c {
            Component::Normal(s) => s.to_str().map(str::to_string),
            _ => None,
        });
    let first = parts.next()??;
    parts.next().is_none().then_some(first)
}

fn check_manifest(m: &Manifest) -> Result<(), String> {
    if m.format != FORMAT {
        return Err(format!(
            "format {} is not supported (this node reads format {FORMAT})",
            m.format
        ));
    }
    // The version goes into a boot entry line and a file name-safe display.
    let v = &m.version;
    if v.is_empty()
        || v.len() > 64
        || !v
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '~'))
    {
        return Err(format!(
            "version `{v}` must be 1..64 characters of A-Z a-z 0-9 . _ - + ~"
        ));
    }
    if let Some(c) = &m.cmdline {
        if c.contains(['\n', '\r']) {
            return Err("cmdline must be one line".into());
        }
    }
    for name in m.files.keys() {
        if !MEMBERS.contains(&name.as_str()) {
            return Err(format!("files lists unknown member {name}"));
        }
    }
    for name in MEMBERS {
        let d = m
            .files
            .get(name)
            .ok_or_else(|| format!("files does not list {name}"))?;
        if d.sha256.len() != 64 || !d.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("files.\"{name}\".sha256 is not 64 hex digits"));
        }
    }
    Ok(())
}

/// The partition a slot's root is written to. A trait so tests can stand in a device that
/// loses writes, which a regular file never does.
pub trait SlotDevice {
    /// For messages: the device path.
    fn describe(&self) -> String;
    fn open_write(&self) -> Result<File, SlotError>;
    fn open_read(&self) -> Result<File, SlotError>;
}

/// A partition (or a regular file standing in for one) at a path, e.g.
/// `/dev/disk/by-partlabel/cairn-b`.
#[derive(Clone, Debug)]
pub struct PartitionPath(pub PathBuf);

impl SlotDevice for PartitionPath {
    fn describe(&self) -> String {
        self.0.display().to_string()
    }
    fn open_write(&self) -> Result<File, SlotError> {
        // No create, no truncate: a partition has a fixed size, and so has its stand-in.
        OpenOptions::new()
            .write(true)
            .open(&self.0)
            .map_err(io_err(&self.0))
    }
    fn open_read(&self) -> Result<File, SlotError> {
        File::open(&self.0).map_err(io_err(&self.0))
    }
}

/// What [`apply_update`] did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UpdateReport {
    pub slot: Slot,
    pub version: String,
    /// The armed entry, e.g. `cairn-b+3.conf`.
    pub entry: String,
    pub root_bytes: u64,
}

/// Where an update goes.
#[derive(Clone, Copy)]
pub struct UpdateTarget<'a> {
    pub esp: &'a Esp,
    /// The running slot; the bundle goes to the other one.
    pub booted: Slot,
    /// The other slot's root partition.
    pub partition: &'a dyn SlotDevice,
}

impl std::fmt::Debug for UpdateTarget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateTarget")
            .field("esp", &self.esp.root())
            .field("booted", &self.booted)
            .field("partition", &self.partition.describe())
            .finish()
    }
}

/// Write a verified bundle to the slot that is not running and arm it for the next boot.
///
/// Order matters for a crash at any point: the target slot's entries are removed before its
/// partition is touched; the partition is fsynced and read back, the kernel and initrd are
/// read back, and only then is the new entry written. Every failure leaves the target slot
/// without an entry, so the running slot keeps booting.
pub fn apply_update(
    bundle: &Bundle,
    target: UpdateTarget<'_>,
    progress: &ProgressBar,
) -> Result<UpdateReport, SlotError> {
    let slot = target.booted.other();
    let esp = target.esp;
    let dev = target.partition;
    let dev_name = PathBuf::from(dev.describe());

    let root_size = bundle.size("root.erofs");
    let capacity = {
        let mut f = dev.open_read()?;
        f.seek(SeekFrom::End(0)).map_err(io_err(&dev_name))?
    };
    if root_size > capacity {
        return Err(SlotError::TooLarge {
            what: "root.erofs".into(),
            size: root_size,
            target: dev.describe(),
            capacity,
        });
    }
    // Options come from the booted slot's entry, read before anything changes.
    let options = esp.options_for(slot, bundle.manifest.cmdline.as_deref(), target.booted)?;

    esp.remove_slot(slot)?;

    let (mut src, size, want) = bundle.reader("root.erofs")?;
    let mut out = dev.open_write()?;
    let written = copy_hashing(&mut src, bundle.path(), &mut out, &dev_name, size, progress)?;
    // The bundle was checked when opened; a different hash now means it changed since.
    if written != want {
        return Err(SlotError::Verify {
            what: format!(
                "{} root.erofs (changed while being written)",
                bundle.path().display()
            ),
            expected: want,
            actual: written,
        });
    }
    out.flush().map_err(io_err(&dev_name))?;
    sync_and_drop_cache(&out, &dev_name)?;
    drop(out);
    let back = hash_open_file(
        &mut dev.open_read()?,
        &dev_name,
        size,
        &ProgressBar::hidden(),
    )?;
    if back != want {
        return Err(SlotError::Verify {
            what: format!("slot {slot} partition {} read back", dev.describe()),
            expected: want,
            actual: back,
        });
    }

    let dir = esp.slot_dir(slot);
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    for name in ["vmlinuz", "initrd.img"] {
        let (mut src, size, want) = bundle.reader(name)?;
        let path = dir.join(name);
        let mut f = File::create(&path).map_err(io_err(&path))?;
        copy_hashing(
            &mut src,
            bundle.path(),
            &mut f,
            &path,
            size,
            &ProgressBar::hidden(),
        )?;
        sync_and_drop_cache(&f, &path)?;
        drop(f);
        let back = hash_file_prefix(&path, None, &ProgressBar::hidden())?;
        if back != want {
            return Err(SlotError::Verify {
                what: format!("{} read back", path.display()),
                expected: want,
                actual: back,
            });
        }
    }
    let version = &bundle.manifest.version;
    write_atomic(&dir.join("version"), format!("{version}\n").as_bytes())?;
    let entry = esp.arm(slot, version, &options)?;
    Ok(UpdateReport {
        slot,
        version: version.clone(),
        entry,
        root_bytes: root_size,
    })
}

/// Build a bundle from its three files (what the image build does with tar and sha256sum;
/// here for tests and for tools written in Rust).
pub fn write_bundle(
    out: &Path,
    version: &str,
    cmdline: Option<&str>,
    root: &Path,
    vmlinuz: &Path,
    initrd: &Path,
) -> Result<Manifest, SlotError> {
    let mut files = BTreeMap::new();
    let srcs = [
        ("root.erofs", root),
        ("vmlinuz", vmlinuz),
        ("initrd.img", initrd),
    ];
    for (name, p) in srcs {
        let size = std::fs::metadata(p).map_err(io_err(p))?.len();
        let sha256 = hash_file_prefix(p, None, &ProgressBar::hidden())?;
        files.insert(name.to_string(), FileDigest { size, sha256 });
    }
    let manifest = Manifest {
        format: FORMAT,
        version: version.to_string(),
        cmdline: cmdline.map(str::to_string),
        files,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| SlotError::Bundle {
        path: out.display().to_string(),
        message: e.to_string(),
    })?;
    let f = File::create(out).map_err(io_err(out))?;
    let mut b = tar::Builder::new(f);
    let mut h = tar::Header::new_gnu();
    h.set_size(json.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, MANIFEST, json.as_slice())
        .map_err(io_err(out))?;
    for (name, p) in srcs {
        let mut f = File::open(p).map_err(io_err(p))?;
        b.append_file(name, &mut f).map_err(io_err(out))?;
    }
    b.into_inner()
        .and_then(|f| f.sync_all())
        .map_err(io_err(out))?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names() {
        assert_eq!(
            member_name(Path::new("./vmlinuz")).as_deref(),
            Some("vmlinuz")
        );
        assert_eq!(
            member_name(Path::new("vmlinuz")).as_deref(),
            Some("vmlinuz")
        );
        assert_eq!(member_name(Path::new("x/vmlinuz")), None);
        assert_eq!(member_name(Path::new("../vmlinuz")), None);
        assert_eq!(member_name(Path::new("/vmlinuz")), None);
        assert_eq!(member_name(Path::new("./")), None);
    }

    fn manifest() -> Manifest {
        let d = FileDigest {
            size: 1,
            sha256: "ab".repeat(32),
        };
        Manifest {
            format: 1,
            version: "1.2.3".into(),
            cmdline: None,
            files: MEMBERS.iter().map(|m| (m.to_string(), d.clone())).collect(),
        }
    }

    #[test]
    fn manifest_checks() {
        assert!(check_manifest(&manifest()).is_ok());
        let mut m = manifest();
        m.format = 2;
        assert!(check_manifest(&m).unwrap_err().contains("format 2"));
        let mut m = manifest();
        m.version = "1.0\ntitle evil".into();
        assert!(check_manifest(&m).unwrap_err().contains("version"));
        let mut m = manifest();
        m.files.remove("initrd.img");
        assert!(check_manifest(&m).unwrap_err().contains("initrd.img"));
        let mut m = manifest();
        m.files.get_mut("vmlinuz").unwrap().sha256 = "zz".repeat(32);
        assert!(check_manifest(&m).unwrap_err().contains("vmlinuz"));
        let mut m = manifest();
        m.cmdline = Some("a\nb".into());
        assert!(check_manifest(&m).is_err());
        assert!(
            serde_json::from_str::<Manifest>(r#"{"version":"1","files":{},"extra":1}"#).is_err()
        );
    }
}
