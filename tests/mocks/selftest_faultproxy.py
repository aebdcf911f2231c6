#!/usr/bin/env python3
"""Self-test of faultproxy.py, with no S3 server: a small HTTP/1.1 upstream
runs inside this process (echoes, chunked answers, a 20 MiB blob, a PUT
refused before its 100 Continue), the proxy runs in front of it, and every
action, selector and control endpoint is checked.  Prints
"PASS: mocks/faultproxy-<name>" or "FAIL: mocks/faultproxy-<name>: why",
one line per check, and exits non-zero when any check failed.

    python3 tests/mocks/selftest_faultproxy.py

selftest.py runs it too (part of a full run, or --only faultproxy).
"""

import errno
import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
FAILED = []
STATS = {}
MiB = 1 << 20
BLOB = os.urandom(20 * MiB)


def result(name, ok, why=""):
    if ok:
        print("PASS: mocks/faultproxy-%s" % name, flush=True)
    else:
        FAILED.append("faultproxy-" + name)
        print("FAIL: mocks/faultproxy-%s: %s" % (name, why), flush=True)


def expect(name, want, got):
    result(name, want == got, "expected %r, got %r" % (want, got))


def raised(fn):
    try:
        fn()
    except Exception as e:          # noqa: BLE001 - any failure is the answer
        return e
    return None


# ---- the upstream: a small HTTP/1.1 server in this process ---------------


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    log = []                        # what reached the upstream
    lock = threading.Lock()

    def log_message(self, fmt, *args):
        pass

    def handle_expect_100(self):
        if self.path.startswith("/reject"):
            return True             # answer at once, without a 100
        return super().handle_expect_100()

    def record(self, n, sha):
        with self.lock:
            self.log.append({"method": self.command, "path": self.path,
                             "headers": self.headers.items(), "len": n,
                             "sha256": sha, "peer": self.client_address[1]})

    def body(self, keep):
        n = int(self.headers.get("Content-Length") or 0)
        h, data, got = hashlib.sha256(), bytearray(), 0
        while got < n:
            d = self.rfile.read(min(n - got, MiB))
            if not d:
                break
            h.update(d)
            got += len(d)
            if keep:
                data += d
        self.record(got, h.hexdigest())
        return bytes(data), got, h.hexdigest()

    def answer(self, status, body=b"", headers=(), length=True):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def do_PUT(self):
        if self.path.startswith("/reject"):
            self.record(0, None)
            self.close_connection = True
            return self.answer(403, b"<Error><Code>AccessDenied</Code></Error>",
                               [("Connection", "close")])
        echo = self.path.startswith("/echo")
        data, n, sha = self.body(echo)
        if echo:
            return self.answer(200, data)
        self.answer(200, json.dumps({"len": n, "sha256": sha}).encode(),
                    [("Content-Type", "application/json")])

    do_POST = do_PUT

    def do_GET(self):
        parts = urlsplit(self.path).path.split("/")
        kind = parts[1]
        n = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
        if kind != "headers":
            self.record(0, None)
        if kind == "blob":
            return self.answer(200, BLOB[:n], [("ETag", '"blob"')])
        if kind == "chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.command == "HEAD":
                return
            off, step = 0, 65543
            while off < n:
                piece = BLOB[off:off + step]
                piece = piece[:n - off]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                off += len(piece)
            self.wfile.write(b"0\r\n\r\n")
            return
        if kind == "204":
            return self.answer(204, length=False)
        if kind == "304":
            return self.answer(304, headers=[("ETag", '"blob"')], length=False)
        if kind == "close":
            self.close_connection = True
            return self.answer(200, BLOB[:n], [("Connection", "close")], length=False)
        if kind == "headers":
            self.record(0, None)
            return self.answer(200, json.dumps(self.headers.items()).encode())
        self.answer(200, json.dumps({"path": self.path}).encode(),
                    [("Content-Type", "application/json")])

    do_HEAD = do_GET
    do_DELETE = do_GET


class UpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A truncate fault closes the proxy's upstream connection mid-body.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def up_seen(prefix=""):
    with Upstream.lock:
        return [e for e in Upstream.log if e["path"].startswith(prefix)]


