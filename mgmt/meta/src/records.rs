//! The persistent schema: what a bucket, an object manifest, an upload and a part
//! record hold. Records are JSON in the database so an operator can read them with
//! standard tools; the layout is small (a few bytes per stripe), so JSON costs little,
//! except for a large object's manifest read again and again (see `record_cache`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Marks a fragment that no healthy drive could take when the stripe was written;
/// readers treat it as missing and repair may fill it later.
pub const UNPLACED: u16 = u16::MAX;

/// The tenant of the node's root credentials.
pub const ROOT_TENANT: u64 = 1;

/// A bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    /// The tenant that owns the bucket; only its keys see it.
    pub tenant: u64,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// The region the bucket was created in (`LocationConstraint`), when one was
    /// given; none means S3's default, `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// What the bucket may hold.
    #[serde(default, skip_serializing_if = "crate::Quota::is_none")]
    pub quota: crate::Quota,
    /// Set: the bucket is a KV pool's keyspace (see [`KvPool`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvPool>,
    /// The bucket's CORS rules, in the order given (the first that matches a
    /// request answers it); none: cross-origin requests are refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cors: Vec<CorsRule>,
    /// The bucket's tags (S3 bucket tagging), by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The bucket's lifecycle rules (S3 lifecycle configuration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lifecycle: Vec<LifecycleRule>,
    /// The versioning state S3 reports: none until versioning is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versioning: Option<Versioning>,
    /// Set: the bucket is exported over NFS (see [`NfsExport`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs: Option<NfsExport>,
    /// The bucket's snapshots, by name (see `snapshots`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub snapshots: BTreeMap<String, Snapshot>,
    /// Set: object lock is enabled (see [`crate::lock`]), for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<crate::BucketLock>,
    /// Set: new versions are shipped to other clusters (see `replication`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<crate::Replication>,
}

/// A named, read-only view of a bucket as it was when the snapshot was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The version sequence number given out when it was made: it sees every
    /// version numbered at or below it that was the newest of its key then.
    pub seq: u64,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// A bucket's NFS export: its files are its objects (see `cairn_nfs`), mounted
/// as `/<tenant>/<bucket>`. Which clients may mount it is decided by their
/// network address alone; the uid and gid a client sends (AUTH_UNIX, which any
/// client can forge) are not trusted for access: every file shows `uid`/`gid`
/// unless set otherwise through the export, and the export is reached only by
/// the networks listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NfsExport {
    /// The client networks allowed, as CIDR (`10.0.0.0/8`, `::1/128`); none:
    /// no client may mount it.
    pub clients: Vec<String>,
    /// The owner files and directories show when none was set on them.
    pub uid: u32,
    pub gid: u32,
    /// Clients may read, never write.
    #[serde(default)]
    pub read_only: bool,
}

/// A bucket's versioning state, once configured (S3's: a bucket never goes back
/// to unversioned). See [`crate::versions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Versioning {
    /// Every write and delete makes a new version; earlier ones are kept.
    Enabled,
    /// Writes and deletes make the `null` version (replacing the earlier `null`
    /// one); versions made while enabled are kept.
    Suspended,
}

/// One lifecycle rule of a bucket: which objects (prefix, tags, size) and what
/// happens to them (expiry of the current version by age or date, abort of
/// incomplete multipart uploads). The noncurrent-version and delete-marker
/// actions are kept as given; they act on versions, which Cairn does not keep yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleRule {
    pub id: String,
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// Every one of these tags, with these values, must be on the object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_greater_than: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_less_than: Option<u64>,
    /// Current objects expire this many days after they were written...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_days: Option<u32>,
    /// ...or on this date (midnight UTC, milliseconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_date_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired_delete_marker: bool,
    /// Multipart uploads not completed this many days after they began are aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_incomplete_days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noncurrent_days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newer_noncurrent_versions: Option<u32>,
}

/// When something `days` lifecycle days after `since_ms` is due: S3 adds the
/// days and rounds up to the next day boundary (midnight UTC for real days of
/// `day_ms` = 86 400 000).
pub fn lifecycle_due(since_ms: i64, days: u32, day_ms: i64) -> i64 {
    let day_ms = day_ms.max(1);
    let at = since_ms.saturating_add(day_ms.saturating_mul(days as i64));
    at.div_euclid(day_ms)
        .saturating_add((at.rem_euclid(day_ms) != 0) as i64)
        .saturating_mul(day_ms)
}

