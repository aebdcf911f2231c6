#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 reverse proxy for spotd's S3 tests.

    faultproxy.py --upstream HOST:PORT [--port 0] [--port-file FILE]
                  [--verbose]

Listens on 127.0.0.1 only and forwards every request to the upstream S3
server (Swift + s3api in the tests) byte for byte: the request head is sent
as received, Host included, so SigV4 signatures stay valid.  Rules posted to
the control API under /_fault/ on the same port make chosen requests fail:
an S3 500 or 503, a reset connection, a stall, a truncated or corrupted
response body (see README.md).  Python 3 standard library only.

Design: one thread per client connection, each with its own upstream
connection, opened on the first proxied request and reused while both sides
keep the connection alive.  Bodies are streamed in blocks of up to 1 MiB
through one preallocated buffer per connection; nothing is held in memory
except the bodies that a truncate or corrupt fault must re-frame (chunked or
read-until-close responses).  `Expect: 100-continue` is forwarded and the
upstream's own 100 is relayed, so the request reaches the upstream exactly
as the client signed it, whether or not its signature covers Expect.
"""

import argparse
import json
import os
import re
import select
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import uuid
from email.utils import formatdate
from urllib.parse import parse_qsl, urlsplit

from metadata import write_port_file  # the same atomic port file as the mocks

BLOCK = 1 << 20              # largest recv/send of a body
HEAD_MAX = 64 * 1024         # a request or response head larger is refused
CONTROL_BODY_MAX = 1 << 20   # a /_fault/ request body larger is refused
LOG_CAP = 200000             # log entries kept (oldest dropped)
STALL_DEFAULT = 30.0         # "stall" or "lose" without "seconds"
ACTIONS = ("403", "500", "503", "expired", "reset", "reset_body", "stall", "lose", "truncate",
           "corrupt")
RULE_KEYS = ("nth", "every", "from", "count", "method", "path", "action",
             "times", "seconds")


class Gone(Exception):
    """A peer closed, reset or broke the protocol; SIDE is "client" or
    "upstream"."""

    def __init__(self, side, why):
        super().__init__("%s: %s" % (side, why))
        self.side = side


class BadRules(Exception):
    """A /_fault/rules body the proxy cannot accept (answered with 400)."""


# --------------------------------------------------------------------------
# Sockets with a read-ahead buffer, and HTTP/1.1 message heads.


class Peer:
    def __init__(self, sock, side):
        self.sock = sock
        self.side = side
        self.buf = b""               # bytes read past what was parsed
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _recv(self, n):
        try:
            d = self.sock.recv(n)
        except OSError as e:
            raise Gone(self.side, e) from None
        if not d:
            raise Gone(self.side, "connection closed")
        return d

    def send(self, data):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise Gone(self.side, e) from None

    def read_head(self):
        """The raw head up to and including its blank line; None when the
        peer closed cleanly between messages."""
        while True:
            if self.buf[:1] in (b"\r", b"\n"):
                self.buf = self.buf.lstrip(b"\r\n")     # RFC 9112 2.2
            ends = [i + n for i, n in ((self.buf.find(b"\r\n\r\n"), 4),
                                       (self.buf.find(b"\n\n"), 2)) if i >= 0]
            if ends:
                end = min(ends)
                head, self.buf = self.buf[:end], self.buf[end:]
                return head
            if len(self.buf) > HEAD_MAX:
                raise Gone(self.side, "message head over %d bytes" % HEAD_MAX)
            try:
                d = self.sock.recv(65536)
            except OSError as e:
                raise Gone(self.side, e) from None
            if not d:
                if not self.buf:
                    return None
                raise Gone(self.side, "closed inside a message head")
            self.buf += d

    def readline(self):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i + 1], self.buf[i + 1:]
                return line
            if len(self.buf) > HEAD_MAX:
                raise Gone(self.side, "line over %d bytes" % HEAD_MAX)
            self.buf += self._recv(65536)

    def pump(self, n, out, block, flip=-1):
        """Move exactly N body bytes to OUT (a Peer, a bytearray, or None to
        discard), through BLOCK (a bytearray); flip byte FLIP (an offset in
        these N) on the way.  Returns N; raises Gone short of it."""
        done = 0
        if self.buf and n:
            take = self.buf[:n]
            self.buf = self.buf[len(take):]
            if 0 <= flip < len(take):
                take = bytearray(take)
                take[flip] ^= 0xFF
            _put(out, take)
            done = len(take)
        mv = memoryview(block)
        while done < n:
            try:
                k = self.sock.recv_into(mv, min(n - done, len(block)))
            except OSError as e:
                raise Gone(self.side, e) from None
            if k == 0:
                raise Gone(self.side, "closed %d bytes into a %d-byte body"
                           % (done, n))
            if done <= flip < done + k:
                block[flip - done] ^= 0xFF
            _put(out, mv[:k])
            done += k
        return n

    def pump_to_close(self, out, block):
        """Move everything up to the peer's close to OUT; returns the count."""
        done = 0
        if self.buf:
            _put(out, self.buf)
            done, self.buf = len(self.buf), b""
        mv = memoryview(block)
        while True:
            try:
                k = self.sock.recv_into(mv, len(block))
            except OSError as e:
                raise Gone(self.side, e) from None
            if k == 0:
                return done
            _put(out, mv[:k])
            done += k

    def pump_chunked(self, raw_out, data_out, block):
        """Move a chunked body: its framing unchanged to RAW_OUT (or None),
        its decoded data to DATA_OUT (or None).  Returns the data size."""
        total = 0
        while True:
            line = self.readline()
            _put(raw_out, line)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise Gone(self.side, "bad chunk size %r" % line[:40]) from None
            if size == 0:
                while True:                 # trailer fields, then a blank line
                    line = self.readline()
                    _put(raw_out, line)
                    if line in (b"\r\n", b"\n"):
                        return total
            if raw_out is not None and data_out is not None:
                data = bytearray()
                self.pump(size, data, block)
                _put(raw_out, data)
                _put(data_out, data)
            else:
                self.pump(size, raw_out if raw_out is not None else data_out, block)
            total += size
            _put(raw_out, self.readline())

    def readable(self):
        """Whether a read would not block (buffered data, data, or EOF)."""
        if self.buf:
            return True
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(r)

    def close(self, rst=False):
        try:
            if rst:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))
            else:
                self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def _put(out, data):
    if out is None:
        return
    if isinstance(out, bytearray):
        out += data
    else:
        out.send(data)


