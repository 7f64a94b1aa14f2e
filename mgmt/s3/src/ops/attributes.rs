//! GetObjectAttributes: an object's ETag, checksum, size, storage class and parts
//! in one answer (what SDKs use to check a multipart object part by part).

use super::common::*;
use super::objects::{parts_of, version_of};
use super::CairnS3;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

pub(super) async fn get_object_attributes(
    s3: &CairnS3,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let tenant = s3.tenant(&req)?;
    super::access::refuse_sse_c_read(&req.headers)?;
    let input = req.input;
    let object = (input.bucket.as_str(), input.key.as_str());
    let rec = version_of(s3, tenant, object, input.version_id.as_deref()).await?;
    // One header, comma-separated (s3s may hand it over as one element).
    let wanted: Vec<String> = input
        .object_attributes
        .iter()
        .flat_map(|a| a.as_str().split(','))
        .map(|a| a.trim().to_ascii_lowercase())
        .filter(|a| !a.is_empty())
        .collect();
    let wants = |a: &str| wanted.iter().any(|w| w == a);
    if wanted.is_empty() {
        return Err(s3_error!(
            InvalidArgument,
            "x-amz-object-attributes names no attribute"
        ));
    }
    let mut out = GetObjectAttributesOutput {
        last_modified: Some(timestamp(rec.modified_ms)),
        version_id: shown_version(&rec.version),
        ..Default::default()
    };
    if wants("etag") {
        // Unquoted here, as S3 writes it in this answer.
        out.e_tag = Some(ETag::Strong(rec.etag.clone()));
    }
    if wants("objectsize") {
        out.object_size = Some(rec.size as i64);
    }
    if wants("storageclass") {
        out.storage_class = Some(StorageClass::from_static(StorageClass::STANDARD));
    }
    if wants("checksum") {
        if let Some(c) = &rec.checksum {
            let mut sum = Checksum::default();
            set_checksum!(sum, Some(c), typed);
            out.checksum = Some(sum);
        }
    }
    if wants("objectparts") && rec.etag.contains('-') {
        let sizes = parts_of(&rec);
        let marker = input.part_number_marker.unwrap_or(0).max(0) as usize;
        let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let page: Vec<ObjectPart> = sizes
            .iter()
            .enumerate()
            .skip(marker)
            .take(max)
            .map(|(i, size)| {
                let n = i as i32 + 1;
                let mut p = ObjectPart {
                    part_number: Some(n),
                    size: Some(*size as i64),
                    ..Default::default()
                };
                set_checksum!(p, part_checksum(&rec, n));
                p
            })
            .collect();
        let last = page.last().and_then(|p| p.part_number);
        let truncated = marker + page.len() < sizes.len();
        out.object_parts = Some(GetObjectAttributesParts {
            total_parts_count: Some(sizes.len() as i32),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: if truncated { last } else { None },
            max_parts: Some(max as i32),
            is_truncated: Some(truncated),
            parts: Some(page),
        });
    }
    Ok(S3Response::new(out))
}
