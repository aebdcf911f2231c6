#!/usr/bin/env python3
"""Send hostile bytes to a spotd peer listener (docs/protocols.md, peer
frames), for t-world.sh.

    peerframe.py PORT MODE [KEYHEX]

MODE is one of
    garbage   random bytes, not a frame
    big       a header announcing a body over the 64 KiB cap
    wrongkey  a well-formed hello MACed with another key
    stale     a hello MACed with KEYHEX (the world's key) whose timestamp
              is an hour old, as a replayed frame would be
    flood     200 connections of garbage, one after the other

Exits 0 when spotd closed every connection it was sent, 1 otherwise.
"""
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import time


def frame(key, seq, ts_ms, body):
    head = b"SPF1" + bytes([1, 0, 0, 0]) + struct.pack(">IQQ", len(body), seq, ts_ms)
    mac = hmac.new(key, head + body, hashlib.sha256).digest()
    return head + body + mac


def hello(key, ts_ms):
    body = json.dumps({"v": 1, "type": "hello", "job": "w", "rank": 0,
                       "nonce": os.urandom(16).hex()}).encode()
    return frame(key, 1, ts_ms, body)


def closed_after(port, data):
    """Send data; True when spotd closes the connection within 5 s."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(data)
        s.settimeout(5)
        while True:
            got = s.recv(4096)
            if not got:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    finally:
        s.close()


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    key = bytes.fromhex(sys.argv[3]) if len(sys.argv) > 3 else b""
    now = int(time.time() * 1000)
    if mode == "garbage":
        ok = closed_after(port, os.urandom(300))
    elif mode == "big":
        ok = closed_after(port, b"SPF1" + bytes([1, 0, 0, 0]) +
                          struct.pack(">IQQ", 1 << 20, 1, now))
    elif mode == "wrongkey":
        ok = closed_after(port, hello(b"another world's key, 32 bytes!!", now))
    elif mode == "stale":
        ok = closed_after(port, hello(key, now - 3600 * 1000))
    elif mode == "flood":
        ok = all(closed_after(port, os.urandom(64)) for _ in range(200))
    else:
        sys.exit("unknown mode " + mode)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
