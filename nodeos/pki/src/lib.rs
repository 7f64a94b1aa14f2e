//! The cluster's public-key infrastructure, in one place: the CA made at
//! `cluster init` and the certificates it issues to nodes, the join tokens that
//! name it ([`ca`]), and the rustls configurations a node builds from its CA,
//! certificate and key for mutual TLS ([`tls`]).
//!
//! The chunk protocol's peer client, datapathd's peer listener and the cluster
//! layer (Raft, membership, joins) use it. Any Cairn crate may depend on it; it
//! depends on no Cairn crate, and knows no protocol: what runs over the TLS (and
//! the chunk protocol's node-local key handshake) belongs to the protocol's crate.

pub mod ca;
pub mod tls;

pub use ca::Secrets;

/// What went wrong with certificates, keys, tokens or TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// PEM material that does not parse.
    #[error("{what}: {why}")]
    Pem { what: String, why: String },
    /// A TLS file that cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// rustls refused the configuration (a key that is not the certified one...).
    #[error("TLS configuration: {0}")]
    Config(String),
    /// Making a key or signing a certificate failed.
    #[error("{what}: {why}")]
    Issue { what: String, why: String },
    /// A joiner's public key that is not an uncompressed P-256 point.
    #[error("the public key is not an uncompressed P-256 point")]
    BadPublicKey,
    /// Not a join token at all.
    #[error(
        "a join token looks like cairn1.<64 hex digits>.<secret> (from `nodectl cluster token`)"
    )]
    MalformedToken,
    /// A well-formed token of another cluster, or with the wrong secret.
    #[error("wrong join token")]
    WrongToken,
}
