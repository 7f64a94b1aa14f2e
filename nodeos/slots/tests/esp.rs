//! Boot entries on a fake ESP: what systemd-boot would boot, rollback, blessing.

use cairn_slots::esp::{FALLBACK_KEY, PREFERRED_KEY};
use cairn_slots::{BootState, Esp, Slot, SlotError};
use std::fs;
use std::path::Path;

fn entry(esp: &Path, name: &str, slot: char, key: &str) {
    fs::write(
        esp.join("loader/entries").join(name),
        format!(
            "title Cairn\nversion 1.0\nsort-key {key}\nlinux /cairn/{slot}/vmlinuz\n\
             initrd /cairn/{slot}/initrd.img\n\
             options root=PARTLABEL=cairn-{slot} cairn.slot={slot} console=ttyS0\n"
        ),
    )
    .unwrap();
}

fn esp() -> (tempfile::TempDir, Esp) {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir_all(d.path().join("loader/entries")).unwrap();
    fs::write(
        d.path().join("loader/loader.conf"),
        "timeout 0\ndefault cairn-*\n",
    )
    .unwrap();
    let e = Esp::new(d.path());
    (d, e)
}

fn rename(esp: &Path, from: &str, to: &str) {
    let dir = esp.join("loader/entries");
    fs::rename(dir.join(from), dir.join(to)).unwrap();
}

#[test]
fn the_preferred_slot_boots_until_it_runs_out_of_tries() {
    let (d, esp) = esp();
    entry(d.path(), "cairn-a.conf", 'a', FALLBACK_KEY);
    entry(d.path(), "cairn-b+3.conf", 'b', PREFERRED_KEY);
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::B));
    // systemd-boot counts the tries down by renaming before each boot.
    rename(d.path(), "cairn-b+3.conf", "cairn-b+2-1.conf");
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::B));
    assert_eq!(
        esp.slot_info(Slot::B).unwrap().state,
        Some(BootState::Trying { left: 2, failed: 1 })
    );
    rename(d.path(), "cairn-b+2-1.conf", "cairn-b+0-3.conf");
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::A));
    assert_eq!(
        esp.slot_info(Slot::B).unwrap().state,
        Some(BootState::Bad { failed: 3 })
    );
}

#[test]
fn a_default_naming_one_slot_would_keep_booting_it_when_bad() {
    // Why loader.conf says `default cairn-*`: systemd-boot matches `default` against bad
    // entries too. The emulation must show it, or next_boot would lie on such an ESP.
    let (d, esp) = esp();
    fs::write(d.path().join("loader/loader.conf"), "default cairn-b*\n").unwrap();
    entry(d.path(), "cairn-a.conf", 'a', FALLBACK_KEY);
    entry(d.path(), "cairn-b+0-3.conf", 'b', PREFERRED_KEY);
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::B));
    // Preferring a slot rewrites the pattern, and then the bad entry no longer boots.
    esp.prefer(Slot::A).unwrap();
    assert_eq!(esp.default_pattern().unwrap().as_deref(), Some("cairn-*"));
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::A));
    let conf = fs::read_to_string(d.path().join("loader/loader.conf")).unwrap();
    assert_eq!(conf.matches("default").count(), 1, "{conf}");
}

#[test]
fn without_sort_keys_the_higher_id_wins() {
    let (d, esp) = esp();
    for (n, s) in [("cairn-a.conf", 'a'), ("cairn-b.conf", 'b')] {
        fs::write(
            d.path().join("loader/entries").join(n),
            format!("linux /cairn/{s}/vmlinuz\n"),
        )
        .unwrap();
    }
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::B));
    // An entry with a sort key comes before one without.
    entry(d.path(), "cairn-a.conf", 'a', PREFERRED_KEY);
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::A));
}

