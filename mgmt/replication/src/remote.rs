//! A replication destination over S3: path-style requests signed with SigV4
//! (`UNSIGNED-PAYLOAD`: the bytes are verified where they are read, and the
//! destination checks the length), through one pooled HTTP client.

use crate::ShipError;
use aws_sigv4::http_request::{
    sign, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::time::{Duration, SystemTime};

/// How long a request without a body may take.
const SHORT: Duration = Duration::from_secs(30);
/// The slowest a body may go before its request is given up: 1 MB/s.
const SLOWEST_BPS: u64 = 1_000_000;

/// What a key's path segment escapes: everything but S3's unreserved
/// characters and `/`.
const KEY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

use cairn_meta::REPLICA_OF;

/// A request that got no answer: said to have timed out when it did.
fn link(e: reqwest::Error) -> ShipError {
    match e.is_timeout() {
        true => ShipError::Link(format!("timed out: {e}")),
        false => ShipError::Link(e.to_string()),
    }
}

/// One destination bucket and its credentials.
pub(crate) struct Remote {
    http: reqwest::Client,
    endpoint: String,
    bucket: String,
    region: String,
    identity: aws_credential_types::Credentials,
}

/// The latest version of a key at the destination, as far as shipping cares.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum There {
    /// An object, a replica of this source version if it says so, of this
    /// size and ETag.
    Object {
        replica_of: Option<String>,
        size: Option<u64>,
        etag: Option<String>,
    },
    /// A delete marker.
    Marker,
    /// No version at all.
    Nothing,
}

impl Remote {
    pub(crate) fn new(
        http: reqwest::Client,
        t: &cairn_meta::ReplicationTarget,
        secret: &str,
    ) -> Result<Remote, ShipError> {
        if !t.endpoint.starts_with("http://") {
            return Err(ShipError::Config(format!(
                "{}: the endpoint must be an http:// URL (TLS to a destination is not built yet)",
                t.endpoint
            )));
        }
        Ok(Remote {
            http,
            endpoint: t.endpoint.trim_end_matches('/').to_string(),
            bucket: t.bucket.clone(),
            region: t.region.clone(),
            identity: aws_credential_types::Credentials::new(
                &t.access_key,
                secret,
                None,
                None,
                "cairn-replication",
            ),
        })
    }

    fn url(&self, key: &str) -> Result<String, ShipError> {
        // An HTTP client resolves `.` and `..` segments however they are
        // escaped (the URL standard says so), so the key would not arrive as
        // itself: refused, and said why.
        if key.split('/').any(|seg| seg == "." || seg == "..") {
            return Err(ShipError::Config(format!(
                "{key:?}: a key with a `.` or `..` path segment cannot be sent as an HTTP path"
            )));
        }
        Ok(format!(
            "{}/{}/{}",
            self.endpoint,
            self.bucket,
            utf8_percent_encode(key, KEY)
        ))
    }

    /// A request to `url`, every header signed.
    fn signed(
        &self,
        method: http::Method,
        url: &str,
        mut headers: Vec<(String, String)>,
    ) -> Result<reqwest::RequestBuilder, ShipError> {
        headers.push(("x-amz-content-sha256".into(), "UNSIGNED-PAYLOAD".into()));
        let identity = self.identity.clone().into();
        // S3's rules: the path as sent, escaped once, not normalised.
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| ShipError::Config(format!("signing: {e}")))?
            .into();
        let signable = SignableRequest::new(
            method.as_str(),
            url,
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::UnsignedPayload,
        )
        .map_err(|e| ShipError::Config(format!("signing: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| ShipError::Config(format!("signing: {e}")))?
            .into_parts();
        let mut req = self.http.request(method, url).timeout(SHORT);
        for (k, v) in &headers {
            req = req.header(k, v);
        }
        for (k, v) in instructions.headers() {
            req = req.header(k, v);
        }
        Ok(req)
    }

    async fn send(req: reqwest::RequestBuilder) -> Result<reqwest::Response, ShipError> {
        let resp = req.send().await.map_err(link)?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.text().await.unwrap_or_default();
        // The S3 error code, if the answer has one.
        let code = body
            .split("<Code>")
            .nth(1)
            .and_then(|s| s.split("</Code>").next())
            .unwrap_or("")
            .to_string();
        Err(ShipError::Refused {
            status: status.as_u16(),
            code,
        })
    }

    /// PUTs `len` bytes of `body` as `key`, with `headers`.
    pub(crate) async fn put(
        &self,
        key: &str,
        len: u64,
        body: reqwest::Body,
        mut headers: Vec<(String, String)>,
    ) -> Result<(), ShipError> {
        let url = self.url(key)?;
        headers.push(("content-length".into(), len.to_string()));
        let limit = SHORT + Duration::from_secs(len / SLOWEST_BPS);
        let req = self
            .signed(http::Method::PUT, &url, headers)?
            .timeout(limit)
            .body(body);
        Self::send(req).await.map(|_| ())
    }

    /// DELETEs `key` (at a versioned destination: a delete marker).
    pub(crate) async fn delete(&self, key: &str) -> Result<(), ShipError> {
        let url = self.url(key)?;
        let req = self.signed(http::Method::DELETE, &url, Vec::new())?;
        Self::send(req).await.map(|_| ())
    }

    /// What `key`'s latest version is at the destination.
    pub(crate) async fn head(&self, key: &str) -> Result<There, ShipError> {
        let url = self.url(key)?;
        let req = self.signed(http::Method::HEAD, &url, Vec::new())?;
        let resp = req.send().await.map_err(link)?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        match resp.status().as_u16() {
            200 => Ok(There::Object {
                replica_of: header(&format!("x-amz-meta-{REPLICA_OF}")),
                size: header("content-length").and_then(|l| l.parse().ok()),
                etag: header("etag").map(|e| e.trim_matches('"').to_string()),
            }),
            404 if header("x-amz-delete-marker").as_deref() == Some("true") => Ok(There::Marker),
            404 => Ok(There::Nothing),
            status => Err(ShipError::Refused {
                status,
                code: header("x-amz-error-code").unwrap_or_default(),
            }),
        }
    }

    /// Whether the destination bucket keeps versions (else every shipment
    /// would replace the one before, and a delete marker delete for good).
    pub(crate) async fn versioned(&self) -> Result<bool, ShipError> {
        let url = format!("{}/{}?versioning", self.endpoint, self.bucket);
        let req = self.signed(http::Method::GET, &url, Vec::new())?;
        let body = Self::send(req).await?.text().await.map_err(link)?;
        Ok(body.contains("<Status>Enabled</Status>"))
    }
}
