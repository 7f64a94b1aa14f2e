//! Bucket replication between two real nodes (two clusters of one): rules set
//! with `nodectl replication set`, versions and delete markers shipped in order
//! per key, `x-amz-replication-status` on both sides, then the destination
//! stopped while the source takes more writes (and the source's mgmtd killed
//! with the backlog queued), brought back, and nothing missing or reordered
//! after catch-up.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, ReplicationStatus, VersioningConfiguration};
use aws_sdk_s3::Client;
use cairn_it::tenant::{nodectl, nodectl_json};
use cairn_it::{code, random_bytes, Node, NodeOptions, ACCESS_KEY, SECRET_KEY};
use std::time::{Duration, Instant};

const SRC: &str = "origin";
const DST: &str = "replica";

async fn versioned(c: &Client, b: &str) {
    c.create_bucket().bucket(b).send().await.unwrap();
    enable_versioning(c, b).await;
}

async fn enable_versioning(c: &Client, b: &str) {
    c.put_bucket_versioning()
        .bucket(b)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
}

async fn put(c: &Client, key: &str, body: &[u8]) {
    c.put_object()
        .bucket(SRC)
        .key(key)
        .body(ByteStream::from(body.to_vec()))
        .send()
        .await
        .unwrap();
}

/// Every version of the bucket's keys, oldest first per key, as (key, bytes,
/// is a delete marker).
async fn history(c: &Client, b: &str) -> Vec<(String, Vec<u8>, bool)> {
    let l = c.list_object_versions().bucket(b).send().await.unwrap();
    assert_ne!(l.is_truncated(), Some(true));
    let mut all: Vec<(String, String, Option<Vec<u8>>)> = Vec::new();
    for v in l.versions() {
        let (k, id) = (v.key().unwrap(), v.version_id().unwrap());
        let body = c
            .get_object()
            .bucket(b)
            .key(k)
            .version_id(id)
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .to_vec();
        all.push((k.into(), id.into(), Some(body)));
    }
    for m in l.delete_markers() {
        all.push((
            m.key().unwrap().into(),
            m.version_id().unwrap().into(),
            None,
        ));
    }
    // Version ids grow with time on each side: by key, then oldest first.
    all.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    all.into_iter()
        .map(|(k, _, body)| {
            let marker = body.is_none();
            (k, body.unwrap_or_default(), marker)
        })
        .collect()
}

fn status(node: &Node) -> serde_json::Value {
    nodectl_json(node, &["replication", "status", "root", SRC])
}

