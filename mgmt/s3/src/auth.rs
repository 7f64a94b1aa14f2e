//! Credentials and what they may do.
//!
//! An access key is the node's root key (tenant `ROOT_TENANT`, from the
//! environment or the state directory) or a tenant user's key, read from the
//! replicated metadata ([`cairn_meta::KeyRecord`]). `s3s` verifies SigV4 with the
//! secret [`Keys`] returns: an unknown key is `InvalidAccessKeyId`, a wrong
//! signature `SignatureDoesNotMatch`, both 403. Then [`Access`], one layer in
//! front of every operation, refuses anonymous requests, disabled users and
//! tenants, and writes by read-only users (`AccessDenied`).

use cairn_envelope::KeyProvider;
use cairn_meta::{KeyRecord, MetaStore, Role};
use cairn_qos::{Qos, Way};
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// One static access key (the root's).
#[derive(Clone)]
pub struct Credential {
    pub secret: String,
    pub tenant: u64,
}

impl std::fmt::Debug for Credential {
    // Never print a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential(tenant={}, secret=<redacted>)", self.tenant)
    }
}

/// Where a key's secret is: the root's in memory, a tenant key's in its record.
enum Held {
    Fixed(String),
    Record(KeyRecord),
}

/// Who an access key acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub tenant: u64,
    /// The tenant user, or none for the root key.
    pub user: Option<String>,
    pub role: Role,
    /// The user or its tenant is disabled: the key is refused.
    pub disabled: bool,
}

/// The credential table: static keys, then the tenants' keys in the metadata.
#[derive(Clone, Default)]
pub struct Keys {
    fixed: Arc<HashMap<String, Credential>>,
    meta: Option<MetaStore>,
    /// What unwraps tenant keys' secrets: set once the node has its master key.
    unwrapper: Arc<OnceLock<Arc<dyn KeyProvider>>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} fixed)", self.fixed.len())
    }
}

impl Keys {
    pub fn new(keys: HashMap<String, Credential>) -> Keys {
        Keys {
            fixed: Arc::new(keys),
            meta: None,
            unwrapper: Default::default(),
        }
    }

    /// Sets what opens the tenant keys' wrapped secrets (every clone sees it).
    pub fn set_key_provider(&self, p: Arc<dyn KeyProvider>) {
        let _ = self.unwrapper.set(p);
    }

    /// A key record's secret: unwrapped, or as kept by older versions.
    fn secret(&self, access_key: &str, k: &KeyRecord) -> Option<String> {
        if k.sealed_secret.is_empty() {
            return Some(k.secret.clone());
        }
        let Some(p) = self.unwrapper.get() else {
            tracing::warn!("access key {access_key}: no master key yet to open its secret");
            return None;
        };
        let opened = hex::decode(&k.sealed_secret)
            .map_err(|e| e.to_string())
            .and_then(|w| p.unwrap_secret(access_key, &w).map_err(|e| e.to_string()))
            .and_then(|s| String::from_utf8(s.to_vec()).map_err(|e| e.to_string()));
        match opened {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("access key {access_key}: its secret does not open: {e}");
                None
            }
        }
    }

    /// The same keys, and the tenant users' keys kept in `meta`.
    pub fn with_tenants(mut self, meta: MetaStore) -> Keys {
        self.meta = Some(meta);
        self
    }

    /// The key's identity and where its secret is, if the key exists.
    fn lookup(&self, access_key: &str) -> Option<(Held, Identity)> {
        if let Some(c) = self.fixed.get(access_key) {
            let id = Identity {
                tenant: c.tenant,
                user: None,
                role: Role::Admin,
                disabled: false,
            };
            return Some((Held::Fixed(c.secret.clone()), id));
        }
        let meta = self.meta.as_ref()?;
        match meta.key_holder(access_key) {
            Ok(found) => found.map(|(k, user, tenant)| {
                let id = Identity {
                    tenant: k.tenant,
                    user: Some(k.user.clone()),
                    role: user.role,
                    disabled: user.disabled || tenant.disabled,
                };
                (Held::Record(k), id)
            }),
            Err(e) => {
                tracing::warn!("access key lookup: {e}");
                None
            }
        }
    }

    /// The key's secret and identity (the secret unwrapped only here, where a
    /// signature or password is checked).
    fn lookup_secret(&self, access_key: &str) -> Option<(String, Identity)> {
        let (held, id) = self.lookup(access_key)?;
        let secret = match held {
            Held::Fixed(s) => s,
            Held::Record(k) => self.secret(access_key, &k)?,
        };
        Some((secret, id))
    }

    /// Who `access_key` is if `secret` is its secret and the key is enabled: for
    /// front ends that take a password rather than a signature (RESP's `AUTH`).
    /// The comparison does not stop at the first differing byte, so timing does
    /// not leak it.
    pub fn verify(&self, access_key: &str, secret: &str) -> Option<Identity> {
        let (s, id) = self.lookup_secret(access_key)?;
        let (a, b) = (s.as_bytes(), secret.as_bytes());
        let diff = a
            .iter()
            .zip(b)
            .fold(a.len() ^ b.len(), |d, (x, y)| d | usize::from(x ^ y));
        (diff == 0 && !id.disabled).then_some(id)
    }

    /// Who `access_key` acts as.
    pub fn identity(&self, access_key: &str) -> Option<Identity> {
        self.lookup(access_key).map(|(_, id)| id)
    }

    /// The tenant an access key acts for.
    pub fn tenant(&self, access_key: &str) -> Option<u64> {
        self.identity(access_key).map(|id| id.tenant)
    }
}

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.lookup_secret(access_key) {
            Some((secret, _)) => Ok(SecretKey::from(secret.as_str())),
            None => Err(s3_error!(InvalidAccessKeyId)),
        }
    }
}

