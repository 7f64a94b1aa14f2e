//! S3 versioning: the versions of a key that are not its current object.
//!
//! A key's current object stays in the objects table, so reads, listings, the
//! lifecycle worker and the RESP tier see exactly what they saw before. What a
//! write or delete replaces in a versioned bucket moves here instead of being
//! freed, beside the delete markers, under (bucket, key, `!seq`): a key's
//! versions read newest first. Every version carries a [`VersionStamp`] set when
//! its mutation applies, from one sequence kept in the system table (so every
//! replica numbers alike, and a version id is never reused, even by a bucket of
//! the same name made again). A version id is that sequence number, as 20
//! digits: the `null` version (written while unversioned or suspended) is the
//! only one without.
//!
//! The collector, repair and usage count these versions like current objects;
//! a version's chunks are freed only when the version itself is deleted (by
//! version id, or as the `null` version a suspended bucket's write replaces).

use crate::records::{Extent, ObjectRecord, VersionStamp, Versioning};
use crate::usage::{self, Delta};
use crate::{check, get_object, Applied, MetaError, Precondition, WriteId, SYSTEM};
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

pub(crate) const VERSIONS: TableDefinition<(&str, &str, u64), &[u8]> =
    TableDefinition::new("versions");
/// The last version sequence number given out (system table).
const SEQ: &str = "version_seq";

/// A version that is not its key's current object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    /// An earlier write, bytes kept.
    Object(Box<ObjectRecord>),
    /// A delete: while it is the newest version, the key reads as deleted.
    DeleteMarker {
        version: VersionStamp,
        modified_ms: i64,
    },
}

impl Version {
    pub fn stamp(&self) -> &VersionStamp {
        match self {
            Version::Object(o) => &o.version,
            Version::DeleteMarker { version, .. } => version,
        }
    }

    pub fn modified_ms(&self) -> i64 {
        match self {
            Version::Object(o) => o.modified_ms,
            Version::DeleteMarker { modified_ms, .. } => *modified_ms,
        }
    }

    pub fn object(&self) -> Option<&ObjectRecord> {
        match self {
            Version::Object(o) => Some(o),
            Version::DeleteMarker { .. } => None,
        }
    }
}

/// What a delete did to versions, for S3's `x-amz-version-id` and
/// `x-amz-delete-marker` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    /// The delete marker made (a delete of the latest), or the version removed
    /// (a delete by version id).
    pub version: VersionStamp,
    /// That version is a delete marker.
    pub marker: bool,
}

/// The id S3 shows for sequence number `seq`.
fn id_of(seq: u64) -> String {
    format!("{seq:020}")
}

/// The sequence number of version id `id`, if it is one of ours.
pub fn seq_of(id: &str) -> Option<u64> {
    if id.len() == 20 && id.bytes().all(|b| b.is_ascii_digit()) {
        id.parse().ok()
    } else {
        None
    }
}

/// A version id as a client may send it: ours, or `null`.
pub fn valid_id(id: &str) -> bool {
    id == "null" || seq_of(id).is_some()
}

/// The last version sequence number given out.
pub(crate) fn last_seq(tx: &redb::WriteTransaction) -> Result<u64, MetaError> {
    match tx.open_table(SYSTEM)?.get(SEQ)? {
        Some(v) => Ok(serde_json::from_slice::<u64>(v.value())?),
        None => Ok(0),
    }
}

pub(crate) fn next_seq(tx: &redb::WriteTransaction) -> Result<u64, MetaError> {
    let mut t = tx.open_table(SYSTEM)?;
    let last = match t.get(SEQ)? {
        Some(v) => serde_json::from_slice::<u64>(v.value())?,
        None => 0,
    };
    t.insert(SEQ, serde_json::to_vec(&(last + 1))?.as_slice())?;
    Ok(last + 1)
}

/// What a write to a bucket must know of it: its versioning state, and the
/// numbers of its snapshots (see [`crate::snapshots`]).
#[derive(Default)]
pub(crate) struct WriteState {
    versioning: Option<Versioning>,
    snapshots: Vec<u64>,
    object_lock: Option<crate::BucketLock>,
    replication: Option<crate::Replication>,
}

