//! `DIR/run/dev.json`: what a running `nodectl dev up` records of its nodes, and
//! the commands that work from it (`dev status`, `dev stop`, `dev start`, finding a
//! node's admin API).

use super::netns::Netns;
use crate::supervisor::{self, kill, Node};
use crate::{io_err, NodectlError};
use cairn_adminapi::AdminClient;
use cairn_credentials::RootCredentials;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One node in `dev.json` and `dev status --json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevNode {
    /// 1-based position (what `dev stop`/`start` take); a single node is node 1.
    pub node: u16,
    /// The cluster's id for the node.
    pub id: String,
    pub s3: String,
    pub resp: String,
    /// Where its NFS server listens (empty in a `dev.json` from before NFS).
    #[serde(default)]
    pub nfs: String,
    pub admin: String,
    /// The SSH console's address, when `dev up --ssh` serves one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<String>,
    /// Empty on a single node, which no other node reaches.
    pub internal: String,
    pub datapath: String,
    pub datapathd_pid: Option<u32>,
    pub mgmtd_pid: Option<u32>,
    pub stopped: bool,
    pub dir: String,
}

/// `dev.json`: the same for one node and for a local cluster.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevState {
    pub supervisor_pid: u32,
    pub cluster_id: String,
    pub access_key: String,
    pub nodes: Vec<DevNode>,
    /// Set when each node runs in a network namespace of its own.
    #[serde(default)]
    pub netns: Option<Netns>,
}

pub(super) fn write(
    data: &Path,
    cluster_id: &str,
    root: &RootCredentials,
    nodes: &[Node],
    views: &[super::Endpoints],
    netns: Option<&Netns>,
) -> Result<(), NodectlError> {
    let s = DevState {
        supervisor_pid: std::process::id(),
        cluster_id: cluster_id.to_string(),
        access_key: root.access_key.clone(),
        nodes: nodes
            .iter()
            .zip(views)
            .map(|(n, e)| DevNode {
                node: n.n,
                id: n.id.clone(),
                s3: e.s3.clone(),
                resp: e.resp.clone(),
                nfs: e.nfs.clone(),
                ssh: e.ssh.clone(),
                admin: e.admin.clone(),
                internal: e.internal.clone().unwrap_or_default(),
                datapath: e.datapath.clone(),
                datapathd_pid: n.datapathd.pid(),
                mgmtd_pid: n.mgmtd.pid(),
                stopped: n.stopped_marker().exists(),
                dir: n.dir.display().to_string(),
            })
            .collect(),
        netns: netns.cloned(),
    };
    let body = serde_json::to_vec_pretty(&s).unwrap_or_default();
    let path = data.join("run/dev.json");
    cairn_sysutil::write_atomic(&path, &body, None)
        .map_err(io_err(format!("write {}", path.display())))
}

/// Reads `dev.json` of a running `nodectl dev up`.
pub fn read(data: &Path) -> Result<DevState, NodectlError> {
    let p = data.join("run/dev.json");
    let raw = std::fs::read(&p).map_err(io_err(format!(
        "read {} (is `nodectl dev up --data {}` running?)",
        p.display(),
        data.display()
    )))?;
    serde_json::from_slice(&raw).map_err(|e| {
        NodectlError::Usage(format!(
            "{} was not written by this nodectl (restart `nodectl dev up`): {e}",
            p.display()
        ))
    })
}

impl DevState {
    pub fn node(&self, node: u16) -> Result<&DevNode, NodectlError> {
        self.nodes.iter().find(|n| n.node == node).ok_or_else(|| {
            NodectlError::Usage(if self.nodes.len() == 1 {
                format!("this is a single node: there is no node {node}")
            } else {
                format!("no node {node} (1..={})", self.nodes.len())
            })
        })
    }
}

/// Present while `dev stop` holds node `n` down: `DIR/run/stopped-nK`, outside
/// the node's own directory, so wiping that one (a replaced node) keeps it held.
pub(crate) fn held_marker(data: &Path, n: u16) -> std::path::PathBuf {
    data.join("run").join(format!("stopped-n{n}"))
}

/// `nodectl dev status`.
pub fn status(data: &Path, json: bool) -> Result<(), NodectlError> {
    let s = read(data)?;
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
    let s = read(data)?;
    let n = s.node(node)?;
    std::fs::write(held_marker(data, node), b"").map_err(io_err("mark node stopped"))?;
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
    let s = read(data)?;
    s.node(node)?;
    match std::fs::remove_file(held_marker(data, node)) {
        Ok(()) => println!("node {node} starting"),
        Err(_) => println!("node {node} was not stopped"),
    }
    Ok(())
}

/// The admin API of node `node` started by `nodectl dev up --data DIR` (a single
/// node is node 1).
pub fn admin_of(data: &Path, node: u16) -> Result<AdminClient, NodectlError> {
    let s = read(data)?;
    let n = s.node(node)?;
    Ok(AdminClient::for_state_dir(
        &n.admin,
        &Path::new(&n.dir).join("state"),
    )?)
}
