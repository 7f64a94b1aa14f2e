//! What a request body must prove before it is stored: its `Content-MD5`, and its
//! flexible checksum (`x-amz-checksum-<algorithm>`, sent as a header, or declared
//! in `x-amz-trailer` and sent after an aws-chunked body, as boto3 ≥ 1.36 and the
//! aws CLI do by default). A body that fails either fails at its end instead of
//! ending, so the object layer commits nothing and what was under the name stays;
//! the error the client sees is S3's `BadDigest`.
//!
//! Checksums are kept with the object (and each part) and returned on GET/HEAD when
//! asked for (`x-amz-checksum-mode: ENABLED`). A multipart object's checksum is
//! S3's composite one: the digest of its parts' digests, suffixed `-N`.

use base64::Engine;
use bytes::Bytes;
use cairn_meta::{Checksum, ChecksumAlgorithm};
use cairn_objects::ChecksumSlot;
use http::HeaderMap;
use s3s::crypto::Checksum as _;
use s3s::{s3_error, S3Error, S3Result};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

pub const ALGORITHMS: [ChecksumAlgorithm; 5] = [
    ChecksumAlgorithm::Crc32,
    ChecksumAlgorithm::Crc32c,
    ChecksumAlgorithm::Crc64nvme,
    ChecksumAlgorithm::Sha1,
    ChecksumAlgorithm::Sha256,
];

/// S3's name of the algorithm (`CRC32`, ...).
pub fn name(a: ChecksumAlgorithm) -> &'static str {
    match a {
        ChecksumAlgorithm::Crc32 => "CRC32",
        ChecksumAlgorithm::Crc32c => "CRC32C",
        ChecksumAlgorithm::Crc64nvme => "CRC64NVME",
        ChecksumAlgorithm::Sha1 => "SHA1",
        ChecksumAlgorithm::Sha256 => "SHA256",
    }
}

/// The algorithm S3 names `s` (any case).
pub fn algorithm(s: &str) -> Option<ChecksumAlgorithm> {
    ALGORITHMS
        .into_iter()
        .find(|a| name(*a).eq_ignore_ascii_case(s))
}

/// The header (and trailer) carrying the algorithm's checksum.
pub fn header(a: ChecksumAlgorithm) -> String {
    format!("x-amz-checksum-{}", name(a).to_ascii_lowercase())
}

fn digest_len(a: ChecksumAlgorithm) -> usize {
    match a {
        ChecksumAlgorithm::Crc32 | ChecksumAlgorithm::Crc32c => 4,
        ChecksumAlgorithm::Crc64nvme => 8,
        ChecksumAlgorithm::Sha1 => 20,
        ChecksumAlgorithm::Sha256 => 32,
    }
}

/// The base64 digest of `data` (several buffers, in order).
pub fn digest<'a>(a: ChecksumAlgorithm, data: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut h = Hasher::new(a);
    for d in data {
        h.update(d);
    }
    h.finish()
}

enum Hasher {
    Crc32(s3s::crypto::Crc32),
    Crc32c(s3s::crypto::Crc32c),
    Crc64nvme(s3s::crypto::Crc64Nvme),
    Sha1(s3s::crypto::Sha1),
    Sha256(s3s::crypto::Sha256),
}

impl Hasher {
    fn new(a: ChecksumAlgorithm) -> Hasher {
        match a {
            ChecksumAlgorithm::Crc32 => Hasher::Crc32(s3s::crypto::Crc32::new()),
            ChecksumAlgorithm::Crc32c => Hasher::Crc32c(s3s::crypto::Crc32c::new()),
            ChecksumAlgorithm::Crc64nvme => Hasher::Crc64nvme(s3s::crypto::Crc64Nvme::new()),
            ChecksumAlgorithm::Sha1 => Hasher::Sha1(s3s::crypto::Sha1::new()),
            ChecksumAlgorithm::Sha256 => Hasher::Sha256(s3s::crypto::Sha256::new()),
        }
    }

