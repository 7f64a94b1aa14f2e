//! kvbench: a RESP (Redis protocol) load client for the KV-cache tier benchmark.
//!
//! It does what LMCache's `resp://` connector does with a prefill's chunks: `--conns`
//! blocking workers, each with its own TCP connection (AUTH first), one key per
//! command, and the keys handed out from one queue (an atomic counter) so a slow
//! connection takes fewer of them.
//!
//! * `set --addr HOST:PORT [--user U] --pass P`: `SET key value` for `--keys` keys of
//!   `--size` bytes; every reply must be exactly `+OK\r\n`.
//! * `get ...` (same arguments): `GET` of every key; each reply `$<len>\r\n<payload>\r\n`
//!   is read with `read_exact` into one preallocated buffer per connection (the
//!   payload is never parsed byte by byte), its length checked and its content:
//!   the key's 64-byte header and 16 windows of the body (`--verify sample`, the
//!   default), or every byte (`--verify full`). A miss (`$-1`), an error reply or a
//!   wrong byte is an error exit.
//! * `tcp [--op get|set]`: the loopback ceiling. An in-process server on 127.0.0.1
//!   answers each GET with the value from memory (written exactly as `set` writes
//!   it), or reads a SET's value into a reused buffer and answers `+OK`; the client
//!   loop is the one above. So the figure is "this client over loopback with nothing
//!   behind it".
//!
//! Values are distinct per key without holding `keys x size` bytes: one random pool
//! (seeded from `--prefix`, so a later `get` process knows what to expect) of
//! `size` plus 1 MiB bytes; key i's value is a 64-byte header naming the prefix, i
//! and the size, then `size - 64` pool bytes starting at offset `i * 4097 mod 1 MiB`
//! (a shift that is no multiple of any block size, so no two values share aligned
//! blocks).
//!
//! Connections are opened and authenticated before the clock starts. One line on
//! stdout per run:
//! `RESULT kv <mode> <label> gbps=<GB/s, 10^9> secs=<s> n=<ops> p50ms=<ms> p99ms=<ms>`

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use rand::{RngCore, SeedableRng};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const HEADER: usize = 64;
const SHIFT: usize = 1 << 20;
const SAMPLES: usize = 16;
const WINDOW: usize = 256;

#[derive(Parser, Debug)]
#[command(
    name = "kvbench",
    about = "RESP load client for the KV-cache tier benchmark (LMCache-shaped SET/GET of large values)"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// SET every key (one connection per worker, AUTH first).
    Set(Remote),
    /// GET every key and check what comes back.
    Get(Remote),
    /// The loopback TCP ceiling: the same client against an in-process server.
    Tcp(TcpArgs),
}

#[derive(Args, Debug, Clone)]
struct Load {
    /// Number of keys (values).
    #[arg(long, default_value_t = 128)]
    keys: usize,
    /// Bytes per value (suffixes K/KiB, M/MiB, G/GiB are powers of 1024).
    #[arg(long, default_value = "32MiB", value_parser = parse_size)]
    size: usize,
    /// Connections, one worker thread each.
    #[arg(long, default_value_t = 8)]
    conns: usize,
    /// Key prefix: keys are PREFIX:000000, PREFIX:000001, ...; also seeds the values.
    #[arg(long, default_value = "kvbench")]
    prefix: String,
    /// Label printed in the RESULT line.
    #[arg(long, default_value = "kv")]
    label: String,
    /// How much of each GET reply is compared with the expected value.
    #[arg(long, value_enum, default_value_t = Verify::Sample)]
    verify: Verify,
}

#[derive(Args, Debug, Clone)]
struct Remote {
    /// Server address, HOST:PORT.
    #[arg(long)]
    addr: String,
    /// AUTH user (Cairn: an access key); without it, `AUTH pass`.
    #[arg(long, env = "KVBENCH_USER")]
    user: Option<String>,
    /// AUTH password (Cairn: the secret key); without it, no AUTH.
    #[arg(long, env = "KVBENCH_PASS", hide_env_values = true)]
    pass: Option<String>,
    #[command(flatten)]
    load: Load,
}

