//! The S3 front end.
//!
//! Owns the translation between S3 (parsed, authenticated and rendered by the `s3s`
//! crate: SigV4 in headers and presigned URLs, XML bodies and errors) and the object
//! store, and the HTTP server that carries it. It holds no data and no state of its
//! own beyond the credential table: every decision about bytes is the object
//! store's, so other front ends see the same objects with the same guarantees.

mod auth;
mod cors;
mod encoding;
mod error;
mod guard;
mod integrity;
mod metrics;
mod ops;
mod vhost;

pub use auth::{Credential, Identity, Keys};
pub use metrics::S3Metrics;
pub use ops::CairnS3;
pub use vhost::{BadDomain, Domains};

use cairn_objects::ObjectStore;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Errors of the S3 front end's server.
#[derive(Debug, thiserror::Error)]
pub enum S3FrontError {
    #[error("S3 listener: {0}")]
    Listen(#[from] std::io::Error),
}

/// Serves S3 on `listener` until `shutdown` resolves; connections in progress are
/// allowed to finish.
pub async fn serve(
    listener: TcpListener,
    store: Arc<ObjectStore>,
    keys: Keys,
    domains: Domains,
    metrics: S3Metrics,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), S3FrontError> {
    let named = cors::Named::new(store.clone());
    let front = Arc::new(Front {
        cors: named.clone(),
        domains: domains.clone(),
        metrics,
    });
    let service = {
        let mut b =
            s3s::service::S3ServiceBuilder::new(CairnS3::new(store.clone(), keys.clone(), named));
        b.set_auth(keys.clone());
        b.set_access(auth::Access {
            keys,
            qos: store.qos().clone(),
        });
        if !domains.is_empty() {
            b.set_host(domains);
        }
        b.build()
    };
    let mut conn = ConnBuilder::new(TokioExecutor::new());
    // Bound what one client can make the server buffer before a request is parsed:
    // oversized headers are refused with 431, not held in memory.
    // A client that never finishes its headers (slowloris) is dropped after 30 s.
    conn.http1()
        .max_buf_size(64 << 10)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(std::time::Duration::from_secs(30));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (socket, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("S3 accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = socket.set_nodelay(true);
        let (svc, front) = (service.clone(), front.clone());
        let guarded =
            hyper::service::service_fn(move |req| guarded(svc.clone(), req, front.clone()));
        let conn = conn
            .serve_connection(TokioIo::new(socket), guarded)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, "S3 connection ended: {e}");
            }
        });
    }
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => {
            tracing::warn!("S3 connections still open after 10 s; closing");
        }
    }
    Ok(())
}

/// What the request path around the S3 service needs.
struct Front {
    cors: cors::Named,
    domains: Domains,
    metrics: S3Metrics,
}

