//! Multipart uploads: create, upload a part, complete, abort, list parts and uploads.

use super::common::*;
use super::{access, CairnS3};
use crate::encoding::KeyEncoding;
use crate::error::to_s3;
use crate::integrity::{self, Expectations, Verified};
use cairn_meta::ChecksumAlgorithm;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

pub(super) async fn create_multipart_upload(
    s3: &CairnS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let tenant = s3.tenant(&req)?;
    access::refuse_sse(&req.headers)?;
    access::refuse_unkept(&req.headers)?;
    access::refuse_grants(&req.headers, None, "")?;
    let input = req.input;
    let algorithm = match &input.checksum_algorithm {
        None => None,
        Some(a) => Some(integrity::algorithm(a.as_str()).ok_or_else(|| {
            s3_error!(
                InvalidRequest,
                "Checksum algorithm provided is unsupported."
            )
        })?),
    };
    let full_object = full_object_checksum(algorithm, input.checksum_type.as_ref())?;
    let mut attrs = attrs(&req.headers, input.content_type, input.metadata)?;
    attrs.tags = super::tagging::from_header(input.tagging.as_deref())?;
    attrs.lock = super::lock::of_write(
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let id = s3
        .store
        .create_upload(
            tenant,
            &input.bucket,
            &input.key,
            attrs,
            algorithm,
            full_object,
        )
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(id),
        checksum_algorithm: algorithm
            .map(|a| s3s::dto::ChecksumAlgorithm::from_static(integrity::name(a))),
        checksum_type: algorithm.map(|_| checksum_type(full_object)),
        ..Default::default()
    }))
}

/// Whether an upload's checksum is S3's `FULL_OBJECT` kind (a CRC of the whole
/// object, combined from the parts' CRCs) or `COMPOSITE` (a digest of the parts'
/// digests), by S3's rules: CRC64NVME is only full-object, SHA1 and SHA256 only
/// composite, CRC32 and CRC32C either (composite unless asked).
fn full_object_checksum(
    algorithm: Option<ChecksumAlgorithm>,
    kind: Option<&ChecksumType>,
) -> S3Result<bool> {
    let Some(a) = algorithm else {
        return match kind {
            None => Ok(false),
            Some(_) => Err(s3_error!(
                InvalidRequest,
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
            )),
        };
    };
    let asked = kind.map(|k| k.as_str().to_ascii_uppercase());
    let full = match asked.as_deref() {
        None => a == ChecksumAlgorithm::Crc64nvme,
        Some(ChecksumType::FULL_OBJECT) => true,
        Some(ChecksumType::COMPOSITE) => false,
        Some(other) => {
            return Err(s3_error!(
                InvalidRequest,
                "Value for x-amz-checksum-type header is invalid: {other}"
            ))
        }
    };
    let refused = match a {
        ChecksumAlgorithm::Sha1 | ChecksumAlgorithm::Sha256 => full,
        ChecksumAlgorithm::Crc64nvme => !full,
        ChecksumAlgorithm::Crc32 | ChecksumAlgorithm::Crc32c => false,
    };
    if refused {
        return Err(s3_error!(
            InvalidRequest,
            "The {} checksum type cannot be used with the {} checksum algorithm.",
            checksum_type(full).as_str(),
            integrity::name(a).to_ascii_lowercase()
        ));
    }
    Ok(full)
}

fn checksum_type(full_object: bool) -> ChecksumType {
    ChecksumType::from_static(if full_object {
        ChecksumType::FULL_OBJECT
    } else {
        ChecksumType::COMPOSITE
    })
}

