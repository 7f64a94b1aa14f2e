//! Recovery at open after damage: flipped bytes in batches, records and segment
//! structures, torn tails, random corruption; and a full drive that must still
//! delete and then take puts again.

use cairn_chunkstore::format::{
    self, parse_batch, SegKind, SegmentFooter, SegmentHeader, BLOCK, RECORD_HEADER,
};
use cairn_chunkstore::{ChunkStore, Report, StoreError, WriteOp};
use std::ops::Range;

mod common;
use common::*;

/// Batches of this many chunks of `SMALL` bytes fit one block each: batch k is
/// block 1 + k of segment 0, record r at 32 + r * 1064 within it.
const PER: usize = 3;
const SMALL: usize = 1000;

fn put_batch(s: &mut ChunkStore, ns: &[u128], len: usize) {
    let ds: Vec<Vec<u8>> = ns.iter().map(|&n| data(n, len)).collect();
    let ops: Vec<WriteOp> = ns
        .iter()
        .zip(&ds)
        .map(|(&n, d)| WriteOp::Put {
            id: id(n),
            tenant: 1,
            key_id: 0,
            payload: d,
        })
        .collect();
    for r in s.write_batch(&ops) {
        r.unwrap();
    }
}

/// Offset on the device of segment 0's block `1 + batch`.
fn batch_off(s: &ChunkStore, batch: usize) -> usize {
    (s.superblock().data_offset as usize) + (1 + batch) * BLOCK
}

fn rec_off(s: &ChunkStore, batch: usize, r: usize) -> usize {
    batch_off(s, batch) + 32 + r * (RECORD_HEADER + SMALL)
}

/// Formats and writes `batches` small batches into segment 0 (chunk n is batch
/// n / 3, record n % 3), checking the layout the tests rely on.
fn small_batches(b: &Backend, batches: usize) -> ChunkStore {
    let mut s = b.format();
    for k in 0..batches {
        let ns: Vec<u128> = (0..PER).map(|r| (k * PER + r) as u128).collect();
        put_batch(&mut s, &ns, SMALL);
    }
    let at = batch_off(&s, batches - 1);
    b.poke(|d| {
        let (recs, _) = parse_batch(&d[at..at + BLOCK]).unwrap();
        assert_eq!(recs[1].0, 32 + RECORD_HEADER + SMALL);
        assert_eq!(recs[2].1.id, id(((batches - 1) * PER + 2) as u128));
    });
    s
}

fn gone(s: &mut ChunkStore, n: u128) -> bool {
    matches!(
        s.get(id(n), 1),
        Err(StoreError::NotFound) | Err(StoreError::Corrupt(_))
    )
}

#[derive(Debug, Default, PartialEq)]
struct Counts {
    damaged_segments: u64,
    corrupt_batches: u64,
    corrupt_records: u64,
    salvaged: u64,
    torn: u64,
}

fn counts(r: &Report) -> Counts {
    Counts {
        damaged_segments: r.damaged_segments_at_open,
        corrupt_batches: r.corrupt_batches_at_open,
        corrupt_records: r.corrupt_records_at_open,
        salvaged: r.salvaged_records_at_open,
        torn: r.torn_batches_at_open,
    }
}

#[test]
fn one_flipped_byte_costs_at_most_one_chunk() {
    const BATCHES: usize = 20;
    // (what, batch, byte offset from the batch start, the chunk lost, counts)
    let cases: [(&str, usize, usize, Option<u128>, Counts); 4] = [
        (
            "batch header (record count)",
            2,
            8,
            None,
            Counts {
                corrupt_batches: 1,
                salvaged: 3,
                ..Counts::default()
            },
        ),
        (
            "batch header crc",
            5,
            29,
            None,
            Counts {
                corrupt_batches: 1,
                salvaged: 3,
                ..Counts::default()
            },
        ),
        (
            "record payload",
            3,
            32 + (RECORD_HEADER + SMALL) + RECORD_HEADER + 500,
            Some(10),
            Counts {
                corrupt_batches: 1,
                corrupt_records: 1,
                salvaged: 2,
                ..Counts::default()
            },
        ),
        (
            "record header (tenant)",
            7,
            32 + 24,
            Some(21),
            Counts {
                corrupt_batches: 1,
                salvaged: 2,
                ..Counts::default()
            },
        ),
    ];
    for (i, (what, batch, at, lost, want)) in cases.into_iter().enumerate() {
        for b in Backend::both(4 << 20) {
            let s = small_batches(&b, BATCHES);
            let at = batch_off(&s, batch) + at;
            // Clean and unclean stops alike.
            if i % 2 == 0 {
                s.close().unwrap();
            } else {
                drop(s);
            }
            b.poke(|d| d[at] ^= 0x10);
            let mut s = b.open();
            assert_eq!(counts(&s.report()), want, "{what}");
            let check = |s: &mut ChunkStore| {
                for n in 0..(BATCHES * PER) as u128 {
                    if Some(n) == lost {
                        assert!(gone(s, n), "{what}: chunk {n} served");
                    } else {
                        assert_has(s, n, SMALL);
                    }
                }
            };
            check(&mut s);
            put(&mut s, 1000, 10);
            drop(s);
            // The segment was sealed with what was salvaged: a normal open now.
            let mut s = b.open();
            assert_eq!(counts(&s.report()), Counts::default(), "{what}");
            check(&mut s);
            assert_has(&mut s, 1000, 10);
        }
    }
}

