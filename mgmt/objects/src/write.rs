//! The write path: a body becomes one extent, replicated or erasure coded.

use crate::sealing::{self, Sealer};
use crate::Fabric;
use crate::{chunk_id, place, Codecs, Landing, ObjectError, ObjectStore, Written};
use bytes::{Bytes, BytesMut};
use cairn_chunkproto::{FailureCode, Request};
use cairn_envelope::DataKey;
use cairn_meta::{Extent, Layout, Stripe, UNPLACED};
use cairn_qos::{Slot, Way};
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A body as it arrives: counted and checked against its declared length.
struct Body<S> {
    inner: S,
    got: u64,
    want: Option<u64>,
    max: u64,
    done: bool,
}

impl<S, E> Body<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    async fn next(&mut self) -> Result<Option<Bytes>, ObjectError> {
        if self.done {
            return Ok(None);
        }
        match self.inner.next().await {
            Some(Ok(b)) => {
                self.got += b.len() as u64;
                if let Some(want) = self.want {
                    if self.got > want {
                        return Err(ObjectError::BodyTooLong(want));
                    }
                }
                if self.got > self.max {
                    return Err(ObjectError::TooLarge {
                        size: self.got,
                        max: self.max,
                    });
                }
                Ok(Some(b))
            }
            Some(Err(e)) => Err(ObjectError::Body(e.to_string())),
            None => {
                self.done = true;
                if let Some(want) = self.want {
                    if self.got != want {
                        return Err(ObjectError::IncompleteBody {
                            got: self.got,
                            want,
                        });
                    }
                }
                Ok(None)
            }
        }
    }

    /// Appends to `buf` until it holds `target` bytes or the body ends.
    async fn fill(&mut self, buf: &mut BytesMut, target: usize) -> Result<(), ObjectError> {
        while buf.len() < target {
            match self.next().await? {
                Some(b) => buf.extend_from_slice(&b),
                None => break,
            }
        }
        Ok(())
    }
}

impl ObjectStore {
    /// Stores a body as a new extent where `landing` says; returns it once every
    /// fragment that will be acknowledged is durable (write-back: held by its
    /// drive). Nothing references the extent until the caller commits a
    /// manifest. The body's MD5 is computed only when `md5` is set.
    pub async fn write<S, E>(
        &self,
        tenant: u64,
        body: S,
        len: Option<u64>,
        max: u64,
        md5: bool,
        landing: &Landing,
    ) -> Result<Written, ObjectError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: std::fmt::Display,
    {
        self.counters.foreground.fetch_add(1, Ordering::Relaxed);
        if let Some(l) = len {
            if l > max {
                return Err(ObjectError::TooLarge { size: l, max });
            }
        }
        // The body's MD5 (None: not wanted, see [`crate::Etag::Write`]), taken
        // over the bytes in order as they leave the buffer: a small body at
        // once, a large one a stripe at a time on a bulk thread.
        let mut md5 = md5.then(Md5::new);
        let mut body = Body {
            inner: body,
            got: 0,
            want: len,
            max,
            done: false,
        };
        let written_in = self.gc_epoch()?;
        let id = rand::random::<u128>() >> 32;
        let sealer = self.sealer(tenant, id).await?;
        let mut unfinished = Unfinished {
            chunks: self.chunks.clone(),
            tenant,
            id,
            stripes: Vec::new(),
            inflight: VecDeque::new(),
            armed: true,
        };
        let small = self.cfg.small_object;
        let mut buf = BytesMut::with_capacity(match len {
            Some(l) if l as usize <= small => l as usize,
            _ => small + 1,
        });
        // Read one byte past the small-object limit to learn which layout applies
        // even when the length is not declared (chunked uploads).
        body.fill(&mut buf, small + 1).await?;
        let mut extent = if buf.len() <= small && body.done {
            if let Some(h) = &mut md5 {
                h.update(&buf);
            }
            self.write_replicated(&mut unfinished, buf, sealer.as_ref(), landing)
                .await?
        } else {
            let key = sealer.as_ref().map(|s| (s.key.clone(), s.sealed.key_id));
            self.write_erasure(&mut unfinished, (&mut body, &mut md5), buf, key, landing)
                .await?
        };
        extent.sealed = sealer.map(|s| s.sealed);
        // From here the caller's commit owns the extent.
        unfinished.armed = false;
        Ok(Written {
            md5: md5.map(|m| hex::encode(m.finalize())),
            extent,
            written_in,
        })
    }

