#!/usr/bin/env python3
"""The peer protocol's frames in Python (docs/protocols.md, peer frames),
and hostile parties that speak them to a spotd peer listener, for
t-world.sh and t-world-peer.sh.  tests/bench/worldgen.py imports the
frames and keys from here.

    peerframe.py PORT MODE [ARGS...]

MODE is one of
    garbage   random bytes, not a frame
    big       a header announcing a body over the 64 KiB cap
    wrongkey  a well-formed hello MACed with another key
    v1        a hello of protocol version 1 (an older spotd), MACed with
              KEYHEX (the world's key) as that version did
    flood     200 connections of garbage, one after the other
  (each: exits 0 when spotd closed every connection it was sent, 1 otherwise)

    relay TARGET LOG
              a relay without the key: listens on PORT, forwards each
              connection to TARGET (both on 127.0.0.1).  The connections
              are numbered when their handshake is done (the dialer's ack
              went through).  On connection 1 it records the first
              `notice` the acceptor sends and cuts the connection once the
              round's `commit` has gone the other way; on connection 2,
              1.5 s after the `resume`, it injects the recorded notice
              towards the dialer; on connection 3, 1 s after the `resume`,
              it stops forwarding the acceptor's frames and sends the
              dialer's own back to it.  From then on it only forwards.
              What it did goes to LOG, a line each.  Runs until killed.
    hold COUNT SECONDS [SOURCES]
              keeps COUNT connections open that send nothing, from the
              comma-separated source addresses (127.0.0.1 by default, in
              turn), for SECONDS, opening a new one for each spotd closes;
              prints "opened N closed M" (M: closed by spotd) and exits 0.
"""
import asyncio
import hashlib
import hmac
import json
import os
import resource
import selectors
import socket
import struct
import sys
import time

import strictjson  # the tests' one strict JSON parser (tests/integration)

MAGIC = b"SPF1"
VERSION = 2
HEADER = 20          # version 2; version 1's was 28 (it had the sender's clock)
MAC = 32
BODY_MAX = 65536
NONCE_LEN = 16
DIALER_TO_ACCEPTOR = b"dialer to acceptor"
ACCEPTOR_TO_DIALER = b"acceptor to dialer"


def handshake_key(world):
    """The key of the hellos (frame.h)."""
    return hmac.new(world, b"spotd peer v2 handshake", hashlib.sha256).digest()


def connection_key(world, dialer_nonce, acceptor_nonce, label):
    """The key of one connection, one direction (frame.h); the nonces raw."""
    return hmac.new(world, b"spotd peer v2" + dialer_nonce + acceptor_nonce + label,
                    hashlib.sha256).digest()


def frame(key, seq, body):
    head = MAGIC + bytes([VERSION, 0, 0, 0]) + struct.pack(">IQ", len(body), seq)
    return head + body + hmac.new(key, head + body, hashlib.sha256).digest()


def frame_v1(key, seq, ts_ms, body):
    """A frame as protocol version 1 made them: the world key itself, and the
    sender's clock in the header."""
    head = MAGIC + bytes([1, 0, 0, 0]) + struct.pack(">IQQ", len(body), seq, ts_ms)
    return head + body + hmac.new(key, head + body, hashlib.sha256).digest()


def header_size(head):
    """The header's size for the frame that starts with these (5 or more)
    bytes: the relay passes on frames of either version."""
    return 28 if head[4] == 1 else HEADER


def split_frames(buf):
    """The whole frames at the start of buf, as (raw bytes, body), and the
    rest; ValueError when buf does not start with a frame."""
    out = []
    while len(buf) >= 12:
        if buf[:4] != MAGIC:
            raise ValueError("not a frame of the peer protocol")
        head = header_size(buf)
        n = struct.unpack(">I", buf[8:12])[0]
        if n > BODY_MAX:
            raise ValueError("a frame over 64 KiB")
        size = head + n + MAC
        if len(buf) < size:
            break
        out.append((buf[:size], buf[head:head + n]))
        buf = buf[size:]
    return out, buf


def seq_of(raw):
    return struct.unpack(">Q", raw[12:20])[0]


def msg_type(body):
    try:
        m = strictjson.loads(body)
        return m.get("type") if isinstance(m, dict) else None
    except ValueError:
        return None


def hello(key, seal=frame):
    body = json.dumps({"v": 1, "type": "hello", "job": "w", "rank": 0,
                       "nonce": os.urandom(NONCE_LEN).hex()}).encode()
    return seal(key, 1, body)


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


# ---- the relay --------------------------------------------------------------------

