//! Durable object and bucket metadata for one node.
//!
//! Owns the bucket index, the object manifests (which extents, stripes and drives hold
//! an object's bytes) and multipart uploads in progress, in one redb database on the
//! node's state partition. It never touches object bytes.
//!
//! Every change is a [`Mutation`] applied by one committer thread: mutations that
//! arrive together share one write transaction and one fsync (group commit), and
//! each caller is answered only after that commit is durable. A manifest therefore
//! appears in one atomic step after all its fragments are stored: a reader never
//! sees a half-written object, and a crash before the commit leaves only orphan
//! chunks, which the collector removes at the next start.
//!
//! Checks that decide a mutation (a bucket exists, a bucket is empty, an ETag
//! matches, the parts of an upload) run inside the transaction, so two racing
//! requests can never both win.

mod admin;
mod gc;
mod identity;
mod list;
mod lock;
mod once;
mod record_cache;
mod records;
mod replication;
mod snapshots;
mod usage;
mod version_list;
mod versions;

pub use admin::{
    AdminCertRecord, AdminChange, AdminTokenRecord, BmcRecord, SshKeyRecord, AUDIT_KEEP,
};
pub use gc::GcEpoch;
pub use identity::{
    bucket_id, bucket_name, IdentityChange, KeyRecord, Role, TenantKeyRecord, TenantRecord,
    UserRecord,
};
pub use list::{After, Listing};
pub use lock::{
    BucketLock, DefaultRetention, LockChange, LockMode, LockPeriod, ObjectLock, Retention,
    MAX_RETENTION_DAYS,
};
pub use once::{Commit, Proposal, RequestId, REQUEST_WINDOW};
pub use records::*;
pub use replication::{
    Pending, Replication, ReplicationRule, ReplicationStatus, ReplicationTarget, ShipState,
    Shipped, REPLICA_OF,
};
pub use snapshots::{valid_name as valid_snapshot_name, MAX_SNAPSHOTS};
use usage::Delta;
pub use usage::{Quota, Usage};
pub use version_list::{noncurrent_ages, ManifestCursor, VersionEntry, VersionListing};
use versions::VERSIONS;
pub use versions::{seq_of, valid_id, Deleted, Version};

use md5::{Digest, Md5};
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

const BUCKETS: TableDefinition<&str, &[u8]> = TableDefinition::new("buckets");
const OBJECTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("objects");
/// (bucket, upload id) -> UploadRecord
const UPLOADS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("uploads");
/// (upload id, part number) -> PartRecord
const PARTS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("parts");
/// Records of the layers above, written in the same transactions as the mutations
/// they belong with (in a cluster: the Raft state machine's last applied log id,
/// membership and the cluster map).
pub(crate) const SYSTEM: TableDefinition<&str, &[u8]> = TableDefinition::new("system");

/// Errors of the metadata store.
// Serializable: in a cluster, a mutation's outcome travels back from the Raft
// leader to the gateway that proposed it.
#[derive(Clone, Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum MetaError {
    #[error("no such bucket: {0}")]
    NoSuchBucket(String),
    #[error("bucket already exists: {0}")]
    BucketExists(String),
    #[error("bucket is not empty: {0}")]
    BucketNotEmpty(String),
    #[error("no such key: {0}")]
    NoSuchKey(String),
    #[error("no such upload: {0}")]
    NoSuchUpload(String),
    #[error("no such version: {0}")]
    NoSuchVersion(String),
    /// Object lock keeps the version (retention or legal hold); see [`lock`].
    #[error("object lock: {0}")]
    ObjectLocked(String),
    /// The bucket's object lock state does not allow the change.
    #[error("{0}")]
    LockState(String),
    /// A lock asked of a version in a bucket without object lock.
    #[error("Bucket is missing Object Lock Configuration")]
    NoObjectLock,
    #[error("{0}")]
    InvalidLock(String),
    #[error("precondition failed")]
    PreconditionFailed,
    #[error("invalid part {0}: not uploaded or its ETag differs")]
    InvalidPart(u32),
    #[error("parts must be listed in ascending order")]
    InvalidPartOrder,
    #[error("part {part} is {size} bytes, smaller than the {min}-byte minimum")]
    EntityTooSmall { part: u32, size: u64, min: u64 },
    #[error("metadata database: {0}")]
    Db(String),
    #[error("corrupt metadata record: {0}")]
    Record(String),
    #[error("metadata committer has stopped")]
    Stopped,
    /// The request id was settled by a fence before this proposal was applied: it
    /// was not, and will never be, applied.
    #[error("the request was fenced off: it was not applied")]
    Fenced,
    /// The metadata cannot be reached with the guarantees it needs (in a cluster:
    /// no quorum, or no leader yet).
    #[error("metadata unavailable: {0}")]
    Unavailable(String),
    /// The mutation's chunks were written in collector epoch `written_in`, and the
    /// epoch has since advanced twice: the collector may have taken them. See
    /// [`gc`](crate::GcEpoch).
    #[error(
        "the write took too long: its chunks date from collector epoch {written_in}, now {epoch}"
    )]
    WriteExpired { written_in: u64, epoch: u64 },
    #[error("no such tenant: {0}")]
    NoSuchTenant(String),
    #[error("tenant already exists: {0}")]
    TenantExists(String),
    #[error("the tenant still owns bucket {0}: delete its buckets first")]
    TenantNotEmpty(String),
    #[error("no such user: {0}")]
    NoSuchUser(String),
    #[error("user already exists: {0}")]
    UserExists(String),
    #[error("no such access key: {0}")]
    NoSuchAccessKey(String),
    #[error("the access key already exists")]
    KeyExists,
    #[error("no such admin token: {0}")]
    NoSuchAdminToken(String),
    #[error("node {0:016x} has no BMC set")]
    NoSuchBmc(u64),
    #[error("no such SSH key: {0}")]
    NoSuchSshKey(String),
    #[error("no such admin certificate: {0}")]
    NoSuchAdminCert(String),
    /// The change would take a bucket or tenant past its quota.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// The change has no single-step form in a versioned bucket.
    #[error("bucket {bucket} is versioned: {why}")]
    Versioned { bucket: String, why: String },
    #[error("no such snapshot: {0}")]
    NoSuchSnapshot(String),
    #[error("snapshot already exists: {0}")]
    SnapshotExists(String),
    #[error("{0}")]
    InvalidSnapshot(String),
    /// A bucket with snapshots is not deleted: they would go with it.
    #[error("bucket {0} has snapshots: delete them first")]
    HasSnapshots(String),
    /// A node offered a master key other than the one the cluster recorded.
    #[error("the cluster's master key is {cluster}, not {offered}")]
    MasterKeyMismatch { cluster: String, offered: String },
}

/// Where mutations are decided and reads are made current: the node's own
/// committer ([`MetaStore`]), or the cluster's Raft log.
#[async_trait::async_trait]
pub trait MetaLog: Send + Sync + std::fmt::Debug {
    /// Proposes one mutation, applied at most once under its request id; returns
    /// once it is durable (in a cluster: committed by a quorum and applied here),
    /// definitely refused, or — when the answer was lost — unknown.
    async fn propose(&self, proposal: Proposal) -> Commit;
    /// Returns once local reads reflect every mutation acknowledged before the call.
    async fn barrier(&self) -> Result<(), MetaError>;
    /// Whether this node leads the log now: background work that one node does
    /// for all (the lifecycle worker) runs where this holds. A node on its own
    /// always leads.
    fn leads(&self) -> bool {
        true
    }
}

#[async_trait::async_trait]
impl MetaLog for MetaStore {
    async fn propose(&self, proposal: Proposal) -> Commit {
        match self.submit(Some(proposal.request), proposal.mutation).await {
            Ok(a) => Commit::Committed(a),
            // The committer went away with the job: it may have committed it.
            Err(MetaError::Stopped) => Commit::Unknown(MetaError::Stopped.to_string()),
            Err(e) => Commit::Rejected(e),
        }
    }
    async fn barrier(&self) -> Result<(), MetaError> {
        Ok(())
    }
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for MetaError {
            fn from(e: $t) -> Self { MetaError::Db(e.to_string()) }
        }
    )*};
}
db_err!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    std::io::Error
);

