//! Who may do what, as S3 clients ask it: ACLs (only the owner's full control
//! exists: every bucket and object is private to its tenant), public access block
//! and object ownership (answered as they are: everything blocked, owner enforced),
//! and bucket default encryption (none at this layer yet). Tools probe these
//! (`s3cmd setacl --acl-private`, backup tools, Terraform); they get true answers
//! instead of 501, and requests to grant more are refused, never ignored.

use super::CairnS3;
use crate::error::to_s3;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

/// The canned ACLs that grant nothing beyond the owner (the only ACL there is).
fn private_canned(acl: &str) -> bool {
    matches!(
        acl,
        "private" | "bucket-owner-full-control" | "bucket-owner-read"
    )
}

/// Refuses an ACL that would grant anything to anyone but the owner: in headers
/// (`x-amz-acl`, `x-amz-grant-*`) or in an AccessControlPolicy body.
pub(super) fn refuse_grants(
    h: &http::HeaderMap,
    body: Option<&AccessControlPolicy>,
    owner: &str,
) -> S3Result<()> {
    if let Some(acl) = h.get("x-amz-acl") {
        let acl = acl.to_str().unwrap_or("");
        if !private_canned(acl) {
            return Err(not_public(acl));
        }
    }
    if let Some((name, _)) = h
        .iter()
        .find(|(n, _)| n.as_str().starts_with("x-amz-grant-"))
    {
        return Err(not_public(name.as_str()));
    }
    if let Some(p) = body {
        for g in p.grants.iter().flatten() {
            let to_owner = g.grantee.as_ref().and_then(|e| e.id.as_deref()) == Some(owner);
            let full = g
                .permission
                .as_ref()
                .is_some_and(|p| p.as_str() == Permission::FULL_CONTROL);
            if !(to_owner && full) {
                return Err(not_public("a grant to another grantee"));
            }
        }
    }
    Ok(())
}

fn not_public(what: &str) -> s3s::S3Error {
    s3_error!(
        NotImplemented,
        "A header you provided implies functionality that is not implemented: {what} (buckets and objects are private to their tenant; only the owner's full control can be granted)"
    )
}

/// The owner's canonical id: the tenant's.
pub(super) fn owner(tenant: u64) -> Owner {
    Owner {
        id: Some(format!("{tenant:016x}")),
        display_name: Some(format!("tenant-{tenant:016x}")),
    }
}

fn owner_grants(tenant: u64) -> Grants {
    let o = owner(tenant);
    vec![Grant {
        grantee: Some(Grantee {
            display_name: o.display_name,
            email_address: None,
            id: o.id,
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }]
}

pub(super) async fn get_bucket_acl(
    s3: &CairnS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(owner_grants(tenant)),
        owner: Some(owner(tenant)),
    }))
}

pub(super) async fn put_bucket_acl(
    s3: &CairnS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    let id = format!("{tenant:016x}");
    refuse_grants(&req.headers, req.input.access_control_policy.as_ref(), &id)?;
    Ok(S3Response::new(PutBucketAclOutput {}))
}

pub(super) async fn get_object_acl(
    s3: &CairnS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let tenant = s3.tenant(&req)?;
    let object = (req.input.bucket.as_str(), req.input.key.as_str());
    super::objects::version_of(s3, tenant, object, req.input.version_id.as_deref()).await?;
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(owner_grants(tenant)),
        owner: Some(owner(tenant)),
        ..Default::default()
    }))
}

pub(super) async fn put_object_acl(
    s3: &CairnS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let tenant = s3.tenant(&req)?;
    let object = (req.input.bucket.as_str(), req.input.key.as_str());
    super::objects::version_of(s3, tenant, object, req.input.version_id.as_deref()).await?;
    let id = format!("{tenant:016x}");
    refuse_grants(&req.headers, req.input.access_control_policy.as_ref(), &id)?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

fn blocked() -> PublicAccessBlockConfiguration {
    PublicAccessBlockConfiguration {
        block_public_acls: Some(true),
        block_public_policy: Some(true),
        ignore_public_acls: Some(true),
        restrict_public_buckets: Some(true),
    }
}

pub(super) async fn get_public_access_block(
    s3: &CairnS3,
    req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(blocked()),
    }))
}

