//! The one supervisor behind `nodectl dev up`, for one node or a local cluster:
//! it holds the data directory's lock, reaps daemons a killed supervisor left
//! behind, starts each node's datapathd then mgmtd, restarts what dies (that is
//! how a node rides out a crash) unless the node is held down by `dev stop`, and
//! on Ctrl-C or SIGTERM stops every mgmtd first (so no S3 request is cut off behind
//! a stopped datapath), then every datapathd. What differs between one node and a
//! cluster (the daemons' arguments, forming the cluster, `dev.json`, the banner)
//! is the caller's.

use crate::{io_err, NodectlError};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

pub(crate) struct Daemon {
    pub(crate) name: &'static str,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) log: PathBuf,
    pub(crate) ready: PathBuf,
    pub(crate) child: Option<Child>,
    /// When it exited, within the last minute (for giving up on a crash loop).
    pub(crate) exits: Vec<Instant>,
}

impl Daemon {
    pub(crate) fn new(
        name: &'static str,
        (program, args): (PathBuf, Vec<String>),
        env: Vec<(String, String)>,
        dir: &Path,
    ) -> Daemon {
        Daemon {
            name,
            program,
            args,
            env,
            log: dir.join(format!("logs/{name}.log")),
            ready: dir.join(format!("run/{name}.ready")),
            child: None,
            exits: vec![],
        }
    }

    /// Starts it and waits for its ready file; returns what the file says.
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
        // Kept at once, so a stop during start-up (Ctrl-C) finds it.
        self.child = Some(
            cmd.spawn()
                .map_err(io_err(format!("start {}", self.program.display())))?,
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.ready) {
                if !s.trim().is_empty() {
                    return Ok(s.trim().to_string());
                }
            }
            let Some(child) = self.child.as_mut() else {
                return Err(NodectlError::Daemon(format!("{} was stopped", self.name)));
            };
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                // The daemon's own last words say why (a port in use, a bad
                // drive): shown here, not only in the log.
                let why = std::fs::read_to_string(&self.log)
                    .ok()
                    .and_then(|log| last_words(&log, self.name))
                    .map(|l| format!(": {l}"))
                    .unwrap_or_default();
                return Err(NodectlError::Daemon(format!(
                    "{} exited during start-up ({status}){why}; see {}",
                    self.name,
                    self.log.display()
                )));
            }
            if Instant::now() > deadline {
                let _ = child.kill().await;
                self.child = None;
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

    /// Whether it has exited since last asked (and why); forgets the child if so.
    fn exited(&mut self) -> Option<String> {
        let why = match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(status))) => status.to_string(),
            Some(Err(e)) => e.to_string(),
            _ => return None,
        };
        self.child = None;
        let now = Instant::now();
        self.exits
            .retain(|t| now.duration_since(*t) < Duration::from_secs(60));
        self.exits.push(now);
        Some(why)
    }
}

/// One node under supervision: its directory (`drives`, `state`, `logs`, `run`
/// below it) and its two daemons.
pub(crate) struct Node {
    /// 1-based position (what `dev stop`/`start` take); 1 for a single node.
    pub(crate) n: u16,
    pub(crate) dir: PathBuf,
    /// Present while `nodectl dev stop` holds the node down; outside the node's
    /// directory, so wiping that directory does not let the node start again.
    pub(crate) held: PathBuf,
    /// The cluster's id for the node, from mgmtd's ready file.
    pub(crate) id: String,
    pub(crate) datapathd: Daemon,
    pub(crate) mgmtd: Daemon,
}

impl Node {
    /// Present while `nodectl dev stop` holds the node down.
    pub(crate) fn stopped_marker(&self) -> PathBuf {
        self.held.clone()
    }

    /// Starts whichever of its daemons is not running, datapathd first.
    pub(crate) async fn start(&mut self) -> Result<(), NodectlError> {
        // A wiped (replaced) node starts from empty directories.
        for d in ["drives", "state", "logs", "run"] {
            std::fs::create_dir_all(self.dir.join(d))
                .map_err(io_err(format!("create {}", self.dir.display())))?;
        }
        if self.datapathd.child.is_none() {
            self.datapathd.start().await?;
        }
        if self.mgmtd.child.is_none() {
            let ready = self.mgmtd.start().await?;
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&ready) {
                if let Some(id) = v["node_id"].as_str() {
                    self.id = id.to_string();
                }
            }
        }
        Ok(())
    }
}

