#!/usr/bin/env python3
"""A webhook receiver for tests: HTTP on 127.0.0.1, threaded, standard
library only.  Every request is recorded as one JSON line (when it arrived,
its path, method, headers and body, and how it was answered), and each path
can be told how to behave (a rule for /a also rules /a/b):

    webhook_receiver.py --log FILE --port-file FILE [--behave PATH=SPEC ...]

    ok           answer 200 (the default)
    fail:N       answer 500 to the first N requests, then 200
    status:CODE  always answer CODE (404, 429, ...)
    stall:S[:N]  hold the first N requests (every one without N) S seconds
                 without a word, then answer 200 to whoever is still there
    close:N      close the first N connections without an answer, then 200

The port (picked by the kernel) is written to --port-file once the server
listens, so that a test can wait for the file.  SIGTERM ends it.
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_behave(items):
    rules = {}
    for item in items:
        path, _, spec = item.partition("=")
        kind, _, rest = spec.partition(":")
        args = [a for a in rest.split(":") if a]
        if kind not in ("ok", "fail", "status", "stall", "close") or not path.startswith("/"):
            sys.exit("webhook_receiver: bad --behave %r" % item)
        rules[path] = (kind, args)
    return rules


class Receiver(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, log, rules):
        super().__init__(("127.0.0.1", 0), Handler)
        self.log_path = log
        self.rules = rules
        self.lock = threading.Lock()
        self.seen = {}

    def record(self, entry):
        with self.lock:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def answer_for(self, path):
        """(what to do, the request's number on this path, from 1)"""
        with self.lock:
            n = self.seen.get(path, 0) + 1
            self.seen[path] = n
        kind, args = "ok", []
        for rule, behaviour in self.rules.items():
            if path == rule or path.startswith(rule.rstrip("/") + "/"):
                kind, args = behaviour
        if kind == "fail":
            return (500 if n <= int(args[0]) else 200), n
        if kind == "status":
            return int(args[0]), n
        if kind == "stall":
            held = len(args) < 2 or n <= int(args[1])
            return (("stall", float(args[0])) if held else 200), n
        if kind == "close":
            return ("close" if n <= int(args[0]) else 200), n
        return 200, n


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def reply(self, code):
        body = b"ok\n" if code < 300 else b"no\n"
        try:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (a stall outlived its time-out)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        answer, n = self.server.answer_for(self.path)
        shown = answer[0] if isinstance(answer, tuple) else answer
        self.server.record({
            "t": time.time(), "path": self.path, "method": self.command, "n": n,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"), "answer": shown,
        })
        if answer == "close":
            self.close_connection = True
            return
        if isinstance(answer, tuple):
            time.sleep(answer[1])
            answer = 200
        self.reply(answer)

    do_POST = handle_any
    do_GET = handle_any
    do_PUT = handle_any


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--behave", action="append", default=[])
    a = ap.parse_args()
    server = Receiver(a.log, parse_behave(a.behave))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.rename(tmp, a.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
