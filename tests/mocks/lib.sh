# Metadata mocks for bash tests.  Source it after tests/integration/lib.sh
# (or on its own):
#
#   . "$TOP/tests/integration/lib.sh"
#   . "$TOP/tests/mocks/lib.sh"
#   mock_start aws                      # sets MOCK_URL, MOCK_PID, MOCK_PORT
#   mock_state '{"notice":{"action":"terminate","time":"2017-09-18T08:22:00Z"}}'
#   mock_count /latest/api/token PUT    # -> 1
#   mock_stop
#
# Only python3 is needed (no curl).  Every name here starts with mock_ or
# MOCK_, so nothing of the integration library is redefined.  A mock is test
# infrastructure, not part of the tree under test: it runs without
# SPOT_IT_TAG (so `tagged` and `none_left` never count it) and goes into
# _bg_pids when that array exists, so the integration library's cleanup
# still kills it.

MOCK_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOCK_URL=${MOCK_URL:-}
MOCK_PID=${MOCK_PID:-}
MOCK_PORT=${MOCK_PORT:-}
MOCK_CLOUD=${MOCK_CLOUD:-}
MOCK_LOG=${MOCK_LOG:-}

_mockctl() {
    python3 "$MOCK_LIB_DIR/mockctl.py" --url "$MOCK_URL" "$@"
}

# mock_start CLOUD [METADATA.PY ARGS...]: start a mock for CLOUD (aws, gcp,
# azure, alibaba, tencent) in the background on a free port; sets MOCK_URL
# (exported), MOCK_PORT, MOCK_PID, MOCK_CLOUD and MOCK_LOG (its stderr).
# Call it directly, never in $(...), so the variables stay set.  Returns 1
# when the mock does not come up within 10 s.
mock_start() {
    local cloud=$1 dir pf
    shift
    dir=${T:-${TMPDIR:-/tmp}}
    pf="$dir/mock-$cloud.$$.$RANDOM.port"
    MOCK_LOG="${pf%.port}.log"
    rm -f "$pf"
    env -u SPOT_IT_TAG python3 "$MOCK_LIB_DIR/metadata.py" --cloud "$cloud" --port 0 \
        --port-file "$pf" "$@" </dev/null >"$MOCK_LOG" 2>&1 &
    MOCK_PID=$!
    if declare -p _bg_pids >/dev/null 2>&1; then _bg_pids+=("$MOCK_PID"); fi
    MOCK_PORT=$(python3 "$MOCK_LIB_DIR/mockctl.py" wait-port "$pf" \
        --timeout 10 --pid "$MOCK_PID") || {
        echo "mock_start: $cloud mock did not start: $(cat "$MOCK_LOG" 2>/dev/null)" >&2
        return 1
    }
    MOCK_CLOUD=$cloud
    MOCK_URL="http://127.0.0.1:$MOCK_PORT"
    export MOCK_URL
}

# mock_stop [PID]: end the mock (default $MOCK_PID) and reap it.
mock_stop() {
    local pid=${1:-$MOCK_PID}
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    [ "$pid" = "$MOCK_PID" ] && MOCK_PID=
    return 0
}

# mock_state JSON: merge JSON into the scenario state (POST /_mock/state);
# prints the answer, fails on a rejected state.  "after": N delays it.
mock_state() { _mockctl state "$1"; }

# mock_get_state: the current state as JSON (with derived "_..." keys).
mock_get_state() { _mockctl get-state; }

# mock_reset: back to the defaults; clears the request log, flips, acks and
# pending scheduled flips.
mock_reset() { _mockctl reset >/dev/null; }

# mock_requests [PATH-PREFIX [METHOD]]: the request log as a JSON list.
mock_requests() { _mockctl requests --path "${1:-}" --method "${2:-}"; }

# mock_count [PATH-PREFIX [METHOD]]: how many requests matched.
mock_count() { _mockctl count --path "${1:-}" --method "${2:-}"; }

# mock_header NAME [PATH-PREFIX [METHOD]]: header NAME (any case) of the last
# matching request; fails when that request lacked it.
mock_header() { _mockctl header "$1" --path "${2:-}" --method "${3:-}"; }

