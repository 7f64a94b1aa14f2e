//! The read path: verified bytes of a range, reconstructed when fragments are lost.
//!
//! The fast path fetches only the data fragments that overlap the range. If any of
//! them fails (missing, corrupt, on a failed drive), the stripe is read degraded:
//! every other fragment is fetched, the stripe is reconstructed from any k, and
//! fragments that came back corrupt or missing from a healthy drive are rewritten
//! in place. The datapath verifies each fragment's checksum before returning it, so
//! every byte handed to a client has been verified or rebuilt from verified bytes;
//! when fewer than k fragments survive, the read fails and no byte is invented.

use crate::{chunk_id, sealing, Codecs, Counters, DriveHealth, ObjectError, RamTier};
use bytes::{Bytes, BytesMut};
use cairn_chunkproto::{Failure, FailureCode, Reply, Request};
use cairn_envelope::DataKey;
use cairn_meta::{matches_sum, Extent, Layout, ObjectRecord, Stripe, UNPLACED};
use cairn_qos::{Qos, Way};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a read needs, cloned into the stream so it outlives the request handler.
#[derive(Clone)]
pub(crate) struct Reader {
    pub tenant: u64,
    pub chunks: crate::Fabric,
    pub health: Arc<DriveHealth>,
    pub counters: Arc<Counters>,
    pub codecs: Arc<Codecs>,
    pub read_ahead: usize,
    pub qos: Qos,
    pub ram: Arc<RamTier>,
    /// Whole extents fetched through the datapath are brought into `ram`, as
    /// this keyspace's (a bucket id); none: nothing is brought in.
    pub promote: Option<Arc<str>>,
}

/// One unit of reading: a byte range of one stripe (or of one replicated extent).
struct Piece {
    extent: Arc<Extent>,
    /// The extent's data key, when it is sealed: fragments are verified as
    /// ciphertext (their checksums), then opened (their tags).
    key: Option<Arc<DataKey>>,
    stripe: usize,
    range: Range<usize>,
    /// The piece's bytes when the RAM tier holds its extent: nothing to fetch.
    held: Option<Bytes>,
    /// The extent is being read whole to be brought into the RAM tier.
    promote: Option<Arc<Promotion>>,
}

/// An extent being gathered, piece by piece in order, for the RAM tier. One extra
/// copy, paid only on a miss; a hit costs none.
struct Promotion {
    tenant: u64,
    group: Arc<str>,
    extent: u128,
    size: usize,
    buf: std::sync::Mutex<BytesMut>,
    /// Its share of the bytes being gathered node-wide, given back when done.
    _gathering: crate::ram::Gathering,
}

impl Promotion {
    fn take(&self, parts: &[Bytes], ram: &RamTier) {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        for p in parts {
            buf.extend_from_slice(p);
        }
        if buf.len() == self.size {
            let bytes = std::mem::take(&mut *buf).freeze();
            ram.admit(self.tenant, &self.group, self.extent, bytes);
        }
    }
}

