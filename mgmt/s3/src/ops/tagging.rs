//! Tagging: an object's tags (Put/Get/DeleteObjectTagging, `x-amz-tagging` on a
//! write) and a bucket's (Put/Get/DeleteBucketTagging), with AWS's limits.

use super::common::*;
use super::CairnS3;
use crate::error::to_s3;
use cairn_meta::{BucketChange, WriteId};
use cairn_objects::ObjectError;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;

/// AWS's limits: tags per object and per bucket, and the length of a key and a
/// value in Unicode characters.
const MAX_OBJECT_TAGS: usize = 10;
const MAX_BUCKET_TAGS: usize = 50;
const MAX_KEY_CHARS: usize = 128;
const MAX_VALUE_CHARS: usize = 256;

/// How often a tag change is tried again when the object was overwritten between
/// reading which write it holds and committing the change (the overwrite wins
/// the first round; the tags then go onto the new write, as they would had they
/// come a moment later).
const TRIES: usize = 5;

/// The characters AWS allows in a tag: letters, digits and white space in any
/// script, and `+ - = . _ : / @`.
fn allowed(c: char) -> bool {
    c.is_alphanumeric() || (c.is_whitespace() && !c.is_control()) || "+-=._:/@".contains(c)
}

/// Checks tags as AWS does (S3's `InvalidTag`), at most `max` of them.
pub(super) fn checked<I>(tags: I, max: usize, what: &str) -> S3Result<BTreeMap<String, String>>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut out = BTreeMap::new();
    for (k, v) in tags {
        let chars = k.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS || !k.chars().all(allowed) {
            return Err(s3_error!(
                InvalidTag,
                "The TagKey you have provided is invalid"
            ));
        }
        if k.starts_with("aws:") {
            return Err(s3_error!(
                InvalidTag,
                "Your TagKey cannot be prefixed with aws:"
            ));
        }
        if v.chars().count() > MAX_VALUE_CHARS || !v.chars().all(allowed) {
            return Err(s3_error!(
                InvalidTag,
                "The TagValue you have provided is invalid"
            ));
        }
        if out.insert(k, v).is_some() {
            return Err(s3_error!(
                InvalidTag,
                "Cannot provide multiple Tags with the same key"
            ));
        }
    }
    if out.len() > max {
        return Err(s3_error!(
            InvalidTag,
            "{what} tags cannot be greater than {max}"
        ));
    }
    Ok(out)
}

/// The tags of an `x-amz-tagging` header (a URL-encoded query string,
/// `k1=v1&k2=v2`), checked.
pub(super) fn from_header(header: Option<&str>) -> S3Result<BTreeMap<String, String>> {
    let Some(h) = header.filter(|h| !h.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let pairs: Vec<(String, String)> = form_urlencoded::parse(h.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    checked(pairs, MAX_OBJECT_TAGS, "Object")
}

/// The tags of an XML tag set, checked: each needs a Key and a Value.
pub(super) fn from_set(set: TagSet, max: usize, what: &str) -> S3Result<BTreeMap<String, String>> {
    let mut pairs = Vec::with_capacity(set.len());
    for t in set {
        match (t.key, t.value) {
            (Some(k), Some(v)) => pairs.push((k, v)),
            _ => return Err(s3_error!(MalformedXML, "each Tag needs a Key and a Value")),
        }
    }
    checked(pairs, max, what)
}

fn to_set(tags: &BTreeMap<String, String>) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

/// `x-amz-tagging-count` of a GET: how many tags the object has, when any.
pub(super) fn count(tags: &BTreeMap<String, String>) -> Option<i32> {
    (!tags.is_empty()).then_some(tags.len() as i32)
}

pub(super) async fn get_object_tagging(
    s3: &CairnS3,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let object = (input.bucket.as_str(), input.key.as_str());
    let rec = super::objects::version_of(s3, tenant, object, input.version_id.as_deref()).await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: to_set(&rec.tags),
        version_id: shown_version(&rec.version),
    }))
}

/// Puts `tags` on the current write of the key (`version`, when named, must be
/// it: the tags of noncurrent versions are kept as they were). Returns the
/// version tagged, as S3 shows it.
async fn set_object_tags(
    s3: &CairnS3,
    tenant: u64,
    (bucket, key): (&str, &str),
    version: Option<&str>,
    tags: BTreeMap<String, String>,
) -> S3Result<Option<String>> {
    for _ in 0..TRIES {
        let rec = match s3.store.head_object(tenant, bucket, key).await {
            Ok(rec) if version.is_none_or(|v| rec.version.shown() == v) => rec,
            Err(e) if version.is_none() => return Err(to_s3(e)),
            _ => {
                // Another version named: 404 if it is not there at all.
                super::objects::version_of(s3, tenant, (bucket, key), version).await?;
                return Err(s3_error!(
                    NotImplemented,
                    "The tags of a noncurrent version cannot be changed"
                ));
            }
        };
        match s3
            .store
            .replace_tags(tenant, bucket, key, WriteId::of(&rec), tags.clone())
            .await
        {
            Err(ObjectError::Meta(cairn_meta::MetaError::PreconditionFailed)) => continue,
            r => return r.map(|_| shown_version(&rec.version)).map_err(to_s3),
        }
    }
    Err(s3_error!(
        OperationAborted,
        "A conflicting conditional operation is currently in progress against this resource. Please try again."
    ))
}

