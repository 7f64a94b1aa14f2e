use super::*;
use std::sync::atomic::{AtomicU64, Ordering};

fn none() -> Source {
    Arc::new(|_| Limits::default())
}

fn weights(w: &'static [(u64, u32)]) -> Source {
    Arc::new(move |id| Limits {
        weight: w.iter().find(|(t, _)| *t == id).map(|(_, w)| *w),
        ..Limits::default()
    })
}

/// A stripe's worth: large work, shared in the large pool.
const STRIPE: u64 = 1 << 20;

/// Whether the future is ready now (polled once).
fn ready<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
    futures::FutureExt::now_or_never(f)
}

#[tokio::test]
async fn a_lone_tenant_is_not_held_a_second_waits_for_its_share() {
    let q = Qos::new(3, none());
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(q.admit(1, Way::Write, STRIPE).await);
    }
    assert_eq!(q.stats()[0].1.busy, 5, "alone: past the slots");
    // A second tenant runs at once (under its share), and then the node is
    // shared: each entitled to one of three.
    let b = q.admit(2, Way::Write, STRIPE).await;
    let mut sixth = Box::pin(q.admit(1, Way::Write, STRIPE));
    assert!(ready(&mut sixth).is_none(), "tenant 1 is over its share");
    assert_eq!(q.stats()[0].1.waiting, 1);
    held.truncate(2);
    assert!(ready(&mut sixth).is_none(), "the node is still full");
    held.pop();
    let _s = tokio::time::timeout(Duration::from_secs(1), sixth)
        .await
        .expect("a freed slot goes to the waiter");
    drop(b);
    // Alone again: not held.
    let _more = ready(&mut Box::pin(q.admit(1, Way::Write, STRIPE))).expect("alone again");
}

#[tokio::test]
async fn a_newcomer_runs_at_once_and_the_others_keep_their_shares() {
    let q = Qos::new(2, none());
    let b = q.admit(2, Way::Read, STRIPE).await;
    let a = q.admit(1, Way::Write, STRIPE).await;
    // Tenants 1 and 2 hold one of two slots each: their shares. Tenant 1
    // queues five more.
    let mut a_waiting: Vec<_> = (0..5)
        .map(|_| Box::pin(q.admit(1, Way::Write, STRIPE)))
        .collect();
    for w in a_waiting.iter_mut() {
        assert!(ready(w).is_none());
    }
    // Tenant 3 holds none of its share: it runs at once on the full node.
    let c = ready(&mut Box::pin(q.admit(3, Way::Read, STRIPE))).expect("under its share");
    // Tenant 2 done: tenant 1 still holds its share of a full node.
    drop(b);
    for w in a_waiting.iter_mut() {
        assert!(ready(w).is_none(), "tenant 1 holds its share already");
    }
    // Tenant 3 done: a slot is free, and tenant 1's waiters run in turn (each
    // slot here freed as soon as it is taken).
    drop(c);
    for w in a_waiting.iter_mut() {
        assert!(ready(w).is_some(), "a free slot");
    }
    drop(a);
    assert_eq!(q.stats()[0].1.busy, 0);
    assert_eq!(q.stats()[0].1.queued, 5);
}

