//! Tenants' data sealed at rest, from the outside: objects written with a known
//! marker through aws-sdk-s3 are found in plaintext on the raw drive files only
//! for a tenant made with `--no-encryption`; an encrypted tenant's and the root's
//! read back intact (whole, ranged, multipart, copied) but never appear on the
//! drives. `nodectl tenant delete --purge` destroys the tenant's key with its
//! buckets at once, and a node whose master key file is missing or not the one
//! the tenants' keys were wrapped with refuses to start, leaving the file alone.
//! Access keys' secrets are not in the metadata file in the clear.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use cairn_it::tenant::{key_client, nodectl, nodectl_json, put};
use cairn_it::{find_on_drives, get_bytes, Node, NodeOptions};

/// A body of `len` bytes made of `marker` repeated, with a counter so that no
/// two blocks of it are alike (ciphertext of repeated blocks must not repeat).
fn marked(marker: &str, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(format!("{marker}{i:012}|").as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Small (replicated), large (erasure coded) and multipart objects.
async fn write_all(c: &Client, bucket: &str, marker: &str) -> Vec<(String, Vec<u8>)> {
    c.create_bucket().bucket(bucket).send().await.unwrap();
    let mut out = Vec::new();
    for (key, len) in [("small", 3000), ("large", 5 << 20)] {
        let body = marked(marker, len);
        put(c, bucket, key, &body).await;
        out.push((key.to_string(), body));
    }
    let body = marked(marker, 11 << 20);
    let up = c
        .create_multipart_upload()
        .bucket(bucket)
        .key("multi")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let mut parts = Vec::new();
    for (n, chunk) in body.chunks(5 << 20).enumerate() {
        let p = c
            .upload_part()
            .bucket(bucket)
            .key("multi")
            .upload_id(id)
            .part_number(n as i32 + 1)
            .body(ByteStream::from(chunk.to_vec()))
            .send()
            .await
            .unwrap();
        parts.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(n as i32 + 1)
                .e_tag(p.e_tag().unwrap())
                .build(),
        );
    }
    c.complete_multipart_upload()
        .bucket(bucket)
        .key("multi")
        .upload_id(id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await
        .unwrap();
    out.push(("multi".to_string(), body));
    c.copy_object()
        .bucket(bucket)
        .key("copied")
        .copy_source(format!("{bucket}/large"))
        .send()
        .await
        .unwrap();
    out.push(("copied".to_string(), out[1].1.clone()));
    out
}

async fn read_back(c: &Client, bucket: &str, objects: &[(String, Vec<u8>)]) {
    for (key, body) in objects {
        let got = get_bytes(c, bucket, key).await.unwrap();
        assert!(got == *body, "{bucket}/{key} read back different bytes");
        // A range across a fragment boundary and into the next stripe.
        let (a, b) = (
            body.len() / 3,
            (body.len() / 3 + 1_500_000).min(body.len() - 1),
        );
        let r = c
            .get_object()
            .bucket(bucket)
            .key(key)
            .range(format!("bytes={a}-{b}"))
            .send()
            .await
            .unwrap();
        let got = r.body.collect().await.unwrap().into_bytes();
        assert!(got[..] == body[a..=b], "{bucket}/{key} range {a}-{b}");
    }
}

#[tokio::test]
async fn tenant_data_is_sealed_at_rest_and_shredded_with_its_key() {
    let mut node = Node::start(NodeOptions::default());
    let acme = nodectl_json(&node, &["tenant", "create", "acme"]);
    assert_eq!(acme["key_id"], 1, "{acme}");
    let plain = nodectl_json(&node, &["tenant", "create", "plain", "--no-encryption"]);
    assert!(plain["key_id"].is_null(), "{plain}");
    let (_, listed, _) = nodectl(&node, &["tenant", "list"]);
    assert!(
        listed.contains("encrypted") && listed.contains("plaintext"),
        "{listed}"
    );
    nodectl_json(&node, &["user", "create", "acme", "alice"]);
    nodectl_json(&node, &["user", "create", "plain", "pat"]);
    let (alice, _) = key_client(&node, "acme", "alice");
    let (pat, _) = key_client(&node, "plain", "pat");
    // Access keys' secrets are kept wrapped by the master key, not in the clear.
    let k = nodectl_json(&node, &["key", "create", "plain", "pat"]);
    let secret = k["secret_key"].as_str().unwrap().as_bytes().to_vec();
    let db = std::fs::read(node.state_dir().join("meta.redb")).unwrap();
    assert!(
        !db.windows(secret.len()).any(|w| w == secret),
        "an access key's secret is in the metadata file in the clear"
    );
    let root = node.client();

    let acme_objs = write_all(&alice, "vault", "ACME-SECRET-MARKER-").await;
    let root_objs = write_all(&root, "rootdata", "ROOT-SECRET-MARKER-").await;
    let plain_objs = write_all(&pat, "open", "PLAIN-VISIBLE-MARKER-").await;
    read_back(&alice, "vault", &acme_objs).await;
    read_back(&root, "rootdata", &root_objs).await;
    read_back(&pat, "open", &plain_objs).await;

    // The raw drives: the unencrypted tenant's marker is there (the scan sees
    // plaintext when there is some); the others' never are.
    assert!(!find_on_drives(&node, b"PLAIN-VISIBLE-MARKER-").is_empty());
    assert!(find_on_drives(&node, b"ACME-SECRET-MARKER-").is_empty());
    assert!(find_on_drives(&node, b"ROOT-SECRET-MARKER-").is_empty());

    // Survives a restart: the master key file is read again, the keys open.
    node.restart();
    read_back(&alice, "vault", &acme_objs[..1]).await;
    read_back(&root, "rootdata", &root_objs[2..3]).await;

    // A plain delete is refused while the tenant holds buckets; --purge goes.
    let (ok, _, err) = nodectl(&node, &["tenant", "delete", "acme"]);
    assert!(!ok && err.contains("vault"), "{err}");
    let before = chunks(&node);
    let (ok, out, err) = nodectl(&node, &["tenant", "delete", "acme", "--purge"]);
    assert!(ok, "{err}");
    assert!(out.contains("destroyed"), "{out}");
    // Its chunks are deleted (under its own tenant id, which the drives check)
    // once the grace for reads in progress is over, not left for the collector.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while chunks(&node) + 40 > before {
        assert!(
            std::time::Instant::now() < deadline,
            "the purged tenant's chunks are still there: {before} before, {} now",
            chunks(&node)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (ok, _, err) = nodectl(&node, &["tenant", "show", "acme"]);
    assert!(!ok && err.contains("no such tenant"), "{err}");
    let e = alice.list_buckets().send().await.unwrap_err();
    assert!(format!("{e:?}").contains("InvalidAccessKeyId"), "{e:?}");
    // The root sees none of it; a new tenant of the same name is a new tenant.
    assert!(get_bytes(&root, "vault", "small").await.is_err());
    nodectl_json(&node, &["tenant", "create", "acme"]);
    nodectl_json(&node, &["user", "create", "acme", "alice"]);
    let (alice2, _) = key_client(&node, "acme", "alice");
    let r = alice2.list_buckets().send().await.unwrap();
    assert!(r.buckets().is_empty());
    assert!(find_on_drives(&node, b"ACME-SECRET-MARKER-").is_empty());

    // The master key: missing, or another one, and the node does not start; the
    // file found is left as it was.
    refuses_without_its_master_key(&mut node, "missing", "is not the one");
    read_back(&root, "rootdata", &root_objs[..1]).await;
}

/// Stops the node, then starts it with its master key file missing and with
/// another key in its place: both starts must fail (saying `missing` and
/// `wrong`) and leave the file as found; then starts it with its own key again.
fn refuses_without_its_master_key(node: &mut Node, missing: &str, wrong: &str) {
    node.stop();
    let path = node.state_dir().join("master.key");
    let good = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let why = start_fails(node);
    assert!(why.contains("master key") && why.contains(missing), "{why}");
    assert!(!path.exists(), "a missing master key must not be replaced");
    let other = "ab".repeat(32);
    std::fs::write(&path, &other).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let why = start_fails(node);
    assert!(why.contains(wrong), "{why}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), other);
    std::fs::write(&path, &good).unwrap();
    node.start_datapathd();
    node.start_mgmtd();
}

/// Chunks on the node's drives.
fn chunks(node: &Node) -> u64 {
    node.status()["drives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["chunks"].as_u64().unwrap())
        .sum()
}

/// Starts mgmtd expecting it to stop at start-up; returns what it logged.
fn start_fails(node: &mut Node) -> String {
    node.start_datapathd();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.start_mgmtd()));
    node.kill_datapathd();
    match r {
        Ok(()) => panic!("mgmtd started"),
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "a panic without a message".into()),
    }
}

/// A node that never held a tenant key still has a master key the cluster
/// recorded, and access keys' secrets wrapped by it: with the file gone or
/// replaced it refuses to start instead of making a new one (which would open
/// none of the secrets, and split a cluster between two keys).
#[tokio::test]
async fn a_lost_master_key_is_never_silently_replaced() {
    let mut node = Node::start(NodeOptions {
        mgmtd_env: vec![cairn_it::PLAINTEXT_ROOT],
        ..NodeOptions::default()
    });
    nodectl_json(&node, &["tenant", "create", "plain", "--no-encryption"]);
    nodectl_json(&node, &["user", "create", "plain", "pat"]);
    let (pat, _) = key_client(&node, "plain", "pat");
    pat.create_bucket().bucket("kept").send().await.unwrap();
    put(&pat, "kept", "k", b"kept").await;
    // Purging a plaintext tenant promises no crypto-shredding.
    let (ok, out, err) = nodectl(&node, &["tenant", "delete", "plain", "--purge"]);
    assert!(ok && out.contains("in the clear"), "{out}{err}");
    nodectl_json(&node, &["tenant", "create", "plain2", "--no-encryption"]);
    nodectl_json(&node, &["user", "create", "plain2", "pat"]);
    let (pat, _) = key_client(&node, "plain2", "pat");
    pat.create_bucket().bucket("kept").send().await.unwrap();
    put(&pat, "kept", "k", b"kept").await;

    refuses_without_its_master_key(
        &mut node,
        "the cluster's master key is",
        "is not the one the cluster recorded",
    );
    // The key made before the restarts still signs.
    assert_eq!(get_bytes(&pat, "kept", "k").await.unwrap(), b"kept");
}
