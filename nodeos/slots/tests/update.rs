//! Update bundles applied to a fake ESP and a partition stand-in: what is verified, what is
//! armed, and that a failure at any step arms nothing.

use cairn_slots::bundle::{write_bundle, UpdateTarget};
use cairn_slots::esp::{FALLBACK_KEY, PREFERRED_KEY};
use cairn_slots::{apply_update, Bundle, Esp, PartitionPath, Slot, SlotDevice, SlotError};
use indicatif::ProgressBar;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

struct Node {
    dir: tempfile::TempDir,
    esp: Esp,
    part_b: PathBuf,
}

const PART_SIZE: u64 = 256 << 10;

/// A node booted from slot a (good, preferred), with slot b's partition zeroed.
fn node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let e = dir.path().join("efi");
    fs::create_dir_all(e.join("loader/entries")).unwrap();
    fs::create_dir_all(e.join("cairn/a")).unwrap();
    fs::write(
        e.join("loader/loader.conf"),
        "timeout 0\ndefault cairn-a*\n",
    )
    .unwrap();
    fs::write(
        e.join("loader/entries/cairn-a.conf"),
        format!(
            "title Cairn 1.0 (slot a)\nversion 1.0\nsort-key {PREFERRED_KEY}\n\
             linux /cairn/a/vmlinuz\ninitrd /cairn/a/initrd.img\n\
             options root=PARTLABEL=cairn-a cairn.slot=a console=ttyS0 quiet\n"
        ),
    )
    .unwrap();
    for f in ["vmlinuz", "initrd.img"] {
        fs::write(e.join("cairn/a").join(f), b"old").unwrap();
    }
    fs::write(e.join("cairn/a/version"), "1.0\n").unwrap();
    let part_b = dir.path().join("cairn-b.part");
    fs::write(&part_b, vec![0u8; PART_SIZE as usize]).unwrap();
    Node {
        esp: Esp::new(&e),
        dir,
        part_b,
    }
}

/// Bytes that differ at every position, so a misplaced or missing block changes the hash.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1] ^ seed)
        .collect()
}

fn make_bundle(n: &Node, version: &str, root_len: usize) -> (PathBuf, Vec<u8>) {
    let d = n.dir.path();
    let root = pattern(root_len, 7);
    fs::write(d.join("root.erofs"), &root).unwrap();
    fs::write(d.join("vmlinuz"), pattern(3000, 1)).unwrap();
    fs::write(d.join("initrd.img"), pattern(5000, 2)).unwrap();
    let out = d.join(format!("cairn-{version}.update"));
    write_bundle(
        &out,
        version,
        None,
        &d.join("root.erofs"),
        &d.join("vmlinuz"),
        &d.join("initrd.img"),
    )
    .unwrap();
    (out, root)
}

fn hidden() -> ProgressBar {
    ProgressBar::hidden()
}

fn target<'a>(n: &'a Node, dev: &'a dyn SlotDevice) -> UpdateTarget<'a> {
    UpdateTarget {
        esp: &n.esp,
        booted: Slot::A,
        partition: dev,
    }
}

