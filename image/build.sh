#!/usr/bin/env bash
# Builds the Cairn firmware image from Debian packages and Cairn's release binaries.
#
#   image/build.sh [--out DIR] [--cache DIR] [--bin DIR] [--refresh] [--rootfs-only]
#
# Outputs (in --out, default image/out): cairn.img (raw GPT disk: esp, cairn-a, cairn-b,
# cairn-state), vmlinuz + initrd.img (direct -kernel boots), root.erofs, cairn.update
# (update bundle), manifest.json (version, sha256 of every artifact, packages) and
# size-report.txt. See image/README.md.
#
# Needs root (mmdebstrap --mode=root, and the root tree keeps its owners), no loop
# mounts and no KVM. The mmdebstrap tarball, the slow part, is cached under --cache
# keyed by the package list; --refresh rebuilds it (new package versions).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=$HERE/out
CACHE=${CAIRN_IMAGE_CACHE:-/var/cache/cairn-image}
BIN=$REPO/target/release
REFRESH=0
ROOTFS_ONLY=0
SUITE=bookworm
# Partition sizes in MiB. The state partition is last so it can be grown in place.
ESP_MB=256 SLOT_MB=768 STATE_MB=1024

while (($#)); do
  case "$1" in
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --cache) CACHE=$(realpath -m "$2"); shift 2 ;;
    --bin) BIN=$(realpath -m "$2"); shift 2 ;;
    --refresh) REFRESH=1; shift ;;
    --rootfs-only) ROOTFS_ONLY=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

die() { echo "build.sh: $*" >&2; exit 1; }
step() { printf '== %s (%ds)\n' "$*" "$SECONDS"; }

[[ $(id -u) == 0 ]] || die "must run as root (mmdebstrap --mode=root; the root tree keeps file owners)"
missing=()
for t in mmdebstrap mkfs.erofs sgdisk mkfs.vfat mcopy mmd mkfs.ext4 gzip depmod modprobe sha256sum tar git python3 strip; do
  command -v "$t" >/dev/null || missing+=("$t")