impl From<serde_json::Error> for MetaError {
    fn from(e: serde_json::Error) -> Self {
        MetaError::Record(e.to_string())
    }
}

/// A condition on the current version of a key, checked inside the transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Precondition {
    /// The current object must exist with this ETag (`*`: must exist).
    pub if_match: Option<String>,
    /// `If-None-Match: *` — the key must not exist.
    pub if_none_match_any: bool,
    /// The current object must exist with this user metadata entry (name,
    /// value): a condition on *which write* is current when the ETag (an MD5 of
    /// the bytes) cannot tell two writes of the same bytes apart — RESP's expiry
    /// deletes only the write that carried the expiry it found passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_meta: Option<(String, String)>,
    /// The current object must be this very write: an object rebuilt from an
    /// earlier one's extents (an NFS write into part of a file) may take its
    /// place only while those extents are still that object's, never after
    /// another write freed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_write: Option<WriteId>,
}

impl Precondition {
    /// No condition at all.
    pub fn is_none(&self) -> bool {
        self.if_match.is_none()
            && !self.if_none_match_any
            && self.if_meta.is_none()
            && self.if_write.is_none()
    }
}

/// One change to the metadata.
///
/// Applying a mutation is deterministic (it reads nothing but the database and its
/// own fields), so in a cluster every replica of the Raft log reaches the same
/// state and the same outcome.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Mutation {
    CreateBucket {
        name: String,
        record: BucketRecord,
    },
    DeleteBucket {
        name: String,
    },
    PutObject {
        bucket: String,
        key: String,
        record: ObjectRecord,
        cond: Precondition,
        /// The collector epoch the record's chunks were written in (see [`GcEpoch`]).
        #[serde(default)]
        written_in: Option<u64>,
    },
    DeleteObject {
        bucket: String,
        key: String,
        /// A conditional delete (`If-Match`); checked like a write's.
        #[serde(default, skip_serializing_if = "Precondition::is_none")]
        cond: Precondition,
        /// Deletes this version for good (`null` or one of ours) instead of the
        /// latest (see [`versions`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version_id: Option<String>,
        /// The time a delete marker made by this delete records (the
        /// proposer's clock, so every replica records the same).
        #[serde(default)]
        modified_ms: i64,
        /// The requester may delete a version under GOVERNANCE retention (see
        /// [`lock`]); judged at `modified_ms`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        bypass_governance: bool,
    },
    CreateUpload {
        bucket: String,
        upload_id: String,
        record: UploadRecord,
    },
    PutPart {
        bucket: String,
        upload_id: String,
        part: u32,
        record: PartRecord,
        #[serde(default)]
        written_in: Option<u64>,
    },
    CompleteUpload {
        bucket: String,
        upload_id: String,
        /// (part number, ETag) as the client listed them.
        parts: Vec<(u32, String)>,
        /// Every part but the last must be at least this large.
        min_part_size: u64,
        cond: Precondition,
        /// The completed object's modification time (chosen by the proposer, so
        /// every replica records the same).
        modified_ms: i64,
        /// The object's checksum, made by the proposer from the listed parts' (the
        /// parts' ETags, checked here, pin which bytes it covers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checksum: Option<Checksum>,
    },
    AbortUpload {
        bucket: String,
        upload_id: String,
    },
    /// Repair or rebalance moved fragments of one extent of an object. Applies only
    /// while the object still holds that extent with each fragment where the mover
    /// found it; otherwise (the object was overwritten, or another mover won) it
    /// changes nothing and reports [`MetaError::PreconditionFailed`].
    MoveFragments {
        bucket: String,
        key: String,
        extent: u128,
        moves: Vec<FragmentMove>,
        /// The collector epoch the moved fragments were written in.
        #[serde(default)]
        written_in: Option<u64>,
    },
    /// The collector moves its epoch from `from` to `from + 1`, if no one did and
    /// `min_interval_ms` passed since the last advance (`now_ms` is the proposer's
    /// clock, so every replica decides alike). See [`GcEpoch`].
    AdvanceGcEpoch {
        from: u64,
        now_ms: i64,
        min_interval_ms: i64,
    },
    /// Settles the outcome of an earlier proposal of the same request id: changes
    /// nothing, and answers with that proposal's outcome if it was applied, or
    /// [`MetaError::Fenced`] (and bars it for good) if it was not. See [`once`].
    Fence,
    /// Tenants, users and access keys (see [`identity`]).
    Identity(IdentityChange),
    /// Admin tokens and the audit table (see [`admin`]).
    Admin(AdminChange),
    /// Sets (or with an empty quota, lifts) a bucket's quota.
    SetBucketQuota {
        name: String,
        quota: Quota,
    },
    /// Moves the object at `from` to `to` in one step, its bytes untouched
    /// (an NFS rename): applies only while `from` holds the write `of`;
    /// whatever `to` held is replaced (and freed). Unversioned buckets only: in
    /// a versioned one a rename is a copy and a delete, each a version.
    RenameObject {
        bucket: String,
        from: String,
        to: String,
        of: WriteId,
    },
    /// Replaces an object's user metadata, bytes untouched (RESP's EXPIRE and
    /// PERSIST). Applies only while the key still holds the write `of` names;
    /// otherwise [`MetaError::PreconditionFailed`] (a SET meanwhile wins), or
    /// [`MetaError::NoSuchKey`].
    ReplaceObjectMeta {
        bucket: String,
        key: String,
        of: WriteId,
        user_meta: BTreeMap<String, String>,
    },
    /// Replaces an object's tags, bytes and metadata untouched (S3's
    /// Put/DeleteObjectTagging). Applies only while the key still holds the write
    /// `of` names, as [`Mutation::ReplaceObjectMeta`].
    ReplaceObjectTags {
        bucket: String,
        key: String,
        of: WriteId,
        tags: BTreeMap<String, String>,
    },
    /// Changes the retention or legal hold of version `version_id` of `key`
    /// (the current version when none); see [`lock`].
    SetObjectLock {
        bucket: String,
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version_id: Option<String>,
        change: LockChange,
        /// The requester may lift or shorten GOVERNANCE retention.
        #[serde(default)]
        bypass_governance: bool,
        /// The proposer's clock: the retention in force is judged at it.
        now_ms: i64,
    },
    /// The replication shipper's report of a batch (see [`replication`]):
    /// `done` shipped, `failed` refused (with why) and to be tried again;
    /// `bytes` shipped in `elapsed_ms`, at `now_ms` (the shipper's clock).
    ReplicationDone {
        bucket: String,
        done: Vec<u64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        failed: Vec<(u64, String)>,
        bytes: u64,
        elapsed_ms: u64,
        now_ms: i64,
    },
    /// Makes snapshot `name` of `bucket` (see [`snapshots`]).
    CreateSnapshot {
        bucket: String,
        name: String,
        /// The proposer's clock, so every replica records the same.
        created_ms: i64,
    },
    /// Deletes snapshot `name` of `bucket` and what only it kept.
    DeleteSnapshot {
        bucket: String,
        name: String,
    },
    /// Changes one part of a bucket's configuration.
    ChangeBucket {
        name: String,
        change: BucketChange,
    },
    /// A lifecycle rule's action, found due by the lifecycle worker at `now_ms`
    /// (days of `day_ms`). Checked again as it applies, against the bucket's
    /// rules and the object or upload as they are then: a rule removed or
    /// changed, a tag taken off, or a key written again since the worker looked
    /// makes it [`MetaError::PreconditionFailed`], and nothing is deleted.
    Expire {
        bucket: String,
        what: Expiry,
        now_ms: i64,
        day_ms: i64,
    },
}

/// What a lifecycle rule ends.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Expiry {
    /// The write `of` of `key`, the current object.
    Object { key: String, of: WriteId },
    /// An incomplete multipart upload.
    Upload { upload_id: String },
    /// Version `id` of `key`: a noncurrent version (NoncurrentVersionExpiration)
    /// or a delete marker left alone (ExpiredObjectDeleteMarker).
    Version { key: String, id: String },
}

