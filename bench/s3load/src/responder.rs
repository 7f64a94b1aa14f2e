//! The references of the ceiling check: an HTTP responder that does no work
//! (a PUT's body is drained, a GET is answered from one buffer) and a raw
//! loopback TCP stream.

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts the responder; GETs are answered with `size` bytes.
pub async fn start(size: usize) -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let object = Bytes::from(vec![7u8; size]);
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let _ = sock.set_nodelay(true);
            let object = object.clone();
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let object = object.clone();
                    async move {
                        let get = req.method() == http::Method::GET;
                        let mut body = req.into_body();
                        while let Some(f) = body.frame().await {
                            f?;
                        }
                        let out = if get { object } else { Bytes::new() };
                        Ok::<_, hyper::Error>(http::Response::new(Full::new(out)))
                    }
                });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(sock);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// Bytes per second one loopback TCP stream carries for `secs`.
pub async fn loopback_tcp(secs: Duration) -> Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            match s.read(&mut buf).await? {
                0 => return Ok::<_, std::io::Error>(n),
                k => n += k as u64,
            }
        }
    });
    let mut s = TcpStream::connect(addr).await?;
    let buf = vec![1u8; 1 << 20];
    let start = Instant::now();
    while start.elapsed() < secs {
        s.write_all(&buf).await?;
    }
    s.shutdown().await?;
    let n = reader.await??;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}
