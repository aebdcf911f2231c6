#!/usr/bin/python3
"""Check examples/grafana/dashboard.json for t-grafana.sh (standard library only).

    grafana_dashboard.py check DASHBOARD [README]
        Prints one line per problem and exits 1 when there is any, 0 when none.
    grafana_dashboard.py exprs DASHBOARD
        Prints every PromQL expression (panel targets, annotations, variable
        queries), one a line, with Grafana's variables replaced by values
        Prometheus accepts, for promtool.

What is checked: the JSON parses strictly (a key given twice, NaN or
Infinity refused); the dashboard has a uid, a title and a schemaVersion;
its templating has the Prometheus datasource variable DS_PROMETHEUS and
the job and instance variables; every panel (rows' panels included) takes
its data from ${DS_PROMETHEUS} and has targets, each with a refId and an
expression; panel ids are unique and every panel fits the 24-column grid.
Every spotd_ metric name anywhere in the file (expressions, descriptions,
legends) is one spotd exposes (METRICS below; _bucket, _sum and _count are
the histogram's series), every one of them is on some panel, an expression
reads the histogram only through those series, and a counter or a bucket
only through rate() or increase().  With a README, every panel's title is in it (the
README says what each panel answers).
"""
import re
import sys

import strictjson  # tests/integration: the tests' one strict JSON parser

# What spotd exposes (docs/operations.md, "Metrics"): name -> type.
METRICS = {
    "spotd_notices_total": "counter",
    "spotd_checkpoints_total": "counter",
    "spotd_checkpoint_phase_seconds": "histogram",
    "spotd_notice_margin_seconds": "gauge",
    "spotd_bytes_read_total": "counter",
    "spotd_bytes_sent_total": "counter",
    "spotd_bytes_skipped_total": "counter",
    "spotd_bytes_stored_total": "counter",
    "spotd_command_restarts_total": "counter",
    "spotd_events_dropped_total": "counter",
    "spotd_peers_alive": "gauge",
    "spotd_coordinator_rank": "gauge",
    "spotd_command_cpu_seconds_total": "counter",
    "spotd_command_resident_memory_bytes": "gauge",
    "spotd_trainer_step": "gauge",
    "spotd_trainer_steps_per_second": "gauge",
    "spotd_committed_generation": "gauge",
    "spotd_last_commit_timestamp_seconds": "gauge",
    "spotd_gpu_utilization_ratio": "gauge",
    "spotd_gpu_memory_used_bytes": "gauge",
    "spotd_gpu_memory_total_bytes": "gauge",
    "spotd_gpu_temperature_celsius": "gauge",
    "spotd_gpu_power_watts": "gauge",
    "spotd_gpu_idle_seconds": "gauge",
}
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
NAME = re.compile(r"spotd_[a-z_]+")
DS = "${DS_PROMETHEUS}"
# Grafana's variables, as Prometheus would see them once Grafana has put
# in their values.
GRAFANA_VARS = [("$__rate_interval", "1m"), ("$__interval", "1m"), ("$__range", "6h"),
                ("$job", ".*"), ("$instance", ".*")]


def strict_load(path):
    return strictjson.load(path)


def base_name(name):
    for suffix in HISTOGRAM_SERIES:
        if name.endswith(suffix) and METRICS.get(name[: -len(suffix)]) == "histogram":
            return name[: -len(suffix)]
    return name


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def enclosing_call(expr, at):
    """The name of the innermost function call around expr[at], '' when none."""
    depth = 0
    for i in range(at - 1, -1, -1):
        c = expr[i]
        if c == ")":
            depth += 1
        elif c == "(":
            if depth == 0:
                m = re.search(r"([A-Za-z_]+)\s*$", expr[:i])
                if m and m.group(1) not in ("by", "without", "on", "ignoring"):
                    return m.group(1)
                # A grouping or an aggregation's label list: look further out.
            else:
                depth -= 1
    return ""


def expressions(dash):
    """(where, expression) of every PromQL expression of the dashboard."""
    out = []
    for p in all_panels(dash.get("panels", [])):
        for t in p.get("targets") or []:
            if isinstance(t, dict) and isinstance(t.get("expr"), str):
                out.append(("panel %r target %s" % (p.get("title"), t.get("refId")), t["expr"]))
    for a in dash.get("annotations", {}).get("list", []):
        if isinstance(a.get("expr"), str):
            out.append(("annotation %r" % a.get("name"), a["expr"]))
    return out


