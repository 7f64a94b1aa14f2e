//! The node's own BMC, in-band (`/dev/ipmi0`, cairn-bmc's `LocalBmc`): its
//! identity logged at start, an "OS boot completed" event in its SEL once the
//! node serves, a "Drive Fault" event for each drive of this node that fails,
//! and its watchdog armed and kicked while mgmtd runs, so a hung mgmtd gets the
//! node reset (a clean stop disarms it first). Absent device (a VM without a
//! BMC, a development machine): nothing of this runs, and mgmtd says so once.

use crate::admin::LocalDatapath;
use cairn_bmc::LocalBmc;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How often the watchdog is kicked and the drives looked at.
const TICK: Duration = Duration::from_secs(5);

/// The node's BMC, opened if the device is there.
pub(crate) async fn open(device: &Path) -> Option<Arc<LocalBmc>> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(device) {
        Err(_) => {
            tracing::info!(device = %device.display(), "no local BMC device: no watchdog, no SEL events");
            return None;
        }
        // The IPMI driver's device, nothing else (opening a FIFO would block).
        Ok(m) if !m.file_type().is_char_device() => {
            tracing::warn!(device = %device.display(), "not a character device: no local BMC");
            return None;
        }
        Ok(_) => {}
    }
    let path = device.to_path_buf();
    let opened = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::task::spawn_blocking(move || LocalBmc::open(&path)),
    )
    .await;
    let bmc = match opened {
        Ok(Ok(Ok(b))) => Arc::new(b),
        Ok(Ok(Err(e))) => {
            tracing::warn!("local BMC: {e}");
            return None;
        }
        _ => {
            tracing::warn!(device = %device.display(), "local BMC: the device did not open within 5 s");
            return None;
        }
    };
    match bmc.identity().await {
        Ok(id) => tracing::info!(
            device = %device.display(),
            manufacturer = id.manufacturer_id,
            product = id.product_id,
            firmware = %id.firmware,
            ipmi = %id.ipmi_version,
            "local BMC"
        ),
        Err(e) => {
            tracing::warn!("local BMC does not answer: {e}");
            return None;
        }
    }
    Some(bmc)
}

/// Arms the watchdog (unless `watchdog` is zero) and keeps it kicked; writes
/// the start event and drive faults to the SEL. Runs until `stop`, then
/// disarms the watchdog.
pub(crate) async fn run(
    bmc: Arc<LocalBmc>,
    watchdog: Duration,
    local: LocalDatapath,
    stop: impl std::future::Future<Output = ()>,
) {
    if !watchdog.is_zero() {
        match bmc.arm_watchdog(watchdog).await {
            Ok(()) => tracing::info!(
                timeout_s = watchdog.as_secs(),
                "BMC watchdog armed: the node is reset if mgmtd stops answering"
            ),
            Err(e) => tracing::warn!("BMC watchdog not armed: {e}"),
        }
    }
    if let Err(e) = bmc.log_started().await {
        tracing::warn!("BMC event log: {e}");
    }
    let mut failed: HashSet<u16> = HashSet::new();
    let mut tick = tokio::time::interval(TICK);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        if !watchdog.is_zero() {
            if let Err(e) = bmc.kick().await {
                tracing::warn!("BMC watchdog kick: {e}");
            }
        }
        // Bounded: a datapathd that hangs must not hold the kicks back (the
        // watchdog is mgmtd's, not datapathd's).
        let Ok(Ok(drives)) = tokio::time::timeout(TICK, local.drives()).await else {
            continue;
        };
        for d in drives {
            if d.state == "healthy" {
                failed.remove(&d.index);
            } else if failed.insert(d.index) {
                tracing::error!(drive = d.index, device = %d.device, reason = %d.reason, "drive failed: recorded in the BMC's event log");
                let slot = u8::try_from(d.index).unwrap_or(u8::MAX);
                if let Err(e) = bmc.log_drive_fault(slot).await {
                    tracing::warn!("BMC event log: {e}");
                }
            }
        }
    }
    if !watchdog.is_zero() {
        match bmc.disarm_watchdog().await {
            Ok(()) => tracing::info!("BMC watchdog disarmed (clean stop)"),
            Err(e) => tracing::warn!("BMC watchdog not disarmed: {e}"),
        }
    }
}
