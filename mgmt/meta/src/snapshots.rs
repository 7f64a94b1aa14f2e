//! Bucket snapshots: named, read-only views of a bucket as it was at one moment,
//! made in one step whatever the bucket holds.
//!
//! A snapshot is a number from the version sequence (see [`crate::versions`]),
//! given out when it is made. While a bucket has snapshots every write and
//! delete in it is numbered from the same sequence, versioned or not, so a
//! snapshot numbered `s` sees, for each key, the newest version numbered at or
//! below `s` — the current object, a noncurrent version, or a version kept here —
//! unless that version is a delete marker, or a kept version its key lost at or
//! below `s` (an unversioned delete leaves no marker; the kept version's end
//! tells instead).
//!
//! What a change would destroy — an unversioned object overwritten or deleted,
//! the `null` version replaced, a version deleted by id, an NFS rename's source —
//! is kept here instead when a snapshot sees it, under (bucket, key, the number
//! of the change that ended it). Kept versions belong to snapshots, not to the
//! bucket: they count in no usage and show in no listing but a snapshot's.
//! Their extents are indexed in `snapshot_held`, and no change frees an extent
//! a kept version holds (an NFS rename or a rewrite of part of a file shares
//! extents between a kept version and a live object). Repair moves their
//! fragments like any object's.
//!
//! Deleting a snapshot drops the kept versions no other snapshot sees; the
//! collector then frees the chunks no manifest references any more.

use crate::list::{After, Listing, Pager, Step};
use crate::records::{BucketRecord, Extent, ObjectRecord, Snapshot};
use crate::versions::{of_key, Version, VERSIONS};
use crate::{Applied, FragmentMove, MetaError, MetaStore, BUCKETS, OBJECTS};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};

/// (bucket, key, the number of the change that ended it) -> [`Kept`]
pub(crate) const KEPT: TableDefinition<(&str, &str, u64), &[u8]> =
    TableDefinition::new("snapshot_kept");
/// extent id -> the kept versions that hold it, as `(bucket, key, ended)`
pub(crate) const HELD: TableDefinition<u128, &[u8]> = TableDefinition::new("snapshot_held");

/// The most snapshots a bucket may have: every write in it checks them all.
pub const MAX_SNAPSHOTS: usize = 256;

/// A version a change took from its key while a snapshot still sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Kept {
    /// The number of the change that ended it.
    pub ended: u64,
    pub version: Version,
}

type HeldBy = Vec<(String, String, u64)>;

/// A snapshot name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot or a dash
/// (it is a path component under `.snapshot/`, in S3 and over NFS, and a
/// command-line argument).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether one of the snapshots numbered `snaps` sees a version made at `made`
/// and ended at `ended`, its key's other versions made at `others`: one
/// numbered between the two, no other version of the key newer than it there.
fn seen(snaps: &[u64], made: u64, ended: u64, others: &[u64]) -> bool {
    snaps
        .iter()
        .any(|&s| made <= s && s < ended && !others.iter().any(|&o| made < o && o <= s))
}

/// The numbers of the versions of `key` kept for snapshots.
fn kept_seqs(
    kept: &redb::Table<(&str, &str, u64), &[u8]>,
    (bucket, key): (&str, &str),
) -> Result<Vec<u64>, MetaError> {
    let mut out = Vec::new();
    for e in kept.range((bucket, key, 0)..=(bucket, key, u64::MAX))? {
        let (_, v) = e?;
        out.push(
            serde_json::from_slice::<Kept>(v.value())?
                .version
                .stamp()
                .seq,
        );
    }
    Ok(out)
}

/// Keeps version `v`, which the change numbered `ended` takes from `key`, if one
/// of the snapshots numbered `snaps` sees it; `others` are the numbers of the
/// key's live versions left.
pub(crate) fn keep_if_seen(
    tx: &redb::WriteTransaction,
    snaps: &[u64],
    (bucket, key): (&str, &str),
    ended: u64,
    v: Version,
    others: &[u64],
) -> Result<(), MetaError> {
    let made = v.stamp().seq;
    // Kept versions can only hide it further: looked at only when the live
    // ones leave it seen (a version made after every snapshot never is).
    if !seen(snaps, made, ended, others) {
        return Ok(());
    }
    let mut kept = tx.open_table(KEPT)?;
    let mut others = others.to_vec();
    others.extend(kept_seqs(&kept, (bucket, key))?);
    if !seen(snaps, made, ended, &others) {
        return Ok(());
    }
    if let Version::Object(o) = &v {
        let mut held = tx.open_table(HELD)?;
        for e in &o.extents {
            let mut by: HeldBy = match held.get(e.id)? {
                Some(b) => serde_json::from_slice(b.value())?,
                None => Vec::new(),
            };
            by.push((bucket.to_string(), key.to_string(), ended));
            held.insert(e.id, serde_json::to_vec(&by)?.as_slice())?;
        }
    }
    let value = Kept { ended, version: v };
    kept.insert((bucket, key, ended), serde_json::to_vec(&value)?.as_slice())?;
    Ok(())
}

