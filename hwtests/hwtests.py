#!/usr/bin/env python3
"""Cairn's QEMU end-to-end tests: the built image, booted by UEFI under TCG, driven as
an operator would (S3 clients, nodectl, the serial console). See hwtests/README.md.

    hwtests/run.sh [--quick|--all] [--image DIR] [--workdir DIR] [--keep] [TEST...]
"""
import argparse
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vm import VM, TestFailure, check, find_in_file, stop_all, OVMF_CODE, OVMF_VARS, QEMU  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVE_TIMEOUT = int(os.environ.get("CAIRN_HWTEST_SERVE_TIMEOUT", "600"))  # TCG is slow
SERVING = r"cairn: serving"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def node_toml(hostname, access, secret, mac, *, extra="", mode="single", datapath="127.0.0.1:7410",
              backend="uring"):
    # The NIC is matched by MAC: udev's predictable names (enp0sN) depend on the slot.
    return f"""hostname = "{hostname}"
mode = "{mode}"

[s3]
listen = "0.0.0.0:9000"
access_key = "{access}"
secret_key = "{secret}"

[admin]
listen = "0.0.0.0:9001"

[datapath]
listen = "{datapath}"
backend = "{backend}"

[drives]
all_nvme = true

[network]
dns = ["10.0.2.3"]

[[network.interface]]
mac = "{mac}"
addresses = ["10.0.2.15/24"]

[[network.route]]
to = "default"
via = "10.0.2.2"
{extra}"""


def s3_client(port, access, secret):
    import boto3
    from botocore.config import Config
    return boto3.client(
        "s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id=access,
        aws_secret_access_key=secret, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2},
                      connect_timeout=10, read_timeout=120,
                      request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))


def wait_serving(vm, since, what="boot"):
    # Where the time goes: firmware (and shutdown, on a reboot) until the kernel starts,
    # then the kernel, initramfs and systemd until cairn-ready prints the line.
    vm.wait_serial(r"Linux version", SERVE_TIMEOUT, since)
    kernel = time.monotonic() - vm.boot_started
    m = vm.wait_serial(SERVING, SERVE_TIMEOUT, since)
    took = time.monotonic() - vm.boot_started
    log(f"{vm.name}: serving after {took:.1f} s ({what}; the kernel started at {kernel:.1f} s)")
    vm.wait_shell()
    return m, took


def boot_node(t, name, *, wait=True, access=None, secret=None, toml_kw=None, **kw):
    """A single-node appliance with fresh root credentials, booted to serving."""
    access = access or "hw" + secrets.token_hex(6)
    secret = secret or secrets.token_urlsafe(24)
    mac = kw.pop("mac", "52:54:00:c0:00:01")
    vm = VM(name, t.workdir, t.image, mac=mac,
            config_toml=node_toml(name, access, secret, mac, **(toml_kw or {})), **kw)
    vm.access, vm.secret = access, secret
    t.vms.append(vm)
    vm.boot_started = time.monotonic()
    vm.start()
    vm.s3 = s3_client(vm.s3_port, access, secret)
    if wait:
        _, took = wait_serving(vm, 0)
        t.figures[f"{name} boot-to-serving (s, QEMU start to 'cairn: serving')"] = round(took, 1)
    return vm


def put_objects(vm, bucket):
    """A small (replicated) and a large (erasure-coded) object, each carrying a random
    marker: the node seals data at rest, so the marker must be found on no drive."""
    marker = ("CAIRN-HWTEST-" + secrets.token_hex(16)).encode()
    small = marker + os.urandom(4000)
    # The marker repeats at every 64 KiB so some lands in every data fragment.
    large = b"".join(marker + os.urandom(65536 - len(marker)) for _ in range(96))  # 6 MiB
    vm.s3.create_bucket(Bucket=bucket)
    objs = {"small.bin": small, "dir/large.bin": large}
    for k, v in objs.items():
        vm.s3.put_object(Bucket=bucket, Key=k, Body=v)
    return marker, {k: hashlib.sha256(v).hexdigest() for k, v in objs.items()}


