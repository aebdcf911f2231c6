#!/usr/bin/env python3
"""Mock cloud metadata services for spotd's tests.

    metadata.py --cloud aws|gcp|azure|alibaba|tencent [--port 0]
                [--port-file FILE] [--verbose]

Serves, on 127.0.0.1 only, the parts of a provider's instance metadata
service that spotd watches, behaving as the provider documents them, plus a
control API under /_mock/ on the same port (see README.md).  Python 3
standard library only.
"""

import argparse
import copy
import hashlib
import json
import os
import secrets
import select
import signal
import socket
import sys
import threading
import time
import uuid
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

FAULTS = ("down", "slow", "garbage", "huge", "500", "throttle", "hang")
HUGE_SIZE = 1 << 20          # the "huge" fault's body: exactly 1 MiB
GARBAGE = b"\x89\x00\xffGARBAGE<<not {json} nor protocol>>\r\n\x1b[0m\xfe"
LOG_CAP = 50000              # request log entries kept (oldest dropped)
BODY_LOG_CAP = 65536         # request body bytes kept in the log
GCP_DEFAULT_TIMEOUT = 300    # wait_for_change without timeout_sec
GCP_MAX_TIMEOUT = 3600       # upper bound on any wait_for_change


class BadState(Exception):
    """A /_mock/state body the mock cannot accept (answered with 400)."""


class Request:
    def __init__(self, method, target, headers, body):
        self.method = method
        self.target = target
        parts = urlsplit(target)
        self.path = parts.path
        self.query = parse_qsl(parts.query, keep_blank_values=True)
        self.args = dict(self.query)
        self.headers = headers          # http.client.HTTPMessage
        self.body = body

    def header(self, name):
        return self.headers.get(name)


class Reply:
    def __init__(self, status, body=b"", ctype="text/plain", headers=None):
        self.status = status
        self.body = body.encode() if isinstance(body, str) else body
        self.headers = [("Content-Type", ctype)] if ctype else []
        self.headers += list(headers or [])
        self.refault = False            # a fault began while it waited

    @staticmethod
    def json(status, obj, ctype="application/json; charset=utf-8", headers=None):
        return Reply(status, json.dumps(obj), ctype, headers)


def utc(ts, fmt="%Y-%m-%dT%H:%M:%SZ"):
    return time.strftime(fmt, time.gmtime(ts))


def aws_html(status, text):
    """The XHTML error page EC2's IMDS answers errors with."""
    return Reply(status, (
        '<?xml version="1.0" encoding="iso-8859-1"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
        '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
        ' <head>\n  <title>%d - %s</title>\n </head>\n'
        ' <body>\n  <h1>%d - %s</h1>\n </body>\n</html>\n'
    ) % (status, text, status, text), "text/html")


# --------------------------------------------------------------------------
# The common part: state, scheduled flips, the request log, the control API.


