#!/usr/bin/env bash
# The Linux kernel's NFS client against Cairn's NFS endpoint, in a QEMU guest.
#
#   hwtests/nfs-kernel/run.sh [BIN_DIR] [--files N]   (BIN_DIR default target/release; N 1000)
#
# The host kernel here has no NFS client, so the client runs in a guest: a Debian
# 6.1 kernel with a busybox initramfs (hwtests/lib/guest.sh), its nfs/nfsv3
# modules, and QEMU's user network, where the host's loopback is 10.0.2.2. On the
# host, `nodectl dev up` serves S3 and NFS on file-backed drives, with the bucket
# exported to 127.0.0.1 (QEMU's user network connects from there).
#
# In the guest, `mount -t nfs -o vers=3,proto=tcp,port=P,mountport=P,nolock` (no
# mount.nfs: busybox passes the options to the kernel as text): an object PUT over
# S3 is read as a file; a tree of N small files is copied in with `cp -r`; a 32 MiB
# file is written with dd and fsync; the tree's directory is renamed; a few bytes
# of the big file are overwritten in place. The host then reads all of it over S3
# (boto3), byte for byte, and the tree only under its new name. Then, while the
# guest writes 64 MiB with `dd conv=fsync`, every Cairn process is killed with -9
# and the node restarted on the same data under the live mount: the write must
# finish and read back whole over S3 (the client resends what the dead process had
# not committed, told by the new write verifier). Through the same mount (the
# same handles) the guest reads the big file back after dropping its caches,
# writes a new file and unmounts; the host checks both over S3.
#
# Exit 0 = pass, 1 = fail, 2 = something missing. Env: KEEP=1 keeps the work
# directory, CAIRN_QEMU_ACCEL (default tcg).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TAG=nfs-kernel
# shellcheck source=hwtests/lib/guest.sh
. "$HERE/../lib/guest.sh"
BIN=$REPO/target/release
FILES=1000
while [[ $# -gt 0 ]]; do
    case "$1" in
        --files) FILES=$2; shift 2 ;;
        *) BIN=$(cd "$1" && pwd); shift ;;
    esac
done
ACCEL=${CAIRN_QEMU_ACCEL:-tcg}
for b in nodectl mgmtd datapathd; do [[ -x $BIN/$b ]] || missing "$BIN/$b (cargo build --release --bins)"; done
python3 -c 'import boto3' 2>/dev/null || missing "boto3 (ci/install-deps.sh)"
guest_tools
guest_kernel

WORK=$(mktemp -d /tmp/cairn-nfs-kernel.XXXXXX)
SUP=""
cleanup() {
    [[ -n "${QPID:-}" ]] && kill "$QPID" 2>/dev/null || true
    [[ -n "$SUP" ]] && kill -9 "$SUP" 2>/dev/null || true
    pkill -9 -f "$WORK/data" 2>/dev/null || true
    if [[ "${KEEP:-0}" == 1 ]]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# --- the node on the host ------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port); NPORT=$(free_port); RPORT=$(free_port)
export CAIRN_ROOT_ACCESS_KEY=NFSKERNEL$RANDOM$RANDOM
export CAIRN_ROOT_SECRET_KEY=$(head -c 30 /dev/urandom | base64 | tr -d '/+=')
export ENDPOINT=http://127.0.0.1:$PORT
start_node() {
    "$BIN/nodectl" dev up --data "$WORK/data" --drive-size 2G --s3 "127.0.0.1:$PORT" \
        --resp "127.0.0.1:$RPORT" --nfs "127.0.0.1:$NPORT" >>"$WORK/node.log" 2>&1 &
    SUP=$!
    for _ in $(seq 1 600); do
        curl -s -o /dev/null "$ENDPOINT/" && return 0
        kill -0 "$SUP" 2>/dev/null || { tail -n 30 "$WORK/node.log"; fail "nodectl dev up died"; }
        sleep 0.1
    done
    fail "the node is not serving S3 after 60 s"
}
s3() { python3 "$HERE/s3.py" "$@"; }
say "node: S3 127.0.0.1:$PORT, NFS 127.0.0.1:$NPORT ($BIN)"
start_node
s3 setup kernel "$WORK/from-s3.md5"
"$BIN/nodectl" export add --data "$WORK/data" root kernel --client 127.0.0.1/32 >/dev/null
sleep 2.2 # the node reads its exports every 2 s

# --- the guest -------------------------------------------------------------------------
R="$WORK/initramfs"
guest_root "$R" sh mount umount insmod cat ls echo sleep poweroff mkdir ip head cp mv dd \
    md5sum find xargs awk cut wc rm printf sync sed
guest_modules "$R" guest virtio_pci virtio_net nfsv3
cp "$HERE/guest-init.sh" "$R/init"
chmod +x "$R/init"
guest_pack "$R"
APPEND="console=ttyS0 loglevel=4 panic=-1 cairn.nport=$NPORT cairn.files=$FILES"
: > "$WORK/serial.log"
say "booting the guest ($ACCEL)"
qemu-system-x86_64 -machine q35 -accel "$ACCEL" -cpu max -m 768 -smp 1 \
    -kernel "$VMLINUZ" -initrd "$WORK/initrd.gz" -append "$APPEND" \
    -nic user,model=virtio-net-pci -display none -no-reboot \
    -serial "file:$WORK/serial.log" > "$WORK/qemu.log" 2>&1 &
QPID=$!
wait_for "GUEST-UP" 120
wait_for "^MOUNT rc=" 120
grep -q "^MOUNT rc=0" "$WORK/serial.log" || fail "the kernel could not mount the export: $(grep -m1 '^MOUNT' "$WORK/serial.log")"
say "mounted; the guest writes"
wait_for "PHASE1-DONE" 1200
tr -d '\r' < "$WORK/serial.log" > "$WORK/phase1.txt"
grep -E "^(CP|DD|MV|LS|S3FILE|OVERWRITE) " "$WORK/phase1.txt" | sed 's/^/  guest: /'
s3 phase1 kernel "$WORK/phase1.txt" "$WORK/from-s3.md5" "$FILES"

s3 put kernel ready
wait_for "^WRITING" 120
sleep 1 # into the 64 MiB write (about 5 s under TCG)
say "kill -9 of every Cairn process while the guest writes, restart on the same data (the guest keeps its mount)"
pids=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); n=s["nodes"][0]; print(s["supervisor_pid"], n["datapathd_pid"], n["mgmtd_pid"])' "$WORK/data/run/dev.json")
kill -9 $pids
wait "$SUP" 2>/dev/null || true
! grep -q "^DURING" "$WORK/serial.log" || fail "the guest's write ended before the kill: it was not cut"
start_node
s3 put kernel go
wait_for "GUEST-DONE" 600
wait_poweroff
tr -d '\r' < "$WORK/serial.log" > "$WORK/serial.txt"
grep -E "^(READY|DURING|GO|AFTER|WROTE|UMOUNT|INSMOD)" "$WORK/serial.txt" | sed 's/^/  guest: /'
! grep -q "INSMOD-FAIL" "$WORK/serial.txt" || fail "a module did not load"
grep -qi "kernel panic\|BUG:" "$WORK/serial.txt" && fail "panic in the guest"
grep -q "^GO seen=yes" "$WORK/serial.txt" || fail "the guest never saw the file put after the restart"
s3 phase2 kernel "$WORK/serial.txt"
say "PASS in $(elapsed) s"
