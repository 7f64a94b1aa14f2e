#!/usr/bin/env bash
# The real VFIO path of Cairn's userspace NVMe driver, in a QEMU guest.
#
#   hwtests/nvme-vfio/run.sh            verify + hot unplug (the test)
#   hwtests/nvme-vfio/run.sh --bench    nvme backend vs uring backend in the guest
#
# Boots a Debian 6.1 kernel with a busybox initramfs we build (no root needed for
# that: cpio), on q35 with an emulated Intel IOMMU and two emulated NVMe drives
# behind PCIe root ports (so they can be unplugged), backed by files here. In
# the guest: vfio modules, the drives bound to vfio-pci (found by class 0x010802),
# then `nvme-selftest` (datapath-spdk/nvme/examples) writes patterns and a chunk
# store through the driver and reads them back, and `datapathd --backend nvme`
# opens that chunk store over VFIO and stops cleanly. The host then checks the pattern
# bytes are in the backing files, and that the kernel nvme driver never bound the
# drives (the nvme module is not even loaded). Then a drive is removed with
# QEMU's `device_del` while I/O runs on both: its I/O must fail cleanly (no hang,
# no panic) while the other drive keeps working.
#
# Needs: qemu-system-x86_64, busybox (static), depmod/modprobe (kmod), python3,
# a linux-image-6.1.*-amd64 .deb (downloaded with apt-get into the cache dir
# when missing), and cargo. Exit 0 = pass, 1 = fail, 2 = something missing.
#
# Env: CAIRN_HWTEST_CACHE (default /var/cache/cairn-hwtests), KEEP=1 keeps the
# work directory, CAIRN_QEMU_ACCEL (default tcg; KVM hangs on these machines),
# BENCH_SECS (default 3), NVME_SELFTEST and DATAPATHD (the guest's programs, built
# already: CI passes its own build's; unset, they are built here, release).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TAG=nvme-vfio
# shellcheck source=hwtests/lib/guest.sh
. "$HERE/../lib/guest.sh"
ACCEL=${CAIRN_QEMU_ACCEL:-tcg}
MODE=test
[[ "${1:-}" == "--bench" ]] && MODE=bench
BENCH_SECS=${BENCH_SECS:-3}

guest_tools cargo
guest_kernel

# --- the guest program ----------------------------------------------------------
if [[ -n ${NVME_SELFTEST:-} && -n ${DATAPATHD:-} ]]; then
    SELFTEST=$NVME_SELFTEST
else
    say "building nvme-selftest and datapathd (release)"
    (cd "$REPO" && timeout 2400 cargo build --release -q -p cairn-nvme --example nvme-selftest \
        && timeout 2400 cargo build --release -q -p cairn-datapath --bin datapathd) || fail "cargo build"
    TARGET=${CARGO_TARGET_DIR:-$REPO/target}
    SELFTEST="$TARGET/release/examples/nvme-selftest"
    DATAPATHD="$TARGET/release/datapathd"
fi
[[ -x "$SELFTEST" && -x "$DATAPATHD" ]] || fail "no $SELFTEST or $DATAPATHD"

