//! Chunk store behaviour on both backends: RAM (with fault injection) and io_uring
//! on real temp files.

use cairn_blockdev::RamFault;
use cairn_chunkstore::{ChunkStore, Probe, StoreError, WriteOp, WriteOutcome};

mod common;
use common::*;

#[test]
fn round_trip_batch_stat_list() {
    for b in Backend::both(8 << 20) {
        let mut s = b.format();
        let payloads: Vec<Vec<u8>> = (0..50).map(|n| data(n, 100 + n as usize * 37)).collect();
        let ops: Vec<WriteOp> = payloads
            .iter()
            .enumerate()
            .map(|(n, p)| WriteOp::Put {
                id: id(n as u128),
                tenant: 1,
                key_id: 3,
                payload: p,
                durable: true,
            })
            .collect();
        assert!(s.write_batch(&ops).iter().all(|r| r.is_ok()));
        let reqs: Vec<_> = (0..50).map(|n| (id(n), 1)).collect();
        for (n, r) in s.get_many(&reqs).into_iter().enumerate() {
            assert_eq!(&r.unwrap()[..], &payloads[n][..]);
        }
        let (len, crc) = s.stat(id(3), 1).unwrap();
        assert_eq!(
            (len, crc),
            (payloads[3].len() as u32, crc32c::crc32c(&payloads[3]))
        );
        assert_eq!(
            s.list(id(10), 3).unwrap(),
            vec![(id(11), 1), (id(12), 1), (id(13), 1)]
        );
        assert_eq!(s.report().chunks, 50);
        // Empty payloads and overwrite by the same tenant.
        put(&mut s, 100, 0);
        assert_has(&mut s, 100, 0);
        put(&mut s, 3, 10);
        assert_has(&mut s, 3, 10);
        // Delete within the same batch as the put.
        let d = data(200, 5);
        let r = s.write_batch(&[
            WriteOp::Put {
                id: id(200),
                tenant: 1,
                key_id: 0,
                payload: &d,
                durable: true,
            },
            WriteOp::Delete {
                id: id(200),
                tenant: 1,
            },
            WriteOp::Delete {
                id: id(201),
                tenant: 1,
            },
        ]);
        assert_eq!(
            r[1].as_ref().unwrap(),
            &WriteOutcome::Delete { existed: true }
        );
        assert_eq!(
            r[2].as_ref().unwrap(),
            &WriteOutcome::Delete { existed: false }
        );
        assert!(matches!(s.get(id(200), 1), Err(StoreError::NotFound)));
        s.close().unwrap();
    }
}

#[test]
fn wrong_tenant_is_not_found() {
    for b in Backend::both(4 << 20) {
        let mut s = b.format();
        put(&mut s, 1, 100);
        assert!(matches!(s.get(id(1), 2), Err(StoreError::NotFound)));
        assert!(matches!(s.stat(id(1), 2), Err(StoreError::NotFound)));
        // Another tenant can neither delete nor overwrite it.
        let r = s.write_batch(&[WriteOp::Delete {
            id: id(1),
            tenant: 2,
        }]);
        assert_eq!(
            r[0].as_ref().unwrap(),
            &WriteOutcome::Delete { existed: false }
        );
        let r = s.write_batch(&[WriteOp::Put {
            id: id(1),
            tenant: 2,
            key_id: 0,
            payload: b"x",
            durable: true,
        }]);
        assert!(matches!(r[0], Err(StoreError::TenantConflict)));
        assert_has(&mut s, 1, 100);
    }
}

#[test]
fn restart_rebuilds_index_from_sealed_and_unsealed_segments() {
    for b in Backend::both(8 << 20) {
        let mut s = b.format();
        // ~60 KiB chunks in 256 KiB segments: several segments get sealed.
        for n in 0..40 {
            put(&mut s, n, 60_000);
        }
        let r = s.write_batch(&[WriteOp::Delete {
            id: id(5),
            tenant: 1,
        }]);
        assert!(r[0].is_ok());
        assert!(s.report().allocated_bytes > 5 * SEG);
        drop(s); // no close: a crash
        let mut s = b.open();
        assert_eq!(s.report().chunks, 39);
        // The store keeps the device it opened, for drive reports.
        let dev = s.device();
        assert_eq!(dev.size(), 8 << 20);
        match &b {
            Backend::Ram(_) => assert_eq!(dev.backend, "ram"),
            Backend::File(_, p) => {
                assert_eq!(dev.backend, "uring");
                assert_eq!(dev.location, p.display().to_string());
            }
        }
        for n in (0..40).filter(|&n| n != 5) {
            assert_has(&mut s, n, 60_000);
        }
        assert!(matches!(s.get(id(5), 1), Err(StoreError::NotFound)));
        // Keeps working after the restart, and again after another.
        put(&mut s, 1000, 10);
        drop(s);
        let mut s = b.open();
        assert_has(&mut s, 1000, 10);
        assert_has(&mut s, 39, 60_000);
        assert!(
            matches!(s.get(id(5), 1), Err(StoreError::NotFound)),
            "tombstone lost on restart"
        );
    }
}

