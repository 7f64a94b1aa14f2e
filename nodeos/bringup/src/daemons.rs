//! What the daemons start from: `/run/cairn/datapathd.env`, `/run/cairn/mgmtd.env` (mode
//! 0600: it holds the root secret) and `/run/cairn/ready.env`, in systemd's
//! `EnvironmentFile=` syntax. The units expand `$DATAPATHD_ARGS` / `$MGMTD_ARGS` unquoted,
//! so systemd splits them on whitespace: no argument may contain any.

use crate::drives::ClaimedDrive;
use crate::{write_file, write_private, NodeosError, Paths};
use cairn_nodeconfig::{Backend, Mode, NodeConfig};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// Files datapathd writes once listening; the unit waits for it.
pub const DATAPATHD_READY: &str = "datapathd.ready";
pub const MGMTD_READY: &str = "mgmtd.ready";

/// The node-local key mgmtd and datapathd prove to each other (created by
/// whichever starts first, mode 0600, beside mgmtd's state).
pub fn chunk_key(state: &Path) -> std::path::PathBuf {
    state.join("mgmt/chunk.key")
}

/// datapathd's arguments (flags of `datapath-spdk/datapathd/src/config.rs`).
pub fn datapathd_args(
    cfg: &NodeConfig,
    drives: &[ClaimedDrive],
    state: &Path,
    run: &Path,
) -> Result<Vec<String>, NodeosError> {
    let backend = match cfg.datapath.backend {
        Backend::Uring => "uring",
        Backend::Nvme => "nvme",
    };
    let mut a = vec![
        "--listen".to_string(),
        cfg.datapath.listen.to_string(),
        "--local-key".into(),
        chunk_key(state).display().to_string(),
        // Binds the drives to this node: another node's drive is refused.
        "--node-id-file".into(),
        state.join("datapath.node-id").display().to_string(),
        "--backend".into(),
        backend.into(),
        "--reactors".into(),
        cfg.datapath.reactors.to_string(),
        "--ready-file".into(),
        run.join(DATAPATHD_READY).display().to_string(),
    ];
    if let (Mode::Cluster, Some(c)) = (cfg.mode, &cfg.cluster) {
        // Peers reach the chunk service here, over mutual TLS with the certificate
        // mgmtd installs in its state when the node creates or joins a cluster.
        a.push("--peer-listen".into());
        a.push(c.peer_listen.to_string());
        a.push("--tls-dir".into());
        a.push(state.join("mgmt/tls").display().to_string());
    }
    for d in drives {
        // Claim order is index order: datapathd numbers drives as given.
        a.push("--drive".into());
        a.push(d.path.clone());
    }
    check_words("DATAPATHD_ARGS", &a)?;
    Ok(a)
}

/// The SSH console's authorized keys from node.toml, in the run directory.
pub const SSH_KEYS: &str = "ssh_authorized_keys";

/// mgmtd's arguments (flags of `mgmt/mgmtd/src/bin/mgmtd.rs`).
pub fn mgmtd_args(
    cfg: &NodeConfig,
    drive_count: usize,
    state: &Path,
    run: &Path,
) -> Result<Vec<String>, NodeosError> {
    let drives = u16::try_from(drive_count).map_err(|_| NodeosError::Invalid {
        what: "drives".into(),
        message: format!("{drive_count} drives is more than mgmtd takes"),
    })?;
    let mut a = vec![
        "--data".to_string(),
        state.join("mgmt").display().to_string(),
        "--s3".into(),
        cfg.s3.listen.to_string(),
        "--admin".into(),
        cfg.admin.listen.to_string(),
        "--datapath".into(),
        local_addr(cfg.datapath.listen).to_string(),
        "--datapath-key".into(),
        chunk_key(state).display().to_string(),
        "--drives".into(),
        drives.to_string(),
        "--ready-file".into(),
        run.join(MGMTD_READY).display().to_string(),
    ];
    for d in &cfg.s3.domains {
        a.push("--s3-domain".into());
        a.push(d.clone());
    }
    if let Some(tls) = cfg.admin.tls_listen {
        a.push("--admin-tls".into());
        a.push(tls.to_string());
    }
    // The appliance's own BMC, when the kernel exposes one: its watchdog and
    // event log (mgmtd does without when the device is absent).
    a.push("--bmc-device".into());
    a.push("/dev/ipmi0".into());
    if let Some(ssh) = cfg.ssh.listen {
        a.push("--ssh".into());
        a.push(ssh.to_string());
        a.push("--ssh-authorized-keys".into());
        a.push(run.join(SSH_KEYS).display().to_string());
        if cfg.ssh.break_glass {
            a.push("--ssh-break-glass".into());
        }
    }
    if let (Mode::Cluster, Some(c)) = (cfg.mode, &cfg.cluster) {
        a.push("--internal".into());
        a.push(c.internal.to_string());
        a.push("--chunk-advertise".into());
        a.push(c.chunk_advertise().to_string());
        if let Some(d) = &c.domain {
            a.push("--domain".into());
            a.push(d.clone());
        }
    }
    check_words("MGMTD_ARGS", &a).map_err(|_| NodeosError::Invalid {
        what: "cluster.domain".into(),
        message: "must not contain spaces or quotes (it is passed on mgmtd's command line)".into(),
    })?;
    Ok(a)
}

