# Helpers for integration tests: source it from tests/integration/t-*.sh.
# Tests run the real spotd binary ($SPOTD) on real processes and signals.
# Each check prints "PASS: name" or "FAIL: name: why"; tests/run counts them.
set -u
: "${SPOTD:?run through tests/run or make check}"
T=$(mktemp -d /tmp/spotd-it.XXXXXX)
trap 'cleanup' EXIT
_bg_pids=()

cleanup() {
    local p
    for p in "${_bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$T"
}

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1${2:+: $2}"; }

# check NAME CONDITION...: pass when the command succeeds.
check() {
    local name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name" "$*"; fi
}

# expect_eq NAME EXPECTED ACTUAL
expect_eq() {
    if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "expected '$2', got '$3'"; fi
}

# run_spotd ARGS...: run spotd in the foreground (bounded); sets RC, and
# leaves its stderr in $T/stderr and stdout in $T/stdout.
run_spotd() {
    timeout -k 2 60 "$SPOTD" "$@" >"$T/stdout" 2>"$T/stderr"
    RC=$?
}

# start_spotd ARGS...: run spotd in the background; sets SPOTD_PID.
start_spotd() {
    "$SPOTD" "$@" >"$T/stdout" 2>"$T/stderr" &
    SPOTD_PID=$!
    _bg_pids+=("$SPOTD_PID")
}

# wait_exit PID [SECONDS]: wait for a background spotd; sets RC (124 on
# time-out, after which the process is killed).
wait_exit() {
    local pid=$1 limit=$(( ${2:-20} * 10 )) i=0
    while kill -0 "$pid" 2>/dev/null && [ "$(proc_state "$pid")" != Z ]; do
        i=$((i + 1))
        if [ $i -gt $limit ]; then
            kill -KILL "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            RC=124
            return
        fi
        sleep 0.1
    done
    wait "$pid"
    RC=$?
}

# wait_for SECONDS COMMAND...: poll until the command succeeds.
wait_for() {
    local limit=$(( $1 * 10 )) i=0
    shift
    until "$@"; do
        i=$((i + 1))
        [ $i -gt $limit ] && return 1
        sleep 0.1
    done
}

# proc_state PID: the one-letter state of a process ("" when gone).
proc_state() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    s=${s##*) }
    echo "${s%% *}"
}

# children PID: pids whose parent is PID.
children() {
    cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -v '^$'
}

# zombies_of PID: count of zombie children of PID.
zombies_of() {
    local n=0 c
    for c in $(children "$1"); do
        [ "$(proc_state "$c")" = Z ] && n=$((n + 1))
    done
    echo $n
}

# alive PID...: true when every pid exists and is not a zombie.
alive() {
    local p s
    for p in "$@"; do
        s=$(proc_state "$p")
        [ -n "$s" ] && [ "$s" != Z ] || return 1
    done
}

# gone PID...: true when no pid exists (or only as a zombie).
gone() {
    local p s
    for p in "$@"; do
        s=$(proc_state "$p")
        [ -z "$s" ] || [ "$s" = Z ] || return 1
    done
}

# event_count FILE EVENT: how many records of that event the event log holds.
event_count() {
    grep -c "\"event\":\"$2\"" "$1" 2>/dev/null || true
}
