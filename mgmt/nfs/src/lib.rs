//! The NFSv3 front end: a tenant's exported bucket as a file tree, its objects
//! the files — the same data S3 serves, not a copy.
//!
//! - **Exports** ([`exports`]): a bucket whose record carries an NFS export is
//!   mounted as `/<tenant>/<bucket>` by the client networks it lists; a
//!   connection from an address no export allows is closed at once, and a
//!   handle of an export the client may not reach is refused.
//! - **Paths** ([`names`]): `/` in keys makes directories, implied by the keys
//!   under them, or kept by an empty marker object `dir/` (`mkdir`).
//! - **Handles** ([`handle`]): made from the export and the path, so they hold
//!   across restarts and on every node; a rename gives a file a new handle.
//! - **Writes** ([`draft`]): held per file until COMMIT (or a stable write, a
//!   read, 64 MiB of them, 5 s idle), then the object is rebuilt copy-on-write
//!   and committed in one step; S3 sees a file's bytes as of its last flush.
//!   The write verifier is the process's, so a client resends what a crash
//!   lost before its COMMIT.
//!
//! - **Calls** ([`fs`]: lookups, attributes, reads; `listing`: directory
//!   reads; `changes`: writes, creations, removals, renames).
//!
//! The protocol is `nfs3_server`'s (vendored with patches: see
//! `mgmt/vendor/nfs3_server/PATCHES.md`); MOUNT and NFS share one port.

pub mod attrs;
mod changes;
pub mod draft;
pub mod exports;
pub mod fs;
pub mod handle;
mod listing;
pub mod names;
mod readahead;

use crate::draft::{Drafts, IDLE_FLUSH};
use crate::exports::Exports;
use crate::fs::CairnFs;
use crate::names::Resolver;
use cairn_meta::MetaError;
use cairn_objects::{ObjectError, ObjectStore};
use nfs3_server::nfs3_types::nfs3::nfsstat3;
use nfs3_server::tcp::{NFSTcp, NFSTcpListener};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest file (what FSINFO advertises, 128 GiB): a write past it is
/// refused (`EFBIG`) before anything is stored.
pub const MAX_FILE_SIZE: u64 = 128 << 30;
/// The most one READ returns (FSINFO's `rtmax`).
pub const MAX_READ: u64 = 1 << 20;
/// The generation in every handle: fixed, so handles outlive the process (the
/// NFS layer would otherwise make one from its start time).
const GENERATION: u64 = 0x6361_6972_6e00_0001;
/// Directories whose change time this node remembers.
const CHANGED_MAX: usize = 65_536;

#[derive(Debug, thiserror::Error)]
pub enum NfsError {
    #[error("NFS listener: {0}")]
    Listener(std::io::Error),
}

/// What every connection's file system shares.
pub(crate) struct Shared {
    pub(crate) store: Arc<ObjectStore>,
    pub(crate) exports: Exports,
    pub(crate) names: Resolver,
    pub(crate) drafts: Drafts,
    pub(crate) readahead: readahead::ReadAhead,
    /// When this node last changed a directory (created, removed or renamed
    /// in it), by (export, path): its modification time, so clients see the
    /// change.
    changed: Mutex<HashMap<(u64, String), i64>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn touch(&self, export: u64, dir: &str) {
        let mut c = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        if c.len() >= CHANGED_MAX {
            c.clear();
        }
        c.insert((export, dir.to_string()), cairn_meta::now_ms());
    }

    pub(crate) fn changed_ms(&self, export: u64, dir: &str) -> i64 {
        let c = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        c.get(&(export, dir.to_string())).copied().unwrap_or(0)
    }
}

/// The NFS status for an object store error.
pub(crate) fn status(e: &ObjectError) -> nfsstat3 {
    match e {
        ObjectError::Meta(MetaError::NoSuchKey(_) | MetaError::NoSuchBucket(_)) => {
            nfsstat3::NFS3ERR_NOENT
        }
        ObjectError::Meta(MetaError::QuotaExceeded(_)) => nfsstat3::NFS3ERR_DQUOT,
        ObjectError::Meta(MetaError::PreconditionFailed) => nfsstat3::NFS3ERR_JUKEBOX,
        ObjectError::Meta(MetaError::Unavailable(_))
        | ObjectError::Unavailable(_)
        | ObjectError::OutcomeUnknown => nfsstat3::NFS3ERR_JUKEBOX,
        ObjectError::InsufficientStorage => nfsstat3::NFS3ERR_NOSPC,
        ObjectError::AccessDenied => nfsstat3::NFS3ERR_ACCES,
        ObjectError::TooLarge { .. } => nfsstat3::NFS3ERR_FBIG,
        _ => nfsstat3::NFS3ERR_IO,
    }
}

/// A running NFS endpoint.
#[derive(Debug)]
pub struct NfsServer {
    pub addr: SocketAddr,
}

impl NfsServer {
    /// Serves on `listener` (MOUNT and NFS on the one port) until the process
    /// ends; writes left in drafts are flushed after [`IDLE_FLUSH`].
    pub fn serve(
        listener: tokio::net::TcpListener,
        store: Arc<ObjectStore>,
    ) -> Result<NfsServer, NfsError> {
        let addr = listener.local_addr().map_err(NfsError::Listener)?;
        let shared = Arc::new(Shared {
            exports: Exports::new(store.meta().clone()),
            store,
            names: Resolver::default(),
            drafts: Drafts::default(),
            readahead: readahead::ReadAhead::default(),
            changed: Mutex::new(HashMap::new()),
        });
        let first = CairnFs {
            shared: shared.clone(),
            client: addr.ip(),
        };
        let mut listener = NFSTcpListener::from_listener(listener, first, Some(GENERATION))
            .map_err(NfsError::Listener)?;
        let per_client = shared.clone();
        listener.with_connection_fs(Arc::new(move |peer: SocketAddr| {
            per_client.exports.any_allows(peer.ip()).then(|| {
                Arc::new(CairnFs {
                    shared: per_client.clone(),
                    client: peer.ip(),
                })
            })
        }));
        tokio::spawn(async move {
            if let Err(e) = listener.handle_forever().await {
                tracing::error!("NFS server stopped: {e}");
            }
        });
        tokio::spawn(flush_idle(shared));
        tracing::info!("NFS (MOUNT and NFSv3) on {addr}");
        Ok(NfsServer { addr })
    }
}

/// Flushes drafts that have writes and saw none for [`IDLE_FLUSH`] (a client
/// that never sends COMMIT still has its bytes stored), and forgets drafts
/// with nothing to flush.
async fn flush_idle(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        for ((export, key), draft) in shared.drafts.all() {
            let Ok(mut d) = draft.try_lock() else {
                continue;
            };
            if !d.dirty() || d.touched.elapsed() < IDLE_FLUSH {
                continue;
            }
            let Some(ex) = shared.exports.get(export) else {
                continue;
            };
            let held = d.held();
            let r = d.flush(&shared.store, &ex, &key).await;
            shared.drafts.sub(held);
            if let Err(e) = r {
                tracing::warn!(
                    "NFS idle flush of {}/{key} failed (its writes dropped): {e}",
                    ex.path
                );
            }
        }
        shared.drafts.forget_idle(IDLE_FLUSH * 6);
    }
}
