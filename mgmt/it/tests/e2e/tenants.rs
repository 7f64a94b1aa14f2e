//! Tenants from the outside: made with the real `nodectl` against a real node,
//! then the isolation matrix through aws-sdk-s3 with each tenant's own keys —
//! bucket names per tenant, no reach into another tenant's buckets (list, read,
//! write, delete, copy from, multipart into), the root key not seeing tenants'
//! data, read-only users refused writes, disabled users and tenants and revoked
//! keys refused, a presigned URL acting as its signer; all of it kept across a
//! restart.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use cairn_it::tenant::{key_client, nodectl, nodectl_json, put};
use cairn_it::{code, get_bytes, Node, NodeOptions};
use std::time::Duration;

async fn bucket_names(c: &Client) -> Vec<String> {
    c.list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn tenants_are_sealed_from_each_other() {
    let mut node = Node::start(NodeOptions::default());
    let root = node.client();
    let acme = nodectl_json(&node, &["tenant", "create", "acme"]);
    assert_eq!(acme["name"], "acme");
    nodectl_json(&node, &["tenant", "create", "globex"]);
    let (ok, _, err) = nodectl(&node, &["tenant", "create", "acme"]);
    assert!(!ok && err.contains("already exists"), "{err}");
    let (ok, _, err) = nodectl(&node, &["tenant", "create", "bad name/1"]);
    assert!(!ok && err.contains("invalid tenant name"), "{err}");
    nodectl_json(
        &node,
        &["user", "create", "acme", "alice", "--role", "admin"],
    );
    nodectl_json(
        &node,
        &["user", "create", "acme", "reader", "--role", "read-only"],
    );
    nodectl_json(&node, &["user", "create", "globex", "bob"]);
    let (ok, _, err) = nodectl(&node, &["user", "create", "acme", "x", "--role", "god"]);
    assert!(!ok && err.contains("unknown role"), "{err}");
    let (alice, alice_key) = key_client(&node, "acme", "alice");
    let (reader, _) = key_client(&node, "acme", "reader");
    let (bob, _) = key_client(&node, "globex", "bob");

    // Bucket names are per tenant: three buckets named `data`, three contents.
    for (c, body) in [(&root, "root's"), (&alice, "acme's"), (&bob, "globex's")] {
        c.create_bucket().bucket("data").send().await.unwrap();
        put(c, "data", "k", body.as_bytes()).await;
    }
    for (c, body) in [(&root, "root's"), (&alice, "acme's"), (&bob, "globex's")] {
        assert_eq!(get_bytes(c, "data", "k").await.unwrap(), body.as_bytes());
    }
    alice
        .create_bucket()
        .bucket("acme-only")
        .send()
        .await
        .unwrap();
    put(&alice, "acme-only", "secret", b"acme secret").await;
    assert_eq!(bucket_names(&alice).await, ["acme-only", "data"]);
    assert_eq!(bucket_names(&bob).await, ["data"]);
    assert_eq!(bucket_names(&root).await, ["data"]);

    // Nobody else reaches acme's bucket: not another tenant, not the root key.
    for c in [&bob, &root] {
        let r = c.list_objects_v2().bucket("acme-only").send().await;
        assert_eq!(code(r), "NoSuchBucket");
        let r = c
            .get_object()
            .bucket("acme-only")
            .key("secret")
            .send()
            .await;
        assert_eq!(code(r), "NoSuchBucket");
        let r = c
            .head_object()
            .bucket("acme-only")
            .key("secret")
            .send()
            .await;
        assert!(r.is_err());
        let r = c
            .put_object()
            .bucket("acme-only")
            .key("planted")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await;
        assert_eq!(code(r), "NoSuchBucket");
        let r = c
            .delete_object()
            .bucket("acme-only")
            .key("secret")
            .send()
            .await;
        assert_eq!(code(r), "NoSuchBucket");
        let r = c
            .copy_object()
            .bucket("data")
            .key("stolen")
            .copy_source("acme-only/secret")
            .send()
            .await;
        assert_eq!(code(r), "NoSuchBucket");
        let r = c.delete_bucket().bucket("acme-only").send().await;
        assert_eq!(code(r), "NoSuchBucket");
    }
    // Multipart: another tenant cannot add parts to, list or complete acme's upload.
    let up = alice
        .create_multipart_upload()
        .bucket("acme-only")
        .key("mp")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let r = bob
        .upload_part()
        .bucket("acme-only")
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from_static(b"planted"))
        .send()
        .await;
    assert_eq!(code(r), "NoSuchBucket");
    let r = bob
        .list_parts()
        .bucket("acme-only")
        .key("mp")
        .upload_id(id)
        .send()
        .await;
    assert_eq!(code(r), "NoSuchBucket");
    let r = bob
        .complete_multipart_upload()
        .bucket("acme-only")
        .key("mp")
        .upload_id(id)
        .send()
        .await;
    assert!(r.is_err());
    let r = bob
        .list_multipart_uploads()
        .bucket("acme-only")
        .send()
        .await;
    assert_eq!(code(r), "NoSuchBucket");
    // Nor from a bucket of its own with acme's upload id.
    let r = bob
        .upload_part()
        .bucket("data")
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from_static(b"planted"))
        .send()
        .await;
    assert_eq!(code(r), "NoSuchUpload");
    assert_eq!(
        get_bytes(&alice, "acme-only", "secret").await.unwrap(),
        b"acme secret"
    );

    // A presigned URL acts as its signer: bob's URL for acme's key finds nothing.
    let cfg = PresigningConfig::expires_in(Duration::from_secs(300)).unwrap();
    let url = bob
        .get_object()
        .bucket("acme-only")
        .key("secret")
        .presigned(cfg.clone())
        .await
        .unwrap();
    let r = reqwest::get(url.uri()).await.unwrap();
    assert_eq!(r.status(), 404);
    let url = bob
        .get_object()
        .bucket("data")
        .key("k")
        .presigned(cfg)
        .await
        .unwrap();
    let r = reqwest::get(url.uri()).await.unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"globex's");

    // Read-only: reads and lists, and nothing else.
    assert_eq!(get_bytes(&reader, "data", "k").await.unwrap(), b"acme's");
    reader
        .list_objects_v2()
        .bucket("data")
        .send()
        .await
        .unwrap();
    let r = reader
        .put_object()
        .bucket("data")
        .key("k")
        .body(ByteStream::from_static(b"overwritten"))
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied");
    let r = reader.delete_object().bucket("data").key("k").send().await;
    assert_eq!(code(r), "AccessDenied");
    let r = reader.create_bucket().bucket("mine").send().await;
    assert_eq!(code(r), "AccessDenied");
    assert_eq!(get_bytes(&alice, "data", "k").await.unwrap(), b"acme's");

    // Disabled users and tenants, revoked keys: refused.
    nodectl(&node, &["user", "disable", "acme", "alice"]);
    let r = alice.list_buckets().send().await;
    assert_eq!(code(r), "AccessDenied");
    nodectl(&node, &["user", "enable", "acme", "alice"]);
    assert_eq!(bucket_names(&alice).await, ["acme-only", "data"]);
    let (ok, _, err) = nodectl(&node, &["tenant", "disable", "globex"]);
    assert!(ok, "{err}");
    let r = bob.list_buckets().send().await;
    assert_eq!(code(r), "AccessDenied");
    nodectl(&node, &["tenant", "enable", "globex"]);
    assert_eq!(bucket_names(&bob).await, ["data"]);
    let listed = nodectl_json(&node, &["key", "list", "acme"]);
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert!(!listed.to_string().contains("secret"), "{listed}");

    // The tenants, users and keys outlive a restart.
    node.restart();
    assert_eq!(
        get_bytes(&alice, "acme-only", "secret").await.unwrap(),
        b"acme secret"
    );
    assert_eq!(get_bytes(&bob, "data", "k").await.unwrap(), b"globex's");
    let shown = nodectl_json(&node, &["tenant", "show", "acme"]);
    assert_eq!(shown["tenant"]["buckets"], 2);
    assert_eq!(shown["users"].as_array().unwrap().len(), 2);

    let (ok, _, _) = nodectl(&node, &["key", "revoke", &alice_key]);
    assert!(ok);
    let r = alice.list_buckets().send().await;
    assert_eq!(code(r), "InvalidAccessKeyId");

    // A tenant is deleted only once its buckets are; then its keys die with it.
    let (ok, _, err) = nodectl(&node, &["tenant", "delete", "globex"]);
    assert!(!ok && err.contains("delete its buckets first"), "{err}");
    bob.delete_object()
        .bucket("data")
        .key("k")
        .send()
        .await
        .unwrap();
    bob.delete_bucket().bucket("data").send().await.unwrap();
    let (ok, _, err) = nodectl(&node, &["tenant", "delete", "globex"]);
    assert!(ok, "{err}");
    let r = bob.list_buckets().send().await;
    assert_eq!(code(r), "InvalidAccessKeyId");
    // The others' `data` buckets are untouched.
    assert_eq!(get_bytes(&root, "data", "k").await.unwrap(), b"root's");
    let tenants = nodectl_json(&node, &["tenant", "list"]);
    assert_eq!(tenants.as_array().unwrap().len(), 1);
}

