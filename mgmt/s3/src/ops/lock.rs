//! S3 object lock: the bucket's configuration, a version's retention and legal
//! hold, the lock a write asks for, and who may bypass GOVERNANCE retention.
//! The rules themselves are applied by the metadata (`cairn_meta::lock`).

use super::common::timestamp;
use super::CairnS3;
use crate::error::to_s3;
use cairn_meta::{
    BucketChange, BucketLock, LockChange, LockMode, LockPeriod, ObjectLock, Retention, Role,
    MAX_RETENTION_DAYS,
};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

fn mode_of(m: &str) -> S3Result<LockMode> {
    match m {
        ObjectLockMode::GOVERNANCE => Ok(LockMode::Governance),
        ObjectLockMode::COMPLIANCE => Ok(LockMode::Compliance),
        _ => Err(s3_error!(
            InvalidArgument,
            "Unknown wormMode directive: {m}"
        )),
    }
}

fn mode_name(m: LockMode) -> &'static str {
    match m {
        LockMode::Governance => ObjectLockMode::GOVERNANCE,
        LockMode::Compliance => ObjectLockMode::COMPLIANCE,
    }
}

fn millis(t: &Timestamp) -> i64 {
    let t = time::OffsetDateTime::from(t.clone());
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// A retention asked for: a mode and a date, both or neither, the date ahead.
fn retention(mode: Option<&str>, until: Option<&Timestamp>) -> S3Result<Option<Retention>> {
    match (mode, until) {
        (None, None) => Ok(None),
        (Some(m), Some(t)) => {
            let until_ms = millis(t);
            if until_ms <= cairn_meta::now_ms() {
                return Err(s3_error!(
                    InvalidArgument,
                    "The retain until date must be in the future!"
                ));
            }
            Ok(Some(Retention {
                mode: mode_of(m)?,
                until_ms,
            }))
        }
        _ => Err(s3_error!(
            InvalidArgument,
            "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied"
        )),
    }
}

fn legal_hold(s: &str) -> S3Result<bool> {
    match s {
        ObjectLockLegalHoldStatus::ON => Ok(true),
        ObjectLockLegalHoldStatus::OFF => Ok(false),
        _ => Err(s3_error!(
            InvalidArgument,
            "Legal Hold must be either of 'ON' or 'OFF'"
        )),
    }
}

/// The lock a write asks for (`x-amz-object-lock-*` on PUT, copy, POST and
/// CreateMultipartUpload). The bucket's default fills in a missing retention
/// when the write applies; a bucket without object lock refuses any.
pub(super) fn of_write(
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<ObjectLock> {
    Ok(ObjectLock {
        retention: retention(mode.map(|m| m.as_str()), until)?,
        legal_hold: match hold {
            Some(h) => legal_hold(h.as_str())?,
            None => false,
        },
    })
}

/// The lock headers GET and HEAD answer with.
pub(super) fn headers(lock: &ObjectLock, h: &mut http::HeaderMap) {
    if let Some(r) = lock.retention {
        h.insert(
            "x-amz-object-lock-mode",
            http::HeaderValue::from_static(mode_name(r.mode)),
        );
        let mut date = Vec::new();
        let formatted = timestamp(r.until_ms).format(TimestampFormat::DateTime, &mut date);
        if let (Ok(()), Ok(v)) = (formatted, http::HeaderValue::from_bytes(&date)) {
            h.insert("x-amz-object-lock-retain-until-date", v);
        }
    }
    if lock.legal_hold {
        h.insert(
            "x-amz-object-lock-legal-hold",
            http::HeaderValue::from_static(ObjectLockLegalHoldStatus::ON),
        );
    }
}

/// `x-amz-bypass-governance-retention: true`, from someone allowed it: a
/// tenant admin (S3's `s3:BypassGovernanceRetention` permission). Anyone
/// else asking is refused, rather than quietly not bypassing.
pub(super) fn bypass<T>(s3: &CairnS3, req: &S3Request<T>, asked: Option<bool>) -> S3Result<bool> {
    if asked != Some(true) {
        return Ok(false);
    }
    let role = req
        .credentials
        .as_ref()
        .and_then(|c| s3.keys.identity(&c.access_key))
        .map(|id| id.role);
    match role {
        Some(Role::Admin) => Ok(true),
        _ => Err(s3_error!(
            AccessDenied,
            "only a tenant admin may bypass governance retention"
        )),
    }
}

pub(super) async fn put_configuration(
    s3: &CairnS3,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let malformed = || {
        s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema"
        )
    };
    let conf = input.object_lock_configuration.ok_or_else(malformed)?;
    if conf.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
        return Err(malformed());
    }
    // A Rule must hold a DefaultRetention (AWS refuses an empty one).
    let default = match conf.rule.map(|r| r.default_retention) {
        None => None,
        Some(None) => return Err(malformed()),
        Some(Some(d)) => {
            let mode = d.mode.as_ref().ok_or_else(malformed)?;
            let period = match (d.days, d.years) {
                (Some(n), None) if n > 0 && n as u32 <= MAX_RETENTION_DAYS => {
                    LockPeriod::Days(n as u32)
                }
                (None, Some(n)) if n > 0 && n <= 100 => LockPeriod::Years(n as u32),
                (Some(_), Some(_)) | (None, None) => return Err(malformed()),
                _ => {
                    return Err(s3_error!(
                    InvalidArgument,
                    "Default retention period must be a positive integer value (at most 100 years)"
                ))
                }
            };
            Some(cairn_meta::DefaultRetention {
                mode: mode_of(mode.as_str())?,
                period,
            })
        }
    };
    s3.change_bucket(
        tenant,
        &input.bucket,
        BucketChange::ObjectLock(BucketLock { default }),
    )
    .await?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

pub(super) async fn get_configuration(
    s3: &CairnS3,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let tenant = s3.tenant(&req)?;
    let b = s3.bucket(tenant, &req.input.bucket).await?;
    let Some(lock) = b.object_lock else {
        return Err(s3_error!(
            ObjectLockConfigurationNotFoundError,
            "Object Lock configuration does not exist for this bucket"
        ));
    };
    let rule = lock.default.map(|d| ObjectLockRule {
        default_retention: Some(DefaultRetention {
            mode: Some(ObjectLockRetentionMode::from_static(mode_name(d.mode))),
            days: match d.period {
                LockPeriod::Days(n) => Some(n as i32),
                LockPeriod::Years(_) => None,
            },
            years: match d.period {
                LockPeriod::Years(n) => Some(n as i32),
                LockPeriod::Days(_) => None,
            },
        }),
    });
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule,
        }),
    }))
}

