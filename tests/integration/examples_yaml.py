#!/usr/bin/python3
"""Read the production examples' YAML for t-examples.sh (Debian's python3-yaml).

    examples_yaml.py cloudinit USER_DATA OUT
        Checks the user data's shape; writes what it gives the machine into OUT:
        spotd.json, spotd.env, spotd-install (the write_files contents), and
        broken.yaml, a copy whose write_files is the number 3.
    examples_yaml.py k8s OUT FILE...
        Checks every document of every FILE (strict: a duplicate key is an error,
        as it is to the API server) and what ties them together; for each
        container that runs spotd writes OUT/N.name, OUT/N.env (the SPOTD_* and
        other variables as the kubelet would give them, NUL separated), OUT/N.args
        (spotd's options, NUL separated) and OUT/N.grace (the pod's
        terminationGracePeriodSeconds).
    examples_yaml.py ms CONFIG_JSON KEY
        A duration of 'spotd config' output in milliseconds.

Prints PASS:/FAIL: lines for what it checks itself; exits 0 once it has gone
through everything (whatever failed), non-zero when it could not.
"""
import os
import re
import sys

import yaml


class StrictLoader(yaml.SafeLoader):
    """safe_load that refuses a mapping with the same key twice."""



def makefile_deb_pkgs():
    """The Makefile's DEB_PKGS, which the cloud-init example must install."""
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    text = open(os.path.join(top, "Makefile")).read()
    m = re.search(r"^DEB_PKGS\s*:=((?:.*\\\n)*.*)$", text, re.M)
    return set(m.group(1).replace("\\\n", " ").split()) if m else {"<no DEB_PKGS in the Makefile>"}

def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, "duplicate key %r" % (key,), key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)

def result(name, ok, why=""):
    if ok:
        print("PASS: %s" % name)
    else:
        print("FAIL: %s%s" % (name, ": " + why if why else ""))


def load_all(path):
    with open(path) as f:
        return list(yaml.load_all(f, Loader=StrictLoader))


# ---- cloud-init ----

def cloudinit(path, out):
    with open(path) as f:
        text = f.read()
    data = yaml.load(text, Loader=StrictLoader)
    name = "cloud-init: " + os.path.basename(path)
    result(name + ": begins with #cloud-config", text.startswith("#cloud-config\n"))
    files = {w.get("path"): w for w in data.get("write_files", [])}
    want = {"/etc/spotd/spotd.json": "spotd.json", "/etc/spotd/spotd.env": "spotd.env",
            "/usr/local/sbin/spotd-install": "spotd-install"}
    for p, base in want.items():
        w = files.get(p)
        result(name + ": writes " + p, w is not None and isinstance(w.get("content"), str))
        if w is not None:
            with open(os.path.join(out, base), "w") as f:
                f.write(w.get("content", ""))
    env = files.get("/etc/spotd/spotd.env", {})
    result(name + ": spotd.env (credentials) has mode 0600",
           str(env.get("permissions")) == "0600", "permissions %r" % env.get("permissions"))
    script = files.get("/usr/local/sbin/spotd-install", {})
    result(name + ": the install script is executable",
           str(script.get("permissions")) == "0755", "permissions %r" % script.get("permissions"))
    pkgs = data.get("packages", [])
    need = {"make", "gcc"} | makefile_deb_pkgs()
    result(name + ": installs the Makefile's build dependencies",
           need <= set(pkgs), "missing " + " ".join(sorted(need - set(pkgs))))
    run = " ".join(str(c) if isinstance(c, str) else " ".join(map(str, c))
                   for c in data.get("runcmd", []))
    result(name + ": runs the install script, then enables and starts spotd.service",
           re.search(r"spotd-install\b.*daemon-reload.*enable --now spotd\.service", run)
           is not None, repr(run))
    broken = dict(data)
    broken["write_files"] = 3
    with open(os.path.join(out, "broken.yaml"), "w") as f:
        f.write("#cloud-config\n" + yaml.safe_dump(broken))


# ---- Kubernetes ----

# What the kubelet would put in a valueFrom, for a pod of ordinal 0.
def stand_in(ref, pod):
    field = ref.get("fieldRef", {}).get("fieldPath")
    if field == "metadata.labels['apps.kubernetes.io/pod-index']":
        return "0"
    if field == "metadata.annotations['batch.kubernetes.io/job-completion-index']":
        return "0"
    if field == "status.podIP":
        return "127.0.0.1"
    if field == "metadata.name":
        return pod + "-0"
    if field == "metadata.namespace":
        return "default"
    if "secretKeyRef" in ref:
        return os.urandom(32).hex()      # a world key as openssl rand -hex 32 makes
    return None


