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
            target,
            json,
        } => {
            let t = target
                .api()?
                .admin_token_create(&NewAdminToken {
                    name,
                    role,
                    expires_in_s: expires_in,
                })
                .await?;
            if json {
                print_json(&t);
            } else {
                println!(
                    "token {} ({}, role {}{}):\n{}\n\nShown this once: keep it in a file (mode 0600) for --token-file.",
                    t.view.id,
                    t.view.name,
                    t.view.role,
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
                    "{:<16}  {:<8}  {:<20}  {:<16}  {:<16}  BY",
                    "ID", "ROLE", "NAME", "CREATED", "EXPIRES"
                );
                for t in all {
                    println!(
                        "{:<16}  {:<8}  {:<20}  {:<16}  {:<16}  {}",
                        t.id,
                        t.role,
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
        println!(
            "{:<12}  {:>3}  {:<22}  {:<8}  {}  {}  (node {})",
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
