//! `datapathd`: the node's data plane process.
//!
//! It owns the drives. Each drive's [`ChunkStore`](cairn_chunkstore::ChunkStore) is
//! owned by exactly one poll-mode reactor thread (drives are dealt round-robin);
//! reactors share nothing and receive work as messages on their mailbox. The chunk
//! service (tokio, TCP) decodes request batches, splits them by drive, sends each
//! part to the owning reactor and writes the answers back in request order. See
//! datapath-spdk/README.md for the concurrency model.
//!
//! What it must never do: acknowledge a write that is not durable (the reactor
//! answers only after the chunk store's group commit completed); let one bad
//! connection or one failed drive take down the daemon (the connection is closed,
//! the drive is marked Failed and answers `DriveFailed`); serve bytes that did not
//! verify.

mod config;
mod drive;
mod reactor;
mod server;
mod sys;
mod turn;

pub use config::{parse_size, Backend, Config, CoreList, DriveSpec, PollMode};

use cairn_blockdev::{BlockDevice, RamDevice, UringDevice};
use cairn_chunkstore::{ChunkStore, FormatParams, Probe};
use std::sync::Arc;

/// Errors of datapathd.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("drive {index} ({path}): {source}")]
    Drive {
        index: usize,
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("drive {index} ({path}): {msg}")]
    DriveSetup {
        index: usize,
        path: String,
        msg: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Result of this crate.
pub type Result<T, E = DatapathError> = std::result::Result<T, E>;

/// Opens (formatting blank ones when allowed) every drive of the configuration.
///
/// A drive that is damaged or unreachable (its device does not open, its
/// superblock is unreadable, recovery fails) is served as *failed*, saying why,
/// and the daemon runs on with the others: one bad disk must not take a node's
/// other drives offline (if none opens, the start fails). So is a drive of another
/// cluster or another node, or given in another slot than it was formatted for (a
/// cloned or moved disk): refused, never guessed at. Only a blank drive with `--no-format` still
/// stops the start.
/// The node id kept in `path`, created at random on first start.
fn node_id_from(path: &std::path::Path) -> Result<uuid::Uuid> {
    let fresh = uuid::Uuid::new_v4();
    cairn_sysutil::create_once(path, format!("{fresh}\n").as_bytes(), Some(0o600))?;
    let text = std::fs::read_to_string(path)?;
    text.trim()
        .parse()
        .map_err(|e| DatapathError::Config(format!("{}: not a node id: {e}", path.display())))
}

fn open_drives(cfg: &Config) -> Result<Vec<reactor::DriveSlot>> {
    let mut out = Vec::new();
    // Brings each NVMe controller up once, however many of its namespaces are drives.
    let mut nvme = cairn_nvme::DriveOpener::new("/sys", cairn_nvme::DriverConfig::default());
    for (index, d) in cfg.drives.iter().enumerate() {
        let path = d.path.display().to_string();
        let derr = |source: Box<dyn std::error::Error + Send + Sync>| DatapathError::Drive {
            index,
            path: path.clone(),
            source,
        };
        let failed = |why: String| {
            tracing::error!(drive = index, %path, "drive failed at open: {why}");
            reactor::DriveSlot::Failed {
                name: format!("{}:{path}", cfg.backend.name()),
                backend: cfg.backend.name(),
                location: path.clone(),
                why,
            }
        };
        let opened: std::result::Result<Arc<dyn BlockDevice>, String> = match cfg.backend {
            Backend::Ram => Ok(Arc::new(RamDevice::new(d.size.unwrap_or(256 << 20)))),
            Backend::Uring => UringDevice::open(&d.path, d.size)
                .map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
                .map_err(|e| e.to_string()),
            Backend::Nvme => nvme
                .open(&d.nvme_spec())
                .map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
                .map_err(|e| e.to_string()),
        };
        let dev = match opened {
            Ok(dev) => dev,
            Err(why) => {
                out.push(failed(format!("device does not open: {why}")));
                continue;
            }
        };
        let probe = match ChunkStore::probe(dev.as_ref()) {
            Ok(p) => p,
            Err(e) => {
                out.push(failed(format!("superblock unreadable: {e}")));
                continue;
            }
        };
        let store = match probe {
            Probe::Blank => {
                if !cfg.format {
                    return Err(DatapathError::DriveSetup {
                        index,
                        path,
                        msg: "not formatted (and --no-format given)".into(),
                    });
                }
                tracing::info!(drive = index, %path, "formatting blank drive");
                let params = FormatParams {
                    drive_uuid: *uuid::Uuid::new_v4().as_bytes(),
                    node_id: *cfg.node_id.as_bytes(),
                    cluster_id: *cfg.cluster_id.as_bytes(),
                    drive_index: index as u16,
                    segment_size: cfg.segment_size,
                };
                ChunkStore::format(dev.as_ref(), &params).map_err(|e| derr(Box::new(e)))?
            }
            Probe::Foreign => {
                // Never formatted over: it may be a Cairn drive with a damaged
                // superblock, whose chunks other drives' repair will rebuild.
                out.push(failed(
                    "holds a foreign or damaged superblock; not touched".into(),
                ));
                continue;
            }
            Probe::Cairn(sb) => {
                // Another cluster's disk, or one given in another slot (a cloned
                // or moved disk): refused, not touched, and the others served.
                if sb.cluster_id != *cfg.cluster_id.as_bytes() {
                    out.push(failed(format!(
                        "belongs to cluster {}, not {}",
                        uuid::Uuid::from_bytes(sb.cluster_id),
                        cfg.cluster_id
                    )));
                    continue;
                }
                // Another node's drive (same cluster or none): its chunks are not
                // this node's, and its collector would take them all as garbage.
                if sb.node_id != [0; 16]
                    && !cfg.node_id.is_nil()
                    && sb.node_id != *cfg.node_id.as_bytes()
                {
                    out.push(failed(format!(
                        "belongs to node {}, not this node ({})",
                        uuid::Uuid::from_bytes(sb.node_id),
                        cfg.node_id
                    )));
                    continue;
                }
                if sb.drive_index as usize != index {
                    out.push(failed(format!(
                        "was formatted as drive {}; give drives in their original order",
                        sb.drive_index
                    )));
                    continue;
                }
                match ChunkStore::open(dev.as_ref()) {
                    Ok(store) => store,
                    Err(e) => {
                        out.push(failed(format!("does not open: {e}")));
                        continue;
                    }
                }
            }
        };
        let r = store.report();
        tracing::info!(drive = index, device = %dev.info().name, chunks = r.chunks, free_segments = r.free_segments, "drive open");
        out.push(reactor::DriveSlot::Ready(dev, Box::new(store)));
    }
    // Nothing to serve at all is a setup problem, not a bad disk: say so and stop.
    let failed: Vec<String> = out
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match d {
            reactor::DriveSlot::Failed { location, why, .. } => {
                Some(format!("drive {i} ({location}): {why}"))
            }
            reactor::DriveSlot::Ready(..) => None,
        })
        .collect();
    if failed.len() == out.len() {
        return Err(DatapathError::Config(format!(
            "no drive could be opened: {}",
            failed.join("; ")
        )));
    }
    Ok(out)
}

/// Runs datapathd until SIGTERM/SIGINT: opens the drives, starts the reactors and
/// the chunk service, and on a signal drains in-flight batches and closes the
/// stores cleanly.
pub fn run(mut cfg: Config) -> Result<()> {
    if cfg.drives.is_empty() {
        return Err(DatapathError::Config("no --drive given".into()));
    }
    if let Some(f) = &cfg.node_id_file {
        cfg.node_id = node_id_from(f)?;
    }
    let key = server::local_key(&cfg)?;
    let drives = open_drives(&cfg)?;
    let reactors = reactor::start(drives, &cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.net_threads.max(1))
        .thread_name("chunk-net")
        .enable_all()
        .build()?;
    let res = rt.block_on(server::serve(&cfg, reactors.router(), key));
    drop(rt);
    reactors.shutdown();
    tracing::info!("datapathd stopped");
    res
}
