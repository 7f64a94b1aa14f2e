#!/usr/bin/env python3
"""Writes a reproducible newc cpio archive of a directory to stdout (the initramfs).

Why not cpio(1): it is not installed everywhere, and it records inode numbers, owners
and mtimes of the build machine. Here every entry is owned by root, carries one fixed
mtime (SOURCE_DATE_EPOCH), entries are sorted, inode numbers are sequential, and
/dev/console exists (the kernel opens it for init's stdio before devtmpfs is mounted).

    mkcpio.py DIR > initrd.cpio
"""
import os
import stat
import sys


def main() -> None:
    root = sys.argv[1]
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    out = sys.stdout.buffer
    ino = 0
    written = 0

    def emit(name: str, mode: int, data: bytes = b"", rdev: tuple = (0, 0)) -> None:
        nonlocal ino, written
        ino += 1
        nb = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, mtime, len(data), 0, 0, rdev[0], rdev[1], len(nb), 0]
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        buf = hdr + nb
        buf += b"\0" * (-len(buf) % 4)
        buf += data
        buf += b"\0" * (-len(buf) % 4)
        out.write(buf)
        written += len(buf)

    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            entries.append(os.path.relpath(full, root))
    entries.sort()
    for rel in entries:
        full = os.path.join(root, rel)
        st = os.lstat(full)
        perm = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            emit(rel, stat.S_IFDIR | perm)
        elif stat.S_ISLNK(st.st_mode):
            emit(rel, stat.S_IFLNK | 0o777, os.readlink(full).encode())
        elif stat.S_ISREG(st.st_mode):
            with open(full, "rb") as f:
                emit(rel, stat.S_IFREG | perm, f.read())
        else:
            sys.exit(f"mkcpio: unsupported file type: {full}")
    if "dev/console" not in entries:
        emit("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1))
    emit("TRAILER!!!", 0)
    out.write(b"\0" * (-written % 512))


if __name__ == "__main__":
    main()
