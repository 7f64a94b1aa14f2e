//! S3 as clients probe it, through `aws-sdk-s3`: server-side encryption refused
//! (never accepted and ignored), ACLs answered with the owner's full control and
//! grants beyond it refused, public access block / ownership / bucket encryption
//! answered, a repeated CompleteMultipartUpload answered like the first,
//! UploadPartCopy with ranges and conditions, and `?partNumber=N` reads.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketCannedAcl, CompletedMultipartUpload, CompletedPart, ObjectCannedAcl, Permission,
    ServerSideEncryption,
};
use aws_sdk_s3::Client;
use cairn_it::{random_bytes, Node, NodeOptions};

const MIB: usize = 1 << 20;

fn code<T, E: ProvideErrorMetadata>(r: Result<T, SdkError<E>>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.code().unwrap_or("").to_string(),
    }
}

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
