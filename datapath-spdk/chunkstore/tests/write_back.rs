//! Write-back puts (`durable: false`): acknowledged from the device's volatile
//! cache, lost only by a power loss before their flush, and never able to leave
//! a hole under a later durable write. The RAM device models the cache: a write
//! without FUA is undone by `power_loss` unless a flush came after it.

mod common;

use cairn_blockdev::RamDevice;
use cairn_chunkstore::{ChunkStore, StoreError, WriteOp, WriteOutcome};
use common::{data, id, params};
use std::time::Duration;

fn put(s: &mut ChunkStore, n: u128, durable: bool) {
    let d = data(n, 10_000);
    let r = s.write_batch(&[WriteOp::Put {
        id: id(n),
        tenant: 1,
        key_id: 0,
        payload: &d,
        durable,
    }]);
    assert_eq!(r[0].as_ref().unwrap(), &WriteOutcome::Put);
}

fn holds(s: &mut ChunkStore, n: u128) -> bool {
    match s.get(id(n), 1) {
        Ok(b) => {
            assert_eq!(&b[..], &data(n, 10_000)[..], "chunk {n} reads back wrong");
            true
        }
        Err(StoreError::NotFound) => false,
        Err(e) => panic!("chunk {n}: {e}"),
    }
}

/// Loses power with the store open, then opens the device again.
fn crash(dev: &RamDevice, s: ChunkStore) -> ChunkStore {
    dev.power_loss();
    drop(s);
    ChunkStore::open(dev).unwrap()
}

fn fresh() -> (RamDevice, ChunkStore) {
    let dev = RamDevice::new(64 << 20);
    let s = ChunkStore::format(&dev, &params()).unwrap();
    (dev, s)
}

#[test]
fn write_back_is_readable_at_once_and_lost_only_to_power_before_its_flush() {
    let (dev, mut s) = fresh();
    put(&mut s, 1, true);
    put(&mut s, 2, false);
    put(&mut s, 3, false);
    assert!(
        dev.unflushed() > 0,
        "a write-back batch is written without FUA"
    );
    assert!(holds(&mut s, 2) && holds(&mut s, 3));
    let mut s = crash(&dev, s);
    assert!(holds(&mut s, 1), "the durable chunk survives");
    assert!(
        !holds(&mut s, 2) && !holds(&mut s, 3),
        "unflushed write-back is gone"
    );
    let r = s.report();
    assert_eq!(
        r.corrupt_batches_at_open, 0,
        "a lost write-back tail is not corruption"
    );
    // The store goes on: new writes land and survive.
    put(&mut s, 4, true);
    let mut s = crash(&dev, s);
    assert!(holds(&mut s, 1) && holds(&mut s, 4));
}

#[test]
fn a_durable_write_flushes_the_write_back_before_it() {
    let (dev, mut s) = fresh();
    put(&mut s, 1, false);
    put(&mut s, 2, false);
    // Without the flush first, a power loss would keep chunk 3 and lose the two
    // batches under it: a hole the next open would report as corruption.
    put(&mut s, 3, true);
    assert_eq!(dev.unflushed(), 0);
    let mut s = crash(&dev, s);
    for n in 1..=3 {
        assert!(holds(&mut s, n), "chunk {n} lost");
    }
    assert_eq!(s.report().corrupt_batches_at_open, 0);
}

#[test]
fn a_batch_with_any_durable_op_is_durable_as_a_whole() {
    let (dev, mut s) = fresh();
    let (a, b) = (data(1, 10_000), data(2, 10_000));
    let r = s.write_batch(&[
        WriteOp::Put {
            id: id(1),
            tenant: 1,
            key_id: 0,
            payload: &a,
            durable: false,
        },
        WriteOp::Put {
            id: id(2),
            tenant: 1,
            key_id: 0,
            payload: &b,
            durable: true,
        },
    ]);
    assert!(r.iter().all(|r| r.is_ok()));
    assert_eq!(dev.unflushed(), 0);
    let mut s = crash(&dev, s);
    assert!(holds(&mut s, 1) && holds(&mut s, 2));
}

#[test]
fn write_back_is_flushed_when_due_and_at_close() {
    let (dev, mut s) = fresh();
    put(&mut s, 1, false);
    s.flush_older_than(Duration::from_secs(60)).unwrap();
    assert!(dev.unflushed() > 0, "not due yet");
    s.flush_older_than(Duration::ZERO).unwrap();
    assert_eq!(dev.unflushed(), 0);
    s.flush_older_than(Duration::ZERO).unwrap();
    assert_eq!(dev.unflushed(), 0, "nothing waits now");
    put(&mut s, 2, false);
    s.close().unwrap();
    dev.power_loss();
    let mut s = ChunkStore::open(&dev).unwrap();
    assert!(holds(&mut s, 1) && holds(&mut s, 2));
}

#[test]
fn write_back_survives_compaction_and_seal() {
    // Enough write-back data to fill segments: sealing and compaction are
    // durable writes, so everything before them must be flushed first.
    let (dev, mut s) = fresh();
    for n in 0..200u128 {
        put(&mut s, n, n % 7 == 0);
    }
    for n in (0..200u128).step_by(2) {
        let r = s.write_batch(&[WriteOp::Delete {
            id: id(n),
            tenant: 1,
        }]);
        assert!(r[0].is_ok());
    }
    let _ = s.maybe_compact().unwrap();
    s.flush().unwrap();
    let mut s = crash(&dev, s);
    for n in 0..200u128 {
        assert_eq!(holds(&mut s, n), n % 2 == 1, "chunk {n}");
    }
    assert_eq!(s.report().corrupt_batches_at_open, 0);
}
