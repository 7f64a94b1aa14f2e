//! Durability under injected faults, end to end through S3: processes killed with
//! SIGKILL under a write load, bytes flipped in stored fragments, drive files removed
//! and truncated while the node runs.

use cairn_it::{
    find_on_drives, flip, get_bytes as get, md5_hex, put_bytes as put, random_bytes, Node,
    NodeOptions, PLAINTEXT_ROOT,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sizes that exercise both layouts: replicated, one stripe, several stripes.
const SIZES: [usize; 5] = [4096, 100_000, 300_000, 1_500_000, 3_000_000];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_of_either_daemon() {
    let mut node = Node::start(NodeOptions::default());
    node.client()
        .create_bucket()
        .bucket("kill9")
        .send()
        .await
        .unwrap();
    // key -> md5 of what was attempted, and the keys whose PUT was acknowledged.
    let attempted: Arc<Mutex<HashMap<String, String>>> = Default::default();
    let acked: Arc<Mutex<HashMap<String, String>>> = Default::default();
    let rounds = 6;
    for round in 0..rounds {
        let client = node.client();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..4u64 {
            let (client, stop, attempted, acked) = (
                client.clone(),
                stop.clone(),
                attempted.clone(),
                acked.clone(),
            );
            writers.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let key = format!("r{round}/w{w}/{i}");
                    let size = SIZES[(i as usize + w as usize) % SIZES.len()];
                    let data = random_bytes(size, round as u64 * 1_000_000 + w * 10_000 + i);
                    let sum = md5_hex(&data);
                    attempted.lock().unwrap().insert(key.clone(), sum.clone());
                    if put(&client, "kill9", &key, &data).await.is_ok() {
                        acked.lock().unwrap().insert(key, sum);
                    }
                    i += 1;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        // Alternate the victim: mgmtd, datapathd, then both at once.
        match round % 3 {
            0 => node.kill_mgmtd(),
            1 => node.kill_datapathd(),
            _ => {
                node.kill_datapathd();
                node.kill_mgmtd();
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Writers finish their in-flight request (it fails or times out quickly
        // against a dead daemon).
        let _ = tokio::time::timeout(Duration::from_secs(40), futures_join(writers)).await;
        node.restart();
    }
    let client = node.client();
    let acked = acked.lock().unwrap().clone();
    let attempted = attempted.lock().unwrap().clone();
    assert!(
        acked.len() > 20,
        "load too light to mean anything: {}",
        acked.len()
    );
    for (key, sum) in &acked {
        let data = get(&client, "kill9", key)
            .await
            .unwrap_or_else(|e| panic!("acknowledged {key} lost: {e}"));
        assert_eq!(&md5_hex(&data), sum, "acknowledged {key} differs");
    }
    // Whatever is listed is whole: either acknowledged or a complete write whose
    // acknowledgement was lost with the killed daemon, never a torn one.
    let mut listed = 0;
    let mut token = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket("kill9")
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        for o in page.contents() {
            let key = o.key().unwrap();
            listed += 1;
            let data = get(&client, "kill9", key).await.unwrap();
            assert_eq!(
                Some(&md5_hex(&data)),
                attempted.get(key),
                "{key} is listed but its bytes are not what was written"
            );
        }
        match page.next_continuation_token() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert!(listed >= acked.len());
    eprintln!(
        "kill -9 x{rounds}: {} acknowledged, {} attempted, {listed} listed, all verified",
        acked.len(),
        attempted.len()
    );
}

async fn futures_join(hs: Vec<tokio::task::JoinHandle<()>>) {
    for h in hs {
        let _ = h.await;
    }
}

fn counter(node: &Node, name: &str) -> u64 {
    node.status()[name].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bytes_are_detected_rebuilt_and_rewritten() {
    let node = Node::start(NodeOptions {
        // The faults are aimed at plaintext bytes found on the drives.
        mgmtd_env: vec![PLAINTEXT_ROOT],
        drive_size: "64M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("rot").send().await.unwrap();
    // 2+2 with 1 MiB fragments: the first stripe holds bytes 0..2 MiB as two data
    // fragments, stored verbatim on two drives.
    let data = random_bytes(3 << 20, 7);
    put(&c, "rot", "ec", &data).await.unwrap();
    let small = random_bytes(50_000, 8);
    put(&c, "rot", "small", &small).await.unwrap();

    // One data fragment rots.
    let hits = find_on_drives(&node, &data[1000..1064]);
    assert_eq!(hits.len(), 1, "fragment bytes stored once");
    flip(&node, hits[0].0, hits[0].1 + 10);
    // Two of the three replicas of the small object rot: whichever copy a read
    // tries first, it returns the good one.
    let shits = find_on_drives(&node, &small[..64]);
    assert_eq!(shits.len(), 3, "three replicas");
    for &(d, off) in &shits[..2] {
        flip(&node, d, off + 5);
    }

    let before = counter(&node, "degraded_reads");
    assert_eq!(
        get(&c, "rot", "ec").await.unwrap(),
        data,
        "rebuilt, bit-exact"
    );
    assert_eq!(get(&c, "rot", "small").await.unwrap(), small);
    assert!(counter(&node, "degraded_reads") > before);
    // The bad fragment is rewritten in the background.
    let deadline = Instant::now() + Duration::from_secs(10);
    while counter(&node, "repaired_fragments") < 1 {
        assert!(Instant::now() < deadline, "repair not counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Once rewritten, reads are clean again: no new degraded read.
    let after_repair = counter(&node, "degraded_reads");
    assert_eq!(get(&c, "rot", "ec").await.unwrap(), data);
    assert_eq!(get(&c, "rot", "small").await.unwrap(), small);
    assert_eq!(
        counter(&node, "degraded_reads"),
        after_repair,
        "repair held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_bad_fragments_is_an_error_never_wrong_bytes() {
    let node = Node::start(NodeOptions {
        // The faults are aimed at plaintext bytes found on the drives.
        mgmtd_env: vec![PLAINTEXT_ROOT],
        drive_size: "64M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("rot").send().await.unwrap();
    let data = random_bytes(2 << 20, 9);
    put(&c, "rot", "ec", &data).await.unwrap();
    // Both data fragments and one parity fragment of the only stripe: 3 of 4
    // lost where 2+2 survives 2.
    let codec = cairn_erasure::Codec::new(2, 2).unwrap();
    let mut p0 = vec![0u8; 1 << 20];
    let mut p1 = vec![0u8; 1 << 20];
    codec
        .encode(
            &[&data[..1 << 20], &data[1 << 20..]],
            &mut [&mut p0, &mut p1],
        )
        .unwrap();
    for needle in [
        &data[100..164],
        &data[(1 << 20) + 100..(1 << 20) + 164],
        &p0[100..164],
    ] {
        let hits = find_on_drives(&node, needle);
        assert_eq!(hits.len(), 1);
        flip(&node, hits[0].0, hits[0].1 + 3);
    }
    match get(&c, "rot", "ec").await {
        Err(e) => assert!(e.contains("ServiceUnavailable"), "a clear error: {e}"),
        Ok(bytes) => panic!("got {} bytes from an unreadable object", bytes.len()),
    }
    assert!(counter(&node, "unreadable_reads") >= 1);

    // All three replicas of a small object rot: same.
    let small = random_bytes(10_000, 10);
    put(&c, "rot", "small", &small).await.unwrap();
    for (d, off) in find_on_drives(&node, &small[..64]) {
        flip(&node, d, off + 1);
    }
    assert!(get(&c, "rot", "small").await.is_err());
}

async fn wait_drive_state(node: &Node, drive: usize, want: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = node.status();
        if s["drives"][drive]["state"] == want {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "drive {drive} never became {want}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_and_truncated_drives_fail_and_reads_go_on() {
    let node = Node::start(NodeOptions {
        drive_size: "256M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("drv").send().await.unwrap();
    let mut objects = Vec::new();
    for (i, size) in [5_000usize, 90_000, 1_000_000, 2_500_000, 6_000_000]
        .into_iter()
        .enumerate()
    {
        let data = random_bytes(size, 100 + i as u64);
        put(&c, "drv", &format!("o{i}"), &data).await.unwrap();
        objects.push(data);
    }
    assert_eq!(node.status()["health"], "healthy");

    // A drive file disappears from under the running node.
    std::fs::remove_file(node.drive_path(1)).unwrap();
    let s = wait_drive_state(&node, 1, "failed").await;
    assert_eq!(s["health"], "degraded");
    // The objects with a fragment or copy on it are counted short, none lost.
    let p = &node.status()["objects_protection"];
    assert_eq!(p["objects"], 5, "{p}");
    assert!(p["degraded"].as_u64().unwrap() >= 1, "{p}");
    assert_eq!(p["lost"], 0, "{p}");
    for (i, data) in objects.iter().enumerate() {
        assert_eq!(&get(&c, "drv", &format!("o{i}")).await.unwrap(), data);
    }
    // Writes go on: three healthy drives still hold k+1 fragments of 2+2.
    let late = random_bytes(3_000_000, 200);
    put(&c, "drv", "late", &late).await.unwrap();
    assert_eq!(get(&c, "drv", "late").await.unwrap(), late);

    // A second drive is truncated: reads still work from the two left.
    std::fs::OpenOptions::new()
        .write(true)
        .open(node.drive_path(2))
        .unwrap()
        .set_len(4096)
        .unwrap();
    wait_drive_state(&node, 2, "failed").await;
    for (i, data) in objects.iter().enumerate() {
        assert_eq!(
            &get(&c, "drv", &format!("o{i}")).await.unwrap(),
            data,
            "o{i} after two drive losses"
        );
    }
    assert_eq!(get(&c, "drv", "late").await.unwrap(), late);
    // With two drives left, a large write cannot reach k+1 fragments: refused
    // with a clear error rather than acknowledged without redundancy.
    let e = put(&c, "drv", "refused", &random_bytes(1_000_000, 300))
        .await
        .unwrap_err();
    assert!(e.contains("ServiceUnavailable"), "{e}");
}
