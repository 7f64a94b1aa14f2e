//! The file system a client is served: the exports its address is allowed,
//! each a bucket whose keys are paths.

use crate::attrs;
use crate::draft::{Draft, FLUSH_BYTES, TOTAL_BYTES};
use crate::exports::Export;
use crate::handle::{Handle, Kind};
use crate::names::{checked, parent, shows, Node};
use crate::{status, Shared};
use bytes::Bytes;
use cairn_meta::Precondition;
use cairn_meta::{After, ObjectRecord};
use cairn_objects::{ObjectAttrs, ObjectError};
use futures::TryStreamExt;
use nfs3_server::nfs3_types::nfs3::{
    createverf3, fattr3, filename3, nfspath3, nfsstat3, sattr3, stable_how, Nfs3Option,
};
use nfs3_server::vfs::{
    DirEntryPlus, NextResult, NfsFileSystem, NfsReadFileSystem, ReadDirPlusIterator,
};
use std::collections::{HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

/// Entries listed per page of a directory read.
const PAGE: usize = 256;

/// What one client connection is served.
#[derive(Clone, Debug)]
pub struct CairnFs {
    pub(crate) shared: Arc<Shared>,
    pub(crate) client: IpAddr,
}

type Res<T> = Result<T, nfsstat3>;

impl CairnFs {
    /// The export `h` is in, if this client may reach it.
    fn export(&self, h: &Handle) -> Res<Arc<Export>> {
        if h.kind() == Kind::Top {
            return Err(nfsstat3::NFS3ERR_ACCES);
        }
        let ex = self
            .shared
            .exports
            .get(h.export())
            .ok_or(nfsstat3::NFS3ERR_STALE)?;
        if !ex.allows(self.client) {
            return Err(nfsstat3::NFS3ERR_ACCES);
        }
        Ok(ex)
    }

    fn writable(&self, h: &Handle) -> Res<Arc<Export>> {
        let ex = self.export(h)?;
        if ex.conf.read_only {
            return Err(nfsstat3::NFS3ERR_ROFS);
        }
        Ok(ex)
    }

    /// What `h` names; a handle whose path cannot be of its kind (a file
    /// ending in `/`, a directory not ending in one: a forged handle) is bad.
    async fn node(&self, ex: &Export, h: &Handle) -> Res<Node> {
        match self.shared.names.resolve(&self.shared.store, ex, h).await? {
            Node::File(k) if k.is_empty() || k.ends_with('/') => Err(nfsstat3::NFS3ERR_BADHANDLE),
            Node::Dir(p) if !p.is_empty() && !p.ends_with('/') => Err(nfsstat3::NFS3ERR_BADHANDLE),
            node => Ok(node),
        }
    }

    async fn dir_path(&self, ex: &Export, h: &Handle) -> Res<String> {
        match self.node(ex, h).await? {
            Node::Dir(p) => Ok(p),
            Node::File(_) => Err(nfsstat3::NFS3ERR_NOTDIR),
            Node::Top => Err(nfsstat3::NFS3ERR_ACCES),
        }
    }

    async fn file_key(&self, ex: &Export, h: &Handle) -> Res<String> {
        match self.node(ex, h).await? {
            Node::File(k) => Ok(k),
            Node::Dir(_) => Err(nfsstat3::NFS3ERR_ISDIR),
            Node::Top => Err(nfsstat3::NFS3ERR_ACCES),
        }
    }

    /// The current object at `key`, if any (made current first: what another
    /// node committed is seen).
    async fn object(&self, ex: &Export, key: &str) -> Res<Option<ObjectRecord>> {
        match self
            .shared
            .store
            .head_object(ex.tenant, &ex.bucket, key)
            .await
        {
            Ok(r) => Ok(Some(r)),
            Err(ObjectError::Meta(cairn_meta::MetaError::NoSuchKey(_))) => Ok(None),
            Err(e) => Err(status(&e)),
        }
    }

    /// Whether directory `path` exists: the export's root, a marker object, or
    /// any key under it.
    async fn dir_exists(&self, ex: &Export, path: &str) -> Res<bool> {
        if path.is_empty() {
            return Ok(true);
        }
        let page = self
            .shared
            .store
            .list_objects(ex.tenant, &ex.bucket, path, None, None, 1)
            .await
            .map_err(|e| status(&e))?;
        Ok(!page.objects.is_empty())
    }

    fn handle(&self, ex: &Export, node: &Node) -> Handle {
        match node {
            Node::Top => Handle::top(),
            Node::Dir(p) => {
                self.shared.names.saw(ex.id, Kind::Dir, p);
                Handle::new(Kind::Dir, ex.id, p)
            }
            Node::File(k) => {
                self.shared.names.saw(ex.id, Kind::File, k);
                Handle::new(Kind::File, ex.id, k)
            }
        }
    }

    async fn attrs_of(&self, ex: &Export, node: &Node) -> Res<fattr3> {
        match node {
            Node::Top => Ok(attrs::top()),
            Node::Dir(p) => {
                if !self.dir_exists(ex, p).await? {
                    return Err(nfsstat3::NFS3ERR_STALE);
                }
                let marker = if p.is_empty() {
                    None
                } else {
                    self.object(ex, p).await?
                };
                Ok(attrs::dir(
                    ex,
                    p,
                    marker.as_ref(),
                    self.shared.changed_ms(ex.id, p),
                ))
            }
            Node::File(k) => {
                if let Some(d) = self.shared.drafts.get(ex.id, k) {
                    let d = d.lock().await;
                    if d.dirty() {
                        return Ok(attrs::file(ex, k, d.base.as_ref(), d.size, d.modified_ms));
                    }
                }
                let rec = self.object(ex, k).await?.ok_or(nfsstat3::NFS3ERR_STALE)?;
                Ok(attrs::file(ex, k, Some(&rec), rec.size, rec.modified_ms))
            }
        }
    }

    /// Flushes `key`'s draft, if it has writes: what a read, a rename or a
    /// COMMIT must see.
    async fn flush(&self, ex: &Export, key: &str) -> Res<()> {
        if let Some(d) = self.shared.drafts.get(ex.id, key) {
            let mut d = d.lock().await;
            if let Err(e) = self.flush_draft(ex, key, &mut d).await {
                d.failed = None; // reported now
                return Err(e);
            }
            // Writes an earlier flush dropped are reported once, here (a
            // COMMIT must not answer OK for bytes that were not kept).
            if let Some(lost) = d.failed.take() {
                return Err(lost);
            }
        }
        Ok(())
    }

    async fn flush_draft(&self, ex: &Export, key: &str, d: &mut Draft) -> Res<()> {
        let held = d.held();
        let r = d.flush(&self.shared.store, ex, key).await;
        // Flushed or, failing, dropped: either way no longer held.
        self.shared.drafts.sub(held);
        r.map_err(|e| {
            tracing::warn!("NFS flush of {}/{key} failed: {e}", ex.path);
            status(&e)
        })
    }

    /// The entry `name` of directory `dir`: a directory if any key is under
    /// it, else a file if the key exists.
    async fn entry(&self, ex: &Export, dir: &str, name: &str) -> Res<Node> {
        let sub = format!("{dir}{name}/");
        if self.dir_exists(ex, &sub).await? {
            return Ok(Node::Dir(sub));
        }
        let key = format!("{dir}{name}");
        if self.shared.drafts.get(ex.id, &key).is_some() || self.object(ex, &key).await?.is_some() {
            return Ok(Node::File(key));
        }
        Err(nfsstat3::NFS3ERR_NOENT)
    }

    /// Creates an empty object at `key` (a new file, or with `marker` a
    /// directory's marker), only if the key holds nothing.
    async fn make(
        &self,
        ex: &Export,
        key: &str,
        user_meta: std::collections::BTreeMap<String, String>,
    ) -> Res<ObjectRecord> {
        let body = futures::stream::empty::<Result<Bytes, std::io::Error>>();
        let attrs = ObjectAttrs {
            user_meta,
            ..Default::default()
        };
        let cond = Precondition {
            if_none_match_any: true,
            ..Default::default()
        };
        match self
            .shared
            .store
            .put_object(ex.tenant, &ex.bucket, key, body, Some(0), attrs, cond)
            .await
        {
            Ok(r) => {
                self.shared.touch(ex.id, parent(key));
                Ok(r)
            }
            Err(ObjectError::Meta(cairn_meta::MetaError::PreconditionFailed)) => {
                Err(nfsstat3::NFS3ERR_EXIST)
            }
            Err(e) => Err(status(&e)),
        }
    }

    async fn set_size(&self, ex: &Export, key: &str, size: u64) -> Res<()> {
        if size > crate::MAX_FILE_SIZE {
            return Err(nfsstat3::NFS3ERR_FBIG);
        }
        let base = self.object(ex, key).await?;
        let Some(base) = base else {
            return Err(nfsstat3::NFS3ERR_STALE);
        };
        let d = self.shared.drafts.get_or(ex.id, key, || Some(base));
        let mut d = d.lock().await;
        if d.size == size && !d.dirty() {
            return Ok(());
        }
        d.resize(size);
        self.flush_draft(ex, key, &mut d).await
    }

    /// Removes `key`, an object (a file, or a directory's marker).
    async fn delete(&self, ex: &Export, key: &str) -> Res<()> {
        self.shared.drafts.drop_draft(ex.id, key);
        self.shared
            .store
            .delete_object(ex.tenant, &ex.bucket, key, Precondition::default())
            .await
            .map_err(|e| status(&e))?;
        self.shared.touch(ex.id, parent(key));
        Ok(())
    }

    /// Moves object `from` to `to`: in one step, or in a versioned bucket as a
    /// copy and a delete.
    async fn move_object(&self, ex: &Export, from: &str, to: &str) -> Res<()> {
        self.flush(ex, from).await?;
        self.shared.drafts.drop_draft(ex.id, from);
        self.shared.drafts.drop_draft(ex.id, to);
        let store = &self.shared.store;
        let rec = self
            .object(ex, from)
            .await?
            .ok_or(nfsstat3::NFS3ERR_NOENT)?;
        if ex.versioned {
            let body = store.read(ex.tenant, &rec, 0, rec.size);
            let attrs = ObjectAttrs {
                content_type: rec.content_type.clone(),
                user_meta: rec.user_meta.clone(),
                headers: rec.headers.clone(),
                tags: rec.tags.clone(),
                ..Default::default()
            };
            store
                .put_object(
                    ex.tenant,
                    &ex.bucket,
                    to,
                    body,
                    Some(rec.size),
                    attrs,
                    Precondition::default(),
                )
                .await
                .map_err(|e| status(&e))?;
            let only = Precondition {
                if_write: Some(cairn_meta::WriteId::of(&rec)),
                ..Default::default()
            };
            store
                .delete_object(ex.tenant, &ex.bucket, from, only)
                .await
                .map_err(|e| status(&e))?;
        } else {
            store
                .rename_object(ex.tenant, &ex.bucket, from, to, &rec)
                .await
                .map_err(|e| status(&e))?;
        }
        self.shared.touch(ex.id, parent(from));
        self.shared.touch(ex.id, parent(to));
        Ok(())
    }
}

impl NfsReadFileSystem for CairnFs {
    type Handle = Handle;

    fn root_dir(&self) -> Handle {
        Handle::top()
    }

    /// `/<tenant>/<bucket>[/sub/dir]`: an export this client may reach, or a
    /// directory in one.
    async fn lookup_by_path(&self, path: &str) -> Res<Handle> {
        let path = path.trim_matches('/');
        let exports = self.shared.exports.all();
        let ex = exports
            .values()
            .filter(|e| e.allows(self.client))
            .find(|e| {
                let p = e.path.trim_start_matches('/');
                path == p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
            })
            .cloned()
            .ok_or(nfsstat3::NFS3ERR_NOENT)?;
        let mut dir = String::new();
        let rest = path[ex.path.len() - 1..].trim_start_matches('/');
        for part in rest.split('/').filter(|p| !p.is_empty()) {
            checked(part.as_bytes())?;
            match self.entry(&ex, &dir, part).await? {
                Node::Dir(d) => dir = d,
                _ => return Err(nfsstat3::NFS3ERR_NOTDIR),
            }
        }
        Ok(self.handle(&ex, &Node::Dir(dir)))
    }

    async fn lookup(&self, dirid: &Handle, filename: &filename3<'_>) -> Res<Handle> {
        if dirid.kind() == Kind::Top {
            return Err(nfsstat3::NFS3ERR_NOENT);
        }
        let ex = self.export(dirid)?;
        let dir = self.dir_path(&ex, dirid).await?;
        let node = match filename.0.as_ref() {
            b"." => Node::Dir(dir),
            // The export's root is its own parent: nothing above it is reachable.
            b".." => Node::Dir(parent(&dir).to_string()),
            name => {
                let name = checked(name)?;
                self.entry(&ex, &dir, name).await?
            }
        };
        Ok(self.handle(&ex, &node))
    }

    async fn getattr(&self, id: &Handle) -> Res<fattr3> {
        if id.kind() == Kind::Top {
            return Ok(attrs::top());
        }
        let ex = self.export(id)?;
        let node = self.node(&ex, id).await?;
        self.attrs_of(&ex, &node).await
    }

    async fn read(&self, id: &Handle, offset: u64, count: u32) -> Res<(Vec<u8>, bool)> {
        let ex = self.export(id)?;
        let key = self.file_key(&ex, id).await?;
        self.flush(&ex, &key).await?;
        let rec = self
            .object(&ex, &key)
            .await?
            .ok_or(nfsstat3::NFS3ERR_STALE)?;
        if offset >= rec.size {
            return Ok((Vec::new(), true));
        }
        // At most what FSINFO offers (1 MiB): a client asking 4 GiB at once is
        // given that much, not a buffer of its size.
        let count = u64::from(count).min(crate::MAX_READ);
        let end = offset.saturating_add(count).min(rec.size);
        let parts: Vec<Bytes> = self
            .shared
            .store
            .read(ex.tenant, &rec, offset, end)
            .try_collect()
            .await
            .map_err(|e| status(&e))?;
        let mut out = Vec::with_capacity((end - offset) as usize);
        for p in parts {
            out.extend_from_slice(&p);
        }
        Ok((out, end >= rec.size))
    }

    async fn readdirplus(
        &self,
        dirid: &Handle,
        cookie: u64,
    ) -> Res<impl ReadDirPlusIterator<Handle>> {
        let (ex, dir) = if dirid.kind() == Kind::Top {
            (None, String::new())
        } else {
            let ex = self.export(dirid)?;
            let dir = self.dir_path(&ex, dirid).await?;
            (Some(ex), dir)
        };
        let mut it = DirIter {
            fs: self.clone(),
            ex,
            dir,
            after: None,
            pending: VecDeque::new(),
            done: dirid.kind() == Kind::Top,
        };
        if cookie != 0 {
            it.seek(cookie)?;
        }
        Ok(it)
    }

    async fn readlink(&self, _id: &Handle) -> Res<nfspath3<'_>> {
        Err(nfsstat3::NFS3ERR_NOTSUPP)
    }
}

