//! A bucket's lifecycle configuration (Put/Get/DeleteBucketLifecycle), checked
//! as AWS checks it. The rules are carried out by the object store's lifecycle
//! worker (`cairn_objects::lifecycle`).

use super::common::{timestamp, unix_secs};
use super::CairnS3;
use cairn_meta::{BucketChange, LifecycleRule as Rule};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};
use std::collections::{BTreeMap, HashSet};

const MAX_RULES: usize = 1000;
const MAX_ID: usize = 255;
/// An object carries at most 10 tags, so a filter needs no more.
const MAX_FILTER_TAGS: usize = 10;

fn invalid(why: impl std::fmt::Display) -> S3Error {
    s3_error!(InvalidArgument, "{why}")
}

/// Days as AWS takes them: a positive whole number.
fn days(d: Option<i32>, what: &str) -> S3Result<Option<u32>> {
    match d {
        None => Ok(None),
        Some(d) if d > 0 => Ok(Some(d as u32)),
        Some(_) => Err(invalid(format!(
            "'{what}' for Expiration action must be a positive integer"
        ))),
    }
}

fn size(v: Option<i64>) -> S3Result<Option<u64>> {
    v.map(|v| u64::try_from(v).map_err(|_| invalid("object size filters must not be negative")))
        .transpose()
}

/// A filter's tags, checked as object tags are (a filter's tags can only
/// match what an object may carry).
fn tags(set: Option<TagSet>) -> S3Result<BTreeMap<String, String>> {
    super::tagging::from_set(set.unwrap_or_default(), MAX_FILTER_TAGS, "Filter")
}

/// One rule of a configuration, checked.
fn to_rule(r: LifecycleRule, seen: &mut HashSet<String>) -> S3Result<Rule> {
    let id =
        r.id.filter(|i| !i.is_empty())
            .unwrap_or_else(|| format!("{:032x}", rand::random::<u128>()));
    if id.len() > MAX_ID {
        return Err(invalid("ID length should not exceed allowed limit of 255"));
    }
    if !seen.insert(id.clone()) {
        return Err(invalid(
            "Rule ID must be unique. Found same ID for more than one rule",
        ));
    }
    if r.transitions.is_some_and(|t| !t.is_empty())
        || r.noncurrent_version_transitions
            .is_some_and(|t| !t.is_empty())
    {
        return Err(s3_error!(
            NotImplemented,
            "Cairn has one storage class: transitions are not supported"
        ));
    }
    let mut rule = Rule {
        id,
        enabled: r.status.as_str() == ExpirationStatus::ENABLED,
        ..Default::default()
    };
    if !rule.enabled && r.status.as_str() != ExpirationStatus::DISABLED {
        return Err(s3_error!(
            MalformedXML,
            "Status must be Enabled or Disabled"
        ));
    }
    match (r.prefix, r.filter) {
        (Some(_), Some(_)) => {
            return Err(s3_error!(
                MalformedXML,
                "a rule takes a Filter or a Prefix, not both"
            ))
        }
        (Some(p), None) => rule.prefix = p,
        (None, None) => {
            return Err(s3_error!(
                MalformedXML,
                "a rule needs a Filter (or a Prefix)"
            ))
        }
        (None, Some(f)) => {
            let given = [
                f.prefix.is_some(),
                f.tag.is_some(),
                f.and.is_some(),
                f.object_size_greater_than.is_some(),
                f.object_size_less_than.is_some(),
            ];
            if given.iter().filter(|g| **g).count() > 1 {
                return Err(s3_error!(
                    MalformedXML,
                    "a Filter takes one condition; combine them with And"
                ));
            }
            rule.prefix = f.prefix.unwrap_or_default();
            rule.tags = tags(f.tag.map(|t| vec![t]))?;
            rule.size_greater_than = size(f.object_size_greater_than)?;
            rule.size_less_than = size(f.object_size_less_than)?;
            if let Some(and) = f.and {
                let any = and.prefix.is_some()
                    || and.tags.as_ref().is_some_and(|t| !t.is_empty())
                    || and.object_size_greater_than.is_some()
                    || and.object_size_less_than.is_some();
                if !any {
                    return Err(s3_error!(MalformedXML, "And names no condition"));
                }
                rule.prefix = and.prefix.unwrap_or_default();
                rule.tags = tags(and.tags)?;
                rule.size_greater_than = size(and.object_size_greater_than)?;
                rule.size_less_than = size(and.object_size_less_than)?;
            }
        }
    }
    if let (Some(g), Some(l)) = (rule.size_greater_than, rule.size_less_than) {
        if g >= l {
            return Err(invalid(
                "ObjectSizeLessThan must be greater than ObjectSizeGreaterThan",
            ));
        }
    }
    if let Some(e) = r.expiration {
        let marker = e.expired_object_delete_marker == Some(true);
        let given = [
            e.days.is_some(),
            e.date.is_some(),
            e.expired_object_delete_marker.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(s3_error!(
                MalformedXML,
                "Expiration takes one of Days, Date and ExpiredObjectDeleteMarker"
            ));
        }
        rule.expiration_days = days(e.days, "Days")?;
        if let Some(d) = &e.date {
            let secs = unix_secs(d);
            if secs % 86_400 != 0 {
                return Err(invalid("'Date' must be at midnight GMT"));
            }
            rule.expiration_date_ms = Some(secs.saturating_mul(1000));
        }
        if marker && !rule.tags.is_empty() {
            return Err(invalid(
                "ExpiredObjectDeleteMarker cannot be specified with tags",
            ));
        }
        rule.expired_delete_marker = marker;
    }
    if let Some(a) = r.abort_incomplete_multipart_upload {
        if !rule.tags.is_empty() {
            return Err(invalid(
                "AbortIncompleteMultipartUpload cannot be specified with Tags",
            ));
        }
        if rule.size_greater_than.is_some() || rule.size_less_than.is_some() {
            return Err(invalid(
                "AbortIncompleteMultipartUpload cannot be specified with Object Size",
            ));
        }
        rule.abort_incomplete_days = days(a.days_after_initiation, "DaysAfterInitiation")?;
        if rule.abort_incomplete_days.is_none() {
            return Err(s3_error!(
                MalformedXML,
                "AbortIncompleteMultipartUpload needs DaysAfterInitiation"
            ));
        }
    }
    if let Some(n) = r.noncurrent_version_expiration {
        rule.noncurrent_days = days(n.noncurrent_days, "NoncurrentDays")?;
        rule.newer_noncurrent_versions = n
            .newer_noncurrent_versions
            .map(|v| match u32::try_from(v) {
                Ok(v @ 1..=100) => Ok(v),
                _ => Err(invalid(
                    "NewerNoncurrentVersions must be an integer from 1 to 100",
                )),
            })
            .transpose()?;
    }
    let acts = rule.expiration_days.is_some()
        || rule.expiration_date_ms.is_some()
        || rule.expired_delete_marker
        || rule.abort_incomplete_days.is_some()
        || rule.noncurrent_days.is_some();
    if !acts {
        return Err(invalid(
            "At least one action needs to be specified in a rule",
        ));
    }
    Ok(rule)
}

