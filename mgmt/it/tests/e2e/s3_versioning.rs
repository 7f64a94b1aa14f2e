//! S3 versioning through `aws-sdk-s3` against a real node: versions kept and
//! read by id, delete markers (404 with `x-amz-delete-marker`, 405 by id),
//! deletes by version id bringing the one before back, versioned copies and
//! multipart uploads, the listing, and every version still there, and readable
//! byte for byte, after mgmtd is killed and started again.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier,
    VersioningConfiguration,
};
use aws_sdk_s3::Client;
use cairn_it::{code, Node, NodeOptions};

const B: &str = "versioned";

/// Bucket `B`, made with versioning enabled.
async fn versioned_bucket(c: &Client) {
    c.create_bucket().bucket(B).send().await.unwrap();
    c.put_bucket_versioning()
        .bucket(B)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
}

async fn put(c: &Client, key: &str, body: &[u8]) -> String {
    c.put_object()
        .bucket(B)
        .key(key)
        .body(ByteStream::from(body.to_vec()))
        .send()
        .await
        .unwrap()
        .version_id()
        .expect("a version id")
        .to_string()
}

async fn get(c: &Client, key: &str, version: Option<&str>) -> Vec<u8> {
    c.get_object()
        .bucket(B)
        .key(key)
        .set_version_id(version.map(str::to_string))
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .to_vec()
}

/// (key, version id, latest, is a delete marker), in the order listed.
async fn versions(c: &Client) -> Vec<(String, String, bool, bool)> {
    let l = c.list_object_versions().bucket(B).send().await.unwrap();
    let mut out: Vec<_> = l
        .versions()
        .iter()
        .map(|v| {
            (
                v.key().unwrap().into(),
                v.version_id().unwrap().into(),
                v.is_latest().unwrap(),
                false,
            )
        })
        .chain(l.delete_markers().iter().map(|m| {
            (
                m.key().unwrap().into(),
                m.version_id().unwrap().into(),
                m.is_latest().unwrap(),
                true,
            )
        }))
        .collect();
    // Newest first within a key: version ids are ordered.
    out.sort_by(|a: &(String, String, bool, bool), b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    out
}

#[tokio::test]
async fn versions_are_kept_read_deleted_and_survive_a_restart() {
    let mut node = Node::start(NodeOptions::default());
    let c = node.client();
    versioned_bucket(&c).await;
    let s = c.get_bucket_versioning().bucket(B).send().await.unwrap();
    assert_eq!(s.status(), Some(&BucketVersioningStatus::Enabled));

    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
    let v1 = put(&c, "k", b"one").await;
    let v2 = put(&c, "k", &big).await;
    assert_ne!(v1, v2);
    assert_eq!(get(&c, "k", None).await, big);
    assert_eq!(get(&c, "k", Some(&v1)).await, b"one");
    let h = c
        .head_object()
        .bucket(B)
        .key("k")
        .version_id(&v1)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (h.content_length(), h.version_id()),
        (Some(3), Some(v1.as_str()))
    );
    let r = c
        .get_object()
        .bucket(B)
        .key("k")
        .version_id("00000000000000099999")
        .send()
        .await;
    assert_eq!(code(r), "NoSuchVersion");
    let r = c
        .get_object()
        .bucket(B)
        .key("k")
        .version_id("not-a-version")
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");

    // A copy of an old version, and a multipart upload: versions of their own.
    let cp = c
        .copy_object()
        .bucket(B)
        .key("copy")
        .copy_source(format!("{B}/k?versionId={v1}"))
        .send()
        .await
        .unwrap();
    assert_eq!(cp.copy_source_version_id(), Some(v1.as_str()));
    assert_eq!(get(&c, "copy", None).await, b"one");
    let up = c
        .create_multipart_upload()
        .bucket(B)
        .key("k")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = c
        .upload_part()
        .bucket(B)
        .key("k")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from_static(b"three"))
        .send()
        .await
        .unwrap();
    let done = c
        .complete_multipart_upload()
        .bucket(B)
        .key("k")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let v3 = done.version_id().unwrap().to_string();

    // A delete makes a marker: GET is 404 with the marker's headers, the
    // versions are still there, and GET of the marker by id is 405.
    let d = c.delete_object().bucket(B).key("k").send().await.unwrap();
    assert_eq!(d.delete_marker(), Some(true));
    let marker = d.version_id().unwrap().to_string();
    match c.get_object().bucket(B).key("k").send().await {
        Err(SdkError::ServiceError(e)) => {
            assert_eq!(e.err().code(), Some("NoSuchKey"));
            let h = e.raw().headers();
            assert_eq!(h.get("x-amz-delete-marker"), Some("true"));
            assert_eq!(h.get("x-amz-version-id"), Some(marker.as_str()));
        }
        r => panic!("GET of a deleted key: {r:?}"),
    }
    let r = c
        .get_object()
        .bucket(B)
        .key("k")
        .version_id(&marker)
        .send()
        .await;
    assert_eq!(code(r), "MethodNotAllowed");
    assert_eq!(get(&c, "k", Some(&v2)).await, big);
    let listed = versions(&c).await;
    assert_eq!(
        listed,
        vec![
            ("copy".into(), listed[0].1.clone(), true, false),
            ("k".into(), marker.clone(), true, true),
            ("k".into(), v3.clone(), false, false),
            ("k".into(), v2.clone(), false, false),
            ("k".into(), v1.clone(), false, false),
        ]
    );
    let r = c.delete_bucket().bucket(B).send().await;
    assert_eq!(code(r), "BucketNotEmpty");

    // Kill -9 and start again: every version is still there, byte for byte.
    node.kill_mgmtd();
    node.start_mgmtd();
    let c = node.client();
    assert_eq!(versions(&c).await, listed);
    assert_eq!(get(&c, "k", Some(&v2)).await, big);
    assert_eq!(get(&c, "k", Some(&v3)).await, b"three");

    // Deleting the marker brings v3 back; deleting v3 by id brings v2 back.
    let d = c
        .delete_object()
        .bucket(B)
        .key("k")
        .version_id(&marker)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (d.delete_marker(), d.version_id()),
        (Some(true), Some(marker.as_str()))
    );
    assert_eq!(get(&c, "k", None).await, b"three");
    c.delete_object()
        .bucket(B)
        .key("k")
        .version_id(&v3)
        .send()
        .await
        .unwrap();
    assert_eq!(get(&c, "k", None).await, big);

    // Emptying the bucket through its versions, as backup and cleanup tools do.
    let objects: Vec<ObjectIdentifier> = versions(&c)
        .await
        .into_iter()
        .map(|(k, v, _, _)| {
            ObjectIdentifier::builder()
                .key(k)
                .version_id(v)
                .build()
                .unwrap()
        })
        .collect();
    let out = c
        .delete_objects()
        .bucket(B)
        .delete(
            Delete::builder()
                .set_objects(Some(objects))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert!(out.errors().is_empty(), "{:?}", out.errors());
    assert_eq!(out.deleted().len(), 3);
    assert!(versions(&c).await.is_empty());
    c.delete_bucket().bucket(B).send().await.unwrap();
}

