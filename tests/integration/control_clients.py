"""Clients of spotd's control socket that are not trainers, for t-control.sh.

    control_clients.py stray SOCK RANK [silent]
        says hello as a worker of local rank RANK (local_world_size 2), reads
        the welcome, and leaves; with "silent", stays connected, saying
        nothing more, until spotd closes the connection (or 120 s pass)
    control_clients.py idle SOCK N REPORT
        opens N connections that say nothing and holds them; writes "opened
        N" to REPORT once all are open, then "closed K of N after S s" each
        time spotd has closed more of them, and exits once it closed all (or
        after 60 s)

The standard library only.
"""

import json
import os
import resource
import select
import socket
import sys
import time


def stray(path, rank, silent):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    hello = {"v": 1, "type": "hello", "pid": os.getpid(), "local_rank": rank,
             "local_world_size": 2, "lib": "stray"}
    s.sendall((json.dumps(hello) + "\n").encode())
    buf = b""
    s.settimeout(10)
    while b"\n" not in buf:
        data = s.recv(65536)
        if not data:
            sys.exit("stray: spotd closed the connection before its welcome")
        buf += data
    print("welcomed", flush=True)
    if not silent:
        s.close()
        return
    s.settimeout(120)
    try:
        while s.recv(65536):
            pass
        print("closed by spotd", flush=True)
    except socket.timeout:
        print("still open after 120 s", flush=True)


def idle(path, n, report):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        conns.append(s)
    start = time.monotonic()
    with open(report, "a") as f:
        f.write("opened %d\n" % n)
    open_ = {s.fileno(): s for s in conns}
    poller = select.poll()
    for fd in open_:
        poller.register(fd, select.POLLIN)
    last = -1
    while open_ and time.monotonic() - start < 60:
        for fd, _ in poller.poll(200):
            s = open_[fd]
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                poller.unregister(fd)
                del open_[fd]
                s.close()
        closed = n - len(open_)
        if closed != last:
            last = closed
            with open(report, "a") as f:
                f.write("closed %d of %d after %.1f s\n" % (closed, n, time.monotonic() - start))


if __name__ == "__main__":
    if sys.argv[1] == "stray":
        stray(sys.argv[2], int(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "silent")
    elif sys.argv[1] == "idle":
        idle(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("usage: control_clients.py stray SOCK RANK [silent] | idle SOCK N REPORT")
