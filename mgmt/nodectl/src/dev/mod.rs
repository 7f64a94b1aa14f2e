//! `nodectl dev up [--nodes N]`: N nodes on this machine (one by default), in the
//! foreground, under the one supervisor.
//!
//! One code path for any N: a single node is a cluster of one, which its mgmtd
//! forms by itself; with more, node 1 creates the cluster and the others join it.
//! What differs is only where things are:
//! ```text
//! one node                         N nodes
//! DIR/drives, state, logs, run     DIR/nodes/nK/{drives,state,logs,run}  node K's
//! S3 --s3, RESP --resp,            node K on loopback address BASE+K (or 10.77.X.K
//!   NFS --nfs,                       in a namespace, --netns): S3 :9000, admin
//!   admin --admin (or any port)      :9001, internal :9002, chunks :7410, RESP
//!                                    at --resp's port, NFS at --nfs's
//! DIR/state/root-credentials.json  the root S3 credentials (every node's)
//! DIR/run/dev.json                 every node's id, endpoints and daemon pids
//! DIR/run/lock                     held while the supervisor runs
//! DIR/run/stopped-nK               present while `dev stop K` holds node K down
//! ```
//! A single node's layout is the node directory itself, so data directories from
//! before clusters existed keep working as they are.

mod netns;
mod state;

pub use netns::{heal, partition};
pub use state::{admin_of, read as read_state, start, status, stop};

use crate::supervisor::{self, locate, Daemon, Node, Signals};
use crate::{io_err, NodectlError};
use cairn_adminapi::{AdminClient, ClusterStatus, InitRequest, JoinRequest};
use cairn_credentials::{Origin, RootCredentials, ENV_ACCESS_KEY, ENV_SECRET_KEY};
use netns::Netns;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Data directory (created if missing).
    #[arg(long, default_value = "./cairn-data")]
    data: PathBuf,
    /// Number of file-backed drives (per node).
    #[arg(long, default_value_t = 4)]
    drives: u16,
    /// Size of each drive file (sparse), e.g. 8G.
    #[arg(long, default_value = "8G")]
    drive_size: String,
    /// S3 listen address (a single node; a cluster's node K listens on BASE+K:9000).
    #[arg(long, default_value = "127.0.0.1:9000")]
    s3: SocketAddr,
    /// RESP (Redis protocol) listen address; on a local cluster, this port on
    /// every node's address.
    #[arg(long, default_value = "127.0.0.1:6379")]
    resp: SocketAddr,
    /// NFS listen address (MOUNT and NFS on one port); on a local cluster,
    /// this port on every node's address.
    #[arg(long, default_value = "127.0.0.1:2049")]
    nfs: SocketAddr,
    /// Domains for virtual-hosted-style S3 (`bucket.DOMAIN`), repeatable; path style
    /// works too. `*.localhost` names resolve to loopback in curl, browsers and
    /// systemd-resolved, so `http://demo.s3.localhost:9000/key` reaches bucket demo.
    #[arg(long = "s3-domain", default_value = "s3.localhost")]
    s3_domains: Vec<String>,
    /// SSH admin console listen address (on a local cluster, this port on every
    /// node's address); off unless given. Keys come with --ssh-key.
    #[arg(long)]
    ssh: Option<SocketAddr>,
    /// An authorized-keys file (OpenSSH public keys, one per line, each
    /// optionally prefixed `role=reader` or `role=operator`; admin otherwise)
    /// for the SSH console, e.g. ~/.ssh/id_ed25519.pub. Repeatable.
    #[arg(long = "ssh-key")]
    ssh_keys: Vec<PathBuf>,
    /// Admin API listen address of a single node (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    admin: SocketAddr,
    /// Erasure code for large objects, K+M (default: chosen from the drive count,
    /// or on a cluster from the node count).
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
    base_ip: Ipv4Addr,
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
    /// Bytes of each node's RAM tier (hot values served from memory), e.g. 2G;
    /// default: a quarter of the machine's memory shared by the nodes.
    #[arg(long)]
    kv_ram: Option<String>,
}

