//! The rtnetlink half of the network setup, against a real kernel: each test runs in a
//! thread moved into a fresh network namespace (needs root, or CAP_SYS_ADMIN, and iproute2
//! to set up and inspect links). Where that is not possible the test says so and returns.

use cairn_nodeconfig::NodeConfig;
use cairn_nodeos::net::{plan, NetworkApplier, Rtnetlink};
use std::fs;
use std::path::Path;
use std::process::Command;

/// Run `f` in a thread of its own network namespace. `None` when namespaces or `ip` are
/// unavailable here (the reason is printed).
fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("SKIPPED: iproute2 (`ip`) is not installed");
        return None;
    }
    std::thread::spawn(move || {
        // unshare(CLONE_NEWNET) moves only this thread; its children (ip) inherit it.
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            eprintln!("SKIPPED: cannot create a network namespace: {e} (run as root)");
            return None;
        }
        Some(f())
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// A line of `text` that has every one of `parts` (ip's output adds fields like `proto`).
fn has_line(text: &str, parts: &[&str]) -> bool {
    text.lines().any(|l| parts.iter().all(|p| l.contains(p)))
}

fn ip(args: &str) -> String {
    let out = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fake `/sys/class/net` listing the namespace's links by MAC, as sysfs would.
fn fake_sys(dir: &Path, links: &[(&str, &str)]) {
    let _ = fs::remove_dir_all(dir.join("class/net"));
    for (n, mac) in links {
        let p = dir.join("class/net").join(n);
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("address"), format!("{mac}\n")).unwrap();
    }
}

fn config(network: &str) -> NodeConfig {
    let text = format!(
        "hostname = \"n\"\n[s3]\naccess_key = \"abc\"\nsecret_key = \"12345678\"\n\
         [drives]\nallow_empty = true\n{network}"
    );
    NodeConfig::parse(&text, "test").unwrap()
}

#[test]
fn static_addresses_routes_mtu_and_rename_through_rtnetlink() {
    in_netns(|| {
        ip("link add nic0 address 52:54:00:00:00:01 type veth peer name peer0");
        ip("link set peer0 up");
        let d = tempfile::tempdir().unwrap();
        fake_sys(
            d.path(),
            &[
                ("nic0", "52:54:00:00:00:01"),
                ("peer0", "52:54:00:00:00:99"),
            ],
        );
        let cfg = config(
            r#"[[network.interface]]
name = "lan0"
mac = "52:54:00:00:00:01"
addresses = ["10.9.0.5/24", "fd00:9::5/64"]
mtu = 1400
[[network.route]]
to = "default"
via = "10.9.0.1"
[[network.route]]
to = "10.20.0.0/16"
via = "10.9.0.254"
metric = 50
[[network.route]]
to = "fd00:20::/48"
via = "fd00:9::1"
[[network.route]]
to = "10.30.0.0/16"
dev = "lan0"
"#,
        );
        let net = Rtnetlink { dhcp: None };
        let steps = plan(&cfg.network, d.path()).unwrap();
        net.apply(&steps, d.path()).unwrap();

        let link = ip("-o link show lan0");
        assert!(link.contains("mtu 1400"), "{link}");
        assert!(link.contains("UP"), "{link}");
        let addrs = ip("-o addr show dev lan0");
        assert!(addrs.contains("inet 10.9.0.5/24"), "{addrs}");
        assert!(addrs.contains("inet6 fd00:9::5/64"), "{addrs}");
        let routes = ip("route show");
        assert!(
            has_line(&routes, &["default via 10.9.0.1 dev lan0"]),
            "{routes}"
        );
        assert!(
            has_line(
                &routes,
                &["10.20.0.0/16 via 10.9.0.254 dev lan0", "metric 50"]
            ),
            "{routes}"
        );
        assert!(
            has_line(&routes, &["10.30.0.0/16 dev lan0", "scope link"]),
            "{routes}"
        );
        let routes6 = ip("-6 route show");
        assert!(
            has_line(&routes6, &["fd00:20::/48 via fd00:9::1 dev lan0"]),
            "{routes6}"
        );

        // A second run in the same boot (sysfs now shows the new name) changes nothing
        // and fails on nothing.
        fake_sys(
            d.path(),
            &[
                ("lan0", "52:54:00:00:00:01"),
                ("peer0", "52:54:00:00:00:99"),
            ],
        );
        let steps = plan(&cfg.network, d.path()).unwrap();
        net.apply(&steps, d.path()).unwrap();
        let again = ip("-o addr show dev lan0");
        assert_eq!(again.matches("inet 10.9.0.5/24").count(), 1, "{again}");
        assert_eq!(again.matches("inet6 fd00:9::5/64").count(), 1, "{again}");
        assert_eq!(ip("route show"), routes);
    });
}

#[test]
fn a_missing_link_is_an_error_not_a_panic() {
    in_netns(|| {
        let d = tempfile::tempdir().unwrap();
        // sysfs says eth0 exists, the namespace has no such link.
        fake_sys(d.path(), &[("eth0", "52:54:00:00:00:01")]);
        let cfg = config("[[network.interface]]\nname = \"eth0\"\naddresses = [\"10.0.0.1/24\"]\n");
        let steps = plan(&cfg.network, d.path()).unwrap();
        let e = Rtnetlink { dhcp: None }
            .apply(&steps, d.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("eth0"), "{e}");
    });
}

#[test]
fn bonds_and_vlans_through_rtnetlink() {
    in_netns(|| {
        // Kernels without the bonding or 8021q module (some CI sandboxes) cannot run this.
        let probe = Command::new("ip")
            .args(["link", "add", "probe0", "type", "bond"])
            .output()
            .unwrap();
        let probe_vlan = Command::new("ip")
            .args([
                "link", "add", "link", "lo", "name", "probe1", "type", "vlan", "id", "9",
            ])
            .output()
            .unwrap();
        if !probe.status.success() || !probe_vlan.status.success() {
            eprintln!(
                "SKIPPED: this kernel cannot create bonds or VLANs: {}{}",
                String::from_utf8_lossy(&probe.stderr),
                String::from_utf8_lossy(&probe_vlan.stderr)
            );
            return;
        }
        ip("link del probe0");
        ip("link del probe1");
        ip("link add nic0 address 52:54:00:00:00:01 type veth peer name peer0");
        ip("link add nic1 address 52:54:00:00:00:02 type veth peer name peer1");
        let d = tempfile::tempdir().unwrap();
        fake_sys(
            d.path(),
            &[("nic0", "52:54:00:00:00:01"), ("nic1", "52:54:00:00:00:02")],
        );
        let cfg = config(
            r#"[[network.interface]]
name = "st0"
vlan = { parent = "bond0", id = 100 }
addresses = ["10.1.0.5/24"]
[[network.interface]]
name = "bond0"
bond = { mode = "active-backup", members = ["nic0", "nic1"] }
mtu = 9000
"#,
        );
        let net = Rtnetlink { dhcp: None };
        let steps = plan(&cfg.network, d.path()).unwrap();
        net.apply(&steps, d.path()).unwrap();
        let nic0 = ip("-o link show nic0");
        assert!(nic0.contains("master bond0"), "{nic0}");
        let bond = ip("-d -o link show bond0");
        assert!(bond.contains("bond mode active-backup"), "{bond}");
        assert!(bond.contains("mtu 9000"), "{bond}");
        let vlan = ip("-d -o link show st0");
        assert!(vlan.contains("vlan protocol 802.1Q id 100"), "{vlan}");
        assert!(ip("-o addr show dev st0").contains("10.1.0.5/24"));
        // Idempotent: the second run finds the bond and VLAN in place.
        net.apply(&steps, d.path()).unwrap();
    });
}
