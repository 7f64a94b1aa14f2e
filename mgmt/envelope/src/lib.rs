//! Envelope encryption of tenants' data, in three layers:
//!
//! - the **master key** of the cluster (one file on each node's state partition,
//!   mode 0600, the same on every member: a joiner receives it over the join's
//!   pinned TLS) wraps each tenant's key; it is behind [`KeyProvider`] so an
//!   external KMS can take its place;
//! - each **tenant key** (a key-encryption key, kept wrapped in the replicated
//!   metadata) wraps the data keys of that tenant's extents; deleting it is what
//!   makes the tenant's data unreadable (crypto-shredding);
//! - each extent has its own random **data key** (kept wrapped in its manifest)
//!   that seals the extent's data fragments with AES-256-GCM before erasure
//!   coding, so parity, repair, scrub and datapathd only ever see ciphertext and
//!   never hold a key.
//!
//! Nonces: a data key seals one extent only, so a fragment's nonce is derived
//! from its place in the extent (stripe, fragment) and is never reused under its
//! key; wrapped keys use random nonces (few wraps per key). The AAD binds each
//! sealed thing to what it belongs to (tenant, extent, stripe, fragment), so a
//! fragment or a wrapped key moved elsewhere fails to open.

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// Bytes in every key.
pub const KEY_LEN: usize = 32;
/// Bytes in an AES-GCM tag.
pub const TAG_LEN: usize = 16;
/// Bytes in a wrapped key: nonce, sealed key, tag.
pub const WRAPPED_LEN: usize = NONCE_LEN + KEY_LEN + TAG_LEN;

#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("master key {path}: {why}")]
    MasterKey { path: PathBuf, why: String },
    #[error("master key {path} exists already: not overwritten")]
    MasterKeyExists { path: PathBuf },
    #[error("a wrapped key must be {WRAPPED_LEN} bytes, not {0}")]
    WrappedLength(usize),
    #[error("a wrapped {what} does not open with this key (wrong key, or tampered with)")]
    Unwrap { what: &'static str },
    #[error(
        "fragment {frag} of stripe {stripe} fails authentication (wrong key, or tampered with)"
    )]
    Open { stripe: u32, frag: u8 },
    #[error("no randomness from the system")]
    Random,
}

fn aead(raw: &[u8; KEY_LEN]) -> LessSafeKey {
    // A 32-byte key is always accepted by AES-256-GCM.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, raw).expect("AES-256 key length"))
}

fn random_key() -> Result<Zeroizing<[u8; KEY_LEN]>, EnvelopeError> {
    let mut k = Zeroizing::new([0u8; KEY_LEN]);
    SystemRandom::new()
        .fill(&mut k[..])
        .map_err(|_| EnvelopeError::Random)?;
    Ok(k)
}

/// Seals `plain` under `with`: random nonce, then ciphertext and tag.
fn seal_bytes(with: &LessSafeKey, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, EnvelopeError> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| EnvelopeError::Random)?;
    let mut out = Vec::with_capacity(NONCE_LEN + plain.len() + TAG_LEN);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(plain);
    let tag = with
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut out[NONCE_LEN..],
        )
        .map_err(|_| EnvelopeError::Random)?;
    out.extend_from_slice(tag.as_ref());
    Ok(out)
}

fn open_bytes(
    with: &LessSafeKey,
    aad: &[u8],
    wrapped: &[u8],
    what: &'static str,
) -> Result<Zeroizing<Vec<u8>>, EnvelopeError> {
    if wrapped.len() < NONCE_LEN + TAG_LEN {
        return Err(EnvelopeError::WrappedLength(wrapped.len()));
    }
    let (nonce, rest) = wrapped.split_at(NONCE_LEN);
    let nonce =
        Nonce::try_assume_unique_for_key(nonce).map_err(|_| EnvelopeError::Unwrap { what })?;
    let mut buf = Zeroizing::new(rest.to_vec());
    let n = with
        .open_in_place(nonce, Aad::from(aad), &mut buf[..])
        .map_err(|_| EnvelopeError::Unwrap { what })?
        .len();
    buf.truncate(n);
    Ok(buf)
}

/// Seals a key under `with` (see [`seal_bytes`]).
fn wrap(with: &LessSafeKey, aad: &[u8], key: &[u8; KEY_LEN]) -> Result<Vec<u8>, EnvelopeError> {
    seal_bytes(with, aad, key)
}

fn unwrap(
    with: &LessSafeKey,
    aad: &[u8],
    wrapped: &[u8],
    what: &'static str,
) -> Result<Zeroizing<[u8; KEY_LEN]>, EnvelopeError> {
    if wrapped.len() != WRAPPED_LEN {
        return Err(EnvelopeError::WrappedLength(wrapped.len()));
    }
    let plain = open_bytes(with, aad, wrapped, what)?;
    let mut k = Zeroizing::new([0u8; KEY_LEN]);
    k.copy_from_slice(&plain);
    Ok(k)
}