class Head:
    """A parsed request or response head; RAW is kept to forward as is."""

    def __init__(self, raw, side):
        self.raw = raw
        lines = raw.decode("latin-1").split("\n")
        self.start = lines[0].rstrip("\r")
        self.fields = []
        for line in lines[1:]:
            line = line.rstrip("\r")
            if not line:
                break
            if line[0] in " \t" and self.fields:        # obsolete line folding
                k, v = self.fields[-1]
                self.fields[-1] = (k, v + " " + line.strip())
                continue
            k, sep, v = line.partition(":")
            if not sep or not k or k != k.strip():
                raise Gone(side, "bad header line %r" % line[:80])
            self.fields.append((k.lower(), v.strip()))

    def get(self, name, default=None):
        vals = [v for k, v in self.fields if k == name]
        return ", ".join(vals) if vals else default

    def tokens(self, name):
        return {t.strip().lower() for t in (self.get(name) or "").split(",")}

    def framing(self, side):
        """("chunked", None), ("length", N) or ("none", 0): a request's body."""
        if "chunked" in self.tokens("transfer-encoding"):
            return "chunked", None
        cl = [v for k, v in self.fields if k == "content-length"]
        if cl:
            vals = {x.strip() for v in cl for x in v.split(",")}
            n = vals.pop()
            if vals or not n.isdigit():
                raise Gone(side, "bad Content-Length %r" % cl)
            return "length", int(n)
        return "none", 0


class Request(Head):
    def __init__(self, raw):
        super().__init__(raw, "client")
        parts = self.start.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise Gone("client", "bad request line %r" % self.start[:80])
        self.method, self.target, self.version = parts
        self.body_kind, self.body_len = self.framing("client")
        self.expect = ("100-continue" in self.tokens("expect")
                       and self.version != "HTTP/1.0")

    def has_body(self):
        return self.body_kind == "chunked" or self.body_len > 0

    def keep_alive(self):
        c = self.tokens("connection")
        if self.version == "HTTP/1.0":
            return "keep-alive" in c
        return "close" not in c