# --- the initramfs --------------------------------------------------------------
WORK=$(mktemp -d /tmp/cairn-nvme-vfio.XXXXXX)
cleanup() {
    [[ -n "${QPID:-}" ]] && kill "$QPID" 2>/dev/null || true
    if [[ "${KEEP:-0}" == 1 ]]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
R="$WORK/initramfs"
guest_root "$R" sh mount umount insmod cat ls echo readlink basename sleep poweroff mkdir grep sed wc tr head dd ip kill
cp "$SELFTEST" "$R/bin/nvme-selftest"
cp "$DATAPATHD" "$R/bin/datapathd"
# Their shared libraries (glibc builds), found with ldd.
ldd "$SELFTEST" "$DATAPATHD" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\// && $i !~ /:$/) print $i }' | sort -u | while read -r lib; do
    mkdir -p "$R$(dirname "$lib")"
    cp -L "$lib" "$R$lib"
done

guest_modules "$R" vfio vfio-pci
: > "$R/mods/nvme.order"
[[ $MODE == bench ]] && guest_modules "$R" nvme nvme

cat > "$R/init" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mode=test
for w in $(cat /proc/cmdline); do case "$w" in cairn.mode=*) mode=${w#cairn.mode=};; esac; done
echo "GUEST-UP mode=$mode uptime=$(cut -d' ' -f1 /proc/uptime)"
load() { for m in $(cat /mods/$1.order); do insmod /mods/$m 2>/dev/null || echo "INSMOD-FAIL $m"; done; }
drivers() {
    for d in /sys/bus/pci/devices/*; do
        if [ "$(cat $d/class)" = "0x010802" ]; then
            drv=none; [ -e $d/driver ] && drv=$(basename $(readlink $d/driver))
            echo "DRIVER $1 $(basename $d) $drv"
        fi
    done
}
echo 64 > /proc/sys/vm/nr_hugepages
echo "HUGEPAGES $(cat /proc/sys/vm/nr_hugepages)"
nvmes=""
for d in /sys/bus/pci/devices/*; do [ "$(cat $d/class)" = "0x010802" ] && nvmes="$nvmes $(basename $d)"; done
echo "NVME-FUNCTIONS$nvmes"
if [ "$mode" = test ]; then
    load vfio
    drivers before-bind
    /bin/nvme-selftest bind
    drivers after-bind
    ls /dev/vfio
    /bin/nvme-selftest verify $nvmes
    set -- $nvmes
    # datapathd --backend nvme over VFIO opens the chunk store the self-test left
    # on the first drive (formatted with cluster id 0202..., drive index 0).
    ip link set lo up
    /bin/datapathd --backend nvme --drive $1 --listen 127.0.0.1:0 --local-key /tmp/chunk.key --ready-file /tmp/ready \
        --cluster-id 02020202-0202-0202-0202-020202020202 > /tmp/dp.log 2>&1 &
    dp=$!
    i=0; while [ ! -s /tmp/ready ] && [ $i -lt 300 ] && kill -0 $dp 2>/dev/null; do sleep 0.1; i=$((i+1)); done
    echo "DATAPATHD ready=$(cat /tmp/ready 2>/dev/null)"
    kill -TERM $dp; wait $dp; echo "DATAPATHD exit=$?"
    grep -E "drive open|NVMe controller enabled|ERROR" /tmp/dp.log | sed 's/^/DATAPATHD-LOG /'
    /bin/nvme-selftest hotplug $1 $2
    # Letting go of the device lets the kernel finish the unplug.
    i=0; while [ -e /sys/bus/pci/devices/$2 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
    [ -e /sys/bus/pci/devices/$2 ] && echo "UNPLUG-STUCK $2" || echo "UNPLUG-COMPLETE $2"
    drivers end
    [ -d /sys/module/nvme ] && echo "NVME-MODULE loaded" || echo "NVME-MODULE absent"
else
    secs=3
    for w in $(cat /proc/cmdline); do case "$w" in cairn.secs=*) secs=${w#cairn.secs=};; esac; done
    load nvme
    i=0; while [ ! -b /dev/nvme0n1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    drivers kernel
    /bin/nvme-selftest bench-uring /dev/nvme0n1 $secs
    load vfio
    /bin/nvme-selftest bind
    drivers vfio
    set -- $nvmes
    /bin/nvme-selftest bench-nvme $1 $secs
fi
echo "GUEST-DONE uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
EOF
chmod +x "$R/init"
guest_pack "$R"

# --- the drives and the VM -------------------------------------------------------
D0="$WORK/d0.img"; D1="$WORK/d1.img"
SIZE=64M; [[ $MODE == bench ]] && SIZE=1G
truncate -s "$SIZE" "$D0" "$D1"
MON="$WORK/mon.sock"
APPEND="console=ttyS0 intel_iommu=on loglevel=4 panic=-1 cairn.mode=$MODE cairn.secs=$BENCH_SECS"
QEMU_ARGS=(
    -machine q35,kernel-irqchip=split -accel "$ACCEL" -cpu max -m 1024 -smp 1
    -device intel-iommu,intremap=on,caching-mode=on
    -kernel "$VMLINUZ" -initrd "$WORK/initrd.gz" -append "$APPEND"
    -display none -no-reboot -serial "file:$WORK/serial.log"
    -monitor "unix:$MON,server,nowait"
    -device pcie-root-port,id=rp1,bus=pcie.0,addr=0x10,chassis=1,slot=1
    -device pcie-root-port,id=rp2,bus=pcie.0,addr=0x11,chassis=2,slot=2
    -drive "file=$D0,if=none,id=n0,format=raw,cache=writeback"
    -device nvme,serial=CAIRN-A,drive=n0,id=nvme0,bus=rp1
)
[[ $MODE == test ]] && QEMU_ARGS+=(
    -drive "file=$D1,if=none,id=n1,format=raw,cache=writeback"
    -device nvme,serial=CAIRN-B,drive=n1,id=nvme1,bus=rp2
)
say "booting the guest ($ACCEL)"
: > "$WORK/serial.log"
qemu-system-x86_64 "${QEMU_ARGS[@]}" > "$WORK/qemu.log" 2>&1 &
QPID=$!

monitor() {
    python3 - "$MON" "$1" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
time.sleep(0.3); s.recv(65536)
s.sendall((sys.argv[2] + "\n").encode()); time.sleep(0.5)
print(s.recv(65536).decode(errors="replace"))
PY
}

wait_for "GUEST-UP" 120
say "guest up: $(grep -m1 GUEST-UP "$WORK/serial.log")"
if [[ $MODE == test ]]; then
    wait_for "HOTPLUG-READY" 600
    GONE=$(grep -m1 HOTPLUG-READY "$WORK/serial.log" | awk '{print $2}' | tr -d '\r')
    say "verify done; unplugging nvme1 ($GONE) with device_del while I/O runs"
    monitor "device_del nvme1" > "$WORK/monitor.log" || fail "monitor"
    wait_for "RESULT .* hotplug" 240
fi
wait_for "GUEST-DONE" 300
wait_poweroff
LOG="$WORK/serial.log"
tr -d '\r' < "$LOG" | sed 's/\x1b\[[0-9;]*m//g' > "$WORK/serial.txt"; LOG="$WORK/serial.txt"
grep -E "^(GUEST|NVME|DRIVER|BOUND|CONTROLLER|PATTERN|CHUNKS|VERIFIED|DATAPATHD|HOTPLUG|UNPLUG|HUGEPAGES|BENCH|RESULT|INSMOD)" "$LOG" || true
! grep -q "INSMOD-FAIL" "$LOG" || fail "a module did not load"
grep -qi "kernel panic\|BUG:\|panicked at" "$LOG" && fail "panic in the guest"

if [[ $MODE == bench ]]; then
    grep -q "RESULT PASS bench-uring" "$LOG" || fail "uring bench"
    grep -q "RESULT PASS bench-nvme" "$LOG" || fail "nvme bench"
    echo
    echo "In-guest 4 KiB random reads, same emulated drive (QEMU nvme, TCG, 1 vCPU), ${BENCH_SECS}s each:"
    printf "%-8s %5s %12s %16s %18s\n" backend qd IOPS "IOPS/guest-core" "guest CPU ns/IO"
    grep "^BENCH" "$LOG" | sed 's/[a-z_]*=//g' | awk '{printf "%-8s %5s %12s %16s %18s\n", $2, $3, $4, $5, $6}'
    say "bench done in $(elapsed) s"
    exit 0
fi

# --- host-side checks -----------------------------------------------------------
grep -q "RESULT PASS verify" "$LOG" || fail "verify did not pass in the guest"
grep -q "RESULT PASS hotplug" "$LOG" || fail "hot unplug was not handled cleanly"
grep -q "NVME-MODULE absent" "$LOG" || fail "the kernel nvme module was loaded"
grep -q "^DATAPATHD exit=0" "$LOG" || fail "datapathd --backend nvme did not run and stop cleanly"
grep -q "^DATAPATHD-LOG .*drive open.*device=nvme:0000:01:00.0/ns1.*chunks=24" "$LOG" \
    || fail "datapathd did not open the chunk store through the nvme backend"
grep -q "UNPLUG-COMPLETE" "$LOG" || fail "the guest kernel could not finish the unplug (device not released)"
if grep -E "^DRIVER " "$LOG" | awk '$4 == "nvme"' | grep -q .; then fail "the kernel nvme driver bound a drive"; fi
grep -E "^DRIVER after-bind " "$LOG" | awk '$4 != "vfio-pci" {bad=1} END {exit bad}' || fail "a drive was not on vfio-pci"
# Which backing file is behind which function: from the serial numbers.
python3 - "$LOG" "$D0" "$D1" <<'PY' || fail "pattern bytes are not in the backing files"
import re, sys
log, d0, d1 = sys.argv[1], sys.argv[2], sys.argv[3]
files = {"CAIRN-A": d0, "CAIRN-B": d1}
bdf_file, checked = {}, 0
def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
    return h
for line in open(log):
    m = re.match(r'CONTROLLER (\S+) .*serial="([^"]+)"', line)
    if m:
        bdf_file[m.group(1)] = files[m.group(2)]
    m = re.match(r"PATTERN (\S+) offset=(\d+) len=(\d+) fnv=([0-9a-f]+)", line)
    if m:
        path = bdf_file[m.group(1)]
        off, n = int(m.group(2)), int(m.group(3))
        with open(path, "rb") as f:
            f.seek(off); data = f.read(n)
        got = "%016x" % fnv(data)
        ok = got == m.group(4) and (b"CAIRN-PATTERN " + m.group(1).encode()) in data
        print(f"  host check {path.split('/')[-1]} @{off}+{n}: fnv {got} {'ok' if ok else 'MISMATCH (guest said ' + m.group(4) + ')'}")
        if not ok:
            sys.exit(1)
        checked += 1
for name, path in files.items():
    with open(path, "rb") as f:
        magic = f.read(8)
    print(f"  host check {path.split('/')[-1]} ({name}) superblock magic {magic!r}")
    if magic != b"CAIRNSB1":
        sys.exit(1)
if checked < 8:
    print(f"  only {checked} patterns checked"); sys.exit(1)
PY
grep -q "^CONTROLLER $GONE .*serial=\"CAIRN-B\"" "$LOG" || fail "the unplugged function $GONE is not drive CAIRN-B (nvme1)"
say "PASS (patterns on both drives, chunk store on both, kernel nvme never bound, clean hot unplug) in $(elapsed) s"