    fn update(&mut self, d: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(d),
            Hasher::Crc32c(h) => h.update(d),
            Hasher::Crc64nvme(h) => h.update(d),
            Hasher::Sha1(h) => h.update(d),
            Hasher::Sha256(h) => h.update(d),
        }
    }

    fn finish(self) -> String {
        match self {
            Hasher::Crc32(h) => B64.encode(h.finalize()),
            Hasher::Crc32c(h) => B64.encode(h.finalize()),
            Hasher::Crc64nvme(h) => B64.encode(h.finalize()),
            Hasher::Sha1(h) => B64.encode(h.finalize()),
            Hasher::Sha256(h) => B64.encode(h.finalize()),
        }
    }
}

/// A checksum value as a client sent it: base64 of a digest of the right length.
fn well_formed(a: ChecksumAlgorithm, value: &str) -> S3Result<String> {
    match B64.decode(value.trim()) {
        Ok(raw) if raw.len() == digest_len(a) => Ok(value.trim().to_string()),
        _ => Err(s3_error!(
            InvalidRequest,
            "Value for {} header is invalid.",
            header(a)
        )),
    }
}

/// The one `x-amz-checksum-<alg>` header of a request that carries no body to
/// check (CompleteMultipartUpload), as sent; two are refused.
pub fn claimed(headers: &HeaderMap) -> S3Result<Option<(ChecksumAlgorithm, String)>> {
    let mut given = ALGORITHMS
        .into_iter()
        .filter_map(|a| Some((a, headers.get(header(a))?)));
    let first = given.next();
    if given.next().is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed."
        ));
    }
    match first {
        None => Ok(None),
        Some((a, v)) => {
            let v = v.to_str().map_err(|_| {
                s3_error!(InvalidRequest, "Value for {} header is invalid.", header(a))
            })?;
            Ok(Some((a, v.trim().to_string())))
        }
    }
}

/// Where the expected checksum comes from.
#[derive(Debug)]
enum Expected {
    Header(String),
    Trailer(s3s::TrailingHeaders),
    /// Nothing to compare: the checksum is made (a part copied inside the cluster).
    Computed,
}

/// What a request says its body must match.
#[derive(Debug, Default)]
pub struct Expectations {
    md5: Option<[u8; 16]>,
    checksum: Option<(ChecksumAlgorithm, Expected)>,
}