# ---- the proxy under test ------------------------------------------------


class Proxy:
    def __init__(self, upstream_port, tmp, extra=()):
        self.port_file = tempfile.mktemp(prefix="faultproxy.", suffix=".port", dir=tmp)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "faultproxy.py"), "--upstream",
             "127.0.0.1:%d" % upstream_port, "--port", "0",
             "--port-file", self.port_file] + list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() - t0 > 10:
                raise RuntimeError("faultproxy did not start: %s"
                                   % self.proc.stderr.read().decode())
            time.sleep(0.01)
        with open(self.port_file) as f:
            self.port = int(f.read())

    def conn(self, timeout=10):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def req(self, method, path, body=None, headers=None, timeout=10):
        """(status, {lower-case header: value}, body) on a new connection."""
        c = self.conn(timeout)
        try:
            return request(c, method, path, body, headers)
        finally:
            c.close()

    def ctl(self, method, what, obj=None, raw=None, want=200):
        body = raw if raw is not None else (None if obj is None else json.dumps(obj))
        status, _, data = self.req(method, "/_fault/" + what, body)
        if want is not None and status != want:
            raise RuntimeError("control %s %s: %d %s" % (method, what, status, data))
        return json.loads(data) if data else None

    def rules(self, rules):
        return self.ctl("POST", "rules", rules)

    def reset(self):
        self.ctl("POST", "reset", raw="")
        with Upstream.lock:
            Upstream.log.clear()

    def log(self, query=""):
        return self.ctl("GET", "log" + query)

    def stop(self):
        self.proc.terminate()
        try:
            out, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, out, err


def request(c, method, path, body=None, headers=None):
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def raw_conn(p):
    s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(s, buf=b""):
    """(status, {header: value}, body, bytes after it) from a raw socket;
    the body is Content-Length bytes (0 when absent)."""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise EOFError("closed after %r" % buf[:200])
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, _, v in
            (x.partition(":") for x in lines[1:])}
    n = int(hdrs.get("content-length", 0))
    while len(rest) < n:
        d = s.recv(MiB)
        if not d:
            raise EOFError("body cut at %d of %d" % (len(rest), n))
        rest += d
    return int(lines[0].split()[1]), hdrs, rest[:n], rest[n:]


def closed_by_peer(s, timeout=2):
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except OSError:
        return False


def put_head(path, n, extra=""):
    return ("PUT %s HTTP/1.1\r\nHost: bucket.s3.test\r\nContent-Length: %d\r\n%s\r\n"
            % (path, n, extra)).encode()


# ---- the checks ----------------------------------------------------------


