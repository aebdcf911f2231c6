#!/usr/bin/env python3
"""Drive a running metadata mock's control API (no curl needed).

    mockctl.py [--url URL] COMMAND [ARGS]      (URL defaults to $MOCK_URL)

Commands:
  state JSON                 POST /_mock/state; prints the answer
  get-state                  GET /_mock/state
  reset                      POST /_mock/reset
  requests [--path P] [--method M] [--since N]
                             the request log (JSON), filtered
  count [--path P] [--method M]
                             how many logged requests match
  header NAME [--path P] [--method M]
                             NAME's value (case-insensitive) in the last
                             matching request; exit 1 when absent
  flips                      GET /_mock/flips
  flip-time [--index N] [--ms]
                             time of flip N (1-based; default the last),
                             seconds (or whole ms) since the epoch
  acks                       GET /_mock/acks (Azure)
  wait-requests --count N [--path P] [--method M] [--timeout S]
                             wait until N matching requests are logged
  wait-port FILE [--timeout S] [--pid PID]
                             wait for a port file; print the port

Exit status: 0 on success, 1 on a failed condition, 2 on a usage or
connection error.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(url, method, path, body=None, timeout=10):
    data = None if body is None else body.encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with OPENER.open(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def requests(url, path="", method="", since=0):
    q = urllib.parse.urlencode({"path": path, "method": method, "since": since})
    status, body = call(url, "GET", "/_mock/requests?" + q)
    if status != 200:
        raise SystemExit("mockctl: requests: HTTP %d: %s" % (status, body))
    return json.loads(body)


def main(argv=None):
    ap = argparse.ArgumentParser(description="metadata mock control")
    ap.add_argument("--url", default=os.environ.get("MOCK_URL"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("state")
    s.add_argument("json")
    sub.add_parser("get-state")
    sub.add_parser("reset")
    for name in ("requests", "count", "header", "wait-requests"):
        s = sub.add_parser(name)
        s.add_argument("--path", default="")
        s.add_argument("--method", default="")
        if name == "requests":
            s.add_argument("--since", type=int, default=0)
        if name == "header":
            s.add_argument("name")
        if name == "wait-requests":
            s.add_argument("--count", type=int, required=True)
            s.add_argument("--timeout", type=float, default=10)
    sub.add_parser("flips")
    s = sub.add_parser("flip-time")
    s.add_argument("--index", type=int, default=0)
    s.add_argument("--ms", action="store_true")
    sub.add_parser("acks")
    s = sub.add_parser("wait-port")
    s.add_argument("file")
    s.add_argument("--timeout", type=float, default=10)
    s.add_argument("--pid", type=int)
    a = ap.parse_args(argv)

    if a.cmd == "wait-port":
        end = time.monotonic() + a.timeout
        while time.monotonic() < end:
            try:
                with open(a.file) as f:
                    port = f.read().strip()
                if port:
                    print(port)
                    return 0
            except FileNotFoundError:
                pass
            if a.pid:
                try:
                    os.kill(a.pid, 0)
                except ProcessLookupError:
                    print("mockctl: mock exited before listening", file=sys.stderr)
                    return 1
            time.sleep(0.02)
        print("mockctl: no port file after %gs" % a.timeout, file=sys.stderr)
        return 1

    if not a.url:
        print("mockctl: no --url and no MOCK_URL", file=sys.stderr)
        return 2
    try:
        if a.cmd in ("state", "get-state", "reset", "flips", "acks"):
            method, path, body = {
                "state": ("POST", "/_mock/state", getattr(a, "json", None)),
                "get-state": ("GET", "/_mock/state", None),
                "reset": ("POST", "/_mock/reset", ""),
                "flips": ("GET", "/_mock/flips", None),
                "acks": ("GET", "/_mock/acks", None)}[a.cmd]
            status, text = call(a.url, method, path, body)
            print(text)
            return 0 if status == 200 else 1
        if a.cmd == "requests":
            print(json.dumps(requests(a.url, a.path, a.method, a.since)))
            return 0
        if a.cmd == "count":
            print(len(requests(a.url, a.path, a.method)))
            return 0
        if a.cmd == "header":
            log = requests(a.url, a.path, a.method)
            if not log:
                return 1
            for k, v in log[-1]["headers"].items():
                if k.lower() == a.name.lower():
                    print(v)
                    return 0
            return 1
        if a.cmd == "flip-time":
            status, text = call(a.url, "GET", "/_mock/flips")
            flips = json.loads(text)
            if not flips:
                return 1
            f = flips[a.index - 1] if a.index else flips[-1]
            print(int(f["time"] * 1000) if a.ms else "%.6f" % f["time"])
            return 0
        if a.cmd == "wait-requests":
            end = time.monotonic() + a.timeout
            while True:
                n = len(requests(a.url, a.path, a.method))
                if n >= a.count:
                    print(n)
                    return 0
                if time.monotonic() >= end:
                    print(n)
                    return 1
                time.sleep(0.05)
    except (OSError, urllib.error.URLError, ValueError, IndexError) as e:
        print("mockctl: %s: %s" % (a.cmd, e), file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
