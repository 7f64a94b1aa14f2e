//! S3's data services as `aws-sdk-s3` and a browser use them: object and bucket
//! tagging (with AWS's limits, through copies, multipart and a restart), CORS
//! (configuration, preflights, and the headers on answers), lifecycle rules
//! carried out (with seconds for days), and the versioning state and version
//! listing of buckets that keep one version per key.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, BucketVersioningStatus,
    CompletedMultipartUpload, CompletedPart, CorsConfiguration, CorsRule, ExpirationStatus,
    LifecycleExpiration, LifecycleRule, LifecycleRuleAndOperator, LifecycleRuleFilter, Tag,
    Tagging, TaggingDirective, Transition, TransitionStorageClass, VersioningConfiguration,
};
use aws_sdk_s3::Client;
use cairn_it::raw::{send_raw, signed_request, Payload};
use cairn_it::{Node, NodeOptions};
use std::collections::BTreeMap;

fn code<T, E: ProvideErrorMetadata>(r: Result<T, SdkError<E>>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.code().unwrap_or("").to_string(),
    }
}

async fn tags(c: &Client, b: &str, k: &str) -> BTreeMap<String, String> {
    c.get_object_tagging()
        .bucket(b)
        .key(k)
        .send()
        .await
        .unwrap()
        .tag_set()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect()
}

