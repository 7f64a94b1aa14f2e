//! nodeos: brings the node up at boot (`cairn-nodeos.service`) and answers the readiness
//! questions of the other units. Argument parsing and wiring only; the logic is in the
//! cairn-nodeos library.

use cairn_nodeos::console::Console;
use cairn_nodeos::net::{default_bin_dirs, DhcpClient, Rtnetlink};
use cairn_nodeos::source::SystemMounter;
use cairn_nodeos::{bring_up, daemons, ready, Outcome, Paths};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "nodeos", version, about = "Cairn node bring-up")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Bring the node up from its config (the default): hostname, network, sysctls,
    /// hugepages, drives, and the daemons' environment files in /run/cairn.
    Up,
    /// Wait for mgmtd's /healthz, then print `cairn: serving` on the console. Fails in
    /// maintenance mode or on timeout, so boot-complete.target is not reached and the boot
    /// is not marked good.
    Ready {
        /// Seconds to wait.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Give NVMe controllers back to the kernel's nvme driver (from vfio-pci, where
    /// bring-up put them for the `nvme` backend): the named ones, or every NVMe
    /// controller on vfio-pci. Stop cairn-datapathd first; the next `nodeos up`
    /// (boot) binds them to vfio-pci again.
    ReleaseDrives {
        /// PCI addresses (DDDD:BB:DD.F); none: every NVMe controller on vfio-pci.
        bdfs: Vec<String>,
        /// Release even when a process (datapathd) holds the controller's VFIO group
        /// open: the kernel then takes it away from that process (its drive fails).
        #[arg(long)]
        force: bool,
    },
    /// Wait until a file exists (a daemon's --ready-file).
    WaitFile {
        path: PathBuf,
        /// Seconds to wait.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
}

fn init_logging() {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    match tracing_journald::layer() {
        Ok(journald) => tracing_subscriber::registry()
            .with(filter)
            .with(journald)
            .init(),
        // No journald (a container, an initramfs, a developer's shell): stderr.
        Err(_) => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init(),
    }
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let paths = Paths::system();
    match cli.cmd.unwrap_or(Cmd::Up) {
        Cmd::Up => {
            let env = cairn_nodeos::bringup::Env {
                mounter: &SystemMounter,
                network: &Rtnetlink {
                    dhcp: DhcpClient::find(&default_bin_dirs()),
                },
                modprobe: Some(PathBuf::from("/sbin/modprobe")),
            };
            match bring_up(&paths, &env) {
                Outcome::Ready { .. } | Outcome::NoConfig { .. } => ExitCode::SUCCESS,
                Outcome::Failed { .. } => ExitCode::FAILURE,
            }
        }
        Cmd::Ready { timeout } => node_ready(&paths, Duration::from_secs(timeout)),
        Cmd::ReleaseDrives { bdfs, force } => release_drives(&paths, &bdfs, force),
        Cmd::WaitFile { path, timeout } => {
            match ready::wait_file(
                &path,
                Duration::from_secs(timeout),
                Duration::from_millis(100),
            ) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("nodeos: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn release_drives(paths: &Paths, bdfs: &[String], force: bool) -> ExitCode {
    let modprobe = PathBuf::from("/sbin/modprobe");
    let results = cairn_nodeos::vfio::release_drives(paths, bdfs, force, Some(&modprobe));
    if results.is_empty() {
        println!("nodeos: no NVMe controller is bound to vfio-pci");
        return ExitCode::SUCCESS;
    }
    let mut ok = true;
    for (bdf, r) in results {
        match r {
            Ok(r) if r.already_released => println!("{bdf}: already on the nvme driver"),
            Ok(_) => println!("{bdf}: released to the nvme driver"),
            Err(e) => {
                ok = false;
                eprintln!("nodeos: {e}");
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn node_ready(paths: &Paths, timeout: Duration) -> ExitCode {
    let console = Console::new(&paths.console);
    if let Ok(reason) = std::fs::read_to_string(paths.maintenance_marker()) {
        console.say(&format!(
            "maintenance mode ({}); this boot is not marked good",
            reason.trim()
        ));
        return ExitCode::FAILURE;
    }
    let env_file = paths.run.join("ready.env");
    let admin = std::fs::read_to_string(&env_file)
        .ok()
        .and_then(|t| {
            daemons::parse_env(&t)
                .into_iter()
                .find(|(k, _)| k == "CAIRN_ADMIN")
        })
        .and_then(|(_, v)| v.parse().ok());
    let Some(admin) = admin else {
        console.say(&format!(
            "{} has no CAIRN_ADMIN address: did cairn-nodeos run?",
            env_file.display()
        ));
        return ExitCode::FAILURE;
    };
    match ready::wait_http_ok(admin, "/healthz", timeout, Duration::from_secs(1)) {
        Ok(()) => {
            console.say("serving");
            ExitCode::SUCCESS
        }
        Err(e) => {
            console.say(&format!("mgmtd is {e}"));
            ExitCode::FAILURE
        }
    }
}