#[test]
fn an_update_writes_the_inactive_slot_and_arms_it_with_three_tries() {
    let n = node();
    let (bundle, root) = make_bundle(&n, "2.0", 100_000);
    let b = Bundle::open(&bundle, &hidden()).unwrap();
    assert_eq!(b.manifest.version, "2.0");
    let dev = PartitionPath(n.part_b.clone());
    let r = apply_update(&b, target(&n, &dev), &hidden()).unwrap();
    assert_eq!(r.slot, Slot::B);
    assert_eq!(r.entry, "cairn-b+3.conf");
    assert_eq!(r.root_bytes, root.len() as u64);

    let part = fs::read(&n.part_b).unwrap();
    assert_eq!(part.len() as u64, PART_SIZE, "the partition keeps its size");
    assert_eq!(&part[..root.len()], &root[..]);
    let e = n.esp.root();
    assert_eq!(
        fs::read(e.join("cairn/b/vmlinuz")).unwrap(),
        pattern(3000, 1)
    );
    assert_eq!(
        fs::read(e.join("cairn/b/initrd.img")).unwrap(),
        pattern(5000, 2)
    );
    assert_eq!(
        fs::read_to_string(e.join("cairn/b/version")).unwrap(),
        "2.0\n"
    );

    let entry = fs::read_to_string(e.join("loader/entries/cairn-b+3.conf")).unwrap();
    assert!(
        entry.contains(&format!("sort-key {PREFERRED_KEY}")),
        "{entry}"
    );
    assert!(entry.contains("linux /cairn/b/vmlinuz"), "{entry}");
    let opts = entry.lines().find(|l| l.starts_with("options ")).unwrap();
    assert_eq!(
        opts,
        "options root=PARTLABEL=cairn-b cairn.slot=b console=ttyS0 quiet"
    );
    let a = fs::read_to_string(e.join("loader/entries/cairn-a.conf")).unwrap();
    assert!(a.contains(&format!("sort-key {FALLBACK_KEY}")), "{a}");
    assert_eq!(n.esp.default_pattern().unwrap().as_deref(), Some("cairn-*"));
    assert_eq!(n.esp.next_boot().unwrap(), Some(Slot::B));
    let info = n.esp.slot_info(Slot::B).unwrap();
    assert_eq!(info.version.as_deref(), Some("2.0"));
    assert_eq!(info.state.unwrap().to_string(), "trying 3 left, 0 failed");
}

#[test]
fn a_manifest_cmdline_replaces_the_carried_over_options() {
    let n = node();
    let d = n.dir.path();
    for (f, len) in [("root.erofs", 4096), ("vmlinuz", 10), ("initrd.img", 10)] {
        fs::write(d.join(f), pattern(len, 3)).unwrap();
    }
    let out = d.join("x.update");
    write_bundle(
        &out,
        "3.0",
        Some("console=tty0 root=/dev/evil"),
        &d.join("root.erofs"),
        &d.join("vmlinuz"),
        &d.join("initrd.img"),
    )
    .unwrap();
    let b = Bundle::open(&out, &hidden()).unwrap();
    let dev = PartitionPath(n.part_b.clone());
    apply_update(&b, target(&n, &dev), &hidden()).unwrap();
    let entry = fs::read_to_string(n.esp.root().join("loader/entries/cairn-b+3.conf")).unwrap();
    assert!(
        entry.contains("options root=PARTLABEL=cairn-b cairn.slot=b console=tty0\n"),
        "the bundle cannot move root elsewhere: {entry}"
    );
}

/// Offset of `needle` in the file (a member's data inside the tar).
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("member data in tar")
}

#[test]
fn a_corrupted_member_is_refused_and_nothing_is_touched() {
    let n = node();
    // Slot b has an older entry: a refused bundle must not even disarm it.
    fs::create_dir_all(n.esp.slot_dir(Slot::B)).unwrap();
    for f in ["vmlinuz", "initrd.img"] {
        fs::write(n.esp.slot_dir(Slot::B).join(f), b"b").unwrap();
    }
    fs::write(
        n.esp.root().join("loader/entries/cairn-b.conf"),
        format!("sort-key {FALLBACK_KEY}\nlinux /cairn/b/vmlinuz\n"),
    )
    .unwrap();
    let (bundle, root) = make_bundle(&n, "2.0", 50_000);
    let mut tar = fs::read(&bundle).unwrap();
    let at = find(&tar, &root[..64]) + 20_000;
    tar[at] ^= 0x01;
    fs::write(&bundle, &tar).unwrap();

    let before_esp = snapshot(n.esp.root());
    let before_part = fs::read(&n.part_b).unwrap();
    let e = Bundle::open(&bundle, &hidden()).unwrap_err();
    assert!(matches!(e, SlotError::Verify { .. }), "{e}");
    assert!(e.to_string().contains("root.erofs"), "{e}");
    assert_eq!(snapshot(n.esp.root()), before_esp);
    assert_eq!(fs::read(&n.part_b).unwrap(), before_part);
    assert_eq!(n.esp.next_boot().unwrap(), Some(Slot::A));
}

