//! What a console line runs: nodectl's commands against this node's admin API
//! with the session's token, and a few diagnostics. No general shell.

use crate::ConsoleConfig;
use cairn_adminapi::Role;
use tokio::process::Command;

/// What a command printed and how it ended.
pub(crate) struct Ran {
    pub out: Vec<u8>,
    pub err: Vec<u8>,
    pub code: u32,
}

impl Ran {
    fn refused(msg: String) -> Ran {
        Ran {
            out: Vec::new(),
            err: format!("{msg}\n").into_bytes(),
            code: 2,
        }
    }
}

pub(crate) const HELP: &str = "\
Commands (run as this SSH key's role, through the node's admin API):
  nodectl ARGS...     nodectl's commands for this node: status, drives, cluster, scrub,
                      gc, tenant, user, key, kv, export, token, audit, node drain|remove|
                      power|sensors, node bmc show|clear (e.g. `nodectl cluster status`;
                      `nodectl` may be left out: `status`, `node power ID status`)
  logs [N]            the last N lines (default 50) of mgmtd's log
  dmesg [N]           the last N kernel messages
  network             addresses of the node's interfaces
  sh COMMAND          the break-glass: a shell command line (admin keys, only where
                      node.toml's [ssh] break_glass = true; every use is logged)
  help                this list
  exit                end the session
";

/// nodectl's subcommands a console runs: those that act only through the admin
/// API, where the session's role is checked and the call audited. Everything
/// else is refused: `dev` (local daemons), `flash` (writes a file or device),
/// and `node`'s slots, updates and reboots act on the machine itself (see
/// `NODE_THROUGH_THE_API`).
pub(crate) const THROUGH_THE_API: &[&str] = &[
    "audit", "cluster", "drives", "export", "gc", "key", "kv", "node", "scrub", "status", "tenant",
    "token", "user",
];

/// `node`'s commands that go through the API. Not `update`, `rollback`, `slots`
/// or `mark-good` (this machine's disks), nor `bmc set`, whose password file
/// nodectl would read here: any file's first line could be sent to a BMC
/// address of the caller's choosing.
const NODE_THROUGH_THE_API: &[&str] = &["drain", "remove", "power", "bmc", "sensors"];

/// Options that would point nodectl at another node, another token or a local
/// directory: the session's node and token are the console's to choose (an
/// `--admin` of the caller's would send the session's token to any host).
const STEERING: &[&str] = &[
    "--admin",
    "--token-file",
    "--data",
    "--node",
    "--cert",
    "--key",
    "--ca",
];

/// The longest command line taken (a line is a command, not a payload).
pub(crate) const MAX_LINE: usize = 4096;

/// Splits a command line into words, honouring single and double quotes.
pub(crate) fn words(line: &str) -> Result<Vec<String>, String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".into());
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// Runs one line of the console.
pub(crate) async fn run(cfg: &ConsoleConfig, token: &str, role: Role, line: &str) -> Ran {
    if line.len() > MAX_LINE {
        return Ran::refused(format!("a command line is at most {MAX_LINE} bytes"));
    }
    let w = match words(line) {
        Ok(w) => w,
        Err(e) => return Ran::refused(e),
    };
    let Some(first) = w.first() else {
        return Ran {
            out: Vec::new(),
            err: Vec::new(),
            code: 0,
        };
    };
    let n = |i: usize, default: usize| {
        w.get(i)
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(default)
            .min(10_000)
    };
    match first.as_str() {
        "help" => Ran {
            out: HELP.as_bytes().to_vec(),
            err: Vec::new(),
            code: 0,
        },
        "logs" => logs(cfg, n(1, 50)).await,
        "dmesg" => {
            let r = output(&mut Command::new("dmesg")).await;
            tail(r, n(1, 50))
        }
        "network" => output(Command::new("ip").args(["-brief", "address"])).await,
        "sh" => break_glass(cfg, role, line).await,
        _ => {
            let args = if first == "nodectl" { &w[1..] } else { &w[..] };
            let Some(sub) = args.first() else {
                return Ran::refused("nodectl what? `help` lists the commands".into());
            };
            if !THROUGH_THE_API.contains(&sub.as_str()) {
                return Ran::refused(format!(
                    "`{sub}` is not a console command: the console runs nodectl's {} (through the admin API), and `help`",
                    THROUGH_THE_API.join(", ")
                ));
            }
            if sub == "node" {
                let what: Vec<&str> = args[1..]
                    .iter()
                    .filter(|a| !a.starts_with('-'))
                    .map(String::as_str)
                    .take(2)
                    .collect();
                let ok = match what.as_slice() {
                    ["bmc", "set", ..] => false,
                    [one, ..] => NODE_THROUGH_THE_API.contains(one),
                    [] => false,
                };
                if !ok {
                    return Ran::refused(format!(
                        "the console runs `node {}`, and `node bmc show|clear` (set a BMC with nodectl through the admin API)",
                        NODE_THROUGH_THE_API.join("|")
                    ));
                }
            }
            if let Some(a) = args.iter().find(|a| {
                STEERING
                    .iter()
                    .any(|s| *a == s || a.starts_with(&format!("{s}=")))
            }) {
                return Ran::refused(format!(
                    "{a}: the console's commands act on this node with this session's role"
                ));
            }
            let mut c = Command::new(&cfg.nodectl);
            c.args(args)
                .env("CAIRN_ADMIN", &cfg.admin)
                .env("CAIRN_ADMIN_TOKEN", token)
                .env_remove("CAIRN_ROOT_SECRET_KEY");
            output(&mut c).await
        }
    }
}

/// `sh COMMAND`: the break-glass. Off unless the node's configuration turns it
/// on (node.toml `[ssh] break_glass = true`, mgmtd `--ssh-break-glass`), and
/// then for admin keys only; each use is logged as an audit warning. The rest of
/// the line goes to `/bin/sh -c` as typed.
async fn break_glass(cfg: &ConsoleConfig, role: Role, line: &str) -> Ran {
    if !cfg.break_glass {
        return Ran::refused(
            "no general shell: the break-glass is off (node.toml [ssh] break_glass = true turns it on)"
                .into(),
        );
    }
    if role < Role::Admin {
        return Ran::refused(format!(
            "the break-glass shell needs the admin role (this key is {})",
            role.name()
        ));
    }
    let rest = line.trim_start().strip_prefix("sh").unwrap_or("").trim();
    if rest.is_empty() {
        return Ran::refused("sh COMMAND: one command line (there is no interactive shell)".into());
    }
    tracing::warn!(target: "cairn_audit", command = ?rest, "break-glass shell command");
    // The same environment nodectl's commands get: never the root's keys.
    output(
        Command::new("/bin/sh")
            .args(["-c", rest])
            .env_remove("CAIRN_ROOT_SECRET_KEY")
            .env_remove("CAIRN_ROOT_ACCESS_KEY"),
    )
    .await
}

async fn output(c: &mut Command) -> Ran {
    c.stdin(std::process::Stdio::null()).kill_on_drop(true);
    match c.output().await {
        Ok(o) => Ran {
            out: o.stdout,
            err: o.stderr,
            code: o.status.code().map_or(1, |c| c as u32),
        },
        Err(e) => Ran::refused(format!(
            "{}: {e}",
            c.as_std().get_program().to_string_lossy()
        )),
    }
}

fn tail(mut r: Ran, n: usize) -> Ran {
    let text = String::from_utf8_lossy(&r.out).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    r.out = (lines[from..].join("\n") + "\n").into_bytes();
    r
}

/// The most of a log file `logs` reads: its end, not the whole file (a log
/// grows to gigabytes; 10,000 lines fit).
const LOG_TAIL: u64 = 4 << 20;

/// The last `most` bytes of a file.
async fn read_tail(path: &std::path::Path, most: u64) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut f = tokio::fs::File::open(path).await?;
    let len = f.metadata().await?.len();
    f.seek(std::io::SeekFrom::Start(len.saturating_sub(most)))
        .await?;
    let mut out = Vec::with_capacity(most.min(len) as usize);
    f.take(most).read_to_end(&mut out).await?;
    Ok(out)
}

