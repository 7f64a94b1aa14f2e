//! A drive that cannot be opened (its superblock damaged, its file unreadable) is
//! served as failed, and the daemon serves its other drives: one bad disk does not
//! take a node's other drives offline. Nothing is formatted over it.

mod common;

use bytes::Bytes;
use cairn_chunkproto::{DriveState, FailureCode, Reply, Request};
use cairn_types::ChunkId;
use common::{drives, Daemon};
use std::os::unix::fs::FileExt;

#[tokio::test]
async fn a_drive_with_a_damaged_superblock_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, specs) = drives(dir.path(), 3, "64M");
    let id = ChunkId::from_u128(7 << 32);
    let data = Bytes::from(vec![0xab; 10_000]);
    let d = Daemon::start(dir.path(), &specs, &[]);
    let puts = (0..3)
        .map(|drive| Request::Put {
            drive,
            id,
            tenant: 1,
            key_id: 0,
            payload: data.clone(),
            durable: true,
        })
        .collect();
    assert!(d
        .client()
        .call(puts)
        .await
        .unwrap()
        .iter()
        .all(|r| r.is_ok()));
    assert!(d.terminate());

    // One byte of drive 0's superblock magic, and drive 2's whole first block.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[0])
        .unwrap();
    f.write_all_at(b"X", 3).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[2])
        .unwrap();
    f.write_all_at(&[0x55; 4096], 0).unwrap();
    let before: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();

    let d = Daemon::start(dir.path(), &specs, &[]);
    let c = d.client();
    let info = c
        .call((0..3).map(|drive| Request::DriveInfo { drive }).collect())
        .await
        .unwrap();
    let state = |i: usize| match &info[i] {
        Ok(Reply::DriveInfo(r)) => (r.state, r.reason.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(state(0).0, DriveState::Failed, "{:?}", state(0));
    assert!(state(0).1.contains("superblock"), "{:?}", state(0));
    assert_eq!(state(2).0, DriveState::Failed);
    assert_eq!(state(1).0, DriveState::Healthy);

    let gets: Vec<Request> = (0..3)
        .map(|drive| Request::Get {
            drive,
            id,
            tenant: 1,
        })
        .collect();
    let r = c.call(gets).await.unwrap();
    assert!(matches!(&r[1], Ok(Reply::Get { payload }) if *payload == data));
    for i in [0, 2] {
        assert!(
            matches!(&r[i], Err(f) if f.code == FailureCode::DriveFailed),
            "{:?}",
            r[i].as_ref().map(|_| ())
        );
    }
    // A write to a failed drive is refused; the healthy one takes it.
    let r = c
        .call(vec![
            Request::Put {
                drive: 0,
                id: ChunkId::from_u128(8 << 32),
                tenant: 1,
                key_id: 0,
                payload: data.clone(),
                durable: true,
            },
            Request::Put {
                drive: 1,
                id: ChunkId::from_u128(8 << 32),
                tenant: 1,
                key_id: 0,
                payload: data.clone(),
                durable: true,
            },
        ])
        .await
        .unwrap();
    assert!(matches!(&r[0], Err(f) if f.code == FailureCode::DriveFailed));
    assert!(r[1].is_ok());
    assert!(d.terminate());
    // The damaged drives were not touched (nothing formatted over them).
    for i in [0, 2] {
        assert!(
            std::fs::read(&paths[i]).unwrap() == before[i],
            "drive {i} was written"
        );
    }
}

#[tokio::test]
async fn a_drive_in_the_wrong_slot_is_refused_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, specs) = drives(dir.path(), 3, "64M");
    let d = Daemon::start(dir.path(), &specs, &[]);
    assert!(d.terminate());
    // Drive 2's superblock copied onto drive 1: a valid superblock naming slot 2.
    let mut sb = vec![0u8; 4096];
    std::fs::File::open(&paths[2])
        .unwrap()
        .read_exact_at(&mut sb, 0)
        .unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[1])
        .unwrap()
        .write_all_at(&sb, 0)
        .unwrap();
    let d = Daemon::start(dir.path(), &specs, &[]);
    let info = d
        .client()
        .call((0..3).map(|drive| Request::DriveInfo { drive }).collect())
        .await
        .unwrap();
    for (i, r) in info.iter().enumerate() {
        let Ok(Reply::DriveInfo(r)) = r else {
            panic!("{r:?}")
        };
        if i == 1 {
            assert_eq!(r.state, DriveState::Failed);
            assert!(r.reason.contains("formatted as drive 2"), "{}", r.reason);
        } else {
            assert_eq!(r.state, DriveState::Healthy, "drive {i}");
        }
    }
}

#[tokio::test]
async fn another_nodes_drive_is_refused_alone_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, specs) = drives(dir.path(), 2, "64M");
    let id_file = dir.path().join("node-id");
    let id_arg = id_file.display().to_string();
    // Drive 0 is formatted by a datapathd that had no node id (as before node ids
    // were given): it carries none and is taken by any node.
    let d = Daemon::start(dir.path(), &specs[..1], &[]);
    assert!(d.terminate());
    let d = Daemon::start(dir.path(), &specs, &["--node-id-file", &id_arg]);
    assert!(d.terminate());
    let mine = std::fs::read_to_string(&id_file).unwrap();
    assert!(mine.trim().parse::<uuid::Uuid>().is_ok(), "{mine:?}");
    // The same node again: both drives served, the id kept.
    let d = Daemon::start(dir.path(), &specs, &["--node-id-file", &id_arg]);
    let states = |info: Vec<Result<Reply, cairn_chunkproto::Failure>>| {
        info.into_iter()
            .map(|r| match r {
                Ok(Reply::DriveInfo(r)) => (r.state, r.reason),
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>()
    };
    let info = d
        .client()
        .call((0..2).map(|drive| Request::DriveInfo { drive }).collect())
        .await
        .unwrap();
    assert!(states(info).iter().all(|s| s.0 == DriveState::Healthy));
    assert!(d.terminate());
    assert_eq!(std::fs::read_to_string(&id_file).unwrap(), mine);
    // Another node given these drives: drive 1 (formatted by the first node) is
    // refused and not written; drive 0, which names no node, is served.
    let before = std::fs::read(&paths[1]).unwrap();
    let other = dir.path().join("other-node-id");
    let d = Daemon::start(
        dir.path(),
        &specs,
        &["--node-id-file", &other.display().to_string()],
    );
    let info = d
        .client()
        .call((0..2).map(|drive| Request::DriveInfo { drive }).collect())
        .await
        .unwrap();
    let s = states(info);
    assert_eq!(s[0].0, DriveState::Healthy, "{s:?}");
    assert_eq!(s[1].0, DriveState::Failed, "{s:?}");
    assert!(s[1].1.contains("belongs to node"), "{s:?}");
    assert!(d.terminate());
    assert!(
        std::fs::read(&paths[1]).unwrap() == before,
        "drive 1 was written"
    );
}