def get_objects(vm, bucket, digests):
    for k, want in digests.items():
        body = vm.s3.get_object(Bucket=bucket, Key=k)["Body"].read()
        check(hashlib.sha256(body).hexdigest() == want,
              f"{vm.name}: s3://{bucket}/{k}: {len(body)} bytes, sha256 differs from what was put")
    listed = sorted(o["Key"] for o in vm.s3.list_objects_v2(Bucket=bucket).get("Contents", []))
    check(listed == sorted(digests), f"{vm.name}: listing of {bucket} is {listed}")


def on_drives(vm, marker, spread=2):
    """The objects' chunks are on at least `spread` of the node's NVMe drives (nodectl
    drives counts them), and the marker — plaintext — on none of their backing files:
    the data is sealed at rest. Returns the chunk count per drive, by serial number."""
    hits = {os.path.basename(p): len(find_in_file(p, marker)) for _, p in vm.nvme}
    log(f"{vm.name}: plaintext marker occurrences per NVMe backing file: {hits}")
    check(sum(hits.values()) == 0, f"{vm.name}: object plaintext on the drives: {hits}")
    deadline = time.time() + 30  # drive reports are periodic
    while True:
        _, out = vm.shell("nodectl drives --admin 127.0.0.1:9001 --json", timeout=60)
        chunks = {d.get("serial") or str(d["index"]): d["chunks"] for d in json.loads(out)["drives"]}
        if sum(1 for n in chunks.values() if n) >= spread or time.time() > deadline:
            break
        time.sleep(1)
    log(f"{vm.name}: chunks per drive (by serial): {chunks}")
    check(sum(1 for n in chunks.values() if n) >= spread,
          f"{vm.name}: the objects' chunks are on fewer than {spread} drives: {chunks}")
    return chunks


# ---------------------------------------------------------------------------------------
def test_boot(t):
    """UEFI boot with 4 NVMe drives, a BMC and a config disk; S3 from the host; data on
    the NVMe drives only; the Cairn units in the journal; /dev/ipmi0, with mgmtd's watchdog
    armed and its start in the BMC's event log; a power cycle keeps it."""
    vm = boot_node(t, "boot")
    # The boot went through OVMF and systemd-boot, from slot a.
    rc, cmdline = vm.shell("cat /proc/cmdline")
    check("root=PARTLABEL=cairn-a" in cmdline and "cairn.slot=a" in cmdline,
          f"unexpected kernel command line: {cmdline}")
    _, efi = vm.shell("ls /sys/firmware/efi/efivars | grep -c LoaderEntrySelected || true")
    check(efi.strip() not in ("", "0"), "not booted through systemd-boot (no LoaderEntrySelected)")

    log("S3: put and get (boto3)")
    marker, digests = put_objects(vm, "hwtest")
    get_objects(vm, "hwtest", digests)

    log("the written bytes: on the NVMe drives, sealed; not on the boot disk")
    vm.shell("sync")
    on_drives(vm, marker)
    for disk in [vm.disk, vm.config]:
        n = len(find_in_file(disk, marker))
        check(n == 0, f"object bytes found {n} times on {os.path.basename(disk)}")

    log("journal: the Cairn units")
    _, out = vm.shell("journalctl -b --no-pager -o cat -u cairn-nodeos -u cairn-datapathd "
                      "-u cairn-mgmtd -u cairn-ready", timeout=120)
    for unit in ["cairn-nodeos", "cairn-datapathd", "cairn-mgmtd", "cairn-ready"]:
        _, st = vm.shell(f"systemctl is-active {unit}.service", ok=False)
        check(st.strip() == "active", f"{unit}.service is not active: {st.strip()}")
    check("mgmtd serving" in out, "the journal has no 'mgmtd serving' line from cairn-mgmtd:\n"
          + out[-2000:])
    t.artifacts["journal (Cairn units)"] = out.count("\n")

    log("BMC: ipmitool -I open mc info")
    _, mc = vm.shell("ipmitool -I open mc info", timeout=60)
    check("Device ID" in mc and "IPMI Version" in mc, f"ipmitool mc info: {mc}")

    log("BMC: mgmtd armed the watchdog and wrote its start to the event log")
    _, wd = vm.shell("ipmitool -I open mc watchdog get", timeout=60)
    # Counting down (QEMU's BMC reports the running bit as the last Set Watchdog
    # Timer gave it, not whether the timer runs: the countdown is the truth).
    nums = dict(re.findall(r"(Initial|Present) Countdown:\s+([0-9.]+)", wd))
    counting = "Running" in wd or (
        nums.get("Present") is not None and nums.get("Initial") is not None
        and float(nums["Present"]) < float(nums["Initial"]))
    check("SMS/OS" in wd and "Hard Reset" in wd and counting,
          f"the BMC watchdog is not armed by mgmtd: {wd}")
    _, sel = vm.shell("ipmitool -I open sel elist", timeout=60)
    check("OS Boot" in sel, f"no OS Boot event from mgmtd in the SEL: {sel}")

    log("BMC: nodectl node sensors reads the SDR in-band, as ipmitool does")
    _, cs = vm.shell("nodectl cluster status --admin 127.0.0.1:9001 --json", timeout=60)
    nid = json.loads(cs)["nodes"][0]["id"]
    _, out = vm.shell(f"nodectl node sensors {nid} --admin 127.0.0.1:9001 --json", timeout=60)
    sv = json.loads(out)
    _, sdr = vm.shell("ipmitool -I open sdr list full", timeout=60)
    check(sv["source"] == "in-band /dev/ipmi0"
          and [s["name"] for s in sv["sensors"]] == ["CPU Temp"] and "CPU Temp" in sdr,
          f"in-band sensors: {sv}; ipmitool: {sdr}")

    log("power cycle (poweroff, QEMU started again); the objects are still there")
    m = vm.mark()
    vm.boot_started = time.monotonic()
    vm.power_cycle()
    _, took = wait_serving(vm, m, "power cycle")
    t.figures["boot power-cycle-to-serving (s)"] = round(took, 1)
    get_objects(vm, "hwtest", digests)
    _, boots = vm.shell("journalctl --list-boots --no-pager | wc -l")
    check(int(boots.strip()) >= 2, f"the journal did not persist across the power cycle ({boots.strip()} boots)")


