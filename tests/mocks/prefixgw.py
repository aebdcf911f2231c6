#!/usr/bin/env python3
"""An S3 gateway that serves S3 below a path, as deployments that need
`http://host:port/PREFIX` endpoints do, in front of Swift for the tests.

    prefixgw.py --prefix /s3 --upstream HOST:PORT --secret SECRET
                --port-file FILE [--log FILE]

A reverse proxy that serves S3 below /s3 strips the prefix on the way to the
S3 server (nginx: `location /s3/ { proxy_pass http://s3/; }`) and tells it
what it stripped (`proxy_set_header X-Forwarded-Prefix /s3`): the client
signed /s3/bucket/key, the request reaches the server as /bucket/key, and
the server checks the signature over X-Forwarded-Prefix + path, i.e. the
path the client signed (SeaweedFS does so since 2024; Scality's cloudserver
documents that a stripped path breaks SigV4).  Swift's s3api knows no
X-Forwarded-Prefix, so this gateway plays both parts:

- a request outside PREFIX/ is answered 404 NoSuchPrefix (nothing reaches
  the server that a client sent to the wrong place);
- the client's SigV4 signature is checked over the path as received,
  prefix included, with the secret given; one that does not match is
  answered 403 SignatureDoesNotMatch, as the server would;
- the request then goes to Swift without the prefix, signed again for that
  path with the same key, headers and payload hash (the body is sent on
  untouched, so Swift still checks its SHA-256), with X-Forwarded-Prefix.

Each request appends "METHOD PATH STATUS" to the log, with " refused" after
it when the gateway answered itself (a 404 of the server, such as NoSuchKey
for an object not there yet, is no refusal).  Python 3 standard
library only.
"""

import argparse
import hashlib
import hmac
import http.client
import http.server
import re
import socketserver
import sys
import threading
from urllib.parse import quote, unquote

from metadata import write_port_file  # the same atomic port file as the mocks

HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "te", "trailer",
       "upgrade", "proxy-connection"}
AUTH_RE = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,"
                     r"\s*SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$")


def canonical_query(q):
    if not q:
        return ""
    pairs = []
    for part in q.split("&"):
        k, _, v = part.partition("=")
        pairs.append((quote(unquote(k), safe="-_.~"), quote(unquote(v), safe="-_.~")))
    return "&".join("%s=%s" % kv for kv in sorted(pairs))


def signature(secret, method, path, query, headers, signed, date, scope_parts):
    """SigV4 over (method, path, query) and the signed headers' values."""
    canon_headers = "".join("%s:%s\n" % (h, " ".join(headers.get(h, "").split()))
                            for h in signed)
    creq = "\n".join([method, path, canonical_query(query), canon_headers, ";".join(signed),
                      headers.get("x-amz-content-sha256", "UNSIGNED-PAYLOAD")])
    scope = "/".join(scope_parts + ["aws4_request"])
    sts = "\n".join(["AWS4-HMAC-SHA256", headers.get("x-amz-date", ""), scope,
                     hashlib.sha256(creq.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in scope_parts + ["aws4_request"]:
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()


def s3_error(code, message):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>%s</Message></Error>' % (code, message)).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def note(self, status, refused):
        if self.server.log:
            with self.server.lock:
                self.server.log.write("%s %s %d%s\n" % (self.command, self.path, status,
                                                         " refused" if refused else ""))

    def reply(self, status, body, headers=(), refused=True):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.note(status, refused)

    def handle_one(self):
        g = self.server
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        path, _, query = self.path.partition("?")
        if not path.startswith(g.prefix + "/"):
            return self.reply(404, s3_error("NoSuchPrefix", "not below %s" % g.prefix))
        hdrs = {k.lower(): v for k, v in self.headers.items()}
        m = AUTH_RE.match(hdrs.get("authorization", ""))
        if not m:
            return self.reply(403, s3_error("AccessDenied", "no SigV4 authorization"))
        key, date, region, service, signed, sig = m.groups()
        signed = signed.split(";")
        scope = [date, region, service]
        if not hmac.compare_digest(sig, signature(g.secret, self.command, path, query, hdrs,
                                                  signed, date, scope)):
            return self.reply(403, s3_error("SignatureDoesNotMatch",
                                            "the signature is not over the path %s" % path))
        inner = path[len(g.prefix):]
        hdrs["x-forwarded-prefix"] = g.prefix
        signed = sorted(set(signed) | {"x-forwarded-prefix"})
        hdrs["authorization"] = (
            "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
            "Signature=%s" % (key, date, region, service, ";".join(signed),
                              signature(g.secret, self.command, inner, query, hdrs, signed,
                                        date, scope)))
        out = {k: v for k, v in hdrs.items() if k not in HOP and k != "content-length"}
        conn = http.client.HTTPConnection(g.up_host, g.up_port, timeout=60)
        try:
            conn.request(self.command, inner + ("?" + query if query else ""), body=body,
                         headers=out)
            r = conn.getresponse()
            data = r.read()
        except OSError as e:
            return self.reply(502, s3_error("BadGateway", str(e)))
        finally:
            conn.close()
        self.reply(r.status, data, [(k, v) for k, v in r.getheaders()
                                    if k.lower() not in HOP and k.lower() != "content-length"],
                   refused=False)

    do_GET = do_PUT = do_DELETE = do_HEAD = do_POST = handle_one


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    p = argparse.ArgumentParser()
    for name in ("--prefix", "--upstream", "--secret", "--port-file"):
        p.add_argument(name, required=True)
    p.add_argument("--log")
    a = p.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    srv.prefix = a.prefix.rstrip("/")
    srv.secret = a.secret
    srv.up_host, port = a.upstream.rsplit(":", 1)
    srv.up_port = int(port)
    srv.lock = threading.Lock()
    srv.log = open(a.log, "a", buffering=1) if a.log else None
    write_port_file(a.port_file, srv.server_address[1])
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
