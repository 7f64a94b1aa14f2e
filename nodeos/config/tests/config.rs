//! node.toml parsing, validation errors and source precedence.

use base64::Engine;
use cairn_nodeconfig::*;
use std::os::unix::fs::PermissionsExt;

const EXAMPLE: &str = include_str!("../../examples/single-node.toml");

const MIN: &str = r#"
hostname = "n1"
[s3]
access_key = "root"
secret_key = "secretsecret"
[drives]
all_nvme = true
"#;

fn err_of(text: &str) -> String {
    NodeConfig::parse(text, "t.toml").unwrap_err().to_string()
}

#[test]
fn example_config_parses() {
    let c = NodeConfig::parse(EXAMPLE, "example").unwrap();
    assert_eq!(c.hostname, "cairn-1");
    assert_eq!(c.mode, Mode::Single);
    assert_eq!(c.s3.listen.port(), 9000);
    assert!(c.drives.all_nvme);
    assert!(c.network.interface[0].mac.is_some());
    assert_eq!(c.ssh.listen, Some("10.0.2.15:22".parse().unwrap()));
    assert_eq!(
        c.network.interface[0].addresses[0],
        "10.0.2.15/24".parse().unwrap()
    );
    assert_eq!(c.network.route[0].to, RouteDest::Default);
    assert_eq!(c.sysctl["net.core.rmem_max"].to_string(), "16777216");
}

#[test]
fn defaults_fill_the_minimal_config() {
    let c = NodeConfig::parse(MIN, "min").unwrap();
    assert_eq!(c.admin.listen.to_string(), "0.0.0.0:9001");
    assert_eq!(c.datapath.listen.to_string(), "127.0.0.1:7410");
    assert_eq!(c.datapath.backend, Backend::Uring);
    assert_eq!(c.hugepages.count, 0);
    assert!(c.network.interface.is_empty());
}

#[test]
fn full_network_model_parses() {
    let t = format!(
        "{MIN}\n{}",
        r#"
[[network.interface]]
mac = "52:54:00:AA:bb:01"
mtu = 9000
[[network.interface]]
name = "bond0"
bond = { mode = "802.3ad", members = ["eth0", "eth1"] }
dhcp = true
[[network.interface]]
name = "bond0.100"
vlan = { parent = "bond0", id = 100 }
addresses = ["10.1.0.5/24", "fd00::5/64"]
[[network.route]]
to = "10.2.0.0/16"
via = "10.1.0.1"
metric = 50
"#
    );
    let c = NodeConfig::parse(&t, "net").unwrap();
    assert_eq!(
        c.network.interface[0].mac.unwrap().to_string(),
        "52:54:00:aa:bb:01"
    );
    assert_eq!(
        c.network.interface[1].bond.as_ref().unwrap().mode,
        BondMode::Lacp
    );
    assert_eq!(c.network.interface[2].vlan.as_ref().unwrap().id, 100);
    assert_eq!(c.network.interface[2].addresses[1].prefix, 64);
}