impl LifecycleRule {
    /// Whether the rule's filter takes an object with `key`, `size` and `tags`.
    pub fn selects(&self, key: &str, size: u64, tags: &BTreeMap<String, String>) -> bool {
        key.starts_with(&self.prefix)
            && self.tags.iter().all(|(k, v)| tags.get(k) == Some(v))
            && self.size_greater_than.is_none_or(|g| size > g)
            && self.size_less_than.is_none_or(|l| size < l)
    }

    /// Whether the rule, enabled, has expired the object `key` holds as `rec`
    /// by `now_ms` (by its age in days of `day_ms`, or by its date).
    pub fn expires(&self, key: &str, rec: &ObjectRecord, now_ms: i64, day_ms: i64) -> bool {
        let by_age = self
            .expiration_days
            .is_some_and(|d| lifecycle_due(rec.modified_ms, d, day_ms) <= now_ms);
        let by_date = self.expiration_date_ms.is_some_and(|d| d <= now_ms);
        self.enabled && (by_age || by_date) && self.selects(key, rec.size, &rec.tags)
    }

    /// Whether the rule, enabled, removes noncurrent version `rec` of `key` by
    /// `now_ms`: noncurrent since `since_ms` (when the version after it was
    /// made) for the rule's days, with at least the rule's number of newer
    /// noncurrent versions kept (`newer` of them are).
    pub fn expires_noncurrent(
        &self,
        key: &str,
        rec: &ObjectRecord,
        (since_ms, newer): (i64, usize),
        now_ms: i64,
        day_ms: i64,
    ) -> bool {
        self.enabled
            && self
                .noncurrent_days
                .is_some_and(|d| lifecycle_due(since_ms, d, day_ms) <= now_ms)
            && newer >= self.newer_noncurrent_versions.unwrap_or(0) as usize
            && self.selects(key, rec.size, &rec.tags)
    }

    /// Whether the rule, enabled, removes a delete marker of `key`, made at
    /// `marker_ms`, that is the key's only version left: S3's
    /// ExpiredObjectDeleteMarker, or an expiry by days once the marker is that
    /// old (which S3 does "automatically when the delete markers are old
    /// enough"). A marker has no tags and no size: a rule filtering by them
    /// takes none.
    pub fn removes_lone_marker(&self, key: &str, marker_ms: i64, now_ms: i64, day_ms: i64) -> bool {
        let old_enough = self
            .expiration_days
            .is_some_and(|d| lifecycle_due(marker_ms, d, day_ms) <= now_ms);
        self.enabled
            && (self.expired_delete_marker || old_enough)
            && self.selects(key, 0, &BTreeMap::new())
    }

    /// Whether the rule, enabled, aborts the multipart upload `u` by `now_ms`
    /// (only a prefix may filter this action, as in S3).
    pub fn aborts(&self, u: &UploadRecord, now_ms: i64, day_ms: i64) -> bool {
        self.enabled
            && u.key.starts_with(&self.prefix)
            && self
                .abort_incomplete_days
                .is_some_and(|d| lifecycle_due(u.created_ms, d, day_ms) <= now_ms)
    }
}

/// A change to a bucket's configuration (the subresources S3 sets one at a time).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketChange {
    /// The CORS rules (none: removed).
    Cors(Vec<CorsRule>),
    /// The bucket's tags (none: removed).
    Tags(BTreeMap<String, String>),
    /// The lifecycle rules (none: removed).
    Lifecycle(Vec<LifecycleRule>),
    /// The versioning state.
    Versioning(Versioning),
    /// The NFS export (none: not exported).
    Nfs(Option<NfsExport>),
    /// Object lock enabled, with this default retention (see [`crate::lock`]).
    ObjectLock(crate::BucketLock),
    /// The replication rules (none: removed, with the backlog).
    Replication(Option<crate::Replication>),
}

/// One CORS rule of a bucket, as S3's `CORSRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Origins, each with at most one `*` wildcard.
    pub allowed_origins: Vec<String>,
    /// Of GET, PUT, POST, DELETE and HEAD.
    pub allowed_methods: Vec<String>,
    /// Headers a preflight may ask for, each with at most one `*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<String>,
    /// Response headers a browser may show the page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
}

