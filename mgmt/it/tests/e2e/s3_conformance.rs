//! S3 as clients probe it, through `aws-sdk-s3`: server-side encryption refused
//! (never accepted and ignored), ACLs answered with the owner's full control and
//! grants beyond it refused, public access block / ownership / bucket encryption
//! answered, a repeated CompleteMultipartUpload answered like the first,
//! UploadPartCopy with ranges and conditions, `?partNumber=N` reads, bucket
//! regions, listing owners, and PUT bodies sent without a length.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketCannedAcl, CompletedMultipartUpload, CompletedPart, ObjectCannedAcl, Permission,
    ServerSideEncryption,
};
use aws_sdk_s3::Client;
use cairn_it::{code, random_bytes, Node, NodeOptions};

const MIB: usize = 1 << 20;

async fn body(c: &Client, b: &str, k: &str) -> Vec<u8> {
    c.get_object()
        .bucket(b)
        .key(k)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn encryption_and_acls_are_answered_truly() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("acl").send().await.unwrap();
    c.put_object()
        .bucket("acl")
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();

    // SSE asked for is refused, and nothing is stored.
    let r = c
        .put_object()
        .bucket("acl")
        .key("enc")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(ByteStream::from_static(b"secret"))
        .send()
        .await;
    assert_eq!(code(r), "NotImplemented");
    assert!(c
        .head_object()
        .bucket("acl")
        .key("enc")
        .send()
        .await
        .is_err());
    let r = c
        .put_object()
        .bucket("acl")
        .key("enc")
        .sse_customer_algorithm("AES256")
        .sse_customer_key("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
        .sse_customer_key_md5("zZ5FnqcIqUjVwvWmyog4zw==")
        .body(ByteStream::from_static(b"secret"))
        .send()
        .await;
    assert_eq!(code(r), "NotImplemented");
    let r = c
        .get_object()
        .bucket("acl")
        .key("k")
        .sse_customer_algorithm("AES256")
        .sse_customer_key("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
        .sse_customer_key_md5("zZ5FnqcIqUjVwvWmyog4zw==")
        .send()
        .await;
    assert_eq!(code(r), "InvalidRequest");
    let r = c.get_bucket_encryption().bucket("acl").send().await;
    assert_eq!(code(r), "ServerSideEncryptionConfigurationNotFoundError");

    // ACLs: the owner's full control, and nothing more can be granted.
    let acl = c.get_bucket_acl().bucket("acl").send().await.unwrap();
    let grants = acl.grants();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].permission(), Some(&Permission::FullControl));
    assert_eq!(
        grants[0].grantee().and_then(|g| g.id()),
        acl.owner().and_then(|o| o.id())
    );
    let oacl = c
        .get_object_acl()
        .bucket("acl")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(oacl.grants().len(), 1);
    c.put_bucket_acl()
        .bucket("acl")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();
    c.put_object_acl()
        .bucket("acl")
        .key("k")
        .acl(ObjectCannedAcl::Private)
        .send()
        .await
        .unwrap();
    let r = c
        .put_object_acl()
        .bucket("acl")
        .key("k")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await;
    assert_eq!(code(r), "NotImplemented");
    let r = c
        .put_object()
        .bucket("acl")
        .key("public")
        .acl(ObjectCannedAcl::PublicRead)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(code(r), "NotImplemented");
    let r = c.get_object_acl().bucket("acl").key("missing").send().await;
    assert_eq!(code(r), "NoSuchKey");
    let pab = c
        .get_public_access_block()
        .bucket("acl")
        .send()
        .await
        .unwrap();
    let conf = pab.public_access_block_configuration().unwrap();
    assert_eq!(conf.block_public_acls(), Some(true));
    assert_eq!(conf.restrict_public_buckets(), Some(true));
    let own = c
        .get_bucket_ownership_controls()
        .bucket("acl")
        .send()
        .await
        .unwrap();
    assert_eq!(
        own.ownership_controls().unwrap().rules()[0]
            .object_ownership()
            .as_str(),
        "BucketOwnerEnforced"
    );
}

