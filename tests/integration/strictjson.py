#!/usr/bin/env python3
"""The one JSON parser the integration tests read spotd's and spotctl's JSON
with: it refuses a key that appears twice in an object (a reader such as
jq would silently take one of them), NaN and Infinity (not JSON), and
anything after the document.  Every --json output, event log line and
control answer a test reads goes through it (lib.sh: jget, jq_, jcheck).

    strictjson.py check [FILE]        exit 0 when FILE (or stdin) is one strict
                                      document, or JSON Lines of them
    strictjson.py get KEY [FILE]      the value of KEY's first occurrence
                                      (depth first, in document order, across
                                      the lines); strings unquoted, numbers as
                                      written; exit 1 when there is none
    strictjson.py eval EXPR [FILE]    Python EXPR over the document d (the
                                      list of documents, for several lines):
                                      a list prints one item a line

A document that is not strict JSON prints "FAIL: strict JSON: ..." on
stderr, which tests/run counts as a failed check, and exits 2.  Empty
input is no document: nothing printed, exit 1.  Python code imports it:
strictjson.loads(text), strictjson.load(file)."""
import json
import sys


class Raw(str):
    """A number as the document wrote it."""


def _pairs(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError("the key %r is given twice in an object" % k)
        obj[k] = v
    return obj


def _constant(name):
    raise ValueError("%s is not JSON" % name)


def loads(text, raw_numbers=False):
    """One strict document; ValueError when it is not."""
    kw = {"object_pairs_hook": _pairs, "parse_constant": _constant}
    if raw_numbers:
        kw["parse_int"] = kw["parse_float"] = Raw
    return json.loads(text, **kw)


def load(f, raw_numbers=False):
    """From a file object, or a path (read as UTF-8)."""
    if isinstance(f, str):
        with open(f, encoding="utf-8") as fo:
            return loads(fo.read(), raw_numbers)
    return loads(f.read(), raw_numbers)


def loads_all(text, raw_numbers=False):
    """One document, or JSON Lines: the list of documents ([] for none)."""
    if not text.strip():
        return []
    try:
        return [loads(text, raw_numbers)]
    except ValueError as first:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) < 2:
            raise first
        return [loads(ln, raw_numbers) for ln in lines]


def _find(v, key):
    if isinstance(v, dict):
        if key in v:
            return True, v[key]
        v = list(v.values())
    if isinstance(v, list):
        for item in v:
            found, got = _find(item, key)
            if found:
                return True, got
    return False, None


def _show(v):
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, str):
        return v
    if v is True or v is False or v is None:
        return json.dumps(v)
    return json.dumps(v, separators=(",", ":"), default=str)


def main(argv):
    if len(argv) < 2 or argv[1] not in ("check", "get", "eval"):
        sys.stderr.write(__doc__)
        return 2
    cmd, rest = argv[1], argv[2:]
    arg = rest.pop(0) if cmd != "check" and rest else None
    try:
        raw = open(rest[0], "rb").read() if rest else sys.stdin.buffer.read()
        text = raw.decode("utf-8")
        docs = loads_all(text, raw_numbers=cmd == "get")
    except (ValueError, UnicodeDecodeError) as e:
        sys.stderr.write("FAIL: strict JSON: %s: %r\n" % (e, raw[:300]))
        return 2
    if not docs:
        return 1
    if cmd == "check":
        return 0
    if cmd == "get":
        for d in docs:
            found, v = _find(d, arg)
            if found:
                print(_show(v))
                return 0
        return 1
    got = eval(arg, {"d": docs[0] if len(docs) == 1 else docs, "len": len, "sum": sum,
                     "sorted": sorted, "any": any, "all": all, "set": set})
    for v in got if isinstance(got, list) else [got]:
        print(_show(v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