#[test]
fn torn_tail_loses_only_unacknowledged() {
    // Torn through fault injection: the write fails, the batch is not acknowledged.
    let b = Backend::ram(4 << 20);
    let mut s = b.format();
    put(&mut s, 1, 5000);
    if let Backend::Ram(r) = &b {
        r.inject(Some(RamFault::TearNextWrite { keep: 4096 }));
    }
    let d = data(2, 9000);
    let r = s.write_batch(&[WriteOp::Put {
        id: id(2),
        tenant: 1,
        key_id: 0,
        payload: &d,
        durable: true,
    }]);
    assert!(r[0].is_err());
    assert!(s.failed().is_some());
    drop(s);
    let mut s = b.open();
    assert_has(&mut s, 1, 5000);
    assert!(matches!(s.get(id(2), 1), Err(StoreError::NotFound)));
    put(&mut s, 3, 100);
    assert_has(&mut s, 3, 100);

    // Torn by hand on both backends: garble the blocks of the last batch.
    for b in Backend::both(4 << 20) {
        let mut s = b.format();
        put(&mut s, 1, 5000);
        put(&mut s, 2, 9000);
        let sb = s.superblock().clone();
        drop(s);
        // Segment 0: header block, batch 1 (2 blocks), batch 2 (3 blocks).
        let at = (sb.data_offset + 3 * 4096) as usize;
        b.poke(|d| {
            for (i, x) in d[at + 5000..at + 3 * 4096].iter_mut().enumerate() {
                *x = (i * 7) as u8;
            }
        });
        let mut s = b.open();
        assert_has(&mut s, 1, 5000);
        assert!(matches!(s.get(id(2), 1), Err(StoreError::NotFound)));
        put(&mut s, 4, 100);
        drop(s);
        let mut s = b.open();
        assert_has(&mut s, 1, 5000);
        assert_has(&mut s, 4, 100);
    }
}

#[test]
fn flipped_byte_is_corrupt_never_data() {
    for b in Backend::both(4 << 20) {
        let mut s = b.format();
        put(&mut s, 1, 5000);
        put(&mut s, 2, 100);
        let sb = s.superblock().clone();
        drop(s);
        let mut s = b.open();
        // Chunk 1's payload lives in segment 0's block 1, after two headers.
        let at = (sb.data_offset + 4096 + 32 + 64 + 1234) as usize;
        b.poke(|d| d[at] ^= 1);
        assert!(matches!(s.get(id(1), 1), Err(StoreError::Corrupt(_))));
        assert_has(&mut s, 2, 100);
        // A flipped header byte (the tenant) too.
        let at = (sb.data_offset + 4096 + 32 + 24) as usize;
        b.poke(|d| d[at] ^= 1);
        assert!(matches!(s.get(id(1), 1), Err(StoreError::Corrupt(_))));
    }
}

#[test]
fn no_space_is_an_error_and_too_large_is_refused() {
    for b in Backend::both(DATA_MB + 4 * SEG) {
        let mut s = b.format();
        let big = vec![1u8; s.max_payload() + 1];
        let r = s.write_batch(&[WriteOp::Put {
            id: id(9),
            tenant: 1,
            key_id: 0,
            payload: &big,
            durable: true,
        }]);
        assert!(matches!(r[0], Err(StoreError::TooLarge(..))));
        let mut n = 0;
        let err = loop {
            let d = data(n, 50_000);
            let r = s.write_batch(&[WriteOp::Put {
                id: id(n),
                tenant: 1,
                key_id: 0,
                payload: &d,
                durable: true,
            }]);
            match r.into_iter().next().unwrap() {
                Ok(_) => n += 1,
                Err(e) => break e,
            }
            assert!(n < 100);
        };
        assert!(matches!(err, StoreError::NoSpace), "{err}");
        // Everything acknowledged is still there.
        for k in 0..n {
            assert_has(&mut s, k, 50_000);
        }
    }
}