#[test]
fn several_damaged_batches_in_a_row_and_far_apart() {
    for b in Backend::both(4 << 20) {
        let s = small_batches(&b, 12);
        let (h1, h2, p) = (
            batch_off(&s, 1) + 3,
            batch_off(&s, 2) + 3,
            rec_off(&s, 6, 0),
        );
        drop(s);
        // Two adjacent batch headers and a payload further on.
        b.poke(|d| {
            d[h1] ^= 1;
            d[h2] ^= 1;
            d[p + RECORD_HEADER + 7] ^= 1;
        });
        let mut s = b.open();
        let r = counts(&s.report());
        // Adjacent batches with unreadable headers are one damaged stretch.
        assert_eq!(
            (r.corrupt_batches, r.salvaged, r.corrupt_records),
            (2, 8, 1)
        );
        for n in 0..36u128 {
            if n == 18 {
                assert!(gone(&mut s, n));
            } else {
                assert_has(&mut s, n, SMALL);
            }
        }
    }
}

#[test]
fn torn_last_batch_loses_only_itself() {
    // Five small batches (blocks 1..=5), then one batch of three 5000-byte chunks
    // (blocks 6..=9, 15224 bytes) that is torn after `cut` bytes.
    const BIG: usize = 5000;
    let blen = 32 + 3 * (RECORD_HEADER + BIG);
    for b in Backend::both(4 << 20) {
        let mut s = small_batches(&b, 5);
        put_batch(&mut s, &[100, 101, 102], BIG);
        let start = batch_off(&s, 5);
        s.close().unwrap();
        let snap = b.snapshot();
        let cuts = [
            0,
            1,
            31,
            32,
            100,
            4096,
            5000,
            5096,
            8192,
            10_127,
            12_288,
            15_000,
            blen - 1,
            blen,
        ];
        for (i, cut) in cuts.into_iter().enumerate() {
            b.restore(&snap);
            // The blocks never written hold zeros, or stale bytes.
            b.poke(|d| {
                for (k, x) in d[start + cut..start + 4 * BLOCK].iter_mut().enumerate() {
                    *x = if i % 3 == 2 { (k * 13 + 5) as u8 } else { 0 };
                }
            });
            let mut s = b.open();
            let r = counts(&s.report());
            for n in 0..15 {
                assert_has(&mut s, n, SMALL);
            }
            if cut >= blen {
                for n in 100..103 {
                    assert_has(&mut s, n, BIG);
                }
                assert_eq!(r, Counts::default());
            } else {
                // Not acknowledged as a unit: none of it is kept.
                for n in 100..103 {
                    assert!(gone(&mut s, n), "cut {cut}: chunk {n}");
                }
                let nonzero = cut > 0 || i % 3 == 2;
                assert_eq!(r.torn, nonzero as u64, "cut {cut}");
                assert_eq!((r.corrupt_batches, r.salvaged), (0, 0), "cut {cut}");
            }
            put(&mut s, 200, 3000);
            drop(s);
            let mut s = b.open();
            for n in 0..15 {
                assert_has(&mut s, n, SMALL);
            }
            assert_has(&mut s, 200, 3000);
        }
    }
}

/// Segment headers and footers of a raw image.
fn segments(d: &[u8]) -> Vec<(usize, Option<SegmentHeader>, Option<SegmentFooter>)> {
    let sb = format::Superblock::decode(&d[..BLOCK]).unwrap();
    (0..sb.segment_count as u32)
        .map(|s| {
            let base = sb.segment_offset(s) as usize;
            let ss = sb.segment_size as usize;
            (
                base,
                SegmentHeader::decode(&d[base..base + BLOCK]).ok(),
                SegmentFooter::decode(&d[base + ss - BLOCK..base + ss]).ok(),
            )
        })
        .collect()
}

/// A drive with a sealed compaction segment, sealed and open log segments, and
/// deleted chunks. Live: every fourth of 0..24 (50 KB) and 100..106.
fn compacted(b: &Backend) -> ChunkStore {
    let mut s = b.format();
    for n in 0..24 {
        put(&mut s, n, 50_000);
    }
    for n in (0..24).filter(|n| n % 4 != 0) {
        delete(&mut s, n).unwrap();
    }
    assert!(s.compact(0.5).unwrap() >= 1);
    for n in 100..106 {
        put(&mut s, n, 50_000);
    }
    s
}

fn check_compacted(s: &mut ChunkStore, what: &str) {
    for n in (0..24).step_by(4).chain(100..106) {
        let got = s
            .get(id(n), 1)
            .unwrap_or_else(|e| panic!("{what}: chunk {n}: {e}"));
        assert_eq!(&got[..], &data(n, 50_000)[..], "{what}: chunk {n}");
    }
    for n in (0..24).filter(|n| n % 4 != 0) {
        assert!(
            matches!(s.get(id(n), 1), Err(StoreError::NotFound)),
            "{what}: deleted chunk {n} came back"
        );
    }
}

