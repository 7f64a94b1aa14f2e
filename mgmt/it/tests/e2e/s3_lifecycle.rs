//! S3 lifecycle rules carried out (with seconds for days), through
//! `aws-sdk-s3`, and the versioning state and version listing of buckets that
//! keep one version per key (versioning enabled: `s3_versioning.rs`).

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, BucketVersioningStatus,
    ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleAndOperator,
    LifecycleRuleFilter, Tag, Transition, TransitionStorageClass, VersioningConfiguration,
};
use aws_sdk_s3::Client;
use cairn_it::{code, Node, NodeOptions};

#[tokio::test]
async fn unversioned_buckets_list_their_null_versions() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("vers").send().await.unwrap();
    for k in ["a", "b", "dir/c", "dir/d", "e"] {
        c.put_object()
            .bucket("vers")
            .key(k)
            .body(ByteStream::from(k.as_bytes().to_vec()))
            .send()
            .await
            .unwrap();
    }

    // Never configured: no Status. Suspending keeps the null versions as they are.
    let v = c
        .get_bucket_versioning()
        .bucket("vers")
        .send()
        .await
        .unwrap();
    assert_eq!(v.status(), None);
    let conf = |s| VersioningConfiguration::builder().status(s).build();
    c.put_bucket_versioning()
        .bucket("vers")
        .versioning_configuration(conf(BucketVersioningStatus::Suspended))
        .send()
        .await
        .unwrap();
    let v = c
        .get_bucket_versioning()
        .bucket("vers")
        .send()
        .await
        .unwrap();
    assert_eq!(v.status(), Some(&BucketVersioningStatus::Suspended));
    let r = c.get_bucket_versioning().bucket("nope").send().await;
    assert_eq!(code(r), "NoSuchBucket");

    // Paged two at a time, with a delimiter: every key once, as the null version.
    let (mut keys, mut prefixes) = (Vec::new(), Vec::new());
    let (mut key_marker, mut version_marker) = (None::<String>, None::<String>);
    loop {
        let page = c
            .list_object_versions()
            .bucket("vers")
            .delimiter("/")
            .max_keys(2)
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(version_marker.clone())
            .send()
            .await
            .unwrap();
        for v in page.versions() {
            assert_eq!(v.version_id(), Some("null"));
            assert_eq!(v.is_latest(), Some(true));
            keys.push(v.key().unwrap().to_string());
        }
        prefixes.extend(
            page.common_prefixes()
                .iter()
                .map(|p| p.prefix().unwrap().to_string()),
        );
        assert!(page.delete_markers().is_empty());
        if page.is_truncated() != Some(true) {
            break;
        }
        key_marker = page.next_key_marker().map(str::to_string);
        version_marker = page.next_version_id_marker().map(str::to_string);
    }
    assert_eq!(keys, ["a", "b", "e"]);
    assert_eq!(prefixes, ["dir/"]);

    let r = c
        .list_object_versions()
        .bucket("vers")
        .version_id_marker("null")
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");
    let r = c
        .list_object_versions()
        .bucket("vers")
        .key_marker("a")
        .version_id_marker("3HL4kqtJlcpXroDTDmJ")
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");
}

fn rule(
    id: &str,
    filter: LifecycleRuleFilter,
) -> aws_sdk_s3::types::builders::LifecycleRuleBuilder {
    LifecycleRule::builder()
        .id(id)
        .status(ExpirationStatus::Enabled)
        .filter(filter)
}

fn prefix(p: &str) -> LifecycleRuleFilter {
    LifecycleRuleFilter::builder().prefix(p).build()
}

fn expire_after(days: i32) -> LifecycleExpiration {
    LifecycleExpiration::builder().days(days).build()
}

async fn exists(c: &Client, b: &str, k: &str) -> bool {
    c.head_object().bucket(b).key(k).send().await.is_ok()
}

