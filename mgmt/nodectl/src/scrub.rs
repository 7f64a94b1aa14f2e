//! `nodectl scrub status|start|pause`: the node's scrubber, through the admin API
//! (`/v1/scrub`). Each node scrubs its own drives; in a cluster, ask each node.

use crate::cluster::Target;
use crate::status::human;
use crate::NodectlError;
use cairn_adminapi::{ScrubPass, ScrubState, ScrubStatus};
use std::time::Duration;

pub async fn status(target: &Target, json: bool) -> Result<(), NodectlError> {
    let s: ScrubStatus = target.api()?.scrub_status().await?;
    print_status(&s, json);
    Ok(())
}

/// Starts (or resumes) a pass; with `wait`, follows it to the end and fails when
/// it left bad fragments it could not rebuild.
pub async fn start(target: &Target, wait: bool, json: bool) -> Result<(), NodectlError> {
    let api = target.api()?;
    let before: ScrubStatus = api.scrub_status().await?;
    let s: ScrubStatus = api.scrub_start().await?;
    if !wait {
        print_status(&s, json);
        return Ok(());
    }
    let mut last_line = String::new();
    let done = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let s: ScrubStatus = api.scrub_status().await?;
        if s.passes > before.passes && s.current.is_none() {
            break s;
        }
        if let Some(p) = &s.current {
            let line = progress(p, s.state);
            if !json && line != last_line {
                eprintln!("{line}");
                last_line = line;
            }
        }
    };
    print_status(&done, json);
    match done.last {
        Some(p) if p.unrepaired > 0 => Err(NodectlError::Usage(format!(
            "scrub left {} bad fragments it could not rebuild (see the node's log)",
            p.unrepaired
        ))),
        _ => Ok(()),
    }
}

pub async fn pause(target: &Target, json: bool) -> Result<(), NodectlError> {
    let s: ScrubStatus = target.api()?.scrub_pause().await?;
    print_status(&s, json);
    Ok(())
}

fn print_status(s: &ScrubStatus, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(s).unwrap_or_default());
        return;
    }
    let state = match s.state {
        ScrubState::Idle => "idle",
        ScrubState::Running => "running",
        ScrubState::Paused => "paused",
    };
    println!(
        "scrubber: {state}, at most {}/s, {}",
        human(s.rate_bytes_per_s),
        match s.every_s {
            Some(e) => format!("a pass every {}", duration(e)),
            None => "passes on demand only".into(),
        }
    );
    if let Some(p) = &s.current {
        println!("current pass: {}", progress(p, s.state));
    }
    match &s.last {
        Some(p) => println!(
            "last pass: {}, {} objects, {} fragments, {} read in {}: {} bad, {} rebuilt, {} not rebuilt{}",
            when(p.finished_ms.unwrap_or(p.started_ms)),
            p.objects,
            p.fragments,
            human(p.bytes),
            duration(
                (p.finished_ms.unwrap_or(p.started_ms) - p.started_ms).max(0) as u64 / 1000
            ),
            p.bad,
            p.repaired,
            p.unrepaired,
            if p.skipped > 0 {
                format!(
                    ", {} skipped (drive down; another pass follows soon)",
                    p.skipped
                )
            } else {
                String::new()
            }
        ),
        None => println!("last pass: none recorded"),
    }
    if let (Some(next), ScrubState::Idle) = (s.next_ms, s.state) {
        println!("next pass: {}", when(next));
    }
}

fn progress(p: &ScrubPass, state: ScrubState) -> String {
    let pct = if p.objects_total == 0 {
        100.0
    } else {
        (p.objects as f64 / p.objects_total as f64 * 100.0).min(100.0)
    };
    format!(
        "{pct:.0}% ({} of {} objects, {} read){}: {} bad, {} rebuilt",
        p.objects,
        p.objects_total,
        human(p.bytes),
        if state == ScrubState::Paused {
            ", paused"
        } else {
            ""
        },
        p.bad,
        p.repaired
    )
}

pub(crate) fn duration(secs: u64) -> String {
    match secs {
        s if s >= 86_400 => format!("{:.1} d", s as f64 / 86_400.0),
        s if s >= 3600 => format!("{:.1} h", s as f64 / 3600.0),
        s if s >= 60 => format!("{:.1} min", s as f64 / 60.0),
        s => format!("{s} s"),
    }
}

/// A time as seconds from now ("in 3.0 d", "12 s ago").
pub(crate) fn when(ms: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    if ms >= now {
        format!("in {}", duration(((ms - now) / 1000) as u64))
    } else {
        format!("{} ago", duration(((now - ms) / 1000) as u64))
    }
}
