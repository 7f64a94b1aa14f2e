//! `nodectl drives`: each drive of a node, what it is (backend, device, model,
//! serial, firmware), its space and its health, read through the admin API
//! (`GET /v1/drives`, answered from the node's own datapathd).

use crate::cluster::Target;
use crate::status::human;
use crate::NodectlError;
use cairn_adminapi::{DriveStatus, NodeDrives};

pub async fn show(target: &Target, json: bool) -> Result<(), NodectlError> {
    let d: NodeDrives = target.api()?.drives().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&d).unwrap_or_default());
        return Ok(());
    }
    print!("{}", table(&d.drives));
    Ok(())
}

/// The human table: one line per drive, columns as wide as their widest cell.
fn table(drives: &[DriveStatus]) -> String {
    let unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let header = [
        "DRIVE", "BACKEND", "DEVICE", "MODEL", "SERIAL", "FIRMWARE", "CAPACITY", "USED", "CHUNKS",
        "HEALTH",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for d in drives {
        let mut health = if d.state != "healthy" {
            if d.reason.is_empty() {
                d.state.clone()
            } else {
                format!("{}: {}", d.state, d.reason)
            }
        } else if d.full {
            "full (deletes only)".to_string()
        } else {
            "ok".to_string()
        };
        if let Some(dmg) = &d.damage_at_open {
            health.push_str(&format!(
                "; at open: {} records lost, {} salvaged, {} torn, {} damaged segments",
                dmg.corrupt_records, dmg.salvaged_records, dmg.torn_batches, dmg.damaged_segments
            ));
        }
        rows.push(vec![
            d.index.to_string(),
            if d.backend.is_empty() {
                "-".into()
            } else {
                d.backend.clone()
            },
            // An older mgmtd says only `device` (backend:location).
            if d.location.is_empty() {
                d.device.clone()
            } else {
                d.location.clone()
            },
            unknown(&d.model),
            unknown(&d.serial),
            unknown(&d.firmware),
            human(d.capacity_bytes),
            human(d.used_bytes),
            d.chunks.to_string(),
            health,
        ]);
    }
    let cols = header.len();
    let width: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            // Numbers right-aligned, the last column not padded.
            if c + 1 == cols {
                line.push_str(cell);
            } else if matches!(c, 6..=8) {
                line.push_str(&format!("{cell:>w$}  ", w = width[c]));
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = width[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(i: u16, state: &str, reason: &str) -> DriveStatus {
        DriveStatus {
            index: i,
            device: format!("uring:/d/drive-{i}.img"),
            state: state.into(),
            reason: reason.into(),
            capacity_bytes: 8 << 30,
            used_bytes: 3 << 20,
            allocated_bytes: 8 << 20,
            chunks: 12,
            backend: "uring".into(),
            location: format!("/d/drive-{i}.img"),
            model: None,
            serial: None,
            firmware: None,
            full: false,
            free_segments: None,
            reserve_segments: None,
            damage_at_open: None,
            reactor: None,
        }
    }

    #[test]
    fn table_shows_identity_space_and_health() {
        let mut nvme = drive(1, "healthy", "");
        nvme.backend = "nvme".into();
        nvme.location = "0000:00:04.0/ns1".into();
        nvme.model = Some("QEMU NVMe Ctrl".into());
        nvme.serial = Some("SN-A0".into());
        nvme.firmware = Some("8.2.0".into());
        let t = table(&[drive(0, "failed", "/d/drive-0.img is gone"), nvme]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("DRIVE  BACKEND  DEVICE"), "{t}");
        assert!(
            lines[1].starts_with("0      uring    /d/drive-0.img"),
            "{t}"
        );
        assert!(lines[1].ends_with("failed: /d/drive-0.img is gone"), "{t}");
        assert!(lines[1].contains("8.0 GiB"), "{t}");
        assert!(lines[1].contains("3.0 MiB"), "{t}");
        for f in [
            "nvme",
            "0000:00:04.0/ns1",
            "QEMU NVMe Ctrl",
            "SN-A0",
            "8.2.0",
        ] {
            assert!(lines[2].contains(f), "{f}: {t}");
        }
        assert!(lines[2].ends_with(" ok"), "{t}");
        // Columns line up: every row's DEVICE starts where the header's does.
        let col = lines[0].find("DEVICE").unwrap();
        assert_eq!(lines[2].find("0000:00:04.0/ns1"), Some(col), "{t}");
    }

    #[test]
    fn an_older_mgmtd_answer_still_reads() {
        // No backend/location/identity fields: serde defaults, and the device name.
        let v = serde_json::json!({"drives": [{
            "index": 0, "device": "uring:/x", "state": "healthy", "reason": "",
            "capacity_bytes": 1, "used_bytes": 0, "allocated_bytes": 0, "chunks": 0
        }]});
        let d: NodeDrives = serde_json::from_value(v).unwrap();
        assert_eq!(d.drives[0].model, None);
        assert!(table(&d.drives)
            .lines()
            .nth(1)
            .unwrap()
            .contains("uring:/x"));
    }
}
