//! Flexible checksums and kept headers through `aws-sdk-s3`: a checksum sent as a
//! header or computed by the SDK into an aws-chunked trailer is verified (a wrong
//! one stores nothing), kept, and returned when asked for; multipart uploads get
//! part checksums and S3's composite checksum, or a full-object CRC combined from
//! the parts'; a copy gets its checksum made anew; the standard headers a PUT
//! sets come back on GET and HEAD.

use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedMultipartUpload, CompletedPart,
};
use aws_sdk_s3::Client;
use base64::Engine;
use cairn_it::{code, random_bytes, Node, NodeOptions};
use sha2::Digest;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const MIB: usize = 1 << 20;

fn crc32(data: &[u8]) -> String {
    B64.encode(crc32fast::hash(data).to_be_bytes())
}

async fn bucket(c: &Client, name: &str) {
    c.create_bucket().bucket(name).send().await.unwrap();
}

#[tokio::test]
async fn a_checksum_is_verified_kept_and_returned() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    bucket(&c, "sums").await;
    let data = random_bytes(300_000, 1);

    // A checksum in a header, right: stored, echoed, returned when asked for.
    let out = c
        .put_object()
        .bucket("sums")
        .key("header")
        .checksum_crc32(crc32(&data))
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(out.checksum_crc32(), Some(crc32(&data).as_str()));
    let head = c
        .head_object()
        .bucket("sums")
        .key("header")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(head.checksum_crc32(), Some(crc32(&data).as_str()));
    let plain = c
        .head_object()
        .bucket("sums")
        .key("header")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.checksum_crc32(), None, "only when asked for");
    let got = c
        .get_object()
        .bucket("sums")
        .key("header")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(got.checksum_crc32(), Some(crc32(&data).as_str()));
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        data
    );

    // Wrong: BadDigest, and what was under the name stays.
    let other = random_bytes(1000, 2);
    let r = c
        .put_object()
        .bucket("sums")
        .key("header")
        .checksum_crc32(crc32(&data))
        .body(ByteStream::from(other))
        .send()
        .await;
    assert_eq!(code(r), "BadDigest");
    let kept = c
        .get_object()
        .bucket("sums")
        .key("header")
        .send()
        .await
        .unwrap();
    assert_eq!(
        kept.body.collect().await.unwrap().into_bytes().as_ref(),
        data
    );
    let r = c
        .put_object()
        .bucket("sums")
        .key("never")
        .checksum_sha256(B64.encode([0u8; 32]))
        .body(ByteStream::from(random_bytes(10, 3)))
        .send()
        .await;
    assert_eq!(code(r), "BadDigest");
    let r = c.head_object().bucket("sums").key("never").send().await;
    assert!(r.is_err(), "a body that failed its checksum was stored");

    // Computed by the SDK (an aws-chunked body with the checksum in a trailer).
    for (alg, key) in [
        (ChecksumAlgorithm::Sha256, "sha256"),
        (ChecksumAlgorithm::Crc32C, "crc32c"),
        (ChecksumAlgorithm::Sha1, "sha1"),
    ] {
        c.put_object()
            .bucket("sums")
            .key(key)
            .checksum_algorithm(alg.clone())
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{key}: {e:?}"));
        let h = c
            .head_object()
            .bucket("sums")
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        let want_sha256 = B64.encode(sha2::Sha256::digest(&data));
        match key {
            "sha256" => assert_eq!(h.checksum_sha256(), Some(want_sha256.as_str())),
            "crc32c" => assert_eq!(
                h.checksum_crc32_c(),
                Some(B64.encode(crc32c::crc32c(&data).to_be_bytes()).as_str())
            ),
            _ => assert!(h.checksum_sha1().is_some()),
        }
    }

    // A range carries no checksum (it covers the whole object).
    let part = c
        .get_object()
        .bucket("sums")
        .key("header")
        .range("bytes=0-99")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(part.checksum_crc32(), None);

    // Two algorithms at once are refused.
    let r = c
        .put_object()
        .bucket("sums")
        .key("two")
        .checksum_crc32(crc32(&data))
        .body(ByteStream::from(data.clone()))
        .customize()
        .mutate_request(|r| {
            r.headers_mut()
                .insert("x-amz-checksum-sha1", "AAAAAAAAAAAAAAAAAAAAAAAAAAA=");
        })
        .send()
        .await;
    assert_eq!(code(r), "InvalidRequest");
}

