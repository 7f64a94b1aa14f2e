//! Three in-process members over real HTTPS with mutual TLS on loopback: forming
//! with a join token, forwarding, read barriers, losing the leader, and strangers
//! refused.

mod common;

use cairn_cluster::Command;
use cairn_meta::{Commit, MetaLog, Proposal};
use common::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_agree_and_survive_the_leader() {
    let a = member().await;
    let token = init(&a, "test", 2, 1, 3).await;
    let b = member().await;
    let c = member().await;
    // A wrong secret is refused by the cluster; a token naming another CA is
    // refused by the joiner before it sends anything (the seed fails the pin).
    // Change the last character of the secret (to one it is not already).
    let last = if token.ends_with('0') { '1' } else { '0' };
    let wrong_secret = format!("{}{last}", &token[..token.len() - 1]);
    let e = b.cluster.request_join(&a.addr, &wrong_secret).await;
    assert!(format!("{e:?}").contains("wrong join token"), "{e:?}");
    let other_ca = format!("cairn1.{}.{}", "00".repeat(32), &token[72..]);
    let e = b.cluster.request_join(&a.addr, &other_ca).await;
    assert!(format!("{e:?}").contains("not from the cluster"), "{e:?}");
    for m in [&b, &c] {
        join(m, &a, &token).await;
    }
    assert_eq!(a.cluster.map().nodes.len(), 3);

    // A write through a follower is forwarded, and applied on that follower
    // when it is answered (no barrier needed there); a read barrier on another
    // follower then sees it.
    c.cluster.propose(bucket("one")).await.unwrap();
    assert!(
        c.meta.bucket("one").unwrap().is_some(),
        "applied at the gateway"
    );
    b.cluster.read_barrier().await.unwrap();
    assert!(b.meta.bucket("one").unwrap().is_some());
    // Conditions are decided once, in log order: a second create fails everywhere.
    let once = match bucket("one") {
        Command::Meta(m) => Proposal::new(m),
        _ => unreachable!(),
    };
    let again = MetaLog::propose(&*b.cluster, once.clone()).await;
    assert!(
        matches!(
            again,
            Commit::Rejected(cairn_meta::MetaError::BucketExists(_))
        ),
        "{again:?}"
    );
    // The same request forwarded again through another node gets the first
    // outcome from the log's window of applied requests, not a second apply.
    let repeat = MetaLog::propose(&*c.cluster, once.clone()).await;
    assert!(
        matches!(
            repeat,
            Commit::Rejected(cairn_meta::MetaError::BucketExists(_))
        ),
        "{repeat:?}"
    );
    let fresh = Proposal::new(match bucket("two") {
        Command::Meta(m) => m,
        _ => unreachable!(),
    });
    assert!(matches!(
        MetaLog::propose(&*b.cluster, fresh.clone()).await,
        Commit::Committed(_)
    ));
    // Applied twice would be BucketExists; applied once, the repeat says committed.
    assert!(matches!(
        MetaLog::propose(&*c.cluster, fresh.clone()).await,
        Commit::Committed(_)
    ));
    assert!(matches!(
        MetaLog::propose(&*a.cluster, Proposal::fence(fresh.request)).await,
        Commit::Committed(_)
    ));

    // The voter manager promotes both learners.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while a.cluster.raft_status().voters.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "learners not promoted: {:?}",
            a.cluster.raft_status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Lose the first leader: the other two elect one and go on.
    let leader = a.cluster.raft_status().leader.unwrap();
    let (gone, rest): (Vec<&Member>, Vec<&Member>) = [&a, &b, &c]
        .into_iter()
        .partition(|m| m.cluster.id() == leader);
    gone[0].server.abort();
    gone[0].cluster.shutdown().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match rest[0].cluster.propose(bucket("two")).await {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no progress after leader loss: {e}"
                );
            }
        }
    }
    rest[1].cluster.read_barrier().await.unwrap();
    assert!(rest[1].meta.bucket("two").unwrap().is_some());
}

/// What a stranger gets from a member's internal API: no certificate, only the
/// join route (and a refusal there without a token); a certificate from another
/// cluster's CA, a failed handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_are_refused() {
    let a = member().await;
    let token = init(&a, "one", 1, 1, 2).await;
    // A client that trusts the cluster CA (as a joiner does) but has no
    // certificate reaches /cluster/join only.
    let (fp, _) = cairn_pki::ca::parse_token(&token).unwrap();
    let tls = cairn_pki::tls::pinned_ca_client_config(fp).unwrap();
    let anon = reqwest::Client::builder()
        .use_preconfigured_tls((*tls).clone())
        .build()
        .unwrap();
    let r = anon
        .post(format!("https://{}/cluster/propose", a.addr))
        .json(&bucket("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "member route without a certificate");
    assert!(a.meta.bucket("x").unwrap().is_none());
    let r = anon
        .post(format!("https://{}/cluster/heartbeat", a.addr))
        .json(&1u64)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // A member of another cluster, dialling with a client that trusts this
    // cluster's CA but presents its own certificate: the server refuses it.
    let other = member().await;
    init(&other, "two", 1, 1, 2).await;
    let pem =
        |m: &Member, f: &str| std::fs::read_to_string(m._dir.path().join("tls").join(f)).unwrap();
    let foreign = cairn_pki::tls::NodeTls::from_pem(
        &pem(&a, "ca.pem"),
        &pem(&other, "node.pem"),
        &pem(&other, "node.key"),
    )
    .unwrap();
    let e = reqwest::Client::builder()
        .use_preconfigured_tls((*foreign.client_config().unwrap()).clone())
        .build()
        .unwrap()
        .post(format!("https://{}/cluster/propose", a.addr))
        .json(&bucket("y"))
        .send()
        .await;
    assert!(e.is_err(), "a foreign certificate must fail the handshake");
    assert!(a.meta.bucket("y").unwrap().is_none());

    // Plain HTTP gets nothing at all.
    let plain = reqwest::Client::new()
        .post(format!("http://{}/cluster/propose", a.addr))
        .json(&bucket("z"))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    assert!(a.meta.bucket("z").unwrap().is_none());
}

/// A removed node's certificate, still signed by the cluster CA, no longer reaches
/// the members' routes: the map names each member's certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_members_lose_access() {
    let a = member().await;
    let token = init(&a, "rm", 1, 1, 2).await;
    let b = member().await;
    b.cluster.request_join(&a.addr, &token).await.unwrap();
    b.cluster.ready();
    b.cluster
        .wait_member(Duration::from_secs(20))
        .await
        .unwrap();
    let heartbeat = |m: &Member| {
        let client = m.cluster.transport().client().unwrap();
        let url = format!("https://{}/cluster/heartbeat", a.addr);
        let id = m.cluster.id();
        async move { client.post(url).json(&id).send().await.unwrap().status() }
    };
    assert_eq!(
        heartbeat(&b).await,
        200,
        "a member reaches the member routes"
    );
    a.cluster.remove_node(b.cluster.id()).await.unwrap();
    assert!(!a.cluster.map().nodes.contains_key(&b.cluster.id()));
    assert_eq!(heartbeat(&b).await, 404, "a removed member is a stranger");
}
