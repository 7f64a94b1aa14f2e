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
            MetaError::NoSuchSnapshot(n) => {
                s3_error!(NoSuchKey, "the bucket has no snapshot {n}")
            }
            MetaError::HasSnapshots(b) => s3_error!(
                BucketNotEmpty,
                "bucket {} has snapshots: delete them first (nodectl snapshot delete)",
                cairn_meta::bucket_name(&b)
            ),
            MetaError::NoSuchUpload(u) => s3_error!(NoSuchUpload, "upload {u} does not exist"),
            MetaError::NoSuchVersion(v) => s3_error!(NoSuchVersion, "version {v} does not exist"),
            // AWS's answer to a delete (or a retention change) object lock refuses.
            e @ MetaError::ObjectLocked(_) => {
                s3_error!(AccessDenied, "Access Denied because object protected by {e}")
            }
            e @ MetaError::LockState(_) => s3_error!(InvalidBucketState, "{e}"),
            e @ MetaError::NoObjectLock => s3_error!(InvalidRequest, "{e}"),
            e @ MetaError::InvalidLock(_) => s3_error!(InvalidArgument, "{e}"),
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

/// AWS's message for an error code, for errors raised without one (by s3s's
/// parser and signature checks: without it, clients print "Unknown").
pub(crate) fn default_message(code: &str) -> &'static str {
    match code {
        "AccessDenied" => "Access Denied",
        "AuthorizationHeaderMalformed" => "The authorization header you provided is invalid.",
        "BadDigest" => "The Content-MD5 or checksum value that you specified did not match what the server received.",
        "BucketNotEmpty" => "The bucket you tried to delete is not empty",
        "EntityTooLarge" => "Your proposed upload exceeds the maximum allowed size",
        "EntityTooSmall" => "Your proposed upload is smaller than the minimum allowed object size.",
        "IncompleteBody" => "You did not provide the number of bytes specified by the Content-Length HTTP header.",
        "InternalError" => "We encountered an internal error. Please try again.",
        "InvalidAccessKeyId" => "The AWS access key Id you provided does not exist in our records.",
        "InvalidArgument" => "Invalid Argument",
        "InvalidBucketName" => "The specified bucket is not valid.",
        "InvalidDigest" => "The Content-MD5 you specified is not valid.",
        "InvalidPart" => "One or more of the specified parts could not be found. The part might not have been uploaded, or the specified entity tag might not have matched the part's entity tag.",
        "InvalidPartOrder" => "The list of parts was not in ascending order. The parts list must be specified in order by part number.",
        "InvalidRange" => "The requested range is not satisfiable",
        "InvalidRequest" => "Invalid Request",
        "InvalidURI" => "Couldn't parse the specified URI.",
        "KeyTooLongError" => "Your key is too long",
        "MalformedXML" => "The XML you provided was not well-formed or did not validate against our published schema.",
        "MethodNotAllowed" => "The specified method is not allowed against this resource.",
        "MissingContentLength" => "You must provide the Content-Length HTTP header.",
        "NoSuchBucket" => "The specified bucket does not exist",
        "NoSuchKey" => "The specified key does not exist.",
        "NoSuchUpload" => "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
        "NotImplemented" => "A header you provided implies functionality that is not implemented.",
        "PreconditionFailed" => "At least one of the preconditions you specified did not hold.",
        "RequestTimeTooSkewed" => "The difference between the request time and the current time is too large.",
        "ServiceUnavailable" => "Please reduce your request rate.",
        "SignatureDoesNotMatch" => "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
        "SlowDown" => "Please reduce your request rate.",
        "XAmzContentSHA256Mismatch" => "The provided 'x-amz-content-sha256' header does not match what was computed.",
        _ => "The request could not be carried out.",
    }
}
