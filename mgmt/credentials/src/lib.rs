//! A node's secrets on disk: the S3 root key pair and the admin API's bearer token.
//!
//! Both live in the node's state directory, readable by root only, and are created
//! once (first writer wins, complete or not at all); the root key pair may come from
//! the environment instead. There is no default password anywhere.
//!
//! mgmtd resolves and creates them; `nodectl dev up` resolves the key pair before it
//! starts mgmtd (to print it and hand it over in the environment), and every client
//! of the admin API reads the token. This crate is light (serde, rand and
//! `cairn-sysutil`) so that such clients need not link the daemon.

use rand::distr::{Alphanumeric, SampleString};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The environment variables that set the root key pair (both or neither).
pub const ENV_ACCESS_KEY: &str = "CAIRN_ROOT_ACCESS_KEY";
pub const ENV_SECRET_KEY: &str = "CAIRN_ROOT_SECRET_KEY";
/// The root key pair's file in the state directory.
pub const ROOT_CREDENTIALS_FILE: &str = "root-credentials.json";
/// The admin token's file in the state directory.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// The shortest admin token mgmtd accepts from its file.
const MIN_TOKEN_LEN: usize = 32;

/// Why a secret could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("set both {ENV_ACCESS_KEY} and {ENV_SECRET_KEY}, or neither")]
    HalfInEnvironment,
    #[error(
        "no root credentials: set {ENV_ACCESS_KEY} and {ENV_SECRET_KEY}, or create {}",
        path.display()
    )]
    NoRootCredentials { path: PathBuf },
    #[error("{} is not valid: {source}", path.display())]
    Malformed {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// The key pair (from the environment or the file) breaks a rule.
    #[error("{0}")]
    Invalid(&'static str),
    #[error("{} is too short (at least {MIN_TOKEN_LEN} characters)", path.display())]
    TokenTooShort { path: PathBuf },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CredentialError {
    let path = path.to_path_buf();
    move |source| CredentialError::Io { what, path, source }
}

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
    /// From the environment, else from the state directory `data`, else (when
    /// `create`) newly generated and stored there.
    pub fn resolve(
        data: &Path,
        create: bool,
    ) -> Result<(RootCredentials, Origin), CredentialError> {
        let env = (
            std::env::var(ENV_ACCESS_KEY).ok(),
            std::env::var(ENV_SECRET_KEY).ok(),
        );
        Self::resolve_with(env, data, create)
    }

    fn resolve_with(
        env: (Option<String>, Option<String>),
        data: &Path,
        create: bool,
    ) -> Result<(RootCredentials, Origin), CredentialError> {
        match env {
            (Some(access_key), Some(secret_key)) => {
                let c = RootCredentials {
                    access_key,
                    secret_key,
                };
                c.validate()?;
                return Ok((c, Origin::Environment));
            }
            (Some(_), None) | (None, Some(_)) => return Err(CredentialError::HalfInEnvironment),
            (None, None) => {}
        }
        let path = data.join(ROOT_CREDENTIALS_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let c: RootCredentials = serde_json::from_slice(&bytes)
                    .map_err(|source| CredentialError::Malformed { path, source })?;
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
                std::fs::create_dir_all(data).map_err(io_err("create", data))?;
                if !write_private(&path, &serde_json::to_vec_pretty(&c).unwrap_or_default())? {
                    // Another process generated them meanwhile: use those.
                    return Self::resolve_with((None, None), data, false);
                }
                Ok((c, Origin::Generated))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(CredentialError::NoRootCredentials { path })
            }
            Err(e) => Err(io_err("read", &path)(e)),
        }
    }

    fn validate(&self) -> Result<(), CredentialError> {
        if self.access_key.len() < 3 || self.access_key.len() > 128 {
            return Err(CredentialError::Invalid(
                "the root access key must be 3..128 characters",
            ));
        }
        if self.secret_key.len() < 8 {
            return Err(CredentialError::Invalid(
                "the root secret key must be at least 8 characters",
            ));
        }
        Ok(())
    }
}

/// The bearer token of the admin API in the state directory `data`, created on
/// first use (mgmtd's side).
pub fn load_or_create_admin_token(data: &Path) -> Result<String, CredentialError> {
    let path = data.join(ADMIN_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if t.trim().len() >= MIN_TOKEN_LEN => Ok(t.trim().to_string()),
        Ok(_) => Err(CredentialError::TokenTooShort { path }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let t = Alphanumeric.sample_string(&mut rand::rng(), 48);
            if !write_private(&path, t.as_bytes())? {
                return load_or_create_admin_token(data);
            }
            Ok(t)
        }
        Err(e) => Err(io_err("read", &path)(e)),
    }
}

/// Reads the admin token of the state directory `data` without creating it (a
/// client's side).
pub fn read_admin_token(data: &Path) -> Result<String, CredentialError> {
    read_token_file(&data.join(ADMIN_TOKEN_FILE))
}

/// Reads an admin token file wherever it is (a copy of a remote node's, say).
pub fn read_token_file(path: &Path) -> Result<String, CredentialError> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .map_err(io_err("read admin token", path))
}

/// Creates a secret file, mode 0600, complete or not at all; `false` if another
/// process created it first (its content is then the one to use).
fn write_private(path: &Path, data: &[u8]) -> Result<bool, CredentialError> {
    cairn_sysutil::create_once(path, data, Some(0o600)).map_err(io_err("create", path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn generated_once_then_stored_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let none = || (None, None);
        assert!(matches!(
            RootCredentials::resolve_with(none(), dir.path(), false),
            Err(CredentialError::NoRootCredentials { .. })
        ));
        let (made, origin) = RootCredentials::resolve_with(none(), dir.path(), true).unwrap();
        assert_eq!(origin, Origin::Generated);
        let (again, origin) = RootCredentials::resolve_with(none(), dir.path(), true).unwrap();
        assert_eq!(origin, Origin::Stored);
        assert_eq!(again.secret_key, made.secret_key);
        let mode = std::fs::metadata(dir.path().join(ROOT_CREDENTIALS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!format!("{made:?}").contains(&made.secret_key));
    }

    #[test]
    fn the_environment_wins_and_must_be_whole_and_valid() {
        let dir = tempfile::tempdir().unwrap();
        let env = |a: &str, s: &str| (Some(a.to_string()), Some(s.to_string()));
        let (c, origin) =
            RootCredentials::resolve_with(env("admin", "longenough"), dir.path(), true).unwrap();
        assert_eq!(
            (c.access_key.as_str(), origin),
            ("admin", Origin::Environment)
        );
        assert!(!dir.path().join(ROOT_CREDENTIALS_FILE).exists());
        assert!(matches!(
            RootCredentials::resolve_with(env("admin", "short"), dir.path(), true),
            Err(CredentialError::Invalid(_))
        ));
        assert!(matches!(
            RootCredentials::resolve_with((Some("admin".into()), None), dir.path(), true),
            Err(CredentialError::HalfInEnvironment)
        ));
    }

    #[test]
    fn the_admin_token_is_made_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_admin_token(dir.path()),
            Err(CredentialError::Io { .. })
        ));
        let t = load_or_create_admin_token(dir.path()).unwrap();
        assert_eq!(t.len(), 48);
        assert_eq!(load_or_create_admin_token(dir.path()).unwrap(), t);
        assert_eq!(read_admin_token(dir.path()).unwrap(), t);
        std::fs::write(dir.path().join(ADMIN_TOKEN_FILE), "short\n").unwrap();
        assert!(matches!(
            load_or_create_admin_token(dir.path()),
            Err(CredentialError::TokenTooShort { .. })
        ));
    }
}
