//! Bring-up against a fake node: `/proc`, `/sys`, `/dev` and `/run` in a temp dir, shaped
//! like the kernel's (symlinks where sysfs has them), with a recording mounter and network.

use base64::Engine;
use cairn_nodeos::bringup::Env;
use cairn_nodeos::daemons::parse_env;
use cairn_nodeos::drives::{ClaimedDrive, DriveKind};
use cairn_nodeos::net::{NetReport, NetStep, NetworkApplier};
use cairn_nodeos::source::Mounter;
use cairn_nodeos::{bring_up, NodeosError, Outcome, Paths};
use std::cell::RefCell;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

struct Node {
    /// Holds the tree; removed on drop.
    _dir: tempfile::TempDir,
    paths: Paths,
    /// What the CAIRNCFG "device" holds once mounted.
    volume_src: PathBuf,
}

const BOOT_DISK_SERIAL: &str = "SN-BOOT";

fn w(p: &Path, text: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::under(dir.path());
        let p = &paths;
        w(
            &p.proc.join("cmdline"),
            "root=PARTLABEL=cairn-a cairn.slot=a console=ttyS0\n",
        );
        for f in [
            "sys/kernel/hostname",
            "sys/vm/nr_hugepages",
            "sys/net/core/rmem_max",
        ] {
            w(&p.proc.join(f), "");
        }
        w(
            &p.proc.join("swaps"),
            "Filename\tType\tSize\tUsed\tPriority\n",
        );
        // The boot disk: slot a mounted at /, the state partition at /var/lib/cairn.
        w(
            &p.proc.join("self/mountinfo"),
            "22 1 259:2 / / ro,relatime shared:1 - erofs /dev/nvme0n1p2 ro\n\
             30 22 259:4 / /var/lib/cairn rw,relatime shared:2 - ext4 /dev/nvme0n1p4 rw\n",
        );
        w(&p.console, "");
        w(&p.sys.join("class/net/eth0/address"), "52:54:00:00:00:01\n");
        w(&p.sys.join("class/net/lo/address"), "00:00:00:00:00:00\n");
        let n = Node {
            volume_src: dir.path().join("volume-contents"),
            _dir: dir,
            paths,
        };
        n.nvme(0, "0000:00:03.0", BOOT_DISK_SERIAL, 259, 0, 1);
        n.partition("nvme0n1", "nvme0n1p2", 259, 2, "cairn-a");
        n.partition("nvme0n1", "nvme0n1p4", 259, 4, "cairn-state");
        // Names follow probe order, serials do not: nvme1 has the larger serial.
        n.nvme(1, "0000:00:04.0", "SN-B", 259, 5, 4);
        n.nvme(2, "0000:00:05.0", "SN-A", 259, 6, 2);
        n
    }

    fn sys(&self) -> &Path {
        &self.paths.sys
    }

    /// An NVMe controller on PCI with one namespace, laid out as sysfs does it.
    fn nvme(&self, i: u32, bdf: &str, serial: &str, major: u32, minor: u32, gib: u64) {
        let sys = self.sys();
        let pci = sys.join("devices/pci0000:00").join(bdf);
        let ctrl = pci.join("nvme").join(format!("nvme{i}"));
        w(&ctrl.join("serial"), &format!("{serial}     \n"));
        w(
            &ctrl.join("model"),
            "QEMU NVMe Ctrl                          \n",
        );
        w(&ctrl.join("transport"), "pcie\n");
        w(&ctrl.join("address"), &format!("{bdf}\n"));
        let ns = ctrl.join(format!("nvme{i}n1"));
        w(&ns.join("dev"), &format!("{major}:{minor}\n"));
        w(&ns.join("size"), &format!("{}\n", gib << 21));
        w(
            &ns.join("uevent"),
            &format!("DEVNAME=nvme{i}n1\nDEVTYPE=disk\n"),
        );
        symlink("../../nvme".to_string() + &i.to_string(), ns.join("device")).unwrap();
        fs::create_dir_all(sys.join("class/nvme")).unwrap();
        symlink(&ctrl, sys.join("class/nvme").join(format!("nvme{i}"))).unwrap();
        fs::create_dir_all(sys.join("block")).unwrap();
        symlink(&ns, sys.join("block").join(format!("nvme{i}n1"))).unwrap();
        // The PCI side, for vfio.
        fs::create_dir_all(sys.join("bus/pci/devices")).unwrap();
        symlink(&pci, sys.join("bus/pci/devices").join(bdf)).unwrap();
        w(&pci.join("driver_override"), "(null)\n");
        w(&sys.join("bus/pci/drivers/nvme/unbind"), "");
        symlink(sys.join("bus/pci/drivers/nvme"), pci.join("driver")).unwrap();
        fs::create_dir_all(sys.join("kernel/iommu_groups").join(i.to_string())).unwrap();
        symlink(
            sys.join("kernel/iommu_groups").join(i.to_string()),
            pci.join("iommu_group"),
        )
        .unwrap();
        w(&self.paths.dev.join(format!("nvme{i}n1")), "");
    }

    fn partition(&self, disk: &str, name: &str, major: u32, minor: u32, label: &str) {
        let d = self.sys().join("block").join(disk).join(name);
        w(&d.join("partition"), "1\n");
        w(&d.join("dev"), &format!("{major}:{minor}\n"));
        w(
            &d.join("uevent"),
            &format!("DEVNAME={name}\nDEVTYPE=partition\nPARTNAME={label}\n"),
        );
    }

    fn state_config(&self, text: &str) {
        w(&self.paths.state.join("node.toml"), text);
    }

    fn volume_config(&self, text: &str) {
        w(&self.volume_src.join("node.toml"), text);
        w(&self.paths.by_label().join("CAIRNCFG"), "");
    }

    fn read(&self, p: &Path) -> String {
        fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn console(&self) -> String {
        self.read(&self.paths.console)
    }

    fn run(&self) -> (Outcome, Recorder) {
        let rec = Recorder {
            volume_src: self.volume_src.clone(),
            mounts: RefCell::default(),
            steps: RefCell::default(),
        };
        let env = Env {
            mounter: &rec,
            network: &rec,
            modprobe: None,
        };
        let out = bring_up(&self.paths, &env);
        (out, rec)
    }
}