class Mock:
    cloud = None
    server_name = "mock-metadata"
    extra_keys = {}                     # cloud-specific state keys: defaults

    def __init__(self):
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self.log = []
        self.seq = 0
        self.flips = []
        self.acks = []
        self.timers = {}
        self.timer_seq = 0
        self.state = self.defaults()
        self.on_reset()

    # ---- state ----

    def defaults(self):
        d = {"notice": None, "fault": None, "fault_delay": 5.0,
             "fault_scope": "notice"}
        d.update(copy.deepcopy(self.extra_keys))
        return d

    def on_reset(self):
        """Derived state a cloud keeps beside self.state (cond held)."""

    def check(self, changes):
        """Validate and translate a /_mock/state body; returns the changes to
        merge.  Raises BadState."""
        if not isinstance(changes, dict):
            raise BadState("state must be a JSON object")
        allowed = set(self.defaults()) | {"after", "revoke_tokens"}
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise BadState("unknown key(s) for %s: %s (allowed: %s)" % (
                self.cloud, ", ".join(unknown), ", ".join(sorted(allowed))))
        out = dict(changes)
        f = out.get("fault", None)
        if "fault" in out and f is not None and str(f) not in FAULTS:
            raise BadState("fault must be null or one of " + ", ".join(FAULTS))
        if "fault" in out and f is not None:
            out["fault"] = str(f)
        if "fault_delay" in out:
            v = out["fault_delay"]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise BadState("fault_delay must be a number >= 0")
        if "fault_scope" in out and out["fault_scope"] not in self.fault_scopes:
            raise BadState("fault_scope must be one of %s for %s" % (
                ", ".join('"%s"' % x for x in self.fault_scopes), self.cloud))
        if "after" in out:
            v = out["after"]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise BadState("after must be a number of seconds >= 0")
        return self.translate(out)

    def translate(self, changes):
        return changes

    def set_state(self, changes, scheduled, requested_at=None, after=None):
        """Merge CHANGES into the state now; record the flip (cond held)."""
        keys = sorted(changes)
        changes = dict(changes)
        old = copy.deepcopy(self.state)
        if changes.pop("revoke_tokens", False):
            self.revoke_tokens()
        self.state.update(copy.deepcopy(changes))
        self.changed(old)
        flip = {"id": len(self.flips) + 1, "time": time.time(),
                "keys": keys, "scheduled": scheduled}
        if scheduled:
            flip["requested_at"] = requested_at
            flip["after"] = after
        self.flips.append(flip)
        self.cond.notify_all()
        return flip

    def changed(self, old):
        """Hook: the state went from OLD to self.state (cond held)."""

    def revoke_tokens(self):
        pass

    def post_state(self, changes):
        changes = self.check(changes)
        after = changes.pop("after", None)
        with self.cond:
            if after is None:
                return {"ok": True, "flip": self.set_state(changes, False)}
            self.timer_seq += 1
            tid = self.timer_seq
            requested = time.time()

            def fire():
                with self.cond:
                    if self.timers.pop(tid, None) is None:
                        return              # cancelled by a reset
                    self.set_state(changes, True, requested, after)

            t = threading.Timer(after, fire)
            t.daemon = True
            self.timers[tid] = {"timer": t, "due": requested + after,
                                "keys": sorted(changes)}
            t.start()
            return {"ok": True, "scheduled": tid, "requested_at": requested,
                    "due": requested + after}

    def reset(self):
        with self.cond:
            for t in self.timers.values():
                t["timer"].cancel()
            self.timers.clear()
            old = self.state
            self.state = self.defaults()
            self.log.clear()
            self.flips.clear()
            self.acks.clear()
            self.changed(old)       # wakes GCP waiters whose value changed
            self.on_reset()         # then back to a fresh start (Azure: 1)
            self.cond.notify_all()

    def snapshot(self):
        with self.cond:
            s = copy.deepcopy(self.state)
            s["_pending"] = [{"id": k, "due": v["due"], "keys": v["keys"]}
                             for k, v in sorted(self.timers.items())]
            s.update(self.derived())
            return s

    def derived(self):
        return {}

    # ---- faults ----

    notice_paths = ()
    fault_scopes = ("notice", "all")

    def in_scope(self, path):
        """Whether the fault_scope now covers PATH (cond held)."""
        scope = self.state["fault_scope"]
        return scope == "all" or (scope == "notice" and path in self.notice_paths)

    def fault_for(self, path):
        with self.cond:
            f = self.state["fault"]
            if f is None or not self.in_scope(path):
                return None, 0
            return f, float(self.state["fault_delay"])

    def throttle_reply(self):
        return Reply(429, "Too Many Requests\n")

    def garbage_reply(self, req):
        return Reply(200, GARBAGE)

    def huge_reply(self, req):
        return Reply(200, b"A" * HUGE_SIZE)

    def error500_reply(self):
        return Reply(500, "Internal Server Error\n")

    # ---- the request log ----

    def record(self, req):
        with self.cond:
            self.seq += 1
            entry = {"seq": self.seq, "time": time.time(),
                     "method": req.method, "path": req.target,
                     "headers": dict(req.headers.items()), "status": None}
            if req.body:
                entry["body"] = req.body[:BODY_LOG_CAP].decode("utf-8", "replace")
            self.log.append(entry)
            if len(self.log) > LOG_CAP:
                del self.log[: len(self.log) - LOG_CAP]
            return entry

    # ---- the control API ----

    def control(self, req):
        p = req.path
        if p == "/_mock/state" and req.method == "POST":
            try:
                changes = json.loads(req.body.decode("utf-8") or "{}")
                return Reply.json(200, self.post_state(changes))
            except (ValueError, UnicodeDecodeError) as e:
                return Reply.json(400, {"error": "bad JSON: %s" % e})
            except BadState as e:
                return Reply.json(400, {"error": str(e)})
        if p == "/_mock/state" and req.method == "GET":
            return Reply.json(200, self.snapshot())
        if p == "/_mock/reset" and req.method == "POST":
            self.reset()
            return Reply.json(200, {"ok": True})
        if p == "/_mock/requests" and req.method == "GET":
            since = int(req.args.get("since", "0") or 0)
            prefix = req.args.get("path", "")
            method = req.args.get("method", "")
            with self.cond:
                out = [copy.deepcopy(e) for e in self.log
                       if e["seq"] > since and e["path"].startswith(prefix)
                       and (not method or e["method"] == method)]
            return Reply.json(200, out)
        if p == "/_mock/flips" and req.method == "GET":
            with self.cond:
                return Reply.json(200, copy.deepcopy(self.flips))
        if p == "/_mock/acks" and req.method == "GET":
            with self.cond:
                return Reply.json(200, copy.deepcopy(self.acks))
        if p == "/_mock/health" and req.method == "GET":
            return Reply.json(200, {"ok": True, "cloud": self.cloud,
                                    "pid": os.getpid()})
        return Reply.json(404, {"error": "no such control endpoint: %s %s"
                                % (req.method, p)})

    def handle(self, req):
        raise NotImplementedError


