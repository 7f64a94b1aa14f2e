//! Requests that must not reach further than they say, through aws-sdk-s3: a
//! version id (there is one version, `null`) never deletes or reads the current
//! object, a conditional delete deletes only the version it names, ranges on an
//! empty object, oversized metadata, reserved bucket names, HEAD and
//! GetObjectAttributes of a multipart object part by part.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumMode, Delete, ObjectAttributes, ObjectIdentifier};
use aws_sdk_s3::Client;
use cairn_it::{code, random_bytes, Node, NodeOptions};

const MIB: usize = 1 << 20;

async fn exists(c: &Client, b: &str, k: &str) -> bool {
    c.head_object().bucket(b).key(k).send().await.is_ok()
}

#[tokio::test]
async fn version_ids_and_conditions_never_reach_past_what_they_name() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("ver").send().await.unwrap();
    c.put_object()
        .bucket("ver")
        .key("k")
        .body(ByteStream::from_static(b"live"))
        .send()
        .await
        .unwrap();
    // A version id that is not `null` names nothing: refused, the object kept.
    let r = c
        .delete_object()
        .bucket("ver")
        .key("k")
        .version_id("3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY")
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");
    let del = Delete::builder()
        .objects(
            ObjectIdentifier::builder()
                .key("k")
                .version_id("abc")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let out = c
        .delete_objects()
        .bucket("ver")
        .delete(del)
        .send()
        .await
        .unwrap();
    assert_eq!(out.errors()[0].code(), Some("InvalidArgument"));
    assert!(
        exists(&c, "ver", "k").await,
        "a bogus version id deleted the object"
    );
    let r = c
        .get_object()
        .bucket("ver")
        .key("k")
        .version_id("abc")
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");
    let r = c
        .copy_object()
        .bucket("ver")
        .key("copy")
        .copy_source("ver/k?versionId=abc")
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");
    c.get_object()
        .bucket("ver")
        .key("k")
        .version_id("null")
        .send()
        .await
        .unwrap();

    // A conditional delete deletes only the ETag it names.
    let r = c
        .delete_object()
        .bucket("ver")
        .key("k")
        .if_match("\"0000\"")
        .send()
        .await;
    assert_eq!(code(r), "PreconditionFailed");
    let del = Delete::builder()
        .objects(
            ObjectIdentifier::builder()
                .key("k")
                .e_tag("\"0000\"")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let out = c
        .delete_objects()
        .bucket("ver")
        .delete(del)
        .send()
        .await
        .unwrap();
    assert_eq!(out.errors()[0].code(), Some("PreconditionFailed"));
    assert!(
        exists(&c, "ver", "k").await,
        "a failed condition deleted the object"
    );
    let etag = c
        .head_object()
        .bucket("ver")
        .key("k")
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();
    c.delete_object()
        .bucket("ver")
        .key("k")
        .if_match(&etag)
        .send()
        .await
        .unwrap();
    assert!(!exists(&c, "ver", "k").await);
    // Deleting what is not there succeeds, whatever the condition (as S3 does).
    c.delete_object()
        .bucket("ver")
        .key("k")
        .if_match(&etag)
        .send()
        .await
        .unwrap();

    // No range of an empty object is satisfiable (no impossible Content-Range).
    c.put_object()
        .bucket("ver")
        .key("empty")
        .body(ByteStream::from_static(b""))
        .send()
        .await
        .unwrap();
    for range in ["bytes=-1", "bytes=0-", "bytes=0-10"] {
        let r = c
            .get_object()
            .bucket("ver")
            .key("empty")
            .range(range)
            .send()
            .await;
        assert_eq!(code(r), "InvalidRange", "{range}");
    }

    // User metadata over S3's 2 KiB, reserved bucket names: refused.
    let r = c
        .put_object()
        .bucket("ver")
        .key("m")
        .metadata("big", "x".repeat(2100))
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(code(r), "MetadataTooLarge");
    assert!(!exists(&c, "ver", "m").await);
    for name in [
        "foo.-bar",
        "foo-.bar",
        "sthree-x",
        "abc-s3alias",
        "xn--abc",
        "192.168.5.4",
    ] {
        let r = c.create_bucket().bucket(name).send().await;
        assert_eq!(code(r), "InvalidBucketName", "{name}");
    }
}

#[tokio::test]
async fn a_multipart_object_is_described_part_by_part() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    c.create_bucket().bucket("attrs").send().await.unwrap();
    let parts = [random_bytes(5 * MIB, 51), random_bytes(1000, 52)];
    let sums = cairn_it::put_sha256_multipart(&c, "attrs", "mp", &parts).await;
    // HEAD of a part: 206, its range, its own checksum.
    let h = c
        .head_object()
        .bucket("attrs")
        .key("mp")
        .part_number(2)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(h.content_length(), Some(1000));
    assert_eq!(h.content_range(), Some("bytes 5242880-5243879/5243880"));
    assert_eq!(h.parts_count(), Some(2));
    assert_eq!(h.checksum_sha256(), Some(sums[1].as_str()));
    let g = c
        .get_object()
        .bucket("attrs")
        .key("mp")
        .part_number(1)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(g.checksum_sha256(), Some(sums[0].as_str()));
    assert_eq!(
        g.checksum_type(),
        Some(&aws_sdk_s3::types::ChecksumType::Composite)
    );
    // GetObjectAttributes: size, class, checksum and the parts, paged.
    let a = c
        .get_object_attributes()
        .bucket("attrs")
        .key("mp")
        .object_attributes(ObjectAttributes::ObjectSize)
        .object_attributes(ObjectAttributes::StorageClass)
        .object_attributes(ObjectAttributes::Checksum)
        .object_attributes(ObjectAttributes::ObjectParts)
        .object_attributes(ObjectAttributes::Etag)
        .send()
        .await
        .unwrap();
    assert_eq!(a.object_size(), Some(5 * MIB as i64 + 1000));
    assert!(a.e_tag().unwrap().ends_with("-2\"") || a.e_tag().unwrap().ends_with("-2"));
    assert!(a
        .checksum()
        .unwrap()
        .checksum_sha256()
        .unwrap()
        .ends_with("-2"));
    let p = a.object_parts().unwrap();
    assert_eq!(p.total_parts_count(), Some(2));
    let got: Vec<_> = p
        .parts()
        .iter()
        .map(|p| {
            (
                p.part_number(),
                p.size(),
                p.checksum_sha256().map(str::to_string),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (Some(1), Some(5 * MIB as i64), Some(sums[0].clone())),
            (Some(2), Some(1000), Some(sums[1].clone()))
        ]
    );
    let a = c
        .get_object_attributes()
        .bucket("attrs")
        .key("mp")
        .object_attributes(ObjectAttributes::ObjectParts)
        .max_parts(1)
        .send()
        .await
        .unwrap();
    let p = a.object_parts().unwrap();
    assert_eq!(p.is_truncated(), Some(true));
    assert_eq!(p.next_part_number_marker(), Some("1"));
    assert_eq!(p.parts().len(), 1);
    let r = c
        .get_object_attributes()
        .bucket("attrs")
        .key("missing")
        .object_attributes(ObjectAttributes::ObjectSize)
        .send()
        .await;
    assert_eq!(code(r), "NoSuchKey");
}
