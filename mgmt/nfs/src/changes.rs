//! What clients change: writes, creations, removals, renames, attributes.

use crate::attrs;
use crate::draft::{FLUSH_BYTES, TOTAL_BYTES};
use crate::fs::{CairnFs, Res};
use crate::handle::Handle;
use crate::names::{checked, Node};
use crate::status;
use bytes::Bytes;
use nfs3_server::nfs3_types::nfs3::{
    createverf3, fattr3, filename3, nfspath3, nfsstat3, sattr3, stable_how, Nfs3Option,
};
use nfs3_server::vfs::NfsFileSystem;

impl NfsFileSystem for CairnFs {
    async fn setattr(&self, id: &Handle, set: sattr3) -> Res<fattr3> {
        let ex = self.writable(id)?;
        let node = self.node(&ex, id).await?;
        let key = match &node {
            Node::File(k) => {
                if let Nfs3Option::Some(size) = set.size {
                    self.set_size(&ex, k, size).await?;
                }
                self.flush(&ex, k, false).await?;
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
        let d = match self.shared.drafts.get(ex.id, &key) {
            Some(d) => d,
            None => {
                let base = self.object(&ex, &key).await?;
                let base = base.ok_or(nfsstat3::NFS3ERR_STALE)?;
                self.shared.drafts.get_or(ex.id, &key, || Some(base))
            }
        };
        let mut d = d.lock().await;
        if d.gone {
            // Removed or renamed away while this write waited.
            return Err(nfsstat3::NFS3ERR_STALE);
        }
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
            d.unstable = true;
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
        }
        if let Nfs3Option::Some(size) = attr.size {
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
        self.flush(&ex, &key, true).await
    }
}