    async fn write_replicated(
        &self,
        unfinished: &mut Unfinished,
        mut data: BytesMut,
        sealer: Option<&Sealer>,
        landing: &Landing,
    ) -> Result<Extent, ObjectError> {
        let (tenant, id) = (unfinished.tenant, unfinished.id);
        // Held until the copies are written (the task is joined below).
        let _slot = self.qos.admit(tenant, Way::Write, data.len() as u64).await;
        let mut tag = String::new();
        if let Some(s) = sealer {
            sealing::seal(&s.key, 0, 0, &mut data, &mut tag);
        }
        let key_id = sealer.map_or(0, |s| s.sealed.key_id);
        let data = data.freeze();
        let replicas = self.cfg.replicas.max(1);
        let (candidates, _, extra) = self.landing_view(landing, (1, replicas - 1));
        let copies = 1 + extra as usize;
        let drives = place(id, 0, copies, &candidates);
        let quorum = copies.min(2);
        let cid = chunk_id(id, 0, 0);
        let targets: Vec<u16> = drives.iter().copied().filter(|&d| d != UNPLACED).collect();
        let ops = targets
            .iter()
            .map(|&drive| Request::Put {
                drive,
                id: cid,
                tenant,
                key_id,
                payload: data.clone(),
                durable: !landing.write_back,
            })
            .collect();
        // Every copy is chunk 0 of "stripe 0", one per drive.
        unfinished.stripes.push(Planned::Copies(targets.clone()));
        let (chunks, health) = (self.chunks.clone(), self.health.clone());
        let len = data.len() as u32;
        unfinished.inflight.push_back(tokio::spawn(async move {
            let (placed, full) = put_all(&chunks, &health, &targets, ops).await?;
            let ok = placed.iter().filter(|&&d| d != UNPLACED).count();
            if ok < quorum {
                if full {
                    return Err(ObjectError::InsufficientStorage);
                }
                return Err(ObjectError::Unavailable(format!(
                    "{ok} of {copies} copies written, {quorum} needed"
                )));
            }
            Ok(Stripe {
                len,
                drives: placed,
                sums: Vec::new(),
                tags: String::new(),
            })
        }));
        let placed = join(unfinished.inflight.pop_front()).await?.drives;

        Ok(Extent {
            id,
            size: data.len() as u64,
            layout: Layout::Replicated {
                drives: placed.into_iter().filter(|&d| d != UNPLACED).collect(),
                // Of what is stored: ciphertext when sealed.
                sum: Some(crc32c::crc32c(&data)),
                tag: (!tag.is_empty()).then_some(tag),
            },
            sealed: None,
        })
    }

    async fn write_erasure<S, E>(
        &self,
        unfinished: &mut Unfinished,
        (body, md5): (&mut Body<S>, &mut Option<Md5>),
        mut buf: BytesMut,
        key: Option<(Arc<DataKey>, u32)>,
        landing: &Landing,
    ) -> Result<Extent, ObjectError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: std::fmt::Display,
    {
        let (candidates, k, m) = &self.landing_view(landing, self.cfg.ec);
        let (k, m) = (*k, *m);
        let stripe_bytes = k as usize * self.cfg.shard_size;
        // A stripe must have every data fragment and at least one parity fragment
        // durable before it counts: fewer would be acknowledged without redundancy.
        let quorum = k as usize + usize::from(m > 0);
        let (tenant, id) = (unfinished.tenant, unfinished.id);
        let codec = self.codecs.get(k, m)?;
        let mut stripes = Vec::new();
        let mut size = 0u64;
        let mut index = 0u32;
        loop {
            body.fill(&mut buf, stripe_bytes).await?;
            if buf.is_empty() {
                break;
            }
            let take = buf.len().min(stripe_bytes);
            let mut data = buf.split_to(take);
            // Milliseconds of hashing per stripe, at the bulk threads' lower
            // priority (see `bulk`): on the runtime it made every small
            // request wait behind it for a core.
            if let Some(h) = md5.take() {
                let (h, d) = crate::bulk::run(move || {
                    let mut h = h;
                    h.update(&data);
                    (h, data)
                })
                .await;
                *md5 = Some(h);
                data = d;
            }
            size += data.len() as u64;
            let drives = place(id, index, k as usize + m as usize, candidates);
            unfinished.stripes.push(Planned::Fragments(drives.clone()));
            let slot = self.qos.admit(tenant, Way::Write, data.len() as u64).await;
            let job = StripeJob {
                _slot: slot,
                chunks: self.chunks.clone(),
                health: self.health.clone(),
                codecs: self.codecs.clone(),
                tenant,
                key: key.clone(),
                id,
                index,
                k,
                m,
                quorum,
                drives,
                durable: !landing.write_back,
            };
            unfinished.inflight.push_back(tokio::spawn(job.run(data)));
            index += 1;
            if index >= 1 << 24 {
                return Err(ObjectError::TooLarge {
                    size,
                    max: size - 1,
                });
            }
            while unfinished.inflight.len() >= self.cfg.stripes_in_flight.max(1) {
                stripes.push(join(unfinished.inflight.pop_front()).await?);
            }
            if buf.capacity() < stripe_bytes {
                buf.reserve(stripe_bytes);
            }
        }
        drop(codec);
        while let Some(h) = unfinished.inflight.pop_front() {
            stripes.push(join(Some(h)).await?);
        }
        Ok(Extent {
            id,
            size,
            layout: Layout::Erasure {
                k,
                m,
                shard: self.cfg.shard_size as u32,
                stripes,
            },
            sealed: None,
        })
    }
}

