//! Writes not yet committed: a file's draft holds the bytes clients wrote
//! (`UNSTABLE`, as NFS clients write) over the object they started from, until
//! a COMMIT, a stable write, a read, [`FLUSH_BYTES`] of them, or
//! [`IDLE_FLUSH`] without a write makes the draft the key's object.
//!
//! A flush rebuilds the object copy-on-write at extent granularity: every
//! extent of the old object that no write touched is kept as it is (appends
//! cost only their own bytes); every extent a write touches is written again
//! whole with the new bytes over the old (a one-byte change in the middle of a
//! file written as one 1 GiB object rewrites that gigabyte). In a versioned
//! bucket nothing is shared with the old version: every flush writes the whole
//! file.

use crate::exports::Export;
use bytes::{Bytes, BytesMut};
use cairn_meta::{Extent, MetaError, ObjectRecord};
use cairn_objects::{ObjectError, ObjectStore, Written};
use futures::{StreamExt, TryStreamExt};
use nfs3_server::nfs3_types::nfs3::nfsstat3;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes a draft holds before it is flushed without being asked.
pub const FLUSH_BYTES: u64 = 64 << 20;
/// Bytes all drafts hold together before a write flushes its own draft.
pub const TOTAL_BYTES: u64 = 512 << 20;
/// A draft with writes and none for this long is flushed.
pub const IDLE_FLUSH: Duration = Duration::from_secs(5);
/// The largest extent a flush writes (an object's extents are at most 5 GiB).
const PIECE_MAX: u64 = 4 << 30;
/// The most a flush writes in one buffer.
const PIECE_CHUNK: u64 = 4 << 20;
/// Tries of a flush whose base another write replaced meanwhile.
const REBASES: usize = 3;

/// One file's uncommitted writes over `base`.
#[derive(Debug)]
pub struct Draft {
    /// The object the writes go over (none: the key holds nothing yet).
    pub base: Option<ObjectRecord>,
    /// The file's size, writes and truncation included.
    pub size: u64,
    /// Writes in arrival order (a later one wins where they overlap).
    writes: Vec<(u64, Bytes)>,
    held: u64,
    /// Set by a truncation: the size is the client's, not `base`'s.
    sized: bool,
    /// The base's bytes from here on are gone (cut by a truncation: an
    /// extension after it reads zeros there).
    cut: u64,
    pub modified_ms: i64,
    pub touched: Instant,
    /// A flush failed and dropped writes the client was told were taken
    /// (`UNSTABLE`): what the next COMMIT answers instead of OK.
    pub failed: Option<nfsstat3>,
    /// Writes answered `UNSTABLE` are in the draft (a failed flush must then
    /// be reported at the next COMMIT; one whose writes were all answered
    /// with the failure need not be).
    pub unstable: bool,
    /// The file was removed or renamed away: the draft takes no more writes
    /// (they answer `STALE`).
    pub gone: bool,
}

impl Draft {
    pub fn new(base: Option<ObjectRecord>) -> Draft {
        let size = base.as_ref().map_or(0, |b| b.size);
        Draft {
            size,
            cut: size,
            base,
            writes: Vec::new(),
            held: 0,
            sized: false,
            modified_ms: cairn_meta::now_ms(),
            touched: Instant::now(),
            failed: None,
            unstable: false,
            gone: false,
        }
    }

    /// Whether anything is waiting to be flushed.
    pub fn dirty(&self) -> bool {
        !self.writes.is_empty() || self.sized
    }

    pub fn held(&self) -> u64 {
        self.held
    }

    pub fn write(&mut self, offset: u64, data: Bytes) {
        self.size = self.size.max(offset + data.len() as u64);
        self.held += data.len() as u64;
        self.writes.push((offset, data));
        self.modified_ms = cairn_meta::now_ms();
        self.touched = Instant::now();
    }

    /// Sets the size (a truncation or an extension with zeros).
    pub fn resize(&mut self, size: u64) {
        for (off, data) in &mut self.writes {
            if *off >= size {
                *data = Bytes::new();
            } else if *off + data.len() as u64 > size {
                data.truncate((size - *off) as usize);
            }
        }
        self.writes.retain(|(_, d)| !d.is_empty());
        self.size = size;
        self.cut = self.cut.min(size);
        self.sized = true;
        self.modified_ms = cairn_meta::now_ms();
        self.touched = Instant::now();
    }