/// One request through the limits of [`guard`] and CORS, then to the S3 service;
/// every answer gets its request ids.
async fn guarded(
    svc: s3s::service::S3Service,
    mut req: http::Request<hyper::body::Incoming>,
    front: Arc<Front>,
) -> Result<s3s::HttpResponse, s3s::HttpError> {
    let started = std::time::Instant::now();
    let op = metrics::OpSlot::default();
    req.extensions_mut().insert(op.clone());
    let received = declared_length(req.headers());
    let is_head = req.method() == http::Method::HEAD;
    let unanswerable_expect = expects_continue_without_body(req.headers());
    // Kept for the error line (a Uri clone shares its bytes: no copy per request).
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let origin = req
        .headers()
        .get(http::header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_string);
    let reached = cors::Reached::default();
    if origin.is_some() {
        req.extensions_mut().insert(reached.clone());
    }
    let preflight = cors::preflight(&req, &front.cors, &front.domains);
    if preflight.is_some() {
        let _ = op.set("PreflightCors".to_string());
    }
    let mut resp = match preflight.or_else(|| refused(&req)) {
        Some(resp) => resp,
        None => match sized(req.map(guard::GuardedBody::new)).await {
            Ok(req) => svc.call(req).await?,
            Err(resp) => resp,
        },
    };
    if let Some(origin) = &origin {
        cors::decorate(&mut resp, &front.cors, origin, &method, &reached);
    }
    // A HEAD of one part (`?partNumber=N`) is answered as its GET is, 206 with
    // the part's Content-Range; s3s sends every HEAD as 200.
    if is_head
        && resp.status() == http::StatusCode::OK
        && resp.headers().contains_key(http::header::CONTENT_RANGE)
    {
        *resp.status_mut() = http::StatusCode::PARTIAL_CONTENT;
    }
    if unanswerable_expect {
        // hyper sends no `100 Continue` for an empty body (RFC 9110 allows it),
        // and botocore then takes the final answer for the interim one and
        // misreads the next answer on the same connection (no headers, after
        // the idle timeout). S3 sends the 100; not being able to, close the
        // connection after this answer, so no next request meets the confusion.
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    let (id, id2) = request_ids(resp.headers_mut());
    let status = resp.status().as_u16();
    let code = match status >= 400 {
        true => Some(xml_tag(
            resp.body().bytes().as_deref().unwrap_or_default(),
            "Code",
        )),
        false => None,
    };
    front.metrics.answered(&metrics::Answered {
        op: &op,
        status,
        error: code.as_deref().filter(|c| !c.is_empty()),
        took: started.elapsed(),
        received,
        sent: if is_head {
            0
        } else {
            declared_length(resp.headers())
        },
    });
    // An error's XML names the request too, as S3's does (`RequestId`, `HostId`).
    if status >= 400 {
        log_error(&id, &method, uri.path(), &resp);
        if let Some(xml) = resp.body().bytes() {
            if let Some(at) = xml.windows(8).rposition(|w| w == b"</Error>") {
                let mut with = Vec::with_capacity(xml.len() + 256);
                with.extend_from_slice(&xml[..at]);
                // An error raised without a message gets AWS's for its code.
                if !xml.windows(9).any(|w| w == b"<Message>") {
                    let code = xml_tag(&xml, "Code");
                    with.extend_from_slice(
                        format!("<Message>{}</Message>", error::default_message(&code)).as_bytes(),
                    );
                }
                with.extend_from_slice(
                    format!("<RequestId>{id}</RequestId><HostId>{id2}</HostId>").as_bytes(),
                );
                with.extend_from_slice(&xml[at..]);
                resp.headers_mut().remove(http::header::CONTENT_LENGTH);
                *resp.body_mut() = s3s::Body::from(bytes::Bytes::from(with));
            }
        }
    }
    Ok(resp)
}

/// A request that asks for `100 Continue` before a body it declares empty.
fn expects_continue_without_body(h: &http::HeaderMap) -> bool {
    let expects = h
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    expects
        && h.get(http::header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() == b"0")
}

/// What is refused before S3 looks at the request: a presigned URL valid for
/// longer than S3 allows.
fn refused<B>(req: &http::Request<B>) -> Option<s3s::HttpResponse> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if let Some(refusal) = guard::presigned_refusal(req.uri().query(), now) {
        // AWS's answers to SigV4, word for word; SigV2 gets the same code.
        let message = match refusal {
            guard::PresignRefusal::TooLong { param, secs } => format!(
                "{param} must be less than a week (in seconds) that is 604800{}; it is {secs}",
                if param == "Expires" { " from now" } else { "" }
            ),
            guard::PresignRefusal::NotANumber { param } => format!("{param} should be a number"),
        };
        return Some(error_response(
            http::StatusCode::BAD_REQUEST,
            "AuthorizationQueryParametersError",
            &message,
        ));
    }
    None
}