impl NfsFileSystem for CairnFs {
    async fn setattr(&self, id: &Handle, set: sattr3) -> Res<fattr3> {
        let ex = self.writable(id)?;
        let node = self.node(&ex, id).await?;
        let key = match &node {
            Node::File(k) => {
                if let Nfs3Option::Some(size) = set.size {
                    self.set_size(&ex, k, size).await?;
                }
                self.flush(&ex, k).await?;
                k.clone()
            }
            Node::Dir(p) if !p.is_empty() => {
                if matches!(set.size, Nfs3Option::Some(_)) {
                    return Err(nfsstat3::NFS3ERR_ISDIR);
                }
                p.clone()
            }
            _ => return self.attrs_of(&ex, &node).await,
        };
        // Mode, owner and times are the object's metadata: rewritten while
        // the object is still the write they were read from.
        if let Some(rec) = self.object(&ex, &key).await? {
            let mut meta = rec.user_meta.clone();
            if attrs::apply(&mut meta, &set) {
                self.shared
                    .store
                    .replace_meta(
                        ex.tenant,
                        &ex.bucket,
                        &key,
                        cairn_meta::WriteId::of(&rec),
                        meta,
                    )
                    .await
                    .map_err(|e| status(&e))?;
            }
        }
        self.attrs_of(&ex, &node).await
    }

