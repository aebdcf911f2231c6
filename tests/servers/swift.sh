#!/usr/bin/env bash
# A real single-node OpenStack Swift with the s3api middleware on 127.0.0.1,
# for tests.  See tests/servers/README.md.
#
#   tests/servers/swift.sh start DIR   start it (or find it running) and print
#                                      the S3 settings, also left in DIR/env
#   tests/servers/swift.sh stop DIR    stop every process started for DIR
#
# Everything (configs, rings, data, logs, pid files) lives under DIR; nothing
# is written to /etc/swift.  Servers run as the invoking user, listen on
# free ports of 127.0.0.1 only, and stay up until "stop".  Exit status: 0
# ready, 1 failure (logs under DIR/log) or usage, 2 Debian packages missing
# and not root (the apt-get line to run is printed).
set -euo pipefail

PKGS=(swift swift-proxy swift-object swift-container swift-account python3-swift curl)
SERVERS=(account-server container-server object-server proxy-server)
# Debian's interpreter: the one that sees python3-swift, whatever comes first
# on PATH (pyenv, a virtualenv...).
PY=/usr/bin/python3
REGION=us-east-1
# eventlet's green DNS pulls in dnspython and httpx: half a second of
# imports in every server, for names none of them resolves.
export EVENTLET_NO_GREENDNS=yes
ACCESS_KEY=test:tester
SECRET_KEY=testing

say() { echo "swift.sh: $*" >&2; }
die() { say "$*"; exit 1; }

usage() {
    echo "usage: $0 start|stop DIR" >&2
    exit 1
}

# ---- packages -------------------------------------------------------------

missing_pkgs() {
    local ok p
    # dpkg-query fails when one is unknown, and may be absent altogether.
    ok=" $({ dpkg-query -W -f='${Status} ${Package}\n' "${PKGS[@]}" 2>/dev/null || true; } |
        sed -n 's/^install ok installed //p' | tr '\n' ' ')"
    for p in "${PKGS[@]}"; do
        case $ok in *" $p "*) ;; *) echo "$p" ;; esac
    done
}

ensure_pkgs() {
    local miss
    miss=$(missing_pkgs | tr '\n' ' ')
    miss=${miss% }
    [ -z "$miss" ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        say "missing Debian packages: $miss; as root run:"
        echo "DEBIAN_FRONTEND=noninteractive apt-get install -y ${PKGS[*]}"
        exit 2
    fi
    say "installing $miss (log: $D/log/apt.log)"
    # Debian's units for these services assert /etc/swift/*.ring.gz, which
    # this script never writes, so the install starts no daemon.
    # shellcheck disable=SC2086
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q $miss >"$D/log/apt.log" 2>&1; then
        # shellcheck disable=SC2086
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $miss; } \
            >>"$D/log/apt.log" 2>&1 || { tail -n 20 "$D/log/apt.log" >&2; die "apt-get install failed"; }
    fi
}

# ---- processes --------------------------------------------------------------