fn from_rule(r: &Rule) -> LifecycleRule {
    let tag_set: Vec<Tag> = r
        .tags
        .iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect();
    let conditions = (!r.prefix.is_empty()) as usize
        + tag_set.len()
        + r.size_greater_than.is_some() as usize
        + r.size_less_than.is_some() as usize;
    let filter = if conditions > 1 {
        LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: (!r.prefix.is_empty()).then(|| r.prefix.clone()),
                tags: (!tag_set.is_empty()).then_some(tag_set),
                object_size_greater_than: r.size_greater_than.map(|v| v as i64),
                object_size_less_than: r.size_less_than.map(|v| v as i64),
            }),
            ..Default::default()
        }
    } else {
        // The one condition there is, as it was given (a prefix only when it is
        // the condition, or there is none): the answer can be put back as is.
        LifecycleRuleFilter {
            prefix: (conditions == 0 || !r.prefix.is_empty()).then(|| r.prefix.clone()),
            tag: tag_set.into_iter().next(),
            object_size_greater_than: r.size_greater_than.map(|v| v as i64),
            object_size_less_than: r.size_less_than.map(|v| v as i64),
            ..Default::default()
        }
    };
    let expiration =
        (r.expiration_days.is_some() || r.expiration_date_ms.is_some() || r.expired_delete_marker)
            .then(|| LifecycleExpiration {
                days: r.expiration_days.map(|d| d as i32),
                date: r.expiration_date_ms.map(timestamp),
                expired_object_delete_marker: r.expired_delete_marker.then_some(true),
            });
    LifecycleRule {
        id: Some(r.id.clone()),
        status: ExpirationStatus::from_static(if r.enabled {
            ExpirationStatus::ENABLED
        } else {
            ExpirationStatus::DISABLED
        }),
        filter: Some(filter),
        expiration,
        abort_incomplete_multipart_upload: r.abort_incomplete_days.map(|d| {
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(d as i32),
            }
        }),
        noncurrent_version_expiration: r.noncurrent_days.map(|d| NoncurrentVersionExpiration {
            noncurrent_days: Some(d as i32),
            newer_noncurrent_versions: r.newer_noncurrent_versions.map(|v| v as i32),
        }),
        noncurrent_version_transitions: None,
        prefix: None,
        transitions: None,
    }
}

pub(super) async fn put_bucket_lifecycle_configuration(
    s3: &CairnS3,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let given = input
        .lifecycle_configuration
        .map(|c| c.rules)
        .unwrap_or_default();
    if given.is_empty() || given.len() > MAX_RULES {
        return Err(s3_error!(
            MalformedXML,
            "a lifecycle configuration takes 1 to {MAX_RULES} rules"
        ));
    }
    let mut seen = HashSet::new();
    let rules = given
        .into_iter()
        .map(|r| to_rule(r, &mut seen))
        .collect::<S3Result<Vec<Rule>>>()?;
    s3.change_bucket(tenant, &input.bucket, BucketChange::Lifecycle(rules))
        .await?;
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

pub(super) async fn get_bucket_lifecycle_configuration(
    s3: &CairnS3,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let tenant = s3.tenant(&req)?;
    let b = s3.bucket(tenant, &req.input.bucket).await?;
    if b.lifecycle.is_empty() {
        return Err(s3_error!(
            NoSuchLifecycleConfiguration,
            "The lifecycle configuration does not exist"
        ));
    }
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(b.lifecycle.iter().map(from_rule).collect()),
        ..Default::default()
    }))
}

pub(super) async fn delete_bucket_lifecycle(
    s3: &CairnS3,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.change_bucket(
        tenant,
        &req.input.bucket,
        BucketChange::Lifecycle(Vec::new()),
    )
    .await?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput {}))
}
