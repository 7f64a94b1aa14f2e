//! The SSH admin console: what an operator reaches with stock OpenSSH when
//! something is wrong (`ssh -p 2222 admin@node nodectl cluster status`, or an
//! interactive session).
//!
//! Key-only: a key is accepted when it is listed in an authorized-keys file (the
//! node's `ssh/authorized_keys` in its state directory, and any the config
//! names), each line optionally prefixed with the key's role (`role=reader
//! ssh-ed25519 AAAA… alice`; admin when absent). No passwords, no default keys;
//! the host key is made at first start and kept in the state directory.
//!
//! A session runs nodectl itself (the same code path as the CLI) against this
//! node's admin API with a token minted for the session and the key's role, so
//! the admin API's one access layer decides what the session may do, and its
//! audit names the session (`ssh:<key comment>`). Only nodectl's commands that act
//! through that API are run, never with options pointing elsewhere (another node,
//! token file or data directory). There is no general shell.

mod commands;
mod keys;
mod session;

pub use keys::{check_public_key, AuthorizedKey, KeyError};

use cairn_adminapi::Role;
use russh::keys::{ssh_key::LineEnding, PrivateKey};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Errors of the console's start.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("SSH host key {path}: {why}")]
    HostKey { path: PathBuf, why: String },
    #[error("SSH listener on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Session tokens: what the console asks of the admin API's side for each
/// session, so that its calls carry the session's identity and role.
pub trait Sessions: Send + Sync + 'static {
    /// A token standing for `who` with `role` until [`Sessions::close`].
    fn open(&self, who: String, role: Role) -> String;
    fn close(&self, token: &str);
    /// Keys added through the admin API (replicated with the cluster's
    /// metadata), as authorized-keys lines with their `role=` prefix; read at
    /// each login, so an added key works and a removed one is refused at once.
    fn keys(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What the console needs to know.
#[derive(Clone, Debug)]
pub struct ConsoleConfig {
    /// The node's state directory: `ssh/` in it holds the host key and the
    /// authorized keys.
    pub state: PathBuf,
    /// More authorized-keys files (the node config's).
    pub authorized_keys: Vec<PathBuf>,
    /// This node's admin API, `host:port`, for the nodectl a session runs.
    pub admin: String,
    /// `sh COMMAND` runs for admin keys (each use logged); off by default.
    pub break_glass: bool,
    /// The nodectl binary.
    pub nodectl: PathBuf,
    /// Where the node's daemons log, for `logs` (journald is asked when absent).
    pub log_dir: Option<PathBuf>,
}

impl ConsoleConfig {
    fn ssh_dir(&self) -> PathBuf {
        self.state.join("ssh")
    }

    /// Every key accepted now (the files are read at each login, so a key added
    /// or removed takes effect at once).
    pub(crate) fn keys(&self) -> Vec<AuthorizedKey> {
        let mut files = vec![self.ssh_dir().join("authorized_keys")];
        files.extend(self.authorized_keys.iter().cloned());
        let mut out = Vec::new();
        for f in files {
            match std::fs::read_to_string(&f) {
                Ok(text) => {
                    for (n, line) in text.lines().enumerate() {
                        match keys::parse_line(line) {
                            Ok(Some(k)) => out.push(k),
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(file = %f.display(), line = n + 1, "authorized key skipped: {e}")
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(file = %f.display(), "authorized keys unreadable: {e}"),
            }
        }
        out
    }
}

/// The host key in `dir`, made (ed25519, mode 0600) if there is none.
fn host_key(dir: &Path) -> Result<PrivateKey, ConsoleError> {
    let path = dir.join("ssh_host_ed25519_key");
    let err = |why: String| ConsoleError::HostKey {
        path: path.clone(),
        why,
    };
    if path.exists() {
        return PrivateKey::read_openssh_file(&path).map_err(|e| err(e.to_string()));
    }
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let seed: [u8; 32] = rand::random();
    let pair = russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed);
    let key = PrivateKey::from(pair);
    let text = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| err(e.to_string()))?;
    write_private(&path, text.as_bytes()).map_err(|e| err(e.to_string()))?;
    tracing::info!(path = %path.display(), "SSH host key made");
    Ok(key)
}

/// Writes a secret file readable by its owner only, atomically.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Serves the console on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: ConsoleConfig,
    sessions: Arc<dyn Sessions>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ConsoleError> {
    let key = host_key(&cfg.ssh_dir())?;
    let config = Arc::new(russh::server::Config {
        keys: vec![key],
        // Only public keys are offered to clients.
        methods: russh::MethodSet::from(&[russh::MethodKind::PublicKey][..]),
        auth_rejection_time: Duration::from_millis(500),
        auth_rejection_time_initial: Some(Duration::ZERO),
        inactivity_timeout: Some(Duration::from_secs(3600)),
        ..Default::default()
    });
    let mut server = session::Server {
        cfg: Arc::new(cfg),
        sessions,
    };
    let running = russh::server::Server::run_on_socket(&mut server, config, &listener);
    let handle = running.handle();
    tokio::select! {
        r = running => if let Err(e) = r {
            tracing::error!("SSH console stopped: {e}");
        },
        _ = shutdown => handle.shutdown("the node is stopping".into()),
    }
    Ok(())
}
