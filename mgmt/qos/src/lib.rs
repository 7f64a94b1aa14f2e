//! Sharing one node between tenants.
//!
//! Two mechanisms, both node-local (each node shares its own cores and drives):
//!
//! - **Limits**: a tenant's requests and bytes per second, read and write, each a
//!   token bucket holding one second's worth (GCRA: one timestamp per bucket, so a
//!   bucket costs nothing while idle). Bytes over the rate wait: the data is shaped,
//!   never refused. Requests over the rate wait up to [`MAX_REQUEST_WAIT`]; beyond
//!   that they are refused ([`QosError::SlowDown`]; S3 answers `503 SlowDown`, which
//!   every SDK retries with backoff). Limits changed start from full buckets.
//! - **Fair slots**: while more than one tenant has data work (a stripe written
//!   or read, a small object's copies) running or waiting, the node runs at most
//!   `slots` units at once, and each tenant is entitled to its weighted share of
//!   them. A freed slot goes to the waiting tenant holding the fewest slots per
//!   unit of weight, oldest request first; a tenant below its share runs at once
//!   even on a full node (which is briefly over its slots; the others give back
//!   what they hold over their shares as their units end). So a tenant streaming
//!   large objects cannot make another's small request wait behind its queue,
//!   nor even for one of its units to end. A tenant counts as having work for
//!   half a second after its last unit ends (a client's requests come with gaps
//!   between them). A tenant alone is not held at all: sharing costs a single
//!   tenant nothing.
//! - **Small work apart**: a unit moving less than [`SMALL_UNIT`] (a small
//!   object's copies, a read of a few pages) is shared the same way but in a
//!   pool of its own, [`SMALL_PER_SLOT`] times larger. Such a unit holds a
//!   drive for well under a millisecond, and datapathd runs it ahead of large
//!   work; counted against the large slots, a tenant with one small PUT in
//!   flight waited for a freed slot (its own, or a large tenant's stripe) before
//!   its next small GET could start, which made its latency the large tenant's.
//!   A tenant flooding small work still gets only its share of the small pool.
//! - **No unit waits for ever**: a waiter looks again every [`ACTIVE`] (the
//!   others may have gone idle with nothing ending to say so), and after
//!   [`MAX_SLOT_WAIT`] runs over the slots. A request that holds a slot while
//!   it asks for another (a copy reads its source while it writes) would
//!   otherwise wait for itself while other tenants are active.
//!
//! The limits come from a [`Source`] (the tenant records in the metadata), read
//! again at most once per [`REFRESH`] per tenant, so a change made through the
//! admin API on any node takes effect everywhere within that time.

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The longest a request over its tenant's request rate waits for its turn before
/// it is refused instead.
pub const MAX_REQUEST_WAIT: Duration = Duration::from_secs(2);
/// How long a tenant's limits are used before they are read again.
pub const REFRESH: Duration = Duration::from_secs(1);
/// A unit of data work moving fewer bytes than this is small work, shared in a
/// pool of its own (see the crate's doc).
pub const SMALL_UNIT: u64 = 256 << 10;
/// The small pool's size: this many small units per large slot.
pub const SMALL_PER_SLOT: usize = 8;
/// The longest a unit waits for a slot; past it, it runs over the slots (see
/// [`Qos::admit`]).
pub const MAX_SLOT_WAIT: Duration = Duration::from_secs(2);
/// How long after its last unit of work ended a tenant still counts as one
/// with work: a client's requests come one after another, with a gap between,
/// and the node stays shared across the gap.
const ACTIVE: Duration = Duration::from_millis(500);
/// The longest a transfer over its byte rate sleeps before it looks again (at
/// its turn, and at its tenant's limits).
const SHAPING_SLICE: Duration = Duration::from_millis(250);
/// Each bucket holds one second of its rate: a tenant idle for a second may burst
/// that much at once.
const BURST: Duration = Duration::from_secs(1);

/// A tenant's limits and weight, as kept in its record. None: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// The tenant's share of a busy node relative to other tenants' weights
    /// (none: 1). A tenant of weight 2 gets twice the slots of one of weight 1
    /// while both have work waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_requests_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_requests_per_sec: Option<u64>,
}

impl Limits {
    pub fn is_none(&self) -> bool {
        *self == Limits::default()
    }

    fn weight(&self) -> u64 {
        u64::from(self.weight.unwrap_or(1).max(1))
    }

    fn bytes_per_sec(&self, way: Way) -> Option<u64> {
        match way {
            Way::Read => self.read_bytes_per_sec,
            Way::Write => self.write_bytes_per_sec,
        }
        .filter(|&r| r > 0)
    }

