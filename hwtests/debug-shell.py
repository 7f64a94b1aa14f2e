#!/usr/bin/env python3
"""Talk to a VM's debug shell (the virtio-serial port org.cairn.debug, see
image/README.md) by hand: lines typed here run in the guest's /bin/sh as root.

    hwtests/debug-shell.py /tmp/dbg.sock     # QEMU: -chardev socket,id=dbg,path=/tmp/dbg.sock,server=on,wait=off
"""
import socket
import sys
import threading


def main() -> None:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])

    def pump() -> None:
        while data := s.recv(65536):
            sys.stdout.buffer.write(data)
            sys.stdout.flush()

    threading.Thread(target=pump, daemon=True).start()
    for line in sys.stdin:
        s.sendall(line.encode())


if __name__ == "__main__":
    main()