    async fn write(
        &self,
        id: &Handle,
        offset: u64,
        data: &[u8],
        stable: stable_how,
    ) -> Res<(fattr3, stable_how)> {
        let ex = self.writable(id)?;
        let key = self.file_key(&ex, id).await?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(nfsstat3::NFS3ERR_FBIG)?;
        if end > crate::MAX_FILE_SIZE {
            return Err(nfsstat3::NFS3ERR_FBIG);
        }
        if data.is_empty() {
            // Writes nothing and extends nothing.
            let node = Node::File(key);
            return Ok((self.attrs_of(&ex, &node).await?, stable_how::FILE_SYNC));
        }
        let base = match self.shared.drafts.get(ex.id, &key) {
            Some(_) => None,
            None => Some(
                self.object(&ex, &key)
                    .await?
                    .ok_or(nfsstat3::NFS3ERR_STALE)?,
            ),
        };
        let d = self.shared.drafts.get_or(ex.id, &key, || base);
        let mut d = d.lock().await;
        d.write(offset, Bytes::copy_from_slice(data));
        self.shared.drafts.add(data.len() as u64);
        let full = d.held() >= FLUSH_BYTES
            || self
                .shared
                .drafts
                .total
                .load(std::sync::atomic::Ordering::Relaxed)
                >= TOTAL_BYTES;
        let committed = if stable != stable_how::UNSTABLE || full {
            self.flush_draft(&ex, &key, &mut d).await?;
            stable_how::FILE_SYNC
        } else {
            stable_how::UNSTABLE
        };
        let attr = attrs::file(&ex, &key, d.base.as_ref(), d.size, d.modified_ms);
        Ok((attr, committed))
    }