    fn touches(&self, lo: u64, hi: u64) -> bool {
        self.writes
            .iter()
            .any(|(o, d)| *o < hi && *o + d.len() as u64 > lo)
    }

    /// Makes the draft the key's object (see the module's doc); afterwards it
    /// holds nothing and its base is the new object. A base another write
    /// replaced meanwhile is read again and the writes go over it.
    pub async fn flush(
        &mut self,
        store: &Arc<ObjectStore>,
        ex: &Export,
        key: &str,
    ) -> Result<(), ObjectError> {
        if !self.dirty() {
            return Ok(());
        }
        let r = self.flush_rebasing(store, ex, key).await;
        if let Err(e) = &r {
            // Nothing of the draft is kept (a write refused for want of room
            // must not land later when room is made), and its memory goes; the
            // client hears of it at its next COMMIT.
            if self.unstable {
                self.failed = Some(lost(e));
            }
            self.writes.clear();
            self.held = 0;
            self.sized = false;
            self.size = self.base.as_ref().map_or(0, |b| b.size);
            self.cut = self.size;
        }
        self.unstable = false;
        r
    }

    async fn flush_rebasing(
        &mut self,
        store: &Arc<ObjectStore>,
        ex: &Export,
        key: &str,
    ) -> Result<(), ObjectError> {
        let mut tries = 0;
        loop {
            match self.flush_once(store, ex, key).await {
                Err(ObjectError::Meta(MetaError::PreconditionFailed | MetaError::NoSuchKey(_)))
                    if tries < REBASES =>
                {
                    tries += 1;
                    let now = store.head_object(ex.tenant, &ex.bucket, key).await;
                    // A key deleted meanwhile stays deleted: the writes are not
                    // made into a new file of that name.
                    self.base = Some(now?);
                    let now = self.base.as_ref().map_or(0, |b| b.size);
                    if self.sized {
                        self.cut = self.cut.min(now);
                    } else {
                        let end = self.writes.iter().map(|(o, d)| o + d.len() as u64).max();
                        self.size = end.unwrap_or(0).max(now);
                        self.cut = now;
                    }
                }
                other => return other,
            }
        }
    }

    async fn flush_once(
        &mut self,
        store: &Arc<ObjectStore>,
        ex: &Export,
        key: &str,
    ) -> Result<(), ObjectError> {
        let plan = self.plan(ex.versioned);
        let mut extents = Vec::with_capacity(plan.len());
        let mut written: Vec<Written> = Vec::new();
        for piece in plan {
            match piece {
                Piece::Keep(e) => extents.push(e),
                Piece::New(lo, hi) => {
                    let body = self.bytes(store, ex.tenant, lo, hi);
                    let w = store
                        .write_piece(ex.tenant, &ex.bucket, body, hi - lo)
                        .await?;
                    extents.push(w.extent.clone());
                    written.push(w);
                }
            }
        }
        let rec = store
            .commit_rebuilt(
                ex.tenant,
                &ex.bucket,
                key,
                self.base.as_ref(),
                extents,
                &written,
            )
            .await?;
        self.size = rec.size;
        self.cut = rec.size;
        self.base = Some(rec);
        self.writes.clear();
        self.held = 0;
        self.sized = false;
        Ok(())
    }