#[tokio::test]
async fn multipart_uploads_get_part_and_composite_checksums() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    bucket(&c, "mpu").await;
    let parts = [random_bytes(5 * MIB, 10), random_bytes(MIB + 7, 11)];
    let id = c
        .create_multipart_upload()
        .bucket("mpu")
        .key("obj")
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    // A part without a checksum of the upload's algorithm is refused.
    let r = c
        .upload_part()
        .bucket("mpu")
        .key("obj")
        .upload_id(&id)
        .part_number(1)
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .body(ByteStream::from(random_bytes(1000, 12)))
        .send()
        .await;
    assert_eq!(code(r), "InvalidRequest");
    let mut done = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let out = c
            .upload_part()
            .bucket("mpu")
            .key("obj")
            .upload_id(&id)
            .part_number(i as i32 + 1)
            .checksum_algorithm(ChecksumAlgorithm::Crc32)
            .body(ByteStream::from(p.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(
            out.checksum_crc32(),
            Some(crc32(p).as_str()),
            "part {}",
            i + 1
        );
        done.push(
            CompletedPart::builder()
                .part_number(i as i32 + 1)
                .e_tag(out.e_tag().unwrap())
                .checksum_crc32(crc32(p))
                .build(),
        );
    }
    // A part checksum listed wrong is refused like a wrong ETag.
    let mut wrong = done.clone();
    wrong[1] = CompletedPart::builder()
        .part_number(2)
        .e_tag(done[1].e_tag().unwrap())
        .checksum_crc32(crc32(b"not it"))
        .build();
    let r = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("obj")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(wrong))
                .build(),
        )
        .send()
        .await;
    assert_eq!(code(r), "InvalidPart");
    // ListParts carries each part's checksum.
    let listed = c
        .list_parts()
        .bucket("mpu")
        .key("obj")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        listed.parts()[1].checksum_crc32(),
        Some(crc32(&parts[1]).as_str())
    );
    let raw: Vec<u8> = parts
        .iter()
        .flat_map(|p| crc32fast::hash(p).to_be_bytes())
        .collect();
    let composite = format!("{}-2", crc32(&raw));
    // A whole-object checksum sent with the completion is checked, not taken.
    let r = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("obj")
        .upload_id(&id)
        .checksum_crc32("AAAAAA==-2")
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done.clone()))
                .build(),
        )
        .send()
        .await;
    assert_eq!(code(r), "BadDigest");
    let r = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("obj")
        .upload_id(&id)
        .checksum_type(aws_sdk_s3::types::ChecksumType::FullObject)
        .checksum_crc32(crc32(b"whatever"))
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done.clone()))
                .build(),
        )
        .send()
        .await;
    // The upload is composite: a full-object completion is the wrong mode.
    assert_eq!(code(r), "InvalidRequest");
    assert!(
        c.head_object()
            .bucket("mpu")
            .key("obj")
            .send()
            .await
            .is_err(),
        "a refused completion stored the object"
    );
    let out = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("obj")
        .upload_id(&id)
        .checksum_crc32(&composite)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(out.checksum_crc32(), Some(composite.as_str()));
    let h = c
        .head_object()
        .bucket("mpu")
        .key("obj")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(h.checksum_crc32(), Some(composite.as_str()));
    assert_eq!(h.content_length(), Some((6 * MIB + 7) as i64));

    // An upload created without an algorithm: a part sent with a CRC32 keeps it,
    // and listing that CRC32 at completion matches it.
    let id = c
        .create_multipart_upload()
        .bucket("mpu")
        .key("plain")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let p = random_bytes(1000, 13);
    let out = c
        .upload_part()
        .bucket("mpu")
        .key("plain")
        .upload_id(&id)
        .part_number(1)
        .checksum_crc32(crc32(&p))
        .body(ByteStream::from(p.clone()))
        .send()
        .await
        .unwrap();
    let part = CompletedPart::builder()
        .part_number(1)
        .e_tag(out.e_tag().unwrap())
        .checksum_crc32(crc32(&p))
        .build();
    c.complete_multipart_upload()
        .bucket("mpu")
        .key("plain")
        .upload_id(&id)
        .multipart_upload(CompletedMultipartUpload::builder().parts(part).build())
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn standard_headers_are_kept_and_served() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    bucket(&c, "hdrs").await;
    let expires = DateTime::from_secs(4_102_444_800); // 2100-01-01
    c.put_object()
        .bucket("hdrs")
        .key("page.html.gz")
        .content_type("text/html")
        .cache_control("max-age=60")
        .content_disposition("attachment; filename=\"page.html\"")
        .content_encoding("gzip")
        .content_language("de")
        .expires(expires)
        .body(ByteStream::from_static(b"not really gzip"))
        .send()
        .await
        .unwrap();
    let g = c
        .get_object()
        .bucket("hdrs")
        .key("page.html.gz")
        .send()
        .await
        .unwrap();
    assert_eq!(g.cache_control(), Some("max-age=60"));
    assert_eq!(
        g.content_disposition(),
        Some("attachment; filename=\"page.html\"")
    );
    assert_eq!(g.content_encoding(), Some("gzip"));
    assert_eq!(g.content_language(), Some("de"));
    assert_eq!(g.content_type(), Some("text/html"));
    // A GET may override what is served (presigned download links do).
    let g = c
        .get_object()
        .bucket("hdrs")
        .key("page.html.gz")
        .response_content_disposition("inline")
        .response_cache_control("no-store")
        .send()
        .await
        .unwrap();
    assert_eq!(g.content_disposition(), Some("inline"));
    assert_eq!(g.cache_control(), Some("no-store"));
    let h = c
        .head_object()
        .bucket("hdrs")
        .key("page.html.gz")
        .send()
        .await
        .unwrap();
    assert_eq!(h.cache_control(), Some("max-age=60"));
    assert_eq!(h.content_encoding(), Some("gzip"));
    // A copy keeps them (metadata directive COPY).
    c.copy_object()
        .bucket("hdrs")
        .key("copy")
        .copy_source("hdrs/page.html.gz")
        .send()
        .await
        .unwrap();
    let h = c
        .head_object()
        .bucket("hdrs")
        .key("copy")
        .send()
        .await
        .unwrap();
    assert_eq!(h.content_language(), Some("de"));
}

