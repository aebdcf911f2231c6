#!/usr/bin/env python3
"""Load generator for tests/bench/world.sh: the ranks of a world that are
not real spotd processes, speaking the real peer protocol
(docs/protocols.md) to a real spotd.  Python 3 standard library only.

    worldgen.py --job JOB --key-file FILE --peers ADDR:PORT,... \\
                --ranks FIRST-LAST --store DIR --out FILE

Each fake rank listens on its own entry of --peers (lower ranks dial it,
as in the real world: the real spotd of rank 0 dials every rank above
it), and on each connection:

  * completes the handshake as the acceptor: the dialer's hello (job,
    rank below ours, nonce), our hello (our nonce, the dialer's echoed),
    the dialer's ack (our nonce echoed); every frame is checked (magic,
    version, flags, length, HMAC-SHA256 with the hellos' key and then the
    connection's, sequence number 1, 2, 3...), a bad one closes the
    connection (the frames and keys: tests/integration/peerframe.py);
  * sends its `state` once the handshake is done (not live, in a fresh
    world), a heartbeat every second, and `ready` every second until the
    coordinator's `resume` (with the newest committed generation it saw,
    none in a fresh world);
  * answers `query` with `step` (--step, 0 by default: the real trainers'
    step decides);
  * on `prepare`, writes a valid node manifest with no files for its rank
    into the file store, DIR/JOB/gens/<8-digit gen>/rank-<r>.json (written
    aside and renamed), and sends `hashed` at once with the fingerprint of
    an empty shard (--hashed own): it differs from rank 0's, so the real
    node stores all of its own chunks, which is the truth, since the fake
    ranks store none (--hashed copy sends rank 0's fingerprint once its
    `hashed` is in: the real node then stores only its share, and the
    generation misses the rest; for timing only);
  * sends `saved` with the manifest's SHA-256 once rank 0's own `saved` of
    that generation has come in on the same connection (the coordinator
    broadcasts it), with rank 0's step (the world commits only when every
    rank saved the same step; the manifest is rewritten with it).  So the
    last shard the coordinator receives is a fake one, and the generator
    knows when it was sent.  --saved now sends it right after `hashed`
    instead, with --step-saved (default: the prepare's step minus one, what
    the C example trainer saves);
  * records when `commit` and `abort` arrive.

--out is a JSON file, rewritten (aside, then renamed) every second when
something changed, 50 ms after a commit or an abort came in, and at the
end:

  {"listening": n, "up": n, "resumed": n, "errors": [...],
   "gens": {"1": {"prepared": n, "hashed_sent": n, "saved_sent": n,
                  "first_saved": t, "last_saved": t, "rank0_saved": step,
                  "commit_first": t, "commit_last": t, "commits": n,
                  "aborts": n, "abort_reason": "..."}}}

first_saved and last_saved: when the first and the last fake rank began
to send its saved (taken just before the frame is built and written);
commit_first and commit_last: when the first and the last fake rank had
read the commit.  Times are time.time() (seconds since the epoch, float):
the clock of spotd's logs.  SIGTERM or SIGINT ends it (exit 0).
"""
import argparse
import asyncio
import hashlib
import hmac
import json
import os
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import peerframe  # noqa: E402  (the protocol's frames and keys)
from peerframe import MAGIC, HEADER, MAC, BODY_MAX  # noqa: E402


def key_from_file(path):
    """The world key as spotd reads it (frame_key_parse): surrounding
    whitespace dropped; 64 or more hex digits (an even number) decoded,
    anything else used as bytes."""
    with open(path, "rb") as f:
        text = f.read().strip(b" \t\r\n")
    hexy = len(text) >= 64 and len(text) % 2 == 0 and \
        all(c in b"0123456789abcdefABCDEF" for c in text)
    key = bytes.fromhex(text.decode()) if hexy else text
    if len(key) > 256:
        sys.exit("worldgen: the world key is longer than 256 bytes")
    if len(key) < 16:
        sys.exit("worldgen: the world key is shorter than 16 bytes")
    return key