async fn join(
    h: Option<tokio::task::JoinHandle<Result<Stripe, ObjectError>>>,
) -> Result<Stripe, ObjectError> {
    match h {
        Some(h) => h
            .await
            .map_err(|e| ObjectError::Unavailable(format!("stripe writer failed: {e}")))?,
        None => Err(ObjectError::Unavailable("no stripe in flight".into())),
    }
}

/// Where the chunks of one started stripe were sent.
enum Planned {
    /// A replicated extent's copies: chunk 0 on each drive.
    Copies(Vec<u16>),
    /// An erasure-coded stripe: fragment `f` on drive `f` (or `UNPLACED`).
    Fragments(Vec<u16>),
}

/// The chunks of an extent being written, deleted unless the write finishes and
/// hands the extent to a commit: on an error (a short or bad body, a failed
/// Content-MD5, too few fragments durable) and also when the request is dropped
/// midway (the client hung up), so a failed upload never holds space until a
/// restart. Stripes still in flight are waited for first, so no put lands after
/// the delete that was meant to remove it.
struct Unfinished {
    chunks: Fabric,
    tenant: u64,
    id: u128,
    stripes: Vec<Planned>,
    inflight: VecDeque<tokio::task::JoinHandle<Result<Stripe, ObjectError>>>,
    armed: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.armed || self.stripes.is_empty() {
            return;
        }
        // Outside a runtime (never, in the daemon) the collector takes them.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tenant, id) = (self.tenant, self.id);
        let mut ops = Vec::new();
        for (s, planned) in self.stripes.iter().enumerate() {
            match planned {
                Planned::Copies(drives) => {
                    ops.extend(drives.iter().map(|&drive| Request::Delete {
                        drive,
                        id: chunk_id(id, 0, 0),
                        tenant,
                    }))
                }
                Planned::Fragments(drives) => {
                    for (f, &drive) in drives.iter().enumerate() {
                        if drive != UNPLACED {
                            ops.push(Request::Delete {
                                drive,
                                id: chunk_id(id, s as u32, f as u8),
                                tenant,
                            });
                        }
                    }
                }
            }
        }
        let inflight = std::mem::take(&mut self.inflight);
        let chunks = self.chunks.clone();
        tracing::debug!(extent = %format!("{id:024x}"), chunks = ops.len(), "freeing an unfinished write");
        rt.spawn(async move {
            for h in inflight {
                let _ = h.await;
            }
            crate::commit::delete_chunks(&chunks, ops).await;
        });
    }
}

struct StripeJob {
    /// The stripe's fair share of the node, freed when the job ends.
    _slot: Slot,
    chunks: Fabric,
    health: Arc<crate::DriveHealth>,
    codecs: Arc<Codecs>,
    tenant: u64,
    /// Set: data fragments are sealed under this extent key (and its tenant
    /// key's id goes in the chunk headers).
    key: Option<(Arc<DataKey>, u32)>,
    id: u128,
    index: u32,
    k: u8,
    m: u8,
    quorum: usize,
    drives: Vec<u16>,
    /// False: a write-back put (see `Landing::write_back`).
    durable: bool,
}

