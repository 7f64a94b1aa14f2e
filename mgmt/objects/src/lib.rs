//! Objects over the chunk service.
//!
//! This crate owns the mapping from an object's bytes to chunks on drives: cutting a
//! body into stripes, erasure coding them (or replicating small objects), placing
//! fragments on distinct drives, reading them back with on-the-fly reconstruction
//! when fragments are missing or corrupt, and rewriting the bad ones. It commits
//! manifests through `cairn-meta` only after every fragment is durable, and it
//! never speaks HTTP: the S3 front end (and later the KV front end) sit above it.
//!
//! Ordering rule that keeps crashes harmless: fragments first, then the manifest
//! commit, then (in the background) deletion of what the commit freed. A crash at
//! any point leaves either the old object or the new one, plus at worst orphan
//! chunks that [`ObjectStore::collect_garbage`] removes at the next start.
//!
//! What it reports of its background work (the scrubber's status, the collector's
//! rounds, protection counts) is in the admin API's own types (`cairn-adminapi`),
//! so mgmtd serves them as they are.

mod bulk;
mod commit;
mod fabric;
mod files;
mod gc;
mod health;
mod lifecycle;
mod pins;
mod placement;
mod ram;
mod read;
mod repair;
mod replication;
mod scrub;
mod sealing;
mod snapshots;
mod versions;
mod write;

pub use fabric::{Fabric, Route};
pub use gc::GcConfig;
pub use health::DriveHealth;
pub use lifecycle::LifecyclePass;
pub use placement::{place, Candidates, Landing};
pub use ram::{GroupFigures, RamCounters, RamTier};
pub use repair::{repairer, FragmentState, RepairPass};
pub use scrub::{ScrubConfig, Scrubber};
pub use sealing::new_tenant_key;
pub use snapshots::{in_snapshot_dir, snapshot_key, SNAPSHOT_DIR};

use bytes::Bytes;
use cairn_chunkproto::{DriveReport, ProtoError, Request};
use cairn_erasure::Codec;
use cairn_meta::{
    bucket_id, After, Applied, BucketRecord, Checksum, ChecksumAlgorithm, Extent, Listing,
    MetaError, MetaLog, MetaStore, Mutation, ObjectRecord, PartRecord, Precondition, UploadRecord,
};
use cairn_qos::Qos;
use cairn_types::ChunkId;
use futures::stream::{BoxStream, StreamExt};
use futures::Stream;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// S3's limits, kept here because every front end must honour them.
pub const MAX_OBJECT_SIZE: u64 = 5 << 40;
pub const MAX_PART_SIZE: u64 = 5 << 30;
pub const MIN_PART_SIZE: u64 = 5 << 20;
pub const MAX_PART_NUMBER: u32 = 10_000;

/// Errors of the object layer.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("access denied")]
    AccessDenied,
    #[error("data unavailable: {0}")]
    Unavailable(String),
    /// Too few good fragments or copies to return the bytes: lost to damage
    /// beyond the redundancy, or on drives that are down.
    #[error("data unreadable: {0}")]
    Unreadable(String),
    #[error("the request body ended before its declared length ({got} of {want} bytes)")]
    IncompleteBody { got: u64, want: u64 },
    #[error("the request body is longer than its declared length of {0} bytes")]
    BodyTooLong(u64),
    #[error("reading the request body failed: {0}")]
    Body(String),
    #[error("object of {size} bytes exceeds the {max}-byte limit")]
    TooLarge { size: u64, max: u64 },
    #[error("invalid part number {0} (1..=10000)")]
    InvalidPartNumber(u32),
    #[error("chunk service: {0}")]
    Chunk(#[from] ProtoError),
    #[error("erasure coding: {0}")]
    Erasure(#[from] cairn_erasure::ErasureError),
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The metadata log lost the answer and it could not be settled in time: the
    /// write may or may not have been committed (it is settled in the background).
    #[error("the outcome of the commit is unknown")]
    OutcomeUnknown,
    /// The write was definitely not committed (its request was fenced off).
    #[error("the write was not committed")]
    NotCommitted,
    /// A tenant's key is missing, wrong or gone, or sealing failed.
    #[error("encryption: {0}")]
    Sealing(String),
    /// Drives refused the data for want of space (before their delete reserve).
    #[error("not enough free space on the drives to store the data")]
    InsufficientStorage,
}

/// How objects are protected and cut.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Drives behind the chunk service, indices 0..drives.
    pub drives: u16,
    /// Erasure code for large objects: k data + m parity fragments per stripe.
    pub ec: (u8, u8),
    /// Copies of a small object.
    pub replicas: u8,
    /// Objects up to this size are replicated instead of erasure coded.
    pub small_object: usize,
    /// Largest fragment of a stripe.
    pub shard_size: usize,
    /// Stripes written concurrently by one PUT; bounds its memory to about
    /// `stripes_in_flight * (k+m) * shard_size`.
    pub stripes_in_flight: usize,
    /// Stripes read ahead by one GET.
    pub read_ahead: usize,
    /// How long freed extents are kept for reads already in progress.
    pub free_grace: std::time::Duration,
    /// Multipart uploads older than this are aborted and their parts freed
    /// (`None`: kept until the client completes or aborts them).
    pub abandoned_upload_age: Option<std::time::Duration>,
    /// How often the lifecycle worker runs, and how long a lifecycle rule's day
    /// is (a day; shorter only to test rules in seconds).
    pub lifecycle_every: std::time::Duration,
    pub lifecycle_day: std::time::Duration,
    /// The scrubber's rate and schedule.
    pub scrub: ScrubConfig,
    /// The collector's schedule and pace.
    pub gc: GcConfig,
    /// Whether the root tenant's new data is sealed (tenants choose their own
    /// at creation). On by default; off for a node whose drives are protected
    /// otherwise, or for tests that look for plaintext on the drives.
    pub seal_root: bool,
    /// Units of large data work (a stripe written or read) run at once while
    /// more than one tenant has work, shared between them by weight; small
    /// work shares a larger pool of its own (see `cairn_qos`); 0: no fair
    /// sharing.
    pub fair_slots: usize,
    /// Bytes of the RAM tier (see [`RamTier`]); 0 turns it off.
    pub ram_bytes: u64,
}