pub(super) async fn put_public_access_block(
    s3: &CairnS3,
    req: S3Request<PutPublicAccessBlockInput>,
) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    // Blocking is what there is; asking to unblock cannot be honoured.
    if req.input.public_access_block_configuration != blocked() {
        return Err(not_public(
            "a public access block that allows public access",
        ));
    }
    Ok(S3Response::new(PutPublicAccessBlockOutput {}))
}

pub(super) async fn get_bucket_ownership_controls(
    s3: &CairnS3,
    req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(GetBucketOwnershipControlsOutput {
        ownership_controls: Some(OwnershipControls {
            rules: vec![OwnershipControlsRule {
                object_ownership: ObjectOwnership::from_static(
                    ObjectOwnership::BUCKET_OWNER_ENFORCED,
                ),
            }],
        }),
    }))
}

pub(super) async fn get_bucket_encryption(
    s3: &CairnS3,
    req: S3Request<GetBucketEncryptionInput>,
) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    Err(s3_error!(
        ServerSideEncryptionConfigurationNotFoundError,
        "The server side encryption configuration was not found (S3-level encryption is not implemented yet)"
    ))
}

pub(super) async fn put_bucket_encryption(
    s3: &CairnS3,
    req: S3Request<PutBucketEncryptionInput>,
) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.store
        .bucket(tenant, &req.input.bucket)
        .await
        .map_err(to_s3)?;
    Err(sse_not_implemented("default bucket encryption"))
}

/// The refusal of server-side encryption, which Cairn does not do at the S3
/// layer yet (per-tenant keys come with tenancy): accepting the headers and storing
/// plaintext would lie to the client.
pub(super) fn sse_not_implemented(what: &str) -> s3s::S3Error {
    s3_error!(
        NotImplemented,
        "A header you provided implies functionality that is not implemented: {what} (server-side encryption is not implemented yet)"
    )
}

/// Refuses a write that asks for server-side encryption (SSE-S3, SSE-KMS, SSE-C).
pub(super) fn refuse_sse(h: &http::HeaderMap) -> S3Result<()> {
    const SSE: [&str; 6] = [
        "x-amz-server-side-encryption",
        "x-amz-server-side-encryption-aws-kms-key-id",
        "x-amz-server-side-encryption-context",
        "x-amz-server-side-encryption-bucket-key-enabled",
        "x-amz-server-side-encryption-customer-algorithm",
        "x-amz-copy-source-server-side-encryption-customer-algorithm",
    ];
    match SSE.into_iter().find(|n| h.contains_key(*n)) {
        Some(n) => Err(sse_not_implemented(n)),
        None => Ok(()),
    }
}

/// A write asking for a storage class other than STANDARD: refused, never
/// ignored.
pub(super) fn refuse_unkept(h: &http::HeaderMap) -> S3Result<()> {
    match h.get("x-amz-storage-class") {
        Some(c) if c.as_bytes() != b"STANDARD" => Err(s3_error!(
            InvalidStorageClass,
            "The storage class you specified is not valid: Cairn keeps one, STANDARD"
        )),
        _ => Ok(()),
    }
}

/// A read with SSE-C parameters: no object is encrypted with a customer key, so
/// S3's answer for an object that is not applies.
pub(super) fn refuse_sse_c_read(h: &http::HeaderMap) -> S3Result<()> {
    if h.contains_key("x-amz-server-side-encryption-customer-algorithm")
        || h.contains_key("x-amz-server-side-encryption-customer-key")
    {
        return Err(s3_error!(
            InvalidRequest,
            "The encryption parameters are not applicable to this object."
        ));
    }
    Ok(())
}
