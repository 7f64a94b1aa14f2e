//! Single-thread throughput of cairn-erasure, in GB/s (10^9 bytes) of data
//! shards in — the same unit as the table in ARCHITECTURE.md, "Erasure coding".
//!
//! Run: `cargo run --release -p cairn-erasure --example ec_bench`

use std::hint::black_box;
use std::time::{Duration, Instant};

use cairn_erasure::Codec;

const MIB: usize = 1 << 20;
const KIB: usize = 1 << 10;
/// Long enough to average out frequency ramps and scheduler noise.
const MIN_TIME: Duration = Duration::from_secs(2);

fn data(k: usize, len: usize) -> Vec<Vec<u8>> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..k)
        .map(|_| {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect()
}

/// Runs `f` repeatedly for at least MIN_TIME after a warm-up; returns GB/s for
/// `bytes` of input per call.
fn measure(bytes: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let start = Instant::now();
    let mut iters = 0u64;
    while start.elapsed() < MIN_TIME {
        f();
        iters += 1;
    }
    (bytes as f64 * iters as f64) / start.elapsed().as_secs_f64() / 1e9
}

fn encode(k: usize, m: usize, len: usize) -> f64 {
    let codec = Codec::new(k, m).expect("valid code");
    let data = data(k, len);
    let data_refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut parity = vec![vec![0u8; len]; m];
    measure(k * len, || {
        let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        codec
            .encode(black_box(&data_refs), &mut refs)
            .expect("encode");
        black_box(&parity);
    })
}

/// Loses the first m data shards and rebuilds them from the rest (the
/// worst case: all parity rows take part in the decode).
fn rebuild(k: usize, m: usize, len: usize) -> f64 {
    let codec = Codec::new(k, m).expect("valid code");
    let data = data(k, len);
    let mut parity = vec![vec![0u8; len]; m];
    {
        let data_refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        codec.encode(&data_refs, &mut refs).expect("encode");
    }
    let mut shards: Vec<Option<Vec<u8>>> = data.into_iter().chain(parity).map(Some).collect();
    let lost = m.min(k);
    measure(k * len, || {
        for s in &mut shards[..lost] {
            // Dropping the old buffer each time includes the allocation that
            // a real rebuild pays in the figure.
            *s = None;
        }
        codec
            .reconstruct(black_box(&mut shards))
            .expect("reconstruct");
        black_box(&shards);
    })
}

fn main() {
    println!("cairn-erasure over ISA-L, one thread, GB/s of data in");
    for (k, m, len) in [(4, 2, MIB), (8, 3, MIB), (8, 3, 64 * KIB)] {
        let size = if len >= MIB {
            format!("{} MiB", len / MIB)
        } else {
            format!("{} KiB", len / KIB)
        };
        println!("{k}+{m} encode, {size}: {:.1}", encode(k, m, len));
    }
    for (k, m, len) in [(4, 2, MIB), (8, 3, MIB), (8, 3, 64 * KIB)] {
        let size = if len >= MIB {
            format!("{} MiB", len / MIB)
        } else {
            format!("{} KiB", len / KIB)
        };
        println!(
            "{k}+{m} rebuild of {m} lost data shards, {size}: {:.1}",
            rebuild(k, m, len)
        );
    }
}