#[test]
fn rollback_points_at_the_other_slot() {
    let (d, esp) = esp();
    entry(d.path(), "cairn-a.conf", 'a', FALLBACK_KEY);
    entry(d.path(), "cairn-b.conf", 'b', PREFERRED_KEY);
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::B));
    assert_eq!(esp.rollback(Slot::B).unwrap(), Slot::A);
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::A));
    let b = fs::read_to_string(d.path().join("loader/entries/cairn-b.conf")).unwrap();
    assert!(b.contains(&format!("sort-key {FALLBACK_KEY}")), "{b}");
    assert!(
        b.contains("options root=PARTLABEL=cairn-b"),
        "kept the rest: {b}"
    );
}

#[test]
fn rollback_refuses_a_bad_slot_and_changes_nothing() {
    let (d, esp) = esp();
    entry(d.path(), "cairn-a+0-3.conf", 'a', FALLBACK_KEY);
    entry(d.path(), "cairn-b.conf", 'b', PREFERRED_KEY);
    let before = snapshot(d.path());
    let e = esp.rollback(Slot::B).unwrap_err();
    assert!(matches!(e, SlotError::Esp { .. }), "{e}");
    assert!(e.to_string().contains("slot a is bad"), "{e}");
    assert_eq!(snapshot(d.path()), before);
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::B));
}

#[test]
fn rollback_refuses_a_slot_without_entry() {
    let (d, esp) = esp();
    entry(d.path(), "cairn-a.conf", 'a', PREFERRED_KEY);
    let e = esp.rollback(Slot::A).unwrap_err();
    assert!(e.to_string().contains("slot b has no boot entry"), "{e}");
}

#[test]
fn mark_good_drops_the_counter() {
    let (d, esp) = esp();
    entry(d.path(), "cairn-b+2-1.conf", 'b', PREFERRED_KEY);
    assert!(esp.mark_good(Slot::B).unwrap());
    assert!(d.path().join("loader/entries/cairn-b.conf").is_file());
    assert!(!d.path().join("loader/entries/cairn-b+2-1.conf").exists());
    assert_eq!(esp.slot_info(Slot::B).unwrap().state, Some(BootState::Good));
    assert!(!esp.mark_good(Slot::B).unwrap());
    assert!(esp.mark_good(Slot::A).is_err());
}

#[test]
fn slot_info_reads_the_version_file_first() {
    let (d, esp) = esp();
    entry(d.path(), "cairn-a.conf", 'a', PREFERRED_KEY);
    let info = esp.slot_info(Slot::A).unwrap();
    assert_eq!(info.version.as_deref(), Some("1.0"));
    fs::create_dir_all(esp.slot_dir(Slot::A)).unwrap();
    fs::write(esp.slot_dir(Slot::A).join("version"), "2.5.0\n").unwrap();
    let info = esp.slot_info(Slot::A).unwrap();
    assert_eq!(info.version.as_deref(), Some("2.5.0"));
    assert_eq!(info.entry.as_deref(), Some("cairn-a.conf"));
    let none = esp.slot_info(Slot::B).unwrap();
    assert_eq!((none.entry, none.state, none.version), (None, None, None));
}

#[test]
fn garbage_on_the_esp_is_ignored_or_reported_not_fatal() {
    let (d, esp) = esp();
    let dir = d.path().join("loader/entries");
    fs::write(dir.join("cairn-a.conf"), [0xff, 0xfe, 0x00, b'\n', 0x80]).unwrap();
    fs::write(dir.join("cairn-z.conf"), "linux /x\n").unwrap();
    fs::write(dir.join("other.conf"), "linux /x\n").unwrap();
    fs::create_dir(dir.join("cairn-b.conf")).unwrap();
    // A directory named like an entry cannot be read as one: an error, never a panic.
    assert!(esp.entries().is_err());
    fs::remove_dir(dir.join("cairn-b.conf")).unwrap();
    let e = esp.entries().unwrap();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].sort_key, None);
    assert_eq!(esp.next_boot().unwrap(), Some(Slot::A));
}

#[test]
fn a_missing_esp_is_named() {
    let d = tempfile::tempdir().unwrap();
    let esp = Esp::new(d.path().join("efi"));
    let e = esp.next_boot().unwrap_err().to_string();
    assert!(e.contains("is the ESP mounted"), "{e}");
}

/// Every file under `root` with its contents, for "nothing changed" assertions.
pub fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
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