fn quota_refused<T, E: ProvideErrorMetadata + std::fmt::Debug>(r: Result<T, SdkError<E>>) {
    match r {
        Ok(_) => panic!("a write past the quota was accepted"),
        Err(e) => {
            assert_eq!(e.code(), Some("QuotaExceeded"), "{e:?}");
            assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(403));
        }
    }
}

#[tokio::test]
async fn quotas_bound_what_tenants_and_buckets_hold() {
    const MIB: usize = 1 << 20;
    let mut node = Node::start(NodeOptions::default());
    nodectl_json(&node, &["tenant", "create", "acme"]);
    nodectl_json(&node, &["user", "create", "acme", "alice"]);
    let (c, _) = key_client(&node, "acme", "alice");
    for b in ["quota-one", "quota-two", "race"] {
        c.create_bucket().bucket(b).send().await.unwrap();
    }
    let (ok, _, err) = nodectl(&node, &["tenant", "quota", "acme", "--max-bytes", "3M"]);
    assert!(ok, "{err}");
    let (ok, _, err) = nodectl(
        &node,
        &[
            "tenant",
            "bucket-quota",
            "acme",
            "quota-one",
            "--max-objects",
            "2",
        ],
    );
    assert!(ok, "{err}");
    let (ok, _, err) = nodectl(&node, &["tenant", "quota", "acme", "--max-bytes", "lots"]);
    assert!(!ok && err.contains("not a size"), "{err}");
    let mib = vec![7u8; MIB];
    put(&c, "quota-one", "a", &mib).await;
    put(&c, "quota-one", "b", &mib).await;
    // The bucket's object quota: a third object refused, an overwrite taken.
    quota_refused(
        c.put_object()
            .bucket("quota-one")
            .key("c")
            .body(ByteStream::from(vec![1u8; 10]))
            .send()
            .await,
    );
    assert!(c
        .head_object()
        .bucket("quota-one")
        .key("c")
        .send()
        .await
        .is_err());
    put(&c, "quota-one", "a", &mib).await;
    // The tenant's byte quota, across buckets: 3 MiB in all.
    put(&c, "quota-two", "x", &mib).await;
    quota_refused(
        c.put_object()
            .bucket("quota-two")
            .key("y")
            .body(ByteStream::from(vec![1u8; 1]))
            .send()
            .await,
    );
    quota_refused(
        c.copy_object()
            .bucket("quota-two")
            .key("copy")
            .copy_source("quota-one/a")
            .send()
            .await,
    );
    // Parts count from the moment they are stored: none past the quota.
    let up = c
        .create_multipart_upload()
        .bucket("quota-two")
        .key("mp")
        .send()
        .await
        .unwrap();
    quota_refused(
        c.upload_part()
            .bucket("quota-two")
            .key("mp")
            .upload_id(up.upload_id().unwrap())
            .part_number(1)
            .body(ByteStream::from(vec![2u8; 100]))
            .send()
            .await,
    );
    // The tenant's user aborts its own upload.
    c.abort_multipart_upload()
        .bucket("quota-two")
        .key("mp")
        .upload_id(up.upload_id().unwrap())
        .send()
        .await
        .unwrap();
    let left = c
        .list_multipart_uploads()
        .bucket("quota-two")
        .send()
        .await
        .unwrap();
    assert!(left.uploads().is_empty());
    // Room made, room used.
    c.delete_object()
        .bucket("quota-two")
        .key("x")
        .send()
        .await
        .unwrap();
    put(&c, "quota-two", "y", b"small").await;

    // Racing writes never pass the quota together: 12 PUTs at once into a bucket
    // that takes 5 objects.
    let (ok, _, err) = nodectl(&node, &["tenant", "quota", "acme", "--max-bytes", "none"]);
    assert!(ok, "{err}");
    nodectl(
        &node,
        &[
            "tenant",
            "bucket-quota",
            "acme",
            "race",
            "--max-objects",
            "5",
        ],
    );
    let racers: Vec<_> = (0..12)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                c.put_object()
                    .bucket("race")
                    .key(format!("r{i}"))
                    .body(ByteStream::from(vec![i as u8; 1000]))
                    .send()
                    .await
                    .is_ok()
            })
        })
        .collect();
    let mut accepted = 0;
    for r in racers {
        accepted += usize::from(r.await.unwrap());
    }
    let listed = c.list_objects_v2().bucket("race").send().await.unwrap();
    assert_eq!(accepted, 5);
    assert_eq!(listed.key_count(), Some(5));

    // Usage is exact, per bucket and per tenant, and after a restart.
    let want = |v: &serde_json::Value| {
        let b: std::collections::BTreeMap<String, (u64, u64)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["name"].as_str().unwrap().to_string(),
                    (b["bytes"].as_u64().unwrap(), b["objects"].as_u64().unwrap()),
                )
            })
            .collect();
        b
    };
    let expected: std::collections::BTreeMap<String, (u64, u64)> = [
        ("quota-one".to_string(), (2 * MIB as u64, 2)),
        ("quota-two".to_string(), (5, 1)),
        ("race".to_string(), (5000, 5)),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        want(&nodectl_json(&node, &["tenant", "buckets", "acme"])),
        expected
    );
    node.restart();
    assert_eq!(
        want(&nodectl_json(&node, &["tenant", "buckets", "acme"])),
        expected
    );
    let t = nodectl_json(&node, &["tenant", "show", "acme"]);
    assert_eq!(t["tenant"]["bytes"], 2 * MIB as u64 + 5005);
    assert_eq!(t["tenant"]["objects"], 8);
    assert_eq!(t["tenant"]["quota"]["max_bytes"], serde_json::Value::Null);
}