# --------------------------------------------------------------------------
# AWS EC2 IMDSv2 and Alibaba ECS (security hardening mode): a session token
# from PUT /latest/api/token, then GETs under /latest/meta-data/.


class TokenMock(Mock):
    token_path = "/latest/api/token"
    ttl_header = None
    token_header = None
    no_token_status = 401           # a GET without a token, tokens required
    # "token": the fault hits the token PUT alone, as when its answer is
    # dropped on the way back (a hop limit of 1 seen from a container).
    fault_scopes = Mock.fault_scopes + ("token",)

    def in_scope(self, path):
        if self.state["fault_scope"] == "token":
            return path == self.token_path
        return super().in_scope(path)

    def on_reset(self):
        if not hasattr(self, "tokens"):
            self.tokens = {}        # token -> monotonic expiry; kept on reset

    def revoke_tokens(self):
        self.tokens.clear()

    def tokens_required(self):
        raise NotImplementedError

    def error(self, status):
        return aws_html(status, {400: "Bad Request", 401: "Unauthorized",
                                 403: "Forbidden", 404: "Not Found",
                                 405: "Method Not Allowed",
                                 429: "Too Many Requests",
                                 500: "Internal Server Error"}[status])

    def throttle_reply(self):
        return self.error(429)

    def error500_reply(self):
        return self.error(500)

    def put_token(self, req):
        if req.header("X-Forwarded-For") is not None:
            return self.error(403)
        raw = req.header(self.ttl_header)
        try:
            ttl = int(raw.strip())
        except (AttributeError, ValueError):
            return self.error(400)
        if not 1 <= ttl <= 21600:
            return self.error(400)
        with self.cond:
            cap = self.state.get("token_ttl_cap")
            honoured = min(ttl, cap) if cap is not None else ttl
            now = time.monotonic()
            for t in [t for t, exp in self.tokens.items() if exp <= now]:
                del self.tokens[t]
            token = secrets.token_urlsafe(42)
            self.tokens[token] = now + honoured
        # The header echoes the TTL asked for even under token_ttl_cap, so a
        # client learns of the early expiry only from a 401, as it would
        # from a token invalidated on the real service.
        return Reply(200, token, "text/plain", [(self.ttl_header, str(ttl))])

    def token_ok(self, req):
        """None when the GET may proceed, else the error reply."""
        tok = req.header(self.token_header)
        with self.cond:
            if tok is None:
                return self.error(self.no_token_status) \
                    if self.tokens_required() else None
            exp = self.tokens.get(tok.strip())
            if exp is None or exp <= time.monotonic():
                return self.error(401)
        return None

    def leaves(self):
        """{path under /latest/meta-data/: body or None (404)} (cond held)."""
        raise NotImplementedError

    def handle(self, req):
        if req.path == self.token_path:
            if req.method != "PUT":
                return self.error(405)
            return self.put_token(req)
        if req.method not in ("GET", "HEAD"):
            return self.error(405)
        bad = self.token_ok(req)
        if bad is not None:
            return bad
        with self.cond:
            leaves = {k: v for k, v in self.leaves().items() if v is not None}
        base = "/latest/meta-data/"
        p = req.path
        if p in ("/latest", "/latest/"):
            return Reply(200, "meta-data/")
        if p + "/" == base or p == base:
            rel = ""
        elif p.startswith(base):
            rel = p[len(base):]
        else:
            return self.error(404)
        if rel in leaves:
            return Reply(200, leaves[rel], "text/plain")
        d = rel.rstrip("/") + "/" if rel else ""
        kids = sorted({k[len(d):].split("/")[0] + ("/" if "/" in k[len(d):] else "")
                       for k in leaves if k.startswith(d)})
        if kids:
            return Reply(200, "\n".join(kids), "text/plain")
        return self.error(404)


