//! What a run measured: per operation, requests finished inside the measured
//! window, their bytes, and their latency percentiles.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put,
    Get,
}

/// One request that finished inside the measured window.
pub struct Sample {
    pub op: Op,
    pub took: Duration,
    pub bytes: u64,
}

pub struct Report {
    pub window: Duration,
    pub samples: Vec<Sample>,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// One operation's figures.
struct Figures {
    ops: usize,
    ops_per_s: f64,
    mb_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

impl Report {
    pub fn new(window: Duration) -> Report {
        Report {
            window,
            samples: Vec::new(),
            errors: 0,
            first_error: None,
        }
    }

    fn figures(&self, op: Op) -> Figures {
        let mut took: Vec<Duration> = Vec::new();
        let mut bytes = 0u64;
        for s in self.samples.iter().filter(|s| s.op == op) {
            took.push(s.took);
            bytes += s.bytes;
        }
        took.sort_unstable();
        let secs = self.window.as_secs_f64().max(1e-9);
        Figures {
            ops: took.len(),
            ops_per_s: took.len() as f64 / secs,
            mb_per_s: bytes as f64 / secs / 1e6,
            p50_ms: percentile(&took, 0.50),
            p99_ms: percentile(&took, 0.99),
            p999_ms: percentile(&took, 0.999),
        }
    }

    pub fn total_mbs(&self) -> f64 {
        self.figures(Op::Put).mb_per_s + self.figures(Op::Get).mb_per_s
    }

    pub fn total_ops(&self) -> f64 {
        self.figures(Op::Put).ops_per_s + self.figures(Op::Get).ops_per_s
    }

    pub fn print(&self, size: usize, connections: usize) {
        println!(
            "{size} B objects, {connections} connections, {:.0} s measured",
            self.window.as_secs_f64()
        );
        println!(
            "{:<5}{:>9}{:>11}{:>11}{:>10}{:>10}{:>10}",
            "OP", "COUNT", "OPS/S", "MB/S", "P50 ms", "P99 ms", "P999 ms"
        );
        for (name, op) in [("PUT", Op::Put), ("GET", Op::Get)] {
            let f = self.figures(op);
            if f.ops == 0 {
                continue;
            }
            println!(
                "{name:<5}{:>9}{:>11.1}{:>11.1}{:>10.2}{:>10.2}{:>10.2}",
                f.ops, f.ops_per_s, f.mb_per_s, f.p50_ms, f.p99_ms, f.p999_ms
            );
        }
        if self.errors > 0 {
            println!(
                "errors: {} (first: {})",
                self.errors,
                self.first_error.as_deref().unwrap_or("")
            );
        }
    }

    pub fn json(&self, size: usize, connections: usize) -> serde_json::Value {
        let op = |op| {
            let f = self.figures(op);
            serde_json::json!({
                "ops": f.ops, "ops_per_s": f.ops_per_s, "mb_per_s": f.mb_per_s,
                "p50_ms": f.p50_ms, "p99_ms": f.p99_ms, "p999_ms": f.p999_ms,
            })
        };
        serde_json::json!({
            "size": size,
            "connections": connections,
            "seconds": self.window.as_secs_f64(),
            "put": op(Op::Put),
            "get": op(Op::Get),
            "errors": self.errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_sample_at_or_above_the_rank() {
        let d: Vec<Duration> = (1..=1000).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 0.5), 500.0);
        assert_eq!(percentile(&d, 0.99), 990.0);
        assert_eq!(percentile(&d, 0.999), 999.0);
        assert_eq!(percentile(&d[..1], 0.999), 1.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn rates_are_over_the_window() {
        let mut r = Report::new(Duration::from_secs(2));
        for _ in 0..4 {
            r.samples.push(Sample {
                op: Op::Put,
                took: Duration::from_millis(10),
                bytes: 1_000_000,
            });
        }
        assert_eq!(r.total_ops(), 2.0);
        assert_eq!(r.total_mbs(), 2.0);
    }
}
