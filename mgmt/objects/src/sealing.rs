//! Tenants' keys as the object store uses them: the key to seal a new extent
//! with, and the key to open a stored one (see `cairn_envelope` for the layers).
//!
//! The wrapped tenant key is read from the local metadata at every use, so a
//! tenant deleted (its key record gone) is unreadable from that moment on this
//! node; only the unwrapping is cached, keyed by the wrapped bytes themselves.

use crate::{ObjectError, ObjectStore};
use bytes::{Bytes, BytesMut};
use cairn_envelope::{DataKey, KeyProvider, TenantKey, TAG_LEN};
use cairn_meta::{Extent, IdentityChange, Sealed, TenantKeyRecord, ROOT_TENANT};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The key provider (set once at start) and the tenant keys it unwrapped.
#[derive(Default)]
pub(crate) struct Keyring {
    provider: OnceLock<Arc<dyn KeyProvider>>,
    unwrapped: Mutex<HashMap<u64, (String, Arc<TenantKey>)>>,
}

/// What seals one new extent: its data key, and that key as the manifest keeps it.
pub(crate) struct Sealer {
    pub key: Arc<DataKey>,
    pub sealed: Sealed,
}

impl ObjectStore {
    /// Takes what wraps tenants' keys, once its master key is the cluster's:
    /// the key's fingerprint is offered to the metadata first (recorded when
    /// none is, refused when another is — so every node wraps with one key).
    /// Until then nothing is sealed, and sealed extents cannot be read.
    pub async fn adopt_key_provider(&self, p: Arc<dyn KeyProvider>) -> Result<(), ObjectError> {
        // Recorded once and never changed: a local replica that holds this
        // very key's fingerprint has nothing to ask of the cluster (a restart
        // needs no quorum, nor a Raft write, for it).
        if self.meta.master_key()?.as_deref() != Some(p.fingerprint()) {
            self.change_identity(IdentityChange::SetMasterKey {
                fingerprint: p.fingerprint().to_string(),
            })
            .await?;
        }
        self.keyring
            .provider
            .set(p)
            .map_err(|_| ObjectError::Config("the key provider is set already".into()))
    }

    /// The provider to wrap new keys and secrets with: refused unless its
    /// master key is the one the cluster recorded.
    fn wrapping(&self, what: &str) -> Result<&Arc<dyn KeyProvider>, ObjectError> {
        let p = self.keyring.provider.get().ok_or_else(|| {
            ObjectError::Sealing(format!("this node has no master key to wrap {what} with"))
        })?;
        match self.meta.master_key()? {
            Some(cluster) if cluster != p.fingerprint() => Err(ObjectError::Sealing(format!(
                "this node's master key {} is not the cluster's ({cluster}): {what} is not wrapped",
                p.fingerprint()
            ))),
            _ => Ok(p),
        }
    }

    /// The key provider, once set (the front ends unwrap access keys' secrets).
    pub fn key_provider(&self) -> Option<Arc<dyn KeyProvider>> {
        self.keyring.provider.get().cloned()
    }

    /// An access key's secret wrapped for its record (hex).
    pub fn seal_secret(&self, access_key: &str, secret: &str) -> Result<String, ObjectError> {
        let provider = self.wrapping("a secret")?;
        let w = provider
            .wrap_secret(access_key, secret.as_bytes())
            .map_err(sealing)?;
        Ok(hex::encode(w))
    }

    /// A new key-encryption key for `tenant`, wrapped by this node's provider.
    pub fn new_tenant_key(&self, tenant: u64) -> Result<TenantKeyRecord, ObjectError> {
        new_tenant_key(self.wrapping("a tenant key")?.as_ref(), tenant)
    }

    /// A data key for new extent `extent` of `tenant`; none when the tenant
    /// stores plaintext. The root tenant's key is made at its first write.
    pub(crate) async fn sealer(
        &self,
        tenant: u64,
        extent: u128,
    ) -> Result<Option<Sealer>, ObjectError> {
        let Some(provider) = self.keyring.provider.get() else {
            return Ok(None);
        };
        if tenant == ROOT_TENANT && !self.cfg.seal_root {
            return Ok(None);
        }
        let rec = match self.meta.tenant_key(tenant)? {
            Some(r) => r,
            None if tenant == ROOT_TENANT => {
                let key = new_tenant_key(self.wrapping("the root's key")?.as_ref(), tenant)?;
                // A no-op if another node gave the root its key first.
                self.change_identity(IdentityChange::SetTenantKey { id: tenant, key })
                    .await?;
                self.meta
                    .tenant_key(tenant)?
                    .ok_or_else(|| ObjectError::Sealing("the root tenant's key vanished".into()))?
            }
            None => return Ok(None),
        };
        let tk = self.unwrapped(provider.as_ref(), tenant, &rec)?;
        let (key, wrapped) = tk.new_data_key(tenant, extent).map_err(sealing)?;
        Ok(Some(Sealer {
            key: Arc::new(key),
            sealed: Sealed {
                key_id: rec.key_id,
                key: hex::encode(wrapped),
            },
        }))
    }

