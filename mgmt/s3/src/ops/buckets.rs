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
    let name = &req.input.bucket;
    check_bucket_name(name)?;
    match s3.store.meta().bucket(name).map_err(|e| to_s3(e.into()))? {
        Some(b) if b.tenant != tenant => return Err(s3_error!(BucketAlreadyExists)),
        _ => {}
    }
    s3.store.create_bucket(tenant, name).await.map_err(to_s3)?;
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
    Ok(S3Response::new(DeleteBucketOutput {}))
}

pub(super) async fn head_bucket(
    s3: &CairnS3,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(HeadBucketOutput::default()))
}

pub(super) async fn get_bucket_location(
    s3: &CairnS3,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(GetBucketLocationOutput::default()))
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
        .filter(|(name, _)| name.starts_with(&prefix))
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
            ..Default::default()
        })
        .collect();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        continuation_token: next,
        prefix: input.prefix,
        owner: Some(super::access::owner(tenant)),
    }))
}