#[test]
fn malformed_bundles_are_refused_with_the_reason() {
    let n = node();
    let d = n.dir.path();
    // The cases below copy this good bundle and its member files.
    make_bundle(&n, "2.0", 1000);

    type MakeBad = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, MakeBad)> = vec![
        (
            "not a readable tar",
            Box::new(|p: &Path| fs::write(p, pattern(10_000, 9)).unwrap()),
        ),
        (
            "no manifest.json",
            Box::new(|p: &Path| {
                let mut b = tar::Builder::new(File::create(p).unwrap());
                for f in ["root.erofs", "vmlinuz", "initrd.img"] {
                    b.append_path_with_name(p.parent().unwrap().join(f), f)
                        .unwrap();
                }
                b.finish().unwrap();
            }),
        ),
        (
            "unexpected member extra.sh",
            Box::new(|p: &Path| {
                fs::copy(p.parent().unwrap().join("cairn-2.0.update"), p).unwrap();
                append_member(p, "extra.sh", b"#!/bin/sh\n");
            }),
        ),
        (
            "member vmlinuz appears twice",
            Box::new(|p: &Path| {
                fs::copy(p.parent().unwrap().join("cairn-2.0.update"), p).unwrap();
                append_member(p, "vmlinuz", b"again");
            }),
        ),
        (
            "unexpected member sub/vmlinuz",
            Box::new(|p: &Path| {
                let mut b = tar::Builder::new(File::create(p).unwrap());
                b.append_path_with_name(p.parent().unwrap().join("vmlinuz"), "sub/vmlinuz")
                    .unwrap();
                b.finish().unwrap();
            }),
        ),
        (
            "format 9 is not supported",
            Box::new(|p: &Path| {
                let mut b = tar::Builder::new(File::create(p).unwrap());
                let m = br#"{"format":9,"version":"1","files":{}}"#;
                let mut h = tar::Header::new_gnu();
                h.set_size(m.len() as u64);
                h.set_cksum();
                b.append_data(&mut h, "manifest.json", &m[..]).unwrap();
                b.finish().unwrap();
            }),
        ),
    ];
    for (want, make) in cases {
        let p = d.join("bad.update");
        let _ = fs::remove_file(&p);
        make(&p);
        let e = Bundle::open(&p, &hidden()).unwrap_err().to_string();
        assert!(e.contains(want), "want `{want}` in: {e}");
        assert!(e.contains("bad.update"), "names the file: {e}");
    }
}

/// Append a member after the end-of-archive blocks were stripped, as `tar -r` does.
fn append_member(p: &Path, name: &str, data: &[u8]) {
    let bytes = fs::read(p).unwrap();
    // Strip the two trailing zero blocks (and any padding zeros after the last member).
    let mut end = bytes.len();
    while end >= 512 && bytes[end - 512..end].iter().all(|b| *b == 0) {
        end -= 512;
    }
    let f = OpenOptions::new().write(true).open(p).unwrap();
    f.set_len(end as u64).unwrap();
    let mut f = f;
    f.seek(SeekFrom::End(0)).unwrap();
    let mut b = tar::Builder::new(f);
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_cksum();
    b.append_data(&mut h, name, data).unwrap();
    b.finish().unwrap();
}

/// A partition that loses writes: they land in one file, reads come from another.
struct LossyPartition {
    write: PathBuf,
    read: PathBuf,
}

impl SlotDevice for LossyPartition {
    fn describe(&self) -> String {
        "lossy".into()
    }
    fn open_write(&self) -> Result<File, SlotError> {
        Ok(OpenOptions::new().write(true).open(&self.write).unwrap())
    }
    fn open_read(&self) -> Result<File, SlotError> {
        Ok(File::open(&self.read).unwrap())
    }
}

