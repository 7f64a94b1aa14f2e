//! The node config: the typed model of `node.toml`, its validation, and the order in which
//! nodeos looks for it (state partition, `CAIRNCFG` volume, kernel command line).
//!
//! This crate only parses, validates and copies files. It must never touch the network,
//! drives or any system setting, and it must never invent a config: when no source holds
//! one, the answer is "none" and the caller enters maintenance mode.

mod load;
mod model;

pub use load::{load, persist, ConfigSource, Loaded, Sources, CMDLINE_KEY, VOLUME_LABEL};
pub use model::*;

/// What can go wrong reading a node config. Every message names the source and, for a
/// bad value, the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{source_name}: {message}")]
    Parse {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: field `{field}`: {message}")]
    Invalid {
        source_name: String,
        field: String,
        message: String,
    },
    #[error("{path}: {err}")]
    Io {
        path: String,
        #[source]
        err: std::io::Error,
    },
    #[error("kernel command line: {CMDLINE_KEY}= is not valid base64url: {0}")]
    Base64(String),
}
