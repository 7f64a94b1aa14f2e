//! Objects: put, get, head, delete (one or many), copy.

use super::common::*;
use super::lock::bypass as access_bypass;
use super::{access, CairnS3};
use crate::error::to_s3;
use crate::integrity::{self, Expectations, Verified};
use cairn_meta::{Precondition, Version};
use cairn_objects::ObjectAttrs;
use futures::StreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

pub(super) async fn put_object(
    s3: &CairnS3,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let tenant = s3.tenant(&req)?;
    access::refuse_sse(&req.headers)?;
    access::refuse_unkept(&req.headers)?;
    access::refuse_grants(&req.headers, None, "")?;
    let input = req.input;
    // (A browser's POST upload names its key in the form, past the access
    // check's look at the path.)
    if input.key.starts_with(cairn_objects::SNAPSHOT_DIR) {
        return Err(crate::auth::snapshot_read_only());
    }
    let len = content_length(input.content_length)?;
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
    let (body, verdict) = Verified::new(body, expect);
    let mut attrs = attrs(&req.headers, input.content_type, input.metadata)?;
    attrs.tags = super::tagging::from_header(input.tagging.as_deref())?;
    attrs.lock = super::lock::of_write(
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    attrs.checksum = verdict.slot.clone();
    let rec = s3
        .store
        .put_object(
            tenant,
            &input.bucket,
            &input.key,
            body,
            len,
            attrs,
            precondition(input.if_match, input.if_none_match)?,
        )
        .await
        .map_err(|e| verdict.failure().unwrap_or_else(|| to_s3(e)))?;
    let mut out = PutObjectOutput {
        e_tag: Some(etag(&rec)),
        version_id: shown_version(&rec.version),
        ..Default::default()
    };
    set_checksum!(out, rec.checksum.as_ref(), typed);
    Ok(S3Response::new(out))
}

pub(super) async fn get_object(
    s3: &CairnS3,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let tenant = s3.tenant(&req)?;
    access::refuse_sse_c_read(&req.headers)?;
    let input = req.input;
    let rec = head_if(
        s3,
        tenant,
        (&input.bucket, &input.key),
        version_arg(input.version_id.as_deref())?,
        [&input.if_match, &input.if_none_match],
        [&input.if_modified_since, &input.if_unmodified_since],
    )
    .await?;
    let parts = parts_of(&rec);
    let (start, end, content_range) = match (&input.range, input.part_number) {
        (Some(_), Some(_)) => {
            return Err(s3_error!(
                InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter"
            ))
        }
        (None, Some(n)) => {
            let (a, b) = part_span(&parts, n)?;
            (
                a,
                b,
                Some(format!("bytes {a}-{}/{}", b.max(1) - 1, rec.size)),
            )
        }
        (None, None) => (0, rec.size, None),
        (Some(r), None) => {
            // An empty object has no satisfiable range (RFC 9110), suffix or not.
            let rr = r
                .check(rec.size)
                .ok()
                .filter(|rr| rr.start < rr.end)
                .ok_or_else(|| {
                    s3_error!(InvalidRange, "range not satisfiable for {} bytes", rec.size)
                })?;
            let cr = format!("bytes {}-{}/{}", rr.start, rr.end - 1, rec.size);
            (rr.start, rr.end, Some(cr))
        }
    };
    let mut stream = s3.store.read(tenant, &rec, start, end);
    // Read the first piece before answering, so an object that cannot be read
    // gets a proper error status instead of a 200 with a truncated body. Later
    // pieces that fail can only abort the transfer (the status is sent).
    let first = match stream.next().await {
        Some(Ok(b)) => Some(b),
        Some(Err(e)) => return Err(to_s3(e)),
        None => None,
    };
    let stream = futures::stream::iter(first.map(Ok)).chain(stream);
    let body = StreamingBlob::wrap(sync_wrapper::SyncStream::new(stream));
    let whole = content_range.is_none();
    let mut out = GetObjectOutput {
        parts_count: input.part_number.map(|_| parts.len() as i32),
        body: Some(body),
        content_length: Some((end - start) as i64),
        content_range,
        accept_ranges: Some("bytes".into()),
        e_tag: Some(etag(&rec)),
        last_modified: Some(timestamp(rec.modified_ms)),
        content_type: Some(content_type(&rec)),
        metadata: user_meta(&rec),
        tag_count: super::tagging::count(&rec.tags),
        version_id: shown_version(&rec.version),
        ..Default::default()
    };
    // A checksum covers the whole object (S3 sends none with a range), or one
    // part, read with `?partNumber=N`.
    if wants_checksum(&input.checksum_mode) {
        if whole {
            set_checksum!(out, rec.checksum.as_ref(), typed);
        } else if let Some(n) = input.part_number {
            set_checksum!(out, part n of &rec);
        }
    }
    let mut resp = S3Response::new(out);
    serve_headers(&rec, &mut resp);
    replication_header(s3, tenant, (&input.bucket, &input.key), &rec, &mut resp);
    // A GET may override what is served (`response-cache-control=...` and the
    // like, signed into presigned download links).
    let overrides = [
        ("cache-control", &input.response_cache_control),
        ("content-disposition", &input.response_content_disposition),
        ("content-encoding", &input.response_content_encoding),
        ("content-language", &input.response_content_language),
    ];
    for (name, v) in overrides {
        if let Some(v) = v.as_ref().and_then(|v| http::HeaderValue::from_str(v).ok()) {
            resp.headers.insert(name, v);
        }
    }
    Ok(resp)
}

pub(super) async fn head_object(
    s3: &CairnS3,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let tenant = s3.tenant(&req)?;
    access::refuse_sse_c_read(&req.headers)?;
    let input = req.input;
    let rec = head_if(
        s3,
        tenant,
        (&input.bucket, &input.key),
        version_arg(input.version_id.as_deref())?,
        [&input.if_match, &input.if_none_match],
        [&input.if_modified_since, &input.if_unmodified_since],
    )
    .await?;
    let parts = parts_of(&rec);
    // A part is answered as GET answers it: 206 with its Content-Range.
    let (length, content_range) = match input.part_number {
        Some(n) => {
            let (a, b) = part_span(&parts, n)?;
            (
                b - a,
                Some(format!("bytes {a}-{}/{}", b.max(1) - 1, rec.size)),
            )
        }
        None => (rec.size, None),
    };
    let mut out = HeadObjectOutput {
        parts_count: input.part_number.map(|_| parts.len() as i32),
        content_length: Some(length as i64),
        content_range,
        accept_ranges: Some("bytes".into()),
        e_tag: Some(etag(&rec)),
        last_modified: Some(timestamp(rec.modified_ms)),
        content_type: Some(content_type(&rec)),
        metadata: user_meta(&rec),
        version_id: shown_version(&rec.version),
        ..Default::default()
    };
    // As on GET: the whole object's checksum, or the part's.
    if wants_checksum(&input.checksum_mode) {
        match input.part_number {
            None => {
                set_checksum!(out, rec.checksum.as_ref(), typed);
            }
            Some(n) => {
                set_checksum!(out, part n of &rec);
            }
        }
    }
    // (206 is set by the server: s3s answers every HEAD 200.)
    let mut resp = S3Response::new(out);
    serve_headers(&rec, &mut resp);
    replication_header(s3, tenant, (&input.bucket, &input.key), &rec, &mut resp);
    Ok(resp)
}

pub(super) async fn delete_object(
    s3: &CairnS3,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let tenant = s3.tenant(&req)?;
    let bypass = access_bypass(s3, &req, req.input.bypass_governance_retention)?;
    let input = req.input;
    let version = version_arg(input.version_id.as_deref())?.map(str::to_string);
    if input.if_match_last_modified_time.is_some() || input.if_match_size.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "x-amz-if-match-last-modified-time and x-amz-if-match-size are not implemented; use If-Match"
        ));
    }
    let cond = precondition(input.if_match, None)?;
    let deleted = s3
        .store
        .delete_version(tenant, &input.bucket, &input.key, cond, version, bypass)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: deleted.as_ref().filter(|d| d.marker).map(|_| true),
        version_id: deleted.as_ref().and_then(|d| shown_version(&d.version)),
        ..Default::default()
    }))
}

