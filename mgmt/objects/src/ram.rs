//! The RAM tier: the verified plaintext of whole extents held in memory, so hot
//! values are served without a trip through the datapath.
//!
//! Entries are keyed by extent id. An extent's bytes never change once written (an
//! overwrite writes a new extent with a new random id), so an entry is never stale:
//! whether it is still *reachable* is decided by the manifest the caller looked up
//! after its metadata barrier. Coherence across nodes therefore comes from the
//! Raft-ordered metadata exactly as without the tier; the tier only saves the fetch.
//!
//! Bounded by bytes, least recently used first out (moka, with its LRU policy:
//! TinyLFU's admission filter would refuse a value written once and read once
//! right after, which is the KV-cache pattern). What enters: values a front end
//! asks to hold when it writes them ([`crate::ObjectStore::hold`]), and extents
//! read whole through [`crate::ObjectStore::read_hot`] (promotion on read).

use bytes::Bytes;
use moka::notification::RemovalCause;
use moka::policy::EvictionPolicy;
use moka::sync::Cache;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the tier has done since the node started.
#[derive(Debug, Default)]
pub struct RamCounters {
    /// Extents served from RAM.
    pub hits: AtomicU64,
    /// Extents a hot read had to fetch through the datapath.
    pub misses: AtomicU64,
    /// Extents taken in (on write or promoted on read).
    pub admitted: AtomicU64,
    /// Extents pushed out to make room (their bytes stay on the drives).
    pub evicted: AtomicU64,
    /// Bytes served from RAM.
    pub bytes_out: AtomicU64,
    /// Bytes taken in.
    pub bytes_in: AtomicU64,
}

/// One keyspace's share of the tier (a keyspace: a bucket, by its id; a KV
/// pool's, for `nodectl kv stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupFigures {
    /// Bytes held now.
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    /// Values pushed out of RAM to make room.
    pub evicted: u64,
    /// Values deleted from the drives to make room in a full KV pool (counted
    /// here, where a keyspace's other figures are, by the front end that did it).
    pub dropped: u64,
    /// Bytes of values written to and read from the keyspace through the front
    /// end that counts them (RESP), whichever tier served them.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// A keyspace's own bound within the tier: its values leave first-in first-out
/// when a new one would pass it (the tier as a whole stays least recently used).
struct Capped {
    cap: u64,
    order: VecDeque<u128>,
}

type Groups = Arc<Mutex<BTreeMap<Arc<str>, GroupFigures>>>;

fn with_group(groups: &Groups, g: &Arc<str>, f: impl FnOnce(&mut GroupFigures)) {
    let mut m = groups.lock().unwrap_or_else(|e| e.into_inner());
    f(m.entry(g.clone()).or_default());
}

#[derive(Clone)]
struct Held {
    tenant: u64,
    group: Arc<str>,
    bytes: Bytes,
}

/// The node's RAM tier (see the module doc). Capacity 0 turns it off.
pub struct RamTier {
    cache: Option<Cache<u128, Held>>,
    capacity: u64,
    counters: Arc<RamCounters>,
    groups: Groups,
    /// Bytes being gathered by reads that will bring their values in (each a
    /// buffer of the value's size): at most a quarter of the capacity, so many
    /// cold reads at once cannot hold more than that beside the tier.
    gathering: Arc<AtomicU64>,
    caps: Mutex<BTreeMap<Arc<str>, Capped>>,
}

/// A read's share of [`RamTier::gather`]'s bound, given back when dropped.
pub(crate) struct Gathering {
    bytes: u64,
    of: Arc<AtomicU64>,
}

impl Drop for Gathering {
    fn drop(&mut self) {
        self.of.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for RamTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RamTier")
            .field("capacity", &self.capacity)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl RamTier {
    /// A tier holding at most `capacity` bytes of values (0: off).
    pub fn new(capacity: u64) -> RamTier {
        let counters = Arc::new(RamCounters::default());
        let groups = Groups::default();
        let cache = (capacity > 0).then(|| {
            let c = counters.clone();
            let g = groups.clone();
            Cache::builder()
                .max_capacity(capacity)
                .eviction_policy(EvictionPolicy::lru())
                // A value over 4 GiB is never held (see `admit`), so its length fits.
                .weigher(|_: &u128, h: &Held| h.bytes.len() as u32)
                .eviction_listener(move |_, held: Held, cause| {
                    let size = cause == RemovalCause::Size;
                    if size {
                        c.evicted.fetch_add(1, Ordering::Relaxed);
                    }
                    with_group(&g, &held.group, |f| {
                        f.bytes = f.bytes.saturating_sub(held.bytes.len() as u64);
                        f.evicted += u64::from(size);
                    });
                })
                .build()
        });
        RamTier {
            cache,
            capacity,
            counters,
            groups,
            gathering: Arc::default(),
            caps: Mutex::default(),
        }
    }

    /// The bound, in bytes (0: the tier is off).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.weighted_size())
    }

    /// Extents held now.
    pub fn entries(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.entry_count())
    }