class Response(Head):
    def __init__(self, raw):
        super().__init__(raw, "upstream")
        parts = self.start.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") \
                or not parts[1].isdigit() or len(parts[1]) != 3:
            raise Gone("upstream", "bad status line %r" % self.start[:80])
        self.version = parts[0]
        self.status = int(parts[1])

    def body_framing(self, method):
        if method == "HEAD" or self.status < 200 or self.status in (204, 304):
            return "none", 0
        kind, n = self.framing("upstream")
        return ("close", None) if kind == "none" else (kind, n)

    def keep_alive(self):
        c = self.tokens("connection")
        if self.version == "HTTP/1.0":
            return "keep-alive" in c
        return "close" not in c


# --------------------------------------------------------------------------
# Rules, the request log and the counters: shared by every connection.


class Rule:
    def __init__(self, spec, index):
        where = "rule %d" % index
        if not isinstance(spec, dict):
            raise BadRules("%s: a rule must be a JSON object" % where)
        unknown = sorted(set(spec) - set(RULE_KEYS))
        if unknown:
            raise BadRules("%s: unknown key(s) %s (allowed: %s)" % (
                where, ", ".join(unknown), ", ".join(RULE_KEYS)))
        self.spec = spec
        act = spec.get("action")
        if isinstance(act, bool) or not isinstance(act, (int, str)) \
                or str(act) not in ACTIONS:
            raise BadRules("%s: action must be one of %s" % (where, ", ".join(ACTIONS)))
        self.action = str(act)

        def count(key, low):
            v = spec.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise BadRules("%s: %s must be an integer >= %d" % (where, key, low))
            return v

        selectors = [k for k in ("nth", "every", "from") if k in spec]
        if len(selectors) > 1:
            raise BadRules("%s: use only one of nth, every, from" % where)
        if "count" in spec and "from" not in spec:
            raise BadRules("%s: count goes with from" % where)
        self.nth = count("nth", 1)
        self.every = count("every", 1)
        self.start = count("from", 1)
        self.count = count("count", 1)
        self.times = count("times", 0)
        self.method = spec.get("method")
        if self.method is not None:
            if not isinstance(self.method, str) or not self.method:
                raise BadRules("%s: method must be a non-empty string" % where)
            self.method = self.method.upper()
        self.path = None
        if "path" in spec:
            if not isinstance(spec["path"], str):
                raise BadRules("%s: path must be a string (a Python regex)" % where)
            try:
                self.path = re.compile(spec["path"])
            except re.error as e:
                raise BadRules("%s: bad path regex: %s" % (where, e)) from None
        self.seconds = None
        if "seconds" in spec:
            v = spec["seconds"]
            if self.action not in ("stall", "lose"):
                raise BadRules("%s: seconds goes with the stall and lose actions" % where)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise BadRules("%s: seconds must be a number >= 0" % where)
            self.seconds = float(v)
        self.matched = 0            # requests since the reset its filters match
        self.fired = 0

    def filters(self, method, target):
        return ((self.method is None or method == self.method)
                and (self.path is None or self.path.search(target) is not None))

    def due(self):
        n = self.matched
        if self.times is not None and self.fired >= self.times:
            return False
        if self.nth is not None:
            return n == self.nth
        if self.every is not None:
            return n % self.every == 0
        if self.start is not None:
            return n >= self.start and (self.count is None or n < self.start + self.count)
        return True

    def describe(self):
        d = dict(self.spec)
        d["matched"] = self.matched
        d["fired"] = self.fired
        return d