pub(super) async fn delete_objects(
    s3: &CairnS3,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let tenant = s3.tenant(&req)?;
    let bypass = access_bypass(s3, &req, req.input.bypass_governance_retention)?;
    let input = req.input;
    s3.store
        .bucket(tenant, &input.bucket)
        .await
        .map_err(to_s3)?;
    if input.delete.objects.len() > 1000 {
        return Err(s3_error!(MalformedXML, "at most 1000 keys per request"));
    }
    let quiet = input.delete.quiet.unwrap_or(false);
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for o in input.delete.objects {
        let done = match (version_arg(o.version_id.as_deref()), &o) {
            (Err(e), _) => Err(e),
            (Ok(_), o) if o.last_modified_time.is_some() || o.size.is_some() => Err(s3_error!(
                NotImplemented,
                "LastModifiedTime and Size conditions are not implemented; use ETag"
            )),
            (Ok(_), o) if o.key.starts_with(cairn_objects::SNAPSHOT_DIR) => {
                Err(crate::auth::snapshot_read_only())
            }
            (Ok(version), o) => {
                let cond = Precondition {
                    if_match: o.e_tag.as_ref().map(|e| e.value().to_string()),
                    ..Default::default()
                };
                s3.store
                    .delete_version(
                        tenant,
                        &input.bucket,
                        &o.key,
                        cond,
                        version.map(str::to_string),
                        bypass,
                    )
                    .await
                    .map_err(to_s3)
            }
        };
        match done {
            Ok(d) => {
                if !quiet {
                    // S3's answer: the version deleted as asked, or the delete
                    // marker a delete of the latest made.
                    let marker = d.as_ref().is_some_and(|d| d.marker);
                    let id = d.as_ref().and_then(|d| shown_version(&d.version));
                    let (version_id, marker_id) = match o.version_id.is_some() {
                        true => (o.version_id.clone(), marker.then(|| id.clone()).flatten()),
                        false => (None, id),
                    };
                    deleted.push(DeletedObject {
                        key: Some(o.key),
                        version_id,
                        delete_marker: marker.then_some(true),
                        delete_marker_version_id: marker_id,
                    })
                }
            }
            Err(e) => {
                errors.push(Error {
                    key: Some(o.key),
                    code: Some(e.code().as_str().to_string()),
                    message: e.message().map(|m| m.to_string()),
                    ..Default::default()
                });
            }
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: if errors.is_empty() {
            None
        } else {
            Some(errors)
        },
        ..Default::default()
    }))
}