impl StoreConfig {
    /// The protection a node with `drives` drives gets by default: one fragment per
    /// drive, two parity fragments from four drives up, three from eight.
    pub fn for_drives(drives: u16) -> StoreConfig {
        let ec = default_ec(drives);
        StoreConfig {
            drives,
            ec,
            replicas: drives.min(3) as u8,
            small_object: 128 << 10,
            shard_size: 1 << 20,
            stripes_in_flight: 4,
            read_ahead: 2,
            free_grace: std::time::Duration::from_secs(30),
            // MinIO's default for stale uploads; S3 itself keeps them until a
            // lifecycle rule says otherwise.
            abandoned_upload_age: Some(std::time::Duration::from_secs(24 * 3600)),
            lifecycle_every: std::time::Duration::from_secs(3600),
            lifecycle_day: std::time::Duration::from_secs(24 * 3600),
            scrub: ScrubConfig::default(),
            gc: GcConfig::default(),
            seal_root: true,
            // Measured (bench/qos.sh, 2 cores, docs/benchmarks.md): with
            // small work in a pool of its own, one large slot keeps a small
            // tenant's p99 beside a large one at 2-3x its p99 alone, two at
            // 6-10x, for about 30% more of the large tenant's throughput while
            // both are active. A tenant alone is never held.
            fair_slots: 1,
            ram_bytes: 0,
        }
    }

    /// Checks the settings against the drive count.
    pub fn validate(&self) -> Result<(), ObjectError> {
        let (k, m) = self.ec;
        if k == 0 {
            return Err(ObjectError::Config("k must be at least 1".into()));
        }
        if self.drives == 0 {
            // In a cluster the drives come from the map: each write checks that
            // enough failure domains are up.
            return Ok(());
        }
        if (k as u16 + m as u16) > self.drives {
            return Err(ObjectError::Config(format!(
                "{k}+{m} needs {} drives, the node has {}",
                k as u16 + m as u16,
                self.drives
            )));
        }
        if self.replicas == 0 || self.replicas as u16 > self.drives {
            return Err(ObjectError::Config(format!(
                "{} replicas on {} drives",
                self.replicas, self.drives
            )));
        }
        if self.shard_size == 0 || self.shard_size > 8 << 20 {
            return Err(ObjectError::Config("shard size must be 1 B..8 MiB".into()));
        }
        Ok(())
    }
}

/// The default erasure code for a drive count.
pub fn default_ec(drives: u16) -> (u8, u8) {
    match drives {
        0 | 1 => (1, 0),
        2 => (1, 1),
        3 => (2, 1),
        4..=7 => ((drives - 2).min(8) as u8, 2),
        _ => ((drives - 3).min(8) as u8, 3),
    }
}

/// Counters an operator watches.
#[derive(Debug, Default)]
pub struct Counters {
    /// Reads that had to reconstruct from parity or another copy.
    pub degraded_reads: AtomicU64,
    /// Fragments or copies found bad when read: a failed record checksum on the
    /// drive, a wrong length, or bytes that do not match the manifest's checksum.
    pub bad_fragments: AtomicU64,
    /// Fragments rewritten after a bad read, and verified by the datapath's checksum.
    pub repaired_fragments: AtomicU64,
    /// Reads that failed for want of enough good fragments.
    pub unreadable: AtomicU64,
    /// Orphan chunks removed by the collector.
    pub collected_chunks: AtomicU64,
    /// Multipart uploads aborted for being older than the configured age.
    pub aborted_uploads: AtomicU64,
    /// Client reads and writes started (the scrubber slows down while it moves).
    pub foreground: AtomicU64,
    /// Objects deleted and uploads aborted by lifecycle rules, the worker's
    /// passes, and when the last one ran (ms since the epoch; 0: none yet).
    pub lifecycle_expired: AtomicU64,
    pub lifecycle_aborted: AtomicU64,
    pub lifecycle_passes: AtomicU64,
    pub lifecycle_last_pass_ms: AtomicU64,
}

