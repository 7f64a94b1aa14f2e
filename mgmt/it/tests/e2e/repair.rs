//! A single node's repair: an object written while a drive could not take its
//! fragment (failed, here: its superblock damaged at start) is brought back to full
//! protection once the drive is back, so that losing any two drives of 2+2 later
//! still loses nothing.

use cairn_it::{get_bytes as get, put_bytes as put, random_bytes, Node, NodeOptions};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragments_never_placed_are_rebuilt_once_their_drive_is_back() {
    let mut node = Node::start(NodeOptions {
        drive_size: "64M",
        mgmtd_env: vec![("CAIRN_REPAIR_EVERY", "1")],
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("short").send().await.unwrap();
    node.stop();

    // Drive 3's superblock damaged: datapathd serves it as failed.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(node.drive_path(3))
        .unwrap();
    let mut block = vec![0u8; 4096];
    f.read_exact_at(&mut block, 0).unwrap();
    f.write_all_at(b"XXXX", 0).unwrap();
    node.restart();
    let mut objs = Vec::new();
    for i in 0..6u64 {
        let d = random_bytes(if i % 2 == 0 { 3 << 20 } else { 40_000 }, 70 + i);
        put(&c, "short", &format!("k{i}"), &d).await.unwrap();
        objs.push(d);
    }
    // Status counts the three erasure-coded objects short of a fragment.
    let st = node.status();
    assert_eq!(st["health"], "degraded", "{st}");
    assert_eq!(st["objects_protection"]["degraded"], 3, "{st}");
    node.stop();

    // The drive is back: repair places what it missed.
    f.write_all_at(&block, 0).unwrap();
    f.sync_all().unwrap();
    node.restart();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = node.status();
        // Three 2-stripe objects: 6 fragments short. (The small ones got their
        // three copies on the three drives that were up.)
        if st["repaired_fragments"].as_u64().unwrap() >= 6 {
            break;
        }
        assert!(Instant::now() < deadline, "not repaired: {st}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let st = node.status();
    assert_eq!(st["objects_protection"]["degraded"], 0, "{st}");
    assert_eq!(st["objects_protection"]["protected"], 6, "{st}");
    assert_eq!(st["health"], "healthy", "{st}");
    node.stop();

    // Two drives lost for good (their files replaced by blank ones).
    for d in [0u16, 1] {
        std::fs::remove_file(node.drive_path(d)).unwrap();
    }
    node.restart();
    for (i, d) in objs.iter().enumerate() {
        assert_eq!(
            &get(&c, "short", &format!("k{i}")).await.unwrap(),
            d,
            "k{i}"
        );
    }
}

/// A drive replaced by a blank one (here: its file deleted, so datapathd formats a
/// new one) is refilled by a scrub pass that starts by itself, so losing two other
/// drives afterwards still loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_replaced_blank_is_refilled_without_being_asked() {
    let mut node = Node::start(NodeOptions {
        drive_size: "64M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("replaced").send().await.unwrap();
    let mut objs = Vec::new();
    for i in 0..6u64 {
        let d = random_bytes(if i % 2 == 0 { 3 << 20 } else { 40_000 }, 90 + i);
        put(&c, "replaced", &format!("k{i}"), &d).await.unwrap();
        objs.push(d);
    }
    node.stop();
    std::fs::remove_file(node.drive_path(1)).unwrap();
    node.restart();
    // The blank drive starts a pass by itself (nobody asks for one).
    let last = node.wait_scrub_passes(1).await["last"].clone();
    assert!(last["repaired"].as_u64().unwrap() > 0, "{last}");
    assert_eq!(last["unrepaired"], 0, "{last}");
    node.stop();
    for d in [2u16, 3] {
        std::fs::remove_file(node.drive_path(d)).unwrap();
    }
    node.restart();
    for (i, d) in objs.iter().enumerate() {
        assert_eq!(
            &get(&c, "replaced", &format!("k{i}")).await.unwrap(),
            d,
            "k{i}"
        );
    }
}