    pub fn counters(&self) -> &RamCounters {
        &self.counters
    }

    /// Bounds keyspace `group`'s share of the tier (none: only the tier's bound).
    pub fn cap_group(&self, group: &str, cap: Option<u64>) {
        let mut caps = self.caps.lock().unwrap_or_else(|e| e.into_inner());
        match cap {
            None => {
                caps.remove(group);
            }
            Some(cap) => match caps.get_mut(group) {
                Some(c) => c.cap = cap,
                None => {
                    caps.insert(
                        Arc::from(group),
                        Capped {
                            cap,
                            order: VecDeque::new(),
                        },
                    );
                }
            },
        }
    }

    /// Counts bytes written to and read from keyspace `group`.
    pub fn count_traffic(&self, group: &str, bytes_in: u64, bytes_out: u64) {
        with_group(&self.groups, &Arc::from(group), |f| {
            f.bytes_in += bytes_in;
            f.bytes_out += bytes_out;
        });
    }

    fn group_bytes(&self, group: &Arc<str>) -> u64 {
        let m = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        m.get(group).map_or(0, |f| f.bytes)
    }

    /// Counts values a front end deleted to make room in keyspace `group`.
    pub fn count_dropped(&self, group: &str, n: u64) {
        with_group(&self.groups, &Arc::from(group), |f| f.dropped += n);
    }

    /// One keyspace's share (all zero when it was never held).
    pub fn group(&self, group: &str) -> GroupFigures {
        let m = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        m.get(group).cloned().unwrap_or_default()
    }

    /// Each keyspace's share, by bucket id (keyspaces never held are absent).
    pub fn groups(&self) -> BTreeMap<String, GroupFigures> {
        let m = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        m.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    /// The largest value held: an eighth of the tier, so one value never empties
    /// it of everything else.
    pub fn largest(&self) -> u64 {
        (self.capacity / 8).min(u32::MAX as u64)
    }

    /// The extent's bytes, when held (and counts the hit).
    pub(crate) fn get(&self, extent: u128) -> Option<Bytes> {
        let held = self.cache.as_ref()?.get(&extent)?;
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        with_group(&self.groups, &held.group, |f| f.hits += 1);
        self.counters
            .bytes_out
            .fetch_add(held.bytes.len() as u64, Ordering::Relaxed);
        Some(held.bytes)
    }

    pub(crate) fn missed(&self, group: &Arc<str>) {
        if self.cache.is_some() {
            self.counters.misses.fetch_add(1, Ordering::Relaxed);
            with_group(&self.groups, group, |f| f.misses += 1);
        }
    }

    /// Whether a hot read of an extent this large should bring it in.
    pub(crate) fn takes(&self, len: u64) -> bool {
        self.cache.is_some() && len > 0 && len <= self.largest()
    }

    /// Room to gather `len` bytes for a promotion, if the bound allows.
    pub(crate) fn gather(&self, len: u64) -> Option<Gathering> {
        let bound = self.capacity / 4;
        let mut now = self.gathering.load(Ordering::Relaxed);
        loop {
            if now + len > bound {
                return None;
            }
            match self.gathering.compare_exchange(
                now,
                now + len,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Some(Gathering {
                        bytes: len,
                        of: self.gathering.clone(),
                    })
                }
                Err(actual) => now = actual,
            }
        }
    }

    /// Holds an extent's verified plaintext. The bound is kept before this returns:
    /// pending evictions run at once, so a flood of writes cannot outgrow it.
    pub(crate) fn admit(&self, tenant: u64, group: &Arc<str>, extent: u128, bytes: Bytes) {
        let Some(c) = &self.cache else { return };
        if !self.takes(bytes.len() as u64) || c.contains_key(&extent) {
            return;
        }
        let len = bytes.len() as u64;
        // A keyspace with a bound of its own: its oldest values make room first
        // (each removal runs the listener, which takes its bytes off the count).
        {
            let mut caps = self.caps.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(capped) = caps.get_mut(group) {
                if len > capped.cap {
                    return;
                }
                while self.group_bytes(group) + len > capped.cap {
                    match capped.order.pop_front() {
                        Some(old) => c.invalidate(&old),
                        None => break,
                    }
                }
                capped.order.push_back(extent);
                // Values the tier evicted on its own stay listed until popped:
                // keep the list from outgrowing what is held.
                if capped.order.len() > 1024 && capped.order.len() > 2 * c.entry_count() as usize {
                    capped.order.retain(|id| c.contains_key(id));
                }
            }
        }
        self.counters.admitted.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_in.fetch_add(len, Ordering::Relaxed);
        with_group(&self.groups, group, |f| f.bytes += len);
        c.insert(
            extent,
            Held {
                tenant,
                group: group.clone(),
                bytes,
            },
        );
        c.run_pending_tasks();
    }

    /// Drops an extent (freed: nothing references it any more).
    pub(crate) fn forget(&self, extent: u128) {
        if let Some(c) = &self.cache {
            c.invalidate(&extent);
            // Applied now: until moka's maintenance runs, the removed value is
            // still held and still counted in the tier's size.
            c.run_pending_tasks();
        }
    }