def iso_ms(t):
    ms = int(t * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % ms


class Gen:
    """The world of fake ranks."""

    def __init__(self, args, key, peers, ranks):
        self.a = args
        self.key = key
        self.peers = peers
        self.ranks = ranks
        self.conns = {}              # rank -> Conn (the one that is up)
        self.waiting = {r: True for r in ranks}   # not resumed: send ready
        self.newest = 0              # the newest committed generation seen
        self.members = None          # the last resume's, when it named them
        self.listening = 0
        self.resumed = 0
        self.errors = []
        self.gens = {}
        self.dirty = True
        self.servers = []
        self.soon = None             # a write of --out scheduled

    def write_soon(self):
        """Write --out 50 ms from now (once for a burst of commits), so
        that world.sh sees a commit soon after every fake rank got it."""
        self.dirty = True
        if self.soon is None:
            def run():
                self.soon = None
                self.write_out()
            self.soon = asyncio.get_running_loop().call_later(0.05, run)

    def g(self, gen):
        return self.gens.setdefault(str(gen), {
            "prepared": 0, "hashed_sent": 0, "saved_sent": 0, "first_saved": None,
            "last_saved": None, "rank0_saved": None, "commit_first": None, "commit_last": None, "commits": 0,
            "aborts": 0, "abort_reason": None})

    def error(self, text):
        if len(self.errors) < 50:
            self.errors.append(text)
        self.dirty = True

    def write_out(self):
        if not self.dirty:
            return
        self.dirty = False
        doc = {"listening": self.listening, "up": len(self.conns), "resumed": self.resumed,
               "ranks": len(self.ranks), "errors": self.errors, "gens": self.gens}
        tmp = self.a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.a.out)

    def manifest(self, rank, gen, step):
        """A node manifest with no files (manifest_parse accepts it), written
        into the file store; returns its SHA-256 (hex)."""
        doc = {"format": 1, "kind": "manifest", "job": self.a.job, "gen": gen,
               "created": iso_ms(time.time()), "spotd": "worldgen", "rank": rank,
               "step": step, "method": "app", "chunk_size": 8388608, "files": []}
        data = json.dumps(doc, separators=(",", ":")).encode()
        d = os.path.join(self.a.store, self.a.job, "gens", "%08d" % gen)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "rank-%d.json" % rank)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return hashlib.sha256(data).hexdigest()

    def ready(self):
        return {"type": "ready", "gen": self.newest} if self.newest else {"type": "ready"}

    def state(self, rank):
        m = {"type": "state", "live": not self.waiting[rank]}
        if self.newest:
            m["gen"] = self.newest
        if self.members:
            m["members"] = self.members
        return m

    def fingerprint(self, rank):
        """The fingerprint of a shard with no files: not rank 0's, so the
        real nodes store all of their own chunks (the fake ranks store
        none)."""
        return hashlib.sha256(b"worldgen: an empty shard").hexdigest()

    async def tick(self):
        """Every second: heartbeats on every connection; ready from every
        rank that waits for the resume; the output file."""
        while True:
            await asyncio.sleep(1.0)
            for rank, c in list(self.conns.items()):
                c.send({"type": "heartbeat"})
                if self.waiting[rank]:
                    c.send(self.ready())
            self.write_out()


