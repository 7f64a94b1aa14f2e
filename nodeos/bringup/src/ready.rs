//! Waiting for the daemons: a file appearing (datapathd's ready file) and mgmtd's
//! `/healthz` answering 200. Plain TCP and HTTP/1.1: this runs at boot and needs no client
//! library.

use crate::NodeosError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// One `GET <path>`; `Ok(())` on a 200, else what was wrong.
pub fn http_ok(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut head = [0u8; 64];
    let mut n = 0;
    // The status line is all we need; a peer that sends less than that is not ready.
    while n < 12 {
        match s.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(format!("{addr}: {e}")),
        }
    }
    let line = String::from_utf8_lossy(&head[..n]);
    let status = line.split_whitespace().nth(1).unwrap_or("");
    if line.starts_with("HTTP/1.") && status == "200" {
        Ok(())
    } else {
        Err(format!(
            "{addr}{path} answered `{}`",
            line.lines().next().unwrap_or("").trim()
        ))
    }
}

/// Poll `http://addr/path` until it answers 200 or `timeout` passes.
pub fn wait_http_ok(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
    interval: Duration,
) -> Result<(), NodeosError> {
    let start = Instant::now();
    loop {
        let last = match http_ok(addr, path, interval.max(Duration::from_secs(1))) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if start.elapsed() >= timeout {
            return Err(NodeosError::NotReady {
                seconds: timeout.as_secs(),
                last,
            });
        }
        std::thread::sleep(interval);
    }
}

/// Wait until `path` exists.
pub fn wait_file(path: &Path, timeout: Duration, interval: Duration) -> Result<(), NodeosError> {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() >= timeout {
            return Err(NodeosError::NotReady {
                seconds: timeout.as_secs(),
                last: format!("{} does not exist", path.display()),
            });
        }
        std::thread::sleep(interval);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server answering each connection with the next canned status line.
    fn server(statuses: Vec<&'static str>) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for st in statuses {
                let (mut c, _) = l.accept().unwrap();
                let mut buf = [0u8; 1024];
                let _ = c.read(&mut buf);
                let _ = c.write_all(format!("{st}\r\nContent-Length: 2\r\n\r\nok").as_bytes());
            }
        });
        addr
    }

    #[test]
    fn healthz_is_polled_until_200() {
        let addr = server(vec!["HTTP/1.1 503 Service Unavailable", "HTTP/1.1 200 OK"]);
        let e = http_ok(addr, "/healthz", Duration::from_secs(2)).unwrap_err();
        assert!(e.contains("503"), "{e}");
        wait_http_ok(
            addr,
            "/healthz",
            Duration::from_secs(5),
            Duration::from_millis(10),
        )
        .unwrap();
    }

    #[test]
    fn nothing_listening_times_out_with_the_reason() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let e = wait_http_ok(
            addr,
            "/healthz",
            Duration::from_millis(50),
            Duration::from_millis(10),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not ready"), "{e}");
        assert!(e.contains(&addr.to_string()), "{e}");
    }

    #[test]
    fn garbage_answers_are_not_ready() {
        let addr = server(vec!["SSH-2.0-OpenSSH", "HTTP/1.1 2000 OK"]);
        assert!(http_ok(addr, "/healthz", Duration::from_secs(2)).is_err());
        assert!(http_ok(addr, "/healthz", Duration::from_secs(2)).is_err());
    }

    #[test]
    fn files_are_waited_for() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ready");
        assert!(wait_file(&p, Duration::from_millis(30), Duration::from_millis(10)).is_err());
        let p2 = p.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            std::fs::write(p2, "x").unwrap();
        });
        wait_file(&p, Duration::from_secs(5), Duration::from_millis(10)).unwrap();
        t.join().unwrap();
    }
}
