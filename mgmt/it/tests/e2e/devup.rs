//! `nodectl dev up` as one front end: a single node has the same `dev.json` and
//! the same `dev stop`/`dev start` as a cluster's nodes, and a Ctrl-C at any moment
//! of start-up stops what was started instead of leaving daemons behind.

use cairn_it::bin;
use cairn_it::dev::{nodectl_json, DevUp};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Pids of processes whose command line names `dir`.
fn processes_naming(dir: &Path) -> Vec<u32> {
    let dir = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // A zombie has ended; only its parent's reaping is left.
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&cmd).contains(&dir)
        })
        .collect()
}

fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .to_string()
}

#[test]
fn ctrl_c_during_start_up_leaves_no_daemon_behind() {
    // From "before datapathd is up" to "mgmtd starting" to "serving".
    for delay_ms in [30, 150, 400, 1500] {
        let dir = tempfile::Builder::new()
            .prefix("cairn-it-sigint-")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        let mut up = Command::new(bin("nodectl"))
            .args([
                "dev",
                "up",
                "--drives",
                "2",
                "--drive-size",
                "256M",
                "--data",
            ])
            .arg(&data)
            .args(["--s3", &free_port(), "--resp", &free_port()])
            .args(["--nfs", &free_port()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(up.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if up.try_wait().unwrap().is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "nodectl did not stop after SIGINT"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = processes_naming(&data);
        assert!(
            left.is_empty(),
            "SIGINT {delay_ms} ms into start-up left processes {left:?}"
        );
        // And the data directory serves again (nothing half-made in it).
        let again = DevUp::adopt(2, |to| {
            let _ = std::fs::rename(&data, to);
        });
        drop(again);
    }
}

#[test]
fn a_single_node_is_node_1_of_the_same_dev_json() {
    let up = DevUp::start(2);
    let data = up.data();
    let data = data.to_str().unwrap();
    let st = nodectl_json(&["dev", "status", "--data", data]).unwrap();
    let nodes = st["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{st}");
    assert_eq!(nodes[0]["node"], 1);
    assert_eq!(nodes[0]["s3"], up.s3.to_string());
    // The NFS address mgmtd was given (`dev up --nfs`), beside RESP's.
    let nfs = nodes[0]["nfs"].as_str().unwrap_or_default();
    assert!(
        nfs.parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback()),
        "{st}"
    );
    assert!(!st["cluster_id"].as_str().unwrap().is_empty(), "{st}");
    let mgmtd = nodes[0]["mgmtd_pid"].as_u64().unwrap();
    // `dev stop 1` holds the node down, as on a cluster; `dev start 1` brings it back.
    let out = Command::new(bin("nodectl"))
        .args(["dev", "stop", "1", "--data", data])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::thread::sleep(Duration::from_secs(1));
    let st = nodectl_json(&["dev", "status", "--data", data]).unwrap();
    assert_eq!(st["nodes"][0]["stopped"], true, "{st}");
    assert!(st["nodes"][0]["mgmtd_pid"].is_null(), "{st}");
    let out = Command::new(bin("nodectl"))
        .args(["dev", "start", "1", "--data", data])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = nodectl_json(&["dev", "status", "--data", data]).unwrap();
        let pid = st["nodes"][0]["mgmtd_pid"].as_u64();
        if pid.is_some_and(|p| p != mgmtd) && up.drives().is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "node 1 not back: {st}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What a new user meets first: a banner whose commands work as printed (the
/// nodectl they ran, not one assumed on PATH; `s3 mb` only on the data's first
/// start, since it fails once the bucket exists), logs without colour codes, and
/// an S3 error with a message and a request id, not logged as an ERROR.
#[test]
fn a_new_users_first_minutes() {
    use std::io::{Read, Write};
    let mut up = DevUp::start(2);
    let first = up.log();
    let me = bin("nodectl").display().to_string();
    assert!(
        first.contains(&format!("{me} status --data")),
        "the banner names the nodectl that ran:\n{first}"
    );
    assert!(first.contains("s3 mb s3://demo"), "{first}");
    // An unknown access key: the error says so in words, with the request's id.
    let mut s = std::net::TcpStream::connect(up.s3).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let date = "20260101T000000Z";
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: {}\r\nx-amz-date: {date}\r\n\
         x-amz-content-sha256: UNSIGNED-PAYLOAD\r\nAuthorization: AWS4-HMAC-SHA256 \
         Credential=AKNOBODY0000/20260101/us-east-1/s3/aws4_request, \
         SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={}\r\n\
         Connection: close\r\n\r\n",
        up.s3,
        "0".repeat(64)
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    assert!(
        answer.to_lowercase().contains("x-amz-request-id: "),
        "{answer}"
    );
    let message = answer
        .split_once("<Message>")
        .and_then(|(_, m)| m.split_once("</Message>"))
        .map(|(m, _)| m.to_string())
        .unwrap_or_default();
    assert!(message.len() > 10, "a message in words: {answer}");
    let logs = up.data().join("logs");
    for name in ["mgmtd.log", "datapathd.log"] {
        let text = std::fs::read_to_string(logs.join(name)).unwrap();
        assert!(!text.contains('\x1b'), "{name} carries escape codes");
        if name == "mgmtd.log" {
            assert!(
                !text.contains("ERROR"),
                "a client's mistake is not the server's error:\n{text}"
            );
        }
    }
    up.restart();
    let again = up.log();
    let second = &again[first.len()..];
    assert!(
        second.contains("s3 ls") && !second.contains("s3 mb"),
        "a restart suggests what works again:\n{second}"
    );
}
