//! Buckets: create, delete, head, location, list.

use super::common::*;
use super::CairnS3;
use crate::error::to_s3;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

pub(super) async fn create_bucket(
    s3: &CairnS3,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let tenant = s3.tenant(&req)?;
    super::access::refuse_grants(&req.headers, None, "")?;
    // Object lock at creation: the bucket is versioned and locked in the same
    // step, so no write can land between.
    let locked = req.input.object_lock_enabled_for_bucket == Some(true);
    let name = &req.input.bucket;
    check_bucket_name(name)?;
    let location = req
        .input
        .create_bucket_configuration
        .as_ref()
        .and_then(|c| c.location_constraint.as_ref())
        .map(|l| l.as_str().to_string())
        // us-east-1 is the default region, kept as no constraint (AWS refuses
        // it spelt out; S3-compatible tools send it, so it is taken).
        .filter(|l| !l.is_empty() && l != "us-east-1");
    if let Some(l) = &location {
        // Any region name is taken (Cairn is one region, named as the client
        // likes), but it must look like one: it is echoed in headers.
        let ok = l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            return Err(s3_error!(
                InvalidLocationConstraint,
                "The specified location-constraint is not valid"
            ));
        }
    }
    let record = cairn_meta::BucketRecord {
        tenant,
        created_ms: cairn_meta::now_ms(),
        location,
        versioning: locked.then_some(cairn_meta::Versioning::Enabled),
        object_lock: locked.then(cairn_meta::BucketLock::default),
        ..Default::default()
    };
    s3.store
        .create_bucket_as(tenant, name, record)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{name}")),
    }))
}

pub(super) async fn delete_bucket(
    s3: &CairnS3,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .delete_bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    // Its CORS rules, if any, must not answer preflights any more.
    s3.cors.forget();
    Ok(S3Response::new(DeleteBucketOutput {}))
}

pub(super) async fn head_bucket(
    s3: &CairnS3,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    let tenant = s3.tenant(&req)?;
    let b = s3
        .store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(region(&b)),
        ..Default::default()
    }))
}

pub(super) async fn get_bucket_location(
    s3: &CairnS3,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    let tenant = s3.tenant(&req)?;
    let b = s3
        .store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    // S3 answers an empty constraint for us-east-1.
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint: b.location.map(BucketLocationConstraint::from),
    }))
}

/// The bucket's region as S3 names it in `x-amz-bucket-region` and listings.
fn region(b: &cairn_meta::BucketRecord) -> String {
    b.location
        .clone()
        .unwrap_or_else(|| "us-east-1".to_string())
}

pub(super) async fn list_buckets(
    s3: &CairnS3,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    // S3's paging: `prefix`, `max-buckets` (1..=10000) and an opaque continuation
    // token, here the last name of the page before (names are listed in order).
    let max = match input.max_buckets {
        None => usize::MAX,
        Some(m) if (1..=10_000).contains(&m) => m as usize,
        Some(_) => {
            return Err(s3_error!(
                InvalidArgument,
                "max-buckets must be between 1 and 10000"
            ))
        }
    };
    let prefix = input.prefix.clone().unwrap_or_default();
    let after = input.continuation_token.clone().filter(|t| !t.is_empty());
    let mut all: Vec<_> = s3
        .store
        .list_buckets(tenant)
        .await
        .map_err(to_s3)?
        .into_iter()
        // Buckets named with a leading `_` belong to other front ends (RESP's
        // keyspace): no S3 request can name them, so S3 does not list them.
        .filter(|(name, _)| !name.starts_with('_') && name.starts_with(&prefix))
        .filter(|(name, _)| after.as_ref().is_none_or(|a| name > a))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let more = all.len() > max;
    all.truncate(max);
    let next = more.then(|| all.last().map(|(n, _)| n.clone())).flatten();
    let buckets = all
        .into_iter()
        .map(|(name, b)| Bucket {
            name: Some(name),
            creation_date: Some(timestamp(b.created_ms)),
            bucket_region: Some(region(&b)),
        })
        .collect();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        continuation_token: next,
        prefix: input.prefix,
        owner: Some(super::access::owner(tenant)),
    }))
}
