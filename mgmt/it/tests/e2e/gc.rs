//! The collector on a real node: chunks no manifest references (planted through
//! the chunk port, a repair's loser on the wrong drive, the remains of refused
//! writes) are deleted; referenced chunks and writes in flight are never taken,
//! and a write that outlives two epochs is refused instead of committed over
//! deleted chunks.

use bytes::Bytes;
use cairn_chunkproto::auth::LocalKey;
use cairn_chunkproto::{ChunkClient, Reply, Request};
use cairn_it::raw::{read_all, signed_request, Payload, Raw};
use cairn_it::{get_bytes, put_bytes, random_bytes, Node, NodeOptions};
use cairn_types::{ChunkId, ChunkVersion};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn chunk_client(node: &Node) -> ChunkClient {
    let key = LocalKey::load(&node.chunk_key()).expect("chunk key");
    ChunkClient::local(node.datapath_addr.clone(), 1, Duration::from_secs(30), key)
}

/// Every chunk on each drive, with its version.
async fn list_all(c: &ChunkClient, drives: u16) -> HashMap<u16, Vec<ChunkVersion>> {
    let mut out = HashMap::new();
    for drive in 0..drives {
        let mut after = ChunkId::MIN;
        let mut all = Vec::new();
        loop {
            let r = c
                .call(vec![Request::ListVersions {
                    drive,
                    after,
                    limit: 1000,
                }])
                .await
                .unwrap();
            let Ok(Reply::ListVersions { chunks }) = r.into_iter().next().unwrap() else {
                panic!("ListVersions failed");
            };
            let Some(last) = chunks.last() else { break };
            after = last.id;
            all.extend(chunks);
        }
        out.insert(drive, all);
    }
    out
}

async fn put_chunk(c: &ChunkClient, drive: u16, id: ChunkId, tenant: u64, payload: Bytes) {
    let r = c
        .call(vec![Request::Put {
            drive,
            id,
            tenant,
            key_id: 0,
            payload,
            durable: true,
        }])
        .await
        .unwrap();
    assert!(matches!(r[0], Ok(Reply::Put)), "{:?}", r[0]);
}

async fn exists(c: &ChunkClient, drive: u16, id: ChunkId, tenant: u64) -> bool {
    let r = c
        .call(vec![Request::Stat { drive, id, tenant }])
        .await
        .unwrap();
    r[0].is_ok()
}

