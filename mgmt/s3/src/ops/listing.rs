//! Listings: ListObjects (V1), ListObjectsV2 and ListObjectVersions.

use super::common::*;
use super::CairnS3;
use crate::encoding::KeyEncoding;
use crate::error::to_s3;
use cairn_meta::{After, Version};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

pub(super) async fn list_objects_v2(
    s3: &CairnS3,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let tenant = s3.tenant(&req)?;
    let mut input = req.input;
    let enc = KeyEncoding::of(input.encoding_type.as_ref())?;
    // An empty delimiter is no delimiter (and is not echoed), as in S3.
    input.delimiter = input.delimiter.filter(|d| !d.is_empty());
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = max_keys(input.max_keys)?;
    // An empty continuation token is no token (and is echoed back), as in S3.
    let token = input
        .continuation_token
        .as_deref()
        .filter(|t| !t.is_empty());
    let after = match (token, &input.start_after) {
        (Some(t), _) => Some(decode_token(t)?),
        (None, Some(s)) if !s.is_empty() => Some(After::Key(s.clone())),
        _ => None,
    };
    let delimiter = input.delimiter.as_deref();
    let listing = list_view(s3, tenant, &input.bucket, &prefix, after, delimiter, max).await?;
    let key_count = (listing.objects.len() + listing.prefixes.len()) as i32;
    let owner = (input.fetch_owner == Some(true)).then(|| super::access::owner(tenant));
    let (contents, prefixes) = listing_entries(&listing, enc, owner);
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

pub(super) async fn list_objects(
    s3: &CairnS3,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let tenant = s3.tenant(&req)?;
    let mut input = req.input;
    let enc = KeyEncoding::of(input.encoding_type.as_ref())?;
    input.delimiter = input.delimiter.filter(|d| !d.is_empty());
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = max_keys(input.max_keys)?;
    let after = after_marker(input.marker.clone(), &prefix, input.delimiter.as_deref());
    let delimiter = input.delimiter.as_deref();
    let listing = list_view(s3, tenant, &input.bucket, &prefix, after, delimiter, max).await?;
    // V1's NextMarker is the last key or prefix returned; a prefix marker is
    // recognised as one when it comes back (see `after` above).
    let next_marker = listing.next.as_ref().map(|a| match a {
        After::Key(k) | After::Prefix(k) => k.clone(),
    });
    let (contents, prefixes) = listing_entries(&listing, enc, Some(super::access::owner(tenant)));
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

/// A page of the bucket or of its snapshots (see `ObjectStore::list_view`).
async fn list_view(
    s3: &CairnS3,
    tenant: u64,
    bucket: &str,
    prefix: &str,
    after: Option<After>,
    delimiter: Option<&str>,
    max: usize,
) -> S3Result<cairn_meta::Listing> {
    let store = &s3.store;
    let listing = store.list_view(tenant, bucket, prefix, after, delimiter, max);
    listing.await.map_err(to_s3)
}

/// Where a V1 marker resumes. A marker that is itself a common prefix (the
/// NextMarker of a page that ended on one) resumes past every key under it:
/// those keys sort after the marker and would otherwise roll up into the same
/// prefix again.
fn after_marker(marker: Option<String>, prefix: &str, delimiter: Option<&str>) -> Option<After> {
    marker.filter(|m| !m.is_empty()).map(|m| match delimiter {
        Some(d)
            if m.starts_with(prefix)
                && m[prefix.len()..]
                    .find(d)
                    .map(|p| prefix.len() + p + d.len())
                    == Some(m.len()) =>
        {
            After::Prefix(m)
        }
        _ => After::Key(m),
    })
}

/// Every version of every key: the objects (current and noncurrent) as
/// `Version`, the delete markers as `DeleteMarker`, keys in byte order and each
/// key's versions newest first (a bucket never versioned lists each object as
/// its `null` version, the latest).
pub(super) async fn list_object_versions(
    s3: &CairnS3,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let tenant = s3.tenant(&req)?;
    let mut input = req.input;
    let enc = KeyEncoding::of(input.encoding_type.as_ref())?;
    input.delimiter = input.delimiter.filter(|d| !d.is_empty());
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = max_keys(input.max_keys)?;
    let key_marker = input.key_marker.clone().filter(|m| !m.is_empty());
    let version_marker = input.version_id_marker.as_deref().filter(|v| !v.is_empty());
    if version_marker.is_some() && key_marker.is_none() {
        return Err(s3_error!(
            InvalidArgument,
            "A version-id marker cannot be specified without a key marker."
        ));
    }
    version_arg(version_marker)?;
    let listing = s3
        .store
        .list_object_versions(
            tenant,
            &input.bucket,
            &prefix,
            key_marker.as_deref(),
            version_marker,
            input.delimiter.as_deref(),
            max,
        )
        .await
        .map_err(to_s3)?;
    let owner = super::access::owner(tenant);
    let mut versions = Vec::new();
    let mut markers = Vec::new();
    for e in listing.entries {
        let id = Some(e.version.stamp().shown().to_string());
        match &e.version {
            Version::Object(rec) => {
                let o = object_entry(enc.key(e.key.clone()), rec);
                versions.push(ObjectVersion {
                    e_tag: o.e_tag,
                    checksum_algorithm: o.checksum_algorithm,
                    is_latest: Some(e.latest),
                    key: o.key,
                    last_modified: o.last_modified,
                    owner: Some(owner.clone()),
                    size: o.size,
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    version_id: id,
                    ..Default::default()
                });
            }
            Version::DeleteMarker { modified_ms, .. } => markers.push(DeleteMarkerEntry {
                is_latest: Some(e.latest),
                key: Some(enc.key(e.key.clone())),
                last_modified: Some(timestamp(*modified_ms)),
                owner: Some(owner.clone()),
                version_id: id,
            }),
        }
    }
    let prefixes: Vec<CommonPrefix> = listing
        .prefixes
        .into_iter()
        .map(|p| CommonPrefix {
            prefix: Some(enc.key(p)),
        })
        .collect();
    let (next_key, next_version) = match listing.next {
        Some((k, v)) => (Some(k), v),
        None => (None, None),
    };
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: enc.opt(input.prefix),
        delimiter: enc.opt(input.delimiter),
        key_marker: Some(enc.key(input.key_marker.unwrap_or_default())),
        version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
        max_keys: Some(max as i32),
        is_truncated: Some(next_key.is_some()),
        next_key_marker: enc.opt(next_key),
        next_version_id_marker: next_version,
        versions: (!versions.is_empty()).then_some(versions),
        delete_markers: (!markers.is_empty()).then_some(markers),
        common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}
