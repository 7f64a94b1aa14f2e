//! `nodectl drives` end to end: the real `nodectl dev up` (which supervises the real
//! datapathd and mgmtd on file-backed drives), then the real `nodectl drives`
//! against it, locally by data directory and remotely by admin address and token.

use cairn_it::dev::{nodectl_json, DevUp};
use cairn_it::{bin, Node, NodeOptions};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn drive_file(data: &Path, i: usize) -> String {
    data.join(format!("drives/drive-{i}.img"))
        .display()
        .to_string()
}

#[test]
fn nodectl_drives_lists_a_dev_node_and_shows_a_lost_drive_failed() {
    let node = DevUp::start(3);
    let data = node.data();
    let v = node.drives().expect("nodectl drives");
    let drives = v["drives"].as_array().expect("drives array");
    assert_eq!(drives.len(), 3, "{v:#}");
    for (i, d) in drives.iter().enumerate() {
        assert_eq!(d["index"], i as u64, "{d}");
        assert_eq!(d["backend"], "uring", "{d}");
        assert_eq!(d["location"], drive_file(&data, i).as_str(), "{d}");
        assert_eq!(d["state"], "healthy", "{d}");
        assert_eq!(d["reason"], "", "{d}");
        // 256 MiB files, 1 MiB superblock area, 32 MiB segments: 7 segments.
        assert_eq!(d["capacity_bytes"], 7u64 * (32 << 20), "{d}");
        assert_eq!(d["used_bytes"], 0, "{d}");
        assert_eq!(d["chunks"], 0, "{d}");
        // Files have no hardware identity: said as unknown, not made up.
        assert_eq!(d["model"], Value::Null, "{d}");
        assert_eq!(d["serial"], Value::Null, "{d}");
    }

    // The human table names every drive file and says they are fine.
    let out = Command::new(bin("nodectl"))
        .args(["drives", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].contains("HEALTH"), "{table}");
    for (i, l) in lines[1..].iter().enumerate() {
        assert!(l.contains(&drive_file(&data, i)), "{table}");
        assert!(l.ends_with(" ok"), "{table}");
    }

    // Lose drive 1's file: datapathd's health check fails that drive alone, and
    // nodectl says so with the reason.
    std::fs::remove_file(drive_file(&data, 1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let v = loop {
        let v = node.drives().expect("nodectl drives");
        if v["drives"][1]["state"] == "failed" {
            break v;
        }
        assert!(Instant::now() < deadline, "drive 1 never failed: {v:#}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let reason = v["drives"][1]["reason"].as_str().unwrap();
    assert!(
        reason.contains("gone") && reason.contains("drive-1.img"),
        "{reason}"
    );
    assert_eq!(v["drives"][1]["backend"], "uring");
    assert_eq!(v["drives"][0]["state"], "healthy");
    assert_eq!(v["drives"][2]["state"], "healthy");
    let out = Command::new(bin("nodectl"))
        .args(["drives", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table.lines().nth(2).unwrap_or_default();
    assert!(
        line.contains("failed: ") && line.contains("gone"),
        "{table}"
    );

    // `nodectl status` carries the same drive list for a single node.
    let s = nodectl_json(&["status", "--data", &data.display().to_string()]).unwrap();
    assert_eq!(s["health"], "degraded", "{s:#}");
    assert_eq!(s["drives"][1]["state"], "failed", "{s:#}");
    assert_eq!(s["drives"][0]["backend"], "uring", "{s:#}");

    // A single node has no node 2.
    let e = nodectl_json(&[
        "drives",
        "--data",
        &data.display().to_string(),
        "--node",
        "2",
    ])
    .unwrap_err();
    assert!(e.contains("single node"), "{e}");
}

#[test]
fn nodectl_drives_remote_by_admin_address_and_token_file() {
    let node = Node::start(NodeOptions {
        drives: 2,
        drive_size: "64M",
        ..Default::default()
    });
    let token = node.state_dir().join("admin.token");
    let v = nodectl_json(&[
        "drives",
        "--admin",
        &node.admin_addr,
        "--token-file",
        &token.display().to_string(),
    ])
    .unwrap();
    let drives = v["drives"].as_array().unwrap();
    assert_eq!(drives.len(), 2, "{v:#}");
    for (i, d) in drives.iter().enumerate() {
        assert_eq!(d["backend"], "uring");
        assert_eq!(
            d["location"],
            node.drive_path(i as u16).display().to_string().as_str()
        );
        assert!(d["capacity_bytes"].as_u64().unwrap() > 32 << 20, "{d}");
    }
    // A wrong token is refused, and nodectl says so.
    let bad = node.dir.path().join("wrong.token");
    std::fs::write(&bad, "not-the-token\n").unwrap();
    let e = nodectl_json(&[
        "drives",
        "--admin",
        &node.admin_addr,
        "--token-file",
        &bad.display().to_string(),
    ])
    .unwrap_err();
    assert!(e.contains("401"), "{e}");
}