class AWS(TokenMock):
    cloud = "aws"
    server_name = "EC2ws"
    ttl_header = "X-aws-ec2-metadata-token-ttl-seconds"
    token_header = "X-aws-ec2-metadata-token"
    extra_keys = {"rebalance": None, "maintenance": [],
                  "lifecycle": "InService", "token_ttl_cap": None,
                  "imdsv1": False, "role": None}
    notice_paths = ("/latest/meta-data/spot/instance-action",
                    "/latest/meta-data/events/recommendations/rebalance",
                    "/latest/meta-data/events/maintenance/scheduled",
                    "/latest/meta-data/autoscaling/target-lifecycle-state")

    def translate(self, c):
        if c.get("notice") is not None:
            n = c["notice"]
            if not isinstance(n, dict):
                raise BadState('aws notice: null or {"action":..,"time":..}')
            n = dict(n)
            n.setdefault("action", "terminate")
            n.setdefault("time", utc(time.time() + 120))
            c["notice"] = n
        if c.get("rebalance") is not None:
            r = c["rebalance"]
            if not isinstance(r, dict):
                raise BadState('rebalance: null or {"noticeTime":"..."}')
            r = dict(r)
            r.setdefault("noticeTime", utc(time.time()))
            c["rebalance"] = r
        if "maintenance" in c:
            if c["maintenance"] is None:
                c["maintenance"] = []
            if not isinstance(c["maintenance"], list):
                raise BadState("maintenance: a list of scheduled events")
        if "lifecycle" in c and c["lifecycle"] is not None \
                and not isinstance(c["lifecycle"], str):
            raise BadState("lifecycle: a string or null")
        if "imdsv1" in c and not isinstance(c["imdsv1"], bool):
            raise BadState("imdsv1: true or false")
        if c.get("role") is not None:
            r = c["role"]
            if not isinstance(r, dict) or not isinstance(r.get("name"), str) \
                    or not r["name"]:
                raise BadState('role: null or {"name":..,"AccessKeyId":..,...}')
            r = dict(r)
            if "expires_in" in r and (not isinstance(r["expires_in"], (int, float))
                                      or isinstance(r["expires_in"], bool)
                                      or r["expires_in"] <= 0):
                raise BadState("role: expires_in: seconds > 0")
            r.setdefault("Code", "Success")
            r.setdefault("Type", "AWS-HMAC")
            r.setdefault("AccessKeyId", "ASIAMOCK")
            r.setdefault("SecretAccessKey", "mocksecret")
            r.setdefault("Token", "mocktoken")
            r.setdefault("Expiration", utc(time.time() + 6 * 3600))
            r.setdefault("LastUpdated", utc(time.time()))
            c["role"] = r
        cap = c.get("token_ttl_cap")
        if cap is not None and (not isinstance(cap, (int, float)) or cap <= 0):
            raise BadState("token_ttl_cap: null or seconds > 0")
        return c

    def tokens_required(self):
        return not self.state["imdsv1"]

    def leaves(self):
        s = self.state
        leaves = {
            "instance-id": "i-0123456789abcdef0",
            "spot/instance-action":
                json.dumps(s["notice"]) if s["notice"] is not None else None,
            "events/recommendations/rebalance":
                json.dumps(s["rebalance"]) if s["rebalance"] is not None else None,
            "events/maintenance/scheduled": json.dumps(s["maintenance"], indent=2),
            "autoscaling/target-lifecycle-state": s["lifecycle"],
        }
        role = s.get("role")
        if role is not None:
            doc = {k: v for k, v in role.items() if k not in ("name", "expires_in")}
            # "expires_in": N serves an Expiration N s after each request,
            # as a role's fresh credentials have, however late it comes.
            if "expires_in" in role:
                doc["Expiration"] = utc(time.time() + role["expires_in"])
            leaves["iam/security-credentials/" + role["name"]] = json.dumps(doc, indent=2)
        return leaves

    def huge_reply(self, req):
        if req.path == self.token_path:
            return Reply(200, b"A" * HUGE_SIZE)
        # Valid JSON, just far larger than any real answer.
        pad = HUGE_SIZE - len('{"action": "terminate", "time": "2017-09-18T08:22:00Z", "pad": ""}')
        return Reply(200, '{"action": "terminate", "time": "2017-09-18T08:22:00Z", '
                          '"pad": "%s"}' % ("A" * pad))


class Alibaba(TokenMock):
    cloud = "alibaba"
    ttl_header = "X-aliyun-ecs-metadata-token-ttl-seconds"
    token_header = "X-aliyun-ecs-metadata-token"
    # "Any attempt to access metadata in normal mode returns a 403 -
    # Forbidden error" once security hardening mode is enforced; an invalid
    # token is "401 - Unauthorized"; a bad TTL "400 - Missing or Invalid
    # Parameters"; a PUT with X-Forwarded-For "403 - Forbidden".
    no_token_status = 403
    extra_keys = {"termination_time": None, "hardened": True,
                  "token_ttl_cap": None}
    notice_paths = ("/latest/meta-data/instance/spot/termination-time",)

    def translate(self, c):
        if "notice" in c:
            c["termination_time"] = termination(c["notice"], "%Y-%m-%dT%H:%M:%SZ", 0)
        if c.get("termination_time") is not None \
                and not isinstance(c["termination_time"], str):
            raise BadState("termination_time: a string or null")
        if "hardened" in c and not isinstance(c["hardened"], bool):
            raise BadState("hardened: true or false")
        cap = c.get("token_ttl_cap")
        if cap is not None and (not isinstance(cap, (int, float)) or cap <= 0):
            raise BadState("token_ttl_cap: null or seconds > 0")
        return c

    def tokens_required(self):
        return self.state["hardened"]

    def leaves(self):
        return {"instance-id": "i-bp13znx0m0me8cquu0000",
                "instance/spot/termination-time": self.state["termination_time"]}