#[test]
fn damaged_segment_structures_keep_their_records() {
    for b in Backend::both(DATA_MB + 10 * SEG) {
        let s = compacted(&b);
        s.close().unwrap();
        let snap = b.snapshot();
        let segs = segments(&snap);
        let seg = |kind: SegKind, sealed: bool| {
            segs.iter()
                .find(|(_, h, f)| {
                    h.is_some_and(|h| h.kind == kind)
                        && f.is_some_and(|f| Some(f.open_seq) == h.map(|h| h.open_seq)) == sealed
                })
                .map(|(base, _, f)| (*base, *f))
                .unwrap_or_else(|| panic!("no {kind:?} segment (sealed: {sealed})"))
        };
        let (cbase, cfoot) = seg(SegKind::Compaction, true);
        let (lbase, _) = seg(SegKind::Log, true);
        let (obase, _) = seg(SegKind::Log, false);
        let free = segs.iter().find(|(_, h, _)| h.is_none()).unwrap().0;
        let ss = SEG as usize;
        let cases: Vec<(&str, usize, u8)> = vec![
            (
                "compaction summary",
                cbase + cfoot.unwrap().summary_offset as usize + 5,
                0x01,
            ),
            ("compaction footer", cbase + ss - BLOCK + 20, 0x01),
            ("compaction header", cbase + 17, 0x01),
            ("compaction magic", cbase, 0xff),
            ("sealed log header", lbase + 13, 0x02),
            ("open log header", obase + 20, 0x02),
            ("free segment header", free + 100, 0x40),
        ];
        for (what, at, x) in cases {
            b.restore(&snap);
            b.poke(|d| d[at] ^= x);
            let blk = at / BLOCK * BLOCK;
            let damaged = b.snapshot()[blk..blk + BLOCK].to_vec();
            let mut s = b.open();
            assert_eq!(s.report().damaged_segments_at_open, 1, "{what}");
            check_compacted(&mut s, what);
            drop(s);
            // A crash while open repaired the block (after the seal, before the
            // header): the damaged block is back, beside the new footer.
            b.poke(|d| d[blk..blk + BLOCK].copy_from_slice(&damaged));
            let mut s = b.open();
            check_compacted(&mut s, what);
            put(&mut s, 500, 1000);
            drop(s);
            let mut s = b.open();
            assert_eq!(counts(&s.report()), Counts::default(), "{what}, reopened");
            check_compacted(&mut s, what);
            assert_has(&mut s, 500, 1000);
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

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
        if variant == 1 {
            drop(s); // unclean
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

#[test]
fn a_full_drive_deletes_and_then_takes_puts_again() {
    for reopen in [false, true] {
        for b in Backend::both(DATA_MB + 6 * SEG) {
            let mut s = b.format();
            let mut n = 0;
            let err = loop {
                match try_put(&mut s, n, 50_000) {
                    Ok(_) => n += 1,
                    Err(e) => break e,
                }
                assert!(n < 100);
            };
            assert!(matches!(err, StoreError::NoSpace), "{err}");
            let r = s.report();
            assert!(r.full && r.free_segments <= r.reserve_segments, "{r:?}");
            assert_eq!(r.reserve_segments, 2);
            // A put refused, a delete in the same batch done.
            let d = data(999, 10);
            let rs = s.write_batch(&[
                WriteOp::Put {
                    id: id(999),
                    tenant: 1,
                    key_id: 0,
                    payload: &d,
                },
                WriteOp::Delete {
                    id: id(0),
                    tenant: 1,
                },
            ]);
            assert!(matches!(rs[0], Err(StoreError::NoSpace)), "{:?}", rs[0]);
            assert!(rs[1].is_ok(), "{:?}", rs[1]);
            // The reserve segment the tombstones went to takes no puts.
            assert!(matches!(try_put(&mut s, 998, 10), Err(StoreError::NoSpace)));
            for k in 1..n {
                delete(&mut s, k).unwrap_or_else(|e| panic!("delete {k} of {n}: {e}"));
            }
            if reopen {
                drop(s);
                s = b.open();
            }
            let mut m = 0;
            while try_put(&mut s, 1000 + m, 50_000).is_ok() {
                m += 1;
                assert!(m < 100);
            }
            assert!(m + 2 >= n, "only {m} puts after deleting {n}");
            for k in 0..n {
                assert!(matches!(s.get(id(k), 1), Err(StoreError::NotFound)));
            }
            for k in 0..m {
                assert_has(&mut s, 1000 + k, 50_000);
            }
            drop(s);
            let mut s = b.open();
            for k in 0..m {
                assert_has(&mut s, 1000 + k, 50_000);
            }
            for k in 0..n {
                assert!(matches!(s.get(id(k), 1), Err(StoreError::NotFound)));
            }
        }
    }
}
