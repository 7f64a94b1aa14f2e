//! Flashing onto fake disks: a sysfs tree, mountinfo and swaps in a temp dir, and a regular
//! file standing in for the device node.

use cairn_slots::flash::check_target;
use cairn_slots::{flash, HostPaths, SlotError};
use indicatif::ProgressBar;
use sha2::{Digest, Sha256};
use std::fs;
use std::path::Path;

struct Host {
    dir: tempfile::TempDir,
    paths: HostPaths,
}

fn host() -> Host {
    let dir = tempfile::tempdir().unwrap();
    let paths = HostPaths::under(dir.path());
    fs::create_dir_all(paths.sys.join("block")).unwrap();
    fs::create_dir_all(&paths.dev).unwrap();
    fs::create_dir_all(paths.mountinfo.parent().unwrap()).unwrap();
    fs::write(&paths.mountinfo, "").unwrap();
    fs::write(&paths.swaps, "Filename\tType\tSize\tUsed\tPriority\n").unwrap();
    Host { dir, paths }
}

impl Host {
    /// A disk in sysfs and its device node (a 64 KiB file), with partitions
    /// `(name, minor, partlabel)`.
    fn disk(&self, name: &str, major: u32, parts: &[(&str, u32, Option<&str>)]) {
        let d = self.paths.sys.join("block").join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("dev"), format!("{major}:0\n")).unwrap();
        fs::write(d.join("size"), "128\n").unwrap();
        for (p, minor, label) in parts {
            let pd = d.join(p);
            fs::create_dir_all(&pd).unwrap();
            fs::write(pd.join("partition"), "1\n").unwrap();
            fs::write(pd.join("dev"), format!("{major}:{minor}\n")).unwrap();
            let mut ue = format!("DEVNAME={p}\nDEVTYPE=partition\n");
            if let Some(l) = label {
                ue.push_str(&format!("PARTNAME={l}\n"));
            }
            fs::write(pd.join("uevent"), ue).unwrap();
        }
        fs::write(self.paths.dev.join(name), vec![0u8; 64 << 10]).unwrap();
    }

    fn mount(&self, major: u32, minor: u32, at: &str) {
        let mut t = fs::read_to_string(&self.paths.mountinfo).unwrap();
        t.push_str(&format!(
            "{} 1 {major}:{minor} / {at} rw,relatime shared:1 - ext4 /dev/x rw\n",
            30 + t.lines().count()
        ));
        fs::write(&self.paths.mountinfo, t).unwrap();
    }

    fn image(&self, len: usize) -> (std::path::PathBuf, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        let p = self.dir.path().join("cairn.img");
        fs::write(&p, &data).unwrap();
        (p, data)
    }
}

fn hidden() -> ProgressBar {
    ProgressBar::hidden()
}

fn refused(r: Result<impl std::fmt::Debug, SlotError>) -> String {
    match r {
        Err(e @ SlotError::Refused { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_mounted_disk_is_refused_without_force_and_written_with_it() {
    let h = host();
    h.disk("sdb", 8, &[("sdb1", 17, None)]);
    h.mount(8, 17, "/media/stick");
    let (img, data) = h.image(20_000);
    let dev = h.paths.dev.join("sdb");
    let msg = refused(flash(&img, &dev, &h.paths, false, &hidden()));
    assert!(msg.contains("/dev/sdb1 on /media/stick"), "{msg}");
    assert!(msg.contains("--force"), "{msg}");
    assert!(fs::read(&dev).unwrap().iter().all(|b| *b == 0), "untouched");

    let r = flash(&img, &dev, &h.paths, true, &hidden()).unwrap();
    assert_eq!(r.bytes, data.len() as u64);
    assert_eq!(r.sha256, hex::encode(Sha256::digest(&data)));
    assert_eq!(&fs::read(&dev).unwrap()[..data.len()], &data[..]);
}

#[test]
fn the_disk_of_the_running_system_is_refused() {
    let h = host();
    h.disk("nvme0n1", 259, &[("nvme0n1p2", 2, Some("cairn-a"))]);
    h.mount(259, 2, "/");
    let (img, _) = h.image(1000);
    let msg = refused(flash(
        &img,
        &h.paths.dev.join("nvme0n1"),
        &h.paths,
        false,
        &hidden(),
    ));
    assert!(msg.contains("holds the running system"), "{msg}");
    // Naming a partition of that disk is refused for the same reason.
    fs::write(h.paths.dev.join("nvme0n1p2"), b"").unwrap();
    let msg = refused(check_target(&h.paths, &h.paths.dev.join("nvme0n1p2")));
    assert!(msg.contains("on disk nvme0n1"), "{msg}");
}

#[test]
fn a_swap_partition_is_refused() {
    let h = host();
    h.disk("sdc", 8, &[("sdc1", 33, None)]);
    fs::write(
        &h.paths.swaps,
        "Filename\tType\tSize\tUsed\tPriority\n/dev/sdc1  partition\t1024\t0\t-2\n",
    )
    .unwrap();
    let msg = refused(check_target(&h.paths, &h.paths.dev.join("sdc")));
    assert!(msg.contains("used as swap (/dev/sdc1)"), "{msg}");
}

#[test]
fn a_mount_through_a_device_mapper_holder_is_refused() {
    let h = host();
    h.disk("sdd", 8, &[("sdd1", 49, None)]);
    let dm = h.paths.sys.join("block/dm-0");
    fs::create_dir_all(&dm).unwrap();
    fs::write(dm.join("dev"), "253:0\n").unwrap();
    fs::create_dir_all(h.paths.sys.join("block/sdd/sdd1/holders/dm-0")).unwrap();
    h.mount(253, 0, "/srv");
    let msg = refused(check_target(&h.paths, &h.paths.dev.join("sdd")));
    assert!(msg.contains("in use by dm-0"), "{msg}");
    assert!(msg.contains("/dev/dm-0 on /srv"), "{msg}");
}

#[test]
fn an_idle_disk_with_an_old_cairn_image_is_flashed() {
    let h = host();
    h.disk(
        "sde",
        8,
        &[("sde1", 65, Some("esp")), ("sde2", 66, Some("cairn-a"))],
    );
    // Another disk is busy; that does not matter for this one.
    h.disk("sdf", 8, &[("sdf1", 81, None)]);
    h.mount(8, 81, "/");
    let (img, data) = h.image(5000);
    let dev = h.paths.dev.join("sde");
    flash(&img, &dev, &h.paths, false, &hidden()).unwrap();
    assert_eq!(&fs::read(&dev).unwrap()[..data.len()], &data[..]);
}

#[test]
fn a_path_the_kernel_does_not_list_is_not_checked() {
    let h = host();
    let (img, data) = h.image(3000);
    let out = h.dir.path().join("copy.img");
    fs::write(&out, b"").unwrap();
    flash(&img, &out, &h.paths, false, &hidden()).unwrap();
    assert_eq!(fs::read(&out).unwrap(), data);
}

#[test]
fn a_missing_device_is_named() {
    let h = host();
    let (img, _) = h.image(10);
    let e = flash(
        &img,
        Path::new("/nonexistent/sdz"),
        &h.paths,
        false,
        &hidden(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("/nonexistent/sdz"), "{e}");
}