/// The request with a body S3 can take: one sent with no length (see
/// [`guard::unsized_body`]) is read whole, up to [`guard::MAX_UNSIZED_BODY`], and
/// given its `Content-Length`.
async fn sized(
    req: http::Request<guard::GuardedBody>,
) -> Result<http::Request<s3s::Body>, s3s::HttpResponse> {
    use http_body_util::BodyExt;
    if !guard::unsized_body(req.method(), req.headers()) {
        return Ok(req.map(s3s::Body::http_body));
    }
    let (mut parts, body) = req.into_parts();
    match http_body_util::Limited::new(body, guard::MAX_UNSIZED_BODY)
        .collect()
        .await
    {
        Ok(all) => {
            let all = all.to_bytes();
            parts
                .headers
                .insert(http::header::CONTENT_LENGTH, all.len().into());
            Ok(http::Request::from_parts(parts, s3s::Body::from(all)))
        }
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(error_response(
            http::StatusCode::LENGTH_REQUIRED,
            "MissingContentLength",
            &format!(
                "You must provide the Content-Length HTTP header for a body over {} MiB (or upload it in parts)",
                guard::MAX_UNSIZED_BODY >> 20
            ),
        )),
        Err(e) => Err(error_response(
            http::StatusCode::BAD_REQUEST,
            "IncompleteBody",
            &format!("The request body ended early: {e}"),
        )),
    }
}

/// An S3 error answer made outside the S3 service.
fn error_response(status: http::StatusCode, code: &str, message: &str) -> s3s::HttpResponse {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    let mut resp = http::Response::new(s3s::Body::from(xml));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    resp
}

/// `x-amz-request-id` and `x-amz-id-2` on every answer, as S3 sends them: SDKs
/// log and surface them (`request_id()`), and support asks for them. Random per
/// request; Cairn keeps no log keyed by them yet.
/// Returns the two ids sent.
/// One line per error answer, with the request id the client was given, so a
/// client's error can be found in the log. The server's own failures (5xx) are
/// errors; a client's mistakes (NoSuchKey, a bad signature) are the client's, and
/// logged only at debug. (s3s's own "op returns error" line, at ERROR for every
/// one of them, is turned off by the daemon's default filter.)
fn log_error(id: &str, method: &http::Method, path: &str, resp: &s3s::HttpResponse) {
    let status = resp.status().as_u16();
    let xml = resp.body().bytes().unwrap_or_default();
    let tag = |name: &str| xml_tag(&xml, name);
    // 501 is a refusal of what Cairn does not do, asked for by the client.
    if status >= 500 && status != 501 {
        let (code, message) = (tag("Code"), tag("Message"));
        tracing::error!(request_id = id, %method, path, status, code, message, "S3 request failed");
    } else {
        tracing::debug!(request_id = id, %method, path, status, code = tag("Code"), "S3 request refused");
    }
}

/// A body's length as its headers declare it (the decoded length of an
/// aws-chunked upload); 0 when they do not.
fn declared_length(h: &http::HeaderMap) -> u64 {
    let n = |name: &str| h.get(name)?.to_str().ok()?.parse::<u64>().ok();
    n("x-amz-decoded-content-length")
        .or_else(|| n("content-length"))
        .unwrap_or(0)
}

/// The text of the first `<name>` element of an error's XML (empty if none).
fn xml_tag(xml: &[u8], name: &str) -> String {
    let xml = String::from_utf8_lossy(xml);
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    xml.split_once(&open)
        .and_then(|(_, rest)| rest.split_once(&close))
        .map(|(v, _)| v.to_string())
        .unwrap_or_default()
}

fn request_ids(headers: &mut http::HeaderMap) -> (String, String) {
    let id = hex::encode_upper(rand::random::<[u8; 8]>());
    let id2 = hex::encode(rand::random::<[u8; 24]>());
    for (name, v) in [("x-amz-request-id", &id), ("x-amz-id-2", &id2)] {
        if let Ok(v) = http::HeaderValue::from_str(v) {
            headers.insert(name, v);
        }
    }
    (id, id2)
}
