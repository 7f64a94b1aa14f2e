//! chunkbench: load generator for Cairn's chunk layer.
//!
//! Two modes, the same four workloads, run in this order:
//!
//! | workload    | what                                                               |
//! |-------------|--------------------------------------------------------------------|
//! | seqwrite1m  | Put 1 MiB chunks with new ids (durable acks) for `--duration`      |
//! | seqread1m   | Get those chunks back in write order (wrapping) for `--duration`   |
//! | randwrite4k | Put 4 KiB chunks with new ids for `--duration`                     |
//! | randread4k  | Get uniformly random ones of those 4 KiB chunks for `--duration`   |
//!
//! * `service --addr HOST:PORT`: drives a running `datapathd` over the chunk protocol
//!   with [`cairn_chunkproto::ChunkClient`], `--qd` concurrent tasks each with one
//!   operation outstanding (one op per batch, as a queue depth).
//! * `local --path FILE`: opens the file with the io_uring backend, formats a chunk
//!   store on it and calls it in-process from one thread, `--qd` operations per call
//!   (`write_batch` / `get_many`), i.e. the group commit a reactor makes of a full
//!   queue, without the network and the reactor hand-off.
//!
//! The store is log-structured, so "random" 4 KiB writes are appends whatever the ids;
//! the name only pairs them with fio's randwrite.
//!
//! Every result is one line on stdout:
//! `RESULT <mode> <workload> ops=<ops/s> mbps=<MB/s (10^6)> n=<ops> secs=<s> p50us=<µs> p99us=<µs>`

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use cairn_chunkproto::{ChunkClient, Reply, Request};
use cairn_types::ChunkId;
use clap::{Parser, Subcommand};
use rand::{Rng, RngCore, SeedableRng};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TENANT: u64 = 7;
const SEQ_BASE: u128 = 1 << 100;
const RAND_BASE: u128 = 2 << 100;
const MIB: usize = 1 << 20;
const KIB4: usize = 4096;
/// Random bytes that payloads are sliced from (unique-ish content, no copy per op).
const POOL: usize = 64 << 20;

#[derive(Parser, Debug)]
#[command(
    name = "chunkbench",
    about = "Load generator for Cairn's chunk store / chunk service"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
    /// Seconds per workload.
    #[arg(long, global = true, default_value_t = 10.0)]
    duration: f64,
    /// Operations outstanding at once.
    #[arg(long, global = true, default_value_t = 32)]
    qd: usize,
    /// Stop the 1 MiB write phase after this many MiB even if time remains
    /// (keeps it inside the drive).
    #[arg(long, global = true, default_value_t = 3072)]
    seq_cap_mib: u64,
    /// Stop the 4 KiB write phase after this many chunks even if time remains.
    #[arg(long, global = true, default_value_t = 500_000)]
    rand_cap: u64,
    /// Comma-separated subset of workloads (default: all four, in order).
    #[arg(long, global = true)]
    only: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Drive a running datapathd over TCP.
    Service {
        /// Chunk service address.
        #[arg(long)]
        addr: String,
        /// The service's node-local key file (datapathd's `--local-key`).
        #[arg(long)]
        key: std::path::PathBuf,
        /// Drive index to address.
        #[arg(long, default_value_t = 0)]
        drive: u16,
        /// TCP connections of the client.
        #[arg(long, default_value_t = 4)]
        conns: usize,
        /// Client runtime worker threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// Open a file with the io_uring backend and call the chunk store in-process.
    Local {
        /// Drive file (created sparse with --size if missing; block 0 must be blank).
        #[arg(long)]
        path: PathBuf,
        /// Size in GiB when creating the file.
        #[arg(long, default_value_t = 8)]
        size_gib: u64,
        /// Segment size in MiB.
        #[arg(long, default_value_t = 32)]
        segment_mib: u64,
    },
}

#[derive(Default)]
struct Stat {
    ops: u64,
    secs: f64,
    bytes: u64,
    lat_us: Vec<u32>,
}