    /// Which extents of the base stay and which ranges are written anew.
    fn plan(&self, versioned: bool) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        let fresh = |out: &mut Vec<Piece>, lo: u64, hi: u64| {
            if let Some(Piece::New(_, end)) = out.last_mut() {
                if *end == lo {
                    *end = hi;
                    return;
                }
            }
            out.push(Piece::New(lo, hi));
        };
        let mut pos = 0;
        if let Some(b) = &self.base {
            for e in &b.extents {
                let (lo, hi) = (pos, pos + e.size);
                pos = hi;
                if e.size == 0 || lo >= self.size {
                    continue;
                }
                if !versioned && hi <= self.size.min(self.cut) && !self.touches(lo, hi) {
                    out.push(Piece::Keep(e.clone()));
                } else {
                    fresh(&mut out, lo, hi.min(self.size));
                }
            }
        }
        if pos < self.size {
            fresh(&mut out, pos, self.size);
        }
        if out.is_empty() {
            // An empty file is one empty piece (as an empty PUT is).
            out.push(Piece::New(0, 0));
        }
        // No piece larger than an extent may be.
        out.into_iter()
            .flat_map(|p| match p {
                Piece::New(lo, hi) if hi - lo > PIECE_MAX => (lo..hi)
                    .step_by(PIECE_MAX as usize)
                    .map(|a| Piece::New(a, (a + PIECE_MAX).min(hi)))
                    .collect(),
                p => vec![p],
            })
            .collect()
    }

    /// The file's bytes `lo..hi` as they are with the writes: the base's bytes
    /// (zeros past its end or a truncation) with every write over them, in buffers of at most
    /// [`PIECE_CHUNK`].
    fn bytes(
        &self,
        store: &Arc<ObjectStore>,
        tenant: u64,
        lo: u64,
        hi: u64,
    ) -> futures::stream::BoxStream<'static, Result<Bytes, ObjectError>> {
        let base = self.base.clone();
        let cut = self.cut;
        let writes = self.writes.clone();
        let store = store.clone();
        futures::stream::iter((lo..hi).step_by(PIECE_CHUNK as usize))
            .then(move |c| {
                let (base, writes, store) = (base.clone(), writes.clone(), store.clone());
                async move {
                    let end = (c + PIECE_CHUNK).min(hi);
                    let mut buf = BytesMut::zeroed((end - c) as usize);
                    if let Some(b) = &base {
                        let upto = end.min(b.size).min(cut);
                        if c < upto {
                            let old: Vec<Bytes> =
                                store.read(tenant, b, c, upto).try_collect().await?;
                            let mut at = 0;
                            for part in old {
                                buf[at..at + part.len()].copy_from_slice(&part);
                                at += part.len();
                            }
                        }
                    }
                    for (o, d) in &writes {
                        let (wlo, whi) = (*o, *o + d.len() as u64);
                        let (from, to) = (wlo.max(c), whi.min(end));
                        if from < to {
                            buf[(from - c) as usize..(to - c) as usize]
                                .copy_from_slice(&d[(from - wlo) as usize..(to - wlo) as usize]);
                        }
                    }
                    Ok(buf.freeze())
                }
            })
            .boxed()
    }
}

#[derive(Debug)]
enum Piece {
    Keep(Extent),
    New(u64, u64),
}

/// A draft, shared by the requests on its file.
pub type Shared = Arc<tokio::sync::Mutex<Draft>>;

/// What a failed flush answers: `STALE` for a file removed meanwhile (over
/// S3, or by another client), else the error's status.
pub fn lost(e: &ObjectError) -> nfsstat3 {
    match e {
        ObjectError::Meta(MetaError::NoSuchKey(_)) => nfsstat3::NFS3ERR_STALE,
        e => crate::status(e),
    }
}

/// Every file's draft, by export and key.
#[derive(Debug, Default)]
pub struct Drafts {
    map: Mutex<HashMap<(u64, String), Shared>>,
    /// Bytes all drafts hold (an estimate: updated as writes come and flushes
    /// go).
    pub total: AtomicU64,
}

