//! Clients that hold the server: a request body that stalls or trickles is cut
//! off (and its partial extent freed), half-sent requests on the admin port are
//! bounded in number and time, and presigned URLs are valid for at most a week,
//! as on AWS.

use aws_sdk_s3::presigning::PresigningConfig;
use cairn_it::raw::{read_all, signed_request, Payload};
use cairn_it::{Node, NodeOptions};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Sends a PUT declaring 1 MiB, then feeds its body with `step` every `every`
/// (none at all when `step` is empty); returns how long the server took to end it.
async fn slow_put(node: &Node, key: &str, step: &'static [u8], every: Duration) -> Duration {
    let req = signed_request(
        node,
        "PUT",
        &format!("/slow/{key}"),
        &[("content-length", "1048576")],
        b"",
        Payload::Unsigned,
    );
    let mut s = TcpStream::connect(&node.s3_addr).await.unwrap();
    s.write_all(&req).await.unwrap();
    s.write_all(&[b'x'; 100]).await.unwrap();
    let t = Instant::now();
    let (mut rd, mut wr) = s.into_split();
    let feeder = tokio::spawn(async move {
        if step.is_empty() {
            return;
        }
        loop {
            tokio::time::sleep(every).await;
            if wr.write_all(step).await.is_err() {
                return;
            }
        }
    });
    // The server answers (or closes) on its own; the test gives up at 90 s.
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(90), async {
        use tokio::io::AsyncReadExt;
        let mut chunk = [0u8; 4096];
        while let Ok(n) = rd.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    feeder.abort();
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_and_trickling_bodies_are_cut_off() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("slow").send().await.unwrap();
    let (stalled, trickle) = tokio::join!(
        slow_put(&node, "stalled", b"", Duration::ZERO),
        slow_put(&node, "trickle", b"y", Duration::from_secs(2)),
    );
    assert!(
        stalled < Duration::from_secs(45),
        "a stalled body held its request for {stalled:?}"
    );
    assert!(
        trickle < Duration::from_secs(60),
        "a body trickling a byte every 2 s held its request for {trickle:?}"
    );
    for k in ["stalled", "trickle"] {
        assert!(c.head_object().bucket("slow").key(k).send().await.is_err());
    }
    // The node serves normally meanwhile and after.
    cairn_it::put_bytes(&c, "slow", "ok", b"fine")
        .await
        .unwrap();
    assert_eq!(
        cairn_it::get_bytes(&c, "slow", "ok").await.unwrap(),
        b"fine"
    );
}

#[tokio::test]
async fn presigned_urls_are_valid_for_a_week_at_most() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("pre").send().await.unwrap();
    cairn_it::put_bytes(&c, "pre", "k", b"hello").await.unwrap();
    // A day: fine, through a plain HTTP client.
    let p = c
        .get_object()
        .bucket("pre")
        .key("k")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(86400)).unwrap())
        .await
        .unwrap();
    let out = std::process::Command::new("curl")
        .args(["-s", p.uri()])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"hello");
    // Eight days (a client that does not check, as the SDK does): refused as AWS does.
    let uri = p
        .uri()
        .replace("X-Amz-Expires=86400", "X-Amz-Expires=691200");
    assert_ne!(uri, p.uri());
    let path = uri.split_once(&node.s3_addr).unwrap().1.to_string();
    let req = format!(
        "GET {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
        node.s3_addr
    );
    let mut s = TcpStream::connect(&node.s3_addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let r = read_all(&mut s).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("AuthorizationQueryParametersError"),
        "{}",
        r.text
    );
}

/// A client still downloading an object when it is overwritten and deleted gets the
/// whole old version, however long past the free grace period it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_download_outlives_an_overwrite_and_a_delete() {
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_FREE_GRACE", "1")],
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("slowread").send().await.unwrap();
    let old = cairn_it::random_bytes(32 << 20, 1);
    cairn_it::put_bytes(&c, "slowread", "k", &old)
        .await
        .unwrap();
    let mut body = c
        .get_object()
        .bucket("slowread")
        .key("k")
        .send()
        .await
        .unwrap()
        .body;
    let mut got = Vec::new();
    while got.len() < 1 << 20 {
        got.extend_from_slice(&body.next().await.unwrap().unwrap());
    }
    // Overwritten, then deleted, while the download stalls well past the grace.
    cairn_it::put_bytes(&c, "slowread", "k", &cairn_it::random_bytes(32 << 20, 2))
        .await
        .unwrap();
    c.delete_object()
        .bucket("slowread")
        .key("k")
        .send()
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    while let Some(b) = body.next().await {
        got.extend_from_slice(&b.expect("the old version streams to its end"));
    }
    assert!(got == old, "the old version, whole ({} bytes)", got.len());
}

/// Half-sent requests and silent connections on the admin port (slowloris): past
/// 32 open connections from one client, or 256 in all, a new one is closed at
/// once, S3 serves throughout, and
/// each half-sent request is dropped once its headers have taken 30 s, each
/// silent connection once it has been idle for 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_admin_requests_are_bounded() {
    use tokio::io::AsyncReadExt;
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("loris").send().await.unwrap();
    let admin: std::net::SocketAddr = node.admin_addr.parse().unwrap();
    // A connection from 127.0.0.N (any loopback address is this machine's).
    let from = |n: u8| async move {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(std::net::SocketAddr::from(([127, 0, 0, n], 0)))
            .unwrap();
        s.connect(admin).await.unwrap()
    };
    let closed_at_once = |mut s: TcpStream| async move {
        let mut b = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .expect("a connection past the limit is closed at once");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    };
    let t = Instant::now();
    let mut held = Vec::new();
    // One client holds at most 32: the 33rd from it is closed at once.
    for i in 0..256 {
        let mut s = from(1 + (i / 32) as u8).await;
        if i % 2 == 0 {
            s.write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")
                .await
                .unwrap();
        }
        held.push(s);
    }
    // The server takes each of those before these (accepts are in order).
    tokio::time::sleep(Duration::from_millis(300)).await;
    closed_at_once(from(1).await).await;
    // 8 clients of 32 fill the listener's 256: a ninth client is refused too.
    closed_at_once(from(9).await).await;
    let mut b = [0u8; 64];
    // S3 is untouched.
    cairn_it::put_bytes(&c, "loris", "k", b"still serving")
        .await
        .expect("S3 serves while the admin port is full");
    // Each half-sent request ends within its 30 s (and a few for a loaded machine).
    for s in &mut held {
        let left = Duration::from_secs(45).saturating_sub(t.elapsed());
        let r = tokio::time::timeout(left, async {
            loop {
                match s.read(&mut b).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {} // a 408, then the close
                }
            }
        })
        .await;
        assert!(
            r.is_ok(),
            "a half-sent request or silent connection was held for {:?}",
            t.elapsed()
        );
    }
    assert!(
        t.elapsed() >= Duration::from_secs(25),
        "dropped too early: {:?}",
        t.elapsed()
    );
    drop(held);
    // And the port serves again.
    let v = node.admin("GET", "/v1/status");
    assert!(v.is_object(), "{v}");
}