/// The bucket's [`WriteState`], read on every write: only those fields are
/// decoded (a bucket record may carry a thousand lifecycle rules).
fn write_state(buckets: &redb::Table<&str, &[u8]>, bucket: &str) -> Result<WriteState, MetaError> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    #[derive(serde::Deserialize)]
    struct State {
        #[serde(default)]
        versioning: Option<Versioning>,
        #[serde(default)]
        snapshots: std::collections::BTreeMap<String, Seq>,
        #[serde(default)]
        object_lock: Option<crate::BucketLock>,
        #[serde(default)]
        replication: Option<crate::Replication>,
    }
    match buckets.get(bucket)? {
        Some(v) => {
            let s = serde_json::from_slice::<State>(v.value())?;
            Ok(WriteState {
                versioning: s.versioning,
                snapshots: s.snapshots.into_values().map(|s| s.seq).collect(),
                object_lock: s.object_lock,
                replication: s.replication,
            })
        }
        None => Err(MetaError::NoSuchBucket(bucket.to_string())),
    }
}

/// The noncurrent versions of `key`, newest first, with their table keys' last part.
pub(crate) fn of_key<T: ReadableTable<(&'static str, &'static str, u64), &'static [u8]>>(
    t: &T,
    bucket: &str,
    key: &str,
) -> Result<Vec<(u64, Version)>, MetaError> {
    let mut out = Vec::new();
    for e in t.range((bucket, key, 0)..=(bucket, key, u64::MAX))? {
        let (k, v) = e?;
        out.push((k.value().2, serde_json::from_slice(v.value())?));
    }
    Ok(out)
}

fn put_version(
    t: &mut redb::Table<(&str, &str, u64), &[u8]>,
    bucket: &str,
    key: &str,
    v: &Version,
) -> Result<(), MetaError> {
    t.insert(
        (bucket, key, !v.stamp().seq),
        serde_json::to_vec(v)?.as_slice(),
    )?;
    Ok(())
}

/// The usage change of versions `gone` leaving and `came` arriving.
fn delta(gone: &[ObjectRecord], came: Option<&ObjectRecord>, extra: Delta) -> Delta {
    gone.iter()
        .map(|g| Delta::replacing(Some(g), None))
        .fold(extra + Delta::replacing(None, came), |d, g| d + g)
}

/// Every extent the object versions among `vs` hold.
fn extents_of<'a>(vs: impl Iterator<Item = &'a Version>) -> Vec<Extent> {
    vs.filter_map(Version::object)
        .flat_map(|o| o.extents.iter().cloned())
        .collect()
}

fn freed_by(gone: Vec<ObjectRecord>, kept: &[Extent]) -> Vec<Extent> {
    gone.into_iter()
        .flat_map(|o| crate::unreferenced(Some(o.extents), kept))
        .collect()
}

/// What making a new current version of a key does to the versions there are,
/// decided before anything is written (a refused mutation writes nothing).
struct Plan {
    /// The new version's stamp.
    stamp: VersionStamp,
    /// Versions destroyed: their bytes leave usage, their extents are freed.
    gone: Vec<ObjectRecord>,
    /// The old current object, kept as a noncurrent version.
    keep: Option<ObjectRecord>,
    /// The `null` noncurrent version to remove (its table key), and the
    /// version itself when it is a delete marker (an object one is in `gone`).
    drop_null: Option<(u64, Option<Version>)>,
}

fn plan(
    tx: &redb::WriteTransaction,
    state: Option<Versioning>,
    bucket: &str,
    key: &str,
    old: Option<ObjectRecord>,
    new: Option<&ObjectRecord>,
) -> Result<Plan, MetaError> {
    let mut p = Plan {
        stamp: VersionStamp::default(),
        gone: Vec::new(),
        keep: None,
        drop_null: None,
    };
    // The very write applied again (its extents are the new record's): one
    // version, never two manifests sharing extents, which deleting one of
    // them by id would free under the other.
    let again = |o: &ObjectRecord| {
        new.is_some_and(|n| {
            !n.extents.is_empty()
                && n.extents
                    .iter()
                    .map(|e| e.id)
                    .eq(o.extents.iter().map(|e| e.id))
        })
    };
    // Another write sharing the old one's extents (an NFS client's rebuild
    // made while it still took the bucket for unversioned) would destroy the
    // old version below: never one object lock keeps.
    if let (Some(o), Some(n), Some(_)) = (&old, new, state) {
        let replay = o.modified_ms == n.modified_ms && o.etag == n.etag;
        if again(o) && !replay {
            if let Some(why) = o.lock.refuses(n.modified_ms, false) {
                return Err(MetaError::ObjectLocked(why));
            }
        }
    }
    match state {
        None => p.gone.extend(old),
        Some(_) if old.as_ref().is_some_and(again) => p.gone.extend(old),
        Some(Versioning::Enabled) => p.keep = old,
        Some(Versioning::Suspended) => {
            // The null version is replaced wherever it is; a version made while
            // versioning was enabled is kept.
            match old {
                Some(o) if o.version.id.is_none() => p.gone.push(o),
                o => p.keep = o,
            }
            let versions = tx.open_table(VERSIONS)?;
            for (k, v) in of_key(&versions, bucket, key)? {
                if v.stamp().id.is_none() {
                    p.drop_null = Some(match v {
                        Version::Object(o) => {
                            p.gone.push(*o);
                            (k, None)
                        }
                        marker => (k, Some(marker)),
                    });
                }
            }
        }
    }
    Ok(p)
}