def termination(notice, fmt, offset):
    """The termination_time a generic `notice` stands for."""
    if notice is None or isinstance(notice, str):
        return notice
    if isinstance(notice, dict):
        if "time" in notice:
            return str(notice["time"])
        return utc(time.time() + 120 + offset, fmt)
    raise BadState('notice: null, a time string, or {"time": "..."}')


class Tencent(Mock):
    cloud = "tencent"
    extra_keys = {"termination_time": None}
    notice_paths = ("/latest/meta-data/spot/termination-time",)

    def translate(self, c):
        if "notice" in c:
            # UTC+8, no zone: "2018-08-18 12:05:33"
            c["termination_time"] = termination(c["notice"], "%Y-%m-%d %H:%M:%S", 8 * 3600)
        if c.get("termination_time") is not None \
                and not isinstance(c["termination_time"], str):
            raise BadState("termination_time: a string or null")
        return c

    def handle(self, req):
        if req.method not in ("GET", "HEAD"):
            return Reply(405, "Method Not Allowed\n")
        with self.cond:
            leaves = {"instance-id": "ins-3jaw1j8m",
                      "spot/termination-time": self.state["termination_time"]}
        leaves = {k: v for k, v in leaves.items() if v is not None}
        base = "/latest/meta-data/"
        if req.path in (base, base[:-1]):
            kids = sorted({k.split("/")[0] + ("/" if "/" in k else "") for k in leaves})
            return Reply(200, "\n".join(kids))
        if req.path.startswith(base) and req.path[len(base):] in leaves:
            return Reply(200, leaves[req.path[len(base):]])
        if req.path == base + "spot" or req.path == base + "spot/":
            if "spot/termination-time" in leaves:
                return Reply(200, "termination-time")
        return Reply(404, "Not Found\n")


# --------------------------------------------------------------------------
# GCP Compute Engine metadata server.


