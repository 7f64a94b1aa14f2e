//! Bucket snapshots from the outside: made with `nodectl`, read and listed
//! through aws-sdk-s3 under `.snapshot/NAME/` after the bucket was overwritten
//! and emptied, writes there refused, an object restored by copy, the
//! snapshot still whole after kill -9 of mgmtd, the bucket not deleted under
//! it, and gone with `nodectl snapshot delete`.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use aws_sdk_s3::Client;
use cairn_it::tenant::{nodectl, nodectl_json, put};
use cairn_it::{code, Node, NodeOptions};

const B: &str = "photos";

async fn get(c: &Client, key: &str) -> Result<Vec<u8>, String> {
    match c.get_object().bucket(B).key(key).send().await {
        Ok(o) => Ok(o.body.collect().await.unwrap().to_vec()),
        Err(e) => Err(aws_sdk_s3::error::ProvideErrorMetadata::code(&e)
            .unwrap_or("")
            .to_string()),
    }
}

/// (keys, common prefixes) of one listing with `/` as the delimiter.
async fn list(c: &Client, prefix: &str) -> (Vec<String>, Vec<String>) {
    let l = c
        .list_objects_v2()
        .bucket(B)
        .prefix(prefix)
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let keys = l.contents().iter().map(|o| o.key().unwrap().to_string());
    let prefixes = l
        .common_prefixes()
        .iter()
        .map(|p| p.prefix().unwrap().to_string());
    (keys.collect(), prefixes.collect())
}