def test_passthrough(p):
    p.reset()
    t0 = time.monotonic()
    s, h, b = p.req("GET", "/blob/%d" % (20 * MiB))
    dt = time.monotonic() - t0
    STATS["GET 20 MiB"] = "%.0f ms" % (dt * 1000)
    result("get-20MiB", s == 200 and b == BLOB and h.get("etag") == '"blob"',
           "%d, %d bytes, same=%s" % (s, len(b), b == BLOB))

    t0 = time.monotonic()
    s, _, b = p.req("PUT", "/bkt/obj20", BLOB)
    dt = time.monotonic() - t0
    STATS["PUT 20 MiB"] = "%.0f ms" % (dt * 1000)
    want = {"len": len(BLOB), "sha256": hashlib.sha256(BLOB).hexdigest()}
    expect("put-20MiB-reaches-upstream", (200, want), (s, json.loads(b) if s == 200 else b))

    s, _, b = p.req("PUT", "/echo/x", BLOB[:20 * MiB])
    result("put-echo-20MiB", s == 200 and b == BLOB, "%d, %d bytes" % (s, len(b)))

    log = p.log()
    result("log-counts-body-bytes", [e["req_bytes"] for e in log] == [0, 20 * MiB, 20 * MiB]
           and [e["resp_bytes"] for e in log] == [20 * MiB, len(json.dumps(want)), 20 * MiB]
           and [e["status"] for e in log] == [200, 200, 200],
           "%r" % log)

    # Headers reach the upstream unchanged: names, case, order, Host.
    sent = [("Host", "my-bucket.s3.us-east-1.example.com:9000"),
            ("X-Amz-Date", "20240101T000000Z"),
            ("x-amz-content-sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            ("Authorization", "AWS4-HMAC-SHA256 Credential=test:tester/20240101/us-east-1/s3/"
             "aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=00"),
            ("x-MiXeD-CaSe", "Value  with  spaces"), ("Accept", "*/*")]
    sock = raw_conn(p)
    sock.sendall(("GET /headers/x?list-type=2&prefix=a%2Fb HTTP/1.1\r\n" + "".join(
        "%s: %s\r\n" % kv for kv in sent) + "\r\n").encode())
    s, _, b, _ = read_response(sock)
    sock.close()
    got = [tuple(x) for x in json.loads(b)] if s == 200 else b
    expect("headers-forwarded-unchanged", sent, got)
    path = up_seen("/headers/")[-1]["path"] if up_seen("/headers/") else None
    expect("target-forwarded-unchanged", "/headers/x?list-type=2&prefix=a%2Fb", path)

    c = p.conn()
    s, h, b = request(c, "GET", "/chunked/300000")
    result("chunked-response", s == 200 and b == BLOB[:300000]
           and h.get("transfer-encoding") == "chunked", "%d %d %r" % (s, len(b), h))
    sock0 = c.sock
    got = [request(c, "HEAD", "/blob/5000")[::2], request(c, "GET", "/204")[::2],
           request(c, "GET", "/304")[::2], request(c, "HEAD", "/chunked/100")[::2],
           request(c, "GET", "/blob/10")[::2]]
    result("head-204-304-no-body-keep-alive",
           got == [(200, b""), (204, b""), (304, b""), (200, b""), (200, BLOB[:10])]
           and c.sock is sock0, "%r" % got)
    c.close()
    s, _, b = p.req("GET", "/close/100000")
    result("read-until-close-response", s == 200 and b == BLOB[:100000], "%d %d" % (s, len(b)))

    p.reset()
    c = p.conn()
    c.connect()
    sock0 = c.sock
    bad = [i for i in range(200) if request(c, "GET", "/blob/%d" % i)[::2] != (200, BLOB[:i])]
    same = c.sock is sock0
    c.close()
    conns = {e["conn"] for e in p.log()}
    peers = {e["peer"] for e in up_seen()}
    result("keep-alive-200-requests-one-connection",
           not bad and same and len(conns) == 1 and len(peers) == 1,
           "bad %r, same socket %s, client conns %r, upstream conns %r"
           % (bad[:5], same, conns, peers))

    # 16 connections in parallel, 2 echoed PUTs of 2 MiB each.
    errs = []

    def worker(i):
        try:
            c = p.conn()
            for j in range(2):
                off = (i * 2 + j) * 65536
                body = BLOB[off:off + 2 * MiB]
                s, _, b = request(c, "PUT", "/echo/%d/%d" % (i, j), body)
                if s != 200 or b != body:
                    errs.append((i, j, s, len(b)))
            c.close()
        except Exception as e:      # noqa: BLE001
            errs.append((i, repr(e)))
    t0 = time.monotonic()
    ths = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(30)
    dt = time.monotonic() - t0
    STATS["16 conns x 2 x 2 MiB echo"] = "%.0f MB/s each way" % (16 * 2 * 2 * MiB / dt / 1e6)
    result("parallel-16-connections", not errs, "%r" % errs[:5])