/// Waits until the collector has run `rounds` more rounds after `from`.
async fn wait_rounds(node: &Node, from: u64, rounds: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = node.admin("GET", "/v1/gc");
        if s["rounds"].as_u64().unwrap() >= from + rounds && !s["running"].as_bool().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "collector rounds not run: {s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The head of a signed PUT of `len` bytes to `b/key` (unsigned payload).
fn put_head(node: &Node, key: &str, len: usize) -> Vec<u8> {
    let len = len.to_string();
    signed_request(
        node,
        "PUT",
        &format!("/gcb/{key}"),
        &[("content-length", len.as_str())],
        b"",
        Payload::Unsigned,
    )
}

/// Sends a request head, then `body` in `pieces` pieces `gap` apart; the answer.
async fn send_slowly(
    addr: String,
    head: Vec<u8>,
    body: Vec<u8>,
    pieces: usize,
    gap: Duration,
) -> Raw {
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&head).await.unwrap();
    for piece in body.chunks(body.len().div_ceil(pieces)) {
        tokio::time::sleep(gap).await;
        if s.write_all(piece).await.is_err() {
            break;
        }
    }
    read_all(&mut s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_takes_garbage_and_nothing_else() {
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_GC_EVERY", "2")],
        ..NodeOptions::default()
    });
    let s3 = node.client();
    s3.create_bucket().bucket("gcb").send().await.unwrap();
    let mut objects = HashMap::new();
    for i in 0..12u64 {
        let len = if i % 2 == 0 { 5_000 } else { 3 << 20 };
        let data = random_bytes(len, i);
        put_bytes(&s3, "gcb", &format!("o{i}"), &data)
            .await
            .unwrap();
        objects.insert(format!("o{i}"), data);
    }
    let chunks = chunk_client(&node);
    let before = list_all(&chunks, 4).await;

    // Garbage: chunks of an extent no manifest names, on every drive ...
    let tenant = before[&0][0].tenant;
    let fake = (rand::random::<u128>() >> 32) << 32;
    let mut planted = Vec::new();
    for n in 0..24u128 {
        let drive = (n % 4) as u16;
        let id = ChunkId::from_u128(fake | n);
        put_chunk(&chunks, drive, id, tenant, Bytes::from(vec![7u8; 4096])).await;
        planted.push((drive, id));
    }
    // ... and a repair's loser: a copy of a real small object's chunk on the one
    // drive its manifest does not name (3 copies on 4 drives).
    let mut holders: HashMap<ChunkId, Vec<u16>> = HashMap::new();
    for (d, list) in &before {
        for c in list {
            holders.entry(c.id).or_default().push(*d);
        }
    }
    let (&real, drives) = holders
        .iter()
        .find(|(_, ds)| ds.len() == 3)
        .expect("a replicated chunk on three drives");
    let loser_drive = (0..4).find(|d| !drives.contains(d)).unwrap();
    let r = chunks
        .call(vec![Request::Get {
            drive: drives[0],
            id: real,
            tenant,
        }])
        .await
        .unwrap();
    let Ok(Reply::Get { payload }) = &r[0] else {
        panic!("{:?}", r[0])
    };
    put_chunk(&chunks, loser_drive, real, tenant, payload.clone()).await;

    // Writes that take longer than two epochs are refused, and those that end in
    // time are kept, while rounds run every 2 s.
    let rounds0 = node.admin("GET", "/v1/gc")["rounds"].as_u64().unwrap();
    let mut slow = Vec::new();
    for i in 0..3u64 {
        let data = random_bytes(2 << 20, 100 + i);
        let key = format!("slow{i}");
        let head = put_head(&node, &key, data.len());
        let addr = node.s3_addr.clone();
        slow.push(tokio::spawn(async move {
            let r = send_slowly(addr, head, data.clone(), 8, Duration::from_millis(1200)).await;
            (key, data, r)
        }));
    }
    // Writes that take less than an interval see at most one advance: committed.
    let mut medium = Vec::new();
    for i in 0..3u64 {
        let data = random_bytes(2 << 20, 300 + i);
        let key = format!("medium{i}");
        let head = put_head(&node, &key, data.len());
        let addr = node.s3_addr.clone();
        medium.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(900 * i)).await;
            let r = send_slowly(addr, head, data.clone(), 4, Duration::from_millis(350)).await;
            (key, data, r)
        }));
    }
    // Meanwhile, ordinary writes keep landing.
    for i in 0..10u64 {
        let data = random_bytes(1 << 20, 200 + i);
        put_bytes(&s3, "gcb", &format!("quick{i}"), &data)
            .await
            .unwrap();
        objects.insert(format!("quick{i}"), data);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    for h in medium {
        let (key, data, r) = h.await.unwrap();
        assert_eq!(r.status, 200, "a write of 1.4 s was refused: {r:?}");
        objects.insert(key, data);
    }
    for h in slow {
        let (key, data, r) = h.await.unwrap();
        match r.status {
            200 => {
                objects.insert(key, data);
            }
            _ => assert!(
                r.text.contains("RequestTimeout"),
                "a slow write failed for another reason: {r:?}"
            ),
        }
    }
    assert!(
        !objects.contains_key("slow0") || !objects.contains_key("slow1"),
        "writes spanning ~10 s with an epoch every 2 s were all committed"
    );

    // Enough rounds for anything unreferenced to be two epochs old.
    let st = wait_rounds(&node, rounds0, 4).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let st = loop {
        let s = node.admin("GET", "/v1/gc");
        let last = &s["last"];
        if last["unreferenced"].as_u64() == Some(0) && last["error"].is_null() {
            break s;
        }
        assert!(Instant::now() < deadline, "garbage left: {s} (first {st})");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(st["deleted_total"].as_u64().unwrap() >= 25, "{st}");

    for (d, id) in &planted {
        assert!(
            !exists(&chunks, *d, *id, tenant).await,
            "planted chunk kept"
        );
    }
    assert!(
        !exists(&chunks, loser_drive, real, tenant).await,
        "the loser copy kept"
    );
    for d in drives {
        assert!(
            exists(&chunks, *d, real, tenant).await,
            "a referenced copy was taken"
        );
    }
    for (k, data) in &objects {
        let got = get_bytes(&s3, "gcb", k).await.unwrap();
        assert!(got == *data, "{k} reads back different bytes");
    }
    // Nothing referenced was taken: every chunk listed before is still there.
    let after = list_all(&chunks, 4).await;
    for (d, list) in &before {
        for c in list {
            assert!(
                after[d].iter().any(|a| a.id == c.id && a.seq == c.seq),
                "chunk {} on drive {d} taken",
                c.id
            );
        }
    }
}

/// `nodectl gc --dry-run` reports and deletes nothing; `nodectl gc status`
/// shows the round. With the schedule off, the epoch does not move, so even a
/// real round only remembers what it found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodectl_gc_dry_run_reports_without_deleting() {
    let node = Node::start(NodeOptions {
        drives: 2,
        mgmtd_env: vec![("CAIRN_GC_EVERY", "0")],
        ..NodeOptions::default()
    });
    let chunks = chunk_client(&node);
    let fake = (rand::random::<u128>() >> 32) << 32;
    for n in 0..6u128 {
        put_chunk(
            &chunks,
            (n % 2) as u16,
            ChunkId::from_u128(fake | n),
            1,
            Bytes::from_static(b"junk"),
        )
        .await;
    }
    let nodectl = |args: &[&str]| {
        let token = node.state_dir().join("admin.token");
        let out = std::process::Command::new(cairn_it::bin("nodectl"))
            .args(args)
            .args(["--admin", &node.admin_addr, "--token-file"])
            .arg(&token)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "nodectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let out = nodectl(&["gc", "--dry-run", "--json"]);
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["last"]["dry_run"], true, "{s}");
    assert_eq!(s["last"]["unreferenced"], 6, "{s}");
    assert_eq!(s["last"]["deleted"], 0, "{s}");
    assert_eq!(s["candidates"], 0, "a dry run remembers nothing: {s}");
    for n in 0..6u128 {
        assert!(exists(&chunks, (n % 2) as u16, ChunkId::from_u128(fake | n), 1).await);
    }
    let out = nodectl(&["gc"]);
    assert!(out.contains("6 unreferenced"), "{out}");
    assert!(out.contains("6 chunks waiting"), "{out}");
    let out = nodectl(&["gc", "status"]);
    assert!(out.contains("rounds on demand only"), "{out}");
}

