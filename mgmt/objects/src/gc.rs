//! The collector: deletes the chunks on this node's drives that no manifest or
//! upload part references — the remains of writes that failed or whose outcome
//! was unknown, frees lost to a crash, the old copies a repair replaced — and
//! never a chunk a write still in flight is about to commit.
//!
//! Every node collects its own drives; the metadata it checks against is its own
//! replica, made current by a read barrier. What makes a delete safe is the
//! collector epoch in the metadata log (see [`cairn_meta::GcEpoch`]): a chunk is
//! deleted only when this collector saw it unreferenced, with the same version,
//! at an epoch at least two behind the one its metadata now has, so no commit can
//! reference it any more. A round:
//!
//! 1. advances the epoch through the log if the interval has passed since the
//!    last advance (one compare-and-set for the whole cluster);
//! 2. lists every chunk of its own drives with its version;
//! 3. makes its metadata current (read barrier) and notes the epoch `e`;
//! 4. checks the listed chunks against the manifests (by chunk *and* drive: a
//!    repair's loser shares its chunk id with the copy that replaced it);
//! 5. deletes, by version, the unreferenced chunks it already saw unreferenced in
//!    a round at epoch `e - 2` or older; remembers the others with `e`.
//!
//! So garbage goes two to three intervals after it was made (an hour each by
//! default). Candidates live in memory: a restart only delays their collection.
//! Deletes are paced (`rate` chunks a second) so that a collector with a backlog
//! does not crowd out clients.

use crate::{chunk_id, ObjectError, ObjectStore};
use cairn_adminapi::{GcRound, GcStatus};
use cairn_chunkproto::{ProtoError, Reply, Request};
use cairn_meta::{Commit, Layout, MetaError, Mutation, Proposal, UNPLACED};
use cairn_types::{ChunkId, ChunkVersion};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Chunks listed per request, and deleted per batch.
const PAGE: u32 = 4096;
const DELETE_BATCH: usize = 256;
/// Candidates remembered at most; past it, new garbage waits for a later round.
const MAX_CANDIDATES: usize = 4_000_000;

/// The collector's schedule and pace.
#[derive(Clone, Copy, Debug)]
pub struct GcConfig {
    /// Time between rounds, and the least time between two advances of the
    /// epoch (so also the least time a write has from its first chunk to its
    /// commit). `None`: rounds run only on demand, and still advance the epoch
    /// at most once an hour.
    pub every: Option<Duration>,
    /// Chunks deleted per second at most.
    pub rate: u32,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            every: Some(Duration::from_secs(3600)),
            rate: 2000,
        }
    }
}

impl GcConfig {
    fn interval(&self) -> Duration {
        self.every.unwrap_or(Duration::from_secs(3600))
    }
}

#[derive(Clone, Copy)]
struct Candidate {
    seq: u64,
    seen_in: u64,
}

/// The collector's memory between rounds.
#[derive(Default)]
pub(crate) struct Collector {
    candidates: Mutex<HashMap<(u16, ChunkId), Candidate>>,
    last: Mutex<Option<GcRound>>,
    rounds: std::sync::atomic::AtomicU64,
    deleted: std::sync::atomic::AtomicU64,
    /// One round at a time.
    running: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Collector")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ObjectStore {
    /// The collector's state, for `GET /v1/gc`.
    pub fn gc_status(&self) -> Result<GcStatus, ObjectError> {
        use std::sync::atomic::Ordering::Relaxed;
        let epoch = self.meta.gc_epoch()?;
        Ok(GcStatus {
            every_secs: self.cfg.gc.every.map_or(0, |d| d.as_secs()),
            running: self.gc.running.try_lock().is_err(),
            epoch: epoch.epoch,
            epoch_advanced_ms: epoch.advanced_ms,
            candidates: lock(&self.gc.candidates).len() as u64,
            rounds: self.gc.rounds.load(Relaxed),
            deleted_total: self.gc.deleted.load(Relaxed),
            last: lock(&self.gc.last).clone(),
        })
    }

