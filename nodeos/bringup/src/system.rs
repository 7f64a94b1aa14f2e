//! Kernel settings from the config: hostname, sysctls, hugepages, and the resolver file.
//! All through files under the given `/proc` and `/run/cairn`, so tests use temp dirs.

use crate::source::Mounter;
use crate::{io_err, read_attr, write_file, NodeosError};
use cairn_nodeconfig::{Hugepages, SysctlValue};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::Path;

/// Set the kernel host name (`/proc/sys/kernel/hostname`, what sethostname(2) sets).
pub fn set_hostname(proc: &Path, name: &str) -> Result<(), NodeosError> {
    write_proc(&proc.join("sys/kernel/hostname"), name)
}

/// Write each sysctl to `/proc/sys/<key with . as />`. An unknown key is an error naming
/// it: a typo in node.toml must not be silently ignored.
pub fn apply_sysctls(
    proc: &Path,
    sysctls: &BTreeMap<String, SysctlValue>,
) -> Result<(), NodeosError> {
    for (key, value) in sysctls {
        let path = proc.join("sys").join(key.replace('.', "/"));
        if !path.is_file() {
            return Err(NodeosError::Sysctl {
                key: key.clone(),
                message: format!("{} does not exist on this kernel", path.display()),
            });
        }
        write_proc(&path, &value.to_string()).map_err(|e| NodeosError::Sysctl {
            key: key.clone(),
            message: e.to_string(),
        })?;
    }
    Ok(())
}

/// What the kernel gave for a hugepage request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugepageReport {
    pub requested: u64,
    pub allocated: u64,
}

/// Ask for `count` 2 MiB pages and mount hugetlbfs when any are wanted. The kernel may
/// give fewer (fragmented memory); that is reported, not fatal, since only the `nvme`
/// backend needs them and it says so itself when short.
pub fn apply_hugepages(
    proc: &Path,
    hp: &Hugepages,
    mounter: &dyn Mounter,
) -> Result<HugepageReport, NodeosError> {
    let nr = proc.join("sys/vm/nr_hugepages");
    if hp.count == 0 {
        return Ok(HugepageReport {
            requested: 0,
            allocated: 0,
        });
    }
    write_proc(&nr, &hp.count.to_string())?;
    let allocated = read_attr(&nr).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mountinfo = std::fs::read_to_string(proc.join("self/mountinfo")).unwrap_or_default();
    let mounted = cairn_slots::disks::parse_mountinfo(&mountinfo)
        .iter()
        .any(|m| m.fstype == "hugetlbfs" && Path::new(&m.mount_point) == hp.mount);
    if !mounted {
        mounter.mount_hugetlbfs(&hp.mount)?;
    }
    Ok(HugepageReport {
        requested: hp.count,
        allocated,
    })
}

/// `resolv.conf` for the image's `/etc/resolv.conf` symlink: the configured servers, else
/// those DHCP gave. Written even when empty so the symlink never dangles.
pub fn write_resolv_conf(run: &Path, servers: &[IpAddr]) -> Result<(), NodeosError> {
    let mut text = String::from("# written by nodeos from node.toml network.dns or DHCP\n");
    for s in servers {
        text.push_str(&format!("nameserver {s}\n"));
    }
    write_file(&run.join("resolv.conf"), text.as_bytes(), 0o644)
}

/// procfs files are written in one write(2), without truncation or creation.
fn write_proc(path: &Path, value: &str) -> Result<(), NodeosError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(format!("{value}\n").as_bytes())
        .map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn proc_tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "sys/kernel/hostname",
            "sys/vm/nr_hugepages",
            "sys/net/core/rmem_max",
            "self/mountinfo",
        ] {
            let p = d.path().join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, "").unwrap();
        }
        d
    }

    #[test]
    fn hostname_and_sysctls_are_written() {
        let d = proc_tree();
        set_hostname(d.path(), "cairn-7").unwrap();
        assert_eq!(
            fs::read_to_string(d.path().join("sys/kernel/hostname")).unwrap(),
            "cairn-7\n"
        );
        let mut s = BTreeMap::new();
        s.insert("net.core.rmem_max".to_string(), SysctlValue::Int(16777216));
        apply_sysctls(d.path(), &s).unwrap();
        assert_eq!(
            fs::read_to_string(d.path().join("sys/net/core/rmem_max")).unwrap(),
            "16777216\n"
        );
        s.insert(
            "net.core.rmem_maks".to_string(),
            SysctlValue::Text("1".into()),
        );
        let e = apply_sysctls(d.path(), &s).unwrap_err().to_string();
        assert!(e.contains("net.core.rmem_maks"), "{e}");
        assert!(e.contains("does not exist"), "{e}");
    }

    struct RecordingMounter(std::cell::RefCell<Vec<String>>);
    impl Mounter for RecordingMounter {
        fn mount_config_volume(&self, _: &Path, _: &Path) -> Result<(), NodeosError> {
            unreachable!()
        }
        fn unmount(&self, _: &Path) -> Result<(), NodeosError> {
            unreachable!()
        }
        fn mount_hugetlbfs(&self, t: &Path) -> Result<(), NodeosError> {
            self.0.borrow_mut().push(t.display().to_string());
            Ok(())
        }
    }

    #[test]
    fn hugepages_are_requested_and_mounted_once() {
        let d = proc_tree();
        let m = RecordingMounter(Default::default());
        let hp = Hugepages {
            count: 64,
            mount: "/dev/hugepages".into(),
        };
        let r = apply_hugepages(d.path(), &hp, &m).unwrap();
        // The fake file holds what was written; a real kernel may hold less.
        assert_eq!(
            r,
            HugepageReport {
                requested: 64,
                allocated: 64
            }
        );
        assert_eq!(*m.0.borrow(), vec!["/dev/hugepages"]);
        fs::write(
            d.path().join("self/mountinfo"),
            "40 22 0:45 / /dev/hugepages rw,relatime shared:27 - hugetlbfs hugetlbfs rw,pagesize=2M\n",
        )
        .unwrap();
        fs::write(d.path().join("sys/vm/nr_hugepages"), "").unwrap();
        apply_hugepages(d.path(), &hp, &m).unwrap();
        assert_eq!(m.0.borrow().len(), 1, "already mounted: not mounted again");
        let none = Hugepages { count: 0, ..hp };
        assert_eq!(apply_hugepages(d.path(), &none, &m).unwrap().requested, 0);
    }

    #[test]
    fn resolv_conf_lists_servers() {
        let d = tempfile::tempdir().unwrap();
        write_resolv_conf(
            d.path(),
            &["10.0.2.3".parse().unwrap(), "fd00::53".parse().unwrap()],
        )
        .unwrap();
        let t = fs::read_to_string(d.path().join("resolv.conf")).unwrap();
        assert!(
            t.contains("nameserver 10.0.2.3\nnameserver fd00::53\n"),
            "{t}"
        );
    }
}