/// What wraps tenants' keys: the local master key file today, an external KMS
/// later. Implementations never hand out the wrapping key itself.
pub trait KeyProvider: Send + Sync {
    /// Names the wrapping key (not secret): recorded beside every key it wraps,
    /// so a node started with another one says so instead of failing reads.
    fn fingerprint(&self) -> &str;
    fn wrap_tenant_key(&self, tenant: u64, key: &TenantKey) -> Result<Vec<u8>, EnvelopeError>;
    fn unwrap_tenant_key(&self, tenant: u64, wrapped: &[u8]) -> Result<TenantKey, EnvelopeError>;
    /// Seals a short secret (an access key's) bound to `name` (the key's id).
    fn wrap_secret(&self, name: &str, secret: &[u8]) -> Result<Vec<u8>, EnvelopeError>;
    fn unwrap_secret(
        &self,
        name: &str,
        wrapped: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, EnvelopeError>;
}

/// The cluster's master key, kept in a file of its own (hex, mode 0600).
pub struct MasterKey {
    raw: Zeroizing<[u8; KEY_LEN]>,
    key: LessSafeKey,
    fingerprint: String,
}

impl std::fmt::Debug for MasterKey {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MasterKey({})", self.fingerprint)
    }
}

fn tenant_aad(tenant: u64) -> Vec<u8> {
    let mut a = b"cairn tenant key ".to_vec();
    a.extend_from_slice(&tenant.to_be_bytes());
    a
}

impl MasterKey {
    fn from_raw(raw: Zeroizing<[u8; KEY_LEN]>) -> MasterKey {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"cairn master key fingerprint ");
        ctx.update(&raw[..]);
        let fingerprint = hex::encode(&ctx.finish().as_ref()[..8]);
        MasterKey {
            key: aead(&raw),
            raw,
            fingerprint,
        }
    }

    pub fn generate() -> Result<MasterKey, EnvelopeError> {
        Ok(MasterKey::from_raw(random_key()?))
    }

    /// The key as hex (for the join reply, which carries it to a new member).
    pub fn to_hex(&self) -> Zeroizing<String> {
        Zeroizing::new(hex::encode(&self.raw[..]))
    }

    pub fn from_hex(s: &str) -> Option<MasterKey> {
        let bytes = Zeroizing::new(hex::decode(s.trim()).ok()?);
        let raw: [u8; KEY_LEN] = bytes.as_slice().try_into().ok()?;
        Some(MasterKey::from_raw(Zeroizing::new(raw)))
    }

    /// Reads the key file; refuses one readable by others, malformed, or absent.
    pub fn load(path: &Path) -> Result<MasterKey, EnvelopeError> {
        use std::os::unix::fs::PermissionsExt;
        let err = |why: String| EnvelopeError::MasterKey {
            path: path.to_path_buf(),
            why,
        };
        let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(err(format!(
                "mode {:o} lets others read it (chmod 600)",
                meta.permissions().mode() & 0o777
            )));
        }
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?);
        MasterKey::from_hex(&text).ok_or_else(|| err(format!("not {KEY_LEN} bytes of hex")))
    }

    /// Writes the key to a new file (0600); never replaces one that exists.
    pub fn store(&self, path: &Path) -> Result<(), EnvelopeError> {
        let made = cairn_sysutil::create_once(path, self.to_hex().as_bytes(), Some(0o600))
            .map_err(|e| EnvelopeError::MasterKey {
                path: path.to_path_buf(),
                why: e.to_string(),
            })?;
        if made {
            return Ok(());
        }
        match MasterKey::load(path) {
            Ok(k) if k.fingerprint == self.fingerprint => Ok(()),
            _ => Err(EnvelopeError::MasterKeyExists {
                path: path.to_path_buf(),
            }),
        }
    }

    /// Whether a key file is present.
    pub fn exists(path: &Path) -> bool {
        path.exists()
    }
}

impl KeyProvider for MasterKey {
    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    fn wrap_tenant_key(&self, tenant: u64, key: &TenantKey) -> Result<Vec<u8>, EnvelopeError> {
        wrap(&self.key, &tenant_aad(tenant), &key.raw)
    }

    fn unwrap_tenant_key(&self, tenant: u64, wrapped: &[u8]) -> Result<TenantKey, EnvelopeError> {
        let raw = unwrap(&self.key, &tenant_aad(tenant), wrapped, "tenant key")?;
        Ok(TenantKey::from_raw(raw))
    }

