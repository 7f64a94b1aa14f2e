//! The file system a client is served: the exports its address is allowed,
//! each a bucket whose keys are paths.

use crate::attrs;
use crate::draft::Draft;
use crate::exports::Export;
use crate::handle::{Handle, Kind};
use crate::listing::DirIter;
use crate::names::{checked, parent, Node};
use crate::readahead::{self, Plan};
use crate::{status, Shared};
use bytes::Bytes;
use cairn_meta::{ObjectRecord, Precondition};
use cairn_objects::{ObjectAttrs, ObjectError, ObjectStore};
use futures::TryStreamExt;
use nfs3_server::nfs3_types::nfs3::{
    fattr3, filename3, nfspath3, nfsstat3, nfstime3, FSINFO3resok as fsinfo3, Nfs3Option,
    FSF3_CANSETTIME, FSF3_HOMOGENEOUS,
};
use nfs3_server::vfs::{FsSpace, NfsReadFileSystem, ReadDirPlusIterator};
use std::net::IpAddr;
use std::sync::Arc;

/// What one client connection is served.
#[derive(Clone, Debug)]
pub struct CairnFs {
    pub(crate) shared: Arc<Shared>,
    pub(crate) client: IpAddr,
}

pub(crate) type Res<T> = Result<T, nfsstat3>;

/// `.snapshot`, where the bucket's snapshots read, takes no change (nor may a
/// file or directory of that name be made at the export's root).
fn read_only_dir(key: &str) -> Res<()> {
    match cairn_objects::in_snapshot_dir(key) {
        true => Err(nfsstat3::NFS3ERR_ROFS),
        false => Ok(()),
    }
}