#[derive(Args, Debug, Clone)]
struct TcpArgs {
    /// Which request the in-process server answers: GET (sends the value) or SET
    /// (takes it).
    #[arg(long, value_enum, default_value_t = Op::Get)]
    op: Op,
    #[command(flatten)]
    load: Load,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    /// Length only.
    None,
    /// The header and 16 windows of 256 bytes spread over the body.
    Sample,
    /// Every byte.
    Full,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get,
    Set,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        u => return Err(format!("bad size unit {u:?} in {s:?}")),
    };
    n.checked_mul(mult)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("bad size {s:?}"))
}

/// The values of one run: key i's value is its header then a slice of the pool.
#[derive(Debug)]
struct Values {
    prefix: String,
    size: usize,
    pool: Vec<u8>,
}

impl Values {
    fn new(prefix: &str, size: usize) -> Values {
        // FNV-1a of the prefix: the same prefix gives the same pool in every process.
        let seed = prefix.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let mut pool = vec![0u8; size.saturating_sub(HEADER) + SHIFT];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut pool);
        Values {
            prefix: prefix.to_string(),
            size,
            pool,
        }
    }

    fn key(&self, i: usize) -> String {
        format!("{}:{i:06}", self.prefix)
    }

    fn header(&self, i: usize) -> Vec<u8> {
        let mut h =
            format!("kvbench key={i:08} size={:012} {}", self.size, self.prefix).into_bytes();
        h.resize(HEADER, b'.');
        h.truncate(self.size.min(HEADER));
        h
    }

    fn body(&self, i: usize) -> &[u8] {
        let off = (i * 4097) % SHIFT;
        &self.pool[off..off + self.size.saturating_sub(HEADER)]
    }

    /// Writes `$<size>\r\n<value>\r\n` (prefixed by `lead`) in three writes: the
    /// header with everything before it, the body straight from the pool, the CRLF.
    fn write_bulk(&self, w: &mut TcpStream, lead: &[u8], i: usize) -> std::io::Result<()> {
        let mut head = Vec::with_capacity(lead.len() + 32 + HEADER);
        head.extend_from_slice(lead);
        head.extend_from_slice(format!("${}\r\n", self.size).as_bytes());
        head.extend_from_slice(&self.header(i));
        w.write_all(&head)?;
        w.write_all(self.body(i))?;
        w.write_all(b"\r\n")
    }

    fn check(&self, i: usize, got: &[u8], verify: Verify) -> Result<()> {
        if got.len() != self.size {
            bail!(
                "key {}: {} bytes, expected {}",
                self.key(i),
                got.len(),
                self.size
            );
        }
        let h = self.header(i);
        let (gh, gb) = got.split_at(h.len());
        let body = self.body(i);
        let ok = match verify {
            Verify::None => true,
            Verify::Full => gh == h.as_slice() && gb == body,
            Verify::Sample => {
                gh == h.as_slice()
                    && (0..=SAMPLES).all(|s| {
                        // 16 windows spread over the body, and its last bytes.
                        let at = (body.len().saturating_sub(WINDOW)) * s / SAMPLES;
                        let end = (at + WINDOW).min(body.len());
                        gb[at..end] == body[at..end]
                    })
            }
        };
        if !ok {
            bail!("key {}: value differs from what was SET", self.key(i));
        }
        Ok(())
    }
}

/// One connection: a buffered reader and the stream to write requests to.
struct Conn {
    rd: BufReader<TcpStream>,
    wr: TcpStream,
    line: Vec<u8>,
}

impl Conn {
    fn open(addr: &str) -> Result<Conn> {
        let s = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
        s.set_nodelay(true)?;
        let wr = s.try_clone()?;
        Ok(Conn {
            rd: BufReader::with_capacity(64 << 10, s),
            wr,
            line: Vec::with_capacity(128),
        })
    }

    fn read_line(&mut self) -> Result<&[u8]> {
        self.line.clear();
        let n = self.rd.read_until(b'\n', &mut self.line)?;
        if n == 0 {
            bail!("connection closed by the server");
        }
        if !self.line.ends_with(b"\r\n") {
            bail!(
                "reply line without CRLF: {:?}",
                String::from_utf8_lossy(&self.line)
            );
        }
        Ok(&self.line[..self.line.len() - 2])
    }

