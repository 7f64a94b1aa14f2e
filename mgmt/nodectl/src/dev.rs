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

use crate::supervisor::{self, locate, Daemon, Node};
use crate::{io_err, NodectlError};
use cairn_credentials::{Origin, RootCredentials, ENV_ACCESS_KEY, ENV_SECRET_KEY};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

/// A free loopback port, so a daemon keeps one address across restarts.
fn free_port() -> Result<SocketAddr, NodectlError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io_err("pick a free port"))
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
    let _lock = supervisor::lock_data_dir(&data)?;

    let (root, origin) = RootCredentials::resolve(&state_dir, true)?;
    let datapath_addr = free_port()?;
    let admin_addr = if args.admin.port() == 0 {
        free_port()?
    } else {
        args.admin
    };

    let dp_args = supervisor::datapathd_args(
        &data,
        &datapath_addr.to_string(),
        args.reactors,
        args.drives,
        &args.drive_size,
    );
    let mut mg_args = supervisor::mgmtd_args(
        &data,
        &args.s3.to_string(),
        &admin_addr.to_string(),
        &datapath_addr.to_string(),
        args.drives,
    );
    mg_args.extend(["--resp".to_string(), args.resp.to_string()]);
    if let Some(ec) = &args.ec {
        mg_args.push("--ec".into());
        mg_args.push(ec.clone());
    }
    let env = vec![
        (ENV_ACCESS_KEY.to_string(), root.access_key.clone()),
        (ENV_SECRET_KEY.to_string(), root.secret_key.clone()),
    ];
    let mut nodes = [Node {
        n: 1,
        ip: std::net::Ipv4Addr::LOCALHOST,
        id: String::new(),
        datapathd: Daemon::new("datapathd", (locate("datapathd")?, dp_args), vec![], &data),
        mgmtd: Daemon::new("mgmtd", (locate("mgmtd")?, mg_args), env, &data),
        dir: data.clone(),
    }];

    let started = Instant::now();
    supervisor::start_all(&mut nodes).await?;
    let state = |node: &Node| DevState {
        s3: args.s3.to_string(),
        admin: admin_addr.to_string(),
        datapath: datapath_addr.to_string(),
        supervisor_pid: std::process::id(),
        datapathd_pid: node.datapathd.pid(),
        mgmtd_pid: node.mgmtd.pid(),
    };
    write_state(&run_dir, &state(&nodes[0]))?;
    banner(&args, &data, &root, origin, started.elapsed());

    // A single node that cannot stay up says so rather than loop: 6 exits of one
    // daemon within a minute stop it.
    let res = supervisor::supervise(&mut nodes, Some(6), async |nodes, _| {
        write_state(&run_dir, &state(&nodes[0]))
    })
    .await;
    write_state(&run_dir, &state(&nodes[0]))?;
    res?;
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