#[tokio::test]
async fn a_snapshot_reads_the_bucket_as_it_was_through_s3() {
    let mut node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket(B).send().await.unwrap();
    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i * 13 % 251) as u8).collect();
    put(&c, B, "a.txt", b"one").await;
    put(&c, B, "dir/b.txt", b"two").await;
    put(&c, B, "big", &big).await;

    let s = nodectl_json(&node, &["snapshot", "create", "root", B, "before"]);
    assert_eq!(s["prefix"], ".snapshot/before/");
    let (ok, _, err) = nodectl(&node, &["snapshot", "create", "root", B, "before"]);
    assert!(!ok && err.contains("already exists"), "{err}");
    let (ok, _, err) = nodectl(&node, &["snapshot", "create", "root", B, ".bad"]);
    assert!(!ok && err.contains("not a snapshot name"), "{err}");

    // The bucket overwritten and emptied, one new object.
    put(&c, B, "a.txt", b"ONE").await;
    for k in ["a.txt", "dir/b.txt", "big"] {
        c.delete_object().bucket(B).key(k).send().await.unwrap();
    }
    put(&c, B, "c.txt", b"new").await;

    // The snapshot reads what was there, byte for byte; the bucket what is now.
    assert_eq!(get(&c, ".snapshot/before/a.txt").await.unwrap(), b"one");
    assert_eq!(get(&c, ".snapshot/before/dir/b.txt").await.unwrap(), b"two");
    assert_eq!(get(&c, ".snapshot/before/big").await.unwrap(), big);
    assert_eq!(
        get(&c, ".snapshot/before/c.txt").await.unwrap_err(),
        "NoSuchKey"
    );
    assert_eq!(
        get(&c, ".snapshot/nope/a.txt").await.unwrap_err(),
        "NoSuchKey"
    );
    assert_eq!(get(&c, "a.txt").await.unwrap_err(), "NoSuchKey");
    let h = c
        .head_object()
        .bucket(B)
        .key(".snapshot/before/big")
        .send()
        .await
        .unwrap();
    assert_eq!(h.content_length(), Some(big.len() as i64));
    let r = c
        .get_object()
        .bucket(B)
        .key(".snapshot/before/big")
        .range("bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(r.body.collect().await.unwrap().to_vec(), big[1000..2000]);

    // Listings: the snapshots under `.snapshot/`, each as the bucket was; the
    // bucket's own listing never shows them.
    assert_eq!(
        list(&c, ".snapshot/").await,
        (vec![], vec![".snapshot/before/".into()])
    );
    assert_eq!(
        list(&c, ".snapshot/before/").await,
        (
            vec![
                ".snapshot/before/a.txt".into(),
                ".snapshot/before/big".into()
            ],
            vec![".snapshot/before/dir/".into()]
        )
    );
    assert_eq!(list(&c, "").await, (vec!["c.txt".into()], vec![]));
    let paged = c
        .list_objects_v2()
        .bucket(B)
        .prefix(".snapshot/before/")
        .max_keys(1)
        .into_paginator()
        .send()
        .collect::<Vec<_>>()
        .await;
    let keys: Vec<String> = paged
        .into_iter()
        .flat_map(|p| p.unwrap().contents().to_vec())
        .map(|o| o.key().unwrap().to_string())
        .collect();
    assert_eq!(
        keys,
        [
            ".snapshot/before/a.txt",
            ".snapshot/before/big",
            ".snapshot/before/dir/b.txt"
        ]
    );

    // Read-only: no write, delete or copy lands under `.snapshot/`.
    let r = c
        .put_object()
        .bucket(B)
        .key(".snapshot/before/x")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied");
    let r = c
        .delete_object()
        .bucket(B)
        .key(".snapshot/before/a.txt")
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied");
    let r = c
        .copy_object()
        .bucket(B)
        .key(".snapshot/before/c.txt")
        .copy_source(format!("{B}/c.txt"))
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied");
    let r = c
        .create_multipart_upload()
        .bucket(B)
        .key(".snapshot/before/m")
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied");
    let one = ObjectIdentifier::builder()
        .key(".snapshot/before/a.txt")
        .build()
        .unwrap();
    let d = c
        .delete_objects()
        .bucket(B)
        .delete(Delete::builder().objects(one).build().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(d.errors().len(), 1, "{d:?}");
    assert_eq!(get(&c, ".snapshot/before/a.txt").await.unwrap(), b"one");

    // Restoring is a copy out of the snapshot.
    c.copy_object()
        .bucket(B)
        .key("a.txt")
        .copy_source(format!("{B}/.snapshot/before/a.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(get(&c, "a.txt").await.unwrap(), b"one");

    // kill -9 and start again: the snapshot is still there, whole.
    node.kill_mgmtd();
    node.start_mgmtd();
    let c = node.client();
    assert_eq!(get(&c, ".snapshot/before/big").await.unwrap(), big);
    assert_eq!(get(&c, ".snapshot/before/dir/b.txt").await.unwrap(), b"two");

    // An emptied bucket is not deleted under its snapshot.
    for k in ["a.txt", "c.txt"] {
        c.delete_object().bucket(B).key(k).send().await.unwrap();
    }
    let r = c.delete_bucket().bucket(B).send().await;
    assert_eq!(code(r), "BucketNotEmpty");

    let l = nodectl_json(&node, &["snapshot", "list", "root", B]);
    assert_eq!(l["snapshots"][0]["name"], "before");
    assert!(l["kept_bytes"].as_u64().unwrap() >= big.len() as u64, "{l}");
    let (ok, out, err) = nodectl(&node, &["snapshot", "delete", "root", B, "before"]);
    assert!(ok, "{err}");
    assert!(out.contains("deleted"), "{out}");
    assert_eq!(
        get(&c, ".snapshot/before/a.txt").await.unwrap_err(),
        "NoSuchKey"
    );
    let l = nodectl_json(&node, &["snapshot", "list", "root", B]);
    assert_eq!(
        (l["kept_versions"].as_u64(), l["kept_bytes"].as_u64()),
        (Some(0), Some(0))
    );
    c.delete_bucket().bucket(B).send().await.unwrap();
}

/// The same snapshots over NFS, where a NAS keeps them: `.snapshot/NAME/` in
/// the export's root (not listed there, reached by name), read-only.
#[tokio::test]
async fn a_snapshot_reads_over_nfs_under_dot_snapshot() {
    use crate::nfs::{setup, LOCAL};
    use cairn_it::nfs::Mount;
    use nfs3_client::nfs3_types::nfs3::{nfsstat3::NFS3ERR_ROFS, stable_how};
    let s = setup("nas").await;
    let c = s.node.client();
    for (k, v) in [("a.txt", "one"), ("d/b.txt", "two")] {
        put(&c, "nas", k, v.as_bytes()).await;
    }
    s.api.create_snapshot("root", "nas", "s1").await.unwrap();
    put(&c, "nas", "a.txt", b"ONE").await;
    c.delete_object()
        .bucket("nas")
        .key("d/b.txt")
        .send()
        .await
        .unwrap();

    let mut m = Mount::new(s.nfs, "/root/nas", LOCAL).await.unwrap();
    let a = m.walk(".snapshot/s1/a.txt").await.unwrap();
    assert_eq!(m.read_all(&a).await.unwrap(), b"one");
    let b = m.walk(".snapshot/s1/d/b.txt").await.unwrap();
    assert_eq!(m.read_all(&b).await.unwrap(), b"two");
    let now = m.walk("a.txt").await.unwrap();
    assert_eq!(m.read_all(&now).await.unwrap(), b"ONE");
    let root = m.walk("").await.unwrap();
    assert_eq!(m.names(&root, 4096).await.unwrap(), ["a.txt"]);
    let snaps = m.walk(".snapshot").await.unwrap();
    assert_eq!(m.names(&snaps, 4096).await.unwrap(), ["s1"]);
    let s1 = m.walk(".snapshot/s1").await.unwrap();
    assert_eq!(m.names(&s1, 4096).await.unwrap(), ["a.txt", "d"]);

    // Read-only, whatever the call.
    assert_eq!(m.create(&s1, "new").await, Err(NFS3ERR_ROFS));
    assert_eq!(m.mkdir(&s1, "dir").await, Err(NFS3ERR_ROFS));
    let w = m.write(&a, 0, b"x", stable_how::FILE_SYNC).await;
    assert_eq!(w.map(|_| ()), Err(NFS3ERR_ROFS));
    assert_eq!(m.remove(&s1, "a.txt").await, Err(NFS3ERR_ROFS));
    assert_eq!(
        m.rename(&root, "a.txt", &s1, "a.txt").await,
        Err(NFS3ERR_ROFS)
    );
    assert_eq!(
        m.rename(&s1, "a.txt", &root, "back").await,
        Err(NFS3ERR_ROFS)
    );
    assert!(m.create(&root, ".snapshot").await.is_err());
    assert_eq!(m.read_all(&a).await.unwrap(), b"one");
}

/// Bytes rotted in the replicas of an object only a snapshot keeps (deleted
/// from the bucket since) are found and rebuilt by one scrub pass, as a live
/// object's are; the snapshot reads it whole with no degraded read.
#[tokio::test]
async fn the_scrubber_mends_what_only_a_snapshot_keeps() {
    use cairn_it::{find_on_drives, flip, random_bytes, PLAINTEXT_ROOT};
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![PLAINTEXT_ROOT],
        drive_size: "64M",
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket(B).send().await.unwrap();
    let small = random_bytes(50_000, 77);
    put(&c, B, "kept", &small).await;
    nodectl_json(&node, &["snapshot", "create", "root", B, "s"]);
    c.delete_object()
        .bucket(B)
        .key("kept")
        .send()
        .await
        .unwrap();

    let hits = find_on_drives(&node, &small[..64]);
    assert_eq!(hits.len(), 3, "three replicas");
    for &(d, off) in &hits[..2] {
        flip(&node, d, off + 5);
    }
    let before = node.admin("GET", "/v1/scrub")["passes"].as_u64().unwrap();
    node.admin("POST", "/v1/scrub/start");
    let pass = node.wait_scrub_passes(before + 1).await["last"].clone();
    assert_eq!(
        (pass["bad"].as_u64(), pass["repaired"].as_u64()),
        (Some(2), Some(2)),
        "{pass}"
    );
    let degraded = node.status()["degraded_reads"].as_u64().unwrap();
    assert_eq!(get(&c, ".snapshot/s/kept").await.unwrap(), small);
    assert_eq!(node.status()["degraded_reads"].as_u64().unwrap(), degraded);
}
