//! The guest side of hwtests/nvme-vfio: drives real (QEMU-emulated) NVMe
//! controllers through VFIO and prints result lines the host script checks.
//!
//! ```text
//! nvme-selftest bind                       bind every NVMe function to vfio-pci
//! nvme-selftest verify BDF...              patterns + chunk store on each drive
//! nvme-selftest hotplug KEEP_BDF GONE_BDF  I/O on both while GONE is unplugged
//! nvme-selftest bench-nvme BDF [SECS]      4 KiB random reads, QD 1 and 128
//! nvme-selftest bench-uring DEV [SECS]     the same through io_uring O_DIRECT
//! ```
//! Every line the host reads starts with an upper-case tag (`PATTERN`, `CHUNKS`,
//! `HOTPLUG`, `BENCH`, `RESULT`). Exit status 0 only when everything verified.

use cairn_blockdev::{
    BlockDevice, BlockError, Completion, DeviceInfo, DmaBuf, QueuePair, UringDevice,
};
use cairn_chunkstore::{ChunkStore, FormatParams, WriteOp};
use cairn_nvme::{bench, Bdf, DriverConfig, NvmeController, NvmeNamespace, VfioDevice};
use cairn_types::ChunkId;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Res<T> = Result<T, String>;

/// FNV-1a 64: the host recomputes it over the backing file (no extra tools).
fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// A recognisable block stream: every 4 KiB starts with an ASCII marker.
fn pattern(tag: &str, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut x = fnv(tag.as_bytes()) ^ off;
    for (i, blk) in v.chunks_mut(4096).enumerate() {
        for b in blk.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let m = format!("CAIRN-PATTERN {tag} @{}\n", off + i as u64 * 4096);
        let n = m.len().min(blk.len());
        blk[..n].copy_from_slice(&m.as_bytes()[..n]);
    }
    v
}

fn open(bdf: &Bdf) -> Res<NvmeController> {
    let dev = VfioDevice::open(bdf, Path::new("/sys")).map_err(|e| e.to_string())?;
    NvmeController::new(
        Arc::new(dev),
        DriverConfig {
            io_timeout: Duration::from_secs(10),
            ..DriverConfig::default()
        },
    )
    .map_err(|e| e.to_string())
}

fn wait_one(q: &mut dyn QueuePair, deadline: Duration) -> Res<Completion> {
    let t = Instant::now();
    let mut out = Vec::new();
    loop {
        q.poll(&mut out).map_err(|e| e.to_string())?;
        if let Some(c) = out.pop() {
            return Ok(c);
        }
        if t.elapsed() > deadline {
            return Err(format!("HANG: no completion in {deadline:?}"));
        }
        q.wait(Duration::from_millis(10))
            .map_err(|e| e.to_string())?;
    }
}

fn io_write(q: &mut dyn QueuePair, off: u64, data: &[u8], fua: bool) -> Res<()> {
    let mut b = q.alloc_buf(data.len()).map_err(|e| e.to_string())?;
    b.as_mut_slice()[..data.len()].copy_from_slice(data);
    q.submit_write(0, off, b, fua).map_err(|e| e.to_string())?;
    wait_one(q, Duration::from_secs(30))?
        .result
        .map(|_| ())
        .map_err(|e| format!("write at {off}: {e}"))
}

fn io_read(q: &mut dyn QueuePair, off: u64, len: usize) -> Res<Vec<u8>> {
    let b = q.alloc_buf(len).map_err(|e| e.to_string())?;
    q.submit_read(0, off, b).map_err(|e| e.to_string())?;
    let c = wait_one(q, Duration::from_secs(30))?;
    c.result.map_err(|e| format!("read at {off}: {e}"))?;
    Ok(c.buf.ok_or("read without buffer")?.as_slice()[..len].to_vec())
}

/// The first `size` bytes of a device: the chunk store gets a window that leaves
/// the pattern area at the end of the namespace alone.
#[derive(Debug)]
struct Window<D: BlockDevice> {
    inner: D,
    size: u64,
}

impl<D: BlockDevice> BlockDevice for Window<D> {
    fn info(&self) -> DeviceInfo {
        let mut i = self.inner.info();
        i.num_blocks = self.size / i.block_size as u64;
        i
    }
    fn open_queue(&self) -> Result<Box<dyn QueuePair>, BlockError> {
        self.inner.open_queue()
    }
    fn check(&self) -> Result<(), BlockError> {
        self.inner.check()
    }
    fn alloc_buf(&self, len: usize) -> Result<DmaBuf, BlockError> {
        self.inner.alloc_buf(len)
    }
}

