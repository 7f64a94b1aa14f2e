//! The admin API over mutual TLS, from the outside with curl and nodectl: an
//! admin certificate issued by `nodectl cert issue` (its key made on the
//! client) authenticates with its role; a revoked one, a node's own certificate
//! (same CA, not an admin certificate) and one from another CA get nothing; a
//! token still works over TLS; plain HTTP on the TLS port gets nothing.

use cairn_it::{bin, free_addr, Node, NodeOptions};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// curl over TLS with the given client certificate: (exit code, HTTP status, body).
fn curl(url: &str, ca: &Path, cert: Option<(&Path, &Path)>, extra: &[&str]) -> (i32, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "-w", "\n%{http_code}", "--cacert"]).arg(ca);
    if let Some((cert, key)) = cert {
        c.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    let o = c.args(extra).arg(url).output().unwrap();
    (o.status.code().unwrap_or(-1), text(&o.stdout))
}

#[test]
fn admin_api_over_mutual_tls() {
    let tls_addr = free_addr();
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_ADMIN_TLS", tls_addr)],
        ..Default::default()
    });
    let out = tempfile::tempdir().unwrap();
    let dir = out.path();
    let nodectl = |args: &[&str]| -> Output {
        Command::new(bin("nodectl"))
            .args(args)
            .args(["--admin", &node.admin_addr, "--token-file"])
            .arg(node.state_dir().join("admin.token"))
            .output()
            .unwrap()
    };
    for (name, role) in [("ops", "operator"), ("wall", "reader")] {
        let o = nodectl(&[
            "cert",
            "issue",
            name,
            "--role",
            role,
            "--days",
            "30",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("ops.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (ca, ops, ops_key) = (dir.join("ca.pem"), dir.join("ops.pem"), dir.join("ops.key"));
    let base = format!("https://{tls_addr}");

    // The listener serves once the node has its certificate.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = format!("{base}/v1/status");
    loop {
        let (code, body) = curl(&status, &ca, Some((&ops, &ops_key)), &[]);
        if code == 0 && body.ends_with("200") {
            assert!(body.contains("healthy"), "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "TLS admin API not up: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // nodectl with the certificate and no token: the operator's role.
    let tls_nodectl = |name: &str, args: &[&str]| -> Output {
        Command::new(bin("nodectl"))
            .args(args)
            .args(["--admin", &base, "--ca"])
            .arg(&ca)
            .arg("--cert")
            .arg(dir.join(format!("{name}.pem")))
            .arg("--key")
            .arg(dir.join(format!("{name}.key")))
            .env_remove("CAIRN_ADMIN_TOKEN")
            .output()
            .unwrap()
    };
    let o = tls_nodectl("ops", &["scrub", "start"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = tls_nodectl("ops", &["token", "create", "x", "--role", "reader"]);
    assert!(
        !o.status.success() && text(&o.stderr).contains("needs the admin role"),
        "{}",
        text(&o.stderr)
    );
    let o = tls_nodectl("wall", &["status"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = tls_nodectl("wall", &["scrub", "start"]);
    assert!(
        text(&o.stderr).contains("needs the operator role"),
        "{}",
        text(&o.stderr)
    );

    // A token over TLS, without a certificate, works as over plain HTTP.
    let token = std::fs::read_to_string(node.state_dir().join("admin.token")).unwrap();
    let (code, body) = curl(
        &status,
        &ca,
        None,
        &["-H", &format!("Authorization: Bearer {}", token.trim())],
    );
    assert!(code == 0 && body.ends_with("200"), "{code} {body}");
    // Neither: 401.
    let (_, body) = curl(&status, &ca, None, &[]);
    assert!(body.ends_with("401"), "{body}");

    // The node's own certificate: same CA, but no admin certificate.
    let tls = node.state_dir().join("tls");
    let (code, body) = curl(
        &status,
        &ca,
        Some((&tls.join("node.pem"), &tls.join("node.key"))),
        &[],
    );
    assert!(code == 0 && body.ends_with("401"), "{code} {body}");
    // Another CA's certificate: the handshake fails.
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=admin ops", "-keyout"])
        .arg(dir.join("evil.key"))
        .arg("-out")
        .arg(dir.join("evil.pem"))
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", text(&st.stderr));
    let (code, body) = curl(
        &status,
        &ca,
        Some((&dir.join("evil.pem"), &dir.join("evil.key"))),
        &[],
    );
    assert!(code != 0 || body.ends_with("401"), "{code} {body}");
    assert!(!body.contains("healthy"), "{body}");
    // Plain HTTP on the TLS port: nothing served.
    let o = Command::new("curl")
        .args(["-s", "-m", "5", &format!("http://{tls_addr}/v1/status")])
        .output()
        .unwrap();
    assert!(!text(&o.stdout).contains("healthy"));

    // The audit names the certificate; revoked, it is refused at once.
    let audit = node.admin("GET", "/v1/audit?limit=100").to_string();
    assert!(audit.contains("cert:ops"), "{audit}");
    let list = nodectl(&["cert", "list", "--json"]);
    let certs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let id = certs
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ops")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let o = nodectl(&["cert", "revoke", &id]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (_, body) = curl(&status, &ca, Some((&ops, &ops_key)), &[]);
    assert!(body.ends_with("401"), "{body}");
}