    async fn create(
        &self,
        dirid: &Handle,
        filename: &filename3<'_>,
        attr: sattr3,
    ) -> Res<(Handle, fattr3)> {
        let ex = self.writable(dirid)?;
        let dir = self.dir_path(&ex, dirid).await?;
        let name = checked(filename.0.as_ref())?;
        if self.dir_exists(&ex, &format!("{dir}{name}/")).await? {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        }
        let key = format!("{dir}{name}");
        // An unchecked create of a file that exists opens it (and sets what
        // `attr` asks, a truncation included).
        if self.object(&ex, &key).await?.is_none() {
            let mut meta = Default::default();
            attrs::apply(
                &mut meta,
                &sattr3 {
                    size: Nfs3Option::None,
                    ..attr.clone()
                },
            );
            match self.make(&ex, &key, meta).await {
                Ok(_) | Err(nfsstat3::NFS3ERR_EXIST) => {}
                Err(e) => return Err(e),
            }
        } else if let Nfs3Option::Some(size) = attr.size {
            self.set_size(&ex, &key, size).await?;
        }
        let node = Node::File(key);
        let h = self.handle(&ex, &node);
        Ok((h, self.attrs_of(&ex, &node).await?))
    }

    async fn create_exclusive(
        &self,
        dirid: &Handle,
        filename: &filename3<'_>,
        verf: createverf3,
    ) -> Res<Handle> {
        let ex = self.writable(dirid)?;
        let dir = self.dir_path(&ex, dirid).await?;
        let name = checked(filename.0.as_ref())?;
        let key = format!("{dir}{name}");
        let verf = format!("{:016x}", u64::from_le_bytes(verf.0));
        if let Some(rec) = self.object(&ex, &key).await? {
            // A retried exclusive create finds the file it made.
            if rec.user_meta.get(attrs::CREATE_VERF) == Some(&verf) {
                return Ok(self.handle(&ex, &Node::File(key)));
            }
            return Err(nfsstat3::NFS3ERR_EXIST);
        }
        let meta = [(attrs::CREATE_VERF.to_string(), verf)]
            .into_iter()
            .collect();
        self.make(&ex, &key, meta).await?;
        Ok(self.handle(&ex, &Node::File(key)))
    }