fn report(mode: &str, name: &str, mut s: Stat) {
    s.lat_us.sort_unstable();
    let pct = |p: f64| -> u32 {
        if s.lat_us.is_empty() {
            0
        } else {
            s.lat_us[((s.lat_us.len() - 1) as f64 * p) as usize]
        }
    };
    let secs = s.secs.max(1e-9);
    println!(
        "RESULT {mode} {name} ops={:.0} mbps={:.1} n={} secs={:.2} p50us={} p99us={}",
        s.ops as f64 / secs,
        s.bytes as f64 / secs / 1e6,
        s.ops,
        s.secs,
        pct(0.50),
        pct(0.99)
    );
}

fn workloads(only: &Option<String>) -> Result<Vec<String>> {
    let all = ["seqwrite1m", "seqread1m", "randwrite4k", "randread4k"];
    match only {
        None => Ok(all.iter().map(|s| s.to_string()).collect()),
        Some(list) => {
            let v: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
            for w in &v {
                if !all.contains(&w.as_str()) {
                    bail!("unknown workload {w:?} (known: {all:?})");
                }
            }
            Ok(v)
        }
    }
}

fn pool() -> Bytes {
    let mut v = vec![0u8; POOL];
    rand::rngs::StdRng::seed_from_u64(0x5eed).fill_bytes(&mut v);
    Bytes::from(v)
}

fn payload(pool: &Bytes, rng: &mut impl Rng, len: usize) -> Bytes {
    let off = rng.random_range(0..(POOL - len) / 8) * 8;
    pool.slice(off..off + len)
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let wl = workloads(&cli.only)?;
    match &cli.mode {
        Mode::Service {
            addr,
            key,
            drive,
            conns,
            threads,
        } => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads((*threads).max(1))
                .enable_all()
                .build()?;
            let key = cairn_chunkproto::auth::LocalKey::load(key)?;
            rt.block_on(service(&cli, &wl, addr.clone(), key, *drive, *conns))
        }
        Mode::Local {
            path,
            size_gib,
            segment_mib,
        } => local(&cli, &wl, path, *size_gib, *segment_mib),
    }
}

// ---------------------------------------------------------------- service mode

#[derive(Clone, Copy, PartialEq)]
enum Op {
    SeqWrite,
    SeqRead,
    RandWrite,
    RandRead,
}

struct Shared {
    client: ChunkClient,
    drive: u16,
    pool: Bytes,
    next: AtomicU64,
    /// Chunks written by the 1 MiB / 4 KiB write phases.
    seq_written: AtomicU64,
    rand_written: AtomicU64,
    stop: AtomicBool,
    seq_cap: u64,
    rand_cap: u64,
}

async fn service(
    cli: &Cli,
    wl: &[String],
    addr: String,
    key: cairn_chunkproto::auth::LocalKey,
    drive: u16,
    conns: usize,
) -> Result<()> {
    let client = ChunkClient::local(addr.clone(), conns, Duration::from_secs(60), key);
    // Fail fast when the drive is not there.
    match client.call(vec![Request::DriveInfo { drive }]).await?.pop() {
        Some(Ok(Reply::DriveInfo(r))) => eprintln!("chunkbench: {addr} drive {drive}: {r:?}"),
        other => bail!("DriveInfo on {addr} drive {drive}: {other:?}"),
    }
    let sh = Arc::new(Shared {
        client,
        drive,
        pool: pool(),
        next: AtomicU64::new(0),
        seq_written: AtomicU64::new(0),
        rand_written: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        seq_cap: cli.seq_cap_mib,
        rand_cap: cli.rand_cap,
    });
    for w in wl {
        let op = match w.as_str() {
            "seqwrite1m" => Op::SeqWrite,
            "seqread1m" => Op::SeqRead,
            "randwrite4k" => Op::RandWrite,
            _ => Op::RandRead,
        };
        if op == Op::SeqRead && sh.seq_written.load(Ordering::SeqCst) == 0 {
            bail!("seqread1m needs seqwrite1m first");
        }
        if op == Op::RandRead && sh.rand_written.load(Ordering::SeqCst) == 0 {
            bail!("randread4k needs randwrite4k first");
        }
        let s = run_service_phase(&sh, op, cli.qd, cli.duration).await?;
        report("service", w, s);
    }
    Ok(())
}