def test_expect_100(p):
    p.reset()
    body = BLOB[:MiB]
    s = raw_conn(p)
    s.sendall(put_head("/bkt/e100", len(body), "Expect: 100-continue\r\n"))
    st1, _, _, rest = read_response(s)
    s.sendall(body)
    st2, _, b, _ = read_response(s, rest)
    seen = up_seen("/bkt/e100")
    hdrs = {k.lower(): v for k, v in seen[0]["headers"]} if seen else {}
    result("expect-100-relayed-from-upstream",
           (st1, st2) == (100, 200) and json.loads(b)["len"] == len(body)
           and hdrs.get("expect") == "100-continue",
           "%r %r %r %r" % (st1, st2, b[:100], hdrs))
    # The same connection goes on.
    s.sendall(b"GET /blob/3 HTTP/1.1\r\nHost: x\r\n\r\n")
    expect("expect-100-keep-alive", (200, BLOB[:3]), read_response(s)[::2][:2])
    s.close()

    s = raw_conn(p)
    s.sendall(put_head("/reject/x", len(body), "Expect: 100-continue\r\n"))
    st, _, b, _ = read_response(s)
    result("expect-100-refused-before-body", st == 403 and b"AccessDenied" in b
           and closed_by_peer(s), "%r %r" % (st, b))
    s.close()

    # A client that does not wait for the 100 (curl sends after 1 s).
    st, _, b = p.req("PUT", "/bkt/nowait", body, {"Expect": "100-continue"})
    result("expect-100-body-sent-without-waiting",
           st == 200 and json.loads(b)["len"] == len(body), "%r %r" % (st, b[:100]))

    # A fault answers the 100 itself, reads the body and keeps the connection.
    p.reset()
    p.rules([{"nth": 1, "action": 500}])
    s = raw_conn(p)
    s.sendall(put_head("/bkt/e500", len(body), "Expect: 100-continue\r\n"))
    st1, _, _, rest = read_response(s)
    s.sendall(body)
    st2, _, b, rest = read_response(s, rest)
    s.sendall(put_head("/bkt/e500b", 3) + b"abc")
    st3, _, _, _ = read_response(s, rest)
    s.close()
    expect("expect-100-with-fault-500", (100, 500, 200), (st1, st2, st3))
    p.rules([])