#[test]
fn compaction_reclaims_space_and_survives_restart() {
    for b in Backend::both(DATA_MB + 8 * SEG) {
        let mut s = b.format();
        sparse_segments(&mut s);
        let before = s.report();
        let freed = s.compact(0.5).unwrap();
        let after = s.report();
        assert!(freed >= 1, "freed {freed}");
        assert!(after.allocated_bytes < before.allocated_bytes);
        assert_eq!(after.chunks, 6);
        for n in (0..24).step_by(4) {
            assert_has(&mut s, n, 50_000);
        }
        // Now there is room for more than before.
        for n in 100..110 {
            put(&mut s, n, 50_000);
        }
        drop(s);
        let mut s = b.open();
        for n in (0..24).step_by(4).chain(100..110) {
            assert_has(&mut s, n, 50_000);
        }
        for n in (0..24).filter(|n| n % 4 != 0) {
            assert!(
                matches!(s.get(id(n), 1), Err(StoreError::NotFound)),
                "deleted chunk {n} came back"
            );
        }
    }
}

#[test]
fn a_corrupt_record_does_not_pin_its_segment() {
    for b in Backend::both(DATA_MB + 8 * SEG) {
        let mut s = b.format();
        sparse_segments(&mut s);
        drop(s);
        let mut s = b.open();
        // Rot inside chunk 4's payload (a survivor in a sealed segment), under
        // the running store.
        let magic = cairn_chunkstore::format::RECORD_MAGIC;
        b.poke(|d| {
            // The record whose header names chunk 4 (magic, version/kind, id).
            let at = (0..d.len() - 24)
                .find(|&p| d[p..p + 4] == magic && d[p + 8..p + 24] == id(4).0)
                .expect("chunk 4's record");
            d[at + cairn_chunkstore::format::RECORD_HEADER + 1000] ^= 0x40;
        });
        assert!(matches!(s.get(id(4), 1), Err(StoreError::Corrupt(_))));
        // Compaction goes on: the bad chunk is dropped (it reads as missing, for
        // the layer above to rebuild), every other survivor moves intact.
        let before = s.report();
        let freed = s.compact(0.5).unwrap();
        assert!(freed >= 1, "freed {freed}");
        assert!(s.report().allocated_bytes < before.allocated_bytes);
        assert!(matches!(s.get(id(4), 1), Err(StoreError::NotFound)));
        for n in (0..24).step_by(4).filter(|&n| n != 4) {
            assert_has(&mut s, n, 50_000);
        }
        // A rebuilt copy can be written back, and nothing old comes back at restart.
        put(&mut s, 4, 50_000);
        drop(s);
        let mut s = b.open();
        for n in (0..24).step_by(4) {
            assert_has(&mut s, n, 50_000);
        }
        for n in (0..24).filter(|n| n % 4 != 0) {
            assert!(matches!(s.get(id(n), 1), Err(StoreError::NotFound)));
        }
    }
}

#[test]
fn writes_beyond_capacity_trigger_compaction() {
    let b = Backend::ram(DATA_MB + 6 * SEG);
    let mut s = b.format();
    // Overwrite the same 3 chunks many times: far more than the device holds.
    for round in 0..40u128 {
        for n in 0..3u128 {
            let d = data(n + round, 40_000);
            let r = s.write_batch(&[WriteOp::Put {
                id: id(n),
                tenant: 1,
                key_id: 0,
                payload: &d,
                durable: true,
            }]);
            assert!(r[0].is_ok(), "round {round}: {:?}", r[0]);
        }
    }
    drop(s);
    let mut s = b.open();
    for n in 0..3u128 {
        assert_eq!(&s.get(id(n), 1).unwrap()[..], &data(n + 39, 40_000)[..]);
    }
}

#[test]
fn foreign_superblock_is_never_formatted() {
    let b = Backend::ram(4 << 20);
    b.poke(|d| d[..4].copy_from_slice(b"\x7fELF"));
    assert!(matches!(
        ChunkStore::probe(b.dev().as_ref()).unwrap(),
        Probe::Foreign
    ));
    assert!(matches!(
        ChunkStore::format(b.dev().as_ref(), &params()),
        Err(StoreError::Foreign)
    ));
    assert!(matches!(
        ChunkStore::open(b.dev().as_ref()),
        Err(StoreError::Foreign)
    ));
    let b = Backend::ram(4 << 20);
    assert!(matches!(
        ChunkStore::open(b.dev().as_ref()),
        Err(StoreError::NotFormatted)
    ));
    drop(b.format());
    assert!(matches!(
        ChunkStore::format(b.dev().as_ref(), &params()),
        Err(StoreError::Foreign)
    ));
}

#[test]
fn io_errors_fail_the_store() {
    let b = Backend::ram(4 << 20);
    let mut s = b.format();
    put(&mut s, 1, 10);
    if let Backend::Ram(r) = &b {
        r.inject(Some(RamFault::FailAll));
    }
    assert!(s.get(id(1), 1).is_err());
    assert!(s.failed().is_some());
    assert!(matches!(s.stat(id(1), 1), Err(StoreError::Failed(_))));
}