/// The sizes of an object's parts: one per extent of a multipart object (its
/// ETag ends in `-N`), the whole object otherwise.
pub(super) fn parts_of(rec: &cairn_meta::ObjectRecord) -> Vec<u64> {
    if rec.etag.contains('-') {
        rec.extents.iter().map(|e| e.size).collect()
    } else {
        vec![rec.size]
    }
}

/// Part `n`'s bytes (`?partNumber=n`), as a half-open range.
fn part_span(parts: &[u64], n: i32) -> S3Result<(u64, u64)> {
    let i = usize::try_from(n)
        .ok()
        .filter(|&n| (1..=parts.len()).contains(&n));
    let Some(i) = i else {
        let mut e = s3s::S3Error::with_message(
            s3s::S3ErrorCode::Custom("InvalidPartNumber".into()),
            format!(
                "The requested partnumber is not satisfiable ({} parts)",
                parts.len()
            ),
        );
        e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
        return Err(e);
    };
    let start: u64 = parts[..i - 1].iter().sum();
    Ok((start, start + parts[i - 1]))
}

/// A copy's source, read under its conditions (`x-amz-copy-source-if-match`,
/// `-if-none-match`, `-if-modified-since`, `-if-unmodified-since`; each failure is
/// 412, in both directions).
pub(super) async fn copy_source(
    s3: &CairnS3,
    tenant: u64,
    source: &CopySource,
    [if_match, if_none_match]: [&Option<ETagCondition>; 2],
    [if_modified_since, if_unmodified_since]: [&Option<Timestamp>; 2],
) -> S3Result<(String, String, cairn_meta::ObjectRecord)> {
    let (bucket, key, version) = match source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => (
            bucket.to_string(),
            key.to_string(),
            version_arg(version_id.as_deref())?,
        ),
        _ => return Err(s3_error!(NotImplemented, "access-point copy sources")),
    };
    // A copy of a delete marker is S3's 400, not 405.
    let src = head_if(
        s3,
        tenant,
        (&bucket, &key),
        version,
        [if_match, if_none_match],
        [if_modified_since, if_unmodified_since],
    )
    .await
    .map_err(|e| {
        if *e.code() == s3s::S3ErrorCode::NotModified {
            s3_error!(PreconditionFailed)
        } else if *e.code() == s3s::S3ErrorCode::MethodNotAllowed {
            s3_error!(
                InvalidRequest,
                "The source of a copy request may not specifically refer to a delete marker by version id."
            )
        } else {
            e
        }
    })?;
    Ok((bucket, key, src))
}

/// The object's manifest (its current version, or `version`), if a read's
/// conditions hold (S3's rules: a failed If-Match or If-Unmodified-Since is 412,
/// a matched If-None-Match or an unmodified If-Modified-Since is 304). A key
/// whose latest version is a delete marker is 404 with `x-amz-delete-marker`;
/// a version that is a delete marker is 405.
pub(super) async fn head_if(
    s3: &CairnS3,
    tenant: u64,
    (bucket, key): (&str, &str),
    version: Option<&str>,
    [if_match, if_none_match]: [&Option<ETagCondition>; 2],
    [if_modified_since, if_unmodified_since]: [&Option<Timestamp>; 2],
) -> S3Result<cairn_meta::ObjectRecord> {
    let rec = match version {
        // A key under `.snapshot/NAME/` as the snapshot sees it.
        None if cairn_objects::snapshot_key(key).is_some() => s3
            .store
            .head_view(tenant, bucket, key)
            .await
            .map_err(to_s3)?,
        None => match s3.store.head_object(tenant, bucket, key).await {
            Ok(rec) => rec,
            Err(e) => {
                let mut e = to_s3(e);
                if *e.code() == s3s::S3ErrorCode::NoSuchKey {
                    if let Ok(Some(m)) = s3.store.latest_marker(tenant, bucket, key).await {
                        delete_marker_headers(&mut e, &m);
                    }
                }
                return Err(e);
            }
        },
        Some(id) => match s3
            .store
            .object_version(tenant, bucket, key, id)
            .await
            .map_err(to_s3)?
        {
            Some((Version::Object(rec), _)) => *rec,
            Some((Version::DeleteMarker { version, .. }, _)) => {
                let mut e = s3_error!(
                    MethodNotAllowed,
                    "The specified method is not allowed against this resource."
                );
                delete_marker_headers(&mut e, &version);
                return Err(e);
            }
            None => {
                return Err(s3_error!(
                    NoSuchVersion,
                    "The specified version does not exist."
                ))
            }
        },
    };
    check_read_conditions(
        &rec,
        if_match,
        if_none_match,
        if_modified_since,
        if_unmodified_since,
    )?;
    Ok(rec)
}