def test_actions(p):
    p.reset()
    p.rules([{"nth": 1, "action": 500}])
    c = p.conn()
    s1, h1, b1 = request(c, "GET", "/blob/10")
    sock0 = c.sock
    s2, _, b2 = request(c, "GET", "/blob/10")
    result("action-500", s1 == 500 and b"<Code>InternalError</Code>" in b1
           and h1.get("content-type") == "application/xml" and s2 == 200
           and c.sock is sock0 and len(up_seen()) == 1,
           "%d %r %r %d upstream %d" % (s1, b1, h1, s2, len(up_seen())))
    c.close()

    p.reset()
    p.rules([{"every": 1, "times": 1, "action": "503"}])
    c = p.conn()
    s1, h1, b1 = request(c, "PUT", "/bkt/o", BLOB[:MiB])
    s2, _, b2 = request(c, "PUT", "/bkt/o", BLOB[:MiB])
    c.close()
    result("action-503-slowdown", s1 == 503 and b"<Code>SlowDown</Code>" in b1
           and b"<Message>Please reduce your request rate.</Message>" in b1
           and s2 == 200 and json.loads(b2)["len"] == MiB,
           "%d %r %d %r" % (s1, b1, s2, b2[:80]))
    p.reset()
    p.rules([{"every": 1, "times": 1, "action": "403"}])
    c = p.conn()
    s1, h1, b1 = request(c, "GET", "/blob/10")
    s2, _, b2 = request(c, "GET", "/blob/10")
    c.close()
    result("action-403-access-denied", s1 == 403 and b"<Code>AccessDenied</Code>" in b1
           and s2 == 200 and len(up_seen()) == 1, "%d %r %d" % (s1, b1, s2))
    p.reset()
    p.rules([{"nth": 1, "action": 503}])
    s, h, b = p.req("HEAD", "/blob/10")
    result("action-503-head-no-body", s == 503 and b == b"" and int(h["content-length"]) > 0,
           "%d %r %r" % (s, h, b))

    p.reset()
    p.rules([{"nth": 1, "action": "reset"}])
    e = raised(lambda: p.req("GET", "/blob/10"))
    log = p.log()
    result("action-reset", isinstance(e, ConnectionResetError) and e.errno == errno.ECONNRESET
           and not up_seen() and log[0]["action"] == "reset" and log[0]["status"] is None,
           "got %r, log %r" % (e, log))

    p.reset()
    p.rules([{"nth": 1, "action": "reset_body"}])
    e = raised(lambda: p.req("PUT", "/bkt/rb", BLOB[:4 * MiB]))
    log = p.log()
    result("action-reset-body", isinstance(e, (ConnectionResetError, BrokenPipeError))
           and not up_seen() and log[0]["req_bytes"] == 2 * MiB,
           "got %r, log %r, upstream %r" % (e, log, up_seen()))

    p.reset()
    p.rules([{"nth": 1, "action": "stall", "seconds": 1}])
    t0 = time.monotonic()
    e = raised(lambda: p.req("PUT", "/bkt/st", b"x" * 1000))
    dt = time.monotonic() - t0
    log = p.log()
    result("action-stall-1s", isinstance(e, http.client.RemoteDisconnected)
           and 0.95 <= dt < 2 and not up_seen() and log[0]["req_bytes"] == 1000,
           "got %r after %.2fs, log %r" % (e, dt, log))
    p.ctl("POST", "rules", [{"nth": 2, "action": "stall"}])
    result("action-stall-default-30s", p.ctl("GET", "rules")[0].get("seconds") is None, "")

    # lose: the PUT is done upstream, the client never hears so.
    p.reset()
    p.rules([{"nth": 1, "action": "lose", "seconds": 1}])
    t0 = time.monotonic()
    e = raised(lambda: p.req("PUT", "/bkt/lost", b"y" * 3000))
    dt = time.monotonic() - t0
    seen = up_seen("/bkt/lost")
    log = p.log()
    result("action-lose-1s", isinstance(e, http.client.RemoteDisconnected)
           and 0.95 <= dt < 2 and len(seen) == 1 and log[0]["req_bytes"] == 3000
           and log[0]["status"] == 200 and log[0]["resp_bytes"] == 0,
           "got %r after %.2fs, log %r, upstream %r" % (e, dt, log, seen))
    s, _, b = p.req("PUT", "/bkt/lost2", b"z" * 10)
    result("action-lose-then-forwarded", s == 200 and json.loads(b)["len"] == 10, "%d %r" % (s, b))

    p.reset()
    p.rules([{"every": 1, "action": "truncate"}])
    c = p.conn()
    c.request("GET", "/blob/%d" % (20 * MiB))
    r = c.getresponse()
    cl = r.getheader("Content-Length")
    e = raised(r.read)
    c.close()
    log = p.log()
    result("action-truncate", cl == str(20 * MiB) and isinstance(e, http.client.IncompleteRead)
           and e.partial == BLOB[:10 * MiB] and log[0]["resp_bytes"] == 10 * MiB
           and log[0]["status"] == 200,
           "CL %s, %r, log %r" % (cl, type(e), log))
    c = p.conn()
    c.request("GET", "/chunked/300000")
    r = c.getresponse()
    e = raised(r.read)
    c.close()
    result("action-truncate-chunked", isinstance(e, http.client.IncompleteRead)
           and e.partial == BLOB[:150000], "%r" % (type(e),))

    p.reset()
    p.rules([{"every": 1, "action": "corrupt"}])
    for name, path, n in (("", "/blob/%d" % MiB, MiB), ("-chunked", "/chunked/300001", 300001)):
        s, _, b = p.req("GET", path)
        diff = [i for i in range(len(b)) if b[i] != BLOB[i]] if len(b) == n else None
        result("action-corrupt" + name, s == 200 and diff == [n // 2],
               "%d, %d bytes, differing at %r" % (s, len(b), diff and diff[:5]))
    c = p.conn()
    got = [request(c, "GET", "/blob/1")[::2], request(c, "GET", "/blob/0")[::2],
           request(c, "HEAD", "/blob/9")[::2]]
    c.close()
    expect("action-corrupt-tiny-bodies", [(200, bytes([BLOB[0] ^ 0xFF])), (200, b""),
                                          (200, b"")], got)
    log = p.log()
    expect("log-actions", ["corrupt"] * 5, [e["action"] for e in log])


def statuses(p, reqs):
    """Issue REQS [(method, path)] on one connection; their statuses."""
    c = p.conn()
    out = [request(c, m, path, b"body" if m == "PUT" else None)[0] for m, path in reqs]
    c.close()
    return out


def hits(p, rules, reqs):
    p.reset()
    p.rules(rules)
    return [i + 1 for i, s in enumerate(statuses(p, reqs)) if s >= 500]


def test_selectors(p):
    G = [("GET", "/bkt/k%d" % i) for i in range(6)]
    expect("rule-nth", [3], hits(p, [{"nth": 3, "action": 500}], G))
    expect("rule-every", [2, 4, 6], hits(p, [{"every": 2, "action": 500}], G))
    expect("rule-from-count", [2, 3, 4], hits(p, [{"from": 2, "count": 3, "action": 500}], G))
    expect("rule-from-open-ended", [5, 6], hits(p, [{"from": 5, "action": 500}], G))
    expect("rule-times", [1, 2], hits(p, [{"every": 1, "times": 2, "action": 503}], G))
    expect("rule-times-with-every", [2, 4], hits(p, [{"every": 2, "times": 2, "action": 500}],
                                                  G + G))
    M = [("GET", "/a"), ("PUT", "/bkt/a"), ("GET", "/b"), ("PUT", "/bkt/b"), ("GET", "/c"),
         ("PUT", "/bkt/c")]
    expect("rule-method-counts-matching-only", [4],
           hits(p, [{"nth": 2, "method": "PUT", "action": 500}], M))
    expect("rule-method-lowercase", [2, 4, 6],
           hits(p, [{"every": 1, "method": "put", "action": 500}], M))
    L = [("GET", "/bkt?list-type=2"), ("GET", "/bkt/x"), ("GET", "/bkt?list-type=2&prefix=a"),
         ("PUT", "/bkt/y")]
    expect("rule-path-regex-searches-query", [1, 3],
           hits(p, [{"every": 1, "path": r"\?list-type=2", "action": 500}], L))
    expect("rule-path-and-method", [4],
           hits(p, [{"nth": 1, "path": "^/bkt/", "method": "PUT", "action": 500}], L))
    p.reset()
    p.rules([{"nth": 1, "action": 500}, {"every": 1, "action": 503}])
    expect("rules-first-due-wins", [500, 503, 503], statuses(p, G[:3]))
    expect("rules-report-matched-fired", [(3, 1), (3, 2)],
           [(r["matched"], r["fired"]) for r in p.ctl("GET", "rules")])
    p.reset()
    statuses(p, G[:2])
    p.rules([{"nth": 3, "action": 500}])
    expect("rule-counts-since-reset", [500, 200], statuses(p, G[:2]))
    p.reset()
    statuses(p, M[:4])
    p.rules([{"nth": 3, "method": "PUT", "action": 500}])
    expect("rule-filtered-counts-since-reset", [200, 500], statuses(p, M[4:]))
    p.reset()
    p.rules([{"every": 1, "times": 1, "action": 500}])
    expect("rule-every-1-times-1-is-next", [500, 200], statuses(p, G[:2]))
    p.rules([])
    expect("rules-empty-list-clears", [200, 200], statuses(p, G[:2]))


def test_control(p):
    p.reset()
    p.rules([{"every": 2, "action": 500}])
    bad = ['not json', '{"nth": 1, "action": 500}', '[{"nth": 1}]',
           '[{"nth": 1, "action": "explode"}]', '[{"nth": 1, "action": 500, "bogus": 1}]',
           '[{"nth": 0, "action": 500}]', '[{"nth": 1, "every": 2, "action": 500}]',
           '[{"nth": 1, "path": "(", "action": 500}]', '[{"nth": "1", "action": 500}]',
           '[{"nth": 1, "seconds": 3, "action": 500}]', '[{"count": 3, "action": 500}]',
           '[{"nth": true, "action": 500}]', '[{"nth": 1, "action": 500, "method": 7}]', '[1]']
    got = []
    for b in bad:
        s, _, body = p.req("POST", "/_fault/rules", b)
        try:
            err = json.loads(body).get("error")
        except ValueError:
            err = None
        if s != 400 or not err:
            got.append((b, s, body))
    result("bad-rules-400", not got, "%r" % got)
    rules = p.ctl("GET", "rules")
    expect("bad-rules-keep-old-set", [{"every": 2, "action": 500, "matched": 0, "fired": 0}],
           rules)

    p.reset()
    p.rules([{"nth": 3, "action": 500}])
    s1, _, b1 = p.req("GET", "/blob/1000")
    s2, _, b2 = p.req("PUT", "/bkt/obj?x=1", b"y" * 5000)
    s3, _, b3 = p.req("PUT", "/bkt/obj", b"z" * 3000)
    h = p.ctl("GET", "health")
    log = p.log()
    want = [{"seq": 1, "method": "GET", "path": "/blob/1000", "status": 200, "action": None,
             "req_bytes": 0, "resp_bytes": 1000},
            {"seq": 2, "method": "PUT", "path": "/bkt/obj?x=1", "status": 200, "action": None,
             "req_bytes": 5000, "resp_bytes": len(b2)},
            {"seq": 3, "method": "PUT", "path": "/bkt/obj", "status": None, "action": "500",
             "req_bytes": 3000, "resp_bytes": len(b3)}]
    strip = [{k: v for k, v in e.items() if k not in ("time", "conn")} for e in log]
    now = time.time()
    result("log", strip == want and all(now - 10 < e["time"] <= now for e in log),
           "got %r" % log)
    expect("log-filters", ([2, 3], [3], [2]),
           ([e["seq"] for e in p.log("?method=PUT")], [e["seq"] for e in p.log("?since=2")],
            [e["seq"] for e in p.log("?path=%5C%3Fx%3D1")]))
    expect("stats", {"requests": 3, "bytes_in": 5000,
                     "bytes_out": 1000 + len(b2) + len(b3)}, p.ctl("GET", "stats"))
    result("health", h.get("ok") is True and h.get("pid") == p.proc.pid, "%r" % h)
    p.rules([{"every": 1, "action": "reset"}])
    s, _, _ = p.req("GET", "/_fault/health")
    expect("control-bypasses-faults-and-log", (200, 3, 3),
           (s, len(p.log()), p.ctl("GET", "stats")["requests"]))
    s, _, b = p.req("GET", "/_fault/nothing")
    expect("control-unknown-404", 404, s)
    p.ctl("POST", "reset", raw="")
    expect("reset-clears-rules-log-stats",
           ([], [], {"requests": 0, "bytes_in": 0, "bytes_out": 0}, 200),
           (p.ctl("GET", "rules"), p.log(), p.ctl("GET", "stats"), p.req("GET", "/blob/1")[0]))
    expect("reset-restarts-seq", [1], [e["seq"] for e in p.log()])


def test_libsh(up_port):
    script = r'''
set -u
export SPOTD=/bin/true
. "$TOP/tests/integration/lib.sh"
. "$TOP/tests/mocks/lib.sh"
get() {     # get PATH: the status line's code, with no process started
    local line
    exec 3<>"/dev/tcp/127.0.0.1/$FAULT_PORT" || return 1
    printf 'GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' "$1" >&3
    read -r line <&3
    exec 3<&-
    line=${line#* }
    echo "${line%% *}"
}
fault_start "127.0.0.1:$UP_PORT" || exit 1
[ -n "$FAULT_URL" ] && [ -n "$FAULT_PID" ] && [ "$FAULT_URL" = "http://127.0.0.1:$FAULT_PORT" ] ||
    { echo "no FAULT_URL/FAULT_PID"; exit 1; }
fault_rules '[{"nth":1,"action":"503"}]' >/dev/null || { echo "rules"; exit 1; }
fault_rules '[{"nth":1,"action":"boom"}]' >/dev/null 2>&1 && { echo "bad rules accepted"; exit 1; }
[ "$(get /blob/10)" = 503 ] && [ "$(get /blob/10)" = 200 ] || { echo "statuses"; exit 1; }
[ "$(fault_count GET '^/blob/' 503)" = 1 ] || { echo "count $(fault_count GET '^/blob/' 503)"; exit 1; }
[ "$(fault_stat bytes_out)" -gt 10 ] || { echo "stat"; exit 1; }
fault_stats | grep -q '"requests": 2' || { echo "stats"; exit 1; }
fault_log | grep -q '"action": "503"' || { echo "log"; exit 1; }
fault_get_rules | grep -q '"fired": 1' || { echo "get rules"; exit 1; }
[ "${_bg_pids[0]}" = "$FAULT_PID" ] || { echo "not in _bg_pids"; exit 1; }
none_left || { echo "the proxy counts as a leftover of the test"; exit 1; }
fault_reset && [ "$(fault_count)" = 0 ] || { echo "reset"; exit 1; }
pid=$FAULT_PID
fault_stop
[ ! -e /proc/$pid ] || { echo "still running"; exit 1; }
echo OK
'''
    env = dict(os.environ, TOP=TOP, UP_PORT=str(up_port))
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True,
                       text=True, timeout=30)
    result("libsh", r.returncode == 0 and "OK" in r.stdout,
           "rc %d: %s %s" % (r.returncode, r.stdout.strip()[-300:], r.stderr.strip()[-300:]))


