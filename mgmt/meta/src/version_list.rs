//! Reading versions: one version by id, the delete marker a key reads as, and
//! S3's ListObjectVersions (every version of every key, keys in byte order and
//! each key's versions newest first, with prefix, delimiter and the key /
//! version-id markers).

use crate::records::{ObjectRecord, VersionStamp};
use crate::versions::{of_key, Version, VERSIONS};
use crate::{MetaError, MetaStore, BUCKETS, OBJECTS};
use redb::ReadableTable;

/// One version in a listing.
#[derive(Clone, Debug)]
pub struct VersionEntry {
    pub key: String,
    pub version: Version,
    /// The key's latest version (its current object, or the delete marker it
    /// reads as deleted by).
    pub latest: bool,
}

/// One page of a version listing.
#[derive(Clone, Debug, Default)]
pub struct VersionListing {
    pub entries: Vec<VersionEntry>,
    /// Common prefixes (keys rolled up at the delimiter), in order.
    pub prefixes: Vec<String>,
    /// Where the next page starts (key marker, version-id marker), when this page
    /// is not the last.
    pub next: Option<(String, Option<String>)>,
}

/// Every version of a key, newest first, the latest marked.
pub(crate) fn versions_of<O, V>(
    objects: &O,
    versions: &V,
    bucket: &str,
    key: &str,
) -> Result<Vec<(Version, bool)>, MetaError>
where
    O: ReadableTable<(&'static str, &'static str), &'static [u8]>,
    V: ReadableTable<(&'static str, &'static str, u64), &'static [u8]>,
{
    let mut out = Vec::new();
    if let Some(v) = objects.get((bucket, key))? {
        let cur: ObjectRecord = serde_json::from_slice(v.value())?;
        out.push((Version::Object(Box::new(cur)), true));
    }
    let first = out.is_empty();
    for (i, (_, v)) in of_key(versions, bucket, key)?.into_iter().enumerate() {
        out.push((v, first && i == 0));
    }
    Ok(out)
}

/// Where each of a key's versions (newest first, as [`versions_of`] gives them)
/// stands for the lifecycle's noncurrent rules: none for the latest, else when
/// it stopped being current (the next newer version's time) and how many
/// noncurrent object versions are newer than it.
pub fn noncurrent_ages(versions: &[Version]) -> Vec<Option<(i64, usize)>> {
    let mut newer = 0;
    let mut out = Vec::with_capacity(versions.len());
    for (i, v) in versions.iter().enumerate() {
        if i == 0 {
            out.push(None);
            continue;
        }
        out.push(Some((versions[i - 1].modified_ms(), newer)));
        newer += v.object().is_some() as usize;
    }
    out
}

