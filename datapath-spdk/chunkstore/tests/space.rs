//! Space over a drive's life: filled, thinned out by deletes spread over every
//! segment, and filled again, a drive takes back about as much as was deleted
//! (found from the outside: a node filled, half its objects deleted at random and
//! refilled stayed "full" at half its capacity, because no two half-live segments
//! fit into one target and compaction would only move whole segments).

mod common;
use common::*;

use cairn_chunkstore::{ChunkStore, StoreError};

const CHUNK: usize = 20_000;

/// Puts chunks numbered from `first` until the drive says it is full; returns how
/// many went in.
fn fill(s: &mut ChunkStore, first: u128) -> u128 {
    let mut n = first;
    loop {
        match try_put(s, n, CHUNK) {
            Ok(_) => n += 1,
            Err(StoreError::NoSpace) => return n - first,
            Err(e) => panic!("chunk {n}: {e}"),
        }
        assert!(n - first < 100_000, "the drive never filled");
    }
}

#[test]
fn a_drive_thinned_by_deletes_takes_back_what_was_deleted() {
    for b in Backend::both(DATA_MB + 12 * SEG) {
        let mut s = b.format();
        let first = fill(&mut s, 0);
        // Every other chunk: each sealed segment is left about half live, so no
        // two of them fit into one.
        let deleted: Vec<u128> = (0..first).filter(|n| n % 2 == 1).collect();
        for &n in &deleted {
            delete(&mut s, n).unwrap();
        }
        let again = fill(&mut s, 1_000_000);
        // The reserve and one partly filled segment are all that may be lost.
        assert!(
            again * 10 >= deleted.len() as u128 * 8,
            "deleted {} chunks, could write back only {again} (first fill {first})",
            deleted.len()
        );
        // And once more, after deleting some of the new ones.
        for n in (1_000_000..1_000_000 + again).step_by(3) {
            delete(&mut s, n).unwrap();
        }
        let third = fill(&mut s, 2_000_000);
        assert!(
            third * 10 >= again.div_ceil(3) * 8,
            "third fill {third} of {again}"
        );
        let survivors: Vec<u128> = (0..first)
            .filter(|n| n % 2 == 0)
            .chain((1_000_000..1_000_000 + again).filter(|n| (n - 1_000_000) % 3 != 0))
            .chain(2_000_000..2_000_000 + third)
            .collect();
        for &n in &survivors {
            assert_has(&mut s, n, CHUNK);
        }
        drop(s);
        let mut s = b.open();
        for &n in &survivors {
            assert_has(&mut s, n, CHUNK);
        }
        for &n in &deleted {
            assert!(
                matches!(s.get(id(n), 1), Err(StoreError::NotFound)),
                "deleted chunk {n} came back"
            );
        }
    }
}

/// A deterministic PRNG (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Random puts, overwrites, deletes, compactions and restarts against a model:
/// every chunk reads back as last written, no deleted chunk returns, and a put is
/// refused for space only when live data really fills the drive.
#[test]
fn random_churn_keeps_every_chunk_and_all_space() {
    const SEGS: u64 = 11;
    for (seed, b) in Backend::both(DATA_MB + SEGS * SEG).into_iter().enumerate() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 + seed as u64);
        let mut s = b.format();
        // chunk -> (content seed, length)
        let mut model: std::collections::HashMap<u128, (u128, usize)> = Default::default();
        let check = |s: &mut ChunkStore, model: &std::collections::HashMap<u128, (u128, usize)>| {
            for n in 0..100u128 {
                match model.get(&n) {
                    Some(&(v, len)) => {
                        let got = s.get(id(n), 1).unwrap_or_else(|e| panic!("chunk {n}: {e}"));
                        assert_eq!(&got[..], &data(v, len)[..], "chunk {n}");
                    }
                    None => assert!(
                        matches!(s.get(id(n), 1), Err(StoreError::NotFound)),
                        "chunk {n} should not exist"
                    ),
                }
            }
        };
        let mut refused = 0;
        for step in 0..3000u64 {
            let n = rng.below(100) as u128;
            match rng.below(20) {
                0..=13 => {
                    let len = 1 + rng.below(60_000) as usize;
                    let v = step as u128 * 1000 + n;
                    let d = data(v, len);
                    let r = s.write_batch(&[cairn_chunkstore::WriteOp::Put {
                        id: id(n),
                        tenant: 1,
                        key_id: 0,
                        payload: &d,
                        durable: true,
                    }]);
                    match &r[0] {
                        Ok(_) => {
                            model.insert(n, (v, len));
                        }
                        Err(StoreError::NoSpace) => {
                            // Live data must then fill most of what puts may use:
                            // all segments but the reserve and the open one.
                            let live: u64 = model.values().map(|&(_, l)| l as u64 + 64).sum();
                            let room = (SEGS - 3) * SEG;
                            assert!(
                                live * 10 >= room * 7,
                                "step {step}: refused with {live} live bytes of {room}"
                            );
                            refused += 1;
                        }
                        Err(e) => panic!("step {step}: {e}"),
                    }
                }
                14..=16 => {
                    delete(&mut s, n).unwrap();
                    model.remove(&n);
                }
                17 => {
                    s.compact([0.3, 0.5, 0.9][rng.below(3) as usize]).unwrap();
                }
                18 => check(&mut s, &model),
                _ => {
                    drop(s);
                    s = b.open();
                    check(&mut s, &model);
                }
            }
        }
        check(&mut s, &model);
        // The mix did fill the drive at times (else the space claim is untested).
        assert!(refused > 0, "the drive never filled");
    }
}