    fn auth(&mut self, user: Option<&str>, pass: &str) -> Result<()> {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(u) = user {
            args.push(u.as_bytes());
        }
        args.push(pass.as_bytes());
        self.wr.write_all(&command(&args))?;
        let l = self.read_line()?;
        if l != b"+OK" {
            bail!("AUTH answered {:?}", String::from_utf8_lossy(l));
        }
        Ok(())
    }

    fn set(&mut self, v: &Values, i: usize) -> Result<()> {
        let key = v.key(i);
        let lead = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n", key.len());
        v.write_bulk(&mut self.wr, lead.as_bytes(), i)?;
        let l = self.read_line()?;
        if l != b"+OK" {
            bail!("SET {key} answered {:?}", String::from_utf8_lossy(l));
        }
        Ok(())
    }

    /// GET key i into `buf` (at least `v.size` bytes) and check it.
    fn get(&mut self, v: &Values, i: usize, buf: &mut [u8], verify: Verify) -> Result<()> {
        let key = v.key(i);
        self.wr.write_all(&command(&[b"GET", key.as_bytes()]))?;
        let l = self.read_line()?;
        let len = match l {
            b"$-1" => bail!("GET {key}: miss ($-1)"),
            [b'$', n @ ..] => std::str::from_utf8(n)
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    anyhow!(
                        "GET {key}: bad length line {:?}",
                        String::from_utf8_lossy(l)
                    )
                })?,
            _ => bail!("GET {key} answered {:?}", String::from_utf8_lossy(l)),
        };
        if len != v.size {
            bail!("GET {key}: {len} bytes, expected {}", v.size);
        }
        // Large reads bypass the BufReader's buffer: straight from the socket.
        self.rd.read_exact(&mut buf[..len])?;
        let mut crlf = [0u8; 2];
        self.rd.read_exact(&mut crlf)?;
        if &crlf != b"\r\n" {
            bail!("GET {key}: value not followed by CRLF");
        }
        v.check(i, &buf[..len], verify)
    }
}

/// A RESP array of bulk strings.
fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut c = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        c.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        c.extend_from_slice(a);
        c.extend_from_slice(b"\r\n");
    }
    c
}

struct Run {
    secs: f64,
    lat: Vec<Duration>,
}

/// `load.conns` workers over `addr`: connect (and AUTH) before the clock starts,
/// then take keys from one counter until none are left.
fn drive(addr: &str, auth: Option<(Option<String>, String)>, load: &Load, op: Op) -> Result<Run> {
    if load.conns == 0 || load.keys == 0 {
        bail!("--conns and --keys must be at least 1");
    }
    let values = Arc::new(Values::new(&load.prefix, load.size));
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(load.conns + 1));
    let mut workers = Vec::new();
    for _ in 0..load.conns {
        let (values, next, failed, start) =
            (values.clone(), next.clone(), failed.clone(), start.clone());
        let (addr, auth, load) = (addr.to_string(), auth.clone(), load.clone());
        workers.push(std::thread::spawn(move || -> Result<Vec<Duration>> {
            let setup = (|| -> Result<(Conn, Vec<u8>)> {
                let mut c = Conn::open(&addr)?;
                if let Some((user, pass)) = &auth {
                    c.auth(user.as_deref(), pass)?;
                }
                // Touched now, so page faults are not timed.
                let buf = if op == Op::Get {
                    vec![1u8; load.size]
                } else {
                    Vec::new()
                };
                Ok((c, buf))
            })();
            start.wait();
            let (mut c, mut buf) = setup?;
            let mut lat = Vec::new();
            while !failed.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= load.keys {
                    break;
                }
                let t = Instant::now();
                let r = match op {
                    Op::Set => c.set(&values, i),
                    Op::Get => c.get(&values, i, &mut buf, load.verify),
                };
                if let Err(e) = r {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
                lat.push(t.elapsed());
            }
            Ok(lat)
        }));
    }
    start.wait();
    let t0 = Instant::now();
    let mut lat = Vec::new();
    let mut err = None;
    for w in workers {
        match w.join().map_err(|_| anyhow!("worker panicked"))? {
            Ok(l) => lat.extend(l),
            Err(e) => err = err.or(Some(e)),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    if let Some(e) = err {
        return Err(e);
    }
    Ok(Run { secs, lat })
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].as_secs_f64() * 1e3
}