/// Locks `data` for this supervisor (one at a time), and kills the daemons of an
/// earlier supervisor that was killed, so two datapathds never claim the same
/// drives. Hold the returned lock for as long as the nodes run.
pub(crate) fn lock_data_dir(data: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, NodectlError> {
    let run = data.join("run");
    std::fs::create_dir_all(&run).map_err(io_err(format!("create {}", run.display())))?;
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(run.join("lock"))
        .map_err(io_err("open lock file"))?;
    let lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| {
            NodectlError::Usage(format!(
                "another nodectl is already running on {}",
                data.display()
            ))
        })?;
    reap_stale(data);
    Ok(lock)
}

/// Kills the daemons `dev.json` names (a single node's or a cluster's) whose
/// command line names this data directory.
fn reap_stale(data: &Path) {
    let Ok(raw) = std::fs::read(data.join("run/dev.json")) else {
        return;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&raw) else {
        return;
    };
    let mut entries = vec![&v];
    if let Some(nodes) = v["nodes"].as_array() {
        entries.extend(nodes);
    }
    let dir = data.display().to_string();
    for e in entries {
        for key in ["mgmtd_pid", "datapathd_pid"] {
            let Some(pid) = e[key].as_u64() else { continue };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&dir) {
                eprintln!("nodectl: stopping daemon {pid} left over from an earlier run");
                kill(pid as u32, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

pub(crate) fn kill(pid: u32, sig: nix::sys::signal::Signal) {
    let p = nix::unistd::Pid::from_raw(pid as i32);
    let _ = nix::sys::signal::kill(p, sig);
    if sig == nix::sys::signal::Signal::SIGKILL {
        wait_gone(pid, Duration::from_secs(2));
    }
}

/// Waits up to `limit` for process `pid` to end. A process that has exited but
/// not yet been reaped by its supervisor (a zombie) counts as ended.
pub(crate) fn wait_gone(pid: u32, limit: Duration) -> bool {
    let t = std::time::Instant::now();
    loop {
        let gone = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the command name, which is in parentheses.
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
            Err(_) => true,
        };
        if gone {
            return true;
        }
        if t.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
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

/// What every node's datapathd is given (the caller adds the rest): its chunk
/// service on `listen`, the key mgmtd proves on every connection, the node id its
/// drives are bound to, its ready file, and the file-backed drives in `dir/drives`.
pub(crate) fn datapathd_args(
    dir: &Path,
    listen: &str,
    reactors: usize,
    drives: u16,
    drive_size: &str,
) -> Vec<String> {
    let mut a = vec![
        "--listen".to_string(),
        listen.to_string(),
        "--local-key".to_string(),
        dir.join("state/chunk.key").display().to_string(),
        // Binds the drives to this node: another node's drive is refused.
        "--node-id-file".to_string(),
        dir.join("state/datapath.node-id").display().to_string(),
        "--ready-file".to_string(),
        dir.join("run/datapathd.ready").display().to_string(),
        "--reactors".to_string(),
        reactors.to_string(),
    ];
    for i in 0..drives {
        a.push("--drive".into());
        a.push(format!(
            "{}:{drive_size}",
            dir.join(format!("drives/drive-{i}.img")).display()
        ));
    }
    a
}

/// What every node's mgmtd is given (the caller adds the rest): its state, its
/// endpoints, its datapathd and the key to prove to it, and its ready file.
pub(crate) fn mgmtd_args(
    dir: &Path,
    s3: &str,
    admin: &str,
    datapath: &str,
    drives: u16,
) -> Vec<String> {
    vec![
        "--data".to_string(),
        dir.join("state").display().to_string(),
        "--s3".to_string(),
        s3.to_string(),
        "--admin".to_string(),
        admin.to_string(),
        "--datapath".to_string(),
        datapath.to_string(),
        "--datapath-key".to_string(),
        dir.join("state/chunk.key").display().to_string(),
        "--drives".to_string(),
        drives.to_string(),
        "--ready-file".to_string(),
        dir.join("run/mgmtd.ready").display().to_string(),
    ]
}

/// Starts every node not held down; on a failure stops what started.
pub(crate) async fn start_all(nodes: &mut [Node]) -> Result<(), NodectlError> {
    for i in 0..nodes.len() {
        if nodes[i].stopped_marker().exists() {
            continue;
        }
        if let Err(e) = nodes[i].start().await {
            stop_all(nodes).await;
            return Err(e);
        }
    }
    Ok(())
}

/// Every mgmtd first, then every datapathd.
pub(crate) async fn stop_all(nodes: &mut [Node]) {
    for n in nodes.iter_mut() {
        n.mgmtd.stop(Duration::from_secs(15)).await;
    }
    for n in nodes.iter_mut() {
        n.datapathd.stop(Duration::from_secs(15)).await;
    }
}

/// What the supervisor tells its caller after a tick in which something changed.
pub(crate) struct Tick {
    /// Nodes (by `n`) whose daemons were started again.
    pub(crate) restarted: Vec<u16>,
}

/// Supervises `nodes` until Ctrl-C or SIGTERM, then stops them all. A daemon that
/// exits is started again (with its node's other daemon if that died too) unless
/// its node is held down; with `give_up_after` set, a daemon that exits that many
/// times within a minute makes the supervisor stop everything and fail (a single
/// node that cannot stay up should say so, not loop). After a tick in which
/// anything changed, `changed` runs (to rewrite `dev.json`, rejoin a node...).
/// SIGINT and SIGTERM, caught from the moment they are installed: one that
/// arrives before anyone waits is kept, not lost.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> Result<Signals, NodectlError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt()).map_err(io_err("install SIGINT handler"))?,
            term: signal(SignalKind::terminate()).map_err(io_err("install SIGTERM handler"))?,
        })
    }

    /// Until either arrives.
    pub(crate) async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

pub(crate) async fn supervise(
    nodes: &mut [Node],
    signals: &mut Signals,
    give_up_after: Option<usize>,
    mut changed: impl AsyncFnMut(&[Node], Tick) -> Result<(), NodectlError>,
) -> Result<(), NodectlError> {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let single = nodes.len() == 1;
    loop {
        tokio::select! {
            _ = signals.recv() => break,
            _ = tick.tick() => {}
        }
        let mut any = false;
        let mut restarted = Vec::new();
        let mut gave_up = None;
        for node in nodes.iter_mut() {
            let held = node.stopped_marker().exists();
            let who = if single {
                String::new()
            } else {
                format!("node {} ", node.n)
            };
            for d in [&mut node.datapathd, &mut node.mgmtd] {
                let Some(why) = d.exited() else { continue };
                any = true;
                if held {
                    continue;
                }
                if give_up_after.is_some_and(|limit| d.exits.len() >= limit) {
                    eprintln!("nodectl: {who}{} keeps failing ({why}); giving up", d.name);
                    gave_up = Some(format!(
                        "{who}{} exited {} times in a minute; see {}",
                        d.name,
                        d.exits.len(),
                        d.log.display()
                    ));
                } else {
                    eprintln!("nodectl: {who}{} exited ({why}); restarting", d.name);
                }
            }
            if gave_up.is_some() {
                break;
            }
            if !held && (node.datapathd.child.is_none() || node.mgmtd.child.is_none()) {
                if let Err(e) = node.start().await {
                    eprintln!("nodectl: {who}restart failed: {e}");
                }
                any = true;
                restarted.push(node.n);
            }
        }
        if let Some(why) = gave_up {
            stop_all(nodes).await;
            return Err(NodectlError::Daemon(why));
        }
        if any {
            changed(nodes, Tick { restarted }).await?;
        }
    }
    eprintln!("nodectl: stopping");
    stop_all(nodes).await;
    Ok(())
}

/// Why a daemon gave up, from its log: its own fatal line (`mgmtd: …`), else its
/// last ERROR, else its last line (what it logs while shutting down comes after
/// the reason).
fn last_words(log: &str, name: &str) -> Option<String> {
    let lines = || log.lines().rev().map(str::trim).filter(|l| !l.is_empty());
    let own = format!("{name}: ");
    lines()
        .find(|l| l.starts_with(&own))
        .or_else(|| lines().find(|l| l.contains(" ERROR ")))
        .or_else(|| lines().next())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::last_words;

    #[test]
    fn a_daemons_last_words_are_its_reason_not_its_shutdown_chatter() {
        let log = "INFO up\nmgmtd: bind S3 on 127.0.0.1:9000: Address already in use\nINFO openraft::core: shutdown\n\n";
        assert_eq!(
            last_words(log, "mgmtd").unwrap(),
            "mgmtd: bind S3 on 127.0.0.1:9000: Address already in use"
        );
        let log = "x ERROR drive 2 unreadable\ny INFO stopping\n";
        assert_eq!(
            last_words(log, "datapathd").unwrap(),
            "x ERROR drive 2 unreadable"
        );
        assert_eq!(last_words("only\n", "mgmtd").unwrap(), "only");
        assert!(last_words("", "mgmtd").is_none());
    }
}