def variable_queries(dash):
    out = []
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            out.append(("variable %r" % v.get("name"), q))
    return out


def check(path, readme=None):
    problems = []
    try:
        dash = strict_load(path)
    except (OSError, ValueError) as e:
        return ["%s does not parse strictly: %s" % (path, e)]
    if not isinstance(dash, dict):
        return ["%s is not a JSON object" % path]
    for key in ("uid", "title"):
        if not isinstance(dash.get(key), str) or not dash[key]:
            problems.append("the dashboard has no %s" % key)
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
        problems.append("schemaVersion %r: a dashboard of Grafana 9 or later (36+) is expected"
                        % dash.get("schemaVersion"))

    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("DS_PROMETHEUS")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("no datasource variable DS_PROMETHEUS of type prometheus")
    for name in ("job", "instance"):
        v = variables.get(name)
        if not v or v.get("type") != "query" or (v.get("datasource") or {}).get("uid") != DS:
            problems.append("no %s variable querying ${DS_PROMETHEUS}" % name)
    for where, q in variable_queries(dash):
        if not isinstance(q, str) or not q.startswith("label_values("):
            problems.append("%s: its query %r is not label_values(...)" % (where, q))

    ids = set()
    panels = list(all_panels(dash.get("panels", [])))
    if not panels:
        problems.append("no panels")
    for p in panels:
        title = p.get("title")
        if not title:
            problems.append("panel %r has no title" % p.get("id"))
        if p.get("id") in ids:
            problems.append("panel id %r is used twice" % p.get("id"))
        ids.add(p.get("id"))
        pos = p.get("gridPos") or {}
        if not all(isinstance(pos.get(k), int) for k in "xywh") or pos["x"] + pos["w"] > 24:
            problems.append("panel %r: gridPos %r is not within the 24 columns" % (title, pos))
        if (p.get("datasource") or {}).get("uid") != DS:
            problems.append("panel %r: its datasource is not ${DS_PROMETHEUS}" % title)
        targets = p.get("targets")
        if not isinstance(targets, list) or not targets:
            problems.append("panel %r has no targets" % title)
            continue
        for t in targets:
            if not isinstance(t, dict) or not t.get("refId") or not t.get("expr"):
                problems.append("panel %r: a target without refId or expr: %r" % (title, t))

    # Every spotd_ name anywhere in the file, not only in expressions.
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for name in sorted(set(NAME.findall(text))):
        base = base_name(name)
        if base not in METRICS:
            problems.append("%s is not a metric spotd exposes" % name)
    for where, expr in expressions(dash):
        for m in NAME.finditer(expr):
            base = base_name(m.group(0))
            kind = METRICS.get(base)
            if kind == "histogram" and base == m.group(0):
                problems.append("%s: %s is a histogram, no series of its own: read %s" % (
                    where, base, ", ".join(base + s for s in HISTOGRAM_SERIES)))
            if (kind == "counter" or m.group(0).endswith("_bucket")) and \
                    enclosing_call(expr, m.start()) not in ("rate", "increase"):
                problems.append("%s: %s is a counter: read it through rate() or increase()"
                                % (where, m.group(0)))
        if expr.count("(") != expr.count(")"):
            problems.append("%s: unbalanced parentheses in %r" % (where, expr))
    on_panels = {base_name(m) for _, e in expressions(dash) for m in NAME.findall(e)}
    for name in sorted(set(METRICS) - on_panels):
        problems.append("%s is on no panel" % name)

    if readme:
        with open(readme, encoding="utf-8") as f:
            doc = f.read()
        for p in panels:
            if p.get("title") and p["title"] not in doc:
                problems.append("the README does not say what panel %r answers" % p["title"])
    return problems


def main(argv):
    if len(argv) >= 3 and argv[1] == "check":
        problems = check(argv[2], argv[3] if len(argv) > 3 else None)
        for p in problems:
            print(p)
        return 1 if problems else 0
    if len(argv) == 3 and argv[1] == "exprs":
        dash = strict_load(argv[2])
        for _, expr in expressions(dash) + variable_queries(dash):
            if expr.startswith("label_values("):
                # label_values(METRIC{...}, label): the selector is PromQL.
                expr = expr[len("label_values("):].rsplit(",", 1)[0]
            for var, value in GRAFANA_VARS:
                expr = expr.replace(var, value)
            print(expr)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