/// A single node deletes every unreferenced chunk before it serves (docs: "a
/// single node ... deletes every unreferenced chunk at start-up, after a read
/// barrier and before serving"), so a node full of a crash's leftovers has its
/// space back at once: chunks planted while mgmtd was down are gone by the time
/// the first GET is answered, with no collector round (the schedule is an hour),
/// and the object the node holds reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_deletes_orphans_before_it_serves() {
    let mut node = Node::start(NodeOptions::default());
    let s3 = node.client();
    s3.create_bucket().bucket("start").send().await.unwrap();
    let data = random_bytes(3 << 20, 5);
    put_bytes(&s3, "start", "kept", &data).await.unwrap();
    let chunks = chunk_client(&node);
    let tenant = list_all(&chunks, 4).await[&0][0].tenant;

    node.kill_mgmtd();
    let fake = (rand::random::<u128>() >> 32) << 32;
    let mut planted = Vec::new();
    for n in 0..8u128 {
        let drive = (n % 4) as u16;
        let id = ChunkId::from_u128(fake | n);
        put_chunk(&chunks, drive, id, tenant, Bytes::from(vec![9u8; 4096])).await;
        planted.push((drive, id));
    }
    node.start_mgmtd();
    assert_eq!(
        get_bytes(&node.client(), "start", "kept").await.unwrap(),
        data
    );
    for (drive, id) in planted {
        assert!(
            !exists(&chunks, drive, id, tenant).await,
            "orphan {id} on drive {drive} still there once the node served"
        );
    }
    let st = node.status();
    assert!(st["collected_chunks"].as_u64() >= Some(8), "{st}");
}
