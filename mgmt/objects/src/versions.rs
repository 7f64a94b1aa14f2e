//! Object versions through the store: one version by id, the delete marker a
//! key reads as, a delete by version id, and the version listing (the records
//! and their rules are `cairn_meta::versions`').

use crate::{ObjectError, ObjectStore};
use cairn_meta::{
    Deleted, LockChange, Mutation, Precondition, Version, VersionListing, VersionStamp,
};

impl ObjectStore {
    /// Version `id` (`null` or a version id) of `bucket/key`, and whether it is
    /// the key's latest; `NoSuchVersion`-like `None` when there is none.
    pub async fn object_version(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> Result<Option<(Version, bool)>, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        Ok(self.meta.object_version(bucket, key, id)?)
    }

    /// The delete marker `bucket/key` reads as deleted by, if its latest
    /// version is one (S3 then answers 404 with `x-amz-delete-marker`).
    pub async fn latest_marker(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
    ) -> Result<Option<VersionStamp>, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        Ok(self.meta.latest_marker(bucket, key)?)
    }

    /// Deletes `bucket/key` if `cond` holds: its latest version (in a versioned
    /// bucket: a delete marker is made, the bytes kept), or with `version_id`
    /// that version for good (unless object lock keeps it; `bypass`: the
    /// requester lifts GOVERNANCE retention). Says what became of versions, in
    /// a versioned bucket.
    pub async fn delete_version(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        cond: Precondition,
        version_id: Option<String>,
        bypass: bool,
    ) -> Result<Option<Deleted>, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        let applied = self
            .commit(
                tenant,
                Mutation::DeleteObject {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    cond,
                    version_id,
                    modified_ms: cairn_meta::now_ms(),
                    bypass_governance: bypass,
                },
                Vec::new(),
            )
            .await?;
        Ok(applied.deleted)
    }

    /// Changes the retention or legal hold of version `version_id` of
    /// `bucket/key` (its current version when none); see `cairn_meta::lock`.
    #[allow(clippy::too_many_arguments)]
    pub async fn set_object_lock(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        version_id: Option<String>,
        change: LockChange,
        bypass: bool,
    ) -> Result<(), ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        let m = Mutation::SetObjectLock {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id,
            change,
            bypass_governance: bypass,
            now_ms: cairn_meta::now_ms(),
        };
        self.commit(tenant, m, Vec::new()).await?;
        Ok(())
    }

    /// One page of the versions of a bucket's keys.
    #[allow(clippy::too_many_arguments)]
    pub async fn list_object_versions(
        &self,
        tenant: u64,
        bucket: &str,
        prefix: &str,
        key_marker: Option<&str>,
        version_marker: Option<&str>,
        delimiter: Option<&str>,
        max: usize,
    ) -> Result<VersionListing, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        Ok(self
            .meta
            .list_versions(bucket, prefix, key_marker, version_marker, delimiter, max)?)
    }
}
