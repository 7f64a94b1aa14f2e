//! `nodectl status`: the node's drives, capacity, objects and health, read through
//! the authenticated admin API.

use crate::NodectlError;
use cairn_adminapi::NodeStatus;

pub async fn show(target: &crate::cluster::Target, json: bool) -> Result<(), NodectlError> {
    // A node reached by address says nothing of its S3 endpoint; a local one's
    // is in the dev state.
    let s3 = match target.remote() {
        true => None,
        false => Some(
            crate::dev::read_state(&target.data)?
                .node(target.node)?
                .s3
                .clone(),
        ),
    };
    let status: NodeStatus = target
        .api()?
        .with_timeout(std::time::Duration::from_secs(10))
        .status()
        .await?;
    if json {
        let mut v = serde_json::to_value(&status).unwrap_or_default();
        if let Some(s3) = &s3 {
            v["s3_endpoint"] = format!("http://{s3}").into();
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    if status.hostname.is_empty() {
        println!("Node         {}", status.health);
    } else {
        println!("Node         {} ({})", status.hostname, status.health);
    }
    if let Some(s3) = &s3 {
        println!("S3           http://{s3}");
    }
    println!("State        {}", status.data_dir);
    for a in &status.alerts {
        println!("Alert        {a}");
    }
    println!("Protection   {}", status.protection);
    println!(
        "Objects      {} in {} buckets",
        status.objects, status.buckets
    );
    if let Some(p) = &status.objects_protection {
        if p.degraded > 0 || p.lost > 0 {
            println!(
                "             {} fully protected, {} short of fragments ({} missing, repair runs every few seconds), {} lost",
                p.protected, p.degraded, p.fragments_missing, p.lost
            );
        }
    }
    println!(
        "Capacity     {} used of {} ({:.1}%)",
        human(status.used_bytes),
        human(status.capacity_bytes),
        100.0 * status.used_bytes as f64 / status.capacity_bytes.max(1) as f64
    );
    println!(
        "Repair       {} degraded reads, {} bad fragments found, {} repaired, {} unreadable",
        status.degraded_reads,
        status.bad_fragments,
        status.repaired_fragments,
        status.unreadable_reads
    );
    if let Some(p) = status.scrub.as_ref().and_then(|s| s.last.as_ref()) {
        println!(
            "Scrub        last pass: {} fragments checked, {} bad, {} rebuilt, {} not rebuilt",
            p.fragments, p.bad, p.repaired, p.unrepaired
        );
    }
    if let Some(l) = status.lifecycle.as_ref().filter(|l| l.passes > 0) {
        println!(
            "Lifecycle    {} objects expired, {} incomplete uploads aborted; last pass {}",
            l.expired,
            l.aborted,
            crate::scrub::when(l.last_pass_ms as i64)
        );
    }
    println!();
    println!(
        "{:<6}{:<9}{:>11}{:>11}{:>9}  DEVICE",
        "DRIVE", "STATE", "USED", "CAPACITY", "CHUNKS"
    );
    for d in &status.drives {
        // What the drive is, where the node knows (`nodectl drives` has it all).
        let what: Vec<&str> = [&d.model, &d.serial]
            .into_iter()
            .filter_map(|v| v.as_deref())
            .collect();
        println!(
            "{:<6}{:<9}{:>11}{:>11}{:>9}  {}{}{}",
            d.index,
            if d.state == "healthy" && d.full {
                "full"
            } else {
                d.state.as_str()
            },
            human(d.used_bytes),
            human(d.capacity_bytes),
            d.chunks,
            d.device,
            if what.is_empty() {
                String::new()
            } else {
                format!("  [{}]", what.join(", "))
            },
            if d.reason.is_empty() {
                String::new()
            } else {
                format!("  ({})", d.reason)
            }
        );
    }
    Ok(())
}

pub(crate) fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