pub(crate) fn read_range(
    reader: Reader,
    rec: &ObjectRecord,
    keys: Vec<Option<Arc<DataKey>>>,
    start: u64,
    end: u64,
) -> BoxStream<'static, Result<Bytes, ObjectError>> {
    let mut pieces = Vec::new();
    let mut base = 0u64;
    for (e, key) in rec.extents.iter().zip(keys) {
        let (lo, hi) = (base, base + e.size);
        base = hi;
        if hi <= start || lo >= end {
            continue;
        }
        let (a, b) = (start.max(lo) - lo, end.min(hi) - lo);
        let extent = Arc::new(e.clone());
        if let Some(held) = reader.ram.get(e.id) {
            pieces.push(Piece {
                extent,
                key,
                stripe: 0,
                range: a as usize..b as usize,
                held: Some(held.slice(a as usize..b as usize)),
                promote: None,
            });
            continue;
        }
        let whole = a == 0 && b == e.size && reader.ram.takes(e.size);
        let promote = match reader.promote.clone().filter(|_| whole) {
            Some(group) => {
                reader.ram.missed(&group);
                // Gathering is bounded node-wide: past the bound the value is
                // served all the same, only not brought in.
                reader.ram.gather(e.size).map(|g| {
                    Arc::new(Promotion {
                        tenant: reader.tenant,
                        group,
                        extent: e.id,
                        size: e.size as usize,
                        buf: std::sync::Mutex::new(BytesMut::with_capacity(e.size as usize)),
                        _gathering: g,
                    })
                })
            }
            None => None,
        };
        match &e.layout {
            Layout::Replicated { .. } => pieces.push(Piece {
                extent,
                key,
                stripe: 0,
                range: a as usize..b as usize,
                held: None,
                promote,
            }),
            Layout::Erasure {
                k, shard, stripes, ..
            } => {
                let stripe_bytes = *k as u64 * *shard as u64;
                let first = (a / stripe_bytes) as usize;
                let last = ((b - 1) / stripe_bytes) as usize;
                let end = (last + 1).min(stripes.len());
                for (s, stripe) in stripes.iter().enumerate().take(end).skip(first) {
                    let s_lo = s as u64 * stripe_bytes;
                    let s_hi = s_lo + stripe.len as u64;
                    let (pa, pb) = (a.max(s_lo) - s_lo, b.min(s_hi) - s_lo);
                    if pa < pb {
                        pieces.push(Piece {
                            extent: extent.clone(),
                            key: key.clone(),
                            stripe: s,
                            range: pa as usize..pb as usize,
                            held: None,
                            promote: promote.clone(),
                        });
                    }
                }
            }
        }
    }
    let ahead = reader.read_ahead.max(1);
    let ram = reader.ram.clone();
    stream::iter(pieces)
        .map(move |p| {
            let r = reader.clone();
            async move {
                let promote = p.promote.clone();
                r.read_piece(p).await.map(|parts| (promote, parts))
            }
        })
        .buffered(ahead)
        // In order here (`buffered` yields in order), so a promotion gathers its
        // extent's bytes in sequence.
        .map_ok(move |(promote, parts)| {
            if let Some(p) = promote {
                p.take(&parts, &ram);
            }
            stream::iter(parts.into_iter().map(Ok))
        })
        .try_flatten()
        .boxed()
}

impl Reader {
    async fn read_piece(&self, p: Piece) -> Result<Vec<Bytes>, ObjectError> {
        let _slot = self
            .qos
            .admit(self.tenant, Way::Read, p.range.len() as u64)
            .await;
        if let Some(held) = p.held {
            return Ok(vec![held]);
        }
        match &p.extent.layout {
            Layout::Replicated { drives, sum, tag } => {
                self.read_replicated(&p, drives, *sum, tag.as_deref()).await
            }
            Layout::Erasure { k, m, stripes, .. } => {
                self.read_stripe(&p, *k as usize, *m as usize, &stripes[p.stripe])
                    .await
            }
        }
    }

    async fn get(&self, ops: Vec<Request>) -> Result<Vec<Result<Bytes, Failure>>, ObjectError> {
        let drives: Vec<u16> = ops.iter().map(|o| o.drive()).collect();
        let res = self.chunks.call(ops).await?;
        Ok(res
            .into_iter()
            .zip(drives)
            .map(|(r, d)| match r {
                Ok(Reply::Get { payload }) => Ok(payload),
                Ok(_) => Err(Failure::new(FailureCode::Io, "unexpected reply to Get")),
                Err(f) => {
                    if f.code == FailureCode::DriveFailed {
                        self.health.mark_failed(d);
                    }
                    Err(f)
                }
            })
            .collect())
    }

