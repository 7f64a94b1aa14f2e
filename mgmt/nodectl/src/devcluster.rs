//! `nodectl dev up --nodes N`: a cluster of N nodes on this machine, formed and
//! supervised in the foreground.
//!
//! Node K listens on loopback address BASE+K (S3 :9000, admin :9001, internal API
//! :9002, chunk service :7410), so every node has its own address and the same
//! ports, as on separate machines. Layout:
//! ```text
//! DIR/state/root-credentials.json   the root S3 credentials, shared by all nodes
//! DIR/nodes/nK/{drives,state,logs}  node K's drives, mgmtd state and logs
//! DIR/nodes/nK/stopped              present while `dev stop K` holds it down
//! DIR/run/dev.json                  every node's id, endpoints and daemon pids
//! ```
//! The supervisor restarts a daemon that dies unless its node was stopped with
//! `nodectl dev stop`, which is how users try failures by hand.

use crate::supervisor::{self, kill, locate, Daemon, Node};
use crate::{io_err, NodectlError};
use cairn_adminapi::{AdminClient, ClusterStatus, InitRequest, JoinRequest};
use cairn_credentials::{RootCredentials, ENV_ACCESS_KEY, ENV_SECRET_KEY};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub struct ClusterArgs {
    pub data: PathBuf,
    pub nodes: u16,
    pub drives: u16,
    pub drive_size: String,
    pub ec: Option<String>,
    pub replicas: u8,
    pub reactors: usize,
    pub base_ip: Ipv4Addr,
    pub repair_grace: u64,
    /// Each node in a network namespace of its own (root only), so links between
    /// nodes can be cut (`nodectl dev partition`).
    pub netns: bool,
    /// RESP's port on every node's address.
    pub resp_port: u16,
}

/// One node in `dev.json` and `dev status --json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevNode {
    /// 1-based position in the local cluster (what `dev stop`/`start` take).
    pub node: u16,
    /// The cluster's id for the node.
    pub id: String,
    pub s3: String,
    pub admin: String,
    pub internal: String,
    pub datapath: String,
    pub datapathd_pid: Option<u32>,
    pub mgmtd_pid: Option<u32>,
    pub stopped: bool,
    pub dir: String,
}

/// `dev.json` of a local cluster.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevCluster {
    pub supervisor_pid: u32,
    pub cluster_id: String,
    pub access_key: String,
    pub nodes: Vec<DevNode>,
    /// Set when each node runs in a network namespace of its own.
    #[serde(default)]
    pub netns: Option<Netns>,
}

/// The virtual network of a local cluster in namespaces: a bridge in the host's
/// namespace, and one namespace per node joined to it by a veth pair.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Netns {
    /// Short tag naming the bridge, veths and namespaces of this data directory.
    pub tag: String,
    /// Namespace of node K: `namespaces[K-1]`.
    pub namespaces: Vec<String>,
    pub bridge: String,
}

