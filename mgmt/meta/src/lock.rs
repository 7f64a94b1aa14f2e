//! S3 object lock: write-once-read-many retention on the versions of a bucket.
//!
//! A bucket with object lock (always versioned, never suspended: a write then
//! never destroys a version, it only adds one) may give each version a
//! retention date, in GOVERNANCE mode (a tenant admin may lift or shorten it,
//! saying so with `x-amz-bypass-governance-retention`) or COMPLIANCE mode (no
//! one may, until the date has passed), and a legal hold (no date; on until
//! taken off). A version under either cannot be deleted by its version id, by a
//! client or the lifecycle worker: the refusal is made where the deletion
//! applies, against the proposer's clock, so every replica decides alike and a
//! request racing a retention change cannot slip between check and delete.
//! Deleting a key's latest (a delete marker) is allowed, as in S3: the locked
//! version stays, noncurrent.

use crate::records::{BucketRecord, ObjectRecord, Versioning};
use crate::versions::{of_key, Version, VERSIONS};
use crate::{get_object, Applied, MetaError};
use redb::ReadableTable;
use serde::{Deserialize, Serialize};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// A retention's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// Lifted or shortened only by a tenant admin who says so.
    Governance,
    /// Neither lifted nor shortened by anyone until the date.
    Compliance,
}

/// A version's retention: not deleted before `until_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub mode: LockMode,
    /// Milliseconds since the Unix epoch.
    pub until_ms: i64,
}

/// A version's object lock: its retention and legal hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legal_hold: bool,
}

impl ObjectLock {
    pub fn is_none(&self) -> bool {
        self.retention.is_none() && !self.legal_hold
    }

    /// Why the version may not be deleted at `now_ms` (by someone who bypasses
    /// governance retention or not), if it may not.
    pub fn refuses(&self, now_ms: i64, bypass: bool) -> Option<String> {
        if self.legal_hold {
            return Some("the version is under a legal hold".into());
        }
        match self.retention {
            Some(r) if r.until_ms > now_ms => match r.mode {
                LockMode::Governance if bypass => None,
                mode => Some(format!(
                    "the version is retained in {} mode until {}",
                    mode_name(mode),
                    r.until_ms
                )),
            },
            _ => None,
        }
    }
}

fn mode_name(m: LockMode) -> &'static str {
    match m {
        LockMode::Governance => "GOVERNANCE",
        LockMode::Compliance => "COMPLIANCE",
    }
}

/// How long a bucket's default retention lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockPeriod {
    Days(u32),
    /// Years of 365 days.
    Years(u32),
}

impl LockPeriod {
    pub fn ms(self) -> i64 {
        match self {
            LockPeriod::Days(d) => d as i64 * DAY_MS,
            LockPeriod::Years(y) => y as i64 * 365 * DAY_MS,
        }
    }
}

/// The retention a bucket gives every new version that asks for none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    pub mode: LockMode,
    pub period: LockPeriod,
}

/// A bucket's object lock configuration: present, object lock is enabled (for
/// good, as S3 has it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketLock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<DefaultRetention>,
}

/// A change to one version's lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockChange {
    /// The retention (none: removed).
    Retention(Option<Retention>),
    LegalHold(bool),
}

/// The longest default retention taken (S3's limit is 100 years).
pub const MAX_RETENTION_DAYS: u32 = 36_500;