/// User-visible attributes of an object, set at PUT.
#[derive(Clone, Debug, Default)]
pub struct ObjectAttrs {
    pub content_type: Option<String>,
    pub user_meta: BTreeMap<String, String>,
    /// Standard headers kept with the object (see [`ObjectRecord::headers`]).
    pub headers: BTreeMap<String, String>,
    /// The object's tags (S3 object tagging).
    pub tags: BTreeMap<String, String>,
    /// The version's retention and legal hold (S3 object lock), as asked.
    pub lock: cairn_meta::ObjectLock,
    /// Filled by the body's verifier once the body has been read to its end and
    /// its checksum matched; read when the object is committed.
    pub checksum: ChecksumSlot,
    pub etag: Etag,
}

/// What an object's ETag is made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Etag {
    /// The hex MD5 of the bytes, as S3 defines a single PUT's.
    #[default]
    Md5,
    /// The write's own id, in the multipart form (`<hex>-1`) so S3 clients do
    /// not take it for an MD5 to check: for front ends whose clients never see
    /// an ETag (RESP), which then skip MD5, the costliest pass of a write (a
    /// serial ~0.5 GB/s per value).
    Write,
}

/// A multipart upload checked to exist for its key ([`ObjectStore::upload`]).
#[derive(Clone, Debug)]
pub struct Upload {
    bucket: String,
    id: String,
    pub record: UploadRecord,
}

/// Where a body's verifier leaves the checksum it checked (a trailer's value is
/// only known at the body's end, after the attributes were handed over).
pub type ChecksumSlot = Arc<std::sync::OnceLock<Checksum>>;

/// What a stored body became.
#[derive(Clone, Debug)]
pub struct Written {
    pub extent: Extent,
    /// Hex MD5 of the bytes, when it was asked for.
    pub md5: Option<String>,
    /// The collector epoch when the first chunk was written: the commit carries it
    /// (see [`cairn_meta::GcEpoch`]).
    pub written_in: u64,
}

/// A summary for `nodectl status`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StoreStatus {
    pub objects: u64,
    pub buckets: u64,
    pub ec: String,
    pub replicas: u8,
    pub degraded_reads: u64,
    pub bad_fragments: u64,
    pub repaired_fragments: u64,
    pub unreadable: u64,
    pub collected_chunks: u64,
    pub aborted_uploads: u64,
}

/// The node's object store.
pub struct ObjectStore {
    /// Local reads (made current by `log.barrier()` first).
    meta: MetaStore,
    /// Where mutations are decided: this node's committer, or the cluster's log.
    log: Arc<dyn MetaLog>,
    chunks: Fabric,
    cfg: StoreConfig,
    health: Arc<DriveHealth>,
    codecs: Arc<Codecs>,
    counters: Arc<Counters>,
    scrub: Scrubber,
    gc: gc::Collector,
    readers: pins::Readers,
    keyring: sealing::Keyring,
    qos: Qos,
    ram: Arc<RamTier>,
}

/// Codecs by (k, m), built once: building one inverts nothing but still allocates
/// tables, and every stripe of every object would otherwise pay for it.
#[derive(Default)]
pub(crate) struct Codecs(Mutex<HashMap<(u8, u8), Arc<Codec>>>);

impl Codecs {
    pub(crate) fn get(&self, k: u8, m: u8) -> Result<Arc<Codec>, ObjectError> {
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(codec) = c.get(&(k, m)) {
            return Ok(codec.clone());
        }
        let codec = Arc::new(Codec::new(k as usize, m as usize)?);
        c.insert((k, m), codec.clone());
        Ok(codec)
    }
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStore")
            .field("cfg", &self.cfg)
            .finish()
    }
}

/// The chunk id of fragment `frag` of stripe `stripe` of an extent: the extent's 96
/// bits, then 24 bits of stripe and 8 of fragment. A replica uses fragment 0 on
/// each of its drives (ids are unique per drive, not per node).
pub fn chunk_id(extent: u128, stripe: u32, frag: u8) -> ChunkId {
    ChunkId::from_u128((extent << 32) | ((stripe as u128 & 0xff_ffff) << 8) | frag as u128)
}

/// The extent a chunk id belongs to.
pub fn extent_of(id: ChunkId) -> u128 {
    id.as_u128() >> 32
}

impl ObjectStore {
    pub fn new(
        meta: MetaStore,
        log: Arc<dyn MetaLog>,
        chunks: Fabric,
        cfg: StoreConfig,
    ) -> Result<Arc<ObjectStore>, ObjectError> {
        cfg.validate()?;
        let health = Arc::new(DriveHealth::new(cfg.drives));
        let limits = meta.clone();
        let qos = Qos::new(
            cfg.fair_slots,
            Arc::new(move |tenant| match limits.tenant(tenant) {
                Ok(t) => t.map(|t| t.qos).unwrap_or_default(),
                Err(e) => {
                    tracing::warn!("tenant {tenant:016x}'s limits unread: {e}");
                    Default::default()
                }
            }),
        );
        Ok(Arc::new(ObjectStore {
            meta,
            log,
            chunks,
            health,
            codecs: Arc::new(Codecs::default()),
            counters: Arc::new(Counters::default()),
            scrub: Scrubber::new(cfg.scrub),
            gc: gc::Collector::default(),
            readers: pins::Readers::default(),
            keyring: sealing::Keyring::default(),
            qos,
            ram: Arc::new(RamTier::new(cfg.ram_bytes)),
            cfg,
        }))
    }