pub(super) async fn upload_part(
    s3: &CairnS3,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let tenant = s3.tenant(&req)?;
    access::refuse_sse(&req.headers)?;
    access::refuse_unkept(&req.headers)?;
    let input = req.input;
    let len = content_length(input.content_length)?;
    let part = u32::try_from(input.part_number)
        .map_err(|_| s3_error!(InvalidArgument, "invalid part number"))?;
    let body = match input.body {
        Some(b) => b,
        None if len.unwrap_or(0) == 0 => {
            StreamingBlob::wrap(futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>())
        }
        None => return Err(s3_error!(IncompleteBody)),
    };
    let expect = Expectations::of(
        &req.headers,
        input.content_md5.as_deref(),
        req.trailing_headers,
    )?;
    let upload = s3
        .store
        .upload(tenant, &input.bucket, &input.upload_id, &input.key)
        .await
        .map_err(to_s3)?;
    if let Some(want) = upload.record.checksum_algorithm {
        if expect.algorithm() != Some(want) {
            return Err(s3_error!(
                InvalidRequest,
                "Checksum Type mismatch occurred, expected checksum Type: {}, actual checksum Type: {}",
                integrity::name(want).to_ascii_lowercase(),
                expect
                    .algorithm()
                    .map(|a| integrity::name(a).to_ascii_lowercase())
                    .unwrap_or_else(|| "null".into())
            ));
        }
    }
    let (body, verdict) = Verified::new(body, expect);
    let rec = s3
        .store
        .upload_part(tenant, &upload, part, body, len, verdict.slot.clone())
        .await
        .map_err(|e| verdict.failure().unwrap_or_else(|| to_s3(e)))?;
    let mut out = UploadPartOutput {
        e_tag: Some(ETag::Strong(rec.etag.clone())),
        ..Default::default()
    };
    set_checksum!(out, rec.checksum.as_ref());
    Ok(S3Response::new(out))
}

pub(super) async fn complete_multipart_upload(
    s3: &CairnS3,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let parts = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default();
    if parts.is_empty() {
        return Err(s3_error!(MalformedXML, "the upload lists no parts"));
    }
    let etags: Vec<String> = parts
        .iter()
        .map(|p| {
            p.e_tag
                .as_ref()
                .map(|e| e.value().to_string())
                .unwrap_or_default()
        })
        .collect();
    let upload = match s3
        .store
        .upload(tenant, &input.bucket, &input.upload_id, &input.key)
        .await
        .map_err(to_s3)
    {
        Ok(u) => u,
        Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchUpload => {
            return repeated(s3, tenant, &input.bucket, &input.key, &etags, e).await
        }
        Err(e) => return Err(e),
    };
    let stored: std::collections::BTreeMap<u32, cairn_meta::PartRecord> = s3
        .store
        .meta()
        .parts(&input.upload_id)
        .map_err(|e| to_s3(e.into()))?
        .into_iter()
        .collect();
    let mut chosen = Vec::with_capacity(parts.len());
    for p in parts {
        let n = p
            .part_number
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| s3_error!(InvalidPart, "a part has no valid number"))?;
        // A part checksum the client lists must be the one the part was stored
        // with (S3 answers InvalidPart, as for an ETag that does not match).
        let listed = [
            (ChecksumAlgorithm::Crc32, &p.checksum_crc32),
            (ChecksumAlgorithm::Crc32c, &p.checksum_crc32c),
            (ChecksumAlgorithm::Crc64nvme, &p.checksum_crc64nvme),
            (ChecksumAlgorithm::Sha1, &p.checksum_sha1),
            (ChecksumAlgorithm::Sha256, &p.checksum_sha256),
        ];
        for (a, v) in listed {
            let Some(v) = v else { continue };
            // Compared with what the part was stored with: a part stored without
            // one, or with another algorithm, matches none.
            let kept = stored.get(&n).and_then(|r| r.checksum.as_ref());
            if !kept.is_some_and(|k| k.algorithm == a && &k.value == v) {
                return Err(s3_error!(
                    InvalidPart,
                    "part {n}: the {} listed is not the part's",
                    integrity::name(a)
                ));
            }
        }
        let e = p
            .e_tag
            .map(|e| e.value().to_string())
            .ok_or_else(|| s3_error!(InvalidPart, "part {n} has no ETag"))?;
        chosen.push((n, e));
    }
    let checksum = match upload.record.checksum_algorithm {
        Some(a) => {
            let of: Vec<_> = chosen.iter().map(|(n, _)| (*n, stored.get(n))).collect();
            Some(if upload.record.full_object_checksum {
                integrity::full_object(a, &of)?
            } else {
                let digests: Vec<_> = of
                    .iter()
                    .map(|(n, r)| (*n, r.and_then(|r| r.checksum.as_ref())))
                    .collect();
                integrity::composite(a, &digests)?
            })
        }
        None => None,
    };
    // A whole-object checksum the client sends with the completion is checked
    // against the one made here, and must be of the upload's kind.
    if let Some(t) = req.headers.get("x-amz-checksum-type") {
        let full = t.as_bytes().eq_ignore_ascii_case(b"FULL_OBJECT");
        if checksum.is_some() && full != upload.record.full_object_checksum {
            return Err(s3_error!(
                InvalidRequest,
                "The upload was created using the {} checksum mode. The complete request must use the same checksum mode.",
                checksum_type(upload.record.full_object_checksum).as_str()
            ));
        }
    }
    if let Some((a, v)) = integrity::claimed(&req.headers)? {
        match &checksum {
            Some(c) if c.algorithm == a => {
                if v != integrity::shown(c) && v != c.value {
                    return Err(s3_error!(
                        BadDigest,
                        "The {} you specified did not match the calculated checksum.",
                        integrity::name(a)
                    ));
                }
            }
            _ => {
                return Err(s3_error!(
                    InvalidRequest,
                    "The upload was not created with the {} checksum algorithm",
                    integrity::name(a)
                ))
            }
        }
    }
    let done = s3
        .store
        .complete_upload(
            tenant,
            &upload,
            chosen,
            precondition(input.if_match, input.if_none_match)?,
            checksum,
        )
        .await
        .map_err(to_s3);
    match done {
        Ok(rec) => Ok(S3Response::new(completed(&input.bucket, &input.key, &rec))),
        // Completed meanwhile by a retry of this same request.
        Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchUpload => {
            repeated(s3, tenant, &input.bucket, &input.key, &etags, e).await
        }
        Err(e) => Err(e),
    }
}

