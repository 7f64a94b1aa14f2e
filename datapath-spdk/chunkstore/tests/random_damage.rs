//! Random single- and multi-byte damage on a drive with sealed, compacted and open
//! segments (a property test with a small deterministic PRNG).

use cairn_blockdev::RamFault;
use cairn_chunkstore::format::{parse_batch, SegKind, BLOCK, RECORD_HEADER};
use cairn_chunkstore::{ChunkStore, StoreError};
use std::ops::Range;

mod common;
use common::*;

/// Where each record of a raw image lies (of segments in use, batches parsed from
/// block 1 on).
struct Rec {
    id: u128,
    rec: Range<usize>,
    batch: Range<usize>,
    last_in_segment: bool,
}

fn layout(d: &[u8]) -> (Vec<Rec>, Vec<Range<usize>>) {
    let ss = SEG as usize;
    let mut recs = Vec::new();
    let mut structures = Vec::new();
    for (base, h, f) in segments(d) {
        if h.is_none() {
            continue;
        }
        structures.push(base..base + 32);
        structures.push(base + ss - BLOCK..base + ss - BLOCK + 40);
        if let Some(f) = f {
            structures.push(base + f.summary_offset as usize..base + ss - BLOCK);
        }
        let mut pos = base + BLOCK;
        let first = recs.len();
        while let Ok((rs, len)) = parse_batch(&d[pos..base + ss - BLOCK]) {
            for (off, h) in rs {
                recs.push(Rec {
                    id: h.id.as_u128(),
                    rec: pos + off..pos + off + RECORD_HEADER + h.payload_len as usize,
                    batch: pos..pos + len,
                    last_in_segment: false,
                });
            }
            pos += len.next_multiple_of(BLOCK);
        }
        if let Some(last) = recs[first..].last().map(|r| r.batch.clone()) {
            for r in &mut recs[first..] {
                r.last_in_segment = r.batch == last;
            }
        }
    }
    (recs, structures)
}

fn hits(h: &[Range<usize>], r: &Range<usize>) -> bool {
    h.iter().any(|x| x.start < r.end && r.start < x.end)
}

