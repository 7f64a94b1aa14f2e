//! A harness for end-to-end tests: one Cairn node made of the real `datapathd` and
//! `mgmtd` binaries on file-backed drives in a temporary directory, with handles to
//! kill, restart and damage its parts, and a real `aws-sdk-s3` client.
//!
//! The binaries are taken from the cargo target directory this test binary was
//! built into (`cargo test --workspace` builds them); a missing binary is reported
//! plainly rather than skipped.

pub mod dev;
pub mod nfs;
pub mod raw;
pub mod tenant;

use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ACCESS_KEY: &str = "CAIRNTESTACCESSKEY01";
pub const SECRET_KEY: &str = "cairn-test-secret-key-0123456789abcdefgh";
/// mgmtd's environment for a node that keeps the root's objects unencrypted
/// (tests that find and damage known bytes on the drives).
pub const PLAINTEXT_ROOT: (&str, &str) = ("CAIRN_ROOT_PLAINTEXT", "true");

/// Where the daemons' binaries are.
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("CAIRN_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(|p| p.parent())
        .expect("target directory");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} not found: build the workspace binaries first (cargo build --bins)",
        p.display()
    );
    p
}

/// How to start a node.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub drives: u16,
    pub drive_size: &'static str,
    /// `K+M`; `None` lets mgmtd choose from the drive count.
    pub ec: Option<&'static str>,
    pub segment_size: &'static str,
    /// Extra environment for mgmtd (e.g. `CAIRN_ABORT_UPLOADS_AFTER`).
    pub mgmtd_env: Vec<(&'static str, &'static str)>,
    /// Reachable by other nodes: mgmtd's internal API (`--internal`) and
    /// datapathd's chunk service over mutual TLS (`--peer-listen`), each on a port
    /// of its own that the node keeps across restarts.
    pub reachable: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            drives: 4,
            drive_size: "512M",
            ec: None,
            segment_size: "8M",
            mgmtd_env: Vec::new(),
            reachable: false,
        }
    }
}

/// One running node.
#[derive(Debug)]
pub struct Node {
    pub dir: tempfile::TempDir,
    pub opts: NodeOptions,
    pub datapath_addr: String,
    pub s3_addr: String,
    pub admin_addr: String,
    /// Picked when the node is first started with `opts.reachable` (empty until
    /// then: every port picked is one more that another test may race for).
    pub internal_addr: String,
    pub peer_addr: String,
    datapathd: Option<Child>,
    mgmtd: Option<Child>,
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

/// A free loopback `host:port`, for an endpoint given to mgmtd through
/// [`NodeOptions::mgmtd_env`] (whose values live as long as the test).
pub fn free_addr() -> &'static str {
    Box::leak(free_port().into_boxed_str())
}

fn wait_file(path: &Path, child: &mut Child, what: &str, log: &Path) -> String {
    try_wait_file(path, child, what, log).unwrap_or_else(|e| panic!("{e}"))
}