#[test]
fn each_kind_of_bad_input_names_the_field() {
    let cases: &[(&str, &str)] = &[
        // TOML syntax
        ("hostname = ", "t.toml"),
        // unknown key (typo)
        (&MIN.replace("hostname", "hostnme"), "hostnme"),
        // missing required key
        (&MIN.replace("access_key = \"root\"\n", ""), "access_key"),
        // wrong type
        (&format!("{MIN}[hugepages]\ncount = \"many\"\n"), "count"),
        // bad enum
        (&format!("mode = \"swarm\"\n{MIN}"), "mode"),
        // bad socket address
        (&MIN.replace("[s3]", "[s3]\nlisten = \"nowhere\""), "listen"),
        // bad CIDR
        (
            &format!("{MIN}[[network.interface]]\nname = \"eth0\"\naddresses = [\"10.0.0.1/33\"]\n"),
            "prefix `33`",
        ),
        // bad MAC
        (
            &format!("{MIN}[[network.interface]]\nmac = \"52:54:00\"\n"),
            "not a MAC",
        ),
        // validation
        (&MIN.replace("\"n1\"", "\"Bad_Host\""), "field `hostname`"),
        (&MIN.replace("secretsecret", "short"), "field `s3.secret_key`"),
        (
            &MIN.replace("[s3]", "[s3]\ndomains = [\"s3.example.com\", \"bad domain\"]"),
            "field `s3.domains`",
        ),
        (&MIN.replace("all_nvme = true", ""), "field `drives`"),
        (&format!("mode = \"cluster\"\n{MIN}"), "field `cluster`"),
        (
            &format!("{MIN}[[network.interface]]\nname = \"eth0\"\nmtu = 20\n"),
            "field `network.interface[0].mtu`",
        ),
        (
            &format!("{MIN}[[network.interface]]\ndhcp = true\n"),
            "field `network.interface[0]`",
        ),
        (
            &format!("{MIN}[[network.interface]]\nname = \"v\"\nvlan = {{ parent = \"eth0\", id = 5000 }}\n"),
            "field `network.interface[0].vlan.id`",
        ),
        (
            &format!("{MIN}[[network.route]]\nto = \"default\"\n"),
            "field `network.route[0]`",
        ),
        (
            &format!("{MIN}[[network.route]]\nto = \"10.0.0.0/8\"\nvia = \"fd00::1\"\n"),
            "field `network.route[0].via`",
        ),
        (
            &format!("{MIN}[sysctl]\n\"../../etc/passwd\" = 1\n"),
            "field `sysctl.",
        ),
        (
            &format!("{MIN}[[drives.claim]]\n"),
            "field `drives.claim[0]`",
        ),
    ];
    for (text, want) in cases {
        let e = err_of(text);
        assert!(e.contains(want), "error {e:?} should mention {want:?}");
        assert!(
            e.starts_with("t.toml"),
            "error {e:?} should name the source"
        );
    }
}

fn sources(dir: &std::path::Path, cmdline: &str) -> Sources {
    Sources {
        state_file: dir.join("state/node.toml"),
        volume_dir: Some(dir.join("vol")),
        cmdline: cmdline.to_string(),
    }
}

fn with_host(h: &str) -> String {
    MIN.replace("\"n1\"", &format!("\"{h}\""))
}

#[test]
fn precedence_state_then_volume_then_cmdline_then_none() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("state")).unwrap();
    std::fs::create_dir_all(d.path().join("vol")).unwrap();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(with_host("from-cmdline"));
    let cmdline = format!("root=PARTLABEL=cairn-a cairn.slot=a cairn.config={b64} quiet");

    // Nothing anywhere but the empty cmdline: maintenance.
    assert!(load(&sources(d.path(), "root=x")).unwrap().is_none());

    let l = load(&sources(d.path(), &cmdline)).unwrap().unwrap();
    assert_eq!(l.source, ConfigSource::Cmdline);
    assert_eq!(l.config.hostname, "from-cmdline");

    std::fs::write(d.path().join("vol/node.toml"), with_host("from-volume")).unwrap();
    let l = load(&sources(d.path(), &cmdline)).unwrap().unwrap();
    assert!(matches!(l.source, ConfigSource::Volume(_)));
    assert_eq!(l.config.hostname, "from-volume");

    // First boot copies the volume's config to the state partition, 0600.
    persist(&l.text, &d.path().join("state/node.toml")).unwrap();
    let mode = std::fs::metadata(d.path().join("state/node.toml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    std::fs::write(d.path().join("vol/node.toml"), with_host("volume-changed")).unwrap();
    let l = load(&sources(d.path(), &cmdline)).unwrap().unwrap();
    assert!(matches!(l.source, ConfigSource::State(_)));
    assert_eq!(l.config.hostname, "from-volume");
}

#[test]
fn an_invalid_source_is_an_error_not_skipped() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("state")).unwrap();
    std::fs::create_dir_all(d.path().join("vol")).unwrap();
    std::fs::write(d.path().join("state/node.toml"), "hostname = 1").unwrap();
    std::fs::write(d.path().join("vol/node.toml"), with_host("ok")).unwrap();
    let e = load(&sources(d.path(), "")).unwrap_err().to_string();
    assert!(e.contains("state/node.toml"), "{e}");

    let e = load(&Sources {
        state_file: d.path().join("none.toml"),
        volume_dir: None,
        cmdline: "cairn.config=@@@".into(),
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("base64url"), "{e}");
}
