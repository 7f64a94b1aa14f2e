//! Bucket snapshots through the store: made and deleted through the log, read
//! and listed like the bucket (the records and their rules are
//! `cairn_meta::snapshots`').

use crate::{ObjectError, ObjectStore};
use cairn_meta::{After, Listing, MetaError, Mutation, ObjectRecord, Snapshot};
use std::collections::BTreeMap;

/// The key prefix under which a bucket's snapshots read, in S3 and over NFS:
/// `.snapshot/NAME/KEY` is KEY as snapshot NAME sees it.
pub const SNAPSHOT_DIR: &str = ".snapshot/";

/// Whether `key` is in the reserved `.snapshot` directory (or is it): no
/// write lands there.
pub fn in_snapshot_dir(key: &str) -> bool {
    key.starts_with(SNAPSHOT_DIR) || key == ".snapshot"
}

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

/// The views: a key or listing of the bucket, or of its snapshots under
/// `.snapshot/` (what S3 and NFS read alike).
impl ObjectStore {
    /// The object `key` names: the bucket's current one, or under
    /// `.snapshot/NAME/` the one snapshot NAME saw (NoSuchKey if none).
    pub async fn head_view(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
    ) -> Result<ObjectRecord, ObjectError> {
        let Some((name, inner)) = snapshot_key(key) else {
            return self.head_object(tenant, bucket, key).await;
        };
        let found = match inner {
            "" => None,
            _ => match self.snapshot_object(tenant, bucket, name, inner).await {
                Err(ObjectError::Meta(MetaError::NoSuchSnapshot(_))) => None,
                r => r?,
            },
        };
        found.ok_or_else(|| MetaError::NoSuchKey(key.to_string()).into())
    }

    /// A page of the bucket, or, for a prefix under `.snapshot/`, of its
    /// snapshots: `.snapshot/` (and any prefix there short of a name's `/`)
    /// lists their names as common prefixes; `.snapshot/NAME/...` lists
    /// snapshot NAME as the bucket's own listing would, its keys under
    /// `.snapshot/NAME/`. The bucket's own listing never shows `.snapshot/`
    /// (as a NAS hides its snapshot directory, so that copying the bucket does
    /// not copy its snapshots).
    #[allow(clippy::too_many_arguments)]
    pub async fn list_view(
        &self,
        tenant: u64,
        bucket: &str,
        prefix: &str,
        after: Option<After>,
        delimiter: Option<&str>,
        max: usize,
    ) -> Result<Listing, ObjectError> {
        let Some(rest) = prefix.strip_prefix(SNAPSHOT_DIR) else {
            return self
                .list_objects(tenant, bucket, prefix, after, delimiter, max)
                .await;
        };
        let Some((name, inner)) = rest.split_once('/') else {
            // The snapshots' names, each a common prefix (from the bucket
            // record alone: what they keep is not needed here).
            let (_, b) = self.resolve(tenant, bucket).await?;
            let mut out = Listing::default();
            let names = b.snapshots.keys().map(|n| format!("{SNAPSHOT_DIR}{n}/"));
            for p in names.filter(|p| p.starts_with(prefix)) {
                let past = match &after {
                    Some(After::Key(a) | After::Prefix(a)) => p.as_str() > a.as_str(),
                    None => true,
                };
                if !past {
                    continue;
                }
                if out.prefixes.len() == max {
                    out.next = out.prefixes.last().cloned().map(After::Prefix);
                    break;
                }
                out.prefixes.push(p);
            }
            return Ok(out);
        };
        let dir = format!("{SNAPSHOT_DIR}{name}/");
        // A marker past the whole snapshot: nothing left to list.
        if let Some(After::Key(a) | After::Prefix(a)) = &after {
            if a.as_str() > dir.as_str() && !a.starts_with(&dir) {
                return Ok(Listing::default());
            }
        }
        let inside = |a: After| match a {
            After::Key(k) => k.strip_prefix(&dir).map(|k| After::Key(k.to_string())),
            After::Prefix(p) => p.strip_prefix(&dir).map(|p| After::Prefix(p.to_string())),
        };
        let after = after.and_then(inside);
        let listing = self
            .list_snapshot(tenant, bucket, name, inner, after, delimiter, max)
            .await;
        let mut l = match listing {
            Ok(l) => l,
            // A snapshot that does not exist lists as an empty prefix does.
            Err(ObjectError::Meta(MetaError::NoSuchSnapshot(_))) => Listing::default(),
            Err(e) => return Err(e),
        };
        for (k, _) in &mut l.objects {
            k.insert_str(0, &dir);
        }
        for p in &mut l.prefixes {
            p.insert_str(0, &dir);
        }
        l.next = l.next.map(|a| match a {
            After::Key(k) => After::Key(format!("{dir}{k}")),
            After::Prefix(p) => After::Prefix(format!("{dir}{p}")),
        });
        Ok(l)
    }
}