class State:
    def __init__(self, upstream, verbose):
        self.upstream = upstream
        self.verbose = verbose
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.conns = 0
        self.clear()

    def clear(self):
        self.rules = []
        self.log = []
        self.seq = 0
        self.bytes_in = 0
        self.bytes_out = 0

    def set_rules(self, specs):
        if not isinstance(specs, list):
            raise BadRules("the rules must be a JSON list of objects")
        rules = [Rule(s, i + 1) for i, s in enumerate(specs)]
        with self.lock:
            # Counting starts at the last reset, so a rule set later counts
            # the requests already logged (unfiltered ones: all of them).
            for r in rules:
                if r.method is None and r.path is None:
                    r.matched = self.seq
                else:
                    r.matched = sum(1 for e in self.log
                                    if r.filters(e["method"], e["path"]))
            self.rules = rules
        return len(rules)

    def begin(self, conn, req):
        """Log a proxied request; returns (its entry, the rule that fires or
        None).  Every rule whose filters match counts it; the first due one
        fires."""
        with self.lock:
            self.seq += 1
            fire = None
            for r in self.rules:
                if not r.filters(req.method, req.target):
                    continue
                r.matched += 1
                if fire is None and r.due():
                    r.fired += 1
                    fire = r
            entry = {"seq": self.seq, "time": time.time(), "conn": conn,
                     "method": req.method, "path": req.target, "status": None,
                     "action": fire.action if fire else None,
                     "req_bytes": 0, "resp_bytes": 0}
            self.log.append(entry)
            if len(self.log) > LOG_CAP:
                del self.log[: len(self.log) - LOG_CAP]
            return entry, fire

    def count(self, entry, req_bytes=0, forwarded=0, resp_bytes=0):
        with self.lock:
            entry["req_bytes"] += req_bytes
            entry["resp_bytes"] += resp_bytes
            self.bytes_in += forwarded
            self.bytes_out += resp_bytes

    # ---- the control API ----

    def control(self, method, target, body):
        """(status, JSON-able answer) for a /_fault/ request."""
        parts = urlsplit(target)
        p, args = parts.path, dict(parse_qsl(parts.query, keep_blank_values=True))
        if p == "/_fault/rules" and method == "POST":
            try:
                n = self.set_rules(json.loads(body.decode("utf-8")))
            except (ValueError, UnicodeDecodeError) as e:
                return 400, {"error": "bad JSON: %s" % e}
            except BadRules as e:
                return 400, {"error": str(e)}
            return 200, {"ok": True, "rules": n}
        if p == "/_fault/rules" and method == "GET":
            with self.lock:
                return 200, [r.describe() for r in self.rules]
        if p == "/_fault/log" and method == "GET":
            try:
                since = int(args.get("since") or 0)
                rx = re.compile(args["path"]) if args.get("path") else None
            except (ValueError, re.error) as e:
                return 400, {"error": "bad query: %s" % e}
            m = args.get("method", "").upper()
            with self.lock:
                return 200, [dict(e) for e in self.log
                             if e["seq"] > since and (not m or e["method"] == m)
                             and (rx is None or rx.search(e["path"]))]
        if p == "/_fault/stats" and method == "GET":
            with self.lock:
                return 200, {"requests": self.seq, "bytes_in": self.bytes_in,
                             "bytes_out": self.bytes_out}
        if p == "/_fault/reset" and method == "POST":
            with self.lock:
                self.clear()
            return 200, {"ok": True}
        if p == "/_fault/health" and method in ("GET", "HEAD"):
            return 200, {"ok": True, "pid": os.getpid(),
                         "upstream": "%s:%d" % self.upstream}
        return 404, {"error": "no such control endpoint: %s %s" % (method, p)}


# --------------------------------------------------------------------------
# One client connection.


def s3_error(status, code, message, resource):
    rid = uuid.uuid4().hex[:16].upper()
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>%s</Message><Resource>%s</Resource><RequestId>%s</RequestId>'
            '</Error>' % (code, message, _xml(resource), rid)).encode()
    return body, [("Content-Type", "application/xml"), ("x-amz-request-id", rid)]


def _xml(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found",
           500: "Internal Server Error", 502: "Bad Gateway",
           503: "Service Unavailable"}


