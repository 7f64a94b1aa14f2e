//! What the operations share: conditions, attributes, names, listing tokens.

use crate::encoding::KeyEncoding;
use cairn_meta::{After, ObjectRecord, Precondition};
use cairn_objects::ObjectAttrs;
use s3s::dto::*;
use s3s::{s3_error, S3Result};
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

pub(super) fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

pub(super) fn unix_secs(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

pub(super) fn etag(rec: &ObjectRecord) -> ETag {
    ETag::Strong(rec.etag.clone())
}

/// The object's Content-Type; S3 serves one stored without as
/// `binary/octet-stream`.
pub(super) fn content_type(rec: &ObjectRecord) -> ContentType {
    rec.content_type
        .clone()
        .unwrap_or_else(|| "binary/octet-stream".to_string())
}

pub(super) fn cond_matches(cond: &ETagCondition, rec: &ObjectRecord) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == rec.etag,
    }
}

/// A write's conditions. S3 takes only `If-None-Match: *` on a write; any other
/// value is refused (501) rather than ignored, since ignoring it would overwrite
/// what the client asked to keep.
pub(super) fn precondition(
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
        ..Default::default()
    })
}

/// A version id a request names: `null` or one of Cairn's (any other string
/// names nothing S3 could have given out: refused rather than ignored, so a
/// request for one version never reaches another).
pub(super) fn version_arg(v: Option<&str>) -> S3Result<Option<&str>> {
    match v {
        None => Ok(None),
        Some(v) if cairn_meta::valid_id(v) => Ok(Some(v)),
        Some(_) => Err(s3_error!(InvalidArgument, "Invalid version id specified")),
    }
}

/// The `x-amz-version-id` S3 answers for a version: its id (`null` for the
/// null version), once its bucket has versioning configured; none before.
pub(super) fn shown_version(v: &cairn_meta::VersionStamp) -> Option<String> {
    v.has_id().then(|| v.shown().to_string())
}

/// Marks an error as S3 marks answers about a delete marker:
/// `x-amz-delete-marker: true` and the marker's version id.
pub(super) fn delete_marker_headers(e: &mut s3s::S3Error, v: &cairn_meta::VersionStamp) {
    let mut headers = e.headers().cloned().unwrap_or_default();
    headers.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Ok(id) = http::HeaderValue::from_str(v.shown()) {
        headers.insert("x-amz-version-id", id);
    }
    e.set_headers(headers);
}