fn completed(
    bucket: &str,
    key: &str,
    rec: &cairn_meta::ObjectRecord,
) -> CompleteMultipartUploadOutput {
    let mut out = CompleteMultipartUploadOutput {
        bucket: Some(bucket.to_string()),
        key: Some(key.to_string()),
        location: Some(format!("/{bucket}/{key}")),
        e_tag: Some(etag(rec)),
        version_id: shown_version(&rec.version),
        ..Default::default()
    };
    set_checksum!(out, rec.checksum.as_ref(), typed);
    out
}

/// A completion repeated after it succeeded (a client retrying a complete whose
/// answer it lost) finds its upload gone. S3 answers it with the first result, so
/// the retry does not turn a stored upload into a failure: the object under the
/// key is this upload's if its ETag is the one the listed parts make.
async fn repeated(
    s3: &CairnS3,
    tenant: u64,
    bucket: &str,
    key: &str,
    etags: &[String],
    gone: s3s::S3Error,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    use s3s::crypto::Checksum as _;
    let mut md5 = s3s::crypto::Md5::new();
    for e in etags {
        match hex::decode(e.trim_matches('"')) {
            Ok(raw) => md5.update(&raw),
            Err(_) => return Err(gone),
        }
    }
    let want = format!("{}-{}", hex::encode(md5.finalize()), etags.len());
    match s3.store.head_object(tenant, bucket, key).await {
        Ok(rec) if rec.etag == want => Ok(S3Response::new(completed(bucket, key, &rec))),
        _ => Err(gone),
    }
}

pub(super) async fn abort_multipart_upload(
    s3: &CairnS3,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    s3.store
        .abort_upload(tenant, &input.bucket, &input.key, &input.upload_id)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(super) async fn list_parts(
    s3: &CairnS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    s3.store
        .upload(tenant, &input.bucket, &input.upload_id, &input.key)
        .await
        .map_err(to_s3)?;
    let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
    let marker = input.part_number_marker.unwrap_or(0).max(0) as u32;
    let all = s3
        .store
        .meta()
        .parts(&input.upload_id)
        .map_err(|e| to_s3(e.into()))?;
    let after: Vec<_> = all.into_iter().filter(|(n, _)| *n > marker).collect();
    let truncated = after.len() > max;
    let page: Vec<_> = after.into_iter().take(max).collect();
    let next = if truncated {
        page.last().map(|(n, _)| *n as i32)
    } else {
        None
    };
    let parts = page
        .into_iter()
        .map(|(n, p)| {
            let mut part = Part {
                part_number: Some(n as i32),
                e_tag: Some(ETag::Strong(p.etag)),
                size: Some(p.extent.size as i64),
                last_modified: Some(timestamp(p.modified_ms)),
                ..Default::default()
            };
            set_checksum!(part, p.checksum.as_ref());
            part
        })
        .collect();
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        max_parts: Some(max as i32),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: next,
        is_truncated: Some(truncated),
        parts: Some(parts),
        ..Default::default()
    }))
}

