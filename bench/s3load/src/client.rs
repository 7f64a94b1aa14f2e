//! The client side: one keep-alive HTTP/1.1 connection per worker, requests
//! signed with SigV4 (`UNSIGNED-PAYLOAD`), bodies sent from one shared buffer and
//! responses drained without keeping them.

use crate::report::{Op, Report, Sample};
use crate::Mix;
use anyhow::{anyhow, bail, Context, Result};
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpStream;

/// Where requests go and how they are signed (`None`: not signed, for the
/// ceiling's responder).
#[derive(Clone)]
pub struct Target {
    addr: String,
    host: String,
    bucket: String,
    creds: Option<Arc<(aws_credential_types::Credentials, String)>>,
}

impl Target {
    pub fn new(
        endpoint: &str,
        access: &str,
        secret: &str,
        region: &str,
        bucket: &str,
    ) -> Result<Target> {
        let mut t = Target::unsigned(endpoint, bucket)?;
        let creds = aws_credential_types::Credentials::new(access, secret, None, None, "s3load");
        t.creds = Some(Arc::new((creds, region.to_string())));
        Ok(t)
    }

    pub fn unsigned(endpoint: &str, bucket: &str) -> Result<Target> {
        let host = endpoint
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("{endpoint}: only http:// endpoints"))?
            .trim_end_matches('/')
            .to_string();
        Ok(Target {
            addr: host.clone(),
            host,
            bucket: bucket.to_string(),
            creds: None,
        })
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>> {
        let tcp = TcpStream::connect(&self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        tcp.set_nodelay(true)?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(send)
    }

    fn request(&self, method: &str, path: &str, body: Bytes) -> Result<http::Request<Full<Bytes>>> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host)
            .header("content-length", body.len());
        if let Some(c) = &self.creds {
            let identity = c.0.clone().into();
            let params = v4::SigningParams::builder()
                .identity(&identity)
                .region(&c.1)
                .name("s3")
                .time(SystemTime::now())
                .settings(SigningSettings::default())
                .build()?
                .into();
            let url = format!("http://{}{}", self.host, path);
            let len = body.len().to_string();
            let headers = [
                ("host", self.host.as_str()),
                ("content-length", len.as_str()),
                ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
            ];
            let signable = SignableRequest::new(
                method,
                url,
                headers.into_iter(),
                SignableBody::UnsignedPayload,
            )?;
            let (instructions, _) = sign(signable, &params)?.into_parts();
            req = req.header("x-amz-content-sha256", "UNSIGNED-PAYLOAD");
            for (name, value) in instructions.headers() {
                req = req.header(name, value);
            }
        }
        Ok(req.body(Full::new(body))?)
    }

    /// Sends one request and reads the whole answer; returns its status and the
    /// body's length.
    async fn send(
        &self,
        conn: &mut SendRequest<Full<Bytes>>,
        method: &str,
        path: &str,
        body: Bytes,
    ) -> Result<(u16, u64)> {
        conn.ready().await?;
        let resp = conn.send_request(self.request(method, path, body)?).await?;
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut n = 0u64;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                n += data.len() as u64;
            }
        }
        Ok((status, n))
    }

    fn key_path(&self, key: &str) -> String {
        format!("/{}/{key}", self.bucket)
    }

    pub async fn ensure_bucket(&self) -> Result<()> {
        let mut c = self.connect().await?;
        let (status, _) = self
            .send(&mut c, "PUT", &format!("/{}", self.bucket), Bytes::new())
            .await?;
        // 409: it exists already (BucketAlreadyOwnedByYou).
        if status != 200 && status != 409 {
            bail!("creating bucket {}: HTTP {status}", self.bucket);
        }
        Ok(())
    }
}

/// What the workers do.
pub struct Plan {
    pub body: Bytes,
    pub mix: Mix,
    pub objects: usize,
    pub warmup: Duration,
    pub duration: Duration,
}

fn object_key(i: usize) -> String {
    format!("s3load/obj-{i:08}")
}

/// Writes the objects the GETs read, `connections` at a time.
pub async fn prefill(t: &Target, objects: usize, body: Bytes, connections: usize) -> Result<()> {
    let mut tasks = Vec::new();
    for w in 0..connections.min(objects) {
        let (t, body) = (t.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = t.connect().await?;
            for i in (w..objects).step_by(connections) {
                let (status, _) = t
                    .send(&mut c, "PUT", &t.key_path(&object_key(i)), body.clone())
                    .await?;
                if status != 200 {
                    bail!("prefill PUT {}: HTTP {status}", object_key(i));
                }
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Runs the plan on `connections` connections and gathers what they measured.
pub async fn drive(t: &Target, plan: &Plan, connections: usize) -> Result<Report> {
    let start = Instant::now();
    let counted_from = start + plan.warmup;
    let end = counted_from + plan.duration;
    let plan = Arc::new((plan.body.clone(), plan.mix, plan.objects));
    let mut tasks = Vec::new();
    for w in 0..connections {
        let (t, plan) = (t.clone(), plan.clone());
        tasks.push(tokio::spawn(async move {
            let (body, mix, objects) = (&plan.0, plan.1, plan.2);
            let mut samples = Vec::new();
            let mut errors = (0u64, None::<String>);
            let mut c = t.connect().await?;
            let cycle = (mix.put + mix.get) as usize;
            let mut n = w;
            while Instant::now() < end {
                // Deterministic interleaving by weight; writes go to keys of
                // their own (never the ones GETs read).
                let op = if n % cycle < mix.put as usize {
                    Op::Put
                } else {
                    Op::Get
                };
                let began = Instant::now();
                let r = match op {
                    Op::Put => {
                        let key = format!("s3load/w{w}-{n}");
                        t.send(&mut c, "PUT", &t.key_path(&key), body.clone()).await
                    }
                    Op::Get => {
                        let key = object_key(n % objects);
                        t.send(&mut c, "GET", &t.key_path(&key), Bytes::new()).await
                    }
                };
                let took = began.elapsed();
                n += connections;
                match r {
                    Ok((200, got)) => {
                        if began >= counted_from && Instant::now() <= end {
                            let bytes = if op == Op::Put {
                                body.len() as u64
                            } else {
                                got
                            };
                            samples.push(Sample { op, took, bytes });
                        }
                    }
                    Ok((status, _)) => {
                        errors.0 += 1;
                        errors.1.get_or_insert(format!("{op:?}: HTTP {status}"));
                    }
                    Err(e) => {
                        errors.0 += 1;
                        errors.1.get_or_insert(format!("{op:?}: {e}"));
                        // The connection may be gone: a new one.
                        c = t.connect().await?;
                    }
                }
            }
            Ok::<_, anyhow::Error>((samples, errors))
        }));
    }
    let mut report = Report::new(end.saturating_duration_since(counted_from));
    for task in tasks {
        let (samples, (errors, first)) = task.await??;
        report.samples.extend(samples);
        report.errors += errors;
        if report.first_error.is_none() {
            report.first_error = first;
        }
    }
    Ok(report)
}
