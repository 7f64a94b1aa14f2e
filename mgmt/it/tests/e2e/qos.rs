//! Tenants' rates from the outside: set with the real `nodectl`, felt through
//! aws-sdk-s3 with retries off (so a refusal is seen, not retried away). A tenant
//! over its request rate gets `503 SlowDown` and nothing it was refused is
//! stored; a tenant over its byte rate is slowed, never refused; another tenant
//! on the same node is held back by neither; the limits outlast a restart.
//! (Fair sharing of a busy node is measured by bench/qos.sh; its scheduler is
//! tested in cairn-qos.)

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use cairn_it::tenant::{nodectl, nodectl_json};
use cairn_it::{get_bytes, random_bytes, Node, NodeOptions};
use std::time::{Duration, Instant};

/// A client of a new key of `user` in `tenant` that never retries.
fn no_retries(node: &Node, tenant: &str, user: &str) -> Client {
    nodectl_json(node, &["user", "create", tenant, user]);
    let k = nodectl_json(node, &["key", "create", tenant, user]);
    let c = node.client_with(
        k["access_key"].as_str().unwrap(),
        k["secret_key"].as_str().unwrap(),
    );
    let conf = c
        .config()
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .build();
    Client::from_conf(conf)
}

/// `count` PUTs of small objects at once: (the keys stored, the refusals' codes).
async fn flood(c: &Client, bucket: &str, count: usize) -> (Vec<String>, Vec<String>) {
    let mut puts = tokio::task::JoinSet::new();
    for i in 0..count {
        let c = c.clone();
        let (bucket, key) = (bucket.to_string(), format!("flood-{i}"));
        puts.spawn(async move {
            let r = c
                .put_object()
                .bucket(bucket)
                .key(&key)
                .body(ByteStream::from(key.clone().into_bytes()))
                .send()
                .await;
            (key, r)
        });
    }
    let (mut stored, mut refused) = (Vec::new(), Vec::new());
    while let Some(done) = puts.join_next().await {
        let (key, r) = done.unwrap();
        match r {
            Ok(_) => stored.push(key),
            Err(e) => {
                let status = e.raw_response().map(|r| r.status().as_u16());
                refused.push(format!("{} {status:?}", e.code().unwrap_or("?")));
            }
        }
    }
    (stored, refused)
}

#[tokio::test]
async fn a_tenants_rates_hold_it_back_and_no_other() {
    let mut node = Node::start(NodeOptions::default());
    for t in ["slow", "free"] {
        nodectl_json(&node, &["tenant", "create", t]);
    }
    let slow = no_retries(&node, "slow", "s");
    let free = no_retries(&node, "free", "f");
    for c in [&slow, &free] {
        c.create_bucket().bucket("bkt").send().await.unwrap();
    }

    // Bad settings are refused with a reason, and change nothing.
    for bad in [
        &["--weight", "0"][..],
        &["--write-requests", "0"],
        &["--read-bytes", "512K"],
    ] {
        let mut args = vec!["tenant", "qos", "slow"];
        args.extend_from_slice(bad);
        let (ok, _, err) = nodectl(&node, &args);
        assert!(
            !ok && err.contains("weight is 1 to 10000"),
            "{bad:?}: {err}"
        );
    }
    let (ok, _, err) = nodectl(&node, &["tenant", "qos", "slow", "--write-bytes", "fast"]);
    assert!(!ok && err.contains("not a size"), "{err}");
    let (ok, out, err) = nodectl(
        &node,
        &[
            "tenant",
            "qos",
            "slow",
            "--write-requests",
            "5",
            "--weight",
            "3",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("weight 3") && out.contains("writes 5 req/s"),
        "{out}"
    );

    // Requests: a second's worth at once, then turns up to two seconds off;
    // past that, SlowDown. What was refused is not stored.
    let t0 = Instant::now();
    let (stored, refused) = flood(&slow, "bkt", 40).await;
    let took = t0.elapsed();
    assert!(
        (8..=22).contains(&stored.len()),
        "{} stored in {took:?}, refused: {refused:?}",
        stored.len()
    );
    assert!(
        refused.iter().all(|r| r == "SlowDown Some(503)"),
        "{refused:?}"
    );
    let listed = slow
        .list_objects_v2()
        .bucket("bkt")
        .send()
        .await
        .unwrap()
        .contents()
        .len();
    assert_eq!(
        listed,
        stored.len(),
        "exactly the acknowledged PUTs are stored"
    );
    for k in &stored {
        assert_eq!(get_bytes(&slow, "bkt", k).await.unwrap(), k.as_bytes());
    }
    // Another tenant's flood at the same moment is not refused.
    let (stored_free, refused_free) = flood(&free, "bkt", 40).await;
    assert_eq!((stored_free.len(), refused_free), (40, vec![]));

    // Bytes: 2 MiB a second shapes an 8 MiB PUT to about three seconds (the
    // first second's worth goes at once); the other tenant's takes its usual time.
    let (ok, _, err) = nodectl(
        &node,
        &[
            "tenant",
            "qos",
            "slow",
            "--write-requests",
            "none",
            "--write-bytes",
            "2M",
        ],
    );
    assert!(ok, "{err}");
    // Limits are read again within a second on every node.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let body = random_bytes(8 << 20, 7);
    let timed = |c: Client, key: &'static str| {
        let body = body.clone();
        async move {
            let t = Instant::now();
            c.put_object()
                .bucket("bkt")
                .key(key)
                .body(ByteStream::from(body))
                .send()
                .await
                .unwrap();
            t.elapsed()
        }
    };
    let (slow_took, free_took) =
        tokio::join!(timed(slow.clone(), "big"), timed(free.clone(), "big"));
    assert!(slow_took >= Duration::from_millis(2500), "{slow_took:?}");
    assert!(free_took * 2 < slow_took, "{free_took:?} vs {slow_took:?}");
    assert_eq!(get_bytes(&slow, "bkt", "big").await.unwrap(), body);
    assert_eq!(get_bytes(&free, "bkt", "big").await.unwrap(), body);

    // What the node did to each tenant is in `tenant show`.
    let t = nodectl_json(&node, &["tenant", "show", "slow"]);
    let here = &t["tenant"]["qos_here"];
    assert!(
        here["slowed_down"].as_u64().unwrap() >= refused.len() as u64,
        "{t}"
    );
    assert!(here["shaped_ms"].as_u64().unwrap() >= 1500, "{t}");
    let f = nodectl_json(&node, &["tenant", "show", "free"]);
    assert_eq!(f["tenant"]["qos_here"]["slowed_down"], 0, "{f}");

    // The settings are the tenant's record: they outlast a restart.
    node.restart();
    let t = nodectl_json(&node, &["tenant", "show", "slow"]);
    assert_eq!(t["tenant"]["qos"]["weight"], 3, "{t}");
    assert_eq!(t["tenant"]["qos"]["write_bytes_per_sec"], 2 << 20, "{t}");
    assert!(
        t["tenant"]["qos"]["write_requests_per_sec"].is_null(),
        "{t}"
    );
    let (ok, out, _) = nodectl(&node, &["tenant", "show", "slow"]);
    assert!(
        ok && out.contains("qos weight 3, reads no limit, writes 2.0 MiB/s"),
        "{out}"
    );
}