/// One RESP command over `s`, its first reply line.
async fn resp(s: &mut tokio::net::TcpStream, args: &[&str]) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).await.unwrap();
    let mut r = tokio::io::BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    if line.starts_with('$') && line.trim() != "$-1" {
        let mut value = String::new();
        r.read_line(&mut value).await.unwrap();
        return value.trim_end().to_string();
    }
    line.trim_end().to_string()
}

#[tokio::test]
async fn resp_sessions_follow_their_key_and_expired_keys_go() {
    let addr = cairn_it::free_addr();
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_RESP", addr)],
        ..Default::default()
    });
    nodectl_json(&node, &["tenant", "create", "kv"]);
    nodectl_json(&node, &["user", "create", "kv", "writer"]);
    nodectl_json(
        &node,
        &["user", "create", "kv", "reader", "--role", "read-only"],
    );
    let k = nodectl_json(&node, &["key", "create", "kv", "writer"]);
    let (ak, sk) = (
        k["access_key"].as_str().unwrap(),
        k["secret_key"].as_str().unwrap(),
    );
    let r = nodectl_json(&node, &["key", "create", "kv", "reader"]);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert_eq!(resp(&mut s, &["AUTH", ak, sk]).await, "+OK");
    assert_eq!(resp(&mut s, &["SET", "a", "1"]).await, "+OK");

    // Expired keys stop counting: found by a command, or by the sweep.
    nodectl(&node, &["tenant", "quota", "kv", "--max-objects", "3"]);
    assert_eq!(resp(&mut s, &["SET", "e1", "v", "PX", "100"]).await, "+OK");
    assert_eq!(resp(&mut s, &["SET", "e2", "v", "PX", "100"]).await, "+OK");
    let refused = resp(&mut s, &["SET", "b", "1"]).await;
    assert!(refused.contains("quota exceeded"), "{refused}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(resp(&mut s, &["GET", "e1"]).await, "$-1");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let t = nodectl_json(&node, &["tenant", "show", "kv"]);
        if t["tenant"]["objects"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "expired keys still held: {t}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(resp(&mut s, &["SET", "b", "1"]).await, "+OK");
    assert_eq!(resp(&mut s, &["DBSIZE"]).await, ":2");
    // An expired key is no key for NX and XX either, swept or not yet.
    nodectl(&node, &["tenant", "quota", "kv", "--max-objects", "none"]);
    assert_eq!(resp(&mut s, &["SET", "n", "v", "PX", "100"]).await, "+OK");
    assert_eq!(resp(&mut s, &["SET", "x", "v", "PX", "100"]).await, "+OK");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(resp(&mut s, &["SET", "n", "w", "NX"]).await, "+OK");
    assert_eq!(resp(&mut s, &["GET", "n"]).await, "w");
    assert_eq!(resp(&mut s, &["SET", "x", "w", "XX"]).await, "$-1");
    assert_eq!(resp(&mut s, &["GET", "x"]).await, "$-1");
    assert_eq!(resp(&mut s, &["DEL", "n"]).await, ":1");

    // A read-only user reads and is refused writes.
    let mut ro = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (rak, rsk) = (
        r["access_key"].as_str().unwrap(),
        r["secret_key"].as_str().unwrap(),
    );
    assert_eq!(resp(&mut ro, &["AUTH", rak, rsk]).await, "+OK");
    assert_eq!(resp(&mut ro, &["GET", "a"]).await, "1");
    assert!(resp(&mut ro, &["SET", "a", "2"])
        .await
        .starts_with("-NOPERM"));
    // Disabling the user stops its open session at the next command.
    nodectl(&node, &["user", "disable", "kv", "reader"]);
    assert!(resp(&mut ro, &["GET", "a"]).await.starts_with("-NOAUTH"));

    // A revoked key stops its open session at the next command.
    let (ok, _, err) = nodectl(&node, &["key", "revoke", ak]);
    assert!(ok, "{err}");
    assert!(resp(&mut s, &["GET", "a"]).await.starts_with("-NOAUTH"));
    assert!(resp(&mut s, &["SET", "c", "1"])
        .await
        .starts_with("-NOAUTH"));

    // A tenant whose RESP keyspace is empty can be deleted; one holding keys not.
    let k = nodectl_json(&node, &["key", "create", "kv", "writer"]);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (ak, sk) = (
        k["access_key"].as_str().unwrap(),
        k["secret_key"].as_str().unwrap(),
    );
    assert_eq!(resp(&mut s, &["AUTH", ak, sk]).await, "+OK");
    let (ok, _, err) = nodectl(&node, &["tenant", "delete", "kv"]);
    assert!(!ok && err.contains("_resp."), "{err}");
    assert_eq!(resp(&mut s, &["DEL", "a", "b"]).await, ":2");
    let (ok, _, err) = nodectl(&node, &["tenant", "delete", "kv"]);
    assert!(ok, "{err}");
    assert!(resp(&mut s, &["GET", "a"]).await.starts_with("-NOAUTH"));
    let (ok, _, err) = nodectl(&node, &["tenant", "create", "0123456789abcdef"]);
    assert!(!ok && err.contains("hex"), "{err}");
}