    /// Runs collector rounds on the configured schedule, forever.
    pub(crate) async fn gc_loop(self: std::sync::Arc<Self>) {
        let Some(every) = self.cfg.gc.every else {
            return;
        };
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = self.gc_round(false).await {
                tracing::warn!("collector round: {e}");
            }
        }
    }

    /// One round (see the module documentation). A dry run lists and checks but
    /// neither deletes nor advances the epoch, and remembers nothing. The round,
    /// failed or not, becomes the status's `last`.
    pub async fn gc_round(&self, dry_run: bool) -> Result<GcRound, ObjectError> {
        use std::sync::atomic::Ordering::Relaxed;
        let _one = self.gc.running.lock().await;
        let mut round = GcRound {
            started_ms: cairn_meta::now_ms(),
            dry_run,
            ..GcRound::default()
        };
        let res = self.collect(&mut round).await;
        if let Err(e) = &res {
            round.error = Some(e.to_string());
        }
        round.finished_ms = cairn_meta::now_ms();
        self.gc.rounds.fetch_add(1, Relaxed);
        *lock(&self.gc.last) = Some(round.clone());
        res.map(|()| round)
    }

    async fn collect(&self, round: &mut GcRound) -> Result<(), ObjectError> {
        use std::sync::atomic::Ordering::Relaxed;
        let dry_run = round.dry_run;
        if !dry_run {
            self.advance_gc_epoch().await;
        }

        // 2. What the drives hold.
        let (listed, skipped) = self.list_own().await;
        round.drives_skipped = skipped;
        round.listed = listed.len() as u64;

        // 3. Metadata at least as new as the listing.
        self.sync().await?;
        let epoch = self.meta.gc_epoch()?.epoch;
        round.epoch = epoch;

        // 4. Which listed chunks a manifest places where they are.
        let referenced = self.referenced(&listed)?;

        // 5. Old enough: delete; new: remember.
        let mut doomed: Vec<(u16, ChunkVersion)> = Vec::new();
        {
            let mut cands = lock(&self.gc.candidates);
            let mut next: HashMap<(u16, ChunkId), Candidate> = HashMap::new();
            for &(drive, c) in &listed {
                if referenced.contains(&(drive, c.id)) {
                    continue;
                }
                // A read of this node still streaming the extent (an object
                // overwritten or deleted under it) keeps it.
                if self.readers.any_pinned(&[crate::extent_of(c.id)]) {
                    continue;
                }
                round.unreferenced += 1;
                match cands.get(&(drive, c.id)) {
                    Some(p) if p.seq == c.seq && p.seen_in + 2 <= epoch => {
                        doomed.push((drive, c));
                    }
                    Some(p) if p.seq == c.seq => {
                        round.waiting += 1;
                        next.insert((drive, c.id), *p);
                    }
                    _ => {
                        round.waiting += 1;
                        if next.len() < MAX_CANDIDATES {
                            next.insert(
                                (drive, c.id),
                                Candidate {
                                    seq: c.seq,
                                    seen_in: epoch,
                                },
                            );
                        }
                    }
                }
            }
            if !dry_run {
                *cands = next;
            }
        }
        drop(listed);
        if dry_run {
            round.deleted = doomed.len() as u64;
        } else {
            let (deleted, kept) = self.delete_versions(&doomed, true).await;
            round.deleted = deleted;
            round.kept = kept;
            self.gc.deleted.fetch_add(deleted, Relaxed);
            self.counters.collected_chunks.fetch_add(deleted, Relaxed);
        }
        if round.deleted > 0 || round.unreferenced > 0 {
            tracing::info!(
                epoch,
                listed = round.listed,
                unreferenced = round.unreferenced,
                deleted = round.deleted,
                waiting = round.waiting,
                dry_run,
                "collector round"
            );
        }
        Ok(())
    }

    /// Moves the epoch on if the interval has passed since it last did. Any
    /// outcome is fine: refused means another node's collector (or an earlier
    /// round) did it, unknown means it may have.
    async fn advance_gc_epoch(&self) {
        let interval = self.cfg.gc.interval().as_millis() as i64;
        let Ok(cur) = self.meta.gc_epoch() else {
            return;
        };
        let now = cairn_meta::now_ms();
        if now.saturating_sub(cur.advanced_ms) < interval {
            return;
        }
        let p = Proposal::new(Mutation::AdvanceGcEpoch {
            from: cur.epoch,
            now_ms: now,
            min_interval_ms: interval,
        });
        match self.log.propose(p).await {
            Commit::Committed(_) => tracing::debug!(epoch = cur.epoch + 1, "collector epoch"),
            Commit::Rejected(MetaError::PreconditionFailed) => {}
            Commit::Rejected(e) => tracing::debug!("collector epoch not advanced: {e}"),
            Commit::Unknown(e) => tracing::debug!("collector epoch advance unknown: {e}"),
        }
    }

    /// Deletes every chunk on this node's drives that no manifest or upload part
    /// places there, at once. Only for a single node before it serves: no write can
    /// be in flight then, so an unreferenced chunk is the remains of one never
    /// acknowledged (or a repair's loser), and a full node gets its space back
    /// before the first request.
    pub async fn collect_garbage(&self) -> Result<u64, ObjectError> {
        use std::sync::atomic::Ordering::Relaxed;
        let (listed, _) = self.list_own().await;
        let referenced = self.referenced(&listed)?;
        let doomed: Vec<(u16, ChunkVersion)> = listed
            .into_iter()
            .filter(|(d, c)| !referenced.contains(&(*d, c.id)))
            .collect();
        let (deleted, _) = self.delete_versions(&doomed, false).await;
        self.counters.collected_chunks.fetch_add(deleted, Relaxed);
        Ok(deleted)
    }

    /// Every chunk on this node's own drives, with its version; and how many drives
    /// could not be listed (failed, unreachable).
    async fn list_own(&self) -> (Vec<(u16, ChunkVersion)>, u64) {
        let mut listed = Vec::new();
        let mut skipped = 0;
        for drive in self.chunks.own_drives() {
            if let Err(e) = self.list_versions(drive, &mut listed).await {
                tracing::debug!(drive, "collector skips the drive: {e}");
                skipped += 1;
            }
        }
        (listed, skipped)
    }

    /// Which of `listed` a manifest or part places on the drive it lies on (by
    /// chunk *and* drive: a repair's loser shares its id with the copy that
    /// replaced it), from one consistent read of the metadata.
    fn referenced(
        &self,
        listed: &[(u16, ChunkVersion)],
    ) -> Result<HashSet<(u16, ChunkId)>, ObjectError> {
        let extents: HashSet<u128> = listed.iter().map(|(_, c)| crate::extent_of(c.id)).collect();
        let mut referenced = HashSet::new();
        self.meta.for_each_extent(|e| {
            if !extents.contains(&e.id) {
                return;
            }
            match &e.layout {
                Layout::Replicated { drives, .. } => {
                    for &d in drives.iter().filter(|&&d| d != UNPLACED) {
                        referenced.insert((d, chunk_id(e.id, 0, 0)));
                    }
                }
                Layout::Erasure { stripes, .. } => {
                    for (s, st) in stripes.iter().enumerate() {
                        for (f, &d) in st.drives.iter().enumerate() {
                            if d != UNPLACED {
                                referenced.insert((d, chunk_id(e.id, s as u32, f as u8)));
                            }
                        }
                    }
                }
            }
        })?;
        Ok(referenced)
    }

    async fn list_versions(
        &self,
        drive: u16,
        out: &mut Vec<(u16, ChunkVersion)>,
    ) -> Result<(), ObjectError> {
        let mut after = ChunkId::MIN;
        loop {
            let res = self
                .chunks
                .call(vec![Request::ListVersions {
                    drive,
                    after,
                    limit: PAGE,
                }])
                .await?;
            let chunks = match res.into_iter().next() {
                Some(Ok(Reply::ListVersions { chunks })) => chunks,
                Some(Err(f)) => return Err(ObjectError::Unavailable(f.to_string())),
                _ => return Err(ProtoError::Mismatch("expected ListVersions").into()),
            };
            let Some(last) = chunks.last() else {
                return Ok(());
            };
            after = last.id;
            out.extend(chunks.into_iter().map(|c| (drive, c)));
        }
    }

    /// Deletes each chunk if it is still the version seen (`paced`: at most the
    /// configured rate); returns (deleted, kept). A failed batch is left for a later round.
    async fn delete_versions(&self, doomed: &[(u16, ChunkVersion)], paced: bool) -> (u64, u64) {
        let (mut deleted, mut kept) = (0, 0);
        let rate = self.cfg.gc.rate.max(1) as f64;
        let start = Instant::now();
        let mut sent = 0usize;
        for batch in doomed.chunks(DELETE_BATCH) {
            let ops: Vec<Request> = batch
                .iter()
                .map(|(drive, c)| Request::DeleteVersion {
                    drive: *drive,
                    id: c.id,
                    tenant: c.tenant,
                    seq: c.seq,
                })
                .collect();
            match self.chunks.call(ops).await {
                Ok(res) => {
                    for r in res {
                        match r {
                            Ok(Reply::DeleteVersion { deleted: true }) => deleted += 1,
                            _ => kept += 1,
                        }
                    }
                    let mut cands = lock(&self.gc.candidates);
                    for (drive, c) in batch {
                        cands.remove(&(*drive, c.id));
                    }
                }
                // Still candidates: the next round tries again.
                Err(e) => tracing::debug!("collector delete batch: {e}"),
            }
            sent += batch.len();
            if !paced {
                continue;
            }
            let due = Duration::from_secs_f64(sent as f64 / rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
        (deleted, kept)
    }
}
