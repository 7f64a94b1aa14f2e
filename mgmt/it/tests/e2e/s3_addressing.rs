//! Virtual-hosted-style addressing (`bucket.DOMAIN` for a configured domain)
//! alongside path style, with signed raw requests (the `Host` header is what is
//! tested, and this machine's resolver does not resolve `*.localhost`).

use cairn_it::raw::{send_raw, signed_request, Payload};
use cairn_it::{get_bytes, put_bytes, Node, NodeOptions};

#[tokio::test]
async fn buckets_are_addressed_by_host_under_a_configured_domain() {
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_S3_DOMAINS", "s3.localhost,objects.example.com")],
        ..Default::default()
    });
    let c = node.client();
    c.create_bucket().bucket("vhost").send().await.unwrap();
    let port = node.s3_addr.rsplit_once(':').unwrap().1.to_string();
    let host = format!("vhost.s3.localhost:{port}");

    // PUT virtual-hosted, read back path style.
    let body = b"hello from a virtual host".to_vec();
    let req = signed_request(
        &node,
        "PUT",
        "/dir/key.txt",
        &[("host", &host)],
        &body,
        Payload::Hash(&body),
    );
    let r = send_raw(&node, &req).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(get_bytes(&c, "vhost", "dir/key.txt").await.unwrap(), body);

    // PUT path style, read back virtual-hosted (the other domain, any case).
    put_bytes(&c, "vhost", "other", b"path style")
        .await
        .unwrap();
    let host2 = format!("vhost.OBJECTS.example.com:{port}");
    let req = signed_request(
        &node,
        "GET",
        "/other",
        &[("host", &host2)],
        b"",
        Payload::Hash(b""),
    );
    let r = send_raw(&node, &req).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.ends_with("path style"), "{}", r.text);

    // A listing through the bucket's host.
    let req = signed_request(
        &node,
        "GET",
        "/?list-type=2",
        &[("host", &host)],
        b"",
        Payload::Hash(b""),
    );
    let r = send_raw(&node, &req).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.text.contains("<Key>dir/key.txt</Key>") && r.text.contains("<Key>other</Key>"),
        "{}",
        r.text
    );

    // The domain itself, and a host under no configured domain, are path style.
    for h in [
        format!("s3.localhost:{port}"),
        node.s3_addr.clone(),
        "node7.lan".to_string(),
    ] {
        let req = signed_request(
            &node,
            "GET",
            "/vhost/other",
            &[("host", &h)],
            b"",
            Payload::Hash(b""),
        );
        let r = send_raw(&node, &req).await;
        assert_eq!(r.status, 200, "{h}: {}", r.text);
    }

    // A host that is not a bucket name is refused clearly.
    let bad = format!("Bad_Bucket.s3.localhost:{port}");
    let req = signed_request(
        &node,
        "GET",
        "/x",
        &[("host", &bad)],
        b"",
        Payload::Hash(b""),
    );
    let r = send_raw(&node, &req).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("InvalidBucketName"), "{}", r.text);
}