impl Plan {
    /// Writes the plan's version changes, giving the new version its stamp;
    /// keeps what it destroys that a snapshot sees.
    fn carry_out(
        &mut self,
        tx: &redb::WriteTransaction,
        state: &WriteState,
        bucket: &str,
        key: &str,
    ) -> Result<(), MetaError> {
        if state.versioning.is_some() || !state.snapshots.is_empty() {
            let seq = next_seq(tx)?;
            self.stamp = VersionStamp {
                id: (state.versioning == Some(Versioning::Enabled)).then(|| id_of(seq)),
                seq,
                unversioned: state.versioning.is_none(),
            };
        }
        let dropped_marker = self.drop_null.as_ref().and_then(|(_, m)| m.clone());
        let destroys = !self.gone.is_empty() || dropped_marker.is_some();
        if !state.snapshots.is_empty() && destroys {
            // The key's versions that stay, which may hide a gone one from a snapshot.
            let dropped = self.drop_null.as_ref().map(|(k, _)| *k);
            let mut others: Vec<u64> = of_key(&tx.open_table(VERSIONS)?, bucket, key)?
                .iter()
                .filter(|(k, _)| Some(*k) != dropped)
                .map(|(_, v)| v.stamp().seq)
                .collect();
            others.extend(self.keep.as_ref().map(|o| o.version.seq));
            let gone = self
                .gone
                .iter()
                .cloned()
                .map(|o| Version::Object(Box::new(o)));
            for v in gone.chain(dropped_marker) {
                let (at, seq) = ((bucket, key), self.stamp.seq);
                crate::snapshots::keep_if_seen(tx, &state.snapshots, at, seq, v, &others)?;
            }
        }
        if self.drop_null.is_none() && self.keep.is_none() {
            return Ok(());
        }
        let mut versions = tx.open_table(VERSIONS)?;
        if let Some((k, _)) = &self.drop_null {
            versions.remove((bucket, key, *k))?;
        }
        if let Some(o) = self.keep.take() {
            put_version(&mut versions, bucket, key, &Version::Object(Box::new(o)))?;
        }
        Ok(())
    }
}

/// Makes `record` the current object of `key` (replacing `old`), as the bucket's
/// versioning state says: the old object freed (unversioned), kept (enabled),
/// or freed only if it is the `null` version (suspended). Accounts usage with
/// `extra` added, refusing a quota overrun before anything is written. Returns
/// the extents freed; `record` gets its version stamp.
#[allow(clippy::too_many_arguments)]
pub(crate) fn install(
    tx: &redb::WriteTransaction,
    buckets: &redb::Table<&str, &[u8]>,
    objects: &mut redb::Table<(&str, &str), &[u8]>,
    bucket: &str,
    key: &str,
    record: &mut ObjectRecord,
    old: Option<ObjectRecord>,
    extra: Delta,
) -> Result<Vec<Extent>, MetaError> {
    let state = write_state(buckets, bucket)?;
    crate::lock::on_write(state.object_lock.as_ref(), record)?;
    let mut p = plan(tx, state.versioning, bucket, key, old, Some(record))?;
    usage::account(tx, buckets, bucket, delta(&p.gone, Some(record), extra))?;
    p.carry_out(tx, &state, bucket, key)?;
    record.version = p.stamp.clone();
    let what = (false, record.size, record.modified_ms);
    // A replica is not shipped on (two clusters replicating to each other
    // would pass it back and forth for ever).
    let replica = record.user_meta.contains_key(crate::REPLICA_OF);
    crate::replication::enqueue(
        tx,
        state.replication.as_ref().filter(|_| !replica),
        (bucket, key),
        &p.stamp,
        what,
    )?;
    objects.insert((bucket, key), serde_json::to_vec(&*record)?.as_slice())?;
    Ok(freed_by(p.gone, &record.extents))
}

