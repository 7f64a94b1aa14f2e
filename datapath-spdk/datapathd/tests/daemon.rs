//! End-to-end tests: the real `datapathd` binary on temp files, driven through
//! `ChunkClient` and raw sockets.

use bytes::Bytes;
use cairn_chunkproto::{ChunkClient, DriveState, FailureCode, Reply, Request, Response};
use cairn_types::ChunkId;
use std::io::{Read, Write};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{drives, Daemon};

fn payload(id: u128, len: usize) -> Bytes {
    let mut x = (id as u64) ^ 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

fn put(drive: u16, id: u128, tenant: u64, p: Bytes) -> Request {
    Request::Put {
        drive,
        id: ChunkId::from_u128(id),
        tenant,
        key_id: 1,
        payload: p,
        durable: true,
    }
}

fn get(drive: u16, id: u128, tenant: u64) -> Request {
    Request::Get {
        drive,
        id: ChunkId::from_u128(id),
        tenant,
    }
}

fn code(r: &Response) -> Option<FailureCode> {
    r.as_ref().err().map(|f| f.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_operations_and_clean_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 2, "32M");
    let d = Daemon::start(dir.path(), &specs, &["--reactors", "2"]);
    let c = d.client();
    let p1 = payload(1, 100_000);
    let p2 = payload(2, 10);
    let r = c
        .call(vec![
            put(0, 1, 7, p1.clone()),
            put(1, 2, 7, p2.clone()),
            put(0, 3, 8, Bytes::new()),
        ])
        .await
        .unwrap();
    assert!(r.iter().all(|r| matches!(r, Ok(Reply::Put))), "{r:?}");
    let r = c
        .call(vec![
            get(0, 1, 7),
            get(1, 2, 7),
            get(0, 1, 8), // wrong tenant
            get(1, 1, 7), // wrong drive
            Request::Stat {
                drive: 0,
                id: ChunkId::from_u128(1),
                tenant: 7,
            },
            Request::List {
                drive: 0,
                after: ChunkId::MIN,
                limit: 10,
            },
            Request::DriveInfo { drive: 1 },
            Request::DriveInfo { drive: 9 },
        ])
        .await
        .unwrap();
    assert!(matches!(&r[0], Ok(Reply::Get { payload }) if payload == &p1));
    assert!(matches!(&r[1], Ok(Reply::Get { payload }) if payload == &p2));
    assert_eq!(code(&r[2]), Some(FailureCode::NotFound));
    assert_eq!(code(&r[3]), Some(FailureCode::NotFound));
    assert!(
        matches!(&r[4], Ok(Reply::Stat { len: 100_000, crc32c }) if *crc32c == crc32c::crc32c(&p1))
    );
    match &r[5] {
        Ok(Reply::List { chunks }) => {
            assert_eq!(
                chunks,
                &vec![(ChunkId::from_u128(1), 7), (ChunkId::from_u128(3), 8)]
            )
        }
        other => panic!("{other:?}"),
    }
    match &r[6] {
        Ok(Reply::DriveInfo(rep)) => {
            assert_eq!(rep.state, DriveState::Healthy);
            assert_eq!(rep.chunks, 1);
            assert!(rep.capacity > 0 && rep.live_bytes > 0 && rep.allocated_bytes > 0);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(code(&r[7]), Some(FailureCode::BadRequest));
    let r = c
        .call(vec![
            Request::Delete {
                drive: 0,
                id: ChunkId::from_u128(1),
                tenant: 8,
            },
            Request::Delete {
                drive: 0,
                id: ChunkId::from_u128(1),
                tenant: 7,
            },
            get(0, 1, 7),
        ])
        .await
        .unwrap();
    assert!(matches!(r[0], Ok(Reply::Delete { existed: false })));
    assert!(matches!(r[1], Ok(Reply::Delete { existed: true })));
    assert_eq!(code(&r[2]), Some(FailureCode::NotFound));
    assert!(d.terminate(), "SIGTERM did not exit 0");
    // Everything is there after a restart; the tombstone too.
    let d = Daemon::start(dir.path(), &specs, &[]);
    let c = d.client();
    let r = c
        .call(vec![get(0, 1, 7), get(1, 2, 7), get(0, 3, 8)])
        .await
        .unwrap();
    assert_eq!(code(&r[0]), Some(FailureCode::NotFound));
    assert!(matches!(&r[1], Ok(Reply::Get { payload }) if payload == &p2));
    assert!(matches!(&r[2], Ok(Reply::Get { payload }) if payload.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_closes_only_that_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "16M");
    let d = Daemon::start(dir.path(), &specs, &[]);
    for garbage in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &[0xff; 64][..],
        &[
            20, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 0, 0, 0, 0, 0,
        ][..],
    ] {
        let addr = d.addr.clone();
        let garbage = garbage.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            // Longer than the key handshake's 5 s limit, which closes a client
            // that never completes it: with 5 s here too, the two raced.
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            s.write_all(&garbage).unwrap();
            let mut b = [0u8; 16];
            // Closed by the server: EOF (or a reset), not a timeout.
            match s.read(&mut b) {
                Ok(n) => assert_eq!(n, 0),
                Err(e) => assert_ne!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock,
                    "connection left open"
                ),
            }
        })
        .await
        .unwrap();
    }
    let c = d.client();
    let r = c
        .call(vec![put(0, 5, 1, payload(5, 1000)), get(0, 5, 1)])
        .await
        .unwrap();
    assert!(matches!(&r[1], Ok(Reply::Get { payload: p }) if p == &payload(5, 1000)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_dash_nine_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 2, "256M");
    let acked: Arc<Mutex<Vec<(u16, u128, usize)>>> = Arc::default();
    let t0 = Instant::now();
    for round in 0..5u128 {
        let d = Daemon::start(dir.path(), &specs, &["--reactors", "2"]);
        let c = d.client();
        // Verify everything acknowledged so far, bit for bit.
        let all = acked.lock().unwrap().clone();
        for chunk in all.chunks(64) {
            let ops = chunk.iter().map(|&(dr, id, _)| get(dr, id, 1)).collect();
            let r = c.call(ops).await.unwrap();
            for (&(dr, id, len), r) in chunk.iter().zip(r) {
                match r {
                    Ok(Reply::Get { payload: p }) => {
                        assert!(p == payload(id, len), "chunk {id} differs")
                    }
                    other => {
                        panic!("round {round}: acknowledged chunk {id} on drive {dr}: {other:?}")
                    }
                }
            }
        }
        // Load from several tasks, then kill -9 in the middle of it.
        let mut tasks = Vec::new();
        for task in 0..4u128 {
            let c = c.clone();
            let acked = acked.clone();
            tasks.push(tokio::spawn(async move {
                for k in 0..3000 {
                    let id = (round << 64) | (task << 32) | k;
                    let len = 500 + ((id as usize * 7919) % 16_000);
                    let dr = (k % 2) as u16;
                    match c.call(vec![put(dr, id, 1, payload(id, len))]).await {
                        Ok(r) if matches!(r[0], Ok(Reply::Put)) => {
                            acked.lock().unwrap().push((dr, id, len))
                        }
                        Ok(r) if matches!(&r[0], Err(f) if f.code == FailureCode::NoSpace) => {
                            return
                        }
                        Ok(r) => panic!("put failed: {r:?}"),
                        Err(_) => return, // the daemon died
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(300 + 50 * round as u64)).await;
        d.kill9();
        for t in tasks {
            t.await.unwrap();
        }
    }
    let d = Daemon::start(dir.path(), &specs, &[]);
    let c = d.client();
    let all = acked.lock().unwrap().clone();
    eprintln!("{} acknowledged puts over 5 kill -9 rounds", all.len());
    assert!(all.len() > 50, "too little load: {}", all.len());
    for chunk in all.chunks(64) {
        let r = c
            .call(chunk.iter().map(|&(dr, id, _)| get(dr, id, 1)).collect())
            .await
            .unwrap();
        for (&(_, id, len), r) in chunk.iter().zip(r) {
            assert!(
                matches!(r, Ok(Reply::Get { payload: p }) if p == payload(id, len)),
                "chunk {id}"
            );
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
}

async fn wait_failed(c: &ChunkClient, drive: u16) -> String {
    let t = Instant::now();
    loop {
        let r = c.call(vec![Request::DriveInfo { drive }]).await.unwrap();
        if let Ok(Reply::DriveInfo(rep)) = &r[0] {
            if rep.state == DriveState::Failed {
                return rep.reason.clone();
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "drive {drive} never reported Failed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_or_truncated_drive_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, specs) = drives(dir.path(), 3, "16M");
    let d = Daemon::start(dir.path(), &specs, &[]);
    let c = d.client();
    let r = c
        .call((0..3).map(|dr| put(dr, 10, 1, payload(10, 5000))).collect())
        .await
        .unwrap();
    assert!(r.iter().all(|r| r.is_ok()));
    std::fs::remove_file(&paths[0]).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[1])
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let why0 = wait_failed(&c, 0).await;
    let why1 = wait_failed(&c, 1).await;
    assert!(why0.contains("gone"), "{why0}");
    assert!(why1.contains("truncated"), "{why1}");
    for dr in 0..2 {
        let r = c
            .call(vec![get(dr, 10, 1), put(dr, 11, 1, payload(11, 10))])
            .await
            .unwrap();
        assert_eq!(code(&r[0]), Some(FailureCode::DriveFailed));
        assert_eq!(code(&r[1]), Some(FailureCode::DriveFailed));
    }
    let r = c
        .call(vec![
            put(2, 11, 1, payload(11, 10)),
            get(2, 10, 1),
            get(2, 11, 1),
        ])
        .await
        .unwrap();
    assert!(r[0].is_ok());
    assert!(matches!(&r[1], Ok(Reply::Get { payload: p }) if p == &payload(10, 5000)));
    assert!(matches!(&r[2], Ok(Reply::Get { payload: p }) if p == &payload(11, 10)));
}

fn cpu_ms(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which is in parentheses): utime is 14th, stime 15th.
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks * 10 // USER_HZ is 100 on Linux
}

#[test]
fn idle_daemon_uses_almost_no_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 2, "16M");
    let d = Daemon::start(dir.path(), &specs, &["--reactors", "2"]);
    std::thread::sleep(Duration::from_millis(300));
    let pid = d.child.id();
    let before = cpu_ms(pid);
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ms(pid) - before;
    assert!(used < 50, "idle datapathd used {used} ms of CPU in 1 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvme_backend_on_emulated_controllers() {
    // The userspace NVMe driver end to end in the daemon; `emu:SIZE` drives are
    // in-process emulated controllers (the VFIO path is tested in a VM by
    // hwtests/nvme-vfio).
    let dir = tempfile::tempdir().unwrap();
    let specs = vec!["emu:64M".to_string(), "emu:32M".to_string()];
    let d = Daemon::start(
        dir.path(),
        &specs,
        &["--backend", "nvme", "--reactors", "2"],
    );
    let c = d.client();
    let (p1, p2) = (payload(11, 300_000), payload(12, 5));
    let r = c
        .call(vec![put(0, 1, 7, p1.clone()), put(1, 2, 7, p2.clone())])
        .await
        .unwrap();
    assert!(r.iter().all(|r| matches!(r, Ok(Reply::Put))), "{r:?}");
    let r = c
        .call(vec![
            get(0, 1, 7),
            get(1, 2, 7),
            get(1, 1, 7),
            Request::DriveInfo { drive: 0 },
        ])
        .await
        .unwrap();
    assert!(matches!(&r[0], Ok(Reply::Get { payload }) if payload == &p1));
    assert!(matches!(&r[1], Ok(Reply::Get { payload }) if payload == &p2));
    assert_eq!(code(&r[2]), Some(FailureCode::NotFound));
    match &r[3] {
        Ok(Reply::DriveInfo(rep)) => {
            assert_eq!(rep.state, DriveState::Healthy);
            assert!(rep.device.starts_with("nvme:emu:"), "{}", rep.device);
            // DriveInfo keeps its version-1 reply: no identity on the wire.
            assert_eq!(rep.model, None);
        }
        other => panic!("{other:?}"),
    }
    // DriveDetails: what each emulated controller said in Identify Controller, and
    // one store's space accounting.
    let r = c
        .call(vec![
            Request::DriveDetails { drive: 0 },
            Request::DriveDetails { drive: 1 },
            Request::DriveDetails { drive: 2 },
        ])
        .await
        .unwrap();
    for (drive, serial, mib) in [(0usize, "CAIRN-EMU-0", 64u64), (1, "CAIRN-EMU-1", 32)] {
        match &r[drive] {
            Ok(Reply::DriveDetails(rep)) => {
                assert_eq!(rep.drive, drive as u16);
                assert_eq!(rep.state, DriveState::Healthy);
                assert_eq!(rep.backend, "nvme");
                assert_eq!(rep.location, format!("emu:{serial}/ns1"));
                assert_eq!(rep.model.as_deref(), Some("Cairn emulated NVMe"));
                assert_eq!(rep.serial.as_deref(), Some(serial));
                assert_eq!(rep.firmware.as_deref(), Some("1.0"));
                assert_eq!(rep.chunks, 1);
                assert!(
                    rep.capacity > (mib - 4) << 20 && rep.capacity <= mib << 20,
                    "{rep:?}"
                );
            }
            other => panic!("drive {drive}: {other:?}"),
        }
    }
    assert_eq!(code(&r[2]), Some(FailureCode::BadRequest));
    assert!(d.terminate(), "SIGTERM did not exit 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uring_drive_details_name_the_file_and_survive_its_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, specs) = drives(dir.path(), 2, "16M");
    let d = Daemon::start(dir.path(), &specs, &[]);
    let c = d.client();
    let details = |r: &Response| match r {
        Ok(Reply::DriveDetails(rep)) => rep.clone(),
        other => panic!("{other:?}"),
    };
    let r = c
        .call(vec![
            put(1, 5, 1, payload(5, 1000)),
            Request::DriveDetails { drive: 0 },
            Request::DriveDetails { drive: 1 },
        ])
        .await
        .unwrap();
    assert!(r[0].is_ok());
    for (i, p) in paths.iter().enumerate() {
        let rep = details(&r[1 + i]);
        assert_eq!(rep.backend, "uring");
        assert_eq!(rep.location, p.display().to_string());
        assert_eq!(rep.device, format!("uring:{}", p.display()));
        // A plain file: no model, serial or firmware to report.
        assert_eq!(
            (&rep.model, &rep.serial, &rep.firmware),
            (&None, &None, &None)
        );
        assert_eq!(rep.state, DriveState::Healthy);
        assert_eq!(rep.chunks, i as u64);
        // The store's space and the damage its open found (none).
        let sp = rep.space.expect("DriveDetails carries the space");
        assert_eq!((sp.reserve_segments, sp.full), (2, false), "{sp:?}");
        assert!(sp.free_segments > sp.reserve_segments, "{sp:?}");
        assert_eq!(
            sp.damaged_segments + sp.corrupt_batches + sp.corrupt_records + sp.torn_batches,
            0
        );
    }
    std::fs::remove_file(&paths[0]).unwrap();
    let why = wait_failed(&c, 0).await;
    // A failed drive still says what and where it is, and why it failed.
    let rep = details(
        &c.call(vec![Request::DriveDetails { drive: 0 }])
            .await
            .unwrap()[0],
    );
    assert_eq!(rep.state, DriveState::Failed);
    assert_eq!(rep.reason, why);
    assert!(rep.reason.contains("gone"), "{}", rep.reason);
    assert_eq!(rep.location, paths[0].display().to_string());
    assert_eq!(rep.backend, "uring");
}

#[test]
fn nvme_backend_names_a_missing_controller() {
    let out = Command::new(env!("CARGO_BIN_EXE_datapathd"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--local-key",
            "/tmp/cairn-test-unused.key",
            "--backend",
            "nvme",
            "--drive",
            "0000:00:1f.7",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("0000:00:1f.7"), "{err}");
}
