"""A minimal NFSv3 client over raw ONC RPC (RFC 5531 record marking, AUTH_UNIX,
RFC 1813 XDR), for the checks that need what no installed client shows: the file
handles themselves, compared between nodes.

    rpc = Rpc(host, port)
    root = rpc.mount("/root/bucket")
    fh = rpc.lookup(root, "name")
"""
import os
import random
import socket
import struct

MOUNT, NFS = 100005, 100003


def opaque(b):
    return struct.pack(">I", len(b)) + b + b"\0" * (-len(b) % 4)


class Reply:
    def __init__(self, data):
        self.b, self.at = data, 0

    def u32(self):
        (v,) = struct.unpack_from(">I", self.b, self.at)
        self.at += 4
        return v

    def u64(self):
        (v,) = struct.unpack_from(">Q", self.b, self.at)
        self.at += 8
        return v

    def opaque(self):
        n = self.u32()
        v = self.b[self.at:self.at + n]
        self.at += n + (-n % 4)
        return v

    def post_op_attr(self):
        if self.u32():
            self.at += 84  # fattr3


class NfsError(Exception):
    def __init__(self, what, status):
        super().__init__(f"{what}: NFS status {status}")
        self.status = status


class Rpc:
    def __init__(self, host, port, timeout=30):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.xid = random.randrange(1 << 30)
        body = struct.pack(">I", 0) + opaque(b"cairn-ci") + struct.pack(">III", 0, 0, 0)
        self.cred = struct.pack(">I", 1) + opaque(body)  # AUTH_UNIX, uid 0, gid 0

    def close(self):
        self.s.close()

    def _recv(self, n):
        out = b""
        while len(out) < n:
            got = self.s.recv(n - len(out))
            if not got:
                raise ConnectionError("connection closed")
            out += got
        return out

    def call(self, prog, proc, args):
        self.xid += 1
        msg = struct.pack(">IIIIII", self.xid, 0, 2, prog, 3, proc) + self.cred + struct.pack(">II", 0, 0) + args
        self.s.sendall(struct.pack(">I", 0x80000000 | len(msg)) + msg)
        data = b""
        while True:
            (head,) = struct.unpack(">I", self._recv(4))
            data += self._recv(head & 0x7FFFFFFF)
            if head & 0x80000000:
                break
        r = Reply(data)
        xid, mtype, stat = r.u32(), r.u32(), r.u32()
        if (xid, mtype, stat) != (self.xid, 1, 0):
            raise ConnectionError(f"RPC reply xid {xid} type {mtype} stat {stat}")
        r.u32()
        r.opaque()  # verifier
        if (accept := r.u32()) != 0:
            raise ConnectionError(f"RPC call not accepted: {accept}")
        return r

    def mount(self, path):
        r = self.call(MOUNT, 1, opaque(path.encode()))
        if (st := r.u32()) != 0:
            raise NfsError(f"MNT {path}", st)
        return r.opaque()

    def lookup(self, dir_fh, name):
        r = self.call(NFS, 3, opaque(dir_fh) + opaque(name.encode()))
        if (st := r.u32()) != 0:
            raise NfsError(f"LOOKUP {name}", st)
        return r.opaque()

    def read_all(self, fh, chunk=1 << 20):
        out, off = b"", 0
        while True:
            r = self.call(NFS, 6, opaque(fh) + struct.pack(">QI", off, chunk))
            if (st := r.u32()) != 0:
                raise NfsError("READ", st)
            r.post_op_attr()
            r.u32()
            eof = r.u32()
            data = r.opaque()
            out += data
            off += len(data)
            if eof or not data:
                return out

    def create(self, dir_fh, name):
        # UNCHECKED, no attributes set.
        r = self.call(NFS, 8, opaque(dir_fh) + opaque(name.encode()) + struct.pack(">I", 0) + b"\0" * 24)
        if (st := r.u32()) != 0:
            raise NfsError(f"CREATE {name}", st)
        if not r.u32():
            raise NfsError(f"CREATE {name}: no handle", -1)
        return r.opaque()

    def write_sync(self, fh, offset, data):
        r = self.call(NFS, 7, opaque(fh) + struct.pack(">QII", offset, len(data), 2) + opaque(data))
        if (st := r.u32()) != 0:
            raise NfsError("WRITE", st)


if __name__ == "__main__":
    # A smoke run: python3 ci/nfs_rpc.py HOST PORT /TENANT/BUCKET NAME
    import sys
    rpc = Rpc(sys.argv[1], int(sys.argv[2]))
    root = rpc.mount(sys.argv[3])
    fh = rpc.create(root, sys.argv[4])
    payload = os.urandom(3 << 20)
    for off in range(0, len(payload), 1 << 20):  # the server's wtmax: 1 MiB
        rpc.write_sync(fh, off, payload[off:off + (1 << 20)])
    assert rpc.lookup(root, sys.argv[4]) == fh
    assert rpc.read_all(fh) == payload
    print(f"root {root.hex()} file {fh.hex()}: 3 MiB written and read back")