    fn requests_per_sec(&self, way: Way) -> Option<u64> {
        match way {
            Way::Read => self.read_requests_per_sec,
            Way::Write => self.write_requests_per_sec,
        }
        .filter(|&r| r > 0)
    }
}

/// Which of a tenant's rates a request or transfer counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Read,
    Write,
}

impl std::fmt::Display for Way {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Way::Read => "read",
            Way::Write => "write",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QosError {
    #[error("tenant {tenant:016x} is over its {way} request rate; retry in {} ms", retry_after.as_millis())]
    SlowDown {
        tenant: u64,
        way: Way,
        retry_after: Duration,
    },
}

impl std::fmt::Debug for Qos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qos(slots={})", self.inner.slots)
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot(tenant={:016x})", self.tenant)
    }
}

/// Where a tenant's limits are read from.
pub type Source = Arc<dyn Fn(u64) -> Limits + Send + Sync>;

/// A node's sharing between tenants. Cheap to clone; clones share one state.
#[derive(Clone)]
pub struct Qos {
    inner: Arc<Inner>,
}

struct Inner {
    /// How many units of data work run at once; 0: no fair slots (every unit
    /// runs at once, as it comes).
    slots: usize,
    source: Source,
    state: Mutex<State>,
}

/// The two pools of slots (indexes of the per-pool arrays).
const LARGE: usize = 0;
const SMALL: usize = 1;

type Waiter = (u64, oneshot::Sender<Slot>);

#[derive(Default)]
struct State {
    /// Slots held, per pool.
    busy: [usize; 2],
    /// Orders waiters across tenants (oldest first among equals).
    seq: u64,
    tenants: HashMap<u64, Tenant>,
}

struct Tenant {
    limits: Limits,
    read_at: Instant,
    /// Slots held, per pool.
    busy: [usize; 2],
    /// When its last unit of work ended (or began).
    worked_at: Instant,
    /// Units waiting for a slot, per pool, oldest first.
    waiting: [VecDeque<Waiter>; 2],
    buckets: [Bucket; 4],
    stats: TenantStats,
}

/// What a node's sharing has done to one tenant since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStats {
    /// Slots held now.
    pub busy: usize,
    /// Units of work waiting for a slot now.
    pub waiting: usize,
    /// Units of work that had to wait for a slot.
    pub queued: u64,
    /// Requests refused for the tenant's request rate.
    pub slowed_down: u64,
    /// Milliseconds spent waiting for the tenant's rates (requests and bytes).
    pub shaped_ms: u64,
}

/// One unit of data work's permission to run; the slot is free again when it is
/// dropped.
#[must_use = "the slot is freed when dropped"]
pub struct Slot {
    gate: Option<Arc<Inner>>,
    tenant: u64,
    class: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(inner) = self.gate.take() {
            let mut st = inner.lock();
            st.busy[self.class] -= 1;
            if let Some(t) = st.tenants.get_mut(&self.tenant) {
                t.busy[self.class] -= 1;
                t.worked_at = Instant::now();
            }
            inner.dispatch(&mut st, self.class);
        }
    }
}

