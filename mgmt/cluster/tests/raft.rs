//! Three in-process members over real HTTP on loopback: forming, forwarding,
//! read barriers, and losing the leader.

use cairn_cluster::{
    Cluster, ClusterConfig, Command, Issuer, NodeAdvert, Protection, Secrets, Transport,
};
use cairn_meta::{BucketRecord, MetaLog, MetaStore, Mutation};
use std::sync::Arc;
use std::time::Duration;

/// Plain tokens, no certificates: this test is about consensus, not TLS (the real
/// issuer lives in cairn-pki and is tested there and end to end).
#[derive(Debug)]
struct PlainIssuer;

impl Issuer for PlainIssuer {
    fn new_ca(&self, _: &str) -> Result<(String, String), String> {
        Ok(("ca".into(), "key".into()))
    }
    fn issue(&self, _: &Secrets, n: &NodeAdvert) -> Result<(String, String), String> {
        Ok((format!("cert-{:x}", n.id), "k".into()))
    }
    fn token(&self, s: &Secrets) -> Result<String, String> {
        Ok(s.join_secret.clone())
    }
    fn check_token(&self, s: &Secrets, t: &str) -> Result<(), String> {
        (s.join_secret == t).then_some(()).ok_or("bad token".into())
    }
}

struct Member {
    cluster: Arc<Cluster>,
    meta: MetaStore,
    url: String,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

async fn member() -> Member {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let meta = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    let cfg = ClusterConfig {
        state_dir: dir.path().join("raft"),
        advert: NodeAdvert {
            id: 0,
            internal: addr.clone(),
            chunk: "127.0.0.1:1".into(),
            s3: "127.0.0.1:2".into(),
            domain: addr.clone(),
            drives: vec![(0, 1 << 30)],
        },
        heartbeat: Duration::from_millis(200),
        down_after: Duration::from_secs(2),
    };
    let cluster = Cluster::open(
        cfg,
        meta.clone(),
        Arc::new(Transport::plain()),
        Arc::new(PlainIssuer),
    )
    .await
    .unwrap();
    cluster.start();
    let (members, public) = cluster.router();
    let app = members.merge(public);
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Member {
        cluster,
        meta,
        url: format!("http://{addr}"),
        server,
        _dir: dir,
    }
}

fn bucket(name: &str) -> Command {
    Command::Meta(Mutation::CreateBucket {
        name: name.into(),
        record: BucketRecord {
            tenant: 1,
            created_ms: 1,
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_agree_and_survive_the_leader() {
    let a = member().await;
    let token = a
        .cluster
        .init(
            "test",
            Protection {
                k: 2,
                m: 1,
                replicas: 3,
            },
        )
        .await
        .unwrap();
    let b = member().await;
    let c = member().await;
    let client = reqwest::Client::new();
    assert!(
        b.cluster
            .request_join(&client, &a.url, "wrong")
            .await
            .is_err(),
        "a wrong token is refused"
    );
    for m in [&b, &c] {
        m.cluster
            .request_join(&client, &a.url, &token)
            .await
            .unwrap();
        m.cluster
            .wait_member(Duration::from_secs(20))
            .await
            .unwrap();
    }
    assert_eq!(a.cluster.map().nodes.len(), 3);

    // A write through a follower is forwarded; a read barrier on another follower
    // then sees it.
    c.cluster.propose(bucket("one")).await.unwrap();
    b.cluster.read_barrier().await.unwrap();
    assert!(b.meta.bucket("one").unwrap().is_some());
    // Conditions are decided once, in log order: a second create fails everywhere.
    let again = MetaLog::apply(
        &*b.cluster,
        match bucket("one") {
            Command::Meta(m) => m,
            _ => unreachable!(),
        },
    )
    .await;
    assert!(
        matches!(again, Err(cairn_meta::MetaError::BucketExists(_))),
        "{again:?}"
    );

    // The voter manager promotes both learners.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
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
