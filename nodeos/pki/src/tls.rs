//! Mutual TLS between nodes.
//!
//! Every node of a cluster holds a certificate issued by the cluster's CA (made at
//! `cluster init`) and its own private key, which never leaves the node. Node to
//! node traffic (the chunk protocol, Raft and membership) runs over TLS 1.3 where
//! both ends present such a certificate and check the other's against the cluster
//! CA; a peer without one is refused during the handshake.
//!
//! This module only builds rustls configurations from PEM material; issuing
//! certificates is [`crate::ca`]'s. The crypto provider is `ring`,
//! named explicitly: the workspace may also link aws-lc-rs (through test clients),
//! and rustls refuses to guess between two.

use crate::PkiError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// File names of a node's TLS material in its TLS directory.
pub const CA_FILE: &str = "ca.pem";
pub const CERT_FILE: &str = "node.pem";
pub const KEY_FILE: &str = "node.key";
/// The certificates (SHA-256, hex, one per line) of the cluster's current members,
/// rewritten by mgmtd on every map change. A peer whose certificate is not listed is
/// refused even though the cluster CA signed it: that is how a removed node loses
/// access. Without the file, any certificate of the cluster CA is accepted.
pub const PEERS_FILE: &str = "peers";

/// Reads [`PEERS_FILE`] from `dir`: `None` when it does not exist.
pub fn load_peers(dir: &Path) -> Result<Option<std::collections::HashSet<[u8; 32]>>, PkiError> {
    let p = dir.join(PEERS_FILE);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(PkiError::Read {
                path: p.display().to_string(),
                source,
            })
        }
    };
    let mut set = std::collections::HashSet::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let fp = crate::ca::unhex(line)
            .and_then(|v| <[u8; 32]>::try_from(v).ok())
            .ok_or_else(|| PkiError::Pem {
                what: p.display().to_string(),
                why: format!("{line:?} is not a SHA-256 in hex"),
            })?;
        set.insert(fp);
    }
    Ok(Some(set))
}

/// The crypto provider of every Cairn TLS configuration.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A node's identity: the cluster CA, its certificate chain and its key.
#[derive(Debug)]
pub struct NodeTls {
    ca: CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for NodeTls {
    fn clone(&self) -> Self {
        NodeTls {
            ca: self.ca.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

fn pem_err(what: &str) -> impl FnOnce(rustls::pki_types::pem::Error) -> PkiError + '_ {
    move |e| PkiError::Pem {
        what: what.to_string(),
        why: e.to_string(),
    }
}

impl NodeTls {
    /// From PEM text: the CA certificate, the node certificate (optionally followed
    /// by the CA, which is added to the chain when missing) and the node's key.
    pub fn from_pem(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<NodeTls, PkiError> {
        let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).map_err(pem_err("CA"))?;
        let mut chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(pem_err("node certificate"))?;
        if chain.is_empty() {
            return Err(PkiError::Pem {
                what: "node certificate".into(),
                why: "no certificate".into(),
            });
        }
        // Peers that join with only a token's CA fingerprint find the CA here.
        if !chain.contains(&ca) {
            chain.push(ca.clone());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(pem_err("node key"))?;
        let tls = NodeTls { ca, chain, key };
        // Fail now on a key that does not match, not at the first handshake.
        tls.server_config(true)?;
        Ok(tls)
    }

    /// Reads `ca.pem`, `node.pem` and `node.key` from `dir`; `None` when the node
    /// has no certificate yet (no `node.pem`).
    pub fn load(dir: &Path) -> Result<Option<NodeTls>, PkiError> {
        let read = |name: &str| {
            let p = dir.join(name);
            std::fs::read_to_string(&p).map_err(|source| PkiError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        if !dir.join(CERT_FILE).exists() {
            return Ok(None);
        }
        NodeTls::from_pem(&read(CA_FILE)?, &read(CERT_FILE)?, &read(KEY_FILE)?).map(Some)
    }

    /// The cluster CA certificate (DER).
    pub fn ca(&self) -> &CertificateDer<'static> {
        &self.ca
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, PkiError> {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.ca.clone())
            .map_err(|e| PkiError::Config(format!("cluster CA: {e}")))?;
        Ok(Arc::new(roots))
    }

    /// A server configuration. With `require_client_cert`, a client that does not
    /// present a certificate from the cluster CA fails the handshake; without it,
    /// such a client is let in and the caller decides what it may reach (a joining
    /// node has no certificate yet).
    pub fn server_config(&self, require_client_cert: bool) -> Result<Arc<ServerConfig>, PkiError> {
        let builder = WebPkiClientVerifier::builder_with_provider(self.roots()?, provider());
        let builder = if require_client_cert {
            builder
        } else {
            builder.allow_unauthenticated()
        };
        let verifier = builder
            .build()
            .map_err(|e| PkiError::Config(e.to_string()))?;
        let cfg = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| PkiError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| PkiError::Config(format!("node certificate and key: {e}")))?;
        Ok(Arc::new(cfg))
    }

    /// A client configuration: trusts only the cluster CA and presents the node's
    /// certificate.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, PkiError> {
        let cfg = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| PkiError::Config(e.to_string()))?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| PkiError::Config(format!("node certificate and key: {e}")))?;
        Ok(Arc::new(cfg))
    }
}

/// A client configuration for a node that has no certificate yet and knows the
/// cluster only by the SHA-256 of its CA certificate (from the join token): the
/// server must present a chain that contains that CA and a certificate it signed
/// for the address dialled.
pub fn pinned_ca_client_config(ca_sha256: [u8; 32]) -> Result<Arc<ClientConfig>, PkiError> {
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| PkiError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCa { ca_sha256 }))
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// SHA-256 of a DER certificate.
pub fn cert_sha256(der: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// SHA-256 of the (first) certificate in `pem`; `what` names it in the error.
pub fn pem_cert_sha256(pem: &str, what: &str) -> Result<[u8; 32], PkiError> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).map_err(pem_err(what))?;
    Ok(cert_sha256(&der))
}

