//! What one S3 request may cost the server before any S3 logic runs: a request
//! body that stalls or trickles is cut off, and a presigned URL may not be valid
//! for longer than S3 allows (7 days).
//!
//! Why here and not in hyper: hyper bounds the header phase (`header_read_timeout`)
//! but not the body, so a client that declares a large body and sends it a byte at
//! a time would hold its connection, its task and its partly written extent for as
//! long as it likes.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// No byte of the body for this long ends the request.
pub const BODY_IDLE: Duration = Duration::from_secs(30);
/// After this much time spent waiting on the client...
pub const SLOW_AFTER: Duration = Duration::from_secs(30);
/// ...the body must have averaged at least this rate (bytes per second of waiting).
pub const MIN_RATE: u64 = 4096;
/// AWS's limit on `X-Amz-Expires`: one week.
pub const MAX_PRESIGNED_EXPIRY: u64 = 7 * 24 * 3600;

/// The most a body sent with no length (plain HTTP `Transfer-Encoding: chunked`,
/// no `Content-Length`, not aws-chunked) may be. S3's payload checks need the
/// length before the body, so such a body is read into memory first; a longer one
/// is refused with S3's 411 `MissingContentLength` (multipart, or a length, lifts
/// the limit).
pub const MAX_UNSIZED_BODY: usize = 32 << 20;

/// Whether a request's body has no length the S3 layer can use: a PUT sent with
/// HTTP chunked encoding and no `Content-Length`, whose payload is not aws-chunked
/// (aws-chunked bodies state theirs in `x-amz-decoded-content-length`).
pub fn unsized_body(method: &http::Method, headers: &http::HeaderMap) -> bool {
    let chunked = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .any(|v| {
            v.to_str()
                .is_ok_and(|v| v.to_ascii_lowercase().contains("chunked"))
        });
    let aws_chunked = headers
        .get("x-amz-content-sha256")
        .is_some_and(|v| v.as_bytes().starts_with(b"STREAMING-"));
    method == http::Method::PUT
        && chunked
        && !aws_chunked
        && !headers.contains_key(http::header::CONTENT_LENGTH)
}