/// Where one node's endpoints are.
#[derive(Clone, Debug)]
pub(crate) struct Endpoints {
    pub s3: String,
    pub resp: String,
    pub nfs: String,
    pub admin: String,
    /// The SSH console's address, when served.
    pub ssh: Option<String>,
    /// The internal API other members reach; none on a single node, whose mgmtd
    /// forms a cluster of one on a loopback port of its choosing.
    pub internal: Option<String>,
    /// Where this node's mgmtd reaches its datapathd (plain TCP, local).
    pub datapath: String,
    /// Where other nodes reach its chunk service (mutual TLS).
    pub peer: Option<String>,
}

/// A free loopback port, so a daemon keeps one address across restarts.
fn free_port() -> Result<SocketAddr, NodectlError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io_err("pick a free port"))
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
    let ip = Ipv4Addr::from(u32::from(base) + n as u32);
    if ip.octets()[0] != 127 {
        return Err(NodectlError::Usage(format!(
            "{ip} is not a loopback address"
        )));
    }
    Ok(ip)
}

/// Node `n`'s directory and endpoints.
fn place(
    args: &UpArgs,
    data: &Path,
    n: u16,
    netns: Option<&Netns>,
) -> Result<(PathBuf, Endpoints), NodectlError> {
    if args.nodes == 1 {
        let admin = if args.admin.port() == 0 {
            free_port()?
        } else {
            args.admin
        };
        let e = Endpoints {
            s3: args.s3.to_string(),
            resp: args.resp.to_string(),
            nfs: args.nfs.to_string(),
            admin: admin.to_string(),
            ssh: args.ssh.map(|a| a.to_string()),
            internal: None,
            datapath: free_port()?.to_string(),
            peer: None,
        };
        return Ok((data.to_path_buf(), e));
    }
    let ip = match netns {
        Some(ns) => ns.ip(n),
        None => node_ip(args.base_ip, n)?,
    };
    // In a namespace, mgmtd reaches its datapathd on the namespace's own loopback.
    let local = if netns.is_some() {
        Ipv4Addr::LOCALHOST
    } else {
        ip
    };
    let e = Endpoints {
        s3: format!("{ip}:9000"),
        resp: format!("{ip}:{}", args.resp.port()),
        nfs: format!("{ip}:{}", args.nfs.port()),
        admin: format!("{ip}:9001"),
        ssh: args.ssh.map(|a| format!("{ip}:{}", a.port())),
        internal: Some(format!("{ip}:9002")),
        datapath: format!("{local}:7409"),
        peer: Some(format!("{ip}:7410")),
    };
    Ok((data.join("nodes").join(format!("n{n}")), e))
}