# mock_wait_requests N [PATH-PREFIX [METHOD [SECONDS]]]: wait until N
# matching requests were logged (default 10 s); fails on time-out.
mock_wait_requests() {
    _mockctl wait-requests --count "$1" --path "${2:-}" --method "${3:-}" \
        --timeout "${4:-10}" >/dev/null
}

# mock_request_ms PATH-PREFIX [METHOD]: the wall-clock ms at which each
# matching request arrived, one a line, oldest first; to put an event-log
# record in order among them (ordering, not latency, so a loaded machine
# cannot fail it).
mock_request_ms() {
    mock_requests "$1" "${2:-}" |
        python3 -c 'import json,sys; [print(int(q["time"] * 1000)) for q in json.load(sys.stdin)]'
}

# mock_count_ms PATH-PREFIX METHOD FROM-MS TO-MS: how many matching
# requests arrived in [FROM-MS, TO-MS) (wall-clock ms, as mock_request_ms,
# mock_flip_ms and now_ms give): a rate, or what came during a fault.
mock_count_ms() {
    mock_request_ms "$1" "$2" | awk -v a="$3" -v b="$4" '$1 >= a && $1 < b { n++ } END { print n + 0 }'
}

# mock_flips: the flips that took effect, as JSON.
mock_flips() { _mockctl flips; }

# mock_flip_ms [N]: wall-clock ms of flip N (1-based; default the last), to
# compare with now_ms or ts_ms of an event-log record.
mock_flip_ms() { _mockctl flip-time --ms --index "${1:-0}"; }

# mock_acks: Azure acknowledgements (POSTed StartRequests) as JSON.
mock_acks() { _mockctl acks; }

# ---- faultproxy.py: a fault-injecting proxy in front of an S3 server ------
#
#   fault_start "${S3_ENDPOINT#http://}"   # sets FAULT_URL, FAULT_PORT, FAULT_PID
#   fault_rules '[{"every":5,"method":"PUT","action":"503","times":3}]'
#   ... point spotd at $FAULT_URL instead of $S3_ENDPOINT ...
#   [ "$(fault_count PUT '' 503)" = 3 ]
#   fault_stop
#
# The same conventions as the mock_ helpers: FAULT_ and fault_ names only;
# the proxy runs without SPOT_IT_TAG and goes into _bg_pids.

FAULT_URL=${FAULT_URL:-}
FAULT_PID=${FAULT_PID:-}
FAULT_PORT=${FAULT_PORT:-}
FAULT_LOG=${FAULT_LOG:-}

# _faultctl call METHOD PATH [BODY] | count [METHOD [REGEX [ACTION]]] |
# stat NAME: talk to the control API at $FAULT_URL with urllib.  Prints the
# answer; status 1 when it is not a 200, 2 when the proxy cannot be reached.
_faultctl() {
    python3 - "$FAULT_URL" "$@" <<'PY'
import json, sys, urllib.error, urllib.parse, urllib.request
url, cmd, args = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3:]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method,
                                 data=None if body is None else body.encode())
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (OSError, ValueError) as e:
        sys.exit("faultproxy at %r: %s" % (url, e))
if cmd == "call":
    status, text = call(*args)
    print(text)
    sys.exit(0 if status == 200 else 1)
if cmd == "count":
    method, rx, action = (args + ["", "", ""])[:3]
    q = urllib.parse.urlencode({"method": method, "path": rx})
    status, text = call("GET", "/_fault/log?" + q)
    if status != 200:
        sys.exit("faultproxy: log: %d %s" % (status, text))
    print(sum(1 for e in json.loads(text) if not action or e["action"] == action))
if cmd == "stat":
    status, text = call("GET", "/_fault/stats")
    print(json.loads(text)[args[0]])
PY
}