class GCP(Mock):
    cloud = "gcp"
    server_name = "Metadata Server for VM"
    extra_keys = {"preempted": False, "maintenance_event": "NONE",
                  "vm_name": "spot-vm-0", "wait_ignored": False}
    base = "/computeMetadata/v1/instance/"
    notice_paths = (base + "preempted", base + "maintenance-event")

    def on_reset(self):
        if not hasattr(self, "versions"):
            self.versions = {}
            self.waiters = 0
            self.values = self.compute_values()

    def compute_values(self):
        s = self.state
        return {self.base + "preempted": "TRUE" if s["preempted"] else "FALSE",
                self.base + "maintenance-event": s["maintenance_event"],
                self.base + "name": s["vm_name"],
                self.base + "id": "1234567890123456789"}

    def changed(self, old):
        new = self.compute_values()
        for k, v in new.items():
            if self.values.get(k) != v:
                self.versions[k] = self.versions.get(k, 0) + 1
        self.values = new

    def derived(self):
        return {"_values": dict(self.values), "_waiters": self.waiters,
                "_etags": {k: self.etag(k, v) for k, v in self.values.items()}}

    @staticmethod
    def etag(path, value):
        return hashlib.sha256(("%s\0%s" % (path, value)).encode()).hexdigest()[:16]

    def translate(self, c):
        if "notice" in c:
            c["preempted"] = c["notice"] is not None and c["notice"] is not False
        if "preempted" in c and not isinstance(c["preempted"], bool):
            raise BadState("preempted: true or false")
        if "maintenance_event" in c and not isinstance(c["maintenance_event"], str):
            raise BadState("maintenance_event: a string such as NONE, "
                           "MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE")
        if "vm_name" in c and not isinstance(c["vm_name"], str):
            raise BadState("vm_name: a string")
        if "wait_ignored" in c and not isinstance(c["wait_ignored"], bool):
            raise BadState("wait_ignored: true or false")
        return c

    def reply(self, status, body, ctype="application/text", etag=None):
        h = [("Metadata-Flavor", "Google")]
        if etag:
            h.append(("ETag", etag))
        return Reply(status, body, ctype, h)

    def throttle_reply(self):
        return self.reply(429, "Too many requests\n", "text/html; charset=UTF-8")

    def error500_reply(self):
        return self.reply(500, "Internal Server Error\n", "text/html; charset=UTF-8")

    def garbage_reply(self, req):
        return self.reply(200, GARBAGE, etag="0000000000000000")

    def huge_reply(self, req):
        return self.reply(200, b"TRUE" + b" " * (HUGE_SIZE - 4), etag="0000000000000000")

    def handle(self, req):
        if req.header("X-Forwarded-For") is not None:
            return self.reply(403, "Forbidden: requests with X-Forwarded-For "
                              "are rejected by the metadata server.\n",
                              "text/html; charset=UTF-8")
        if req.header("Metadata-Flavor") != "Google":
            return self.reply(403, (
                "<!DOCTYPE html>\n<html lang=en>\n<title>Error 403 (Forbidden)!!1</title>\n"
                "<p><b>403.</b> <ins>That's an error.</ins>\n<p>Your client does not have "
                "permission to get URL <code>%s</code> from this server. Missing "
                "Metadata-Flavor:Google header. <ins>That's all we know.</ins>\n")
                % req.path, "text/html; charset=UTF-8")
        if req.method not in ("GET", "HEAD"):
            return self.reply(405, "Method Not Allowed\n", "text/html; charset=UTF-8")
        path = req.path
        with self.cond:
            if path not in self.values:
                return self.reply(404, "Not Found\n", "text/html; charset=UTF-8")
        alt = req.args.get("alt", "text")
        if alt not in ("text", "json"):
            return self.reply(400, "Invalid alt parameter\n", "text/html; charset=UTF-8")
        if req.args.get("wait_for_change", "false").lower() == "true":
            raw = req.args.get("timeout_sec")
            if raw is None:
                timeout = GCP_DEFAULT_TIMEOUT
            else:
                try:
                    timeout = int(raw)
                except ValueError:
                    return self.reply(400, "timeout_sec must be an integer\n",
                                      "text/html; charset=UTF-8")
                if timeout <= 0:
                    return self.reply(400, "timeout_sec must be positive\n",
                                      "text/html; charset=UTF-8")
            timeout = min(timeout, GCP_MAX_TIMEOUT)
            r = self.wait(path, req.args.get("last_etag"), timeout)
            if r is not None:
                return r
        with self.cond:
            value = self.values[path]
        return self.answer(path, value, alt)

    def answer(self, path, value, alt):
        body = json.dumps(value) if alt == "json" else value
        return self.reply(200, body,
                          "application/json" if alt == "json" else "application/text",
                          self.etag(path, value))

    def wait(self, path, last_etag, timeout):
        """Block until PATH's value changes (relative to LAST_ETAG when
        given, else to its value now) or TIMEOUT seconds pass.  Returns a
        reply marked refault when a fault began meanwhile, else None."""
        deadline = time.monotonic() + timeout
        with self.cond:
            if self.state["wait_ignored"]:
                return None                         # a proxy that does not wait
            cur = self.values[path]
            if last_etag is not None and last_etag != self.etag(path, cur):
                return None                         # changed already
            start = self.versions.get(path, 0)
            self.waiters += 1
            try:
                while not self.stopping.is_set():
                    cur = self.values[path]
                    if last_etag is not None:
                        if last_etag != self.etag(path, cur):
                            break
                    elif self.versions.get(path, 0) != start:
                        break
                    f = self.state["fault"]
                    if f not in (None, "slow") and self.in_scope(path):
                        r = Reply(0)
                        r.refault = True
                        return r
                    rem = deadline - time.monotonic()
                    if rem <= 0:
                        break
                    self.cond.wait(rem)
            finally:
                self.waiters -= 1
        return None


# --------------------------------------------------------------------------
# Azure Instance Metadata Service: Scheduled Events and compute/name.

SE_VERSIONS = ["2017-03-01", "2017-08-01", "2017-11-01", "2019-01-01",
               "2019-04-01", "2019-08-01", "2020-07-01"]
IMDS_VERSIONS = ["2017-03-01", "2017-04-02", "2017-08-01", "2017-10-01",
                 "2017-12-01", "2018-02-01", "2018-04-02", "2018-10-01",
                 "2019-02-01", "2019-03-11", "2019-04-30", "2019-06-01",
                 "2019-06-04", "2019-08-01", "2019-08-15", "2019-11-01",
                 "2020-06-01", "2020-07-15", "2020-09-01", "2020-10-01",
                 "2020-12-01", "2021-01-01", "2021-02-01", "2021-03-01",
                 "2021-05-01", "2021-10-01", "2021-11-01", "2021-11-15",
                 "2021-12-13", "2023-07-01", "2023-11-15", "2024-03-15"]
NEWEST = ["2021-02-01", "2021-01-01", "2020-12-01"]