/// Node `n`'s two daemons, as the supervisor runs them.
fn node(
    args: &UpArgs,
    data: &Path,
    n: u16,
    (dir, e): (PathBuf, &Endpoints),
    root: &RootCredentials,
    netns: Option<&Netns>,
) -> Result<Node, NodectlError> {
    let mut dp_args = supervisor::datapathd_args(
        &dir,
        &e.datapath,
        args.reactors,
        args.drives,
        &args.drive_size,
    );
    if let Some(peer) = &e.peer {
        // Other nodes reach the chunk service over mutual TLS, with the
        // certificate mgmtd installs in state/tls when the node joins.
        dp_args.extend([
            "--peer-listen".to_string(),
            peer.clone(),
            "--tls-dir".to_string(),
            dir.join("state/tls").display().to_string(),
        ]);
    }
    let mut mg_args = supervisor::mgmtd_args(&dir, &e.s3, &e.admin, &e.datapath, args.drives);
    mg_args.extend(["--resp".to_string(), e.resp.clone()]);
    mg_args.extend(["--nfs".to_string(), e.nfs.clone()]);
    if let Some(ssh) = &e.ssh {
        mg_args.extend(["--ssh".to_string(), ssh.clone()]);
        let keys: Vec<String> = args
            .ssh_keys
            .iter()
            .map(|k| {
                std::path::absolute(k)
                    .unwrap_or_else(|_| k.clone())
                    .display()
                    .to_string()
            })
            .collect();
        if !keys.is_empty() {
            mg_args.extend(["--ssh-authorized-keys".to_string(), keys.join(",")]);
        }
    }
    // Every node of a local cluster shares this machine's memory.
    let kv_ram = match &args.kv_ram {
        Some(s) => s.clone(),
        None => {
            let memory = cairn_sysutil::memory::total().unwrap_or(4 << 30);
            (memory / 4 / u64::from(args.nodes.max(1))).to_string()
        }
    };
    mg_args.extend(["--kv-ram".to_string(), kv_ram]);
    for d in &args.s3_domains {
        mg_args.extend(["--s3-domain".to_string(), d.clone()]);
    }
    if let (Some(internal), Some(peer)) = (&e.internal, &e.peer) {
        mg_args.extend([
            "--internal".to_string(),
            internal.clone(),
            "--chunk-advertise".to_string(),
            peer.clone(),
            "--repair-grace".to_string(),
            args.repair_grace.to_string(),
        ]);
    } else if let Some(ec) = &args.ec {
        // A cluster's protection is set when node 1 creates it; a single node's
        // mgmtd creates its own.
        mg_args.extend(["--ec".to_string(), ec.clone()]);
    }
    // In a namespace, a daemon runs as `ip netns exec NS PROGRAM ARGS` (which execs
    // PROGRAM in place: the pid is the daemon's).
    let wrap = |program: PathBuf, a: Vec<String>| match netns {
        Some(ns) => {
            let mut w = vec![
                "netns".to_string(),
                "exec".to_string(),
                ns.namespaces[n as usize - 1].clone(),
                program.display().to_string(),
            ];
            w.extend(a);
            (PathBuf::from("ip"), w)
        }
        None => (program, a),
    };
    let env = vec![
        (ENV_ACCESS_KEY.to_string(), root.access_key.clone()),
        (ENV_SECRET_KEY.to_string(), root.secret_key.clone()),
    ];
    Ok(Node {
        n,
        held: state::held_marker(data, n),
        id: String::new(),
        datapathd: Daemon::new(
            "datapathd",
            wrap(locate("datapathd")?, dp_args),
            vec![],
            &dir,
        ),
        mgmtd: Daemon::new("mgmtd", wrap(locate("mgmtd")?, mg_args), env, &dir),
        dir,
    })
}

