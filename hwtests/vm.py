"""A Cairn node in QEMU (TCG): UEFI boot of a copy of the image, emulated NVMe drives,
a config disk, QEMU's simulated BMC, a serial log and the VM debug shell.

The debug shell is a virtio-serial port named org.cairn.debug: the image runs a root
shell on it only when the hypervisor provides that port (image/rootfs/usr/lib/systemd/system/
cairn-debug-shell.path), so tests can run journalctl and ipmitool in the guest
without any test-only code in the image and without SSH keys in the config.
"""
import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time

OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.fd"
OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.fd"
QEMU = "qemu-system-x86_64"

_live = []  # every VM started, so the runner can stop them all on exit


class TestFailure(Exception):
    """A failed assertion; the runner prints it with the serial log's tail."""


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # QEMU dies with the runner even if the runner is killed with SIGKILL.
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()


def stop_all():
    for vm in list(_live):
        vm.stop()


def make_config_disk(path, node_toml):
    """A FAT volume labelled CAIRNCFG holding node.toml at its root (nodeos/README.md)."""
    toml = path + ".node.toml"
    with open(toml, "w") as f:
        f.write(node_toml)
    with open(path, "wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["mkfs.vfat", "-n", "CAIRNCFG", path], check=True, capture_output=True)
    subprocess.run(["mcopy", "-i", path, toml, "::/node.toml"], check=True,
                   env=dict(os.environ, MTOOLS_SKIP_CHECK="1"))


def find_in_file(path, needle):
    """Offsets of needle in a (sparse) file; holes are skipped with SEEK_DATA."""
    hits = []
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        fd = f.fileno()
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after pos
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            f.seek(start)
            off, tail = start, b""
            while off < end:
                block = f.read(min(8 << 20, end - off))
                if not block:
                    break
                buf = tail + block
                i = buf.find(needle)
                while i >= 0:
                    hits.append(off - len(tail) + i)
                    i = buf.find(needle, i + 1)
                tail = buf[-(len(needle) - 1):]
                off += len(block)
            pos = end
    return sorted(set(hits))



# A full sensor record (IPMI 2.0, 43.1): CPU Temp, degrees C, M=1, upper
# non-critical 75, upper critical 85, thresholds readable.
CPU_TEMP_SDR = [
    0x00, 0x00, 0x51, 0x01, 0x33, 0x20, 0x00, 0x01, 0x03, 0x01, 0x7f, 0x48, 0x01, 0x01,
    0x00, 0x70, 0x00, 0x70, 0x18, 0x18, 0x00, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x00, 0x00, 0x55, 0x4b, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0xc8] + list(b"CPU Temp")

class VM:
    def __init__(self, name, workdir, image_dir, *, nvme=4, nvme_mib=1024, config_toml=None,
                 mem_mib=2048, smp=2, mac="52:54:00:c0:00:01", user_net=True, mcast=None,
                 disk=None, direct_kernel=False, iommu=False, append=""):
        self.name = name
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.image_dir = image_dir
        self.mac = mac
        self.mem_mib, self.smp = mem_mib, smp
        self.user_net, self.mcast = user_net, mcast
        # direct_kernel: -kernel/-initrd of the build instead of OVMF + systemd-boot.
        self.direct_kernel = direct_kernel
        self.append = append  # more kernel arguments, for a direct kernel boot
        # iommu: an emulated Intel IOMMU (what VFIO needs) and each NVMe drive behind its
        # own PCIe root port, so that `device_del` can pull it from the running node.
        self.iommu = iommu
        self.monitor_path = os.path.join(self.dir, "monitor.sock")
        self.serial = os.path.join(self.dir, "serial.log")
        self.dbg_path = os.path.join(self.dir, "dbg.sock")
        self.proc = None
        self.sock = None
        self._buf = b""
        self.started_at = None
        # Boot disk: a sparse copy of the built image (the original stays untouched).
        self.disk = disk or os.path.join(self.dir, "cairn.img")
        if disk is None:
            subprocess.run(["cp", "--sparse=always", os.path.join(image_dir, "cairn.img"),
                            self.disk], check=True)
        self.vars = os.path.join(self.dir, "OVMF_VARS.fd")
        shutil.copyfile(OVMF_VARS, self.vars)
        self.nvme = []
        for i in range(nvme):
            p = os.path.join(self.dir, f"nvme{i}.img")
            with open(p, "wb") as f:
                f.truncate(nvme_mib << 20)
            self.nvme.append((f"SN-{name.upper()}-{i}", p))
        self.config = None
        if config_toml is not None:
            self.config = os.path.join(self.dir, "config.img")
            make_config_disk(self.config, config_toml)
        self.s3_port = free_port()
        self.admin_port = free_port()
        # The BMC's SDR repository: one full threshold sensor record, "CPU Temp"
        # (the bytes ci/bmc-sim.sh gives ipmi_sim).
        self.sdr = os.path.join(self.dir, "bmc.sdr")
        with open(self.sdr, "wb") as f:
            f.write(bytes(CPU_TEMP_SDR))

    def command(self):
        cmd = [QEMU, "-accel", "tcg", "-machine", "q35,kernel-irqchip=split" if self.iommu else "q35",
               "-cpu", "max", "-smp", str(self.smp), "-m", str(self.mem_mib), "-display", "none",
               "-name", self.name]
        if self.iommu:  # before the devices it translates for
            cmd += ["-device", "intel-iommu,intremap=on,caching-mode=on"]
        cmd += ["-monitor", f"unix:{self.monitor_path},server=on,wait=off",
               "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
               "-drive", f"if=pflash,format=raw,unit=1,file={self.vars}",
               "-chardev", f"file,id=ser0,path={self.serial},append=on",
               "-serial", "chardev:ser0",
               "-chardev", f"socket,id=dbg,path={self.dbg_path},server=on,wait=off",
               "-device", "virtio-serial-pci",
               "-device", "virtserialport,chardev=dbg,name=org.cairn.debug",
               "-drive", f"file={self.disk},format=raw,if=none,id=boot",
               "-device", "virtio-blk-pci,drive=boot" + ("" if self.direct_kernel else ",bootindex=0"),
               "-device", f"ipmi-bmc-sim,id=bmc0,sdrfile={self.sdr}",
               "-device", "isa-ipmi-kcs,bmc=bmc0",
               "-device", "virtio-rng-pci"]
        if self.direct_kernel:
            cmd += ["-kernel", os.path.join(self.image_dir, "vmlinuz"),
                    "-initrd", os.path.join(self.image_dir, "initrd.img"),
                    "-append", "root=PARTLABEL=cairn-a cairn.slot=a ro console=ttyS0,115200 panic=10 "
                    + self.append]
        if self.config:
            cmd += ["-drive", f"file={self.config},format=raw,if=none,id=cfg",
                    "-device", "virtio-blk-pci,drive=cfg"]
        for i, (serial, path) in enumerate(self.nvme):
            cmd += ["-drive", f"file={path},format=raw,if=none,id=n{i}"]
            if self.iommu:
                cmd += ["-device", f"pcie-root-port,id=rp{i},bus=pcie.0,chassis={i + 1},slot={i + 1}",
                        "-device", f"nvme,serial={serial},drive=n{i},id=nvme{i},bus=rp{i}"]
            else:
                cmd += ["-device", f"nvme,serial={serial},drive=n{i},id=nvme{i}"]
        if self.user_net:
            fwd = (f"hostfwd=tcp:127.0.0.1:{self.s3_port}-:9000,"
                   f"hostfwd=tcp:127.0.0.1:{self.admin_port}-:9001")
            cmd += ["-netdev", f"user,id=n0,{fwd}",
                    "-device", f"virtio-net-pci,netdev=n0,mac={self.mac}"]
        if self.mcast:
            cmd += ["-netdev", f"socket,id=n1,mcast={self.mcast},localaddr=127.0.0.1",
                    "-device", f"virtio-net-pci,netdev=n1,mac={self.mac[:-2]}{0x80 | int(self.mac[-2:], 16):02x}"]
        return cmd

    def start(self):
        with open(os.path.join(self.dir, "qemu.cmd"), "w") as f:
            f.write(" ".join(self.command()) + "\n")
        self.qemu_log = open(os.path.join(self.dir, "qemu.log"), "ab")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=self.qemu_log, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)
        _live.append(self)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.dbg_path):
            self._check_running()
            check(time.monotonic() < deadline, f"{self.name}: QEMU did not create {self.dbg_path}")
            time.sleep(0.1)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.dbg_path)
        return self

    def monitor(self, command, timeout=30):
        """One QEMU monitor (HMP) command, e.g. `device_del nvme3`; returns its output."""
        with socket.socket(socket.AF_UNIX) as m:
            m.settimeout(timeout)
            m.connect(self.monitor_path)
            out = b""
            while not out.endswith(b"(qemu) "):  # the banner, then the prompt
                out += m.recv(4096)
            m.sendall(command.encode() + b"\n")
            out = b""
            while not out.endswith(b"(qemu) "):
                chunk = m.recv(4096)
                if not chunk:
                    break
                out += chunk
        return out.decode(errors="replace")

    def _check_running(self):
        if self.proc and self.proc.poll() is not None:
            with open(os.path.join(self.dir, "qemu.log"), "rb") as f:
                err = f.read()[-2000:].decode(errors="replace")
            raise TestFailure(f"{self.name}: QEMU exited with {self.proc.returncode}: {err}")

    def stop(self):
        """Pulls the plug (the runner's clean-up, and a node failure)."""
        if self.sock:
            self.sock.close()
            self.sock = None
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self in _live:
            _live.remove(self)

    def power_cycle(self, timeout=180):
        """A clean power-off from the guest, then QEMU started again on the same disks:
        what a BMC power cycle is. (QEMU 7.2's warm reset under TCG with OVMF hung in
        the firmware about once in six tries; a cold start does not.)"""
        self.send("systemctl poweroff")
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            check(time.monotonic() < deadline, f"{self.name}: still running {timeout} s after poweroff")
            time.sleep(0.5)
        if self.sock:
            self.sock.close()
            self.sock = None
        self._buf = b""
        if self in _live:
            _live.remove(self)
        for p in (self.dbg_path, self.monitor_path):
            if os.path.exists(p):
                os.unlink(p)
        self.start()

    # --- the serial console -------------------------------------------------------------
    def serial_text(self):
        try:
            with open(self.serial, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def mark(self):
        """A position in the serial log; wait_serial(since=mark) looks only after it."""
        return len(self.serial_text())

    def wait_serial(self, pattern, timeout, since=0):
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            m = rx.search(self.serial_text(), since)
            if m:
                return m
            self._check_running()
            if time.monotonic() > deadline:
                raise TestFailure(f"{self.name}: no /{pattern}/ on the serial console in {timeout} s")
            time.sleep(0.5)

    def serial_tail(self, n=40):
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.serial_text())
        return "\n".join(text.replace("\r", "").splitlines()[-n:])

    # --- the debug shell ----------------------------------------------------------------
    def shell(self, cmd, timeout=60, ok=True):
        """Runs cmd with /bin/sh in the guest; returns (exit code, output)."""
        tok = secrets.token_hex(6)
        self.sock.sendall(f"{{ {cmd}\n}} </dev/null 2>&1; echo \"@@{tok}@@$?\"\n".encode())
        rx = re.compile(rb"@@" + tok.encode() + rb"@@(\d+)\n")
        deadline = time.monotonic() + timeout
        self.sock.settimeout(1)
        while True:
            m = rx.search(self._buf)
            if m:
                out = self._buf[:m.start()].decode(errors="replace")
                self._buf = self._buf[m.end():]
                rc = int(m.group(1))
                if ok:
                    check(rc == 0, f"{self.name}: `{cmd}` exited {rc}:\n{out[-3000:]}")
                return rc, out
            self._check_running()
            if time.monotonic() > deadline:
                raise TestFailure(f"{self.name}: `{cmd}` gave no answer in {timeout} s "
                                  f"(debug shell); got: {self._buf[-500:]!r}")
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            check(data, f"{self.name}: debug shell socket closed")
            self._buf += data

    def send(self, cmd):
        """Runs cmd in the guest without waiting for it: for `systemctl reboot`, which may
        take the shell down before it can answer."""
        self.sock.sendall(f"{cmd} </dev/null >/dev/null 2>&1 &\n".encode())

    def wait_shell(self, timeout=180):
        """After a (re)boot: until the guest's shell answers. Each try reconnects, so QEMU
        tells the new guest that the host side of the port is open."""
        deadline = time.monotonic() + timeout
        while True:
            self.sock.close()
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(self.dbg_path)
            self._buf = b""
            try:
                self.shell("true", timeout=15)
                return
            except TestFailure:
                self._check_running()
                if time.monotonic() > deadline:
                    raise TestFailure(f"{self.name}: the debug shell does not answer after "
                                      f"{timeout} s (is cairn-debug-shell.service running?)")

    def drop_shell_output(self):
        self._buf = b""
