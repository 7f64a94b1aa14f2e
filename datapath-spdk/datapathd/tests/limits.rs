//! The chunk port's limits, against the real daemon: idle and stalled
//! connections are closed, a stalled frame costs the bytes it sent and not the
//! ones it announced, the connection and byte caps hold without stalling anyone
//! for good, and a batch whose reply is larger than a frame is answered in full.

mod common;

use bytes::Bytes;
use cairn_chunkproto::auth::{client_handshake, LocalKey};
use cairn_chunkproto::{
    decode_frame, encode_request_batch, Reply, Request, MAX_FRAME, PROTOCOL_VERSION,
};
use cairn_types::ChunkId;
use common::{drives, Daemon};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn authed(d: &Daemon) -> TcpStream {
    let mut s = TcpStream::connect(&d.addr).await.unwrap();
    client_handshake(&mut s, &LocalKey::load(&d.key).unwrap())
        .await
        .unwrap();
    s
}

/// How long until the server closes `s` (reads until EOF or error).
async fn closed_after(mut s: TcpStream, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return t.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// An authenticated connection that announces a frame of the largest size and
/// sends `sent` bytes of it.
async fn stalled_frame(d: &Daemon, sent: usize) -> TcpStream {
    let mut s = authed(d).await;
    s.write_all(&((MAX_FRAME) as u32).to_le_bytes())
        .await
        .unwrap();
    let mut body = vec![0u8; sent];
    body[..4].copy_from_slice(&[PROTOCOL_VERSION, 1, 1, 0]);
    s.write_all(&body).await.unwrap();
    s
}

fn put(id: ChunkId, payload: Bytes) -> Request {
    Request::Put {
        drive: 0,
        id,
        tenant: 1,
        key_id: 0,
        payload,
        durable: true,
    }
}

fn get(id: ChunkId) -> Request {
    Request::Get {
        drive: 0,
        id,
        tenant: 1,
    }
}

#[tokio::test]
async fn idle_and_stalled_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "64M");
    let d = Daemon::start(
        dir.path(),
        &specs,
        &["--idle-timeout", "2", "--frame-timeout", "1"],
    );
    // Authenticated, then silent.
    let idle = authed(&d).await;
    let t = closed_after(idle, Duration::from_secs(10)).await;
    assert!(t.is_some_and(|t| t >= Duration::from_millis(1500)), "{t:?}");

    // A 64 MiB frame announced, a few bytes sent, then nothing: closed after the
    // frame timeout, not held.
    let stalled = stalled_frame(&d, 4).await;
    let t = closed_after(stalled, Duration::from_secs(10)).await;
    assert!(t.is_some_and(|t| t < Duration::from_secs(5)), "{t:?}");

    // A slow drip keeps no frame alive past its deadline.
    let mut drip = authed(&d).await;
    drip.write_all(&1000u32.to_le_bytes()).await.unwrap();
    let dripper = tokio::spawn(async move {
        for _ in 0..20 {
            if drip.write_all(&[0]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        false
    });
    assert!(dripper.await.unwrap(), "a dripping frame was kept open");

    // The service still serves.
    let r = d.client().call(vec![Request::DriveInfo { drive: 0 }]).await;
    assert!(r.is_ok(), "{r:?}");
}

/// Eight connections announce the largest frame and try to send 24 MiB of it,
/// with a byte budget of two frames: the daemon reads at most what two admitted
/// frames sent (not 8 x 24 MiB, nor the 512 MiB announced), and the budget they
/// hold comes back when the frame timeout cuts them off.
#[tokio::test]
async fn a_stalled_frame_costs_what_it_sent_not_what_it_announced() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "256M");
    // The smallest byte budget: two frames (and a megabyte each).
    let d = Daemon::start(
        dir.path(),
        &specs,
        &[
            "--frame-timeout",
            "3",
            "--max-buffered",
            "130M",
            "--segment-size",
            "16M",
        ],
    );
    let c = d.client();
    c.call(vec![Request::DriveInfo { drive: 0 }]).await.unwrap();
    let before = d.rss();
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut s = stalled_frame(&d, 4).await;
        // The writes block once the daemon stops reading: in tasks of their own.
        stalled.push(tokio::spawn(async move {
            let _ = s.write_all(&vec![0u8; 24 << 20]).await;
            closed_after(s, Duration::from_secs(10)).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let grown = d.rss().saturating_sub(before);
    eprintln!("RSS grew by {} MiB", grown >> 20);
    assert!(grown < 100 << 20, "RSS grew by {} MiB", grown >> 20);

    // Two of them hold the whole budget; a put of 8 MiB waits for it, and is
    // served once the frame timeout has cut the stalled ones off: late, not never.
    let t = Instant::now();
    let id = ChunkId::from_u128(77 << 32);
    let r = c
        .call(vec![put(id, Bytes::from(vec![7u8; 8 << 20]))])
        .await
        .expect("served once the stalled frames are gone");
    assert!(r[0].is_ok(), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
    for s in stalled {
        assert!(s.await.unwrap().is_some(), "a stalled frame was kept");
    }
    let r = c.call(vec![get(id)]).await.unwrap();
    assert!(matches!(&r[0], Ok(Reply::Get { payload }) if payload.len() == 8 << 20));
}

#[tokio::test]
async fn the_connection_cap_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "64M");
    let d = Daemon::start(
        dir.path(),
        &specs,
        &["--max-connections", "8", "--handshake-timeout", "2"],
    );
    // Two handshake slots (a quarter of the cap): two clients that never prove a
    // key hold them, and a third is closed at once; after the handshake timeout,
    // their slots are free again.
    let mut mute = Vec::new();
    for _ in 0..2 {
        mute.push(TcpStream::connect(&d.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = TcpStream::connect(&d.addr).await.unwrap();
    let t = closed_after(s, Duration::from_secs(1)).await;
    assert!(t.is_some(), "a third handshake was let in");
    let t0 = Instant::now();
    for s in mute {
        assert!(closed_after(s, Duration::from_secs(5)).await.is_some());
    }
    // Opened ~0.2 s before t0, with a 2 s handshake timeout.
    assert!(
        t0.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
    // Eight authenticated connections; the ninth is closed at accept.
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(authed(&d).await);
    }
    let s = TcpStream::connect(&d.addr).await.unwrap();
    assert!(closed_after(s, Duration::from_secs(5)).await.is_some());
    // Once one closes, a new client is served again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = d.client().call(vec![Request::DriveInfo { drive: 0 }]).await;
    assert!(r.is_ok(), "{r:?}");
}

/// Three 30 MiB chunks asked for in one batch (90 MiB, more than a frame), with
/// other operations between them: every result comes back, whole and in order.
#[tokio::test]
async fn a_reply_larger_than_a_frame_is_answered_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "512M");
    let d = Daemon::start(dir.path(), &specs, &["--segment-size", "32M"]);
    let c = d.client();
    let len = 30 << 20;
    let ids: Vec<ChunkId> = (1..=3u128).map(|i| ChunkId::from_u128(i << 32)).collect();
    for (i, id) in ids.iter().enumerate() {
        let r = c
            .call(vec![put(*id, Bytes::from(vec![i as u8 + 1; len]))])
            .await
            .unwrap();
        assert!(r[0].is_ok(), "{r:?}");
    }
    let missing = ChunkId::from_u128(99 << 32);
    let batch = vec![
        get(ids[0]),
        Request::Stat {
            drive: 0,
            id: ids[1],
            tenant: 1,
        },
        get(ids[1]),
        get(missing),
        Request::DriveInfo { drive: 0 },
        get(ids[2]),
    ];
    let t = Instant::now();
    let r = c.call(batch).await.expect("an answer, not a timeout");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert_eq!(r.len(), 6);
    for (k, fill) in [(0usize, 1u8), (2, 2), (5, 3)] {
        match &r[k] {
            Ok(Reply::Get { payload }) => {
                assert_eq!(payload.len(), len);
                assert!(payload.iter().all(|&b| b == fill), "result {k}");
            }
            other => panic!("result {k}: {other:?}"),
        }
    }
    assert!(matches!(r[1], Ok(Reply::Stat { len: l, .. }) if l as usize == len));
    assert!(r[3].is_err(), "{:?}", r[3]);
    assert!(matches!(r[4], Ok(Reply::DriveInfo(_))));

    // On the wire: two of them (60 MiB) fit in one frame and come as one, as
    // they always did; three come as two frames.
    for (asked, frames) in [(2usize, 1usize), (3, 2)] {
        let mut s = authed(&d).await;
        let req = encode_request_batch(
            5,
            &ids[..asked].iter().map(|&id| get(id)).collect::<Vec<_>>(),
        );
        s.write_all(&req.unwrap().concat()).await.unwrap();
        let (mut buf, mut seen, mut results) = (bytes::BytesMut::new(), 0, 0);
        while results < asked {
            if let Some(f) = decode_frame(&mut buf).unwrap() {
                assert_eq!(f.request_id, 5);
                results += f.responses().unwrap().len();
                seen += 1;
                continue;
            }
            assert!(s.read_buf(&mut buf).await.unwrap() > 0, "closed early");
        }
        assert_eq!((results, seen), (asked, frames));
    }

    // Many small chunks past a frame: 80 of 900 KB (72 MB) in one batch.
    let small = 900_000;
    let many: Vec<ChunkId> = (1..=80u128).map(|i| ChunkId::from_u128(i << 40)).collect();
    for batch in many.chunks(8) {
        let puts = batch
            .iter()
            .map(|id| put(*id, Bytes::from(vec![(id.as_u128() >> 40) as u8; small])))
            .collect();
        let r = c.call(puts).await.unwrap();
        assert!(r.iter().all(|r| r.is_ok()));
    }
    let r = c.call(many.iter().map(|&id| get(id)).collect()).await;
    let r = r.expect("an answer");
    assert_eq!(r.len(), 80);
    for (i, res) in r.iter().enumerate() {
        match res {
            Ok(Reply::Get { payload }) => {
                assert_eq!(payload.len(), small);
                assert!(payload.iter().all(|&b| b == i as u8 + 1));
            }
            other => panic!("{other:?}"),
        }
    }
}

/// More batches than a connection may have in flight (64), pipelined on one
/// connection, mixing puts and gets: all are answered, none waits for a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_batches_than_slots_on_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "256M");
    let d = Daemon::start(dir.path(), &specs, &["--frame-timeout", "2"]);
    let c = cairn_chunkproto::ChunkClient::local(
        d.addr.clone(),
        1,
        Duration::from_secs(20),
        LocalKey::load(&d.key).unwrap(),
    );
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..300u128 {
        let c = c.clone();
        calls.spawn(async move {
            let id = ChunkId::from_u128((i + 1) << 20);
            let body = Bytes::from(vec![i as u8; 64 << 10]);
            let r = c.call(vec![put(id, body.clone()), get(id)]).await.unwrap();
            assert!(r[0].is_ok(), "{r:?}");
            assert!(matches!(&r[1], Ok(Reply::Get { payload }) if *payload == body));
        });
    }
    while let Some(r) = calls.join_next().await {
        r.unwrap();
    }
}