    /// Drops every extent of a tenant (its key was destroyed: no plaintext of it
    /// may stay anywhere).
    pub fn forget_tenant(&self, tenant: u64) {
        if let Some(c) = &self.cache {
            // Each entry removed now, not by a predicate the cache applies lazily
            // (moka's invalidate_entries_if left the bytes held, and counted,
            // until a later maintenance pass got round to them).
            let gone: Vec<u128> = c
                .iter()
                .filter(|(_, h)| h.tenant == tenant)
                .map(|(k, _)| *k)
                .collect();
            for k in gone {
                c.invalidate(&k);
            }
            c.run_pending_tasks();
        }
    }

    /// The tenants with bytes held, so a sweep can drop those that were purged.
    pub(crate) fn tenants(&self) -> std::collections::BTreeSet<u64> {
        self.cache
            .as_ref()
            .map(|c| c.iter().map(|(_, h)| h.tenant).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g() -> Arc<str> {
        Arc::from("b")
    }

    #[test]
    fn holds_up_to_its_bound_and_drops_the_least_recently_used() {
        let ram = RamTier::new(64 << 10);
        for i in 0..8u128 {
            ram.admit(1, &g(), i, Bytes::from(vec![i as u8; 8 << 10]));
        }
        assert_eq!(ram.bytes(), 64 << 10);
        assert!(ram.get(0).is_some(), "0 is now the most recently used");
        ram.admit(1, &g(), 8, Bytes::from(vec![8; 8 << 10]));
        assert!(ram.bytes() <= 64 << 10);
        assert!(ram.get(0).is_some());
        assert!(ram.get(1).is_none(), "1 was the least recently used");
        assert_eq!(ram.counters().evicted.load(Ordering::Relaxed), 1);
        assert_eq!(&ram.get(8).unwrap()[..], &[8u8; 8 << 10][..]);
        let f = &ram.groups()["b"];
        assert_eq!((f.bytes, f.evicted, f.hits), (64 << 10, 1, 3));
    }

    #[test]
    fn refuses_values_over_an_eighth_and_holds_nothing_when_off() {
        let ram = RamTier::new(64 << 10);
        ram.admit(1, &g(), 1, Bytes::from(vec![0; (8 << 10) + 1]));
        assert!(ram.get(1).is_none());
        let off = RamTier::new(0);
        off.admit(1, &g(), 1, Bytes::from_static(b"x"));
        assert!(off.get(1).is_none());
        assert_eq!(off.bytes(), 0);
    }

    #[test]
    fn a_capped_keyspace_makes_room_from_its_own_oldest() {
        let ram = RamTier::new(1 << 20);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        ram.cap_group("a", Some(32 << 10));
        for i in 0..4u128 {
            ram.admit(1, &b, 100 + i, Bytes::from(vec![0; 8 << 10]));
        }
        for i in 0..6u128 {
            ram.admit(1, &a, i, Bytes::from(vec![i as u8; 8 << 10]));
        }
        let g = ram.groups();
        assert_eq!(g["a"].bytes, 32 << 10, "a keeps to its cap");
        assert_eq!(g["b"].bytes, 32 << 10, "b is untouched");
        assert!(
            ram.get(0).is_none() && ram.get(1).is_none(),
            "a's oldest left"
        );
        assert!(ram.get(5).is_some() && ram.get(100).is_some());
        ram.admit(1, &a, 9, Bytes::from(vec![0; 33 << 10]));
        assert!(ram.get(9).is_none(), "larger than its cap: not held");
        ram.cap_group("a", None);
        ram.admit(1, &a, 10, Bytes::from(vec![0; 8 << 10]));
        assert_eq!(ram.groups()["a"].bytes, 40 << 10);
    }

    #[test]
    fn gathering_is_bounded_and_given_back() {
        let ram = RamTier::new(64 << 10);
        let a = ram.gather(8 << 10).unwrap();
        let _b = ram.gather(8 << 10).unwrap();
        assert!(ram.gather(1).is_none(), "a quarter of the tier at most");
        drop(a);
        assert!(ram.gather(8 << 10).is_some());
    }

    #[test]
    fn a_purged_tenant_leaves_nothing_behind() {
        let ram = RamTier::new(1 << 20);
        ram.admit(1, &g(), 1, Bytes::from_static(b"one"));
        ram.admit(2, &g(), 2, Bytes::from_static(b"two"));
        ram.forget_tenant(1);
        assert_eq!(
            ram.bytes(),
            3,
            "its bytes are gone at once, not only hidden"
        );
        assert!(ram.get(1).is_none());
        assert!(ram.get(2).is_some());
        assert_eq!(ram.tenants(), [2].into());
        ram.forget(2);
        assert_eq!(ram.bytes(), 0, "a forgotten value no longer counts");
        assert!(ram.get(2).is_none());
        assert_eq!(ram.groups()["b"].bytes, 0, "what left is no longer counted");
    }
}