fn verify_patterns(bdf: &Bdf, ns: &NvmeNamespace) -> Res<()> {
    let size = ns.info().size();
    let tag = bdf.to_string();
    let base = size - (8 << 20);
    let mut q = ns.open_queue().map_err(|e| e.to_string())?;
    // 4 KiB (PRP1 only), 128 KiB (a PRP list), 1 MiB FUA (split at MDTS).
    let writes: [(u64, usize, bool); 3] = [
        (base, 4096, false),
        (base + (64 << 10), 128 << 10, false),
        (base + (1 << 20), 1 << 20, true),
    ];
    for &(off, len, fua) in &writes {
        io_write(q.as_mut(), off, &pattern(&tag, off, len), fua)?;
    }
    // Write Zeroes and Dataset Management (trim) on a region holding data.
    let z = base + (3 << 20);
    io_write(q.as_mut(), z, &pattern(&tag, z, 256 << 10), false)?;
    q.submit_write_zeroes(0, z, 64 << 10)
        .map_err(|e| e.to_string())?;
    wait_one(q.as_mut(), Duration::from_secs(30))?
        .result
        .map_err(|e| format!("write zeroes: {e}"))?;
    q.submit_flush(0).map_err(|e| e.to_string())?;
    wait_one(q.as_mut(), Duration::from_secs(30))?
        .result
        .map_err(|e| format!("flush: {e}"))?;
    for &(off, len, _) in &writes {
        let got = io_read(q.as_mut(), off, len)?;
        if got != pattern(&tag, off, len) {
            return Err(format!("pattern mismatch at {off}+{len}"));
        }
        println!(
            "PATTERN {bdf} offset={off} len={len} fnv={:016x}",
            fnv(&got)
        );
    }
    let got = io_read(q.as_mut(), z, 256 << 10)?;
    if got[..64 << 10].iter().any(|&b| b != 0)
        || got[64 << 10..] != pattern(&tag, z, 256 << 10)[64 << 10..]
    {
        return Err("write zeroes did not zero exactly its range".into());
    }
    println!(
        "PATTERN {bdf} offset={z} len={} fnv={:016x}",
        256 << 10,
        fnv(&got)
    );
    q.submit_trim(0, z + (128 << 10), 64 << 10)
        .map_err(|e| e.to_string())?;
    wait_one(q.as_mut(), Duration::from_secs(30))?
        .result
        .map_err(|e| format!("trim: {e}"))?;
    Ok(())
}

fn chunk_payload(n: u128) -> Vec<u8> {
    pattern(&format!("chunk-{n}"), 0, 4096 * (1 + (n as usize * 7) % 40))
        .into_iter()
        .take(1000 + (n as usize * 7919) % 150_000)
        .collect()
}

fn verify_chunk_store(bdf: &Bdf, ns: NvmeNamespace) -> Res<()> {
    let window = Window {
        size: ns.info().size() - (16 << 20),
        inner: ns,
    };
    let params = FormatParams {
        drive_uuid: [9; 16],
        node_id: [1; 16],
        cluster_id: [2; 16],
        drive_index: 0,
        segment_size: 4 << 20,
    };
    let n = 24u128;
    {
        let mut s = ChunkStore::format(&window, &params).map_err(|e| format!("format: {e}"))?;
        let payloads: Vec<Vec<u8>> = (0..n).map(chunk_payload).collect();
        let ops: Vec<WriteOp> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| WriteOp::Put {
                id: ChunkId::from_u128(i as u128),
                tenant: 5,
                key_id: 0,
                payload: p,
                durable: true,
            })
            .collect();
        for r in s.write_batch(&ops) {
            r.map_err(|e| format!("put: {e}"))?;
        }
        s.close().map_err(|e| e.to_string())?;
    }
    let bounced = window.inner.controller().bounced_buffers();
    drop(window);
    // Reopen through a fresh VFIO open and controller reset.
    let ctrl = open(bdf)?;
    let ns = ctrl.namespace(1).map_err(|e| e.to_string())?;
    let window = Window {
        size: ns.info().size() - (16 << 20),
        inner: ns,
    };
    let mut s = ChunkStore::open(&window).map_err(|e| format!("reopen: {e}"))?;
    for i in 0..n {
        let got = s
            .get(ChunkId::from_u128(i), 5)
            .map_err(|e| format!("chunk {i}: {e}"))?;
        if got[..] != chunk_payload(i)[..] {
            return Err(format!("chunk {i} differs after reopen"));
        }
    }
    s.close().map_err(|e| e.to_string())?;
    println!("CHUNKS {bdf} chunks={n} reopened=ok bounced_buffers={bounced}");
    Ok(())
}