#[tokio::test]
async fn lifecycle_rules_expire_objects_and_abort_uploads() {
    // A lifecycle day lasts a second here, and the worker runs every second.
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_LIFECYCLE_DAY", "1"), ("CAIRN_LIFECYCLE_EVERY", "1")],
        ..NodeOptions::default()
    });
    let c = node.client();
    c.create_bucket().bucket("life").send().await.unwrap();
    let r = c
        .get_bucket_lifecycle_configuration()
        .bucket("life")
        .send()
        .await;
    assert_eq!(code(r), "NoSuchLifecycleConfiguration");

    // Configurations AWS refuses are refused, whole.
    let put = |rules: Vec<LifecycleRule>| {
        c.put_bucket_lifecycle_configuration()
            .bucket("life")
            .lifecycle_configuration(
                BucketLifecycleConfiguration::builder()
                    .set_rules(Some(rules))
                    .build()
                    .unwrap(),
            )
            .send()
    };
    let zero = rule("zero", prefix(""))
        .expiration(expire_after(0))
        .build()
        .unwrap();
    assert_eq!(code(put(vec![zero]).await), "InvalidArgument");
    let noon = LifecycleExpiration::builder()
        .date(aws_sdk_s3::primitives::DateTime::from_secs(
            86_400 * 20_000 + 43_200,
        ))
        .build();
    let noon = rule("noon", prefix("")).expiration(noon).build().unwrap();
    assert_eq!(code(put(vec![noon]).await), "InvalidArgument");
    let nothing = rule("nothing", prefix("")).build().unwrap();
    assert_eq!(code(put(vec![nothing]).await), "InvalidArgument");
    let tagged_abort = rule(
        "tagged-abort",
        LifecycleRuleFilter::builder()
            .tag(Tag::builder().key("a").value("b").build().unwrap())
            .build(),
    )
    .abort_incomplete_multipart_upload(
        AbortIncompleteMultipartUpload::builder()
            .days_after_initiation(1)
            .build(),
    )
    .build()
    .unwrap();
    assert_eq!(code(put(vec![tagged_abort]).await), "InvalidArgument");
    let glacier = rule("glacier", prefix(""))
        .transitions(
            Transition::builder()
                .days(30)
                .storage_class(TransitionStorageClass::Glacier)
                .build(),
        )
        .build()
        .unwrap();
    assert_eq!(code(put(vec![glacier]).await), "NotImplemented");
    let tab_tag = rule(
        "tab",
        LifecycleRuleFilter::builder()
            .tag(Tag::builder().key("k").value("a\tb").build().unwrap())
            .build(),
    )
    .expiration(expire_after(1))
    .build()
    .unwrap();
    assert_eq!(code(put(vec![tab_tag]).await), "InvalidTag");
    let twice = vec![
        rule("same", prefix("a/"))
            .expiration(expire_after(1))
            .build()
            .unwrap(),
        rule("same", prefix("b/"))
            .expiration(expire_after(1))
            .build()
            .unwrap(),
    ];
    assert_eq!(code(put(twice).await), "InvalidArgument");

    for (key, tagging) in [
        ("logs/1", None),
        ("logs/2", None),
        ("tmp/scratch", Some("class=scratch")),
        ("tmp/kept", Some("class=final")),
        ("later/x", None),
        ("keep/y", None),
    ] {
        c.put_object()
            .bucket("life")
            .key(key)
            .set_tagging(tagging.map(str::to_string))
            .body(ByteStream::from(key.as_bytes().to_vec()))
            .send()
            .await
            .unwrap();
    }
    let up = c
        .create_multipart_upload()
        .bucket("life")
        .key("uploads/big")
        .send()
        .await
        .unwrap();

    let scratch = LifecycleRuleFilter::builder()
        .and(
            LifecycleRuleAndOperator::builder()
                .prefix("tmp/")
                .tags(
                    Tag::builder()
                        .key("class")
                        .value("scratch")
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .build();
    let rules = vec![
        rule("logs", prefix("logs/"))
            .expiration(expire_after(2))
            .build()
            .unwrap(),
        rule("scratch", scratch)
            .expiration(expire_after(1))
            .build()
            .unwrap(),
        rule("later", prefix("later/"))
            .expiration(expire_after(100_000))
            .build()
            .unwrap(),
        rule("uploads", prefix(""))
            .abort_incomplete_multipart_upload(
                AbortIncompleteMultipartUpload::builder()
                    .days_after_initiation(1)
                    .build(),
            )
            .build()
            .unwrap(),
        LifecycleRule::builder()
            .id("off")
            .status(ExpirationStatus::Disabled)
            .filter(prefix("keep/"))
            .expiration(expire_after(1))
            .build()
            .unwrap(),
    ];
    put(rules).await.unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("life")
        .send()
        .await
        .unwrap();
    let ids: Vec<&str> = got.rules().iter().filter_map(|r| r.id()).collect();
    assert_eq!(ids, ["logs", "scratch", "later", "uploads", "off"]);

    // Within a few passes: what the rules select is gone, nothing else.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let uploads = c
            .list_multipart_uploads()
            .bucket("life")
            .send()
            .await
            .unwrap();
        let done = !exists(&c, "life", "logs/1").await
            && !exists(&c, "life", "logs/2").await
            && !exists(&c, "life", "tmp/scratch").await
            && uploads.uploads().is_empty();
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "lifecycle did not act within 30 s: {}",
            node.status()
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    for key in ["tmp/kept", "later/x", "keep/y"] {
        assert!(exists(&c, "life", key).await, "{key} was expired");
    }
    let r = c
        .upload_part()
        .bucket("life")
        .key("uploads/big")
        .upload_id(up.upload_id().unwrap())
        .part_number(1)
        .body(ByteStream::from_static(b"late"))
        .send()
        .await;
    assert_eq!(code(r), "NoSuchUpload");
    let status = node.status();
    assert!(
        status["lifecycle"]["expired"].as_u64().unwrap() >= 3,
        "{status}"
    );
    assert!(
        status["lifecycle"]["aborted"].as_u64().unwrap() >= 1,
        "{status}"
    );

    // What GetBucketLifecycleConfiguration answers can be put back as it is
    // (read-modify-write clients), filters of one condition included.
    let one_tag = LifecycleRuleFilter::builder()
        .tag(Tag::builder().key("class").value("tmp").build().unwrap())
        .build();
    let one_size = LifecycleRuleFilter::builder()
        .object_size_greater_than(100)
        .build();
    put(vec![
        rule("by-tag", one_tag)
            .expiration(expire_after(100_000))
            .build()
            .unwrap(),
        rule("by-size", one_size)
            .expiration(expire_after(100_000))
            .build()
            .unwrap(),
    ])
    .await
    .unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("life")
        .send()
        .await
        .unwrap();
    put(got.rules().to_vec()).await.unwrap();
    // Incomplete uploads are filtered by prefix only, as in AWS.
    let sized_abort = rule(
        "sized-abort",
        LifecycleRuleFilter::builder()
            .and(
                LifecycleRuleAndOperator::builder()
                    .prefix("keep/")
                    .object_size_greater_than(1 << 40)
                    .build(),
            )
            .build(),
    )
    .abort_incomplete_multipart_upload(
        AbortIncompleteMultipartUpload::builder()
            .days_after_initiation(1)
            .build(),
    )
    .build()
    .unwrap();
    assert_eq!(code(put(vec![sized_abort]).await), "InvalidArgument");

    // Removed: nothing more expires.
    c.delete_bucket_lifecycle()
        .bucket("life")
        .send()
        .await
        .unwrap();
    let r = c
        .get_bucket_lifecycle_configuration()
        .bucket("life")
        .send()
        .await;
    assert_eq!(code(r), "NoSuchLifecycleConfiguration");
}
