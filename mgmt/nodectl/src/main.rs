//! nodectl: the operator CLI of a Cairn node. Parses arguments and dispatches; the
//! work is in `dev` (a local appliance under supervision) and `status`.

mod dev;
mod status;

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
    Mgmt(#[from] cairn_mgmtd::MgmtError),
    #[error("{0}")]
    Daemon(String),
    #[error("admin API: {0}")]
    Admin(String),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodectlError {
    let what = what.into();
    move |source| NodectlError::Io { what, source }
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
    /// Drives, capacity, objects and health of a node.
    Status {
        /// The node's data directory (as given to `dev up`).
        #[arg(long, default_value = "./cairn-data")]
        data: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum DevCmd {
    /// Start a single-node appliance in the foreground on file-backed drives.
    Up(dev::UpArgs),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Dev {
            cmd: DevCmd::Up(args),
        } => dev::up(args).await,
        Cmd::Status { data, json } => status::show(&data, json).await,
    };
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodectl: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
