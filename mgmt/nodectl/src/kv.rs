//! `nodectl kv`: a tenant's KV pools (named keyspaces for the KV-cache tier), and
//! what each holds and serves.

use crate::cluster::Target;
use crate::status::human;
use crate::tenants::print_json;
use crate::NodectlError;
use cairn_adminapi::{KvPoolView, NewKvPool};
use std::time::Duration;

#[derive(clap::Subcommand, Debug)]
pub enum KvCmd {
    /// Pools of a tenant.
    Pool {
        #[command(subcommand)]
        cmd: PoolCmd,
    },
    /// Every pool: values and bytes stored, this node's RAM share, hit ratio,
    /// evictions, and bytes per second in and out of its RAM tier (sampled over
    /// --interval).
    Stats {
        /// Seconds between the two samples the rates come from.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum PoolCmd {
    /// A new pool: RESP reaches it with `SELECT <index>` or `AUTH <key>/<name>`.
    Create {
        /// The tenant (its name, or `root`).
        tenant: String,
        name: String,
        /// RESP's database number (default: the next free one from 1).
        #[arg(long)]
        index: Option<u32>,
        /// Bytes it may hold on the drives (`100G`); default: no limit of its own.
        #[arg(long, value_parser = size)]
        capacity: Option<u64>,
        /// The most of each node's RAM tier its values take (`4G`); default: the
        /// tier's own bound.
        #[arg(long, value_parser = size)]
        ram: Option<u64>,
        /// Expiry of values set without one, in seconds.
        #[arg(long)]
        ttl: Option<u64>,
        /// When full, refuse writes instead of evicting the oldest values.
        #[arg(long)]
        no_evict: bool,
        /// Keep the values in this new S3 bucket of the tenant (same values
        /// through S3 and RESP).
        #[arg(long)]
        s3_bucket: Option<String>,
        /// Store its values only on these nodes (ids or unique id prefixes, as
        /// `cluster status` lists them, comma-separated); default: any node.
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// Acknowledge a write once it is on stable media, not (the default,
        /// write-back) once it is in the memory of each fragment's node.
        #[arg(long)]
        durable: bool,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// The tenant's pools.
    List {
        tenant: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Deletes a pool and every value in it.
    Delete {
        tenant: String,
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

fn size(s: &str) -> Result<u64, String> {
    cairn_sysutil::memory::parse_size(s)
        .ok_or_else(|| format!("not a size: {s:?} (e.g. 500M, 10G)"))
}

fn line(p: &KvPoolView, rates: Option<(f64, f64)>) -> String {
    let lookups = p.ram_hits + p.ram_misses;
    let ratio = match lookups {
        0 => "-".to_string(),
        n => format!("{:.0}%", 100.0 * p.ram_hits as f64 / n as f64),
    };
    format!(
        "{:<12} {:<12} db {:<3} {:>8} values {:>9} of {:<9} ram {:>9}{}  hits {:>5}  evicted {} from RAM, {} to make room{}  {}, {}{}{}",
        p.tenant,
        p.name,
        p.index,
        p.values,
        human(p.bytes),
        p.capacity.map_or("no limit".into(), human),
        human(p.ram_bytes),
        p.ram_capacity
            .map_or(String::new(), |c| format!(" of {}", human(c))),
        ratio,
        p.ram_evicted,
        p.dropped,
        rates.map_or(String::new(), |(i, o)| format!("  {i:.2} GB/s in, {o:.2} out")),
        if p.evict { "cache" } else { "store" },
        p.durability,
        match p.nodes.as_slice() {
            [] => String::new(),
            n => format!(
                ", on {}",
                n.iter().map(|id| &id[..8.min(id.len())]).collect::<Vec<_>>().join(",")
            ),
        },
        match (&p.ttl_secs, p.s3) {
            (Some(t), true) => format!(", ttl {t}s, S3 bucket {}", p.bucket),
            (Some(t), false) => format!(", ttl {t}s"),
            (None, true) => format!(", S3 bucket {}", p.bucket),
            (None, false) => String::new(),
        }
    )
}

pub async fn kv(cmd: KvCmd) -> Result<(), NodectlError> {
    match cmd {
        KvCmd::Pool { cmd } => pool(cmd).await,
        KvCmd::Stats {
            interval,
            target,
            json,
        } => {
            let api = target.api()?;
            let a = api.kv_stats().await?;
            let secs = interval.clamp(0.1, 60.0);
            tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            let b = api.kv_stats().await?;
            let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs / 1e9;
            let (out, inn) = (
                rate(a.ram_bytes_out, b.ram_bytes_out),
                rate(a.ram_bytes_in, b.ram_bytes_in),
            );
            if json {
                print_json(&serde_json::json!({
                    "stats": b,
                    "ram_gbps_out": out,
                    "ram_gbps_in": inn,
                }));
                return Ok(());
            }
            println!(
                "RAM tier: {} of {} held; {out:.2} GB/s served from RAM, {inn:.2} GB/s taken in",
                human(b.ram_bytes),
                human(b.ram_capacity)
            );
            if b.pools.is_empty() {
                println!("no KV pools yet (a tenant's default keyspace appears at its first SET)");
            }
            for p in &b.pools {
                let was = a
                    .pools
                    .iter()
                    .find(|x| x.tenant == p.tenant && x.name == p.name);
                let rates =
                    was.map(|x| (rate(x.bytes_in, p.bytes_in), rate(x.bytes_out, p.bytes_out)));
                println!("{}", line(p, rates));
            }
            Ok(())
        }
    }
}

async fn pool(cmd: PoolCmd) -> Result<(), NodectlError> {
    match cmd {
        PoolCmd::Create {
            tenant,
            name,
            index,
            capacity,
            ram,
            ttl,
            no_evict,
            s3_bucket,
            nodes,
            durable,
            target,
            json,
        } => {
            let p = target
                .api()?
                .kv_pool_create(
                    &tenant,
                    NewKvPool {
                        name,
                        index,
                        capacity,
                        ram,
                        ttl_secs: ttl,
                        evict: !no_evict,
                        s3_bucket,
                        nodes,
                        durability: if durable { "durable" } else { "write-back" }.into(),
                    },
                )
                .await?;
            if json {
                print_json(&p);
            } else {
                println!(
                    "pool {} of {} created: SELECT {} (or AUTH <key>/{} <secret>)",
                    p.name, p.tenant, p.index, p.name
                );
            }
        }
        PoolCmd::List {
            tenant,
            target,
            json,
        } => {
            let all = target.api()?.kv_pools(&tenant).await?;
            if json {
                print_json(&all);
            } else {
                for p in &all {
                    println!("{}", line(p, None));
                }
            }
        }
        PoolCmd::Delete {
            tenant,
            name,
            target,
        } => {
            target.api()?.kv_pool_delete(&tenant, &name).await?;
            println!("pool {name} of {tenant} deleted, with its values");
        }
    }
    Ok(())
}