/// Stands in for mount(2) (copying the volume's files) and for netlink (recording).
struct Recorder {
    volume_src: PathBuf,
    mounts: RefCell<Vec<String>>,
    steps: RefCell<Vec<NetStep>>,
}

impl Mounter for Recorder {
    fn mount_config_volume(&self, device: &Path, target: &Path) -> Result<(), NodeosError> {
        self.mounts.borrow_mut().push(format!(
            "mount {}",
            device.file_name().unwrap().to_string_lossy()
        ));
        fs::create_dir_all(target).unwrap();
        for e in fs::read_dir(&self.volume_src).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), target.join(e.file_name())).unwrap();
        }
        Ok(())
    }
    fn unmount(&self, target: &Path) -> Result<(), NodeosError> {
        self.mounts.borrow_mut().push("unmount".into());
        fs::remove_dir_all(target).unwrap();
        Ok(())
    }
    fn mount_hugetlbfs(&self, target: &Path) -> Result<(), NodeosError> {
        self.mounts
            .borrow_mut()
            .push(format!("hugetlbfs {}", target.display()));
        Ok(())
    }
}

impl NetworkApplier for Recorder {
    fn apply(&self, steps: &[NetStep], _run: &Path) -> Result<NetReport, NodeosError> {
        self.steps.borrow_mut().extend_from_slice(steps);
        Ok(NetReport::default())
    }
}

const CONFIG: &str = r#"
hostname = "cairn-1"
[s3]
listen = "0.0.0.0:9000"
access_key = "cairnadmin"
secret_key = "s3cr$t\"pa`ss"
[datapath]
reactors = 2
[drives]
all_nvme = true
[hugepages]
count = 8
[sysctl]
"net.core.rmem_max" = 16777216
[network]
dns = ["10.0.2.3"]
[[network.interface]]
name = "eth0"
addresses = ["10.0.2.15/24"]
[[network.route]]
to = "default"
via = "10.0.2.2"
"#;

fn env_of(n: &Node, file: &str) -> Vec<(String, String)> {
    parse_env(&n.read(&n.paths.run.join(file)))
}

fn get(env: &[(String, String)], k: &str) -> String {
    env.iter()
        .find(|(key, _)| key == k)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("{k} missing"))
}

