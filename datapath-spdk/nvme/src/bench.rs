//! A random-read load generator over any [`QueuePair`], shared by the in-process
//! benchmark (`examples/nvmebench.rs`) and the guest self-test, so the `nvme` and
//! `uring` backends are measured by the same loop.

#![deny(unsafe_code)]

use cairn_blockdev::{BlockError, Completion, QueuePair};
use std::time::{Duration, Instant};

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct BenchResult {
    pub qd: usize,
    pub ios: u64,
    pub wall: Duration,
    /// CPU time of the calling thread (None when the kernel does not say).
    pub cpu: Option<Duration>,
}

impl BenchResult {
    /// I/Os per second of wall time.
    pub fn iops(&self) -> f64 {
        self.ios as f64 / self.wall.as_secs_f64()
    }
    /// I/Os per second of the thread's CPU time: what one core would do.
    pub fn iops_per_core(&self) -> f64 {
        match self.cpu {
            Some(c) if !c.is_zero() => self.ios as f64 / c.as_secs_f64(),
            _ => self.iops(),
        }
    }
    /// CPU nanoseconds per I/O.
    pub fn ns_per_io(&self) -> f64 {
        1e9 / self.iops_per_core()
    }
}

/// CPU time of the calling thread, from /proc/thread-self/schedstat (ns on CPU).
pub fn thread_cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Random 4 KiB-aligned reads of `io_size` bytes over the first `span` bytes, `qd`
/// in flight, for `time`. Buffers come from the queue (`alloc_buf`) and are
/// reused: the loop measures submission and completion, not allocation.
pub fn random_reads(
    q: &mut dyn QueuePair,
    span: u64,
    io_size: usize,
    qd: usize,
    time: Duration,
) -> Result<BenchResult, BlockError> {
    let blocks = span / io_size as u64;
    if blocks == 0 {
        return Err(BlockError::Invalid("span smaller than one I/O".into()));
    }
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % blocks) * io_size as u64
    };
    for i in 0..qd {
        q.submit_read(i as u64, next(), q.alloc_buf(io_size)?)?;
    }
    let mut done: Vec<Completion> = Vec::with_capacity(qd);
    let cpu0 = thread_cpu_time();
    let t0 = Instant::now();
    let mut ios = 0u64;
    let mut polls = 0u32;
    loop {
        q.poll(&mut done)?;
        let stop = polls & 255 == 0 && t0.elapsed() >= time;
        polls = polls.wrapping_add(1);
        for c in done.drain(..) {
            c.result?;
            ios += 1;
            if !stop {
                let buf = c.buf.ok_or_else(|| {
                    BlockError::Failed("a read came back without its buffer".into())
                })?;
                q.submit_read(c.tag, next(), buf)?;
            }
        }
        if stop {
            break;
        }
    }
    let wall = t0.elapsed();
    let cpu = match (cpu0, thread_cpu_time()) {
        (Some(a), Some(b)) => b.checked_sub(a),
        _ => None,
    };
    // Drain what is still in flight (not counted).
    let t = Instant::now();
    while q.in_flight() > 0 && t.elapsed() < Duration::from_secs(30) {
        q.wait(Duration::from_millis(10))?;
        q.poll(&mut done)?;
        done.clear();
    }
    Ok(BenchResult { qd, ios, wall, cpu })
}