impl Expectations {
    /// Reads the request's `Content-MD5`, `x-amz-checksum-*`, `x-amz-trailer` and
    /// `x-amz-sdk-checksum-algorithm`; refuses what S3 refuses (two algorithms, a
    /// malformed value, an algorithm named with no checksum to go with it).
    pub fn of(
        headers: &HeaderMap,
        content_md5: Option<&str>,
        trailers: Option<s3s::TrailingHeaders>,
    ) -> S3Result<Expectations> {
        let md5 = match content_md5 {
            None => None,
            Some(h) => Some(
                B64.decode(h.trim())
                    .ok()
                    .and_then(|r| <[u8; 16]>::try_from(r).ok())
                    .ok_or_else(|| s3_error!(InvalidDigest, "Content-MD5 is not a base64 MD5"))?,
            ),
        };
        let mut given = ALGORITHMS
            .into_iter()
            .filter_map(|a| Some((a, headers.get(header(a))?)));
        let sent = given.next();
        let trailer = headers
            .get("x-amz-trailer")
            .map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase());
        if given.next().is_some() || (sent.is_some() && trailer.is_some()) {
            return Err(s3_error!(
                InvalidRequest,
                "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed."
            ));
        }
        let checksum = match (sent, trailer) {
            (Some((a, v)), None) => {
                let v = v.to_str().map_err(|_| {
                    s3_error!(InvalidRequest, "Value for {} header is invalid.", header(a))
                })?;
                Some((a, Expected::Header(well_formed(a, v)?)))
            }
            (None, Some(t)) => {
                let a = t
                    .strip_prefix("x-amz-checksum-")
                    .and_then(algorithm)
                    .ok_or_else(|| {
                        s3_error!(
                            InvalidRequest,
                            "The value specified in the x-amz-trailer header is not supported"
                        )
                    })?;
                let trailers = trailers.ok_or_else(|| {
                    s3_error!(
                        InvalidRequest,
                        "x-amz-trailer needs an aws-chunked body with trailers (STREAMING-*-TRAILER)"
                    )
                })?;
                Some((a, Expected::Trailer(trailers)))
            }
            _ => None,
        };
        if let Some(named) = headers.get("x-amz-sdk-checksum-algorithm") {
            let named = algorithm(named.to_str().unwrap_or("")).ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "Checksum algorithm provided is unsupported."
                )
            })?;
            match &checksum {
                None => {
                    return Err(s3_error!(
                        InvalidRequest,
                        "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* or x-amz-trailer headers were found."
                    ))
                }
                // The algorithm named must be the one whose checksum was sent.
                Some((a, _)) if *a != named => {
                    return Err(s3_error!(
                        InvalidRequest,
                        "Value for x-amz-sdk-checksum-algorithm header is invalid: it names {} but the checksum sent is {}",
                        name(named),
                        name(*a)
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(Expectations { md5, checksum })
    }

    /// No check, only the checksum in `a` made as the body goes by.
    pub fn computed(a: ChecksumAlgorithm) -> Expectations {
        Expectations {
            md5: None,
            checksum: Some((a, Expected::Computed)),
        }
    }

    /// The algorithm the body's checksum is in, if it has one.
    pub fn algorithm(&self) -> Option<ChecksumAlgorithm> {
        self.checksum.as_ref().map(|c| c.0)
    }
}

/// A request body checked against its [`Expectations`] as it streams.
pub struct Verified<S> {
    inner: S,
    md5: Option<(s3s::crypto::Md5, [u8; 16])>,
    checksum: Option<(Hasher, ChecksumAlgorithm, Expected)>,
    /// The checksum, once the body has been read whole and matched it.
    slot: ChecksumSlot,
    failure: Arc<Mutex<Option<S3Error>>>,
}

/// What a [`Verified`] body leaves behind: the checksum it checked, and why it
/// failed if it did.
#[derive(Clone, Default)]
pub struct Verdict {
    pub slot: ChecksumSlot,
    failure: Arc<Mutex<Option<S3Error>>>,
}

impl Verdict {
    /// The S3 error for a body that failed its checks, if it did.
    pub fn failure(&self) -> Option<S3Error> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl<S> Verified<S> {
    pub fn new(inner: S, e: Expectations) -> (Verified<S>, Verdict) {
        let verdict = Verdict::default();
        let v = Verified {
            inner,
            md5: e.md5.map(|m| (s3s::crypto::Md5::new(), m)),
            checksum: e.checksum.map(|(a, x)| (Hasher::new(a), a, x)),
            slot: verdict.slot.clone(),
            failure: verdict.failure.clone(),
        };
        (v, verdict)
    }

    fn fail(&self, e: S3Error) -> Poll<Option<Result<Bytes, String>>> {
        let msg = e.message().unwrap_or("body check failed").to_string();
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
        Poll::Ready(Some(Err(msg)))
    }

    /// At the body's end: every check, in order.
    fn finish(&mut self) -> Poll<Option<Result<Bytes, String>>> {
        if let Some((md5, want)) = self.md5.take() {
            if md5.finalize() != want {
                return self.fail(s3_error!(BadDigest, "Content-MD5 does not match the body"));
            }
        }
        let Some((hasher, a, expected)) = self.checksum.take() else {
            return Poll::Ready(None);
        };
        let value = hasher.finish();
        let want = match expected {
            Expected::Computed => value.clone(),
            Expected::Header(v) => v,
            Expected::Trailer(t) => {
                let got = t.take().and_then(|h| {
                    h.get(header(a))
                        .and_then(|v| v.to_str().ok().map(str::to_string))
                });
                match got.map(|v| well_formed(a, &v)) {
                    Some(Ok(v)) => v,
                    Some(Err(e)) => return self.fail(e),
                    None => {
                        return self.fail(s3_error!(
                            IncompleteBody,
                            "The body ended without the {} trailer it declared",
                            header(a)
                        ))
                    }
                }
            }
        };
        if value != want {
            return self.fail(s3_error!(
                BadDigest,
                "The {} you specified did not match the calculated checksum.",
                name(a)
            ));
        }
        let _ = self.slot.set(Checksum {
            algorithm: a,
            value,
            parts: None,
        });
        Poll::Ready(None)
    }
}

impl<S, E> futures::Stream for Verified<S>
where
    S: futures::Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    type Item = Result<Bytes, String>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(b))) => {
                if let Some((md5, _)) = this.md5.as_mut() {
                    md5.update(&b);
                }
                if let Some((h, _, _)) = this.checksum.as_mut() {
                    h.update(&b);
                }
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.to_string()))),
            Poll::Ready(None) => this.finish(),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The composite checksum of a multipart object from its parts' checksums, in
