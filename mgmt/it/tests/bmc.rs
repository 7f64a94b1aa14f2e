//! A node's BMC from the outside: OpenIPMI's ipmi_sim (ci/bmc-sim.sh) whose
//! chassis is a QEMU VM, reached over RMCP+ by mgmtd. `nodectl node power`
//! changes the power state that stock `ipmitool` reports and starts and stops
//! that VM; wrong credentials are refused with nothing kept; a BMC that is gone
//! or a node without one gets a clear error, and mgmtd keeps serving.

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
    let node = Node::start(NodeOptions::default());
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

    // The BMC gone: a clear error within the deadline; mgmtd keeps serving.
    sim.stop();
    let t = Instant::now();
    let e = refused(&node, &["node", "power", &id]);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(
        e.contains("does not answer") || e.contains("did not answer"),
        "{e}"
    );
    ok(&node, &["status"]);

    // Forgotten: no more power control.
    ok(&node, &["node", "bmc", "clear", &id]);
    let e = refused(&node, &["node", "power", &id, "off"]);
    assert!(e.contains("has no BMC set"), "{e}");
    let e = refused(&node, &["node", "power", &id, "sideways"]);
    assert!(
        e.contains("possible values: status, on, off, cycle, reset, soft"),
        "{e}"
    );
}
