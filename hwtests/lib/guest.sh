# hwtests/lib/guest.sh — what the busybox-initramfs guests of hwtests share: a
# Debian 6.1 kernel (its .deb fetched into a cache once), an initramfs of a
# static busybox with chosen kernel modules, and the waits on a guest's serial log.
#
# Sourced by hwtests/nvme-vfio/run.sh and hwtests/nfs-kernel/run.sh, which set
# TAG (their name in messages) first, and WORK and QPID (the QEMU process) before
# calling wait_for. Env: CAIRN_HWTEST_CACHE (default /var/cache/cairn-hwtests).

CACHE=${CAIRN_HWTEST_CACHE:-/var/cache/cairn-hwtests}
T0=$(date +%s%N)
elapsed() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '%d.%d' $((ms / 1000)) $(((ms % 1000) / 100)); }
say() { echo "[$TAG $(elapsed)s] $*"; }
missing() { echo "MISSING: $*" >&2; exit 2; }
fail() { echo "FAIL: $*" >&2; [[ -n "${WORK:-}" && -f "$WORK/serial.log" ]] && { echo "--- last guest output ---" >&2; tail -n 60 "$WORK/serial.log" >&2; }; exit 1; }

# Needs a static busybox, kmod and dpkg-deb; sets BUSYBOX.
guest_tools() {
    local t
    for t in qemu-system-x86_64 depmod modprobe python3 dpkg-deb gzip "$@"; do
        command -v "$t" >/dev/null || missing "$t (apt-get install qemu-system-x86 kmod python3 dpkg gzip)"
    done
    BUSYBOX=$(command -v busybox || true)
    [[ -n "$BUSYBOX" ]] || missing "busybox (apt-get install busybox-static)"
    { ldd "$BUSYBOX" 2>&1 || true; } | grep -q "not a dynamic" || missing "a static busybox (apt-get install busybox-static)"
}

# Sets KROOT (the unpacked kernel package), KVER and VMLINUZ.
guest_kernel() {
    mkdir -p "$CACHE"
    local deb pkg
    deb=$(ls "$CACHE"/linux-image-6.1.*-amd64_*.deb 2>/dev/null | grep -v -e cloud -e rt-amd64 | sort -V | tail -n1 || true)
    if [[ -z "$deb" ]]; then
        say "no kernel package in $CACHE: downloading it with apt-get"
        pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6.1/ {print $2; exit}')
        if [[ -z "$pkg" && $(id -u) == 0 ]]; then
            timeout 300 apt-get update -qq >/dev/null 2>&1 || true
            pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6.1/ {print $2; exit}')
        fi
        [[ -n "$pkg" ]] || missing "linux-image-6.1.*-amd64 (apt-get update; or put the .deb into $CACHE)"
        (cd "$CACHE" && timeout 300 apt-get download "$pkg" >/dev/null 2>&1) || missing "$pkg could not be downloaded (put the .deb into $CACHE)"
        deb=$(ls "$CACHE"/linux-image-6.1.*-amd64_*.deb | sort -V | tail -n1)
    fi
    KROOT="$CACHE/$(basename "$deb" .deb)"
    if [[ ! -d "$KROOT/lib/modules" ]]; then
        say "unpacking $(basename "$deb")"
        rm -rf "$KROOT.tmp" && dpkg-deb -x "$deb" "$KROOT.tmp"
        KVER=$(ls "$KROOT.tmp/lib/modules")
        depmod -b "$KROOT.tmp" "$KVER"
        mv "$KROOT.tmp" "$KROOT"
    fi
    KVER=$(ls "$KROOT/lib/modules")
    VMLINUZ="$KROOT/boot/vmlinuz-$KVER"
    [[ -f "$VMLINUZ" ]] || missing "vmlinuz in $deb"
}

# The initramfs tree $1: busybox and its applets $2..., and the usual directories.
guest_root() {
    local r=$1 a
    shift
    mkdir -p "$r"/{bin,sbin,proc,sys,dev,tmp,mods,mnt,lib64,lib/x86_64-linux-gnu}
    cp "$BUSYBOX" "$r/bin/busybox"
    for a in "$@"; do ln -sf busybox "$r/bin/$a"; done
}

# Copies the modules $3... and what they depend on into $1/mods, in load order,
# listed in $1/mods/$2.order (the guest's init insmods them in that order).
guest_modules() {
    local r=$1 name=$2 m ko
    shift 2
    : > "$r/mods/$name.order"
    for ko in $(for m in "$@"; do
                    modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" | awk '/^insmod/ {print $2}'
                done | awk '!seen[$0]++'); do
        cp "$ko" "$r/mods/"
        basename "$ko" >> "$r/mods/$name.order"
    done
}

# Packs the tree $1 into $WORK/initrd.gz.
guest_pack() {
    (cd "$1" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1 > "$WORK/initrd.gz")
    say "initramfs $(du -h "$WORK/initrd.gz" | cut -f1) (kernel $KVER)"
}

# Waits until the serial log has a line matching $1, within $2 seconds.
wait_for() {
    local deadline=$(( $(date +%s) + $2 ))
    while ! grep -q -- "$1" "$WORK/serial.log"; do
        kill -0 "$QPID" 2>/dev/null || fail "QEMU exited before \"$1\" (see $WORK/qemu.log: $(tail -n 3 "$WORK/qemu.log"))"
        [[ $(date +%s) -lt $deadline ]] || fail "no \"$1\" within $2 s"
        sleep 0.2
    done
}

# Waits up to 30 s for QEMU to power off.
wait_poweroff() {
    local deadline=$(( $(date +%s) + 30 ))
    while kill -0 "$QPID" 2>/dev/null; do
        [[ $(date +%s) -lt $deadline ]] || { kill "$QPID"; fail "QEMU did not power off"; }
        sleep 0.2
    done
    QPID=""
}
