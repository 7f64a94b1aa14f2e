//! The KV tier on a real node, over RESP: expiry changed in place (EXPIRE,
//! PERSIST), SCAN, INFO, the RAM tier (hits, promotion on read, its bound) and
//! the intake budget under a flood of large SETs.

use cairn_it::{random_bytes, Node, NodeOptions, ACCESS_KEY, SECRET_KEY};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const MIB: usize = 1 << 20;

use cairn_it::resp_command as encode;

/// A RESP2 reply, parsed.
#[derive(Debug, PartialEq)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

struct Client(BufReader<TcpStream>);

impl Client {
    async fn connect(addr: &str) -> Client {
        let mut c = Client(BufReader::new(TcpStream::connect(addr).await.unwrap()));
        let r = c
            .call(&[b"AUTH", ACCESS_KEY.as_bytes(), SECRET_KEY.as_bytes()])
            .await;
        assert_eq!(r, Reply::Simple("OK".into()));
        c
    }

    async fn call(&mut self, args: &[&[u8]]) -> Reply {
        self.0.get_mut().write_all(&encode(args)).await.unwrap();
        tokio::time::timeout(Duration::from_secs(60), self.reply())
            .await
            .expect("a reply in time")
    }

    async fn reply(&mut self) -> Reply {
        let mut line = Vec::new();
        self.0.read_until(b'\n', &mut line).await.unwrap();
        assert!(line.ends_with(b"\r\n"), "line {line:?}");
        let body = String::from_utf8_lossy(&line[1..line.len() - 2]).to_string();
        match line[0] {
            b'+' => Reply::Simple(body),
            b'-' => Reply::Error(body),
            b':' => Reply::Int(body.parse().unwrap()),
            b'$' => {
                let n: i64 = body.parse().unwrap();
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut v = vec![0u8; n as usize + 2];
                self.0.read_exact(&mut v).await.unwrap();
                assert_eq!(&v[n as usize..], b"\r\n");
                v.truncate(n as usize);
                Reply::Bulk(Some(v))
            }
            b'*' => {
                let n: usize = body.parse().unwrap();
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(Box::pin(self.reply()).await);
                }
                Reply::Array(items)
            }
            other => panic!("unexpected reply type {other}"),
        }
    }

    async fn int(&mut self, args: &[&[u8]]) -> i64 {
        match self.call(args).await {
            Reply::Int(n) => n,
            r => panic!("{:?}: {r:?}", String::from_utf8_lossy(args[0])),
        }
    }

    /// One field of INFO, as a number.
    async fn info(&mut self, section: &str, field: &str) -> f64 {
        let Reply::Bulk(Some(b)) = self.call(&[b"INFO", section.as_bytes()]).await else {
            panic!("INFO is a bulk string")
        };
        let text = String::from_utf8(b).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_else(|| panic!("no {field} in INFO {section}:\n{text}"))
            .parse()
            .unwrap()
    }
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_tier_end_to_end() {
    let addr = cairn_it::free_addr();
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![
            ("CAIRN_RESP", addr),
            ("CAIRN_KV_RAM", "64M"),
            ("CAIRN_RESP_INTAKE", "16M"),
        ],
        ..Default::default()
    });
    expiry_in_place(addr).await;
    scan(addr).await;
    ram_tier(addr).await;
    intake_flood(addr).await;
    pools(addr, &node).await;
    purged_tenant_leaves_ram(addr, &node).await;
}

/// A purged tenant's values leave the RAM tier within the sweep's period, counted
/// bytes included (a value removed but still counted stayed, before).
async fn purged_tenant_leaves_ram(addr: &str, node: &Node) {
    use cairn_it::tenant::{nodectl, nodectl_json};
    assert!(nodectl(node, &["tenant", "create", "gone"]).0);
    assert!(nodectl(node, &["user", "create", "gone", "bob"]).0);
    let k = nodectl_json(node, &["key", "create", "gone", "bob"]);
    let (ak, sk) = (
        k["access_key"].as_str().unwrap(),
        k["secret_key"].as_str().unwrap(),
    );
    let mut t = Client(BufReader::new(TcpStream::connect(addr).await.unwrap()));
    assert_eq!(t.call(&[b"AUTH", ak.as_bytes(), sk.as_bytes()]).await, ok());
    let mut c = Client::connect(addr).await;
    let before = c.info("memory", "cairn_ram_tier_bytes").await;
    assert_eq!(
        t.call(&[b"SET", b"secret", &random_bytes(MIB, 900)]).await,
        ok()
    );
    assert!(c.info("memory", "cairn_ram_tier_bytes").await > before);
    assert!(nodectl(node, &["tenant", "delete", "gone", "--purge"]).0);
    let mut left = f64::MAX;
    for _ in 0..50 {
        left = c.info("memory", "cairn_ram_tier_bytes").await;
        if left <= before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        left <= before,
        "the purged tenant's value still held: {left} > {before}"
    );
}