class Conn:
    def __init__(self, world, rank, reader, writer):
        self.w = world
        self.rank = rank             # ours
        self.peer = -1               # theirs, after its hello
        self.r = reader
        self.wr = writer
        self.seq = 0
        self.last_seq = 0
        self.nonce = os.urandom(peerframe.NONCE_LEN)
        self.tx = self.rx = peerframe.handshake_key(world.key)
        self.pending = {}            # gen -> (manifest sha256, its step): saved not sent
        self.rank0 = {}              # gen -> the step of rank 0's saved, as it came here
        self.rank0_fp = {}           # gen -> rank 0's fingerprint (its hashed)
        self.hashed = set()          # gens whose hashed we sent
        self.closed = False

    def send(self, msg):
        if self.closed:
            return
        msg = dict(msg)
        msg.setdefault("v", 1)
        body = json.dumps(msg, separators=(",", ":")).encode()
        self.seq += 1
        try:
            self.wr.write(peerframe.frame(self.tx, self.seq, body))
        except (ConnectionError, RuntimeError):
            self.closed = True

    async def frame(self):
        head = await self.r.readexactly(HEADER)
        if head[:4] != MAGIC or head[4] != peerframe.VERSION or head[5:8] != b"\0\0\0":
            raise ValueError("not a frame of the peer protocol")
        n, seq = struct.unpack(">IQ", head[8:])
        if n > BODY_MAX:
            raise ValueError("a frame over 64 KiB")
        rest = await self.r.readexactly(n + MAC)
        body, mac = rest[:n], rest[n:]
        want = hmac.new(self.rx, head + body, hashlib.sha256).digest()
        if not hmac.compare_digest(want, mac):
            raise ValueError("a frame with a wrong MAC")
        if seq != self.last_seq + 1:
            raise ValueError("a frame out of sequence (replayed, or one missing)")
        self.last_seq = seq
        m = json.loads(body)
        if not isinstance(m, dict) or m.get("v") != 1 or not isinstance(m.get("type"), str):
            raise ValueError("a frame whose body is not a version 1 message")
        return m

    async def run(self):
        w = self.w
        try:
            m = await asyncio.wait_for(self.frame(), 10)
            if m["type"] != "hello" or m.get("job") != w.a.job or \
                    not isinstance(m.get("rank"), int) or not 0 <= m["rank"] < self.rank or \
                    not isinstance(m.get("nonce"), str) or len(m["nonce"]) != 32:
                raise ValueError("a bad hello: %r" % (m,))
            self.peer = m["rank"]
            self.send({"type": "hello", "job": w.a.job, "rank": self.rank,
                       "nonce": self.nonce.hex(), "echo": m["nonce"]})
            theirs = bytes.fromhex(m["nonce"])
            self.tx = peerframe.connection_key(w.key, theirs, self.nonce,
                                               peerframe.ACCEPTOR_TO_DIALER)
            self.rx = peerframe.connection_key(w.key, theirs, self.nonce,
                                               peerframe.DIALER_TO_ACCEPTOR)
            m = await asyncio.wait_for(self.frame(), 10)
            if m["type"] != "ack" or m.get("echo") != self.nonce.hex():
                raise ValueError("a bad ack: %r" % (m,))
            old = w.conns.get(self.rank)
            if old is not None and old is not self:
                old.close()
            w.conns[self.rank] = self
            w.dirty = True
            # As a real node does when a peer comes up: its state (a peer
            # coordinates only once every peer up has sent one), and, as
            # it waits, ready.
            self.send(w.state(self.rank))
            if w.waiting[self.rank]:
                self.send(w.ready())
            while True:
                m = await self.frame()
                self.on_msg(m)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            pass
        except (ValueError, KeyError, TypeError) as e:
            w.error("rank %d: %s" % (self.rank, e))
        finally:
            self.close()

    def close(self):
        w = self.w
        if w.conns.get(self.rank) is self:
            del w.conns[self.rank]
            w.dirty = True
            # Its coordinator is gone: a real node would stop its command
            # and wait for the world again.
            w.waiting[self.rank] = True
        if not self.closed:
            self.closed = True
            try:
                self.wr.close()
            except Exception:
                pass

    def send_hashed(self, gen, fp):
        self.hashed.add(gen)
        self.send({"type": "hashed", "gen": gen, "rank": self.rank, "sha256": fp})
        self.w.g(gen)["hashed_sent"] += 1
        self.w.dirty = True

    def send_saved(self, gen, step):
        """Send our saved of gen; the manifest is rewritten first when the
        step differs from the one it names."""
        w = self.w
        sha, mstep = self.pending.pop(gen)
        if step != mstep:
            sha = w.manifest(self.rank, gen, step)
        # The time before the frame is built and written: the saved cannot
        # be in before it.
        t = time.time()
        self.send({"type": "saved", "gen": gen, "rank": self.rank, "step": step,
                   "sha256": sha, "bytes": 0})
        g = w.g(gen)
        g["saved_sent"] += 1
        g["last_saved"] = t
        if g["first_saved"] is None:
            g["first_saved"] = t
        w.dirty = True

    def on_msg(self, m):
        w = self.w
        t = m["type"]
        if t == "heartbeat":
            return
        if t == "query":
            self.send({"type": "step", "gen": m["gen"], "step": w.a.step})
        elif t == "prepare":
            gen = m["gen"]
            step = w.a.step_saved if w.a.step_saved is not None else max(0, m["step"] - 1)
            self.pending[gen] = (w.manifest(self.rank, gen, step), step)
            w.g(gen)["prepared"] += 1
            w.dirty = True
            # Our shard is "hashed" at once (it has no files).  Every node
            # waits for every rank's fingerprint before it stores the rest
            # of its chunks and writes its manifest.
            if w.a.hashed == "own":
                self.send_hashed(gen, w.fingerprint(self.rank))
            elif gen in self.rank0_fp:
                self.send_hashed(gen, self.rank0_fp[gen])
            if w.a.saved == "now":
                self.send_saved(gen, step)
            elif gen in self.rank0:
                self.send_saved(gen, self.rank0[gen])
        elif t == "hashed":
            gen = m["gen"]
            if m.get("rank") == 0:
                self.rank0_fp[gen] = m["sha256"]
                if w.a.hashed == "copy" and gen in self.pending and gen not in self.hashed:
                    self.send_hashed(gen, m["sha256"])
        elif t == "saved":
            gen = m["gen"]
            if m.get("rank") == 0:
                # Rank 0's shard is in: ours follows, at the step it saved.
                self.rank0[gen] = m["step"]
                w.g(gen)["rank0_saved"] = m["step"]
                if gen in self.pending and w.a.saved == "after0":
                    self.send_saved(gen, m["step"])
        elif t == "commit":
            tt = time.time()
            g = w.g(m["gen"])
            w.newest = max(w.newest, m["gen"])
            if g["commit_first"] is None:
                g["commit_first"] = tt
            g["commit_last"] = tt
            g["commits"] += 1
            w.write_soon()
        elif t == "abort":
            g = w.g(m["gen"])
            g["aborts"] += 1
            g["abort_reason"] = m.get("reason")
            self.pending.pop(m["gen"], None)
            w.write_soon()
        elif t == "resume":
            if isinstance(m.get("members"), list):
                w.members = m["members"]
            if w.waiting[self.rank]:
                w.waiting[self.rank] = False
                w.resumed += 1
                w.dirty = True


