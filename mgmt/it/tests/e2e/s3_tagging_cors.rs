//! S3 tagging and CORS as `aws-sdk-s3` and a browser use them: object and bucket
//! tagging (with AWS's limits, through copies, multipart and a restart), and CORS
//! (configuration, preflights, and the headers on answers).

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    CompletedMultipartUpload, CompletedPart, CorsConfiguration, CorsRule, Tag, Tagging,
    TaggingDirective,
};
use aws_sdk_s3::Client;
use cairn_it::raw::{send_raw, signed_request, Payload};
use cairn_it::{code, Node, NodeOptions};
use std::collections::BTreeMap;

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

    // A bucket deleted with its rules: its preflights are refused at once.
    let any = CorsConfiguration::builder()
        .cors_rules(
            CorsRule::builder()
                .allowed_origins("*")
                .allowed_methods("GET")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    c.create_bucket().bucket("gone").send().await.unwrap();
    c.put_bucket_cors()
        .bucket("gone")
        .cors_configuration(any)
        .send()
        .await
        .unwrap();
    let ask = preflight(&node, "/gone/x", "https://app.example.com", "GET", "");
    assert_eq!(send_raw(&node, &ask).await.status, 200);
    c.delete_bucket().bucket("gone").send().await.unwrap();
    assert_eq!(send_raw(&node, &ask).await.status, 403);

    // Values go into response headers: printable ASCII only.
    let accented = CorsConfiguration::builder()
        .cors_rules(
            CorsRule::builder()
                .allowed_origins("*")
                .allowed_methods("GET")
                .expose_headers("x-é")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let r = c
        .put_bucket_cors()
        .bucket("web")
        .cors_configuration(accented)
        .send()
        .await;
    assert_eq!(code(r), "InvalidRequest");
}
