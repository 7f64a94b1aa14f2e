//! The driver against the in-process emulated controller: bring-up, I/O paths,
//! PRPs and MDTS, queue flow control, completion order, timeouts and abort,
//! fatal status, hostile completions, and the chunk store on top.

use cairn_blockdev::{BlockDevice, BlockError, Completion, DmaBuf, IoKind, QueuePair};
use cairn_nvme::emu::{Corruption, EmuStats};
use cairn_nvme::spec::{nvm, sc};
use cairn_nvme::{
    DriverConfig, EmuConfig, EmuNamespace, EmulatedController, Fault, NvmeController, NvmeError,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn setup(cfg: EmuConfig, dcfg: DriverConfig) -> (Arc<EmulatedController>, NvmeController) {
    let emu = Arc::new(EmulatedController::new(cfg));
    let ctrl = NvmeController::new(emu.clone(), dcfg).expect("controller comes up");
    (emu, ctrl)
}

fn quick() -> DriverConfig {
    DriverConfig {
        io_timeout: Duration::from_millis(100),
        admin_timeout: Duration::from_secs(2),
        ..DriverConfig::default()
    }
}

/// Polls until `n` completions arrived (fails the test after 10 s).
fn collect(q: &mut dyn QueuePair, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let t = Instant::now();
    while out.len() < n {
        q.poll(&mut out).unwrap();
        if out.len() < n {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "only {} of {n} completions",
                out.len()
            );
            q.wait(Duration::from_millis(10)).unwrap();
        }
    }
    out
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write(q: &mut dyn QueuePair, off: u64, data: &[u8], fua: bool) -> Completion {
    let mut b = q.alloc_buf(data.len()).unwrap();
    b.as_mut_slice()[..data.len()].copy_from_slice(data);
    q.submit_write(1, off, b, fua).unwrap();
    collect(q, 1).pop().unwrap()
}

fn read(q: &mut dyn QueuePair, off: u64, len: usize) -> Vec<u8> {
    let b = q.alloc_buf(len).unwrap();
    q.submit_read(2, off, b).unwrap();
    let c = collect(q, 1).pop().unwrap();
    assert_eq!(c.result.as_ref().map_err(|e| e.to_string()), Ok(&len));
    c.buf.unwrap().as_slice()[..len].to_vec()
}

fn ns_bytes(emu: &EmulatedController, nsid: u32, off: usize, len: usize) -> Vec<u8> {
    emu.with_namespace(nsid, |d| d[off..off + len].to_vec())
        .unwrap()
}

#[test]
fn identify_controller_and_namespaces() {
    let (_emu, ctrl) = setup(
        EmuConfig {
            serial: "SN-IDENT".into(),
            namespaces: vec![
                EmuNamespace::bytes(12, 8 << 20),
                EmuNamespace::bytes(9, 4 << 20),
            ],
            mdts: 5,
            max_io_queues: 4,
            ..EmuConfig::default()
        },
        DriverConfig::default(),
    );
    let id = ctrl.identify();
    assert_eq!(id.serial, "SN-IDENT");
    assert_eq!(id.model, "Cairn emulated NVMe");
    assert_eq!(id.nn, 2);
    assert_eq!(ctrl.max_transfer(), 128 << 10, "4 KiB << MDTS 5");
    assert_eq!(ctrl.io_queues(), 4);
    let ns: Vec<_> = ctrl
        .namespaces()
        .iter()
        .map(|n| (n.nsid, n.lba_size, n.blocks))
        .collect();
    assert_eq!(ns, vec![(1, 4096, 2048), (2, 512, 8192)]);
    let d = ctrl.namespace(2).unwrap();
    let info = d.info();
    assert_eq!((info.block_size, info.size()), (512, 4 << 20));
    assert!(info.name.ends_with("/ns2"), "{}", info.name);
    // What operators see of the drive: Identify Controller, through the block device.
    assert_eq!(info.backend, "nvme");
    assert!(info.location.ends_with("/ns2"), "{}", info.location);
    assert_eq!(info.identity.serial.as_deref(), Some("SN-IDENT"));
    assert_eq!(info.identity.model.as_deref(), Some("Cairn emulated NVMe"));
    assert_eq!(info.identity.firmware.as_deref(), Some("1.0"));
    assert!(matches!(ctrl.namespace(3), Err(NvmeError::Invalid(_))));
}

#[test]
fn identity_strings_from_the_controller_are_cleaned() {
    // A controller may write anything into Identify data: control characters are
    // dropped, padding trimmed, and blank fields are unknown rather than "".
    let (_emu, ctrl) = setup(
        EmuConfig {
            serial: "  \u{1}SN\u{7}-9\n".into(),
            model: "Evil\u{1b}[2J Drive".into(),
            firmware: "        ".into(),
            ..EmuConfig::default()
        },
        DriverConfig::default(),
    );
    let id = ctrl.namespace(1).unwrap().info().identity;
    assert_eq!(id.serial.as_deref(), Some("SN-9"));
    assert_eq!(id.model.as_deref(), Some("Evil[2J Drive"));
    assert_eq!(id.firmware, None);
}

#[test]
fn multiple_namespaces_512_and_4k_formats() {
    let (emu, ctrl) = setup(
        EmuConfig {
            namespaces: vec![
                EmuNamespace::bytes(12, 8 << 20),
                EmuNamespace::bytes(9, 8 << 20),
            ],
            ..EmuConfig::default()
        },
        DriverConfig::default(),
    );
    let big = ctrl.namespace(1).unwrap();
    let small = ctrl.namespace(2).unwrap();
    let mut q1 = big.open_queue().unwrap();
    let mut q2 = small.open_queue().unwrap();
    let a = pattern(1, 8192);
    let b = pattern(2, 8192);
    assert!(write(q1.as_mut(), 4096, &a, false).result.is_ok());
    // 512-byte LBAs: an offset that is not 4 KiB aligned is fine.
    assert!(write(q2.as_mut(), 512 * 3, &b, true).result.is_ok());
    assert_eq!(read(q1.as_mut(), 4096, 8192), a);
    assert_eq!(read(q2.as_mut(), 1536, 8192), b);
    // Each namespace got its own bytes, at its own LBA.
    assert_eq!(ns_bytes(&emu, 1, 4096, 8192), a);
    assert_eq!(ns_bytes(&emu, 2, 1536, 8192), b);
    assert!(ns_bytes(&emu, 1, 1536, 512).iter().all(|&x| x == 0));
    // ... and on the 4 KiB namespace that offset is refused before any command.
    let err = q1
        .submit_read(9, 1536, q1.alloc_buf(4096).unwrap())
        .unwrap_err();
    assert!(matches!(err, BlockError::Invalid(_)), "{err}");
    let end = big.info().size();
    assert!(q1.submit_read(9, end, q1.alloc_buf(4096).unwrap()).is_err());
    assert!(q1
        .submit_read(9, end - 4096, q1.alloc_buf(8192).unwrap())
        .is_err());
    assert_eq!(emu.stats().fua_writes, 1);
}

#[test]
fn large_transfers_use_prp_lists_including_chained_ones() {
    // No MDTS, and the driver allowed 4 MiB per command: one command per I/O,
    // PRP lists of more than one page.
    let (emu, ctrl) = setup(
        EmuConfig {
            mdts: 0,
            namespaces: vec![EmuNamespace::bytes(12, 32 << 20)],
            ..EmuConfig::default()
        },
        DriverConfig {
            max_transfer: 4 << 20,
            ..DriverConfig::default()
        },
    );
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    for (i, len) in [4096usize, 8192, 12288, 1 << 20, 4 << 20]
        .into_iter()
        .enumerate()
    {
        let d = pattern(10 + i as u64, len);
        let off = (i as u64) << 22;
        assert!(
            write(q.as_mut(), off, &d, false).result.is_ok(),
            "write {len}"
        );
        assert_eq!(read(q.as_mut(), off, len), d, "read {len}");
        assert_eq!(ns_bytes(&emu, 1, off as usize, len), d);
    }
    let s = emu.stats();
    assert_eq!(s.writes, 5, "one command per I/O");
    assert_eq!(s.max_transfer, 4 << 20);
    // 12 KiB, 1 MiB and 4 MiB need a list, written and read: 6 commands.
    assert_eq!(s.prp_lists, 6);
    // 4 MiB = 1024 pages: 1023 entries do not fit one list page.
    assert_eq!(s.chained_prp_lists, 2);
}

#[test]
fn transfers_beyond_mdts_are_split() {
    let (emu, ctrl) = setup(
        EmuConfig {
            mdts: 5, // 128 KiB; the emulator refuses anything larger
            ..EmuConfig::default()
        },
        DriverConfig::default(),
    );
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    let d = pattern(3, 1 << 20);
    let c = write(q.as_mut(), 8 << 20, &d, true);
    assert_eq!(c.result.unwrap(), 1 << 20);
    assert_eq!(c.kind, IoKind::Write);
    assert_eq!(read(q.as_mut(), 8 << 20, 1 << 20), d);
    let s = emu.stats();
    assert_eq!(
        (s.writes, s.reads),
        (8, 8),
        "eight 128 KiB commands each way"
    );
    assert_eq!(s.fua_writes, 8, "FUA on every piece");
    assert_eq!(s.max_transfer, 128 << 10);
    // 600 KiB: four full pieces and a short one.
    let d = pattern(4, 600 << 10);
    assert!(write(q.as_mut(), 0, &d, false).result.is_ok());
    assert_eq!(read(q.as_mut(), 0, 600 << 10), d);
    assert_eq!(emu.stats().writes, 13);
}

#[test]
fn small_queue_wraps_and_backlogs() {
    let (emu, ctrl) = setup(
        EmuConfig::default(),
        DriverConfig {
            io_queue_entries: 4, // 3 commands in flight at most
            ..DriverConfig::default()
        },
    );
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    // 200 writes submitted at once: most wait in the backlog; the rings wrap
    // dozens of times.
    for i in 0..200u64 {
        let mut b = q.alloc_buf(4096).unwrap();
        b.as_mut_slice().copy_from_slice(&pattern(i, 4096));
        q.submit_write(i, i * 4096, b, false).unwrap();
    }
    assert_eq!(q.in_flight(), 200);
    let done = collect(q.as_mut(), 200);
    let mut tags: Vec<u64> = done.iter().map(|c| c.tag).collect();
    tags.sort();
    assert_eq!(tags, (0..200).collect::<Vec<_>>());
    assert!(done.iter().all(|c| c.result.is_ok()));
    for i in (0..200u64).step_by(37) {
        assert_eq!(read(q.as_mut(), i * 4096, 4096), pattern(i, 4096));
    }
    assert_eq!(emu.stats().writes, 200);
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn out_of_order_completions_match_their_tags() {
    let (emu, ctrl) = setup(EmuConfig::default(), DriverConfig::default());
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    for i in 0..16u64 {
        assert!(write(q.as_mut(), i * 8192, &pattern(100 + i, 8192), false)
            .result
            .is_ok());
    }
    emu.set_reverse_completion(true);
    // Written to the ring now, announced by one doorbell at the next poll: the
    // controller completes that batch last-first.
    for i in 0..16u64 {
        q.submit_read(i, i * 8192, q.alloc_buf(8192).unwrap())
            .unwrap();
    }
    let done = collect(q.as_mut(), 16);
    let order: Vec<u64> = done.iter().map(|c| c.tag).collect();
    assert_ne!(
        order,
        (0..16).collect::<Vec<_>>(),
        "completions were reordered"
    );
    for c in done {
        assert_eq!(c.buf.unwrap().as_slice(), &pattern(100 + c.tag, 8192)[..]);
    }
    // A held completion released after later ones.
    emu.set_reverse_completion(false);
    emu.inject(Fault::Hold {
        opcode: Some(nvm::READ),
        count: 1,
    });
    q.submit_read(50, 0, q.alloc_buf(8192).unwrap()).unwrap();
    q.submit_read(51, 8192, q.alloc_buf(8192).unwrap()).unwrap();
    let first = collect(q.as_mut(), 1);
    assert_eq!(first[0].tag, 51);
    emu.release_held();
    let second = collect(q.as_mut(), 1);
    assert_eq!(second[0].tag, 50);
    assert_eq!(
        second[0].buf.as_ref().unwrap().as_slice(),
        &pattern(100, 8192)[..]
    );
}

#[test]
fn slow_commands_complete_without_abort() {
    let (emu, ctrl) = setup(EmuConfig::default(), quick());
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    emu.inject(Fault::Slow {
        opcode: None,
        delay: Duration::from_millis(30),
        count: 2,
    });
    let t = Instant::now();
    let c = write(q.as_mut(), 0, &pattern(5, 4096), false);
    assert!(c.result.is_ok());
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert_eq!(read(q.as_mut(), 0, 4096), pattern(5, 4096));
    assert_eq!(emu.stats().aborts, 0);
}

#[test]
fn timed_out_command_is_aborted() {
    let (emu, ctrl) = setup(EmuConfig::default(), quick());
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    emu.inject(Fault::Hold {
        opcode: Some(nvm::READ),
        count: 1,
    });
    let t = Instant::now();
    q.submit_read(7, 0, q.alloc_buf(4096).unwrap()).unwrap();
    let c = collect(q.as_mut(), 1).pop().unwrap();
    let e = c.result.unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(100));
    assert!(
        matches!(&e, BlockError::Io { source, .. } if source.kind() == std::io::ErrorKind::TimedOut),
        "{e}"
    );
    assert!(e.to_string().contains("aborted"), "{e}");
    assert!(c.buf.is_some(), "an aborted command's buffer comes back");
    assert_eq!(emu.stats().aborts, 1);
    assert_eq!(emu.held(), 0);
    // The queue and the controller carry on.
    assert!(ctrl.failed().is_none());
    assert!(write(q.as_mut(), 0, &pattern(6, 4096), false)
        .result
        .is_ok());
}

#[test]
fn lost_completion_times_out_and_keeps_the_buffer() {
    let (emu, ctrl) = setup(EmuConfig::default(), quick());
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ns.open_queue().unwrap();
    emu.inject(Fault::LoseCompletion {
        opcode: Some(nvm::WRITE),
        count: 1,
    });
    let c = write(q.as_mut(), 4096, &pattern(8, 4096), false);
    let e = c.result.unwrap_err();
    assert!(e.to_string().contains("lost"), "{e}");
    // The controller refused the abort (nothing to abort); the device could still
    // write that memory, so the buffer is kept, not handed back.
    assert!(c.buf.is_none());
    assert_eq!(emu.stats().aborts, 1);
    assert!(ctrl.failed().is_none());
    assert!(ns.check().is_ok());
    // Later I/O is unaffected.
    assert!(write(q.as_mut(), 0, &pattern(9, 4096), false)
        .result
        .is_ok());
    assert_eq!(read(q.as_mut(), 0, 4096), pattern(9, 4096));
}

#[test]
fn error_status_fails_only_that_io() {
    let (emu, ctrl) = setup(EmuConfig::default(), DriverConfig::default());
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    emu.inject(Fault::FailWith {
        opcode: Some(nvm::READ),
        status: sc::UNRECOVERED_READ_ERROR,
        count: 1,
    });
    let b = q.alloc_buf(4096).unwrap();
    q.submit_read(3, 0, b).unwrap();
    let c = collect(q.as_mut(), 1).pop().unwrap();
    let e = c.result.unwrap_err();
    assert!(matches!(e, BlockError::Io { .. }), "{e}");
    assert!(e.to_string().contains("unrecovered read error"), "{e}");
    assert!(c.buf.is_some());
    assert!(ctrl.failed().is_none());
    assert_eq!(read(q.as_mut(), 0, 4096), vec![0; 4096]);
}

#[test]
fn fatal_status_fails_the_device() {
    let (emu, ctrl) = setup(EmuConfig::default(), quick());
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ns.open_queue().unwrap();
    let mut other = ns.open_queue().unwrap();
    assert!(write(q.as_mut(), 0, &pattern(1, 4096), false)
        .result
        .is_ok());
    // One read in flight on another queue when the controller dies.
    emu.inject(Fault::Hold {
        opcode: None,
        count: 1,
    });
    other
        .submit_read(1, 0, other.alloc_buf(4096).unwrap())
        .unwrap();
    assert_eq!(other.poll(&mut Vec::new()).unwrap(), 0);
    assert_eq!(emu.held(), 1);
    emu.inject(Fault::FatalOnNextIo);
    q.submit_write(5, 0, q.alloc_buf(4096).unwrap(), true)
        .unwrap();
    let c = collect(q.as_mut(), 1).pop().unwrap();
    let e = c.result.unwrap_err();
    assert!(matches!(e, BlockError::Failed(_)), "{e}");
    assert!(e.to_string().contains("CFS"), "{e}");
    assert!(c.buf.is_some(), "DMA stopped: the buffer comes back");
    assert!(ns.check().is_err());
    assert!(ctrl.failed().unwrap().contains("fatal"));
    // Other queues see it too; new I/O fails at once, with the reason.
    let done = collect(other.as_mut(), 1);
    assert!(
        matches!(&done[0].result, Err(BlockError::Failed(m)) if m.contains("fatal")),
        "{:?}",
        done[0].result
    );
    assert!(done[0].buf.is_some());
    let e = other
        .submit_read(2, 0, other.alloc_buf(4096).unwrap())
        .unwrap_err();
    assert!(
        matches!(e, BlockError::Failed(ref m) if m.contains("fatal")),
        "{e}"
    );
    assert!(ns.open_queue().is_err());
}

#[test]
fn in_flight_io_fails_when_the_device_disappears() {
    let (emu, ctrl) = setup(EmuConfig::default(), quick());
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ns.open_queue().unwrap();
    emu.inject(Fault::Hold {
        opcode: None,
        count: 4,
    });
    for i in 0..4 {
        q.submit_read(i, 0, q.alloc_buf(4096).unwrap()).unwrap();
    }
    emu.surprise_remove();
    let done = collect(q.as_mut(), 4);
    for c in &done {
        let e = c.result.as_ref().unwrap_err();
        assert!(
            matches!(e, BlockError::Failed(m) if m.contains("not responding")),
            "{e}"
        );
    }
    assert!(ns.check().is_err());
}

#[test]
fn hostile_completions_fail_the_controller_not_the_process() {
    for how in [
        Corruption::UnknownCid,
        Corruption::WrongSqId,
        Corruption::BadSqHead,
        Corruption::Duplicate,
    ] {
        let (emu, ctrl) = setup(EmuConfig::default(), quick());
        let ns = ctrl.namespace(1).unwrap();
        let mut q = ns.open_queue().unwrap();
        q.submit_read(1, 0, q.alloc_buf(4096).unwrap()).unwrap();
        let _ = collect(q.as_mut(), 1);
        emu.inject(Fault::Corrupt { opcode: None, how });
        q.submit_read(2, 0, q.alloc_buf(4096).unwrap()).unwrap();
        q.submit_read(3, 4096, q.alloc_buf(4096).unwrap()).unwrap();
        let done = collect(q.as_mut(), 2);
        assert!(
            done.iter()
                .any(|c| matches!(&c.result, Err(BlockError::Failed(m)) if m.contains("protocol violation"))),
            "{how:?}: {done:?}"
        );
        assert!(ctrl.failed().is_some(), "{how:?}");
        assert!(ns.check().is_err());
    }
}

#[test]
fn completion_with_a_stale_phase_is_never_consumed() {
    // An entry written with the previous pass's phase tag looks old: the driver
    // must not take it as a completion, and must not hang: the command times
    // out, the abort finds nothing, and the I/O fails as lost.
    let (emu, ctrl) = setup(EmuConfig::default(), quick());
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    emu.inject(Fault::Corrupt {
        opcode: None,
        how: Corruption::WrongPhase,
    });
    q.submit_read(1, 0, q.alloc_buf(4096).unwrap()).unwrap();
    let c = collect(q.as_mut(), 1).pop().unwrap();
    let e = c.result.unwrap_err();
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(c.buf.is_none(), "the device may still write it");
}

#[test]
fn trim_and_write_zeroes() {
    for write_zeroes in [true, false] {
        let (emu, ctrl) = setup(
            EmuConfig {
                write_zeroes,
                mdts: 4, // 64 KiB: the fallback needs several writes
                ..EmuConfig::default()
            },
            DriverConfig::default(),
        );
        let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
        let d = pattern(11, 1 << 20);
        assert!(write(q.as_mut(), 0, &d, false).result.is_ok());
        q.submit_trim(1, 0, 64 << 10).unwrap();
        let c = collect(q.as_mut(), 1).pop().unwrap();
        assert_eq!((c.kind, c.result.unwrap()), (IoKind::Trim, 0));
        assert_eq!(read(q.as_mut(), 0, 64 << 10), vec![0; 64 << 10]);
        q.submit_write_zeroes(2, 512 << 10, 256 << 10).unwrap();
        let c = collect(q.as_mut(), 1).pop().unwrap();
        assert_eq!(c.kind, IoKind::WriteZeroes);
        assert!(c.result.is_ok());
        let back = read(q.as_mut(), 0, 1 << 20);
        assert_eq!(&back[64 << 10..512 << 10], &d[64 << 10..512 << 10]);
        assert!(back[512 << 10..768 << 10].iter().all(|&x| x == 0));
        assert_eq!(&back[768 << 10..], &d[768 << 10..]);
        let s = emu.stats();
        assert_eq!(s.dataset_management, 1);
        if write_zeroes {
            assert_eq!(s.write_zeroes, 1);
        } else {
            assert_eq!(s.write_zeroes, 0);
            assert_eq!(
                s.writes,
                16 + 4,
                "1 MiB in 64 KiB pieces, then 256 KiB of zeroes"
            );
        }
    }
}

#[test]
fn foreign_buffers_bounce_pool_buffers_do_not() {
    let (_emu, ctrl) = setup(EmuConfig::default(), DriverConfig::default());
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ns.open_queue().unwrap();
    // A heap buffer works (copied through a pool buffer) and comes back as is.
    let mut heap = DmaBuf::zeroed(8192).unwrap();
    heap.as_mut_slice().copy_from_slice(&pattern(21, 8192));
    q.submit_write(1, 0, heap, false).unwrap();
    let c = collect(q.as_mut(), 1).pop().unwrap();
    assert!(!c.buf.unwrap().is_pooled());
    assert_eq!(ctrl.bounced_buffers(), 1);
    q.submit_read(2, 0, DmaBuf::zeroed(8192).unwrap()).unwrap();
    let c = collect(q.as_mut(), 1).pop().unwrap();
    let b = c.buf.unwrap();
    assert!(!b.is_pooled());
    assert_eq!(b.as_slice(), &pattern(21, 8192)[..]);
    // Pool buffers (from the queue or the device) are used in place.
    let pb = q.alloc_buf(8192).unwrap();
    assert!(pb.is_pooled());
    q.submit_read(3, 0, pb).unwrap();
    let c = collect(q.as_mut(), 1).pop().unwrap();
    let b = c.buf.unwrap();
    assert!(b.is_pooled());
    assert_eq!(b.as_slice(), &pattern(21, 8192)[..]);
    let db = ns.alloc_buf(4096).unwrap();
    assert!(db.is_pooled());
    // Another controller's pool buffer is foreign here: bounced, still correct.
    let (_e2, other) = setup(EmuConfig::default(), DriverConfig::default());
    let ob = other.namespace(1).unwrap().alloc_buf(8192).unwrap();
    q.submit_read(4, 0, ob).unwrap();
    let c = collect(q.as_mut(), 1).pop().unwrap();
    assert_eq!(c.buf.unwrap().as_slice(), &pattern(21, 8192)[..]);
}

#[test]
fn queue_ids_are_limited_and_recycled() {
    let (emu, ctrl) = setup(
        EmuConfig {
            max_io_queues: 2,
            ..EmuConfig::default()
        },
        DriverConfig::default(),
    );
    let ns = ctrl.namespace(1).unwrap();
    let a = ns.open_nvme_queue().unwrap();
    let b = ns.open_nvme_queue().unwrap();
    assert_ne!(a.qid(), b.qid());
    let e = ns.open_nvme_queue().unwrap_err();
    assert!(matches!(e, NvmeError::NoQueue(..)), "{e}");
    let qid = a.qid();
    drop(a); // deletes SQ and CQ
    let c = ns.open_nvme_queue().unwrap();
    assert_eq!(c.qid(), qid);
    assert_eq!(emu.stats().queues_created, 3);
}

#[test]
fn queue_pairs_on_threads_share_nothing() {
    let (emu, ctrl) = setup(
        EmuConfig {
            namespaces: vec![EmuNamespace::bytes(12, 32 << 20)],
            ..EmuConfig::default()
        },
        DriverConfig::default(),
    );
    let ns = ctrl.namespace(1).unwrap();
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let mut q = ns.open_queue().unwrap();
            std::thread::spawn(move || {
                let base = t * (8 << 20);
                for i in 0..64u64 {
                    let d = pattern(t * 1000 + i, 16384);
                    assert!(write(q.as_mut(), base + i * 16384, &d, false)
                        .result
                        .is_ok());
                }
                for i in (0..64u64).rev() {
                    assert_eq!(
                        read(q.as_mut(), base + i * 16384, 16384),
                        pattern(t * 1000 + i, 16384)
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s: EmuStats = emu.stats();
    assert_eq!((s.writes, s.reads), (192, 192));
}

#[test]
fn controller_reset_on_reopen_and_clean_shutdown() {
    let emu = Arc::new(EmulatedController::new(EmuConfig::default()));
    {
        let ctrl = NvmeController::new(emu.clone(), DriverConfig::default()).unwrap();
        let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
        assert!(write(q.as_mut(), 0, &pattern(1, 4096), true).result.is_ok());
    }
    // A second driver instance resets the (enabled, shut down) controller and
    // sees the data.
    let ctrl = NvmeController::new(emu.clone(), DriverConfig::default()).unwrap();
    let mut q = ctrl.namespace(1).unwrap().open_queue().unwrap();
    assert_eq!(read(q.as_mut(), 0, 4096), pattern(1, 4096));
}

fn params() -> cairn_chunkstore::FormatParams {
    cairn_chunkstore::FormatParams {
        drive_uuid: [7; 16],
        node_id: [1; 16],
        cluster_id: [2; 16],
        drive_index: 0,
        segment_size: 1 << 20,
    }
}

#[test]
fn chunk_store_on_the_emulated_controller() {
    use cairn_chunkstore::{ChunkStore, WriteOp};
    use cairn_types::ChunkId;
    for lba_shift in [12u8, 9] {
        let emu = Arc::new(EmulatedController::new(EmuConfig {
            namespaces: vec![EmuNamespace::bytes(lba_shift, 16 << 20)],
            mdts: 5,
            ..EmuConfig::default()
        }));
        let payloads: Vec<Vec<u8>> = (0..40u64)
            .map(|n| pattern(n, 1000 + n as usize * 5000))
            .collect();
        {
            let ctrl = NvmeController::new(emu.clone(), DriverConfig::default()).unwrap();
            let ns = ctrl.namespace(1).unwrap();
            let mut s = ChunkStore::format(&ns, &params()).unwrap();
            let ops: Vec<WriteOp> = payloads
                .iter()
                .enumerate()
                .map(|(n, p)| WriteOp::Put {
                    id: ChunkId::from_u128(n as u128),
                    tenant: 1,
                    key_id: 0,
                    payload: p,
                    durable: true,
                })
                .collect();
            for r in s.write_batch(&ops) {
                r.unwrap();
            }
            s.write_batch(&[WriteOp::Delete {
                id: ChunkId::from_u128(3),
                tenant: 1,
            }])[0]
                .as_ref()
                .unwrap();
            assert_eq!(s.get(ChunkId::from_u128(5), 1).unwrap(), payloads[5]);
            s.close().unwrap();
        }
        // Reopen on a fresh driver instance (controller reset): rebuilt index.
        let ctrl = NvmeController::new(emu.clone(), DriverConfig::default()).unwrap();
        let ns = ctrl.namespace(1).unwrap();
        let mut s = ChunkStore::open(&ns).unwrap();
        for (n, p) in payloads.iter().enumerate() {
            let got = s.get(ChunkId::from_u128(n as u128), 1);
            if n == 3 {
                assert!(got.is_err(), "deleted chunk");
            } else {
                assert_eq!(
                    &got.unwrap()[..],
                    &p[..],
                    "chunk {n} (LBA shift {lba_shift})"
                );
            }
        }
        let st = emu.stats();
        assert!(st.fua_writes > 0, "batches are FUA writes");
        assert!(st.writes > 0 && st.reads > 0);
        // The store allocates from the device: no buffer was copied on the way.
        assert_eq!(ctrl.bounced_buffers(), 0);
    }
}

#[test]
fn chunk_store_marks_itself_failed_on_fatal_status() {
    use cairn_chunkstore::{ChunkStore, WriteOp};
    use cairn_types::ChunkId;
    let (emu, ctrl) = setup(
        EmuConfig {
            namespaces: vec![EmuNamespace::bytes(12, 16 << 20)],
            ..EmuConfig::default()
        },
        quick(),
    );
    let ns = ctrl.namespace(1).unwrap();
    let mut s = ChunkStore::format(&ns, &params()).unwrap();
    emu.inject(Fault::FatalOnNextIo);
    let r = s.write_batch(&[WriteOp::Put {
        id: ChunkId::from_u128(1),
        tenant: 1,
        key_id: 0,
        payload: b"x",
        durable: true,
    }]);
    assert!(r[0].is_err());
    assert!(s.failed().is_some());
    let e = ns.check().unwrap_err();
    assert!(matches!(e, BlockError::Failed(_)), "{e}");
}

/// Registers that read garbage (a broken or hostile function); DMA memory from an
/// emulator so allocation works.
#[derive(Debug)]
struct GarbageRegisters {
    seed: std::sync::Mutex<u64>,
    mem: Arc<EmulatedController>,
    fixed: Option<u32>,
}

impl cairn_nvme::DeviceAccess for GarbageRegisters {
    fn name(&self) -> &str {
        "garbage"
    }
    fn bar0_len(&self) -> usize {
        0x2000
    }
    fn read32(&self, _off: usize) -> u32 {
        if let Some(v) = self.fixed {
            return v;
        }
        let mut x = self.seed.lock().unwrap();
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x as u32
    }
    fn write32(&self, _off: usize, _val: u32) {}
    fn dma_domain(&self) -> cairn_blockdev::DmaDomain {
        self.mem.dma_domain()
    }
    fn alloc_dma(&self, len: usize) -> cairn_nvme::Result<cairn_nvme::hw::DmaRegion> {
        self.mem.alloc_dma(len)
    }
}

#[test]
fn garbage_registers_give_errors_not_panics() {
    use cairn_nvme::DeviceAccess;
    let mem = Arc::new(EmulatedController::new(EmuConfig::default()));
    let cfg = DriverConfig {
        admin_timeout: Duration::from_millis(20),
        ..DriverConfig::default()
    };
    let dev = |fixed, seed| -> Arc<dyn DeviceAccess> {
        Arc::new(GarbageRegisters {
            seed: std::sync::Mutex::new(seed),
            mem: mem.clone(),
            fixed,
        })
    };
    let e = NvmeController::new(dev(Some(u32::MAX), 1), cfg.clone()).unwrap_err();
    assert!(e.to_string().contains("not responding"), "{e}");
    let e = NvmeController::new(dev(Some(0), 1), cfg.clone()).unwrap_err();
    assert!(e.to_string().contains("unsupported"), "{e}");
    let t = Instant::now();
    for seed in 1..200u64 {
        assert!(NvmeController::new(dev(None, seed * 7919), cfg.clone()).is_err());
    }
    assert!(t.elapsed() < Duration::from_secs(60));
}