impl Netns {
    fn for_data(data: &Path, nodes: u16) -> Netns {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in data.as_os_str().as_encoded_bytes() {
            h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        let tag = format!("{:04x}", h & 0xffff);
        Netns {
            namespaces: (1..=nodes).map(|n| format!("cairn-{tag}-n{n}")).collect(),
            bridge: format!("cbr{tag}"),
            tag,
        }
    }

    /// 10.77.X.0/24: X from the tag, so two clusters rarely share a subnet.
    fn subnet(&self) -> u8 {
        (u16::from_str_radix(&self.tag, 16).unwrap_or(0) % 250) as u8
    }

    fn ip(&self, n: u16) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet(), n as u8)
    }

    fn create(&self) -> Result<(), NodectlError> {
        self.destroy();
        let br = &self.bridge;
        let host = format!("10.77.{}.254/24", self.subnet());
        ip(&["link", "add", br, "type", "bridge"])?;
        ip(&["addr", "add", &host, "dev", br])?;
        ip(&["link", "set", br, "up"])?;
        for (i, ns) in self.namespaces.iter().enumerate() {
            let n = i as u16 + 1;
            let (outer, inner) = (format!("cv{}n{n}", self.tag), format!("cw{}n{n}", self.tag));
            let addr = format!("{}/24", self.ip(n));
            ip(&["netns", "add", ns])?;
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &outer, "master", br, "up"])?;
            ip(&["link", "set", &inner, "netns", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", &inner, "name", "eth0"])?;
            ip(&["-n", ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        }
        Ok(())
    }

    fn destroy(&self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

fn ip(args: &[&str]) -> Result<(), NodectlError> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(io_err("run ip (iproute2)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NodectlError::Daemon(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A local cluster's node listens on its own address, on the same ports as the
/// others.
fn node_addr(node: &Node, port: u16) -> String {
    format!("{}:{port}", node.ip)
}

fn admin(node: &Node) -> Result<AdminClient, NodectlError> {
    Ok(AdminClient::for_state_dir(
        &node_addr(node, 9001),
        &node.dir.join("state"),
    )?)
}

fn view(node: &Node) -> DevNode {
    DevNode {
        node: node.n,
        id: node.id.clone(),
        s3: node_addr(node, 9000),
        admin: node_addr(node, 9001),
        internal: node_addr(node, 9002),
        datapath: node_addr(node, 7410),
        datapathd_pid: node.datapathd.pid(),
        mgmtd_pid: node.mgmtd.pid(),
        stopped: node.stopped_marker().exists(),
        dir: node.dir.display().to_string(),
    }
}

/// The default protection for a cluster of `n` nodes (one fragment per node).
fn default_ec(n: u16) -> String {
    match n {
        0..=2 => "1+1".into(),
        3 => "2+1".into(),
        4 => "2+2".into(),
        5 => "3+2".into(),
        _ => "4+2".into(),
    }
}

fn node_ip(base: Ipv4Addr, n: u16) -> Result<Ipv4Addr, NodectlError> {
    let b = u32::from(base);
    let ip = Ipv4Addr::from(b + n as u32);
    if ip.octets()[0] != 127 {
        return Err(NodectlError::Usage(format!(
            "{ip} is not a loopback address"
        )));
    }
    Ok(ip)
}

pub async fn up(args: ClusterArgs) -> Result<(), NodectlError> {
    if args.drives == 0 {
        return Err(NodectlError::Usage("--drives must be at least 1".into()));
    }
    std::fs::create_dir_all(&args.data)
        .map_err(io_err(format!("create {}", args.data.display())))?;
    let data = args
        .data
        .canonicalize()
        .map_err(io_err(format!("resolve {}", args.data.display())))?;
    let run_dir = data.join("run");
    let _lock = supervisor::lock_data_dir(&data)?;
    let (root, _) = RootCredentials::resolve(&data.join("state"), true)?;
    let netns = if args.netns {
        let n = Netns::for_data(&data, args.nodes);
        n.create()?;
        Some(n)
    } else {
        None
    };

    let mut nodes = Vec::new();
    for n in 1..=args.nodes {
        let ip = match &netns {
            Some(ns) => ns.ip(n),
            None => node_ip(args.base_ip, n)?,
        };
        // In a namespace, a daemon runs as `ip netns exec NS PROGRAM ARGS` (which
        // execs PROGRAM in place: the pid is the daemon's).
        let wrap = |program: PathBuf, args: Vec<String>| -> (PathBuf, Vec<String>) {
            match &netns {
                Some(ns) => {
                    let mut a = vec![
                        "netns".to_string(),
                        "exec".to_string(),
                        ns.namespaces[n as usize - 1].clone(),
                        program.display().to_string(),
                    ];
                    a.extend(args);
                    (PathBuf::from("ip"), a)
                }
                None => (program, args),
            }
        };
        let dir = data.join("nodes").join(format!("n{n}"));
        for d in ["drives", "state", "logs", "run"] {
            std::fs::create_dir_all(dir.join(d))
                .map_err(io_err(format!("create {}", dir.display())))?;
        }
        // The node's mgmtd reaches its datapathd in plain TCP on a local address;
        // other nodes reach it on the peer port, over mutual TLS with the
        // certificate mgmtd installs in state/tls when the node joins.
        let local = match &netns {
            Some(_) => Ipv4Addr::LOCALHOST,
            None => ip,
        };
        let mut dp_args = supervisor::datapathd_args(
            &dir,
            &format!("{local}:7409"),
            args.reactors,
            args.drives,
            &args.drive_size,
        );
        dp_args.extend([
            "--peer-listen".to_string(),
            format!("{ip}:7410"),
            "--tls-dir".to_string(),
            dir.join("state/tls").display().to_string(),
        ]);
        let mut mg_args = supervisor::mgmtd_args(
            &dir,
            &format!("{ip}:9000"),
            &format!("{ip}:9001"),
            &format!("{local}:7409"),
            args.drives,
        );
        mg_args.extend([
            "--internal".to_string(),
            format!("{ip}:9002"),
            "--chunk-advertise".to_string(),
            format!("{ip}:7410"),
            "--repair-grace".to_string(),
            args.repair_grace.to_string(),
            "--resp".to_string(),
            format!("{ip}:{}", args.resp_port),
        ]);
        let (dp_prog, dp_args) = wrap(locate("datapathd")?, dp_args);
        let (mg_prog, mg_args) = wrap(locate("mgmtd")?, mg_args);
        let env = vec![
            (ENV_ACCESS_KEY.to_string(), root.access_key.clone()),
            (ENV_SECRET_KEY.to_string(), root.secret_key.clone()),
        ];
        nodes.push(Node {
            n,
            ip,
            id: String::new(),
            datapathd: Daemon::new("datapathd", (dp_prog, dp_args), vec![], &dir),
            mgmtd: Daemon::new("mgmtd", (mg_prog, mg_args), env, &dir),
            dir,
        });
    }
    let started = Instant::now();
    let formed = match supervisor::start_all(&mut nodes).await {
        Ok(()) => form(&nodes, &args).await,
        Err(e) => Err(e),
    };
    let cluster_id = match formed {
        Ok(id) => id,
        Err(e) => {
            supervisor::stop_all(&mut nodes).await;
            if let Some(ns) = &netns {
                ns.destroy();
            }
            return Err(e);
        }
    };
    let write_state = |run: &Path, id: &str, root: &RootCredentials, nodes: &[Node]| {
        write_state(run, id, root, nodes, netns.clone())
    };
    write_state(&run_dir, &cluster_id, &root, &nodes)?;
    banner(
        &data,
        &root,
        &cluster_id,
        &nodes,
        args.resp_port,
        started.elapsed(),
    );

    let res = supervisor::supervise(&mut nodes, None, async |nodes, tick| {
        // A node that came back without its state (wiped, or replaced) is a new
        // node to the cluster: join it again, as an operator would.
        for n in tick.restarted {
            if let Err(e) = rejoin_node(nodes, n).await {
                eprintln!("nodectl: node {n}: rejoin failed: {e}");
            }
        }
        write_state(&run_dir, &cluster_id, &root, nodes)
    })
    .await;
    write_state(&run_dir, &cluster_id, &root, &nodes)?;
    if let Some(ns) = &netns {
        ns.destroy();
    }
    res
}

/// Creates the cluster on node 1 and joins the others, skipping what is already
/// done (a restarted `dev up` finds its cluster formed).
async fn form(nodes: &[Node], args: &ClusterArgs) -> Result<String, NodectlError> {
    let first = nodes
        .iter()
        .find(|n| !n.stopped_marker().exists())
        .ok_or_else(|| NodectlError::Usage("every node is stopped".into()))?;
    let status: ClusterStatus = admin(first)?.cluster_status().await?;
    let (cluster_id, token) = if status.cluster_id.is_empty() {
        let ec = args.ec.clone().unwrap_or_else(|| default_ec(args.nodes));
        let r = admin(first)?
            .cluster_init(&InitRequest {
                cluster_id: None,
                ec: Some(ec),
                replicas: Some(args.replicas),
            })
            .await?;
        (r.cluster_id, r.token)
    } else {
        let r = admin(first)?.cluster_token().await?;
        (status.cluster_id.clone(), r.token)
    };
    for n in nodes {
        if n.n == first.n || n.stopped_marker().exists() {
            continue;
        }
        let s: ClusterStatus = admin(n)?.cluster_status().await?;
        if !s.cluster_id.is_empty() {
            continue;
        }
        admin(n)?
            .cluster_join(&JoinRequest {
                seed: format!("{}:9002", first.ip),
                token: token.clone(),
            })
            .await?;
    }
    Ok(cluster_id)
}

/// Joins node `n` through any member, if it is not a member.
async fn rejoin_node(nodes: &[Node], n: u16) -> Result<(), NodectlError> {
    let Some(node) = nodes.iter().find(|x| x.n == n) else {
        return Ok(());
    };
    let s: ClusterStatus = admin(node)?.cluster_status().await?;
    if !s.cluster_id.is_empty() {
        return Ok(());
    }
    for seed in nodes
        .iter()
        .filter(|x| x.n != n && !x.stopped_marker().exists())
    {
        let Ok(api) = admin(seed) else { continue };
        let Ok(t) = api.cluster_token().await else {
            continue;
        };
        admin(node)?
            .cluster_join(&JoinRequest {
                seed: format!("{}:9002", seed.ip),
                token: t.token,
            })
            .await?;
        eprintln!("nodectl: node {n} joined the cluster again as {}", node.id);
        return Ok(());
    }
    Err(NodectlError::Daemon(format!(
        "node {n} could not rejoin: no member answered for a join token"
    )))
}

fn write_state(
    run: &Path,
    cluster_id: &str,
    root: &RootCredentials,
    nodes: &[Node],
    netns: Option<Netns>,
) -> Result<(), NodectlError> {
    let s = DevCluster {
        supervisor_pid: std::process::id(),
        cluster_id: cluster_id.to_string(),
        access_key: root.access_key.clone(),
        nodes: nodes.iter().map(view).collect(),
        netns,
    };
    let body = serde_json::to_vec_pretty(&s).unwrap_or_default();
    let path = run.join("dev.json");
    cairn_sysutil::write_atomic(&path, &body, None)
        .map_err(crate::io_err(format!("write {}", path.display())))?;
    Ok(())
}

/// Reads `dev.json` of a running local cluster.
pub fn read_state(data: &Path) -> Result<DevCluster, NodectlError> {
    let p = data.join("run/dev.json");
    let raw = std::fs::read(&p).map_err(io_err(format!(
        "read {} (is `nodectl dev up --nodes N --data {}` running?)",
        p.display(),
        data.display()
    )))?;
    serde_json::from_slice(&raw).map_err(|_| {
        NodectlError::Usage(format!(
            "{} does not describe a local cluster (started with --nodes N?)",
            p.display()
        ))
    })
}

fn banner(
    data: &Path,
    root: &RootCredentials,
    cluster_id: &str,
    nodes: &[Node],
    resp_port: u16,
    took: Duration,
) {
    println!(
        "\nCairn cluster {cluster_id}: {} nodes serving S3 (formed in {:.1} s)\n",
        nodes.len(),
        took.as_secs_f64()
    );
    for n in nodes {
        println!(
            "  node {}  id {}  S3 http://{}:9000  RESP {}:{resp_port}",
            n.n, n.id, n.ip, n.ip
        );
    }
    println!(
        "\n  access key   {}\n  secret key   {}\n\n\
         Any node serves any object. Try failures by hand:\n  \
         nodectl dev stop 2 --kill --data {d}     nodectl dev start 2 --data {d}\n  \
         nodectl cluster status --data {d}\n\nCtrl-C stops the cluster.\n",
        root.access_key,
        root.secret_key,
        d = data.display()
    );
}

/// `nodectl dev status`.
pub fn status(data: &Path, json: bool) -> Result<(), NodectlError> {
    let s = read_state(data)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
        return Ok(());
    }
    println!(
        "cluster {} (supervisor pid {})",
        s.cluster_id, s.supervisor_pid
    );
    for n in &s.nodes {
        let pid = |p: Option<u32>| p.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "  node {}  {}  S3 {}  datapathd {}  mgmtd {}{}",
            n.node,
            n.id,
            n.s3,
            pid(n.datapathd_pid),
            pid(n.mgmtd_pid),
            if n.stopped { "  (stopped)" } else { "" }
        );
    }
    Ok(())
}

/// `nodectl dev stop NODE [--kill]`: holds a node down (the supervisor does not
/// restart it) and stops its daemons, with SIGKILL when `kill`.
pub fn stop(data: &Path, node: u16, hard: bool) -> Result<(), NodectlError> {
    let s = read_state(data)?;
    let n =
        s.nodes.iter().find(|n| n.node == node).ok_or_else(|| {
            NodectlError::Usage(format!("no node {node} (1..={})", s.nodes.len()))
        })?;
    std::fs::write(Path::new(&n.dir).join("stopped"), b"").map_err(io_err("mark node stopped"))?;
    if hard {
        for pid in [n.mgmtd_pid, n.datapathd_pid].into_iter().flatten() {
            kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    } else {
        // mgmtd first, and datapathd once it has gone: mgmtd drains the S3 and
        // RESP requests in hand (up to 10 s), and they need the node's drives.
        if let Some(pid) = n.mgmtd_pid {
            kill(pid, nix::sys::signal::Signal::SIGTERM);
            supervisor::wait_gone(pid, std::time::Duration::from_secs(20));
        }
        if let Some(pid) = n.datapathd_pid {
            kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
    }
    println!("node {node} stopped{}", if hard { " (killed)" } else { "" });
    Ok(())
}

/// `nodectl dev start NODE`: lets the supervisor start the node again.
pub fn start(data: &Path, node: u16) -> Result<(), NodectlError> {
    let s = read_state(data)?;
    let n =
        s.nodes.iter().find(|n| n.node == node).ok_or_else(|| {
            NodectlError::Usage(format!("no node {node} (1..={})", s.nodes.len()))
        })?;
    match std::fs::remove_file(Path::new(&n.dir).join("stopped")) {
        Ok(()) => println!("node {node} starting"),
        Err(_) => println!("node {node} was not stopped"),
    }
    Ok(())
}

/// The admin API of a local cluster's node.
pub fn admin_of(data: &Path, node: u16) -> Result<AdminClient, NodectlError> {
    let s = read_state(data)?;
    let n = s
        .nodes
        .iter()
        .find(|n| n.node == node)
        .ok_or_else(|| NodectlError::Usage(format!("no node {node}")))?;
    Ok(AdminClient::for_state_dir(
        &n.admin,
        &Path::new(&n.dir).join("state"),
    )?)
}

/// `nodectl dev partition A,B,...`: cuts every link between the listed nodes and
/// the others (blackhole routes in both directions inside the namespaces; the host
/// still reaches every node, so clients can try both sides).
pub fn partition(data: &Path, side: &[u16]) -> Result<(), NodectlError> {
    let s = read_state(data)?;
    let ns = s.netns.as_ref().ok_or_else(|| {
        NodectlError::Usage("partitions need a cluster started with --netns".into())
    })?;
    for n in &s.nodes {
        if !side.contains(&n.node) {
            continue;
        }
        for m in s.nodes.iter().filter(|m| !side.contains(&m.node)) {
            let (a, b) = (
                &ns.namespaces[n.node as usize - 1],
                &ns.namespaces[m.node as usize - 1],
            );
            ip(&[
                "-n",
                a,
                "route",
                "add",
                "blackhole",
                &format!("{}/32", ns.ip(m.node)),
            ])?;
            ip(&[
                "-n",
                b,
                "route",
                "add",
                "blackhole",
                &format!("{}/32", ns.ip(n.node)),
            ])?;
        }
    }
    println!("partitioned: nodes {side:?} cut off from the others");
    Ok(())
}

/// `nodectl dev heal`: removes every cut.
pub fn heal(data: &Path) -> Result<(), NodectlError> {
    let s = read_state(data)?;
    let ns = s.netns.as_ref().ok_or_else(|| {
        NodectlError::Usage("partitions need a cluster started with --netns".into())
    })?;
    for n in &ns.namespaces {
        ip(&["-n", n, "route", "flush", "type", "blackhole"])?;
    }
    println!("healed: every link restored");
    Ok(())
}
