//! Where the config comes from, first match wins: the state partition, the `CAIRNCFG`
//! volume, the kernel command line. An existing but invalid source is an error, never
//! skipped: falling through to an older or different config would be guessing.

use crate::{ConfigError, NodeConfig};
use base64::Engine;
use std::fs;
use std::path::{Path, PathBuf};

/// The filesystem label of the config volume.
pub const VOLUME_LABEL: &str = "CAIRNCFG";
/// The kernel command-line key carrying a base64url TOML config.
pub const CMDLINE_KEY: &str = "cairn.config";

/// The places to look. Paths are parameters so tests use temp dirs.
#[derive(Clone, Debug)]
pub struct Sources {
    /// `/var/lib/cairn/node.toml`.
    pub state_file: PathBuf,
    /// Where the `CAIRNCFG` volume is mounted, if one was found.
    pub volume_dir: Option<PathBuf>,
    /// The contents of `/proc/cmdline`.
    pub cmdline: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    State(PathBuf),
    Volume(PathBuf),
    Cmdline,
}

#[derive(Clone, Debug)]
pub struct Loaded {
    pub config: NodeConfig,
    pub source: ConfigSource,
    /// The TOML text as read, so it can be persisted byte for byte.
    pub text: String,
}

/// Find the config. `Ok(None)` means no source holds one: maintenance mode.
pub fn load(src: &Sources) -> Result<Option<Loaded>, ConfigError> {
    if let Some(text) = read_if_exists(&src.state_file)? {
        let config = NodeConfig::parse(&text, &src.state_file.display().to_string())?;
        return Ok(Some(Loaded {
            config,
            source: ConfigSource::State(src.state_file.clone()),
            text,
        }));
    }
    if let Some(dir) = &src.volume_dir {
        let path = dir.join("node.toml");
        if let Some(text) = read_if_exists(&path)? {
            let name = format!("{VOLUME_LABEL} volume {}", path.display());
            let config = NodeConfig::parse(&text, &name)?;
            return Ok(Some(Loaded {
                config,
                source: ConfigSource::Volume(path),
                text,
            }));
        }
    }
    let prefix = format!("{CMDLINE_KEY}=");
    if let Some(b64) = src
        .cmdline
        .split_ascii_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
    {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(b64.trim_end_matches('='))
            .map_err(|e| ConfigError::Base64(e.to_string()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| ConfigError::Base64("decodes to bytes that are not UTF-8".into()))?;
        let config = NodeConfig::parse(&text, "kernel command line cairn.config")?;
        return Ok(Some(Loaded {
            config,
            source: ConfigSource::Cmdline,
            text,
        }));
    }
    Ok(None)
}

/// Write the config text to the state file, mode 0600 (it holds the root secret),
/// atomically: a power cut leaves the old file or the new one.
pub fn persist(text: &str, state_file: &Path) -> Result<(), ConfigError> {
    let io = |err| ConfigError::Io {
        path: state_file.display().to_string(),
        err,
    };
    cairn_sysutil::write_atomic(state_file, text.as_bytes(), Some(0o600)).map_err(io)
}

fn read_if_exists(p: &Path) -> Result<Option<String>, ConfigError> {
    match fs::read_to_string(p) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(ConfigError::Io {
            path: p.display().to_string(),
            err,
        }),
    }
}
