//! The chunk port's limits, against the real daemon: idle and stalled
//! connections are closed, the connection cap holds, and a batch whose reply
//! would not fit in a frame is answered in full (what fits, and a clear refusal
//! for the rest), never left unanswered.

mod common;

use bytes::Bytes;
use cairn_chunkproto::auth::{client_handshake, LocalKey};
use cairn_chunkproto::{ChunkId, FailureCode, Reply, Request, MAX_FRAME};
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

/// Seconds until the server closes `s` (reads until EOF or error).
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
    let mut stalled = authed(&d).await;
    stalled
        .write_all(&(MAX_FRAME as u32).to_le_bytes())
        .await
        .unwrap();
    stalled.write_all(&[1, 1, 1, 0]).await.unwrap();
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

    // Without the key, nothing is served: the handshake times out or fails.
    let mut anon = TcpStream::connect(&d.addr).await.unwrap();
    anon.write_all(b"CAIRNAU1").await.unwrap();
    let t = closed_after(anon, Duration::from_secs(15)).await;
    assert!(t.is_some(), "a half handshake was kept open");
}

#[tokio::test]
async fn the_connection_cap_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "64M");
    let d = Daemon::start(dir.path(), &specs, &["--max-connections", "3"]);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(authed(&d).await);
    }
    // The fourth is closed at accept.
    let s = TcpStream::connect(&d.addr).await.unwrap();
    assert!(closed_after(s, Duration::from_secs(5)).await.is_some());
    // Once one closes, a new client is served again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = d.client().call(vec![Request::DriveInfo { drive: 0 }]).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test]
async fn a_reply_larger_than_a_frame_is_answered_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "256M");
    let d = Daemon::start(dir.path(), &specs, &[]);
    let c = d.client();
    // 80 chunks of 900 KB (1 MiB segments): 72 MB in one batch of gets.
    let len = 900_000;
    let ids: Vec<ChunkId> = (1..=80u128).map(|i| ChunkId::from_u128(i << 32)).collect();
    for batch in ids.chunks(8) {
        let puts = batch
            .iter()
            .map(|id| Request::Put {
                drive: 0,
                id: *id,
                tenant: 1,
                key_id: 0,
                payload: Bytes::from(vec![(id.as_u128() >> 32) as u8; len]),
            })
            .collect();
        let r = c.call(puts).await.unwrap();
        assert!(r.iter().all(|r| r.is_ok()));
    }
    let gets = ids
        .iter()
        .map(|&id| Request::Get {
            drive: 0,
            id,
            tenant: 1,
        })
        .collect();
    let t = Instant::now();
    let r = c.call(gets).await.expect("an answer, not a timeout");
    assert!(t.elapsed() < Duration::from_secs(8));
    assert_eq!(r.len(), 80);
    // What fits comes back whole and in order; the rest is refused by name.
    let served = r.iter().take_while(|r| r.is_ok()).count();
    assert!((60..80).contains(&served), "{served} served");
    for (i, res) in r.iter().enumerate() {
        match res {
            Ok(Reply::Get { payload }) => {
                assert!(i < served);
                assert_eq!(payload.len(), len);
                assert!(payload.iter().all(|&b| b == i as u8 + 1));
            }
            Err(f) => {
                assert!(i >= served);
                assert_eq!(f.code, FailureCode::BadRequest);
                assert!(f.message.contains("exceed"), "{f}");
            }
            Ok(other) => panic!("{other:?}"),
        }
    }
    // The refused ones are served when asked for apart.
    let rest = ids[served..]
        .iter()
        .map(|&id| Request::Get {
            drive: 0,
            id,
            tenant: 1,
        })
        .collect();
    let r = c.call(rest).await.unwrap();
    assert!(r.iter().all(|r| r.is_ok()));
}
