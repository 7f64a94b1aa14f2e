//! A data directory made by a single node before a node was a cluster of one
//! (main at e41c4fd: `nodectl dev up --drive-size 256M`, four objects written
//! with the AWS CLI, then Ctrl-C) starts under today's code and serves every
//! object bit-exact; the node is then a one-member cluster that takes new
//! writes, and all of it survives a restart.
//!
//! The fixture (`fixtures/single-node-e41c4fd.tar.gz`, 73 KB: the drives are
//! sparse and the objects patterned) holds `drives/` and `state/` as the old
//! node left them, its root credentials included (made for this fixture only).
//! Each object is the SHA-256 of its file name repeated to its size.
//!
//! And a single node grows into a cluster without migration.

use cairn_it::dev::{nodectl_json, DevUp};
use cairn_it::{get_bytes, put_bytes, random_bytes, s3_client, Node, NodeOptions};
use sha2::{Digest, Sha256};
use std::path::Path;

const BUCKET: &str = "before-clusters";
/// (key, file name the content was made from, size)
const OBJECTS: [(&str, &str, usize); 4] = [
    ("obj-100", "obj-100", 100),
    ("obj-204800", "obj-204800", 204_800),
    ("obj-3145728", "obj-3145728", 3_145_728),
    // Above the CLI's 8 MiB threshold: a multipart upload of two parts.
    ("dir/multipart", "multipart", 9_437_184),
];

fn content(name: &str, size: usize) -> Vec<u8> {
    let seed = Sha256::digest(name.as_bytes());
    seed.iter().copied().cycle().take(size).collect()
}

fn unpack(data: &Path) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/single-node-e41c4fd.tar.gz");
    let parent = data.parent().expect("parent");
    let st = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&fixture)
        .arg("-C")
        .arg(parent)
        .status()
        .expect("tar");
    assert!(st.success(), "unpacking {}", fixture.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_directory_from_before_clusters_of_one_serves_on() {
    let mut node = DevUp::adopt(4, unpack);
    let creds: serde_json::Value = serde_json::from_slice(
        &std::fs::read(node.data().join("state/root-credentials.json")).expect("credentials"),
    )
    .expect("credentials json");
    let c = s3_client(
        &format!("http://{}", node.s3),
        creds["access_key"].as_str().expect("access key"),
        creds["secret_key"].as_str().expect("secret key"),
    );
    let check_all = |c: aws_sdk_s3::Client| async move {
        for (key, name, size) in OBJECTS {
            let got = get_bytes(&c, BUCKET, key)
                .await
                .unwrap_or_else(|e| panic!("GET {key}: {e}"));
            assert!(got == content(name, size), "{key}: other bytes");
        }
    };
    check_all(c.clone()).await;

    // It is now a cluster of one, with the node's drives under their old numbers.
    let data = node.data().display().to_string();
    let st = nodectl_json(&["cluster", "status", "--data", &data]).expect("cluster status");
    assert_eq!(st["nodes"].as_array().map(|n| n.len()), Some(1), "{st}");
    assert_eq!(st["objects"]["total"], 4, "{st}");
    assert_eq!(st["objects"]["protected"], 4, "{st}");

    let fresh = cairn_it::random_bytes(1 << 20, 7);
    put_bytes(&c, BUCKET, "after", &fresh)
        .await
        .expect("PUT after the upgrade");
    node.restart();
    check_all(c.clone()).await;
    assert_eq!(
        get_bytes(&c, BUCKET, "after").await.expect("GET after"),
        fresh
    );
    let st = nodectl_json(&["status", "--data", &data]).expect("status");
    assert_eq!(st["health"], "healthy", "{st}");
    assert_eq!(st["objects"], 5, "{st}");
}

/// A single node takes joins without migration: restarted reachable by other
/// nodes (as `mode = "cluster"` in node.toml does), it hands out a join token, two
/// new nodes join it, every object it held reads back through each of them, and a
/// write through a new node reads back through the first.
#[tokio::test(flavor = "multi_thread")]
async fn a_single_node_takes_joins_and_keeps_its_objects() {
    let mut first = Node::start(NodeOptions {
        drives: 3,
        drive_size: "256M",
        ec: Some("2+1"),
        ..Default::default()
    });
    let c = first.client();
    c.create_bucket().bucket("grow").send().await.unwrap();
    let mut objects = Vec::new();
    for i in 0..8u64 {
        // Replicated small objects and erasure-coded large ones.
        let body = random_bytes(if i % 2 == 0 { 1 << 20 } else { 1000 }, i);
        put_bytes(&c, "grow", &format!("k{i}"), &body)
            .await
            .unwrap();
        objects.push(body);
    }
    first.stop();
    first.opts.reachable = true;
    first.start_datapathd();
    first.start_mgmtd();
    let token = first.admin("GET", "/v1/cluster/token");
    let mut joined = Vec::new();
    for _ in 0..2 {
        let n = Node::start(NodeOptions {
            drives: 2,
            drive_size: "256M",
            reachable: true,
            ..Default::default()
        });
        n.admin_post(
            "/v1/cluster/join",
            &serde_json::json!({"seed": first.internal_addr, "token": token["token"]}),
        );
        joined.push(n);
    }
    let st = first.admin("GET", "/v1/cluster/status");
    assert_eq!(st["nodes"].as_array().unwrap().len(), 3, "{st}");
    // A joiner enters the map down and takes data once its chunk service has
    // reported (see cairn-mgmtd's `until_trusted`): until then a write needing
    // its domain is refused with 503. Wait for all three, as a client would.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let st = first.admin("GET", "/v1/cluster/status");
        if st["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["state"] == "up")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "joiners not up: {st}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for n in std::iter::once(&first).chain(&joined) {
        let c = n.client();
        for (i, body) in objects.iter().enumerate() {
            let got = get_bytes(&c, "grow", &format!("k{i}")).await;
            assert_eq!(got.as_ref(), Ok(body), "k{i} through {}", n.s3_addr);
        }
    }
    let body = random_bytes(3 << 20, 99);
    put_bytes(&joined[1].client(), "grow", "new", &body)
        .await
        .unwrap();
    assert_eq!(get_bytes(&first.client(), "grow", "new").await, Ok(body));
}