# $(VAR) as the kubelet expands it: only variables defined earlier in the list;
# $$ is a literal $; an unknown reference stays as it is.
def expand(value, env):
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def k8s(out, paths):
    docs = []
    for path in paths:
        base = os.path.basename(path)
        try:
            these = load_all(path)
        except yaml.YAMLError as e:
            result("k8s: %s parses strictly" % base, False, str(e).replace("\n", " "))
            continue
        bad = [i for i, d in enumerate(these)
               if not isinstance(d, dict) or not isinstance(d.get("apiVersion"), str)
               or not isinstance(d.get("kind"), str)
               or not isinstance((d.get("metadata") or {}).get("name"), str)]
        result("k8s: %s: %d document(s), each with apiVersion, kind and metadata.name"
               % (base, len(these)), these and not bad, "documents %s" % bad)
        docs += [(base, d) for d in these if isinstance(d, dict)]

    services = {d["metadata"]["name"]: d for _, d in docs if d.get("kind") == "Service"}
    workloads = [(b, d) for b, d in docs
                 if d.get("kind") in ("Job", "StatefulSet", "Deployment", "ReplicaSet")]
    n = 0
    for base, d in workloads:
        what = "k8s: %s %s/%s" % (base, d["kind"], d["metadata"]["name"])
        spec = d.get("spec") or {}
        tmpl = spec.get("template") or {}
        pod = tmpl.get("spec") or {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        if d["kind"] != "Job":
            result(what + ": its selector selects its pods",
                   labels_match((spec.get("selector") or {}).get("matchLabels"), labels))
        grace = pod.get("terminationGracePeriodSeconds")
        result(what + ": terminationGracePeriodSeconds is a whole number",
               isinstance(grace, int) and not isinstance(grace, bool), repr(grace))
        for c in pod.get("containers", []):
            argv = list(c.get("command") or []) + list(c.get("args") or [])
            if not argv or argv[0] != "spotd":
                continue
            cwhat = "%s container %s" % (what, c.get("name"))
            result(cwhat + ": the command starts with spotd run", argv[:2] == ["spotd", "run"],
                   repr(argv[:3]))
            result(cwhat + ": every argument is a string", all(isinstance(a, str) for a in argv))
            opts = argv[2:]
            if "--" in opts:
                i = opts.index("--")
                result(cwhat + ": a training command follows --", len(opts) > i + 1)
                opts = opts[:i]
            else:
                result(cwhat + ": the training command follows --", False, repr(argv))
            env, bad = {}, []
            for e in c.get("env", []):
                if "value" in e:
                    if not isinstance(e["value"], str):
                        bad.append("%s is not a string" % e.get("name"))
                        continue
                    env[e["name"]] = expand(e["value"], env)
                else:
                    v = stand_in(e.get("valueFrom") or {}, d["metadata"]["name"])
                    if v is None:
                        bad.append("no stand-in for %s's %r" % (e.get("name"), e.get("valueFrom")))
                        continue
                    env[e["name"]] = v
            result(cwhat + ": every env value is a string the kubelet can give",
                   not bad, "; ".join(bad))
            n += 1
            with open(os.path.join(out, "%d.name" % n), "w") as f:
                f.write(cwhat)
            with open(os.path.join(out, "%d.env" % n), "w") as f:
                f.write("".join("%s=%s\0" % kv for kv in env.items()))
            with open(os.path.join(out, "%d.args" % n), "w") as f:
                f.write("".join(a + "\0" for a in opts))
            with open(os.path.join(out, "%d.grace" % n), "w") as f:
                f.write(str(grace))
            if d["kind"] == "Job":
                rules = (spec.get("podFailurePolicy") or {}).get("rules", [])
                ignored = [r for r in rules if r.get("action") == "Ignore"
                           and (r.get("onExitCodes") or {}).get("operator") == "In"
                           and 75 in (r.get("onExitCodes") or {}).get("values", [])
                           and (r["onExitCodes"].get("containerName") in (None, c.get("name")))]
                result(cwhat + ": its podFailurePolicy ignores exit 75 (preempted, state saved)",
                       bool(ignored))
                result(cwhat + ": restartPolicy Never, as a podFailurePolicy needs",
                       pod.get("restartPolicy") == "Never", repr(pod.get("restartPolicy")))
            if d["kind"] == "StatefulSet" and "SPOTD_WORLD_SIZE" in env:
                result(cwhat + ": replicas is SPOTD_WORLD_SIZE",
                       str(spec.get("replicas")) == env["SPOTD_WORLD_SIZE"],
                       "%r and %r" % (spec.get("replicas"), env["SPOTD_WORLD_SIZE"]))
        if d["kind"] == "StatefulSet":
            svc = services.get(spec.get("serviceName"))
            result(what + ": serviceName is a headless Service that selects its pods",
                   svc is not None and (svc.get("spec") or {}).get("clusterIP") == "None"
                   and labels_match((svc.get("spec") or {}).get("selector"), labels),
                   repr(spec.get("serviceName")))

    for base, d in docs:
        if d.get("kind") != "PodDisruptionBudget":
            continue
        what = "k8s: %s PodDisruptionBudget/%s" % (base, d["metadata"]["name"])
        spec = d.get("spec") or {}
        sel = (spec.get("selector") or {}).get("matchLabels")
        result(what + ": selects the pods of a workload",
               any(labels_match(sel, ((w.get("spec") or {}).get("template") or {})
                                .get("metadata", {}).get("labels") or {})
                   for _, w in workloads), repr(sel))
        result(what + ": allows an eviction (a budget of 0 would hold a spot drain)",
               spec.get("maxUnavailable") not in (None, 0, "0%") and "minAvailable" not in spec,
               repr(spec))
    result("k8s: the examples run spotd in at least one container", n > 0)


def ms(path, key):
    import json
    with open(path) as f:
        v = json.load(f)[key]
    m = re.fullmatch(r"(\d+)(ms|s|m|h)?", v)
    mult = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, None: 1}[m.group(2)]
    print(int(m.group(1)) * mult)


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "cloudinit" and len(sys.argv) == 4:
        cloudinit(sys.argv[2], sys.argv[3])
    elif cmd == "k8s" and len(sys.argv) >= 4:
        k8s(sys.argv[2], sys.argv[3:])
    elif cmd == "ms" and len(sys.argv) == 4:
        ms(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
