//! `nodectl token` and `nodectl audit`: admin tokens with roles, and the record
//! of every mutating admin call.

use crate::cluster::Target;
use crate::scrub::when;
use crate::tenants::print_json;
use crate::NodectlError;
use cairn_adminapi::{NewAdminToken, Role};

#[derive(clap::Subcommand, Debug)]
pub enum TokenCmd {
    /// A new admin token, printed this once (the cluster keeps only its hash).
    /// Use it with `--admin ADDR --token-file FILE`, or in CAIRN_ADMIN_TOKEN.
    Create {
        /// What it is for (shown in lists and the audit log).
        name: String,
        /// reader (status and figures), operator (also scrub, gc, drain, KV
        /// pools) or admin (everything).
        #[arg(long, value_parser = role)]
        role: Role,
        /// How long it stays valid: `3600`, `90m`, `12h`, `30d`; default: until
        /// revoked.
        #[arg(long, value_parser = seconds)]
        expires_in: Option<u64>,
        /// A tenant's token: it acts only within this tenant (name or id), with
        /// its role there (admin: the tenant's users and keys; operator: its KV
        /// pools; reader: read it).
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Every admin token (never their secrets).
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Revokes a token at once, on every node.
    Revoke {
        id: String,
        #[command(flatten)]
        target: Target,
    },
}

fn role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("{s:?}: a role is reader, operator or admin"))
}

fn seconds(s: &str) -> Result<u64, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: a duration is like 3600, 90m, 12h or 30d"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{s:?}: a duration is like 3600, 90m, 12h or 30d")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?}: too long"))
}

pub async fn token(cmd: TokenCmd) -> Result<(), NodectlError> {
    match cmd {
        TokenCmd::Create {
            name,
            role,
            expires_in,
            tenant,
            target,
            json,
        } => {
            let t = target
                .api()?
                .admin_token_create(&NewAdminToken {
                    name,
                    role,
                    expires_in_s: expires_in,
                    tenant,
                })
                .await?;
            if json {
                print_json(&t);
            } else {
                println!(
                    "token {} ({}, role {}{}{}):\n{}\n\nShown this once: keep it in a file (mode 0600) for --token-file.",
                    t.view.id,
                    t.view.name,
                    t.view.role,
                    t.view.tenant.as_ref().map(|n| format!(" in tenant {n}")).unwrap_or_default(),
                    t.view.expires_ms.map(|e| format!(", expires {}", when(e))).unwrap_or_default(),
                    t.token
                );
            }
        }
        TokenCmd::List { target, json } => {
            let all = target.api()?.admin_tokens().await?;
            if json {
                print_json(&all);
            } else if all.is_empty() {
                println!("no admin tokens (the node's own admin.token is not listed)");
            } else {
                println!(
                    "{:<16}  {:<8}  {:<12}  {:<20}  {:<16}  {:<16}  BY",
                    "ID", "ROLE", "TENANT", "NAME", "CREATED", "EXPIRES"
                );
                for t in all {
                    println!(
                        "{:<16}  {:<8}  {:<12}  {:<20}  {:<16}  {:<16}  {}",
                        t.id,
                        t.role,
                        t.tenant.as_deref().unwrap_or("-"),
                        t.name,
                        when(t.created_ms),
                        t.expires_ms.map(when).unwrap_or_else(|| "never".into()),
                        t.created_by
                    );
                }
            }
        }
        TokenCmd::Revoke { id, target } => {
            target.api()?.admin_token_revoke(&id).await?;
            println!("token {id} revoked");
        }
    }
    Ok(())
}

/// `nodectl audit`: the newest mutating admin calls, oldest first.
pub async fn audit(target: &Target, limit: usize, json: bool) -> Result<(), NodectlError> {
    let all = target.api()?.audit(limit).await?;
    if json {
        print_json(&all);
        return Ok(());
    }
    for e in all {
        let repeated = match e.repeated {
            0 => String::new(),
            n => format!("  (and {n} more like it in the minute before)"),
        };
        let repeated = match &e.tenant {
            Some(t) => format!("  [tenant {t}]{repeated}"),
            None => repeated,
        };
        println!(
            "{:<12}  {:>3}  {:<22}  {:<8}  {}  {}  (node {}){repeated}",
            when(e.at_ms),
            e.status,
            e.action.name(),
            e.role,
            e.who,
            e.path,
            e.node
        );
    }
    Ok(())
}

