//! The cluster's master key on this node (`<data>/master.key`, 0600): checked at
//! start, and handed to the object store once the node is a member.
//!
//! The node that creates a cluster makes the key (`Cluster::init`); a joiner
//! receives it in its join reply. A node without one whose metadata holds
//! tenants' keys refuses to start (a new key could not open them, and making one
//! would hide the loss); nothing here ever overwrites a key file.

use crate::MgmtError;
use cairn_envelope::{KeyProvider, MasterKey};
use cairn_meta::MetaStore;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) fn path(data: &Path) -> PathBuf {
    data.join("master.key")
}

fn err(e: impl std::fmt::Display) -> MgmtError {
    MgmtError::Config(e.to_string())
}

/// At start: this node's master key if it has one, checked against every
/// tenant key in the metadata; none if it has none and nothing needs one yet.
pub(crate) fn at_start(path: &Path, meta: &MetaStore) -> Result<Option<MasterKey>, MgmtError> {
    let wrapped = meta.tenant_keys()?;
    if !MasterKey::exists(path) {
        return match wrapped.first() {
            None => Ok(None),
            Some((_, k)) => Err(err(format!(
                "master key {} is missing, and the metadata holds {} tenant key(s) wrapped by \
                 master key {}: restore that file (from a backup, or another member of the \
                 cluster) — without it the encrypted data cannot be read",
                path.display(),
                wrapped.len(),
                k.master
            ))),
        };
    }
    let key = MasterKey::load(path).map_err(err)?;
    if let Some((tenant, k)) = wrapped.iter().find(|(_, k)| k.master != key.fingerprint()) {
        return Err(err(format!(
            "master key {} (fingerprint {}) is not the one tenant {tenant:016x}'s key is \
             wrapped by (fingerprint {}): put the right file back (nothing was changed)",
            path.display(),
            key.fingerprint(),
            k.master
        )));
    }
    Ok(Some(key))
}

/// Once a member: the master key. A node alone without one makes it; a member
/// without one waits for its join to deliver it, and makes one only when the
/// join is long over and no tenant key exists (a cluster made before Cairn
/// encrypted: copy one member's file to the others before tenants are made).
pub(crate) async fn for_member(
    path: &Path,
    meta: &MetaStore,
    alone: bool,
) -> Result<MasterKey, MgmtError> {
    let start = Instant::now();
    loop {
        if let Some(k) = at_start(path, meta)? {
            return Ok(k);
        }
        if alone || start.elapsed() > Duration::from_secs(30) {
            if !alone {
                tracing::warn!(
                    "no master key arrived with a join: making one at {} (copy it to every \
                     member if the others lack one)",
                    path.display()
                );
            }
            MasterKey::generate()
                .map_err(err)?
                .store(path)
                .map_err(err)?;
            return MasterKey::load(path).map_err(err);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
