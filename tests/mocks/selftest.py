#!/usr/bin/env python3
"""Self-test of the metadata mocks: starts each one and exercises what spotd's
tests rely on.  Prints "PASS: mocks/<name>" or "FAIL: mocks/<name>: why",
one line per check, and exits non-zero when any check failed.

    python3 tests/mocks/selftest.py [--only aws,gcp,...,libsh,faultproxy]

The checks of faultproxy.py live in selftest_faultproxy.py, run from here.
"""

import argparse
import calendar
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
FAILED = []
STATS = {}


def result(name, ok, why=""):
    if ok:
        print("PASS: mocks/%s" % name, flush=True)
    else:
        FAILED.append(name)
        print("FAIL: mocks/%s: %s" % (name, why), flush=True)


def expect(name, want, got):
    result(name, want == got, "expected %r, got %r" % (want, got))


class Mock:
    def __init__(self, cloud, tmp, extra=()):
        self.cloud = cloud
        self.port_file = tempfile.mktemp(prefix=cloud + ".", suffix=".port", dir=tmp)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "metadata.py"), "--cloud", cloud,
             "--port", "0", "--port-file", self.port_file] + list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() - t0 > 10:
                raise RuntimeError("%s mock did not start: %s" % (
                    cloud, self.proc.stderr.read().decode()))
            time.sleep(0.01)
        with open(self.port_file) as f:
            self.port = int(f.read())

    def req(self, method, path, headers=None, body=None, timeout=5):
        """(status, {lower-case header: value}, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def ctl(self, method, path, obj=None):
        body = None if obj is None else json.dumps(obj)
        status, _, data = self.req(method, "/_mock/" + path, body=body)
        if status != 200:
            raise RuntimeError("control %s %s: %d %s" % (method, path, status, data))
        return json.loads(data)

    def state(self, **kw):
        return self.ctl("POST", "state", kw)

    def prompt(self, floor=0.05):
        """What "at once" is on this machine now: FLOOR, or four times the
        slowest of three plain requests when the machine is loaded (a
        waiter woken by its timeout or a poll is seconds late, not this)."""
        rt = 0
        for _ in range(3):
            t0 = time.monotonic()
            self.ctl("GET", "state")
            rt = max(rt, time.monotonic() - t0)
        return max(floor, 4 * rt)

    def stop(self):
        self.proc.terminate()
        try:
            out, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, out, err


def raised(fn):
    """The exception FN raised, or None."""
    try:
        fn()
    except Exception as e:      # noqa: BLE001 - any failure is the answer
        return e
    return None


# ---- checks shared by every cloud ----------------------------------------


def common_faults(m, name, path, headers, normal_status):
    """Each fault on one watched endpoint; the control API stays up."""
    n = m.cloud
    log = m.ctl("GET", "requests")
    since = log[-1]["seq"] if log else 0

    m.state(fault="down")
    e = raised(lambda: m.req("GET", path, headers, timeout=2))
    result("%s/fault-down" % n, isinstance(e, (ConnectionError, http.client.HTTPException, OSError)),
           "expected the connection closed without an answer, got %r" % (e,))
    st = m.ctl("GET", "state")
    expect("%s/fault-control-api-unaffected" % n, "down", st["fault"])

    m.state(fault="slow", fault_delay=0.3)
    t0 = time.monotonic()
    s, _, _ = m.req("GET", path, headers)
    dt = time.monotonic() - t0
    result("%s/fault-slow" % n, s == normal_status and 0.29 <= dt < 0.3 + m.prompt(0.7),
           "status %d after %.3fs (want %d after ~0.3s)" % (s, dt, normal_status))

    m.state(fault="garbage")
    s, _, b = m.req("GET", path, headers)
    ok = s == 200
    try:
        json.loads(b)
        ok = False
    except ValueError:
        pass
    result("%s/fault-garbage" % n, ok and b not in (b"TRUE", b"FALSE"),
           "status %d body %r" % (s, b[:40]))

    m.state(fault="huge")
    s, _, b = m.req("GET", path, headers)
    result("%s/fault-huge" % n, s == 200 and len(b) == 1 << 20,
           "status %d, %d bytes" % (s, len(b)))

    m.state(fault="500")
    s, _, _ = m.req("GET", path, headers)
    expect("%s/fault-500" % n, 500, s)

    m.state(fault="throttle")
    s, _, _ = m.req("GET", path, headers)
    expect("%s/fault-throttle-429" % n, 429, s)

    m.state(fault="hang")
    t0 = time.monotonic()
    e = raised(lambda: m.req("GET", path, headers, timeout=0.4))
    result("%s/fault-hang" % n, isinstance(e, TimeoutError) and time.monotonic() - t0 >= 0.39,
           "expected a client time-out, got %r" % (e,))

    m.state(fault=None)
    s, _, _ = m.req("GET", path, headers)
    expect("%s/fault-cleared" % n, normal_status, s)

    rq = m.ctl("GET", "requests?since=%d" % since)
    result("%s/faulted-requests-logged" % n,
           len(rq) >= 8 and rq[0]["status"] is None,
           "%d entries, first status %r" % (len(rq), rq[0]["status"] if rq else None))


def scheduled_flip(m, path, headers, changes, absent, present):
    """An `after` flip answers at once, takes effect later, is recorded.

    The delay is long against what "at once" is on this machine now, so
    that a loaded machine cannot land the first read after the flip; the
    flip may be late by that much too, never early."""
    n = m.cloud
    quick = m.prompt(0.1)
    after = max(0.3, 3 * quick)
    before = len(m.ctl("GET", "flips"))
    t0 = time.time()
    ans = m.state(after=after, **changes)
    answered = time.time() - t0
    result("%s/after-returns-at-once" % n, answered < quick and "scheduled" in ans,
           "answered in %.3fs: %r" % (answered, ans))
    s, _, b = m.req("GET", path, headers)
    read = time.time() - t0
    result("%s/after-not-yet" % n,
           read >= after or ((s, b) == absent if isinstance(absent, tuple) else s == absent),
           "got %d %r at +%.3fs" % (s, b[:60], read))
    pend = m.ctl("GET", "state")["_pending"]
    result("%s/after-pending-listed" % n, time.time() - t0 >= after or len(pend) == 1,
           "pending %r" % pend)
    time.sleep(max(0, t0 + after + quick - time.time()))
    while True:
        s, _, b = m.req("GET", path, headers)
        seen = time.time() - t0
        if present(s, b) or seen > after + 5:
            break
        time.sleep(0.05)
    result("%s/after-took-effect" % n, present(s, b), "got %d %r" % (s, b[:80]))
    # Never before the time asked; recorded as of before it was seen.
    flips = m.ctl("GET", "flips")
    ok = len(flips) == before + 1 and flips[-1]["scheduled"]
    late = flips[-1]["time"] - t0 if flips else -1
    result("%s/after-flip-recorded" % n, ok and after - 0.01 <= late <= seen,
           "flips %r (flip at +%.3fs, asked +%.3fs, seen +%.3fs)"
           % (flips[-1:], late, after, seen))


# ---- AWS -----------------------------------------------------------------


def test_aws(m):
    T = "X-aws-ec2-metadata-token"
    TTL = "X-aws-ec2-metadata-token-ttl-seconds"
    IA = "/latest/meta-data/spot/instance-action"

    s, _, _ = m.req("PUT", "/latest/api/token")
    expect("aws/token-missing-ttl-400", 400, s)
    for bad in ("0", "21601", "abc", "-5", ""):
        s, _, _ = m.req("PUT", "/latest/api/token", {TTL: bad})
        expect("aws/token-ttl-%s-400" % (bad or "empty"), 400, s)
    s, _, _ = m.req("PUT", "/latest/api/token", {TTL: "60", "X-Forwarded-For": "10.0.0.1"})
    expect("aws/token-x-forwarded-for-403", 403, s)
    s, _, _ = m.req("GET", "/latest/api/token", {TTL: "60"})
    expect("aws/token-get-405", 405, s)
    s, h, tok = m.req("PUT", "/latest/api/token", {TTL: "21600"})
    result("aws/token-ok", s == 200 and len(tok) > 20 and h.get("content-type") == "text/plain"
           and h.get(TTL.lower()) == "21600", "status %d %r %r" % (s, tok, h))
    s, _, _ = m.req("PUT", "/latest/api/token", {TTL: "1"})
    expect("aws/token-ttl-1-ok", 200, s)
    tok = tok.decode()
    auth = {T: tok}

    s, _, _ = m.req("GET", "/latest/meta-data/instance-id")
    expect("aws/get-no-token-401", 401, s)
    s, _, _ = m.req("GET", "/latest/meta-data/instance-id", {T: "bogus"})
    expect("aws/get-bad-token-401", 401, s)
    s, _, b = m.req("GET", "/latest/meta-data/instance-id", auth)
    expect("aws/instance-id", (200, b"i-0123456789abcdef0"), (s, b))
    s, _, _ = m.req("GET", IA, auth)
    expect("aws/instance-action-404-without-notice", 404, s)
    s, _, _ = m.req("GET", "/latest/meta-data/events/recommendations/rebalance", auth)
    expect("aws/rebalance-404-without-notice", 404, s)
    s, _, b = m.req("GET", "/latest/meta-data/events/maintenance/scheduled", auth)
    result("aws/maintenance-empty-list", s == 200 and json.loads(b) == [], "%d %r" % (s, b))
    s, _, b = m.req("GET", "/latest/meta-data/autoscaling/target-lifecycle-state", auth)
    expect("aws/lifecycle-default-inservice", (200, b"InService"), (s, b))
    s, _, _ = m.req("GET", "/latest/meta-data/no/such/thing", auth)
    expect("aws/unknown-path-404", 404, s)
    s, _, b = m.req("GET", "/latest/meta-data/", auth)
    result("aws/listing", s == 200 and b"instance-id" in b and b"spot/" not in b, "%d %r" % (s, b))

    notice = {"action": "terminate", "time": "2017-09-18T08:22:00Z"}
    m.state(notice=notice)
    s, _, b = m.req("GET", IA, auth)
    result("aws/instance-action-json", s == 200 and json.loads(b) == notice, "%d %r" % (s, b))
    s, _, b = m.req("GET", "/latest/meta-data/spot/", auth)
    expect("aws/spot-listing", (200, b"instance-action"), (s, b))
    m.state(rebalance={"noticeTime": "2020-10-27T08:22:00Z"})
    s, _, b = m.req("GET", "/latest/meta-data/events/recommendations/rebalance", auth)
    result("aws/rebalance-json", s == 200 and json.loads(b) == {"noticeTime": "2020-10-27T08:22:00Z"},
           "%d %r" % (s, b))
    ev = [{"NotBefore": "21 Jan 2019 09:00:43 GMT", "Code": "system-reboot",
           "Description": "scheduled reboot", "EventId": "instance-event-0d59937288b749b32",
           "NotAfter": "21 Jan 2019 09:17:23 GMT", "State": "active"}]
    m.state(maintenance=ev, lifecycle="Terminated")
    s, _, b = m.req("GET", "/latest/meta-data/events/maintenance/scheduled", auth)
    result("aws/maintenance-list", s == 200 and json.loads(b) == ev, "%d %r" % (s, b))
    s, _, b = m.req("GET", "/latest/meta-data/autoscaling/target-lifecycle-state", auth)
    expect("aws/lifecycle-terminated", (200, b"Terminated"), (s, b))

    s, _, _ = m.req("POST", "/_mock/state", body='{"notcie": 1}')
    expect("aws/control-rejects-unknown-key", 400, s)
    s, _, _ = m.req("POST", "/_mock/state", body='{"fault": "exploded"}')
    expect("aws/control-rejects-unknown-fault", 400, s)

    m.state(imdsv1=True)
    s, _, _ = m.req("GET", "/latest/meta-data/instance-id")
    expect("aws/imdsv1-no-token-200", 200, s)
    s, _, _ = m.req("GET", "/latest/meta-data/instance-id", {T: "bogus"})
    expect("aws/imdsv1-bad-token-still-401", 401, s)
    m.state(imdsv1=False)

    m.state(token_ttl_cap=0.5)
    s, h, short = m.req("PUT", "/latest/api/token", {TTL: "21600"})
    result("aws/ttl-cap-header-echoes-request", h.get(TTL.lower()) == "21600", "%r" % h)
    s1, _, _ = m.req("GET", "/latest/meta-data/instance-id", {T: short.decode()})
    time.sleep(0.6)
    s2, _, _ = m.req("GET", "/latest/meta-data/instance-id", {T: short.decode()})
    expect("aws/token-expiry-mid-run", (200, 401), (s1, s2))
    s, _, _ = m.req("GET", "/latest/meta-data/instance-id", auth)
    expect("aws/earlier-token-unaffected-by-cap", 200, s)
    m.state(token_ttl_cap=None, revoke_tokens=True)
    s, _, _ = m.req("GET", "/latest/meta-data/instance-id", auth)
    expect("aws/revoke-tokens", 401, s)
    tok = m.req("PUT", "/latest/api/token", {TTL: "600"})[2].decode()
    auth = {T: tok}

    m.req("GET", IA, auth)
    log = m.ctl("GET", "requests?path=" + IA)
    hdrs = {k.lower(): v for k, v in log[-1]["headers"].items()} if log else {}
    result("aws/request-log-token-recorded", hdrs.get(T.lower()) == tok
           and log[-1]["method"] == "GET" and log[-1]["path"] == IA and "time" in log[-1],
           "last entry %r" % log[-1:])

    c = http.client.HTTPConnection("127.0.0.1", m.port, timeout=5)
    try:
        c.request("PUT", "/latest/api/token", headers={TTL: "60"})
        r = c.getresponse()
        t2 = r.read().decode()
        c.request("GET", "/latest/meta-data/instance-id", headers={T: t2})
        r2 = c.getresponse()
        expect("aws/http11-keep-alive", (200, "HTTP/1.1", b"i-0123456789abcdef0"),
               (r2.status, "HTTP/1.%d" % (r2.version - 10), r2.read()))
    finally:
        c.close()

    # A role's Expiration counted from each request with expires_in.
    m.state(role={"name": "r", "expires_in": 310})
    rp = "/latest/meta-data/iam/security-credentials/r"
    s, _, b = m.req("GET", rp, auth)
    left = (calendar.timegm(time.strptime(json.loads(b)["Expiration"], "%Y-%m-%dT%H:%M:%SZ"))
            - time.time()) if s == 200 else 0
    result("aws/role-expires-in", s == 200 and 305 <= left <= 311
           and "expires_in" not in json.loads(b), "%d %r" % (s, b))
    result("aws/role-expires-in-bad", raised(lambda: m.state(role={"name": "r", "expires_in": 0})),
           "expires_in 0 accepted")
    m.state(role=None)

    m.state(notice=None)
    common_faults(m, "aws", IA, auth, 404)
    m.state(fault="500")
    s, _, _ = m.req("GET", "/latest/meta-data/instance-id", auth)
    expect("aws/fault-scope-notice-spares-instance-id", 200, s)
    s, _, _ = m.req("PUT", "/latest/api/token", {TTL: "60"})
    expect("aws/fault-scope-notice-spares-token", 200, s)
    m.state(fault_scope="all")
    s, _, _ = m.req("PUT", "/latest/api/token", {TTL: "60"})
    expect("aws/fault-scope-all", 500, s)
    # "token": the PUT alone, as a hop limit of 1 drops its answer; the
    # GETs are answered, a tokenless one refused as IMDSv2 requires.
    m.state(fault_scope="token")
    s, _, _ = m.req("PUT", "/latest/api/token", {TTL: "60"})
    s2, _, _ = m.req("GET", IA, auth)
    expect("aws/fault-scope-token-hits-the-put-alone", (500, 404), (s, s2))
    m.state(fault="hang")
    e = raised(lambda: m.req("PUT", "/latest/api/token", {TTL: "60"}, timeout=0.4))
    s2 = m.req("GET", IA, auth)[0]
    s3 = m.req("GET", IA)[0]
    result("aws/fault-scope-token-hang", isinstance(e, TimeoutError) and (s2, s3) == (404, 401),
           "PUT %r, GET with the token %d, without %d" % (e, s2, s3))
    m.state(fault=None, fault_scope="notice")

    scheduled_flip(m, IA, auth, {"notice": notice}, 404,
                   lambda s, b: s == 200 and json.loads(b) == notice)

    m.ctl("POST", "reset")
    s, _, _ = m.req("GET", IA, auth)
    st = m.ctl("GET", "state")
    expect("aws/reset", (404, [], [], None),
           (s, m.ctl("GET", "flips"), [e for e in m.ctl("GET", "requests")
                                       if e["path"] != IA], st["notice"]))


# ---- GCP -----------------------------------------------------------------


def test_gcp(m):
    G = {"Metadata-Flavor": "Google"}
    B = "/computeMetadata/v1/instance/"
    P = B + "preempted"

    s, h, _ = m.req("GET", P)
    expect("gcp/no-flavor-403", 403, s)
    s, _, _ = m.req("GET", P, {"Metadata-Flavor": "Goggle"})
    expect("gcp/wrong-flavor-403", 403, s)
    s, _, _ = m.req("GET", P, {"Metadata-Flavor": "Google", "X-Forwarded-For": "1.2.3.4"})
    expect("gcp/x-forwarded-for-403", 403, s)
    s, h, b = m.req("GET", P, G)
    result("gcp/preempted-false", (s, b) == (200, b"FALSE") and h.get("metadata-flavor") == "Google"
           and len(h.get("etag", "")) == 16, "%d %r %r" % (s, b, h))
    etag0 = h.get("etag")
    s, _, b = m.req("GET", B + "maintenance-event", G)
    expect("gcp/maintenance-event-none", (200, b"NONE"), (s, b))
    s, _, b = m.req("GET", B + "name", G)
    expect("gcp/name", (200, b"spot-vm-0"), (s, b))
    s, _, _ = m.req("GET", B + "nope", G)
    expect("gcp/unknown-404", 404, s)
    s, _, b = m.req("GET", P + "?alt=json", G)
    expect("gcp/alt-json", (200, b'"FALSE"'), (s, b))
    s, _, _ = m.req("GET", P + "?wait_for_change=true&timeout_sec=1.5", G)
    expect("gcp/timeout-sec-not-integer-400", 400, s)

    m.state(maintenance_event="TERMINATE_ON_HOST_MAINTENANCE")
    s, _, b = m.req("GET", B + "maintenance-event", G)
    expect("gcp/maintenance-event-set", (200, b"TERMINATE_ON_HOST_MAINTENANCE"), (s, b))
    m.state(maintenance_event="NONE")

    # ETag: a function of the value.
    m.state(preempted=True)
    s, h, b = m.req("GET", P, G)
    etag1 = h.get("etag")
    m.state(preempted=True)
    etag1b = m.req("GET", P, G)[1].get("etag")
    m.state(preempted=False)
    etag2 = m.req("GET", P, G)[1].get("etag")
    result("gcp/etag-changes-with-value", etag1 != etag0 and etag1 == etag1b and etag2 == etag0,
           "%s %s %s %s" % (etag0, etag1, etag1b, etag2))

    # Stale last_etag: at once.
    t0 = time.monotonic()
    s, h, b = m.req("GET", P + "?wait_for_change=true&last_etag=0123456789abcdef", G)
    dt = time.monotonic() - t0
    result("gcp/stale-etag-returns-at-once", (s, b) == (200, b"FALSE") and dt < m.prompt(),
           "%d %r after %.3fs" % (s, b, dt))

    # Current last_etag, no change: returns at timeout_sec with the same value.
    t0 = time.monotonic()
    s, h, b = m.req("GET", P + "?wait_for_change=true&timeout_sec=1&last_etag=" + etag0, G)
    dt = time.monotonic() - t0
    result("gcp/long-poll-timeout-sec", (s, b, h.get("etag")) == (200, b"FALSE", etag0)
           and 0.95 <= dt < 1 + m.prompt(0.3), "%d %r after %.3fs" % (s, b, dt))

    # Setting the same value again is no change.
    box = {}
    th = threading.Thread(target=lambda: box.update(r=m.req(
        "GET", P + "?wait_for_change=true&timeout_sec=1&last_etag=" + etag0, G)))
    t0 = time.monotonic()
    th.start()
    time.sleep(0.2)
    m.state(preempted=False)
    th.join(3)
    dt = time.monotonic() - t0
    result("gcp/same-value-does-not-wake", box.get("r", (0,))[0] == 200 and dt >= 0.95,
           "returned after %.3fs" % dt)

    # A flip wakes the waiter: latency from the flip to the answer.
    def wake_latency(query):
        box = {}

        def wait():
            box["r"] = m.req("GET", P + query, G, timeout=10)
            box["t"] = time.time()
        th = threading.Thread(target=wait)
        th.start()
        end = time.monotonic() + 2
        while m.ctl("GET", "state")["_waiters"] < 1 and time.monotonic() < end:
            time.sleep(0.002)
        cur = m.ctl("GET", "state")["preempted"]
        flip = m.state(preempted=not cur)["flip"]
        th.join(5)
        return box["t"] - flip["time"], box["r"], not cur

    lat, (s, h, b), now = wake_latency("?wait_for_change=true&last_etag=" + etag0)
    result("gcp/long-poll-wakes-on-flip", (s, b) == (200, b"TRUE") and h.get("etag") != etag0
           and lat < m.prompt(), "%d %r etag %s after %.1f ms" % (s, b, h.get("etag"), lat * 1000))
    lat, (s, h, b), now = wake_latency("?wait_for_change=true")
    result("gcp/no-last-etag-waits-for-next-change",
           (s, b) == (200, b"TRUE" if now else b"FALSE") and lat < m.prompt(),
           "%d %r after %.1f ms" % (s, b, lat * 1000))
    # Against plain requests' round trips in the same minute: on a loaded
    # machine both grow, while a waiter woken only by its 10 s timeout (or
    # by a poll) would be seconds late.
    lats, rts = [], []
    for _ in range(40):
        t0 = time.monotonic()
        cur = m.req("GET", P, G)[1]["etag"]
        rts.append(time.monotonic() - t0)
        lats.append(wake_latency("?wait_for_change=true&timeout_sec=10&last_etag=" + cur)[0])
    lats.sort()
    rts.sort()
    p99 = lats[int(0.99 * (len(lats) - 1))]
    STATS["gcp p99 wake"] = "%.1f ms" % (p99 * 1000)
    bound = max(0.05, 4 * rts[int(0.99 * (len(rts) - 1))])
    result("gcp/flip-wake-latency-p99-prompt", p99 < bound,
           "p99 %.1f ms (max %.1f), over %.1f ms" % (p99 * 1000, lats[-1] * 1000, bound * 1000))

    # A fault that begins during a long-poll reaches the waiting request.
    m.state(preempted=False)
    cur = m.req("GET", P, G)[1]["etag"]
    box = {}

    def wait_fault():
        box["r"] = m.req("GET", P + "?wait_for_change=true&last_etag=" + cur, G, timeout=5)
    th = threading.Thread(target=wait_fault)
    th.start()
    time.sleep(0.1)
    m.state(fault="500")
    th.join(3)
    expect("gcp/fault-interrupts-long-poll", 500, box.get("r", (0,))[0])
    m.state(fault=None)

    # wait_ignored: every long-poll answered at once with the value and
    # ETag as they are, changed or not (a proxy, an emulator).
    m.state(wait_ignored=True)
    cur = m.req("GET", P, G)[1]["etag"]
    t0 = time.monotonic()
    s, h, b = m.req("GET", P + "?wait_for_change=true&timeout_sec=5&last_etag=" + cur, G)
    dt = time.monotonic() - t0
    s2, _, b2 = m.req("GET", P + "?wait_for_change=true&timeout_sec=5", G)
    dt2 = time.monotonic() - t0
    result("gcp/wait-ignored-answers-at-once", (s, b, h.get("etag"), s2, b2) ==
           (200, b"FALSE", cur, 200, b"FALSE") and dt2 < 2 * m.prompt(),
           "%d %r etag %s after %.3fs, without last_etag %d %r after %.3fs" % (
               s, b, h.get("etag"), dt, s2, b2, dt2))
    expect("gcp/wait-ignored-no-waiter", 0, m.ctl("GET", "state")["_waiters"])
    result("gcp/wait-ignored-not-bool-400", raised(lambda: m.state(wait_ignored="yes")),
           "wait_ignored \"yes\" accepted")
    m.state(wait_ignored=False)
    s, _, _ = m.req("POST", "/_mock/state", body='{"fault_scope": "token"}')
    expect("gcp/fault-scope-token-400-without-tokens", 400, s)

    common_faults(m, "gcp", P, G, 200)
    scheduled_flip(m, P, G, {"preempted": True}, (200, b"FALSE"),
                   lambda s, b: (s, b) == (200, b"TRUE"))
    m.ctl("POST", "reset")
    expect("gcp/reset", (200, b"FALSE"), m.req("GET", P, G)[::2])


# ---- Azure ---------------------------------------------------------------


def test_azure(m):
    H = {"Metadata": "true"}
    SE = "/metadata/scheduledevents?api-version=2020-07-01"

    s, _, b = m.req("GET", SE)
    expect("azure/no-metadata-header-400",
           (400, {"error": "Bad request. Required metadata header not specified"}),
           (s, json.loads(b)))
    s, _, _ = m.req("GET", SE, {"Metadata": "true", "X-Forwarded-For": "1.2.3.4"})
    expect("azure/x-forwarded-for-rejected", 400, s)
    s, _, b = m.req("GET", "/metadata/scheduledevents", H)
    result("azure/missing-api-version-400", s == 400 and json.loads(b)["error"].startswith(
        "Bad request. api-version was not specified") and "newest-versions" in json.loads(b),
        "%d %r" % (s, b))
    s, _, _ = m.req("GET", "/metadata/scheduledevents?api-version=2099-01-01", H)
    expect("azure/unsupported-api-version-400", 400, s)
    s, _, _ = m.req("GET", SE + "&api-version=2020-07-01", H)
    expect("azure/duplicate-query-400", 400, s)
    s, h, b = m.req("GET", SE, H)
    result("azure/no-events", s == 200 and json.loads(b) == {"DocumentIncarnation": 1, "Events": []}
           and h["content-type"].startswith("application/json"), "%d %r" % (s, b))

    ev = {"EventId": "602d9444-d2cd-49c7-8624-8643e7171297", "EventType": "Preempt",
          "ResourceType": "VirtualMachine", "Resources": ["spot-vm-0"],
          "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
          "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}
    m.state(events=[ev])
    d = json.loads(m.req("GET", SE, H)[2])
    expect("azure/events-bump-incarnation", (2, [ev]), (d["DocumentIncarnation"], d["Events"]))
    m.state(events=[dict(ev)])
    d = json.loads(m.req("GET", SE, H)[2])
    expect("azure/same-events-same-incarnation", 2, d["DocumentIncarnation"])

    s, _, _ = m.req("POST", SE, H, body="not json")
    expect("azure/ack-malformed-400", 400, s)
    s, _, _ = m.req("POST", SE, H, body=json.dumps({"StartRequests": [{"EventId": "nope"}]}))
    expect("azure/ack-unknown-id-400", 400, s)
    body = json.dumps({"StartRequests": [{"EventId": ev["EventId"]}]})
    s, _, _ = m.req("POST", SE, {"Metadata": "true", "Content-Type": "application/json"}, body=body)
    expect("azure/ack-200", 200, s)
    d = json.loads(m.req("GET", SE, H)[2])
    e0 = d["Events"][0]
    expect("azure/ack-starts-event", (3, "Started", ""),
           (d["DocumentIncarnation"], e0["EventStatus"], e0["NotBefore"]))
    acks = m.ctl("GET", "acks")
    result("azure/ack-recorded", len(acks) == 3 and acks[-1]["event_ids"] == [ev["EventId"]]
           and acks[-1]["valid"] and acks[-1]["incarnation"] == 3, "acks %r" % acks)
    log = m.ctl("GET", "requests?method=POST")
    result("azure/ack-in-request-log", log and log[-1]["body"] == body, "log %r" % log[-1:])
    s, _, _ = m.req("POST", SE, H, body=body)
    d = json.loads(m.req("GET", SE, H)[2])
    expect("azure/re-ack-200-no-bump", (200, 3), (s, d["DocumentIncarnation"]))
    m.state(events=[])
    d = json.loads(m.req("GET", SE, H)[2])
    expect("azure/events-cleared-bump", (4, []), (d["DocumentIncarnation"], d["Events"]))

    m.state(notice={"NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"})
    d = json.loads(m.req("GET", SE, H)[2])
    e0 = d["Events"][0] if d["Events"] else {}
    result("azure/notice-shorthand-preempt", e0.get("EventType") == "Preempt"
           and e0.get("Resources") == ["spot-vm-0"] and e0.get("EventStatus") == "Scheduled",
           "%r" % d)
    m.state(notice=None)

    N = "/metadata/instance/compute/name?api-version=2021-02-01"
    s, h, b = m.req("GET", N + "&format=text", H)
    expect("azure/compute-name-text", (200, b"spot-vm-0"), (s, b))
    s, _, _ = m.req("GET", N, H)
    expect("azure/leaf-without-format-text-400", 400, s)
    m.state(vm_name="spot-vm-7")
    s, _, b = m.req("GET", N + "&format=text", H)
    expect("azure/vm-name-state", (200, b"spot-vm-7"), (s, b))
    s, _, _ = m.req("GET", N + "&format=text")
    expect("azure/compute-name-needs-header", 400, s)
    m.state(name_status=404)
    s, _, b = m.req("GET", N + "&format=text", H)
    expect("azure/name-status-404", 404, s)
    s, _, _ = m.req("GET", SE, H)
    expect("azure/name-status-leaves-events", 200, s)
    m.state(name_status=None)
    s, _, _ = m.req("GET", N + "&format=text", H)
    expect("azure/name-status-cleared", 200, s)
    s, _, _ = m.req("POST", "/_mock/state", body='{"name_status": 200}')
    expect("azure/name-status-rejects-success", 400, s)

    common_faults(m, "azure", "/metadata/scheduledevents?api-version=2020-07-01", H, 200)
    s, _, _ = m.req("GET", N + "&format=text", H)
    expect("azure/fault-cleared-compute", 200, s)
    scheduled_flip(m, SE, H, {"events": [ev]}, 200,
                   lambda s, b: s == 200 and json.loads(b)["Events"] == [ev])
    m.ctl("POST", "reset")
    d = json.loads(m.req("GET", SE, H)[2])
    expect("azure/reset", {"DocumentIncarnation": 1, "Events": []}, d)


# ---- Alibaba -------------------------------------------------------------


def test_alibaba(m):
    TTL = "X-aliyun-ecs-metadata-token-ttl-seconds"
    T = "X-aliyun-ecs-metadata-token"
    TT = "/latest/meta-data/instance/spot/termination-time"

    s, _, _ = m.req("PUT", "/latest/api/token")
    expect("alibaba/token-missing-ttl-400", 400, s)
    s, _, _ = m.req("PUT", "/latest/api/token", {TTL: "21700"})
    expect("alibaba/token-ttl-out-of-range-400", 400, s)
    s, _, _ = m.req("PUT", "/latest/api/token", {TTL: "60", "X-Forwarded-For": "1.2.3.4"})
    expect("alibaba/token-x-forwarded-for-403", 403, s)
    s, _, tok = m.req("PUT", "/latest/api/token", {TTL: "21600"})
    result("alibaba/token-ok", s == 200 and len(tok) > 20, "%d %r" % (s, tok))
    auth = {T: tok.decode()}
    s, _, _ = m.req("GET", TT)
    expect("alibaba/hardened-no-token-403", 403, s)
    s, _, _ = m.req("GET", TT, {T: "aaa"})
    expect("alibaba/bad-token-401", 401, s)
    s, _, _ = m.req("GET", TT, auth)
    expect("alibaba/termination-time-404", 404, s)
    m.state(termination_time="2015-01-05T18:02:00Z")
    s, _, b = m.req("GET", TT, auth)
    expect("alibaba/termination-time", (200, b"2015-01-05T18:02:00Z"), (s, b))
    m.state(hardened=False)
    s, _, b = m.req("GET", TT)
    expect("alibaba/normal-mode-no-token", (200, b"2015-01-05T18:02:00Z"), (s, b))
    m.state(hardened=True, termination_time=None)
    m.state(token_ttl_cap=0.4)
    short = m.req("PUT", "/latest/api/token", {TTL: "21600"})[2].decode()
    s1 = m.req("GET", "/latest/meta-data/instance-id", {T: short})[0]
    time.sleep(0.5)
    s2 = m.req("GET", "/latest/meta-data/instance-id", {T: short})[0]
    expect("alibaba/token-expiry-mid-run", (200, 401), (s1, s2))
    m.state(token_ttl_cap=None)
    m.state(fault="500", fault_scope="token")
    s, _, _ = m.req("PUT", "/latest/api/token", {TTL: "60"})
    s2, _, _ = m.req("GET", TT, auth)
    expect("alibaba/fault-scope-token-hits-the-put-alone", (500, 404), (s, s2))
    m.state(fault=None, fault_scope="notice")
    common_faults(m, "alibaba", TT, auth, 404)
    scheduled_flip(m, TT, auth, {"termination_time": "2015-01-05T18:02:00Z"}, 404,
                   lambda s, b: (s, b) == (200, b"2015-01-05T18:02:00Z"))


# ---- Tencent -------------------------------------------------------------


def test_tencent(m):
    TT = "/latest/meta-data/spot/termination-time"
    s, _, _ = m.req("GET", TT)
    expect("tencent/termination-time-404", 404, s)
    s, _, b = m.req("GET", "/latest/meta-data/instance-id")
    expect("tencent/instance-id-no-token", (200, b"ins-3jaw1j8m"), (s, b))
    m.state(termination_time="2018-08-18 12:05:33")
    s, _, b = m.req("GET", TT)
    expect("tencent/termination-time", (200, b"2018-08-18 12:05:33"), (s, b))
    m.state(notice={})
    s, _, b = m.req("GET", TT)
    want = time.strftime("%Y-%m-%d %H:%M", time.gmtime(time.time() + 120 + 8 * 3600))
    result("tencent/notice-default-utc8", s == 200 and b.decode().startswith(want[:13])
           and len(b) == 19, "%d %r (want ~%s)" % (s, b, want))
    m.state(termination_time=None)
    common_faults(m, "tencent", TT, {}, 404)
    scheduled_flip(m, TT, {}, {"termination_time": "2018-08-18 12:05:33"}, 404,
                   lambda s, b: (s, b) == (200, b"2018-08-18 12:05:33"))


# ---- lib.sh, sourced after the integration library -----------------------


def test_libsh():
    script = r'''
set -u
export SPOTD=/bin/true
. "$TOP/tests/integration/lib.sh"
. "$TOP/tests/mocks/lib.sh"
mock_start aws || exit 1
[ -n "$MOCK_URL" ] && [ -n "$MOCK_PID" ] || { echo "no MOCK_URL/MOCK_PID"; exit 1; }
mock_state '{"notice":{"action":"stop","time":"2017-09-18T08:22:00Z"}}' >/dev/null || exit 1
python3 - <<EOF || exit 1
import urllib.request as u
o = u.build_opener(u.ProxyHandler({}))
t = o.open(u.Request("$MOCK_URL/latest/api/token", method="PUT",
    headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})).read().decode()
b = o.open(u.Request("$MOCK_URL/latest/meta-data/spot/instance-action",
    headers={"X-aws-ec2-metadata-token": t})).read()
assert b'"stop"' in b, b
EOF
[ "$(mock_count /latest/api/token PUT)" = 1 ] || { echo "count"; exit 1; }
[ "$(mock_header x-AWS-ec2-metadata-token-ttl-seconds /latest/api/token)" = 60 ] || { echo "header"; exit 1; }
mock_wait_requests 2 /latest/ "" 2 || { echo "wait"; exit 1; }
[ "$(mock_count_ms /latest/ "" 0 $(( $(now_ms) + 1000 )))" = 2 ] &&
    [ "$(mock_count_ms /latest/api/token PUT 0 $(( $(now_ms) + 1000 )))" = 1 ] &&
    [ "$(mock_count_ms /latest/ "" $(( $(now_ms) + 1000 )) $(( $(now_ms) + 2000 )))" = 0 ] ||
    { echo "count_ms"; exit 1; }
[ "$(mock_flip_ms)" -gt 0 ] || { echo "flip ms"; exit 1; }
[ "${_bg_pids[0]}" = "$MOCK_PID" ] || { echo "not in _bg_pids"; exit 1; }
none_left || { echo "the mock counts as a leftover of the test"; exit 1; }
mock_reset && [ "$(mock_count)" = 0 ] || { echo "reset"; exit 1; }
pid=$MOCK_PID
mock_stop
[ ! -e /proc/$pid ] || { echo "still running"; exit 1; }
echo OK
'''
    env = dict(os.environ, TOP=TOP)
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True,
                       text=True, timeout=120)  # a guard against a hang, slow beside other suites
    result("libsh/sourced-after-integration-lib", r.returncode == 0 and "OK" in r.stdout,
           "rc %d: %s %s" % (r.returncode, r.stdout.strip()[-300:], r.stderr.strip()[-300:]))


def test_port_file_and_quiet(tmp):
    m = Mock("tencent", tmp)
    with open(m.port_file) as f:
        txt = f.read()
    m.req("GET", "/latest/meta-data/instance-id")
    rc, out, err = m.stop()
    result("common/port-file", txt.strip().isdigit() and int(txt) == m.port
           and not [x for x in os.listdir(tmp) if x.endswith(".tmp")], "%r" % txt)
    result("common/quiet", out == b"" and err == b"", "stdout %r stderr %r" % (out, err))
    result("common/sigterm-exit-0", rc == 0, "rc %r" % rc)
    m = Mock("tencent", tmp, ["--verbose"])
    m.req("GET", "/latest/meta-data/instance-id")
    rc, out, err = m.stop()
    result("common/verbose-logs-requests", b"/latest/meta-data/instance-id" in err,
           "stderr %r" % err[-300:])
    m = Mock("aws", tmp)
    bound = None
    try:
        with open("/proc/net/tcp") as f:
            for line in f.read().splitlines()[1:]:
                loc, st = line.split()[1], line.split()[3]
                if st == "0A" and int(loc.split(":")[1], 16) == m.port:
                    bound = socket.inet_ntoa(bytes.fromhex(loc.split(":")[0])[::-1])
    except OSError:
        pass
    m.stop()
    expect("common/binds-127.0.0.1-only", "127.0.0.1", bound)


TESTS = {"aws": test_aws, "gcp": test_gcp, "azure": test_azure,
         "alibaba": test_alibaba, "tencent": test_tencent}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spotd-mocks.") as tmp:
        if not only:
            test_port_file_and_quiet(tmp)
        for cloud, fn in TESTS.items():
            if only and cloud not in only:
                continue
            try:
                m = Mock(cloud, tmp)
            except RuntimeError as e:
                result("%s/start" % cloud, False, str(e))
                continue
            try:
                fn(m)
            except Exception as e:          # noqa: BLE001
                import traceback
                result("%s/exception" % cloud, False,
                       "%r\n%s" % (e, traceback.format_exc()))
            finally:
                rc, _, err = m.stop()
                result("%s/clean-exit" % cloud, rc == 0 and err == b"",
                       "rc %r stderr %r" % (rc, err[-500:]))
        if not only or "libsh" in only:
            test_libsh()
        if not only or "faultproxy" in only:
            sys.dont_write_bytecode = True      # no __pycache__ in the tree
            import selftest_faultproxy          # the S3 fault proxy
            FAILED.extend(selftest_faultproxy.run_all(tmp))
            STATS.update(selftest_faultproxy.STATS)
    extra = "".join(", %s %s" % kv for kv in STATS.items())
    print("selftest: %d failed, %.1fs%s" % (len(FAILED), time.monotonic() - t0, extra))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