    pub fn meta(&self) -> &MetaStore {
        &self.meta
    }

    /// How this node is shared between tenants: front ends count requests
    /// against it; the data work of reads and writes takes its slots.
    pub fn qos(&self) -> &Qos {
        &self.qos
    }

    /// The chunk fabric.
    pub fn fabric(&self) -> &Fabric {
        &self.chunks
    }

    /// The collector epoch of this replica's metadata: read before a write's first
    /// chunk and carried by its commit.
    pub(crate) fn gc_epoch(&self) -> Result<u64, ObjectError> {
        Ok(self.meta.gc_epoch()?.epoch)
    }

    /// Makes local metadata reads current (in a cluster: a read barrier).
    pub async fn sync(&self) -> Result<(), ObjectError> {
        Ok(self.log.barrier().await?)
    }

    /// Drives new data may go to (placeable in the fabric and healthy as this node
    /// last saw them), their failure domains and weights, by drive id.
    pub(crate) fn placement_view(&self) -> Candidates {
        let mut c = self.chunks.placement();
        let health = self.health.snapshot(c.ok.len());
        for (ok, h) in c.ok.iter_mut().zip(&health) {
            *ok &= *h;
        }
        c
    }

    /// Where data landing as `landing` says may go, and the shape of its
    /// stripes given the cluster's `(k, m)` (see [`placement::fit`]; copies of
    /// a replicated extent fit as `k + m` with `k = 1`). The shape fits the
    /// chosen nodes, up or not: with one of them down a write is short of a
    /// fragment like any other, and is refused below its quorum rather than
    /// written with less redundancy than the pool has. Held on one node, its
    /// drives are the failure domains.
    pub(crate) fn landing_view(&self, landing: &Landing, (k, m): (u8, u8)) -> (Candidates, u8, u8) {
        let mut c = self.placement_view();
        if landing.nodes.is_empty() {
            return (c, k, m);
        }
        let theirs = c.restrict(&landing.nodes, |d| self.chunks.route(d).map(|r| r.node));
        if c.domains_of(&theirs) < 2 {
            c.by_drive();
        }
        let (k, m) = placement::fit(k, m, c.domains_of(&theirs));
        (c, k, m)
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn health(&self) -> &Arc<DriveHealth> {
        &self.health
    }

    /// Starts the drive-health poller, the scrubber, the collector, the
    /// lifecycle worker and the reaper of abandoned uploads.
    pub fn start_background(self: &Arc<Self>) {
        health::spawn_poller(self.health.clone(), self.chunks.clone());
        tokio::spawn(self.clone().scrub_loop());
        tokio::spawn(self.clone().watch_damage());
        tokio::spawn(self.clone().gc_loop());
        tokio::spawn(self.clone().ram_sweep());
        tokio::spawn(
            self.clone()
                .lifecycle_loop(self.cfg.lifecycle_every, self.cfg.lifecycle_day),
        );
        if let Some(age) = self.cfg.abandoned_upload_age {
            let me = self.clone();
            tokio::spawn(async move {
                // Often enough that an upload outlives its age by at most a quarter
                // of it (and by at most an hour).
                let every = (age / 4).clamp(
                    std::time::Duration::from_secs(1),
                    std::time::Duration::from_secs(3600),
                );
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    if let Err(e) = me.abort_abandoned_uploads(age).await {
                        tracing::warn!("aborting abandoned uploads: {e}");
                    }
                }
            });
        }
    }

    /// Drops from the RAM tier every tenant that no longer exists: a purge is
    /// applied on every node through the metadata, and within a few seconds no
    /// node holds the purged tenant's plaintext in memory either (its manifests,
    /// the only way to reach those bytes, went with the purge itself).
    async fn ram_sweep(self: Arc<Self>) {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
        loop {
            tick.tick().await;
            for t in self.ram.tenants() {
                if t != cairn_meta::ROOT_TENANT && matches!(self.meta.tenant(t), Ok(None)) {
                    tracing::info!(tenant = %format!("{t:016x}"), "RAM tier: a purged tenant's values dropped");
                    self.ram.forget_tenant(t);
                }
            }
        }
    }