pub async fn up(args: UpArgs) -> Result<(), NodectlError> {
    // First of all, so a Ctrl-C during start-up stops what was started instead of
    // killing nodectl and leaving its daemons behind.
    let mut signals = Signals::install()?;
    if args.nodes == 0 {
        return Err(NodectlError::Usage("--nodes must be at least 1".into()));
    }
    if args.drives == 0 {
        return Err(NodectlError::Usage("--drives must be at least 1".into()));
    }
    if let Some(s) = &args.kv_ram {
        if cairn_sysutil::memory::parse_size(s).is_none() {
            return Err(NodectlError::Usage(format!(
                "--kv-ram {s:?} is not a size (e.g. 512M, 4G, 0 for off)"
            )));
        }
    }
    if args.netns && args.nodes == 1 {
        return Err(NodectlError::Usage(
            "--netns is for a local cluster (--nodes 2 or more)".into(),
        ));
    }
    std::fs::create_dir_all(&args.data)
        .map_err(io_err(format!("create {}", args.data.display())))?;
    let data = args
        .data
        .canonicalize()
        .map_err(io_err(format!("resolve {}", args.data.display())))?;
    let _lock = supervisor::lock_data_dir(&data)?;
    // Made by the first start (the root credentials live there): absent, this is
    // the data's first start.
    let first_start = !data.join("state").exists();
    let (root, origin) = RootCredentials::resolve(&data.join("state"), true)?;
    let netns = if args.netns {
        let n = Netns::for_data(&data, args.nodes);
        n.create()?;
        Some(n)
    } else {
        None
    };

    let mut nodes = Vec::new();
    let mut ends = Vec::new();
    for n in 1..=args.nodes {
        let (dir, e) = place(&args, &data, n, netns.as_ref())?;
        nodes.push(node(&args, &data, n, (dir, &e), &root, netns.as_ref())?);
        ends.push(e);
    }
    let started = Instant::now();
    let formed = tokio::select! {
        r = async {
            supervisor::start_all(&mut nodes).await?;
            form(&nodes, &ends, &args).await
        } => r,
        _ = signals.recv() => Err(NodectlError::Usage("interrupted during start-up".into())),
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
    let write =
        |nodes: &[Node]| state::write(&data, &cluster_id, &root, nodes, &ends, netns.as_ref());
    write(&nodes)?;
    banner(
        &args,
        &data,
        &root,
        (origin, first_start),
        &cluster_id,
        &nodes,
        &ends,
        started.elapsed(),
    );

    // A single node that cannot stay up says so rather than loop: 6 exits of one
    // daemon within a minute stop it. A cluster's nodes are restarted for ever
    // (users kill them on purpose).
    let give_up = (args.nodes == 1).then_some(6);
    let res = supervisor::supervise(&mut nodes, &mut signals, give_up, async |nodes, tick| {
        // A node that came back without its state (wiped, or replaced) is a new
        // node to the cluster: join it again, as an operator would.
        for n in tick.restarted {
            if let Err(e) = rejoin_node(nodes, &ends, n).await {
                eprintln!("nodectl: node {n}: rejoin failed: {e}");
            }
        }
        write(nodes)
    })
    .await;
    write(&nodes)?;
    if let Some(ns) = &netns {
        ns.destroy();
    }
    res?;
    eprintln!(
        "nodectl: stopped; `nodectl dev up --data {}{}` serves the same data again",
        data.display(),
        if args.nodes > 1 {
            format!(" --nodes {}", args.nodes)
        } else {
            String::new()
        }
    );
    Ok(())
}

fn admin(node: &Node, e: &Endpoints) -> Result<AdminClient, NodectlError> {
    Ok(AdminClient::for_state_dir(
        &e.admin,
        &node.dir.join("state"),
    )?)
}

/// The cluster's id, once every node not held down is a member. A single node's
/// mgmtd forms its cluster of one by itself; otherwise the first node creates the
/// cluster and the others join it, skipping what is done (a restarted `dev up`
/// finds its cluster formed).
async fn form(nodes: &[Node], ends: &[Endpoints], args: &UpArgs) -> Result<String, NodectlError> {
    let (first, e1) = nodes
        .iter()
        .zip(ends)
        .find(|(n, _)| !n.stopped_marker().exists())
        .ok_or_else(|| NodectlError::Usage("every node is stopped".into()))?;
    let status: ClusterStatus = admin(first, e1)?.cluster_status().await?;
    if nodes.len() == 1 {
        return Ok(status.cluster_id);
    }
    let (cluster_id, token) = if status.cluster_id.is_empty() {
        let ec = args.ec.clone().unwrap_or_else(|| default_ec(args.nodes));
        let r = admin(first, e1)?
            .cluster_init(&InitRequest {
                cluster_id: None,
                ec: Some(ec),
                replicas: Some(args.replicas),
            })
            .await?;
        (r.cluster_id, r.token)
    } else {
        let r = admin(first, e1)?.cluster_token().await?;
        (status.cluster_id.clone(), r.token)
    };
    for (n, e) in nodes.iter().zip(ends) {
        if n.n == first.n || n.stopped_marker().exists() {
            continue;
        }
        let s: ClusterStatus = admin(n, e)?.cluster_status().await?;
        if !s.cluster_id.is_empty() {
            continue;
        }
        admin(n, e)?
            .cluster_join(&JoinRequest {
                seed: e1.internal.clone().unwrap_or_default(),
                token: token.clone(),
            })
            .await?;
    }
    // A joiner is marked up once its chunk service trusts the cluster (a second
    // or two after it joins); until every node is up a write may find too few
    // nodes to place on, so "serving" waits for that.
    let want = nodes
        .iter()
        .filter(|n| !n.stopped_marker().exists())
        .count();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s: ClusterStatus = admin(first, e1)?.cluster_status().await?;
        let up = s.nodes.iter().filter(|v| v.state == "up").count();
        if up >= want {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("nodectl: {up} of {want} nodes up after 60 s; serving anyway");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(cluster_id)
}

/// Joins node `n` through any member, if it is not a member (a single node forms
/// its own cluster again when wiped). Tried again for a minute: a wiped node
/// that was the leader comes back at the address the cluster still knows its
/// leader by, and joins are refused until the others have elected another.
async fn rejoin_node(nodes: &[Node], ends: &[Endpoints], n: u16) -> Result<(), NodectlError> {
    let Some((node, e)) = nodes.iter().zip(ends).find(|(x, _)| x.n == n) else {
        return Ok(());
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s: ClusterStatus = admin(node, e)?.cluster_status().await?;
        if !s.cluster_id.is_empty() || nodes.len() == 1 {
            return Ok(());
        }
        match join_once(nodes, ends, (node, e)).await {
            Ok(()) => {
                eprintln!("nodectl: node {n} joined the cluster again as {}", node.id);
                return Ok(());
            }
            Err(err) if Instant::now() < deadline => {
                eprintln!("nodectl: node {n} could not rejoin yet ({err}); trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// One attempt of [`rejoin_node`]: a join token from the first member that
/// gives one, and the join through it.
async fn join_once(
    nodes: &[Node],
    ends: &[Endpoints],
    (node, e): (&Node, &Endpoints),
) -> Result<(), NodectlError> {
    for (seed, se) in nodes
        .iter()
        .zip(ends)
        .filter(|(x, _)| x.n != node.n && !x.stopped_marker().exists())
    {
        let Ok(api) = admin(seed, se) else { continue };
        let Ok(t) = api.cluster_token().await else {
            continue;
        };
        admin(node, e)?
            .cluster_join(&JoinRequest {
                seed: se.internal.clone().unwrap_or_default(),
                token: t.token,
            })
            .await?;
        return Ok(());
    }
    Err(NodectlError::Daemon(format!(
        "node {} could not rejoin: no member answered for a join token",
        node.n
    )))
}

/// How to run this nodectl again, as the user started it: the path they typed
/// (`target/release/nodectl`), or `nodectl` when it was found on PATH.
fn invoked_as() -> String {
    match std::env::args().next() {
        Some(a) if a.contains('/') => a,
        _ => "nodectl".into(),
    }
}

/// How to reach a node's SSH console, or how to turn it on.
fn ssh_line(e: &Endpoints, keys: &[PathBuf]) -> String {
    match (&e.ssh, keys.is_empty()) {
        (None, _) => "off (dev up --ssh 127.0.0.1:2222 --ssh-key ~/.ssh/id_ed25519.pub)".into(),
        (Some(a), true) => format!("{a}, no keys yet: add --ssh-key FILE"),
        (Some(a), false) => {
            let (host, port) = a.rsplit_once(':').unwrap_or((a, "22"));
            format!("ssh -p {port} admin@{host} nodectl status")
        }
    }
}

/// A first client command: make a bucket on the data's first start; list the
/// buckets on a restart (making it again would fail: it exists).
fn first_s3_command(endpoint: &str, first_start: bool) -> String {
    if first_start {
        format!("aws --endpoint-url {endpoint} s3 mb s3://demo")
    } else {
        format!("aws --endpoint-url {endpoint} s3 ls")
    }
}

#[allow(clippy::too_many_arguments)]
fn banner(
    args: &UpArgs,
    data: &Path,
    root: &RootCredentials,
    (origin, first_start): (Origin, bool),
    cluster_id: &str,
    nodes: &[Node],
    ends: &[Endpoints],
    took: Duration,
) {
    let me = invoked_as();
    if nodes.len() > 1 {
        println!(
            "\nCairn cluster {cluster_id}: {} nodes serving S3 (formed in {:.1} s)\n",
            nodes.len(),
            took.as_secs_f64()
        );
        for (n, e) in nodes.iter().zip(ends) {
            println!(
                "  node {}  id {}  S3 http://{}  RESP {}  NFS {}  admin {}{}",
                n.n,
                n.id,
                e.s3,
                e.resp,
                e.nfs,
                e.admin,
                e.ssh
                    .as_ref()
                    .map(|s| format!("  SSH {s}"))
                    .unwrap_or_default()
            );
        }
        println!(
            "\n  metrics      http://ADMIN/metrics on each node (bearer token in {}/nodes/nK/state/admin.token)",
            data.display()
        );
        let s3 = &ends[0].s3;
        let (rh, rp) = ends[0]
            .resp
            .rsplit_once(':')
            .unwrap_or((&ends[0].resp, "6379"));
        println!(
            "\n  access key   {a}\n  secret key   {s}\n\n\
             Try it (any node serves any object):\n  \
             AWS_ACCESS_KEY_ID={a} AWS_SECRET_ACCESS_KEY={s} AWS_DEFAULT_REGION=us-east-1 \\\n    \
             {aws}\n  \
             redis-cli -h {rh} -p {rp} --user {a} --pass {s} SET hello world\n\n\
             Try failures by hand:\n  \
             {me} dev stop 2 --kill --data {d}\n  \
             {me} dev start 2 --data {d}\n  \
             {me} cluster status --data {d}\n\nCtrl-C stops the cluster.\n",
            a = root.access_key,
            s = root.secret_key,
            aws = first_s3_command(&format!("http://{s3}"), first_start),
            d = data.display()
        );
        return;
    }
    let endpoint = format!("http://{}", args.s3);
    let from_env = matches!(origin, Origin::Environment);
    let (access, secret) = if from_env {
        (format!("${ENV_ACCESS_KEY}"), format!("${ENV_SECRET_KEY}"))
    } else {
        (root.access_key.clone(), root.secret_key.clone())
    };
    let stored = data.join("state/root-credentials.json");
    let origin = match origin {
        Origin::Environment => "from the environment".to_string(),
        Origin::Stored => format!("stored in {}", stored.display()),
        Origin::Generated => format!("generated now, stored in {}", stored.display()),
    };
    println!(
        "\nCairn node serving S3 ({} drives in {}, ready in {:.1} s)\n\n  \
         endpoint     {endpoint}\n  \
         RESP         {resp}  (AUTH with the secret key, or access key and secret)\n  \
         NFS          {nfs}  (mounts /TENANT/BUCKET once exported: {me} export add)\n  \
         metrics      http://{admin}/metrics  (bearer token in {token})\n  \
         SSH          {ssh}\n  \
         access key   {}\n  \
         secret key   {}\n  \
         credentials  {origin}\n\n\
         Try it:\n  \
         AWS_ACCESS_KEY_ID={access} AWS_SECRET_ACCESS_KEY={secret} AWS_DEFAULT_REGION=us-east-1 \\\n    \
         {aws}\n  \
         redis-cli -h {resp_host} -p {resp_port} --user {access} --pass {secret} SET hello world\n\n  \
         {me} status --data {}\n\n\
         Ctrl-C stops the node; running the same command again serves the same data.\n",
        args.drives,
        data.join("drives").display(),
        took.as_secs_f64(),
        root.access_key,
        if from_env { "(from the environment)" } else { secret.as_str() },
        data.display(),
        resp = args.resp,
        nfs = args.nfs,
        admin = ends[0].admin,
        token = data.join("state/admin.token").display(),
        ssh = ssh_line(&ends[0], &args.ssh_keys),
        aws = first_s3_command(&endpoint, first_start),
        resp_host = args.resp.ip(),
        resp_port = args.resp.port(),
    );
}
