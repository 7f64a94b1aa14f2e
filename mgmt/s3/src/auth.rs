//! Credentials: access key -> secret key and tenant. `s3s` verifies SigV4 with the
//! secret we return; an unknown key is `InvalidAccessKeyId`, a wrong signature
//! `SignatureDoesNotMatch`, both 403.

use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};
use std::collections::HashMap;
use std::sync::Arc;

/// One access key.
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

/// The credential table.
#[derive(Clone, Debug, Default)]
pub struct Keys(Arc<HashMap<String, Credential>>);

impl Keys {
    pub fn new(keys: HashMap<String, Credential>) -> Keys {
        Keys(Arc::new(keys))
    }

    /// The tenant of `access_key` if `secret` is its secret: for front ends that
    /// take a password rather than a signature (RESP's `AUTH`). The comparison
    /// does not stop at the first differing byte, so timing does not leak it.
    pub fn verify(&self, access_key: &str, secret: &str) -> Option<u64> {
        let c = self.0.get(access_key)?;
        let (a, b) = (c.secret.as_bytes(), secret.as_bytes());
        let diff = a
            .iter()
            .zip(b)
            .fold(a.len() ^ b.len(), |d, (x, y)| d | usize::from(x ^ y));
        (diff == 0).then_some(c.tenant)
    }

    /// The tenant an access key acts for.
    pub fn tenant(&self, access_key: &str) -> Option<u64> {
        self.0.get(access_key).map(|c| c.tenant)
    }
}

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.get(access_key) {
            Some(c) => Ok(SecretKey::from(c.secret.as_str())),
            None => Err(s3_error!(InvalidAccessKeyId)),
        }
    }
}
