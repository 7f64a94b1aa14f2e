//! A bucket's configuration subresources: CORS rules, the versioning state and
//! the replication rules (read; set through nodectl).

use super::CairnS3;
use cairn_meta::{BucketChange, CorsRule, Versioning};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

fn to_rule(r: CORSRule) -> CorsRule {
    CorsRule {
        id: r.id,
        allowed_origins: r.allowed_origins,
        allowed_methods: r.allowed_methods,
        allowed_headers: r.allowed_headers.unwrap_or_default(),
        expose_headers: r.expose_headers.unwrap_or_default(),
        max_age_seconds: r.max_age_seconds,
    }
}

fn from_rule(r: &CorsRule) -> CORSRule {
    let some = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    CORSRule {
        id: r.id.clone(),
        allowed_origins: r.allowed_origins.clone(),
        allowed_methods: r.allowed_methods.clone(),
        allowed_headers: some(&r.allowed_headers),
        expose_headers: some(&r.expose_headers),
        max_age_seconds: r.max_age_seconds,
    }
}

pub(super) async fn put_bucket_cors(
    s3: &CairnS3,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let rules: Vec<CorsRule> = input
        .cors_configuration
        .cors_rules
        .into_iter()
        .map(to_rule)
        .collect();
    if let Some(why) = crate::cors::invalid(&rules) {
        return Err(s3_error!(InvalidRequest, "{why}"));
    }
    s3.change_bucket(tenant, &input.bucket, BucketChange::Cors(rules))
        .await?;
    s3.cors.forget();
    Ok(S3Response::new(PutBucketCorsOutput {}))
}

pub(super) async fn get_bucket_cors(
    s3: &CairnS3,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let tenant = s3.tenant(&req)?;
    let b = s3.bucket(tenant, &req.input.bucket).await?;
    if b.cors.is_empty() {
        return Err(s3_error!(
            NoSuchCORSConfiguration,
            "The CORS configuration does not exist"
        ));
    }
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(b.cors.iter().map(from_rule).collect()),
    }))
}

pub(super) async fn delete_bucket_cors(
    s3: &CairnS3,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.change_bucket(tenant, &req.input.bucket, BucketChange::Cors(Vec::new()))
        .await?;
    s3.cors.forget();
    Ok(S3Response::new(DeleteBucketCorsOutput {}))
}

/// No `Status` for a bucket whose versioning was never configured, as S3
/// answers, else the state set.
pub(super) async fn get_bucket_versioning(
    s3: &CairnS3,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let tenant = s3.tenant(&req)?;
    let b = s3.bucket(tenant, &req.input.bucket).await?;
    Ok(S3Response::new(GetBucketVersioningOutput {
        status: b.versioning.map(|v| match v {
            Versioning::Enabled => {
                BucketVersioningStatus::from_static(BucketVersioningStatus::ENABLED)
            }
            Versioning::Suspended => {
                BucketVersioningStatus::from_static(BucketVersioningStatus::SUSPENDED)
            }
        }),
        ..Default::default()
    }))
}

/// Enables or suspends versioning (see `cairn_meta::versions`); MFA delete is
/// refused (501). A KV pool's bucket is never versioned: its values are
/// overwritten at the rate of a cache.
pub(super) async fn put_bucket_versioning(
    s3: &CairnS3,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    if s3.bucket(tenant, &input.bucket).await?.kv.is_some() {
        return Err(s3_error!(
            InvalidBucketState,
            "A KV pool's bucket cannot be versioned"
        ));
    }
    let conf = input.versioning_configuration;
    if conf
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    let state = match conf.status.as_ref().map(|s| s.as_str()) {
        Some(BucketVersioningStatus::SUSPENDED) => Some(Versioning::Suspended),
        Some(BucketVersioningStatus::ENABLED) => Some(Versioning::Enabled),
        _ => None,
    };
    match state {
        Some(v) => {
            s3.change_bucket(tenant, &input.bucket, BucketChange::Versioning(v))
                .await?;
            Ok(S3Response::new(PutBucketVersioningOutput {}))
        }
        _ => Err(s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema"
        )),
    }
}

/// The bucket's replication rules as S3 shows them (destinations as bucket
/// ARNs; the endpoint and credentials are nodectl's to show).
pub(super) async fn get_bucket_replication(
    s3: &CairnS3,
    req: S3Request<GetBucketReplicationInput>,
) -> S3Result<S3Response<GetBucketReplicationOutput>> {
    let tenant = s3.tenant(&req)?;
    let b = s3.bucket(tenant, &req.input.bucket).await?;
    let Some(r) = b.replication else {
        return Err(s3_error!(
            ReplicationConfigurationNotFoundError,
            "The replication configuration was not found"
        ));
    };
    let status = |on: bool| match on {
        true => DeleteMarkerReplicationStatus::from_static(DeleteMarkerReplicationStatus::ENABLED),
        false => {
            DeleteMarkerReplicationStatus::from_static(DeleteMarkerReplicationStatus::DISABLED)
        }
    };
    let rules = r
        .rules
        .iter()
        .enumerate()
        .map(|(i, rule)| ReplicationRule {
            id: Some(rule.id.clone()),
            // The first matching rule wins: the highest priority.
            priority: Some((r.rules.len() - i) as i32),
            status: ReplicationRuleStatus::from_static(ReplicationRuleStatus::ENABLED),
            filter: Some(ReplicationRuleFilter {
                prefix: Some(rule.prefix.clone()),
                ..Default::default()
            }),
            delete_marker_replication: Some(DeleteMarkerReplication {
                status: Some(status(rule.delete_markers)),
            }),
            destination: Destination {
                bucket: format!("arn:aws:s3:::{}", rule.target.bucket),
                ..Default::default()
            },
            existing_object_replication: None,
            prefix: None,
            source_selection_criteria: None,
        })
        .collect();
    Ok(S3Response::new(GetBucketReplicationOutput {
        replication_configuration: Some(ReplicationConfiguration {
            role: String::new(),
            rules,
        }),
    }))
}

/// Refused, saying where rules are set: S3's XML names a destination by
/// bucket ARN and an IAM role, with no place for the endpoint and credentials
/// of another cluster.
pub(super) async fn put_bucket_replication(
    _s3: &CairnS3,
    _req: S3Request<PutBucketReplicationInput>,
) -> S3Result<S3Response<PutBucketReplicationOutput>> {
    Err(s3_error!(
        NotImplemented,
        "Replication rules are set by an administrator: nodectl replication set TENANT BUCKET --endpoint ... (see the README)"
    ))
}