/// Which write an object holds: the same bytes written twice are two writes (their
/// extents' random ids differ; an empty value has none, and its time tells).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriteId {
    pub etag: String,
    pub modified_ms: i64,
    pub extents: Vec<u128>,
}

impl WriteId {
    pub fn of(rec: &ObjectRecord) -> WriteId {
        WriteId {
            etag: rec.etag.clone(),
            modified_ms: rec.modified_ms,
            extents: rec.extents.iter().map(|e| e.id).collect(),
        }
    }
}

/// One fragment of an extent, moved from one drive to another.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FragmentMove {
    /// Stripe index (0 for a replicated extent).
    pub stripe: u32,
    /// Position in the stripe (for a replicated extent: which copy).
    pub frag: u8,
    pub from: u16,
    pub to: u16,
}

/// What an applied mutation changed.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Applied {
    /// Extents no longer referenced: their chunks may be deleted now.
    pub freed: Vec<Extent>,
    /// The object written, for PutObject and CompleteUpload (boxed: the outcome
    /// of every other mutation carries none, and travels through the log's
    /// replies).
    pub object: Option<Box<ObjectRecord>>,
    /// What a DeleteObject did to versions, in a versioned bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Deleted>,
}

/// A whole database as a Raft snapshot carries it.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Dump {
    buckets: Vec<(String, Vec<u8>)>,
    objects: Vec<(String, String, Vec<u8>)>,
    uploads: Vec<(String, String, Vec<u8>)>,
    parts: Vec<(String, u32, Vec<u8>)>,
    system: Vec<(String, Vec<u8>)>,
    /// The window of applied requests (id, order, outcome), so that a node
    /// restored from a snapshot still refuses to apply a request twice.
    #[serde(default)]
    requests: Vec<(Vec<u8>, u64, Vec<u8>)>,
    /// Tenants, users and access keys.
    #[serde(default)]
    identity: identity::IdentityDump,
    /// Admin tokens, the audit, BMCs, SSH keys, admin certificates. None in a
    /// snapshot from a version that did not carry them: then the tables are
    /// left as they are rather than emptied.
    #[serde(default)]
    admin: Option<admin::AdminDump>,
    /// Noncurrent versions and delete markers: (bucket, key, !seq, record).
    #[serde(default)]
    versions: Vec<(String, String, u64, Vec<u8>)>,
    /// Versions kept for snapshots: (bucket, key, ended, record).
    #[serde(default)]
    kept: Vec<(String, String, u64, Vec<u8>)>,
    /// Which kept versions hold each extent.
    #[serde(default)]
    held: Vec<(u128, Vec<u8>)>,
    #[serde(default)]
    replication_queue: Vec<(String, u64, Vec<u8>)>,
}

struct Job {
    request: Option<RequestId>,
    mutation: Mutation,
    reply: oneshot::Sender<Result<Applied, MetaError>>,
}

/// The node's metadata store.
#[derive(Clone)]
pub struct MetaStore {
    db: Arc<Database>,
    jobs: tokio::sync::mpsc::Sender<Job>,
    manifests: Arc<record_cache::RecordCache>,
}

