//! The S3 operations Cairn serves, each a thin translation onto the object store.

use crate::auth::Keys;
use crate::encoding::KeyEncoding;
use crate::error::to_s3;
use cairn_meta::{After, ObjectRecord, Precondition};
use cairn_objects::{ObjectAttrs, ObjectStore};
use futures::StreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// The S3 service.
#[derive(Clone)]
pub struct CairnS3 {
    store: Arc<ObjectStore>,
    keys: Keys,
}

impl std::fmt::Debug for CairnS3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CairnS3")
    }
}

impl CairnS3 {
    pub fn new(store: Arc<ObjectStore>, keys: Keys) -> CairnS3 {
        CairnS3 { store, keys }
    }

    /// The tenant of an authenticated request. `s3s` has already verified the
    /// signature; anonymous requests are refused here (no public buckets yet).
    fn tenant<T>(&self, req: &S3Request<T>) -> S3Result<u64> {
        let creds = req
            .credentials
            .as_ref()
            .ok_or_else(|| s3_error!(AccessDenied, "anonymous access is not allowed"))?;
        self.keys
            .tenant(&creds.access_key)
            .ok_or_else(|| s3_error!(InvalidAccessKeyId))
    }
}

fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

fn unix_secs(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

fn etag(rec: &ObjectRecord) -> ETag {
    ETag::Strong(rec.etag.clone())
}

/// The object's Content-Type; S3 serves one stored without as
/// `binary/octet-stream`.
fn content_type(rec: &ObjectRecord) -> ContentType {
    rec.content_type
        .clone()
        .unwrap_or_else(|| "binary/octet-stream".to_string())
}

fn cond_matches(cond: &ETagCondition, rec: &ObjectRecord) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == rec.etag,
    }
}

/// A write's conditions. S3 takes only `If-None-Match: *` on a write; any other
/// value is refused (501) rather than ignored, since ignoring it would overwrite
/// what the client asked to keep.
fn precondition(
    if_match: Option<ETagCondition>,
    if_none_match: Option<ETagCondition>,
) -> S3Result<Precondition> {
    if let Some(ETagCondition::ETag(_)) = if_none_match {
        return Err(s3_error!(
            NotImplemented,
            "A header you provided implies functionality that is not implemented: If-None-Match takes only * on a write"
        ));
    }
    Ok(Precondition {
        if_match: if_match.map(|c| match c {
            ETagCondition::Any => "*".to_string(),
            ETagCondition::ETag(e) => e.value().to_string(),
        }),
        if_none_match_any: matches!(if_none_match, Some(ETagCondition::Any)),
    })
}

/// S3's rules for GET/HEAD conditions: If-Match beats If-Unmodified-Since, and
/// If-None-Match beats If-Modified-Since.
fn check_read_conditions(
    rec: &ObjectRecord,
    if_match: &Option<ETagCondition>,
    if_none_match: &Option<ETagCondition>,
    if_modified_since: &Option<Timestamp>,
    if_unmodified_since: &Option<Timestamp>,
) -> S3Result<()> {
    let modified = rec.modified_ms / 1000;
    if let Some(c) = if_match {
        if !cond_matches(c, rec) {
            return Err(s3_error!(PreconditionFailed));
        }
    } else if let Some(t) = if_unmodified_since {
        if modified > unix_secs(t) {
            return Err(s3_error!(PreconditionFailed));
        }
    }
    if let Some(c) = if_none_match {
        if cond_matches(c, rec) {
            return Err(not_modified(rec));
        }
    } else if let Some(t) = if_modified_since {
        if modified <= unix_secs(t) {
            return Err(not_modified(rec));
        }
    }
    Ok(())
}

/// 304 Not Modified with the validators S3 sends with it, so a cache can
/// refresh its entry: the ETag and Last-Modified of the current version.
fn not_modified(rec: &ObjectRecord) -> s3s::S3Error {
    let mut e = s3_error!(NotModified);
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = etag(rec).to_http_header() {
        headers.insert(http::header::ETAG, v);
    }
    let mut date = Vec::new();
    if timestamp(rec.modified_ms)
        .format(TimestampFormat::HttpDate, &mut date)
        .is_ok()
    {
        if let Ok(v) = http::HeaderValue::from_bytes(&date) {
            headers.insert(http::header::LAST_MODIFIED, v);
        }
    }
    e.set_headers(headers);
    e
}