fn report(mode: &str, load: &Load, mut r: Run) {
    r.lat.sort();
    let n = r.lat.len();
    let gbps = (n * load.size) as f64 / r.secs / 1e9;
    println!(
        "RESULT kv {mode} {} gbps={gbps:.3} secs={:.3} n={n} p50ms={:.1} p99ms={:.1}",
        load.label,
        r.secs,
        pct(&r.lat, 0.50),
        pct(&r.lat, 0.99)
    );
}

/// The in-process loopback server of `tcp` mode: GET answered from memory, SET's
/// value read into a reused buffer and dropped. Other commands get `+OK`.
fn serve_tcp(values: Arc<Values>) -> Result<String> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?.to_string();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let values = values.clone();
            std::thread::spawn(move || {
                let _ = serve_conn(s, &values);
            });
        }
    });
    Ok(addr)
}

fn serve_conn(s: TcpStream, v: &Values) -> Result<()> {
    s.set_nodelay(true)?;
    let mut wr = s.try_clone()?;
    let mut rd = BufReader::with_capacity(64 << 10, s);
    let mut scratch = vec![0u8; v.size + 2];
    let mut line = Vec::new();
    let mut read_line = |rd: &mut BufReader<TcpStream>| -> Result<Option<usize>> {
        line.clear();
        if rd.read_until(b'\n', &mut line)? == 0 {
            return Ok(None);
        }
        let t = line.strip_suffix(b"\r\n").unwrap_or(&line);
        let n = std::str::from_utf8(t.get(1..).unwrap_or_default())
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| anyhow!("bad request line"))?;
        Ok(Some(n))
    };
    loop {
        let Some(argc) = read_line(&mut rd)? else {
            return Ok(());
        };
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(argc);
        for a in 0..argc {
            let len = read_line(&mut rd)?.ok_or_else(|| anyhow!("cut off"))?;
            if a == 2 {
                // A SET's value: into the reused buffer, not kept.
                rd.read_exact(&mut scratch[..len + 2])?;
                args.push(Vec::new());
            } else {
                let mut b = vec![0u8; len + 2];
                rd.read_exact(&mut b)?;
                b.truncate(len);
                args.push(b);
            }
        }
        match args.first().map(|a| a.to_ascii_uppercase()).as_deref() {
            Some(b"GET") => {
                let key = String::from_utf8_lossy(&args[1]);
                let i = key
                    .rsplit(':')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| anyhow!("bad key"))?;
                v.write_bulk(&mut wr, b"", i)?;
            }
            _ => wr.write_all(b"+OK\r\n")?,
        }
    }
}

fn main() {
    // One line, not a backtrace: a wrong reply is the finding, not a crash.
    if let Err(e) = run(Cli::parse()) {
        eprintln!("kvbench: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.mode {
        Mode::Set(r) => {
            let auth = r.pass.clone().map(|p| (r.user.clone(), p));
            let run = drive(&r.addr, auth, &r.load, Op::Set)?;
            report("set", &r.load, run);
        }
        Mode::Get(r) => {
            let auth = r.pass.clone().map(|p| (r.user.clone(), p));
            let run = drive(&r.addr, auth, &r.load, Op::Get)?;
            report("get", &r.load, run);
        }
        Mode::Tcp(t) => {
            let addr = serve_tcp(Arc::new(Values::new(&t.load.prefix, t.load.size)))?;
            let run = drive(&addr, None, &t.load, t.op)?;
            report(
                if t.op == Op::Get { "tcp" } else { "tcp-set" },
                &t.load,
                run,
            );
        }
    }
    // The in-process server's threads are left running: flush before returning.
    std::io::stdout().flush()?;
    Ok(())
}
