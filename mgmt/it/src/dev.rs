//! `nodectl dev up` as a user runs it: the real supervisor over the real
//! datapathd and mgmtd on file-backed drives, in the background, stopped
//! (SIGTERM, then SIGKILL) when dropped.

use crate::bin;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct DevUp {
    child: Child,
    dir: tempfile::TempDir,
    /// `--drives N --drive-size S`, the same at every start.
    drive_args: Vec<String>,
    pub s3: std::net::SocketAddr,
}

fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
}

impl DevUp {
    /// A new node with `drives` drives of 256 MiB.
    pub fn start(drives: u16) -> DevUp {
        let dir = tempfile::Builder::new()
            .prefix("cairn-it-dev-")
            .tempdir()
            .expect("tempdir");
        Self::run(dir, drives)
    }

    /// A node on a data directory made elsewhere (`DIR/drives`, `DIR/state`) with
    /// `drives` drives, copied in by `fill`, which is given the data directory to
    /// fill.
    pub fn adopt(drives: u16, fill: impl FnOnce(&Path)) -> DevUp {
        let dir = tempfile::Builder::new()
            .prefix("cairn-it-dev-")
            .tempdir()
            .expect("tempdir");
        fill(&dir.path().join("data"));
        Self::run(dir, drives)
    }

    fn run(dir: tempfile::TempDir, drives: u16) -> DevUp {
        let s3 = free_port();
        let drive_args = vec![
            "--drives".to_string(),
            drives.to_string(),
            "--drive-size".to_string(),
            "256M".to_string(),
        ];
        let child = Self::spawn(dir.path(), s3, &drive_args);
        let mut up = DevUp {
            child,
            dir,
            drive_args,
            s3,
        };
        up.wait_serving();
        up
    }

    fn spawn(dir: &Path, s3: std::net::SocketAddr, extra: &[String]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("nodectl.log"))
            .expect("log");
        Command::new(bin("nodectl"))
            .args(["dev", "up", "--data"])
            .arg(dir.join("data"))
            .args(extra)
            .args(["--s3", &s3.to_string(), "--resp", &free_port().to_string()])
            .args(["--nfs", &free_port().to_string()])
            // The node's own credentials (from its state directory), not the
            // environment's.
            .env_remove("CAIRN_ROOT_ACCESS_KEY")
            .env_remove("CAIRN_ROOT_SECRET_KEY")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn nodectl dev up")
    }

    /// Stops the node (as Ctrl-C does) and starts it again on the same data.
    pub fn restart(&mut self) {
        self.stop();
        self.child = Self::spawn(self.dir.path(), self.s3, &self.drive_args);
        self.wait_serving();
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nodectl.log")).unwrap_or_default()
    }

    /// Until `nodectl drives` answers (dev.json is written once both daemons are up).
    fn wait_serving(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("nodectl dev up exited ({st}):\n{}", self.log());
            }
            if self.data().join("run/dev.json").exists() && self.drives().is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node not up in 120 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `nodectl drives --data DIR --json`, parsed.
    pub fn drives(&self) -> Result<Value, String> {
        nodectl_json(&["drives", "--data", &self.data().display().to_string()])
    }

    fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for DevUp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs nodectl with `args` and `--json`; the parsed output or stderr.
pub fn nodectl_json(args: &[&str]) -> Result<Value, String> {
    let out = Command::new(bin("nodectl"))
        .args(args)
        .arg("--json")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{e}: {:?}", out.stdout))
}
