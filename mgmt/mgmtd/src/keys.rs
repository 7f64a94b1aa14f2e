//! The cluster's master key on this node (`<data>/master.key`, 0600): checked at
//! start, and handed to the object store once the node is a member.
//!
//! The node that creates a cluster makes the key (`Cluster::init`); a joiner
//! receives it in its join reply. The cluster records the key's fingerprint in
//! its metadata the first time a node offers one, and refuses any other after:
//! so every node wraps with the same key. A node without one whose metadata
//! names a key, or holds anything wrapped by one, refuses to start (a new key
//! could not open them, and making one would hide the loss); nothing here ever
//! overwrites a key file.

use crate::MgmtError;
use cairn_envelope::{KeyProvider, MasterKey};
use cairn_meta::{MetaError, MetaStore};
use cairn_objects::{ObjectError, ObjectStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn path(data: &Path) -> PathBuf {
    data.join("master.key")
}

fn err(e: impl std::fmt::Display) -> MgmtError {
    MgmtError::Config(e.to_string())
}

/// At start: this node's master key if it has one, checked against what the
/// metadata holds wrapped by one (the cluster's recorded fingerprint, tenant
/// keys, access keys' secrets); none if it has none and nothing needs one.
pub(crate) fn at_start(path: &Path, meta: &MetaStore) -> Result<Option<MasterKey>, MgmtError> {
    let recorded = meta.master_key()?;
    let wrapped = meta.tenant_keys()?;
    let secret = meta.a_sealed_secret()?;
    if !MasterKey::exists(path) {
        let needed = match (&recorded, wrapped.first(), &secret) {
            (Some(fp), ..) => format!("the cluster's master key is {fp}"),
            (None, Some((_, k)), _) => format!(
                "the metadata holds {} tenant key(s) wrapped by master key {}",
                wrapped.len(),
                k.master
            ),
            (None, None, Some(_)) => "the metadata holds access keys' secrets wrapped by it".into(),
            (None, None, None) => return Ok(None),
        };
        return Err(err(format!(
            "master key {} is missing, and {needed}: restore that file (from a backup, or \
             another member of the cluster) — without it encrypted data cannot be read nor \
             access keys checked (nothing was changed)",
            path.display()
        )));
    }
    let key = MasterKey::load(path).map_err(err)?;
    let fp = key.fingerprint().to_string();
    let wrong = |whose: String, theirs: &str| {
        err(format!(
            "master key {} (fingerprint {fp}) is not the one {whose} (fingerprint {theirs}): \
             put the right file back (nothing was changed)",
            path.display()
        ))
    };
    if let Some(r) = recorded.filter(|r| *r != fp) {
        return Err(wrong("the cluster recorded".into(), &r));
    }
    if let Some((tenant, k)) = wrapped.iter().find(|(_, k)| k.master != fp) {
        return Err(wrong(
            format!("tenant {tenant:016x}'s key is wrapped by"),
            &k.master,
        ));
    }
    // Secrets do not name their master key: the key must open one.
    if let Some((access_key, sealed)) = secret {
        let opens = hex::decode(&sealed)
            .ok()
            .is_some_and(|w| key.unwrap_secret(&access_key, &w).is_ok());
        if !opens {
            return Err(wrong(
                format!("access key {access_key}'s secret is wrapped by"),
                "unknown",
            ));
        }
    }
    Ok(Some(key))
}

/// Once a member: the master key, and whether it was made just now. A node alone
/// without one makes it; a member without one waits for its join to deliver it,
/// and makes one only when the join is long over and its metadata names no key —
/// which [`adopt`] then offers to the cluster, which refuses it if another is
/// recorded.
pub(crate) async fn for_member(
    path: &Path,
    meta: &MetaStore,
    alone: bool,
) -> Result<(MasterKey, bool), MgmtError> {
    let start = Instant::now();
    loop {
        if let Some(k) = at_start(path, meta)? {
            return Ok((k, false));
        }
        if alone || start.elapsed() > Duration::from_secs(30) {
            if !alone {
                tracing::warn!(
                    "no master key arrived with a join, and this node's metadata names none: \
                     making one at {} and offering it to the cluster",
                    path.display()
                );
            }
            MasterKey::generate()
                .map_err(err)?
                .store(path)
                .map_err(err)?;
            return Ok((MasterKey::load(path).map_err(err)?, true));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Gives the store its master key once the cluster takes it (see
/// [`ObjectStore::adopt_key_provider`]). A key made just now and refused wrapped
/// nothing: its file is removed, so the next start waits for the right one.
pub(crate) async fn adopt(
    store: &ObjectStore,
    key: MasterKey,
    path: &Path,
    made: bool,
) -> Result<(), MgmtError> {
    let fp = key.fingerprint().to_string();
    let key: Arc<MasterKey> = Arc::new(key);
    loop {
        match store.adopt_key_provider(key.clone()).await {
            Ok(()) => return Ok(()),
            Err(ObjectError::Meta(MetaError::MasterKeyMismatch { cluster, .. })) => {
                if made {
                    let _ = std::fs::remove_file(path);
                }
                let removed = if made {
                    ", made just now and removed"
                } else {
                    ""
                };
                return Err(err(format!(
                    "this node's master key {} ({fp}{removed}) is not the cluster's \
                     ({cluster}): copy master.key from another member of the cluster (mode \
                     0600) and start again",
                    path.display(),
                )));
            }
            // No quorum yet (a member restarting while others are down or cut
            // off): nothing can be served before the offer is decided anyway.
            Err(e) => {
                tracing::warn!("offering the master key to the cluster: {e}; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