#[tokio::test]
async fn slots_are_shared_by_weight_while_both_wait() {
    let q = Qos::new(3, weights(&[(1, 2), (2, 1)]));
    // Everything freed is re-requested at once: each tenant always has work
    // waiting, and the slots settle at 2 : 1.
    type Waiting = std::pin::Pin<Box<dyn std::future::Future<Output = Slot>>>;
    let ask = |id: u64| -> (u64, Waiting) {
        let q = q.clone();
        (
            id,
            Box::pin(async move { q.admit(id, Way::Read, STRIPE).await }),
        )
    };
    // Moves every waiter whose slot came from `waiting` to `held`.
    fn granted(waiting: &mut Vec<(u64, Waiting)>, held: &mut Vec<(u64, Slot)>) {
        let mut i = 0;
        while i < waiting.len() {
            match ready(&mut waiting[i].1) {
                Some(s) => held.push((waiting.remove(i).0, s)),
                None => i += 1,
            }
        }
    }
    let mut waiting: Vec<(u64, Waiting)> = (0..12).map(|i| ask(1 + i % 2)).collect();
    let mut held: Vec<(u64, Slot)> = Vec::new();
    for _ in 0..20 {
        granted(&mut waiting, &mut held);
        // Free the oldest, and ask again for its tenant.
        let (id, s) = held.remove(0);
        drop(s);
        waiting.push(ask(id));
    }
    granted(&mut waiting, &mut held);
    let ones = held.iter().filter(|(id, _)| *id == 1).count();
    let twos = held.iter().filter(|(id, _)| *id == 2).count();
    assert_eq!((ones, twos), (2, 1), "weight 2 : weight 1 of three slots");
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaks_no_slot() {
    let q = Qos::new(1, none());
    // Two tenants hold their shares: a third unit of either waits.
    let held = q.admit(1, Way::Write, STRIPE).await;
    let other = q.admit(2, Way::Write, STRIPE).await;
    let mut gone = Box::pin(q.admit(1, Way::Write, STRIPE));
    assert!(ready(&mut gone).is_none());
    drop(gone);
    drop(held);
    drop(other);
    assert_eq!(q.stats().iter().map(|(_, s)| s.busy).sum::<usize>(), 0);
    let _again = tokio::time::timeout(Duration::from_secs(1), q.admit(3, Way::Write, STRIPE))
        .await
        .expect("the slot is free again");
}

#[tokio::test]
async fn no_slots_means_no_waiting() {
    let q = Qos::new(0, none());
    let all: Vec<Slot> =
        futures::future::join_all((0..100).map(|_| q.admit(1, Way::Read, 1 << 20))).await;
    assert_eq!(all.len(), 100);
}

#[tokio::test]
async fn bytes_over_the_rate_wait_their_turn() {
    let q = Qos::new(
        4,
        Arc::new(|_| Limits {
            write_bytes_per_sec: Some(1_000_000),
            ..Limits::default()
        }),
    );
    let t0 = Instant::now();
    // A second's worth goes at once (the bucket starts full)...
    drop(q.admit(1, Way::Write, 1_000_000).await);
    assert!(t0.elapsed() < Duration::from_millis(100));
    // ...then 300 kB more takes 0.3 s; reads are not limited.
    drop(q.admit(1, Way::Read, 50_000_000).await);
    assert!(t0.elapsed() < Duration::from_millis(100));
    drop(q.admit(1, Way::Write, 300_000).await);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(280) && took < Duration::from_millis(800),
        "{took:?}"
    );
    // Another tenant is not held back by the first's rate.
    let t1 = Instant::now();
    drop(q.admit(2, Way::Write, 300_000).await);
    assert!(t1.elapsed() < Duration::from_millis(100));
    assert!(q.stats()[0].1.shaped_ms >= 250);
}

#[tokio::test]
async fn requests_over_the_rate_wait_then_are_refused() {
    let q = Qos::new(
        0,
        Arc::new(|_| Limits {
            read_requests_per_sec: Some(10),
            ..Limits::default()
        }),
    );
    let t0 = Instant::now();
    for _ in 0..10 {
        q.request(7, Way::Read).await.unwrap();
    }
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "a second's worth at once"
    );
    q.request(7, Way::Read).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(80),
        "the eleventh waits a tenth"
    );
    // Reserve turns up to the longest wait; past it, refusals that take no turn.
    let mut refused = 0;
    for _ in 0..40 {
        let f = q.request(7, Way::Read);
        if let Some(Err(QosError::SlowDown { retry_after, .. })) = ready(&mut Box::pin(f)) {
            assert!(retry_after > MAX_REQUEST_WAIT);
            refused += 1;
        }
    }
    assert!((15..=25).contains(&refused), "{refused} refused of 40");
    q.request(7, Way::Write)
        .await
        .expect("writes are not limited");
    assert_eq!(q.stats()[0].1.slowed_down, refused);
}

#[tokio::test]
async fn changed_limits_take_effect_within_the_refresh() {
    let rate = Arc::new(AtomicU64::new(1));
    let r = rate.clone();
    let q = Qos::new(
        0,
        Arc::new(move |_| Limits {
            write_requests_per_sec: Some(r.load(Ordering::Relaxed)),
            ..Limits::default()
        }),
    );
    q.request(1, Way::Write).await.unwrap();
    // One a second: turns 1 s and 2 s away are taken, the one 3 s away refused.
    for _ in 0..2 {
        assert!(ready(&mut Box::pin(q.request(1, Way::Write))).is_none());
    }
    assert!(matches!(
        ready(&mut Box::pin(q.request(1, Way::Write))),
        Some(Err(QosError::SlowDown { .. }))
    ));
    rate.store(1000, Ordering::Relaxed);
    tokio::time::sleep(REFRESH + Duration::from_millis(50)).await;
    // New limits start from a full bucket: what was owed is forgiven, and at
    // the new rate fifty go at once.
    let t0 = Instant::now();
    for _ in 0..50 {
        q.request(1, Way::Write)
            .await
            .expect("a thousand a second now");
    }
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(500), "{took:?}");
}

