//! What each bucket and tenant holds (bytes and objects of completed objects),
//! and the quotas that bound it.
//!
//! Usage is derived data, kept exact by the same apply that changes the objects
//! (every replica computes the same), and rebuilt from the objects table when a
//! database is first opened by a version that keeps it or restored from a
//! snapshot. A change that would take a bucket or its tenant past a quota is
//! refused inside that apply, so two racing writes can never both pass: the log
//! orders them, and the second sees the first's usage. Parts of uploads in
//! progress are not counted until completed.

use crate::identity::{TenantRecord, TENANTS};
use crate::{BucketRecord, MetaError, ObjectRecord, BUCKETS, OBJECTS, SYSTEM};
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

pub(crate) const BUCKET_USAGE: TableDefinition<&str, (u64, u64)> =
    TableDefinition::new("bucket_usage");
pub(crate) const TENANT_USAGE: TableDefinition<u64, (u64, u64)> =
    TableDefinition::new("tenant_usage");
/// Marks a database whose usage tables were built (see [`rebuild`]).
const BUILT: &str = "usage_built";

/// A limit on what a bucket or tenant holds; none means no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_objects: Option<u64>,
}

impl Quota {
    pub fn is_none(&self) -> bool {
        self.max_bytes.is_none() && self.max_objects.is_none()
    }

    /// Why `next` is over this quota, if it is and the change grows what is over.
    fn refuses(&self, now: Usage, next: Usage) -> Option<String> {
        if let Some(max) = self.max_bytes {
            if next.bytes > max && next.bytes > now.bytes {
                return Some(format!("{} bytes of at most {max}", next.bytes));
            }
        }
        if let Some(max) = self.max_objects {
            if next.objects > max && next.objects > now.objects {
                return Some(format!("{} objects of at most {max}", next.objects));
            }
        }
        None
    }
}

/// Bytes and objects held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub bytes: u64,
    pub objects: u64,
}

impl Usage {
    fn of(t: (u64, u64)) -> Usage {
        Usage {
            bytes: t.0,
            objects: t.1,
        }
    }

    /// This usage with `old` replaced by `new`.
    fn replacing(self, old: Option<&ObjectRecord>, new: Option<&ObjectRecord>) -> Usage {
        let size = |o: Option<&ObjectRecord>| o.map_or((0, 0), |o| (o.size, 1));
        let ((ob, oo), (nb, no)) = (size(old), size(new));
        Usage {
            bytes: (self.bytes + nb).saturating_sub(ob),
            objects: (self.objects + no).saturating_sub(oo),
        }
    }
}

/// Accounts, inside the caller's transaction, object `old` of bucket `bucket`
/// replaced by `new` (either may be none); refuses a change that grows the bucket
/// or its tenant past its quota (`QuotaExceeded`), before anything is written.
pub(crate) fn account(
    tx: &redb::WriteTransaction,
    buckets: &redb::Table<&str, &[u8]>,
    bucket: &str,
    old: Option<&ObjectRecord>,
    new: Option<&ObjectRecord>,
) -> Result<(), MetaError> {
    let b: BucketRecord = match buckets.get(bucket)? {
        Some(v) => serde_json::from_slice(v.value())?,
        None => return Err(MetaError::NoSuchBucket(bucket.to_string())),
    };
    let mut bu_t = tx.open_table(BUCKET_USAGE)?;
    let mut tu_t = tx.open_table(TENANT_USAGE)?;
    let bu = bu_t
        .get(bucket)?
        .map(|v| Usage::of(v.value()))
        .unwrap_or_default();
    let tu = tu_t
        .get(b.tenant)?
        .map(|v| Usage::of(v.value()))
        .unwrap_or_default();
    let (bn, tn) = (bu.replacing(old, new), tu.replacing(old, new));
    if let Some(why) = b.quota.refuses(bu, bn) {
        return Err(MetaError::QuotaExceeded(format!(
            "bucket {}: {why}",
            crate::bucket_name(bucket)
        )));
    }
    let tenant: Option<TenantRecord> = match tx.open_table(TENANTS)?.get(b.tenant)? {
        Some(v) => Some(serde_json::from_slice(v.value())?),
        None => None,
    };
    if let Some(t) = tenant {
        if let Some(why) = t.quota.refuses(tu, tn) {
            return Err(MetaError::QuotaExceeded(format!(
                "tenant {}: {why}",
                t.name
            )));
        }
    }
    bu_t.insert(bucket, (bn.bytes, bn.objects))?;
    tu_t.insert(b.tenant, (tn.bytes, tn.objects))?;
    Ok(())
}

/// Forgets a deleted (empty) bucket's usage row.
pub(crate) fn forget_bucket(tx: &redb::WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    tx.open_table(BUCKET_USAGE)?.remove(bucket)?;
    Ok(())
}

/// Recounts every bucket's and tenant's usage from the objects table, inside
/// `tx`, if `always` or it was never built in this database.
pub(crate) fn rebuild(tx: &redb::WriteTransaction, always: bool) -> Result<(), MetaError> {
    let mut system = tx.open_table(SYSTEM)?;
    if !always && system.get(BUILT)?.is_some() {
        return Ok(());
    }
    tx.delete_table(BUCKET_USAGE)?;
    tx.delete_table(TENANT_USAGE)?;
    let mut bu_t = tx.open_table(BUCKET_USAGE)?;
    let mut tu_t = tx.open_table(TENANT_USAGE)?;
    let buckets = tx.open_table(BUCKETS)?;
    let mut per_bucket: std::collections::BTreeMap<String, Usage> = Default::default();
    for e in tx.open_table(OBJECTS)?.iter()? {
        let (k, v) = e?;
        let rec: ObjectRecord = serde_json::from_slice(v.value())?;
        let u = per_bucket.entry(k.value().0.to_string()).or_default();
        u.bytes += rec.size;
        u.objects += 1;
    }
    let mut per_tenant: std::collections::BTreeMap<u64, Usage> = Default::default();
    for e in buckets.iter()? {
        let (k, v) = e?;
        let b: BucketRecord = serde_json::from_slice(v.value())?;
        let u = per_bucket.get(k.value()).copied().unwrap_or_default();
        bu_t.insert(k.value(), (u.bytes, u.objects))?;
        let t = per_tenant.entry(b.tenant).or_default();
        t.bytes += u.bytes;
        t.objects += u.objects;
    }
    for (t, u) in per_tenant {
        tu_t.insert(t, (u.bytes, u.objects))?;
    }
    system.insert(BUILT, b"1".as_slice())?;
    Ok(())
}

/// Reads of usage (local: as current as this replica).
impl crate::MetaStore {
    pub fn bucket_usage(&self, bucket: &str) -> Result<Usage, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(BUCKET_USAGE)?;
        let v = t.get(bucket)?;
        Ok(v.map(|v| Usage::of(v.value())).unwrap_or_default())
    }

    pub fn tenant_usage(&self, tenant: u64) -> Result<Usage, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TENANT_USAGE)?;
        let v = t.get(tenant)?;
        Ok(v.map(|v| Usage::of(v.value())).unwrap_or_default())
    }
}
