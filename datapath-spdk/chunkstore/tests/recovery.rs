//! Recovery at open after damage: flipped bytes in batches, records and segment
//! structures, and torn tails (random damage is in random_damage.rs); and a full
//! drive that must still delete and then take puts again.

use cairn_chunkstore::format::{parse_batch, SegKind, BLOCK, RECORD_HEADER};
use cairn_chunkstore::{ChunkStore, StoreError, WriteOp};

mod common;
use common::*;

/// Batches of this many chunks of `SMALL` bytes fit one block each: batch k is
/// block 1 + k of segment 0, record r at 32 + r * 1064 within it.
const PER: usize = 3;
const SMALL: usize = 1000;

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
                // Its id is unreadable, but the batch header says it held 3.
                corrupt_records: 1,
                salvaged: 2,
                ..Counts::default()
            },
        ),
    ];
    for (i, (what, batch, at, lost, want)) in cases.into_iter().enumerate() {
        for b in Backend::both(4 << 20) {
            let s = small_batches(&b, BATCHES);
            let at = batch_off(&s, batch) + at;
            // A crash: the segment stays unsealed (a clean close seals it; see
            // `a_clean_stop_seals_so_damage_is_never_taken_for_a_torn_write`).
            let _ = i;
            drop(s);
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
fn a_lost_newest_record_does_not_bring_back_an_older_one() {
    for b in Backend::both(4 << 20) {
        // Chunk 1 written, then overwritten by its tenant in batch 3.
        let mut s = small_batches(&b, 3);
        put_batch(&mut s, &[1, 100, 101], SMALL + 8);
        put_batch(&mut s, &[102], SMALL);
        let at = rec_off(&s, 3, 0) + RECORD_HEADER + 9;
        drop(s);
        b.poke(|d| d[at] ^= 4);
        let mut s = b.open();
        assert_eq!(s.report().corrupt_records_at_open, 1);
        assert!(
            matches!(s.get(id(1), 1), Err(StoreError::NotFound)),
            "the older version of chunk 1 was served"
        );
        assert_has(&mut s, 100, SMALL + 8);
        assert_has(&mut s, 0, SMALL);
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
fn records_with_unreadable_headers_are_counted_lost() {
    for b in Backend::both(4 << 20) {
        let s = small_batches(&b, 12);
        // Batch 4: its own header and its middle record's header (chunk 13).
        // Batch 8: only its last record's header (chunk 26).
        // Batches 2 and 10: their own header and their first (chunk 6) or last
        // (chunk 32) record's header, so the lost record is at an edge.
        let pokes = [
            batch_off(&s, 4) + 20,
            rec_off(&s, 4, 1) + 24,
            rec_off(&s, 8, 2) + 24,
            batch_off(&s, 2) + 20,
            rec_off(&s, 2, 0) + 24,
            batch_off(&s, 10) + 20,
            rec_off(&s, 10, 2) + 24,
        ];
        drop(s);
        b.poke(|d| {
            for p in pokes {
                d[p] ^= 4;
            }
        });
        let mut s = b.open();
        // Batch 8's count comes from its header, which says 3 records; the
        // others' from the seqs between the neighbouring batches.
        assert_eq!(
            counts(&s.report()),
            Counts {
                corrupt_batches: 4,
                corrupt_records: 4,
                salvaged: 8,
                ..Counts::default()
            }
        );
        for n in 0..36u128 {
            if [6, 13, 26, 32].contains(&n) {
                assert!(gone(&mut s, n), "chunk {n} served");
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
        drop(s); // a crash: the segment stays unsealed
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
                // Not acknowledged, but each record that landed whole verifies on
                // its own and is kept (harmless: it was never referenced); the
                // rest are gone.
                let whole = |n: usize| cut >= 32 + (n + 1) * (RECORD_HEADER + BIG);
                let mut kept = 0;
                for (k, n) in (100..103).enumerate() {
                    if whole(k) {
                        assert_has(&mut s, n, BIG);
                        kept += 1;
                    } else {
                        assert!(gone(&mut s, n), "cut {cut}: chunk {n}");
                    }
                }
                let nonzero = cut > 0 || i % 3 == 2;
                assert_eq!(r.torn, nonzero as u64, "cut {cut}");
                assert_eq!((r.corrupt_batches, r.salvaged), (0, kept), "cut {cut}");
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
        drop(s); // a crash: the log segment stays unsealed
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
                    durable: true,
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

/// After a clean stop nothing is unsealed: a flipped byte in the last batch is
/// damage found by the read (Corrupt, so the layer above rebuilds the chunk), never
/// a torn write that silently drops acknowledged chunks.
#[test]
fn a_clean_stop_seals_so_damage_is_never_taken_for_a_torn_write() {
    for b in Backend::both(4 << 20) {
        let mut s = small_batches(&b, 5);
        put_batch(&mut s, &[100, 101, 102], 5000);
        let last = batch_off(&s, 5);
        s.close().unwrap();
        // Into the payload of the last batch's second record.
        b.poke(|d| d[last + 32 + (64 + 5000) + 64 + 100] ^= 0x01);
        let mut s = b.open();
        let r = s.report();
        assert_eq!(
            (r.torn_batches_at_open, r.corrupt_batches_at_open),
            (0, 0),
            "{r:?}"
        );
        for n in [100u128, 102] {
            assert_eq!(s.get(id(n), 1).unwrap(), data(n, 5000), "chunk {n}");
        }
        assert!(matches!(s.get(id(101), 1), Err(StoreError::Corrupt(_))));
    }
}