/// Takes out of `freed` every extent a kept version holds.
pub(crate) fn spare_held(
    tx: &redb::WriteTransaction,
    freed: &mut Vec<Extent>,
) -> Result<(), MetaError> {
    if freed.is_empty() {
        return Ok(());
    }
    let held = tx.open_table(HELD)?;
    if held.is_empty()? {
        return Ok(());
    }
    let mut keep = Vec::with_capacity(freed.len());
    for e in freed.drain(..) {
        if held.get(e.id)?.is_none() {
            keep.push(e);
        }
    }
    *freed = keep;
    Ok(())
}

fn read_bucket(
    buckets: &redb::Table<&str, &[u8]>,
    bucket: &str,
) -> Result<BucketRecord, MetaError> {
    match buckets.get(bucket)? {
        Some(v) => Ok(serde_json::from_slice(v.value())?),
        None => Err(MetaError::NoSuchBucket(bucket.to_string())),
    }
}

/// Makes snapshot `name` of `bucket`, numbered from the version sequence.
pub(crate) fn create(
    tx: &redb::WriteTransaction,
    buckets: &mut redb::Table<&str, &[u8]>,
    bucket: &str,
    name: &str,
    created_ms: i64,
) -> Result<Applied, MetaError> {
    let mut b = read_bucket(buckets, bucket)?;
    if !valid_name(name) {
        return Err(MetaError::InvalidSnapshot(format!(
            "{name:?} is not a snapshot name: 1 to 64 of A-Z a-z 0-9 . _ -, not starting with a dot or a dash"
        )));
    }
    if b.kv.is_some() {
        return Err(MetaError::InvalidSnapshot(
            "a KV pool's keyspace is a cache: it has no snapshots".into(),
        ));
    }
    if b.snapshots.contains_key(name) {
        return Err(MetaError::SnapshotExists(name.to_string()));
    }
    if b.snapshots.len() >= MAX_SNAPSHOTS {
        return Err(MetaError::InvalidSnapshot(format!(
            "the bucket has {MAX_SNAPSHOTS} snapshots, the most it may have: delete one first"
        )));
    }
    let seq = crate::versions::next_seq(tx)?;
    b.snapshots
        .insert(name.to_string(), Snapshot { seq, created_ms });
    buckets.insert(bucket, serde_json::to_vec(&b)?.as_slice())?;
    Ok(Applied::default())
}

/// Deletes snapshot `name` of `bucket` and the kept versions no other snapshot
/// sees (the collector frees their chunks).
pub(crate) fn delete(
    tx: &redb::WriteTransaction,
    buckets: &mut redb::Table<&str, &[u8]>,
    objects: &redb::Table<(&str, &str), &[u8]>,
    bucket: &str,
    name: &str,
) -> Result<Applied, MetaError> {
    let mut b = read_bucket(buckets, bucket)?;
    if b.snapshots.remove(name).is_none() {
        return Err(MetaError::NoSuchSnapshot(name.to_string()));
    }
    buckets.insert(bucket, serde_json::to_vec(&b)?.as_slice())?;
    let left: Vec<u64> = b.snapshots.values().map(|s| s.seq).collect();
    drop_unseen(tx, Some(objects), bucket, &left)?;
    Ok(Applied::default())
}