/// A tenant's named KV pool: a keyspace of its own, reached over RESP with
/// `SELECT index` (or `AUTH key/name`), whose capacity on the drives is the
/// bucket's quota. With `s3` the keyspace is that S3 bucket of the tenant, so the
/// same values are objects there (the key's bytes, `%XX`-escaped outside
/// printable ASCII, are the object key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvPool {
    pub name: String,
    /// The database number RESP's SELECT takes (0 is the tenant's default pool).
    pub index: u32,
    /// Expiry given to a value set without one (none: values never expire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    /// When the pool's capacity is full: true, the oldest values not pinned are
    /// evicted to make room (a cache); false, the write is refused (a store).
    pub evict: bool,
    /// The most of each node's RAM tier the pool's values take (none: only the
    /// tier's own bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_bytes: Option<u64>,
    /// The nodes the pool's values are stored on (empty: any node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<u64>,
    /// When a SET is acknowledged.
    #[serde(default)]
    pub durability: KvDurability,
}

/// When a KV pool's write is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KvDurability {
    /// Once every fragment is on stable media (an S3 PUT's guarantee).
    #[default]
    Durable,
    /// Once every fragment is in the memory of its node's drive (the drive's
    /// write cache, the host's page cache), each on its own node; made durable
    /// within a fraction of a second after. A crash of a node loses only what
    /// erasure coding rebuilds; a power loss of more nodes than the parity in
    /// that window loses the newest values (a cache's bargain).
    WriteBack,
}

/// An object: its attributes and where its bytes are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    pub size: u64,
    /// The S3 ETag without quotes: hex MD5, or `md5-of-md5s-N` for multipart.
    pub etag: String,
    pub modified_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_meta: BTreeMap<String, String>,
    /// The standard headers S3 keeps and serves back (`Cache-Control`,
    /// `Content-Disposition`, `Content-Encoding`, `Content-Language`, `Expires`),
    /// by lower-case name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The flexible checksum the client sent (and Cairn verified), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
    /// The bytes, in order: one extent for a simple PUT, one per part for multipart.
    pub extents: Vec<Extent>,
    /// A multipart object's part checksums, in part order, when every part had
    /// one (served with `?partNumber=N` and by GetObjectAttributes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub part_checksums: Vec<Checksum>,
    /// The object's tags (S3 object tagging), by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Which version of its key this is: set when the write applies (so every
    /// replica sets the same), never by the writer. See [`crate::versions`].
    #[serde(default, skip_serializing_if = "VersionStamp::is_null_zero")]
    pub version: VersionStamp,
    /// The version's retention and legal hold (S3 object lock).
    #[serde(default, skip_serializing_if = "crate::ObjectLock::is_none")]
    pub lock: crate::ObjectLock,
}

/// A version's id and its place among its key's versions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionStamp {
    /// S3's version id; none for the `null` version (written while the bucket
    /// was unversioned or suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The store's version sequence when it was made (newer is greater); 0 for
    /// a version written before its bucket ever had versioning configured or
    /// a snapshot (see `snapshots`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq: u64,
    /// Numbered only for the bucket's snapshots: the bucket is unversioned, and
    /// S3 shows no version id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unversioned: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl VersionStamp {
    fn is_null_zero(&self) -> bool {
        self.id.is_none() && self.seq == 0
    }

    /// Whether S3 shows this version's id (`null` for the null version): once
    /// its bucket has versioning configured.
    pub fn has_id(&self) -> bool {
        !self.unversioned && (self.seq != 0 || self.id.is_some())
    }

    /// The id as S3 shows it: `null` for the null version.
    pub fn shown(&self) -> &str {
        self.id.as_deref().unwrap_or("null")
    }
}

/// An S3 checksum algorithm (`x-amz-checksum-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ChecksumAlgorithm {
    Crc32,
    Crc32c,
    Crc64nvme,
    Sha1,
    Sha256,
}

/// A flexible checksum as S3 returns it: the base64 digest of the whole body, or
/// for a multipart object the digest of its parts' digests (`parts` of them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    pub algorithm: ChecksumAlgorithm,
    pub value: String,
    /// Set on a composite (multipart) checksum: how many parts it covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<u32>,
}