class Azure(Mock):
    cloud = "azure"
    extra_keys = {"events": [], "vm_name": "spot-vm-0", "name_status": None}
    notice_paths = ("/metadata/scheduledevents",)

    def on_reset(self):
        self.incarnation = 1

    @staticmethod
    def canon(events):
        return json.dumps(events, sort_keys=True)

    def changed(self, old):
        if self.canon(old.get("events")) != self.canon(self.state["events"]):
            self.incarnation += 1

    def derived(self):
        return {"_incarnation": self.incarnation}

    def translate(self, c):
        if "notice" in c:
            n = c["notice"]
            if n is None:
                c["events"] = []
            elif isinstance(n, dict):
                ev = {"EventId": str(uuid.uuid4()).upper(), "EventType": "Preempt",
                      "ResourceType": "VirtualMachine",
                      "Resources": [c.get("vm_name", self.state["vm_name"])],
                      "EventStatus": "Scheduled",
                      "NotBefore": formatdate(time.time() + 30, usegmt=True),
                      "Description": "", "EventSource": "Platform",
                      "DurationInSeconds": -1}
                ev.update(n)
                c["events"] = [ev]
            else:
                raise BadState("azure notice: null or an event object")
        if "events" in c:
            if c["events"] is None:
                c["events"] = []
            if not isinstance(c["events"], list) or \
                    not all(isinstance(e, dict) for e in c["events"]):
                raise BadState("events: a list of event objects")
        if "vm_name" in c and not isinstance(c["vm_name"], str):
            raise BadState("vm_name: a string")
        if "name_status" in c and c["name_status"] is not None and \
                (not isinstance(c["name_status"], int) or isinstance(c["name_status"], bool)
                 or not 400 <= c["name_status"] <= 599):
            raise BadState("name_status: null or an HTTP error status (400 to 599)")
        return c

    def err(self, status, msg, **extra):
        body = {"error": msg}
        body.update(extra)
        return Reply.json(status, body)

    def throttle_reply(self):
        return self.err(429, "Too many requests")

    def error500_reply(self):
        return self.err(500, "Internal server error")

    def huge_reply(self, req):
        pad = HUGE_SIZE - len('{"DocumentIncarnation": 1, "Events": [], "pad": ""}')
        return Reply(200, '{"DocumentIncarnation": 1, "Events": [], "pad": "%s"}'
                     % ("A" * pad), "application/json; charset=utf-8")

    def version_ok(self, req, versions):
        if "api-version" not in req.args:
            return self.err(400, "Bad request. api-version was not specified in the "
                            "request. For more information refer to aka.ms/azureimds",
                            **{"newest-versions": NEWEST})
        if req.args["api-version"] not in versions:
            return self.err(400, "Bad request. api-version is invalid or was not "
                            "specified in the request. For more information refer "
                            "to aka.ms/azureimds", **{"newest-versions": NEWEST})
        return None

    def handle(self, req):
        if (req.header("Metadata") or "").lower() != "true":
            return self.err(400, "Bad request. Required metadata header not specified")
        if req.header("X-Forwarded-For") is not None:
            return self.err(400, "Bad request. Requests containing the "
                            "X-Forwarded-For header are not allowed")
        names = [k for k, _ in req.query]
        if len(names) != len(set(names)):
            return self.err(400, "Bad request. Duplicate query parameter names")
        p = req.path.rstrip("/") or "/"
        if p == "/metadata/versions":
            return Reply.json(200, {"apiVersions": IMDS_VERSIONS})
        if p == "/metadata/scheduledevents":
            bad = self.version_ok(req, SE_VERSIONS)
            if bad:
                return bad
            if req.method in ("GET", "HEAD"):
                with self.cond:
                    return Reply.json(200, {"DocumentIncarnation": self.incarnation,
                                            "Events": copy.deepcopy(self.state["events"])})
            if req.method == "POST":
                return self.ack(req)
            return self.err(405, "Method not allowed")
        if p.startswith("/metadata/instance"):
            if req.method not in ("GET", "HEAD"):
                return self.err(405, "Method not allowed")
            bad = self.version_ok(req, IMDS_VERSIONS)
            if bad:
                return bad
            return self.instance(req, p)
        return self.err(404, "Not found")

    def compute(self):
        return {"name": self.state["vm_name"], "location": "westeurope",
                "priority": "Spot", "evictionPolicy": "Delete",
                "vmId": "5c08b38e-4d57-4c23-ac45-aca61037f084",
                "vmSize": "Standard_D2s_v3", "osType": "Linux",
                "resourceGroupName": "spotd-test", "vmScaleSetName": ""}

    def instance(self, req, p):
        with self.cond:
            doc = {"compute": self.compute()}
            name_status = self.state["name_status"]
        if name_status and p == "/metadata/instance/compute/name":
            return self.err(name_status, "Not found" if name_status == 404
                            else "Internal server error")
        node = doc
        parts = [x for x in p[len("/metadata/instance"):].split("/") if x]
        for x in parts:
            if isinstance(node, dict) and x in node:
                node = node[x]
            else:
                return self.err(404, "Not found")
        fmt = req.args.get("format", "json")
        if fmt not in ("json", "text"):
            return self.err(400, "Bad request. Invalid format specified")
        if not isinstance(node, dict):          # a leaf
            if fmt != "text":
                return self.err(400, "Bad request. Query parameter format=text "
                                "is required for leaf nodes")
            return Reply(200, str(node), "text/plain; charset=utf-8")
        if fmt == "text":
            return Reply(200, "\n".join(sorted(node)), "text/plain; charset=utf-8")
        return Reply.json(200, node)

    def ack(self, req):
        try:
            doc = json.loads(req.body.decode("utf-8"))
            reqs = doc["StartRequests"]
            ids = [r["EventId"] for r in reqs]
            if not isinstance(reqs, list) or not ids or \
                    not all(isinstance(i, str) for i in ids):
                raise ValueError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            with self.cond:
                self.acks.append({"time": time.time(), "event_ids": [],
                                  "valid": False, "status": 400,
                                  "body": req.body.decode("utf-8", "replace")})
            return self.err(400, "Bad request. The request body is malformed")
        with self.cond:
            known = {e.get("EventId") for e in self.state["events"]}
            valid = all(i in known for i in ids)
            entry = {"time": time.time(), "event_ids": ids, "valid": valid,
                     "status": 200 if valid else 400,
                     "body": req.body.decode("utf-8", "replace")}
            self.acks.append(entry)
            if not valid:
                return self.err(400, "Bad request. Unknown EventId")
            old = copy.deepcopy(self.state)
            events = copy.deepcopy(self.state["events"])
            for e in events:
                if e.get("EventId") in ids:
                    e["EventStatus"] = "Started"
                    e["NotBefore"] = ""
            self.state["events"] = events
            self.changed(old)
            entry["incarnation"] = self.incarnation
            self.cond.notify_all()
        return Reply(200, b"", None)