/// Drops the kept versions of `bucket` none of the snapshots numbered `left`
/// sees (with no `objects` given, `left` must be empty: every one goes).
pub(crate) fn drop_unseen(
    tx: &redb::WriteTransaction,
    objects: Option<&redb::Table<(&str, &str), &[u8]>>,
    bucket: &str,
    left: &[u64],
) -> Result<(), MetaError> {
    let mut kept = tx.open_table(KEPT)?;
    let mut gone = Vec::new();
    {
        let versions = tx.open_table(VERSIONS)?;
        // Each key's versions' numbers, live and kept, read once per key.
        let mut others: Option<(String, Vec<u64>)> = None;
        for e in kept.range((bucket, "", 0)..)? {
            let (k, v) = e?;
            let (b, key, ended) = k.value();
            if b != bucket {
                break;
            }
            let kv: Kept = serde_json::from_slice(v.value())?;
            let made = kv.version.stamp().seq;
            let keep = match objects {
                Some(objects) if !left.is_empty() => {
                    if others.as_ref().is_none_or(|(k, _)| k != key) {
                        let mut seqs = kept_seqs(&kept, (bucket, key))?;
                        if let Some(c) = objects.get((bucket, key))? {
                            let c: ObjectRecord = serde_json::from_slice(c.value())?;
                            seqs.push(c.version.seq);
                        }
                        seqs.extend(
                            of_key(&versions, bucket, key)?
                                .iter()
                                .map(|(_, v)| v.stamp().seq),
                        );
                        others = Some((key.to_string(), seqs));
                    }
                    let seqs = others.as_ref().map_or(&[][..], |(_, s)| s.as_slice());
                    seen(left, made, ended, seqs)
                }
                _ => false,
            };
            if !keep {
                gone.push((key.to_string(), ended, kv.version));
            }
        }
    }
    let mut held = tx.open_table(HELD)?;
    for (key, ended, v) in gone {
        kept.remove((bucket, key.as_str(), ended))?;
        for e in v.object().map(|o| o.extents.as_slice()).unwrap_or(&[]) {
            let by: HeldBy = match held.get(e.id)? {
                Some(b) => serde_json::from_slice(b.value())?,
                None => continue,
            };
            let by: HeldBy = by
                .into_iter()
                .filter(|(b, k, n)| !(b == bucket && *k == key && *n == ended))
                .collect();
            if by.is_empty() {
                held.remove(e.id)?;
            } else {
                held.insert(e.id, serde_json::to_vec(&by)?.as_slice())?;
            }
        }
    }
    Ok(())
}

/// Applies a repair's fragment moves of extent `extent` to every kept version
/// that holds it; returns whether any did.
pub(crate) fn move_fragments(
    tx: &redb::WriteTransaction,
    extent: u128,
    moves: &[FragmentMove],
) -> Result<bool, MetaError> {
    let by: HeldBy = match tx.open_table(HELD)?.get(extent)? {
        Some(b) => serde_json::from_slice(b.value())?,
        None => return Ok(false),
    };
    let mut kept = tx.open_table(KEPT)?;
    let mut any = false;
    for (bucket, key, ended) in by {
        let slot = (bucket.as_str(), key.as_str(), ended);
        let Some(v) = kept.get(slot)? else { continue };
        let mut kv: Kept = serde_json::from_slice(v.value())?;
        drop(v);
        let Version::Object(o) = &mut kv.version else {
            continue;
        };
        let Some(ext) = o.extents.iter_mut().find(|e| e.id == extent) else {
            continue;
        };
        // A kept version that shares the extent with a live object may already
        // have had these moves (both were found by the repair scanner).
        if crate::move_in_extent(ext, moves).is_ok() {
            kept.insert(slot, serde_json::to_vec(&kv)?.as_slice())?;
            any = true;
        }
    }
    Ok(any)
}

/// The read side: which version a key shows in a snapshot.
fn at<O, V, K>(
    (objects, versions, kept): (&O, &V, &K),
    bucket: &str,
    key: &str,
    seq: u64,
) -> Result<Option<ObjectRecord>, MetaError>
where
    O: ReadableTable<(&'static str, &'static str), &'static [u8]>,
    V: ReadableTable<(&'static str, &'static str, u64), &'static [u8]>,
    K: ReadableTable<(&'static str, &'static str, u64), &'static [u8]>,
{
    // (made, version, ended at or before the snapshot)
    let mut best: Option<(u64, Version, bool)> = None;
    let mut offer = |v: Version, gone: bool| {
        let made = v.stamp().seq;
        if made <= seq && best.as_ref().is_none_or(|(m, _, _)| made > *m) {
            best = Some((made, v, gone));
        }
    };
    if let Some(v) = objects.get((bucket, key))? {
        let cur: ObjectRecord = serde_json::from_slice(v.value())?;
        offer(Version::Object(Box::new(cur)), false);
    }
    for (_, v) in of_key(versions, bucket, key)? {
        offer(v, false);
    }
    for e in kept.range((bucket, key, 0)..=(bucket, key, u64::MAX))? {
        let (_, v) = e?;
        let kv: Kept = serde_json::from_slice(v.value())?;
        offer(kv.version, kv.ended <= seq);
    }
    Ok(match best {
        Some((_, Version::Object(o), false)) => Some(*o),
        _ => None,
    })
}

