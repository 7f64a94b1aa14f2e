//! In-process benchmark of the NVMe driver against the emulated controller:
//! 4 KiB random reads at queue depth 1 and 128, on one thread (so IOPS are per
//! core), beside SPDK's published ~10 M IOPS per core.
//!
//! ```text
//! cargo run --release -p cairn-nvme --example nvmebench [-- SECONDS]
//! ```
//!
//! The emulator runs inside the doorbell writes on the same thread, so the first
//! figure is driver + device. A second run wraps the device in a timer that adds
//! up the time spent inside the emulator's register accesses; that share of the
//! run's wall time is the emulator's, the rest the driver's (the timer's own clock
//! reads, ~20 ns per register access, land partly on each side).

use cairn_blockdev::{BlockDevice, DmaDomain};
use cairn_nvme::bench::{random_reads, BenchResult};
use cairn_nvme::hw::DmaRegion;
use cairn_nvme::{
    DeviceAccess, DriverConfig, EmuConfig, EmuNamespace, EmulatedController, NvmeController,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// SPDK's published figure: about 10 million 4 KiB IOPS on one core.
const SPDK_IOPS_PER_CORE: f64 = 10e6;

/// A device that adds up the time spent in the emulator's register accesses.
#[derive(Debug)]
struct Timed {
    inner: Arc<EmulatedController>,
    nanos: AtomicU64,
}

impl Timed {
    fn time<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
}

impl DeviceAccess for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn bar0_len(&self) -> usize {
        self.inner.bar0_len()
    }
    fn read32(&self, off: usize) -> u32 {
        self.time(|| self.inner.read32(off))
    }
    fn write32(&self, off: usize, val: u32) {
        self.time(|| self.inner.write32(off, val))
    }
    fn dma_domain(&self) -> DmaDomain {
        self.inner.dma_domain()
    }
    fn alloc_dma(&self, len: usize) -> cairn_nvme::Result<DmaRegion> {
        self.inner.alloc_dma(len)
    }
}

fn emulator() -> Arc<EmulatedController> {
    Arc::new(EmulatedController::new(EmuConfig {
        namespaces: vec![EmuNamespace::bytes(12, 256 << 20)],
        ..EmuConfig::default()
    }))
}

fn run(dev: Arc<dyn DeviceAccess>, qd: usize, secs: Duration) -> BenchResult {
    let ctrl = NvmeController::new(dev, DriverConfig::default()).expect("controller");
    let ns = ctrl.namespace(1).expect("namespace");
    let mut q = ns.open_queue().expect("queue");
    // Warm up (page faults of the namespace's memory, pool chunks).
    random_reads(
        q.as_mut(),
        ns.info().size(),
        4096,
        qd,
        Duration::from_millis(200),
    )
    .expect("warm-up");
    random_reads(q.as_mut(), ns.info().size(), 4096, qd, secs).expect("run")
}

fn main() {
    let secs = Duration::from_secs_f64(
        std::env::args()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(2.0),
    );
    println!("cairn-nvme driver vs the in-process emulated controller: 4 KiB random reads, one thread, {secs:?} per run");
    println!(
        "{:>4} {:>12} {:>15} {:>13} {:>13} {:>13} {:>16} {:>14}",
        "qd",
        "IOPS/core",
        "vs SPDK 10M",
        "total ns/IO",
        "emu ns/IO",
        "driver ns/IO",
        "driver IOPS/core",
        "driver vs SPDK"
    );
    for qd in [1usize, 128] {
        let plain = run(emulator(), qd, secs);
        let timed = Arc::new(Timed {
            inner: emulator(),
            nanos: AtomicU64::new(0),
        });
        // Count only the measured run: reset after bring-up and warm-up.
        let ctrl = NvmeController::new(timed.clone(), DriverConfig::default()).expect("controller");
        let ns = ctrl.namespace(1).expect("namespace");
        let mut q = ns.open_queue().expect("queue");
        random_reads(
            q.as_mut(),
            ns.info().size(),
            4096,
            qd,
            Duration::from_millis(200),
        )
        .expect("warm-up");
        timed.nanos.store(0, Ordering::Relaxed);
        let r = random_reads(q.as_mut(), ns.info().size(), 4096, qd, secs).expect("run");
        // The emulator's share of the timed run's wall time splits the plain
        // run's CPU time per I/O (both clocks see the same preemptions on a
        // shared machine; CPU time alone would need a syscall per access).
        let share =
            (timed.nanos.load(Ordering::Relaxed) as f64 / r.wall.as_nanos() as f64).min(1.0);
        let total_ns = plain.ns_per_io();
        let emu_ns = total_ns * share;
        let driver_ns = (total_ns - emu_ns).max(1.0);
        println!(
            "{:>4} {:>12.0} {:>14.3}x {:>13.0} {:>13.0} {:>13.0} {:>16.0} {:>13.3}x",
            qd,
            plain.iops_per_core(),
            plain.iops_per_core() / SPDK_IOPS_PER_CORE,
            plain.ns_per_io(),
            emu_ns,
            driver_ns,
            1e9 / driver_ns,
            1e9 / driver_ns / SPDK_IOPS_PER_CORE
        );
    }
    println!("(IOPS/core = I/Os per second of this thread's CPU time; emu/driver split from a second, timed run)");
}
