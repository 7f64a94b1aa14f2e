//! The SSH admin console with stock OpenSSH: a configured key runs nodectl
//! commands (exec and an interactive session), a reader's key is refused a
//! mutation by the admin API's access layer (and audited as the session), an
//! unknown key and passwords are refused and logged, a client that disconnects
//! mid-command leaves the console serving, and the host key outlives a restart.

use cairn_it::{Node, NodeOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(st.success());
    key
}

fn ssh(port: &str, key: &Path, extra: &[&str], command: &[&str]) -> Command {
    let mut c = Command::new("ssh");
    c.args([
        "-p",
        port,
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
    ])
    .args([
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "IdentitiesOnly=yes",
        "-i",
    ])
    .arg(key)
    .args(extra)
    .arg("admin@127.0.0.1")
    .args(command);
    c
}

fn run(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn console_with_openssh() {
    let keys = tempfile::tempdir().unwrap();
    let admin_key = keygen(keys.path(), "alice@ops");
    let reader_key = keygen(keys.path(), "bob@readonly");
    let stranger = keygen(keys.path(), "mallory");
    let authorized = keys.path().join("authorized_keys");
    std::fs::write(
        &authorized,
        format!(
            "# the node's operators\n{}role=reader {}",
            std::fs::read_to_string(admin_key.with_extension("pub")).unwrap(),
            std::fs::read_to_string(reader_key.with_extension("pub")).unwrap()
        ),
    )
    .unwrap();
    let addr = cairn_it::free_addr();
    let port = addr.rsplit_once(':').unwrap().1.to_string();
    let keyfile: &'static str = Box::leak(authorized.display().to_string().into_boxed_str());
    let mut node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_SSH", addr), ("CAIRN_SSH_AUTHORIZED_KEYS", keyfile)],
        ..Default::default()
    });

    // exec: the admin's key runs nodectl against this node.
    let o = run(&mut ssh(&port, &admin_key, &[], &["nodectl", "status"]));
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("healthy"), "{}", text(&o.stdout));
    let o = run(&mut ssh(&port, &admin_key, &[], &["scrub", "status"]));
    assert!(o.status.success(), "{}", text(&o.stderr));

    // The reader reads, and is refused a mutation by the API, with its reason.
    let o = run(&mut ssh(
        &port,
        &reader_key,
        &[],
        &["nodectl", "cluster", "status"],
    ));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&mut ssh(
        &port,
        &reader_key,
        &[],
        &["nodectl", "scrub", "start"],
    ));
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("needs the operator role"),
        "{}",
        text(&o.stderr)
    );
    // No general shell, and no local-machine commands.
    let o = run(&mut ssh(&port, &admin_key, &[], &["sh", "-c", "id"]));
    assert!(!o.status.success());
    let o = run(&mut ssh(
        &port,
        &admin_key,
        &[],
        &["nodectl", "dev", "stop", "1"],
    ));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));

    // An unknown key, and passwords: refused (ssh exits 255), and logged.
    let o = run(&mut ssh(&port, &stranger, &[], &["status"]));
    assert_eq!(o.status.code(), Some(255));
    assert!(
        text(&o.stderr).contains("Permission denied (publickey)"),
        "{}",
        text(&o.stderr)
    );
    let o = run(&mut ssh(
        &port,
        &stranger,
        &[
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
        ],
        &["status"],
    ));
    assert_eq!(o.status.code(), Some(255));
    let log = std::fs::read_to_string(node.dir.path().join("mgmtd.log")).unwrap();
    assert!(log.contains("SSH key refused"), "refusal not logged");

    // Interactive, with a terminal: the prompt, a command, exit.
    let mut c = ssh(&port, &admin_key, &["-tt"], &[]);
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        stdin.write_all(b"status\r").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1000));
        stdin.write_all(b"exit\r").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let o = child.wait_with_output().unwrap();
    let shown = text(&o.stdout);
    assert!(o.status.success(), "{shown}");
    assert!(
        shown.contains("cairn> ") && shown.contains("healthy"),
        "{shown}"
    );

    // A client gone mid-command: the console goes on serving.
    let mut gone = ssh(&port, &admin_key, &[], &["nodectl", "gc", "--wait"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    gone.kill().unwrap();
    let _ = gone.wait();
    let o = run(&mut ssh(&port, &admin_key, &[], &["status"]));
    assert!(o.status.success(), "{}", text(&o.stderr));

    // The session is who the audit table names.
    let audit = node.admin("GET", "/v1/audit?limit=1000");
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["who"] == "ssh:bob@readonly"
                && e["action"] == "scrub_start"
                && e["status"] == 403),
        "{audit:#}"
    );

    // A key added through the API (nodectl ssh-key, admin): it logs in with
    // its role at once; removed, it is refused at its next login.
    let carol = keygen(keys.path(), "carol@oncall");
    let nodectl = |args: &[&str]| {
        Command::new(cairn_it::bin("nodectl"))
            .args(args)
            .args(["--admin", &node.admin_addr, "--token-file"])
            .arg(node.state_dir().join("admin.token"))
            .output()
            .unwrap()
    };
    let o = run(&mut ssh(&port, &carol, &[], &["status"]));
    assert_eq!(o.status.code(), Some(255), "an unknown key logged in");
    let pubkey = carol.with_extension("pub");
    let o = nodectl(&[
        "ssh-key",
        "add",
        "carol",
        "--role",
        "operator",
        "--json",
        "--public-key",
        pubkey.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let added: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = added["id"].as_str().unwrap().to_string();
    assert!(added["fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("SHA256:"));
    let o = run(&mut ssh(&port, &carol, &[], &["scrub", "start"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&mut ssh(&port, &carol, &[], &["token", "list"]));
    assert!(
        text(&o.stderr).contains("needs the admin role"),
        "{}",
        text(&o.stderr)
    );
    // An RSA key would be listed and never log in (the console has no RSA):
    // refused when added.
    let rsa = keys.path().join("rsa");
    assert!(Command::new("ssh-keygen")
        .args(["-q", "-t", "rsa", "-b", "2048", "-N", "", "-f"])
        .arg(&rsa)
        .status()
        .unwrap()
        .success());
    let o = nodectl(&[
        "ssh-key",
        "add",
        "rsa",
        "--role",
        "reader",
        "--public-key",
        rsa.with_extension("pub").to_str().unwrap(),
    ]);
    assert!(
        !o.status.success() && text(&o.stderr).contains("not taken"),
        "{}",
        text(&o.stderr)
    );
    // Twice the same key, a private key, two lines: refused.
    let o = nodectl(&[
        "ssh-key",
        "add",
        "again",
        "--role",
        "admin",
        "--public-key",
        pubkey.to_str().unwrap(),
    ]);
    assert!(
        !o.status.success() && text(&o.stderr).contains("already added"),
        "{}",
        text(&o.stderr)
    );
    let o = nodectl(&[
        "ssh-key",
        "add",
        "priv",
        "--role",
        "admin",
        "--public-key",
        carol.to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "a private key was taken");
    let o = nodectl(&["ssh-key", "list"]);
    assert!(
        text(&o.stdout).contains("carol") && text(&o.stdout).contains(&id),
        "{}",
        text(&o.stdout)
    );
    let o = nodectl(&["ssh-key", "remove", &id]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&mut ssh(&port, &carol, &[], &["status"]));
    assert_eq!(o.status.code(), Some(255), "a removed key logged in");

    // The host key: made once, owner-only, the same after a restart.
    let host = node.state_dir().join("ssh/ssh_host_ed25519_key");
    let before = std::fs::read(&host).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&host).unwrap().permissions().mode() & 0o777,
        0o600
    );
    node.restart();
    let o = run(&mut ssh(&port, &admin_key, &[], &["status"]));
    assert!(o.status.success(), "after restart: {}", text(&o.stderr));
    assert_eq!(std::fs::read(&host).unwrap(), before);
}