/// What a bucket's lock configuration must be, given its record: object lock
/// needs versioning enabled, a period between 1 day and 100 years.
pub(crate) fn check_config(b: &BucketRecord, lock: &BucketLock) -> Result<(), MetaError> {
    if b.versioning != Some(Versioning::Enabled) {
        return Err(MetaError::LockState(
            "object lock needs versioning enabled on the bucket".into(),
        ));
    }
    if let Some(d) = lock.default {
        let days = match d.period {
            LockPeriod::Days(n) => n as u64,
            LockPeriod::Years(n) => n as u64 * 365,
        };
        if days == 0 || days > MAX_RETENTION_DAYS as u64 {
            return Err(MetaError::InvalidLock(
                "the default retention period must be a positive number of days or years, at most 100 years"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// Gives a new version the lock it will have in bucket `lock`'s bucket: the
/// default retention when it asked for none; a lock asked of a bucket without
/// object lock is refused.
pub(crate) fn on_write(
    lock: Option<&BucketLock>,
    record: &mut ObjectRecord,
) -> Result<(), MetaError> {
    match lock {
        None if !record.lock.is_none() => Err(MetaError::NoObjectLock),
        None => Ok(()),
        Some(b) => {
            if record.lock.retention.is_none() {
                record.lock.retention = b.default.map(|d| Retention {
                    mode: d.mode,
                    until_ms: record.modified_ms.saturating_add(d.period.ms()),
                });
            }
            Ok(())
        }
    }
}

/// Whether a retention may replace `old` at `now_ms`: one that keeps the
/// version at least as long, in a mode at least as strict, always; anything
/// else only over GOVERNANCE retention, by someone who bypasses it.
fn may_replace(old: Option<Retention>, new: Option<Retention>, now_ms: i64, bypass: bool) -> bool {
    let Some(old) = old.filter(|o| o.until_ms > now_ms) else {
        return true;
    };
    let stronger = new.is_some_and(|n| n.until_ms >= old.until_ms && n.mode >= old.mode);
    stronger || (old.mode == LockMode::Governance && bypass)
}

/// Changes the lock of version `id` of `key` (its current version when none).
pub(crate) fn set(
    tx: &redb::WriteTransaction,
    buckets: &redb::Table<&str, &[u8]>,
    objects: &mut redb::Table<(&str, &str), &[u8]>,
    (bucket, key): (&str, &str),
    id: Option<&str>,
    change: &LockChange,
    (now_ms, bypass): (i64, bool),
) -> Result<Applied, MetaError> {
    let b: BucketRecord = match buckets.get(bucket)? {
        Some(v) => serde_json::from_slice(v.value())?,
        None => return Err(MetaError::NoSuchBucket(bucket.to_string())),
    };
    if b.object_lock.is_none() {
        return Err(MetaError::NoObjectLock);
    }
    let update = |o: &mut ObjectRecord| -> Result<(), MetaError> {
        match change {
            LockChange::Retention(r) => {
                if !may_replace(o.lock.retention, *r, now_ms, bypass) {
                    return Err(MetaError::ObjectLocked(
                        "the version's retention may not be shortened or removed".into(),
                    ));
                }
                o.lock.retention = *r;
            }
            LockChange::LegalHold(on) => o.lock.legal_hold = *on,
        }
        Ok(())
    };
    let no_version = || match id {
        Some(id) => MetaError::NoSuchVersion(id.to_string()),
        None => MetaError::NoSuchKey(key.to_string()),
    };
    if let Some(mut cur) = get_object(objects, bucket, key)? {
        if id.is_none_or(|id| cur.version.shown() == id) {
            update(&mut cur)?;
            objects.insert((bucket, key), serde_json::to_vec(&cur)?.as_slice())?;
            return Ok(Applied::default());
        }
    }
    let Some(id) = id else {
        return Err(no_version());
    };
    let mut versions = tx.open_table(VERSIONS)?;
    for (k, v) in of_key(&versions, bucket, key)? {
        if v.stamp().shown() != id {
            continue;
        }
        let Version::Object(mut o) = v else {
            return Err(MetaError::InvalidLock(
                "a delete marker has no object lock".into(),
            ));
        };
        update(&mut o)?;
        let bytes = serde_json::to_vec(&Version::Object(o))?;
        versions.insert((bucket, key, k), bytes.as_slice())?;
        return Ok(Applied::default());
    }
    Err(no_version())
}