/// A caching pool: reached by SELECT and by `AUTH key/pool`, its keyspace apart
/// from database 0, its default expiry applied, and when full its oldest values
/// not pinned evicted; a storing pool refuses instead.
async fn pools(addr: &str, node: &Node) {
    let nodectl = |args: &[&str]| {
        let (ok, out, err) = cairn_it::tenant::nodectl(node, args);
        assert!(ok, "nodectl {args:?}: {err}");
        out
    };
    nodectl(&[
        "kv",
        "pool",
        "create",
        "root",
        "prefill",
        "--capacity",
        "20M",
        "--ttl",
        "3600",
    ]);
    nodectl(&[
        "kv",
        "pool",
        "create",
        "root",
        "keep",
        "--capacity",
        "8M",
        "--no-evict",
        "--index",
        "5",
    ]);
    let mut c = Client::connect(addr).await;
    assert_eq!(c.call(&[b"SET", b"k", b"db0"]).await, ok());
    assert_eq!(c.call(&[b"SELECT", b"1"]).await, ok());
    assert_eq!(
        c.call(&[b"GET", b"k"]).await,
        Reply::Bulk(None),
        "pools are apart"
    );
    assert_eq!(c.call(&[b"SET", b"k", b"prefill"]).await, ok());
    let ttl = c.int(&[b"TTL", b"k"]).await;
    assert!(
        (3590..=3600).contains(&ttl),
        "the pool's default expiry: {ttl}"
    );
    assert_eq!(
        c.call(&[b"SELECT", b"9"]).await,
        Reply::Error("ERR DB index is out of range".into())
    );
    // Through AUTH key/pool, as a client that sends nothing but AUTH.
    let mut p = Client(BufReader::new(TcpStream::connect(addr).await.unwrap()));
    let user = format!("{ACCESS_KEY}/prefill");
    assert_eq!(
        p.call(&[b"AUTH", user.as_bytes(), SECRET_KEY.as_bytes()])
            .await,
        ok()
    );
    assert_eq!(
        p.call(&[b"GET", b"k"]).await,
        Reply::Bulk(Some(b"prefill".to_vec()))
    );
    let nobody = format!("{ACCESS_KEY}/nope");
    assert!(matches!(
        p.call(&[b"AUTH", nobody.as_bytes(), SECRET_KEY.as_bytes()]).await,
        Reply::Error(m) if m.contains("no KV pool")
    ));
    // 20 MiB of capacity: the first value pinned, then ten 4 MiB values. The
    // oldest unpinned ones go to make room; the pinned one and the newest stay.
    let first = random_bytes(4 * MIB, 500);
    assert_eq!(c.call(&[b"SET", b"v0", &first]).await, ok());
    assert_eq!(c.int(&[b"CAIRN.PIN", b"v0"]).await, 1);
    assert_eq!(c.int(&[b"CAIRN.PIN", b"v0"]).await, 0);
    let values: Vec<Vec<u8>> = (1..=10).map(|i| random_bytes(4 * MIB, 500 + i)).collect();
    for (i, v) in values.iter().enumerate() {
        let k = format!("v{}", i + 1);
        assert_eq!(c.call(&[b"SET", k.as_bytes(), v]).await, ok(), "{k}");
    }
    assert_eq!(c.call(&[b"GET", b"v0"]).await, Reply::Bulk(Some(first)));
    assert_eq!(
        c.call(&[b"GET", b"v10"]).await,
        Reply::Bulk(Some(values[9].clone()))
    );
    assert_eq!(c.int(&[b"EXISTS", b"v1"]).await, 0, "the oldest went");
    assert!(c.info("stats", "evicted_keys").await >= 5.0);
    // A value larger than the whole pool is refused before anything is evicted.
    let keys = c.int(&[b"DBSIZE"]).await;
    let huge = random_bytes(21 * MIB, 510);
    assert!(matches!(
        c.call(&[b"SET", b"huge", &huge]).await,
        Reply::Error(m) if m.contains("larger than pool")
    ));
    assert_eq!(c.int(&[b"DBSIZE"]).await, keys, "nothing evicted for it");
    // MGET of many keys is answered in order, a batch of lookups at a time.
    let mut many: Vec<Vec<u8>> = Vec::new();
    for i in 0..3000 {
        many.push(match i % 1000 {
            0 => b"v0".to_vec(),
            _ => format!("absent{i}").into_bytes(),
        });
    }
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(many.iter().map(|k| k.as_slice()));
    let Reply::Array(got) = c.call(&args).await else {
        panic!("MGET")
    };
    assert_eq!(got.len(), 3000);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(
            matches!(r, Reply::Bulk(Some(_))),
            i % 1000 == 0,
            "MGET item {i}"
        );
    }
    // The storing pool refuses once full.
    assert_eq!(c.call(&[b"SELECT", b"5"]).await, ok());
    let v = random_bytes(3 * MIB, 600);
    assert_eq!(c.call(&[b"SET", b"a", &v]).await, ok());
    assert_eq!(c.call(&[b"SET", b"b", &v]).await, ok());
    assert!(matches!(c.call(&[b"SET", b"c", &v]).await, Reply::Error(_)));
    assert_eq!(c.int(&[b"EXISTS", b"a", b"b"]).await, 2);
    // A pool with a RAM share of its own keeps to it; its traffic is counted.
    nodectl(&[
        "kv", "pool", "create", "root", "small", "--ram", "8M", "--index", "7",
    ]);
    assert_eq!(c.call(&[b"SELECT", b"7"]).await, ok());
    for i in 0..4 {
        let v = random_bytes(3 * MIB, 700 + i);
        assert_eq!(
            c.call(&[b"SET", format!("s{i}").as_bytes(), &v]).await,
            ok()
        );
    }
    let s = cairn_it::tenant::nodectl_json(node, &["kv", "stats", "--interval", "0.1"]);
    let small = s["stats"]["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "small")
        .cloned()
        .unwrap();
    assert!(
        small["ram_bytes"].as_u64().unwrap() <= 8 * MIB as u64,
        "{small}"
    );
    assert!(
        small["ram_bytes"].as_u64().unwrap() >= 3 * MIB as u64,
        "{small}"
    );
    assert_eq!(
        small["bytes_in"].as_u64().unwrap(),
        12 * MIB as u64,
        "{small}"
    );
    assert_eq!(c.call(&[b"SELECT", b"5"]).await, ok());
    let stats = nodectl(&["kv", "stats", "--json", "--interval", "0.1"]);
    assert!(
        stats.contains("\"prefill\"") && stats.contains("\"dropped\""),
        "{stats}"
    );
    nodectl(&["kv", "pool", "delete", "root", "keep"]);
    // A pool kept as an S3 bucket: its keys are the objects' keys, as S3 names them.
    nodectl(&[
        "kv",
        "pool",
        "create",
        "root",
        "shared",
        "--s3-bucket",
        "kv-shared",
    ]);
    let mut k = Client::connect(addr).await;
    let user = format!("{ACCESS_KEY}/shared");
    assert_eq!(
        k.call(&[b"AUTH", user.as_bytes(), SECRET_KEY.as_bytes()])
            .await,
        ok()
    );
    assert_eq!(
        k.call(&[b"SET", "with space é".as_bytes(), b"resp"]).await,
        ok()
    );
    assert!(matches!(
        k.call(&[b"SET", b"\xff", b"x"]).await,
        Reply::Error(m) if m.contains("UTF-8")
    ));
    let s3 = node.client();
    let got = s3
        .get_object()
        .bucket("kv-shared")
        .key("with space é")
        .send()
        .await
        .expect("the RESP value is an S3 object")
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(&got[..], b"resp");
    s3.put_object()
        .bucket("kv-shared")
        .key("from s3 100%")
        .body(b"s3".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(
        k.call(&[b"GET", b"from s3 100%"]).await,
        Reply::Bulk(Some(b"s3".to_vec()))
    );
    // A session still in the deleted pool finds nothing, and cannot write.
    assert_eq!(c.call(&[b"GET", b"a"]).await, Reply::Bulk(None));
    assert!(matches!(
        c.call(&[b"SET", b"a", b"x"]).await,
        Reply::Error(m) if m.contains("no such bucket")
    ));
    placed_and_durable(addr, node).await;
}

/// A pool's nodes are checked against the cluster and kept in full; its
/// durability is write-back unless `--durable`; values of either kind read back.
async fn placed_and_durable(addr: &str, node: &Node) {
    use cairn_it::tenant::{nodectl, nodectl_json};
    let me = nodectl_json(node, &["cluster", "status"])["this_node"]
        .as_str()
        .unwrap()
        .to_string();
    let (created, _, err) = nodectl(
        node,
        &[
            "kv", "pool", "create", "root", "nowhere", "--nodes", "0123abc",
        ],
    );
    assert!(
        !created && err.contains("0123abc"),
        "an unknown node: {err}"
    );
    let wb = nodectl_json(
        node,
        &[
            "kv",
            "pool",
            "create",
            "root",
            "here",
            "--nodes",
            &me[..6],
            "--index",
            "11",
        ],
    );
    assert_eq!(wb["nodes"], serde_json::json!([me]));
    assert_eq!(wb["durability"], "write-back");
    let d = nodectl_json(
        node,
        &[
            "kv",
            "pool",
            "create",
            "root",
            "safe",
            "--durable",
            "--index",
            "12",
        ],
    );
    assert_eq!(d["durability"], "durable");
    assert_eq!(d["nodes"], serde_json::json!([]));
    let mut c = Client::connect(addr).await;
    for db in [b"11", b"12"] {
        assert_eq!(c.call(&[b"SELECT", db]).await, ok());
        let big = random_bytes(5 * MIB + 3, 800);
        assert_eq!(c.call(&[b"SET", b"big", &big]).await, ok());
        assert_eq!(c.call(&[b"SET", b"small", b"tiny"]).await, ok());
        assert_eq!(c.call(&[b"GET", b"big"]).await, Reply::Bulk(Some(big)));
        assert_eq!(
            c.call(&[b"GET", b"small"]).await,
            Reply::Bulk(Some(b"tiny".to_vec()))
        );
    }
}

async fn expiry_in_place(addr: &str) {
    let mut c = Client::connect(addr).await;
    assert_eq!(c.call(&[b"SET", b"e", b"value"]).await, ok());
    assert_eq!(c.int(&[b"TTL", b"e"]).await, -1);
    assert_eq!(c.int(&[b"EXPIRE", b"e", b"100"]).await, 1);
    assert_eq!(c.int(&[b"TTL", b"e"]).await, 100);
    // NX: only without an expiry; XX: only with one; GT/LT against the current.
    assert_eq!(c.int(&[b"EXPIRE", b"e", b"50", b"NX"]).await, 0);
    assert_eq!(c.int(&[b"EXPIRE", b"e", b"50", b"GT"]).await, 0);
    assert_eq!(c.int(&[b"EXPIRE", b"e", b"50", b"LT"]).await, 1);
    assert_eq!(c.int(&[b"TTL", b"e"]).await, 50);
    assert_eq!(c.int(&[b"EXPIRE", b"e", b"200", b"XX"]).await, 1);
    assert_eq!(c.int(&[b"PERSIST", b"e"]).await, 1);
    assert_eq!(c.int(&[b"TTL", b"e"]).await, -1);
    assert_eq!(c.int(&[b"PERSIST", b"e"]).await, 0);
    assert_eq!(c.int(&[b"EXPIRE", b"e", b"50", b"XX"]).await, 0);
    assert_eq!(c.int(&[b"EXPIRE", b"e", b"50", b"GT"]).await, 0);
    // The value is untouched by all of it.
    assert_eq!(
        c.call(&[b"GET", b"e"]).await,
        Reply::Bulk(Some(b"value".to_vec()))
    );
    assert_eq!(c.int(&[b"EXPIRE", b"nothing", b"10"]).await, 0);
    assert_eq!(c.int(&[b"PERSIST", b"nothing"]).await, 0);
    assert!(matches!(
        c.call(&[b"EXPIRE", b"e", b"ten"]).await,
        Reply::Error(m) if m.starts_with("ERR value is not an integer")
    ));
    assert!(matches!(
        c.call(&[b"EXPIRE", b"e", b"10", b"NX", b"XX"]).await,
        Reply::Error(m) if m.contains("not compatible")
    ));
    // A short expiry passes; a time in the past deletes at once.
    assert_eq!(c.int(&[b"PEXPIRE", b"e", b"100"]).await, 1);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(c.call(&[b"GET", b"e"]).await, Reply::Bulk(None));
    assert_eq!(c.call(&[b"SET", b"p", b"v"]).await, ok());
    assert_eq!(c.int(&[b"EXPIREAT", b"p", b"1000"]).await, 1);
    assert_eq!(c.int(&[b"EXISTS", b"p"]).await, 0);
    // SET's absolute expiries and KEEPTTL, as Redis has them.
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 100;
    let at = at.to_string();
    assert_eq!(
        c.call(&[b"SET", b"t", b"1", b"EXAT", at.as_bytes()]).await,
        ok()
    );
    assert!((98..=100).contains(&c.int(&[b"TTL", b"t"]).await));
    assert_eq!(c.call(&[b"SET", b"t", b"2", b"KEEPTTL"]).await, ok());
    assert!((98..=100).contains(&c.int(&[b"TTL", b"t"]).await), "kept");
    assert_eq!(
        c.call(&[b"GET", b"t"]).await,
        Reply::Bulk(Some(b"2".to_vec()))
    );
    assert_eq!(c.call(&[b"SET", b"t", b"3"]).await, ok());
    assert_eq!(c.int(&[b"TTL", b"t"]).await, -1, "a plain SET drops it");
    assert_eq!(c.call(&[b"SET", b"t", b"4", b"KEEPTTL"]).await, ok());
    assert_eq!(c.int(&[b"TTL", b"t"]).await, -1, "none kept");
    assert_eq!(
        c.call(&[b"SET", b"t", b"5", b"KEEPTTL", b"EX", b"5"]).await,
        Reply::Error("ERR syntax error".into())
    );
    assert_eq!(c.call(&[b"SET", b"t", b"6", b"PXAT", b"1000"]).await, ok());
    assert_eq!(
        c.call(&[b"GET", b"t"]).await,
        Reply::Bulk(None),
        "set expired"
    );
}

async fn scan(addr: &str) {
    let mut c = Client::connect(addr).await;
    let mut want = BTreeSet::new();
    for i in 0..25 {
        let k = format!("scan:{i:02}\x01");
        assert_eq!(c.call(&[b"SET", k.as_bytes(), b"x"]).await, ok());
        want.insert(k.into_bytes());
    }
    for k in ["other:1", "scan", "scam:1"] {
        assert_eq!(c.call(&[b"SET", k.as_bytes(), b"x"]).await, ok());
    }
    let (mut cursor, mut got, mut calls) = (b"0".to_vec(), Vec::new(), 0);
    loop {
        let r = c
            .call(&[b"SCAN", &cursor, b"MATCH", b"scan:*", b"COUNT", b"7"])
            .await;
        let Reply::Array(parts) = r else {
            panic!("SCAN: {r:?}")
        };
        let [Reply::Bulk(Some(next)), Reply::Array(keys)] = &parts[..] else {
            panic!("SCAN: {parts:?}")
        };
        for k in keys {
            let Reply::Bulk(Some(k)) = k else {
                panic!("{k:?}")
            };
            got.push(k.clone());
        }
        calls += 1;
        cursor = next.clone();
        if cursor == b"0" {
            break;
        }
        assert!(calls < 100, "SCAN ends");
    }
    assert!(calls >= 4, "COUNT 7 pages 25 keys: {calls} calls");
    assert_eq!(got.len(), want.len(), "every key once");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
    assert_eq!(
        c.call(&[b"SCAN", b"12345"]).await,
        Reply::Error("ERR invalid cursor".into())
    );
    let Reply::Array(all) = c.call(&[b"SCAN", b"0", b"COUNT", b"1000"]).await else {
        panic!()
    };
    assert!(matches!(&all[..], [Reply::Bulk(Some(z)), Reply::Array(_)] if z == b"0"));
    assert_eq!(
        c.call(&[b"TYPE", b"scan"]).await,
        Reply::Simple("string".into())
    );
    assert_eq!(
        c.call(&[b"TYPE", b"none"]).await,
        Reply::Simple("none".into())
    );
    let Reply::Bulk(Some(ks)) = c.call(&[b"INFO", b"keyspace"]).await else {
        panic!()
    };
    let ks = String::from_utf8(ks).unwrap();
    assert!(ks.contains("db0:keys=28,expires=0"), "{ks}");
}

async fn ram_tier(addr: &str) {
    let mut c = Client::connect(addr).await;
    assert_eq!(c.info("memory", "maxmemory").await, (64 * MIB) as f64);
    let value = random_bytes(4 * MIB, 1);
    let hits = c.info("stats", "cairn_ram_hits").await;
    assert_eq!(c.call(&[b"SET", b"hot", &value]).await, ok());
    // Held when written: the first read is already a hit.
    assert_eq!(
        c.call(&[b"GET", b"hot"]).await,
        Reply::Bulk(Some(value.clone()))
    );
    assert_eq!(c.info("stats", "cairn_ram_hits").await, hits + 1.0);
    // 20 values of 4 MiB (80 MiB) through a 64 MiB tier: the first ones leave
    // RAM, and every value still reads back right, from the drives.
    let values: Vec<Vec<u8>> = (0..20).map(|i| random_bytes(4 * MIB, 100 + i)).collect();
    for (i, v) in values.iter().enumerate() {
        assert_eq!(c.call(&[b"SET", format!("v{i}").as_bytes(), v]).await, ok());
    }
    assert!(c.info("memory", "cairn_ram_tier_bytes").await <= (64 * MIB) as f64);
    assert!(c.info("stats", "cairn_ram_evictions").await >= 4.0);
    let misses = c.info("stats", "cairn_ram_misses").await;
    for (i, v) in values.iter().enumerate() {
        assert_eq!(
            c.call(&[b"GET", format!("v{i}").as_bytes()]).await,
            Reply::Bulk(Some(v.clone())),
            "value {i}"
        );
    }
    let missed = c.info("stats", "cairn_ram_misses").await - misses;
    assert!(
        missed >= 4.0,
        "the evicted values were read from the drives"
    );
    // A value read from the drives was promoted: read again, it is a hit.
    let hits = c.info("stats", "cairn_ram_hits").await;
    assert_eq!(
        c.call(&[b"GET", b"v19"]).await,
        Reply::Bulk(Some(values[19].clone()))
    );
    assert_eq!(c.info("stats", "cairn_ram_hits").await, hits + 1.0);
    // An overwrite is seen at once (the tier is keyed by write, not by key).
    assert_eq!(c.call(&[b"SET", b"v19", b"new"]).await, ok());
    assert_eq!(
        c.call(&[b"GET", b"v19"]).await,
        Reply::Bulk(Some(b"new".to_vec()))
    );
    assert!(c.info("memory", "cairn_ram_tier_bytes").await <= (64 * MIB) as f64);
}

/// Eight clients each SET four 8 MiB values at once through a 16 MiB intake
/// budget: they take turns (no deadlock, nothing refused) and every value is
/// stored whole.
async fn intake_flood(addr: &str) {
    let mut tasks = Vec::new();
    for t in 0..8 {
        let addr = addr.to_string();
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(&addr).await;
            let mut sums = Vec::new();
            for i in 0..4 {
                let v = random_bytes(8 * MIB, t * 10 + i);
                let k = format!("flood{t}.{i}");
                assert_eq!(c.call(&[b"SET", k.as_bytes(), &v]).await, ok());
                sums.push((k, v));
            }
            sums
        }));
    }
    let mut c = Client::connect(addr).await;
    for t in tasks {
        for (k, v) in t.await.unwrap() {
            assert_eq!(c.int(&[b"STRLEN", k.as_bytes()]).await, v.len() as i64);
            assert_eq!(c.call(&[b"GET", k.as_bytes()]).await, Reply::Bulk(Some(v)));
        }
    }
    // Nothing held but the INFO command's own two arguments (a unit each).
    assert_eq!(c.info("memory", "cairn_intake_in_use").await, 512.0);
    assert_eq!(
        c.info("memory", "cairn_intake_bytes").await,
        (16 * MIB) as f64
    );
}
