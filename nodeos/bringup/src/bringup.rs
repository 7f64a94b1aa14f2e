//! The boot sequence: config, hostname, network, DNS, sysctls, hugepages, drives, files
//! for the daemons. Any failure ends in maintenance mode, with the reason on the console
//! and in `/run/cairn/maintenance`; the daemon units do not start while that file exists.

use crate::console::Console;
use crate::drives::{self, ClaimedDrive};
use crate::net::NetworkApplier;
use crate::source::{find_config, Mounter};
use crate::{daemons, system, vfio, write_file, NodeosError, Paths};
use cairn_nodeconfig::{Backend, NodeConfig, VOLUME_LABEL};
use std::path::PathBuf;

/// How bring-up ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The daemons can start.
    Ready { drives: Vec<ClaimedDrive> },
    /// No config, or an invalid one: the operator has to provide one.
    NoConfig { reason: String },
    /// A valid config could not be applied (a NIC or drive missing, vfio unusable...).
    Failed { reason: String },
}

/// What bring-up needs besides [`Paths`].
pub struct Env<'a> {
    pub mounter: &'a dyn Mounter,
    pub network: &'a dyn NetworkApplier,
    /// `modprobe` to load vfio-pci when the `nvme` backend needs it; `None` in tests.
    pub modprobe: Option<PathBuf>,
}

impl std::fmt::Debug for Env<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("modprobe", &self.modprobe)
            .finish_non_exhaustive()
    }
}

/// Bring the node up. Never panics and never returns an error: every failure is an
/// [`Outcome`] that has already been reported on the console.
pub fn bring_up(paths: &Paths, env: &Env<'_>) -> Outcome {
    let console = Console::new(&paths.console);
    if let Err(e) = std::fs::create_dir_all(&paths.run) {
        let reason = format!("cannot create {}: {e}", paths.run.display());
        console.say(&format!("maintenance mode: {reason}"));
        return Outcome::Failed { reason };
    }
    // A marker from an earlier run in this boot would keep the daemons down after a fix.
    let _ = std::fs::remove_file(paths.maintenance_marker());
    let cmdline = std::fs::read_to_string(paths.proc.join("cmdline")).unwrap_or_default();
    let cfg = match find_config(paths, &cmdline, env.mounter) {
        Ok(Some(l)) => {
            tracing::info!(source = ?l.source, "node config loaded");
            l.config
        }
        Ok(None) => {
            let reason = format!(
                "no node config ({} absent, no {VOLUME_LABEL} volume, no cairn.config= on the kernel command line)",
                paths.state.join("node.toml").display()
            );
            return maintenance(paths, &console, Outcome::NoConfig { reason });
        }
        Err(e) => {
            let reason = format!("invalid node config: {e}");
            return maintenance(paths, &console, Outcome::NoConfig { reason });
        }
    };
    match apply(paths, env, &cfg, &console) {
        Ok(drives) => {
            console.say(&format!(
                "{} configured: {} drive(s) [{}], S3 on {}, admin on {}",
                cfg.hostname,
                drives.len(),
                drives
                    .iter()
                    .map(|d| d.path.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                cfg.s3.listen,
                cfg.admin.listen
            ));
            Outcome::Ready { drives }
        }
        Err(e) => maintenance(
            paths,
            &console,
            Outcome::Failed {
                reason: e.to_string(),
            },
        ),
    }
}

fn maintenance(paths: &Paths, console: &Console, outcome: Outcome) -> Outcome {
    let reason = match &outcome {
        Outcome::NoConfig { reason } | Outcome::Failed { reason } => reason.clone(),
        Outcome::Ready { .. } => return outcome,
    };
    console.say(&format!("maintenance mode: {reason}"));
    if let Err(e) = write_file(
        &paths.maintenance_marker(),
        format!("{reason}\n").as_bytes(),
        0o644,
    ) {
        // Without the marker the daemons would start on stale files: say so loudly.
        console.say(&format!("cannot write the maintenance marker: {e}"));
    }
    outcome
}

fn apply(
    paths: &Paths,
    env: &Env<'_>,
    cfg: &NodeConfig,
    console: &Console,
) -> Result<Vec<ClaimedDrive>, NodeosError> {
    system::set_hostname(&paths.proc, &cfg.hostname)?;

    let steps = crate::net::plan(&cfg.network, &paths.sys)?;
    let report = env.network.apply(&steps, &paths.run)?;
    for l in &report.dhcp_failed {
        console.say(&format!(
            "DHCP on {l} got no lease; still trying in the background"
        ));
    }
    let dns = if cfg.network.dns.is_empty() {
        report.dhcp_dns.clone()
    } else {
        cfg.network.dns.clone()
    };
    system::write_resolv_conf(&paths.run, &dns)?;

    system::apply_sysctls(&paths.proc, &cfg.sysctl)?;
    let hp = system::apply_hugepages(&paths.proc, &cfg.hugepages, env.mounter)?;
    if hp.allocated < hp.requested {
        console.say(&format!(
            "only {} of {} hugepages could be allocated",
            hp.allocated, hp.requested
        ));
    }
    if cfg.datapath.backend == Backend::Nvme && hp.requested == 0 {
        tracing::warn!("datapath.backend = \"nvme\" with hugepages.count = 0: the userspace driver needs hugepages for DMA");
    }

    let json = drives::drives_json_path(&paths.run);
    let previous = drives::read_drives_json(&json);
    let claimed = drives::claim(paths, &cfg.drives, cfg.datapath.backend, &previous)?;
    if cfg.datapath.backend == Backend::Nvme && !claimed.is_empty() {
        bind_all(paths, env, &claimed)?;
    }
    let text = serde_json::to_vec_pretty(&claimed).map_err(|e| NodeosError::Invalid {
        what: json.display().to_string(),
        message: e.to_string(),
    })?;
    write_file(&json, &text, 0o644)?;
    daemons::write_env_files(paths, cfg, &claimed)?;
    Ok(claimed)
}

fn bind_all(paths: &Paths, env: &Env<'_>, claimed: &[ClaimedDrive]) -> Result<(), NodeosError> {
    let driver_dir = paths.sys.join("bus/pci/drivers").join(vfio::VFIO_DRIVER);
    if !driver_dir.exists() {
        if let Some(mp) = &env.modprobe {
            match std::process::Command::new(mp)
                .arg(vfio::VFIO_DRIVER)
                .status()
            {
                Ok(s) if s.success() => {}
                Ok(s) => tracing::warn!("{} {}: {s}", mp.display(), vfio::VFIO_DRIVER),
                Err(e) => tracing::warn!("{} {}: {e}", mp.display(), vfio::VFIO_DRIVER),
            }
        }
    }
    for d in claimed {
        let b = vfio::bind(&paths.sys, &d.path)?;
        vfio::verify(&paths.sys, &d.path)?;
        tracing::info!(
            pci = %b.pci_address,
            group = %b.iommu_group,
            from = ?b.previous_driver,
            "NVMe controller on vfio-pci"
        );
    }
    Ok(())
}
