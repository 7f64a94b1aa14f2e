//! What a file view of a bucket (NFS) needs beyond S3's whole-object writes: an
//! object rebuilt from the extents of the one it replaces plus new ones (a
//! write into part of a file, an append, a truncation), and a rename in one
//! step.

use crate::placement::Landing;
use crate::{ObjectError, ObjectStore, Written, MAX_PART_SIZE};
use bytes::Bytes;
use cairn_meta::{Extent, MetaError, Mutation, ObjectRecord, Precondition, WriteId};
use futures::Stream;
use md5::{Digest, Md5};

impl ObjectStore {
    /// Stores `body` (`len` bytes) as a new extent for `bucket`, referenced by
    /// nothing until [`ObjectStore::commit_rebuilt`] names it (the collector
    /// takes it otherwise).
    pub async fn write_piece<S, E>(
        &self,
        tenant: u64,
        bucket: &str,
        body: S,
        len: u64,
    ) -> Result<Written, ObjectError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: std::fmt::Display,
    {
        let (_, rec) = self.resolve(tenant, bucket).await?;
        self.write(
            tenant,
            body,
            Some(len),
            MAX_PART_SIZE,
            false,
            &Landing::of(&rec),
        )
        .await
    }

    /// Commits `key` as `extents`, in order, in place of `base`: only while
    /// `base` is still the key's current write (its extents may be among
    /// `extents`, and another write would have freed them), or, with no base,
    /// only while the key holds nothing. Everything but the bytes (type,
    /// metadata, tags) is `base`'s, with `user_meta` over it. `new` are the
    /// pieces written for it (see [`ObjectStore::write_piece`]).
    pub async fn commit_rebuilt(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        base: Option<&ObjectRecord>,
        extents: Vec<Extent>,
        new: &[Written],
    ) -> Result<ObjectRecord, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        let cond = match base {
            Some(b) => Precondition {
                if_write: Some(WriteId::of(b)),
                ..Default::default()
            },
            None => Precondition {
                if_none_match_any: true,
                ..Default::default()
            },
        };
        let record = ObjectRecord {
            size: extents.iter().map(|e| e.size).sum(),
            etag: rebuilt_etag(&extents),
            modified_ms: cairn_meta::now_ms(),
            extents,
            checksum: None,
            part_checksums: Vec::new(),
            version: Default::default(),
            // A new version: its lock is the bucket's default, not the old one's.
            lock: Default::default(),
            ..base.cloned().unwrap_or_else(ObjectRecord::empty)
        };
        let written_in = new.iter().map(|w| w.written_in).min();
        let fresh = new.iter().map(|w| w.extent.clone()).collect();
        self.commit(
            tenant,
            Mutation::PutObject {
                bucket: bucket.clone(),
                key: key.to_string(),
                record,
                cond,
                written_in,
            },
            fresh,
        )
        .await?
        .object
        .map(|o| *o)
        .ok_or_else(|| MetaError::Db("put returned no object".into()).into())
    }

    /// Moves `of`, the current object of `from`, to `to` in one step, bytes
    /// untouched; refused if `from` holds another write by then, and in a
    /// versioned bucket ([`MetaError::Versioned`]).
    pub async fn rename_object(
        &self,
        tenant: u64,
        bucket: &str,
        from: &str,
        to: &str,
        of: &ObjectRecord,
    ) -> Result<ObjectRecord, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        self.commit(
            tenant,
            Mutation::RenameObject {
                bucket: bucket.clone(),
                from: from.to_string(),
                to: to.to_string(),
                of: WriteId::of(of),
            },
            Vec::new(),
        )
        .await?
        .object
        .map(|o| *o)
        .ok_or_else(|| MetaError::Db("rename returned no object".into()).into())
    }
}

/// A rebuilt object's ETag: not an MD5 of its bytes (that would mean reading
/// all of them again), but as a multipart object's is, a digest of its pieces
/// and their count, so it changes whenever any piece does.
fn rebuilt_etag(extents: &[Extent]) -> String {
    let mut h = Md5::new();
    for e in extents {
        h.update(e.id.to_le_bytes());
    }
    format!("{}-{}", hex::encode(h.finalize()), extents.len().max(1))
}