impl Qos {
    /// Sharing with `slots` units of data work at once (0: no fair slots) and
    /// limits read from `source`.
    pub fn new(slots: usize, source: Source) -> Qos {
        Qos {
            inner: Arc::new(Inner {
                slots,
                source,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Reads the tenant's limits again now (they were changed through this
    /// node; other nodes read them within [`REFRESH`]).
    pub fn reread(&self, tenant: u64) {
        self.inner.refresh(tenant, true);
    }

    /// Counts one request against the tenant's request rate, waiting for its
    /// turn; refused when the turn is more than [`MAX_REQUEST_WAIT`] away.
    pub async fn request(&self, tenant: u64, way: Way) -> Result<(), QosError> {
        self.inner.refresh(tenant, false);
        let wait = {
            let mut st = self.inner.lock();
            let t = self.inner.tenant(&mut st, tenant);
            let Some(rate) = t.limits.requests_per_sec(way) else {
                return Ok(());
            };
            let bucket = &mut t.buckets[bucket(way, false)];
            let now = Instant::now();
            let wait = bucket.turn(now, 1, rate);
            if wait > MAX_REQUEST_WAIT {
                t.stats.slowed_down += 1;
                return Err(QosError::SlowDown {
                    tenant,
                    way,
                    retry_after: wait,
                });
            }
            bucket.take(now, 1, rate);
            t.stats.shaped_ms += wait.as_millis() as u64;
            wait
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// Waits until a unit of the tenant's data work moving `bytes` may run: its
    /// byte rate first, then a fair slot. The slot is held until dropped.
    pub async fn admit(&self, tenant: u64, way: Way, bytes: u64) -> Slot {
        // Shaped first: a tenant waiting on its own rate holds no place in the
        // queue for slots. The bytes are taken only when they may go — never
        // booked ahead — so a request given up while it waits costs nothing,
        // and a limit lifted or raised frees it within a slice.
        loop {
            self.inner.refresh(tenant, false);
            let wait = {
                let mut st = self.inner.lock();
                let t = self.inner.tenant(&mut st, tenant);
                let Some(rate) = t.limits.bytes_per_sec(way) else {
                    break;
                };
                let now = Instant::now();
                let b = &mut t.buckets[bucket(way, true)];
                let wait = b.turn(now, bytes, rate);
                if wait.is_zero() {
                    b.take(now, bytes, rate);
                    break;
                }
                let slice = wait.min(SHAPING_SLICE);
                t.stats.shaped_ms += slice.as_millis() as u64;
                slice
            };
            tokio::time::sleep(wait).await;
        }
        let unslotted = Slot {
            gate: None,
            tenant,
            class: LARGE,
        };
        if self.inner.slots == 0 {
            return unslotted;
        }
        let class = if bytes < SMALL_UNIT { SMALL } else { LARGE };
        let (seq, mut rx) = {
            let mut st = self.inner.lock();
            st.seq += 1;
            let seq = st.seq;
            let (tx, rx) = oneshot::channel();
            self.inner.tenant(&mut st, tenant).waiting[class].push_back((seq, tx));
            self.inner.dispatch(&mut st, class);
            (seq, rx)
        };
        match rx.try_recv() {
            Ok(slot) => return slot,
            Err(oneshot::error::TryRecvError::Empty) => {
                let mut st = self.inner.lock();
                self.inner.tenant(&mut st, tenant).stats.queued += 1;
            }
            Err(oneshot::error::TryRecvError::Closed) => return unslotted,
        }
        let started = Instant::now();
        loop {
            match tokio::time::timeout(ACTIVE, &mut rx).await {
                Ok(Ok(slot)) => return slot,
                // The sender is only dropped with the state, which outlives
                // every waiter; were it ever, running unslotted beats hanging.
                Ok(Err(_)) => return unslotted,
                Err(_) => {}
            }
            // Nothing ended meanwhile, but the others may have gone idle (a
            // tenant counts as active for ACTIVE after its last unit): look
            // again. And a unit that has waited MAX_SLOT_WAIT runs over the
            // slots: a request holding a slot while it asks for another (a
            // copy reads the source while it writes) must not wait for itself.
            let mut st = self.inner.lock();
            self.inner.dispatch(&mut st, class);
            if let Ok(slot) = rx.try_recv() {
                return slot;
            }
            if started.elapsed() >= MAX_SLOT_WAIT {
                self.inner.tenant(&mut st, tenant).waiting[class].retain(|(s, _)| *s != seq);
                return self.inner.grant(&mut st, tenant, class);
            }
        }
    }

    /// Each tenant's figures, by tenant id.
    pub fn stats(&self) -> Vec<(u64, TenantStats)> {
        let st = self.inner.lock();
        let mut all: Vec<(u64, TenantStats)> = st
            .tenants
            .iter()
            .map(|(&id, t)| {
                let mut s = t.stats;
                s.busy = t.busy.iter().sum();
                s.waiting = t.waiting.iter().map(VecDeque::len).sum();
                (id, s)
            })
            .collect();
        all.sort_by_key(|(id, _)| *id);
        all
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock; were it to, the counts are
        // still the best there is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tenant<'a>(&self, st: &'a mut State, id: u64) -> &'a mut Tenant {
        st.tenants.entry(id).or_insert_with(|| Tenant {
            limits: (self.source)(id),
            read_at: Instant::now(),
            busy: [0; 2],
            worked_at: Instant::now(),
            waiting: Default::default(),
            buckets: Default::default(),
            stats: TenantStats::default(),
        })
    }

    /// Reads the tenant's limits again when they are older than [`REFRESH`] (or
    /// at once when `now`); the source is read outside the lock.
    fn refresh(&self, id: u64, now: bool) {
        let stale = self
            .lock()
            .tenants
            .get(&id)
            .is_some_and(|t| now || t.read_at.elapsed() >= REFRESH);
        if stale {
            let limits = (self.source)(id);
            if let Some(t) = self.lock().tenants.get_mut(&id) {
                // New limits start from full buckets: what was owed under the
                // old ones (a backlog of bytes at a low rate) is forgiven.
                if t.limits != limits {
                    t.buckets = Default::default();
                }
                t.limits = limits;
                t.read_at = Instant::now();
            }
        }
    }

    /// Counts a slot of `class` held by tenant `id` (known to the state) and
    /// returns it.
    fn grant(self: &Arc<Self>, st: &mut State, id: u64, class: usize) -> Slot {
        if let Some(t) = st.tenants.get_mut(&id) {
            t.busy[class] += 1;
            t.worked_at = Instant::now();
        }
        st.busy[class] += 1;
        Slot {
            gate: Some(self.clone()),
            tenant: id,
            class,
        }
    }

    /// Hands `class`'s slots to its waiters, each to the tenant holding the
    /// fewest per weight (its oldest waiter first): always when it is the only
    /// tenant with work; while the pool has slots free; or when that tenant
    /// holds less than its share of them among the tenants with work running
    /// or waiting (in either pool) — then it runs even on a full pool, and the
    /// others give back what they hold over their shares as their units end (so
    /// a newcomer never waits behind another tenant's queue).
    fn dispatch(self: &Arc<Self>, st: &mut State, class: usize) {
        let slots = match class {
            SMALL => self.slots * SMALL_PER_SLOT,
            _ => self.slots,
        };
        loop {
            // A tenant between two requests is still a tenant with work: one
            // whose last unit ended within ACTIVE keeps its share.
            let (active, weights) = st
                .tenants
                .values()
                .filter(|t| {
                    t.busy.iter().any(|&b| b > 0)
                        || t.waiting.iter().any(|w| !w.is_empty())
                        || t.worked_at.elapsed() < ACTIVE
                })
                .fold((0u64, 0u64), |(n, w), t| (n + 1, w + t.limits.weight()));
            let next = st
                .tenants
                .iter()
                .filter_map(|(&id, t)| {
                    let (seq, _) = t.waiting[class].front()?;
                    // busy/weight compared without division: a/b < c/d ⇔ a·d < c·b.
                    Some((id, t.busy[class] as u64, t.limits.weight(), *seq))
                })
                .min_by(|a, b| (a.1 * b.2).cmp(&(b.1 * a.2)).then(a.3.cmp(&b.3)));
            let Some((id, busy, weight, _)) = next else {
                return;
            };
            // A tenant alone has no one to share with: its work runs as it
            // comes, as with no slots at all.
            let share = (slots as u64 * weight / weights.max(1)).max(1);
            if active > 1 && st.busy[class] >= slots && busy >= share {
                return;
            }
            let Some((_, tx)) = st
                .tenants
                .get_mut(&id)
                .and_then(|t| t.waiting[class].pop_front())
            else {
                return;
            };
            let slot = self.grant(st, id, class);
            if let Err(mut slot) = tx.send(slot) {
                // Its waiter gave up: take the slot back here, not through its
                // drop (which would take the lock held now).
                slot.gate = None;
                st.busy[class] -= 1;
                if let Some(t) = st.tenants.get_mut(&id) {
                    t.busy[class] -= 1;
                }
            }
        }
    }
}

fn bucket(way: Way, bytes: bool) -> usize {
    match (way, bytes) {
        (Way::Read, false) => 0,
        (Way::Write, false) => 1,
        (Way::Read, true) => 2,
        (Way::Write, true) => 3,
    }
}

/// A token bucket as GCRA keeps it: the time at which the bucket would be full
/// again ("theoretical arrival time").
#[derive(Default)]
struct Bucket {
    full_at: Option<Instant>,
}

impl Bucket {
    /// How long from `now` until `n` units at `rate` per second may go. A unit
    /// larger than the bucket goes when the bucket is full.
    fn turn(&self, now: Instant, n: u64, rate: u64) -> Duration {
        let full_at = self.full_at.map_or(now, |t| t.max(now));
        let cost = cost(n, rate);
        // May go once what is owed leaves room for it (or, larger than the
        // bucket, once nothing is owed).
        let slack = BURST - cost.min(BURST);
        let turn = full_at.checked_sub(slack).unwrap_or(now);
        turn.saturating_duration_since(now)
    }

    /// Takes `n` units, returning how long to wait before using them.
    fn take(&mut self, now: Instant, n: u64, rate: u64) -> Duration {
        let wait = self.turn(now, n, rate);
        let full_at = self.full_at.map_or(now, |t| t.max(now));
        self.full_at = Some(full_at + cost(n, rate));
        wait
    }
}

fn cost(n: u64, rate: u64) -> Duration {
    Duration::from_secs_f64(n as f64 / rate.max(1) as f64)
}
