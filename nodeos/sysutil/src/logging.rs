//! Where a daemon's log goes. To journald, with each event's structured fields
//! (node, drive, tenant ...) as journal fields, when systemd connected the
//! process's stderr to the journal: it then sets `JOURNAL_STREAM` (systemd.exec(5)).
//! Otherwise to stderr as text, coloured only on a terminal, so the log files of
//! `nodectl dev up` and of a supervisor carry no escape codes.

use std::io::IsTerminal;
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

/// Installs the process's subscriber: `RUST_LOG` if set, else `default`
/// (e.g. "info").
pub fn init(default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            tracing_subscriber::registry()
                .with(filter)
                .with(journald)
                .init();
            return;
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
