# The paths into production, examples/cloud-init and examples/kubernetes: each
# passes its own tool's check (cloud-init's schema; strict YAML with what ties the
# manifests together), and what each gives spotd is a configuration spotd itself
# accepts, with 'spotd config' and with a short 'spotd run'. The user data's
# install script fetches, unpacks and installs with a stand-in make.
#
# Needs /usr/bin/python3 with Debian's python3-yaml and Debian's cloud-init; as
# root the test installs them when they are missing (.ci/run does too);
# otherwise it fails in CI and is skipped elsewhere.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
HELPER="$TOP/tests/integration/examples_yaml.py"
CI_DIR="$TOP/examples/cloud-init"
K8S_DIR="$TOP/examples/kubernetes"

have_yaml() { "$PY" -c 'import yaml' 2>/dev/null; }
have_cloudinit() { [ -x /usr/bin/cloud-init ]; }

# need WHAT: install Debian's package WHAT as root (without recommends: cloud-init
# would bring sudo, eatmydata and growpart along).
need() {
    echo "installing $1 with apt-get"
    local apt=(apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$1")
    { DEBIAN_FRONTEND=noninteractive "${apt[@]}" ||
      { apt-get -o DPkg::Lock::Timeout=600 update -q &&
        DEBIAN_FRONTEND=noninteractive "${apt[@]}"; }
    } >"$T/apt.log" 2>&1 || tail -n 5 "$T/apt.log"
}
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    have_yaml || need python3-yaml
    have_cloudinit || need cloud-init
fi
why=""
have_yaml || why="$PY cannot import yaml; install Debian's python3-yaml"
have_cloudinit || why="${why:+$why; }no /usr/bin/cloud-init; install Debian's cloud-init (--no-install-recommends)"
if [ -n "$why" ]; then
    if [ "$(id -u)" != 0 ] && [ "${CI:-}" != true ]; then
        echo "SKIP: examples ($why)"
        exit 0
    fi
    fail "examples: the checking tools are there" "$why"
    exit 1
fi

# config_ok NAME FILE_ENV FILE_ARGS: 'spotd config' with those variables and
# options exits 0 and says nothing on stderr (no bad value, no unknown SPOTD_
# variable); its output is left in $T/config.json. Returns 1 when not.
config_ok() {
    local name=$1 envs=() args=() rc
    mapfile -d '' -t envs <"$2"
    mapfile -d '' -t args <"$3"
    env "${envs[@]}" "$SPOTD" config "${args[@]}" >"$T/config.json" 2>"$T/config.err"
    rc=$?
    if [ $rc -eq 0 ] && [ ! -s "$T/config.err" ]; then
        pass "$name"
    else
        fail "$name" "exit $rc: $(head -c 300 "$T/config.err")"
        return 1
    fi
}

# runs_ok NAME FILE_ENV FILE_ARGS: 'spotd run' with those variables and options
# gets past every check of its start-up (its start event, and still running a
# second later), on a local file store, without a cloud (no request goes to a
# metadata address from here), listening on a free port (the address stays),
# 'sleep' for the training command.
runs_ok() {
    local name=$1 envs=() args=() n=$((++runs)) pid why="" e
    mapfile -d '' -t envs <"$2"
    mapfile -d '' -t args <"$3"
    mkdir -p "$T/run$n/store"
    for e in "${envs[@]}"; do
        [ "${e#SPOTD_LISTEN=}" != "$e" ] && envs+=("${e%:*}:0")
    done
    envs+=("SPOTD_STORE=file://$T/run$n/store" "SPOTD_STATE_DIR=$T/run$n/state"
           "SPOTD_CLOUD=none" "SPOTD_EVENTS=$T/run$n/events")
    env "${envs[@]}" "$SPOTD" run "${args[@]}" -- sleep 60 >"$T/run$n/out" 2>"$T/run$n/err" &
    pid=$!
    _bg_pids+=("$pid")
    wait_for 20 has '"event":"start"' "$T/run$n/events" || why="no start event"
    [ -z "$why" ] && sleep 1
    [ -z "$why" ] && ! alive "$pid" && why="it exited"
    kill_tree "$pid"
    wait "$pid" 2>/dev/null
    if [ -z "$why" ]; then pass "$name"; else fail "$name" "$why: $(tail -c 600 "$T/run$n/err")"; fi
}
runs=0

# ---- cloud-init ----
ud="$CI_DIR/user-data.yaml"
mkdir -p "$T/ci"
"$PY" "$HELPER" cloudinit "$ud" "$T/ci"
check "cloud-init: the user data is read to the end" [ $? -eq 0 ]

cloud-init schema --config-file "$ud" >"$T/schema.out" 2>&1
rc=$?
check "cloud-init: the user data passes cloud-init schema" \
    sh -c "[ $rc -eq 0 ] && grep -q '^Valid cloud-config' '$T/schema.out'"
[ $rc -eq 0 ] || head -n 5 "$T/schema.out"
check "cloud-init: no deprecated key in the user data" \
    sh -c "! grep -q DEPRECATED '$T/schema.out'"
# The same check rejects a copy whose write_files is a number: it is not vacuous.
cloud-init schema --config-file "$T/ci/broken.yaml" >"$T/schema.out" 2>&1
rc=$?
check "cloud-init: schema rejects a broken copy (write_files: 3)" \
    sh -c "[ $rc -ne 0 ] && grep -q 'write_files: 3 is not of type' '$T/schema.out'"

# The job's spotd.json: what spotd.service's 'spotd run' reads.
"$SPOTD" config --config "$T/ci/spotd.json" >"$T/config.json" 2>"$T/config.err"
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$T/config.err" ]; then
    pass "cloud-init: spotd config accepts the spotd.json it writes"
else
    fail "cloud-init: spotd config accepts the spotd.json it writes" \
        "exit $rc: $(head -c 300 "$T/config.err")"
fi
check "cloud-init: the spotd.json gives spotd its command" \
    grep -q '"command":[[:space:]]*\["torchrun"' "$T/config.json"
runs_ok "cloud-init: spotd run starts on the spotd.json's options" \
    <(printf 'SPOTD_CONFIG=%s\0' "$T/ci/spotd.json") /dev/null

check "cloud-init: the install script is valid sh" sh -n "$T/ci/spotd-install"

# The install script, with make standing in: it fetches the source (a tarball,
# then a git repository), builds and installs it, and, behind a proxy, gives
# spotd.service NO_PROXY naming every metadata service.
mkdir -p "$T/bin" "$T/pkg/spotd-0.1.0"
cat >"$T/bin/make" <<'SH'
#!/bin/sh
printf '%s\n' "$*" >>"$MAKE_LOG"
[ "$1" = -C ] && [ -f "$2/Makefile" ] || { echo "make: no Makefile in $2" >&2; exit 2; }
SH
chmod +x "$T/bin/make"
cp "$TOP/Makefile" "$T/pkg/spotd-0.1.0/"
tar -czf "$T/spotd-0.1.0.tar.gz" -C "$T/pkg" spotd-0.1.0

# install_with SOURCE [VAR=VALUE...]: run the script into $T/root, as
# cloud-init would after writing spotd.json and spotd.env.
install_with() {
    local src=$1
    shift
    rm -rf "$T/root" "$T/src" "$T/make.log"
    mkdir -p "$T/root/etc/spotd"
    cp "$T/ci/spotd.json" "$T/root/etc/spotd/spotd.json"
    (umask 077 && cp "$T/ci/spotd.env" "$T/root/etc/spotd/spotd.env")
    env PATH="$T/bin:$PATH" MAKE_LOG="$T/make.log" DESTDIR="$T/root" SRC="$T/src" \
        SPOTD_SOURCE="$src" "$@" sh "$T/ci/spotd-install" >"$T/install.log" 2>&1
}
install_with "file://$T/spotd-0.1.0.tar.gz"
rc=$?
check "cloud-init: the install script runs with a tarball" [ $rc -eq 0 ]
[ $rc -eq 0 ] || tail -n 5 "$T/install.log"
check "cloud-init: the tarball is unpacked without its top folder" [ -f "$T/src/Makefile" ]
expect_eq "cloud-init: make builds, then installs under /usr" \
    "-C $T/src -j$(nproc)|-C $T/src install PREFIX=/usr" "$(paste -sd '|' "$T/make.log")"
check "cloud-init: no proxy, no proxy settings" \
    sh -c "! grep -qi '^[a-z_]*proxy=' '$T/root/etc/spotd/spotd.env'"

if command -v git >/dev/null; then
    git init -q "$T/repo" && cp "$TOP/Makefile" "$T/repo/" &&
        git -C "$T/repo" add Makefile &&
        git -C "$T/repo" -c user.name=t -c user.email=t@example.com commit -qm t &&
        git -C "$T/repo" tag v0.1.0
    install_with "file://$T/repo" SPOTD_REF=v0.1.0 PROXY=http://proxy.example.com:3128
    rc=$?
    check "cloud-init: the install script runs with a git repository and a tag" \
        sh -c "[ $rc -eq 0 ] && [ -f '$T/src/Makefile' ] && grep -q install '$T/make.log'"
    [ $rc -eq 0 ] || tail -n 5 "$T/install.log"
    envf="$T/root/etc/spotd/spotd.env"
    missing=""
    for v in NO_PROXY no_proxy; do
        for a in 169.254.169.254 metadata.google.internal 100.100.100.200 metadata.tencentyun.com; do
            grep -q "^$v=.*$a" "$envf" || missing="$missing $v:$a"
        done
    done
    expect_eq "cloud-init: behind a proxy, spotd.env's NO_PROXY and no_proxy name every metadata service" \
        "" "$missing"
    check "cloud-init: ... and HTTPS_PROXY the proxy" grep -qx 'HTTPS_PROXY=http://proxy.example.com:3128' "$envf"
    expect_eq "cloud-init: spotd.env keeps its mode 0600" 600 "$(stat -c %a "$envf")"
    # What spotd makes of that file, read as the unit reads it (EnvironmentFile=).
    grep -v '^#' "$envf" | grep . | tr '\n' '\0' >"$T/proxy.env"
    config_ok "cloud-init: spotd config says nothing of the proxy settings" "$T/proxy.env" /dev/null
else
    echo "SKIP: cloud-init: the install script with a git repository (no git)"
fi

# ---- Kubernetes ----
mkdir -p "$T/k8s"
"$PY" "$HELPER" k8s "$T/k8s" "$K8S_DIR"/*.yaml
check "k8s: the manifests are read to the end" [ $? -eq 0 ]
for f in "$T"/k8s/*.name; do
    [ -e "$f" ] || continue
    b=${f%.name}
    what=$(cat "$f")
    if ! config_ok "$what: spotd config accepts its variables and options" "$b.env" "$b.args"; then
        fail "$what: terminationGracePeriodSeconds fits spotd's deadlines" "no configuration"
        continue
    fi
    grace_ms=$("$PY" "$HELPER" ms "$T/config.json" grace)
    deadline_ms=$("$PY" "$HELPER" ms "$T/config.json" signal_deadline)
    margin_ms=$("$PY" "$HELPER" ms "$T/config.json" notice_margin)
    pod_ms=$(( $(cat "$b.grace") * 1000 ))
    # The kubelet's SIGKILL comes after spotd is done: spotd ends by the SIGTERM
    # notice's deadline (signal_deadline), and the full grace fits before it.
    expect_ge "$what: terminationGracePeriodSeconds is past spotd's deadline for a SIGTERM" \
        $((deadline_ms + 1)) "$pod_ms"
    expect_ge "$what: ... and at least the grace" "$grace_ms" "$pod_ms"
    expect_ge "$what: the SIGTERM notice's deadline leaves room for the grace and the margin" \
        $((grace_ms + margin_ms)) "$deadline_ms"
    runs_ok "$what: spotd run starts on its variables and options" "$b.env" "$b.args"
done

check "examples: nothing left running" wait_for 10 none_left