# fault_start UPSTREAM [FAULTPROXY.PY ARGS...]: start a proxy to UPSTREAM
# (HOST:PORT, e.g. "${S3_ENDPOINT#http://}") in the background on a free
# port; sets FAULT_URL (exported), FAULT_PORT, FAULT_PID and FAULT_LOG (its
# stderr).  Call it directly, never in $(...).  Returns 1 when the proxy
# does not come up within 10 s.
fault_start() {
    local up=$1 dir pf
    shift
    dir=${T:-${TMPDIR:-/tmp}}
    pf="$dir/faultproxy.$$.$RANDOM.port"
    FAULT_LOG="${pf%.port}.log"
    rm -f "$pf"
    env -u SPOT_IT_TAG python3 "$MOCK_LIB_DIR/faultproxy.py" --upstream "$up" --port 0 \
        --port-file "$pf" "$@" </dev/null >"$FAULT_LOG" 2>&1 &
    FAULT_PID=$!
    if declare -p _bg_pids >/dev/null 2>&1; then _bg_pids+=("$FAULT_PID"); fi
    FAULT_PORT=$(python3 "$MOCK_LIB_DIR/mockctl.py" wait-port "$pf" \
        --timeout 10 --pid "$FAULT_PID") || {
        echo "fault_start: faultproxy did not start: $(cat "$FAULT_LOG" 2>/dev/null)" >&2
        return 1
    }
    FAULT_URL="http://127.0.0.1:$FAULT_PORT"
    export FAULT_URL
}

# fault_stop [PID]: end the proxy (default $FAULT_PID) and reap it.
fault_stop() {
    local pid=${1:-$FAULT_PID}
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    [ "$pid" = "$FAULT_PID" ] && FAULT_PID=
    return 0
}

# fault_rules JSON: replace the rules (a JSON list; '[]' clears them); fails,
# printing the error, on a rejected list.
fault_rules() { _faultctl call POST /_fault/rules "$1"; }

# fault_get_rules: the rules with their "matched" and "fired" counts.
fault_get_rules() { _faultctl call GET /_fault/rules; }

# fault_log: every proxied request as a JSON list.
fault_log() { _faultctl call GET /_fault/log; }

# fault_count [METHOD [PATH-REGEX [ACTION]]]: how many logged requests match
# (empty arguments match all; ACTION "500", "reset", ... the fault applied).
fault_count() { _faultctl count "$@"; }

# fault_stats: {"requests", "bytes_in", "bytes_out"} as JSON.
fault_stats() { _faultctl call GET /_fault/stats; }

# fault_stat NAME: one of the stats, e.g. fault_stat bytes_in.
fault_stat() { _faultctl stat "$1"; }

# fault_reset: clear the rules, the log and the counters.
fault_reset() { _faultctl call POST /_fault/reset "" >/dev/null; }

# ---- Azure documents ----

# rfc1123_in SECONDS: an HTTP date (Azure's NotBefore) that many seconds
# from now.
rfc1123_in() { LC_ALL=C date -u -d "@$(( $(date +%s) + $1 ))" '+%a, %d %b %Y %H:%M:%S GMT'; }

# azure_event ID TYPE RESOURCES-JSON NOTBEFORE: one Scheduled Events event
# as documented.
azure_event() {
    printf '{"EventId":"%s","EventStatus":"Scheduled","EventType":"%s","ResourceType":"VirtualMachine","Resources":%s,"NotBefore":"%s","Description":"test","EventSource":"Platform","DurationInSeconds":-1}' "$1" "$2" "$3" "$4"
}

# azure_cmd FILE: write a command for spotd to wrap that runs until TERM,
# then exits 0 at once (TERM interrupts its wait: a loaded machine can take
# seconds to end a sleep a trap would wait for); given a directory it
# notes "TERM" in DIR/got.
azure_cmd() {
    cat >"$1" <<'EOF2'
trap '[ -n "$1" ] && echo TERM >>"$1/got"; kill $! 2>/dev/null; exit 0' TERM
while :; do sleep 1 & wait $!; done
EOF2
}

# spotd_az DIR ARGS...: spotd in the background on the Azure mock, around
# $T/cmd.sh DIR (made by azure_cmd), its events in DIR/ev.
spotd_az() {
    local d=$1
    shift
    start_spotd run --cloud azure --metadata-url "$MOCK_URL" --events "$d/ev" "$@" -- sh "$T/cmd.sh" "$d"
}
