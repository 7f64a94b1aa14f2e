//! Space on a real node: the fragments of failed and abandoned writes come back at
//! once (no restart), and a full node refuses writes with a clear 507, still
//! accepts deletes, and takes writes again once space is freed.

use cairn_it::raw::{read_all, signed_request, Payload};
use cairn_it::{random_bytes, Node, NodeOptions};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const MIB: usize = 1 << 20;

/// Bytes of live chunks on the node's drives.
fn used(node: &Node) -> u64 {
    node.status()["used_bytes"].as_u64().expect("used_bytes")
}

/// Waits until used space is at most `bound`; returns the last reading.
async fn wait_used_at_most(node: &Node, bound: u64, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let u = used(node);
        if u <= bound || Instant::now() > deadline {
            return u;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_abandoned_uploads_return_their_space() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("space").send().await.unwrap();
    let keep = random_bytes(3 * MIB, 1);
    cairn_it::put_bytes(&c, "space", "keep", &keep)
        .await
        .unwrap();
    let base = used(&node);
    assert!(base >= 3 * MIB as u64, "the kept object counts: {base}");

    // Declares 16 MiB, sends 8 MiB, hangs up: several stripes are durable by then.
    let part = random_bytes(8 * MIB, 2);
    for i in 0..6 {
        let mut req = signed_request(
            &node,
            "PUT",
            &format!("/space/abandoned{i}"),
            &[("content-length", &(16 * MIB).to_string())],
            b"",
            Payload::Unsigned,
        );
        req.extend_from_slice(&part);
        let mut s = TcpStream::connect(&node.s3_addr).await.unwrap();
        s.write_all(&req).await.unwrap();
        // Let the server store what it has before the connection drops.
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(s);
    }
    // Whole bodies whose Content-MD5 does not match: refused after every stripe
    // was written.
    let body = random_bytes(4 * MIB, 3);
    for i in 0..3 {
        let req = {
            let mut r = signed_request(
                &node,
                "PUT",
                &format!("/space/badmd5{i}"),
                &[
                    ("content-length", &body.len().to_string()),
                    ("content-md5", "1B2M2Y8AsgTpgAmY7PhCfg=="),
                ],
                b"",
                Payload::Unsigned,
            );
            r.extend_from_slice(&body);
            r
        };
        let mut s = TcpStream::connect(&node.s3_addr).await.unwrap();
        s.write_all(&req).await.unwrap();
        let r = read_all(&mut s).await;
        assert_eq!(r.status, 400, "bad Content-MD5: {}", r.text);
        assert!(r.text.contains("BadDigest"), "{}", r.text);
    }
    // Nothing of them is left once the deletes have run (no restart), within a
    // bound of one stripe's worth of bookkeeping.
    let bound = base + MIB as u64;
    let after = wait_used_at_most(&node, bound, Duration::from_secs(30)).await;
    assert!(
        after <= bound,
        "failed uploads still hold space: {after} bytes used, {base} before them"
    );
    for i in 0..6 {
        assert!(c
            .head_object()
            .bucket("space")
            .key(format!("abandoned{i}"))
            .send()
            .await
            .is_err());
    }
    assert_eq!(
        cairn_it::get_bytes(&c, "space", "keep").await.unwrap(),
        keep
    );
}

/// Fill a node until it refuses, delete everything, and write again without a
/// restart: the refusal is a clear, non-retryable 507 and status says "full";
/// deletes work on the full node; freed space comes back (after the free grace
/// period for reads in progress, 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_deletes_and_writes_again() {
    let node = Node::start(NodeOptions {
        drives: 4,
        drive_size: "64M",
        ec: Some("2+2"),
        segment_size: "4M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("full").send().await.unwrap();
    let data = random_bytes(2 * MIB, 7);
    let mut stored = Vec::new();
    let mut refusal = None;
    for i in 0..200 {
        let key = format!("o{i}");
        match c
            .put_object()
            .bucket("full")
            .key(&key)
            .body(data.clone().into())
            .send()
            .await
        {
            Ok(_) => stored.push(key),
            Err(e) => {
                refusal = Some(format!("{e:?}"));
                break;
            }
        }
    }
    let refusal = refusal.expect("a 64 MiB x 4 node never filled up");
    assert!(
        refusal.contains("InsufficientStorage") && refusal.contains("507"),
        "a full node must answer 507 InsufficientStorage: {refusal}"
    );
    assert!(
        stored.len() >= 20,
        "filled after only {} objects",
        stored.len()
    );
    let st = node.status();
    assert_eq!(st["health"], "full", "status: {st}");
    assert!(
        st["drives"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["full"] == true),
        "{st}"
    );
    // What was stored before the refusal is intact.
    assert_eq!(
        cairn_it::get_bytes(&c, "full", &stored[0]).await.unwrap(),
        data
    );
    // Every delete succeeds on the full node.
    for k in &stored {
        c.delete_object()
            .bucket("full")
            .key(k)
            .send()
            .await
            .unwrap_or_else(|e| panic!("delete {k} on a full node: {e:?}"));
    }
    // Writes succeed again once the freed chunks are deleted and compacted.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut n = 0;
    loop {
        let r = c
            .put_object()
            .bucket("full")
            .key(format!("again{n}"))
            .body(data.clone().into())
            .send()
            .await;
        if r.is_ok() {
            n += 1;
            if n == 10 {
                break;
            }
            continue;
        }
        assert!(
            Instant::now() < deadline,
            "no write accepted 90 s after deleting everything: {r:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        cairn_it::get_bytes(&c, "full", "again9").await.unwrap(),
        data
    );
    assert_eq!(node.status()["health"], "healthy");
}

/// A multipart upload neither completed nor aborted is aborted after
/// `--abort-uploads-after` (here 3 s) and its parts' space comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_multipart_uploads_are_aborted_and_freed() {
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_ABORT_UPLOADS_AFTER", "3")],
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("mpu").send().await.unwrap();
    let base = used(&node);
    let up = c
        .create_multipart_upload()
        .bucket("mpu")
        .key("left")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();
    for n in 1..=2 {
        c.upload_part()
            .bucket("mpu")
            .key("left")
            .upload_id(&id)
            .part_number(n)
            .body(random_bytes(5 * MIB, n as u64).into())
            .send()
            .await
            .unwrap();
    }
    assert!(used(&node) >= base + 10 * MIB as u64);
    // Aborted within about a second of its age, its parts freed after the 30 s
    // grace every free gets.
    let after = wait_used_at_most(&node, base + MIB as u64, Duration::from_secs(60)).await;
    assert!(
        after <= base + MIB as u64,
        "the abandoned upload still holds {after} bytes (base {base})"
    );
    let listed = c
        .list_multipart_uploads()
        .bucket("mpu")
        .send()
        .await
        .unwrap();
    assert!(listed.uploads().is_empty(), "{listed:?}");
    assert!(node.status()["aborted_uploads"].as_u64().unwrap() >= 1);
    // Completing it now says it is gone.
    let e = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("left")
        .upload_id(&id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(
                    aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag("\"x\"")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("NoSuchUpload"), "{e:?}");
}
