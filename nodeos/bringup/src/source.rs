//! Where the node config comes from (state partition, `CAIRNCFG` volume, kernel command
//! line), including mounting the volume and persisting what it held.

use crate::{NodeosError, Paths};
use cairn_nodeconfig::{ConfigSource, Loaded, Sources, VOLUME_LABEL};
use std::path::Path;

/// The mounts nodeos makes. A trait so tests stand in directories for devices.
pub trait Mounter {
    /// Mount the config volume `device` read-only at `target` (FAT, else ISO 9660).
    fn mount_config_volume(&self, device: &Path, target: &Path) -> Result<(), NodeosError>;
    fn unmount(&self, target: &Path) -> Result<(), NodeosError>;
    /// Mount hugetlbfs at `target`.
    fn mount_hugetlbfs(&self, target: &Path) -> Result<(), NodeosError>;
}

/// Real mounts through mount(2).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemMounter;

impl Mounter for SystemMounter {
    fn mount_config_volume(&self, device: &Path, target: &Path) -> Result<(), NodeosError> {
        use nix::mount::{mount, MsFlags};
        std::fs::create_dir_all(target).map_err(crate::io_err(target))?;
        let flags =
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        let mut errors = Vec::new();
        for fstype in ["vfat", "iso9660"] {
            match mount(Some(device), target, Some(fstype), flags, None::<&str>) {
                Ok(()) => return Ok(()),
                Err(e) => errors.push(format!("{fstype}: {e}")),
            }
        }
        Err(NodeosError::Mount {
            what: format!("{} on {}", device.display(), target.display()),
            message: errors.join("; "),
        })
    }

    fn unmount(&self, target: &Path) -> Result<(), NodeosError> {
        nix::mount::umount(target).map_err(|e| NodeosError::Mount {
            what: format!("unmount {}", target.display()),
            message: e.to_string(),
        })
    }

    fn mount_hugetlbfs(&self, target: &Path) -> Result<(), NodeosError> {
        use nix::mount::{mount, MsFlags};
        std::fs::create_dir_all(target).map_err(crate::io_err(target))?;
        mount(
            Some("hugetlbfs"),
            target,
            Some("hugetlbfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("pagesize=2M"),
        )
        .map_err(|e| NodeosError::Mount {
            what: format!("hugetlbfs on {}", target.display()),
            message: e.to_string(),
        })
    }
}

/// Find the node config, first match wins (README: state file, `CAIRNCFG` volume, kernel
/// command line). A config found on the volume is copied to the state partition so later
/// boots use it without the volume. `Ok(None)`: no source holds one.
pub fn find_config(
    paths: &Paths,
    cmdline: &str,
    mounter: &dyn Mounter,
) -> Result<Option<Loaded>, NodeosError> {
    let state_file = paths.state.join("node.toml");
    let volume = paths.by_label().join(VOLUME_LABEL);
    let mut sources = Sources {
        state_file: state_file.clone(),
        volume_dir: None,
        cmdline: cmdline.to_string(),
    };
    // The volume is mounted only when the state file does not decide already.
    if state_file.exists() || !volume.exists() {
        return Ok(cairn_nodeconfig::load(&sources)?);
    }
    let mnt = paths.run.join("config-volume");
    mounter.mount_config_volume(&volume, &mnt)?;
    sources.volume_dir = Some(mnt.clone());
    let loaded = cairn_nodeconfig::load(&sources);
    // Copy before unmounting, and unmount whatever happened: a volume left mounted would
    // be mistaken for a disk in use.
    let persisted = match &loaded {
        Ok(Some(l)) if matches!(l.source, ConfigSource::Volume(_)) => {
            Some(cairn_nodeconfig::persist(&l.text, &state_file))
        }
        _ => None,
    };
    if let Err(e) = mounter.unmount(&mnt) {
        tracing::warn!("{e}");
    }
    let loaded = loaded?;
    match persisted {
        Some(Ok(())) => tracing::info!(
            "copied the {VOLUME_LABEL} config to {}",
            state_file.display()
        ),
        // The config is good for this boot; the operator learns the copy failed.
        Some(Err(e)) => tracing::warn!("could not keep the {VOLUME_LABEL} config: {e}"),
        None => {}
    }
    Ok(loaded)
}