/// Authorisation, checked by s3s for every request after its signature.
pub struct Access {
    pub keys: Keys,
    /// Counts each request against its tenant's request rate.
    pub qos: Qos,
}

/// The refusal of a write under `.snapshot/`, where a bucket's snapshots read.
pub(crate) fn snapshot_read_only() -> s3s::S3Error {
    s3_error!(
        AccessDenied,
        "keys under {} are the bucket's snapshots: read-only",
        cairn_objects::SNAPSHOT_DIR
    )
}

/// Whether an S3 operation only reads (S3 names every such operation
/// `Get…`, `Head…` or `List…`).
fn reads_only(op: &str) -> bool {
    ["Get", "Head", "List"].iter().any(|p| op.starts_with(p))
}

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(creds) = cx.credentials() else {
            return Err(s3_error!(AccessDenied, "anonymous access is not allowed"));
        };
        let id = self
            .keys
            .identity(&creds.access_key)
            .ok_or_else(|| s3_error!(InvalidAccessKeyId))?;
        if id.disabled {
            return Err(s3_error!(
                AccessDenied,
                "the access key's user or tenant is disabled"
            ));
        }
        let op = cx.s3_op().name().to_string();
        if let Some(slot) = cx.extensions_mut().get::<crate::metrics::OpSlot>() {
            let _ = slot.set(op.clone());
        }
        // A browser's request: the bucket its (verified) credentials reach decides
        // the answer's CORS headers, errors included (a page may read why).
        let bucket = match cx.s3_path() {
            s3s::path::S3Path::Bucket { bucket } | s3s::path::S3Path::Object { bucket, .. } => {
                Some(bucket.to_string())
            }
            s3s::path::S3Path::Root => None,
        };
        if let (Some(reached), Some(bucket)) =
            (cx.extensions_mut().get::<crate::cors::Reached>(), bucket)
        {
            let _ = reached.0.set((id.tenant, bucket));
        }
        let op = op.as_str();
        if id.role == Role::ReadOnly && !reads_only(op) {
            return Err(s3_error!(
                AccessDenied,
                "user {} is read-only: {op} is refused",
                id.user.as_deref().unwrap_or("")
            ));
        }
        // A snapshot's view is read-only (DeleteObjects checks each key itself).
        if let s3s::path::S3Path::Object { key, .. } = cx.s3_path() {
            if !reads_only(op) && key.starts_with(cairn_objects::SNAPSHOT_DIR) {
                return Err(snapshot_read_only());
            }
        }
        let way = match reads_only(op) {
            true => Way::Read,
            false => Way::Write,
        };
        // S3's answer to a request rate exceeded; SDKs retry it with backoff.
        self.qos
            .request(id.tenant, way)
            .await
            .map_err(|e| s3_error!(SlowDown, "{e}"))?;
        Ok(())
    }
}