/// Why a request body was cut off.
#[derive(Debug, thiserror::Error)]
pub enum BodyCut {
    #[error("no request body data for {0:?}")]
    Idle(Duration),
    #[error("request body too slow: {bytes} bytes in {waited:?} of waiting")]
    TooSlow { bytes: u64, waited: Duration },
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

/// A request body with the limits above. Only time spent waiting on the client
/// counts: while the server is not reading (backpressure from the drives), no
/// clock runs.
pub struct GuardedBody {
    inner: hyper::body::Incoming,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Set while the client is being waited for (the last poll was Pending).
    waiting_since: Option<Instant>,
    waited: Duration,
    bytes: u64,
}

impl GuardedBody {
    pub fn new(inner: hyper::body::Incoming) -> GuardedBody {
        GuardedBody {
            inner,
            timer: Box::pin(tokio::time::sleep(BODY_IDLE)),
            waiting_since: None,
            waited: Duration::ZERO,
            bytes: 0,
        }
    }
}

impl Body for GuardedBody {
    type Data = Bytes;
    type Error = BodyCut;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyCut>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(since) = this.waiting_since.take() {
                    this.waited += since.elapsed();
                }
                if let Some(Ok(f)) = &frame {
                    if let Some(d) = f.data_ref() {
                        this.bytes += d.len() as u64;
                    }
                }
                if this.waited > SLOW_AFTER
                    && this.bytes < MIN_RATE.saturating_mul(this.waited.as_secs())
                {
                    return Poll::Ready(Some(Err(BodyCut::TooSlow {
                        bytes: this.bytes,
                        waited: this.waited,
                    })));
                }
                Poll::Ready(frame.map(|r| r.map_err(BodyCut::Http)))
            }
            Poll::Pending => {
                if this.waiting_since.is_none() {
                    this.waiting_since = Some(Instant::now());
                    this.timer
                        .as_mut()
                        .reset(tokio::time::Instant::now() + BODY_IDLE);
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(BodyCut::Idle(BODY_IDLE)))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a presigned request is refused before its signature is checked.
#[derive(Debug, PartialEq, Eq)]
pub enum PresignRefusal {
    /// Valid for this many seconds, more than a week.
    TooLong { param: &'static str, secs: u64 },
    /// An expiry that is not a number of seconds.
    NotANumber { param: &'static str },
}

/// Checks how long a presigned request says it stays valid; `Some` when it is
/// over S3's week, or not a number.
///
/// SigV4 says it in `X-Amz-Expires` (seconds from its signing time). SigV2 query
/// auth (`AWSAccessKeyId`/`Signature`/`Expires`: what boto3's
/// `generate_presigned_url` and `aws s3 presign` produce at their defaults) says
/// only when it ends (`Expires`, Unix seconds), so its *remaining* lifetime from
/// `now` is what is capped: a URL signed for more than a week is refused until it
/// is within a week of its end. AWS puts no cap on SigV2, but a URL that cannot be
/// revoked short of rotating the key should not outlive the limit we promise.
///
/// The query is read as s3s reads it before checking the signature (decoded by
/// `form_urlencoded`, names matched exactly), and every occurrence of each
/// parameter is checked whatever the signature version, so neither encoding a
/// name or value, nor repeating one, nor adding the other version's parameter
/// (SigV2 does not sign `X-Amz-Expires`) slips a long-lived URL past the check.
/// It fails closed: an expiry that is not a number is refused.
pub fn presigned_refusal(query: Option<&str>, now_unix: u64) -> Option<PresignRefusal> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query?.as_bytes())
        .into_owned()
        .collect();
    fn values<'a>(pairs: &'a [(String, String)], name: &'a str) -> impl Iterator<Item = &'a str> {
        pairs
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    for v in values(&pairs, "X-Amz-Expires") {
        let param = "X-Amz-Expires";
        match v.parse::<u64>() {
            Ok(secs) if secs > MAX_PRESIGNED_EXPIRY => {
                return Some(PresignRefusal::TooLong { param, secs })
            }
            Ok(_) => {}
            Err(_) => return Some(PresignRefusal::NotANumber { param }),
        }
    }
    if values(&pairs, "Signature").next().is_some() {
        for v in values(&pairs, "Expires") {
            let param = "Expires";
            match v.parse::<u64>() {
                Ok(end) if end.saturating_sub(now_unix) > MAX_PRESIGNED_EXPIRY => {
                    return Some(PresignRefusal::TooLong {
                        param,
                        secs: end - now_unix,
                    })
                }
                Ok(_) => {}
                Err(_) => return Some(PresignRefusal::NotANumber { param }),
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn too_long(param: &'static str, secs: u64) -> Option<PresignRefusal> {
        Some(PresignRefusal::TooLong { param, secs })
    }

    #[test]
    fn presigned_expiry_is_capped_at_a_week() {
        let q = |s: &str| presigned_refusal(Some(s), 1_000_000);
        assert_eq!(
            q("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=604800"),
            None
        );
        assert_eq!(
            q("X-Amz-Expires=604801&x=1"),
            too_long("X-Amz-Expires", 604801)
        );
        assert_eq!(q("list-type=2"), None);
        assert_eq!(presigned_refusal(None, 0), None);
    }

    #[test]
    fn sigv2_presigned_urls_are_capped_by_their_remaining_lifetime() {
        let now = 1_700_000_000;
        let v2 = |expires: u64| {
            presigned_refusal(
                Some(&format!(
                    "AWSAccessKeyId=AK&Signature=abc%3D&Expires={expires}"
                )),
                now,
            )
        };
        assert_eq!(v2(now + 3600), None);
        assert_eq!(v2(now + MAX_PRESIGNED_EXPIRY), None);
        assert_eq!(
            v2(now + MAX_PRESIGNED_EXPIRY + 1),
            too_long("Expires", 604_801)
        );
        assert_eq!(v2(now + 3650 * 86_400), too_long("Expires", 3650 * 86_400));
        // Already past: not this guard's business (the signature check refuses it).
        assert_eq!(v2(now - 10), None);
        // `Expires` without a V2 signature is some other parameter.
        assert_eq!(presigned_refusal(Some("Expires=99999999999"), now), None);
    }

    #[test]
    fn rewriting_the_query_does_not_get_past_the_cap() {
        // The rewrites an outside test used to get 10-year URLs served: every
        // one decodes, as s3s decodes it, to a URL that is too long-lived.
        let now = 1_700_000_000;
        let end = now + 3650 * 86_400;
        let ten_years = too_long("Expires", 3650 * 86_400);
        let v2 = |q: String| presigned_refusal(Some(&q), now);
        let base = format!("AWSAccessKeyId=AK&Signature=abc&Expires={end}");
        // SigV2 does not sign X-Amz-Expires: adding it must not skip `Expires`.
        assert_eq!(v2(format!("{base}&X-Amz-Expires=1")), ten_years);
        // Encoded names and values.
        assert_eq!(
            v2(format!("AWSAccessKeyId=AK&Signature=abc&%45xpires={end}")),
            ten_years
        );
        assert_eq!(
            v2(format!("AWSAccessKeyId=AK&%53ignature=abc&Expires={end}")),
            ten_years
        );
        let enc: String = end
            .to_string()
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect();
        assert_eq!(
            v2(format!("AWSAccessKeyId=AK&Signature=abc&Expires={enc}")),
            ten_years
        );
        // Repeated: every occurrence counts.
        assert_eq!(v2(format!("{base}&Expires={}", now + 60)), ten_years);
        // SigV4 encodings of the name and of the value.
        let v4 = |q: &str| presigned_refusal(Some(q), now);
        assert_eq!(
            v4("X-Amz-%45xpires=604801&X-Amz-Signature=s"),
            too_long("X-Amz-Expires", 604_801)
        );
        assert_eq!(
            v4("X-Amz-Expires=%36%30%34%38%30%31&X-Amz-Signature=s"),
            too_long("X-Amz-Expires", 604_801)
        );
        // Not a number: refused, not waved through.
        assert_eq!(
            v4("X-Amz-Expires=x&X-Amz-Signature=s"),
            Some(PresignRefusal::NotANumber {
                param: "X-Amz-Expires"
            })
        );
        assert_eq!(
            v2(format!("{base}&X-Amz-Expires=x")),
            Some(PresignRefusal::NotANumber {
                param: "X-Amz-Expires"
            })
        );
    }
}