/// Waits for the backlog to drain; the last status.
fn drained(node: &Node, within: Duration) -> serde_json::Value {
    let until = Instant::now() + within;
    loop {
        let s = status(node);
        if s["backlog"] == 0 {
            return s;
        }
        assert!(Instant::now() < until, "backlog not shipped: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test]
async fn replication_ships_in_order_and_catches_up_after_an_outage() {
    let mut src = Node::start(NodeOptions::default());
    let mut dst = Node::start(NodeOptions::default());
    let (s, d) = (src.client(), dst.client());
    versioned(&d, DST).await;
    s.create_bucket().bucket(SRC).send().await.unwrap();
    let secret = src.dir.path().join("dst.secret");
    std::fs::write(&secret, SECRET_KEY).unwrap();
    let set = |node: &Node| {
        nodectl(
            node,
            &[
                "replication",
                "set",
                "root",
                SRC,
                "--endpoint",
                &dst.endpoint(),
                "--to-bucket",
                DST,
                "--access-key",
                ACCESS_KEY,
                "--secret-key-file",
                secret.to_str().unwrap(),
            ],
        )
    };
    // Replication needs versioning, as S3's does.
    let (ok, _, err) = set(&src);
    assert!(!ok && err.contains("versioning"), "{err}");
    enable_versioning(&s, SRC).await;
    put(&s, "before", b"made before the rules").await;
    let (ok, out, err) = set(&src);
    assert!(ok, "{err}");
    assert!(out.contains("replicates"), "{out}");

    // Writes, overwrites and deletes (one of a key never written: a marker
    // first), shipped.
    s.delete_object()
        .bucket(SRC)
        .key("ghost")
        .send()
        .await
        .unwrap();
    let big = random_bytes(5 << 20, 1);
    for i in 0..12 {
        put(&s, &format!("k{i}"), format!("first {i}").as_bytes()).await;
    }
    put(&s, "big", &big).await;
    for round in 0..3 {
        put(&s, "k0", format!("k0 round {round}").as_bytes()).await;
    }
    s.delete_object()
        .bucket(SRC)
        .key("k1")
        .send()
        .await
        .unwrap();
    let st = drained(&src, Duration::from_secs(60));
    assert!(st["shipped_versions"].as_u64().unwrap() >= 17, "{st}");
    let mut want = history(&s, SRC).await;
    want.retain(|(k, _, _)| k != "before");
    assert_eq!(
        history(&d, DST).await,
        want,
        "the destination holds every version, in order"
    );
    let h = s.head_object().bucket(SRC).key("big").send().await.unwrap();
    assert_eq!(h.replication_status(), Some(&ReplicationStatus::Completed));
    let h = d.head_object().bucket(DST).key("big").send().await.unwrap();
    assert_eq!(h.replication_status(), Some(&ReplicationStatus::Replica));
    let h = s
        .head_object()
        .bucket(SRC)
        .key("before")
        .send()
        .await
        .unwrap();
    assert_eq!(h.replication_status(), None, "made before the rules");
    let r = d.head_object().bucket(DST).key("before").send().await;
    assert_eq!(code(r), "NotFound");

    // The destination down: the source keeps taking writes; they wait.
    dst.stop();
    for i in 0..10 {
        put(&s, &format!("late{i}"), format!("late {i}").as_bytes()).await;
    }
    for round in 0..3 {
        put(&s, "k2", format!("k2 outage {round}").as_bytes()).await;
    }
    s.delete_object()
        .bucket(SRC)
        .key("k3")
        .send()
        .await
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let st = status(&src);
    assert_eq!(st["backlog"], 14, "{st}");
    assert!(st["failing"].as_u64().unwrap() > 0, "{st}");
    assert!(st["lag_ms"].as_u64().unwrap() > 1000, "{st}");
    let h = s
        .head_object()
        .bucket(SRC)
        .key("late0")
        .send()
        .await
        .unwrap();
    assert!(
        matches!(
            h.replication_status(),
            Some(ReplicationStatus::Pending | ReplicationStatus::Failed)
        ),
        "{:?}",
        h.replication_status()
    );
    // The backlog is the metadata's: it outlives the source's mgmtd.
    src.kill_mgmtd();
    src.start_mgmtd();
    assert_eq!(status(&src)["backlog"], 14);

    dst.restart();
    drained(&src, Duration::from_secs(60));
    let mut want = history(&s, SRC).await;
    want.retain(|(k, _, _)| k != "before");
    assert_eq!(
        history(&d, DST).await,
        want,
        "after catch-up: nothing missing, nothing reordered, nothing twice"
    );

    // An unversioned destination: refused (each shipment would replace the
    // last), said why, retried; its rules replaced under another id, the
    // versions queued under the first one ship all the same.
    d.create_bucket().bucket("plain").send().await.unwrap();
    let to_plain = |id: &str| {
        nodectl(
            &src,
            &[
                "replication",
                "set",
                "root",
                SRC,
                "--endpoint",
                &dst.endpoint(),
                "--to-bucket",
                "plain",
                "--id",
                id,
                "--access-key",
                ACCESS_KEY,
                "--secret-key-file",
                secret.to_str().unwrap(),
            ],
        )
    };
    assert!(to_plain("first").0);
    put(&s, "to-plain", b"waits for versioning").await;
    std::thread::sleep(Duration::from_millis(1500));
    let st = status(&src);
    assert_eq!(st["backlog"], 1, "{st}");
    assert!(
        st["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("versioning"),
        "{st}"
    );
    enable_versioning(&d, "plain").await;
    assert!(to_plain("second").0);
    drained(&src, Duration::from_secs(60));
    let got = d
        .get_object()
        .bucket("plain")
        .key("to-plain")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().to_vec(),
        b"waits for versioning"
    );

    // The rules removed: new writes stay here.
    let (ok, _, err) = nodectl(&src, &["replication", "remove", "root", SRC]);
    assert!(ok, "{err}");
    put(&s, "after", b"not shipped").await;
    std::thread::sleep(Duration::from_secs(1));
    let r = d.head_object().bucket(DST).key("after").send().await;
    assert_eq!(code(r), "NotFound");
}