impl Drafts {
    pub fn get(&self, export: u64, key: &str) -> Option<Shared> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(export, key.to_string())).cloned()
    }

    /// The draft of `key`, made over `base()` if there is none.
    pub fn get_or(
        &self,
        export: u64,
        key: &str,
        base: impl FnOnce() -> Option<ObjectRecord>,
    ) -> Shared {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry((export, key.to_string()))
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Draft::new(base()))))
            .clone()
    }

    /// Retires `key`'s draft (its file was removed or renamed away): writes
    /// waiting for it find it gone, and its bytes leave the total.
    pub async fn retire(&self, export: u64, key: &str) {
        let d = {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.remove(&(export, key.to_string()))
        };
        if let Some(d) = d {
            let mut d = d.lock().await;
            Self::retire_locked(self, &mut d);
        }
    }

    /// [`Drafts::retire`] of a draft the caller holds, already out of the map
    /// or taken out here.
    pub fn retire_locked(&self, d: &mut Draft) {
        d.gone = true;
        self.sub(d.held);
        d.writes.clear();
        d.held = 0;
    }

    /// Takes `key`'s draft out of the map (the caller retires it).
    pub fn take(&self, export: u64, key: &str) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&(export, key.to_string()));
    }

    /// Every draft, for the idle flusher.
    pub fn all(&self) -> Vec<((u64, String), Shared)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Forgets drafts with nothing to flush untouched for `idle` (a later write
    /// starts from the object as it is then).
    pub fn forget_idle(&self, idle: Duration) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, d| match d.try_lock() {
            Ok(d) => d.dirty() || d.failed.is_some() || d.touched.elapsed() < idle,
            Err(_) => true,
        });
    }

    pub fn add(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sub(&self, n: u64) {
        let _ = self
            .total
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(n))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(sizes: &[u64]) -> ObjectRecord {
        let mut rec = ObjectRecord {
            size: sizes.iter().sum(),
            etag: "e".into(),
            modified_ms: 1,
            ..ObjectRecord::empty()
        };
        for (i, s) in sizes.iter().enumerate() {
            rec.extents.push(Extent {
                id: i as u128 + 1,
                size: *s,
                layout: cairn_meta::Layout::Replicated {
                    drives: vec![0],
                    sum: None,
                    tag: None,
                },
                sealed: None,
            });
        }
        rec
    }

    fn shape(p: &[Piece]) -> Vec<String> {
        p.iter()
            .map(|p| match p {
                Piece::Keep(e) => format!("keep {}", e.id),
                Piece::New(lo, hi) => format!("new {lo}..{hi}"),
            })
            .collect()
    }

    #[test]
    fn an_append_keeps_every_extent_and_writes_only_its_bytes() {
        let mut d = Draft::new(Some(base(&[10, 10])));
        d.write(20, Bytes::from_static(b"more"));
        assert_eq!(shape(&d.plan(false)), ["keep 1", "keep 2", "new 20..24"]);
    }

    #[test]
    fn a_write_inside_rewrites_the_extents_it_touches_whole() {
        let mut d = Draft::new(Some(base(&[10, 10, 10])));
        d.write(12, Bytes::from_static(b"x"));
        assert_eq!(shape(&d.plan(false)), ["keep 1", "new 10..20", "keep 3"]);
        // Across two extents: both, as one piece.
        d.write(19, Bytes::from_static(b"yy"));
        assert_eq!(shape(&d.plan(false)), ["keep 1", "new 10..30"]);
        // A versioned bucket shares nothing with the version it keeps.
        assert_eq!(shape(&d.plan(true)), ["new 0..30"]);
    }

    #[test]
    fn a_long_gap_is_written_in_pieces_an_extent_can_be() {
        let mut d = Draft::new(None);
        d.write(9 << 30, Bytes::from_static(b"end"));
        let p = shape(&d.plan(false));
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!(p[0], format!("new 0..{}", 4u64 << 30));
        assert_eq!(p[2], format!("new {}..{}", 8u64 << 30, (9u64 << 30) + 3));
    }

    #[test]
    fn a_truncation_keeps_whole_extents_below_it_and_cuts_the_one_across_it() {
        let mut d = Draft::new(Some(base(&[10, 10, 10])));
        d.write(25, Bytes::from_static(b"gone"));
        d.resize(15);
        assert_eq!(shape(&d.plan(false)), ["keep 1", "new 10..15"]);
        assert_eq!(
            d.held(),
            4,
            "the cut write's bytes are still counted until the flush"
        );
        d.resize(0);
        assert_eq!(shape(&d.plan(false)), ["new 0..0"], "an empty file");
        d.resize(40);
        assert_eq!(shape(&d.plan(false)), ["new 0..40"], "extended with zeros");
    }

    #[tokio::test]
    async fn a_retired_draft_gives_its_bytes_back_to_the_budget() {
        let drafts = Drafts::default();
        for (key, n) in [("a", 100usize), ("b", 50)] {
            let shared = drafts.get_or(1, key, || None);
            shared.lock().await.write(0, Bytes::from(vec![7u8; n]));
            drafts.add(n as u64);
        }
        let a = drafts.get(1, "a").expect("a's draft");
        assert_eq!(drafts.total.load(Ordering::Relaxed), 150);

        // Removed: its draft leaves the map and the total, and a writer
        // holding it finds it gone.
        drafts.retire(1, "a").await;
        assert_eq!(drafts.total.load(Ordering::Relaxed), 50);
        assert!(drafts.get(1, "a").is_none());
        let a = a.lock().await;
        assert!(a.gone && a.held() == 0 && !a.dirty());

        // Renamed away: taken out, then retired under the caller's lock.
        let b = drafts.get(1, "b").expect("b's draft");
        let mut b = b.lock().await;
        drafts.take(1, "b");
        drafts.retire_locked(&mut b);
        assert_eq!(drafts.total.load(Ordering::Relaxed), 0);
        assert!(drafts.get(1, "b").is_none() && b.gone);
    }
}
