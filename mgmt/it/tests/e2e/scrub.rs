//! The scrubber and end-to-end checksums, through the real daemons: bytes rotted
//! in data and parity fragments and in replicas are found by one scrub pass and
//! rebuilt; a fragment forged on disk (a valid record holding the wrong bytes) is
//! never served; damage found when a drive is opened starts a pass by itself.

use cairn_blockdev::UringDevice;
use cairn_chunkstore::{ChunkStore, WriteOp};
use cairn_it::{
    find_on_drives, flip, get_bytes as get, put_bytes as put, random_bytes, Node, NodeOptions,
    PLAINTEXT_ROOT,
};

/// 2+2 with 1 MiB fragments (the default on four drives).
const SHARD: usize = 1 << 20;

fn counter(node: &Node, name: &str) -> u64 {
    node.status()[name].as_u64().unwrap()
}

/// The two parity fragments of the first stripe of `data` under 2+2.
fn parity_of_first_stripe(data: &[u8]) -> Vec<Vec<u8>> {
    let codec = cairn_erasure::Codec::new(2, 2).unwrap();
    let mut parity = vec![vec![0u8; SHARD]; 2];
    {
        let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
        codec
            .encode(&[&data[..SHARD], &data[SHARD..2 * SHARD]], &mut refs)
            .unwrap();
    }
    parity
}

