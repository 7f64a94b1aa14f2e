//! The RESP front end on a real node, spoken byte for byte over TCP the way
//! LMCache's `resp://` connector and redis-py do: replies are compared exactly.

use cairn_it::{random_bytes, Node, NodeOptions, ACCESS_KEY, SECRET_KEY};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: usize = 1 << 20;

use cairn_it::resp_command as encode;

/// Sends one command and asserts the exact reply bytes.
async fn check(s: &mut TcpStream, args: &[&[u8]], want: &[u8]) {
    s.write_all(&encode(args)).await.unwrap();
    expect(s, want).await;
}

async fn expect(s: &mut TcpStream, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    tokio::time::timeout(Duration::from_secs(60), s.read_exact(&mut got))
        .await
        .expect("reply in time")
        .expect("reply");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(want),
        "reply"
    );
}

/// Reads up to the end of the connection (the server closed it).
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .expect("server closes the connection")
        .expect("read");
    out
}

async fn connect(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    check(
        &mut s,
        &[b"AUTH", ACCESS_KEY.as_bytes(), SECRET_KEY.as_bytes()],
        b"+OK\r\n",
    )
    .await;
    s
}

fn start() -> (Node, String) {
    let addr = cairn_it::free_addr();
    let port = addr.to_string();
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_RESP", addr), ("CAIRN_RESP_MAX_CLIENTS", "8")],
        ..Default::default()
    });
    (node, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resp_end_to_end() {
    let (_node, addr) = start();
    auth_and_commands(&addr).await;
    pipelining(&addr).await;
    large_value(&addr).await;
    malformed_input(&addr).await;
    too_many_clients(&addr).await;
    // Still serving, with what was stored before the bad input. The previous
    // step's connections end as it returns, and the server frees their slots as
    // it notices: a refusal meanwhile is retried, briefly.
    let mut s = None;
    for _ in 0..50 {
        let mut c = TcpStream::connect(&addr).await.unwrap();
        c.write_all(&encode(&[
            b"AUTH",
            ACCESS_KEY.as_bytes(),
            SECRET_KEY.as_bytes(),
        ]))
        .await
        .unwrap();
        let mut got = vec![0u8; 5];
        c.read_exact(&mut got).await.unwrap();
        if got == b"+OK\r\n" {
            s = Some(c);
            break;
        }
        assert_eq!(&got, b"-ERR ", "AUTH reply");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut s = s.expect("a client slot freed within 5 s of the others leaving");
    check(&mut s, &[b"GET", b"kept"], b"$4\r\nkept\r\n").await;
}

/// With 8 clients connected (the node's cap in this test), a ninth is told so
/// and closed; once one leaves, a new one is served.
async fn too_many_clients(addr: &str) {
    // Connections of the earlier steps may still be ending on the server: a
    // refusal while they do is retried.
    let mut held = Vec::new();
    while held.len() < 8 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&encode(&[
            b"AUTH",
            ACCESS_KEY.as_bytes(),
            SECRET_KEY.as_bytes(),
        ]))
        .await
        .unwrap();
        let mut got = vec![0u8; 5];
        s.read_exact(&mut got).await.unwrap();
        if got == b"+OK\r\n" {
            held.push(s);
        } else {
            assert_eq!(&got, b"-ERR ", "AUTH reply");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut extra = TcpStream::connect(addr).await.unwrap();
    assert_eq!(
        read_to_close(&mut extra).await,
        b"-ERR max number of clients reached\r\n"
    );
    for s in &mut held {
        check(s, &[b"PING"], b"+PONG\r\n").await;
    }
    held.pop();
    // The server notices the close when it next accepts: retry briefly.
    let mut served = false;
    for _ in 0..50 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&encode(&[b"PING"])).await.unwrap();
        let mut got = vec![0u8; 7];
        if tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
            .await
            .is_ok_and(|r| r.is_ok())
            && got == b"+PONG\r\n"
        {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "a client after one left was not served");
}

async fn auth_and_commands(addr: &str) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    check(&mut s, &[b"PING"], b"+PONG\r\n").await;
    check(
        &mut s,
        &[b"GET", b"k"],
        b"-NOAUTH Authentication required.\r\n",
    )
    .await;
    check(
        &mut s,
        &[b"SET", b"k", b"v"],
        b"-NOAUTH Authentication required.\r\n",
    )
    .await;
    check(
        &mut s,
        &[b"AUTH", ACCESS_KEY.as_bytes(), b"wrong"],
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    )
    .await;
    check(
        &mut s,
        &[b"AUTH", b"nosuchuser", SECRET_KEY.as_bytes()],
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    )
    .await;
    check(
        &mut s,
        &[b"GET", b"k"],
        b"-NOAUTH Authentication required.\r\n",
    )
    .await;
    check(
        &mut s,
        &[b"HELLO", b"3"],
        b"-NOPROTO unsupported protocol version\r\n",
    )
    .await;
    // `AUTH pass` alone is the root access key.
    check(&mut s, &[b"AUTH", SECRET_KEY.as_bytes()], b"+OK\r\n").await;
    check(
        &mut s,
        &[b"CLIENT", b"SETINFO", b"LIB-NAME", b"redis-py"],
        b"+OK\r\n",
    )
    .await;
    check(&mut s, &[b"SELECT", b"0"], b"+OK\r\n").await;

    let key = b"meta-llama/Llama-3.1-8B@1@0@00ff@bfloat16";
    check(&mut s, &[b"GET", key], b"$-1\r\n").await;
    check(&mut s, &[b"EXISTS", key], b":0\r\n").await;
    check(&mut s, &[b"SET", key, b"chunk-bytes"], b"+OK\r\n").await;
    check(&mut s, &[b"GET", key], b"$11\r\nchunk-bytes\r\n").await;
    check(&mut s, &[b"EXISTS", key], b":1\r\n").await;
    check(&mut s, &[b"STRLEN", key], b":11\r\n").await;
    check(&mut s, &[b"SET", key, b"x", b"NX"], b"$-1\r\n").await;
    check(&mut s, &[b"SET", b"absent", b"x", b"XX"], b"$-1\r\n").await;
    check(&mut s, &[b"SET", key, b"again", b"XX"], b"+OK\r\n").await;
    check(&mut s, &[b"GET", key], b"$5\r\nagain\r\n").await;
    // Binary keys and an empty value.
    check(&mut s, &[b"SET", b"\x00bin \xff%", b""], b"+OK\r\n").await;
    check(&mut s, &[b"GET", b"\x00bin \xff%"], b"$0\r\n\r\n").await;
    check(&mut s, &[b"MSET", b"a", b"1", b"b", b"22"], b"+OK\r\n").await;
    check(
        &mut s,
        &[b"MGET", b"a", b"nope", b"b"],
        b"*3\r\n$1\r\n1\r\n$-1\r\n$2\r\n22\r\n",
    )
    .await;
    check(&mut s, &[b"EXISTS", b"a", b"nope", b"b", b"a"], b":3\r\n").await;
    check(
        &mut s,
        &[b"CAIRN.PREFIXLEN", b"a", b"b", b"nope", b"a"],
        b":2\r\n",
    )
    .await;
    check(&mut s, &[b"DBSIZE"], b":4\r\n").await;
    check(&mut s, &[b"DEL", b"a", b"nope"], b":1\r\n").await;
    check(&mut s, &[b"UNLINK", b"b"], b":1\r\n").await;
    check(&mut s, &[b"GET", b"a"], b"$-1\r\n").await;
    check(&mut s, &[b"TTL", key], b":-1\r\n").await;
    check(&mut s, &[b"SET", b"short", b"v", b"PX", b"300"], b"+OK\r\n").await;
    check(&mut s, &[b"EXISTS", b"short"], b":1\r\n").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    check(&mut s, &[b"GET", b"short"], b"$-1\r\n").await;
    check(&mut s, &[b"SET", b"kept", b"kept"], b"+OK\r\n").await;
    check(
        &mut s,
        &[b"FLUSHALL"],
        b"-ERR unknown command 'FLUSHALL'\r\n",
    )
    .await;
    check(&mut s, &[b"QUIT"], b"+OK\r\n").await;
    assert!(read_to_close(&mut s).await.is_empty());
}