/// Moves the current object of `from`, the write `of`, to `to`, bytes and
/// times untouched; what `to` held is replaced and its extents freed. Refused
/// in a versioned bucket, where a rename would have to leave a version behind
/// at both names.
pub(crate) fn rename(
    tx: &redb::WriteTransaction,
    buckets: &redb::Table<&str, &[u8]>,
    objects: &mut redb::Table<(&str, &str), &[u8]>,
    bucket: &str,
    (from, to): (&str, &str),
    of: &WriteId,
) -> Result<Applied, MetaError> {
    let state = write_state(buckets, bucket)?;
    if state.versioning.is_some() {
        return Err(MetaError::Versioned {
            bucket: crate::bucket_name(bucket).to_string(),
            why: "a rename is a copy and a delete there".into(),
        });
    }
    let mut record = crate::held_write(objects, bucket, from, of)?;
    if from == to {
        return Ok(Applied {
            object: Some(Box::new(record)),
            ..Applied::default()
        });
    }
    objects.remove((bucket, from))?;
    let old = get_object(objects, bucket, to)?;
    // The object leaves `from` and counts again at `to`: usage changes only by
    // what `to` held.
    let leaves = Delta::replacing(Some(&record), None);
    let was = record.clone();
    let freed = install(tx, buckets, objects, bucket, to, &mut record, old, leaves)?;
    // A snapshot that saw the object at `from` still does (sharing its extents
    // with `to`; see `snapshots::spare_held`).
    let at = (bucket, from);
    let gone = Version::Object(Box::new(was));
    crate::snapshots::keep_if_seen(tx, &state.snapshots, at, record.version.seq, gone, &[])?;
    Ok(Applied {
        freed,
        object: Some(Box::new(record)),
        deleted: None,
    })
}

/// Deletes the latest version of `key` (a DELETE without a version id, or a
/// lifecycle expiry): unversioned, the object goes; versioned, a delete marker
/// becomes the latest version and the object is kept (suspended: unless it is
/// the `null` version, which the marker replaces). `current` is the key's
/// current object, its conditions already checked.
pub(crate) fn delete_latest(
    tx: &redb::WriteTransaction,
    buckets: &redb::Table<&str, &[u8]>,
    objects: &mut redb::Table<(&str, &str), &[u8]>,
    bucket: &str,
    key: &str,
    current: Option<ObjectRecord>,
    modified_ms: i64,
) -> Result<Applied, MetaError> {
    let state = write_state(buckets, bucket)?;
    if state.versioning.is_none() && current.is_none() {
        return Ok(Applied::default());
    }
    let had_current = current.is_some();
    let mut p = plan(tx, state.versioning, bucket, key, current, None)?;
    usage::account(tx, buckets, bucket, delta(&p.gone, None, Delta::default()))?;
    p.carry_out(tx, &state, bucket, key)?;
    if had_current {
        objects.remove((bucket, key))?;
    }
    // Versioned, the delete is a marker, the newest version.
    let mut deleted = None;
    if state.versioning.is_some() {
        let marker = Version::DeleteMarker {
            version: p.stamp.clone(),
            modified_ms,
        };
        put_version(&mut tx.open_table(VERSIONS)?, bucket, key, &marker)?;
        let what = (true, 0, modified_ms);
        crate::replication::enqueue(
            tx,
            state.replication.as_ref(),
            (bucket, key),
            &p.stamp,
            what,
        )?;
        deleted = Some(Deleted {
            version: p.stamp.clone(),
            marker: true,
        });
    }
    Ok(Applied {
        freed: freed_by(p.gone, &[]),
        object: None,
        deleted,
    })
}

