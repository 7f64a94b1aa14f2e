//! Members of an in-process cluster over real HTTPS with mutual TLS on loopback,
//! shared by the cluster's tests.
#![allow(dead_code)]

use cairn_cluster::{Cluster, ClusterConfig, Command, NodeAdvert, Protection, Transport};
use cairn_meta::{BucketRecord, MetaStore, Mutation};
use std::sync::Arc;
use std::time::Duration;

pub struct Member {
    pub cluster: Arc<Cluster>,
    pub meta: MetaStore,
    pub addr: String,
    pub server: tokio::task::JoinHandle<()>,
    pub _dir: tempfile::TempDir,
}

pub async fn member() -> Member {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let meta = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    let cfg = ClusterConfig {
        state_dir: dir.path().join("raft"),
        master_key: dir.path().join("master.key"),
        advert: NodeAdvert {
            id: 0,
            internal: addr.clone(),
            chunk: "127.0.0.1:1".into(),
            s3: "127.0.0.1:2".into(),
            domain: addr.clone(),
            drives: vec![(0, 1 << 30)],
            cert: String::new(),
        },
        heartbeat: Duration::from_millis(200),
        // Generous: a loaded 2-core CI machine can stall heartbeats for seconds.
        down_after: Duration::from_secs(6),
    };
    let transport = Arc::new(Transport::open(dir.path().join("tls")).unwrap());
    let cluster = Cluster::open(cfg, meta.clone(), transport).await.unwrap();
    cluster.start();
    let server = tokio::spawn({
        let c = cluster.clone();
        async move { c.serve_internal(listener, std::future::pending()).await }
    });
    Member {
        cluster,
        meta,
        addr,
        server,
        _dir: dir,
    }
}

/// Creates a cluster on `m`; returns the join token.
pub async fn init(m: &Member, id: &str, k: u8, parity: u8, replicas: u8) -> String {
    m.cluster
        .init(
            id,
            Protection {
                k,
                m: parity,
                replicas,
            },
        )
        .await
        .unwrap()
}

pub fn bucket(name: &str) -> Command {
    Command::Meta(Mutation::CreateBucket {
        name: name.into(),
        record: BucketRecord {
            tenant: 1,
            created_ms: 1,
            location: None,
            ..Default::default()
        },
    })
}

/// Joins `m` to the cluster `seed` leads with `token`, and waits until it is a member.
pub async fn join(m: &Member, seed: &Member, token: &str) {
    m.cluster.request_join(&seed.addr, token).await.unwrap();
    // No chunk service here to wait for: ready at once.
    m.cluster.ready();
    m.cluster
        .wait_member(Duration::from_secs(20))
        .await
        .unwrap();
}
