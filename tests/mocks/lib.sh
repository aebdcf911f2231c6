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

# mock_flips: the flips that took effect, as JSON.
mock_flips() { _mockctl flips; }

# mock_flip_ms [N]: wall-clock ms of flip N (1-based; default the last), to
# compare with now_ms or ts_ms of an event-log record.
mock_flip_ms() { _mockctl flip-time --ms --index "${1:-0}"; }

# mock_acks: Azure acknowledgements (POSTed StartRequests) as JSON.
mock_acks() { _mockctl acks; }