# ours: pids of live processes running DIR's launcher (workers included).
# Builtins only: a scan that forks per process is slow on a busy machine.
ours() {
    local f a
    for f in /proc/[0-9]*; do
        a=()
        { mapfile -d '' -t a <"$f/cmdline"; } 2>/dev/null || continue
        [ "${a[1]:-}" = "$D/swiftd.py" ] && [ "$(proc_state "${f#/proc/}")" != Z ] &&
            echo "${f#/proc/}"
    done
    return 0
}

# proc_state PID: the one-letter state ("" when gone).
proc_state() {
    local s
    { read -r s <"/proc/$1/stat"; } 2>/dev/null || return 0
    s=${s##*) }
    echo "${s%% *}"
}

# running: every server's pid file names a live launcher of DIR.
running() {
    local s p a
    for s in "${SERVERS[@]}"; do
        { read -r p <"$D/run/$s.pid"; } 2>/dev/null || return 1
        a=()
        { mapfile -d '' -t a <"/proc/$p/cmdline"; } 2>/dev/null || return 1
        [ "${a[1]:-}" = "$D/swiftd.py" ] && [ "${a[2]:-}" = "$s" ] || return 1
    done
}

stop() {
    local pids i
    pids=$(ours)
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null || true
        for i in $(seq 50); do
            pids=$(ours)
            [ -z "$pids" ] && break
            sleep 0.1
        done
        if [ -n "$pids" ]; then
            # shellcheck disable=SC2086
            kill -KILL $pids 2>/dev/null || true
            for i in $(seq 50); do
                [ -z "$(ours)" ] && break
                sleep 0.1
            done
        fi
    fi
    rm -f "$D"/run/*.pid
    [ -z "$(ours)" ] || die "processes left running: $(ours | tr '\n' ' ')"
}

# http_code URL [CURL ARGS...]: the status code ("000" when no answer).
http_code() {
    local url=$1
    shift
    curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" "$url" 2>/dev/null || true
}

# s3_list: a signed ListBuckets; the status code.  curl's -u splits at the
# first colon and the access key holds one: the credentials go in a netrc.
s3_list() {
    http_code "$S3_ENDPOINT/" --netrc-file "$D/netrc" \
        --aws-sigv4 "aws:amz:$REGION:s3" \
        -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
}

# ---- configuration ----------------------------------------------------------

write_launcher() {
    # Swift reads swift.conf (hash prefix, storage policies) from the fixed
    # path /etc/swift/swift.conf whatever swift_dir says; the launcher points
    # it at DIR/swift.conf.  Logging goes to DIR/log/NAME.log instead of
    # syslog (no /dev/log in containers; UDP 514 otherwise).  workers = 0
    # runs each server as one process, as the invoking user.
    cat >"$D/swiftd.py" <<'PY'
# swiftd.py NAME CONF LOG: run one Swift WSGI server in the foreground.
import logging
import os
import sys
import time

name, conf, log = sys.argv[1:4]
from swift.common import utils

utils.SWIFT_CONF_FILE = os.path.join(os.path.dirname(conf), 'swift.conf')


class FileLog(logging.FileHandler):
    def __init__(self, address=None, facility=None):
        super().__init__(log)

    def format(self, record):
        return time.strftime('%H:%M:%SZ ', time.gmtime(record.created)) + \
            super().format(record)


utils.ThreadSafeSysLogHandler = FileLog
from swift.common import constraints, storage_policy

storage_policy.reload_storage_policies()
constraints.reload_constraints()
from swift.common.wsgi import run_wsgi

kwargs = {}
if name == 'object-server':
    from swift.obj import server
    kwargs['global_conf_callback'] = server.global_conf_callback
sys.exit(run_wsgi(conf, name, **kwargs))
PY
}

# setup: free ports and 1-replica rings (what "swift-ring-builder X.builder
# create 8 1 1", "add r1z1-127.0.0.1:PORT/sdb1 100" and "rebalance" do, in
# one interpreter: the CLI takes over a second an invocation).  Prints the
# ports: account container object proxy.
setup() {
    (cd "$D" && "$PY" - <<'PY'
import socket
from swift.common.ring import RingBuilder

socks = []
for _ in range(4):
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    socks.append(s)
ports = [s.getsockname()[1] for s in socks]
for s in socks:
    s.close()
for name, port in zip(('account', 'container', 'object'), ports):
    b = RingBuilder(8, 1, 1)
    b.add_dev({'region': 1, 'zone': 1, 'ip': '127.0.0.1', 'port': port,
               'replication_ip': '127.0.0.1', 'replication_port': port,
               'device': 'sdb1', 'weight': 100, 'meta': ''})
    b.rebalance()
    b.get_ring().save(name + '.ring.gz')
    b.save(name + '.builder')
print(*ports)
PY
    )
}

write_configs() {
    local ap=$1 cp=$2 op=$3 pp=$4 user s port
    user=$(id -un)
    cat >"$D/swift.conf" <<EOF
[swift-hash]
swift_hash_path_prefix = spotd-test
swift_hash_path_suffix = spotd-test

[storage-policy:0]
name = Policy-0
default = yes
EOF
    for s in account container object; do
        case $s in account) port=$ap ;; container) port=$cp ;; object) port=$op ;; esac
        cat >"$D/$s-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $port
workers = 0
user = $user
swift_dir = $D
devices = $D/srv
mount_check = false
disable_fallocate = true
log_name = $s-server

[pipeline:main]
pipeline = healthcheck $s-server

[filter:healthcheck]
use = egg:swift#healthcheck

[app:$s-server]
use = egg:swift#$s
EOF
    done
    cat >"$D/proxy-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $pp
workers = 0
user = $user
swift_dir = $D
log_name = proxy-server

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

# No memcached: the address is one nothing unprivileged can listen on, so
# that a memcached running on the host is never shared between instances
# (it would serve one's account and container info to the other); the
# middleware error-limits it and the proxy runs uncached, quietly.
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:1
set log_name = memcache
set log_level = CRITICAL

[filter:listing_formats]
use = egg:swift#listing_formats

[filter:s3api]
use = egg:swift#s3api
location = $REGION
# Virtual-hosted requests: Host "BUCKET.localhost:PORT" (curl resolves
# *.localhost to the loopback itself).
storage_domain = localhost

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = $SECRET_KEY .admin
# No .admin: a user of the account that may not touch its containers
# (AccessDenied, t-s3-endpoints.sh).
user_test_reader = reading

[filter:copy]
use = egg:swift#copy

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo
EOF
    printf 'machine 127.0.0.1 login %s password %s\n' "$ACCESS_KEY" "$SECRET_KEY" >"$D/netrc"
    chmod 600 "$D/netrc"
}

# ---- start ------------------------------------------------------------------

print_env() {
    cat "$D/env"
}

ms() { echo $(( $(date +%s%N) / 1000000 )); }

# launch: fresh ports, rings and configs, then the four servers; true once
# they all answer /healthcheck, false when one exited first (its port taken
# in between, say) or after 30 s.
launch() {
    local ports s i code port
    ports=$(setup) || die "ring setup failed"
    # shellcheck disable=SC2086
    set -- $ports
    write_configs "$@"
    S3_ENDPOINT=http://127.0.0.1:$4
    for s in "${SERVERS[@]}"; do
        "$PY" "$D/swiftd.py" "$s" "$D/$s.conf" "$D/log/$s.log" </dev/null \
            >"$D/log/$s.out" 2>&1 &
        echo $! >"$D/run/$s.pid"
    done
    # The backends' own /healthcheck: the proxy error-limits a node that
    # refused its connections, so it is not asked before they all answer.
    for i in $(seq 300); do
        code=""
        for port in "$@"; do
            code="$code$(http_code "http://127.0.0.1:$port/healthcheck")"
        done
        [ "$code" = 200200200200 ] && return 0
        running || break
        sleep 0.1
    done
    stop
    return 1
}

# show_logs: the end of every non-empty log, on stderr.
show_logs() {
    local f
    for f in "$D"/log/*.out "$D"/log/*.log; do
        [ -s "$f" ] || continue
        echo "--- $f" >&2
        tail -n 5 "$f" >&2
    done
}

start() {
    local i code t0 t1 t3
    t0=$(ms)
    mkdir -p "$D/log" "$D/run" "$D/srv/sdb1"
    ensure_pkgs
    D=$(cd "$D" && pwd -P)

    # Already up for this DIR: the same settings again.
    if running && [ -s "$D/env" ]; then
        S3_ENDPOINT=$(sed -n 's/^S3_ENDPOINT=//p' "$D/env")
        if [ "$(http_code "$S3_ENDPOINT/healthcheck")" = 200 ] && [ "$(s3_list)" = 200 ]; then
            print_env
            return 0
        fi
    fi
    stop
    rm -f "$D/env"

    t1=$(ms)
    write_launcher
    for i in 1 2 3; do
        launch && break
        if [ $i = 3 ]; then
            show_logs
            die "Swift did not start (logs: $D/log)"
        fi
        say "servers did not come up; again, on other ports"
    done
    t3=$(ms)
    for i in $(seq 50); do
        code=$(s3_list)
        [ "$code" = 200 ] && break
        sleep 0.2
    done
    if [ "$code" != 200 ]; then
        show_logs
        stop
        die "a signed S3 ListBuckets answered $code (logs: $D/log)"
    fi
    cat >"$D/env" <<EOF
S3_ENDPOINT=$S3_ENDPOINT
AWS_ACCESS_KEY_ID=$ACCESS_KEY
AWS_SECRET_ACCESS_KEY=$SECRET_KEY
AWS_REGION=$REGION
EOF
    print_env
    say "ready in $(($(ms) - t0)) ms (packages $((t1 - t0)), rings, configs and servers $((t3 - t1)), first S3 request $(($(ms) - t3)))"
}

[ $# -eq 2 ] || usage
D=${2%/}
[ -n "$D" ] || usage
case $1 in
start) start ;;
stop)
    [ -d "$D" ] || exit 0
    D=$(cd "$D" && pwd -P)
    stop
    ;;
*) usage ;;
esac