fn tag_set(pairs: &[(&str, &str)]) -> Tagging {
    let mut t = Tagging::builder();
    for (k, v) in pairs {
        t = t.tag_set(Tag::builder().key(*k).value(*v).build().unwrap());
    }
    t.build().unwrap()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn objects_and_buckets_keep_their_tags() {
    let mut node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("tags").send().await.unwrap();

    // Tags given with the PUT (a URL-encoded header) are kept and counted on GET.
    c.put_object()
        .bucket("tags")
        .key("a")
        .tagging("project=blue sky&team=ops/storage")
        .body(ByteStream::from_static(b"alpha"))
        .send()
        .await
        .unwrap();
    let want = map(&[("project", "blue sky"), ("team", "ops/storage")]);
    assert_eq!(tags(&c, "tags", "a").await, want);
    let got = c.get_object().bucket("tags").key("a").send().await.unwrap();
    assert_eq!(got.tag_count(), Some(2));

    // Replaced, then removed; the bytes and metadata stay.
    c.put_object_tagging()
        .bucket("tags")
        .key("a")
        .tagging(tag_set(&[("state", "final")]))
        .send()
        .await
        .unwrap();
    assert_eq!(tags(&c, "tags", "a").await, map(&[("state", "final")]));
    c.delete_object_tagging()
        .bucket("tags")
        .key("a")
        .send()
        .await
        .unwrap();
    assert!(tags(&c, "tags", "a").await.is_empty());
    let got = c.get_object().bucket("tags").key("a").send().await.unwrap();
    assert_eq!(got.tag_count(), None);
    assert_eq!(got.body.collect().await.unwrap().to_vec(), b"alpha");

    // AWS's limits, refused whole: nothing changes.
    c.put_object_tagging()
        .bucket("tags")
        .key("a")
        .tagging(tag_set(&[("keep", "me")]))
        .send()
        .await
        .unwrap();
    let eleven: Vec<(String, String)> = (0..11).map(|i| (format!("k{i}"), "v".into())).collect();
    let eleven: Vec<(&str, &str)> = eleven
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for bad in [
        tag_set(&eleven),
        tag_set(&[("aws:reserved", "x")]),
        tag_set(&[("k", &"v".repeat(257))]),
        tag_set(&[("k", "<script>")]),
        tag_set(&[("k", "tab\there")]),
        tag_set(&[("dup", "1"), ("dup", "2")]),
    ] {
        let r = c
            .put_object_tagging()
            .bucket("tags")
            .key("a")
            .tagging(bad)
            .send()
            .await;
        assert_eq!(code(r), "InvalidTag");
    }
    assert_eq!(tags(&c, "tags", "a").await, map(&[("keep", "me")]));
    let r = c
        .put_object()
        .bucket("tags")
        .key("refused")
        .tagging("aws:x=1")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(code(r), "InvalidTag");
    assert!(c
        .head_object()
        .bucket("tags")
        .key("refused")
        .send()
        .await
        .is_err());
    let r = c
        .get_object_tagging()
        .bucket("tags")
        .key("none")
        .send()
        .await;
    assert_eq!(code(r), "NoSuchKey");
    let r = c
        .get_object_tagging()
        .bucket("tags")
        .key("a")
        .version_id("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");

    // A copy takes the source's tags, or new ones with REPLACE.
    c.copy_object()
        .bucket("tags")
        .key("copied")
        .copy_source("tags/a")
        .send()
        .await
        .unwrap();
    assert_eq!(tags(&c, "tags", "copied").await, map(&[("keep", "me")]));
    c.copy_object()
        .bucket("tags")
        .key("replaced")
        .copy_source("tags/a")
        .tagging_directive(TaggingDirective::Replace)
        .tagging("fresh=1")
        .send()
        .await
        .unwrap();
    assert_eq!(tags(&c, "tags", "replaced").await, map(&[("fresh", "1")]));
    let r = c
        .copy_object()
        .bucket("tags")
        .key("odd")
        .copy_source("tags/a")
        .tagging_directive(TaggingDirective::from("FOO"))
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");

    // A multipart upload's tags are the completed object's.
    let up = c
        .create_multipart_upload()
        .bucket("tags")
        .key("mp")
        .tagging("parts=2")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let mut done = CompletedMultipartUpload::builder();
    for n in 1..=2 {
        let p = c
            .upload_part()
            .bucket("tags")
            .key("mp")
            .upload_id(id)
            .part_number(n)
            .body(ByteStream::from(vec![n as u8; 5 << 20]))
            .send()
            .await
            .unwrap();
        done = done.parts(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(p.e_tag().unwrap())
                .build(),
        );
    }
    c.complete_multipart_upload()
        .bucket("tags")
        .key("mp")
        .upload_id(id)
        .multipart_upload(done.build())
        .send()
        .await
        .unwrap();
    assert_eq!(tags(&c, "tags", "mp").await, map(&[("parts", "2")]));

    // An overwrite brings its own tags (none).
    c.put_object()
        .bucket("tags")
        .key("copied")
        .body(ByteStream::from_static(b"new"))
        .send()
        .await
        .unwrap();
    assert!(tags(&c, "tags", "copied").await.is_empty());

    // Bucket tags: none is S3's NoSuchTagSet; 50 at most.
    let r = c.get_bucket_tagging().bucket("tags").send().await;
    assert_eq!(code(r), "NoSuchTagSet");
    c.put_bucket_tagging()
        .bucket("tags")
        .tagging(tag_set(&[("cost-center", "42")]))
        .send()
        .await
        .unwrap();
    let fifty_one: Vec<(String, String)> = (0..51).map(|i| (format!("k{i}"), "v".into())).collect();
    let fifty_one: Vec<(&str, &str)> = fifty_one
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let r = c
        .put_bucket_tagging()
        .bucket("tags")
        .tagging(tag_set(&fifty_one))
        .send()
        .await;
    assert_eq!(code(r), "InvalidTag");

    // Everything is in the metadata: a restart keeps it.
    node.restart();
    let c = node.client();
    assert_eq!(tags(&c, "tags", "a").await, map(&[("keep", "me")]));
    assert_eq!(tags(&c, "tags", "mp").await, map(&[("parts", "2")]));
    let b = c.get_bucket_tagging().bucket("tags").send().await.unwrap();
    assert_eq!(b.tag_set().len(), 1);
    c.delete_bucket_tagging()
        .bucket("tags")
        .send()
        .await
        .unwrap();
    let r = c.get_bucket_tagging().bucket("tags").send().await;
    assert_eq!(code(r), "NoSuchTagSet");
}

/// An unsigned preflight, as a browser sends it.
fn preflight(node: &Node, path: &str, origin: &str, method: &str, headers: &str) -> Vec<u8> {
    let mut r = format!(
        "OPTIONS {path} HTTP/1.1\r\nhost: {}\r\naccess-control-request-method: {method}\r\n",
        node.s3_addr
    );
    if !origin.is_empty() {
        r.push_str(&format!("origin: {origin}\r\n"));
    }
    if !headers.is_empty() {
        r.push_str(&format!("access-control-request-headers: {headers}\r\n"));
    }
    r.push_str("connection: close\r\n\r\n");
    r.into_bytes()
}

fn has_header(text: &str, line: &str) -> bool {
    let head = text
        .split("\r\n\r\n")
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    head.lines().any(|l| l.trim() == line.to_ascii_lowercase())
}

#[tokio::test]
async fn cors_rules_answer_preflights_and_requests() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("web").send().await.unwrap();
    c.put_object()
        .bucket("web")
        .key("page.json")
        .body(ByteStream::from_static(b"{}"))
        .send()
        .await
        .unwrap();

    // No configuration: GetBucketCors is S3's 404, and preflights are refused.
    let r = c.get_bucket_cors().bucket("web").send().await;
    assert_eq!(code(r), "NoSuchCORSConfiguration");
    let r = send_raw(
        &node,
        &preflight(
            &node,
            "/web/page.json",
            "https://app.example.com",
            "GET",
            "",
        ),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert!(r.text.contains("AccessForbidden"), "{}", r.text);

    // Bad configurations are refused.
    let bad = CorsConfiguration::builder()
        .cors_rules(
            CorsRule::builder()
                .allowed_origins("*")
                .allowed_methods("PATCH")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let r = c
        .put_bucket_cors()
        .bucket("web")
        .cors_configuration(bad)
        .send()
        .await;
    assert_eq!(code(r), "InvalidRequest");

    let config = CorsConfiguration::builder()
        .cors_rules(
            CorsRule::builder()
                .id("app")
                .allowed_origins("https://*.example.com")
                .allowed_methods("GET")
                .allowed_methods("PUT")
                .allowed_headers("x-amz-*")
                .allowed_headers("content-type")
                .expose_headers("ETag")
                .max_age_seconds(600)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    c.put_bucket_cors()
        .bucket("web")
        .cors_configuration(config)
        .send()
        .await
        .unwrap();
    let got = c.get_bucket_cors().bucket("web").send().await.unwrap();
    let rule = &got.cors_rules()[0];
    assert_eq!(rule.id(), Some("app"));
    assert_eq!(rule.allowed_methods(), ["GET", "PUT"]);
    assert_eq!(rule.max_age_seconds(), Some(600));

    // A preflight the rule allows.
    let r = send_raw(
        &node,
        &preflight(
            &node,
            "/web/page.json",
            "https://app.example.com",
            "PUT",
            "Content-Type, X-Amz-Date",
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(has_header(
        &r.text,
        "access-control-allow-origin: https://app.example.com"
    ));
    assert!(has_header(
        &r.text,
        "access-control-allow-methods: GET, PUT"
    ));
    assert!(has_header(
        &r.text,
        "access-control-allow-headers: content-type, x-amz-date"
    ));
    assert!(has_header(&r.text, "access-control-max-age: 600"));
    assert!(has_header(&r.text, "access-control-expose-headers: ETag"));

    // Preflights it does not allow: another origin, method or header.
    for (origin, method, headers) in [
        ("https://evil.test", "GET", ""),
        ("https://app.example.com", "DELETE", ""),
        ("https://app.example.com", "PUT", "x-custom"),
    ] {
        let r = send_raw(
            &node,
            &preflight(&node, "/web/page.json", origin, method, headers),
        )
        .await;
        assert_eq!(r.status, 403, "{origin} {method} {headers}: {}", r.text);
    }
    // Without an Origin it is not a preflight at all.
    let r = send_raw(&node, &preflight(&node, "/web/page.json", "", "GET", "")).await;
    assert_eq!(r.status, 400, "{}", r.text);

    // A signed request from an allowed origin gets the headers, another none.
    for (origin, allowed) in [
        ("https://app.example.com", true),
        ("https://evil.test", false),
    ] {
        let req = signed_request(
            &node,
            "GET",
            "/web/page.json",
            &[("origin", origin)],
            b"",
            Payload::Hash(b""),
        );
        let r = send_raw(&node, &req).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let line = format!("access-control-allow-origin: {origin}");
        assert_eq!(has_header(&r.text, &line), allowed, "{}", r.text);
    }

    // Removed: preflights are refused again.
    c.delete_bucket_cors().bucket("web").send().await.unwrap();
    let r = send_raw(
        &node,
        &preflight(
            &node,
            "/web/page.json",
            "https://app.example.com",
            "GET",
            "",
        ),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
}

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

    // Never enabled: no Status. Suspending changes nothing; enabling is refused.
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
    let r = c
        .put_bucket_versioning()
        .bucket("vers")
        .versioning_configuration(conf(BucketVersioningStatus::Enabled))
        .send()
        .await;
    assert_eq!(code(r), "NotImplemented");
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