async fn run_service_phase(sh: &Arc<Shared>, op: Op, qd: usize, duration: f64) -> Result<Stat> {
    sh.next.store(0, Ordering::SeqCst);
    sh.stop.store(false, Ordering::SeqCst);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(duration);
    let mut tasks = Vec::new();
    for t in 0..qd {
        let sh = sh.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64 + 1);
            let mut st = Stat::default();
            let seq_n = sh.seq_written.load(Ordering::SeqCst);
            let rand_n = sh.rand_written.load(Ordering::SeqCst);
            while !sh.stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let i = sh.next.fetch_add(1, Ordering::Relaxed);
                let (req, len) = match op {
                    Op::SeqWrite => {
                        if i >= sh.seq_cap {
                            sh.stop.store(true, Ordering::Relaxed);
                            break;
                        }
                        let payload = payload(&sh.pool, &mut rng, MIB);
                        (
                            Request::Put {
                                drive: sh.drive,
                                id: ChunkId::from_u128(SEQ_BASE + i as u128),
                                tenant: TENANT,
                                key_id: 0,
                                payload,
                                durable: true,
                            },
                            MIB,
                        )
                    }
                    Op::RandWrite => {
                        if i >= sh.rand_cap {
                            sh.stop.store(true, Ordering::Relaxed);
                            break;
                        }
                        let payload = payload(&sh.pool, &mut rng, KIB4);
                        (
                            Request::Put {
                                drive: sh.drive,
                                id: ChunkId::from_u128(RAND_BASE + i as u128),
                                tenant: TENANT,
                                key_id: 0,
                                payload,
                                durable: true,
                            },
                            KIB4,
                        )
                    }
                    Op::SeqRead => (
                        Request::Get {
                            drive: sh.drive,
                            id: ChunkId::from_u128(SEQ_BASE + (i % seq_n) as u128),
                            tenant: TENANT,
                        },
                        MIB,
                    ),
                    Op::RandRead => (
                        Request::Get {
                            drive: sh.drive,
                            id: ChunkId::from_u128(RAND_BASE + rng.random_range(0..rand_n) as u128),
                            tenant: TENANT,
                        },
                        KIB4,
                    ),
                };
                let t0 = Instant::now();
                let mut res = sh.client.call(vec![req]).await?;
                let lat = t0.elapsed();
                match res.pop() {
                    Some(Ok(Reply::Put)) => {}
                    Some(Ok(Reply::Get { payload })) if payload.len() == len => {}
                    other => return Err(anyhow!("op {i}: unexpected answer {other:?}")),
                }
                // Count only operations that were sent before the deadline and done.
                st.ops += 1;
                st.bytes += len as u64;
                st.lat_us.push(lat.as_micros().min(u32::MAX as u128) as u32);
                match op {
                    Op::SeqWrite => {
                        sh.seq_written.fetch_max(i + 1, Ordering::SeqCst);
                    }
                    Op::RandWrite => {
                        sh.rand_written.fetch_max(i + 1, Ordering::SeqCst);
                    }
                    _ => {}
                }
            }
            Ok::<Stat, anyhow::Error>(st)
        }));
    }
    let mut total = Stat::default();
    for t in tasks {
        let s = t.await.context("worker panicked")??;
        total.ops += s.ops;
        total.bytes += s.bytes;
        total.lat_us.extend(s.lat_us);
    }
    total.secs = start.elapsed().as_secs_f64();
    // Writes complete out of order: "written" must mean every id below it is present.
    // With all tasks done, ids 0..next that were issued all completed (or we errored).
    match op {
        Op::SeqWrite => sh.seq_written.store(
            total.ops.min(sh.next.load(Ordering::SeqCst)),
            Ordering::SeqCst,
        ),
        Op::RandWrite => sh.rand_written.store(
            total.ops.min(sh.next.load(Ordering::SeqCst)),
            Ordering::SeqCst,
        ),
        _ => {}
    }
    Ok(total)
}

// ---------------------------------------------------------------- local mode