impl CairnFs {
    /// The export `h` is in, if this client may reach it.
    pub(crate) fn export(&self, h: &Handle) -> Res<Arc<Export>> {
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

    pub(crate) fn writable(&self, h: &Handle) -> Res<Arc<Export>> {
        let ex = self.export(h)?;
        let path = h.path().unwrap_or_else(|cut| cut);
        if ex.conf.read_only || cairn_objects::in_snapshot_dir(path) {
            return Err(nfsstat3::NFS3ERR_ROFS);
        }
        Ok(ex)
    }

    /// What `h` names; a handle whose path cannot be of its kind (a file
    /// ending in `/`, a directory not ending in one: a forged handle) is bad.
    pub(crate) async fn node(&self, ex: &Export, h: &Handle) -> Res<Node> {
        match self.shared.names.resolve(&self.shared.store, ex, h).await? {
            Node::File(k) if k.is_empty() || k.ends_with('/') => Err(nfsstat3::NFS3ERR_BADHANDLE),
            Node::Dir(p) if !p.is_empty() && !p.ends_with('/') => Err(nfsstat3::NFS3ERR_BADHANDLE),
            node => Ok(node),
        }
    }

    pub(crate) async fn dir_path(&self, ex: &Export, h: &Handle) -> Res<String> {
        match self.node(ex, h).await? {
            Node::Dir(p) => Ok(p),
            Node::File(_) => Err(nfsstat3::NFS3ERR_NOTDIR),
            Node::Top => Err(nfsstat3::NFS3ERR_ACCES),
        }
    }

    pub(crate) async fn file_key(&self, ex: &Export, h: &Handle) -> Res<String> {
        match self.node(ex, h).await? {
            Node::File(k) => Ok(k),
            Node::Dir(_) => Err(nfsstat3::NFS3ERR_ISDIR),
            Node::Top => Err(nfsstat3::NFS3ERR_ACCES),
        }
    }

    /// The current object at `key`, if any (made current first: what another
    /// node committed is seen); under `.snapshot/NAME/`, the snapshot's.
    pub(crate) async fn object(&self, ex: &Export, key: &str) -> Res<Option<ObjectRecord>> {
        match self
            .shared
            .store
            .head_view(ex.tenant, &ex.bucket, key)
            .await
        {
            Ok(r) => Ok(Some(r)),
            Err(ObjectError::Meta(cairn_meta::MetaError::NoSuchKey(_))) => Ok(None),
            Err(e) => Err(status(&e)),
        }
    }

    /// Whether directory `path` exists: the export's root, a marker object, or
    /// any key under it.
    pub(crate) async fn dir_exists(&self, ex: &Export, path: &str) -> Res<bool> {
        if path.is_empty() {
            return Ok(true);
        }
        let page = self
            .shared
            .store
            .list_view(ex.tenant, &ex.bucket, path, None, None, 1)
            .await
            .map_err(|e| status(&e))?;
        // (`.snapshot/` lists its snapshots as prefixes.)
        Ok(!page.objects.is_empty() || !page.prefixes.is_empty())
    }

    pub(crate) fn handle(&self, ex: &Export, node: &Node) -> Handle {
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

    pub(crate) async fn attrs_of(&self, ex: &Export, node: &Node) -> Res<fattr3> {
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

    /// Flushes `key`'s draft, if it has writes: what a read or a COMMIT
    /// must see. Only a COMMIT (`commit`) hears of a failure: the writes are
    /// its client's, so a failed flush on another call (a read) leaves the
    /// failure for that COMMIT and the call goes on with the object as it is.
    pub(crate) async fn flush(&self, ex: &Export, key: &str, commit: bool) -> Res<()> {
        if let Some(d) = self.shared.drafts.get(ex.id, key) {
            let mut d = d.lock().await;
            let flushed = self.flush_draft(ex, key, &mut d).await;
            if !commit {
                return Ok(());
            }
            if let Err(e) = flushed {
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

    pub(crate) async fn flush_draft(&self, ex: &Export, key: &str, d: &mut Draft) -> Res<()> {
        let held = d.held();
        let r = d.flush(&self.shared.store, ex, key).await;
        // Flushed or, failing, dropped: either way no longer held.
        self.shared.drafts.sub(held);
        r.map_err(|e| {
            tracing::warn!("NFS flush of {}/{key} failed: {e}", ex.path);
            crate::draft::lost(&e)
        })
    }

    /// The entry `name` of directory `dir`: a directory if any key is under
    /// it, else a file if the key exists.
    pub(crate) async fn entry(&self, ex: &Export, dir: &str, name: &str) -> Res<Node> {
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
    pub(crate) async fn make(
        &self,
        ex: &Export,
        key: &str,
        user_meta: std::collections::BTreeMap<String, String>,
    ) -> Res<ObjectRecord> {
        read_only_dir(key)?;
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

    pub(crate) async fn set_size(&self, ex: &Export, key: &str, size: u64) -> Res<()> {
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
    pub(crate) async fn delete(&self, ex: &Export, key: &str) -> Res<()> {
        read_only_dir(key)?;
        self.shared.drafts.retire(ex.id, key).await;
        self.shared.readahead.forget(ex.id, key);
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
    ///
    /// `from`'s draft is flushed and held until the move is done: a write
    /// to it meanwhile waits, then finds it gone (`STALE`), so no write is
    /// answered OK and left behind.
    pub(crate) async fn move_object(&self, ex: &Export, from: &str, to: &str) -> Res<()> {
        read_only_dir(from)?;
        read_only_dir(to)?;
        let draft = self.shared.drafts.get(ex.id, from);
        let mut held = match &draft {
            Some(d) => Some(d.lock().await),
            None => None,
        };
        if let Some(d) = held.as_deref_mut() {
            if d.gone {
                return Err(nfsstat3::NFS3ERR_NOENT);
            }
            self.flush_draft(ex, from, d).await?;
        }
        self.shared.drafts.retire(ex.id, to).await;
        self.shared.readahead.forget(ex.id, from);
        self.shared.readahead.forget(ex.id, to);
        self.move_flushed(ex, from, to).await?;
        if let Some(d) = held.as_deref_mut() {
            self.shared.drafts.take(ex.id, from);
            self.shared.drafts.retire_locked(d);
        }
        Ok(())
    }

    async fn move_flushed(&self, ex: &Export, from: &str, to: &str) -> Res<()> {
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
        self.flush(&ex, &key, false).await?;
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
        let eof = end >= rec.size;
        let rec = Arc::new(rec);
        let (store, tenant) = (&self.shared.store, ex.tenant);
        let plan = self
            .shared
            .readahead
            .plan(ex.id, &key, &rec, offset, end, |from, to| {
                readahead::start(fetch(store.clone(), tenant, rec.clone(), from, to))
            });
        let (parts, at) = match plan {
            Plan::Window { start, bytes } => match bytes.await {
                Ok(parts) => (parts, offset - start),
                // A window whose fetch failed (the datapath restarting, a
                // drive briefly gone) must not answer every READ after it with
                // its error: the file's windows are dropped, and this READ
                // asks the store itself.
                Err(_) => {
                    self.shared.readahead.forget(ex.id, &key);
                    (fetch(store.clone(), tenant, rec, offset, end).await?, 0)
                }
            },
            Plan::Direct => (fetch(store.clone(), tenant, rec, offset, end).await?, 0),
        };
        let len = (end - offset) as usize;
        let mut out = Vec::with_capacity(len);
        readahead::copy_range(&parts, at as usize, len, &mut out);
        Ok((out, eof))
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
        let mut it = DirIter::new(self.clone(), ex, dir);
        if cookie != 0 {
            it.seek(cookie)?;
        }
        Ok(it)
    }

    async fn readlink(&self, _id: &Handle) -> Res<nfspath3<'_>> {
        Err(nfsstat3::NFS3ERR_NOTSUPP)
    }

    /// The bucket's quota, less what it holds, when it has one (so `df` on a
    /// mount shows what the tenant may still write); else the protocol
    /// crate's fixed figures.
    async fn fsstat(&self, root: &Handle) -> Res<FsSpace> {
        const UNBOUNDED: FsSpace = FsSpace::UNBOUNDED;
        if root.kind() == Kind::Top {
            return Ok(UNBOUNDED);
        }
        let ex = self.export(root)?;
        let store = &self.shared.store;
        let quota = store
            .bucket(ex.tenant, &ex.bucket)
            .await
            .map_err(|e| status(&e))?
            .quota;
        let used = store
            .meta()
            .bucket_usage(&cairn_meta::bucket_id(ex.tenant, &ex.bucket))
            .map_err(|_| nfsstat3::NFS3ERR_IO)?;
        let (tbytes, tfiles) = (
            quota.max_bytes.unwrap_or(UNBOUNDED.tbytes.max(used.bytes)),
            quota
                .max_objects
                .unwrap_or(UNBOUNDED.tfiles.max(used.objects)),
        );
        Ok(FsSpace {
            tbytes,
            fbytes: tbytes.saturating_sub(used.bytes),
            tfiles,
            ffiles: tfiles.saturating_sub(used.objects),
        })
    }

    /// Upstream's, without FSF3_SYMLINK: symlinks are not supported here.
    async fn fsinfo(&self, root: &Handle) -> Res<fsinfo3> {
        let obj_attributes = match self.getattr(root).await {
            Ok(a) => Nfs3Option::Some(a),
            Err(_) => Nfs3Option::None,
        };
        Ok(fsinfo3 {
            obj_attributes,
            rtmax: crate::MAX_READ as u32,
            rtpref: crate::MAX_READ as u32,
            rtmult: crate::MAX_READ as u32,
            wtmax: 1 << 20,
            wtpref: 1 << 20,
            wtmult: 1 << 20,
            dtpref: 1 << 20,
            maxfilesize: crate::MAX_FILE_SIZE,
            time_delta: nfstime3 {
                seconds: 0,
                nseconds: 1_000_000,
            },
            properties: FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        })
    }
}

/// The bytes `[from, to)` of `rec`, as the store's pieces.
async fn fetch(
    store: Arc<ObjectStore>,
    tenant: u64,
    rec: Arc<ObjectRecord>,
    from: u64,
    to: u64,
) -> Res<Arc<Vec<Bytes>>> {
    store
        .read(tenant, &rec, from, to)
        .try_collect()
        .await
        .map(Arc::new)
        .map_err(|e| status(&e))
}