/// The file's content once written; an error (with the process's log) if the
/// process exits first.
fn try_wait_file(path: &Path, child: &mut Child, what: &str, log: &Path) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if !s.trim().is_empty() {
                return Ok(s.trim().to_string());
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!(
                "{what} exited during start-up ({st}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            ));
        }
        assert!(Instant::now() < deadline, "{what} not ready in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Node {
    pub fn start(opts: NodeOptions) -> Node {
        let dir = tempfile::Builder::new()
            .prefix("cairn-it-")
            .tempdir()
            .expect("tempdir");
        let mut node = Node {
            dir,
            opts,
            datapath_addr: free_port(),
            s3_addr: free_port(),
            admin_addr: free_port(),
            internal_addr: String::new(),
            peer_addr: String::new(),
            datapathd: None,
            mgmtd: None,
        };
        node.start_datapathd();
        // A port found free can be taken before mgmtd binds it (by another
        // test's outgoing connection, from the same ephemeral range): a first
        // start that loses its port tries again on fresh ones.
        for attempt in 1.. {
            match node.try_start_mgmtd() {
                Ok(()) => break,
                Err(e) if attempt < 4 && e.contains("Address already in use") => {
                    node.s3_addr = free_port();
                    node.admin_addr = free_port();
                    if node.opts.reachable {
                        node.internal_addr = free_port();
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        node
    }

    pub fn drive_path(&self, i: u16) -> PathBuf {
        self.dir.path().join(format!("drive-{i}.img"))
    }

    /// The node-local chunk key mgmtd and datapathd share.
    pub fn chunk_key(&self) -> PathBuf {
        self.dir.path().join("chunk.key")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    fn spawn(&self, name: &str, args: &[String], env: &[(&str, &str)]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(name))
            .expect("log");
        let mut cmd = Command::new(bin(name));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"))
    }

    pub fn start_datapathd(&mut self) {
        assert!(self.datapathd.is_none(), "datapathd already running");
        let ready = self.dir.path().join("datapathd.ready");
        let _ = std::fs::remove_file(&ready);
        let mut args = vec![
            "--listen".to_string(),
            self.datapath_addr.clone(),
            "--local-key".to_string(),
            self.chunk_key().display().to_string(),
            "--ready-file".to_string(),
            ready.display().to_string(),
            "--segment-size".to_string(),
            self.opts.segment_size.to_string(),
        ];
        for i in 0..self.opts.drives {
            args.push("--drive".into());
            args.push(format!(
                "{}:{}",
                self.drive_path(i).display(),
                self.opts.drive_size
            ));
        }
        if self.opts.reachable {
            if self.peer_addr.is_empty() {
                self.peer_addr = free_port();
            }
            args.extend([
                "--peer-listen".to_string(),
                self.peer_addr.clone(),
                "--tls-dir".to_string(),
                self.state_dir().join("tls").display().to_string(),
            ]);
        }
        let mut child = self.spawn("datapathd", &args, &[]);
        wait_file(&ready, &mut child, "datapathd", &self.log("datapathd"));
        self.datapathd = Some(child);
    }

    /// Starts mgmtd on the node's ports (again, after a kill: the same ports).
    pub fn start_mgmtd(&mut self) {
        self.try_start_mgmtd().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_mgmtd(&mut self) -> Result<(), String> {
        assert!(self.mgmtd.is_none(), "mgmtd already running");
        let ready = self.dir.path().join("mgmtd.ready");
        let _ = std::fs::remove_file(&ready);
        let mut args = vec![
            "--data".to_string(),
            self.state_dir().display().to_string(),
            "--s3".to_string(),
            self.s3_addr.clone(),
            "--admin".to_string(),
            self.admin_addr.clone(),
            "--datapath".to_string(),
            self.datapath_addr.clone(),
            "--datapath-key".to_string(),
            self.chunk_key().display().to_string(),
            "--drives".to_string(),
            self.opts.drives.to_string(),
            "--ready-file".to_string(),
            ready.display().to_string(),
        ];
        if let Some(ec) = self.opts.ec {
            args.push("--ec".into());
            args.push(ec.into());
        }
        if self.opts.reachable {
            if self.internal_addr.is_empty() {
                self.internal_addr = free_port();
            }
            args.extend([
                "--internal".to_string(),
                self.internal_addr.clone(),
                "--chunk-advertise".to_string(),
                self.peer_addr.clone(),
            ]);
        }
        let mut env = vec![
            ("CAIRN_ROOT_ACCESS_KEY", ACCESS_KEY),
            ("CAIRN_ROOT_SECRET_KEY", SECRET_KEY),
        ];
        env.extend(self.opts.mgmtd_env.iter().copied());
        let mut child = self.spawn("mgmtd", &args, &env);
        try_wait_file(&ready, &mut child, "mgmtd", &self.log("mgmtd"))?;
        self.mgmtd = Some(child);
        Ok(())
    }

    /// SIGKILL: no chance to flush or say goodbye.
    pub fn kill_datapathd(&mut self) {
        if let Some(mut c) = self.datapathd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn kill_mgmtd(&mut self) {
        if let Some(mut c) = self.mgmtd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait: the clean stop.
    pub fn stop(&mut self) {
        for c in [self.mgmtd.take(), self.datapathd.take()]
            .into_iter()
            .flatten()
        {
            let mut c = c;
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    pub fn restart(&mut self) {
        self.kill_mgmtd();
        self.kill_datapathd();
        self.start_datapathd();
        self.start_mgmtd();
    }

    /// mgmtd's resident memory in MiB (from /proc), if it runs.
    pub fn mgmtd_rss_mib(&self) -> Option<u64> {
        let pid = self.mgmtd.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib / 1024)
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.s3_addr)
    }

    /// An S3 client with the root credentials.
    pub fn client(&self) -> aws_sdk_s3::Client {
        self.client_with(ACCESS_KEY, SECRET_KEY)
    }

    pub fn client_with(&self, access: &str, secret: &str) -> aws_sdk_s3::Client {
        s3_client(&self.endpoint(), access, secret)
    }

    /// The admin API's status document.
    pub fn status(&self) -> serde_json::Value {
        self.admin("GET", "/v1/status")
    }

    /// Waits (at most a minute) until the scrubber of this mgmtd process has
    /// completed `passes` passes and none is under way; returns its status.
    pub async fn wait_scrub_passes(&self, passes: u64) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.admin("GET", "/v1/scrub");
            if s["passes"].as_u64().unwrap() >= passes && s["current"].is_null() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "scrub pass not finished: {s}\n{}",
                std::fs::read_to_string(self.log("mgmtd")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// An admin API call with a JSON body, its JSON answer.
    pub fn admin_post(&self, path: &str, body: &serde_json::Value) -> serde_json::Value {
        let token =
            std::fs::read_to_string(self.state_dir().join("admin.token")).expect("admin token");
        let out = Command::new("curl")
            .args([
                "-sS",
                "-X",
                "POST",
                "-H",
                &format!("Authorization: Bearer {}", token.trim()),
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &body.to_string(),
                "-w",
                "\n%{http_code}",
                &format!("http://{}{path}", self.admin_addr),
            ])
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (json, code) = text.rsplit_once('\n').unwrap_or((&text, ""));
        assert!(code.starts_with('2'), "POST {path}: HTTP {code}: {json}");
        serde_json::from_str(json).expect("admin API JSON")
    }

    /// An admin API call (bearer token from the node's state), its JSON answer.
    pub fn admin(&self, method: &str, path: &str) -> serde_json::Value {
        let token =
            std::fs::read_to_string(self.state_dir().join("admin.token")).expect("admin token");
        let out = Command::new("curl")
            .args([
                "-sf",
                "-X",
                method,
                "-H",
                &format!("Authorization: Bearer {}", token.trim()),
                &format!("http://{}{path}", self.admin_addr),
            ])
            .output()
            .expect("curl");
        assert!(out.status.success(), "{method} {path} failed");
        serde_json::from_slice(&out.stdout).expect("admin API JSON")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill_mgmtd();
        self.kill_datapathd();
    }
}

/// Every offset in the node's drive files where `needle` is stored.
/// An S3 client (path-style, us-east-1) for `endpoint` (`http://host:port`).
/// The S3 error code of a request that must fail.
pub fn code<T, E: aws_sdk_s3::error::ProvideErrorMetadata>(
    r: Result<T, aws_sdk_s3::error::SdkError<E>>,
) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => aws_sdk_s3::error::ProvideErrorMetadata::code(&e)
            .unwrap_or("")
            .to_string(),
    }
}

pub fn s3_client(endpoint: &str, access: &str, secret: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(access, secret, None, None, "cairn-it"))
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

pub fn find_on_drives(node: &Node, needle: &[u8]) -> Vec<(u16, u64)> {
    let mut hits = Vec::new();
    for d in 0..node.opts.drives {
        let data = std::fs::read(node.drive_path(d)).unwrap_or_default();
        let mut i = 0;
        while let Some(p) = data[i..].windows(needle.len()).position(|w| w == needle) {
            hits.push((d, (i + p) as u64));
            i += p + 1;
        }
    }
    hits
}

/// Flips bits of one byte of a drive file, durably.
pub fn flip(node: &Node, drive: u16, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(node.drive_path(drive))
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, offset).unwrap();
    f.sync_all().unwrap();
}

/// Bytes that differ in every block, so no layer can deduplicate or compress them.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

pub fn md5_hex(b: &[u8]) -> String {
    use md5::{Digest, Md5};
    hex::encode(Md5::digest(b))
}

/// GET an object's whole body; the error is the SDK's, rendered.
pub async fn get_bytes(c: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Vec<u8>, String> {
    let r = c
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let b = r.body.collect().await.map_err(|e| format!("{e:?}"))?;
    Ok(b.into_bytes().to_vec())
}

/// PUT bytes; returns the ETag as the server sent it (quoted).
pub async fn put_bytes(
    c: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    data: &[u8],
) -> Result<String, String> {
    let out = c
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(out.e_tag().unwrap_or_default().to_string())
}

/// Uploads `parts` as a multipart object with a SHA-256 checksum per part and
/// completes it (S3's composite checksum); returns the parts' checksums.
pub async fn put_sha256_multipart(
    c: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    parts: &[Vec<u8>],
) -> Vec<String> {
    use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
    let up = c
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .send()
        .await
        .expect("create upload");
    let id = up.upload_id().expect("upload id");
    let (mut done, mut sums) = (Vec::new(), Vec::new());
    for (i, p) in parts.iter().enumerate() {
        let n = i as i32 + 1;
        let r = c
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(id)
            .part_number(n)
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .body(ByteStream::from(p.clone()))
            .send()
            .await
            .expect("upload part");
        let sum = r.checksum_sha256().expect("part checksum").to_string();
        done.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(r.e_tag().expect("part ETag"))
                .checksum_sha256(&sum)
                .build(),
        );
        sums.push(sum);
    }
    c.complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .expect("complete upload");
    sums
}

/// One RESP command as a client sends it: an array of bulk strings.
pub fn resp_command(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}