async fn scrub_once(node: &Node) -> serde_json::Value {
    let before = node.admin("GET", "/v1/scrub")["passes"].as_u64().unwrap();
    node.admin("POST", "/v1/scrub/start");
    node.wait_scrub_passes(before + 1).await["last"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_scrub_pass_rebuilds_rotten_data_parity_and_replicas() {
    let node = Node::start(NodeOptions {
        // The faults are aimed at plaintext bytes found on the drives.
        mgmtd_env: vec![PLAINTEXT_ROOT],
        drive_size: "64M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("rot").send().await.unwrap();
    let data = random_bytes(3 << 20, 11);
    put(&c, "rot", "ec", &data).await.unwrap();
    let small = random_bytes(50_000, 12);
    put(&c, "rot", "small", &small).await.unwrap();
    let mut others = Vec::new();
    for i in 0..8 {
        let d = random_bytes(300_000, 100 + i);
        put(&c, "rot", &format!("o{i}"), &d).await.unwrap();
        others.push(d);
    }

    // A clean node: a pass reads everything and finds nothing.
    let clean = scrub_once(&node).await;
    assert_eq!(clean["bad"], 0, "{clean}");
    assert_eq!(clean["objects"], 10, "{clean}");
    // 3 MiB in two stripes of 4 fragments, 3 replicas, 8 one-stripe objects.
    assert_eq!(clean["fragments"], 8 + 3 + 8 * 4, "{clean}");

    // Rot: one data fragment, one parity fragment (never read by a healthy
    // GET), and two of the three replicas of the small object.
    let hits = find_on_drives(&node, &data[1000..1064]);
    assert_eq!(hits.len(), 1);
    flip(&node, hits[0].0, hits[0].1 + 10);
    let parity = parity_of_first_stripe(&data);
    let phits = find_on_drives(&node, &parity[1][4096..4160]);
    assert_eq!(phits.len(), 1, "the parity fragment is stored once");
    flip(&node, phits[0].0, phits[0].1 + 7);
    let shits = find_on_drives(&node, &small[..64]);
    assert_eq!(shits.len(), 3);
    for &(d, off) in &shits[..2] {
        flip(&node, d, off + 5);
    }

    let reads_before = counter(&node, "degraded_reads");
    let pass = scrub_once(&node).await;
    assert_eq!(pass["bad"], 4, "{pass}");
    assert_eq!(pass["repaired"], 4, "{pass}");
    assert_eq!(pass["unrepaired"], 0, "{pass}");
    // The scrubber, not a client, found them.
    assert_eq!(counter(&node, "degraded_reads"), reads_before);

    // Nothing bad left on disk: the next pass is clean, and clients read every
    // object without a single degraded read.
    let again = scrub_once(&node).await;
    assert_eq!(again["bad"], 0, "{again}");
    assert_eq!(get(&c, "rot", "ec").await.unwrap(), data);
    assert_eq!(get(&c, "rot", "small").await.unwrap(), small);
    for (i, d) in others.iter().enumerate() {
        assert_eq!(&get(&c, "rot", &format!("o{i}")).await.unwrap(), d);
    }
    assert_eq!(counter(&node, "degraded_reads"), reads_before);
    let st = node.status();
    assert_eq!(st["health"], "healthy", "{st}");
    assert_eq!(st["scrub"]["last"]["bad"], 0);
}

/// Replaces the payload of the chunk whose bytes start with `prefix`, on a stopped
/// node, by other bytes of the same length in a valid record: the drive's own
/// checksums all hold, only the manifest knows.
fn forge_chunk(node: &Node, prefix: &[u8]) -> u16 {
    for d in 0..node.opts.drives {
        let dev = UringDevice::open(&node.drive_path(d), None).unwrap();
        let mut store = ChunkStore::open(&dev).unwrap();
        let ids = store
            .list(cairn_types::ChunkId::from_u128(0), 100_000)
            .unwrap();
        for (id, tenant) in ids {
            let payload = store.get(id, tenant).unwrap();
            if payload.starts_with(prefix) {
                let forged = random_bytes(payload.len(), 999);
                let res = store.write_batch(&[WriteOp::Put {
                    id,
                    tenant,
                    key_id: 0,
                    payload: &forged,
                    durable: true,
                }]);
                assert!(res[0].is_ok(), "forged write: {:?}", res[0]);
                store.close().unwrap();
                return d;
            }
        }
        store.close().unwrap();
    }
    panic!("no chunk starts with the prefix");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_fragment_is_never_served_and_the_scrubber_replaces_it() {
    let mut node = Node::start(NodeOptions {
        // The faults are aimed at plaintext bytes found on the drives.
        mgmtd_env: vec![PLAINTEXT_ROOT],
        drive_size: "64M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("forged").send().await.unwrap();
    let data = random_bytes(3 << 20, 21);
    put(&c, "forged", "ec", &data).await.unwrap();
    let data2 = random_bytes(3 << 20, 23);
    put(&c, "forged", "ec2", &data2).await.unwrap();
    let small = random_bytes(20_000, 22);
    put(&c, "forged", "small", &small).await.unwrap();

    node.stop();
    forge_chunk(&node, &data[..64]);
    forge_chunk(&node, &parity_of_first_stripe(&data2)[0][..64]);
    forge_chunk(&node, &small[..64]);
    node.restart();

    // Clients get the written bytes: the forged data fragment and replica fail
    // the manifest's checksum and are read around.
    assert_eq!(get(&c, "forged", "ec").await.unwrap(), data);
    assert_eq!(get(&c, "forged", "small").await.unwrap(), small);
    assert!(counter(&node, "bad_fragments") >= 1);

    // The forged parity fragment of ec2 is never read by a healthy GET; the
    // scrubber finds it (and whatever read repair has not rewritten yet) and
    // rebuilds it.
    let pass = scrub_once(&node).await;
    assert!(pass["bad"].as_u64().unwrap() >= 1, "{pass}");
    assert_eq!(pass["unrepaired"], 0, "{pass}");
    let again = scrub_once(&node).await;
    assert_eq!(again["bad"], 0, "{again}");
    let reads = counter(&node, "degraded_reads");
    assert_eq!(get(&c, "forged", "ec").await.unwrap(), data);
    assert_eq!(get(&c, "forged", "ec2").await.unwrap(), data2);
    assert_eq!(counter(&node, "degraded_reads"), reads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_found_at_start_is_scrubbed_without_being_asked() {
    let mut node = Node::start(NodeOptions {
        // The faults are aimed at plaintext bytes found on the drives.
        mgmtd_env: vec![PLAINTEXT_ROOT],
        drive_size: "64M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("damaged").send().await.unwrap();
    let mut objs = Vec::new();
    for i in 0..12 {
        let d = random_bytes(300_000, 300 + i);
        put(&c, "damaged", &format!("k{i}"), &d).await.unwrap();
        objs.push(d);
    }
    // A crash (nothing sealed), then one byte rots inside a fragment of two
    // objects on two different drives, in the active segment.
    node.kill_mgmtd();
    node.kill_datapathd();
    let a = find_on_drives(&node, &objs[0][100..164]);
    let b = find_on_drives(&node, &objs[7][150_000..150_064]);
    assert_eq!((a.len(), b.len()), (1, 1));
    flip(&node, a[0].0, a[0].1 + 3);
    let b_drive = if b[0].0 == a[0].0 {
        // Same drive is fine too; use the other half of the object's data.
        let c2 = find_on_drives(&node, &objs[7][10..74]);
        c2[0]
    } else {
        b[0]
    };
    flip(&node, b_drive.0, b_drive.1 + 3);
    node.start_datapathd();
    node.start_mgmtd();

    // The drives report what they lost, and the scrubber starts on its own.
    let st = node.status();
    let s = node.wait_scrub_passes(1).await;
    let last = &s["last"];
    assert!(last["bad"].as_u64().unwrap() >= 2, "{s}");
    assert_eq!(last["unrepaired"], 0, "{s}");
    let damaged = st["drives"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| !d["damage_at_open"].is_null())
        .count();
    assert!(damaged >= 1, "{st}");
    let before = counter(&node, "degraded_reads");
    for (i, d) in objs.iter().enumerate() {
        assert_eq!(&get(&c, "damaged", &format!("k{i}")).await.unwrap(), d);
    }
    assert_eq!(
        counter(&node, "degraded_reads"),
        before,
        "all repaired before"
    );

    // datapathd alone crashes and comes back having found new damage: mgmtd,
    // which kept running, notices and scrubs again.
    let passes = node.admin("GET", "/v1/scrub")["passes"].as_u64().unwrap();
    let more: Vec<Vec<u8>> = (0..6).map(|i| random_bytes(300_000, 400 + i)).collect();
    for (i, d) in more.iter().enumerate() {
        put(&c, "damaged", &format!("m{i}"), d).await.unwrap();
    }
    node.kill_datapathd();
    let hit = find_on_drives(&node, &more[2][1000..1064]);
    flip(&node, hit[0].0, hit[0].1 + 9);
    node.start_datapathd();
    let s = node.wait_scrub_passes(passes + 1).await;
    assert!(s["last"]["bad"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(s["last"]["unrepaired"], 0, "{s}");
    for (i, d) in more.iter().enumerate() {
        assert_eq!(&get(&c, "damaged", &format!("m{i}")).await.unwrap(), d);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_random_flips_then_one_pass_leaves_nothing_bad() {
    use rand::{Rng, SeedableRng};
    let mut node = Node::start(NodeOptions {
        // The faults are aimed at plaintext bytes found on the drives.
        mgmtd_env: vec![PLAINTEXT_ROOT],
        drive_size: "64M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("flips").send().await.unwrap();
    let mut objs = Vec::new();
    for i in 0..24u64 {
        let len = match i % 4 {
            0 => 3 << 20,
            1 => 60_000,
            _ => 300_000,
        };
        let d = random_bytes(len, 500 + i);
        put(&c, "flips", &format!("k{i}"), &d).await.unwrap();
        objs.push(d);
    }
    node.stop();
    // 300 flips on each of two of the four drives, anywhere in the written part
    // of the data area: every stripe (2+2) and every small object (3 copies)
    // keeps enough good fragments, so everything can be rebuilt.
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for d in [0u16, 2] {
        let bytes = std::fs::read(node.drive_path(d)).unwrap();
        let end = bytes.iter().rposition(|&b| b != 0).unwrap() as u64;
        let start = cairn_chunkstore::format::DATA_OFFSET;
        for _ in 0..300 {
            flip(&node, d, rng.random_range(start..=end));
        }
    }
    node.restart();

    let before = node.admin("GET", "/v1/scrub")["passes"].as_u64().unwrap();
    node.admin("POST", "/v1/scrub/start");
    let s = node.wait_scrub_passes(before + 1).await;
    let pass = &s["last"];
    assert!(pass["bad"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(pass["unrepaired"], 0, "{s}");
    let again = scrub_once(&node).await;
    assert_eq!(again["bad"], 0, "{again}");
    let reads = counter(&node, "degraded_reads");
    for (i, d) in objs.iter().enumerate() {
        assert_eq!(
            &get(&c, "flips", &format!("k{i}")).await.unwrap(),
            d,
            "k{i}"
        );
    }
    assert_eq!(
        counter(&node, "degraded_reads"),
        reads,
        "all rebuilt by the scrub"
    );
}

/// A pass cut short by a crash of mgmtd is owed, and run at the next start
/// without anyone asking (as is one owed for damage a datapathd reported just
/// before it crashed again); once it completes, nothing is owed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_cut_by_a_crash_is_run_at_the_next_start() {
    let mut node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_SCRUB_RATE_MIB", "1"), ("CAIRN_SCRUB_EVERY", "0")],
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("owed").send().await.unwrap();
    for i in 0..4 {
        put(
            &c,
            "owed",
            &format!("k{i}"),
            &random_bytes(4 << 20, 500 + i),
        )
        .await
        .unwrap();
    }
    // Both daemons restarted, so that nothing but an owed pass could start one
    // (drives formatted blank at datapathd's start count as damage to scrub).
    let restart_both = |node: &mut Node| {
        node.kill_mgmtd();
        node.kill_datapathd();
        node.start_datapathd();
        node.start_mgmtd();
    };
    restart_both(&mut node);
    let owed_file = node.state_dir().join("scrub.owed");
    let quiet = |node: &Node| {
        let s = node.admin("GET", "/v1/scrub");
        assert_eq!(s["passes"], 0, "{s}");
        assert!(s["current"].is_null(), "{s}");
        assert_eq!(s["owed"], false, "{s}");
    };
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    quiet(&node);
    assert!(!owed_file.exists());
    node.admin("POST", "/v1/scrub/start");
    // At 1 MiB/s the pass takes many seconds: it is under way, and owed.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let s = node.admin("GET", "/v1/scrub");
    assert!(!s["current"].is_null(), "{s}");
    assert_eq!(s["owed"], true, "{s}");
    assert!(owed_file.exists());
    node.kill_mgmtd();

    // Back at full speed (datapathd restarted too); no one starts a pass.
    node.opts.mgmtd_env = vec![("CAIRN_SCRUB_EVERY", "0")];
    node.kill_datapathd();
    node.start_datapathd();
    node.start_mgmtd();
    let s = node.wait_scrub_passes(1).await;
    assert!(s["last"]["fragments"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["owed"], false, "{s}");
    assert!(!owed_file.exists(), "paid, yet still recorded as owed");

    // With nothing owed, a restart starts no pass.
    restart_both(&mut node);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    quiet(&node);
}