def serve_dir(directory):
    """An HTTP server on the host for the guest (user networking: the host is 10.0.2.2)."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    handler = functools.partial(Quiet, directory=directory)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def broken_bundle(t, image, out):
    """cairn.update whose root cannot start systemd (an erofs without /lib/systemd):
    the initramfs gives up and reboots, so every try of that slot fails."""
    import tarfile
    d = os.path.join(t.workdir, "broken")
    os.makedirs(os.path.join(d, "root", "etc"), exist_ok=True)
    with open(os.path.join(d, "root", "etc", "os-release"), "w") as f:
        f.write("ID=broken\n")
    subprocess.run(["mkfs.erofs", "--quiet", os.path.join(d, "root.erofs"), os.path.join(d, "root")],
                   check=True)
    for n in ["vmlinuz", "initrd.img"]:
        shutil.copyfile(os.path.join(image, n), os.path.join(d, n))
    with tarfile.open(os.path.join(image, "cairn.update")) as tf:
        manifest = json.load(tf.extractfile("manifest.json"))
    manifest["version"] = "broken-" + manifest["version"]
    for n in ["root.erofs", "vmlinuz", "initrd.img"]:
        with open(os.path.join(d, n), "rb") as f:
            data = f.read()
        manifest["files"][n] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    with tarfile.open(out, "w", format=tarfile.USTAR_FORMAT) as tf:
        for n in ["manifest.json", "root.erofs", "vmlinuz", "initrd.img"]:
            tf.add(os.path.join(d, n), arcname=n)


def slots(vm):
    _, out = vm.shell("nodectl node slots --json")
    return json.loads(out)


def booted_slot(vm):
    _, cmdline = vm.shell("cat /proc/cmdline")
    for w in cmdline.split():
        if w.startswith("cairn.slot="):
            return w.split("=", 1)[1]
    raise TestFailure(f"no cairn.slot= in {cmdline}")


def wait_blessed(vm, slot, timeout=120):
    """systemd-bless-boot drops the entry's +N-M counter once boot-complete.target is
    reached (cairn-ready succeeded)."""
    deadline = time.monotonic() + timeout
    while True:
        _, ls = vm.shell("ls /efi/loader/entries")
        if f"cairn-{slot}.conf" in ls.split():
            return
        check(time.monotonic() < deadline, f"slot {slot}'s entry was not blessed in {timeout} s: {ls.split()}")
        time.sleep(3)


def update_and_reboot(vm, url, timeout=900):
    m = vm.mark()
    t0 = time.monotonic()
    _, out = vm.shell(f"nodectl node update --no-reboot {url}", timeout=timeout)
    log(f"{vm.name}: nodectl node update: {time.monotonic() - t0:.0f} s; {out.strip().splitlines()[-1:]}")
    vm.send("systemctl reboot")
    vm.boot_started = time.monotonic()
    return m


def test_update(t):
    """A -> B -> A with nodectl node update; a slot that cannot boot rolls back by itself
    through systemd-boot's boot counting."""
    vm = boot_node(t, "update")
    _, digests = put_objects(vm, "upd")
    check(booted_slot(vm) == "a", "the factory image did not boot slot a")
    broken_bundle(t, t.image, os.path.join(t.workdir, "broken.update"))
    os.link(os.path.join(t.image, "cairn.update"), os.path.join(t.workdir, "cairn.update"))
    srv = serve_dir(t.workdir)
    base = f"http://10.0.2.2:{srv.server_address[1]}"
    try:
        for target in ["b", "a"]:
            m = update_and_reboot(vm, f"{base}/cairn.update")
            _, took = wait_serving(vm, m, f"updated to slot {target}")
            t.figures[f"update: reboot into slot {target} to serving (s)"] = round(took, 1)
            check(booted_slot(vm) == target, f"after the update, booted slot is {booted_slot(vm)}, not {target}")
            wait_blessed(vm, target)
            get_objects(vm, "upd", digests)
        log("a broken slot b: three failed tries, then slot a again")
        m = update_and_reboot(vm, f"{base}/broken.update")
        _, took = wait_serving(vm, m, "rollback")
        t.figures["update: broken slot to serving again on the old slot (s)"] = round(took, 1)
        # The initramfs prints this once per failed try (the FATAL line also goes to kmsg).
        fails = vm.serial_text()[m:].count("holds no systemd -- rebooting")
        check(fails == 3, f"expected 3 failed boots of the broken slot, saw {fails}")
        check(booted_slot(vm) == "a", f"after the broken update, booted slot is {booted_slot(vm)}, not a")
        _, ls = vm.shell("ls /efi/loader/entries")
        check("cairn-b+0-3.conf" in ls.split(), f"slot b's entry is not marked bad: {ls.split()}")
        log(f"nodectl node slots: {slots(vm)}")
        get_objects(vm, "upd", digests)
    finally:
        srv.shutdown()


