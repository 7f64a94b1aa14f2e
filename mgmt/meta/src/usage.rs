//! What each bucket and tenant holds (bytes stored, objects completed), and the
//! quotas that bound it.
//!
//! Usage is derived data, kept exact by the same apply that changes the objects
//! (every replica computes the same), and rebuilt from the objects table when a
//! database is first opened by a version that keeps it or restored from a
//! snapshot. A change that would take a bucket or its tenant past a quota is
//! refused inside that apply, so two racing writes can never both pass: the log
//! orders them, and the second sees the first's usage. Parts of uploads in
//! progress count as bytes from the moment they are stored (else a tenant could
//! fill the drives with parts it never completes).

use crate::identity::{TenantRecord, TENANTS};
use crate::{BucketRecord, MetaError, ObjectRecord, BUCKETS, OBJECTS, PARTS, SYSTEM, UPLOADS};
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

    fn plus(self, d: Delta) -> Usage {
        Usage {
            bytes: self.bytes.saturating_add_signed(d.bytes),
            objects: self.objects.saturating_add_signed(d.objects),
        }
    }
}

/// A change to what a bucket holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    pub bytes: i64,
    pub objects: i64,
}

impl std::ops::Add for Delta {
    type Output = Delta;
    fn add(self, o: Delta) -> Delta {
        Delta {
            bytes: self.bytes + o.bytes,
            objects: self.objects + o.objects,
        }
    }
}

impl Delta {
    /// Object `old` replaced by `new` (either may be none).
    pub fn replacing(old: Option<&ObjectRecord>, new: Option<&ObjectRecord>) -> Delta {
        let size = |o: Option<&ObjectRecord>| o.map_or((0, 0), |o| (o.size as i64, 1));
        let ((ob, oo), (nb, no)) = (size(old), size(new));
        Delta {
            bytes: nb - ob,
            objects: no - oo,
        }
    }

    /// Stored bytes that are not (yet) an object: parts of uploads in progress.
    pub fn bytes(bytes: i64) -> Delta {
        Delta { bytes, objects: 0 }
    }
}

/// Accounts, inside the caller's transaction, a change `d` to bucket `bucket`;
/// refuses a change that grows the bucket or its tenant past its quota
/// (`QuotaExceeded`), before anything is written.
pub(crate) fn account(
    tx: &redb::WriteTransaction,
    buckets: &redb::Table<&str, &[u8]>,
    bucket: &str,
    d: Delta,
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
    let (bn, tn) = (bu.plus(d), tu.plus(d));
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

/// Forgets a deleted bucket: what it still held (parts of the uploads aborted
/// with it) leaves its tenant's usage, and its row goes.
pub(crate) fn forget_bucket(
    tx: &redb::WriteTransaction,
    tenant: u64,
    bucket: &str,
) -> Result<(), MetaError> {
    let mut bu_t = tx.open_table(BUCKET_USAGE)?;
    let held = bu_t
        .remove(bucket)?
        .map(|v| Usage::of(v.value()))
        .unwrap_or_default();
    let mut tu_t = tx.open_table(TENANT_USAGE)?;
    let tu = tu_t
        .get(tenant)?
        .map(|v| Usage::of(v.value()))
        .unwrap_or_default();
    let left = Usage {
        bytes: tu.bytes.saturating_sub(held.bytes),
        objects: tu.objects.saturating_sub(held.objects),
    };
    tu_t.insert(tenant, (left.bytes, left.objects))?;
    Ok(())
}

/// Recounts every bucket's and tenant's usage from the objects and versions tables, inside
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
    // Noncurrent versions hold their bytes until deleted (delete markers none).
    for e in tx.open_table(crate::versions::VERSIONS)?.iter()? {
        let (k, v) = e?;
        if let crate::Version::Object(rec) = serde_json::from_slice(v.value())? {
            let u = per_bucket.entry(k.value().0.to_string()).or_default();
            u.bytes += rec.size;
            u.objects += 1;
        }
    }
    // Parts of uploads in progress hold bytes too.
    let mut upload_bucket: std::collections::BTreeMap<String, String> = Default::default();
    for e in tx.open_table(UPLOADS)?.iter()? {
        let (k, _) = e?;
        let (b, id) = k.value();
        upload_bucket.insert(id.to_string(), b.to_string());
    }
    for e in tx.open_table(PARTS)?.iter()? {
        let (k, v) = e?;
        let Some(b) = upload_bucket.get(k.value().0) else {
            continue;
        };
        let p: crate::PartRecord = serde_json::from_slice(v.value())?;
        per_bucket.entry(b.clone()).or_default().bytes += p.extent.size;
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