    /// Waits, at most `limit`, until every drive the map says may take data
    /// answers through the fabric; returns how many did. A node that has just
    /// joined cannot reach its peers' datapathd until they have loaded its
    /// certificate (they re-read their member list every 2 s): waiting here keeps
    /// its first S3 clients from being refused meanwhile.
    pub async fn wait_for_fabric(&self, limit: std::time::Duration) -> (usize, usize) {
        let start = tokio::time::Instant::now();
        loop {
            let want: Vec<u16> = self
                .chunks
                .placement()
                .ok
                .iter()
                .enumerate()
                .filter(|(_, ok)| **ok)
                .map(|(d, _)| d as u16)
                .collect();
            let ops = want
                .iter()
                .map(|&drive| Request::DriveInfo { drive })
                .collect();
            let answered = match self.chunks.call(ops).await {
                Ok(r) => r.iter().filter(|r| r.is_ok()).count(),
                Err(_) => 0,
            };
            if answered == want.len() || start.elapsed() >= limit {
                return (answered, want.len());
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Aborts every multipart upload created more than `age` ago and frees its
    /// parts; returns how many it aborted. In a cluster every node may run it: an
    /// upload aborted twice is refused the second time (NoSuchUpload), harmlessly.
    pub async fn abort_abandoned_uploads(
        &self,
        age: std::time::Duration,
    ) -> Result<u64, ObjectError> {
        self.sync().await?;
        let cutoff = cairn_meta::now_ms() - age.as_millis() as i64;
        let mut aborted = 0;
        for (bucket, b) in self.meta.buckets()? {
            for (upload_id, u) in self.meta.uploads(&bucket)? {
                if u.created_ms >= cutoff {
                    continue;
                }
                let m = Mutation::AbortUpload {
                    bucket: bucket.clone(),
                    upload_id: upload_id.clone(),
                };
                match self.commit(b.tenant, m, Vec::new()).await {
                    Ok(_) => {
                        aborted += 1;
                        tracing::info!(%bucket, %upload_id, key = %u.key, "aborted an upload abandoned for longer than {age:?}");
                    }
                    Err(ObjectError::Meta(MetaError::NoSuchUpload(_))) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.counters
            .aborted_uploads
            .fetch_add(aborted, Ordering::Relaxed);
        Ok(aborted)
    }

    /// Reports of every drive, fresh from the datapath.
    pub async fn drive_reports(&self) -> Result<Vec<DriveReport>, ObjectError> {
        let ops = self
            .chunks
            .drives()
            .into_iter()
            .map(|drive| Request::DriveInfo { drive })
            .collect();
        let mut out = Vec::new();
        for r in self.chunks.call(ops).await? {
            match r {
                Ok(cairn_chunkproto::Reply::DriveInfo(d)) => out.push(d),
                Ok(_) => return Err(ProtoError::Mismatch("expected DriveInfo").into()),
                Err(f) => return Err(ObjectError::Unavailable(f.to_string())),
            }
        }
        self.health.update(&out);
        Ok(out)
    }

    pub async fn status(&self) -> Result<StoreStatus, ObjectError> {
        let c = &self.counters;
        Ok(StoreStatus {
            objects: self.meta.object_count()?,
            buckets: self.meta.buckets()?.len() as u64,
            ec: format!("{}+{}", self.cfg.ec.0, self.cfg.ec.1),
            replicas: self.cfg.replicas,
            degraded_reads: c.degraded_reads.load(Ordering::Relaxed),
            bad_fragments: c.bad_fragments.load(Ordering::Relaxed),
            repaired_fragments: c.repaired_fragments.load(Ordering::Relaxed),
            unreadable: c.unreadable.load(Ordering::Relaxed),
            collected_chunks: c.collected_chunks.load(Ordering::Relaxed),
            aborted_uploads: c.aborted_uploads.load(Ordering::Relaxed),
        })
    }

    // ---- buckets ----

    /// The bucket, if the tenant may use it.
    pub async fn bucket(&self, tenant: u64, name: &str) -> Result<BucketRecord, ObjectError> {
        self.resolve(tenant, name).await.map(|(_, b)| b)
    }

    /// The tenant's bucket `name` after a read barrier: its metadata name (see
    /// [`cairn_meta::bucket_id`]) and record.
    pub(crate) async fn resolve(
        &self,
        tenant: u64,
        name: &str,
    ) -> Result<(String, BucketRecord), ObjectError> {
        self.sync().await?;
        let id = bucket_id(tenant, name);
        match self.meta.bucket(&id)? {
            None => Err(MetaError::NoSuchBucket(name.to_string()).into()),
            // Unreachable through the scoped names; kept as the last word.
            Some(b) if b.tenant != tenant => Err(ObjectError::AccessDenied),
            Some(b) => Ok((id, b)),
        }
    }

    /// Creates bucket `name` for `tenant`, in region `location` when one is named.
    pub async fn create_bucket(
        &self,
        tenant: u64,
        name: &str,
        location: Option<String>,
    ) -> Result<(), ObjectError> {
        self.create_bucket_as(
            tenant,
            name,
            BucketRecord {
                tenant,
                created_ms: cairn_meta::now_ms(),
                location,
                ..Default::default()
            },
        )
        .await
    }

    /// Creates a bucket as `record` says (a KV pool's keyspace, with its quota).
    pub async fn create_bucket_as(
        &self,
        tenant: u64,
        name: &str,
        record: BucketRecord,
    ) -> Result<(), ObjectError> {
        self.commit(
            tenant,
            Mutation::CreateBucket {
                name: bucket_id(tenant, name),
                record,
            },
            Vec::new(),
        )
        .await?;
        Ok(())
    }

    pub async fn delete_bucket(&self, tenant: u64, name: &str) -> Result<(), ObjectError> {
        let (id, _) = self.resolve(tenant, name).await?;
        self.commit(tenant, Mutation::DeleteBucket { name: id }, Vec::new())
            .await?;
        Ok(())
    }

    pub async fn list_buckets(
        &self,
        tenant: u64,
    ) -> Result<Vec<(String, BucketRecord)>, ObjectError> {
        self.sync().await?;
        Ok(self
            .meta
            .buckets()?
            .into_iter()
            .filter(|(_, b)| b.tenant == tenant)
            .map(|(id, b)| (cairn_meta::bucket_name(&id).to_string(), b))
            .collect())
    }

    pub async fn list_objects(
        &self,
        tenant: u64,
        bucket: &str,
        prefix: &str,
        after: Option<After>,
        delimiter: Option<&str>,
        max: usize,
    ) -> Result<Listing, ObjectError> {
        let (bucket, _) = self.resolve(tenant, bucket).await?;
        Ok(self.meta.list(&bucket, prefix, after, delimiter, max)?)
    }

    // ---- objects ----

    /// Stores a body and commits it as `bucket/key`; returns the new manifest.
    #[allow(clippy::too_many_arguments)]
    pub async fn put_object<S, E>(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        body: S,
        len: Option<u64>,
        attrs: ObjectAttrs,
        cond: Precondition,
    ) -> Result<ObjectRecord, ObjectError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: std::fmt::Display,
    {
        let (bucket, rec) = &self.resolve(tenant, bucket).await?;
        let md5 = attrs.etag == Etag::Md5;
        let written = self
            .write(tenant, body, len, MAX_PART_SIZE, md5, &Landing::of(rec))
            .await?;
        let etag = match written.md5 {
            Some(md5) => md5,
            None => format!("{:024x}-1", written.extent.id),
        };
        let record = ObjectRecord {
            size: written.extent.size,
            etag,
            modified_ms: cairn_meta::now_ms(),
            content_type: attrs.content_type,
            user_meta: attrs.user_meta,
            headers: attrs.headers,
            checksum: attrs.checksum.get().cloned(),
            extents: vec![written.extent],
            part_checksums: Vec::new(),
            tags: attrs.tags,
            version: Default::default(),
            lock: attrs.lock,
        };
        self.commit_object(tenant, bucket, key, record, cond, written.written_in)
            .await
    }

    async fn commit_object(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        record: ObjectRecord,
        cond: Precondition,
        written_in: u64,
    ) -> Result<ObjectRecord, ObjectError> {
        let written = record.extents.clone();
        self.commit(
            tenant,
            Mutation::PutObject {
                bucket: bucket.to_string(),
                key: key.to_string(),
                record,
                cond,
                written_in: Some(written_in),
            },
            written,
        )
        .await?
        .object
        .map(|o| *o)
        .ok_or_else(|| MetaError::Db("put returned no object".into()).into())
    }

    /// The manifest of `bucket/key`.
    pub async fn head_object(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
    ) -> Result<ObjectRecord, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        self.meta
            .object(bucket, key)?
            .ok_or_else(|| MetaError::NoSuchKey(key.to_string()).into())
    }

    /// Deletes `bucket/key` if `cond` holds (deleting a missing key succeeds,
    /// unconditionally).
    pub async fn delete_object(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        cond: Precondition,
    ) -> Result<(), ObjectError> {
        self.delete_version(tenant, bucket, key, cond, None, false)
            .await
            .map(|_| ())
    }

    /// Replaces the user metadata of the write `of` of `key`, its bytes untouched;
    /// refused (`PreconditionFailed`) when the key holds another write by then.
    pub async fn replace_meta(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        of: cairn_meta::WriteId,
        user_meta: BTreeMap<String, String>,
    ) -> Result<(), ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        self.commit(
            tenant,
            Mutation::ReplaceObjectMeta {
                bucket: bucket.to_string(),
                key: key.to_string(),
                of,
                user_meta,
            },
            Vec::new(),
        )
        .await?;
        Ok(())
    }

    /// Replaces the tags of the write `of` of `key`, its bytes and metadata
    /// untouched; refused (`PreconditionFailed`) when the key holds another write
    /// by then.
    pub async fn replace_tags(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        of: cairn_meta::WriteId,
        tags: BTreeMap<String, String>,
    ) -> Result<(), ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        self.commit(
            tenant,
            Mutation::ReplaceObjectTags {
                bucket: bucket.to_string(),
                key: key.to_string(),
                of,
                tags,
            },
            Vec::new(),
        )
        .await?;
        Ok(())
    }

    /// The bytes `start..end` of an object, verified, as a stream of buffers.
    /// Extents the RAM tier holds are served from it; the rest are fetched.
    pub fn read(
        &self,
        tenant: u64,
        rec: &ObjectRecord,
        start: u64,
        end: u64,
    ) -> BoxStream<'static, Result<Bytes, ObjectError>> {
        self.read_with(tenant, rec, start, end, None)
    }

    /// [`ObjectStore::read`], and every extent it reads whole through the
    /// datapath is brought into the RAM tier (promotion on read), counted as
    /// keyspace `group`'s (a bucket id): for values that are read again, such as
    /// a KV cache's.
    pub fn read_hot(
        &self,
        tenant: u64,
        group: &str,
        rec: &ObjectRecord,
        start: u64,
        end: u64,
    ) -> BoxStream<'static, Result<Bytes, ObjectError>> {
        self.read_with(tenant, rec, start, end, Some(Arc::from(group)))
    }

    /// Holds a value just written in the RAM tier (as keyspace `group`'s), so
    /// reading it back costs no fetch: `value` must be the whole of `rec`'s bytes
    /// (an object of one extent).
    pub fn hold(&self, tenant: u64, group: &str, rec: &ObjectRecord, value: &Bytes) {
        if let [e] = &rec.extents[..] {
            if e.size == value.len() as u64 {
                self.ram
                    .admit(tenant, &Arc::from(group), e.id, value.clone());
            }
        }
    }

    /// The node's RAM tier.
    pub fn ram(&self) -> &RamTier {
        &self.ram
    }

    fn read_with(
        &self,
        tenant: u64,
        rec: &ObjectRecord,
        start: u64,
        end: u64,
        promote: Option<Arc<str>>,
    ) -> BoxStream<'static, Result<Bytes, ObjectError>> {
        self.counters.foreground.fetch_add(1, Ordering::Relaxed);
        // The extents stay pinned while the stream lives: a free of them (an
        // overwrite or delete meanwhile) waits for this read to finish.
        let pin = self.readers.pin(rec.extent_ids());
        // Keys only for the extents the range touches (a ranged read of a large
        // multipart object opens one or two).
        let mut base = 0u64;
        let touched = rec.extents.iter().map(|e| {
            let lo = base;
            base += e.size;
            (lo < end && lo + e.size > start).then_some(e)
        });
        let keys = match self.openers(tenant, touched) {
            Ok(k) => k,
            Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
        };
        read::read_range(self.reader(tenant, promote), rec, keys, start, end)
            .map(move |b| {
                let _held = &pin;
                b
            })
            .boxed()
    }

