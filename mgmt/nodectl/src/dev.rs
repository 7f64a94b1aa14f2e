//! `nodectl dev up`: one node on this machine, in the foreground, under supervision.
//!
//! Layout of the data directory:
//! ```text
//! DIR/drives/drive-N.img   the file-backed drives (sparse), claimed by datapathd
//! DIR/state/               mgmtd's state: metadata, root credentials, admin token
//! DIR/run/dev.json         endpoints and pids of the running daemons
//! DIR/run/lock             held while a supervisor runs on DIR
//! DIR/logs/*.log           daemon logs
//! ```
//! The supervisor restarts a daemon that dies (that is how a node rides out a
//! crash), and on Ctrl-C stops mgmtd first, so no S3 request is cut off behind a
//! stopped datapath, then datapathd.

use crate::{io_err, NodectlError};
use cairn_mgmtd::{Origin, RootCredentials, ENV_ACCESS_KEY, ENV_SECRET_KEY};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Data directory (created if missing).
    #[arg(long, default_value = "./cairn-data")]
    data: PathBuf,
    /// Number of file-backed drives.
    #[arg(long, default_value_t = 4)]
    drives: u16,
    /// Size of each drive file (sparse), e.g. 8G.
    #[arg(long, default_value = "8G")]
    drive_size: String,
    /// S3 listen address.
    #[arg(long, default_value = "127.0.0.1:9000")]
    s3: SocketAddr,
    /// RESP (Redis protocol) listen address; on a local cluster, this port on
    /// every node's address.
    #[arg(long, default_value = "127.0.0.1:6379")]
    resp: SocketAddr,
    /// Admin API listen address (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    admin: SocketAddr,
    /// Erasure code for large objects, K+M (default: chosen from the drive count).
    #[arg(long)]
    ec: Option<String>,
    /// Datapath reactor threads.
    #[arg(long, default_value_t = 1)]
    reactors: usize,
    /// Nodes: 1 is a single-node appliance; more form a local cluster, node K on
    /// loopback address BASE+K (see --base-ip), each with its own drives and ports.
    #[arg(long, default_value_t = 1)]
    nodes: u16,
    /// First loopback address of a local cluster (node 1 gets the next one).
    #[arg(long, default_value = "127.0.0.10")]
    base_ip: std::net::Ipv4Addr,
    /// Copies of small objects in a cluster.
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Seconds a down node's fragments wait before repair rebuilds them elsewhere.
    #[arg(long, default_value_t = 60)]
    repair_grace: u64,
    /// Run each node of a local cluster in a network namespace of its own (root
    /// only; node K at 10.77.X.K), so `nodectl dev partition` can cut links.
    #[arg(long)]
    netns: bool,
}

/// What `dev.json` records about a running node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevState {
    pub s3: String,
    pub admin: String,
    pub datapath: String,
    pub supervisor_pid: u32,
    pub datapathd_pid: Option<u32>,
    pub mgmtd_pid: Option<u32>,
}

pub(crate) struct Daemon {
    pub(crate) name: &'static str,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) log: PathBuf,
    pub(crate) ready: PathBuf,
    pub(crate) child: Option<Child>,
    pub(crate) restarts: Vec<Instant>,
}

impl Daemon {
    pub(crate) async fn start(&mut self) -> Result<String, NodectlError> {
        let _ = std::fs::remove_file(&self.ready);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io_err(format!("open {}", self.log.display())))?;
        let log2 = log.try_clone().map_err(io_err("log file"))?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .map_err(io_err(format!("start {}", self.program.display())))?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.ready) {
                if !s.trim().is_empty() {
                    self.child = Some(child);
                    return Ok(s.trim().to_string());
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(NodectlError::Daemon(format!(
                    "{} exited during start-up ({status}); see {}",
                    self.name,
                    self.log.display()
                )));
            }
            if Instant::now() > deadline {
                let _ = child.kill().await;
                return Err(NodectlError::Daemon(format!(
                    "{} did not become ready in 120 s; see {}",
                    self.name,
                    self.log.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub(crate) async fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            eprintln!(
                "nodectl: {} did not stop in {grace:?}; killing it",
                self.name
            );
            let _ = child.kill().await;
        }
    }
}

pub(crate) fn locate(name: &str) -> Result<PathBuf, NodectlError> {
    if let Some(dir) = std::env::var_os("CAIRN_BIN_DIR") {
        return Ok(PathBuf::from(dir).join(name));
    }
    let exe = std::env::current_exe().map_err(io_err("locate nodectl"))?;
    let sibling = exe.with_file_name(name);
    if sibling.exists() {
        return Ok(sibling);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join(name).exists() {
                return Ok(dir.join(name));
            }
        }
    }
    Err(NodectlError::Daemon(format!(
        "cannot find the {name} binary next to nodectl or on PATH; build it with `cargo build --release`"
    )))
}

/// A free loopback port, so a daemon keeps one address across restarts.
fn free_port() -> Result<SocketAddr, NodectlError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io_err("pick a free port"))
}