impl std::fmt::Debug for MetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetaStore")
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl MetaStore {
    /// Opens (or creates) the database at `path` and starts the committer.
    pub fn open(path: &Path) -> Result<MetaStore, MetaError> {
        // Every table exists once the first (durable) commit is done, so a crash
        // while the file is new never leaves a database no start can open.
        let db = Arc::new(cairn_sysutil::open_or_create(
            path,
            |p| -> Result<Database, MetaError> {
                let db = Database::create(p)?;
                let tx = db.begin_write()?;
                tx.open_table(BUCKETS)?;
                tx.open_table(OBJECTS)?;
                tx.open_table(UPLOADS)?;
                tx.open_table(PARTS)?;
                tx.open_table(SYSTEM)?;
                tx.open_table(once::REQUESTS)?;
                tx.open_table(once::REQUEST_ORDER)?;
                tx.open_table(identity::TENANTS)?;
                tx.open_table(identity::USERS)?;
                tx.open_table(identity::KEYS)?;
                tx.commit()?;
                Ok(db)
            },
        )?);
        // Owner-only: the metadata holds wrapped keys and token hashes (redb
        // creates the file with the process's umask).
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
        // Tables added by later versions are made, and usage built once, before
        // anything reads them.
        {
            let tx = db.begin_write()?;
            tx.open_table(identity::TENANTS)?;
            tx.open_table(identity::USERS)?;
            tx.open_table(identity::KEYS)?;
            tx.open_table(identity::TENANT_KEYS)?;
            tx.open_table(usage::BUCKET_USAGE)?;
            tx.open_table(usage::TENANT_USAGE)?;
            tx.open_table(admin::ADMIN_TOKENS)?;
            tx.open_table(admin::AUDIT)?;
            tx.open_table(admin::AUDIT_STAFF)?;
            tx.open_table(admin::AUDIT_TENANTS)?;
            tx.open_table(admin::BMCS)?;
            tx.open_table(admin::SSH_KEYS)?;
            tx.open_table(admin::ADMIN_CERTS)?;
            tx.open_table(snapshots::KEPT)?;
            tx.open_table(snapshots::HELD)?;
            tx.open_table(replication::QUEUE)?;
            usage::rebuild(&tx, false)?;
            tx.commit()?;
        }
        let (jobs, rx) = tokio::sync::mpsc::channel::<Job>(4096);
        let cdb = db.clone();
        std::thread::Builder::new()
            .name("meta-commit".into())
            .spawn(move || committer(cdb, rx))
            .map_err(|e| MetaError::Db(format!("cannot start committer: {e}")))?;
        Ok(MetaStore {
            db,
            jobs,
            manifests: Arc::default(),
        })
    }

    /// Applies one mutation without a request id (no retry protection); returns
    /// once it is durable. Proposers that may retry use [`MetaLog::propose`].
    pub async fn apply(&self, mutation: Mutation) -> Result<Applied, MetaError> {
        self.submit(None, mutation).await
    }

    async fn submit(
        &self,
        request: Option<RequestId>,
        mutation: Mutation,
    ) -> Result<Applied, MetaError> {
        let (reply, rx) = oneshot::channel();
        // The queue is bounded: when the committer falls behind, callers wait here.
        self.jobs
            .send(Job {
                request,
                mutation,
                reply,
            })
            .await
            .map_err(|_| MetaError::Stopped)?;
        rx.await.map_err(|_| MetaError::Stopped)?
    }

    /// Applies a batch of mutations decided elsewhere (committed Raft log entries),
    /// together with system records, in one durable transaction; returns each
    /// mutation's outcome. The committer thread is bypassed: the caller (the Raft
    /// state machine) is the only writer in a cluster.
    pub fn apply_replicated(
        &self,
        batch: &[(Option<RequestId>, Mutation)],
        system: &[(String, Vec<u8>)],
    ) -> Result<Vec<Result<Applied, MetaError>>, MetaError> {
        let tx = self.db.begin_write()?;
        let results = batch
            .iter()
            .map(|(r, m)| once::apply_once(&tx, *r, m))
            .collect();
        {
            let mut t = tx.open_table(SYSTEM)?;
            for (k, v) in system {
                t.insert(k.as_str(), v.as_slice())?;
            }
        }
        tx.commit()?;
        Ok(results)
    }

    /// The collector's epoch as this replica has applied it.
    pub fn gc_epoch(&self) -> Result<GcEpoch, MetaError> {
        let tx = self.db.begin_read()?;
        gc::read(&tx.open_table(SYSTEM)?)
    }

    /// A system record written by [`MetaStore::apply_replicated`].
    pub fn system(&self, key: &str) -> Result<Option<Vec<u8>>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(SYSTEM)?;
        Ok(t.get(key)?.map(|v| v.value().to_vec()))
    }

    /// Every record, for a Raft snapshot; also the system records by themselves,
    /// read in the same transaction.
    #[allow(clippy::type_complexity)]
    pub fn export(&self) -> Result<(Vec<u8>, Vec<(String, Vec<u8>)>), MetaError> {
        let tx = self.db.begin_read()?;
        let mut dump = Dump::default();
        for e in tx.open_table(BUCKETS)?.iter()? {
            let (k, v) = e?;
            dump.buckets
                .push((k.value().to_string(), v.value().to_vec()));
        }
        for e in tx.open_table(OBJECTS)?.iter()? {
            let (k, v) = e?;
            let (b, key) = k.value();
            dump.objects
                .push((b.to_string(), key.to_string(), v.value().to_vec()));
        }
        for e in tx.open_table(UPLOADS)?.iter()? {
            let (k, v) = e?;
            let (b, id) = k.value();
            dump.uploads
                .push((b.to_string(), id.to_string(), v.value().to_vec()));
        }
        for e in tx.open_table(PARTS)?.iter()? {
            let (k, v) = e?;
            let (id, n) = k.value();
            dump.parts.push((id.to_string(), n, v.value().to_vec()));
        }
        for e in tx.open_table(SYSTEM)?.iter()? {
            let (k, v) = e?;
            dump.system
                .push((k.value().to_string(), v.value().to_vec()));
        }
        for e in tx.open_table(once::REQUESTS)?.iter()? {
            let (k, v) = e?;
            let (order, outcome) = v.value();
            dump.requests
                .push((k.value().to_vec(), order, outcome.to_vec()));
        }
        for e in tx.open_table(VERSIONS)?.iter()? {
            let (k, v) = e?;
            let (b, key, n) = k.value();
            dump.versions
                .push((b.to_string(), key.to_string(), n, v.value().to_vec()));
        }
        for e in tx.open_table(snapshots::KEPT)?.iter()? {
            let (k, v) = e?;
            let (b, key, n) = k.value();
            dump.kept
                .push((b.to_string(), key.to_string(), n, v.value().to_vec()));
        }
        for e in tx.open_table(snapshots::HELD)?.iter()? {
            let (k, v) = e?;
            dump.held.push((k.value(), v.value().to_vec()));
        }
        for e in tx.open_table(replication::QUEUE)?.iter()? {
            let (k, v) = e?;
            let (b, seq) = k.value();
            dump.replication_queue
                .push((b.to_string(), seq, v.value().to_vec()));
        }
        dump.identity = identity::IdentityDump::export(&tx)?;
        dump.admin = Some(admin::AdminDump::export(&tx)?);
        let bytes = serde_json::to_vec(&dump)?;
        Ok((bytes, dump.system))
    }

    /// Replaces every record with a snapshot made by [`MetaStore::export`], in one
    /// transaction.
    pub fn import(&self, snapshot: &[u8]) -> Result<(), MetaError> {
        let dump: Dump = serde_json::from_slice(snapshot)?;
        let tx = self.db.begin_write()?;
        tx.delete_table(BUCKETS)?;
        tx.delete_table(OBJECTS)?;
        tx.delete_table(UPLOADS)?;
        tx.delete_table(PARTS)?;
        tx.delete_table(VERSIONS)?;
        tx.delete_table(snapshots::KEPT)?;
        tx.delete_table(snapshots::HELD)?;
        tx.delete_table(replication::QUEUE)?;
        tx.delete_table(SYSTEM)?;
        tx.delete_table(once::REQUESTS)?;
        tx.delete_table(once::REQUEST_ORDER)?;
        {
            let mut t = tx.open_table(BUCKETS)?;
            for (k, v) in &dump.buckets {
                t.insert(k.as_str(), v.as_slice())?;
            }
            let mut t = tx.open_table(OBJECTS)?;
            for (b, k, v) in &dump.objects {
                t.insert((b.as_str(), k.as_str()), v.as_slice())?;
            }
            let mut t = tx.open_table(UPLOADS)?;
            for (b, k, v) in &dump.uploads {
                t.insert((b.as_str(), k.as_str()), v.as_slice())?;
            }
            let mut t = tx.open_table(PARTS)?;
            for (id, n, v) in &dump.parts {
                t.insert((id.as_str(), *n), v.as_slice())?;
            }
            let mut t = tx.open_table(VERSIONS)?;
            for (b, k, n, v) in &dump.versions {
                t.insert((b.as_str(), k.as_str(), *n), v.as_slice())?;
            }
            let mut t = tx.open_table(snapshots::KEPT)?;
            for (b, k, n, v) in &dump.kept {
                t.insert((b.as_str(), k.as_str(), *n), v.as_slice())?;
            }
            let mut t = tx.open_table(snapshots::HELD)?;
            for (id, v) in &dump.held {
                t.insert(*id, v.as_slice())?;
            }
            let mut t = tx.open_table(replication::QUEUE)?;
            for (b, seq, v) in &dump.replication_queue {
                t.insert((b.as_str(), *seq), v.as_slice())?;
            }
            let mut t = tx.open_table(SYSTEM)?;
            for (k, v) in &dump.system {
                t.insert(k.as_str(), v.as_slice())?;
            }
            let mut t = tx.open_table(once::REQUESTS)?;
            let mut order = tx.open_table(once::REQUEST_ORDER)?;
            for (k, o, v) in &dump.requests {
                t.insert(k.as_slice(), (*o, v.as_slice()))?;
                order.insert(*o, k.as_slice())?;
            }
        }
        dump.identity.import(&tx)?;
        if let Some(a) = &dump.admin {
            a.import(&tx)?;
        }
        usage::rebuild(&tx, true)?;
        tx.commit()?;
        Ok(())
    }

    /// Every object manifest, current objects, noncurrent versions and
    /// versions kept for snapshots alike, for the repair scanner (a consistent
    /// snapshot).
    pub fn all_objects(&self) -> Result<Vec<(String, String, ObjectRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for e in tx.open_table(OBJECTS)?.iter()? {
            let (k, v) = e?;
            let (b, key) = k.value();
            out.push((
                b.to_string(),
                key.to_string(),
                serde_json::from_slice(v.value())?,
            ));
        }
        for e in tx.open_table(VERSIONS)?.iter()? {
            let (k, v) = e?;
            let (b, key, _) = k.value();
            if let Version::Object(o) = serde_json::from_slice(v.value())? {
                out.push((b.to_string(), key.to_string(), *o));
            }
        }
        snapshots::each_kept_object(&tx, |b, key, o| {
            out.push((b.to_string(), key.to_string(), o));
        })?;
        Ok(out)
    }

    pub fn bucket(&self, name: &str) -> Result<Option<BucketRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(BUCKETS)?;
        match t.get(name)? {
            Some(v) => Ok(Some(serde_json::from_slice(v.value())?)),
            None => Ok(None),
        }
    }

    pub fn buckets(&self) -> Result<Vec<(String, BucketRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(BUCKETS)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            let (k, v) = e?;
            out.push((k.value().to_string(), serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    /// The CORS rules of every bucket that has any, by S3 name, with the tenant
    /// that owns each (every tenant's bucket of a name together, see
    /// [`bucket_id`]). Only the records that hold rules are parsed.
    #[allow(clippy::type_complexity)]
    pub fn cors_by_name(&self) -> Result<HashMap<String, Vec<(u64, Vec<CorsRule>)>>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(BUCKETS)?;
        let mut out: HashMap<String, Vec<(u64, Vec<CorsRule>)>> = HashMap::new();
        for e in t.iter()? {
            let (k, v) = e?;
            // Serialised only when there are rules (`skip_serializing_if`).
            if !v.value().windows(7).any(|w| w == b"\"cors\":") {
                continue;
            }
            let b: BucketRecord = serde_json::from_slice(v.value())?;
            if !b.cors.is_empty() {
                out.entry(bucket_name(k.value()).to_string())
                    .or_default()
                    .push((b.tenant, b.cors));
            }
        }
        Ok(out)
    }

    /// Up to `limit` objects in (bucket, key) order, strictly after `after`: a walk
    /// over every object (the scrubber's) that holds one page at a time.
    #[allow(clippy::type_complexity)]
    pub fn objects_after(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String, ObjectRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(OBJECTS)?;
        let iter = match after {
            Some(a) => t.range(a..)?,
            None => t.range::<(&str, &str)>(..)?,
        };
        let mut out = Vec::new();
        for e in iter {
            let (k, v) = e?;
            let (b, key) = k.value();
            if after == Some((b, key)) {
                continue;
            }
            out.push((
                b.to_string(),
                key.to_string(),
                serde_json::from_slice(v.value())?,
            ));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    pub fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(OBJECTS)?;
        match t.get((bucket, key))? {
            Some(v) => Ok(Some(self.manifests.decode(bucket, key, v.value())?)),
            None => Ok(None),
        }
    }

    pub fn upload(&self, bucket: &str, upload_id: &str) -> Result<Option<UploadRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(UPLOADS)?;
        match t.get((bucket, upload_id))? {
            Some(v) => Ok(Some(serde_json::from_slice(v.value())?)),
            None => Ok(None),
        }
    }

    /// The uploads in progress in a bucket, by key then id.
    pub fn uploads(&self, bucket: &str) -> Result<Vec<(String, UploadRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(UPLOADS)?;
        let mut out = Vec::new();
        for e in t.range((bucket, "")..)? {
            let (k, v) = e?;
            let (b, id) = k.value();
            if b != bucket {
                break;
            }
            out.push((id.to_string(), serde_json::from_slice(v.value())?));
        }
        out.sort_by(|a: &(String, UploadRecord), b| (&a.1.key, &a.0).cmp(&(&b.1.key, &b.0)));
        Ok(out)
    }

    /// The parts of an upload, by part number.
    pub fn parts(&self, upload_id: &str) -> Result<Vec<(u32, PartRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(PARTS)?;
        read_parts(&t, upload_id)
    }

    /// Objects in the whole store.
    pub fn object_count(&self) -> Result<u64, MetaError> {
        let tx = self.db.begin_read()?;
        Ok(tx.open_table(OBJECTS)?.len()?)
    }

    /// Every extent referenced by an object, a noncurrent version, a version
    /// kept for a snapshot or a part: what the collector must keep.
    /// Calls `f` with every extent a manifest or an upload's part references, all
    /// read in one transaction (one consistent state).
    pub fn for_each_extent(&self, mut f: impl FnMut(&Extent)) -> Result<(), MetaError> {
        let tx = self.db.begin_read()?;
        for e in tx.open_table(OBJECTS)?.iter()? {
            let (_, v) = e?;
            let rec: ObjectRecord = serde_json::from_slice(v.value())?;
            rec.extents.iter().for_each(&mut f);
        }
        for e in tx.open_table(VERSIONS)?.iter()? {
            let (_, v) = e?;
            if let Version::Object(o) = serde_json::from_slice(v.value())? {
                o.extents.iter().for_each(&mut f);
            }
        }
        snapshots::each_kept_object(&tx, |_, _, o| o.extents.iter().for_each(&mut f))?;
        for e in tx.open_table(PARTS)?.iter()? {
            let (_, v) = e?;
            let rec: PartRecord = serde_json::from_slice(v.value())?;
            f(&rec.extent);
        }
        Ok(())
    }

    /// Lists a bucket's keys in byte order: see [`Listing`].
    pub fn list(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<After>,
        delimiter: Option<&str>,
        max: usize,
    ) -> Result<Listing, MetaError> {
        let tx = self.db.begin_read()?;
        if tx.open_table(BUCKETS)?.get(bucket)?.is_none() {
            return Err(MetaError::NoSuchBucket(bucket.to_string()));
        }
        let t = tx.open_table(OBJECTS)?;
        list::list(&t, bucket, prefix, after, delimiter, max)
    }
}

fn read_parts<T: ReadableTable<(&'static str, u32), &'static [u8]>>(
    t: &T,
    upload_id: &str,
) -> Result<Vec<(u32, PartRecord)>, MetaError> {
    let mut out = Vec::new();
    for e in t.range((upload_id, 0u32)..=(upload_id, u32::MAX))? {
        let (k, v) = e?;
        out.push((k.value().1, serde_json::from_slice(v.value())?));
    }
    Ok(out)
}

fn committer(db: Arc<Database>, mut rx: tokio::sync::mpsc::Receiver<Job>) {
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let (results, commit) = match db.begin_write() {
            Ok(tx) => {
                let results: Vec<_> = batch
                    .iter()
                    .map(|j| once::apply_once(&tx, j.request, &j.mutation))
                    .collect();
                (results, tx.commit().map_err(MetaError::from))
            }
            Err(e) => (Vec::new(), Err(MetaError::from(e))),
        };
        match commit {
            Ok(()) => {
                for (job, res) in batch.into_iter().zip(results) {
                    let _ = job.reply.send(res);
                }
            }
            Err(e) => {
                tracing::error!("metadata commit failed: {e}");
                for job in batch {
                    let _ = job.reply.send(Err(MetaError::Db(e.to_string())));
                }
            }
        }
    }
}

/// Aborts the uploads in progress into bucket `name`; returns their parts' extents.
fn drop_uploads(tx: &redb::WriteTransaction, name: &str) -> Result<Vec<Extent>, MetaError> {
    let mut uploads = tx.open_table(UPLOADS)?;
    let mut parts = tx.open_table(PARTS)?;
    let ids: Vec<String> = uploads
        .range((name, "")..)?
        .filter_map(|e| e.ok())
        .take_while(|(k, _)| k.value().0 == name)
        .map(|(k, _)| k.value().1.to_string())
        .collect();
    let mut freed = Vec::new();
    for id in ids {
        uploads.remove((name, id.as_str()))?;
        for (n, p) in read_parts(&parts, &id)? {
            parts.remove((id.as_str(), n))?;
            freed.push(p.extent);
        }
    }
    Ok(freed)
}

/// The most extents a tenant purge hands back for deletion at once; past it the
/// collector finds them unreferenced (the reply stays small in a cluster).
const PURGE_FREED_MAX: usize = 10_000;

/// Removes every bucket of tenant `tenant` with its objects and uploads (a
/// tenant deleted with `purge`: its key goes in the same transaction, so what
/// is left on the drives is ciphertext no key opens, collected in the
/// background). Returns the extents to delete now, when few enough.
fn purge_tenant(
    tx: &redb::WriteTransaction,
    buckets: &mut redb::Table<&str, &[u8]>,
    objects: &mut redb::Table<(&str, &str), &[u8]>,
    tenant: u64,
) -> Result<Vec<Extent>, MetaError> {
    let mut names = Vec::new();
    for e in buckets.iter()? {
        let (k, v) = e?;
        if serde_json::from_slice::<BucketRecord>(v.value())?.tenant == tenant {
            names.push(k.value().to_string());
        }
    }
    let mut freed = Vec::new();
    for name in names {
        let mut keys = Vec::new();
        for e in objects.range((name.as_str(), "")..)? {
            let (k, v) = e?;
            if k.value().0 != name {
                break;
            }
            keys.push(k.value().1.to_string());
            let rec: ObjectRecord = serde_json::from_slice(v.value())?;
            freed.extend(rec.extents);
        }
        for key in keys {
            objects.remove((name.as_str(), key.as_str()))?;
        }
        for o in versions::drop_bucket(tx, &name)? {
            freed.extend(o.extents);
        }
        // Versions kept for its snapshots: left to the collector.
        snapshots::drop_unseen(tx, None, &name, &[])?;
        replication::drop_bucket(tx, &name)?;
        freed.extend(drop_uploads(tx, &name)?);
        buckets.remove(name.as_str())?;
        usage::forget_bucket(tx, tenant, &name)?;
    }
    if freed.len() > PURGE_FREED_MAX {
        freed.clear();
    }
    Ok(freed)
}

/// Applies one mutation inside the batch's transaction. A mutation that fails its
/// checks writes nothing, so its failure does not disturb the others in the batch.
/// An object's record changed in place (its extents' places, its metadata):
/// nothing freed, usage unchanged.
fn rewrite(
    objects: &mut redb::Table<(&str, &str), &[u8]>,
    bucket: &str,
    key: &str,
    record: ObjectRecord,
) -> Result<Applied, MetaError> {
    objects.insert((bucket, key), serde_json::to_vec(&record)?.as_slice())?;
    Ok(Applied {
        freed: Vec::new(),
        object: Some(Box::new(record)),
        deleted: None,
    })
}

fn apply(tx: &redb::WriteTransaction, m: &Mutation) -> Result<Applied, MetaError> {
    let mut applied = apply_change(tx, m)?;
    // Whatever a change frees, a version kept for a snapshot may still hold.
    snapshots::spare_held(tx, &mut applied.freed)?;
    Ok(applied)
}

fn apply_change(tx: &redb::WriteTransaction, m: &Mutation) -> Result<Applied, MetaError> {
    let mut buckets = tx.open_table(BUCKETS)?;
    let mut objects = tx.open_table(OBJECTS)?;
    let need_bucket = |buckets: &redb::Table<&str, &[u8]>, b: &str| -> Result<(), MetaError> {
        match buckets.get(b)? {
            Some(_) => Ok(()),
            None => Err(MetaError::NoSuchBucket(b.to_string())),
        }
    };
    match m {
        Mutation::CreateBucket { name, record } => {
            if buckets.get(name.as_str())?.is_some() {
                return Err(MetaError::BucketExists(name.clone()));
            }
            if let Some(l) = &record.object_lock {
                lock::check_config(record, l)?;
            }
            // A KV pool's name and index are unique within its tenant: checked
            // here, in the log's order, so two creations racing cannot both win.
            if let Some(kv) = &record.kv {
                for e in buckets.iter()? {
                    let (_, v) = e?;
                    let other: BucketRecord = serde_json::from_slice(v.value())?;
                    let clash = other.tenant == record.tenant
                        && other
                            .kv
                            .is_some_and(|o| o.name == kv.name || o.index == kv.index);
                    if clash {
                        return Err(MetaError::BucketExists(format!(
                            "a KV pool named {} or with index {}",
                            kv.name, kv.index
                        )));
                    }
                }
            }
            buckets.insert(name.as_str(), serde_json::to_vec(record)?.as_slice())?;
            Ok(Applied::default())
        }
        Mutation::DeleteBucket { name } => {
            need_bucket(&buckets, name)?;
            let mut any = objects.range((name.as_str(), "")..)?;
            if let Some(e) = any.next() {
                if e?.0.value().0 == name.as_str() {
                    return Err(MetaError::BucketNotEmpty(name.clone()));
                }
            }
            drop(any);
            // S3: a bucket with versions left, delete markers included, is not empty.
            if versions::any_in(tx, name)? {
                return Err(MetaError::BucketNotEmpty(name.clone()));
            }
            if let Some(v) = buckets.get(name.as_str())? {
                if !serde_json::from_slice::<BucketRecord>(v.value())?
                    .snapshots
                    .is_empty()
                {
                    return Err(MetaError::HasSnapshots(name.clone()));
                }
            }
            // Uploads in progress are aborted with the bucket; their parts freed.
            let freed = drop_uploads(tx, name)?;
            let tenant = match buckets.remove(name.as_str())? {
                Some(v) => serde_json::from_slice::<BucketRecord>(v.value())?.tenant,
                None => return Err(MetaError::NoSuchBucket(name.clone())),
            };
            usage::forget_bucket(tx, tenant, name)?;
            replication::drop_bucket(tx, name)?;
            Ok(Applied {
                freed,
                object: None,
                deleted: None,
            })
        }
        Mutation::PutObject {
            bucket,
            key,
            record,
            cond,
            written_in,
        } => {
            need_bucket(&buckets, bucket)?;
            gc::check_written_in(tx, *written_in)?;
            let old = get_object(&objects, bucket, key)?;
            check(cond, old.as_ref(), key)?;
            let mut record = record.clone();
            let freed = versions::install(
                tx,
                &buckets,
                &mut objects,
                bucket,
                key,
                &mut record,
                old,
                Delta::default(),
            )?;
            Ok(Applied {
                freed,
                object: Some(Box::new(record)),
                deleted: None,
            })
        }
        Mutation::DeleteObject {
            bucket,
            key,
            cond,
            version_id,
            modified_ms,
            bypass_governance,
        } => {
            need_bucket(&buckets, bucket)?;
            if let Some(id) = version_id {
                let by = (*modified_ms, *bypass_governance);
                return versions::delete_version(
                    tx,
                    &buckets,
                    &mut objects,
                    bucket,
                    key,
                    id,
                    cond,
                    by,
                );
            }
            // Nothing to delete is a success, whatever the condition (S3: "if
            // the ETag matches or if the object doesn't exist, 204"); in a
            // versioned bucket it still makes a delete marker.
            let current = get_object(&objects, bucket, key)?;
            if let Some(c) = &current {
                check(cond, Some(c), key)?;
            }
            versions::delete_latest(
                tx,
                &buckets,
                &mut objects,
                bucket,
                key,
                current,
                *modified_ms,
            )
        }
        Mutation::CreateUpload {
            bucket,
            upload_id,
            record,
        } => {
            need_bucket(&buckets, bucket)?;
            // A lock asked of a bucket without object lock: refused now, not
            // at completion.
            if !record.lock.is_none() {
                let b = buckets.get(bucket.as_str())?.map(|v| v.value().to_vec());
                let b: BucketRecord = serde_json::from_slice(&b.unwrap_or_default())?;
                if b.object_lock.is_none() {
                    return Err(MetaError::NoObjectLock);
                }
            }
            let mut uploads = tx.open_table(UPLOADS)?;
            uploads.insert(
                (bucket.as_str(), upload_id.as_str()),
                serde_json::to_vec(record)?.as_slice(),
            )?;
            Ok(Applied::default())
        }
        Mutation::PutPart {
            bucket,
            upload_id,
            part,
            record,
            written_in,
        } => {
            need_bucket(&buckets, bucket)?;
            gc::check_written_in(tx, *written_in)?;
            let uploads = tx.open_table(UPLOADS)?;
            if uploads
                .get((bucket.as_str(), upload_id.as_str()))?
                .is_none()
            {
                return Err(MetaError::NoSuchUpload(upload_id.clone()));
            }
            let mut parts = tx.open_table(PARTS)?;
            let old: Option<PartRecord> = match parts.get((upload_id.as_str(), *part))? {
                Some(v) => Some(serde_json::from_slice(v.value())?),
                None => None,
            };
            // A part's bytes count from now: a quota bounds uploads too.
            let was = old.as_ref().map_or(0, |p| p.extent.size as i64);
            usage::account(
                tx,
                &buckets,
                bucket,
                Delta::bytes(record.extent.size as i64 - was),
            )?;
            parts.insert(
                (upload_id.as_str(), *part),
                serde_json::to_vec(record)?.as_slice(),
            )?;
            let freed = match old {
                Some(p) => unreferenced(Some(vec![p.extent]), std::slice::from_ref(&record.extent)),
                None => Vec::new(),
            };
            Ok(Applied {
                freed,
                object: None,
                deleted: None,
            })
        }
        Mutation::CompleteUpload {
            bucket,
            upload_id,
            parts: chosen,
            min_part_size,
            cond,
            modified_ms,
            checksum,
        } => {
            need_bucket(&buckets, bucket)?;
            let mut uploads = tx.open_table(UPLOADS)?;
            let upload: UploadRecord = match uploads.get((bucket.as_str(), upload_id.as_str()))? {
                Some(v) => serde_json::from_slice(v.value())?,
                None => return Err(MetaError::NoSuchUpload(upload_id.clone())),
            };
            let mut parts = tx.open_table(PARTS)?;
            let stored = read_parts(&parts, upload_id)?;
            let mut record = assemble(&upload, &stored, chosen, *min_part_size, *modified_ms)?;
            record.checksum = checksum.clone();
            let old = get_object(&objects, bucket, &upload.key)?;
            check(cond, old.as_ref(), &upload.key)?;
            // The listed parts become the object; the others are freed. Their
            // bytes were counted when stored.
            let parts_bytes: u64 = stored.iter().map(|(_, p)| p.extent.size).sum();
            let mut freed = versions::install(
                tx,
                &buckets,
                &mut objects,
                bucket,
                &upload.key,
                &mut record,
                old,
                Delta::bytes(-(parts_bytes as i64)),
            )?;
            uploads.remove((bucket.as_str(), upload_id.as_str()))?;
            let used: HashSet<u32> = chosen.iter().map(|(n, _)| *n).collect();
            for (n, p) in stored {
                parts.remove((upload_id.as_str(), n))?;
                if !used.contains(&n) {
                    freed.push(p.extent);
                }
            }
            Ok(Applied {
                freed,
                object: Some(Box::new(record)),
                deleted: None,
            })
        }
        Mutation::AbortUpload { bucket, upload_id } => {
            need_bucket(&buckets, bucket)?;
            abort_upload(tx, &buckets, bucket, upload_id)
        }
        Mutation::Expire {
            bucket,
            what,
            now_ms,
            day_ms,
        } => {
            let b: BucketRecord = match buckets.get(bucket.as_str())? {
                Some(v) => serde_json::from_slice(v.value())?,
                None => return Err(MetaError::NoSuchBucket(bucket.clone())),
            };
            match what {
                Expiry::Object { key, of } => {
                    let current = held_write(&objects, bucket, key, of)?;
                    if !b
                        .lifecycle
                        .iter()
                        .any(|r| r.expires(key, &current, *now_ms, *day_ms))
                    {
                        return Err(MetaError::PreconditionFailed);
                    }
                    // In a versioned bucket, expiry makes a delete marker, as S3's does.
                    versions::delete_latest(
                        tx,
                        &buckets,
                        &mut objects,
                        bucket,
                        key,
                        Some(current),
                        *now_ms,
                    )
                }
                Expiry::Version { key, id } => {
                    let due = {
                        let v = tx.open_table(VERSIONS)?;
                        let all: Vec<Version> =
                            version_list::versions_of(&objects, &v, bucket, key)?
                                .into_iter()
                                .map(|(v, _)| v)
                                .collect();
                        let ages = noncurrent_ages(&all);
                        let at = all.iter().position(|v| v.stamp().shown() == id);
                        match at.map(|i| (&all[i], ages[i])) {
                            Some((Version::Object(o), Some(age))) => b
                                .lifecycle
                                .iter()
                                .any(|r| r.expires_noncurrent(key, o, age, *now_ms, *day_ms)),
                            Some((Version::DeleteMarker { modified_ms, .. }, None)) => {
                                all.len() == 1
                                    && b.lifecycle.iter().any(|r| {
                                        r.removes_lone_marker(key, *modified_ms, *now_ms, *day_ms)
                                    })
                            }
                            _ => false,
                        }
                    };
                    if !due {
                        return Err(MetaError::PreconditionFailed);
                    }
                    let cond = Precondition::default();
                    // A locked version is not due, whatever the rules (the
                    // worker skips it; this judges again at the proposer's clock).
                    let by = (*now_ms, false);
                    versions::delete_version(tx, &buckets, &mut objects, bucket, key, id, &cond, by)
                }
                Expiry::Upload { upload_id } => {
                    let u = get_upload(tx, bucket, upload_id)?;
                    if !b.lifecycle.iter().any(|r| r.aborts(&u, *now_ms, *day_ms)) {
                        return Err(MetaError::PreconditionFailed);
                    }
                    abort_upload(tx, &buckets, bucket, upload_id)
                }
            }
        }
        // Without a request id there is nothing to settle.
        Mutation::Fence => Ok(Applied::default()),
        Mutation::Admin(c) => {
            admin::apply(tx, c)?;
            Ok(Applied::default())
        }
        Mutation::Identity(c) => {
            let mut freed = Vec::new();
            if let IdentityChange::DeleteTenant { id, purge: true } = c {
                // Checked first: a failed mutation writes nothing.
                if identity::tenant_exists(tx, *id)? {
                    freed = purge_tenant(tx, &mut buckets, &mut objects, *id)?;
                }
            }
            identity::apply(tx, &mut buckets, &objects, c)?;
            Ok(Applied {
                freed,
                object: None,
                deleted: None,
            })
        }
        Mutation::SetBucketQuota { name, quota } => {
            let mut b: BucketRecord = match buckets.get(name.as_str())? {
                Some(v) => serde_json::from_slice(v.value())?,
                None => return Err(MetaError::NoSuchBucket(name.clone())),
            };
            b.quota = *quota;
            buckets.insert(name.as_str(), serde_json::to_vec(&b)?.as_slice())?;
            Ok(Applied::default())
        }
        Mutation::AdvanceGcEpoch {
            from,
            now_ms,
            min_interval_ms,
        } => gc::advance(tx, *from, *now_ms, *min_interval_ms),
        Mutation::RenameObject {
            bucket,
            from,
            to,
            of,
        } => {
            need_bucket(&buckets, bucket)?;
            versions::rename(tx, &buckets, &mut objects, bucket, (from, to), of)
        }
        Mutation::ReplaceObjectMeta {
            bucket,
            key,
            of,
            user_meta,
        } => {
            need_bucket(&buckets, bucket)?;
            // Same size, same count: usage and quotas are untouched.
            let record = ObjectRecord {
                user_meta: user_meta.clone(),
                ..held_write(&objects, bucket, key, of)?
            };
            rewrite(&mut objects, bucket, key, record)
        }
        Mutation::ReplaceObjectTags {
            bucket,
            key,
            of,
            tags,
        } => {
            need_bucket(&buckets, bucket)?;
            let record = ObjectRecord {
                tags: tags.clone(),
                ..held_write(&objects, bucket, key, of)?
            };
            rewrite(&mut objects, bucket, key, record)
        }
        Mutation::SetObjectLock {
            bucket,
            key,
            version_id,
            change,
            bypass_governance,
            now_ms,
        } => lock::set(
            tx,
            &buckets,
            &mut objects,
            (bucket, key),
            version_id.as_deref(),
            change,
            (*now_ms, *bypass_governance),
        ),
        Mutation::ReplicationDone {
            bucket,
            done,
            failed,
            bytes,
            elapsed_ms,
            now_ms,
        } => replication::done(tx, bucket, done, failed, (*bytes, *elapsed_ms, *now_ms)),
        Mutation::CreateSnapshot {
            bucket,
            name,
            created_ms,
        } => snapshots::create(tx, &mut buckets, bucket, name, *created_ms),
        Mutation::DeleteSnapshot { bucket, name } => {
            snapshots::delete(tx, &mut buckets, &objects, bucket, name)
        }
        Mutation::ChangeBucket { name, change } => {
            let mut b: BucketRecord = match buckets.get(name.as_str())? {
                Some(v) => serde_json::from_slice(v.value())?,
                None => return Err(MetaError::NoSuchBucket(name.clone())),
            };
            match change {
                BucketChange::Cors(rules) => b.cors = rules.clone(),
                BucketChange::Tags(tags) => b.tags = tags.clone(),
                BucketChange::Lifecycle(rules) => b.lifecycle = rules.clone(),
                BucketChange::Versioning(v) => {
                    if b.object_lock.is_some() && *v != Versioning::Enabled {
                        return Err(MetaError::LockState(
                            "versioning cannot be suspended on a bucket with object lock".into(),
                        ));
                    }
                    if b.replication.is_some() && *v != Versioning::Enabled {
                        return Err(MetaError::LockState(
                            "versioning cannot be suspended while the bucket replicates".into(),
                        ));
                    }
                    b.versioning = Some(*v)
                }
                BucketChange::Nfs(e) => b.nfs = e.clone(),
                BucketChange::ObjectLock(l) => {
                    lock::check_config(&b, l)?;
                    b.object_lock = Some(*l)
                }
                BucketChange::Replication(r) => {
                    b.replication = replication::configure(tx, &b, r)?;
                    if b.replication.is_none() {
                        replication::drop_bucket(tx, name)?;
                    }
                }
            }
            buckets.insert(name.as_str(), serde_json::to_vec(&b)?.as_slice())?;
            Ok(Applied::default())
        }
        Mutation::MoveFragments {
            bucket,
            key,
            extent,
            moves,
            written_in,
        } => {
            gc::check_written_in(tx, *written_in)?;
            // Versions kept for snapshots that share the extent move with it.
            let kept = snapshots::move_fragments(tx, *extent, moves)?;
            let mut versions = tx.open_table(VERSIONS)?;
            // The current object, or else the noncurrent version, that holds the extent.
            let (mut record, noncurrent) = match get_object(&objects, bucket, key)? {
                Some(r) if r.extents.iter().any(|e| e.id == *extent) => (r, None),
                _ => match versions::holding_extent(&versions, bucket, key, *extent)? {
                    Some((k, r)) => (r, Some(k)),
                    None if kept => return Ok(Applied::default()),
                    None => return Err(MetaError::PreconditionFailed),
                },
            };
            let Some(ext) = record.extents.iter_mut().find(|e| e.id == *extent) else {
                return Err(MetaError::PreconditionFailed);
            };
            match move_in_extent(ext, moves) {
                Ok(()) => {}
                // The kept versions moved, the live one had moved already.
                Err(_) if kept => return Ok(Applied::default()),
                Err(e) => return Err(e),
            }
            if let Some(k) = noncurrent {
                let v = serde_json::to_vec(&Version::Object(Box::new(record)))?;
                versions.insert((bucket.as_str(), key.as_str(), k), v.as_slice())?;
                return Ok(Applied::default());
            }
            rewrite(&mut objects, bucket, key, record)
        }
    }
}

/// Moves fragments of one extent as a repair's moves say, each only from where
/// the mover found it.
pub(crate) fn move_in_extent(ext: &mut Extent, moves: &[FragmentMove]) -> Result<(), MetaError> {
    for mv in moves {
        let slot = match &mut ext.layout {
            // A copy added to an under-replicated extent.
            Layout::Replicated { drives, .. }
                if mv.stripe == 0 && mv.from == UNPLACED && mv.frag as usize == drives.len() =>
            {
                drives.push(UNPLACED);
                drives.last_mut()
            }
            Layout::Replicated { drives, .. } if mv.stripe == 0 => drives.get_mut(mv.frag as usize),
            Layout::Replicated { .. } => None,
            Layout::Erasure { stripes, .. } => stripes
                .get_mut(mv.stripe as usize)
                .and_then(|s| s.drives.get_mut(mv.frag as usize)),
        };
        match slot {
            Some(d) if *d == mv.from => *d = mv.to,
            _ => return Err(MetaError::PreconditionFailed),
        }
    }
    Ok(())
}

/// The extents of `old` that `new` does not keep: what a replacement frees. Never
/// the new record's own extents, even when `old` is the same record applied again.
pub(crate) fn unreferenced(old: Option<Vec<Extent>>, new: &[Extent]) -> Vec<Extent> {
    let keep: HashSet<u128> = new.iter().map(|e| e.id).collect();
    old.unwrap_or_default()
        .into_iter()
        .filter(|e| !keep.contains(&e.id))
        .collect()
}

fn get_upload(
    tx: &redb::WriteTransaction,
    bucket: &str,
    upload_id: &str,
) -> Result<UploadRecord, MetaError> {
    let uploads = tx.open_table(UPLOADS)?;
    let v = uploads.get((bucket, upload_id))?;
    match v {
        Some(v) => Ok(serde_json::from_slice(v.value())?),
        None => Err(MetaError::NoSuchUpload(upload_id.to_string())),
    }
}

/// Ends an upload and frees its parts.
fn abort_upload(
    tx: &redb::WriteTransaction,
    buckets: &redb::Table<&str, &[u8]>,
    bucket: &str,
    upload_id: &str,
) -> Result<Applied, MetaError> {
    let mut uploads = tx.open_table(UPLOADS)?;
    if uploads.remove((bucket, upload_id))?.is_none() {
        return Err(MetaError::NoSuchUpload(upload_id.to_string()));
    }
    let mut parts = tx.open_table(PARTS)?;
    let mut freed = Vec::new();
    for (n, p) in read_parts(&parts, upload_id)? {
        parts.remove((upload_id, n))?;
        freed.push(p.extent);
    }
    let held: u64 = freed.iter().map(|e| e.size).sum();
    usage::account(tx, buckets, bucket, Delta::bytes(-(held as i64)))?;
    Ok(Applied {
        freed,
        object: None,
        deleted: None,
    })
}

/// The object of `key` if it is still the write `of` names: NoSuchKey if there
/// is none, PreconditionFailed if another write replaced it.
pub(crate) fn held_write(
    t: &redb::Table<(&str, &str), &[u8]>,
    bucket: &str,
    key: &str,
    of: &WriteId,
) -> Result<ObjectRecord, MetaError> {
    match get_object(t, bucket, key)? {
        None => Err(MetaError::NoSuchKey(key.to_string())),
        Some(rec) if WriteId::of(&rec) != *of => Err(MetaError::PreconditionFailed),
        Some(rec) => Ok(rec),
    }
}

pub(crate) fn get_object(
    t: &redb::Table<(&str, &str), &[u8]>,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectRecord>, MetaError> {
    match t.get((bucket, key))? {
        Some(v) => Ok(Some(serde_json::from_slice(v.value())?)),
        None => Ok(None),
    }
}

/// A write's conditions against the current version. If-Match on a key with no
/// object is S3's 404 NoSuchKey, not a failed precondition.
pub(crate) fn check(
    cond: &Precondition,
    current: Option<&ObjectRecord>,
    key: &str,
) -> Result<(), MetaError> {
    if cond.if_none_match_any && current.is_some() {
        return Err(MetaError::PreconditionFailed);
    }
    if let Some(want) = &cond.if_match {
        match current {
            None => return Err(MetaError::NoSuchKey(key.to_string())),
            Some(cur) if want != "*" && want.trim_matches('"') != cur.etag => {
                return Err(MetaError::PreconditionFailed)
            }
            Some(_) => {}
        }
    }
    if let Some((name, value)) = &cond.if_meta {
        match current {
            None => return Err(MetaError::NoSuchKey(key.to_string())),
            Some(cur) if cur.user_meta.get(name) != Some(value) => {
                return Err(MetaError::PreconditionFailed)
            }
            Some(_) => {}
        }
    }
    if let Some(want) = &cond.if_write {
        match current {
            None => return Err(MetaError::NoSuchKey(key.to_string())),
            Some(cur) if WriteId::of(cur) != *want => return Err(MetaError::PreconditionFailed),
            Some(_) => {}
        }
    }
    Ok(())
}

/// Builds the object of a completed multipart upload from the parts the client
/// chose, checking them as S3 does. The ETag is S3's: the MD5 of the parts' binary
/// MD5s, then `-` and the number of parts.
fn assemble(
    upload: &UploadRecord,
    stored: &[(u32, PartRecord)],
    chosen: &[(u32, String)],
    min_part_size: u64,
    modified_ms: i64,
) -> Result<ObjectRecord, MetaError> {
    let mut md5 = Md5::new();
    let mut extents = Vec::with_capacity(chosen.len());
    let mut part_checksums = Vec::with_capacity(chosen.len());
    let mut size = 0u64;
    if chosen.windows(2).any(|w| w[1].0 <= w[0].0) {
        return Err(MetaError::InvalidPartOrder);
    }
    for (i, (n, etag)) in chosen.iter().enumerate() {
        let part = stored
            .iter()
            .find(|(m, _)| m == n)
            .map(|(_, p)| p)
            .filter(|p| p.etag == etag.trim_matches('"'))
            .ok_or(MetaError::InvalidPart(*n))?;
        if i + 1 < chosen.len() && part.extent.size < min_part_size {
            return Err(MetaError::EntityTooSmall {
                part: *n,
                size: part.extent.size,
                min: min_part_size,
            });
        }
        let raw = hex::decode(&part.etag).map_err(|_| MetaError::InvalidPart(*n))?;
        md5.update(&raw);
        size += part.extent.size;
        extents.push(part.extent.clone());
        part_checksums.push(part.checksum.clone());
    }
    if chosen.is_empty() {
        return Err(MetaError::InvalidPart(0));
    }
    Ok(ObjectRecord {
        size,
        etag: format!("{}-{}", hex::encode(md5.finalize()), chosen.len()),
        modified_ms,
        content_type: upload.content_type.clone(),
        user_meta: upload.user_meta.clone(),
        headers: upload.headers.clone(),
        tags: upload.tags.clone(),
        version: Default::default(),
        lock: upload.lock,
        checksum: None,
        extents,
        // Kept only when every part has one: a partial list would misnumber them.
        part_checksums: part_checksums
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod lock_tests;
#[cfg(test)]
mod replication_tests;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod version_tests;