fn cmd_verify(bdfs: &[Bdf]) -> Res<()> {
    for bdf in bdfs {
        let t = Instant::now();
        let ctrl = open(bdf)?;
        let id = ctrl.identify();
        println!(
            "CONTROLLER {bdf} model={:?} serial={:?} mdts_bytes={} io_queues={} namespaces={:?}",
            id.model,
            id.serial,
            ctrl.max_transfer(),
            ctrl.io_queues(),
            ctrl.namespaces()
                .iter()
                .map(|n| (n.nsid, n.lba_size, n.blocks))
                .collect::<Vec<_>>()
        );
        let ns = ctrl.namespace(1).map_err(|e| e.to_string())?;
        verify_patterns(bdf, &ns)?;
        drop(ctrl);
        verify_chunk_store(bdf, ns)?;
        println!("VERIFIED {bdf} in {:.2}s", t.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Keeps 8 slots of 64 KiB busy, each alternating a write of a fresh pattern and
/// a read that verifies it, until told to stop or an error; returns the error.
/// The region (48 MiB on) is between the chunk store's window and the patterns.
fn io_loop(q: &mut dyn QueuePair, stop: &AtomicBool, ops: &AtomicU64, tag: &str) -> Option<String> {
    const SLOTS: u64 = 8;
    const LEN: usize = 65536;
    const BASE: u64 = 48 << 20;
    let mut expect: Vec<Vec<u8>> = Vec::new();
    let mut out = Vec::new();
    let mut gen = 0u64;
    for slot in 0..SLOTS {
        let d = pattern(tag, gen, LEN);
        gen += 1;
        let mut b = match q.alloc_buf(LEN) {
            Ok(b) => b,
            Err(e) => return Some(format!("{e:?}")),
        };
        b.as_mut_slice().copy_from_slice(&d);
        if let Err(e) = q.submit_write(slot, BASE + slot * LEN as u64, b, false) {
            return Some(format!("{e:?}"));
        }
        expect.push(d);
    }
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = q.poll(&mut out) {
            return Some(format!("{e:?}"));
        }
        if out.is_empty() {
            if last.elapsed() > Duration::from_secs(30) {
                return Some("HANG: no completion in 30 s".into());
            }
            let _ = q.wait(Duration::from_millis(5));
            continue;
        }
        last = Instant::now();
        for c in out.drain(..) {
            if let Err(e) = c.result {
                return Some(format!("{e:?}"));
            }
            ops.fetch_add(1, Ordering::Relaxed);
            let slot = c.tag;
            let off = BASE + slot * LEN as u64;
            let Some(mut buf) = c.buf else {
                return Some("completion without buffer".into());
            };
            let r = if c.kind == cairn_blockdev::IoKind::Write {
                q.submit_read(slot, off, buf)
            } else {
                if buf.as_slice() != &expect[slot as usize][..] {
                    return Some(format!("data mismatch at {off}"));
                }
                let d = pattern(tag, gen, LEN);
                gen += 1;
                buf.as_mut_slice().copy_from_slice(&d);
                expect[slot as usize] = d;
                q.submit_write(slot, off, buf, false)
            };
            if let Err(e) = r {
                return Some(format!("{e:?}"));
            }
        }
    }
    None
}

fn cmd_hotplug(keep: Bdf, gone: Bdf) -> Res<()> {
    let ck = open(&keep)?;
    let cg = open(&gone)?;
    let nk = ck.namespace(1).map_err(|e| e.to_string())?;
    let ng = cg.namespace(1).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let (ok_ops, gone_ops) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let spawn = |ns: NvmeNamespace, ops: Arc<AtomicU64>, stop: Arc<AtomicBool>, tag: String| {
        std::thread::spawn(move || {
            let mut q = match ns.open_queue() {
                Ok(q) => q,
                Err(e) => return (Some(e.to_string()), None),
            };
            let err = io_loop(q.as_mut(), &stop, &ops, &tag);
            // After a failure, new I/O must fail at once, not hang.
            let again = err.as_ref().map(|_| {
                let t = Instant::now();
                let r = q
                    .alloc_buf(4096)
                    .and_then(|b| q.submit_read(0, 0, b))
                    .map(|_| "accepted".to_string())
                    .unwrap_or_else(|e| format!("{e:?}"));
                format!("{r} in {:?}", t.elapsed())
            });
            (err, again)
        })
    };
    let tk = spawn(nk, ok_ops.clone(), stop.clone(), "keep".into());
    let never = Arc::new(AtomicBool::new(false));
    let tg = spawn(ng.clone(), gone_ops.clone(), never, "gone".into());
    let t = Instant::now();
    while ok_ops.load(Ordering::Relaxed) < 200 || gone_ops.load(Ordering::Relaxed) < 200 {
        if t.elapsed() > Duration::from_secs(60) {
            return Err("I/O did not get going".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("HOTPLUG-READY {gone}");
    let t = Instant::now();
    // The removal takes the guest's pciehp 5 s of attention-button delay.
    while !tg.is_finished() {
        if t.elapsed() > Duration::from_secs(120) {
            return Err("the removed drive's I/O did not fail within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (gerr, gagain) = tg.join().map_err(|_| "gone thread panicked")?;
    let took = t.elapsed();
    let at_removal = ok_ops.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    let after = ok_ops.load(Ordering::Relaxed) - at_removal;
    stop.store(true, Ordering::Relaxed);
    let (kerr, _) = tk.join().map_err(|_| "keep thread panicked")?;
    let gerr = gerr.unwrap_or_default();
    let check = ng.check().err().map(|e| e.to_string()).unwrap_or_default();
    println!("HOTPLUG gone={gone} error={gerr:?} after_error={gagain:?} check={check:?} detected_in={took:?}");
    println!("HOTPLUG keep={keep} error={kerr:?} ops_after_removal={after}");
    let clean = gerr.starts_with("Failed(") && !gerr.contains("HANG") && !check.is_empty();
    let again_ok = gagain.is_some_and(|s| s.starts_with("Failed("));
    if !clean || !again_ok || kerr.is_some() || after == 0 {
        return Err("hot unplug was not handled cleanly".into());
    }
    Ok(())
}

fn print_bench(backend: &str, r: &bench::BenchResult) {
    println!(
        "BENCH backend={backend} qd={} iops={:.0} iops_per_core={:.0} cpu_ns_per_io={:.0} ios={} secs={:.2}",
        r.qd,
        r.iops(),
        r.iops_per_core(),
        r.ns_per_io(),
        r.ios,
        r.wall.as_secs_f64()
    );
}

fn cmd_bench(backend: &str, q: &mut dyn QueuePair, span: u64, secs: u64) -> Res<()> {
    for qd in [1usize, 128] {
        let r = bench::random_reads(q, span, 4096, qd, Duration::from_secs(secs))
            .map_err(|e| e.to_string())?;
        print_bench(backend, &r);
    }
    Ok(())
}

fn run(args: &[String]) -> Res<()> {
    let bdfs = |a: &[String]| -> Res<Vec<Bdf>> {
        a.iter()
            .map(|s| s.parse::<Bdf>().map_err(|e| e.to_string()))
            .collect()
    };
    match args.first().map(String::as_str) {
        Some("bind") => {
            let root = Path::new("/sys");
            for b in cairn_nvme::find_nvme_controllers(root).map_err(|e| e.to_string())? {
                cairn_nvme::bind_vfio(root, &b).map_err(|e| e.to_string())?;
                println!("BOUND {b}");
            }
            Ok(())
        }
        Some("verify") => cmd_verify(&bdfs(&args[1..])?),
        Some("hotplug") => match bdfs(&args[1..])?.as_slice() {
            [k, g] => cmd_hotplug(*k, *g),
            _ => Err("hotplug KEEP_BDF GONE_BDF".into()),
        },
        Some("bench-nvme") => {
            let b: Bdf = args.get(1).ok_or("bench-nvme BDF")?.parse().map_err(|e: cairn_nvme::NvmeError| e.to_string())?;
            let secs = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
            let ctrl = open(&b)?;
            let ns = ctrl.namespace(1).map_err(|e| e.to_string())?;
            let mut q = ns.open_queue().map_err(|e| e.to_string())?;
            let span = ns.info().size().min(1 << 30);
            cmd_bench("nvme", q.as_mut(), span, secs)
        }
        Some("bench-uring") => {
            let p = args.get(1).ok_or("bench-uring DEVICE")?;
            let secs = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
            let dev = UringDevice::open(Path::new(p), None).map_err(|e| e.to_string())?;
            let mut q = dev.open_queue().map_err(|e| e.to_string())?;
            let span = dev.info().size().min(1 << 30);
            cmd_bench("uring", q.as_mut(), span, secs)
        }
        _ => Err("usage: nvme-selftest bind | verify BDF... | hotplug KEEP GONE | bench-nvme BDF [SECS] | bench-uring DEV [SECS]".into()),
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t = Instant::now();
    match run(&args) {
        Ok(()) => {
            println!(
                "RESULT PASS {} in {:.2}s",
                args.first().map(String::as_str).unwrap_or(""),
                t.elapsed().as_secs_f64()
            );
        }
        Err(e) => {
            println!(
                "RESULT FAIL {}: {e}",
                args.first().map(String::as_str).unwrap_or("")
            );
            std::process::exit(1);
        }
    }
}