#[tokio::test]
async fn lifecycle_takes_noncurrent_versions_and_lone_markers() {
    use aws_sdk_s3::types::{
        BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
        LifecycleRuleFilter, NoncurrentVersionExpiration,
    };
    // A lifecycle day lasts a second here, and the worker runs every second.
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_LIFECYCLE_DAY", "1"), ("CAIRN_LIFECYCLE_EVERY", "1")],
        ..NodeOptions::default()
    });
    let c = node.client();
    versioned_bucket(&c).await;
    // n/: four versions, of which the rule keeps the current and the newest
    // noncurrent one. m/: a delete marker left alone, removed. cur/: expiry
    // of the current version makes a marker and keeps the bytes. keep/: no rule.
    let mut n = Vec::new();
    for i in 0..4 {
        n.push(put(&c, "n/doc", format!("v{i}").as_bytes()).await);
    }
    let m = put(&c, "m/gone", b"m").await;
    c.delete_object()
        .bucket(B)
        .key("m/gone")
        .send()
        .await
        .unwrap();
    c.delete_object()
        .bucket(B)
        .key("m/gone")
        .version_id(&m)
        .send()
        .await
        .unwrap();
    let cur = put(&c, "cur/x", b"cur").await;
    put(&c, "d/x", b"d").await;
    put(&c, "keep/a", b"k1").await;
    put(&c, "keep/a", b"k2").await;
    let rule = |id: &str, p: &str| {
        LifecycleRule::builder()
            .id(id)
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix(p).build())
    };
    let rules = vec![
        rule("n", "n/")
            .noncurrent_version_expiration(
                NoncurrentVersionExpiration::builder()
                    .noncurrent_days(1)
                    .newer_noncurrent_versions(1)
                    .build(),
            )
            .build()
            .unwrap(),
        rule("m", "m/")
            .expiration(
                LifecycleExpiration::builder()
                    .expired_object_delete_marker(true)
                    .build(),
            )
            .build()
            .unwrap(),
        rule("cur", "cur/")
            .expiration(LifecycleExpiration::builder().days(1).build())
            .build()
            .unwrap(),
        // Expiry by days makes a marker, the old version goes, then the marker,
        // left alone, goes too (S3 does that "when the markers are old enough").
        rule("d", "d/")
            .expiration(LifecycleExpiration::builder().days(1).build())
            .noncurrent_version_expiration(
                NoncurrentVersionExpiration::builder()
                    .noncurrent_days(1)
                    .build(),
            )
            .build()
            .unwrap(),
    ];
    let r = c
        .put_bucket_lifecycle_configuration()
        .bucket(B)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(
                    rule("zero", "z/")
                        .noncurrent_version_expiration(
                            NoncurrentVersionExpiration::builder()
                                .noncurrent_days(1)
                                .newer_noncurrent_versions(0)
                                .build(),
                        )
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");
    c.put_bucket_lifecycle_configuration()
        .bucket(B)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .set_rules(Some(rules))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let want = |v: &[(String, String, bool, bool)]| {
        let ids = |k: &str| v.iter().filter(|e| e.0 == k).count();
        ids("n/doc") == 2
            && ids("m/gone") == 0
            && ids("cur/x") == 2
            && ids("keep/a") == 2
            && ids("d/x") == 0
    };
    let t = std::time::Instant::now();
    let mut listed = versions(&c).await;
    while !want(&listed) {
        assert!(
            t.elapsed().as_secs() < 30,
            "lifecycle did not act: {listed:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        listed = versions(&c).await;
    }
    // n/doc: the current version and the newest noncurrent one, bytes intact.
    let n_left: Vec<&str> = listed
        .iter()
        .filter(|e| e.0 == "n/doc")
        .map(|e| e.1.as_str())
        .collect();
    assert_eq!(n_left, [n[3].as_str(), n[2].as_str()]);
    assert_eq!(get(&c, "n/doc", Some(&n[2])).await, b"v2");
    // cur/x: a delete marker on top, the bytes still there by version id.
    let r = c.get_object().bucket(B).key("cur/x").send().await;
    assert_eq!(code(r), "NoSuchKey");
    assert_eq!(get(&c, "cur/x", Some(&cur)).await, b"cur");
}