fn local(
    cli: &Cli,
    wl: &[String],
    path: &std::path::Path,
    size_gib: u64,
    segment_mib: u64,
) -> Result<()> {
    use cairn_blockdev::UringDevice;
    use cairn_chunkstore::{ChunkStore, FormatParams, WriteOp};

    let dev = UringDevice::open(path, Some(size_gib << 30))
        .map_err(|e| anyhow!("open {}: {e}", path.display()))?;
    if !dev.is_direct() {
        eprintln!(
            "chunkbench: warning: {} does not support O_DIRECT",
            path.display()
        );
    }
    let mut store = ChunkStore::format(
        &dev,
        &FormatParams {
            drive_uuid: rand::random(),
            node_id: [0; 16],
            cluster_id: [0; 16],
            drive_index: 0,
            segment_size: segment_mib << 20,
        },
    )
    .map_err(|e| anyhow!("format {}: {e} (block 0 must be zero)", path.display()))?;
    let pool = pool();
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let qd = cli.qd.max(1);
    let dur = Duration::from_secs_f64(cli.duration);
    let (mut seq_n, mut rand_n) = (0u64, 0u64);
    for w in wl {
        let mut st = Stat::default();
        let start = Instant::now();
        match w.as_str() {
            "seqwrite1m" | "randwrite4k" => {
                let (len, base) = if w == "seqwrite1m" {
                    (MIB, SEQ_BASE)
                } else {
                    (KIB4, RAND_BASE)
                };
                let mut n = 0u64;
                while start.elapsed() < dur
                    && !(len == MIB && n >= cli.seq_cap_mib)
                    && !(len == KIB4 && n >= cli.rand_cap)
                {
                    let payloads: Vec<Bytes> =
                        (0..qd).map(|_| payload(&pool, &mut rng, len)).collect();
                    let ops: Vec<WriteOp<'_>> = payloads
                        .iter()
                        .enumerate()
                        .map(|(k, p)| WriteOp::Put {
                            id: ChunkId::from_u128(base + (n + k as u64) as u128),
                            tenant: TENANT,
                            key_id: 0,
                            payload: p,
                            durable: true,
                        })
                        .collect();
                    let t0 = Instant::now();
                    let res = store.write_batch(&ops);
                    let lat = t0.elapsed().as_micros() as u32;
                    for r in res {
                        r.map_err(|e| anyhow!("{w}: {e}"))?;
                        st.lat_us.push(lat);
                    }
                    n += qd as u64;
                    st.ops += qd as u64;
                    st.bytes += (qd * len) as u64;
                }
                if len == MIB {
                    seq_n = n;
                } else {
                    rand_n = n;
                }
            }
            "seqread1m" | "randread4k" => {
                let (len, base, n) = if w == "seqread1m" {
                    (MIB, SEQ_BASE, seq_n)
                } else {
                    (KIB4, RAND_BASE, rand_n)
                };
                if n == 0 {
                    bail!("{w} needs its write phase first");
                }
                let mut i = 0u64;
                while start.elapsed() < dur {
                    let reqs: Vec<(ChunkId, u64)> = (0..qd as u64)
                        .map(|k| {
                            let idx = if len == MIB {
                                (i + k) % n
                            } else {
                                rng.random_range(0..n)
                            };
                            (ChunkId::from_u128(base + idx as u128), TENANT)
                        })
                        .collect();
                    let t0 = Instant::now();
                    let res = store.get_many(&reqs);
                    let lat = t0.elapsed().as_micros() as u32;
                    for r in res {
                        let b = r.map_err(|e| anyhow!("{w}: {e}"))?;
                        if b.len() != len {
                            bail!("{w}: got {} bytes", b.len());
                        }
                        st.lat_us.push(lat);
                    }
                    i += qd as u64;
                    st.ops += qd as u64;
                    st.bytes += (qd * len) as u64;
                }
            }
            _ => unreachable!(),
        }
        st.secs = start.elapsed().as_secs_f64();
        report("local", w, st);
    }
    store.close().map_err(|e| anyhow!("close: {e}"))?;
    Ok(())
}