/// The lock of version `id` of `bucket/key` (the current one when none), in a
/// bucket with object lock.
async fn lock_of(
    s3: &CairnS3,
    tenant: u64,
    (bucket, key): (&str, &str),
    id: Option<&str>,
) -> S3Result<ObjectLock> {
    if s3.bucket(tenant, bucket).await?.object_lock.is_none() {
        return Err(s3_error!(
            InvalidRequest,
            "Bucket is missing Object Lock Configuration"
        ));
    }
    let rec = match id {
        None => s3
            .store
            .head_object(tenant, bucket, key)
            .await
            .map_err(to_s3)?,
        Some(id) => match s3.store.object_version(tenant, bucket, key, id).await {
            Ok(Some((v, _))) => match v.object() {
                Some(o) => o.clone(),
                None => {
                    return Err(s3_error!(
                        MethodNotAllowed,
                        "The specified method is not allowed against this resource."
                    ))
                }
            },
            Ok(None) => {
                return Err(s3_error!(
                    NoSuchVersion,
                    "The specified version does not exist."
                ))
            }
            Err(e) => return Err(to_s3(e)),
        },
    };
    Ok(rec.lock)
}

/// Changes the lock of version `version` (the current one when none) of
/// `bucket/key`, after answering as GET does for one that cannot take a lock.
async fn change(
    s3: &CairnS3,
    tenant: u64,
    (bucket, key): (&str, &str),
    version: Option<&str>,
    (change, bypass): (LockChange, bool),
) -> S3Result<()> {
    lock_of(s3, tenant, (bucket, key), version).await?;
    let version = version.map(str::to_string);
    s3.store
        .set_object_lock(tenant, bucket, key, version, change, bypass)
        .await
        .map_err(to_s3)
}

pub(super) async fn put_retention(
    s3: &CairnS3,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let tenant = s3.tenant(&req)?;
    let bypass = bypass(s3, &req, req.input.bypass_governance_retention)?;
    let input = req.input;
    let version = super::common::version_arg(input.version_id.as_deref())?;
    // No Retention, or one with neither field: the retention is removed.
    let r = input.retention.unwrap_or_default();
    let r = retention(
        r.mode.as_ref().map(|m| m.as_str()),
        r.retain_until_date.as_ref(),
    )?;
    let what = (LockChange::Retention(r), bypass);
    change(s3, tenant, (&input.bucket, &input.key), version, what).await?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

pub(super) async fn get_retention(
    s3: &CairnS3,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let version = super::common::version_arg(input.version_id.as_deref())?;
    let lock = lock_of(s3, tenant, (&input.bucket, &input.key), version).await?;
    let Some(r) = lock.retention else {
        return Err(s3_error!(
            NoSuchObjectLockConfiguration,
            "The specified object does not have a ObjectLock configuration"
        ));
    };
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from_static(mode_name(r.mode))),
            retain_until_date: Some(timestamp(r.until_ms)),
        }),
    }))
}

pub(super) async fn put_legal_hold(
    s3: &CairnS3,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let version = super::common::version_arg(input.version_id.as_deref())?;
    let status = input.legal_hold.and_then(|h| h.status).ok_or_else(|| {
        s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema"
        )
    })?;
    let what = (LockChange::LegalHold(legal_hold(status.as_str())?), false);
    change(s3, tenant, (&input.bucket, &input.key), version, what).await?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

pub(super) async fn get_legal_hold(
    s3: &CairnS3,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let version = super::common::version_arg(input.version_id.as_deref())?;
    let lock = lock_of(s3, tenant, (&input.bucket, &input.key), version).await?;
    let status = match lock.legal_hold {
        true => ObjectLockLegalHoldStatus::ON,
        false => ObjectLockLegalHoldStatus::OFF,
    };
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(ObjectLockLegalHoldStatus::from_static(status)),
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::common::unix_secs;
    use super::*;

    #[test]
    fn a_retention_needs_both_fields_and_a_date_ahead() {
        let ahead = timestamp(cairn_meta::now_ms() + 60_000);
        let past = timestamp(cairn_meta::now_ms() - 60_000);
        assert!(retention(Some("GOVERNANCE"), None).is_err());
        assert!(retention(None, Some(&ahead)).is_err());
        assert!(retention(Some("GOVERNANCE"), Some(&past)).is_err());
        assert!(retention(Some("WORM"), Some(&ahead)).is_err());
        let r = retention(Some("COMPLIANCE"), Some(&ahead))
            .unwrap()
            .unwrap();
        assert_eq!(r.mode, LockMode::Compliance);
        assert_eq!(unix_secs(&ahead), r.until_ms / 1000);
        assert!(legal_hold("on").is_err());
    }
}