/// Stops daemons that a killed supervisor left running on this directory, so two
/// datapathds never claim the same drives.
fn reap_stale(run: &Path, data: &Path) {
    let Ok(s) = std::fs::read_to_string(run.join("dev.json")) else {
        return;
    };
    let Ok(state) = serde_json::from_str::<DevState>(&s) else {
        return;
    };
    let data = data.display().to_string();
    for pid in [state.mgmtd_pid, state.datapathd_pid].into_iter().flatten() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(&data) && (cmdline.contains("datapathd") || cmdline.contains("mgmtd")) {
            eprintln!("nodectl: stopping daemon {pid} left over from an earlier run");
            let p = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL);
            for _ in 0..100 {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

pub async fn up(args: UpArgs) -> Result<(), NodectlError> {
    if args.nodes > 1 {
        return crate::devcluster::up(crate::devcluster::ClusterArgs {
            data: args.data,
            nodes: args.nodes,
            drives: args.drives,
            drive_size: args.drive_size,
            ec: args.ec,
            replicas: args.replicas,
            reactors: args.reactors,
            base_ip: args.base_ip,
            repair_grace: args.repair_grace,
            netns: args.netns,
            resp_port: args.resp.port(),
        })
        .await;
    }
    if args.nodes == 0 {
        return Err(NodectlError::Usage("--nodes must be at least 1".into()));
    }
    if args.drives == 0 {
        return Err(NodectlError::Usage("--drives must be at least 1".into()));
    }
    std::fs::create_dir_all(&args.data)
        .map_err(io_err(format!("create {}", args.data.display())))?;
    let data = args
        .data
        .canonicalize()
        .map_err(io_err(format!("resolve {}", args.data.display())))?;
    let (drives_dir, state_dir, run_dir, logs_dir) = (
        data.join("drives"),
        data.join("state"),
        data.join("run"),
        data.join("logs"),
    );
    for d in [&drives_dir, &state_dir, &run_dir, &logs_dir] {
        std::fs::create_dir_all(d).map_err(io_err(format!("create {}", d.display())))?;
    }
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(run_dir.join("lock"))
        .map_err(io_err("open lock file"))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| {
            NodectlError::Usage(format!(
                "another nodectl is already running on {}",
                data.display()
            ))
        })?;
    reap_stale(&run_dir, &data);

    let (root, origin) = RootCredentials::resolve(&state_dir, true)?;
    let datapath_addr = free_port()?;
    let admin_addr = if args.admin.port() == 0 {
        free_port()?
    } else {
        args.admin
    };

    // mgmtd and datapathd prove this key to each other on every connection.
    let chunk_key = state_dir.join("chunk.key").display().to_string();
    let mut dp_args = vec![
        "--listen".to_string(),
        datapath_addr.to_string(),
        "--local-key".to_string(),
        chunk_key.clone(),
        // Binds the drives to this node: another node's drive is refused.
        "--node-id-file".to_string(),
        state_dir.join("datapath.node-id").display().to_string(),
        "--ready-file".to_string(),
        run_dir.join("datapathd.ready").display().to_string(),
        "--reactors".to_string(),
        args.reactors.to_string(),
    ];
    for i in 0..args.drives {
        dp_args.push("--drive".into());
        dp_args.push(format!(
            "{}:{}",
            drives_dir.join(format!("drive-{i}.img")).display(),
            args.drive_size
        ));
    }
    let mut datapathd = Daemon {
        name: "datapathd",
        program: locate("datapathd")?,
        args: dp_args,
        env: vec![],
        log: logs_dir.join("datapathd.log"),
        ready: run_dir.join("datapathd.ready"),
        child: None,
        restarts: vec![],
    };
    let mut mg_args = vec![
        "--data".to_string(),
        state_dir.display().to_string(),
        "--s3".to_string(),
        args.s3.to_string(),
        "--admin".to_string(),
        admin_addr.to_string(),
        "--resp".to_string(),
        args.resp.to_string(),
        "--datapath".to_string(),
        datapath_addr.to_string(),
        "--datapath-key".to_string(),
        chunk_key,
        "--drives".to_string(),
        args.drives.to_string(),
        "--ready-file".to_string(),
        run_dir.join("mgmtd.ready").display().to_string(),
    ];
    if let Some(ec) = &args.ec {
        mg_args.push("--ec".into());
        mg_args.push(ec.clone());
    }
    let mut mgmtd = Daemon {
        name: "mgmtd",
        program: locate("mgmtd")?,
        args: mg_args,
        env: vec![
            (ENV_ACCESS_KEY.to_string(), root.access_key.clone()),
            (ENV_SECRET_KEY.to_string(), root.secret_key.clone()),
        ],
        log: logs_dir.join("mgmtd.log"),
        ready: run_dir.join("mgmtd.ready"),
        child: None,
        restarts: vec![],
    };

    let started = Instant::now();
    datapathd.start().await?;
    if let Err(e) = mgmtd.start().await {
        datapathd.stop(Duration::from_secs(10)).await;
        return Err(e);
    }
    let state = |d: &Daemon, m: &Daemon| DevState {
        s3: args.s3.to_string(),
        admin: admin_addr.to_string(),
        datapath: datapath_addr.to_string(),
        supervisor_pid: std::process::id(),
        datapathd_pid: d.pid(),
        mgmtd_pid: m.pid(),
    };
    write_state(&run_dir, &state(&datapathd, &mgmtd))?;
    banner(&args, &data, &root, origin, started.elapsed());

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(io_err("install SIGTERM handler"))?;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {}
        }
        let mut changed = false;
        let mut gave_up = None;
        for d in [&mut datapathd, &mut mgmtd] {
            let exited = match d.child.as_mut().map(|c| c.try_wait()) {
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Err(e)) => Some(e.to_string()),
                _ => None,
            };
            if let Some(why) = exited {
                d.child = None;
                let now = Instant::now();
                d.restarts
                    .retain(|t| now.duration_since(*t) < Duration::from_secs(60));
                d.restarts.push(now);
                if d.restarts.len() > 5 {
                    eprintln!("nodectl: {} keeps failing ({why}); giving up", d.name);
                    gave_up = Some(format!(
                        "{} exited 6 times in a minute; see {}",
                        d.name,
                        d.log.display()
                    ));
                    break;
                }
                eprintln!("nodectl: {} exited ({why}); restarting", d.name);
                if let Err(e) = d.start().await {
                    eprintln!("nodectl: restart of {} failed: {e}", d.name);
                }
                changed = true;
            }
        }
        if let Some(why) = gave_up {
            mgmtd.stop(Duration::from_secs(10)).await;
            datapathd.stop(Duration::from_secs(10)).await;
            return Err(NodectlError::Daemon(why));
        }
        if changed {
            write_state(&run_dir, &state(&datapathd, &mgmtd))?;
        }
    }
    eprintln!("nodectl: stopping");
    mgmtd.stop(Duration::from_secs(15)).await;
    datapathd.stop(Duration::from_secs(15)).await;
    write_state(
        &run_dir,
        &DevState {
            datapathd_pid: None,
            mgmtd_pid: None,
            ..state(&datapathd, &mgmtd)
        },
    )?;
    eprintln!(
        "nodectl: stopped; `nodectl dev up --data {}` serves the same data again",
        data.display()
    );
    Ok(())
}

