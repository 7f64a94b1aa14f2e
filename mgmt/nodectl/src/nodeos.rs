//! The node OS commands: `nodectl flash`, `nodectl node update|rollback|slots|mark-good`.
//! They run on the node itself (or, for `flash`, on any Linux host) and act on disks and
//! the ESP directly through cairn-slots; they do not go through mgmtd.

use crate::{io_err, NodectlError};
use cairn_slots::bundle::UpdateTarget;
use cairn_slots::{booted_slot, Bundle, Esp, HostPaths, PartitionPath, Slot};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Where the ESP is mounted on a node.
const ESP: &str = "/efi";
/// Slot partitions by GPT label.
const BY_PARTLABEL: &str = "/dev/disk/by-partlabel";
/// Downloads land on the state partition: the root is read-only and /tmp is RAM.
const DOWNLOAD_DIR: &str = "/var/lib/cairn/update";
const CMDLINE: &str = "/proc/cmdline";
/// Held for the duration of an update or rollback, so two cannot interleave.
const LOCK: &str = "/run/cairn/slots.lock";

#[derive(Args, Debug)]
pub struct FlashArgs {
    /// The raw disk image (cairn.img).
    pub image: PathBuf,
    /// The target disk, e.g. /dev/sdb (everything on it is overwritten).
    pub device: PathBuf,
    /// Write even if the disk is mounted, used as swap, or holds the running system.
    #[arg(long)]
    pub force: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// An update bundle (cairn.update): a file, or an http:// URL.
    pub bundle: String,
    /// Arm the new slot but do not reboot into it.
    #[arg(long)]
    pub no_reboot: bool,
    /// Where the ESP is mounted.
    #[arg(long, default_value = ESP)]
    pub esp: PathBuf,
}

#[derive(Args, Debug)]
pub struct RollbackArgs {
    /// Point the next boot at the other slot but do not reboot.
    #[arg(long)]
    pub no_reboot: bool,
    #[arg(long, default_value = ESP)]
    pub esp: PathBuf,
}

#[derive(Args, Debug)]
pub struct SlotsArgs {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value = ESP)]
    pub esp: PathBuf,
}

#[derive(Args, Debug)]
pub struct MarkGoodArgs {
    #[arg(long, default_value = ESP)]
    pub esp: PathBuf,
}

fn bar(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:>12} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Ask on the terminal; anything but y/yes is no. Without a terminal, refuse: a script
/// must say --yes.
fn confirm(question: &str) -> Result<bool, NodectlError> {
    if !std::io::stdin().is_terminal() {
        return Err(NodectlError::Usage(
            "stdin is not a terminal: pass --yes to confirm".into(),
        ));
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush().ok();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(io_err("read confirmation"))?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "YES"))
}

/// `nodectl flash IMAGE DEVICE`.
pub fn flash(a: FlashArgs) -> Result<(), NodectlError> {
    let host = HostPaths::system();
    if !a.force {
        cairn_slots::flash::check_target(&host, &a.device)?;
    }
    let len = std::fs::metadata(&a.image)
        .map_err(io_err(format!("read {}", a.image.display())))?
        .len();
    if !a.yes {
        let q = format!(
            "Write {} ({}) to {}? Everything on {} is lost.",
            a.image.display(),
            human(len),
            a.device.display(),
            a.device.display()
        );
        if !confirm(&q)? {
            return Err(NodectlError::Usage("not confirmed; nothing written".into()));
        }
    }
    let pb = bar(len, "flashing");
    let r = cairn_slots::flash(&a.image, &a.device, &host, a.force, &pb);
    pb.finish_and_clear();
    let r = r?;
    println!(
        "wrote {} ({}) to {}, read back and verified (sha256 {})",
        r.bytes,
        human(r.bytes),
        r.device,
        r.sha256
    );
    Ok(())
}

fn lock() -> Result<nix::fcntl::Flock<std::fs::File>, NodectlError> {
    let p = Path::new(LOCK);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(io_err(format!("create {}", d.display())))?;
    }
    let f = std::fs::File::create(p).map_err(io_err(format!("open {LOCK}")))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| NodectlError::Usage("another update or rollback is running".into()))
}

/// Fetch an http:// bundle to the state partition.
async fn download(url: &str) -> Result<PathBuf, NodectlError> {
    if url.starts_with("https://") {
        return Err(NodectlError::Usage(
            "this nodectl has no TLS: fetch the bundle (curl -o cairn.update URL) and pass the file"
                .into(),
        ));
    }
    std::fs::create_dir_all(DOWNLOAD_DIR).map_err(io_err(format!("create {DOWNLOAD_DIR}")))?;
    let path = Path::new(DOWNLOAD_DIR).join("download.update");
    let mut resp = reqwest::get(url)
        .await
        .map_err(|e| NodectlError::Usage(format!("{url}: {e}")))?;
    if !resp.status().is_success() {
        return Err(NodectlError::Usage(format!("{url}: {}", resp.status())));
    }
    let pb = bar(resp.content_length().unwrap_or(0), "download");
    let mut f =
        std::fs::File::create(&path).map_err(io_err(format!("create {}", path.display())))?;
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| NodectlError::Usage(format!("{url}: {e}")))?
    {
        f.write_all(&chunk)
            .map_err(io_err(format!("write {}", path.display())))?;
        pb.inc(chunk.len() as u64);
    }
    f.sync_all()
        .map_err(io_err(format!("write {}", path.display())))?;
    pb.finish_and_clear();
    Ok(path)
}