#[derive(clap::Subcommand, Debug)]
pub enum SshKeyCmd {
    /// A key that may log in to the SSH console of every node, with a role.
    Add {
        /// Whose key (the audit names its sessions `ssh:NAME`).
        name: String,
        /// reader, operator or admin.
        #[arg(long, value_parser = role)]
        role: Role,
        /// The public key file (`id_ed25519.pub`); `-` reads stdin.
        #[arg(long)]
        public_key: std::path::PathBuf,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// The keys added through the API (the nodes' authorized-keys files aside).
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Removes a key: refused at its next login on every node.
    Remove {
        id: String,
        #[command(flatten)]
        target: Target,
    },
}

fn key_line(k: &cairn_adminapi::SshKeyView) -> String {
    format!(
        "{}  {:<20} {:<8} {:<12} {}  added {} by {}",
        k.id,
        k.name,
        k.role,
        k.key_type,
        k.fingerprint,
        when(k.added_ms),
        k.added_by
    )
}

pub async fn ssh_key(cmd: SshKeyCmd) -> Result<(), NodectlError> {
    match cmd {
        SshKeyCmd::Add {
            name,
            role,
            public_key: key,
            target,
            json,
        } => {
            let text = if key.as_os_str() == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(crate::io_err("read the public key from stdin"))?;
                s
            } else {
                std::fs::read_to_string(&key)
                    .map_err(crate::io_err(format!("read {}", key.display())))?
            };
            let public_key = text.trim().to_string();
            let k = target
                .api()?
                .ssh_key_add(&cairn_adminapi::NewSshKey {
                    name,
                    role,
                    public_key,
                })
                .await?;
            if json {
                print_json(&k);
            } else {
                println!("{}", key_line(&k));
            }
        }
        SshKeyCmd::List { target, json } => {
            let keys = target.api()?.ssh_keys().await?;
            if json {
                print_json(&keys);
            } else if keys.is_empty() {
                println!("no SSH keys added through the API (nodectl ssh-key add NAME --role R --public-key FILE)");
            } else {
                for k in &keys {
                    println!("{}", key_line(k));
                }
            }
        }
        SshKeyCmd::Remove { id, target } => {
            target.api()?.ssh_key_remove(&id).await?;
            println!("SSH key {id} removed");
        }
    }
    Ok(())
}

#[derive(clap::Subcommand, Debug)]
pub enum CertCmd {
    /// An admin client certificate for the API over TLS (`mgmtd --admin-tls`):
    /// the key pair is made here and its private half never leaves this
    /// machine. Writes DIR/NAME.pem, DIR/NAME.key (0600) and DIR/ca.pem; use them
    /// with `--admin https://HOST:PORT --cert ... --key ... --ca ...`.
    Issue {
        name: String,
        /// reader, operator or admin.
        #[arg(long, value_parser = role)]
        role: Role,
        /// Days it is valid.
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Where to write the files (made if absent).
        #[arg(long, default_value = ".")]
        out: std::path::PathBuf,
        #[command(flatten)]
        target: Target,
    },
    /// Every admin certificate issued (and not revoked).
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Revokes one (its id, or 8+ leading hex digits of its SHA-256): refused
    /// at once on every node.
    Revoke {
        id: String,
        #[command(flatten)]
        target: Target,
    },
}

fn cert_line(c: &cairn_adminapi::AdminCertView) -> String {
    format!(
        "{}  {:<20} {:<8} expires {}  issued {} by {}",
        c.id,
        c.name,
        c.role,
        when(c.not_after_ms),
        when(c.created_ms),
        c.created_by
    )
}

pub async fn cert(cmd: CertCmd) -> Result<(), NodectlError> {
    match cmd {
        CertCmd::Issue {
            name,
            role,
            days,
            out,
            target,
        } => {
            let key = cairn_pki::ca::NodeKey::generate()
                .map_err(|e| NodectlError::Daemon(format!("a key pair: {e}")))?;
            let issued = target
                .api()?
                .admin_cert_issue(&cairn_adminapi::NewAdminCert {
                    name: name.clone(),
                    role,
                    public_key_hex: key.public_hex(),
                    days: Some(days),
                })
                .await?;
            std::fs::create_dir_all(&out)
                .map_err(crate::io_err(format!("create {}", out.display())))?;
            let write = |file: String, text: &str, mode: u32| {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                let p = out.join(file);
                // Never over an existing file (a node's own key, an earlier
                // certificate's): choose another --out, or remove it first.
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(&p)
                    .and_then(|mut f| f.write_all(text.as_bytes()))
                    .map_err(crate::io_err(format!("write {}", p.display())))
            };
            write(format!("{name}.key"), &key.private_pem(), 0o600)?;
            write(format!("{name}.pem"), &issued.cert_pem, 0o644)?;
            // The cluster's CA: the same file serves every certificate issued here.
            match std::fs::read_to_string(out.join("ca.pem")) {
                Ok(old) if old == issued.ca_pem => {}
                _ => write("ca.pem".into(), &issued.ca_pem, 0o644)?,
            }
            println!("{}", cert_line(&issued.view));
            println!(
                "wrote {0}/{name}.pem, {0}/{name}.key and {0}/ca.pem",
                out.display()
            );
        }
        CertCmd::List { target, json } => {
            let certs = target.api()?.admin_certs().await?;
            if json {
                print_json(&certs);
            } else if certs.is_empty() {
                println!("no admin certificates (nodectl cert issue NAME --role R)");
            } else {
                for c in &certs {
                    println!("{}", cert_line(c));
                }
            }
        }
        CertCmd::Revoke { id, target } => {
            target.api()?.admin_cert_revoke(&id).await?;
            println!("admin certificate {id} revoked");
        }
    }
    Ok(())
}