def test_process(up_port, tmp):
    p = Proxy(up_port, tmp, ["--verbose"])
    p.req("GET", "/blob/1")
    rc, out, err = p.stop()
    result("verbose-logs-requests", b"GET /blob/1" in err, "stderr %r" % err[-300:])
    p = Proxy(up_port, tmp)
    p.proc.send_signal(2)
    try:
        rc = p.proc.wait(5)
    except subprocess.TimeoutExpired:
        p.proc.kill()
        rc = p.proc.wait()
    expect("sigint-exit-0", 0, rc)


def bound_address(port):
    try:
        with open("/proc/net/tcp") as f:
            for line in f.read().splitlines()[1:]:
                loc, st = line.split()[1], line.split()[3]
                if st == "0A" and int(loc.split(":")[1], 16) == port:
                    return socket.inet_ntoa(bytes.fromhex(loc.split(":")[0])[::-1])
    except OSError:
        pass
    return None


def run_all(tmp):
    """Every check; returns the names of those that failed."""
    t0 = time.monotonic()
    up = UpServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=up.serve_forever, kwargs={"poll_interval": 0.1},
                     daemon=True).start()
    up_port = up.server_address[1]
    try:
        try:
            p = Proxy(up_port, tmp)
        except RuntimeError as e:
            result("start", False, str(e))
            return FAILED
        try:
            with open(p.port_file) as f:
                txt = f.read()
            result("port-file", txt == "%d\n" % p.port
                   and not [x for x in os.listdir(tmp) if x.endswith(".tmp")], "%r" % txt)
            expect("binds-127.0.0.1-only", "127.0.0.1", bound_address(p.port))
            for fn in (test_passthrough, test_expect_100, test_actions, test_selectors,
                       test_control):
                try:
                    fn(p)
                except Exception as e:          # noqa: BLE001
                    import traceback
                    result("%s-exception" % fn.__name__[5:], False,
                           "%r\n%s" % (e, traceback.format_exc()))
        finally:
            rc, out, err = p.stop()
        result("quiet-and-sigterm-exit-0", rc == 0 and out == b"" and err == b"",
               "rc %r stdout %r stderr %r" % (rc, out[-300:], err[-500:]))
        test_process(up_port, tmp)
        test_libsh(up_port)
    finally:
        up.shutdown()
        up.server_close()
    STATS["faultproxy self-test"] = "%.1fs" % (time.monotonic() - t0)
    return FAILED


def main():
    with tempfile.TemporaryDirectory(prefix="spotd-faultproxy.") as tmp:
        run_all(tmp)
    extra = "".join(", %s %s" % kv for kv in STATS.items())
    print("selftest_faultproxy: %d failed%s" % (len(FAILED), extra))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