/// The manifest of `bucket/key`, its current version or the one `version_id`
/// names (validated here), without read conditions: see [`head_if`].
pub(super) async fn version_of(
    s3: &CairnS3,
    tenant: u64,
    (bucket, key): (&str, &str),
    version_id: Option<&str>,
) -> S3Result<cairn_meta::ObjectRecord> {
    let version = version_arg(version_id)?;
    head_if(
        s3,
        tenant,
        (bucket, key),
        version,
        [&None, &None],
        [&None, &None],
    )
    .await
}

pub(super) async fn copy_object(
    s3: &CairnS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let tenant = s3.tenant(&req)?;
    access::refuse_sse(&req.headers)?;
    access::refuse_unkept(&req.headers)?;
    access::refuse_grants(&req.headers, None, "")?;
    let input = req.input;
    let (src_bucket, src_key, src) = copy_source(
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
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    let from_version = matches!(
        &input.copy_source,
        CopySource::Bucket {
            version_id: Some(_),
            ..
        }
    );
    // (A version copied onto its own key is how a versioned object is restored.)
    if src_bucket == input.bucket && src_key == input.key && !replace && !from_version {
        return Err(s3_error!(
            InvalidRequest,
            "copying an object onto itself without changing its metadata is not allowed"
        ));
    }
    let mut attrs = if replace {
        attrs(&req.headers, input.content_type, input.metadata)?
    } else {
        ObjectAttrs {
            content_type: src.content_type.clone(),
            user_meta: src.user_meta.clone(),
            headers: src.headers.clone(),
            ..Default::default()
        }
    };
    // Tags are copied unless `x-amz-tagging-directive: REPLACE` gives new ones.
    attrs.tags = match input.tagging_directive.as_ref().map(|d| d.as_str()) {
        Some(TaggingDirective::REPLACE) => super::tagging::from_header(input.tagging.as_deref())?,
        None | Some(TaggingDirective::COPY) => src.tags.clone(),
        Some(other) => {
            return Err(s3_error!(
                InvalidArgument,
                "Unknown tagging directive: {other}"
            ))
        }
    };
    // The copy's lock is what the request asks (or the bucket's default),
    // never the source's, as in S3.
    attrs.lock = super::lock::of_write(
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    // The copy is one piece: its checksum is a full-object one in the algorithm
    // asked for, else the source's (made anew from the bytes, as S3 does, so a
    // composite checksum of a multipart source becomes the copy's whole CRC or
    // digest).
    let algorithm = match &input.checksum_algorithm {
        Some(a) => Some(integrity::algorithm(a.as_str()).ok_or_else(|| {
            s3_error!(
                InvalidRequest,
                "Checksum algorithm provided is unsupported."
            )
        })?),
        None => src.checksum.as_ref().map(|c| c.algorithm),
    };
    let expect = algorithm.map_or_else(Expectations::default, Expectations::computed);
    // The bytes of the very version whose conditions were checked.
    let (body, verdict) = Verified::new(s3.store.read(tenant, &src, 0, src.size), expect);
    attrs.checksum = verdict.slot.clone();
    let rec = s3
        .store
        .put_object(
            tenant,
            &input.bucket,
            &input.key,
            body,
            Some(src.size),
            attrs,
            Precondition::default(),
        )
        .await
        .map_err(|e| verdict.failure().unwrap_or_else(|| to_s3(e)))?;
    let mut result = CopyObjectResult {
        e_tag: Some(etag(&rec)),
        last_modified: Some(timestamp(rec.modified_ms)),
        ..Default::default()
    };
    set_checksum!(result, rec.checksum.as_ref(), typed);
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(result),
        version_id: shown_version(&rec.version),
        copy_source_version_id: shown_version(&src.version),
        ..Default::default()
    }))
}