    async fn mkdir(&self, dirid: &Handle, dirname: &filename3<'_>) -> Res<(Handle, fattr3)> {
        let ex = self.writable(dirid)?;
        let dir = self.dir_path(&ex, dirid).await?;
        let name = checked(dirname.0.as_ref())?;
        let path = format!("{dir}{name}/");
        if self.dir_exists(&ex, &path).await?
            || self.object(&ex, &format!("{dir}{name}")).await?.is_some()
        {
            return Err(nfsstat3::NFS3ERR_EXIST);
        }
        self.make(&ex, &path, Default::default()).await?;
        let node = Node::Dir(path);
        let h = self.handle(&ex, &node);
        Ok((h, self.attrs_of(&ex, &node).await?))
    }

    /// REMOVE: a file.
    async fn remove(&self, dirid: &Handle, filename: &filename3<'_>) -> Res<()> {
        let ex = self.writable(dirid)?;
        let dir = self.dir_path(&ex, dirid).await?;
        let name = checked(filename.0.as_ref())?;
        match self.entry(&ex, &dir, name).await? {
            Node::File(k) => self.delete(&ex, &k).await,
            Node::Dir(_) => Err(nfsstat3::NFS3ERR_ISDIR),
            Node::Top => Err(nfsstat3::NFS3ERR_ACCES),
        }
    }