#[tokio::test]
async fn part_copies_repeated_completions_and_part_reads() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("src").send().await.unwrap();
    c.create_bucket().bucket("dst").send().await.unwrap();
    let src = random_bytes(12 * MIB + 5, 7);
    c.put_object()
        .bucket("src")
        .key("big")
        .body(ByteStream::from(src.clone()))
        .send()
        .await
        .unwrap();
    let etag = c
        .head_object()
        .bucket("src")
        .key("big")
        .send()
        .await
        .unwrap()
        .e_tag
        .unwrap();

    let id = c
        .create_multipart_upload()
        .bucket("dst")
        .key("copy")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let ranges = [(0usize, 5 * MIB - 1), (5 * MIB, src.len() - 1)];
    let mut parts = Vec::new();
    for (i, (a, b)) in ranges.iter().enumerate() {
        let out = c
            .upload_part_copy()
            .bucket("dst")
            .key("copy")
            .upload_id(&id)
            .part_number(i as i32 + 1)
            .copy_source("src/big")
            .copy_source_range(format!("bytes={a}-{b}"))
            .copy_source_if_match(&etag)
            .send()
            .await
            .unwrap();
        let e = out.copy_part_result().unwrap().e_tag().unwrap().to_string();
        parts.push(
            CompletedPart::builder()
                .part_number(i as i32 + 1)
                .e_tag(e)
                .build(),
        );
    }
    // Conditions and ranges that cannot hold.
    let r = c
        .upload_part_copy()
        .bucket("dst")
        .key("copy")
        .upload_id(&id)
        .part_number(3)
        .copy_source("src/big")
        .copy_source_if_none_match(&etag)
        .send()
        .await;
    assert_eq!(code(r), "PreconditionFailed");
    let r = c
        .upload_part_copy()
        .bucket("dst")
        .key("copy")
        .upload_id(&id)
        .part_number(3)
        .copy_source("src/big")
        .copy_source_range(format!("bytes=0-{}", src.len()))
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");
    let complete = || {
        c.complete_multipart_upload()
            .bucket("dst")
            .key("copy")
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts.clone()))
                    .build(),
            )
            .send()
    };
    let first = complete().await.unwrap();
    assert_eq!(body(&c, "dst", "copy").await, src);
    // A retry of the completion (its answer lost) gets the same answer.
    let again = complete().await.unwrap();
    assert_eq!(again.e_tag(), first.e_tag());

    // ?partNumber=N reads part N, and says how many there are.
    let p2 = c
        .get_object()
        .bucket("dst")
        .key("copy")
        .part_number(2)
        .send()
        .await
        .unwrap();
    assert_eq!(p2.parts_count(), Some(2));
    assert_eq!(p2.content_length(), Some((src.len() - 5 * MIB) as i64));
    assert_eq!(p2.body.collect().await.unwrap().to_vec(), &src[5 * MIB..]);
    let h1 = c
        .head_object()
        .bucket("dst")
        .key("copy")
        .part_number(1)
        .send()
        .await
        .unwrap();
    assert_eq!(h1.content_length(), Some((5 * MIB) as i64));
    let r = c
        .get_object()
        .bucket("dst")
        .key("copy")
        .part_number(3)
        .send()
        .await;
    assert_eq!(code(r), "InvalidPartNumber");
    // A single-part object is part 1.
    let whole = c
        .get_object()
        .bucket("src")
        .key("big")
        .part_number(1)
        .send()
        .await
        .unwrap();
    assert_eq!(whole.content_length(), Some(src.len() as i64));
}

#[tokio::test]
async fn bucket_listings_page_and_errors_name_their_request() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    for b in ["page-a1", "page-a2", "page-a3", "page-b1", "other"] {
        c.create_bucket().bucket(b).send().await.unwrap();
    }
    // max-buckets and the continuation token walk the list in order.
    let mut seen = Vec::new();
    let mut token = None;
    loop {
        let out = c
            .list_buckets()
            .prefix("page-")
            .max_buckets(2)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        let names: Vec<String> = out
            .buckets()
            .iter()
            .filter_map(|b| b.name().map(str::to_string))
            .collect();
        assert!(names.len() <= 2, "{names:?}");
        seen.extend(names);
        token = out.continuation_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    assert_eq!(seen, ["page-a1", "page-a2", "page-a3", "page-b1"]);
    let r = c.list_buckets().max_buckets(0).send().await;
    assert_eq!(code(r), "InvalidArgument");

    // An error's XML carries the request id its headers carry.
    let req = cairn_it::raw::signed_request(
        &node,
        "GET",
        "/other/missing",
        &[],
        b"",
        cairn_it::raw::Payload::Hash(b""),
    );
    let r = cairn_it::raw::send_raw(&node, &req).await;
    assert_eq!(r.status, 404, "{}", r.text);
    let header = r
        .text
        .lines()
        .find_map(|l| l.strip_prefix("x-amz-request-id: "))
        .unwrap_or_else(|| panic!("no request id header: {}", r.text))
        .trim()
        .to_string();
    assert!(
        r.text.contains(&format!("<RequestId>{header}</RequestId>")),
        "{}",
        r.text
    );
}

