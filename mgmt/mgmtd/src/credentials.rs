//! Root credentials and the admin token: from the environment when set, else
//! generated once and kept in the state directory, readable by root only. There is
//! no default password anywhere.

use crate::{io_err, MgmtError};
use rand::distr::{Alphanumeric, SampleString};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const ENV_ACCESS_KEY: &str = "CAIRN_ROOT_ACCESS_KEY";
pub const ENV_SECRET_KEY: &str = "CAIRN_ROOT_SECRET_KEY";
const FILE: &str = "root-credentials.json";
const TOKEN_FILE: &str = "admin.token";

/// The S3 root key pair.
#[derive(Clone, Serialize, Deserialize)]
pub struct RootCredentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for RootCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RootCredentials({}, <secret>)", self.access_key)
    }
}

/// Where the credentials came from, for the operator's benefit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Environment,
    Stored,
    Generated,
}

impl RootCredentials {
    /// From the environment, else from the state directory, else (when `create`)
    /// newly generated and stored.
    pub fn resolve(data: &Path, create: bool) -> Result<(RootCredentials, Origin), MgmtError> {
        let env = (std::env::var(ENV_ACCESS_KEY), std::env::var(ENV_SECRET_KEY));
        match env {
            (Ok(a), Ok(s)) => {
                let c = RootCredentials {
                    access_key: a,
                    secret_key: s,
                };
                c.validate()?;
                return Ok((c, Origin::Environment));
            }
            (Ok(_), Err(_)) | (Err(_), Ok(_)) => {
                return Err(MgmtError::Config(format!(
                    "set both {ENV_ACCESS_KEY} and {ENV_SECRET_KEY}, or neither"
                )))
            }
            _ => {}
        }
        let path = data.join(FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let c: RootCredentials = serde_json::from_slice(&bytes).map_err(|e| {
                    MgmtError::Config(format!("{} is not valid: {e}", path.display()))
                })?;
                c.validate()?;
                Ok((c, Origin::Stored))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let mut rng = rand::rng();
                let c = RootCredentials {
                    access_key: format!(
                        "CAIRN{}",
                        Alphanumeric.sample_string(&mut rng, 15).to_uppercase()
                    ),
                    secret_key: Alphanumeric.sample_string(&mut rng, 40),
                };
                std::fs::create_dir_all(data)
                    .map_err(io_err(format!("create {}", data.display())))?;
                if !write_private(&path, &serde_json::to_vec_pretty(&c).unwrap_or_default())? {
                    // Another process generated them meanwhile: use those.
                    return Self::resolve(data, false);
                }
                Ok((c, Origin::Generated))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(MgmtError::Config(format!(
                "no root credentials: set {ENV_ACCESS_KEY} and {ENV_SECRET_KEY}, or create {}",
                path.display()
            ))),
            Err(e) => Err(io_err(format!("read {}", path.display()))(e)),
        }
    }

    fn validate(&self) -> Result<(), MgmtError> {
        if self.access_key.len() < 3 || self.access_key.len() > 128 {
            return Err(MgmtError::Config(
                "the root access key must be 3..128 characters".into(),
            ));
        }
        if self.secret_key.len() < 8 {
            return Err(MgmtError::Config(
                "the root secret key must be at least 8 characters".into(),
            ));
        }
        Ok(())
    }
}

/// The bearer token of the admin API, created on first use.
pub fn load_or_create_admin_token(data: &Path) -> Result<String, MgmtError> {
    let path = data.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if t.trim().len() >= 32 => Ok(t.trim().to_string()),
        Ok(_) => Err(MgmtError::Config(format!(
            "{} is too short",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let t = Alphanumeric.sample_string(&mut rand::rng(), 48);
            if !write_private(&path, t.as_bytes())? {
                return load_or_create_admin_token(data);
            }
            Ok(t)
        }
        Err(e) => Err(io_err(format!("read {}", path.display()))(e)),
    }
}

/// Reads the admin token without creating it.
pub fn read_admin_token(data: &Path) -> Result<String, MgmtError> {
    let path = data.join(TOKEN_FILE);
    std::fs::read_to_string(&path)
        .map(|t| t.trim().to_string())
        .map_err(io_err(format!("read {}", path.display())))
}

/// Creates a secret file, mode 0600, complete or not at all; `false` if another
/// process created it first (its content is then the one to use).
fn write_private(path: &Path, data: &[u8]) -> Result<bool, MgmtError> {
    cairn_sysutil::create_once(path, data, Some(0o600))
        .map_err(io_err(format!("create {}", path.display())))
}