/// Random single- and multi-byte damage anywhere on a drive with sealed, compacted
/// and open segments, after clean and unclean stops: every acknowledged chunk whose
/// record bytes were not hit is still readable (unless it shared the torn-looking
/// last batch of its segment with the damage), and nothing returns wrong bytes.
#[test]
fn random_damage_never_loses_unhit_chunks_nor_returns_wrong_bytes() {
    let mut totals = Counts::default();
    for (variant, b) in [
        Backend::ram(DATA_MB + 16 * SEG),
        Backend::ram(DATA_MB + 16 * SEG),
        Backend::file(DATA_MB + 16 * SEG),
    ]
    .into_iter()
    .enumerate()
    {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D + variant as u64);
        let mut s = b.format();
        // Model: acknowledged state, Some(len) live, None deleted.
        let mut model: Vec<(u128, Option<usize>)> = Vec::new();
        let mut next_id = 1u128;
        for step in 0..90 {
            if step == 45 || step == 80 {
                s.compact(0.7).unwrap();
            }
            if rng.below(10) < 6 {
                let ns: Vec<u128> = (0..1 + rng.below(4))
                    .map(|_| {
                        next_id += 1;
                        next_id
                    })
                    .collect();
                let len = rng.below(20_000);
                put_batch(&mut s, &ns, len);
                model.extend(ns.iter().map(|&n| (n, Some(len))));
            } else {
                // Delete some live chunks at random: segments go sparse.
                for _ in 0..1 + rng.below(6) {
                    let live: Vec<usize> =
                        (0..model.len()).filter(|&i| model[i].1.is_some()).collect();
                    if let Some(&i) = live.get(rng.below(live.len())) {
                        delete(&mut s, model[i].0).unwrap();
                        model[i].1 = None;
                    }
                }
            }
        }
        let mut unacked = Vec::new();
        if variant == 1 {
            // Unclean: the last write torn after its first block, never acknowledged.
            let r = b.ram_dev().unwrap();
            r.inject(Some(RamFault::TearNextWrite { keep: 4096 }));
            let ns = [next_id + 1, next_id + 2, next_id + 3];
            let ds: Vec<Vec<u8>> = ns.iter().map(|&n| data(n, 9000)).collect();
            let ops = put_ops(&ns, &ds);
            assert!(s.write_batch(&ops).iter().all(|r| r.is_err()));
            r.inject(None);
            unacked.extend(ns);
            drop(s);
        } else {
            s.close().unwrap();
        }
        let snap = b.snapshot();
        let (recs, structures) = layout(&snap);
        assert!(
            segments(&snap)
                .iter()
                .any(|(_, h, _)| h.is_some_and(|h| h.kind == SegKind::Compaction)),
            "workload made no compaction segment"
        );
        let trials = if variant == 2 { 6 } else { 40 };
        for trial in 0..trials {
            b.restore(&snap);
            let mut damage: Vec<Range<usize>> = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let at = match rng.below(5) {
                    0 | 1 => {
                        let r = &recs[rng.below(recs.len())];
                        r.batch.start + rng.below(r.batch.len())
                    }
                    2 => recs[rng.below(recs.len())].batch.start + rng.below(32),
                    3 => {
                        let r = &structures[rng.below(structures.len())];
                        r.start + rng.below(r.len())
                    }
                    _ => DATA_MB as usize + rng.below(snap.len() - DATA_MB as usize),
                };
                let len = if rng.below(2) == 0 {
                    1
                } else {
                    1 + rng.below(8)
                };
                let at = at.min(snap.len() - len);
                let xs: Vec<u8> = (0..len).map(|_| 1 + rng.below(255) as u8).collect();
                b.poke(|d| {
                    for (k, x) in xs.iter().enumerate() {
                        d[at + k] ^= x;
                    }
                });
                damage.push(at..at + len);
            }
            let what = format!("variant {variant} trial {trial} damage {damage:?}");
            let must_read = |n: u128| {
                recs.iter().filter(|r| r.id == n).all(|r| {
                    !hits(&damage, &r.rec) && (!r.last_in_segment || !hits(&damage, &r.batch))
                })
            };
            for round in 0..2 {
                let mut s = ChunkStore::open(b.dev().as_ref())
                    .unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
                if round == 0 {
                    let c = counts(&s.report());
                    totals.damaged_segments += c.damaged_segments;
                    totals.corrupt_batches += c.corrupt_batches;
                    totals.corrupt_records += c.corrupt_records;
                    totals.salvaged += c.salvaged;
                    totals.torn += c.torn;
                }
                let reqs: Vec<_> = model.iter().map(|(n, _)| (id(*n), 1)).collect();
                for ((n, st), got) in model.iter().zip(s.get_many(&reqs)) {
                    match (st, got) {
                        (Some(len), Ok(b)) => {
                            assert_eq!(&b[..], &data(*n, *len)[..], "{what}: chunk {n}")
                        }
                        (Some(_), Err(e)) => assert!(
                            !must_read(*n)
                                && matches!(e, StoreError::NotFound | StoreError::Corrupt(_)),
                            "{what} round {round}: chunk {n}: {e}"
                        ),
                        // A deleted chunk may come back only as its exact bytes, and
                        // only when damage hit its tombstone.
                        (None, Ok(b)) => {
                            assert!(!must_read(*n), "{what}: deleted chunk {n} came back");
                            let len = b.len();
                            assert_eq!(&b[..], &data(*n, len)[..], "{what}: chunk {n}");
                        }
                        (None, Err(e)) => assert!(
                            matches!(e, StoreError::NotFound | StoreError::Corrupt(_)),
                            "{what}: chunk {n}: {e}"
                        ),
                    }
                }
                for n in &unacked {
                    let got = s.get(id(*n), 1);
                    assert!(
                        matches!(got, Err(StoreError::NotFound)),
                        "{what}: torn chunk {n}: {got:?}"
                    );
                }
                drop(s);
            }
        }
    }
    // The damage exercised the salvage paths.
    eprintln!("damage found over all trials: {totals:?}");
    assert!(
        totals.salvaged > 0 && totals.corrupt_batches > 0,
        "{totals:?}"
    );
    assert!(
        totals.damaged_segments > 0 && totals.corrupt_records > 0,
        "{totals:?}"
    );
}
