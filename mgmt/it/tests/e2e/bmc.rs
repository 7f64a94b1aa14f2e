//! A node's BMC from the outside: OpenIPMI's ipmi_sim (ci/bmc-sim.sh) whose
//! chassis is a QEMU VM, reached over RMCP+ by mgmtd. `nodectl node power`
//! changes the power state that stock `ipmitool` reports and starts and stops
//! that VM; wrong credentials are refused with nothing kept; a BMC that is gone
//! or a node without one gets a clear error, and mgmtd keeps serving. The
//! BMC's temperature sensor read by mgmtd matches ipmitool's, and heating it
//! past its thresholds raises an alert in status and /metrics.

use cairn_it::{bin, free_addr, Node, NodeOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PASSWORD: &str = "bmc-pw-7f3a";

struct Sim {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

impl Sim {
    fn start() -> Sim {
        let dir = tempfile::Builder::new()
            .prefix("cairn-bmc-")
            .tempdir()
            .unwrap();
        let port = free_udp_port();
        let vm_port = free_addr().rsplit_once(':').unwrap().1.to_string();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ci/bmc-sim.sh");
        let child = Command::new(script)
            .args([
                dir.path().to_str().unwrap(),
                &port.to_string(),
                &vm_port,
                PASSWORD,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ci/bmc-sim.sh (needs openipmi and qemu-system-x86)");
        let sim = Sim { dir, port, child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(sim.ipmitool(&["power", "status"]).contains("is on") && sim.vm_running()) {
            assert!(
                Instant::now() < deadline,
                "ipmi_sim and its VM not up in 20 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        sim
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn ipmitool(&self, args: &[&str]) -> String {
        let out = Command::new("ipmitool")
            .args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .args(["-U", "admin", "-P", PASSWORD])
            .args(args)
            .output()
            .expect("ipmitool");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether the chassis's VM process runs (by its pid file).
    fn vm_running(&self) -> bool {
        std::fs::read_to_string(self.dir.path().join("vm.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}/cmdline")).exists())
    }

    fn wait(&self, what: &str, ok: impl Fn(&Sim) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ok(self) {
            assert!(Instant::now() < deadline, "{what} not seen in 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("pkill")
            .args(["-f", self.dir.path().to_str().unwrap()])
            .status();
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop();
    }
}

fn nodectl(node: &Node, args: &[&str]) -> Output {
    Command::new(bin("nodectl"))
        .args(args)
        .args(["--admin", &node.admin_addr, "--token-file"])
        .arg(node.state_dir().join("admin.token"))
        .output()
        .expect("nodectl")
}

fn ok(node: &Node, args: &[&str]) -> String {
    let out = nodectl(node, args);
    assert!(
        out.status.success(),
        "nodectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(node: &Node, args: &[&str]) -> String {
    let out = nodectl(node, args);
    assert!(!out.status.success(), "nodectl {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn password_file(dir: &Path, name: &str, pw: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("{pw}\n")).unwrap();
    p
}

#[test]
fn power_through_the_bmc_with_ipmitool_as_witness() {
    let mut sim = Sim::start();
    // Sensors read every second (30 s by default).
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_SENSOR_EVERY", "1")],
        ..NodeOptions::default()
    });
    let id = node.admin("GET", "/v1/cluster/status")["nodes"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let addr = sim.address();
    let pw_dir = tempfile::tempdir().unwrap();
    let good = password_file(pw_dir.path(), "good", PASSWORD);
    let bad = password_file(pw_dir.path(), "bad", "not-the-password");

    // Before any BMC is set: a clear refusal, for power and for show.
    let e = refused(&node, &["node", "power", &id]);
    assert!(e.contains("has no BMC set"), "{e}");

    // Wrong credentials: refused at set, and nothing kept.
    let e = refused(
        &node,
        &[
            "node",
            "bmc",
            "set",
            &id,
            "--address",
            &addr,
            "--user",
            "admin",
            "--password-file",
        ]
        .into_iter()
        .chain([bad.to_str().unwrap()])
        .collect::<Vec<_>>(),
    );
    assert!(
        e.contains("refused the session") && e.contains("nothing was kept"),
        "{e}"
    );
    let e = refused(&node, &["node", "bmc", "show", &id]);
    assert!(e.contains("has no BMC set"), "{e}");

    let set = ok(
        &node,
        &[
            "node",
            "bmc",
            "set",
            &id,
            "--address",
            &addr,
            "--user",
            "admin",
            "--json",
            "--password-file",
        ]
        .into_iter()
        .chain([good.to_str().unwrap()])
        .collect::<Vec<_>>(),
    );
    let v: serde_json::Value = serde_json::from_str(&set).unwrap();
    assert_eq!(v["address"], addr.as_str());
    assert!(!set.contains(PASSWORD), "the password is shown: {set}");
    // Not in the metadata in the clear either.
    let meta = std::fs::read(node.state_dir().join("meta.redb")).unwrap();
    assert!(
        !meta
            .windows(PASSWORD.len())
            .any(|w| w == PASSWORD.as_bytes()),
        "the BMC password is stored in the clear"
    );

    let st = ok(&node, &["node", "power", &id[..6]]);
    assert!(st.contains("power on"), "{st}");

    // Off: ipmitool sees it, and the VM is gone.
    let off = ok(&node, &["node", "power", &id, "off"]);
    assert!(off.contains("power off sent"), "{off}");
    sim.wait("power off", |s| {
        s.ipmitool(&["power", "status"]).contains("is off") && !s.vm_running()
    });
    let st = ok(&node, &["node", "power", &id, "--json"]);
    assert!(st.contains("\"off\""), "{st}");

    // On: the VM runs again.
    ok(&node, &["node", "power", &id, "on"]);
    sim.wait("power on", |s| {
        s.ipmitool(&["power", "status"]).contains("is on") && s.vm_running()
    });

    // Power changes are in the audit, with the action.
    let audit = ok(&node, &["audit", "--json"]);
    assert!(
        audit.contains("power_control") && audit.contains("bmc_set"),
        "{audit}"
    );

    // ipmitool changes it behind mgmtd's back: mgmtd reads the truth.
    sim.ipmitool(&["power", "off"]);
    sim.wait("power off by ipmitool", |s| !s.vm_running());
    let st = ok(&node, &["node", "power", &id]);
    assert!(st.contains("power off"), "{st}");

    sensors(&node, &sim, &id);

    // The BMC gone: a clear error within the deadline; mgmtd keeps serving.
    sim.stop();
    let t = Instant::now();
    let e = refused(&node, &["node", "power", &id]);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(
        e.contains("does not answer") || e.contains("did not answer"),
        "{e}"
    );
    // The watch says so.
    wait_status(&node, "the BMC's sensors cannot be read");

    // Forgotten: no more power control.
    ok(&node, &["node", "bmc", "clear", &id]);
    let e = refused(&node, &["node", "power", &id, "off"]);
    assert!(e.contains("has no BMC set"), "{e}");
    let e = refused(&node, &["node", "sensors", &id]);
    assert!(e.contains("has no BMC set"), "{e}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while ok(&node, &["status"]).contains("Alert") {
        assert!(Instant::now() < deadline, "alerts outlive the BMC's record");
        std::thread::sleep(Duration::from_millis(200));
    }
    let e = refused(&node, &["node", "power", &id, "sideways"]);
    assert!(
        e.contains("possible values: status, on, off, cycle, reset, soft"),
        "{e}"
    );
}

/// Waits (30 s at most) for `nodectl status` to show an alert containing `what`;
/// returns the status.
fn wait_status(node: &Node, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = ok(node, &["status"]);
        if st
            .lines()
            .any(|l| l.starts_with("Alert") && l.contains(what))
        {
            return st;
        }
        assert!(Instant::now() < deadline, "no alert {what:?} in 30 s: {st}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn metrics(node: &Node) -> String {
    let out = Command::new("curl")
        .args(["-sf", "-H"])
        .arg(format!(
            "Authorization: Bearer {}",
            std::fs::read_to_string(node.state_dir().join("admin.token"))
                .unwrap()
                .trim()
        ))
        .arg(format!("http://{}/metrics", node.admin_addr))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The BMC's one sensor (CPU Temp, ci/bmc-sim.sh) as nodectl and ipmitool see
/// it, heated past its critical threshold and cooled again.
fn sensors(node: &Node, sim: &Sim, id: &str) {
    let temp = sim.dir.path().join("cpu_temp");
    let set = |c: u32| std::fs::write(&temp, format!("{c}\n")).unwrap();
    set(40);
    sim.wait("40 degrees in ipmitool", |s| {
        s.ipmitool(&["sdr", "list"]).contains("40 degrees C")
    });
    let v: serde_json::Value =
        serde_json::from_str(&ok(node, &["node", "sensors", id, "--json"])).unwrap();
    let s = &v["sensors"][0];
    assert_eq!(v["sensors"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(s["name"], "CPU Temp", "{v}");
    assert_eq!(s["value"], 40.0, "{v}");
    assert_eq!(s["unit"], "°C", "{v}");
    assert_eq!(s["level"], "ok", "{v}");
    assert_eq!(
        s["thresholds"],
        serde_json::json!([["upper critical", 85.0], ["upper non-critical", 75.0]]),
        "{v}"
    );
    let table = ok(node, &["node", "sensors", &id[..6]]);
    assert!(
        table.contains("CPU Temp") && table.contains("40 °C") && table.contains("ok"),
        "{table}"
    );
    assert!(!ok(node, &["status"]).contains("Alert"));

    // Hot: the BMC says critical (ipmitool "cr"), and so does every view of the node.
    set(90);
    sim.wait("critical in ipmitool", |s| {
        s.ipmitool(&["sdr", "list"]).contains("| cr")
    });
    let st = wait_status(
        node,
        "sensor CPU Temp is critical: 90 °C (past upper critical 85 °C)",
    );
    assert!(st.contains("Alert"), "{st}");
    let m = metrics(node);
    assert!(
        m.lines().any(|l| l.starts_with("cairn_sensor_value{")
            && l.contains("sensor=\"CPU Temp\"")
            && l.ends_with(" 90.0")),
        "{m}"
    );
    assert!(
        m.lines()
            .any(|l| l.starts_with("cairn_sensor_level{sensor=\"CPU Temp\"} 2")),
        "{m}"
    );
    // Warm: a warning.
    set(80);
    wait_status(
        node,
        "sensor CPU Temp is warning: 80 °C (past upper non-critical 75 °C)",
    );
    // Cool again: no alert.
    set(40);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ok(node, &["status"]).contains("Alert") {
        assert!(Instant::now() < deadline, "the alert outlived the heat");
        std::thread::sleep(Duration::from_millis(300));
    }
}