/// A PUT whose body is sent with HTTP chunked encoding and no Content-Length
/// (curl `-T -`, s3-tests' chunked PUT): signed as `payload`.
async fn chunked_put(
    node: &Node,
    path: &str,
    body: &[u8],
    payload: cairn_it::raw::Payload<'_>,
) -> cairn_it::raw::Raw {
    let headers = vec![
        ("host".to_string(), node.s3_addr.clone()),
        ("transfer-encoding".to_string(), "chunked".to_string()),
    ];
    let auth = cairn_it::raw::sign_headers(node, "PUT", path, &headers, payload);
    let mut req = format!("PUT {path} HTTP/1.1\r\n");
    for (k, v) in headers.iter().chain(auth.iter()) {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("connection: close\r\n\r\n");
    let mut req = req.into_bytes();
    for piece in body.chunks(1 << 20) {
        req.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        req.extend_from_slice(piece);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    cairn_it::raw::send_raw(node, &req).await
}

#[tokio::test]
async fn regions_owners_and_bodies_without_a_length() {
    use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    // The LocationConstraint given at creation is the bucket's location and
    // region; none is us-east-1 (an empty constraint).
    c.create_bucket()
        .bucket("in-eu")
        .create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::EuWest1)
                .build(),
        )
        .send()
        .await
        .unwrap();
    c.create_bucket().bucket("plain").send().await.unwrap();
    let l = c
        .get_bucket_location()
        .bucket("in-eu")
        .send()
        .await
        .unwrap();
    assert_eq!(
        l.location_constraint(),
        Some(&BucketLocationConstraint::EuWest1)
    );
    let l = c
        .get_bucket_location()
        .bucket("plain")
        .send()
        .await
        .unwrap();
    assert_eq!(
        l.location_constraint().map(|l| l.as_str()).unwrap_or(""),
        ""
    );
    let h = c.head_bucket().bucket("in-eu").send().await.unwrap();
    assert_eq!(h.bucket_region(), Some("eu-west-1"));
    let r = c
        .create_bucket()
        .bucket("bad-region")
        .create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from("EU West <1>"))
                .build(),
        )
        .send()
        .await;
    assert_eq!(code(r), "InvalidLocationConstraint");

    // Owners: V2 names them only with fetch-owner; V1 always.
    c.put_object()
        .bucket("plain")
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let v2 = c.list_objects_v2().bucket("plain").send().await.unwrap();
    assert!(v2.contents()[0].owner().is_none());
    let v2 = c
        .list_objects_v2()
        .bucket("plain")
        .fetch_owner(true)
        .send()
        .await
        .unwrap();
    let owner = v2.contents()[0]
        .owner()
        .expect("fetch-owner gives the owner");
    let acl = c.get_bucket_acl().bucket("plain").send().await.unwrap();
    assert_eq!(owner.id(), acl.owner().and_then(|o| o.id()));
    let v1 = c.list_objects().bucket("plain").send().await.unwrap();
    assert_eq!(v1.contents()[0].owner().and_then(|o| o.id()), owner.id());

    // A body without a length, signed or unsigned, is stored whole.
    let data = random_bytes(3 * MIB + 5, 41);
    let r = chunked_put(
        &node,
        "/plain/signed",
        &data,
        cairn_it::raw::Payload::Hash(&data),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = chunked_put(
        &node,
        "/plain/unsigned",
        &data,
        cairn_it::raw::Payload::Unsigned,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(body(&c, "plain", "signed").await, data);
    assert_eq!(body(&c, "plain", "unsigned").await, data);
    // A signed one whose bytes are not the signed hash stores nothing.
    let r = chunked_put(
        &node,
        "/plain/lied",
        &data,
        cairn_it::raw::Payload::Hash(b"other"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = c.head_object().bucket("plain").key("lied").send().await;
    assert!(r.is_err());
    // Over the limit it is refused with S3's 411, and nothing is stored.
    let big = random_bytes(33 * MIB, 42);
    let r = chunked_put(&node, "/plain/big", &big, cairn_it::raw::Payload::Unsigned).await;
    assert_eq!(r.status, 411, "{}", r.text);
    assert!(r.text.contains("MissingContentLength"), "{}", r.text);
    let r = c.head_object().bucket("plain").key("big").send().await;
    assert!(r.is_err());
}
