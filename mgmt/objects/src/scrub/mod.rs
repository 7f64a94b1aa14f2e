//! The scrubber: every fragment and copy on this node's drives, read and checked
//! against the manifest, on a schedule and at a bounded rate.
//!
//! Each node scrubs only its own drives, so a pass reads no byte over the network
//! unless it finds damage. A fragment is good when the drive's record checksum
//! holds (the datapath checks it on every read), its length is the stripe's shard
//! length, and its CRC32C is the one the encoder gave it, recorded in the manifest
//! ([`cairn_meta::Stripe::sums`]). Parity fragments are checked the same way: their
//! recorded sums are those of the encoder's output, so a parity fragment that
//! matches is the parity of the data as written. A bad or missing fragment is
//! rebuilt from the rest of its stripe (or copied from a good replica), checked
//! against its sum, written back to the same drive and read back; what cannot be
//! rebuilt now is counted and left to repair.
//!
//! The rate is a ceiling on bytes read per second; while clients are reading or
//! writing, the scrubber slows to a quarter of it.

use crate::read::check_fragment;
use crate::repair::FragmentState;
use crate::{chunk_id, ObjectError, ObjectStore};
use bytes::Bytes;
use cairn_adminapi::{ScrubPass, ScrubState};
use cairn_chunkproto::{Failure, FailureCode, Reply, Request};
use cairn_meta::{matches_sum, Layout, ObjectRecord};
use cairn_types::ChunkId;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;

mod control;
use control::Control;
pub use control::{ScrubConfig, Scrubber};

/// How often the drives' damage-at-open reports are looked at (a datapathd that
/// restarted on its own may have found damage).
const DAMAGE_POLL: Duration = Duration::from_secs(10);

/// Objects read from the metadata per page.
const PAGE: usize = 256;
/// Largest batch of fragment reads sent at once.
const BATCH_BYTES: u64 = 8 << 20;
const BATCH_OPS: usize = 32;

/// One fragment to check: where it is and what it must be.
struct Check {
    bucket: usize,
    key: String,
    tenant: u64,
    extent: u128,
    stripe: u32,
    frag: u8,
    drive: u16,
    id: ChunkId,
    len: usize,
    sum: Option<u32>,
}

impl ObjectStore {
    /// The scrubber's controls and status.
    pub fn scrubber(&self) -> &Scrubber {
        &self.scrub
    }