    /// The data keys of `extents` of `tenant` (none for one not sealed, or not
    /// asked for), with the tenant's key read once.
    pub(crate) fn openers<'a>(
        &self,
        tenant: u64,
        extents: impl Iterator<Item = Option<&'a Extent>>,
    ) -> Result<Vec<Option<Arc<DataKey>>>, ObjectError> {
        let mut tenant_key: Option<(u32, Arc<TenantKey>)> = None;
        let mut out = Vec::new();
        for e in extents {
            let Some((e, s)) = e.and_then(|e| e.sealed.as_ref().map(|s| (e, s))) else {
                out.push(None);
                continue;
            };
            let tk = match &tenant_key {
                Some((id, k)) if *id == s.key_id => k.clone(),
                _ => {
                    let k = self.opening_key(tenant, s.key_id)?;
                    tenant_key = Some((s.key_id, k.clone()));
                    k
                }
            };
            let wrapped = hex::decode(&s.key)
                .map_err(|_| ObjectError::Sealing("a manifest's data key is not hex".into()))?;
            let dk = tk.open_data_key(tenant, e.id, &wrapped).map_err(sealing)?;
            out.push(Some(Arc::new(dk)));
        }
        Ok(out)
    }

    fn opening_key(&self, tenant: u64, key_id: u32) -> Result<Arc<TenantKey>, ObjectError> {
        let provider = self.keyring.provider.get().ok_or_else(|| {
            ObjectError::Sealing("this node has no master key to open sealed data with".into())
        })?;
        let rec = self
            .meta
            .tenant_key(tenant)?
            .filter(|r| r.key_id == key_id)
            .ok_or_else(|| {
                ObjectError::Sealing(format!(
                    "tenant key {key_id} is gone: the data it sealed cannot be read"
                ))
            })?;
        self.unwrapped(provider.as_ref(), tenant, &rec)
    }

    fn unwrapped(
        &self,
        provider: &dyn KeyProvider,
        tenant: u64,
        rec: &TenantKeyRecord,
    ) -> Result<Arc<TenantKey>, ObjectError> {
        let mut cache = self
            .keyring
            .unwrapped
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some((w, k)) = cache.get(&tenant) {
            if *w == rec.wrapped {
                return Ok(k.clone());
            }
        }
        if rec.master != provider.fingerprint() {
            return Err(ObjectError::Sealing(format!(
                "the tenant's key is wrapped by master key {}, this node has {}",
                rec.master,
                provider.fingerprint()
            )));
        }
        let bytes = hex::decode(&rec.wrapped)
            .map_err(|_| ObjectError::Sealing("a wrapped tenant key is not hex".into()))?;
        let k = Arc::new(
            provider
                .unwrap_tenant_key(tenant, &bytes)
                .map_err(sealing)?,
        );
        cache.insert(tenant, (rec.wrapped.clone(), k.clone()));
        Ok(k)
    }
}

/// A new key-encryption key for `tenant`, wrapped for its record.
pub fn new_tenant_key(
    provider: &dyn KeyProvider,
    tenant: u64,
) -> Result<TenantKeyRecord, ObjectError> {
    let k = TenantKey::generate().map_err(sealing)?;
    Ok(TenantKeyRecord {
        key_id: 1,
        wrapped: hex::encode(provider.wrap_tenant_key(tenant, &k).map_err(sealing)?),
        master: provider.fingerprint().to_string(),
        created_ms: cairn_meta::now_ms(),
    })
}

fn sealing(e: cairn_envelope::EnvelopeError) -> ObjectError {
    ObjectError::Sealing(e.to_string())
}

/// Seals data fragment `frag` of stripe `stripe` in place; appends its tag (hex).
pub(crate) fn seal(key: &DataKey, stripe: u32, frag: u8, buf: &mut [u8], tags: &mut String) {
    tags.push_str(&hex::encode(key.seal(stripe, frag, buf)));
}

/// Opens a fetched data fragment: verified ciphertext in, plaintext out. The
/// buffer is reused when the fetch holds it alone (the usual case).
pub(crate) fn open(
    key: &DataKey,
    stripe: u32,
    frag: u8,
    data: Bytes,
    tag: Option<&str>,
) -> Result<Bytes, ObjectError> {
    let tag = tag
        .and_then(|t| hex::decode(t).ok())
        .filter(|t| t.len() == TAG_LEN)
        .ok_or_else(|| {
            ObjectError::Sealing(format!(
                "stripe {stripe} fragment {frag}: the manifest has no tag for it"
            ))
        })?;
    let mut buf = data
        .try_into_mut()
        .unwrap_or_else(|b| BytesMut::from(&b[..]));
    key.open(stripe, frag, &mut buf, &tag).map_err(|e| {
        ObjectError::Unreadable(format!(
            "{e}: its checksum matched, so the key or the manifest is wrong"
        ))
    })?;
    Ok(buf.freeze())
}