/// 1000 commands sent in one write before any reply is read.
async fn pipelining(addr: &str) {
    let mut s = connect(addr).await;
    let mut batch = Vec::new();
    let mut want = Vec::new();
    for i in 0..500 {
        let (k, v) = (format!("p{i}"), format!("value-{i}"));
        batch.extend(encode(&[b"SET", k.as_bytes(), v.as_bytes()]));
        want.extend_from_slice(b"+OK\r\n");
    }
    for i in 0..500 {
        let (k, v) = (format!("p{i}"), format!("value-{i}"));
        batch.extend(encode(&[b"GET", k.as_bytes()]));
        want.extend(format!("${}\r\n{v}\r\n", v.len()).into_bytes());
    }
    s.write_all(&batch).await.unwrap();
    expect(&mut s, &want).await;
}

/// A 64 MiB value (two LMCache chunks of an 8B model) round-trips bit-exact.
async fn large_value(addr: &str) {
    let mut s = connect(addr).await;
    let v = random_bytes(64 * MIB, 7);
    check(&mut s, &[b"SET", b"big", &v], b"+OK\r\n").await;
    let mut want = format!("${}\r\n", v.len()).into_bytes();
    want.extend_from_slice(&v);
    want.extend_from_slice(b"\r\n");
    s.write_all(&encode(&[b"GET", b"big"])).await.unwrap();
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).await.unwrap();
    assert!(got == want, "64 MiB value read back differs");
    check(
        &mut s,
        &[b"STRLEN", b"big"],
        format!(":{}\r\n", 64 * MIB).as_bytes(),
    )
    .await;
}

/// Each case gets a protocol error and a closed connection; none may make the
/// server allocate what the input claims.
async fn malformed_input(addr: &str) {
    let cases: [&[u8]; 6] = [
        b"*1\r\n$-5\r\n",
        b"*2\r\n$3\r\nSET\r\n$99999999999999\r\n",
        b"*2\r\n$3\r\nGET\r\n$536870913\r\n",
        b"*-7\r\n",
        b"*1\r\n:12\r\n",
        b"*2\r\n$3\r\nGET\r\n$1\r\nkXY\r\n",
    ];
    for case in cases {
        let mut s = connect(addr).await;
        s.write_all(case).await.unwrap();
        let got = read_to_close(&mut s).await;
        assert!(
            got.starts_with(b"-ERR Protocol error"),
            "{:?} -> {:?}",
            String::from_utf8_lossy(case),
            String::from_utf8_lossy(&got)
        );
    }
    // An array that never ends: the client half-closes mid-command.
    let mut s = connect(addr).await;
    s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let got = read_to_close(&mut s).await;
    assert!(got.starts_with(b"-ERR Protocol error"), "{got:?}");
}