#[derive(Debug)]
struct PinnedCa {
    ca_sha256: [u8; 32],
}

impl PinnedCa {
    fn webpki(
        &self,
        ca: &CertificateDer<'_>,
    ) -> Result<Arc<dyn ServerCertVerifier>, rustls::Error> {
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let v = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
        Ok(v)
    }
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The pinned CA must be among the certificates the server sent; then the
        // ordinary WebPKI checks run with it as the only root.
        let ca = intermediates
            .iter()
            .find(|c| cert_sha256(c) == self.ca_sha256)
            .ok_or_else(|| {
                rustls::Error::General(
                    "the server's certificate is not from the cluster named by the join token"
                        .into(),
                )
            })?;
        self.webpki(ca)?
            .verify_server_cert(end_entity, &[], server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The TLS server name for an address `host:port` (an IP address or a DNS name).
pub fn server_name(addr: &str) -> Result<ServerName<'static>, PkiError> {
    ServerName::try_from(crate::ca::host_of(addr).to_string())
        .map_err(|e| PkiError::Config(format!("{addr}: not a host name or IP address: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peers_file_lists_sha256_in_hex() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_peers(dir.path()).unwrap().is_none());
        let fp = [0xabu8; 32];
        let line = crate::ca::hex(&fp);
        std::fs::write(dir.path().join(PEERS_FILE), format!("\n{line}\n  \n")).unwrap();
        let peers = load_peers(dir.path()).unwrap().unwrap();
        assert_eq!(peers.into_iter().collect::<Vec<_>>(), vec![fp]);
        for bad in [&line[1..], "zz", &format!("{line}00")] {
            std::fs::write(dir.path().join(PEERS_FILE), bad).unwrap();
            assert!(load_peers(dir.path()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn server_names_are_the_host_of_an_address() {
        for (addr, name) in [
            ("10.0.0.7:9002", "10.0.0.7"),
            ("[::1]:9002", "::1"),
            ("node.example:7410", "node.example"),
        ] {
            assert_eq!(
                server_name(addr).unwrap(),
                ServerName::try_from(name).unwrap()
            );
        }
        assert!(server_name("bad host:1").is_err());
    }
}
