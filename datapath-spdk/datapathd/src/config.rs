//! Command-line configuration.

use crate::DatapathError;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// Storage backend of every drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// io_uring with O_DIRECT on a file or block device.
    Uring,
    /// Memory (tests; nothing survives a restart).
    Ram,
    /// Cairn's userspace NVMe driver over VFIO: each `--drive` is a PCI address
    /// of a controller bound to vfio-pci, `BDF` or `nvme:BDF/nsN` (namespace 1
    /// by default), e.g. `0000:00:04.0`; `emu:SIZE` is an in-process emulated
    /// controller (tests; nothing survives a restart).
    Nvme,
}

impl Backend {
    /// The name reports use (`DriveReport.backend`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Uring => "uring",
            Backend::Ram => "ram",
            Backend::Nvme => "nvme",
        }
    }
}

/// How reactors wait for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PollMode {
    /// Spin while busy, sleep on the mailbox after a short idle spin (~0% CPU idle).
    Adaptive,
    /// Never sleep (lowest latency; one core per reactor).
    Spin,
}

/// One `--drive PATH[:SIZE]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriveSpec {
    pub path: PathBuf,
    /// Size to create the file with when it does not exist.
    pub size: Option<u64>,
}

impl std::str::FromStr for DriveSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some((p, sz)) = s.rsplit_once(':') {
            if let Ok(size) = parse_size(sz) {
                if p.is_empty() {
                    return Err(format!("empty path in --drive {s}"));
                }
                return Ok(DriveSpec {
                    path: p.into(),
                    size: Some(size),
                });
            }
        }
        if s.is_empty() {
            return Err("empty --drive".into());
        }
        Ok(DriveSpec {
            path: s.into(),
            size: None,
        })
    }
}

impl DriveSpec {
    /// The drive as `cairn_nvme::DriveSpec` reads it (a PCI address has colons
    /// that the `PATH[:SIZE]` split leaves in the path; `emu:SIZE` comes back
    /// with its size in bytes).
    pub fn nvme_spec(&self) -> String {
        match self.size {
            Some(s) => format!("{}:{s}", self.path.display()),
            None => self.path.display().to_string(),
        }
    }
}

/// Parses `4096`, `64K`, `256M`, `4G`, `1T` (binary units; a trailing `B`/`iB` is accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        Some('T' | 't') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    n.checked_mul(mult)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("bad size {s:?}"))
}

/// A `--cores 0,1` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreList(pub Vec<usize>);

