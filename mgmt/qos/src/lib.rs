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

#[derive(Default)]
struct State {
    busy: usize,
    /// Orders waiters across tenants (oldest first among equals).
    seq: u64,
    tenants: HashMap<u64, Tenant>,
}

struct Tenant {
    limits: Limits,
    read_at: Instant,
    busy: usize,
    /// When its last unit of work ended (or began).
    worked_at: Instant,
    waiting: VecDeque<(u64, oneshot::Sender<Slot>)>,
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
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(inner) = self.gate.take() {
            let mut st = inner.lock();
            st.busy -= 1;
            if let Some(t) = st.tenants.get_mut(&self.tenant) {
                t.busy -= 1;
                t.worked_at = Instant::now();
            }
            inner.dispatch(&mut st);
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
        if self.inner.slots == 0 {
            return Slot { gate: None, tenant };
        }
        let mut rx = {
            let mut st = self.inner.lock();
            st.seq += 1;
            let seq = st.seq;
            let (tx, rx) = oneshot::channel();
            self.inner
                .tenant(&mut st, tenant)
                .waiting
                .push_back((seq, tx));
            self.inner.dispatch(&mut st);
            rx
        };
        match rx.try_recv() {
            Ok(slot) => return slot,
            Err(oneshot::error::TryRecvError::Empty) => {
                let mut st = self.inner.lock();
                self.inner.tenant(&mut st, tenant).stats.queued += 1;
            }
            Err(oneshot::error::TryRecvError::Closed) => return Slot { gate: None, tenant },
        }
        match rx.await {
            Ok(slot) => slot,
            // The sender is only dropped with the state, which outlives every
            // waiter; were it ever, running unslotted beats hanging.
            Err(_) => Slot { gate: None, tenant },
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
                s.busy = t.busy;
                s.waiting = t.waiting.len();
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
            busy: 0,
            worked_at: Instant::now(),
            waiting: VecDeque::new(),
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

    /// Hands slots to waiters, each to the tenant holding the fewest per
    /// weight (its oldest waiter first): always when it is the only tenant with
    /// work; while the node has slots free; or when that tenant holds less than
    /// its share of them among the tenants with work running or waiting — then
    /// it runs even on a full node, and the others give back what they hold
    /// over their shares as their units end (so a newcomer never waits behind
    /// another tenant's queue).
    fn dispatch(self: &Arc<Self>, st: &mut State) {
        loop {
            // A tenant between two requests is still a tenant with work: one
            // whose last unit ended within ACTIVE keeps its share.
            let (active, weights) = st
                .tenants
                .values()
                .filter(|t| t.busy > 0 || !t.waiting.is_empty() || t.worked_at.elapsed() < ACTIVE)
                .fold((0u64, 0u64), |(n, w), t| (n + 1, w + t.limits.weight()));
            let next = st
                .tenants
                .iter()
                .filter_map(|(&id, t)| {
                    let (seq, _) = t.waiting.front()?;
                    // busy/weight compared without division: a/b < c/d ⇔ a·d < c·b.
                    Some((id, t.busy as u64, t.limits.weight(), *seq))
                })
                .min_by(|a, b| (a.1 * b.2).cmp(&(b.1 * a.2)).then(a.3.cmp(&b.3)));
            let Some((id, busy, weight, _)) = next else {
                return;
            };
            // A tenant alone has no one to share with: its work runs as it
            // comes, as with no slots at all.
            let share = (self.slots as u64 * weight / weights.max(1)).max(1);
            if active > 1 && st.busy >= self.slots && busy >= share {
                return;
            }
            let Some(t) = st.tenants.get_mut(&id) else {
                return;
            };
            let Some((_, tx)) = t.waiting.pop_front() else {
                return;
            };
            t.busy += 1;
            t.worked_at = Instant::now();
            st.busy += 1;
            let slot = Slot {
                gate: Some(self.clone()),
                tenant: id,
            };
            if let Err(mut slot) = tx.send(slot) {
                // Its waiter gave up: take the slot back here, not through its
                // drop (which would take the lock held now).
                slot.gate = None;
                st.busy -= 1;
                if let Some(t) = st.tenants.get_mut(&id) {
                    t.busy -= 1;
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