#[test]
fn a_failed_read_back_arms_nothing() {
    let n = node();
    // Slot b had an older entry; the update disarms it before writing the partition,
    // and a failed verification must not bring it (or a new one) back.
    fs::write(
        n.esp.root().join("loader/entries/cairn-b.conf"),
        format!("sort-key {FALLBACK_KEY}\nlinux /cairn/b/vmlinuz\n"),
    )
    .unwrap();
    let (bundle, _) = make_bundle(&n, "2.0", 60_000);
    let b = Bundle::open(&bundle, &hidden()).unwrap();
    let stale = n.dir.path().join("stale.part");
    fs::write(&stale, vec![0x55u8; PART_SIZE as usize]).unwrap();
    let dev = LossyPartition {
        write: n.part_b.clone(),
        read: stale,
    };
    let e = apply_update(&b, target(&n, &dev), &hidden()).unwrap_err();
    assert!(matches!(e, SlotError::Verify { .. }), "{e}");
    assert!(e.to_string().contains("read back"), "{e}");
    assert!(n.esp.entry(Slot::B).unwrap().is_none(), "no entry for b");
    assert!(!n.esp.slot_dir(Slot::B).join("vmlinuz").exists());
    assert_eq!(n.esp.next_boot().unwrap(), Some(Slot::A));
    let a = fs::read_to_string(n.esp.root().join("loader/entries/cairn-a.conf")).unwrap();
    assert!(a.contains(&format!("sort-key {PREFERRED_KEY}")), "{a}");
}

#[test]
fn a_root_larger_than_the_partition_is_refused_before_anything_changes() {
    let n = node();
    let (bundle, _) = make_bundle(&n, "2.0", PART_SIZE as usize + 1);
    let b = Bundle::open(&bundle, &hidden()).unwrap();
    let before = snapshot(n.esp.root());
    let dev = PartitionPath(n.part_b.clone());
    let e = apply_update(&b, target(&n, &dev), &hidden()).unwrap_err();
    assert!(matches!(e, SlotError::TooLarge { .. }), "{e}");
    assert_eq!(snapshot(n.esp.root()), before);
    assert!(fs::read(&n.part_b).unwrap().iter().all(|b| *b == 0));
}

#[test]
fn a_bundle_changed_after_it_was_verified_arms_nothing() {
    let n = node();
    let (bundle, root) = make_bundle(&n, "2.0", 40_000);
    let b = Bundle::open(&bundle, &hidden()).unwrap();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&bundle)
        .unwrap();
    let mut all = Vec::new();
    f.read_to_end(&mut all).unwrap();
    let at = find(&all, &root[..64]) + 100;
    f.seek(SeekFrom::Start(at as u64)).unwrap();
    f.write_all(&[all[at] ^ 0xff]).unwrap();
    drop(f);
    let dev = PartitionPath(n.part_b.clone());
    let e = apply_update(&b, target(&n, &dev), &hidden()).unwrap_err();
    assert!(e.to_string().contains("changed while being written"), "{e}");
    assert!(n.esp.entry(Slot::B).unwrap().is_none());
    assert_eq!(n.esp.next_boot().unwrap(), Some(Slot::A));
}

#[test]
fn updating_again_replaces_a_bad_entry_of_the_slot() {
    let n = node();
    fs::write(
        n.esp.root().join("loader/entries/cairn-b+0-3.conf"),
        format!("sort-key {PREFERRED_KEY}\nlinux /cairn/b/vmlinuz\n"),
    )
    .unwrap();
    let (bundle, _) = make_bundle(&n, "2.1", 1000);
    let b = Bundle::open(&bundle, &hidden()).unwrap();
    let dev = PartitionPath(n.part_b.clone());
    apply_update(&b, target(&n, &dev), &hidden()).unwrap();
    let names: Vec<String> = n
        .esp
        .entries()
        .unwrap()
        .into_iter()
        .filter(|e| e.slot == Slot::B)
        .map(|e| e.file_name)
        .collect();
    assert_eq!(names, vec!["cairn-b+3.conf"]);
    assert_eq!(n.esp.next_boot().unwrap(), Some(Slot::B));
}

fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.push((rel, fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}
