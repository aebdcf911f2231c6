"""promparse.py: a strict parser of the Prometheus text exposition format
(version 0.0.4), for the metrics tests.

    python3 promparse.py FILE      # exit 0 and one JSON object on stdout:
                                   # {"types": {family: type},
                                   #  "samples": {"name{a=\"x\",b=\"y\"}": value}}
                                   # exit 1 with the first error on stderr
    python3 promparse.py --check FILE...
                                   # every file parsed, in one process: the
                                   # number that do not parse on stdout, and
                                   # each one's first error on stderr

Strict where Prometheus is lenient, so that spotd's output is exactly what
the format says: every family has one HELP and one TYPE, before its
samples, and its samples are together; names and label names are valid; a
label value escapes only backslash, double quote and newline; no series
twice; counters end in _total; histograms have cumulative buckets ending
in le="+Inf" equal to _count, and a _sum; values are floats; the text ends
with a newline.
"""
import json
import math
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class Bad(Exception):
    pass


def value(text, where):
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise Bad("%s: not a float: %r" % (where, text))
    return float(text)


def labels(text, where):
    """'{a="x",b="y"}' -> [(a, x), (b, y)]"""
    out, i = [], 1
    while i < len(text) - 1:
        m = re.match(r"([^=]*)=\"", text[i:])
        if not m or not LABEL.match(m.group(1)):
            raise Bad("%s: bad label name in %r" % (where, text))
        name, i = m.group(1), i + m.end()
        v = []
        while True:
            if i >= len(text) - 1:
                raise Bad("%s: unterminated label value in %r" % (where, text))
            c = text[i]
            if c == "\\":
                n = text[i + 1]
                if n not in "\\\"n":
                    raise Bad("%s: bad escape \\%s" % (where, n))
                v.append("\n" if n == "n" else n)
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise Bad("%s: raw newline in a label value" % where)
            else:
                v.append(c)
                i += 1
        if any(name == n for n, _ in out):
            raise Bad("%s: label %s twice" % (where, name))
        out.append((name, "".join(v)))
        if text[i] == ",":
            i += 1
        elif i != len(text) - 1:
            raise Bad("%s: expected , or } in %r" % (where, text))
    return out


def family_of(name, types):
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
            return base
    return name


def parse(text):
    if text and not text.endswith("\n"):
        raise Bad("the text does not end with a newline")
    types, helps, samples, done = {}, {}, {}, set()
    current = None
    hist = {}
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d" % n
        if line.startswith("#"):
            m = re.fullmatch(r"# (HELP|TYPE) (\S+) ?(.*)", line)
            if not m:
                if line.startswith("# HELP") or line.startswith("# TYPE"):
                    raise Bad("%s: malformed %r" % (where, line))
                continue
            kind, name, rest = m.groups()
            if not NAME.match(name):
                raise Bad("%s: bad metric name %r" % (where, name))
            if name in done:
                raise Bad("%s: %s again after its samples" % (where, name))
            table = helps if kind == "HELP" else types
            if name in table:
                raise Bad("%s: second %s for %s" % (where, kind, name))
            if kind == "TYPE":
                if rest not in TYPES:
                    raise Bad("%s: unknown type %r" % (where, rest))
                if name in {family_of(s.split("{")[0], types) for s in samples}:
                    raise Bad("%s: TYPE of %s after its samples" % (where, name))
            elif not rest:
                raise Bad("%s: empty HELP for %s" % (where, name))
            table[name] = rest
            if current and current != name:
                done.add(current)
            current = name
            continue
        if not line.strip():
            raise Bad("%s: empty line" % where)
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^\n]*\})? (\S+)( -?\d+)?", line)
        if not m:
            raise Bad("%s: not a sample: %r" % (where, line))
        name, lab, val = m.group(1), m.group(2) or "", m.group(3)
        fam = family_of(name, types)
        if fam in done:
            raise Bad("%s: %s's samples are not together" % (where, fam))
        if fam != current:
            if current:
                done.add(current)
            current = fam
        if fam not in types or fam not in helps:
            raise Bad("%s: sample of %s without HELP and TYPE" % (where, fam))
        ls = labels(lab, where) if lab else []
        key = name + ("{" + ",".join('%s="%s"' % kv for kv in ls) + "}" if ls else "")
        if key in samples:
            raise Bad("%s: series %s twice" % (where, key))
        v = value(val, where)
        samples[key] = v
        t = types[fam]
        if t == "counter":
            if not name.endswith("_total"):
                raise Bad("%s: counter %s does not end in _total" % (where, name))
            if v < 0 or math.isnan(v):
                raise Bad("%s: counter %s is %r" % (where, name, v))
        if t == "histogram":
            rest = tuple(kv for kv in ls if kv[0] != "le")
            h = hist.setdefault((fam, rest), {"buckets": [], "sum": None, "count": None})
            if name == fam + "_bucket":
                le = dict(ls).get("le")
                if le is None:
                    raise Bad("%s: bucket without le" % where)
                h["buckets"].append((value(le, where), v))
            elif name == fam + "_sum":
                h["sum"] = v
            elif name == fam + "_count":
                h["count"] = v
            else:
                raise Bad("%s: %s is not a histogram series name" % (where, name))
    for (fam, rest), h in hist.items():
        b = h["buckets"]
        what = "%s%s" % (fam, dict(rest))
        if not b or b[-1][0] != math.inf:
            raise Bad("%s: no le=\"+Inf\" bucket last" % what)
        if [x for x, _ in b] != sorted(x for x, _ in b):
            raise Bad("%s: buckets not in order" % what)
        if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
            raise Bad("%s: buckets not cumulative" % what)
        if h["count"] is None or h["sum"] is None:
            raise Bad("%s: no _count or _sum" % what)
        if b[-1][1] != h["count"]:
            raise Bad("%s: +Inf bucket %r != _count %r" % (what, b[-1][1], h["count"]))
    for name in types:
        if name not in helps:
            raise Bad("%s has a TYPE and no HELP" % name)
    return {"types": types, "samples": samples}


def check(paths):
    bad = 0
    for path in paths:
        try:
            parse(open(path, encoding="utf-8").read())
        except (Bad, UnicodeDecodeError) as e:
            print("promparse: %s: %s" % (path, e), file=sys.stderr)
            bad += 1
    print(bad)


def main():
    if sys.argv[1] == "--check":
        check(sys.argv[2:])
        return
    text = open(sys.argv[1], encoding="utf-8").read()
    try:
        out = parse(text)
    except Bad as e:
        print("promparse: %s" % e, file=sys.stderr)
        sys.exit(1)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