/// order; an error names the first part without one.
pub fn composite(a: ChecksumAlgorithm, parts: &[(u32, Option<&Checksum>)]) -> S3Result<Checksum> {
    let mut raw = Vec::with_capacity(parts.len());
    for (n, c) in parts {
        let c = c.filter(|c| c.algorithm == a).ok_or_else(|| {
            s3_error!(
                InvalidRequest,
                "The upload was created using the {} checksum algorithm but part {n} has none",
                name(a)
            )
        })?;
        raw.push(B64.decode(&c.value).unwrap_or_default());
    }
    Ok(Checksum {
        algorithm: a,
        value: digest(a, raw.iter().map(Vec::as_slice)),
        parts: Some(parts.len() as u32),
    })
}

/// The full-object CRC of a multipart object, combined from its parts' CRCs and
/// sizes (`FULL_OBJECT`): the CRC of the whole object's bytes, as if it had been
/// sent in one piece, made without reading them again.
pub fn full_object(
    a: ChecksumAlgorithm,
    parts: &[(u32, Option<&cairn_meta::PartRecord>)],
) -> S3Result<Checksum> {
    let crc = match a {
        ChecksumAlgorithm::Crc32 => crc_fast::CrcAlgorithm::Crc32IsoHdlc,
        ChecksumAlgorithm::Crc32c => crc_fast::CrcAlgorithm::Crc32Iscsi,
        ChecksumAlgorithm::Crc64nvme => crc_fast::CrcAlgorithm::Crc64Nvme,
        ChecksumAlgorithm::Sha1 | ChecksumAlgorithm::Sha256 => {
            return Err(s3_error!(
                InvalidRequest,
                "The FULL_OBJECT checksum type cannot be used with the {} checksum algorithm.",
                name(a).to_ascii_lowercase()
            ))
        }
    };
    let width = digest_len(a);
    let mut whole: Option<u64> = None;
    for (n, p) in parts {
        let value = p
            .and_then(|p| Some((p.checksum.as_ref().filter(|c| c.algorithm == a)?, p)))
            .and_then(|(c, p)| {
                let raw = B64.decode(&c.value).ok().filter(|r| r.len() == width)?;
                let mut be = [0u8; 8];
                be[8 - width..].copy_from_slice(&raw);
                Some((u64::from_be_bytes(be), p.extent.size))
            });
        let (part_crc, len) = value.ok_or_else(|| {
            s3_error!(
                InvalidRequest,
                "The upload was created using the {} checksum algorithm but part {n} has none",
                name(a)
            )
        })?;
        whole = Some(match whole {
            None => part_crc,
            Some(w) => crc_fast::checksum_combine(crc, w, part_crc, len),
        });
    }
    let whole = whole.unwrap_or(0).to_be_bytes();
    Ok(Checksum {
        algorithm: a,
        value: B64.encode(&whole[8 - width..]),
        parts: None,
    })
}