/// The first key of `bucket` at or after `from` in either table.
fn next_key<O, V>(
    objects: &O,
    versions: &V,
    bucket: &str,
    from: &str,
) -> Result<Option<String>, MetaError>
where
    O: ReadableTable<(&'static str, &'static str), &'static [u8]>,
    V: ReadableTable<(&'static str, &'static str, u64), &'static [u8]>,
{
    let a = match objects.range((bucket, from)..)?.next() {
        Some(e) => {
            let (k, _) = e?;
            let (b, key) = k.value();
            (b == bucket).then(|| key.to_string())
        }
        None => None,
    };
    let b = match versions.range((bucket, from, 0)..)?.next() {
        Some(e) => {
            let (k, _) = e?;
            let (b, key, _) = k.value();
            (b == bucket).then(|| key.to_string())
        }
        None => None,
    };
    Ok(match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// The smallest string after every string that starts with `p`.
fn past_prefix(p: &str) -> String {
    let mut s = p.to_string();
    s.push(char::MAX);
    s
}

impl MetaStore {
    /// Version `id` (`null` or one of ours) of `key`, and whether it is the latest.
    pub fn object_version(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> Result<Option<(Version, bool)>, MetaError> {
        let tx = self.db.begin_read()?;
        let (o, v) = (tx.open_table(OBJECTS)?, tx.open_table(VERSIONS)?);
        Ok(versions_of(&o, &v, bucket, key)?
            .into_iter()
            .find(|(v, _)| v.stamp().shown() == id))
    }

    /// Every version of `key`, newest first.
    pub fn versions_of_key(&self, bucket: &str, key: &str) -> Result<Vec<Version>, MetaError> {
        let tx = self.db.begin_read()?;
        let (o, v) = (tx.open_table(OBJECTS)?, tx.open_table(VERSIONS)?);
        Ok(versions_of(&o, &v, bucket, key)?
            .into_iter()
            .map(|(v, _)| v)
            .collect())
    }

    /// The delete marker `key` reads as deleted by, if its latest version is one.
    pub fn latest_marker(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<VersionStamp>, MetaError> {
        let tx = self.db.begin_read()?;
        if tx.open_table(OBJECTS)?.get((bucket, key))?.is_some() {
            return Ok(None);
        }
        let v = tx.open_table(VERSIONS)?;
        Ok(match of_key(&v, bucket, key)?.into_iter().next() {
            Some((_, Version::DeleteMarker { version, .. })) => Some(version),
            _ => None,
        })
    }

    /// Lists the versions of a bucket's keys: see [`VersionListing`]. A listing
    /// resumes after (`key_marker`, `version_marker`): with no version marker,
    /// after every version of that key (or, when it is a common prefix of this
    /// delimiter, after every key it rolls up).
    pub fn list_versions(
        &self,
        bucket: &str,
        prefix: &str,
        key_marker: Option<&str>,
        version_marker: Option<&str>,
        delimiter: Option<&str>,
        max: usize,
    ) -> Result<VersionListing, MetaError> {
        let tx = self.db.begin_read()?;
        if tx.open_table(BUCKETS)?.get(bucket)?.is_none() {
            return Err(MetaError::NoSuchBucket(bucket.to_string()));
        }
        let (objects, versions) = (tx.open_table(OBJECTS)?, tx.open_table(VERSIONS)?);
        let delimiter = delimiter.filter(|d| !d.is_empty());
        let mut out = VersionListing::default();
        let key_marker = key_marker.filter(|k| !k.is_empty());
        let mut from = match key_marker {
            Some(k) if delimiter.is_some_and(|d| k.ends_with(d)) && version_marker.is_none() => {
                past_prefix(k)
            }
            Some(k) if version_marker.is_some() => k.to_string(),
            Some(k) => format!("{k}\0"),
            None => prefix.to_string(),
        };
        if from.as_str() < prefix {
            from = prefix.to_string();
        }
        let mut count = 0usize;
        while let Some(key) = next_key(&objects, &versions, bucket, &from)? {
            if !key.starts_with(prefix) {
                break;
            }
            if let Some(d) = delimiter {
                if let Some(pos) = key[prefix.len()..].find(d) {
                    let common = key[..prefix.len() + pos + d.len()].to_string();
                    if count == max {
                        out.next = out_marker(&out);
                        break;
                    }
                    from = past_prefix(&common);
                    out.prefixes.push(common);
                    count += 1;
                    continue;
                }
            }
            let mut all = versions_of(&objects, &versions, bucket, &key)?;
            if let (Some(km), Some(vm)) = (key_marker, version_marker) {
                if km == key {
                    match all.iter().position(|(v, _)| v.stamp().shown() == vm) {
                        Some(i) => drop(all.drain(..=i)),
                        None => all.clear(),
                    }
                }
            }
            for (version, latest) in all {
                if count == max {
                    out.next = out_marker(&out);
                    return Ok(out);
                }
                out.entries.push(VersionEntry {
                    key: key.clone(),
                    version,
                    latest,
                });
                count += 1;
            }
            from = format!("{key}\0");
        }
        Ok(out)
    }
}

/// Where a full page ends: after its last entry or common prefix, whichever is
/// later in key order.
fn out_marker(out: &VersionListing) -> Option<(String, Option<String>)> {
    let e = out
        .entries
        .last()
        .map(|e| (e.key.clone(), Some(e.version.stamp().shown().to_string())));
    let p = out.prefixes.last().map(|p| (p.clone(), None));
    match (e, p) {
        (Some(e), Some(p)) => Some(if p.0 > e.0 { p } else { e }),
        (e, p) => e.or(p),
    }
}

/// Where a walk over every manifest stands: in the current objects, past them
/// in the noncurrent versions, or past those in the versions kept for
/// snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestCursor {
    Current(String, String),
    Noncurrent(String, String, u64),
    Kept(String, String, u64),
}

impl MetaStore {
    /// Up to `limit` manifests after `after`: every current object in (bucket,
    /// key) order, then every noncurrent version, then every version kept for
    /// a snapshot (a walk over all the bytes
    /// stored, the scrubber's, that holds one page at a time). Returns the page
    /// and where the next one starts (none when the walk is done).
    #[allow(clippy::type_complexity)]
    pub fn manifests_after(
        &self,
        after: Option<&ManifestCursor>,
        limit: usize,
    ) -> Result<(Vec<(String, String, ObjectRecord)>, Option<ManifestCursor>), MetaError> {
        let mut out = Vec::new();
        let mut cursor = after.cloned();
        if matches!(cursor, Some(ManifestCursor::Kept(..))) {
            return self.kept_after(out, cursor, limit);
        }
        if !matches!(cursor, Some(ManifestCursor::Noncurrent(..))) {
            let at = match &cursor {
                Some(ManifestCursor::Current(b, k)) => Some((b.as_str(), k.as_str())),
                _ => None,
            };
            out = self.objects_after(at, limit)?;
            if let Some((b, k, _)) = out.last() {
                cursor = Some(ManifestCursor::Current(b.clone(), k.clone()));
            }
            if out.len() >= limit {
                return Ok((out, cursor));
            }
            cursor = None;
        }
        let tx = self.db.begin_read()?;
        let t = tx.open_table(VERSIONS)?;
        let iter = match &cursor {
            Some(ManifestCursor::Noncurrent(b, k, n)) => t.range((b.as_str(), k.as_str(), *n)..)?,
            _ => t.range::<(&str, &str, u64)>(..)?,
        };
        for e in iter {
            let (key, v) = e?;
            let (b, k, n) = key.value();
            if let Some(ManifestCursor::Noncurrent(cb, ck, cn)) = &cursor {
                if (cb.as_str(), ck.as_str(), *cn) == (b, k, n) {
                    continue;
                }
            }
            if let Version::Object(o) = serde_json::from_slice(v.value())? {
                out.push((b.to_string(), k.to_string(), *o));
            }
            if out.len() >= limit {
                let next = ManifestCursor::Noncurrent(b.to_string(), k.to_string(), n);
                return Ok((out, Some(next)));
            }
        }
        self.kept_after(out, None, limit)
    }

    /// The versions kept for snapshots after `cursor` (a [`ManifestCursor::Kept`]
    /// or none: from the first), added to `out` up to `limit`.
    #[allow(clippy::type_complexity)]
    fn kept_after(
        &self,
        mut out: Vec<(String, String, ObjectRecord)>,
        cursor: Option<ManifestCursor>,
        limit: usize,
    ) -> Result<(Vec<(String, String, ObjectRecord)>, Option<ManifestCursor>), MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(crate::snapshots::KEPT)?;
        let iter = match &cursor {
            Some(ManifestCursor::Kept(b, k, n)) => t.range((b.as_str(), k.as_str(), *n)..)?,
            _ => t.range::<(&str, &str, u64)>(..)?,
        };
        for e in iter {
            let (key, v) = e?;
            let (b, k, n) = key.value();
            if let Some(ManifestCursor::Kept(cb, ck, cn)) = &cursor {
                if (cb.as_str(), ck.as_str(), *cn) == (b, k, n) {
                    continue;
                }
            }
            let kept: crate::snapshots::Kept = serde_json::from_slice(v.value())?;
            if let Version::Object(o) = kept.version {
                out.push((b.to_string(), k.to_string(), *o));
            }
            if out.len() >= limit {
                let next = ManifestCursor::Kept(b.to_string(), k.to_string(), n);
                return Ok((out, Some(next)));
            }
        }
        Ok((out, None))
    }

    /// Noncurrent object versions in the whole store (delete markers, which
    /// hold no bytes, not counted).
    pub fn version_count(&self) -> Result<u64, MetaError> {
        let tx = self.db.begin_read()?;
        let mut n = 0;
        for e in tx.open_table(VERSIONS)?.iter()? {
            // Externally tagged: a marker's record starts with its tag.
            n += !e?.1.value().starts_with(b"{\"delete_marker\"") as u64;
        }
        Ok(n)
    }

    /// The manifest of `key`, current, noncurrent or kept for a snapshot, that
    /// holds extent `extent`, if any still does.
    pub fn manifest_holding(
        &self,
        bucket: &str,
        key: &str,
        extent: u128,
    ) -> Result<Option<ObjectRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let (o, v) = (tx.open_table(OBJECTS)?, tx.open_table(VERSIONS)?);
        let kept = tx.open_table(crate::snapshots::KEPT)?;
        // The key's versions, then the versions kept for its snapshots.
        let mut all: Vec<Version> = versions_of(&o, &v, bucket, key)?
            .into_iter()
            .map(|(v, _)| v)
            .collect();
        for e in kept.range((bucket, key, 0)..=(bucket, key, u64::MAX))? {
            let (_, k) = e?;
            all.push(serde_json::from_slice::<crate::snapshots::Kept>(k.value())?.version);
        }
        Ok(all
            .into_iter()
            .filter_map(|v| match v {
                Version::Object(o) => Some(*o),
                Version::DeleteMarker { .. } => None,
            })
            .find(|o| o.extents.iter().any(|e| e.id == extent)))
    }
}