    /// Runs passes on schedule and on demand, for as long as the store lives.
    pub(crate) async fn scrub_loop(self: std::sync::Arc<Self>) {
        let mut ctl = self.scrub.control.subscribe();
        // Kicks not yet acted on start a pass at once, even one made before this
        // loop first looked (damage found at start).
        let mut kicks = 0;
        loop {
            let due = self.scrub.next_due();
            self.scrub.update(|s| {
                s.state = if ctl.borrow().paused {
                    ScrubState::Paused
                } else {
                    ScrubState::Idle
                };
                s.next_ms = due.map(|d| d.1);
            });
            let scheduled = async {
                match due {
                    Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let c = *ctl.borrow_and_update();
            let kicked = if c.kicks != kicks && !c.paused {
                true
            } else {
                tokio::select! {
                    _ = scheduled, if !c.paused => false,
                    r = ctl.changed() => {
                        if r.is_err() { return; }
                        continue;
                    }
                }
            };
            kicks = ctl.borrow().kicks;
            tracing::info!(on_demand = kicked, "scrub pass starting");
            self.scrub.set_owed(true);
            match self.scrub_pass(&mut ctl).await {
                Ok(p) => {
                    tracing::info!(
                        objects = p.objects,
                        fragments = p.fragments,
                        mib = p.bytes >> 20,
                        bad = p.bad,
                        repaired = p.repaired,
                        unrepaired = p.unrepaired,
                        "scrub pass finished"
                    );
                    self.scrub.update(|s| {
                        s.passes += 1;
                        s.current = None;
                        s.last = Some(p);
                    });
                    // Paid, unless another pass was asked for meanwhile.
                    if ctl.borrow().kicks == kicks {
                        self.scrub.set_owed(false);
                    }
                    self.scrub.finished.send_modify(|n| *n += 1);
                }
                Err(e) => {
                    tracing::warn!("scrub pass stopped: {e}");
                    self.scrub.update(|s| s.current = None);
                    // Not at once again: wait a while (or for an operator's start).
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
            }
        }
    }

    /// Starts a pass whenever a drive of this node reports damage found when it
    /// was opened that was not seen before: at mgmtd's start, and after datapathd
    /// restarted on its own.
    pub(crate) async fn watch_damage(self: std::sync::Arc<Self>) {
        let mut seen: Option<Vec<(u16, [u64; 6])>> = None;
        loop {
            if let Some(now) = self.damage_at_open().await {
                // [damaged segments, corrupt batches, corrupt records, torn batches,
                // formatted, dropped]: a drive found blank and formatted is not
                // damage (every drive of a new node is), but whatever it should hold
                // must be rebuilt all the same.
                let damaged = now
                    .iter()
                    .any(|(_, c)| c[..4].iter().chain(&c[5..]).any(|&n| n > 0));
                let blank = now.iter().any(|(_, c)| c[4] > 0);
                if (damaged || blank) && seen.as_ref() != Some(&now) {
                    if damaged {
                        tracing::warn!(drives = ?now, "drives found damage when opened: scrubbing now");
                    } else {
                        tracing::info!(drives = ?now, "drives were blank and are formatted: scrubbing for what they should hold");
                    }
                    self.scrub.owe();
                }
                seen = Some(now);
            }
            tokio::time::sleep(DAMAGE_POLL).await;
        }
    }

    /// Each own drive's damage found at its last open: damaged segments, corrupt
    /// batches, corrupt records, torn batches, formatted blank (a replaced disk:
    /// everything it held is missing), and records dropped by compaction since.
    /// (A torn last batch is usually an unacknowledged write cut by a crash, but
    /// rot in the last acknowledged batch looks the same: after any of these,
    /// everything is read back.)
    async fn damage_at_open(&self) -> Option<Vec<(u16, [u64; 6])>> {
        let own = self.chunks.own_drives();
        // Own drives only: `DriveDetails` (which carries the damage counts) is
        // never sent to a peer that may run an older datapathd.
        let ops = own
            .iter()
            .map(|&drive| Request::DriveDetails { drive })
            .collect();
        let res = self.chunks.call(ops).await.ok()?;
        Some(
            own.iter()
                .zip(res)
                .filter_map(|(&d, r)| match r {
                    Ok(Reply::DriveDetails(i)) => i.space.map(|s| {
                        (
                            d,
                            [
                                s.damaged_segments,
                                s.corrupt_batches,
                                s.corrupt_records,
                                s.torn_batches,
                                s.formatted_at_open as u64,
                                s.dropped_since_open,
                            ],
                        )
                    }),
                    _ => None,
                })
                .collect(),
        )
    }

    /// One pass over every object, checking the fragments on this node's drives.
    async fn scrub_pass(
        &self,
        ctl: &mut watch::Receiver<Control>,
    ) -> Result<ScrubPass, ObjectError> {
        self.sync().await?;
        let mut pass = ScrubPass {
            started_ms: cairn_meta::now_ms(),
            // Noncurrent versions are walked too.
            objects_total: self.meta.object_count()? + self.meta.version_count()?,
            ..Default::default()
        };
        let own = self.chunks.own_drives();
        let mut buckets: Vec<String> = Vec::new();
        let mut tenants = HashMap::new();
        let mut pacer = Pacer::new(self.scrub.cfg.rate, self.counters.clone());
        // Current objects, then noncurrent versions: their bytes are kept too.
        let mut after: Option<cairn_meta::ManifestCursor> = None;
        let mut done = false;
        while !done {
            let (page, next) = self.meta.manifests_after(after.as_ref(), PAGE)?;
            done = next.is_none();
            after = next;
            let mut checks = Vec::new();
            for (bucket, key, rec) in page {
                pass.objects += 1;
                let Some((tenant, _)) = self.bucket_of(&mut tenants, &bucket)? else {
                    continue;
                };
                if buckets.last() != Some(&bucket) {
                    buckets.push(bucket);
                }
                checks.extend(fragments_to_check(
                    buckets.len() - 1,
                    key,
                    tenant,
                    &rec,
                    &own,
                ));
            }
            let mut batch: Vec<Check> = Vec::new();
            let mut batch_bytes = 0;
            let flush_at = |n: usize, b: u64| n >= BATCH_OPS || b >= BATCH_BYTES;
            for c in checks {
                batch_bytes += c.len as u64;
                batch.push(c);
                if flush_at(batch.len(), batch_bytes) {
                    self.scrub_batch(
                        std::mem::take(&mut batch),
                        &buckets,
                        &mut pass,
                        ctl,
                        &mut pacer,
                    )
                    .await?;
                    batch_bytes = 0;
                }
            }
            if !batch.is_empty() {
                self.scrub_batch(batch, &buckets, &mut pass, ctl, &mut pacer)
                    .await?;
            }
            self.scrub.update(|s| s.current = Some(pass.clone()));
        }
        pass.finished_ms = Some(cairn_meta::now_ms());
        Ok(pass)
    }

    async fn scrub_batch(
        &self,
        batch: Vec<Check>,
        buckets: &[String],
        pass: &mut ScrubPass,
        ctl: &mut watch::Receiver<Control>,
        pacer: &mut Pacer,
    ) -> Result<(), ObjectError> {
        // Paused: hold here, mid-pass, until resumed.
        if ctl.borrow().paused {
            self.scrub.update(|s| s.state = ScrubState::Paused);
            if ctl.wait_for(|c| !c.paused).await.is_err() {
                return Err(ObjectError::Unavailable("store stopping".into()));
            }
        }
        self.scrub.update(|s| {
            s.state = ScrubState::Running;
            s.current = Some(pass.clone());
        });
        let bytes: u64 = batch.iter().map(|c| c.len as u64).sum();
        let healthy: Vec<bool> = batch
            .iter()
            .map(|c| self.health.is_healthy(c.drive))
            .collect();
        let ops = batch
            .iter()
            .zip(&healthy)
            .filter(|(_, h)| **h)
            .map(|(c, _)| Request::Get {
                drive: c.drive,
                id: c.id,
                tenant: c.tenant,
            })
            .collect();
        let mut answers = self.chunks.call(ops).await?.into_iter();
        for (c, ok) in batch.iter().zip(healthy) {
            // A failed drive's fragments are repair's to move, not the scrubber's;
            // they are counted so the pass is known incomplete.
            if !ok {
                pass.skipped += 1;
                continue;
            }
            let verdict = match answers.next() {
                Some(Ok(Reply::Get { payload })) => check_fragment(&payload, c.len, c.sum),
                Some(Ok(_)) => Err(Failure::new(FailureCode::Io, "unexpected reply")),
                Some(Err(f)) => Err(f),
                None => Err(Failure::new(FailureCode::Io, "no answer")),
            };
            pass.fragments += 1;
            pass.bytes += c.len as u64;
            let Err(f) = verdict else { continue };
            if f.code == FailureCode::DriveFailed {
                self.health.mark_failed(c.drive);
                pass.skipped += 1;
                continue;
            }
            if !matches!(f.code, FailureCode::Corrupt | FailureCode::NotFound) {
                tracing::warn!(drive = c.drive, "scrub read failed: {f}");
                pass.skipped += 1;
                continue;
            }
            let bucket = &buckets[c.bucket];
            match self.scrub_fix(bucket, c).await {
                Ok(Fix::Repaired) => {
                    pass.bad += 1;
                    pass.repaired += 1;
                    self.counters.bad_fragments.fetch_add(1, Ordering::Relaxed);
                    self.counters
                        .repaired_fragments
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%bucket, key = %c.key, drive = c.drive, stripe = c.stripe, fragment = c.frag, "scrub: bad fragment rebuilt ({f})");
                }
                Ok(Fix::Gone) => {}
                Ok(Fix::NotNow(why)) | Err(ObjectError::Unreadable(why)) => {
                    pass.bad += 1;
                    pass.unrepaired += 1;
                    self.counters.bad_fragments.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(%bucket, key = %c.key, drive = c.drive, stripe = c.stripe, fragment = c.frag, "scrub: bad fragment ({f}) not rebuilt: {why}");
                }
                Err(e) => return Err(e),
            }
        }
        pacer.pace(bytes).await;
        Ok(())
    }

    /// Rebuilds one bad fragment in place, if the object still holds it.
    async fn scrub_fix(&self, bucket: &str, c: &Check) -> Result<Fix, ObjectError> {
        // The object may have changed since the page was read: only a fragment
        // the manifest (current or a noncurrent version's) still places on this
        // drive is rebuilt.
        let Some(rec) = self.meta.manifest_holding(bucket, &c.key, c.extent)? else {
            return Ok(Fix::Gone);
        };
        let Some(e) = rec.extents.iter().find(|e| e.id == c.extent) else {
            return Ok(Fix::Gone);
        };
        let data = match &e.layout {
            Layout::Replicated { drives, sum, .. } => {
                if !drives.contains(&c.drive) {
                    return Ok(Fix::Gone);
                }
                let others: Vec<u16> = drives.iter().copied().filter(|&d| d != c.drive).collect();
                let states: Vec<FragmentState> =
                    others.iter().map(|&d| self.state_for_rebuild(d)).collect();
                match self
                    .first_good(c.tenant, &others, &states, c.id, e.size, *sum)
                    .await
                {
                    Some(d) => d,
                    None => return Ok(Fix::NotNow("no good copy elsewhere".into())),
                }
            }
            Layout::Erasure { k, m, stripes, .. } => {
                let Some(st) = stripes.get(c.stripe as usize) else {
                    return Ok(Fix::Gone);
                };
                if st.drives.get(c.frag as usize) != Some(&c.drive) {
                    return Ok(Fix::Gone);
                }
                let states: Vec<FragmentState> = st
                    .drives
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| {
                        if i == c.frag as usize {
                            FragmentState::Lost
                        } else {
                            self.state_for_rebuild(d)
                        }
                    })
                    .collect();
                let shard = (st.len as usize).div_ceil(*k as usize).max(1);
                let mut shards = self
                    .fetch_stripe(c.tenant, c.extent, c.stripe, st, &states, shard)
                    .await?;
                let good = shards.iter().filter(|s| s.is_some()).count();
                if good < *k as usize {
                    return Ok(Fix::NotNow(format!(
                        "{good} good fragments of {}, {k} needed",
                        st.drives.len()
                    )));
                }
                self.codecs.get(*k, *m)?.reconstruct(&mut shards)?;
                let Some(rebuilt) = shards[c.frag as usize].take() else {
                    return Ok(Fix::NotNow("reconstruction gave nothing".into()));
                };
                Bytes::from(rebuilt)
            }
        };
        if !matches_sum(c.sum, &data) || data.len() != c.len {
            return Ok(Fix::NotNow(
                "the rebuilt fragment does not match the manifest".into(),
            ));
        }
        if self.put_verified(c.tenant, c.drive, c.id, data).await? {
            Ok(Fix::Repaired)
        } else {
            Ok(Fix::NotNow("writing it back failed".into()))
        }
    }

    /// A drive's state for a rebuild here and now: repair's own view (unplaced or
    /// unrouted: lost; unhealthy: missing; else good).
    fn state_for_rebuild(&self, d: u16) -> FragmentState {
        self.fragment_state(d, &|_| FragmentState::Good)
    }
}

enum Fix {
    Repaired,
    /// The object or the fragment is no longer there: nothing to do.
    Gone,
    NotNow(String),
}

/// The fragments of `rec` on the drives in `own`, with what each must be.
fn fragments_to_check(
    bucket: usize,
    key: String,
    tenant: u64,
    rec: &ObjectRecord,
    own: &[u16],
) -> Vec<Check> {
    let mut out = Vec::new();
    for e in &rec.extents {
        match &e.layout {
            Layout::Replicated { drives, sum, .. } => {
                for &d in drives.iter().filter(|d| own.contains(d)) {
                    out.push(Check {
                        bucket,
                        key: key.clone(),
                        tenant,
                        extent: e.id,
                        stripe: 0,
                        frag: 0,
                        drive: d,
                        id: chunk_id(e.id, 0, 0),
                        len: e.size as usize,
                        sum: *sum,
                    });
                }
            }
            Layout::Erasure { k, stripes, .. } => {
                for (s, st) in stripes.iter().enumerate() {
                    let shard = (st.len as usize).div_ceil(*k as usize).max(1);
                    for (f, &d) in st.drives.iter().enumerate() {
                        if !own.contains(&d) {
                            continue;
                        }
                        out.push(Check {
                            bucket,
                            key: key.clone(),
                            tenant,
                            extent: e.id,
                            stripe: s as u32,
                            frag: f as u8,
                            drive: d,
                            id: chunk_id(e.id, s as u32, f as u8),
                            len: shard,
                            sum: st.sum(f),
                        });
                    }
                }
            }
        }
    }
    out
}

/// Keeps the scrubber under its rate, and under a quarter of it while clients
/// are active (the store counted a read or write since the last batch).
struct Pacer {
    rate: u64,
    counters: std::sync::Arc<crate::Counters>,
    seen: u64,
    last: Instant,
}

impl Pacer {
    fn new(rate: u64, counters: std::sync::Arc<crate::Counters>) -> Pacer {
        let seen = counters.foreground.load(Ordering::Relaxed);
        Pacer {
            rate: rate.max(1),
            counters,
            seen,
            last: Instant::now(),
        }
    }

    async fn pace(&mut self, bytes: u64) {
        let now = self.counters.foreground.load(Ordering::Relaxed);
        let busy = now != self.seen;
        self.seen = now;
        let rate = if busy {
            (self.rate / 4).max(1)
        } else {
            self.rate
        };
        let want = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let took = self.last.elapsed();
        if want > took {
            tokio::time::sleep(want - took).await;
        }
        self.last = Instant::now();
    }
}
