//! Messages for the operator at the console (serial or screen), where a node without a
//! network is still seen. Each also goes to the log.

use std::io::Write;
use std::path::PathBuf;

/// `/dev/console`, or a file in tests.
#[derive(Clone, Debug)]
pub struct Console {
    path: PathBuf,
}

impl Console {
    pub fn new(path: impl Into<PathBuf>) -> Console {
        Console { path: path.into() }
    }

    /// Print `cairn: <message>` on its own line. A console that cannot be written is
    /// logged, never fatal: the message is in the journal either way.
    pub fn say(&self, message: &str) {
        tracing::info!("{message}");
        let line = format!("cairn: {message}\n");
        let res = std::fs::OpenOptions::new()
            .append(true)
            .create(false)
            .open(&self.path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = res {
            tracing::warn!("cannot write to {}: {e}", self.path.display());
        }
    }
}