pub(super) async fn list_multipart_uploads(
    s3: &CairnS3,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let enc = KeyEncoding::of(input.encoding_type.as_ref())?;
    s3.store
        .bucket(tenant, &input.bucket)
        .await
        .map_err(to_s3)?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
    let key_marker = input.key_marker.clone().unwrap_or_default();
    let id_marker = input.upload_id_marker.clone().unwrap_or_default();
    let all = s3
        .store
        .meta()
        .uploads(&cairn_meta::bucket_id(tenant, &input.bucket))
        .map_err(|e| to_s3(e.into()))?;
    let mut selected: Vec<_> = all
        .into_iter()
        .filter(|(id, u)| {
            u.key.starts_with(&prefix)
                && (key_marker.is_empty()
                    || u.key > key_marker
                    || (u.key == key_marker && !id_marker.is_empty() && *id > id_marker))
        })
        .collect();
    let truncated = selected.len() > max;
    selected.truncate(max);
    let (next_key, next_id) = match (truncated, selected.last()) {
        (true, Some((id, u))) => (Some(u.key.clone()), Some(id.clone())),
        _ => (None, None),
    };
    let uploads = selected
        .into_iter()
        .map(|(id, u)| MultipartUpload {
            key: Some(enc.key(u.key)),
            upload_id: Some(id),
            initiated: Some(timestamp(u.created_ms)),
            ..Default::default()
        })
        .collect();
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: enc.opt(input.prefix),
        key_marker: enc.opt(input.key_marker),
        upload_id_marker: input.upload_id_marker,
        max_uploads: Some(max as i32),
        is_truncated: Some(truncated),
        next_key_marker: enc.opt(next_key),
        encoding_type: input.encoding_type,
        next_upload_id_marker: next_id,
        uploads: Some(uploads),
        ..Default::default()
    }))
}

/// UploadPartCopy: a part made from (a range of) an existing object, copied inside
/// the cluster (the bytes never pass through the client).
pub(super) async fn upload_part_copy(
    s3: &CairnS3,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let tenant = s3.tenant(&req)?;
    access::refuse_sse(&req.headers)?;
    access::refuse_unkept(&req.headers)?;
    let input = req.input;
    let part = u32::try_from(input.part_number)
        .map_err(|_| s3_error!(InvalidArgument, "invalid part number"))?;
    let (_, _, src) = super::objects::copy_source(
        s3,
        tenant,
        &input.copy_source,
        [
            &input.copy_source_if_match,
            &input.copy_source_if_none_match,
        ],
        [
            &input.copy_source_if_modified_since,
            &input.copy_source_if_unmodified_since,
        ],
    )
    .await?;
    let (start, end) = match &input.copy_source_range {
        None => (0, src.size),
        Some(r) => copy_range(r, src.size)?,
    };
    let upload = s3
        .store
        .upload(tenant, &input.bucket, &input.upload_id, &input.key)
        .await
        .map_err(to_s3)?;
    // An upload with a checksum algorithm gets the copied part's checksum made
    // as the bytes go by.
    let expect = match upload.record.checksum_algorithm {
        Some(a) => Expectations::computed(a),
        None => Expectations::default(),
    };
    let (body, verdict) = Verified::new(s3.store.read(tenant, &src, start, end), expect);
    let rec = s3
        .store
        .upload_part(
            tenant,
            &upload,
            part,
            body,
            Some(end - start),
            verdict.slot.clone(),
        )
        .await
        .map_err(|e| verdict.failure().unwrap_or_else(|| to_s3(e)))?;
    let mut result = CopyPartResult {
        e_tag: Some(ETag::Strong(rec.etag.clone())),
        last_modified: Some(timestamp(rec.modified_ms)),
        ..Default::default()
    };
    set_checksum!(result, rec.checksum.as_ref());
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(result),
        copy_source_version_id: shown_version(&src.version),
        ..Default::default()
    }))
}

/// `x-amz-copy-source-range: bytes=FIRST-LAST` as the half-open range it names;
/// S3 takes only that form, inside the source.
fn copy_range(r: &str, size: u64) -> S3Result<(u64, u64)> {
    let bad = || {
        s3_error!(
            InvalidArgument,
            "Range specified is not valid for source object of size: {size}"
        )
    };
    let (a, b) = r
        .trim()
        .strip_prefix("bytes=")
        .and_then(|x| x.split_once('-'))
        .ok_or_else(bad)?;
    let (a, b): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if a > b || b >= size {
        return Err(bad());
    }
    Ok((a, b + 1))
}
