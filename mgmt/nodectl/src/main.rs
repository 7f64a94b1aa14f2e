//! nodectl: the operator CLI of a Cairn node. Parses arguments and dispatches; the
//! work is in `dev` (a local appliance under supervision) and `status`.

mod access;
mod admin;
mod bmc;
mod cluster;
mod dev;
mod drives;
mod exports;
mod gc;
mod kv;
mod nodeos;
mod qos;
mod replication;
mod scrub;
mod snapshots;
mod status;
mod supervisor;
mod tenants;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Errors nodectl reports to the operator.
#[derive(Debug, thiserror::Error)]
pub enum NodectlError {
    #[error("{0}")]
    Usage(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Credentials(#[from] cairn_credentials::CredentialError),
    #[error("{0}")]
    Daemon(String),
    /// A node's admin API failed; the error says whether asking again may help.
    #[error("admin API: {0}")]
    Admin(#[from] cairn_adminapi::AdminError),
    #[error(transparent)]
    Slots(#[from] cairn_slots::SlotError),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodectlError {
    let what = what.into();
    move |source| NodectlError::Io { what, source }
}

/// The first line of `path` (`-`: standard input), which must not be empty: a
/// password or secret key, kept out of the command line (and `ps`).
pub(crate) fn read_secret(path: &std::path::Path, what: &str) -> Result<String, NodectlError> {
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_line(&mut s)
            .map_err(io_err(format!("read the {what} from stdin")))?;
        s
    } else {
        std::fs::read_to_string(path)
            .map_err(io_err(format!("read the {what} from {}", path.display())))?
    };
    match text.lines().next() {
        Some(l) if !l.is_empty() => Ok(l.to_string()),
        _ => Err(NodectlError::Usage(format!(
            "{}: no {what} in it",
            path.display()
        ))),
    }
}

#[derive(Parser, Debug)]
#[command(name = "nodectl", version, about = "Operate a Cairn storage node")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// A local appliance for development and trials.
    Dev {
        #[command(subcommand)]
        cmd: DevCmd,
    },
    /// Cluster membership and protection.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Write a Cairn disk image onto a disk (USB stick, internal disk), verified.
    Flash(nodeos::FlashArgs),
    /// Take a node out of a cluster; update, roll back and inspect its OS slots.
    Node {
        #[command(subcommand)]
        cmd: NodeCmd,
    },
    /// Each drive of a node: backend, device, model, serial, firmware, capacity,
    /// used bytes, chunks and health.
    Drives {
        #[command(flatten)]
        target: cluster::Target,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The node's scrubber: every fragment on its drives read back and checked.
    Scrub {
        #[command(subcommand)]
        cmd: ScrubCmd,
    },
    /// Run the node's collector now: delete the chunks no object references
    /// (writes that failed, old copies a repair replaced), or with `status` show
    /// what it did last.
    Gc {
        #[command(subcommand)]
        cmd: Option<GcCmd>,
        #[command(flatten)]
        target: cluster::Target,
        /// Only report what would be deleted.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// Tenants: namespaces of buckets with their own users and keys.
    Tenant {
        #[command(subcommand)]
        cmd: tenants::TenantCmd,
    },
    /// Users of a tenant, with roles (admin, read-write, read-only).
    User {
        #[command(subcommand)]
        cmd: tenants::UserCmd,
    },
    /// Access keys of a tenant's users.
    Key {
        #[command(subcommand)]
        cmd: tenants::KeyCmd,
    },
    /// Admin tokens with roles (reader, operator, admin).
    Token {
        #[command(subcommand)]
        cmd: access::TokenCmd,
    },
    /// Admin client certificates for the API over TLS, with roles.
    Cert {
        #[command(subcommand)]
        cmd: access::CertCmd,
    },
    /// Keys that may log in to the SSH console, with roles, on every node.
    SshKey {
        #[command(subcommand)]
        cmd: access::SshKeyCmd,
    },
    /// The newest mutating admin calls: who, what, when, how they ended.
    Audit {
        /// How many (the cluster keeps the last 10,000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[command(flatten)]
        target: cluster::Target,
        #[arg(long)]
        json: bool,
    },
    /// NFS exports: a tenant's buckets mounted as /TENANT/BUCKET by the client
    /// networks listed.
    Export {
        #[command(subcommand)]
        cmd: exports::ExportCmd,
    },
    /// Bucket snapshots: read-only views of a bucket as it was, read through
    /// S3 under .snapshot/NAME/.
    Snapshot {
        #[command(subcommand)]
        cmd: snapshots::SnapshotCmd,
    },
    /// Bucket replication to another cluster: rules, backlog, lag.
    Replication {
        #[command(subcommand)]
        cmd: replication::ReplicationCmd,
    },
    /// The KV-cache tier: pools (named keyspaces) and their figures.
    Kv {
        #[command(subcommand)]
        cmd: kv::KvCmd,
    },
    /// Drives, capacity, objects and health of a node.
    Status {
        #[command(flatten)]
        target: cluster::Target,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum GcCmd {
    /// The collector's epoch, waiting chunks and last round.
    Status {
        #[command(flatten)]
        target: cluster::Target,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ScrubCmd {
    /// What the scrubber is doing, its last pass and when the next one runs.
    Status {
        #[command(flatten)]
        target: cluster::Target,
        #[arg(long)]
        json: bool,
    },
    /// Start a pass now (or resume a paused one).
    Start {
        #[command(flatten)]
        target: cluster::Target,
        /// Follow the pass to its end; exit 1 if it left fragments unrebuilt.
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
    },
    /// Pause the scrubber (until `start`, or mgmtd restarts).
    Pause {
        #[command(flatten)]
        target: cluster::Target,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum DevCmd {
    /// Start a single-node appliance (or with --nodes N, a local cluster) in the
    /// foreground on file-backed drives.
    Up(Box<dev::UpArgs>),
    /// The nodes `dev up` runs: ids, S3 endpoints, daemon pids.
    Status {
        #[arg(long, default_value = "./cairn-data")]
        data: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Stop one node (1 on a single node) and keep it down.
    Stop {
        /// Node number (1-based).
        node: u16,
        /// SIGKILL instead of SIGTERM: a crash.
        #[arg(long)]
        kill: bool,
        #[arg(long, default_value = "./cairn-data")]
        data: PathBuf,
    },
    /// Start a stopped node again.
    Start {
        node: u16,
        #[arg(long, default_value = "./cairn-data")]
        data: PathBuf,
    },
    /// Cut the listed nodes (e.g. `1,2`) off from the others (clusters started
    /// with --netns).
    Partition {
        #[arg(value_delimiter = ',')]
        nodes: Vec<u16>,
        #[arg(long, default_value = "./cairn-data")]
        data: PathBuf,
    },
    /// Undo every partition.
    Heal {
        #[arg(long, default_value = "./cairn-data")]
        data: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum ClusterCmd {
    /// Create a cluster with this node as its first member; prints a join token.
    Init {
        #[command(flatten)]
        target: cluster::Target,
        /// Erasure code of large objects, K+M (default 4+2).
        #[arg(long)]
        ec: Option<String>,
        /// Copies of small objects (default 3).
        #[arg(long)]
        replicas: Option<u8>,
        /// Cluster id (default: random).
        #[arg(long)]
        id: Option<String>,
    },
    /// Join the cluster that the member at SEED (its internal address) belongs to.
    Join {
        seed: String,
        #[arg(long)]
        token: String,
        #[command(flatten)]
        target: cluster::Target,
    },
    /// Nodes, map epoch, protection of every object, repair progress.
    Status {
        #[command(flatten)]
        target: cluster::Target,
        #[arg(long)]
        json: bool,
    },
    /// Print a join token for more nodes.
    Token {
        #[command(flatten)]
        target: cluster::Target,
    },
    /// One word for scripts and monitors, and the exit code: 0 healthy, 1
    /// degraded (a node down, an object short of a fragment), 2 unavailable (the
    /// node unreachable, no leader).
    Health {
        #[command(flatten)]
        target: cluster::Target,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum NodeCmd {
    /// Stop placing data on a node and move its fragments elsewhere.
    Drain {
        /// Node id (hex, or a unique prefix).
        id: String,
        /// Stay until repair has moved every fragment off it, showing progress;
        /// exits 0 then (the node can be removed).
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        target: cluster::Target,
    },
    /// Remove a drained node from the cluster.
    Remove {
        id: String,
        /// Remove even if it still holds fragments (they are rebuilt elsewhere).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        target: cluster::Target,
    },
    /// Write an update bundle (file or http:// URL) to the inactive slot, arm it with
    /// three boot tries, and reboot into it.
    Update(nodeos::UpdateArgs),
    /// Boot the other slot next (refused if it is bad or absent), and reboot.
    Rollback(nodeos::RollbackArgs),
    /// The booted slot, the next boot, each slot's version and boot-count state.
    Slots(nodeos::SlotsArgs),
    /// Mark the booted slot good by hand (normally done by systemd-bless-boot).
    MarkGood(nodeos::MarkGoodArgs),
    /// How the cluster reaches each node's BMC (IPMI over the network).
    Bmc {
        #[command(subcommand)]
        cmd: bmc::BmcCmd,
    },
    /// A node's power, through its BMC: status, on, off, cycle, reset, soft.
    Power(bmc::PowerArgs),
    /// A node's BMC sensors (temperatures, voltages, fans) with their levels
    /// and thresholds, read now: in-band on the node itself when it has its
    /// BMC device, else through its BMC over the network.
    Sensors(bmc::SensorsArgs),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.cmd, Cmd::Dev { cmd: DevCmd::Up(_) }) {
        // A report piped into `head` ends quietly, as other Unix tools do, rather
        // than panicking on the closed pipe (Rust ignores SIGPIPE by default). Not
        // for `dev up`: the supervisor outlives its terminal and must stop its
        // daemons itself.
        // SAFETY: restores SIGPIPE's default, process-wide disposition; nodectl
        // installs no handler of its own for it, so no code relies on it being
        // ignored.
        let _ = unsafe {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGPIPE,
                nix::sys::signal::SigHandler::SigDfl,
            )
        };
    }
    let res = match cli.cmd {
        Cmd::Dev {
            cmd: DevCmd::Up(args),
        } => dev::up(*args).await,
        Cmd::Dev {
            cmd: DevCmd::Status { data, json },
        } => dev::status(&data, json),
        Cmd::Dev {
            cmd: DevCmd::Stop { node, kill, data },
        } => dev::stop(&data, node, kill),
        Cmd::Dev {
            cmd: DevCmd::Start { node, data },
        } => dev::start(&data, node),
        Cmd::Dev {
            cmd: DevCmd::Partition { nodes, data },
        } => dev::partition(&data, &nodes),
        Cmd::Dev {
            cmd: DevCmd::Heal { data },
        } => dev::heal(&data),
        Cmd::Cluster { cmd } => match cmd {
            ClusterCmd::Init {
                target,
                ec,
                replicas,
                id,
            } => cluster::init(&target, ec, replicas, id).await,
            ClusterCmd::Join {
                seed,
                token,
                target,
            } => cluster::join(&target, &seed, &token).await,
            ClusterCmd::Status { target, json } => cluster::status(&target, json).await,
            ClusterCmd::Token { target } => cluster::token(&target).await,
            ClusterCmd::Health { target, json } => cluster::health(&target, json).await,
        },
        Cmd::Node { cmd } => match cmd {
            NodeCmd::Drain { id, follow, target } => cluster::drain(&target, &id, follow).await,
            NodeCmd::Remove { id, force, target } => cluster::remove(&target, &id, force).await,
            NodeCmd::Update(a) => nodeos::update(a).await,
            NodeCmd::Rollback(a) => nodeos::rollback(a),
            NodeCmd::Slots(a) => nodeos::slots(a),
            NodeCmd::MarkGood(a) => nodeos::mark_good(a),
            NodeCmd::Bmc { cmd } => bmc::bmc(cmd).await,
            NodeCmd::Power(a) => bmc::power(a).await,
            NodeCmd::Sensors(a) => bmc::sensors(a).await,
        },
        Cmd::Flash(a) => nodeos::flash(a),
        Cmd::Drives { target, json } => drives::show(&target, json).await,
        Cmd::Status { target, json } => status::show(&target, json).await,
        Cmd::Gc {
            cmd: Some(GcCmd::Status { target, json }),
            ..
        } => gc::status(&target, json).await,
        Cmd::Gc {
            cmd: None,
            target,
            dry_run,
            json,
        } => gc::run(&target, dry_run, json).await,
        Cmd::Tenant { cmd } => tenants::tenant(cmd).await,
        Cmd::User { cmd } => tenants::user(cmd).await,
        Cmd::Key { cmd } => tenants::key(cmd).await,
        Cmd::Kv { cmd } => kv::kv(cmd).await,
        Cmd::Export { cmd } => exports::export(cmd).await,
        Cmd::Snapshot { cmd } => snapshots::snapshot(cmd).await,
        Cmd::Replication { cmd } => replication::replication(cmd).await,
        Cmd::Token { cmd } => access::token(cmd).await,
        Cmd::SshKey { cmd } => access::ssh_key(cmd).await,
        Cmd::Cert { cmd } => access::cert(cmd).await,
        Cmd::Audit {
            limit,
            target,
            json,
        } => access::audit(&target, limit, json).await,
        Cmd::Scrub { cmd } => match cmd {
            ScrubCmd::Status { target, json } => scrub::status(&target, json).await,
            ScrubCmd::Start { target, wait, json } => scrub::start(&target, wait, json).await,
            ScrubCmd::Pause { target, json } => scrub::pause(&target, json).await,
        },
    };
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodectl: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    /// Clap checks a command's arguments only when that command is parsed: a
    /// flag name used twice (a subcommand's own and the flattened target's)
    /// would panic at its first use. Check every command at once.
    #[test]
    fn every_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