    /// RMDIR: a directory, only when nothing is in it.
    async fn rmdir(&self, dirid: &Handle, dirname: &filename3<'_>) -> Res<()> {
        let ex = self.writable(dirid)?;
        let dir = self.dir_path(&ex, dirid).await?;
        let name = checked(dirname.0.as_ref())?;
        match self.entry(&ex, &dir, name).await? {
            Node::Dir(p) => {
                let page = self
                    .shared
                    .store
                    .list_objects(ex.tenant, &ex.bucket, &p, None, None, 2)
                    .await
                    .map_err(|e| status(&e))?;
                if page.objects.iter().any(|(k, _)| *k != p) {
                    return Err(nfsstat3::NFS3ERR_NOTEMPTY);
                }
                self.delete(&ex, &p).await
            }
            Node::File(_) => Err(nfsstat3::NFS3ERR_NOTDIR),
            Node::Top => Err(nfsstat3::NFS3ERR_ACCES),
        }
    }

    /// A file moves in one step; a directory moves file by file (each in one
    /// step), its marker last.
    async fn rename<'a>(
        &self,
        from_dirid: &Handle,
        from_filename: &filename3<'a>,
        to_dirid: &Handle,
        to_filename: &filename3<'a>,
    ) -> Res<()> {
        let ex = self.writable(from_dirid)?;
        if to_dirid.export() != ex.id {
            return Err(nfsstat3::NFS3ERR_XDEV);
        }
        let from_dir = self.dir_path(&ex, from_dirid).await?;
        let to_dir = self.dir_path(&ex, to_dirid).await?;
        let from_name = checked(from_filename.0.as_ref())?;
        let to_name = checked(to_filename.0.as_ref())?;
        match self.entry(&ex, &from_dir, from_name).await? {
            Node::File(from) => {
                let to = format!("{to_dir}{to_name}");
                if self.dir_exists(&ex, &format!("{to}/")).await? {
                    return Err(nfsstat3::NFS3ERR_ISDIR);
                }
                if from != to {
                    self.move_object(&ex, &from, &to).await?;
                }
                Ok(())
            }
            Node::Dir(from) => {
                let to = format!("{to_dir}{to_name}/");
                if to == from {
                    return Ok(());
                }
                if to.starts_with(&from) {
                    return Err(nfsstat3::NFS3ERR_INVAL);
                }
                if self
                    .object(&ex, &format!("{to_dir}{to_name}"))
                    .await?
                    .is_some()
                {
                    return Err(nfsstat3::NFS3ERR_NOTDIR);
                }
                let page = self
                    .shared
                    .store
                    .list_objects(ex.tenant, &ex.bucket, &to, None, None, 2)
                    .await
                    .map_err(|e| status(&e))?;
                if page.objects.iter().any(|(k, _)| *k != to) {
                    return Err(nfsstat3::NFS3ERR_NOTEMPTY);
                }
                let mut after = None;
                let mut marker = false;
                loop {
                    let page = self
                        .shared
                        .store
                        .list_objects(ex.tenant, &ex.bucket, &from, after.clone(), None, 1000)
                        .await
                        .map_err(|e| status(&e))?;
                    for (key, _) in &page.objects {
                        if *key == from {
                            marker = true;
                            continue;
                        }
                        let dest = format!("{to}{}", &key[from.len()..]);
                        self.move_object(&ex, key, &dest).await?;
                    }
                    match page.next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
                if marker {
                    self.move_object(&ex, &from, &to).await?;
                }
                Ok(())
            }
            Node::Top => Err(nfsstat3::NFS3ERR_ACCES),
        }
    }

    async fn symlink<'a>(
        &self,
        _dirid: &Handle,
        _linkname: &filename3<'a>,
        _symlink: &nfspath3<'a>,
        _attr: &sattr3,
    ) -> Res<(Handle, fattr3)> {
        Err(nfsstat3::NFS3ERR_NOTSUPP)
    }

    async fn commit(&self, id: &Handle, _offset: u64, _count: u32) -> Res<()> {
        let ex = self.writable(id)?;
        let key = self.file_key(&ex, id).await?;
        self.flush(&ex, &key).await
    }
}

