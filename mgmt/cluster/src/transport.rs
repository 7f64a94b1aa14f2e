//! How a node reaches its peers: its TLS identity, installed at init or join, and
//! the HTTPS client made from it.

use crate::ClusterError;
use cairn_pki::tls::NodeTls;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

/// How a node talks to its peers: HTTPS with mutual TLS, once the node holds a
/// certificate from the cluster CA. Before that (a node not yet in a cluster) it
/// can reach no peer and no peer can reach it, except a seed during its join.
#[derive(Debug)]
pub struct Transport {
    dir: PathBuf,
    state: watch::Sender<Option<Arc<Certified>>>,
}

/// A node's TLS identity and the configurations made from it.
#[derive(Debug)]
pub struct Certified {
    pub node: NodeTls,
    /// Server side of the internal API: client certificates optional (a joiner has
    /// none), checked per connection by
    /// [`Cluster::serve_internal`](crate::Cluster::serve_internal).
    pub server: Arc<rustls::ServerConfig>,
    /// Client side of every node-to-node connection (internal API, chunk service).
    pub client: Arc<rustls::ClientConfig>,
    http: reqwest::Client,
}

impl Certified {
    fn new(node: NodeTls) -> Result<Certified, ClusterError> {
        let tls = |e: cairn_pki::PkiError| ClusterError::Pki(e.to_string());
        let client = node.client_config().map_err(tls)?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls((*client).clone())
            .build()
            .map_err(|e| ClusterError::Pki(format!("HTTPS client: {e}")))?;
        Ok(Certified {
            server: node.server_config(false).map_err(tls)?,
            client,
            http,
            node,
        })
    }
}

impl Transport {
    /// The transport of a node whose TLS material lives in `dir` (loaded now when
    /// the node already has a certificate).
    pub fn open(dir: PathBuf) -> Result<Transport, ClusterError> {
        let loaded = NodeTls::load(&dir).map_err(|e| ClusterError::Pki(e.to_string()))?;
        let state = match loaded {
            Some(node) => Some(Arc::new(Certified::new(node)?)),
            None => None,
        };
        Ok(Transport {
            dir,
            state: watch::channel(state).0,
        })
    }

    /// Checks and installs the node's certificate: written to the TLS directory
    /// (where datapathd picks it up too), then used for every new connection.
    pub fn install(&self, ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<(), ClusterError> {
        let node = NodeTls::from_pem(ca_pem, cert_pem, key_pem)
            .map_err(|e| ClusterError::Pki(e.to_string()))?;
        let certified = Certified::new(node)?;
        use cairn_pki::tls::{CA_FILE, CERT_FILE, KEY_FILE};
        let st = |e: std::io::Error| ClusterError::State(format!("{}: {e}", self.dir.display()));
        std::fs::create_dir_all(&self.dir).map_err(st)?;
        // The certificate goes last: readers take its presence to mean "complete".
        write_private(&self.dir.join(CA_FILE), ca_pem, 0o644).map_err(st)?;
        write_private(&self.dir.join(KEY_FILE), key_pem, 0o600).map_err(st)?;
        write_private(&self.dir.join(CERT_FILE), cert_pem, 0o644).map_err(st)?;
        self.state.send_replace(Some(Arc::new(certified)));
        Ok(())
    }

    /// Records the certificates of the current members (SHA-256, hex) for the
    /// node's datapathd, which refuses peers not listed.
    pub fn write_members(&self, fingerprints: &[&str]) -> Result<(), ClusterError> {
        let st = |e: std::io::Error| ClusterError::State(format!("{}: {e}", self.dir.display()));
        std::fs::create_dir_all(&self.dir).map_err(st)?;
        let mut body = fingerprints.join("\n");
        body.push('\n');
        write_private(&self.dir.join(cairn_pki::tls::PEERS_FILE), &body, 0o644).map_err(st)
    }

    /// The node's TLS identity, once it has one.
    pub fn certified(&self) -> Option<Arc<Certified>> {
        self.state.borrow().clone()
    }

    /// Changes of the identity (installed at init or join).
    pub fn watch(&self) -> watch::Receiver<Option<Arc<Certified>>> {
        self.state.subscribe()
    }

    pub fn client(&self) -> Result<reqwest::Client, ClusterError> {
        self.certified()
            .map(|c| c.http.clone())
            .ok_or(ClusterError::NotCertified)
    }

    pub fn url(&self, addr: &str, path: &str) -> String {
        format!("https://{addr}{path}")
    }
}

/// Writes a file atomically and durably with `mode`.
fn write_private(path: &std::path::Path, body: &str, mode: u32) -> std::io::Result<()> {
    cairn_sysutil::write_atomic(path, body.as_bytes(), Some(mode))
}