/// The first key at or after `start` that any version of `bucket` has.
fn next_key<O, V, K>(
    (objects, versions, kept): (&O, &V, &K),
    bucket: &str,
    start: &str,
) -> Result<Option<String>, MetaError>
where
    O: ReadableTable<(&'static str, &'static str), &'static [u8]>,
    V: ReadableTable<(&'static str, &'static str, u64), &'static [u8]>,
    K: ReadableTable<(&'static str, &'static str, u64), &'static [u8]>,
{
    let mut best: Option<String> = None;
    let mut offer = |b: &str, k: &str| {
        if b == bucket && best.as_deref().is_none_or(|x| k < x) {
            best = Some(k.to_string());
        }
    };
    if let Some(e) = objects.range((bucket, start)..)?.next() {
        let (k, _) = e?;
        let (b, key) = k.value();
        offer(b, key);
    }
    if let Some(e) = versions.range((bucket, start, 0)..)?.next() {
        let (k, _) = e?;
        let (b, key, _) = k.value();
        offer(b, key);
    }
    if let Some(e) = kept.range((bucket, start, 0)..)?.next() {
        let (k, _) = e?;
        let (b, key, _) = k.value();
        offer(b, key);
    }
    Ok(best)
}

/// The number of snapshot `name` of `bucket`.
fn snapshot_seq(tx: &redb::ReadTransaction, bucket: &str, name: &str) -> Result<u64, MetaError> {
    let b: BucketRecord = match tx.open_table(BUCKETS)?.get(bucket)? {
        Some(v) => serde_json::from_slice(v.value())?,
        None => return Err(MetaError::NoSuchBucket(bucket.to_string())),
    };
    match b.snapshots.get(name) {
        Some(s) => Ok(s.seq),
        None => Err(MetaError::NoSuchSnapshot(name.to_string())),
    }
}

/// Calls `f` with every version kept for a snapshot that holds bytes, as
/// (bucket, key, record), in one read transaction.
pub(crate) fn each_kept_object(
    tx: &redb::ReadTransaction,
    mut f: impl FnMut(&str, &str, ObjectRecord),
) -> Result<(), MetaError> {
    for e in tx.open_table(KEPT)?.iter()? {
        let (k, v) = e?;
        let (b, key, _) = k.value();
        if let Version::Object(o) = serde_json::from_slice::<Kept>(v.value())?.version {
            f(b, key, *o);
        }
    }
    Ok(())
}

impl MetaStore {
    /// The snapshots of `bucket`, by name.
    pub fn snapshots(
        &self,
        bucket: &str,
    ) -> Result<std::collections::BTreeMap<String, Snapshot>, MetaError> {
        match self.bucket(bucket)? {
            Some(b) => Ok(b.snapshots),
            None => Err(MetaError::NoSuchBucket(bucket.to_string())),
        }
    }

    /// What `key` reads as in snapshot `name` of `bucket`: none if it had no
    /// object then.
    pub fn snapshot_object(
        &self,
        bucket: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<ObjectRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let seq = snapshot_seq(&tx, bucket, name)?;
        let (o, v, k) = (
            tx.open_table(OBJECTS)?,
            tx.open_table(VERSIONS)?,
            tx.open_table(KEPT)?,
        );
        at((&o, &v, &k), bucket, key, seq)
    }

    /// Lists snapshot `name` of `bucket` as [`MetaStore::list`] lists the bucket.
    pub fn snapshot_list(
        &self,
        bucket: &str,
        name: &str,
        prefix: &str,
        after: Option<After>,
        delimiter: Option<&str>,
        max: usize,
    ) -> Result<Listing, MetaError> {
        let tx = self.db.begin_read()?;
        let seq = snapshot_seq(&tx, bucket, name)?;
        let (o, v, k) = (
            tx.open_table(OBJECTS)?,
            tx.open_table(VERSIONS)?,
            tx.open_table(KEPT)?,
        );
        let tables = (&o, &v, &k);
        let (mut page, mut start) = Pager::new(prefix, after, delimiter, max);
        // Keys a snapshot does not see (made later, or deleted by then) are
        // skipped before the pager sees them: a common prefix shows only when
        // a key under it does.
        while let Some(key) = next_key(tables, bucket, &start)? {
            start = format!("{key}\0");
            let Some(rec) = at(tables, bucket, &key, seq)? else {
                if !key.starts_with(prefix) {
                    break;
                }
                continue;
            };
            match page.step(&key) {
                Step::Take => page.out.objects.push((key, rec)),
                Step::Skip => {}
                Step::Seek(s) => start = s,
                Step::Done => break,
            }
        }
        Ok(page.out)
    }

    /// The versions kept for `bucket`'s snapshots: how many, and their bytes.
    pub fn snapshot_kept(&self, bucket: &str) -> Result<(u64, u64), MetaError> {
        let tx = self.db.begin_read()?;
        let kept = tx.open_table(KEPT)?;
        let (mut n, mut bytes) = (0, 0);
        for e in kept.range((bucket, "", 0)..)? {
            let (k, v) = e?;
            if k.value().0 != bucket {
                break;
            }
            let kv: Kept = serde_json::from_slice(v.value())?;
            n += 1;
            bytes += kv.version.object().map_or(0, |o| o.size);
        }
        Ok((n, bytes))
    }
}