CLOUDS = {"aws": AWS, "gcp": GCP, "azure": Azure,
          "alibaba": Alibaba, "tencent": Tencent}


# --------------------------------------------------------------------------
# HTTP plumbing.


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"       # keep-alive, like the real services
    # Headers and body go out in separate send()s: without TCP_NODELAY a
    # long-poll answer on a reused connection waits ~40 ms for a delayed ACK,
    # which is the mock's delay, not the client's.
    disable_nagle_algorithm = True
    mock = None
    verbose = False

    def version_string(self):
        return self.mock.server_name

    def log_message(self, fmt, *args):
        if self.verbose:
            sys.stderr.write("%s [%s] %s\n" % (self.mock.cloud,
                                              self.log_date_time_string(), fmt % args))

    def read_body(self):
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def dispatch(self):
        try:
            body = self.read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        req = Request(self.command, self.path, self.headers, body)
        if req.path.startswith("/_mock/") or req.path == "/_mock":
            return self.send(self.mock.control(req))
        entry = self.mock.record(req)
        fault, delay = self.mock.fault_for(req.path)
        if fault == "slow":
            time.sleep(delay)
            fault = None
        reply = None if fault else self.mock.handle(req)
        if reply is not None and reply.refault:
            fault, _ = self.mock.fault_for(req.path)
            reply = None if fault and fault != "slow" else self.mock.handle(req)
        if fault:
            reply = self.faulty(fault, req)
            if reply is None:
                return
        entry["status"] = reply.status
        self.send(reply)

    def faulty(self, fault, req):
        m = self.mock
        if fault == "down":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return None
        if fault == "hang":
            self.close_connection = True
            self.hang()
            return None
        if fault == "garbage":
            return m.garbage_reply(req)
        if fault == "huge":
            return m.huge_reply(req)
        if fault == "500":
            return m.error500_reply()
        if fault == "throttle":
            return m.throttle_reply()
        raise AssertionError(fault)

    def hang(self):
        """Hold the connection, answering nothing, until the client goes."""
        conn = self.connection
        while not self.mock.stopping.is_set():
            try:
                r, _, _ = select.select([conn], [], [], 0.5)
                if r and not conn.recv(1, socket.MSG_PEEK):
                    return
                if r:
                    time.sleep(0.05)    # it sent more: keep ignoring it
            except (OSError, ValueError):
                return

    def send(self, reply):
        try:
            self.send_response(reply.status)
            for k, v in reply.headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body)
        except OSError:
            self.close_connection = True

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = dispatch


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def write_port_file(path, port):
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cloud", required=True, choices=sorted(CLOUDS))
    ap.add_argument("--port", type=int, default=0,
                    help="TCP port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--verbose", action="store_true",
                    help="log each request to stderr")
    args = ap.parse_args(argv)

    mock = CLOUDS[args.cloud]()
    handler = type("BoundHandler", (Handler,), {"mock": mock, "verbose": args.verbose})
    httpd = Server(("127.0.0.1", args.port), handler)
    port = httpd.server_address[1]

    def stop(signum, frame):
        mock.stopping.set()
        with mock.cond:
            mock.cond.notify_all()
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.port_file:
        write_port_file(args.port_file, port)
    if args.verbose:
        sys.stderr.write("%s mock listening on 127.0.0.1:%d\n" % (args.cloud, port))
    try:
        httpd.serve_forever(poll_interval=0.1)
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