class Session:
    def __init__(self, state, sock, conn):
        self.st = state
        self.conn = conn
        self.client = Peer(sock, "client")
        self.up = None
        self.block = bytearray(BLOCK)

    def say(self, msg):
        if self.st.verbose:
            sys.stderr.write("faultproxy: [%s] conn %d: %s\n" % (
                time.strftime("%H:%M:%S"), self.conn, msg))

    def run(self):
        try:
            while not self.st.stopping.is_set():
                raw = self.client.read_head()
                if raw is None:
                    break
                try:
                    req = Request(raw)
                except Gone as e:
                    self.reply(400, ("faultproxy: %s\n" % e).encode(),
                               [("Content-Type", "text/plain")], close=True)
                    break
                if not self.serve(req):
                    break
        except Gone as e:
            self.say("closing: %s" % e)
        finally:
            self.drop_upstream()
            self.client.close()

    def reply(self, status, body, headers=(), head_only=False, close=False, entry=None):
        """Answer with BODY; counted in ENTRY (when given) before it is sent,
        so that a client that has its answer finds it in the log."""
        if entry is not None and not head_only:
            self.st.count(entry, resp_bytes=len(body))
        lines = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "Error")),
                 "Date: " + formatdate(usegmt=True), "Server: faultproxy"]
        lines += ["%s: %s" % kv for kv in headers]
        lines.append("Content-Length: %d" % len(body))
        if close:
            lines.append("Connection: close")
        self.client.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
                         + (b"" if head_only else body))
        return 0 if head_only else len(body)

    def continue_(self, req):
        if req.expect:
            self.client.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def read_client_body(self, req, out, limit=None):
        """Read (a part of) the request body into OUT; returns the count."""
        if req.body_kind == "chunked":
            if limit is None:
                return self.client.pump_chunked(None, out, self.block)
            line = self.client.readline()        # half the first chunk
            size = int(line.split(b";")[0].strip() or b"0", 16)
            return self.client.pump(min(limit, size // 2), out, self.block)
        n = req.body_len if limit is None else min(limit, req.body_len)
        return self.client.pump(n, out, self.block)

    def serve(self, req):
        """Answer one request; False when the connection must close."""
        path = urlsplit(req.target).path
        if path == "/_fault" or path.startswith("/_fault/"):
            return self.control(req)
        entry, rule = self.st.begin(self.conn, req)
        try:
            keep = self.proxy(req, entry, rule.action if rule else None, rule)
        finally:
            self.say("#%d %s %s -> %s%s, %d+%d bytes" % (
                entry["seq"], req.method, req.target,
                "-" if entry["status"] is None else entry["status"],
                " (%s)" % entry["action"] if entry["action"] else "",
                entry["req_bytes"], entry["resp_bytes"]))
        return keep and req.keep_alive()

    def control(self, req):
        self.continue_(req)
        if req.body_kind == "length" and req.body_len > CONTROL_BODY_MAX:
            self.reply(400, b'{"error": "body too large"}',
                       [("Content-Type", "application/json")], close=True)
            return False
        body = bytearray()
        self.read_client_body(req, body)
        status, obj = self.st.control(req.method, req.target, bytes(body))
        self.reply(status, json.dumps(obj).encode(),
                   [("Content-Type", "application/json")],
                   head_only=req.method == "HEAD")
        return req.keep_alive()

    # ---- faults that never reach the upstream ----

    def proxy(self, req, entry, action, rule):
        st = self.st
        if action == "reset":
            self.client.close(rst=True)
            return False
        if action == "reset_body":
            self.continue_(req)
            half = (req.body_len // 2) if req.body_kind == "length" else 1 << 62
            n = 0
            try:
                n = self.read_client_body(req, None, limit=half)
            finally:
                st.count(entry, req_bytes=n)
            self.client.close(rst=True)
            return False
        if action in ("403", "500", "503", "expired", "stall"):
            self.continue_(req)
            st.count(entry, req_bytes=self.read_client_body(req, None))
            if action == "stall":
                self.stall(rule.seconds if rule.seconds is not None else STALL_DEFAULT)
                return False
            status = 400 if action == "expired" else int(action)
            if action == "403":
                body, hdrs = s3_error(403, "AccessDenied", "Access Denied",
                                      req.target)
            elif action == "500":
                body, hdrs = s3_error(500, "InternalError", "We encountered an "
                                      "internal error. Please try again.", req.target)
            elif action == "expired":
                body, hdrs = s3_error(400, "ExpiredToken", "The provided token has "
                                      "expired.", req.target)
            else:
                body, hdrs = s3_error(503, "SlowDown", "Please reduce your "
                                      "request rate.", req.target)
            self.reply(status, body, hdrs, head_only=req.method == "HEAD", entry=entry)
            return True
        if action == "lose":
            self.lose_seconds = rule.seconds if rule.seconds is not None else STALL_DEFAULT
        return self.forward(req, entry, action)

    def stall(self, seconds):
        """Answer nothing for SECONDS, then close; sooner if the client
        closes or the proxy stops."""
        end = time.monotonic() + seconds
        sock = self.client.sock
        while not self.st.stopping.is_set():
            left = end - time.monotonic()
            if left <= 0:
                break
            try:
                r, _, _ = select.select([sock], [], [], min(left, 0.25))
                if r and not sock.recv(1, socket.MSG_PEEK):
                    break                   # the client gave up
                if r:
                    time.sleep(min(left, 0.05))     # more data: ignored
            except (OSError, ValueError):
                break

    # ---- forwarding ----

    def drop_upstream(self):
        if self.up is not None:
            self.up.close()
            self.up = None

    def upstream(self):
        """The upstream connection; a fresh one when the kept one was closed
        by the upstream while idle (readable then means EOF or junk)."""
        if self.up is not None and self.up.readable():
            self.drop_upstream()
        if self.up is None:
            try:
                s = socket.create_connection(self.st.upstream, timeout=10)
            except OSError as e:
                raise Gone("upstream", "cannot connect to %s:%d: %s"
                           % (self.st.upstream + (e,))) from None
            s.settimeout(None)
            self.up = Peer(s, "upstream")
        return self.up

    def bad_gateway(self, entry, why):
        self.say("502: %s" % why)
        body = ("faultproxy: upstream %s:%d: %s\n" % (self.st.upstream + (why,))).encode()
        try:
            self.reply(502, body, [("Content-Type", "text/plain")], close=True, entry=entry)
        except Gone:
            pass
        return False

    def forward(self, req, entry, action):
        st = self.st
        reused = self.up is not None
        try:
            up = self.upstream()
            up.send(req.raw)
        except Gone as e:
            return self.bad_gateway(entry, e)
        if not req.has_body():
            # Nothing of the client's is consumed yet: a kept connection that
            # the upstream closed meanwhile is retried once on a fresh one.
            try:
                resp = self.final_head()
            except Gone as e:
                if not reused:
                    return self.bad_gateway(entry, e)
                self.drop_upstream()
                try:
                    self.upstream().send(req.raw)
                    resp = self.final_head()
                except Gone as e:
                    return self.bad_gateway(entry, e)
            return self.relay(req, resp, entry, action)
        resp = None
        if req.expect and req.has_body():
            # Wait for the upstream's 100 (relayed) or its final answer, or
            # for the client to send the body without waiting any longer.
            while resp is None and not self.client.readable():
                if st.stopping.is_set():
                    return False
                try:
                    r, _, _ = select.select([up.sock, self.client.sock], [], [], 0.5)
                except (OSError, ValueError):
                    return False
                if up.sock not in r:
                    continue
                try:
                    head = up.read_head()
                    if head is None:
                        raise Gone("upstream", "closed before answering")
                    got = Response(head)
                except Gone as e:
                    return self.bad_gateway(entry, e)
                if got.status == 100:
                    self.client.send(got.raw)
                    break
                if got.status >= 200:
                    resp = got          # refused before the body was sent
        if resp is None:
            n = [0]

            class Counted:              # bytes read from the client, forwarded
                def send(_, data):
                    up.send(data)
                    n[0] += len(data)
            try:
                if req.body_kind == "chunked":     # relayed as framed
                    n[0] = self.client.pump_chunked(Counted(), None, self.block)
                elif req.body_len:
                    self.client.pump(req.body_len, Counted(), self.block)
            except Gone as e:
                st.count(entry, req_bytes=n[0], forwarded=n[0])
                if e.side == "client":
                    raise
                # The upstream stopped reading: it may have answered early.
                up.sock.settimeout(2)
                try:
                    resp = Response(up.read_head() or b"")
                except (Gone, OSError):
                    return self.bad_gateway(entry, e)
                up.sock.settimeout(None)
                return self.relay(req, resp, entry, action, force_close=True)
            st.count(entry, req_bytes=n[0], forwarded=n[0])
            try:
                resp = self.final_head()
            except Gone as e:
                return self.bad_gateway(entry, e)
            return self.relay(req, resp, entry, action)
        return self.relay(req, resp, entry, action, force_close=True)

    def final_head(self):
        """The upstream's final response head; a 1xx now (the client has
        sent its body) is dropped."""
        while True:
            head = self.up.read_head()
            if head is None:
                raise Gone("upstream", "closed before answering")
            resp = Response(head)
            if resp.status >= 200:
                return resp

    def relay(self, req, resp, entry, action, force_close=False):
        """Send the upstream's response to the client, through ACTION
        (None, "truncate" or "corrupt").  False when the connection must
        close."""
        st, up, client = self.st, self.up, self.client
        entry["status"] = resp.status
        kind, n = resp.body_framing(req.method)
        keep = (not force_close and kind != "close" and resp.keep_alive()
                and req.keep_alive())

        class Counted:                  # to the client: in the log before it is sent
            def send(_, data):
                st.count(entry, resp_bytes=len(data))
                client.send(data)
        if action == "lose":
            # The upstream has done what was asked; its answer never comes.
            if kind == "length":
                up.pump(n, None, self.block)
            elif kind == "chunked":
                up.pump_chunked(None, None, self.block)
            elif kind == "close":
                up.pump_to_close(None, self.block)
            self.drop_upstream()
            self.stall(self.lose_seconds)
            return False
        try:
            if action is None or (action == "corrupt" and kind in ("none", "length")):
                client.send(resp.raw)
                flip = n // 2 if action == "corrupt" and kind == "length" and n else -1
                if kind == "length":
                    up.pump(n, Counted(), self.block, flip)
                elif kind == "chunked":
                    up.pump_chunked(Counted(), None, self.block)
                elif kind == "close":
                    up.pump_to_close(Counted(), self.block)
            elif action == "truncate" and kind in ("none", "length"):
                client.send(resp.raw)
                if kind == "length":
                    up.pump(n // 2, Counted(), self.block)
                keep = False
            else:
                # chunked or read-until-close under truncate/corrupt: the
                # whole body is read first, then re-framed.
                data = bytearray()
                if kind == "chunked":
                    up.pump_chunked(None, data, self.block)
                else:
                    up.pump_to_close(data, self.block)
                client.send(resp.raw)
                if action == "corrupt":
                    if data:
                        data[len(data) // 2] ^= 0xFF
                    if kind == "chunked":
                        if data:
                            client.send(b"%x\r\n" % len(data))
                            Counted().send(data)
                            client.send(b"\r\n")
                        client.send(b"0\r\n\r\n")
                    else:
                        Counted().send(data)
                else:
                    half = memoryview(data)[:len(data) // 2]
                    if kind == "chunked" and half:
                        client.send(b"%x\r\n" % len(half))
                    Counted().send(half)
                    keep = False
        except Gone as e:
            if e.side == "upstream":
                self.drop_upstream()
            raise
        if not keep:
            self.drop_upstream()
        if action == "truncate":
            client.close()
        return keep


class Handler(socketserver.BaseRequestHandler):
    state = None

    def handle(self):
        st = self.state
        with st.lock:
            st.conns += 1
            conn = st.conns
        Session(st, self.request, conn).run()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def hostport(s):
    host, sep, port = s.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError("expected HOST:PORT, got %r" % s)
    return host, int(port)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, type=hostport,
                    help="the S3 server, HOST:PORT")
    ap.add_argument("--port", type=int, default=0,
                    help="TCP port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--verbose", action="store_true",
                    help="log each request to stderr")
    args = ap.parse_args(argv)

    state = State(args.upstream, args.verbose)
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = Server(("127.0.0.1", args.port), handler)
    port = server.server_address[1]

    def stop(signum, frame):
        state.stopping.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.port_file:
        write_port_file(args.port_file, port)
    if args.verbose:
        sys.stderr.write("faultproxy: listening on 127.0.0.1:%d, upstream %s:%d\n"
                         % ((port,) + args.upstream))
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
