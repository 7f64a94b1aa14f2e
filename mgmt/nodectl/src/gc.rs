//! `nodectl gc [--dry-run] | gc status`: the node's collector, through the admin
//! API (`/v1/gc`). Each node collects its own drives; in a cluster, ask each node.

use crate::cluster::Target;
use crate::scrub::{duration, when};
use crate::NodectlError;
use cairn_adminapi::{GcRound, GcRunQuery, GcStatus};
use std::time::Duration;

pub async fn status(target: &Target, json: bool) -> Result<(), NodectlError> {
    let s: GcStatus = target.api()?.gc_status().await?;
    print_status(&s, json);
    Ok(())
}

/// Runs a round now and waits for it; fails if the round did not complete.
pub async fn run(target: &Target, dry_run: bool, json: bool) -> Result<(), NodectlError> {
    let api = target.api()?;
    let before: GcStatus = api.gc_run(GcRunQuery { dry_run }).await?;
    let done = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s: GcStatus = api.gc_status().await?;
        // The round asked for has ended once a round started after the request
        // has (one already running when asked counts too: they queue).
        if s.rounds > before.rounds + u64::from(before.running) && !s.running {
            break s;
        }
    };
    print_status(&done, json);
    match done.last.and_then(|r| r.error) {
        Some(e) => Err(NodectlError::Usage(format!(
            "the collector round failed: {e}"
        ))),
        None => Ok(()),
    }
}

fn print_status(s: &GcStatus, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(s).unwrap_or_default());
        return;
    }
    println!(
        "collector: {}, epoch {} (advanced {}), {} chunks waiting, {} deleted since start",
        if s.every_secs > 0 {
            format!("a round every {}", duration(s.every_secs))
        } else {
            "rounds on demand only".into()
        },
        s.epoch,
        if s.epoch_advanced_ms > 0 {
            when(s.epoch_advanced_ms)
        } else {
            "never".into()
        },
        s.candidates,
        s.deleted_total,
    );
    match &s.last {
        Some(r) => println!("last round: {}", round_line(r)),
        None => println!("last round: none since mgmtd started"),
    }
}

fn round_line(r: &GcRound) -> String {
    let mut line = format!(
        "{}{}, epoch {}: {} chunks listed, {} unreferenced, {} {}, {} waiting for the epoch to advance",
        when(r.finished_ms),
        if r.dry_run { " (dry run)" } else { "" },
        r.epoch,
        r.listed,
        r.unreferenced,
        r.deleted,
        if r.dry_run { "would be deleted" } else { "deleted" },
        r.waiting,
    );
    if r.kept > 0 {
        line += &format!(", {} kept (written again since)", r.kept);
    }
    if r.drives_skipped > 0 {
        line += &format!(", {} drives skipped (failed)", r.drives_skipped);
    }
    if let Some(e) = &r.error {
        line += &format!("; FAILED: {e}");
    }
    line
}