/// How S3 writes a stored checksum in a response: `value` or `value-N`.
pub fn shown(c: &Checksum) -> String {
    match c.parts {
        Some(n) => format!("{}-{n}", c.value),
        None => c.value.clone(),
    }
}

/// `COMPOSITE` or `FULL_OBJECT`.
pub fn kind(c: &Checksum) -> s3s::dto::ChecksumType {
    s3s::dto::ChecksumType::from_static(if c.parts.is_some() {
        s3s::dto::ChecksumType::COMPOSITE
    } else {
        s3s::dto::ChecksumType::FULL_OBJECT
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_the_published_check_values() {
        // "123456789": CRC32 0xCBF43926, CRC32C 0xE3069283.
        let d = |a| B64.decode(digest(a, [b"123456789".as_slice()])).unwrap();
        assert_eq!(d(ChecksumAlgorithm::Crc32), 0xCBF4_3926u32.to_be_bytes());
        assert_eq!(d(ChecksumAlgorithm::Crc32c), 0xE306_9283u32.to_be_bytes());
        assert_eq!(d(ChecksumAlgorithm::Sha256).len(), 32);
        assert_eq!(d(ChecksumAlgorithm::Crc64nvme).len(), 8);
    }

    #[test]
    fn two_algorithms_or_a_malformed_value_are_refused() {
        let mut h = HeaderMap::new();
        h.insert("x-amz-checksum-crc32", "AAAAAA==".parse().unwrap());
        assert!(Expectations::of(&h, None, None).is_ok());
        h.insert("x-amz-checksum-sha1", "AAAAAA==".parse().unwrap());
        assert!(Expectations::of(&h, None, None).is_err());
        let mut h = HeaderMap::new();
        h.insert("x-amz-checksum-crc32", "AAAA".parse().unwrap());
        assert!(
            Expectations::of(&h, None, None).is_err(),
            "3 bytes is no CRC32"
        );
        let mut h = HeaderMap::new();
        h.insert("x-amz-sdk-checksum-algorithm", "CRC32".parse().unwrap());
        assert!(
            Expectations::of(&h, None, None).is_err(),
            "an algorithm with no value"
        );
        h.insert("x-amz-checksum-crc32", "AAAAAA==".parse().unwrap());
        assert!(
            Expectations::of(&h, None, None).is_ok(),
            "the same algorithm"
        );
        h.insert("x-amz-sdk-checksum-algorithm", "SHA256".parse().unwrap());
        assert!(
            Expectations::of(&h, None, None).is_err(),
            "an algorithm other than the checksum's"
        );
        let mut h = HeaderMap::new();
        h.insert("x-amz-trailer", "x-amz-checksum-md4".parse().unwrap());
        assert!(Expectations::of(&h, None, None).is_err());
    }

    #[test]
    fn composite_is_the_digest_of_the_part_digests() {
        let a = ChecksumAlgorithm::Crc32;
        let p1 = Checksum {
            algorithm: a,
            value: digest(a, [b"hello ".as_slice()]),
            parts: None,
        };
        let p2 = Checksum {
            algorithm: a,
            value: digest(a, [b"world".as_slice()]),
            parts: None,
        };
        let c = composite(a, &[(1, Some(&p1)), (2, Some(&p2))]).unwrap();
        let raw: Vec<u8> = [&p1, &p2]
            .iter()
            .flat_map(|p| B64.decode(&p.value).unwrap())
            .collect();
        assert_eq!(c.value, digest(a, [raw.as_slice()]));
        assert_eq!(shown(&c), format!("{}-2", c.value));
        assert!(composite(a, &[(1, Some(&p1)), (2, None)]).is_err());
    }
}