#[tokio::test]
async fn a_transfer_given_up_costs_nothing_and_a_lifted_limit_frees_waiters() {
    let rate = Arc::new(AtomicU64::new(1_000_000));
    let r = rate.clone();
    let q = Qos::new(
        0,
        Arc::new(move |_| Limits {
            write_bytes_per_sec: match r.load(Ordering::Relaxed) {
                0 => None,
                n => Some(n),
            },
            ..Limits::default()
        }),
    );
    drop(q.admit(1, Way::Write, 1_000_000).await);
    // Five seconds' worth, given up while it waits: nothing is owed for it.
    let mut gone = Box::pin(q.admit(1, Way::Write, 5_000_000));
    assert!(ready(&mut gone).is_none());
    drop(gone);
    let t0 = Instant::now();
    drop(q.admit(1, Way::Write, 100_000).await);
    assert!(
        t0.elapsed() < Duration::from_millis(600),
        "{:?}",
        t0.elapsed()
    );
    // A transfer waiting when the limit is lifted goes within a refresh.
    let q2 = q.clone();
    let waiting = tokio::spawn(async move {
        let t = Instant::now();
        drop(q2.admit(1, Way::Write, 20_000_000).await);
        t.elapsed()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    rate.store(0, Ordering::Relaxed);
    let took = waiting.await.unwrap();
    assert!(took < REFRESH + Duration::from_millis(800), "{took:?}");
}

#[tokio::test]
async fn small_work_has_a_pool_of_its_own() {
    let q = Qos::new(1, none());
    // Tenant 1 streams stripes and queues more; tenant 2 holds a small unit.
    let a = q.admit(1, Way::Write, STRIPE).await;
    let mut a_next = Box::pin(q.admit(1, Way::Write, STRIPE));
    let b_put = q.admit(2, Way::Write, 4096).await;
    assert!(ready(&mut a_next).is_none(), "the large pool is full");
    // Tenant 2's next small unit runs at once beside its first: it neither
    // waits for its own unit nor for a stripe to end.
    let b_get = ready(&mut Box::pin(q.admit(2, Way::Read, 4096))).expect("small pool");
    // Its first stripe runs at once too (it holds none of its share of the
    // large pool), while tenant 1, holding its share, still waits.
    let b_large = ready(&mut Box::pin(q.admit(2, Way::Read, STRIPE))).expect("below its share");
    assert!(ready(&mut a_next).is_none(), "tenant 1 holds its share");
    drop(a);
    let _a_next = ready(&mut a_next).expect("tenant 1 below its share again");
    drop(b_large);
    // The small pool is shared too: with both tenants active, tenant 2 gets
    // its share of SMALL_PER_SLOT (half), and waits beyond it.
    let mut held = vec![b_put, b_get];
    while held.len() < SMALL_PER_SLOT / 2 {
        held.push(ready(&mut Box::pin(q.admit(2, Way::Read, 4096))).expect("within its share"));
    }
    let _a_small = q.admit(1, Way::Read, 4096).await;
    while held.len() < SMALL_PER_SLOT - 1 {
        held.push(ready(&mut Box::pin(q.admit(2, Way::Read, 4096))).expect("pool not full"));
    }
    let mut over = Box::pin(q.admit(2, Way::Read, 4096));
    assert!(
        ready(&mut over).is_none(),
        "over its share of a full small pool"
    );
    held.pop();
    assert!(ready(&mut over).is_some(), "a freed small slot");
}

#[tokio::test]
async fn a_unit_asking_while_it_holds_a_slot_does_not_wait_for_ever() {
    let q = Qos::new(1, none());
    // Tenant 1 holds its share (a copy reading its source) while tenant 2
    // keeps working, and asks for another (the copy's write).
    let _read = q.admit(1, Way::Read, STRIPE).await;
    let _other = q.admit(2, Way::Write, STRIPE).await;
    let started = Instant::now();
    let _write = tokio::time::timeout(Duration::from_secs(10), q.admit(1, Way::Write, STRIPE))
        .await
        .expect("runs over the slots after MAX_SLOT_WAIT");
    assert!(
        started.elapsed() >= MAX_SLOT_WAIT,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(q.stats()[0].1.busy, 2);
    assert_eq!(q.stats()[0].1.waiting, 0);
}

#[tokio::test]
async fn a_waiter_runs_once_the_other_tenant_has_gone_idle() {
    let q = Qos::new(1, none());
    let held = q.admit(1, Way::Read, STRIPE).await;
    // Tenant 2 worked a moment ago: tenant 1 is not alone yet.
    drop(q.admit(2, Way::Write, STRIPE).await);
    let started = Instant::now();
    let _next = tokio::time::timeout(Duration::from_secs(10), q.admit(1, Way::Write, STRIPE))
        .await
        .expect("alone again");
    let waited = started.elapsed();
    assert!(waited >= ACTIVE / 2 && waited < MAX_SLOT_WAIT, "{waited:?}");
    drop(held);
}