/// S3's rules for GET/HEAD conditions: If-Match beats If-Unmodified-Since, and
/// If-None-Match beats If-Modified-Since.
pub(super) fn check_read_conditions(
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
pub(super) fn not_modified(rec: &ObjectRecord) -> s3s::S3Error {
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

/// The standard headers S3 keeps with an object and serves back as they were.
const KEPT_HEADERS: [&str; 5] = [
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
];

/// S3's limit on user metadata: the UTF-8 bytes of every name and value, summed.
const MAX_USER_METADATA: usize = 2048;

pub(super) fn attrs(
    headers: &http::HeaderMap,
    content_type: Option<String>,
    metadata: Option<Metadata>,
) -> S3Result<ObjectAttrs> {
    let user_meta: BTreeMap<String, String> = metadata
        .map(|m| m.into_iter().collect())
        .unwrap_or_default();
    let size: usize = user_meta.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_USER_METADATA {
        return Err(s3_error!(
            MetadataTooLarge,
            "Your metadata headers exceed the maximum allowed metadata size: {size} bytes of {MAX_USER_METADATA}"
        ));
    }
    let mut kept = BTreeMap::new();
    for name in KEPT_HEADERS {
        let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        // `aws-chunked` names how this request's body travelled, not the object's
        // encoding: S3 drops it.
        let v = if name == "content-encoding" {
            v.split(',')
                .map(str::trim)
                .filter(|e| !e.eq_ignore_ascii_case("aws-chunked") && !e.is_empty())
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            v.trim().to_string()
        };
        if !v.is_empty() {
            kept.insert(name.to_string(), v);
        }
    }
    Ok(ObjectAttrs {
        content_type,
        user_meta,
        headers: kept,
        ..Default::default()
    })
}

/// `x-amz-replication-status` for a version its bucket replicates (or a
/// replica), as S3 answers GET and HEAD.
pub(super) fn replication_header<T>(
    s3: &super::CairnS3,
    tenant: u64,
    (bucket, key): (&str, &str),
    rec: &ObjectRecord,
    resp: &mut s3s::S3Response<T>,
) {
    match s3.store.replication_state(tenant, bucket, key, rec) {
        Ok(Some(s)) => {
            resp.headers.insert(
                "x-amz-replication-status",
                http::HeaderValue::from_static(s),
            );
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("replication status of {bucket}/{key}: {e}"),
    }
}

/// Serves the object's kept headers with `resp`.
pub(super) fn serve_headers<T>(rec: &ObjectRecord, resp: &mut s3s::S3Response<T>) {
    super::lock::headers(&rec.lock, &mut resp.headers);
    for (k, v) in &rec.headers {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            resp.headers.insert(k, v);
        }
    }
}

/// Sets an output's `checksum_<algorithm>` field from a stored checksum (and,
/// with `typed`, its `checksum_type`, on the outputs that have one).
macro_rules! set_checksum {
    // Part `n`'s checksum, of the kind the object's is (a part of a composite
    // object says COMPOSITE).
    ($out:expr, part $n:ident of $rec:expr) => {{
        let p = part_checksum($rec, $n);
        set_checksum!($out, p);
        $out.checksum_type = p.and($rec.checksum.as_ref()).map($crate::integrity::kind);
    }};
    ($out:expr, $c:expr, typed) => {
        set_checksum!($out, $c);
        $out.checksum_type = $c.map($crate::integrity::kind);
    };
    ($out:expr, $c:expr) => {
        if let Some(c) = $c {
            let v = Some($crate::integrity::shown(c));
            match c.algorithm {
                cairn_meta::ChecksumAlgorithm::Crc32 => $out.checksum_crc32 = v,
                cairn_meta::ChecksumAlgorithm::Crc32c => $out.checksum_crc32c = v,
                cairn_meta::ChecksumAlgorithm::Crc64nvme => $out.checksum_crc64nvme = v,
                cairn_meta::ChecksumAlgorithm::Sha1 => $out.checksum_sha1 = v,
                cairn_meta::ChecksumAlgorithm::Sha256 => $out.checksum_sha256 = v,
            }
        }
    };
}
pub(super) use set_checksum;

/// Part `n`'s checksum, kept when the multipart object was completed.
pub(super) fn part_checksum(
    rec: &cairn_meta::ObjectRecord,
    n: i32,
) -> Option<&cairn_meta::Checksum> {
    usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| rec.part_checksums.get(i))
}

/// Whether a read asked for the stored checksum (`x-amz-checksum-mode: ENABLED`).
pub(super) fn wants_checksum(mode: &Option<ChecksumMode>) -> bool {
    mode.as_ref()
        .is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

pub(super) fn user_meta(rec: &ObjectRecord) -> Option<Metadata> {
    if rec.user_meta.is_empty() {
        None
    } else {
        Some(rec.user_meta.clone().into_iter().collect())
    }
}

/// S3's naming rules for general-purpose buckets: 3 to 63 lowercase letters,
/// digits, `.` and `-`; every dot-separated label starts and ends with a letter
/// or digit; not an IPv4 address; none of the prefixes and suffixes AWS reserves.
pub(super) fn check_bucket_name(name: &str) -> S3Result<()> {
    const RESERVED_PREFIXES: [&str; 3] = ["xn--", "sthree-", "amzn-s3-demo-"];
    const RESERVED_SUFFIXES: [&str; 5] = ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"];
    let ok = (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.split('.').all(|label| {
            let (first, last) = (label.bytes().next(), label.bytes().last());
            first.is_some_and(|b| b.is_ascii_alphanumeric())
                && last.is_some_and(|b| b.is_ascii_alphanumeric())
        })
        && name.parse::<std::net::Ipv4Addr>().is_err()
        && !RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
        && !RESERVED_SUFFIXES.iter().any(|s| name.ends_with(s));
    if ok {
        Ok(())
    } else {
        Err(s3_error!(InvalidBucketName, "invalid bucket name {name:?}"))
    }
}

pub(super) fn content_length(len: Option<i64>) -> S3Result<Option<u64>> {
    match len {
        None => Ok(None),
        Some(l) if l >= 0 => Ok(Some(l as u64)),
        Some(_) => Err(s3_error!(InvalidArgument, "negative Content-Length")),
    }
}

/// A continuation token names where the next page starts: `k` + key, or `p` +
/// common prefix. It is opaque to clients but readable in logs.
pub(super) fn encode_token(a: &After) -> String {
    match a {
        After::Key(k) => format!("k{k}"),
        After::Prefix(p) => format!("p{p}"),
    }
}

pub(super) fn decode_token(t: &str) -> S3Result<After> {
    if let Some(k) = t.strip_prefix('k') {
        Ok(After::Key(k.to_string()))
    } else if let Some(p) = t.strip_prefix('p') {
        Ok(After::Prefix(p.to_string()))
    } else {
        Err(s3_error!(InvalidArgument, "invalid continuation token"))
    }
}

pub(super) fn max_keys(m: Option<i32>) -> S3Result<usize> {
    match m {
        None => Ok(1000),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

pub(super) fn object_entry(key: String, rec: &ObjectRecord) -> Object {
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
/// says; `owner` is set on each object when the caller asked for it (V2's
/// `fetch-owner`; V1 always names the owner, as S3 does).
pub(super) fn listing_entries(
    listing: &cairn_meta::Listing,
    enc: KeyEncoding,
    owner: Option<Owner>,
) -> (Vec<Object>, Vec<CommonPrefix>) {
    let contents = listing
        .objects
        .iter()
        .map(|(k, r)| Object {
            owner: owner.clone(),
            ..object_entry(enc.key(k.clone()), r)
        })
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
