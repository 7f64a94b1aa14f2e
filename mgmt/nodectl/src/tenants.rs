//! `nodectl tenant ...`, `nodectl user ...`, `nodectl key ...`: tenants, their
//! users and access keys, through the admin API (`/v1/tenants`). Human output by
//! default, `--json` for scripts; a new key's secret is printed once.

use crate::cluster::Target;
use crate::scrub::when;
use crate::status::human;
use crate::NodectlError;
use cairn_adminapi::{BucketView, KeyView, QuotaSpec, TenantView, UserView};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum TenantCmd {
    /// Make a tenant: a namespace of buckets with its own users and keys.
    Create {
        name: String,
        /// Store its data unencrypted (by default each tenant's data is sealed
        /// under a key of its own).
        #[arg(long)]
        no_encryption: bool,
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
    /// Delete a tenant with its users, keys and encryption key (refused while it
    /// owns buckets, unless --purge).
    Delete {
        tenant: String,
        /// Delete its buckets and objects too: its key goes at once, so none of
        /// its data can be decrypted again; the space is freed in the background.
        #[arg(long)]
        purge: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Set what all the tenant's buckets together may hold; a write past it is
    /// refused (S3 `QuotaExceeded`, 403).
    Quota {
        tenant: String,
        #[command(flatten)]
        limits: Limits,
        #[command(flatten)]
        target: Target,
    },
    /// Set the tenant's rates and weight on each node: requests over a rate
    /// wait their turn (refused with S3 `SlowDown`, 503, past 2 s), bytes over a
    /// rate are slowed; while a node is busy its tenants share it by weight.
    Qos {
        tenant: String,
        #[command(flatten)]
        rates: crate::qos::Rates,
        #[command(flatten)]
        target: Target,
    },
    /// The tenant's buckets, with what each holds and its quota.
    Buckets {
        tenant: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Set what one of the tenant's buckets may hold.
    BucketQuota {
        tenant: String,
        bucket: String,
        #[command(flatten)]
        limits: Limits,
        #[command(flatten)]
        target: Target,
    },
}

/// A quota's limits as given on the command line.
#[derive(clap::Args, Debug)]
pub struct Limits {
    /// The most bytes (`500M`, `10G`, `2T`, plain bytes), or `none`.
    #[arg(long, value_parser = parse_bytes)]
    max_bytes: Option<Limit>,
    /// The most objects, or `none`.
    #[arg(long, value_parser = parse_count)]
    max_objects: Option<Limit>,
}

/// One limit: a number, or `none` (lifted). Not given: left as it is.
#[derive(Clone, Copy, Debug)]
pub struct Limit(pub Option<u64>);

pub fn parse_count(s: &str) -> Result<Limit, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    s.parse()
        .map(|n| Limit(Some(n)))
        .map_err(|_| format!("not a count: {s:?}"))
}

pub fn parse_bytes(s: &str) -> Result<Limit, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    // `10G`, `10GiB` and `10GB` are all 10 GiB: quotas are in binary units.
    cairn_sysutil::memory::parse_size(s)
        .map(|n| Limit(Some(n)))
        .ok_or_else(|| format!("not a size: {s:?} (e.g. 500M, 10G, 2T)"))
}

impl Limits {
    /// The new quota: the limits given, the others as they were.
    fn over(&self, was: QuotaSpec) -> QuotaSpec {
        QuotaSpec {
            max_bytes: self.max_bytes.map_or(was.max_bytes, |l| l.0),
            max_objects: self.max_objects.map_or(was.max_objects, |l| l.0),
        }
    }
}

fn quota_text(q: &QuotaSpec) -> String {
    let b = q.max_bytes.map_or("no limit".into(), human);
    let o = q.max_objects.map_or("no limit".into(), |n| n.to_string());
    format!("quota {b} / {o} objects")
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

pub(crate) fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn tenant_line(t: &TenantView) -> String {
    format!(
        "{:<20} {}  {:<8} {:<9} {:>5} users {:>5} keys {:>5} buckets  {} in {} objects, {}  created {}",
        t.name,
        t.id,
        if t.disabled { "DISABLED" } else { "enabled" },
        if t.key_id.is_some() { "encrypted" } else { "plaintext" },
        t.users,
        t.keys,
        t.buckets,
        human(t.bytes),
        t.objects,
        quota_text(&t.quota),
        when(t.created_ms)
    )
}

fn bucket_line(b: &BucketView) -> String {
    format!(
        "{:<30} {:>12} in {:>8} objects, {}  created {}",
        b.name,
        human(b.bytes),
        b.objects,
        quota_text(&b.quota),
        when(b.created_ms)
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
        TenantCmd::Create {
            name,
            no_encryption,
            target,
            json,
        } => {
            let t = target.api()?.tenant_create(&name, !no_encryption).await?;
            if json {
                print_json(&t);
            } else {
                let sealed = match t.key_id {
                    Some(_) => "its data encrypted under a key of its own",
                    None => "its data stored unencrypted",
                };
                println!("tenant {} created (id {}), {sealed}", t.name, t.id);
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
                println!("  qos {}", crate::qos::text(&t.qos));
                println!("  {}", crate::qos::figures(&t.qos_here));
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
        TenantCmd::Delete {
            tenant,
            purge,
            target,
        } => {
            let api = target.api()?;
            // What the answer can promise depends on whether its data was sealed.
            let sealed = api.tenant(&tenant).await?.key_id.is_some();
            api.tenant_delete(&tenant, purge).await?;
            match (purge, sealed) {
                (true, true) => println!(
                    "tenant {tenant} deleted with its buckets, users and keys; its encryption \
                     key is destroyed (its data can no longer be decrypted) and its space is \
                     freed in the background"
                ),
                (true, false) => println!(
                    "tenant {tenant} deleted with its buckets, users and keys; its data was \
                     stored unencrypted: its space is freed in the background, and until then \
                     (and in any image of the drives) its bytes are still there in the clear"
                ),
                (false, true) => {
                    println!("tenant {tenant} deleted, with its users, keys and encryption key")
                }
                (false, false) => println!("tenant {tenant} deleted, with its users and keys"),
            }
        }
        TenantCmd::Quota {
            tenant,
            limits,
            target,
        } => {
            let api = target.api()?;
            let was = api.tenant(&tenant).await?.quota;
            let t = api.tenant_quota(&tenant, limits.over(was)).await?;
            println!("{}", tenant_line(&t));
        }
        TenantCmd::Qos {
            tenant,
            rates,
            target,
        } => {
            let api = target.api()?;
            let was = api.tenant(&tenant).await?.qos;
            let t = api.tenant_qos(&tenant, rates.over(was)).await?;
            println!("{}: qos {}", t.name, crate::qos::text(&t.qos));
        }
        TenantCmd::Buckets {
            tenant,
            target,
            json,
        } => {
            let all = target.api()?.tenant_buckets(&tenant).await?;
            if json {
                print_json(&all);
            } else {
                for b in &all {
                    println!("{}", bucket_line(b));
                }
            }
        }
        TenantCmd::BucketQuota {
            tenant,
            bucket,
            limits,
            target,
        } => {
            let api = target.api()?;
            let was = api
                .tenant_buckets(&tenant)
                .await?
                .into_iter()
                .find(|b| b.name == bucket)
                .map(|b| b.quota)
                .unwrap_or_default();
            let b = api.bucket_quota(&tenant, &bucket, limits.over(was)).await?;
            println!("{}", bucket_line(&b));
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
