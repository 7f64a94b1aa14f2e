//! File handles: stable across restarts and alike on every node, because they
//! are made from what names a file, never from a process's state.
//!
//! A handle is `[kind][export id: 8][file id: 8][path: up to 39 bytes]`, after
//! the 8 bytes the NFS layer puts first (a generation Cairn fixes). The file id
//! (the inode number clients see) is a digest of the export and the path; the
//! path is in the handle whole when it fits, else its first bytes, and the rest
//! is found again by listing the keys that start with them (see
//! [`crate::names::Resolver`]).

use nfs3_server::vfs::FileHandle;
use sha2::{Digest, Sha256};

/// What a handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Above every export: what a client that mounts `/` sees (nothing).
    Top,
    /// A directory: a key prefix ending in `/`, or `""` for the export's root.
    Dir,
    /// A file: an object's key.
    File,
}

const HEAD: usize = 17;
/// The most a handle holds (NFSv3 allows 64 bytes, the NFS layer takes 8).
const MAX: usize = 56;
/// Flag on the kind byte: the path in the handle is only its beginning.
const CUT: u8 = 0x80;

/// A file handle (see the module's doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handle {
    bytes: Vec<u8>,
}

impl Handle {
    pub fn top() -> Handle {
        Handle::new(Kind::Top, 0, "")
    }

    pub fn new(kind: Kind, export: u64, path: &str) -> Handle {
        let room = MAX - HEAD;
        let (kept, cut) = if path.len() <= room {
            (path, false)
        } else {
            let mut end = room;
            while !path.is_char_boundary(end) {
                end -= 1;
            }
            (&path[..end], true)
        };
        let k = match kind {
            Kind::Top => 0u8,
            Kind::Dir => 1,
            Kind::File => 2,
        };
        let mut bytes = Vec::with_capacity(HEAD + kept.len());
        bytes.push(if cut { k | CUT } else { k });
        bytes.extend_from_slice(&export.to_le_bytes());
        bytes.extend_from_slice(&file_id(export, path).to_le_bytes());
        bytes.extend_from_slice(kept.as_bytes());
        Handle { bytes }
    }

    pub fn kind(&self) -> Kind {
        match self.bytes[0] & !CUT {
            0 => Kind::Top,
            1 => Kind::Dir,
            _ => Kind::File,
        }
    }

    pub fn export(&self) -> u64 {
        u64::from_le_bytes(self.bytes[1..9].try_into().unwrap_or_default())
    }

    /// The inode number clients see.
    pub fn file_id(&self) -> u64 {
        u64::from_le_bytes(self.bytes[9..17].try_into().unwrap_or_default())
    }

    /// The path (whole: `Ok`) or its beginning (`Err`).
    pub fn path(&self) -> Result<&str, &str> {
        // Checked to be UTF-8 when the handle was read.
        let p = std::str::from_utf8(&self.bytes[HEAD..]).unwrap_or_default();
        if self.bytes[0] & CUT == 0 {
            Ok(p)
        } else {
            Err(p)
        }
    }
}

impl FileHandle for Handle {
    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Any bytes a client sends: refused unless they are a handle's shape.
    fn from_bytes(bytes: &[u8]) -> Option<Handle> {
        if bytes.len() < HEAD || bytes.len() > MAX || bytes[0] & !CUT > 2 {
            return None;
        }
        std::str::from_utf8(&bytes[HEAD..]).ok()?;
        Some(Handle {
            bytes: bytes.to_vec(),
        })
    }
}

/// A file's id: the first 8 bytes of SHA-256 over its export and path (never 0,
/// which NFS reserves; 1 is the top's).
pub fn file_id(export: u64, path: &str) -> u64 {
    if export == 0 {
        return 1;
    }
    let mut h = Sha256::new();
    h.update(export.to_le_bytes());
    h.update(path.as_bytes());
    let d = h.finalize();
    let id = u64::from_le_bytes(d[..8].try_into().unwrap_or_default());
    id.max(2)
}

/// An export's id: a digest of its bucket's metadata name (tenant and bucket).
pub fn export_id(bucket_id: &str) -> u64 {
    let d = Sha256::digest(bucket_id.as_bytes());
    u64::from_le_bytes(d[..8].try_into().unwrap_or_default()).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_carry_short_paths_whole_and_long_ones_cut_at_a_character() {
        let h = Handle::new(Kind::File, 7, "a/b.txt");
        let back = Handle::from_bytes(h.as_bytes()).unwrap();
        assert_eq!(
            (back.kind(), back.export(), back.path()),
            (Kind::File, 7, Ok("a/b.txt"))
        );
        assert_eq!(back.file_id(), file_id(7, "a/b.txt"));
        let long = format!("{}é/tail", "x".repeat(38));
        let h = Handle::new(Kind::Dir, 7, &long);
        assert_eq!(
            h.path(),
            Err("x".repeat(38).as_str()),
            "cut before the two-byte character"
        );
        assert_eq!(h.file_id(), file_id(7, &long), "the id is the whole path's");
        assert!(h.as_bytes().len() <= MAX);
    }

    #[test]
    fn bytes_that_are_no_handle_are_refused() {
        assert!(Handle::from_bytes(&[]).is_none());
        assert!(Handle::from_bytes(&[9; 20]).is_none(), "unknown kind");
        assert!(Handle::from_bytes(&[1; 60]).is_none(), "too long");
        let mut b = Handle::new(Kind::File, 3, "ok").as_bytes().to_vec();
        b.push(0xff);
        assert!(Handle::from_bytes(&b).is_none(), "a path that is not UTF-8");
    }
}