pub(super) async fn put_object_tagging(
    s3: &CairnS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let version = version_arg(input.version_id.as_deref())?;
    let tags = from_set(input.tagging.tag_set, MAX_OBJECT_TAGS, "Object")?;
    let version_id =
        set_object_tags(s3, tenant, (&input.bucket, &input.key), version, tags).await?;
    Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
}

pub(super) async fn delete_object_tagging(
    s3: &CairnS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let version = version_arg(input.version_id.as_deref())?;
    let version_id = set_object_tags(
        s3,
        tenant,
        (&input.bucket, &input.key),
        version,
        BTreeMap::new(),
    )
    .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput { version_id }))
}

pub(super) async fn get_bucket_tagging(
    s3: &CairnS3,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let tenant = s3.tenant(&req)?;
    let b = s3.bucket(tenant, &req.input.bucket).await?;
    if b.tags.is_empty() {
        return Err(s3_error!(NoSuchTagSet, "The TagSet does not exist"));
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: to_set(&b.tags),
    }))
}

pub(super) async fn put_bucket_tagging(
    s3: &CairnS3,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let tenant = s3.tenant(&req)?;
    let input = req.input;
    let tags = from_set(input.tagging.tag_set, MAX_BUCKET_TAGS, "Bucket")?;
    s3.change_bucket(tenant, &input.bucket, BucketChange::Tags(tags))
        .await?;
    Ok(S3Response::new(PutBucketTaggingOutput {}))
}

pub(super) async fn delete_bucket_tagging(
    s3: &CairnS3,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    let tenant = s3.tenant(&req)?;
    s3.change_bucket(
        tenant,
        &req.input.bucket,
        BucketChange::Tags(BTreeMap::new()),
    )
    .await?;
    Ok(S3Response::new(DeleteBucketTaggingOutput {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: S3Result<BTreeMap<String, String>>) -> String {
        r.unwrap_err().code().as_str().to_string()
    }

    #[test]
    fn header_tags_are_decoded_and_checked_as_aws_does() {
        let t = from_header(Some("project=blue%20sky&owner=ops%2Fteam&empty=")).unwrap();
        assert_eq!(t["project"], "blue sky");
        assert_eq!(t["owner"], "ops/team");
        assert_eq!(t["empty"], "");
        assert!(from_header(None).unwrap().is_empty());
        assert!(from_header(Some("")).unwrap().is_empty());
        let eleven: String = (0..11).map(|i| format!("k{i}=v&")).collect();
        assert_eq!(code(from_header(Some(&eleven))), "InvalidTag");
        assert_eq!(code(from_header(Some("a=1&a=2"))), "InvalidTag");
        assert_eq!(code(from_header(Some("aws:x=1"))), "InvalidTag");
        assert_eq!(code(from_header(Some("=v"))), "InvalidTag");
        assert_eq!(code(from_header(Some("k=%3Cscript%3E"))), "InvalidTag");
        assert_eq!(code(from_header(Some("k=a%09b"))), "InvalidTag", "a tab");
        assert_eq!(code(from_header(Some("k%0A=v"))), "InvalidTag", "a newline");
        assert!(from_header(Some("k=a%E2%80%83b")).is_ok(), "an em space");
        let long_key = "k".repeat(129);
        assert_eq!(
            code(from_header(Some(&format!("{long_key}=v")))),
            "InvalidTag"
        );
        let long_value = "v".repeat(257);
        assert_eq!(
            code(from_header(Some(&format!("k={long_value}")))),
            "InvalidTag"
        );
        // Limits count characters, not bytes.
        let wide = "é".repeat(128);
        assert!(from_header(Some(&format!("{wide}=v"))).is_ok());
    }

    #[test]
    fn a_bucket_takes_fifty_tags() {
        let fifty: Vec<(String, String)> = (0..50).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(checked(fifty.clone(), MAX_BUCKET_TAGS, "Bucket").is_ok());
        let mut more = fifty;
        more.push(("k50".into(), "v".into()));
        assert!(checked(more, MAX_BUCKET_TAGS, "Bucket").is_err());
    }
}