fn write_state(run: &Path, s: &DevState) -> Result<(), NodectlError> {
    let body = serde_json::to_vec_pretty(s).unwrap_or_default();
    let path = run.join("dev.json");
    cairn_sysutil::write_atomic(&path, &body, None)
        .map_err(crate::io_err(format!("write {}", path.display())))?;
    Ok(())
}

fn banner(args: &UpArgs, data: &Path, root: &RootCredentials, origin: Origin, took: Duration) {
    let endpoint = format!("http://{}", args.s3);
    let (access, secret) = match origin {
        Origin::Environment => (format!("${ENV_ACCESS_KEY}"), format!("${ENV_SECRET_KEY}")),
        _ => (root.access_key.clone(), root.secret_key.clone()),
    };
    let origin = match origin {
        Origin::Environment => "from the environment".to_string(),
        Origin::Stored => format!(
            "stored in {}",
            data.join("state/root-credentials.json").display()
        ),
        Origin::Generated => format!(
            "generated now, stored in {}",
            data.join("state/root-credentials.json").display()
        ),
    };
    println!(
        "\nCairn node serving S3 ({} drives in {}, ready in {:.1} s)\n\n  \
         endpoint     {endpoint}\n  \
         RESP         {resp}  (AUTH with the secret key, or access key and secret)\n  \
         access key   {}\n  \
         secret key   {}\n  \
         credentials  {origin}\n\n\
         Try it:\n  \
         AWS_ACCESS_KEY_ID={access} AWS_SECRET_ACCESS_KEY={secret} AWS_DEFAULT_REGION=us-east-1 \\\n    \
         aws --endpoint-url {endpoint} s3 mb s3://demo\n  \
         redis-cli -h {resp_host} -p {resp_port} --user {access} --pass {secret} SET hello world\n\n  \
         nodectl status --data {}\n\n\
         Ctrl-C stops the node; running the same command again serves the same data.\n",
        args.drives,
        data.join("drives").display(),
        took.as_secs_f64(),
        if matches!(access.as_str(), s if s.starts_with('$')) { root.access_key.as_str() } else { access.as_str() },
        if secret.starts_with('$') { "(from the environment)" } else { secret.as_str() },
        data.display(),
        resp = args.resp,
        resp_host = args.resp.ip(),
        resp_port = args.resp.port(),
    );
}