def parse_ranks(text, size):
    if "-" in text:
        a, b = text.split("-", 1)
        ranks = list(range(int(a), int(b) + 1))
    else:
        ranks = [int(x) for x in text.split(",")]
    for r in ranks:
        if not 0 < r < size:
            sys.exit("worldgen: rank %d does not fit a world of %d (rank 0 is the real spotd)"
                     % (r, size))
    return ranks


async def main_async(args):
    key = key_from_file(args.key_file)
    peers = args.peers.split(",")
    ranks = parse_ranks(args.ranks, len(peers))
    w = Gen(args, key, peers, ranks)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)

    def acceptor(rank):
        async def on_conn(reader, writer):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await Conn(w, rank, reader, writer).run()
        return on_conn

    for r in ranks:
        host, port = peers[r].rsplit(":", 1)
        host = host.strip("[]")
        w.servers.append(await asyncio.start_server(acceptor(r), host, int(port),
                                                    reuse_address=True))
        w.listening += 1
    w.write_out()
    ticker = asyncio.ensure_future(w.tick())
    await stop.wait()
    ticker.cancel()
    for c in list(w.conns.values()):
        c.close()
    for s in w.servers:
        s.close()
    w.dirty = True
    w.write_out()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", required=True)
    ap.add_argument("--key-file", required=True)
    ap.add_argument("--peers", required=True, help="ADDR:PORT of every rank, in rank order")
    ap.add_argument("--ranks", required=True, help="FIRST-LAST or a comma list (not 0)")
    ap.add_argument("--store", required=True, help="the file store's directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--step", type=int, default=0, help="the answer to query (default 0)")
    ap.add_argument("--saved", choices=("after0", "now"), default="after0",
                    help="when to send saved: after0 (once rank 0's saved is in, "
                    "default) or now (right after hashed)")
    ap.add_argument("--hashed", choices=("own", "copy"), default="own",
                    help="the fingerprint in hashed: own (of an empty shard: the real "
                    "nodes store all their chunks) or copy (rank 0's: replicated state, "
                    "each real node stores only its share; the fake ranks store none of "
                    "theirs, so the generation misses chunks: for timing only)")
    ap.add_argument("--step-saved", type=int, default=None,
                    help="--saved now: the step in saved (default: the prepare's minus one)")
    args = ap.parse_args()
    try:
        asyncio.run(main_async(args))
    except OSError as e:
        sys.exit("worldgen: %s" % e)


if __name__ == "__main__":
    main()