    fn reader(&self, tenant: u64, promote: Option<Arc<str>>) -> read::Reader {
        read::Reader {
            tenant,
            chunks: self.chunks.clone(),
            health: self.health.clone(),
            counters: self.counters.clone(),
            codecs: self.codecs.clone(),
            read_ahead: self.cfg.read_ahead,
            qos: self.qos.clone(),
            ram: self.ram.clone(),
            promote,
        }
    }

    // ---- multipart ----

    pub async fn create_upload(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        attrs: ObjectAttrs,
        checksum_algorithm: Option<ChecksumAlgorithm>,
        full_object_checksum: bool,
    ) -> Result<String, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        let upload_id = format!("{:032x}", rand::random::<u128>());
        self.commit(
            tenant,
            Mutation::CreateUpload {
                bucket: bucket.to_string(),
                upload_id: upload_id.clone(),
                record: UploadRecord {
                    key: key.to_string(),
                    created_ms: cairn_meta::now_ms(),
                    content_type: attrs.content_type,
                    user_meta: attrs.user_meta,
                    headers: attrs.headers,
                    checksum_algorithm,
                    full_object_checksum,
                    tags: attrs.tags,
                    lock: attrs.lock,
                },
            },
            Vec::new(),
        )
        .await?;
        Ok(upload_id)
    }

    /// The upload, checked (after a read barrier) to exist in `bucket` for `key`.
    /// The operations on an upload take what this answers, so a request checks
    /// its upload, and waits for the barrier, once.
    pub async fn upload(
        &self,
        tenant: u64,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<Upload, ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        match self.meta.upload(bucket, upload_id)? {
            Some(record) if record.key == key => Ok(Upload {
                bucket: bucket.to_string(),
                id: upload_id.to_string(),
                record,
            }),
            _ => Err(MetaError::NoSuchUpload(upload_id.to_string()).into()),
        }
    }

    /// Stores part `part` of `upload`. The commit checks again that the upload
    /// still exists (an abort or completion meanwhile frees the part).
    pub async fn upload_part<S, E>(
        &self,
        tenant: u64,
        upload: &Upload,
        part: u32,
        body: S,
        len: Option<u64>,
        checksum: ChecksumSlot,
    ) -> Result<PartRecord, ObjectError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: std::fmt::Display,
    {
        if part == 0 || part > MAX_PART_NUMBER {
            return Err(ObjectError::InvalidPartNumber(part));
        }
        let landing = match self.meta.bucket(&upload.bucket)? {
            Some(b) => Landing::of(&b),
            None => return Err(MetaError::NoSuchBucket(upload.bucket.clone()).into()),
        };
        let written = self
            .write(tenant, body, len, MAX_PART_SIZE, true, &landing)
            .await?;
        let extent = written.extent.clone();
        let record = PartRecord {
            // A part's ETag is its MD5: the completed object's is made of them.
            etag: written.md5.unwrap_or_default(),
            modified_ms: cairn_meta::now_ms(),
            extent: written.extent,
            checksum: checksum.get().cloned(),
        };
        self.commit(
            tenant,
            Mutation::PutPart {
                bucket: upload.bucket.clone(),
                upload_id: upload.id.clone(),
                part,
                record: record.clone(),
                written_in: Some(written.written_in),
            },
            vec![extent],
        )
        .await?;
        Ok(record)
    }

    pub async fn complete_upload(
        &self,
        tenant: u64,
        upload: &Upload,
        parts: Vec<(u32, String)>,
        cond: Precondition,
        checksum: Option<Checksum>,
    ) -> Result<ObjectRecord, ObjectError> {
        let applied = self
            .commit(
                tenant,
                Mutation::CompleteUpload {
                    bucket: upload.bucket.clone(),
                    upload_id: upload.id.clone(),
                    parts,
                    min_part_size: MIN_PART_SIZE,
                    modified_ms: cairn_meta::now_ms(),
                    cond,
                    checksum,
                },
                Vec::new(),
            )
            .await?;
        applied
            .object
            .map(|o| *o)
            .ok_or_else(|| MetaError::Db("complete returned no object".into()).into())
    }

    pub async fn abort_upload(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), ObjectError> {
        let upload = self.upload(tenant, bucket, upload_id, key).await?;
        self.commit(
            tenant,
            Mutation::AbortUpload {
                // The metadata's name of the tenant's bucket, not the S3 name.
                bucket: upload.bucket,
                upload_id: upload.id,
            },
            Vec::new(),
        )
        .await?;
        Ok(())
    }

    // ---- identities ----

    /// Applies a change to the tenants, users or keys through the metadata log
    /// (replicated in a cluster).
    pub async fn change_identity(&self, c: cairn_meta::IdentityChange) -> Result<(), ObjectError> {
        // A purged tenant's extents are freed under its own id (the drives
        // check the tenant of every chunk they delete).
        let tenant = match &c {
            cairn_meta::IdentityChange::DeleteTenant { id, .. } => *id,
            _ => cairn_meta::ROOT_TENANT,
        };
        self.commit(tenant, Mutation::Identity(c), Vec::new())
            .await?;
        // Applied here too before the caller answers: a key revoked through this
        // node is refused by this node from the answer on.
        self.sync().await
    }

    /// An admin token made or revoked, or an audit entry: committed, and applied
    /// here before the caller answers (a token revoked through this node is
    /// refused by it from the answer on).
    pub async fn change_admin(&self, c: cairn_meta::AdminChange) -> Result<(), ObjectError> {
        self.commit(cairn_meta::ROOT_TENANT, Mutation::Admin(c), Vec::new())
            .await?;
        self.sync().await
    }

    /// Sets (or with an empty quota, lifts) the quota of the tenant's bucket.
    pub async fn set_bucket_quota(
        &self,
        tenant: u64,
        bucket: &str,
        quota: cairn_meta::Quota,
    ) -> Result<(), ObjectError> {
        let (name, _) = self.resolve(tenant, bucket).await?;
        self.commit(tenant, Mutation::SetBucketQuota { name, quota }, Vec::new())
            .await?;
        self.sync().await
    }

    /// Changes one part of the tenant's bucket's configuration (its CORS rules,
    /// its tags).
    pub async fn change_bucket(
        &self,
        tenant: u64,
        bucket: &str,
        change: cairn_meta::BucketChange,
    ) -> Result<(), ObjectError> {
        let (name, _) = self.resolve(tenant, bucket).await?;
        self.commit(tenant, Mutation::ChangeBucket { name, change }, Vec::new())
            .await?;
        self.sync().await
    }

    /// The CORS rules of every bucket that has any, by S3 name, with each
    /// owner, as this node's metadata has them (no read barrier): a browser's
    /// preflight carries no credentials, so it names a bucket but no tenant.
    #[allow(clippy::type_complexity)]
    pub fn cors_by_name(
        &self,
    ) -> Result<HashMap<String, Vec<(u64, Vec<cairn_meta::CorsRule>)>>, ObjectError> {
        Ok(self.meta.cors_by_name()?)
    }

    // ---- space ----

    /// Commits a mutation referencing the freshly written `written` extents and
    /// frees exactly what its outcome allows: see [`commit`].
    pub(crate) async fn commit(
        &self,
        tenant: u64,
        m: Mutation,
        written: Vec<Extent>,
    ) -> Result<Applied, ObjectError> {
        self.committer().commit(tenant, m, written).await
    }

    pub(crate) fn committer(&self) -> commit::Committer {
        commit::Committer {
            log: self.log.clone(),
            chunks: self.chunks.clone(),
            grace: self.cfg.free_grace,
            readers: self.readers.clone(),
            ram: self.ram.clone(),
        }
    }

    /// Deletes the chunks of extents no manifest references any more, after the
    /// grace period for reads in progress.
    pub fn free(&self, tenant: u64, extents: Vec<Extent>) {
        for e in &extents {
            self.ram.forget(e.id);
        }
        commit::free(
            &self.chunks,
            Some(&self.readers),
            tenant,
            extents,
            self.cfg.free_grace,
        );
    }
}
