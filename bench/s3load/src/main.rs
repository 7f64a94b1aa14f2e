//! `s3load`: an S3 load generator fast enough not to be the limit.
//!
//!   s3load run --endpoint http://127.0.0.1:9000 --bucket b --size 16MiB \
//!              --connections 8 --duration 20 --warmup 5 --mix put=1,get=1
//!   s3load ceiling --size 16MiB --connections 8
//!
//! `run` drives an S3 endpoint: every connection is one keep-alive HTTP/1.1
//! connection that sends SigV4-signed requests (`UNSIGNED-PAYLOAD`, as fast
//! clients send them) back to back for the duration; requests finished in the
//! warm-up are not counted. GETs read objects the run wrote first (`--objects`).
//! `ceiling` runs the same client against a responder in the same process that
//! does nothing (PUT bodies are drained, GETs answered from one buffer), beside
//! a raw loopback TCP stream: what the client can carry at most on this machine.

mod client;
mod report;
mod responder;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use std::time::Duration;

#[derive(Parser)]
#[command(version, about = "S3 load generator")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Drive an S3 endpoint.
    Run(RunArgs),
    /// Measure the client's own ceiling against a do-nothing responder and raw
    /// loopback TCP.
    Ceiling(LoadArgs),
}

#[derive(Args, Clone)]
struct LoadArgs {
    /// Object size: bytes, or with KiB / MiB / GiB.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    size: usize,
    /// Concurrent connections (one request in flight on each).
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Seconds measured, after the warm-up.
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// Seconds run first and not counted.
    #[arg(long, default_value_t = 5)]
    warmup: u64,
    /// Operation mix as weights, e.g. `put=1,get=3`.
    #[arg(long, default_value = "put=1,get=1", value_parser = parse_mix)]
    mix: Mix,
    /// Objects written before the run for GETs to read (default: 4 per connection).
    #[arg(long)]
    objects: Option<usize>,
    /// Print the result as JSON as well.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RunArgs {
    #[arg(long, env = "S3LOAD_ENDPOINT")]
    endpoint: String,
    #[arg(long, env = "AWS_ACCESS_KEY_ID")]
    access_key: String,
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    secret_key: String,
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// The bucket (created if missing).
    #[arg(long, default_value = "s3load")]
    bucket: String,
    #[command(flatten)]
    load: LoadArgs,
}

/// Weights of PUT and GET in the mix.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub put: u32,
    pub get: u32,
}

fn parse_mix(s: &str) -> Result<Mix, String> {
    let mut mix = Mix { put: 0, get: 0 };
    for part in s.split(',') {
        let (op, w) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: want op=weight"))?;
        let w: u32 = w.parse().map_err(|_| format!("{w:?}: not a weight"))?;
        match op.trim() {
            "put" => mix.put = w,
            "get" => mix.get = w,
            other => return Err(format!("{other:?}: the ops are put and get")),
        }
    }
    if mix.put + mix.get == 0 {
        return Err("the mix has no operation".into());
    }
    Ok(mix)
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: usize = num.parse().map_err(|_| format!("{s:?}: not a size"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        u => return Err(format!("{u:?}: units are KiB, MiB, GiB")),
    };
    Ok(n * mult)
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run(a) => {
            let target = client::Target::new(
                &a.endpoint,
                &a.access_key,
                &a.secret_key,
                &a.region,
                &a.bucket,
            )?;
            run(target, a.load).await
        }
        Cmd::Ceiling(load) => {
            let addr = responder::start(load.size).await?;
            let target = client::Target::unsigned(&format!("http://{addr}"), "ceiling")?;
            let tcp = responder::loopback_tcp(Duration::from_secs(3)).await?;
            println!("loopback TCP, one stream: {:.0} MB/s", tcp / 1e6);
            let r = run_load(target, &load).await?;
            let mbs = r.total_mbs();
            println!(
                "client ceiling: {mbs:.0} MB/s ({:.2}x loopback TCP), {:.0} ops/s",
                mbs * 1e6 / tcp,
                r.total_ops()
            );
            Ok(())
        }
    }
}

async fn run(target: client::Target, load: LoadArgs) -> Result<()> {
    target.ensure_bucket().await?;
    let r = run_load(target, &load).await?;
    if r.errors > 0 && r.total_ops() == 0.0 {
        bail!(
            "every request failed: {}",
            r.first_error.unwrap_or_default()
        );
    }
    Ok(())
}

async fn run_load(target: client::Target, load: &LoadArgs) -> Result<report::Report> {
    let objects = load.objects.unwrap_or(load.connections * 4).max(1);
    let body = bytes::Bytes::from(
        (0..load.size)
            .map(|_| rand::random::<u8>())
            .collect::<Vec<u8>>(),
    );
    if load.mix.get > 0 {
        client::prefill(&target, objects, body.clone(), load.connections)
            .await
            .context("writing the objects GETs read")?;
    }
    let plan = client::Plan {
        body,
        mix: load.mix,
        objects,
        warmup: Duration::from_secs(load.warmup),
        duration: Duration::from_secs(load.duration),
    };
    let r = client::drive(&target, &plan, load.connections).await?;
    r.print(load.size, load.connections);
    if load.json {
        println!("{}", r.json(load.size, load.connections));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_mixes_parse() {
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("3 parsecs").is_err());
        let m = parse_mix("put=1,get=3").unwrap();
        assert_eq!((m.put, m.get), (1, 3));
        assert!(parse_mix("put=0").is_err());
        assert!(parse_mix("delete=1").is_err());
    }
}
