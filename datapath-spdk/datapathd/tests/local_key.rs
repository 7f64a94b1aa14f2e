//! The node-local key on the real daemon: a client without it, or with another
//! one, can neither read nor write a chunk; the node's own key works; a key file
//! others can read is refused at start.

mod common;

use bytes::Bytes;
use cairn_chunkproto::auth::LocalKey;
use cairn_chunkproto::{encode_request_batch, ChunkClient, ProtoError, Reply, Request};
use cairn_types::ChunkId;
use common::{drives, Daemon};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ID: u128 = 5 << 64;

fn put(payload: &'static [u8]) -> Request {
    Request::Put {
        drive: 0,
        id: ChunkId::from_u128(ID),
        tenant: 1,
        key_id: 0,
        payload: Bytes::from_static(payload),
        durable: true,
    }
}

fn get() -> Request {
    Request::Get {
        drive: 0,
        id: ChunkId::from_u128(ID),
        tenant: 1,
    }
}

/// Sends `bytes` on a fresh connection; true when the server closes it without
/// a byte of answer.
async fn closed_unanswered(addr: &str, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut buf = [0u8; 256];
    let mut got = 0;
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
    })
    .await;
    r.is_ok() && got == 0
}

#[tokio::test]
async fn without_the_key_nothing_is_read_or_written() {
    let dir = tempfile::tempdir().unwrap();
    let (_, specs) = drives(dir.path(), 1, "64M");
    let d = Daemon::start(dir.path(), &specs, &["--handshake-timeout", "1"]);
    let own = d.client();
    let r = own.call(vec![put(b"the tenant's data")]).await.unwrap();
    assert!(r[0].is_ok(), "{r:?}");

    // Another key: refused at the handshake, for reads and writes alike.
    let stranger = ChunkClient::local(
        d.addr.clone(),
        1,
        Duration::from_secs(5),
        LocalKey::from_bytes(&[0x42; 32]),
    );
    for op in [get(), put(b"forged")] {
        let r = stranger.call(vec![op]).await;
        assert!(matches!(r, Err(ProtoError::Auth(_))), "{r:?}");
    }

    // No key at all: a well-formed batch without the handshake is not answered.
    let raw = |op| encode_request_batch(9, &[op]).unwrap().concat();
    assert!(closed_unanswered(&d.addr, &raw(get())).await);
    assert!(closed_unanswered(&d.addr, &raw(put(b"forged"))).await);
    // Nor is a TLS client, nor garbage.
    assert!(closed_unanswered(&d.addr, &[0x16, 3, 1, 0, 200, 1, 0, 0, 196]).await);
    assert!(closed_unanswered(&d.addr, &[0xAB; 4000]).await);
    // A client that starts the handshake and stops is cut off in time.
    let t = Instant::now();
    assert!(closed_unanswered(&d.addr, b"CAIRNAU1").await);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // The chunk is as the node's own client wrote it.
    let r = own.call(vec![get()]).await.unwrap();
    assert!(
        matches!(&r[0], Ok(Reply::Get { payload }) if &payload[..] == b"the tenant's data"),
        "{r:?}"
    );
}

#[test]
fn a_key_file_others_can_read_stops_the_daemon() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("chunk.key");
    std::fs::write(&key, [9u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (_, specs) = drives(dir.path(), 1, "64M");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_datapathd"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--drive",
            &specs[0],
            "--local-key",
        ])
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chmod 600"), "{err}");
}
