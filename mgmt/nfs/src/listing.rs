//! Directory reads.

use crate::attrs;
use crate::exports::Export;
use crate::fs::{CairnFs, Res};
use crate::handle::{Handle, Kind};
use crate::names::{parent, shows, Node};
use crate::status;
use cairn_meta::{After, ObjectRecord};
use nfs3_server::nfs3_types::nfs3::{filename3, nfsstat3};
use nfs3_server::vfs::{DirEntryPlus, NextResult, ReadDirPlusIterator};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

/// Entries listed per page of a directory read.
const PAGE: usize = 256;

/// A directory read: pages of the listing, entries in key order, each with
/// its handle and attributes. An entry's cookie is its file id: a read goes on
/// after the entry whose path that id names (any client's cookie means the
/// same place, and a cookie from before a restart is `BAD_COOKIE` unless the
/// path was seen again).
pub(crate) struct DirIter {
    fs: CairnFs,
    ex: Option<Arc<Export>>,
    dir: String,
    after: Option<After>,
    pending: VecDeque<DirEntryPlus<Handle>>,
    done: bool,
}

impl DirIter {
    /// A read of directory `dir` of `ex` (none: above every export, empty).
    pub(crate) fn new(fs: CairnFs, ex: Option<Arc<Export>>, dir: String) -> DirIter {
        DirIter {
            fs,
            done: ex.is_none(),
            ex,
            dir,
            after: None,
            pending: VecDeque::new(),
        }
    }

    /// Goes on after the entry whose file id is `cookie`.
    pub(crate) fn seek(&mut self, cookie: u64) -> Res<()> {
        let ex = self.ex.as_ref().ok_or(nfsstat3::NFS3ERR_BAD_COOKIE)?;
        // Only an entry of this very directory is a place in its listing.
        let after = match self.fs.shared.names.path_of(ex.id, cookie) {
            Some((Kind::Dir, p)) if p != self.dir && parent(&p) == self.dir => After::Prefix(p),
            Some((Kind::File, k)) if parent(&k) == self.dir => After::Key(k),
            _ => return Err(nfsstat3::NFS3ERR_BAD_COOKIE),
        };
        self.after = Some(after);
        Ok(())
    }

    /// Reads the next page of the listing into `pending`.
    async fn fill(&mut self) -> Res<()> {
        let Some(ex) = self.ex.clone() else {
            self.done = true;
            return Ok(());
        };
        let store = &self.fs.shared.store;
        let page = store
            .list_view(
                ex.tenant,
                &ex.bucket,
                &self.dir,
                self.after.clone(),
                Some("/"),
                PAGE,
            )
            .await
            .map_err(|e| status(&e))?;
        let mut dirs: HashSet<&str> = page
            .prefixes
            .iter()
            .map(|p| p.trim_end_matches('/'))
            .collect();
        // A file `x` near a page's end may have its directory `x/` on the next
        // page (keys such as `x!` sort between them): asked about directly, so
        // the name shows once, as the directory.
        if page.next.is_some() {
            let last = page.objects.last().map(|(k, _)| k.as_str());
            let last = last
                .max(page.prefixes.last().map(String::as_str))
                .unwrap_or("");
            for (k, _) in &page.objects {
                if format!("{k}/").as_str() > last
                    && self.fs.dir_exists(&ex, &format!("{k}/")).await?
                {
                    dirs.insert(k.as_str());
                }
            }
        }
        // Files and directories merged in key order; a name that is both is
        // the directory.
        let mut merged: Vec<(String, Option<&ObjectRecord>)> = page
            .objects
            .iter()
            .filter(|(k, _)| *k != self.dir && !dirs.contains(k.as_str()))
            .map(|(k, r)| (k.clone(), Some(r)))
            .chain(page.prefixes.iter().map(|p| (p.clone(), None)))
            .collect();
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, rec) in merged {
            let name = path[self.dir.len()..].trim_end_matches('/');
            if !shows(name) {
                continue;
            }
            let (node, attr) = match rec {
                Some(r) => {
                    let node = Node::File(path.clone());
                    let attr = match self.fs.shared.drafts.get(ex.id, &path) {
                        Some(d) => {
                            let d = d.lock().await;
                            attrs::file(&ex, &path, Some(r), d.size.max(r.size), d.modified_ms)
                        }
                        None => attrs::file(&ex, &path, Some(r), r.size, r.modified_ms),
                    };
                    (node, attr)
                }
                None => {
                    let a = attrs::dir(&ex, &path, None, self.fs.shared.changed_ms(ex.id, &path));
                    (Node::Dir(path.clone()), a)
                }
            };
            // Made (and its path remembered) before the client can send its
            // id back as a cookie.
            let handle = self.fs.handle(&ex, &node);
            self.pending.push_back(DirEntryPlus {
                fileid: attr.fileid,
                name: filename3::from(name.as_bytes().to_vec()),
                cookie: attr.fileid,
                name_attributes: Some(attr),
                name_handle: Some(handle),
            });
        }
        match page.next {
            Some(n) => self.after = Some(n),
            None => self.done = true,
        }
        Ok(())
    }
}

impl ReadDirPlusIterator<Handle> for DirIter {
    async fn next(&mut self) -> NextResult<DirEntryPlus<Handle>> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return NextResult::Ok(e);
            }
            if self.done {
                return NextResult::Eof;
            }
            if let Err(e) = self.fill().await {
                return NextResult::Err(e);
            }
        }
    }
}