/// `nodectl node update FILE|URL`.
pub async fn update(a: UpdateArgs) -> Result<(), NodectlError> {
    let _lock = lock()?;
    let booted = booted_slot(Path::new(CMDLINE))?;
    let file = if a.bundle.starts_with("http://") || a.bundle.starts_with("https://") {
        download(&a.bundle).await?
    } else {
        PathBuf::from(&a.bundle)
    };
    let size = std::fs::metadata(&file)
        .map_err(io_err(format!("read {}", file.display())))?
        .len();
    let pb = bar(size, "verifying");
    let bundle = Bundle::open(&file, &pb);
    pb.finish_and_clear();
    let bundle = bundle?;
    let target = booted.other();
    println!(
        "bundle {} verified: version {}; writing slot {target} (booted: {booted})",
        file.display(),
        bundle.manifest.version
    );
    let esp = Esp::new(&a.esp);
    let part = PartitionPath(Path::new(BY_PARTLABEL).join(target.partlabel()));
    let pb = bar(bundle.size("root.erofs"), "writing");
    let r = cairn_slots::apply_update(
        &bundle,
        UpdateTarget {
            esp: &esp,
            booted,
            partition: &part,
        },
        &pb,
    );
    pb.finish_and_clear();
    let r = r?;
    println!(
        "slot {} holds {} ({} read back and verified); armed {} with {} boot tries",
        r.slot,
        r.version,
        human(r.root_bytes),
        r.entry,
        cairn_slots::esp::TRIES
    );
    reboot_unless(a.no_reboot)
}

/// `nodectl node rollback`.
pub fn rollback(a: RollbackArgs) -> Result<(), NodectlError> {
    let _lock = lock()?;
    let booted = booted_slot(Path::new(CMDLINE))?;
    let esp = Esp::new(&a.esp);
    let target = esp.rollback(booted)?;
    let info = esp.slot_info(target)?;
    println!(
        "next boot: slot {target} ({})",
        info.version.as_deref().unwrap_or("unknown version")
    );
    reboot_unless(a.no_reboot)
}

/// `nodectl node mark-good`: what systemd-bless-boot does after boot-complete.target, by
/// hand (for a node whose firmware does not pass the boot counter to the OS).
pub fn mark_good(a: MarkGoodArgs) -> Result<(), NodectlError> {
    let booted = booted_slot(Path::new(CMDLINE))?;
    if Esp::new(&a.esp).mark_good(booted)? {
        println!("slot {booted} marked good");
    } else {
        println!("slot {booted} was already good");
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct SlotsView {
    booted: Slot,
    next: Option<Slot>,
    inactive: Slot,
    slots: Vec<cairn_slots::SlotInfo>,
}

/// `nodectl node slots`.
pub fn slots(a: SlotsArgs) -> Result<(), NodectlError> {
    let booted = booted_slot(Path::new(CMDLINE))?;
    let esp = Esp::new(&a.esp);
    let view = SlotsView {
        booted,
        next: esp.next_boot()?,
        inactive: booted.other(),
        slots: Slot::ALL
            .iter()
            .map(|s| esp.slot_info(*s))
            .collect::<Result<_, _>>()?,
    };
    if a.json {
        let text = serde_json::to_string_pretty(&view)
            .map_err(|e| NodectlError::Usage(format!("json: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    println!(
        "{:<5} {:<16} {:<26} {:<20} NOTE",
        "SLOT", "VERSION", "STATE", "ENTRY"
    );
    for s in &view.slots {
        let mut note = Vec::new();
        if s.slot == booted {
            note.push("booted");
        }
        if view.next == Some(s.slot) {
            note.push("next boot");
        }
        println!(
            "{:<5} {:<16} {:<26} {:<20} {}",
            s.slot.to_string(),
            s.version.as_deref().unwrap_or("-"),
            s.state
                .map(|st| st.to_string())
                .unwrap_or_else(|| "no entry".into()),
            s.entry.as_deref().unwrap_or("-"),
            note.join(", ")
        );
    }
    Ok(())
}

fn reboot_unless(no_reboot: bool) -> Result<(), NodectlError> {
    if no_reboot {
        println!("not rebooting (--no-reboot); the change takes effect at the next boot");
        return Ok(());
    }
    println!("rebooting");
    let status = std::process::Command::new("systemctl")
        .arg("reboot")
        .status()
        .map_err(io_err("run systemctl reboot"))?;
    if status.success() {
        Ok(())
    } else {
        Err(NodectlError::Usage(format!(
            "systemctl reboot: {status}; reboot the node to boot the new slot"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }
}