    async fn read_replicated(
        &self,
        p: &Piece,
        drives: &[u16],
        sum: Option<u32>,
        tag: Option<&str>,
    ) -> Result<Vec<Bytes>, ObjectError> {
        let id = chunk_id(p.extent.id, 0, 0);
        let mut order: Vec<u16> = drives.to_vec();
        // Healthy drives first; a failed one is still tried last, in case the
        // health view is stale.
        order.sort_by_key(|&d| !self.health.is_healthy(d));
        let mut bad = Vec::new();
        let mut last_err = String::from("no copies");
        for d in order {
            let res = self
                .get(vec![Request::Get {
                    drive: d,
                    id,
                    tenant: self.tenant,
                }])
                .await?;
            match res.into_iter().next() {
                Some(Ok(data)) if data.len() as u64 == p.extent.size && matches_sum(sum, &data) => {
                    if !bad.is_empty() {
                        self.counters.degraded_reads.fetch_add(1, Ordering::Relaxed);
                        self.repair(bad.into_iter().map(|d| (d, id, data.clone())).collect());
                    }
                    let data = match &p.key {
                        Some(key) => sealing::open(key, 0, 0, data, tag)?,
                        None => data,
                    };
                    return Ok(vec![data.slice(p.range.clone())]);
                }
                Some(Ok(data)) => {
                    self.counters.bad_fragments.fetch_add(1, Ordering::Relaxed);
                    last_err = if data.len() as u64 != p.extent.size {
                        format!("copy on drive {d} has {} bytes", data.len())
                    } else {
                        format!("copy on drive {d} does not match the manifest's checksum")
                    };
                    tracing::warn!(drive = d, extent = %format!("{:x}", p.extent.id), "{last_err}");
                    bad.push(d);
                }
                Some(Err(f)) => {
                    last_err = format!("drive {d}: {f}");
                    if repairable(&f) && self.health.is_healthy(d) {
                        bad.push(d);
                    }
                }
                None => {}
            }
        }
        self.counters.unreadable.fetch_add(1, Ordering::Relaxed);
        Err(ObjectError::Unreadable(format!(
            "extent {:x}: no readable copy ({last_err})",
            p.extent.id
        )))
    }

    async fn read_stripe(
        &self,
        p: &Piece,
        k: usize,
        m: usize,
        stripe: &Stripe,
    ) -> Result<Vec<Bytes>, ObjectError> {
        let len = stripe.len as usize;
        let shard_len = len.div_ceil(k).max(1);
        let first = p.range.start / shard_len;
        let last = (p.range.end - 1) / shard_len;
        let wanted: Vec<usize> = (first..=last).collect();
        let mut frags: Vec<Option<Bytes>> = vec![None; k + m];
        let mut failed: Vec<(usize, Failure)> = Vec::new();
        self.fetch(p, stripe, &wanted, &mut frags, &mut failed)
            .await?;
        if wanted.iter().all(|&i| frags[i].is_some()) {
            let frags = open_large(p, stripe, wanted, frags).await?;
            return Ok(slice_range(&frags, shard_len, &p.range));
        }

        // Degraded: fetch every other fragment and rebuild.
        self.counters.degraded_reads.fetch_add(1, Ordering::Relaxed);
        let rest: Vec<usize> = (0..k + m).filter(|i| !wanted.contains(i)).collect();
        self.fetch(p, stripe, &rest, &mut frags, &mut failed)
            .await?;
        let present = frags.iter().filter(|f| f.is_some()).count();
        if present < k {
            self.counters.unreadable.fetch_add(1, Ordering::Relaxed);
            let why: Vec<String> = failed
                .iter()
                .map(|(i, f)| format!("fragment {i}: {f}"))
                .collect();
            return Err(ObjectError::Unreadable(format!(
                "extent {:x} stripe {}: {present} of {} fragments readable, {k} needed ({})",
                p.extent.id,
                p.stripe,
                k + m,
                why.join("; ")
            )));
        }
        let mut shards: Vec<Option<Vec<u8>>> = frags
            .iter()
            .map(|f| f.as_ref().map(|b| b.to_vec()))
            .collect();
        let codec = self.codecs.get(k as u8, m as u8)?;
        codec.reconstruct(&mut shards)?;
        let mut rebuilt: Vec<Option<Bytes>> =
            shards.into_iter().map(|s| s.map(Bytes::from)).collect();
        // Rewrite what was bad on a healthy drive; a failed drive's fragments wait
        // for repair onto another drive.
        let fixes: Vec<_> = failed
            .iter()
            .filter(|(i, f)| repairable(f) && self.health.is_healthy(stripe.drives[*i]))
            .filter_map(|(i, _)| {
                // Never write back a rebuilt fragment that is not what the encoder
                // made (it would mean a bad input slipped through).
                rebuilt[*i]
                    .clone()
                    .filter(|d| matches_sum(stripe.sum(*i), d))
                    .map(|data| {
                        (
                            stripe.drives[*i],
                            chunk_id(p.extent.id, p.stripe as u32, *i as u8),
                            data,
                        )
                    })
            })
            .collect();
        self.repair(fixes);
        open_wanted(p.key.as_deref(), p.stripe, stripe, &wanted, &mut rebuilt)?;
        Ok(slice_range(&rebuilt, shard_len, &p.range))
    }

