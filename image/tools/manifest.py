#!/usr/bin/env python3
"""Manifests and the size report of an image build (called by image/build.sh).

    manifest.py bundle DIR VERSION CMDLINE         -> manifest.json of cairn.update
    manifest.py build OUT VERSION KERNEL WORK SIZES -> manifest.json of the build
    manifest.py sizes OUT WORK                      -> size-report.txt

No timestamps: two builds of one commit give the same manifests when they ship the
same bytes.
"""
import hashlib
import json
import os
import sys

BUNDLE_FILES = ["root.erofs", "vmlinuz", "initrd.img"]
ARTIFACTS = ["cairn.img", "vmlinuz", "initrd.img", "root.erofs", "cairn.update"]
BINARIES = ["datapathd", "mgmtd", "nodectl", "nodeos"]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def filemeta(path: str) -> dict:
    return {"sha256": sha256(path), "size": os.path.getsize(path)}


def packages(work: str) -> list:
    rows = []
    with open(os.path.join(work, "packages.tsv")) as f:
        for line in f:
            name, version, kib = line.rstrip("\n").split("\t")
            rows.append((name, version, int(kib or 0)))
    return rows


def bundle(d: str, version: str, cmdline: str) -> None:
    # The reader (nodeos/slots, bundle.rs) rejects unknown fields: exactly these.
    doc = {
        "format": 1,
        "version": version,
        "cmdline": cmdline,
        "files": {n: filemeta(os.path.join(d, n)) for n in BUNDLE_FILES},
    }
    print(json.dumps(doc, indent=2, sort_keys=True))


def build(out: str, version: str, kernel: str, work: str, sizes: str) -> None:
    esp, slot, state = (int(x) for x in sizes.split(","))
    root = os.path.join(work, "root")
    doc = {
        "name": "cairn",
        "version": version,
        "kernel": kernel,
        "artifacts": {n: filemeta(os.path.join(out, n)) for n in ARTIFACTS},
        "binaries": {
            b: sha256(os.path.join(root, "usr/bin", b))
            for b in BINARIES
            if os.path.exists(os.path.join(root, "usr/bin", b))
        },
        "packages": {name: ver for name, ver, _ in packages(work)},
        "partitions": [
            {"label": "esp", "type": "EFI system (FAT32)", "size_mib": esp},
            {"label": "cairn-a", "type": "erofs root, slot A", "size_mib": slot},
            {"label": "cairn-b", "type": "erofs root, slot B (empty until an update)", "size_mib": slot},
            {"label": "cairn-state", "type": "ext4, persistent state", "size_mib": state},
        ],
    }
    print(json.dumps(doc, indent=2, sort_keys=True))


def tree_sizes(root: str) -> dict:
    """Bytes of regular files under each path of interest (hard links counted once)."""
    seen = set()
    by = {}
    for dirpath, _, files in os.walk(root):
        for n in files:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            if not os.path.isfile(p) or os.path.islink(p) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            rel = "/" + os.path.relpath(p, root)
            by[rel] = st.st_size
    return by


def mib(n: int) -> str:
    return f"{n / 1048576:8.1f} MiB"


def sizes(out: str, work: str) -> None:
    root = os.path.join(work, "root")
    files = tree_sizes(root)
    total = sum(files.values())
    lines = ["Cairn image size report", "", "Artifacts:"]
    for n in ARTIFACTS + ["manifest.json"]:
        p = os.path.join(out, n)
        if os.path.exists(p):
            st = os.stat(p)
            extra = f"  ({mib(st.st_blocks * 512).strip()} allocated, sparse)" if n == "cairn.img" else ""
            lines.append(f"  {n:16} {mib(st.st_size)}{extra}")
    erofs = os.path.getsize(os.path.join(out, "root.erofs"))
    lines += ["", f"Root tree: {mib(total).strip()} uncompressed in {len(files)} files; "
              f"root.erofs (lz4hc) {mib(erofs).strip()} ({100 * erofs / total:.0f}%)", "",
              "Where the root's bytes go (uncompressed):"]
    groups = [
        ("kernel modules", "/usr/lib/modules/"),
        ("Cairn binaries /usr/bin/{datapathd,mgmtd,nodectl,nodeos}", None),
        ("shared libraries /usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/"),
        ("systemd /usr/lib/systemd", "/usr/lib/systemd/"),
        ("udev hwdb and rules /usr/lib/udev", "/usr/lib/udev/"),
        ("other programs /usr/bin, /usr/sbin", ("/usr/bin/", "/usr/sbin/")),
        ("/usr/share", "/usr/share/"),
        ("dpkg database /var/lib/dpkg", "/var/lib/dpkg/"),
        ("/etc", "/etc/"),
    ]
    cairn = {f"/usr/bin/{b}" for b in BINARIES}
    counted = set()
    for label, prefix in groups:
        if prefix is None:
            sel = [p for p in files if p in cairn]
        else:
            sel = [p for p in files if p.startswith(prefix) and p not in cairn]
        counted.update(sel)
        lines.append(f"  {mib(sum(files[p] for p in sel))}  {label}")
    rest = sum(v for p, v in files.items() if p not in counted)
    lines.append(f"  {mib(rest)}  everything else")
    lines += ["", "Largest files:"]
    for p, v in sorted(files.items(), key=lambda kv: -kv[1])[:15]:
        lines.append(f"  {mib(v)}  {p}")
    nmod = sum(1 for p in files if p.startswith("/usr/lib/modules/") and ".ko" in p)
    lines += ["", f"Kernel modules kept: {nmod} (image/modules.txt and their dependencies)"]
    pk = packages(work)
    lines += ["", f"Packages: {len(pk)}; largest by dpkg Installed-Size (before pruning):"]
    for name, ver, kib in sorted(pk, key=lambda r: -r[2])[:15]:
        lines.append(f"  {mib(kib * 1024)}  {name} {ver}")
    print("\n".join(lines))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"bundle": bundle, "build": build, "sizes": sizes}[cmd](*args)