#[test]
fn a_full_bring_up_writes_everything_the_daemons_need() {
    let n = Node::new();
    n.state_config(CONFIG);
    let (out, rec) = n.run();
    let Outcome::Ready { drives } = out else {
        panic!("{out:?}: {}", n.console())
    };
    // The boot disk is not claimed; the others are in serial order, not name order.
    let paths: Vec<&str> = drives.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(paths, ["/dev/nvme2n1", "/dev/nvme1n1"]);
    assert_eq!(drives[0].serial.as_deref(), Some("SN-A"));
    assert_eq!(drives[0].model.as_deref(), Some("QEMU NVMe Ctrl"));
    assert_eq!(drives[0].size_bytes, 2 << 30);
    assert_eq!(drives[0].kind, DriveKind::Nvme);
    assert_eq!(drives[1].pci_address.as_deref(), Some("0000:00:04.0"));

    let json: Vec<ClaimedDrive> =
        serde_json::from_str(&n.read(&n.paths.run.join("drives.json"))).unwrap();
    assert_eq!(json, drives);
    let raw: serde_json::Value =
        serde_json::from_str(&n.read(&n.paths.run.join("drives.json"))).unwrap();
    assert_eq!(raw[0]["index"], 0);
    assert_eq!(raw[0]["kind"], "nvme");
    assert_eq!(raw[1]["path"], "/dev/nvme1n1");

    // datapathd's own parser accepts what nodeos wrote.
    let dp = get(&env_of(&n, "datapathd.env"), "DATAPATHD_ARGS");
    let args = std::iter::once("datapathd").chain(dp.split_whitespace());
    let c = cairn_datapath::Config::parse_from_args(args).unwrap();
    let drive_paths: Vec<String> = c
        .drives
        .iter()
        .map(|d| d.path.display().to_string())
        .collect();
    assert_eq!(drive_paths, ["/dev/nvme2n1", "/dev/nvme1n1"]);
    assert_eq!(c.listen, "127.0.0.1:7410");
    assert_eq!(c.reactors, 2);
    assert_eq!(c.backend, cairn_datapath::Backend::Uring);
    assert_eq!(c.ready_file, Some(n.paths.run.join("datapathd.ready")));

    let mg_path = n.paths.run.join("mgmtd.env");
    assert_eq!(
        fs::metadata(&mg_path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let mg = env_of(&n, "mgmtd.env");
    assert_eq!(get(&mg, "CAIRN_ROOT_ACCESS_KEY"), "cairnadmin");
    assert_eq!(get(&mg, "CAIRN_ROOT_SECRET_KEY"), "s3cr$t\"pa`ss");
    let margs = get(&mg, "MGMTD_ARGS");
    let want = format!(
        "--data {} --s3 0.0.0.0:9000 --admin 0.0.0.0:9001 --datapath 127.0.0.1:7410 --datapath-key {} --drives 2 --ready-file {} --bmc-device /dev/ipmi0",
        n.paths.state.join("mgmt").display(),
        n.paths.state.join("mgmt/chunk.key").display(),
        n.paths.run.join("mgmtd.ready").display()
    );
    assert_eq!(margs, want);
    assert_eq!(
        get(&env_of(&n, "ready.env"), "CAIRN_ADMIN"),
        "127.0.0.1:9001"
    );

    assert_eq!(
        n.read(&n.paths.proc.join("sys/kernel/hostname")),
        "cairn-1\n"
    );
    assert_eq!(
        n.read(&n.paths.proc.join("sys/net/core/rmem_max")),
        "16777216\n"
    );
    assert_eq!(n.read(&n.paths.proc.join("sys/vm/nr_hugepages")), "8\n");
    assert!(n
        .read(&n.paths.run.join("resolv.conf"))
        .contains("nameserver 10.0.2.3\n"));
    assert_eq!(*rec.mounts.borrow(), ["hugetlbfs /dev/hugepages"]);
    let steps = rec.steps.borrow();
    assert!(steps.contains(&NetStep::AddAddress {
        link: "eth0".into(),
        cidr: "10.0.2.15/24".parse().unwrap()
    }));
    assert!(matches!(steps.last(), Some(NetStep::AddRoute(_))));
    assert!(!n.paths.maintenance_marker().exists());
    let console = n.console();
    assert!(
        console.contains("cairn: cairn-1 configured: 2 drive(s) [/dev/nvme2n1 /dev/nvme1n1]"),
        "{console}"
    );
}

#[test]
fn no_config_means_maintenance_mode() {
    let n = Node::new();
    let (out, rec) = n.run();
    assert!(matches!(out, Outcome::NoConfig { .. }), "{out:?}");
    let console = n.console();
    assert!(
        console.starts_with("cairn: maintenance mode: no node config ("),
        "{console}"
    );
    assert!(n
        .read(&n.paths.maintenance_marker())
        .contains("no node config"));
    assert!(!n.paths.run.join("mgmtd.env").exists());
    assert!(!n.paths.run.join("datapathd.env").exists());
    assert!(rec.steps.borrow().is_empty(), "nothing is configured");
    assert_eq!(n.read(&n.paths.proc.join("sys/kernel/hostname")), "");
}

#[test]
fn an_invalid_config_is_not_skipped_for_a_later_source() {
    let n = Node::new();
    n.state_config(&CONFIG.replace("cairn-1", "Cairn_1"));
    n.volume_config(CONFIG);
    let (out, rec) = n.run();
    let Outcome::NoConfig { reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.contains("field `hostname`"), "{reason}");
    assert!(n
        .console()
        .contains("maintenance mode: invalid node config"));
    assert!(
        rec.mounts.borrow().is_empty(),
        "the volume is not even mounted"
    );
}

#[test]
fn a_config_volume_is_copied_to_the_state_partition() {
    let n = Node::new();
    n.volume_config(CONFIG);
    let (out, rec) = n.run();
    assert!(matches!(out, Outcome::Ready { .. }), "{out:?}");
    let state = n.paths.state.join("node.toml");
    assert_eq!(n.read(&state), CONFIG);
    assert_eq!(
        fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        rec.mounts.borrow()[..2],
        ["mount CAIRNCFG".to_string(), "unmount".to_string()]
    );
    // The next boot reads the state file and leaves the volume alone.
    let (out, rec) = n.run();
    assert!(matches!(out, Outcome::Ready { .. }), "{out:?}");
    assert!(!rec.mounts.borrow().iter().any(|m| m.contains("CAIRNCFG")));
}

#[test]
fn a_config_on_the_kernel_command_line_is_used_and_not_kept() {
    let n = Node::new();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(CONFIG);
    w(
        &n.paths.proc.join("cmdline"),
        &format!("cairn.slot=a cairn.config={b64} quiet\n"),
    );
    let (out, _) = n.run();
    assert!(matches!(out, Outcome::Ready { .. }), "{out:?}");
    assert!(!n.paths.state.join("node.toml").exists());
}

#[test]
fn claiming_the_boot_disk_fails_bring_up_and_says_why() {
    let n = Node::new();
    n.state_config(&CONFIG.replace(
        "all_nvme = true",
        &format!("claim = [{{ serial = \"{BOOT_DISK_SERIAL}\" }}]"),
    ));
    let (out, _) = n.run();
    let Outcome::Failed { reason } = out else {
        panic!("{out:?}")
    };
    assert!(
        reason.contains("drives.claim[0] matches /dev/nvme0n1"),
        "{reason}"
    );
    assert!(reason.contains("holds the running system"), "{reason}");
    assert!(n.paths.maintenance_marker().exists());
    assert!(!n.paths.run.join("datapathd.env").exists());
}

#[test]
fn a_fixed_config_clears_maintenance_on_the_next_run() {
    let n = Node::new();
    n.state_config(&CONFIG.replace("all_nvme = true", "claim = [{ serial = \"SN-GONE\" }]"));
    let (out, _) = n.run();
    let Outcome::Failed { reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.contains("no drive matches"), "{reason}");
    assert!(n.paths.maintenance_marker().exists());
    n.state_config(CONFIG);
    let (out, _) = n.run();
    assert!(matches!(out, Outcome::Ready { .. }), "{out:?}");
    assert!(!n.paths.maintenance_marker().exists());
}

#[test]
fn claims_by_model_and_path_keep_claim_order() {
    let n = Node::new();
    fs::create_dir_all(n.paths.dev.join("disk/by-id")).unwrap();
    symlink("../../nvme1n1", n.paths.dev.join("disk/by-id/nvme-SN-B")).unwrap();
    n.state_config(&CONFIG.replace(
        "all_nvme = true",
        "claim = [{ path = \"/dev/disk/by-id/nvme-SN-B\" }, { model = \"QEMU NVMe Ctrl\", serial = \"SN-A\" }]",
    ));
    let (out, _) = n.run();
    let Outcome::Ready { drives } = out else {
        panic!("{out:?}: {}", n.console())
    };
    let paths: Vec<&str> = drives.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(paths, ["/dev/nvme1n1", "/dev/nvme2n1"]);
    assert_eq!(drives.iter().map(|d| d.index).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn a_sysctl_the_kernel_lacks_fails_with_its_name() {
    let n = Node::new();
    n.state_config(&CONFIG.replace("net.core.rmem_max", "net.core.rmem_maxx"));
    let (out, _) = n.run();
    let Outcome::Failed { reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.contains("sysctl net.core.rmem_maxx"), "{reason}");
}

#[test]
fn the_nvme_backend_binds_controllers_to_vfio() {
    let n = Node::new();
    w(&n.sys().join("bus/pci/drivers/vfio-pci/bind"), "");
    n.state_config(&CONFIG.replace("reactors = 2", "reactors = 2\nbackend = \"nvme\""));
    let (out, _) = n.run();
    // The fake kernel does not act on the writes, so verification reports the device still
    // on nvme; what matters here is what was written, and that the boot disk was spared.
    let Outcome::Failed { reason } = out else {
        panic!("{out:?}")
    };
    assert!(
        reason.contains("0000:00:05.0: still bound to nvme"),
        "{reason}"
    );
    let dev = |bdf: &str| n.sys().join("bus/pci/devices").join(bdf);
    assert_eq!(
        n.read(&dev("0000:00:05.0").join("driver_override")),
        "vfio-pci"
    );
    assert_eq!(
        n.read(&dev("0000:00:03.0").join("driver_override")),
        "(null)\n"
    );
    assert_eq!(
        n.read(&n.sys().join("bus/pci/drivers/vfio-pci/bind")),
        "0000:00:05.0"
    );
    assert_eq!(
        n.read(&n.sys().join("bus/pci/drivers/nvme/unbind")),
        "0000:00:05.0"
    );
}

#[test]
fn the_nvme_backend_passes_pci_addresses_to_datapathd() {
    // A second run in the same boot: the claimed controllers are on vfio-pci already and
    // gone from /sys/class/nvme; drives.json of the first run says what they were.
    let n = Node::new();
    w(&n.sys().join("bus/pci/drivers/vfio-pci/bind"), "");
    let mut previous = Vec::new();
    for (i, (ctrl, bdf, serial)) in [(2, "0000:00:05.0", "SN-A"), (1, "0000:00:04.0", "SN-B")]
        .into_iter()
        .enumerate()
    {
        fs::remove_file(n.sys().join("class/nvme").join(format!("nvme{ctrl}"))).unwrap();
        fs::remove_file(n.sys().join("block").join(format!("nvme{ctrl}n1"))).unwrap();
        let link = n.sys().join("bus/pci/devices").join(bdf).join("driver");
        fs::remove_file(&link).unwrap();
        symlink(n.sys().join("bus/pci/drivers/vfio-pci"), &link).unwrap();
        previous.push(ClaimedDrive {
            index: i,
            path: bdf.into(),
            kind: DriveKind::NvmeVfio,
            serial: Some(serial.into()),
            model: Some("QEMU NVMe Ctrl".into()),
            size_bytes: 1 << 30,
            pci_address: Some(bdf.into()),
        });
    }
    w(
        &n.paths.run.join("drives.json"),
        &serde_json::to_string(&previous).unwrap(),
    );
    n.state_config(&CONFIG.replace("reactors = 2", "reactors = 2\nbackend = \"nvme\""));
    let (out, _) = n.run();
    let Outcome::Ready { drives } = out else {
        panic!("{out:?}: {}", n.console())
    };
    assert_eq!(drives, previous);
    let dp = get(&env_of(&n, "datapathd.env"), "DATAPATHD_ARGS");
    assert!(
        dp.contains("--backend nvme") && dp.ends_with("--drive 0000:00:05.0 --drive 0000:00:04.0"),
        "{dp}"
    );
}

#[test]
fn subsystem_controllers_are_claimed_once() {
    // Two controllers of one NVMe subsystem (native multipath): one namespace head whose
    // device link is the subsystem. The nvme backend must take one controller only.
    let n = Node::new();
    let sys = n.sys();
    let subsys = sys.join("devices/virtual/nvme-subsystem/nvme-subsys3");
    fs::create_dir_all(&subsys).unwrap();
    for (i, bdf) in [(3, "0000:00:06.0"), (4, "0000:00:07.0")] {
        let pci = sys.join("devices/pci0000:00").join(bdf);
        let ctrl = pci.join("nvme").join(format!("nvme{i}"));
        w(&ctrl.join("serial"), "SN-MP\n");
        w(&ctrl.join("model"), "QEMU NVMe Ctrl\n");
        w(&ctrl.join("transport"), "pcie\n");
        w(&ctrl.join("address"), &format!("{bdf}\n"));
        symlink(&ctrl, sys.join("class/nvme").join(format!("nvme{i}"))).unwrap();
        symlink(&ctrl, subsys.join(format!("nvme{i}"))).unwrap();
        symlink(&pci, sys.join("bus/pci/devices").join(bdf)).unwrap();
    }
    let head = subsys.join("nvme3n1");
    w(&head.join("dev"), "259:9\n");
    w(&head.join("size"), &format!("{}\n", 8u64 << 21));
    symlink("../../nvme-subsys3", head.join("device")).unwrap();
    symlink(&head, sys.join("block/nvme3n1")).unwrap();

    let cfg = cairn_nodeconfig::Drives {
        all_nvme: false,
        claim: vec![cairn_nodeconfig::DriveMatch {
            serial: Some("SN-MP".into()),
            ..Default::default()
        }],
        allow_empty: false,
    };
    let blocks = cairn_nodeos::drives::claim_block_devices(&n.paths, &cfg).unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].path, "/dev/nvme3n1");
    assert_eq!(blocks[0].serial.as_deref(), Some("SN-MP"));
    let ctrls = cairn_nodeos::drives::claim_nvme_controllers(&n.paths, &cfg, &[]).unwrap();
    assert_eq!(ctrls.len(), 1, "{ctrls:?}");
    assert_eq!(ctrls[0].path, "0000:00:06.0");
    assert_eq!(ctrls[0].size_bytes, 8 << 30);
}

#[test]
fn garbage_in_sysfs_and_procfs_does_not_panic() {
    let n = Node::new();
    let sys = n.sys();
    // An NVMe namespace whose attributes are junk, a disk without a size, binary serials.
    w(&sys.join("block/nvme1n1/size"), "lots\n");
    fs::write(sys.join("class/nvme/nvme2/serial"), [0xff, 0xfe, 0x00]).unwrap();
    w(&sys.join("class/nvme/nvme2/address"), "not-an-address\n");
    w(&sys.join("block/nvme2n1/dev"), "x:y\n");
    let vd = sys.join("devices/virtio0/block/vda");
    w(&vd.join("dev"), "\n");
    fs::create_dir_all(vd.join("device")).unwrap();
    symlink(&vd, sys.join("block/vda")).unwrap();
    w(
        &n.paths.proc.join("self/mountinfo"),
        "nonsense\n22 1 259:2 / / ro - erofs /dev/nvme0n1p2 ro\n\n- - -\n",
    );
    w(&n.paths.proc.join("swaps"), "\u{0}\u{1}garbage");
    n.state_config(CONFIG);
    let (out, _) = n.run();
    let Outcome::Ready { drives } = out else {
        panic!("{out:?}: {}", n.console())
    };
    assert!(
        drives.iter().all(|d| d.path != "/dev/nvme0n1"),
        "{drives:?}"
    );
    let nvme1 = drives.iter().find(|d| d.path == "/dev/nvme1n1").unwrap();
    assert_eq!(nvme1.size_bytes, 0);
    let nvme2 = drives.iter().find(|d| d.path == "/dev/nvme2n1").unwrap();
    assert_eq!(nvme2.pci_address, None);
}

/// In cluster mode datapathd gets a peer listener with the TLS directory mgmtd
/// fills at join, and mgmtd advertises that listener to the other nodes.
#[test]
fn cluster_mode_wires_the_peer_listener_and_its_certificates() {
    let n = Node::new();
    let cfg = format!("mode = \"cluster\"\n{CONFIG}\n[cluster]\ninternal = \"10.0.2.15:9002\"\n");
    n.state_config(&cfg);
    let (out, _) = n.run();
    assert!(
        matches!(out, Outcome::Ready { .. }),
        "{out:?}: {}",
        n.console()
    );
    let dp = get(&env_of(&n, "datapathd.env"), "DATAPATHD_ARGS");
    let c = cairn_datapath::Config::parse_from_args(
        std::iter::once("datapathd").chain(dp.split_whitespace()),
    )
    .unwrap();
    assert_eq!(c.peer_listen.as_deref(), Some("0.0.0.0:7411"));
    assert_eq!(c.tls_dir, Some(n.paths.state.join("mgmt/tls")));
    assert_eq!(
        c.listen, "127.0.0.1:7410",
        "mgmtd's own link stays on loopback"
    );
    let margs = get(&env_of(&n, "mgmtd.env"), "MGMTD_ARGS");
    assert!(
        margs.contains("--internal 10.0.2.15:9002 --chunk-advertise 10.0.2.15:7411"),
        "{margs}"
    );
}

/// The fake node after an `nvme`-backend bring-up: 0000:00:04.0 and 0000:00:05.0 on
/// vfio-pci (the boot disk 0000:00:03.0 still on nvme), every one an NVMe-class PCI
/// function, and the drivers' bind/unbind files.
fn node_on_vfio() -> Node {
    let n = Node::new();
    let drivers = n.sys().join("bus/pci/drivers");
    for f in [
        "vfio-pci/bind",
        "vfio-pci/unbind",
        "nvme/bind",
        "nvme/unbind",
    ] {
        w(&drivers.join(f), "");
    }
    for bdf in ["0000:00:03.0", "0000:00:04.0", "0000:00:05.0"] {
        let dev = n.sys().join("bus/pci/devices").join(bdf);
        w(&dev.join("class"), "0x010802\n");
        if bdf != "0000:00:03.0" {
            fs::remove_file(dev.join("driver")).unwrap();
            symlink(drivers.join("vfio-pci"), dev.join("driver")).unwrap();
            w(&dev.join("driver_override"), "vfio-pci\n");
        }
    }
    n
}

/// What the kernel does on the writes the fake records: the device moves to `driver`.
fn kernel_binds(n: &Node, bdf: &str, driver: &str) {
    let link = n.sys().join("bus/pci/devices").join(bdf).join("driver");
    fs::remove_file(&link).unwrap();
    symlink(n.sys().join("bus/pci/drivers").join(driver), &link).unwrap();
}

#[test]
fn release_drives_gives_vfio_controllers_back_to_nvme() {
    use cairn_nodeos::vfio::{release_drives, vfio_group_users, vfio_nvme_controllers};
    let n = node_on_vfio();
    let sys = n.sys().to_path_buf();
    // A NIC on vfio-pci is not an NVMe controller: never released by default.
    let nic = sys.join("bus/pci/devices/0000:00:09.0");
    w(&nic.join("class"), "0x020000\n");
    symlink(sys.join("bus/pci/drivers/vfio-pci"), nic.join("driver")).unwrap();
    assert_eq!(
        vfio_nvme_controllers(&sys),
        vec!["0000:00:04.0".to_string(), "0000:00:05.0".to_string()]
    );
    // datapathd (pid 4242) holds 0000:00:04.0's VFIO group (1) open.
    let fd = n.paths.proc.join("4242/fd");
    fs::create_dir_all(&fd).unwrap();
    symlink("/dev/vfio/vfio", fd.join("3")).unwrap();
    symlink("/dev/vfio/1", fd.join("4")).unwrap();
    fs::create_dir_all(n.paths.proc.join("self")).unwrap();
    assert_eq!(vfio_group_users(&n.paths.proc, "1"), vec![4242]);
    assert!(vfio_group_users(&n.paths.proc, "2").is_empty());

    let results = release_drives(&n.paths, &[], false, None);
    let (bdfs, rs): (Vec<String>, Vec<_>) = results.into_iter().unzip();
    assert_eq!(bdfs, ["0000:00:04.0", "0000:00:05.0"]);
    // The controller in use is refused and left untouched.
    let e = rs[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("in use") && e.contains("4242"), "{e}");
    let dev = |bdf: &str| sys.join("bus/pci/devices").join(bdf);
    assert_eq!(
        n.read(&dev("0000:00:04.0").join("driver_override")),
        "vfio-pci\n"
    );
    // The other one: override cleared, unbound from vfio-pci, bound to nvme. The fake
    // kernel does not move the link, so verification says where it still is.
    let e = rs[1].as_ref().unwrap_err().to_string();
    assert!(e.contains("0000:00:05.0: still bound to vfio-pci"), "{e}");
    assert_eq!(n.read(&dev("0000:00:05.0").join("driver_override")), "\n");
    assert_eq!(
        n.read(&sys.join("bus/pci/drivers/vfio-pci/unbind")),
        "0000:00:05.0"
    );
    assert_eq!(
        n.read(&sys.join("bus/pci/drivers/nvme/bind")),
        "0000:00:05.0"
    );
    // Once the kernel has bound it, releasing it again is a no-op that says so.
    kernel_binds(&n, "0000:00:05.0", "nvme");
    fs::write(sys.join("bus/pci/drivers/nvme/bind"), "").unwrap();
    let r = release_drives(&n.paths, &["0000:00:05.0".into()], false, None);
    assert!(r[0].1.as_ref().unwrap().already_released);
    assert_eq!(n.read(&sys.join("bus/pci/drivers/nvme/bind")), "");
    // The boot disk was never on vfio-pci: already released, nothing written.
    let r = release_drives(&n.paths, &["0000:00:03.0".into()], false, None);
    assert!(r[0].1.as_ref().unwrap().already_released);
    assert_eq!(
        n.read(&dev("0000:00:03.0").join("driver_override")),
        "(null)\n"
    );

    // --force takes the one in use, and verification passes once the kernel moved it.
    let r = release_drives(&n.paths, &["0000:00:04.0".into()], true, None);
    assert!(r[0].1.is_err(), "{r:?}");
    assert_eq!(
        n.read(&sys.join("bus/pci/drivers/nvme/bind")),
        "0000:00:04.0"
    );
    kernel_binds(&n, "0000:00:04.0", "nvme");
    cairn_nodeos::vfio::verify_released(&sys, "0000:00:04.0").unwrap();
    assert!(vfio_nvme_controllers(&sys).is_empty());
    assert!(release_drives(&n.paths, &[], false, None).is_empty());
}

#[test]
fn release_drives_refuses_what_it_cannot_hand_over() {
    use cairn_nodeos::vfio::release_drives;
    let n = node_on_vfio();
    let sys = n.sys().to_path_buf();
    let first = |bdfs: &[&str]| -> String {
        let bdfs: Vec<String> = bdfs.iter().map(|s| s.to_string()).collect();
        let r = release_drives(&n.paths, &bdfs, false, None);
        r.into_iter()
            .next()
            .unwrap()
            .1
            .map(|r| format!("{r:?}"))
            .unwrap_or_else(|e| format!("error: {e}"))
    };
    for bad in ["", "0000:00:04", "../../../etc", "0000:00:04.0/x"] {
        assert!(first(&[bad]).contains("not a PCI address"), "{bad}");
    }
    assert!(first(&["0000:00:0a.0"]).contains("does not exist"));
    // A device some other driver holds is not ours to move.
    let other = sys.join("bus/pci/devices/0000:00:04.0/driver");
    fs::remove_file(&other).unwrap();
    w(&sys.join("bus/pci/drivers/virtio-pci/unbind"), "");
    symlink(sys.join("bus/pci/drivers/virtio-pci"), &other).unwrap();
    let e = first(&["0000:00:04.0"]);
    assert!(
        e.contains("bound to virtio-pci") && e.contains("left alone"),
        "{e}"
    );
    assert_eq!(n.read(&sys.join("bus/pci/drivers/virtio-pci/unbind")), "");
    // Without the nvme driver nothing is unbound: the controller keeps vfio-pci.
    fs::remove_dir_all(sys.join("bus/pci/drivers/nvme")).unwrap();
    let e = first(&["0000:00:05.0"]);
    assert!(e.contains("nvme driver is not loaded"), "{e}");
    assert_eq!(n.read(&sys.join("bus/pci/drivers/vfio-pci/unbind")), "");
    assert_eq!(
        n.read(&sys.join("bus/pci/devices/0000:00:05.0/driver_override")),
        "vfio-pci\n"
    );
}
