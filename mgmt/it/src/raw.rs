//! Signed requests sent byte for byte over a plain TCP socket, so a test controls
//! exactly what reaches the server (bodies that lie about their length, uploads
//! abandoned midway, slow bodies).

use crate::{Node, ACCESS_KEY, SECRET_KEY};
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How the payload is declared in the signature.
#[derive(Debug)]
pub enum Payload<'a> {
    /// SHA-256 of these bytes.
    Hash(&'a [u8]),
    /// `UNSIGNED-PAYLOAD`.
    Unsigned,
}

/// SigV4 headers (Authorization, X-Amz-Date, X-Amz-Content-Sha256) for a request
/// with `headers` (which must include every header that will be sent and signed).
pub fn sign_headers(
    node: &Node,
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
    payload: Payload<'_>,
) -> Vec<(String, String)> {
    let identity =
        aws_credential_types::Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "it").into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let url = format!("{}{}", node.endpoint(), path_and_query);
    let body = match payload {
        Payload::Hash(b) => SignableBody::Bytes(b),
        Payload::Unsigned => SignableBody::UnsignedPayload,
    };
    let req = SignableRequest::new(
        method,
        url,
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        body,
    )
    .expect("signable request");
    let (instructions, _) = sign(req, &params).expect("sign").into_parts();
    let (hdrs, _) = instructions.into_parts();
    hdrs.into_iter()
        .map(|h| (h.name().to_string(), h.value().to_string()))
        .collect()
}

/// A complete signed HTTP/1.1 request, as bytes, with `Connection: close`.
pub fn signed_request(
    node: &Node,
    method: &str,
    path_and_query: &str,
    extra: &[(&str, &str)],
    body: &[u8],
    payload: Payload<'_>,
) -> Vec<u8> {
    let mut headers = vec![
        ("host".to_string(), node.s3_addr.clone()),
        ("content-length".to_string(), body.len().to_string()),
    ];
    for (k, v) in extra {
        headers.retain(|(h, _)| !h.eq_ignore_ascii_case(k));
        headers.push((k.to_lowercase(), v.to_string()));
    }
    let auth = sign_headers(node, method, path_and_query, &headers, payload);
    let mut out = format!("{method} {path_and_query} HTTP/1.1\r\n");
    for (k, v) in headers.iter().chain(auth.iter()) {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("connection: close\r\n\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A parsed response: status (0 if the server closed without answering) and body.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub text: String,
}

/// Reads whatever the server sends until it closes (or 10 s pass).
pub async fn read_all(s: &mut TcpStream) -> Raw {
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 16 << 10];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "server neither answered nor closed in 10 s (got {:?})",
        String::from_utf8_lossy(&buf)
    );
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Raw { status, text }
}

/// Sends `bytes` on a new connection and reads the answer.
pub async fn send_raw(node: &Node, bytes: &[u8]) -> Raw {
    let mut s = TcpStream::connect(&node.s3_addr).await.expect("connect");
    // The server may refuse before reading it all; a write error is fine.
    let _ = s.write_all(bytes).await;
    read_all(&mut s).await
}
