//! Split phase: a group commit or a set of gets handed to the queue and answered
//! later, with other calls in between. A write in flight is not in the index
//! (reads see the last durable version) until it completes; every answer
//! reaches its own ticket; compaction waits for reads in flight.

use cairn_blockdev::RamFault;
use cairn_chunkstore::{StoreError, WriteOp, WriteOutcome};

mod common;
use common::*;

const BIG: usize = 200_000;

#[test]
fn a_read_beside_a_write_in_flight_sees_the_last_durable_version() {
    for b in Backend::both(DATA_MB + 8 * SEG) {
        let mut s = b.format();
        put(&mut s, 1, 4096);
        put(&mut s, 2, 4096);
        // Chunk 1 rewritten (a different length, so the versions differ) and
        // chunk 3 new, in flight together.
        let v2 = data(101, BIG);
        let c3 = data(3, 4096);
        let t = s.begin_write(&[
            WriteOp::Put {
                id: id(1),
                tenant: 1,
                key_id: 0,
                payload: &v2,
                durable: true,
            },
            WriteOp::Put {
                id: id(3),
                tenant: 1,
                key_id: 0,
                payload: &c3,
                durable: true,
            },
        ]);
        // Gets handed to the queue while the write may still be in flight, and
        // a synchronous get answered meanwhile. Until the store has seen the
        // write complete, reads see what was durable before it; after, the
        // new versions. The RAM device completes at submission; a durable
        // write to the file takes long enough to be seen in flight.
        let completed = s.is_done(t);
        let r = s.begin_reads(&[(id(1), 1), (id(2), 1), (id(3), 1)]);
        assert_has(&mut s, 2, 4096);
        let got = s.end_reads(r);
        assert_eq!(&got[1].as_ref().unwrap()[..], &data(2, 4096)[..]);
        if completed {
            assert_eq!(&got[0].as_ref().unwrap()[..], &v2[..]);
            assert_eq!(&got[2].as_ref().unwrap()[..], &c3[..]);
        } else {
            assert_eq!(&got[0].as_ref().unwrap()[..], &data(1, 4096)[..]);
            assert!(matches!(got[2], Err(StoreError::NotFound)), "{:?}", got[2]);
        }
        // The write's answer was kept for its ticket while the reads ran.
        let w = s.end_write(t);
        assert_eq!(w.len(), 2);
        assert!(
            w.iter().all(|r| matches!(r, Ok(WriteOutcome::Put))),
            "{w:?}"
        );
        assert!(!s.in_flight());
        let got = s.get(id(1), 1).unwrap();
        assert_eq!(&got[..], &v2[..]);
        assert_has(&mut s, 3, 4096);
        // Durable, as acknowledged.
        drop(s);
        let mut s = b.open();
        assert_eq!(&s.get(id(1), 1).unwrap()[..], &v2[..]);
        assert_has(&mut s, 2, 4096);
        assert_has(&mut s, 3, 4096);
    }
}

#[test]
fn a_write_in_flight_completes_by_polling() {
    for b in Backend::both(DATA_MB + 8 * SEG) {
        let mut s = b.format();
        let d = data(7, BIG);
        let t = s.begin_write(&[WriteOp::Put {
            id: id(7),
            tenant: 1,
            key_id: 0,
            payload: &d,
            durable: true,
        }]);
        let started = std::time::Instant::now();
        while !s.is_done(t) {
            s.poll();
            assert!(
                started.elapsed().as_secs() < 30,
                "the write never completed"
            );
        }
        assert!(matches!(s.end_write(t)[..], [Ok(WriteOutcome::Put)]));
        assert_has(&mut s, 7, BIG);
    }
}

#[test]
fn a_failed_write_in_flight_fails_its_ops_and_the_store() {
    let b = Backend::ram(DATA_MB + 8 * SEG);
    let mut s = b.format();
    put(&mut s, 1, 4096);
    b.ram_dev().unwrap().inject(Some(RamFault::FailWrites));
    let d = data(2, 4096);
    let t = s.begin_write(&[WriteOp::Put {
        id: id(2),
        tenant: 1,
        key_id: 0,
        payload: &d,
        durable: true,
    }]);
    let w = s.end_write(t);
    assert!(matches!(w[..], [Err(_)]), "{w:?}");
    assert!(s.failed().is_some());
    // Nothing more is served, and nothing unacknowledged entered the index.
    assert!(s.get(id(2), 1).is_err());
    b.ram_dev().unwrap().inject(None);
    drop(s);
    let mut s = b.open();
    assert_has(&mut s, 1, 4096);
    assert!(matches!(s.get(id(2), 1), Err(StoreError::NotFound)));
}

/// Gets handed to the queue before a compaction that moves their chunks and
/// releases the segments they were read from are answered with the right
/// bytes after it. Neither device here holds a read long enough for the
/// release to overtake it, so this checks the answers, not the ordering that
/// `settle` in `compact_until` guarantees.
#[test]
fn compaction_waits_for_reads_in_flight() {
    for b in Backend::both(DATA_MB + 8 * SEG) {
        let mut s = b.format();
        // Mostly dead sealed segments, whose live chunks compaction moves
        // and whose space it releases.
        sparse_segments(&mut s);
        let live: Vec<_> = (0..24).step_by(4).map(|n| (id(n), 1)).collect();
        let r = s.begin_reads(&live);
        assert!(s.compact(0.5).unwrap() >= 1);
        for ((cid, _), got) in live.iter().zip(s.end_reads(r)) {
            let n = (0..24).find(|n| id(*n) == *cid).unwrap();
            assert_eq!(&got.unwrap()[..], &data(n, 50_000)[..], "chunk {n}");
        }
        for n in (0..24).step_by(4) {
            assert_has(&mut s, n, 50_000);
        }
    }
}