/// mgmtd's log: its file under `log_dir` when the node logs to files (a
/// `nodectl dev up` node), else journald's.
async fn logs(cfg: &ConsoleConfig, n: usize) -> Ran {
    if let Some(f) = cfg.log_dir.as_ref().map(|d| d.join("mgmtd.log")) {
        if let Ok(text) = read_tail(&f, LOG_TAIL).await {
            return tail(
                Ran {
                    out: text,
                    err: Vec::new(),
                    code: 0,
                },
                n,
            );
        }
    }
    output(Command::new("journalctl").args([
        "-u",
        "cairn-mgmtd",
        "-n",
        &n.to_string(),
        "--no-pager",
    ]))
    .await
}

#[cfg(test)]
mod tests {
    use super::{words, MAX_LINE};
    use crate::ConsoleConfig;
    use cairn_adminapi::Role;

    #[test]
    fn splits_like_a_shell() {
        assert_eq!(
            words("  nodectl  cluster status ").unwrap(),
            ["nodectl", "cluster", "status"]
        );
        assert_eq!(
            words("tenant create 'a b' \"\"").unwrap(),
            ["tenant", "create", "a b", ""]
        );
        assert!(words("echo 'open").is_err());
        assert!(words("   ").unwrap().is_empty());
    }

    #[tokio::test]
    async fn logs_read_only_the_end_of_the_file() {
        let dir = std::env::temp_dir().join(format!("cairn-console-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("mgmtd.log");
        std::fs::write(&f, "first\nsecond\nthird\n").unwrap();
        assert_eq!(super::read_tail(&f, 6).await.unwrap(), b"third\n");
        assert_eq!(
            super::read_tail(&f, 1 << 20).await.unwrap(),
            b"first\nsecond\nthird\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn only_commands_through_the_api_and_never_another_target() {
        let cfg = ConsoleConfig {
            state: "/nonexistent".into(),
            authorized_keys: Vec::new(),
            admin: "127.0.0.1:1".into(),
            // Would run if a line got through: `true` exits 0.
            nodectl: "/bin/true".into(),
            log_dir: None,
            break_glass: false,
        };
        for line in [
            "flash --force --yes /etc/passwd /tmp/x",
            "nodectl flash a b",
            "node rollback",
            "node update http://example.com/",
            "node bmc set 01 --address 10.0.0.9:623 --user u --password-file /etc/shadow",
            "node --json bmc set 01",
            "node slots",
            "node",
            "dev stop 1",
            "nodectl",
            "sh -c id",
            "status --admin 10.0.0.1:9001",
            "status --admin=10.0.0.1:9001",
            "status --token-file /etc/shadow",
            "nodectl status --data /",
            "status --node 2",
            "status --ca /etc/shadow",
            "status --cert=/etc/shadow",
        ] {
            let r = super::run(&cfg, "t", Role::Admin, line).await;
            assert_eq!(r.code, 2, "{line} ran");
        }
        let long = format!("status {}", "x".repeat(MAX_LINE));
        assert_eq!(super::run(&cfg, "t", Role::Admin, &long).await.code, 2);
        // What is allowed runs (here, `true`), options of its own included.
        for line in [
            "status",
            "nodectl cluster status --json",
            "kv pool create t p --nodes a,b",
            "node power 01 off",
            "node sensors 01",
            "node bmc show --json",
            "node drain 01",
        ] {
            assert_eq!(
                super::run(&cfg, "t", Role::Admin, line).await.code,
                0,
                "{line}"
            );
        }
    }

    #[tokio::test]
    async fn the_break_glass_is_off_unless_configured_and_admin_only() {
        let mut cfg = ConsoleConfig {
            state: "/nonexistent".into(),
            authorized_keys: Vec::new(),
            admin: "127.0.0.1:1".into(),
            nodectl: "/bin/true".into(),
            log_dir: None,
            break_glass: false,
        };
        let r = super::run(&cfg, "t", Role::Admin, "sh echo glass").await;
        assert_eq!(r.code, 2);
        assert!(String::from_utf8_lossy(&r.err).contains("break-glass is off"));
        cfg.break_glass = true;
        for role in [Role::Reader, Role::Operator] {
            let r = super::run(&cfg, "t", role, "sh echo glass").await;
            assert_eq!(r.code, 2, "{role:?} broke the glass");
        }
        let r = super::run(&cfg, "t", Role::Admin, "sh echo glass; exit 3").await;
        assert_eq!((r.code, r.out.as_slice()), (3, b"glass\n".as_slice()));
        assert_eq!(super::run(&cfg, "t", Role::Admin, "sh").await.code, 2);
    }
}