def test_cluster(t):
    """Three nodes on one virtual network form a cluster; with one powered off, every
    object is still readable."""
    import re
    mcast = f"230.0.0.1:{20000 + os.getpid() % 20000}"  # one group per run keeps runs apart
    access, secret = "hw" + secrets.token_hex(6), secrets.token_urlsafe(24)
    vms = []
    for i in range(1, 4):
        ip = f"192.168.77.1{i}"
        extra = f"""
[[network.interface]]
mac = "52:54:00:c0:00:{0x80 | i:02x}"
addresses = ["{ip}/24"]

[cluster]
internal = "{ip}:9100"
"""
        vms.append(boot_node(t, f"node{i}", wait=False, access=access, secret=secret,
                             mac=f"52:54:00:c0:00:{i:02x}", mcast=mcast, smp=1, mem_mib=1536,
                             toml_kw={"extra": extra, "mode": "cluster"}))
    for vm in vms:  # the three boot at once, on the same cores
        _, took = wait_serving(vm, 0)
        t.figures[f"cluster {vm.name} boot-to-serving (s)"] = round(took, 1)
    adm = "--admin 127.0.0.1:9001"
    _, out = vms[0].shell(f"nodectl cluster init --ec 2+1 {adm}", timeout=120)
    m = re.search(r"--token (\S+)", out)
    check(m, f"no join token in: {out}")
    for vm in vms[1:]:
        vm.shell(f"nodectl cluster join 192.168.77.11:9100 --token {m.group(1)} {adm}", timeout=180)
    _, st = vms[0].shell(f"nodectl cluster status {adm}", timeout=60)
    log("cluster status:\n" + st)
    check(len(re.findall(r"\bup\b", st)) == 3, f"not 3 nodes up in the cluster status:\n{st}")
    marker, digests = put_objects(vms[0], "clu")
    get_objects(vms[1], "clu", digests)
    # Powering node3 off must take data away, or the check below proves nothing.
    vms[2].shell("sync")
    on3 = sum(on_drives(vms[2], marker, spread=1).values())
    check(on3 > 0, "node3 holds none of the objects' chunks: the cluster did not spread them")
    log("power off node3; every object still readable from node1 and node2")
    vms[2].stop()
    for vm in vms[:2]:
        get_objects(vm, "clu", digests)