fn attrs(content_type: Option<String>, metadata: Option<Metadata>) -> ObjectAttrs {
    ObjectAttrs {
        content_type,
        user_meta: metadata
            .map(|m| m.into_iter().collect::<BTreeMap<_, _>>())
            .unwrap_or_default(),
    }
}

fn user_meta(rec: &ObjectRecord) -> Option<Metadata> {
    if rec.user_meta.is_empty() {
        None
    } else {
        Some(rec.user_meta.clone().into_iter().collect())
    }
}

fn check_bucket_name(name: &str) -> S3Result<()> {
    let ok = (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..");
    if ok {
        Ok(())
    } else {
        Err(s3_error!(InvalidBucketName, "invalid bucket name {name:?}"))
    }
}

fn content_length(len: Option<i64>) -> S3Result<Option<u64>> {
    match len {
        None => Ok(None),
        Some(l) if l >= 0 => Ok(Some(l as u64)),
        Some(_) => Err(s3_error!(InvalidArgument, "negative Content-Length")),
    }
}

/// A continuation token names where the next page starts: `k` + key, or `p` +
/// common prefix. It is opaque to clients but readable in logs.
fn encode_token(a: &After) -> String {
    match a {
        After::Key(k) => format!("k{k}"),
        After::Prefix(p) => format!("p{p}"),
    }
}

fn decode_token(t: &str) -> S3Result<After> {
    if let Some(k) = t.strip_prefix('k') {
        Ok(After::Key(k.to_string()))
    } else if let Some(p) = t.strip_prefix('p') {
        Ok(After::Prefix(p.to_string()))
    } else {
        Err(s3_error!(InvalidArgument, "invalid continuation token"))
    }
}

fn max_keys(m: Option<i32>) -> S3Result<usize> {
    match m {
        None => Ok(1000),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

fn object_entry(key: String, rec: &ObjectRecord) -> Object {
    Object {
        key: Some(key),
        size: Some(rec.size as i64),
        e_tag: Some(etag(rec)),
        last_modified: Some(timestamp(rec.modified_ms)),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        ..Default::default()
    }
}

/// A listing page as S3's `Contents` and `CommonPrefixes`, keys written as `enc`
/// says.
fn listing_entries(
    listing: &cairn_meta::Listing,
    enc: KeyEncoding,
) -> (Vec<Object>, Vec<CommonPrefix>) {
    let contents = listing
        .objects
        .iter()
        .map(|(k, r)| object_entry(enc.key(k.clone()), r))
        .collect();
    let prefixes = listing
        .prefixes
        .iter()
        .map(|p| CommonPrefix {
            prefix: Some(enc.key(p.clone())),
        })
        .collect();
    (contents, prefixes)
}

#[async_trait::async_trait]
impl S3 for CairnS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let tenant = self.tenant(&req)?;
        let name = &req.input.bucket;
        check_bucket_name(name)?;
        match self
            .store
            .meta()
            .bucket(name)
            .map_err(|e| to_s3(e.into()))?
        {
            Some(b) if b.tenant != tenant => return Err(s3_error!(BucketAlreadyExists)),
            _ => {}
        }
        self.store
            .create_bucket(tenant, name)
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let tenant = self.tenant(&req)?;
        self.store
            .delete_bucket(tenant, &req.input.bucket)
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let tenant = self.tenant(&req)?;
        self.store
            .bucket(tenant, &req.input.bucket)
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let tenant = self.tenant(&req)?;
        self.store
            .bucket(tenant, &req.input.bucket)
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let tenant = self.tenant(&req)?;
        let buckets = self
            .store
            .list_buckets(tenant)
            .await
            .map_err(to_s3)?
            .into_iter()
            .map(|(name, b)| Bucket {
                name: Some(name),
                creation_date: Some(timestamp(b.created_ms)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        let len = content_length(input.content_length)?;
        let body = match input.body {
            Some(b) => b,
            None if len.unwrap_or(0) == 0 => StreamingBlob::wrap(futures::stream::empty::<
                Result<bytes::Bytes, std::io::Error>,
            >()),
            None => return Err(s3_error!(IncompleteBody)),
        };
        let body = Md5Checked::new(body, input.content_md5.as_deref())?;
        let mismatch = body.mismatch.clone();
        let rec = self
            .store
            .put_object(
                tenant,
                &input.bucket,
                &input.key,
                body,
                len,
                attrs(input.content_type, input.metadata),
                precondition(input.if_match, input.if_none_match)?,
            )
            .await
            .map_err(|e| md5_error(&mismatch).unwrap_or_else(|| to_s3(e)))?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(etag(&rec)),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        let rec = self
            .store
            .head_object(tenant, &input.bucket, &input.key)
            .await
            .map_err(to_s3)?;
        check_read_conditions(
            &rec,
            &input.if_match,
            &input.if_none_match,
            &input.if_modified_since,
            &input.if_unmodified_since,
        )?;
        let (start, end, content_range) = match &input.range {
            None => (0, rec.size, None),
            Some(r) => {
                let rr = r.check(rec.size).map_err(|_| {
                    s3_error!(InvalidRange, "range not satisfiable for {} bytes", rec.size)
                })?;
                let cr = format!("bytes {}-{}/{}", rr.start, rr.end - 1, rec.size);
                (rr.start, rr.end, Some(cr))
            }
        };
        let mut stream = self.store.read(tenant, &rec, start, end);
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
        Ok(S3Response::new(GetObjectOutput {
            body: Some(body),
            content_length: Some((end - start) as i64),
            content_range,
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&rec)),
            last_modified: Some(timestamp(rec.modified_ms)),
            content_type: Some(content_type(&rec)),
            metadata: user_meta(&rec),
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        let rec = self
            .store
            .head_object(tenant, &input.bucket, &input.key)
            .await
            .map_err(to_s3)?;
        check_read_conditions(
            &rec,
            &input.if_match,
            &input.if_none_match,
            &input.if_modified_since,
            &input.if_unmodified_since,
        )?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(rec.size as i64),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&rec)),
            last_modified: Some(timestamp(rec.modified_ms)),
            content_type: Some(content_type(&rec)),
            metadata: user_meta(&rec),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let tenant = self.tenant(&req)?;
        self.store
            .delete_object(tenant, &req.input.bucket, &req.input.key)
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        self.store
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
            match self
                .store
                .delete_object(tenant, &input.bucket, &o.key)
                .await
            {
                Ok(()) => {
                    if !quiet {
                        deleted.push(DeletedObject {
                            key: Some(o.key),
                            ..Default::default()
                        })
                    }
                }
                Err(e) => {
                    let e = to_s3(e);
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

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        let (src_bucket, src_key) = match &input.copy_source {
            CopySource::Bucket { bucket, key, .. } => (bucket.to_string(), key.to_string()),
            _ => return Err(s3_error!(NotImplemented, "access-point copy sources")),
        };
        let src = self
            .store
            .head_object(tenant, &src_bucket, &src_key)
            .await
            .map_err(to_s3)?;
        check_read_conditions(
            &src,
            &input.copy_source_if_match,
            &input.copy_source_if_none_match,
            &input.copy_source_if_modified_since,
            &input.copy_source_if_unmodified_since,
        )
        .map_err(|e| {
            // Copy conditions fail with 412 in both directions.
            if *e.code() == s3s::S3ErrorCode::NotModified {
                s3_error!(PreconditionFailed)
            } else {
                e
            }
        })?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if src_bucket == input.bucket && src_key == input.key && !replace {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object onto itself without changing its metadata is not allowed"
            ));
        }
        let new_attrs = replace.then(|| attrs(input.content_type, input.metadata));
        let rec = self
            .store
            .copy_object(
                tenant,
                &src_bucket,
                &src_key,
                &input.bucket,
                &input.key,
                new_attrs,
                Precondition::default(),
            )
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag(&rec)),
                last_modified: Some(timestamp(rec.modified_ms)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let tenant = self.tenant(&req)?;
        let mut input = req.input;
        let enc = KeyEncoding::of(input.encoding_type.as_ref())?;
        // An empty delimiter is no delimiter (and is not echoed), as in S3.
        input.delimiter = input.delimiter.filter(|d| !d.is_empty());
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = max_keys(input.max_keys)?;
        let after = match (&input.continuation_token, &input.start_after) {
            (Some(t), _) => Some(decode_token(t)?),
            (None, Some(s)) if !s.is_empty() => Some(After::Key(s.clone())),
            _ => None,
        };
        let listing = self
            .store
            .list_objects(
                tenant,
                &input.bucket,
                &prefix,
                after,
                input.delimiter.as_deref(),
                max,
            )
            .await
            .map_err(to_s3)?;
        let key_count = (listing.objects.len() + listing.prefixes.len()) as i32;
        let (contents, prefixes) = listing_entries(&listing, enc);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: enc.opt(input.prefix),
            delimiter: enc.opt(input.delimiter),
            max_keys: Some(max as i32),
            key_count: Some(key_count),
            is_truncated: Some(listing.next.is_some()),
            continuation_token: input.continuation_token,
            next_continuation_token: listing.next.as_ref().map(encode_token),
            start_after: enc.opt(input.start_after),
            contents: (!contents.is_empty()).then_some(contents),
            common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let tenant = self.tenant(&req)?;
        let mut input = req.input;
        let enc = KeyEncoding::of(input.encoding_type.as_ref())?;
        input.delimiter = input.delimiter.filter(|d| !d.is_empty());
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = max_keys(input.max_keys)?;
        // A marker that is itself a common prefix (the NextMarker of a page that
        // ended on one) resumes past every key under it: those keys sort after the
        // marker and would otherwise roll up into the same prefix again.
        let delimiter = input.delimiter.as_deref();
        let after = input
            .marker
            .clone()
            .filter(|m| !m.is_empty())
            .map(|m| match delimiter {
                Some(d)
                    if m.starts_with(&prefix)
                        && m[prefix.len()..]
                            .find(d)
                            .map(|p| prefix.len() + p + d.len())
                            == Some(m.len()) =>
                {
                    After::Prefix(m)
                }
                _ => After::Key(m),
            });
        let listing = self
            .store
            .list_objects(
                tenant,
                &input.bucket,
                &prefix,
                after,
                input.delimiter.as_deref(),
                max,
            )
            .await
            .map_err(to_s3)?;
        // V1's NextMarker is the last key or prefix returned; a prefix marker is
        // recognised as one when it comes back (see `after` above).
        let next_marker = listing.next.as_ref().map(|a| match a {
            After::Key(k) | After::Prefix(k) => k.clone(),
        });
        let (contents, prefixes) = listing_entries(&listing, enc);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: enc.opt(input.prefix),
            delimiter: enc.opt(input.delimiter),
            // Always present in S3's V1 answer, empty when none was given.
            marker: Some(enc.key(input.marker.unwrap_or_default())),
            max_keys: Some(max as i32),
            is_truncated: Some(next_marker.is_some()),
            next_marker: enc.opt(next_marker),
            contents: (!contents.is_empty()).then_some(contents),
            common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        let id = self
            .store
            .create_upload(
                tenant,
                &input.bucket,
                &input.key,
                attrs(input.content_type, input.metadata),
            )
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        let len = content_length(input.content_length)?;
        let part = u32::try_from(input.part_number)
            .map_err(|_| s3_error!(InvalidArgument, "invalid part number"))?;
        let body = match input.body {
            Some(b) => b,
            None if len.unwrap_or(0) == 0 => StreamingBlob::wrap(futures::stream::empty::<
                Result<bytes::Bytes, std::io::Error>,
            >()),
            None => return Err(s3_error!(IncompleteBody)),
        };
        let body = Md5Checked::new(body, input.content_md5.as_deref())?;
        let mismatch = body.mismatch.clone();
        let md5 = self
            .store
            .upload_part(
                tenant,
                &input.bucket,
                &input.key,
                &input.upload_id,
                part,
                body,
                len,
            )
            .await
            .map_err(|e| md5_error(&mismatch).unwrap_or_else(|| to_s3(e)))?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(md5)),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        let parts = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        if parts.is_empty() {
            return Err(s3_error!(MalformedXML, "the upload lists no parts"));
        }
        let mut chosen = Vec::with_capacity(parts.len());
        for p in parts {
            let n = p
                .part_number
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| s3_error!(InvalidPart, "a part has no valid number"))?;
            let e = p
                .e_tag
                .map(|e| e.value().to_string())
                .ok_or_else(|| s3_error!(InvalidPart, "part {n} has no ETag"))?;
            chosen.push((n, e));
        }
        let rec = self
            .store
            .complete_upload(
                tenant,
                &input.bucket,
                &input.key,
                &input.upload_id,
                chosen,
                precondition(input.if_match, input.if_none_match)?,
            )
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            e_tag: Some(etag(&rec)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        self.store
            .abort_upload(tenant, &input.bucket, &input.key, &input.upload_id)
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        self.store
            .upload(tenant, &input.bucket, &input.upload_id, &input.key)
            .await
            .map_err(to_s3)?;
        let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let marker = input.part_number_marker.unwrap_or(0).max(0) as u32;
        let all = self
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
            .map(|(n, p)| Part {
                part_number: Some(n as i32),
                e_tag: Some(ETag::Strong(p.etag)),
                size: Some(p.extent.size as i64),
                last_modified: Some(timestamp(p.modified_ms)),
                ..Default::default()
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

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let tenant = self.tenant(&req)?;
        let input = req.input;
        let enc = KeyEncoding::of(input.encoding_type.as_ref())?;
        self.store
            .bucket(tenant, &input.bucket)
            .await
            .map_err(to_s3)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let id_marker = input.upload_id_marker.clone().unwrap_or_default();
        let all = self
            .store
            .meta()
            .uploads(&input.bucket)
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
}

/// A request body checked against its Content-MD5 while it streams: when the
/// digest differs, the stream fails at its end instead of ending, so the object
/// layer commits nothing (and an object or part already under the name stays).
struct Md5Checked<S> {
    inner: S,
    /// The running digest and the expected one, when a Content-MD5 was sent.
    check: Option<(s3s::crypto::Md5, [u8; 16])>,
    mismatch: Arc<std::sync::atomic::AtomicBool>,
}

impl<S> Md5Checked<S> {
    fn new(inner: S, content_md5: Option<&str>) -> S3Result<Md5Checked<S>> {
        use base64::Engine;
        use s3s::crypto::Checksum;
        let check = match content_md5 {
            None => None,
            Some(h) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(h.trim())
                    .ok()
                    .and_then(|r| <[u8; 16]>::try_from(r).ok())
                    .ok_or_else(|| s3_error!(InvalidDigest, "Content-MD5 is not a base64 MD5"))?;
                Some((s3s::crypto::Md5::new(), raw))
            }
        };
        Ok(Md5Checked {
            inner,
            check,
            mismatch: Arc::default(),
        })
    }
}

impl<S, E> futures::Stream for Md5Checked<S>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    type Item = Result<bytes::Bytes, String>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use s3s::crypto::Checksum;
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(b))) => {
                if let Some((md5, _)) = this.check.as_mut() {
                    md5.update(&b);
                }
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.to_string()))),
            Poll::Ready(None) => match this.check.take() {
                Some((md5, want)) => {
                    if md5.finalize() == want {
                        return Poll::Ready(None);
                    }
                    this.mismatch
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    Poll::Ready(Some(Err("Content-MD5 does not match the body".into())))
                }
                None => Poll::Ready(None),
            },
            Poll::Pending => Poll::Pending,
        }
    }
}

/// BadDigest, when the body failed its Content-MD5 check.
fn md5_error(mismatch: &std::sync::atomic::AtomicBool) -> Option<s3s::S3Error> {
    mismatch
        .load(std::sync::atomic::Ordering::Relaxed)
        .then(|| s3_error!(BadDigest, "Content-MD5 does not match the body"))
}