fn parse_cores(s: &str) -> Result<CoreList, String> {
    s.split(',')
        .map(|c| {
            c.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad core {c:?}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(CoreList)
}

/// datapathd's command line.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "datapathd",
    version,
    about = "Cairn data plane: chunk stores on poll-mode reactors"
)]
pub struct Config {
    /// Address of the chunk service (port 0 picks a free port; see --ready-file).
    #[arg(long, default_value = "127.0.0.1:7410")]
    pub listen: String,
    /// A drive, `PATH[:SIZE]` (repeat; the index is the order given). A missing
    /// file is created sparse with SIZE (e.g. 256M, 4G) and formatted. With
    /// `--backend nvme`: `BDF`, `nvme:BDF/nsN` (a controller bound to vfio-pci,
    /// e.g. `0000:00:04.0`) or `emu:SIZE`.
    #[arg(long = "drive", value_name = "PATH[:SIZE]")]
    pub drives: Vec<DriveSpec>,
    /// Backend of every drive: uring (default), nvme (userspace NVMe over VFIO),
    /// ram.
    #[arg(long, value_enum, default_value_t = Backend::Uring)]
    pub backend: Backend,
    /// Number of reactor threads (drives are dealt to them round-robin).
    #[arg(long, default_value_t = 1)]
    pub reactors: usize,
    /// Pin reactor i to the i-th core of this list, e.g. `0,1`.
    #[arg(long, value_parser = parse_cores)]
    pub cores: Option<CoreList>,
    /// Reactor polling: adaptive (sleep when idle) or spin.
    #[arg(long = "poll", value_enum, default_value_t = PollMode::Adaptive)]
    pub poll: PollMode,
    /// Segment size used when formatting (e.g. 32M).
    #[arg(long, default_value = "32M", value_parser = parse_size)]
    pub segment_size: u64,
    /// Node id written into new superblocks and required of existing ones that
    /// carry one (drives formatted before node ids were given carry none).
    #[arg(long, default_value = "00000000-0000-0000-0000-000000000000")]
    pub node_id: uuid::Uuid,
    /// Takes the node id from this file instead, creating it (a random id, 0600)
    /// on first start: what supervisors pass, so a node's drives stay bound to it
    /// and another node's drive put into it is refused, not collected as garbage.
    #[arg(long, conflicts_with = "node_id")]
    pub node_id_file: Option<PathBuf>,
    /// Cluster id written into new superblocks and required of existing ones.
    #[arg(long, default_value = "00000000-0000-0000-0000-000000000000")]
    pub cluster_id: uuid::Uuid,
    /// Once listening, write the bound address (`IP:PORT` and a newline) here, atomically.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// Format blank drives (default); `--no-format` refuses them instead.
    #[arg(long = "no-format", action = clap::ArgAction::SetFalse)]
    pub format: bool,
    /// Threads of the network runtime.
    #[arg(long, env = "CAIRN_NET_THREADS", default_value_t = 1)]
    pub net_threads: usize,
    /// Address where other nodes reach this chunk service, over mutual TLS with
    /// certificates from the cluster CA (needs --tls-dir). `--listen` then serves
    /// only this node's mgmtd and should be a loopback address.
    #[arg(long, requires = "tls_dir")]
    pub peer_listen: Option<String>,
    /// The node's TLS material (`ca.pem`, `node.pem`, `node.key`), written by mgmtd
    /// when the node creates or joins a cluster. Re-read every two seconds: until a
    /// certificate is there, peer connections are refused.
    #[arg(long)]
    pub tls_dir: Option<PathBuf>,
    /// The node-local chunk key (32 bytes, mode 0600), created if missing: every
    /// client of `--listen` must prove it holds it before it is served (see
    /// cairn-chunkproto's `auth`). Give mgmtd the same file (`--datapath-key`).
    #[arg(long, env = "CAIRN_CHUNK_KEY")]
    pub local_key: PathBuf,
    /// Connections served at once, on both listeners; more are closed at accept.
    /// At most a quarter of them (and at most 64) may be still in their key or TLS
    /// handshake, so clients without a credential cannot take every slot.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Seconds a connection may sit with nothing in flight and nothing sent
    /// before it is closed.
    #[arg(long, default_value_t = 300)]
    pub idle_timeout: u64,
    /// Seconds a client may take to finish sending a frame it has begun, and to
    /// take a reply frame once the service began writing it.
    #[arg(long, default_value_t = 30)]
    pub frame_timeout: u64,
    /// Seconds a client of `--listen` has to complete the key handshake.
    #[arg(long, default_value_t = 5)]
    pub handshake_timeout: u64,
    /// Bytes of frames and replies the service may hold across all connections
    /// (e.g. 512M): a frame is read only once its length is reserved here, and
    /// the chunks of a batch of gets only once their reply's is. At least two
    /// frames (128M).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub max_buffered: u64,
    /// The same, for one connection (at least a frame and a megabyte; at most
    /// `--max-buffered`).
    #[arg(long, default_value = "128M", value_parser = parse_size)]
    pub max_conn_buffered: u64,
}

impl Config {
    /// Parses a command line (for tests and embedding).
    pub fn parse_from_args<I, T>(args: I) -> Result<Self, DatapathError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        Config::try_parse_from(args).map_err(|e| DatapathError::Config(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_drives() {
        assert_eq!(parse_size("4G").unwrap(), 4 << 30);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("x").is_err() && parse_size("0").is_err());
        let d: DriveSpec = "/tmp/a:1G".parse().unwrap();
        assert_eq!(d.size, Some(1 << 30));
        let d: DriveSpec = "/tmp/a".parse().unwrap();
        assert_eq!(d.size, None);
        let c = Config::parse_from_args([
            "datapathd",
            "--local-key",
            "/k",
            "--drive",
            "/x:1G",
            "--drive",
            "/y",
            "--reactors",
            "2",
            "--cores",
            "0,1",
            "--poll",
            "spin",
        ])
        .unwrap();
        assert_eq!(c.drives.len(), 2);
        assert_eq!(c.cores, Some(CoreList(vec![0, 1])));
        assert!(c.format);
        assert_eq!(c.segment_size, 32 << 20);
        assert_eq!(
            (c.max_buffered, c.max_conn_buffered),
            (512 << 20, 128 << 20)
        );
        assert_eq!(
            (c.idle_timeout, c.frame_timeout, c.handshake_timeout),
            (300, 30, 5)
        );
        assert_eq!(c.max_connections, 256);
        let c = Config::parse_from_args([
            "datapathd",
            "--local-key",
            "/k",
            "--drive",
            "/x",
            "--no-format",
        ])
        .unwrap();
        assert!(!c.format);
        assert_eq!(c.backend, Backend::Uring, "uring is the default");
        let c = Config::parse_from_args([
            "datapathd",
            "--local-key",
            "/k",
            "--backend",
            "nvme",
            "--drive",
            "0000:00:04.0",
            "--drive",
            "nvme:0000:00:05.0/ns2",
            "--drive",
            "emu:64M",
        ])
        .unwrap();
        assert_eq!(c.backend, Backend::Nvme);
        let specs: Vec<String> = c.drives.iter().map(DriveSpec::nvme_spec).collect();
        assert_eq!(
            specs,
            vec!["0000:00:04.0", "nvme:0000:00:05.0/ns2", "emu:67108864"]
        );
    }
}