/// Deletes version `id` of `key` for good (a DELETE with a version id). The
/// current object deleted, the newest noncurrent version becomes current (a
/// delete marker stays where it is: the key then reads as deleted). A version
/// that does not exist is no error, as a missing key is not. A version object
/// lock keeps at `now_ms` is refused (see [`crate::lock`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn delete_version(
    tx: &redb::WriteTransaction,
    buckets: &redb::Table<&str, &[u8]>,
    objects: &mut redb::Table<(&str, &str), &[u8]>,
    bucket: &str,
    key: &str,
    id: &str,
    cond: &Precondition,
    (now_ms, bypass): (i64, bool),
) -> Result<Applied, MetaError> {
    let snapshots = write_state(buckets, bucket)?.snapshots;
    let locked = |o: &ObjectRecord| match o.lock.refuses(now_ms, bypass) {
        Some(why) => Err(MetaError::ObjectLocked(why)),
        None => Ok(()),
    };
    // What a snapshot sees of the version deleted is kept, ended by a number
    // of its own.
    let keep = |v: Version, others: Vec<u64>| -> Result<(), MetaError> {
        if snapshots.is_empty() {
            return Ok(());
        }
        let ended = next_seq(tx)?;
        crate::snapshots::keep_if_seen(tx, &snapshots, (bucket, key), ended, v, &others)
    };
    let current = get_object(objects, bucket, key)?;
    let current_seq = current.as_ref().map(|c| c.version.seq);
    let has_current = current.is_some();
    let current_extents: Vec<Extent> = current.iter().flat_map(|c| c.extents.clone()).collect();
    let mut versions = tx.open_table(VERSIONS)?;
    let older = of_key(&versions, bucket, key)?;
    if let Some(cur) = current.filter(|c| c.version.shown() == id) {
        check(cond, Some(&cur), key)?;
        locked(&cur)?;
        usage::account(tx, buckets, bucket, Delta::replacing(Some(&cur), None))?;
        objects.remove((bucket, key))?;
        let others = older.iter().map(|(_, v)| v.stamp().seq).collect();
        keep(Version::Object(Box::new(cur.clone())), others)?;
        let freed = freed_by(vec![cur.clone()], &extents_of(older.iter().map(|(_, v)| v)));
        if let Some((k, Version::Object(next))) = older.into_iter().next() {
            versions.remove((bucket, key, k))?;
            objects.insert((bucket, key), serde_json::to_vec(&next)?.as_slice())?;
        }
        return Ok(Applied {
            deleted: Some(Deleted {
                version: cur.version,
                marker: false,
            }),
            freed,
            object: None,
        });
    }
    let Some(at) = older.iter().position(|(_, v)| v.stamp().shown() == id) else {
        return Ok(Applied::default());
    };
    let (k, v) = &older[at];
    if let Version::Object(o) = v {
        check(cond, Some(o), key)?;
        locked(o)?;
    }
    let gone: Vec<ObjectRecord> = v.object().cloned().into_iter().collect();
    usage::account(tx, buckets, bucket, delta(&gone, None, Delta::default()))?;
    versions.remove((bucket, key, *k))?;
    let others = (older.iter().enumerate())
        .filter(|(i, _)| *i != at)
        .map(|(_, (_, v))| v.stamp().seq)
        .chain(current_seq)
        .collect();
    keep(v.clone(), others)?;
    // The latest version was a delete marker: the object under it is current again.
    if !has_current && at == 0 {
        if let Some((k1, Version::Object(next))) = older.get(1) {
            versions.remove((bucket, key, *k1))?;
            objects.insert((bucket, key), serde_json::to_vec(next)?.as_slice())?;
        }
    }
    // Extents another version of the key still holds are not freed.
    let mut others: Vec<Extent> = extents_of(
        older
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .map(|(_, (_, v))| v),
    );
    others.extend(current_extents);
    Ok(Applied {
        deleted: Some(Deleted {
            version: v.stamp().clone(),
            marker: v.object().is_none(),
        }),
        freed: freed_by(gone, &others),
        object: None,
    })
}

/// Finds the noncurrent version of `key` that holds extent `extent` (repair
/// moves fragments of old versions too): its table key and record.
pub(crate) fn holding_extent(
    versions: &redb::Table<(&str, &str, u64), &[u8]>,
    bucket: &str,
    key: &str,
    extent: u128,
) -> Result<Option<(u64, ObjectRecord)>, MetaError> {
    for (k, v) in of_key(versions, bucket, key)? {
        if let Version::Object(o) = v {
            if o.extents.iter().any(|e| e.id == extent) {
                return Ok(Some((k, *o)));
            }
        }
    }
    Ok(None)
}

/// Removes every noncurrent version in bucket `bucket` (its tenant purged);
/// returns their records.
pub(crate) fn drop_bucket(
    tx: &redb::WriteTransaction,
    bucket: &str,
) -> Result<Vec<ObjectRecord>, MetaError> {
    let mut versions = tx.open_table(VERSIONS)?;
    let mut keys = Vec::new();
    let mut out = Vec::new();
    for e in versions.range((bucket, "", 0)..)? {
        let (k, v) = e?;
        let (b, key, n) = k.value();
        if b != bucket {
            break;
        }
        keys.push((key.to_string(), n));
        if let Version::Object(o) = serde_json::from_slice(v.value())? {
            out.push(*o);
        }
    }
    for (key, n) in keys {
        versions.remove((bucket, key.as_str(), n))?;
    }
    Ok(out)
}

/// Bucket `bucket` holds noncurrent versions (so it is not empty).
pub(crate) fn any_in(tx: &redb::WriteTransaction, bucket: &str) -> Result<bool, MetaError> {
    let versions = tx.open_table(VERSIONS)?;
    let mut r = versions.range((bucket, "", 0)..)?;
    let any = match r.next() {
        Some(e) => e?.0.value().0 == bucket,
        None => false,
    };
    Ok(any)
}
