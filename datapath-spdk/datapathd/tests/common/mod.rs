//! A datapathd started for a test, and its drives.
#![allow(dead_code)]

use cairn_chunkproto::auth::LocalKey;
use cairn_chunkproto::ChunkClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Daemon {
    pub child: Child,
    pub addr: String,
    pub key: PathBuf,
}

impl Daemon {
    pub fn start(dir: &Path, drives: &[String], extra: &[&str]) -> Daemon {
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_datapathd"));
        let key = dir.join("chunk.key");
        cmd.args(["--listen", "127.0.0.1:0", "--ready-file"])
            .arg(&ready)
            .arg("--local-key")
            .arg(&key);
        if !extra.contains(&"--segment-size") {
            cmd.args(["--segment-size", "1M"]);
        }
        for d in drives {
            cmd.args(["--drive", d]);
        }
        // CAIRN_TEST_LOG=1 shows the daemon's log.
        let log = std::env::var_os("CAIRN_TEST_LOG").is_some();
        cmd.args(extra).stdout(Stdio::null()).stderr(if log {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn().expect("spawn datapathd");
        let t = Instant::now();
        loop {
            if let Ok(s) = std::fs::read_to_string(&ready) {
                if s.ends_with('\n') {
                    return Daemon {
                        child,
                        addr: s.trim().to_string(),
                        key,
                    };
                }
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("datapathd exited early: {st}");
            }
            assert!(t.elapsed() < Duration::from_secs(20), "datapathd not ready");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn client(&self) -> ChunkClient {
        ChunkClient::local(
            self.addr.clone(),
            2,
            Duration::from_secs(10),
            LocalKey::load(&self.key).unwrap(),
        )
    }

    /// Resident memory of the daemon, in bytes (from /proc).
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kb << 10
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait; returns whether it exited 0 in time.
    pub fn terminate(mut self) -> bool {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.success();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        false
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn drives(dir: &Path, n: usize, size: &str) -> (Vec<PathBuf>, Vec<String>) {
    let paths: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("d{i}"))).collect();
    let specs = paths
        .iter()
        .map(|p| format!("{}:{size}", p.display()))
        .collect();
    (paths, specs)
}