/// A directory read: pages of the listing, entries in key order, each with
/// its handle and attributes. An entry's cookie is its file id: a read goes on
/// after the entry whose path that id names (any client's cookie means the
/// same place, and a cookie from before a restart is `BAD_COOKIE` unless the
/// path was seen again).
struct DirIter {
    fs: CairnFs,
    ex: Option<Arc<Export>>,
    dir: String,
    after: Option<After>,
    pending: VecDeque<DirEntryPlus<Handle>>,
    done: bool,
}

impl DirIter {
    /// Goes on after the entry whose file id is `cookie`.
    fn seek(&mut self, cookie: u64) -> Res<()> {
        let ex = self.ex.as_ref().ok_or(nfsstat3::NFS3ERR_BAD_COOKIE)?;
        let after = match self.fs.shared.names.path_of(ex.id, cookie) {
            Some((Kind::Dir, p)) if p.starts_with(&self.dir) && p != self.dir => After::Prefix(p),
            Some((Kind::File, k)) if k.starts_with(&self.dir) => After::Key(k),
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
            .list_objects(
                ex.tenant,
                &ex.bucket,
                &self.dir,
                self.after.clone(),
                Some("/"),
                PAGE,
            )
            .await
            .map_err(|e| status(&e))?;
        let dirs: HashSet<&str> = page
            .prefixes
            .iter()
            .map(|p| p.trim_end_matches('/'))
            .collect();
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
