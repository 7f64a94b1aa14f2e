#!/bin/sh
# The guest's /init (hwtests/nfs-kernel/run.sh): mounts the host's export with the
# kernel's NFSv3 client and prints what it did, one line per step, for the host.
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for w in $(cat /proc/cmdline); do
    case "$w" in
        cairn.nport=*) P=${w#cairn.nport=} ;;
        cairn.files=*) N=${w#cairn.files=} ;;
    esac
done
up() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }'; }
echo "GUEST-UP uptime=$(up)"
for m in $(cat /mods/guest.order); do insmod /mods/$m 2>/dev/null || echo "INSMOD-FAIL $m"; done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
# No mount.nfs here: busybox hands these to the kernel as text (addr= names the
# server, as mount.nfs would); MOUNT and NFS on one port; no lock manager.
OPTS="vers=3,proto=tcp,port=$P,mountport=$P,mountproto=tcp,mountaddr=10.0.2.2,addr=10.0.2.2,nolock,hard,timeo=100,actimeo=1,lookupcache=positive"
mount -t nfs -o "$OPTS" 10.0.2.2:/root/kernel /mnt
echo "MOUNT rc=$?"
grep -q " /mnt nfs " /proc/mounts || { echo "GUEST-DONE no mount"; poweroff -f; }

# An object PUT over S3 is a file.
echo "S3FILE $(md5sum /mnt/from-s3/object.bin | cut -d' ' -f1)"

# A tree of N small files, copied in with cp -r.
mkdir -p /tmp/tree/a /tmp/tree/b/c
i=0
while [ "$i" -lt "$N" ]; do
    case $((i % 3)) in 0) d=a ;; 1) d=b ;; *) d=b/c ;; esac
    head -c $((100 + i * 7)) /dev/urandom > /tmp/tree/$d/f$i
    i=$((i + 1))
done
t=$(up)
cp -r /tmp/tree /mnt/tree
echo "CP rc=$? files=$N secs=$(since "$t")"
(cd /tmp/tree && find . -type f | xargs md5sum) | sed 's|  \./|  |; s/^/SUM tree /'

# A 32 MiB file, written sequentially and fsync'd.
dd if=/dev/urandom of=/tmp/big bs=1M count=32 2>/dev/null
t=$(up)
dd if=/tmp/big of=/mnt/big.bin bs=1M conv=fsync 2>/dev/null
echo "DD rc=$? mib=32 secs=$(since "$t")"

# The tree's directory renamed; what the guest lists under the new name.
mv /mnt/tree /mnt/renamed
echo "MV rc=$?"
echo "LS renamed=$(find /mnt/renamed -type f | wc -l) old=$(ls /mnt/tree 2>/dev/null | wc -l)"

# Five bytes overwritten in place in the middle of the big file, on both copies.
printf 'CAIRN' | dd of=/mnt/big.bin bs=1 seek=20000000 conv=notrunc,fsync 2>/dev/null
printf 'CAIRN' | dd of=/tmp/big bs=1 seek=20000000 conv=notrunc 2>/dev/null
echo "OVERWRITE rc=$?"
echo "SUM big $(md5sum /tmp/big | cut -d' ' -f1)"
sync
echo "PHASE1-DONE"

# When the host has checked all that over S3 it puts `ready`; then 64 MiB are
# written while the host kills every Cairn process and restarts the node: the
# UNSTABLE writes the dead process held are lost with it, and the client, seeing a
# new verifier at COMMIT, sends them again. dd's fsync returns once all is committed.
wait_file() {
    i=0
    while [ ! -e "/mnt/$1" ] && [ "$i" -lt 500 ]; do sleep 1; i=$((i + 1)); done
    [ -e "/mnt/$1" ] && echo "$2 seen=yes after=${i}s" || echo "$2 seen=no"
}
wait_file ready READY
dd if=/dev/urandom of=/tmp/during bs=1M count=64 2>/dev/null
echo "WRITING"
t=$(up)
dd if=/tmp/during of=/mnt/during.bin bs=1M conv=fsync 2>/dev/null
echo "DURING rc=$? secs=$(since "$t") $(md5sum /tmp/during | cut -d' ' -f1)"
rm -f /tmp/during

# The node is back (the host put `go`): this mount lives on.
wait_file go GO
echo 3 > /proc/sys/vm/drop_caches
echo "AFTER big $(md5sum /mnt/big.bin | cut -d' ' -f1)"
echo "AFTER tree $(md5sum /mnt/renamed/a/f0 | cut -d' ' -f1) $(md5sum /tmp/tree/a/f0 | cut -d' ' -f1)"
echo "written after the restart" > /mnt/renamed/after.txt
echo "WROTE rc=$?"
cd /
umount /mnt
echo "UMOUNT rc=$?"
echo "GUEST-DONE uptime=$(up)"
poweroff -f
