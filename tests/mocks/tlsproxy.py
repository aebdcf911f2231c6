#!/usr/bin/env python3
"""A TLS front for the S3 tests: certificates, and a TLS-to-TCP relay.

    tlsproxy.py certs DIR
    tlsproxy.py serve --cert FILE --key FILE --upstream HOST:PORT
                      --port-file FILE [--log FILE]

`certs` writes into DIR a private CA (ca.crt), and three server certificates
it signed, each with its key (NAME.crt, NAME.key):
  good     for IP 127.0.0.1 and DNS localhost, valid now;
  ip-only  for IP 127.0.0.1 only (a client that asks for "localhost" sees a
           host name mismatch);
  expired  as good, but valid only for a day two days ago;
and other-ca.crt, a second CA that signed none of them.

`serve` listens on 127.0.0.1 (a kernel-chosen port, written to the port
file), does the TLS handshake with the certificate given and relays the
bytes both ways to the upstream (Swift): the request reaches it as the
client signed it, Host included.  Each connection appends one line to the
log: "accept" at once, then "handshake ok" or "handshake failed: WHY", so
a test counts how often a client tried.  Python 3 standard library, plus
`cryptography` for `certs` only.
"""

import argparse
import datetime
import ipaddress
import os
import socket
import ssl
import sys
import threading

from metadata import write_port_file  # the same atomic port file as the mocks


def make_certs(d):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    os.makedirs(d, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    day = datetime.timedelta(days=1)

    def write(name, cert, key):
        with open(os.path.join(d, name + ".crt"), "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        if key is not None:
            with open(os.path.join(d, name + ".key"), "wb") as f:
                f.write(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))

    def ca(cn):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - day).not_valid_after(now + 30 * day)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True,
                                             False, False), critical=True)
                .sign(key, hashes.SHA256()))
        return cert, key

    ca_cert, ca_key = ca("spotd test CA")
    other_cert, _ = ca("spotd other CA")
    write("ca", ca_cert, None)
    write("other-ca", other_cert, None)
    for name, sans, start, end in (
            ("good", ["127.0.0.1", "localhost"], now - day, now + 30 * day),
            ("ip-only", ["127.0.0.1"], now - day, now + 30 * day),
            ("expired", ["127.0.0.1", "localhost"], now - 3 * day, now - 2 * day)):
        key = ec.generate_private_key(ec.SECP256R1())
        alt = [x509.IPAddress(ipaddress.ip_address(s)) if s[0].isdigit() else x509.DNSName(s)
               for s in sans]
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                .issuer_name(ca_cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                .sign(ca_key, hashes.SHA256()))
        write(name, cert, key)


def pipe(src, dst):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    for s in (dst, src):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(args):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    host, port = args.upstream.rsplit(":", 1)
    lock = threading.Lock()
    log = open(args.log, "a", buffering=1) if args.log else None

    def note(line):
        if log:
            with lock:
                log.write(line + "\n")

    def handle(raw):
        note("accept")
        try:
            raw.settimeout(10)
            tls = ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError) as e:
            note("handshake failed: %s" % (getattr(e, "reason", None) or e))
            raw.close()
            return
        note("handshake ok")
        tls.settimeout(None)
        try:
            up = socket.create_connection((host, int(port)))
        except OSError:
            tls.close()
            return
        t = threading.Thread(target=pipe, args=(up, tls), daemon=True)
        t.start()
        pipe(tls, up)
        t.join()
        tls.close()
        up.close()

    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    write_port_file(args.port_file, ls.getsockname()[1])
    while True:
        c, _ = ls.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("certs")
    c.add_argument("dir")
    s = sub.add_parser("serve")
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--upstream", required=True)
    s.add_argument("--port-file", required=True)
    s.add_argument("--log")
    args = p.parse_args()
    if args.cmd == "certs":
        make_certs(args.dir)
    else:
        serve(args)


if __name__ == "__main__":
    sys.exit(main())
