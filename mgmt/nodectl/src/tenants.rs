//! `nodectl tenant ...`, `nodectl user ...`, `nodectl key ...`: tenants, their
//! users and access keys, through the admin API (`/v1/tenants`). Human output by
//! default, `--json` for scripts; a new key's secret is printed once.

use crate::cluster::Target;
use crate::scrub::when;
use crate::NodectlError;
use cairn_adminapi::{KeyView, TenantView, UserView};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum TenantCmd {
    /// Make a tenant: a namespace of buckets with its own users and keys.
    Create {
        name: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Every tenant.
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// One tenant (by name or id), with its users.
    Show {
        tenant: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Refuse every key of the tenant (its data stays).
    Disable {
        tenant: String,
        #[command(flatten)]
        target: Target,
    },
    /// Accept the tenant's keys again.
    Enable {
        tenant: String,
        #[command(flatten)]
        target: Target,
    },
    /// Delete a tenant with its users and keys (refused while it owns buckets).
    Delete {
        tenant: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Subcommand, Debug)]
pub enum UserCmd {
    /// Make a user in a tenant.
    Create {
        tenant: String,
        name: String,
        /// admin, read-write or read-only.
        #[arg(long, default_value = "read-write")]
        role: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// A tenant's users.
    List {
        tenant: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Refuse the user's keys.
    Disable {
        tenant: String,
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Accept the user's keys again.
    Enable {
        tenant: String,
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Delete a user and its keys.
    Delete {
        tenant: String,
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Subcommand, Debug)]
pub enum KeyCmd {
    /// Make an access key for a user; its secret is shown this once.
    Create {
        tenant: String,
        user: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// A tenant's access keys (never their secrets).
    List {
        tenant: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Revoke an access key, at once on every node.
    Revoke {
        access_key: String,
        #[command(flatten)]
        target: Target,
    },
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn tenant_line(t: &TenantView) -> String {
    format!(
        "{:<20} {}  {:<8} {:>5} users {:>5} keys {:>5} buckets  created {}",
        t.name,
        t.id,
        if t.disabled { "DISABLED" } else { "enabled" },
        t.users,
        t.keys,
        t.buckets,
        when(t.created_ms)
    )
}

fn user_line(u: &UserView) -> String {
    format!(
        "{:<20} {:<10} {:<8} {:>3} keys  created {}",
        u.name,
        u.role,
        if u.disabled { "DISABLED" } else { "enabled" },
        u.keys,
        when(u.created_ms)
    )
}

fn key_line(k: &KeyView) -> String {
    format!(
        "{}  {:<20} created {}",
        k.access_key,
        k.user,
        when(k.created_ms)
    )
}

pub async fn tenant(cmd: TenantCmd) -> Result<(), NodectlError> {
    match cmd {
        TenantCmd::Create { name, target, json } => {
            let t = target.api()?.tenant_create(&name).await?;
            if json {
                print_json(&t);
            } else {
                println!("tenant {} created (id {})", t.name, t.id);
            }
        }
        TenantCmd::List { target, json } => {
            let all = target.api()?.tenants().await?;
            if json {
                print_json(&all);
            } else if all.is_empty() {
                println!("no tenants (the root key's buckets belong to no tenant)");
            } else {
                for t in &all {
                    println!("{}", tenant_line(t));
                }
            }
        }
        TenantCmd::Show {
            tenant,
            target,
            json,
        } => {
            let api = target.api()?;
            let t = api.tenant(&tenant).await?;
            let users = api.users(&tenant).await?;
            if json {
                print_json(&serde_json::json!({ "tenant": t, "users": users }));
            } else {
                println!("{}", tenant_line(&t));
                for u in &users {
                    println!("  {}", user_line(u));
                }
            }
        }
        TenantCmd::Disable { tenant, target } => {
            let t = target.api()?.tenant_set_disabled(&tenant, true).await?;
            println!("tenant {} disabled: its keys are refused", t.name);
        }
        TenantCmd::Enable { tenant, target } => {
            let t = target.api()?.tenant_set_disabled(&tenant, false).await?;
            println!("tenant {} enabled", t.name);
        }
        TenantCmd::Delete { tenant, target } => {
            target.api()?.tenant_delete(&tenant).await?;
            println!("tenant {tenant} deleted, with its users and keys");
        }
    }
    Ok(())
}

pub async fn user(cmd: UserCmd) -> Result<(), NodectlError> {
    match cmd {
        UserCmd::Create {
            tenant,
            name,
            role,
            target,
            json,
        } => {
            let u = target.api()?.user_create(&tenant, &name, &role).await?;
            if json {
                print_json(&u);
            } else {
                println!("user {} created in tenant {tenant} ({})", u.name, u.role);
            }
        }
        UserCmd::List {
            tenant,
            target,
            json,
        } => {
            let all = target.api()?.users(&tenant).await?;
            if json {
                print_json(&all);
            } else {
                for u in &all {
                    println!("{}", user_line(u));
                }
            }
        }
        UserCmd::Disable {
            tenant,
            name,
            target,
        } => {
            target
                .api()?
                .user_set_disabled(&tenant, &name, true)
                .await?;
            println!("user {name} disabled: its keys are refused");
        }
        UserCmd::Enable {
            tenant,
            name,
            target,
        } => {
            target
                .api()?
                .user_set_disabled(&tenant, &name, false)
                .await?;
            println!("user {name} enabled");
        }
        UserCmd::Delete {
            tenant,
            name,
            target,
        } => {
            target.api()?.user_delete(&tenant, &name).await?;
            println!("user {name} deleted, with its keys");
        }
    }
    Ok(())
}

pub async fn key(cmd: KeyCmd) -> Result<(), NodectlError> {
    match cmd {
        KeyCmd::Create {
            tenant,
            user,
            target,
            json,
        } => {
            let k = target.api()?.key_create(&tenant, &user).await?;
            if json {
                print_json(&k);
            } else {
                println!("access key  {}", k.access_key);
                println!("secret key  {}", k.secret_key);
                println!(
                    "(for user {} of tenant {}; the secret is not shown again)",
                    k.user, k.tenant
                );
            }
        }
        KeyCmd::List {
            tenant,
            target,
            json,
        } => {
            let all = target.api()?.keys(&tenant).await?;
            if json {
                print_json(&all);
            } else {
                for k in &all {
                    println!("{}", key_line(k));
                }
            }
        }
        KeyCmd::Revoke { access_key, target } => {
            target.api()?.key_revoke(&access_key).await?;
            println!("access key {access_key} revoked");
        }
    }
    Ok(())
}