    fn wrap_secret(&self, name: &str, secret: &[u8]) -> Result<Vec<u8>, EnvelopeError> {
        seal_bytes(&self.key, &secret_aad(name), secret)
    }

    fn unwrap_secret(
        &self,
        name: &str,
        wrapped: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, EnvelopeError> {
        open_bytes(&self.key, &secret_aad(name), wrapped, "secret")
    }
}

fn secret_aad(name: &str) -> Vec<u8> {
    let mut a = b"cairn secret ".to_vec();
    a.extend_from_slice(name.as_bytes());
    a
}

/// A tenant's key-encryption key.
pub struct TenantKey {
    raw: Zeroizing<[u8; KEY_LEN]>,
    key: LessSafeKey,
}

fn extent_aad(tenant: u64, extent: u128) -> Vec<u8> {
    let mut a = b"cairn data key ".to_vec();
    a.extend_from_slice(&tenant.to_be_bytes());
    a.extend_from_slice(&extent.to_be_bytes());
    a
}

impl TenantKey {
    fn from_raw(raw: Zeroizing<[u8; KEY_LEN]>) -> TenantKey {
        TenantKey {
            key: aead(&raw),
            raw,
        }
    }

    pub fn generate() -> Result<TenantKey, EnvelopeError> {
        Ok(TenantKey::from_raw(random_key()?))
    }

    /// A fresh data key for extent `extent`, and that key wrapped for its manifest.
    pub fn new_data_key(
        &self,
        tenant: u64,
        extent: u128,
    ) -> Result<(DataKey, Vec<u8>), EnvelopeError> {
        let raw = random_key()?;
        let wrapped = wrap(&self.key, &extent_aad(tenant, extent), &raw)?;
        Ok((DataKey::new(tenant, extent, &raw), wrapped))
    }

    /// The data key of extent `extent`, from its manifest's wrapped copy.
    pub fn open_data_key(
        &self,
        tenant: u64,
        extent: u128,
        wrapped: &[u8],
    ) -> Result<DataKey, EnvelopeError> {
        let raw = unwrap(&self.key, &extent_aad(tenant, extent), wrapped, "data key")?;
        Ok(DataKey::new(tenant, extent, &raw))
    }
}

impl std::fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TenantKey(<redacted>)")
    }
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataKey(extent {:x}, <redacted>)", self.extent)
    }
}

/// One extent's data key: seals and opens its data fragments in place.
pub struct DataKey {
    key: LessSafeKey,
    tenant: u64,
    extent: u128,
}

impl DataKey {
    fn new(tenant: u64, extent: u128, raw: &[u8; KEY_LEN]) -> DataKey {
        DataKey {
            key: aead(raw),
            tenant,
            extent,
        }
    }

    /// The nonce and AAD of fragment `frag` of stripe `stripe`: unique per
    /// fragment within the extent, and the key is the extent's alone.
    fn place(&self, stripe: u32, frag: u8) -> (Nonce, [u8; 29]) {
        let mut n = [0u8; NONCE_LEN];
        n[..4].copy_from_slice(&stripe.to_be_bytes());
        n[4] = frag;
        let mut aad = [0u8; 29];
        aad[..8].copy_from_slice(&self.tenant.to_be_bytes());
        aad[8..24].copy_from_slice(&self.extent.to_be_bytes());
        aad[24..28].copy_from_slice(&stripe.to_be_bytes());
        aad[28] = frag;
        (Nonce::assume_unique_for_key(n), aad)
    }

    /// Encrypts `buf` in place; returns the tag to keep beside it.
    pub fn seal(&self, stripe: u32, frag: u8, buf: &mut [u8]) -> [u8; TAG_LEN] {
        let (nonce, aad) = self.place(stripe, frag);
        let tag: Tag = self
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(aad), buf)
            // Only a buffer past GCM's 64 GiB limit fails; fragments are MiBs.
            .expect("fragment within AES-GCM's length limit");
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(tag.as_ref());
        t
    }

    /// Decrypts `buf` in place after checking `tag`; on failure `buf` is left
    /// unusable and an error says which fragment failed.
    pub fn open(
        &self,
        stripe: u32,
        frag: u8,
        buf: &mut [u8],
        tag: &[u8],
    ) -> Result<(), EnvelopeError> {
        let (nonce, aad) = self.place(stripe, frag);
        let tag: [u8; TAG_LEN] = tag
            .try_into()
            .map_err(|_| EnvelopeError::Open { stripe, frag })?;
        self.key
            .open_in_place_separate_tag(nonce, Aad::from(aad), Tag::from(tag), buf, 0..)
            .map(|_| ())
            .map_err(|_| EnvelopeError::Open { stripe, frag })
    }
}

#[cfg(test)]
mod tests;