done
((${#missing[@]} == 0)) || die "missing tools: ${missing[*]} (apt-get install mmdebstrap erofs-utils gdisk dosfstools mtools e2fsprogs kmod binutils)"

# Everything derived from the commit: the version and the one timestamp all files get.
VERSION=$(git -C "$REPO" describe --always --tags --dirty 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH=$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || echo 0)
export SOURCE_DATE_EPOCH LC_ALL=C TZ=UTC
umask 022

# ---- 1. The Debian root filesystem (cached) -----------------------------------------
mapfile -t PKGS < <(sed 's/#.*//; /^[[:space:]]*$/d; s/[[:space:]]//g' "$HERE/packages.txt" | sort -u)
# Docs, man pages and locales never reach the disk; copyright files stay (licences).
MMDEB_OPTS=(--variant=minbase --mode=root --format=tar
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
  --dpkgopt='path-exclude=/usr/share/bug/*'
  # The kernel package pulls initramfs-tools; Cairn's initramfs is built below, so drop
  # it and the initrd it made (saves ~40 MB and a minute).
  --customize-hook='chroot "$1" dpkg --purge --force-depends initramfs-tools initramfs-tools-core klibc-utils libklibc >/dev/null; rm -f "$1"/boot/initrd.img*'
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/var/cache/ldconfig/aux-cache')
# The key: suite, packages, options and the apt sources (mirror) they come from.
KEY=$( { printf '%s\n' "$SUITE" "${PKGS[@]}" "${MMDEB_OPTS[@]}"
         shopt -s nullglob; cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /dev/null
         [[ -e /etc/apt/sources.list ]] && cat /etc/apt/sources.list || true; } | sha256sum | cut -c1-16)
ROOTFS_TAR=$CACHE/rootfs-$SUITE-$KEY.tar
mkdir -p "$CACHE" "$OUT"
if [[ $REFRESH == 1 || ! -s $ROOTFS_TAR ]]; then
  step "mmdebstrap $SUITE (${#PKGS[@]} packages) -> $ROOTFS_TAR"
  inc=$(IFS=,; echo "${PKGS[*]}")
  mmdebstrap "${MMDEB_OPTS[@]}" --include="$inc" "$SUITE" "$ROOTFS_TAR.tmp" \
    > "$CACHE/mmdebstrap.log" 2>&1 || { tail -30 "$CACHE/mmdebstrap.log" >&2; die "mmdebstrap failed (log: $CACHE/mmdebstrap.log)"; }
  mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
  # Keep the three newest tarballs (other branches may use other package lists).
  ls -t "$CACHE"/rootfs-*.tar | tail -n +4 | xargs -r rm -f
else
  step "rootfs from cache: $ROOTFS_TAR"
fi
((ROOTFS_ONLY)) && exit 0

# ---- 2. The root tree ------------------------------------------------------------------
WORK=$OUT/.work
rm -rf "$WORK" && mkdir -p "$WORK/root"
R=$WORK/root
step "unpack the root tree"
tar -xf "$ROOTFS_TAR" -C "$R" --numeric-owner
KVER=$(ls "$R/lib/modules")
[[ $KVER =~ ^[^[:space:]]+$ ]] || die "expected one kernel in the root, found: $KVER"

# Cairn's binaries. nodeos (the bring-up) and its units come from branch nodeos; an
# image without them boots to systemd but never serves, so say so loudly.
step "install Cairn binaries from $BIN"
mkdir -p "$R/usr/lib/cairn"
for b in datapathd mgmtd nodectl nodeos; do
  if [[ -x $BIN/$b ]]; then
    # Debug info off (line tables are ~60% of the size); symbols stay for backtraces.
    strip --strip-debug -o "$R/usr/bin/$b" "$BIN/$b"
    chmod 755 "$R/usr/bin/$b"
  elif [[ $b == nodeos ]]; then
    echo "build.sh: WARNING: $BIN/nodeos missing: the image boots but cannot serve" >&2
  else
    die "$BIN/$b missing: run 'cargo build --release --bins' first (or pass --bin DIR)"
  fi
done
# Every shared library the binaries need must be in the root (e.g. libisal2 for mgmtd).
for b in "$R"/usr/bin/{datapathd,mgmtd,nodectl,nodeos}; do
  [[ -e $b ]] || continue
  for lib in $(objdump -p "$b" | awk '/NEEDED/{print $2}'); do
    [[ -e $R/usr/lib/x86_64-linux-gnu/$lib || -e $R/lib/x86_64-linux-gnu/$lib ]] ||
      die "$(basename "$b") needs $lib, which no package in image/packages.txt provides"
  done
done
# Not needed at run time: perl (pulled in by usrmerge at bootstrap; perl-base stays, it is
# essential) and udev's hwdb sources (the compiled hwdb.bin stays).
chroot "$R" dpkg --purge --force-depends usrmerge libfile-find-rule-perl libnumber-compare-perl \
  libtext-glob-perl perl libperl5.36 perl-modules-5.36 > "$WORK/dpkg-purge.log" 2>&1
rm -rf "$R"/usr/lib/udev/hwdb.d/*
cp -a "$HERE/rootfs/." "$R/"
shopt -s nullglob
units=("$REPO"/nodeos/units/*.service "$REPO"/nodeos/units/*.target)
shopt -u nullglob
((${#units[@]})) && install -m644 "${units[@]}" "$R/usr/lib/systemd/system/"
echo "$VERSION" > "$R/usr/lib/cairn/version"
printf 'IMAGE_ID=cairn\nIMAGE_VERSION=%s\n' "$VERSION" >> "$R/usr/lib/os-release"
ln -sf /run/cairn/resolv.conf "$R/etc/resolv.conf"
: > "$R/etc/machine-id"   # filled by the initramfs from cairn-state
mkdir -p "$R/efi" "$R/var/lib/cairn"
# Enable what the units' [Install] sections ask for; mask what an appliance never runs.
# (The root's own systemctl, offline in the chroot: the build host needs no systemd.)
for u in "${units[@]}"; do
  grep -q '^\[Install\]' "$u" && chroot "$R" systemctl enable "$(basename "$u")" >/dev/null 2>&1
done
chroot "$R" systemctl enable cairn-debug-shell.path >/dev/null 2>&1
chroot "$R" systemctl mask apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
  e2scrub_all.timer e2scrub_reap.service fstrim.timer getty-static.service >/dev/null 2>&1

# ---- 3. Kernel modules: what the appliance needs, and their dependencies ----------------
step "prune kernel modules ($KVER)"
M=$R/lib/modules/$KVER
depmod -b "$R" "$KVER"
modname() { local n=${1##*/}; n=${n%.ko*}; echo "${n//-/_}"; }
wanted=$(cd "$M/kernel" && sed 's/#.*//; /^[[:space:]]*$/d' "$HERE/modules.txt" | while read -r p; do
  # shellcheck disable=SC2086 # $p is a glob on purpose
  for f in $p; do [[ -e $f ]] && find "$f" -name '*.ko*'; done
done | sort -u)
[[ -n $wanted ]] || die "modules.txt matched no module"
# modprobe -d prints the insmod lines with $R in front of each path; strip it.
deps() { modprobe -d "$R" -S "$KVER" --show-depends "$1" | awk '$1=="insmod"{print $2}' | sed "s|^$R||"; }
keep=$WORK/keep-modules
for f in $wanted; do deps "$(modname "$f")"; done | sort -u > "$keep"
all=$(find "$M/kernel" -name '*.ko*' | wc -l)
find "$M/kernel" -name '*.ko*' | sed "s|^$R||" | sort | comm -23 - "$keep" | sed "s|^|$R|" | xargs -r rm -f
find "$M/kernel" -type d -empty -delete
depmod -b "$R" "$KVER"
echo "   kept $(wc -l < "$keep") of $all modules"

# The kernel leaves the root: it boots from the ESP and ships in the bundle.
cp "$R/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
rm -f "$R"/boot/vmlinuz* "$R"/boot/System.map* "$R"/vmlinuz* "$R"/initrd.img*

# ---- 4. The initramfs ------------------------------------------------------------------
step "initramfs"
I=$WORK/initramfs
mkdir -p "$I"/{bin,dev,proc,sys,sysroot,etc,run,tmp}
cp "$R/bin/busybox" "$I/bin/busybox"
for a in $("$I/bin/busybox" --list); do [[ $a == busybox ]] || ln -s busybox "$I/bin/$a"; done
install -m755 "$HERE/initramfs/init" "$I/init"
: > "$I/etc/initramfs-modules"
sed 's/#.*//; /^[[:space:]]*$/d' "$HERE/initramfs-modules.txt" | while read -r m; do
  out=$(modprobe -d "$R" -S "$KVER" --show-depends "$m") || die "initramfs module $m: not found"
  awk '$1=="insmod"{$1=""; sub(/^ /,""); print}' <<<"$out" | sed "s|^$R||"
done | awk '!seen[$1]++' > "$WORK/initramfs-modules"
while read -r ko args; do
  mkdir -p "$I$(dirname "$ko")" && cp "$R$ko" "$I$ko"
  echo "$ko $args" >> "$I/etc/initramfs-modules"
done < "$WORK/initramfs-modules"
python3 "$HERE/tools/mkcpio.py" "$I" | gzip -9n > "$OUT/initrd.img"

# ---- 5. The root filesystem image (erofs) ----------------------------------------------
# UUIDs and GUIDs derive from the version: the same commit gives the same image.
uuid() { printf '%s' "$VERSION/$1" | sha256sum | sed -E 's/^(.{8})(.{4}).(.{3}).(.{3})(.{12}).*/\1-\2-4\3-8\4-\5/'; }
step "root.erofs (lz4hc)"
# Logs, temp files and ldconfig's aux-cache (inode numbers and times of this build).
rm -rf "$R/var/log"/* "$R/tmp"/* "$R/var/tmp"/* "$R/var/cache/ldconfig/aux-cache"
# lz4hc level 9: as small as level 12 (+0.2%) and 4.5x faster to build.
mkfs.erofs -zlz4hc,9 -T"$SOURCE_DATE_EPOCH" -U "$(uuid root)" --quiet "$OUT/root.erofs" "$R"
ROOT_BYTES=$(stat -c %s "$OUT/root.erofs")
((ROOT_BYTES <= SLOT_MB * 1048576)) || die "root.erofs ($ROOT_BYTES bytes) exceeds the slot size ($SLOT_MB MiB)"

# ---- 6. The ESP ------------------------------------------------------------------------
step "ESP"
E=$WORK/esp
mkdir -p "$E/EFI/BOOT" "$E/loader/entries" "$E/cairn/a"
cp "$R/usr/lib/systemd/boot/efi/systemd-bootx64.efi" "$E/EFI/BOOT/BOOTX64.EFI"
cp "$OUT/vmlinuz" "$OUT/initrd.img" "$E/cairn/a/"
echo "$VERSION" > "$E/cairn/a/version"
# intel_iommu=on: the nvme backend (datapath.backend = "nvme") drives controllers through
# VFIO, which needs the IOMMU (AMD's is on by default); iommu=pt keeps the devices the
# kernel drives on identity mappings, so they pay nothing for it.
CMDLINE_COMMON="ro console=tty0 console=ttyS0,115200 panic=10 intel_iommu=on iommu=pt"
# timeout 0: boot at once (hold a key at power-on for the menu); editor no: the
# kernel command line cannot be edited at the console (init=/bin/sh would be root).
# default cairn-*: both slots match and each entry's sort-key orders them (cairn-0
# boots, cairn-1 is the fallback); an entry out of tries sorts last (nodeos/slots esp.rs).
printf 'default cairn-*\ntimeout 0\neditor no\nconsole-mode keep\n' > "$E/loader/loader.conf"
# The factory slot has no boot counter: there is no other slot to fall back to yet.
cat > "$E/loader/entries/cairn-a.conf" <<ENTRY
title Cairn $VERSION (slot a)
version $VERSION
sort-key cairn-0
linux /cairn/a/vmlinuz
initrd /cairn/a/initrd.img
options root=PARTLABEL=cairn-a cairn.slot=a $CMDLINE_COMMON
ENTRY

# ---- 7. The GPT disk -------------------------------------------------------------------
step "cairn.img (GPT: esp ${ESP_MB}M, cairn-a ${SLOT_MB}M, cairn-b ${SLOT_MB}M, cairn-state ${STATE_MB}M)"
IMG=$OUT/cairn.img
MIB=2048   # sectors
p_esp=$MIB; p_a=$((p_esp + ESP_MB * MIB)); p_b=$((p_a + SLOT_MB * MIB))
p_state=$((p_b + SLOT_MB * MIB)); p_end=$((p_state + STATE_MB * MIB))
rm -f "$IMG"
truncate -s $(((p_end + MIB) * 512)) "$IMG"   # + 1 MiB for the backup GPT
# (no -q: with it sgdisk 1.0.9 silently writes nothing)
sgdisk -o -U "$(uuid disk)" \
  -n 1:$p_esp:$((p_a - 1)) -t 1:ef00 -c 1:esp -u 1:"$(uuid p-esp)" \
  -n 2:$p_a:$((p_b - 1)) -t 2:8300 -c 2:cairn-a -u 2:"$(uuid p-a)" \
  -n 3:$p_b:$((p_state - 1)) -t 3:8300 -c 3:cairn-b -u 3:"$(uuid p-b)" \
  -n 4:$p_state:$((p_end - 1)) -t 4:8300 -c 4:cairn-state -u 4:"$(uuid p-state)" "$IMG" >/dev/null
volid=$(uuid esp | cut -c1-8)
# No volume label: mkfs.fat stamps its root-directory entry with the current time.
mkfs.vfat -F 32 -s 1 -i "$volid" --offset=$p_esp "$IMG" $((ESP_MB * 1024)) >/dev/null 2>&1
find "$E" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
MTOOLS_SKIP_CHECK=1 mcopy -i "$IMG@@$((p_esp * 512))" -s -p -m "$E"/EFI "$E"/loader "$E"/cairn ::/
dd if="$OUT/root.erofs" of="$IMG" bs=1M seek=$((p_a * 512)) oflag=seek_bytes conv=notrunc,sparse status=none
# Slot B stays empty until the first update writes it. The state partition starts empty
# (the initramfs creates log/ and the machine id on first boot): mkfs.ext4 -d would copy
# the ctimes of a build directory, which no one can fix to SOURCE_DATE_EPOCH.
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mkfs.ext4 -q -F -L cairn-state -U "$(uuid state)" \
  -E "offset=$((p_state * 512)),hash_seed=$(uuid state-hash),root_owner=0:0" "$IMG" "${STATE_MB}M"
[[ $(sgdisk -p "$IMG" | grep -cE '^ +[1-4] .* (esp|cairn-a|cairn-b|cairn-state)$') == 4 ]] ||
  die "the partition table of $IMG is not the expected one: $(sgdisk -p "$IMG")"

# ---- 8. The update bundle --------------------------------------------------------------
step "cairn.update"
B=$WORK/bundle
mkdir -p "$B"
ln "$OUT/root.erofs" "$OUT/vmlinuz" "$OUT/initrd.img" "$B/"
# cmdline: the kernel options after root= and cairn.slot= for the slot this bundle fills.
python3 "$HERE/tools/manifest.py" bundle "$B" "$VERSION" "$CMDLINE_COMMON" > "$B/manifest.json"
# manifest.json first, so a streaming reader knows what follows.
tar --format=ustar --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
  -cf "$OUT/cairn.update" -C "$B" manifest.json root.erofs vmlinuz initrd.img

# ---- 9. Manifest and size report ------------------------------------------------------
step "manifest.json, size-report.txt"
dpkg-query --admindir="$R/var/lib/dpkg" -W -f='${Package}\t${Version}\t${Installed-Size}\n' | sort > "$WORK/packages.tsv"
python3 "$HERE/tools/manifest.py" build "$OUT" "$VERSION" "$KVER" "$WORK" \
  "$ESP_MB,$SLOT_MB,$STATE_MB" > "$OUT/manifest.json"
python3 "$HERE/tools/manifest.py" sizes "$OUT" "$WORK" > "$OUT/size-report.txt"
rm -rf "$WORK"
step "done: $OUT (version $VERSION)"
ls -l "$OUT"
