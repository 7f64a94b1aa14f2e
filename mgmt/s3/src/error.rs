//! Object-store errors as S3 errors: the right code, a message that says what
//! happened, and internals logged rather than shown.

use cairn_meta::MetaError;
use cairn_objects::ObjectError;
use s3s::{s3_error, S3Error};

pub(crate) fn to_s3(e: ObjectError) -> S3Error {
    match e {
        ObjectError::Meta(m) => match m {
            // Bucket names as the tenant knows them, not as the metadata keeps them.
            MetaError::NoSuchBucket(b) => s3_error!(
                NoSuchBucket,
                "bucket {} does not exist",
                cairn_meta::bucket_name(&b)
            ),
            MetaError::BucketExists(b) => s3_error!(
                BucketAlreadyOwnedByYou,
                "bucket {} already exists",
                cairn_meta::bucket_name(&b)
            ),
            MetaError::BucketNotEmpty(b) => s3_error!(
                BucketNotEmpty,
                "bucket {} is not empty",
                cairn_meta::bucket_name(&b)
            ),
            MetaError::NoSuchKey(k) => s3_error!(NoSuchKey, "key {k} does not exist"),
            MetaError::NoSuchUpload(u) => s3_error!(NoSuchUpload, "upload {u} does not exist"),
            MetaError::PreconditionFailed => s3_error!(PreconditionFailed),
            MetaError::InvalidPart(n) => s3_error!(
                InvalidPart,
                "part {n} was not uploaded or its ETag does not match"
            ),
            MetaError::InvalidPartOrder => {
                s3_error!(InvalidPartOrder, "parts must be in ascending order")
            }
            e @ MetaError::EntityTooSmall { .. } => s3_error!(EntityTooSmall, "{e}"),
            // Ceph RGW's code and status for the same refusal (AWS has no quotas).
            e @ MetaError::QuotaExceeded(_) => {
                let mut err = S3Error::with_message(
                    s3s::S3ErrorCode::Custom("QuotaExceeded".into()),
                    e.to_string(),
                );
                err.set_status_code(http::StatusCode::FORBIDDEN);
                err
            }
            // Retried by the SDKs (a transient error for them): the body is sent again.
            e @ MetaError::WriteExpired { .. } => {
                tracing::warn!("{e}");
                s3_error!(
                    RequestTimeout,
                    "the upload took longer than the collector allows; send it again"
                )
            }
            // The details (node ids, addresses) are for the log, not the client.
            e @ MetaError::Unavailable(_) => {
                tracing::warn!("{e}");
                s3_error!(
                    ServiceUnavailable,
                    "the cluster's metadata is unavailable; retry later"
                )
            }
            e => internal(e),
        },
        ObjectError::AccessDenied => s3_error!(AccessDenied),
        e @ ObjectError::Unavailable(_) => {
            tracing::error!("{e}");
            s3_error!(
                ServiceUnavailable,
                "not enough drives are reachable to store or read the data; retry later"
            )
        }
        e @ ObjectError::Unreadable(_) => {
            tracing::error!("{e}");
            s3_error!(
                ServiceUnavailable,
                "the object cannot be read now: too few of its fragments are readable (drives down, or damage beyond its redundancy); `nodectl status` shows the drives"
            )
        }
        ObjectError::OutcomeUnknown => s3_error!(
            ServiceUnavailable,
            "the write may or may not have been applied (its commit could not be confirmed); retrying it is safe"
        ),
        ObjectError::NotCommitted => s3_error!(
            ServiceUnavailable,
            "the write was not applied; retrying it is safe"
        ),
        ObjectError::InsufficientStorage => insufficient_storage(),
        e @ (ObjectError::IncompleteBody { .. } | ObjectError::Body(_)) => {
            s3_error!(IncompleteBody, "{e}")
        }
        e @ ObjectError::BodyTooLong(_) => s3_error!(InvalidRequest, "{e}"),
        e @ ObjectError::TooLarge { .. } => s3_error!(EntityTooLarge, "{e}"),
        e @ ObjectError::InvalidPartNumber(_) => s3_error!(InvalidArgument, "{e}"),
        e @ ObjectError::Chunk(_) => {
            tracing::error!("{e}");
            s3_error!(ServiceUnavailable, "storage is unavailable; retry later")
        }
        e => internal(e),
    }
}

/// 507, as S3-compatible stores answer a full drive set (MinIO's
/// `XMinioStorageFull` is a 507 too): not retryable until space is freed.
fn insufficient_storage() -> S3Error {
    let mut e = S3Error::with_message(
        s3s::S3ErrorCode::Custom("InsufficientStorage".into()),
        "the drives are full: delete data to free space (deletes are always accepted)",
    );
    e.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
    e
}

fn internal(e: impl std::fmt::Display) -> S3Error {
    tracing::error!("internal error: {e}");
    s3_error!(InternalError, "internal error")
}