def test_vfio(t):
    """The userspace NVMe driver in the image: with a vIOMMU and `datapath.backend = "nvme"`,
    the node serves S3 from drives it drives through VFIO; a drive pulled out of the
    running VM (device_del) fails cleanly and the objects stay readable."""
    extra = "\n[hugepages]\ncount = 64\n"
    vm = boot_node(t, "vfio", iommu=True, mem_mib=2048,
                   toml_kw={"extra": extra, "backend": "nvme"})
    _, cmdline = vm.shell("cat /proc/cmdline")
    check("intel_iommu=on" in cmdline, f"the image's kernel command line lacks intel_iommu=on: {cmdline}")

    log("the drives: on vfio-pci, none on the kernel's nvme driver, no /dev/nvme*")
    _, on_vfio = vm.shell("ls /sys/bus/pci/drivers/vfio-pci/ | grep -E '^[0-9a-f]{4}:' || true")
    bdfs = on_vfio.split()
    check(len(bdfs) == len(vm.nvme), f"{len(bdfs)} devices on vfio-pci, want {len(vm.nvme)}: {bdfs}")
    _, on_nvme = vm.shell("ls /sys/bus/pci/drivers/nvme/ 2>/dev/null | grep -E '^[0-9a-f]{4}:' || true")
    check(on_nvme.split() == [], f"the kernel nvme driver holds {on_nvme.split()}")
    _, devs = vm.shell("ls /dev | grep -E '^nvme' || true")
    check(devs.split() == [], f"block devices of the kernel nvme driver exist: {devs.split()}")
    _, ps = vm.shell("tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value cairn-datapathd)/cmdline")
    check("--backend nvme" in ps, f"datapathd does not run the nvme backend: {ps}")

    def drives():
        _, out = vm.shell("nodectl drives --admin 127.0.0.1:9001 --json", timeout=60)
        return json.loads(out)["drives"]

    ds = drives()
    log("nodectl drives: " + "; ".join(f"{d['index']} {d['backend']} {d['location']} {d.get('serial')} "
                                       f"{d['state']}" for d in ds))
    check([d["backend"] for d in ds] == ["nvme"] * len(vm.nvme), f"backends: {ds}")
    check(sorted(d.get("serial") for d in ds) == sorted(sn for sn, _ in vm.nvme),
          f"serials {[d.get('serial') for d in ds]} are not the emulated drives' {[sn for sn, _ in vm.nvme]}")

    log("S3 through the nvme backend; the bytes are in the drives' backing files")
    marker, digests = put_objects(vm, "vfio")
    get_objects(vm, "vfio", digests)
    chunks = on_drives(vm, marker)
    check(len(find_in_file(vm.disk, marker)) == 0, "object bytes found on the boot disk")

    # Pull a drive that holds some of the objects: its I/O must fail, the node must say
    # so, and every object must still read back (from the others, rebuilt or decoded).
    gone = max(range(len(vm.nvme)), key=lambda i: chunks.get(vm.nvme[i][0], 0))
    serial = vm.nvme[gone][0]
    log(f"device_del nvme{gone} ({serial}) from the running VM")
    out = vm.monitor(f"device_del nvme{gone}")
    check("error" not in out.lower(), f"device_del: {out}")
    deadline = time.monotonic() + 180
    while True:
        failed = [d for d in drives() if d.get("serial") == serial and d["state"] != "healthy"]
        if failed:
            log(f"drive {serial}: {failed[0]['state']}: {failed[0].get('reason', '')}")
            break
        # I/O to the drive is what finds it gone: keep reading.
        get_objects(vm, "vfio", digests)
        check(time.monotonic() < deadline, f"drive {serial} not reported failed 180 s after device_del")
        time.sleep(3)
    get_objects(vm, "vfio", digests)
    _, st = vm.shell("systemctl is-active cairn-datapathd cairn-mgmtd", ok=False)
    check(st.split() == ["active", "active"], f"daemons after the drive loss: {st.split()}")
    _, bound = vm.shell("ls /sys/bus/pci/drivers/vfio-pci/ | grep -cE '^[0-9a-f]{4}:' || true")
    log(f"controllers still on vfio-pci: {bound.strip()}")


