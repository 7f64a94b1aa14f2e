//! Bucket snapshots through the store: made and deleted through the log, read
//! and listed like the bucket (the records and their rules are
//! `cairn_meta::snapshots`').

use crate::{ObjectError, ObjectStore};
use cairn_meta::{After, Listing, Mutation, ObjectRecord, Snapshot};
use std::collections::BTreeMap;

/// The key prefix under which a bucket's snapshots read, in S3 and over NFS:
/// `.snapshot/NAME/KEY` is KEY as snapshot NAME sees it.
pub const SNAPSHOT_DIR: &str = ".snapshot/";

/// `.snapshot/NAME/KEY` as (NAME, KEY); `.snapshot/NAME` as (NAME, ""); none
/// for a key outside `.snapshot/`.
pub fn snapshot_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix(SNAPSHOT_DIR)?;
    Some(rest.split_once('/').unwrap_or((rest, "")))
}

impl ObjectStore {
    /// Makes snapshot `name` of the tenant's bucket: a read-only view of it
    /// as it is now, in one step.
    pub async fn create_snapshot(
        &self,
        tenant: u64,
        bucket: &str,
        name: &str,
    ) -> Result<Snapshot, ObjectError> {
        let (id, _) = self.resolve(tenant, bucket).await?;
        let m = Mutation::CreateSnapshot {
            bucket: id.clone(),
            name: name.to_string(),
            created_ms: cairn_meta::now_ms(),
        };
        self.commit(tenant, m, Vec::new()).await?;
        self.sync().await?;
        match self.meta.snapshots(&id)?.remove(name) {
            Some(s) => Ok(s),
            None => Err(cairn_meta::MetaError::NoSuchSnapshot(name.to_string()).into()),
        }
    }

    /// Deletes snapshot `name` of the tenant's bucket; what only it kept goes
    /// to the collector.
    pub async fn delete_snapshot(
        &self,
        tenant: u64,
        bucket: &str,
        name: &str,
    ) -> Result<(), ObjectError> {
        let (id, _) = self.resolve(tenant, bucket).await?;
        let m = Mutation::DeleteSnapshot {
            bucket: id,
            name: name.to_string(),
        };
        self.commit(tenant, m, Vec::new()).await?;
        Ok(())
    }

    /// The tenant's bucket's snapshots by name, and the versions kept for them
    /// (count, bytes).
    pub async fn snapshots(
        &self,
        tenant: u64,
        bucket: &str,
    ) -> Result<(BTreeMap<String, Snapshot>, (u64, u64)), ObjectError> {
        let (id, b) = self.resolve(tenant, bucket).await?;
        Ok((b.snapshots, self.meta.snapshot_kept(&id)?))
    }

    /// `key` as snapshot `name` of the tenant's bucket sees it: none if it had
    /// no object then.
    pub async fn snapshot_object(
        &self,
        tenant: u64,
        bucket: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<ObjectRecord>, ObjectError> {
        let (id, _) = self.resolve(tenant, bucket).await?;
        Ok(self.meta.snapshot_object(&id, name, key)?)
    }

    /// One page of snapshot `name` of the tenant's bucket, as [`ObjectStore::list`]
    /// pages the bucket.
    #[allow(clippy::too_many_arguments)]
    pub async fn list_snapshot(
        &self,
        tenant: u64,
        bucket: &str,
        name: &str,
        prefix: &str,
        after: Option<After>,
        delimiter: Option<&str>,
        max: usize,
    ) -> Result<Listing, ObjectError> {
        let (id, _) = self.resolve(tenant, bucket).await?;
        Ok(self
            .meta
            .snapshot_list(&id, name, prefix, after, delimiter, max)?)
    }
}
