//! The rare branches of a forwarded proposal, forced with failpoints: the leader
//! commits and its answer is lost. The proposal must be applied once, the
//! proposer must never hear "rejected", and a fence must settle what it heard as
//! unknown. (Its own test binary: failpoints are process-wide.)

mod common;

use cairn_cluster::Command;
use cairn_meta::{Commit, MetaError, MetaLog, Proposal};
use common::*;

fn create(name: &str) -> Proposal {
    match bucket(name) {
        Command::Meta(m) => Proposal::new(m),
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_lost_after_the_leader_committed() {
    let scenario = fail::FailScenario::setup();
    let a = member().await;
    let token = init(&a, "fp", 2, 1, 3).await;
    let (b, c) = (member().await, member().await);
    for m in [&b, &c] {
        join(m, &a, &token).await;
    }
    let t = std::time::Instant::now();
    while a.cluster.raft_status().leader.is_none() {
        assert!(t.elapsed().as_secs() < 20, "no leader");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let members = [&a, &b, &c];
    // A member that is not the leader now (asked before each step: a loaded
    // machine may hold an election meanwhile), so its proposals are forwarded.
    let follower = || {
        let leader = a.cluster.raft_status().leader;
        *members
            .iter()
            .find(|m| Some(m.cluster.raft_status().node_id) != leader)
            .unwrap()
    };

    // One answer lost: the retry is answered from the window of applied
    // requests, so the proposer learns "committed" and it was applied once.
    fail::cfg("cluster::forward-reply-lost", "1*return").unwrap();
    let p = create("lost-once");
    let f = follower();
    let r = MetaLog::propose(&*f.cluster, p.clone()).await;
    assert!(matches!(r, Commit::Committed(_)), "{r:?}");
    let again = MetaLog::propose(&*a.cluster, create("lost-once")).await;
    assert!(
        matches!(again, Commit::Rejected(MetaError::BucketExists(_))),
        "{again:?}"
    );

    // Every answer lost for longer than the proposal deadline: the proposer hears
    // "unknown", never "rejected", although the leader committed it.
    fail::cfg("cluster::forward-reply-lost", "return").unwrap();
    let q = create("lost-always");
    let f = follower();
    let r = MetaLog::propose(&*f.cluster, q.clone()).await;
    assert!(matches!(r, Commit::Unknown(_)), "{r:?}");
    fail::remove("cluster::forward-reply-lost");
    // The fence settles it: committed, once.
    let settled = MetaLog::propose(&*f.cluster, Proposal::fence(q.request)).await;
    assert!(matches!(settled, Commit::Committed(_)), "{settled:?}");
    f.cluster.read_barrier().await.unwrap();
    assert!(f.meta.bucket("lost-always").unwrap().is_some());
    let r = MetaLog::propose(&*f.cluster, q).await;
    assert!(matches!(r, Commit::Committed(_)), "a repeat: {r:?}");

    // A fence that arrives first bars the proposal it settles, in a cluster too.
    let late = create("never");
    let fenced = MetaLog::propose(&*f.cluster, Proposal::fence(late.request)).await;
    assert!(
        matches!(fenced, Commit::Rejected(MetaError::Fenced)),
        "{fenced:?}"
    );
    let r = MetaLog::propose(&*a.cluster, late).await;
    assert!(matches!(r, Commit::Rejected(MetaError::Fenced)), "{r:?}");
    a.cluster.read_barrier().await.unwrap();
    assert!(a.meta.bucket("never").unwrap().is_none());
    scenario.teardown();
}
