//! mgmtd: the management daemon of a Cairn node. Argument parsing and wiring only.

use cairn_credentials::RootCredentials;
use cairn_mgmtd::Config;
use cairn_objects::StoreConfig;
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The management daemon: S3 front end, admin API, object placement and repair.
#[derive(Parser, Debug)]
#[command(name = "mgmtd", version)]
struct Args {
    /// State directory (metadata, credentials, admin token).
    #[arg(long)]
    data: PathBuf,
    /// S3 listen address.
    #[arg(long, default_value = "127.0.0.1:9000")]
    s3: SocketAddr,
    /// A domain for virtual-hosted-style S3 (`bucket.DOMAIN`); repeatable. Path
    /// style works whatever is set.
    #[arg(long = "s3-domain", env = "CAIRN_S3_DOMAINS", value_delimiter = ',')]
    s3_domains: Vec<String>,
    /// Admin API listen address.
    #[arg(long, default_value = "127.0.0.1:9001")]
    admin: SocketAddr,
    /// RESP (Redis protocol) listen address; RESP is off without it.
    #[arg(long, env = "CAIRN_RESP")]
    resp: Option<SocketAddr>,
    /// NFS (v3) listen address, MOUNT and NFS on this one port; clients mount
    /// `/TENANT/BUCKET` of the buckets exported (`nodectl export`). NFS is off
    /// without it.
    #[arg(long, env = "CAIRN_NFS")]
    nfs: Option<SocketAddr>,
    /// The admin API over TLS too, here: the node's certificate, and clients
    /// authenticated by an admin certificate (`nodectl cert issue`) or a token.
    #[arg(long, env = "CAIRN_ADMIN_TLS")]
    admin_tls: Option<SocketAddr>,
    /// SSH admin console listen address (key-only; off without it).
    #[arg(long, env = "CAIRN_SSH")]
    ssh: Option<SocketAddr>,
    /// More authorized-keys files for the SSH console (beside the state
    /// directory's `ssh/authorized_keys`); lines may start `role=reader`.
    #[arg(
        long = "ssh-authorized-keys",
        env = "CAIRN_SSH_AUTHORIZED_KEYS",
        value_delimiter = ','
    )]
    ssh_authorized_keys: Vec<PathBuf>,
    /// Lets the SSH console's admin keys run shell command lines (`sh COMMAND`),
    /// each logged as an audit warning. Off by default: the console is nodectl's
    /// commands only.
    #[arg(long, env = "CAIRN_SSH_BREAK_GLASS")]
    ssh_break_glass: bool,
    /// The node's own BMC device: when it exists, mgmtd arms the BMC's watchdog
    /// (a hung mgmtd gets the node reset) and writes drive failures to its event
    /// log. Off unless given (the image gives /dev/ipmi0): a development
    /// machine's own BMC must not reset it when a test kills mgmtd.
    #[arg(long, env = "CAIRN_BMC_DEVICE")]
    bmc_device: Option<PathBuf>,
    /// The BMC watchdog's timeout in seconds (0: leave the watchdog alone).
    #[arg(long, env = "CAIRN_BMC_WATCHDOG", default_value_t = 60)]
    bmc_watchdog: u64,
    /// How often, in seconds, the node reads its BMC's sensors (in-band with
    /// --bmc-device, else through its BMC set with `nodectl node bmc set`); a
    /// sensor past a threshold is an alert in status, the page and /metrics.
    #[arg(long, env = "CAIRN_SENSOR_EVERY", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    sensor_every: u64,
    /// RESP connections served at once; one more is answered "-ERR max number of
    /// clients reached" and closed (Redis's maxclients).
    #[arg(long, env = "CAIRN_RESP_MAX_CLIENTS", default_value_t = 10_000)]
    resp_max_clients: usize,
    /// Bytes of RESP values being received at once, all connections together;
    /// beyond it clients wait (their sockets are not read). Default: a
    /// sixteenth of the machine's memory, between 64M and 4G.
    #[arg(long, env = "CAIRN_RESP_INTAKE", value_parser = size)]
    resp_intake: Option<u64>,
    /// Bytes of the RAM tier: hot values (RESP's, and S3 objects read through a
    /// KV front end) served from memory, least recently used out first (0: off).
    /// Default: a quarter of the machine's memory.
    #[arg(long, env = "CAIRN_KV_RAM", value_parser = size)]
    kv_ram: Option<u64>,
    /// The node's datapathd chunk service.
    #[arg(long)]
    datapath: String,
    /// The node-local chunk key file, the one datapathd was given (`--local-key`);
    /// created if missing.
    #[arg(long, env = "CAIRN_CHUNK_KEY")]
    datapath_key: PathBuf,
    /// Number of drives datapathd serves (indices 0..N).
    #[arg(long)]
    drives: u16,
    /// Erasure code for large objects, as K+M (default: chosen from the drive count).
    #[arg(long, value_parser = parse_ec)]
    ec: Option<(u8, u8)>,
    /// Copies of a small object (default: min(3, drives)).
    #[arg(long)]
    replicas: Option<u8>,
    /// Write the bound addresses here as JSON once serving.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Run as a cluster member, with the internal API (Raft, membership) here.
    /// Without it the node is a single-node appliance.
    #[arg(long)]
    internal: Option<SocketAddr>,
    /// The chunk service as peers reach it (default: --datapath).
    #[arg(long)]
    chunk_advertise: Option<String>,
    /// Failure domain (rack, room...); default: the node itself.
    #[arg(long)]
    domain: Option<String>,
    /// Seconds of silence after which a node is marked down.
    #[arg(long, default_value_t = 5)]
    down_after: u64,
    /// Seconds a down node's fragments wait before they are rebuilt elsewhere.
    #[arg(long, default_value_t = 60)]
    repair_grace: u64,
    /// Seconds after which a multipart upload neither completed nor aborted is
    /// aborted and its parts freed (0: never).
    #[arg(long, env = "CAIRN_ABORT_UPLOADS_AFTER", default_value_t = 24 * 3600)]
    abort_uploads_after: u64,
    /// How often, in seconds, the lifecycle worker carries out the buckets'
    /// lifecycle rules.
    #[arg(long, env = "CAIRN_LIFECYCLE_EVERY", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    lifecycle_every: u64,
    /// The length, in seconds, of a lifecycle rule's day: 86400, except to test
    /// rules in seconds (a rule's "1 day" is then this long).
    #[arg(long, env = "CAIRN_LIFECYCLE_DAY", default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    lifecycle_day: u64,
    /// Store the root key's new objects unencrypted (tenants choose at creation;
    /// by default everything is encrypted at rest).
    #[arg(long, env = "CAIRN_ROOT_PLAINTEXT")]
    root_plaintext: bool,
    /// Units of large data work (a stripe written or read) run at once while
    /// more than one tenant has work; each tenant is entitled to its weighted
    /// share of them, and small work (a small object's copies, a short read)
    /// shares a pool 8 times larger (0: no fair sharing; a tenant alone is
    /// never held).
    #[arg(long, env = "CAIRN_FAIR_SLOTS", default_value_t = 1)]
    fair_slots: usize,
    /// The scrubber's ceiling, in MiB read per second (a quarter of it while
    /// clients are active).
    #[arg(long, env = "CAIRN_SCRUB_RATE_MIB", default_value_t = 64)]
    scrub_rate_mib: u64,
    /// Seconds from the end of one scrub pass to the start of the next (0: only
    /// when started with `nodectl scrub start` or by damage found at start).
    #[arg(long, env = "CAIRN_SCRUB_EVERY", default_value_t = 7 * 24 * 3600)]
    scrub_every: u64,
    /// Seconds an overwritten or deleted object's chunks are kept for reads that
    /// began before; reads this node is still streaming are waited for (up to an
    /// hour) beyond it.
    #[arg(long, env = "CAIRN_FREE_GRACE", default_value_t = 30)]
    free_grace: u64,
    /// Seconds between repair passes (fragments lost, or never placed because a
    /// drive was full or failed when their object was written).
    #[arg(long, env = "CAIRN_REPAIR_EVERY", default_value_t = 5)]
    repair_every: u64,
    /// Seconds between collector rounds, which delete chunks no object references;
    /// also the least time a write has between its first chunk and its commit, and
    /// garbage goes two to three of these after it was made (0: rounds only with
    /// `nodectl gc`).
    #[arg(long, env = "CAIRN_GC_EVERY", default_value_t = 3600)]
    gc_every: u64,
    /// Chunks the collector deletes per second at most.
    #[arg(long, env = "CAIRN_GC_RATE", default_value_t = 2000)]
    gc_rate: u32,
}