/// A stripe's fragments: `data` cut into `k` shards (the last padded), each
/// sealed under `key` when there is one, then `m` parity shards; with each
/// fragment's crc32c and the seals' tags.
fn encode_stripe(
    mut data: BytesMut,
    k: usize,
    m: usize,
    codec: &cairn_erasure::Codec,
    key: Option<&DataKey>,
    index: u32,
) -> Result<(Vec<Bytes>, Vec<u32>, String), ObjectError> {
    let shard_len = data.len().div_ceil(k).max(1);
    let mut frags: Vec<Bytes> = Vec::with_capacity(k + m);
    let mut tags = String::new();
    for i in 0..k {
        let mut frag = if data.len() >= shard_len {
            data.split_to(shard_len)
        } else {
            // Only the tail of the last stripe is padded (and so copied).
            let mut v = BytesMut::zeroed(shard_len);
            v[..data.len()].copy_from_slice(&data);
            data.clear();
            v
        };
        // Sealed in place, before parity: parity, repair and the drives only
        // ever see ciphertext.
        if let Some(key) = key {
            sealing::seal(key, index, i as u8, &mut frag, &mut tags);
        }
        frags.push(frag.freeze());
    }
    if m > 0 {
        let mut parity = vec![vec![0u8; shard_len]; m];
        {
            let data_refs: Vec<&[u8]> = frags.iter().map(|b| &b[..]).collect();
            let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
            codec.encode(&data_refs, &mut parity_refs)?;
        }
        frags.extend(parity.into_iter().map(Bytes::from));
    }
    // What the encoder made, fragment by fragment: reads, repair and the
    // scrubber check every fragment against these, end to end.
    let sums: Vec<u32> = frags.iter().map(|f| crc32c::crc32c(f)).collect();
    Ok((frags, sums, tags))
}

impl StripeJob {
    async fn run(self, data: BytesMut) -> Result<Stripe, ObjectError> {
        let len = data.len();
        let codec = self.codecs.get(self.k, self.m)?;
        let (k, m, index) = (self.k as usize, self.m as usize, self.index);
        let key = self.key.as_ref().map(|(key, _)| key.clone());
        // Sealing, coding and checksums: on the bulk threads (see `bulk`).
        let (frags, sums, tags) =
            crate::bulk::run(move || encode_stripe(data, k, m, &codec, key.as_deref(), index))
                .await?;
        let mut targets = Vec::new();
        let mut ops = Vec::new();
        for (f, payload) in frags.into_iter().enumerate() {
            let drive = self.drives[f];
            if drive == UNPLACED {
                continue;
            }
            targets.push(drive);
            ops.push(Request::Put {
                drive,
                id: chunk_id(self.id, self.index, f as u8),
                tenant: self.tenant,
                key_id: self.key.as_ref().map_or(0, |(_, id)| *id),
                payload,
                durable: self.durable,
            });
        }
        let (acked, full) = put_all(&self.chunks, &self.health, &targets, ops).await?;
        // Map acknowledgements back to fragment positions.
        let mut placed = self.drives.clone();
        for d in placed.iter_mut() {
            if *d != UNPLACED && !acked.contains(d) {
                *d = UNPLACED;
            }
        }
        let ok = placed.iter().filter(|&&d| d != UNPLACED).count();
        if ok < self.quorum {
            if full {
                return Err(ObjectError::InsufficientStorage);
            }
            return Err(ObjectError::Unavailable(format!(
                "stripe {}: {ok} of {} fragments durable, {} needed",
                self.index,
                k + m,
                self.quorum
            )));
        }
        Ok(Stripe {
            len: len as u32,
            drives: placed,
            sums,
            tags,
        })
    }
}

/// Sends puts (one per target drive) in one batch; returns the drives that
/// acknowledged, `UNPLACED` in the position of each that did not, and whether any
/// refused for want of space.
async fn put_all(
    chunks: &Fabric,
    health: &crate::DriveHealth,
    targets: &[u16],
    ops: Vec<Request>,
) -> Result<(Vec<u16>, bool), ObjectError> {
    if ops.is_empty() {
        return Ok((Vec::new(), false));
    }
    let res = chunks.call(ops).await?;
    let mut full = false;
    let placed = targets
        .iter()
        .zip(res)
        .map(|(&d, r)| match r {
            Ok(_) => d,
            Err(f) => {
                match f.code {
                    FailureCode::DriveFailed => health.mark_failed(d),
                    // Not a health matter: datapathd reports the drive as full.
                    FailureCode::NoSpace => full = true,
                    _ => {}
                }
                tracing::warn!(drive = d, "fragment write failed: {f}");
                UNPLACED
            }
        })
        .collect();
    Ok((placed, full))
}
