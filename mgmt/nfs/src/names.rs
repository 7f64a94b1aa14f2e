//! Keys as paths: which names a client may use, which keys show as files, and
//! finding a path again from a handle that holds only its beginning.

use crate::exports::Export;
use crate::handle::{file_id, Handle, Kind};
use cairn_meta::After;
use cairn_objects::ObjectStore;
use nfs3_server::nfs3_types::nfs3::nfsstat3;
use std::collections::HashMap;
use std::sync::Mutex;

/// The longest name in a directory (what Linux and NFS clients assume).
pub const NAME_MAX: usize = 255;
/// Keys listed at most to find one handle's path again; past it the handle is
/// stale (a client then looks the path up anew).
const SCAN_MAX: usize = 200_000;
/// Paths remembered by file id; past it the memory starts again empty.
const REMEMBER_MAX: usize = 1 << 20;

/// What a handle names, its path found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Top,
    /// A key prefix ending in `/`, or `""` (the export's root).
    Dir(String),
    File(String),
}

/// A name a client gives for an entry of a directory, checked: UTF-8 (keys
/// are), at most [`NAME_MAX`] bytes, no `/` or NUL, not `.` or `..` (those
/// are for the caller to handle first).
pub fn checked(name: &[u8]) -> Result<&str, nfsstat3> {
    if name.len() > NAME_MAX {
        return Err(nfsstat3::NFS3ERR_NAMETOOLONG);
    }
    let s = std::str::from_utf8(name).map_err(|_| nfsstat3::NFS3ERR_INVAL)?;
    if s.is_empty() || s == "." || s == ".." || s.contains(['/', '\0']) {
        return Err(nfsstat3::NFS3ERR_INVAL);
    }
    Ok(s)
}

/// Whether a name found in a listing can be shown (a key such as `a//b` or
/// `x/../y` has none a client could use).
pub fn shows(name: &str) -> bool {
    checked(name.as_bytes()).is_ok()
}

/// The directory a path is in (`""`: the export's root).
pub fn parent(path: &str) -> &str {
    let p = path.strip_suffix('/').unwrap_or(path);
    match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    }
}

fn node(kind: Kind, path: String) -> Node {
    match kind {
        Kind::Top => Node::Top,
        Kind::Dir => Node::Dir(path),
        Kind::File => Node::File(path),
    }
}

/// Paths by file id: filled as paths are seen, read when a handle holds only
/// the beginning of its path.
#[derive(Debug, Default)]
pub struct Resolver {
    known: Mutex<HashMap<(u64, u64), (Kind, String)>>,
}

impl Resolver {
    /// Notes `path`, a `kind`, in export `export`.
    pub fn saw(&self, export: u64, kind: Kind, path: &str) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= REMEMBER_MAX {
            known.clear();
        }
        known.insert((export, file_id(export, path)), (kind, path.to_string()));
    }

    /// The kind and path remembered for file id `id`.
    pub fn path_of(&self, export: u64, id: u64) -> Option<(Kind, String)> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(&(export, id)).cloned()
    }

    /// The path remembered for `h`'s file id, if it is of `h`'s kind.
    fn known_as(&self, export: u64, h: &Handle) -> Option<Node> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        match known.get(&(export, h.file_id())) {
            Some((kind, path)) if *kind == h.kind() => Some(node(*kind, path.clone())),
            _ => None,
        }
    }

    /// What `h` names, in `ex`.
    pub async fn resolve(
        &self,
        store: &ObjectStore,
        ex: &Export,
        h: &Handle,
    ) -> Result<Node, nfsstat3> {
        let prefix = match h.path() {
            Ok(whole) => return Ok(node(h.kind(), whole.to_string())),
            Err(prefix) => prefix.to_string(),
        };
        if let Some(found) = self.known_as(ex.id, h) {
            return Ok(found);
        }
        // List the keys that start with what the handle holds; note every
        // file and directory seen, so one listing serves every handle under it.
        let mut after: Option<After> = None;
        let mut scanned = 0;
        loop {
            let page = store
                .list_view(ex.tenant, &ex.bucket, &prefix, after.clone(), None, 1000)
                .await
                .map_err(|e| crate::status(&e))?;
            for (key, _) in &page.objects {
                self.saw(ex.id, Kind::File, key);
                for (i, _) in key.match_indices('/') {
                    if i + 1 >= prefix.len() {
                        self.saw(ex.id, Kind::Dir, &key[..=i]);
                    }
                }
            }
            scanned += page.objects.len();
            if let Some(found) = self.known_as(ex.id, h) {
                return Ok(found);
            }
            match page.next {
                Some(n) if scanned < SCAN_MAX => after = Some(n),
                _ => return Err(nfsstat3::NFS3ERR_STALE),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_clients_may_not_use_are_refused() {
        assert_eq!(checked(b"ok.txt"), Ok("ok.txt"));
        for bad in [&b""[..], b".", b"..", b"a/b", b"nul\0", b"\xff\xfe"] {
            assert_eq!(checked(bad), Err(nfsstat3::NFS3ERR_INVAL), "{bad:?}");
        }
        assert_eq!(checked(&[b'x'; 256]), Err(nfsstat3::NFS3ERR_NAMETOOLONG));
        assert!(checked(&[b'x'; 255]).is_ok());
    }

    #[test]
    fn parents() {
        assert_eq!(parent("a/b/c.txt"), "a/b/");
        assert_eq!(parent("a/b/"), "a/");
        assert_eq!(parent("a/"), "");
        assert_eq!(parent("top.txt"), "");
    }
}