/// A contiguous run of an object's bytes, stored under one layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    /// 96 random bits naming the extent; chunk ids are derived from it.
    pub id: u128,
    pub size: u64,
    pub layout: Layout,
    /// Set: the extent's data fragments are sealed (AES-256-GCM) under a data key
    /// of its own, kept here wrapped by its tenant's key. Absent: plaintext (a
    /// tenant without encryption, or written before Cairn encrypted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Sealed>,
}

/// How an extent's data key is kept: wrapped by the tenant key `key_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    pub key_id: u32,
    /// The wrapped data key, hex.
    pub key: String,
}

/// How an extent is protected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Layout {
    /// Whole copies of the extent, one chunk on each listed drive.
    Replicated {
        drives: Vec<u16>,
        /// CRC32C of the extent's bytes, checked on every read and scrub so a copy
        /// that is internally consistent but not the one written (misplaced, stale,
        /// forged) is never served. Absent in manifests written before Cairn kept it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sum: Option<u32>,
        /// The AES-GCM tag of the sealed copy (hex), when the extent is sealed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tag: Option<String>,
    },
    /// Stripes of `k` data shards of at most `shard` bytes plus `m` parity shards.
    Erasure {
        k: u8,
        m: u8,
        shard: u32,
        stripes: Vec<Stripe>,
    },
}

/// One stripe: how many data bytes it holds and the drive of each fragment
/// (`k` data then `m` parity; `UNPLACED` where none could be written).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stripe {
    pub len: u32,
    pub drives: Vec<u16>,
    /// CRC32C of each fragment as encoded (`k` data then `m` parity), checked on
    /// every read, repair and scrub: a fragment must match what the encoder made,
    /// not only its own record checksum on the drive. Empty in manifests written
    /// before Cairn kept them (those rely on the drive's record checksums alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sums: Vec<u32>,
    /// In a sealed extent: the AES-GCM tags of the `k` data fragments, hex,
    /// end to end (parity is computed over ciphertext and carries none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tags: String,
}

impl Stripe {
    /// The recorded checksum of fragment `frag`, when the manifest has one.
    pub fn sum(&self, frag: usize) -> Option<u32> {
        self.sums.get(frag).copied()
    }

    /// The tag of data fragment `frag` (hex), in a sealed extent.
    pub fn tag(&self, frag: usize) -> Option<&str> {
        self.tags.get(frag * 32..(frag + 1) * 32)
    }
}

/// Whether `data` is what a recorded checksum says (always, when none is recorded).
pub fn matches_sum(sum: Option<u32>, data: &[u8]) -> bool {
    sum.is_none_or(|s| crc32c::crc32c(data) == s)
}

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    pub key: String,
    pub created_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_meta: BTreeMap<String, String>,
    /// As on [`ObjectRecord`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The algorithm every part must carry a checksum of, when the upload was
    /// created with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
    /// The object's checksum is a full-object CRC (`FULL_OBJECT`, combined from
    /// the parts' CRCs) rather than S3's composite digest of digests.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full_object_checksum: bool,
    /// The completed object's tags (`x-amz-tagging` on the upload's creation).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The completed object's lock, as asked on the upload's creation.
    #[serde(default, skip_serializing_if = "crate::ObjectLock::is_none")]
    pub lock: crate::ObjectLock,
}

/// One uploaded part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    pub etag: String,
    pub modified_ms: i64,
    pub extent: Extent,
    /// The part's verified checksum, when the client sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
}

impl ObjectRecord {
    /// An object of no bytes and no attributes: the base of a file made from
    /// nothing.
    pub fn empty() -> ObjectRecord {
        ObjectRecord {
            size: 0,
            etag: String::new(),
            modified_ms: 0,
            content_type: None,
            user_meta: Default::default(),
            headers: Default::default(),
            checksum: None,
            extents: Vec::new(),
            part_checksums: Vec::new(),
            tags: Default::default(),
            version: Default::default(),
            lock: Default::default(),
        }
    }

    /// Every extent id this object references.
    pub fn extent_ids(&self) -> impl Iterator<Item = u128> + '_ {
        self.extents.iter().map(|e| e.id)
    }
}