class Relay:
    def __init__(self, target, log):
        self.target = target
        self.log = open(log, "a", buffering=1)
        self.numbered = 0
        self.recorded = None

    def say(self, text):
        self.log.write(text + "\n")

    async def serve(self, dr, dw):
        try:
            ar, aw = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            dw.close()
            return
        conn = {"n": None, "reflecting": False}
        numbered, resumed, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()

        async def pump(r, w, from_dialer):
            buf = b""
            try:
                while True:
                    data = await r.read(65536)
                    if not data:
                        break
                    frames, buf = split_frames(buf + data)
                    for raw, body in frames:
                        t = msg_type(body)
                        n = conn["n"]
                        if from_dialer:
                            w.write(raw)
                            if conn["reflecting"]:
                                dw.write(raw)
                            if t == "ack" and n is None:
                                self.numbered += 1
                                conn["n"] = self.numbered
                                self.say("conn %d: up" % conn["n"])
                                numbered.set()
                            elif t == "resume":
                                resumed.set()
                            elif t == "commit" and n == 1 and self.recorded:
                                self.say("conn 1: the round's commit went through; cutting")
                                loop.call_later(0.5, done.set)
                        else:
                            if n == 1 and t == "notice" and self.recorded is None:
                                self.recorded = raw
                                self.say("conn 1: recorded a notice (seq %d)" % seq_of(raw))
                            if conn["reflecting"]:
                                continue
                            w.write(raw)
            except (ConnectionError, ValueError):
                pass
            done.set()

        async def plan():
            await numbered.wait()
            if conn["n"] == 2 and self.recorded:
                await resumed.wait()
                await asyncio.sleep(1.5)
                dw.write(self.recorded)
                self.say("conn 2: injected the notice of conn 1 (seq %d)" % seq_of(self.recorded))
            elif conn["n"] == 3:
                await resumed.wait()
                await asyncio.sleep(1.0)
                conn["reflecting"] = True
                self.say("conn 3: reflecting the dialer's frames back to it")

        tasks = [asyncio.ensure_future(pump(dr, aw, True)),
                 asyncio.ensure_future(pump(ar, dw, False)), asyncio.ensure_future(plan())]
        await done.wait()
        for t in tasks:
            t.cancel()
        for w in (dw, aw):
            w.close()
        if conn["n"] is not None:
            self.say("conn %d: closed" % conn["n"])


async def relay(port, target, log):
    r = Relay(target, log)
    server = await asyncio.start_server(r.serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


# ---- the connection flood ---------------------------------------------------------

def hold(port, count, seconds, sources):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = count + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    sel = selectors.DefaultSelector()
    opened = closed = 0
    end = time.monotonic() + seconds

    def open_one():
        nonlocal opened
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((sources[opened % len(sources)], 0))
            s.connect_ex(("127.0.0.1", port))
            sel.register(s, selectors.EVENT_READ)
        except OSError:
            s.close()
            return False
        opened += 1
        return True

    live = 0
    while time.monotonic() < end:
        # At most 200 new ones a turn (some 4000 a second): a flood, not
        # a busy loop of this script's own.
        for _ in range(min(count - live, 200)):
            if not open_one():
                break
            live += 1
        for key, _ in sel.select(timeout=0.05):
            s = key.fileobj
            try:
                got = s.recv(64)
            except BlockingIOError:
                continue
            except OSError:
                got = b""
            if not got:
                sel.unregister(s)
                s.close()
                live -= 1
                closed += 1
    print("opened %d closed %d" % (opened, closed))
    sys.exit(0)


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "relay":
        try:
            asyncio.run(relay(port, int(sys.argv[3]), sys.argv[4]))
        except KeyboardInterrupt:
            pass
        return
    if mode == "hold":
        sources = sys.argv[5].split(",") if len(sys.argv) > 5 else ["127.0.0.1"]
        hold(port, int(sys.argv[3]), float(sys.argv[4]), sources)
        return
    key = bytes.fromhex(sys.argv[3]) if len(sys.argv) > 3 else b""
    if mode == "garbage":
        ok = closed_after(port, os.urandom(300))
    elif mode == "big":
        ok = closed_after(port, MAGIC + bytes([VERSION, 0, 0, 0]) + struct.pack(">IQ", 1 << 20, 1))
    elif mode == "wrongkey":
        ok = closed_after(port, hello(handshake_key(b"another world's key, 32 bytes!!")))
    elif mode == "v1":
        ok = closed_after(port, hello(key, lambda k, seq, body:
                                      frame_v1(k, seq, int(time.time() * 1000), body)))
    elif mode == "flood":
        ok = all(closed_after(port, os.urandom(64)) for _ in range(200))
    else:
        sys.exit("unknown mode " + mode)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