fn size(s: &str) -> Result<u64, String> {
    cairn_sysutil::memory::parse_size(s).ok_or_else(|| format!("not a size: {s:?} (e.g. 512M, 4G)"))
}

fn parse_ec(s: &str) -> Result<(u8, u8), String> {
    let (k, m) = s
        .split_once('+')
        .ok_or_else(|| format!("{s:?} is not K+M"))?;
    let k = k.trim().parse().map_err(|_| format!("bad K in {s:?}"))?;
    let m = m.trim().parse().map_err(|_| format!("bad M in {s:?}"))?;
    Ok((k, m))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // s3s logs every error answer at ERROR, a client's NoSuchKey included, every
    // 5xx again (501 refusals too), and a malformed XML body whole; the S3 front
    // end logs them itself, once, with the request id, at their level, and
    // without the client's bytes.
    cairn_sysutil::logging::init("info,s3s::ops=off,s3s::service=off,s3s::http=off");
    let args = Args::parse();
    let mut store = StoreConfig::for_drives(args.drives);
    if let Some(ec) = args.ec {
        store.ec = ec;
    }
    if let Some(r) = args.replicas {
        store.replicas = r;
    }
    store.abandoned_upload_age = (args.abort_uploads_after > 0)
        .then(|| std::time::Duration::from_secs(args.abort_uploads_after));
    store.lifecycle_every = std::time::Duration::from_secs(args.lifecycle_every);
    store.lifecycle_day = std::time::Duration::from_secs(args.lifecycle_day);
    if args.lifecycle_day != 86_400 {
        tracing::warn!(
            "a lifecycle day lasts {} s (--lifecycle-day): rules expire objects that much sooner",
            args.lifecycle_day
        );
    }
    store.free_grace = std::time::Duration::from_secs(args.free_grace);
    store.seal_root = !args.root_plaintext;
    store.fair_slots = args.fair_slots;
    let memory = cairn_sysutil::memory::total().unwrap_or(4 << 30);
    store.ram_bytes = args.kv_ram.unwrap_or(memory / 4);
    store.scrub = cairn_objects::ScrubConfig {
        rate: args.scrub_rate_mib.max(1) << 20,
        every: (args.scrub_every > 0).then(|| std::time::Duration::from_secs(args.scrub_every)),
    };
    store.gc = cairn_objects::GcConfig {
        every: (args.gc_every > 0).then(|| std::time::Duration::from_secs(args.gc_every)),
        rate: args.gc_rate.max(1),
    };
    let root = match RootCredentials::resolve(&args.data, false) {
        Ok((c, _)) => c,
        Err(e) => {
            eprintln!("mgmtd: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let cfg = Config {
        data: args.data,
        s3: args.s3,
        s3_domains: args.s3_domains,
        admin: args.admin,
        resp: args.resp,
        nfs: args.nfs,
        ssh: args.ssh,
        ssh_authorized_keys: args.ssh_authorized_keys,
        ssh_break_glass: args.ssh_break_glass,
        admin_tls: args.admin_tls,
        bmc_device: args.bmc_device,
        bmc_watchdog: std::time::Duration::from_secs(args.bmc_watchdog),
        sensor_every: std::time::Duration::from_secs(args.sensor_every),
        resp_max_clients: args.resp_max_clients.max(1),
        resp_intake: args
            .resp_intake
            .unwrap_or((memory / 16).clamp(64 << 20, 4 << 30)),
        datapath: args.datapath.clone(),
        datapath_key: args.datapath_key,
        store,
        repair_every: std::time::Duration::from_secs(args.repair_every.max(1)),
        ready_file: args.ready_file,
        cluster: args.internal.map(|internal| cairn_mgmtd::ClusterOpts {
            internal,
            chunk_advertise: args
                .chunk_advertise
                .unwrap_or_else(|| args.datapath.clone()),
            domain: args.domain,
            down_after: std::time::Duration::from_secs(args.down_after.max(1)),
            repair_grace: std::time::Duration::from_secs(args.repair_grace),
            repair_every: std::time::Duration::from_secs(args.repair_every.max(1)),
        }),
    };
    match cairn_mgmtd::run(cfg, root).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mgmtd: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