/// The CRC `a` of `data`, base64 big-endian as S3 writes it.
fn crc_of(a: &ChecksumAlgorithm, data: &[u8]) -> String {
    use crc_fast::CrcAlgorithm as C;
    let (alg, width) = match a {
        ChecksumAlgorithm::Crc32 => (C::Crc32IsoHdlc, 4),
        ChecksumAlgorithm::Crc32C => (C::Crc32Iscsi, 4),
        ChecksumAlgorithm::Crc64Nvme => (C::Crc64Nvme, 8),
        other => panic!("not a CRC: {other:?}"),
    };
    let v = crc_fast::checksum(alg, data).to_be_bytes();
    B64.encode(&v[8 - width..])
}

fn crc_field(
    a: &ChecksumAlgorithm,
    out: &aws_sdk_s3::operation::head_object::HeadObjectOutput,
) -> Option<String> {
    match a {
        ChecksumAlgorithm::Crc32 => out.checksum_crc32(),
        ChecksumAlgorithm::Crc32C => out.checksum_crc32_c(),
        ChecksumAlgorithm::Crc64Nvme => out.checksum_crc64_nvme(),
        _ => None,
    }
    .map(str::to_string)
}

#[tokio::test]
async fn full_object_crcs_of_multipart_uploads_and_copies() {
    let node = Node::start(NodeOptions::default());
    let c = node.client();
    bucket(&c, "whole").await;
    let parts = [random_bytes(5 * MIB, 31), random_bytes(3 * MIB + 17, 32)];
    let all = parts.concat();
    for a in [
        ChecksumAlgorithm::Crc32,
        ChecksumAlgorithm::Crc32C,
        ChecksumAlgorithm::Crc64Nvme,
    ] {
        let key = format!("k-{}", a.as_str());
        // CRC64NVME is full-object without being asked (S3 has no composite kind).
        let mut create = c
            .create_multipart_upload()
            .bucket("whole")
            .key(&key)
            .checksum_algorithm(a.clone());
        if a != ChecksumAlgorithm::Crc64Nvme {
            create = create.checksum_type(ChecksumType::FullObject);
        }
        let up = create.send().await.unwrap();
        assert_eq!(up.checksum_type(), Some(&ChecksumType::FullObject));
        let id = up.upload_id().unwrap();
        let mut done = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let n = i as i32 + 1;
            let r = c
                .upload_part()
                .bucket("whole")
                .key(&key)
                .upload_id(id)
                .part_number(n)
                .checksum_algorithm(a.clone())
                .body(ByteStream::from(p.clone()))
                .send()
                .await
                .unwrap();
            let mut part = CompletedPart::builder()
                .part_number(n)
                .e_tag(r.e_tag().unwrap());
            part = match a {
                ChecksumAlgorithm::Crc32 => part.checksum_crc32(r.checksum_crc32().unwrap()),
                ChecksumAlgorithm::Crc32C => part.checksum_crc32_c(r.checksum_crc32_c().unwrap()),
                _ => part.checksum_crc64_nvme(r.checksum_crc64_nvme().unwrap()),
            };
            done.push(part.build());
        }
        let want = crc_of(&a, &all);
        // A whole-object CRC sent with the completion is checked: a wrong one
        // completes nothing.
        let wrong = c
            .complete_multipart_upload()
            .bucket("whole")
            .key(&key)
            .upload_id(id)
            .checksum_type(ChecksumType::FullObject)
            .checksum_crc32(crc_of(&ChecksumAlgorithm::Crc32, b"not it"))
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(done.clone()))
                    .build(),
            )
            .send()
            .await;
        let e = code(wrong);
        assert!(e == "BadDigest" || e == "InvalidRequest", "{e}");
        let fin = c
            .complete_multipart_upload()
            .bucket("whole")
            .key(&key)
            .upload_id(id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(done))
                    .build(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(fin.checksum_type(), Some(&ChecksumType::FullObject));
        let h = c
            .head_object()
            .bucket("whole")
            .key(&key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        // The CRC of the whole object's bytes, no `-N` suffix.
        assert_eq!(crc_field(&a, &h).as_deref(), Some(want.as_str()), "{a:?}");
        assert_eq!(h.checksum_type(), Some(&ChecksumType::FullObject));
    }
    // SHA-256 cannot be full-object; CRC64NVME cannot be composite.
    let r = c
        .create_multipart_upload()
        .bucket("whole")
        .key("x")
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .checksum_type(ChecksumType::FullObject)
        .send()
        .await;
    assert_eq!(code(r), "InvalidRequest");
    let r = c
        .create_multipart_upload()
        .bucket("whole")
        .key("x")
        .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
        .checksum_type(ChecksumType::Composite)
        .send()
        .await;
    assert_eq!(code(r), "InvalidRequest");

    // A composite SHA-256 multipart object copied: the copy is one piece, with the
    // full SHA-256 of its bytes (S3 makes the copy's checksum anew).
    cairn_it::put_sha256_multipart(&c, "whole", "comp", &parts).await;
    let copied = c
        .copy_object()
        .bucket("whole")
        .key("comp-copy")
        .copy_source("whole/comp")
        .send()
        .await
        .unwrap();
    let want = B64.encode(sha2::Sha256::digest(&all));
    let result = copied.copy_object_result().unwrap();
    assert_eq!(result.checksum_sha256(), Some(want.as_str()));
    let h = c
        .head_object()
        .bucket("whole")
        .key("comp-copy")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(h.checksum_sha256(), Some(want.as_str()));
    assert_eq!(h.checksum_type(), Some(&ChecksumType::FullObject));
    // A copy may ask for another algorithm.
    let copied = c
        .copy_object()
        .bucket("whole")
        .key("comp-crc")
        .copy_source("whole/comp")
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .send()
        .await
        .unwrap();
    assert_eq!(
        copied.copy_object_result().unwrap().checksum_crc32(),
        Some(crc32(&all).as_str())
    );
}