    /// Fetches the listed fragments into `frags`, recording failures.
    async fn fetch(
        &self,
        p: &Piece,
        stripe: &Stripe,
        which: &[usize],
        frags: &mut [Option<Bytes>],
        failed: &mut Vec<(usize, Failure)>,
    ) -> Result<(), ObjectError> {
        let shard_len = (stripe.len as usize).div_ceil(k_of(p)).max(1);
        let mut idx = Vec::new();
        let mut ops = Vec::new();
        for &i in which {
            let d = stripe.drives[i];
            if d == UNPLACED {
                failed.push((i, Failure::new(FailureCode::NotFound, "never placed")));
                continue;
            }
            if !self.health.is_healthy(d) {
                failed.push((i, Failure::new(FailureCode::DriveFailed, "drive failed")));
                continue;
            }
            idx.push(i);
            ops.push(Request::Get {
                drive: d,
                id: chunk_id(p.extent.id, p.stripe as u32, i as u8),
                tenant: self.tenant,
            });
        }
        if ops.is_empty() {
            return Ok(());
        }
        for (i, r) in idx.into_iter().zip(self.get(ops).await?) {
            match r {
                Ok(b) => match check_fragment(&b, shard_len, stripe.sum(i)) {
                    Ok(()) => frags[i] = Some(b),
                    Err(f) => {
                        self.counters.bad_fragments.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            drive = stripe.drives[i],
                            extent = %format!("{:x}", p.extent.id),
                            stripe = p.stripe,
                            fragment = i,
                            "{f}"
                        );
                        failed.push((i, f))
                    }
                },
                Err(f) => {
                    if f.code == FailureCode::Corrupt {
                        self.counters.bad_fragments.fetch_add(1, Ordering::Relaxed);
                    }
                    failed.push((i, f))
                }
            }
        }
        Ok(())
    }

    /// Rewrites fragments in the background; each rewrite is verified by the
    /// datapath's checksum on its next read, and counted once acknowledged.
    fn repair(&self, fixes: Vec<(u16, cairn_types::ChunkId, Bytes)>) {
        if fixes.is_empty() {
            return;
        }
        let chunks = self.chunks.clone();
        let counters = self.counters.clone();
        let tenant = self.tenant;
        tokio::spawn(async move {
            let n = fixes.len();
            let ops = fixes
                .into_iter()
                .map(|(drive, id, payload)| Request::Put {
                    drive,
                    id,
                    tenant,
                    key_id: 0,
                    payload,
                    durable: true,
                })
                .collect();
            match chunks.call(ops).await {
                Ok(res) => {
                    let ok = res.iter().filter(|r| r.is_ok()).count();
                    counters
                        .repaired_fragments
                        .fetch_add(ok as u64, Ordering::Relaxed);
                    tracing::info!("repaired {ok} of {n} fragments");
                }
                Err(e) => tracing::warn!("fragment repair failed: {e}"),
            }
        });
    }
}