/// The address to reach a listener on this node: a wildcard bind is reached on loopback.
pub fn local_addr(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

/// Arguments are expanded by word splitting, so each must be one non-empty word, and
/// quotes or backslashes would survive into the argument.
fn check_words(var: &str, args: &[String]) -> Result<(), NodeosError> {
    for w in args {
        if w.is_empty()
            || w.chars()
                .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\'))
        {
            return Err(NodeosError::Invalid {
                what: var.into(),
                message: format!("argument `{w}` cannot be passed through an environment file"),
            });
        }
    }
    Ok(())
}

/// `KEY="value"` with systemd's double-quote escapes (`\"`, `\\`, `` \` ``, `\$`).
pub fn env_line(key: &str, value: &str) -> String {
    let mut v = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        if matches!(c, '"' | '\\' | '`' | '$') {
            v.push('\\');
        }
        v.push(c);
    }
    format!("{key}=\"{v}\"\n")
}

/// Write the three env files.
pub fn write_env_files(
    paths: &Paths,
    cfg: &NodeConfig,
    drives: &[ClaimedDrive],
) -> Result<(), NodeosError> {
    let dp = datapathd_args(cfg, drives, &paths.state, &paths.run)?;
    let mg = mgmtd_args(cfg, drives.len(), &paths.state, &paths.run)?;
    write_file(
        &paths.run.join("datapathd.env"),
        env_line("DATAPATHD_ARGS", &dp.join(" ")).as_bytes(),
        0o600,
    )?;
    let mut m = env_line("MGMTD_ARGS", &mg.join(" "));
    m.push_str(&env_line("CAIRN_ROOT_ACCESS_KEY", &cfg.s3.access_key));
    m.push_str(&env_line("CAIRN_ROOT_SECRET_KEY", &cfg.s3.secret_key));
    write_private(&paths.run.join("mgmtd.env"), m.as_bytes())?;
    // Rewritten at each boot from node.toml: the config is the keys' source.
    let mut keys = cfg.ssh.authorized_keys.join("\n");
    keys.push('\n');
    write_private(&paths.run.join(SSH_KEYS), keys.as_bytes())?;
    write_file(
        &paths.run.join("ready.env"),
        env_line("CAIRN_ADMIN", &local_addr(cfg.admin.listen).to_string()).as_bytes(),
        0o644,
    )
}

/// Parse one of our env files back (systemd's rules for the double-quoted values we
/// write). For `nodeos ready` and tests.
pub fn parse_env(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let value = match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(inner) => {
                let mut s = String::new();
                let mut it = inner.chars();
                while let Some(c) = it.next() {
                    if c == '\\' {
                        match it.next() {
                            Some(n) if matches!(n, '"' | '\\' | '`' | '$') => s.push(n),
                            Some(n) => {
                                s.push('\\');
                                s.push(n);
                            }
                            None => s.push('\\'),
                        }
                    } else {
                        s.push(c);
                    }
                }
                s
            }
            None => v.to_string(),
        };
        out.push((k.trim().to_string(), value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_round_trip_through_systemd_escapes() {
        for v in [
            "plain",
            "with space",
            r#"q"uo\te$HOME`x`"#,
            "",
            "trailing\\",
        ] {
            let line = env_line("K", v);
            assert!(line.ends_with("\"\n"));
            assert_eq!(
                parse_env(&line),
                vec![("K".to_string(), v.to_string())],
                "{line}"
            );
        }
    }

    #[test]
    fn wildcard_listeners_are_reached_on_loopback() {
        assert_eq!(
            local_addr("0.0.0.0:9001".parse().unwrap()),
            "127.0.0.1:9001".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            local_addr("[::]:9001".parse().unwrap()),
            "[::1]:9001".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            local_addr("10.0.0.5:9001".parse().unwrap()),
            "10.0.0.5:9001".parse::<SocketAddr>().unwrap()
        );
    }

    #[test]
    fn words_with_spaces_are_refused() {
        assert!(check_words("X", &["a".into(), "b c".into()]).is_err());
        assert!(check_words("X", &["a\"".into()]).is_err());
        assert!(check_words("X", &["".into()]).is_err());
        assert!(check_words("X", &["/dev/nvme0n1".into(), "0000:00:04.0".into()]).is_ok());
    }
}