TESTS = {"boot": test_boot, "update": test_update, "cluster": test_cluster, "vfio": test_vfio}
QUICK = ["boot", "vfio"]  # --all adds update and cluster


# ---------------------------------------------------------------------------------------
class T:
    def __init__(self, name, image, workdir):
        self.name, self.image = name, image
        self.workdir = os.path.join(workdir, name)
        shutil.rmtree(self.workdir, ignore_errors=True)
        os.makedirs(self.workdir)
        self.vms, self.figures, self.artifacts = [], {}, {}


def preflight(image):
    """What the tests need; missing pieces fail the run (never a silent skip)."""
    missing = []
    for tool in [QEMU, "mkfs.vfat", "mcopy", "mkfs.erofs"]:
        if not shutil.which(tool):
            missing.append(f"{tool} (apt-get install qemu-system-x86 dosfstools mtools erofs-utils)")
    for f in [OVMF_CODE, OVMF_VARS]:
        if not os.path.exists(f):
            missing.append(f"{f} (apt-get install ovmf)")
    for a in ["cairn.img", "cairn.update", "manifest.json"]:
        if not os.path.exists(os.path.join(image, a)):
            missing.append(f"{image}/{a} (build it: image/build.sh)")
    try:
        import boto3  # noqa: F401
    except ImportError:
        missing.append("python3 boto3 (pip install boto3)")
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", nargs="*", help=f"tests to run (of {', '.join(TESTS)})")
    ap.add_argument("--quick", action="store_true", help=f"the CI subset: {', '.join(QUICK)}")
    ap.add_argument("--all", action="store_true", help="every test")
    ap.add_argument("--image", default=os.path.join(REPO, "image", "out"))
    ap.add_argument("--workdir", default=os.path.join(REPO, "hwtests", "out"))
    ap.add_argument("--keep", action="store_true", help="keep disks of passed tests too")
    a = ap.parse_args()
    names = list(TESTS) if a.all else QUICK if (a.quick or not a.tests) else a.tests
    for n in names:
        if n not in TESTS:
            ap.error(f"unknown test {n} (known: {', '.join(TESTS)})")
    missing = preflight(a.image)
    if missing:
        print("hwtests: FAILED: missing prerequisites:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    with open(os.path.join(a.image, "manifest.json")) as f:
        log(f"image {json.load(f)['version']} from {a.image}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    passed, failed, figures = [], [], {}
    for n in names:
        t = T(n, a.image, a.workdir)
        log(f"=== {n}: {TESTS[n].__doc__.split(chr(10))[0]}")
        t0 = time.monotonic()
        try:
            TESTS[n](t)
            dt = time.monotonic() - t0
            log(f"=== {n}: PASSED in {dt:.0f} s")
            passed.append(n)
        except (TestFailure, Exception) as e:  # any error fails the test, with context
            dt = time.monotonic() - t0
            log(f"=== {n}: FAILED in {dt:.0f} s: {type(e).__name__}: {e}")
            for vm in t.vms:
                print(f"--- {vm.name}: serial console, last lines ({vm.serial}):\n{vm.serial_tail()}\n---",
                      flush=True)
            failed.append(n)
        finally:
            stop_all()
        figures[f"{n} duration (s)"] = round(dt)
        figures.update(t.figures)
        if n in passed and not a.keep:
            for vm in t.vms:  # disks are big; logs stay
                for p in [vm.disk, vm.config, vm.vars] + [p for _, p in vm.nvme]:
                    if p and os.path.exists(p):
                        os.remove(p)
    log("figures: " + json.dumps(figures, indent=1))
    print(f"{len(passed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