fn k_of(p: &Piece) -> usize {
    match &p.extent.layout {
        Layout::Erasure { k, .. } => *k as usize,
        Layout::Replicated { .. } => 1,
    }
}

/// A fragment as it must be: the stripe's shard length and, when the manifest
/// records one, the checksum the encoder gave it.
pub(crate) fn check_fragment(b: &[u8], shard_len: usize, sum: Option<u32>) -> Result<(), Failure> {
    if b.len() != shard_len {
        return Err(Failure::new(
            FailureCode::Corrupt,
            format!("fragment has {} bytes, expected {shard_len}", b.len()),
        ));
    }
    if !matches_sum(sum, b) {
        return Err(Failure::new(
            FailureCode::Corrupt,
            "fragment does not match the manifest's checksum",
        ));
    }
    Ok(())
}

/// Opens the wanted data fragments of a sealed extent's stripe in place (the
/// rest, and everything rewritten by repair, stay ciphertext).
fn open_wanted(
    key: Option<&DataKey>,
    index: usize,
    stripe: &Stripe,
    wanted: &[usize],
    frags: &mut [Option<Bytes>],
) -> Result<(), ObjectError> {
    let Some(key) = key else {
        return Ok(());
    };
    for &i in wanted {
        if let Some(f) = frags[i].take() {
            frags[i] = Some(sealing::open(key, index as u32, i as u8, f, stripe.tag(i))?);
        }
    }
    Ok(())
}

/// Sealed data at least this large is opened on the bulk threads (see `bulk`);
/// a small read is opened where it is, its hand-off would cost more.
const BULK_OPEN: usize = 256 << 10;

/// [`open_wanted`], on the bulk threads when there is much to open.
async fn open_large(
    p: &Piece,
    stripe: &Stripe,
    wanted: Vec<usize>,
    mut frags: Vec<Option<Bytes>>,
) -> Result<Vec<Option<Bytes>>, ObjectError> {
    let bytes: usize = wanted
        .iter()
        .filter_map(|&i| frags[i].as_ref().map(Bytes::len))
        .sum();
    if p.key.is_none() || bytes < BULK_OPEN {
        open_wanted(p.key.as_deref(), p.stripe, stripe, &wanted, &mut frags)?;
        return Ok(frags);
    }
    let (key, index, stripe) = (p.key.clone(), p.stripe, stripe.clone());
    crate::bulk::run(move || {
        open_wanted(key.as_deref(), index, &stripe, &wanted, &mut frags).map(|()| frags)
    })
    .await
}

/// Whether a failed fragment can be rewritten where it was.
fn repairable(f: &Failure) -> bool {
    matches!(f.code, FailureCode::Corrupt | FailureCode::NotFound)
}

/// The bytes `range` of a stripe whose data fragments are all present.
fn slice_range(frags: &[Option<Bytes>], shard_len: usize, range: &Range<usize>) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut pos = range.start;
    while pos < range.end {
        let i = pos / shard_len;
        let off = pos - i * shard_len;
        let n = (shard_len - off).min(range.end - pos);
        if let Some(f) = &frags[i] {
            out.push(f.slice(off..off + n));
        }
        pos += n;
    }
    // Small pieces from several fragments are joined so the stream does not
    // carry a flurry of tiny buffers.
    if out.len() > 1 && out.iter().map(|b| b.len()).sum::<usize>() < 64 << 10 {
        let mut b = BytesMut::new();
        for o in &out {
            b.extend_from_slice(o);
        }
        return vec![b.freeze()];
    }
    out
}
