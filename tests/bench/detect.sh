#!/usr/bin/env bash
# How fast spotd sees an interruption notice, and what watching costs while
# nothing happens, against the metadata mocks of tests/mocks/ (127.0.0.1
# only).  A report, not a test.
#
#   tests/bench/detect.sh                                  # several minutes
#   BENCH_FLIPS=5 BENCH_IDLE_SECONDS=10 tests/bench/detect.sh   # about 6 min
#   tests/bench/detect.sh outage                # the outage row alone, about 4 min
#
# Latency.  One spotd per cloud watches that cloud's mock; the mock is told
# to "flip" to a new notice (POST /_mock/state with "after": delay) and
# records the exact time.time() the flip took effect (GET /_mock/flips).
# The latency of a flip is the "detected" time of spotd's notice record in
# its event log minus that flip time.  Each flip carries a new event id (spotd
# drops a notice it has seen): aws a new instance-action time, alibaba and
# tencent a new termination time, azure a new EventId, all in 2099 so that
# the command is never stopped.  The delay before each flip is 0.25 s plus a
# random 0..1 poll interval, so the flips fall at random phases of the
# polling.  GCP flips maintenance_event NONE -> MIGRATE_ON_HOST_MAINTENANCE
# (advisory); before each flip but the first it goes back to NONE, and the
# flip waits until spotd's next long-poll is in the mock's request log.
# spotd names that event gcp:maintenance:MIGRATE_ON_HOST_MAINTENANCE:N, N
# counting the returns to NONE, so each GCP notice belongs to the last flip
# before it.  The clouds are measured one after the other.
#
# Goals (issue): polled clouds (aws, azure, alibaba, tencent) p99 <= poll
# interval + 100 ms; gcp (long-poll) p99 <= 50 ms.  p99 is nearest-rank, so
# with fewer than 100 flips it is the largest latency.
#
# Idle CPU.  Then one spotd per cloud, all at once, watches a mock with no
# notice for BENCH_IDLE_SECONDS after a 2 s warm-up; the CPU time of the
# spotd process only (sum of /proc/PID/task/*/schedstat first fields, or
# utime + stime in clock ticks where schedstat is unreadable) over that
# window, also as % of one core.  Goal: under 0.1 %.
#
# Baseline.  What AWS suggests instead: a bash loop, `while sleep 5; do
# curl -s -H "X-aws-ec2-metadata-token: $TOKEN" .../spot/instance-action;
# done`, run against a separate aws mock while the idle window runs, with
# flips at random phases of its 5 s period.  Skipped with a note when
# curl(1) is missing.  Its CPU (the loop's shell and everything it forked,
# in clock ticks) is a rough figure.
#
# Detection after an outage ("outage", also the last part of a whole run).
# For each cloud and each kind of fault (down, 500, hang, garbage; the
# mock's "fault" key), the mock fails for BENCH_OUTAGE_SECONDS (31) and then,
# in the same change, serves a terminating notice (aws instance-action,
# alibaba and tencent termination-time, azure a Preempt for this VM, all in
# 2099; gcp preempted TRUE).  The latency is spotd's "detected" minus the
# time the mock recorded for that change.  A trial is one new spotd against
# a mock of its own, started two requests before the fault and at a random
# phase of the poll interval; every trial of every cloud and fault runs at
# once (BENCH_OUTAGE_LANES mocks per cloud and fault, the trials spread
# over them).  Goal (issue): p99 <= the cloud's backoff cap
# (supervisord/watch.h) + the poll interval + 100 ms, and the largest at
# most 10 % of the cloud's shortest notice (aws, tencent 2 min; alibaba
# 5 min; azure, gcp 30 s); a notice not seen within BENCH_OUTAGE_WAIT s
# is missed, and fails the row.
#
# Environment: BENCH_FLIPS (20 per cloud), BENCH_IDLE_SECONDS (60),
# BENCH_POLL_MS (1000: spotd's --poll-interval, and the goal with it),
# BENCH_CLOUDS ("aws gcp azure alibaba tencent"), BENCH_CURL (1; 0 skips
# the baseline), BENCH_OUTAGE_SECONDS (31), BENCH_OUTAGE_TRIALS (5 per
# cloud and fault), BENCH_OUTAGE_LANES (mocks per cloud and fault, default
# the trials: all at once), BENCH_OUTAGE_FAULTS ("down 500 hang garbage";
# throttle too), BENCH_OUTAGE_WAIT (40), BENCH_KEEP (0; 1 keeps the scratch
# folder: every event log, spotd log and mock record), O (build: spotd is
# $O/spotd, built with make when missing).  The binary is copied aside
# first, so a rebuild during the run does not change what is measured.
#
# Exit status: 0 with a report, whatever the numbers (missed or duplicate
# notices included, printed under "problems"); 1 when spotd could not be
# built, did not start, or died while watching; 2 on a usage error.
set -u

case $# in
0) mode=all ;;
1) case $1 in
    all | outage) mode=$1 ;;
    *) echo "usage: tests/bench/detect.sh [all | outage]" >&2; exit 2 ;;
    esac ;;
*) echo "usage: tests/bench/detect.sh [all | outage]" >&2; exit 2 ;;
esac

flips=${BENCH_FLIPS:-20}
idle=${BENCH_IDLE_SECONDS:-60}
poll_ms=${BENCH_POLL_MS:-1000}
clouds=${BENCH_CLOUDS:-aws gcp azure alibaba tencent}
outage_s=${BENCH_OUTAGE_SECONDS:-31}
outage_trials=${BENCH_OUTAGE_TRIALS:-5}
outage_lanes=${BENCH_OUTAGE_LANES:-$outage_trials}
outage_faults=${BENCH_OUTAGE_FAULTS:-down 500 hang garbage}
wait_s=${BENCH_OUTAGE_WAIT:-40}
for v in flips idle poll_ms outage_s outage_trials outage_lanes wait_s; do
    case ${!v} in '' | *[!0-9]* | 0)
        echo "detect.sh: BENCH_FLIPS, BENCH_IDLE_SECONDS, BENCH_POLL_MS and BENCH_OUTAGE_SECONDS," \
            "_TRIALS, _LANES and _WAIT must be positive whole numbers" >&2
        exit 2 ;;
    esac
done
[ "$flips" -le 3000 ] || { echo "detect.sh: BENCH_FLIPS at most 3000" >&2; exit 2; }
[ "$outage_lanes" -le "$outage_trials" ] || outage_lanes=$outage_trials
for c in $clouds; do
    case $c in aws | gcp | azure | alibaba | tencent) ;;
    *) echo "detect.sh: unknown cloud '$c' in BENCH_CLOUDS" >&2; exit 2 ;;
    esac
done
n=0
for f in $outage_faults; do
    case $f in down | 500 | throttle | hang | garbage) n=$((n + 1)) ;;
    *) echo "detect.sh: BENCH_OUTAGE_FAULTS: '$f' is not down, 500, throttle, hang or garbage" >&2
       exit 2 ;;
    esac
done
n=$((n * $(wc -w <<<"$clouds") * outage_lanes))
[ "$n" -le 200 ] || { echo "detect.sh: $n outage mocks at once; at most 200 (BENCH_OUTAGE_LANES)" >&2; exit 2; }

root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/bench/lib.sh"
O=${O:-build}
case $O in /*) built=$O/spotd ;; *) built=$root/$O/spotd ;; esac
if [ ! -x "$built" ]; then
    echo "detect.sh: $built missing, building it with make" >&2
    if ! make -C "$root" O="$O" >&2 || [ ! -x "$built" ]; then
        echo "detect.sh: make did not produce $built" >&2
        exit 1
    fi
fi
command -v python3 >/dev/null || { echo "detect.sh: the mocks need python3" >&2; exit 1; }
# The interpreter itself, found once: a python3 on PATH may be a wrapper
# (pyenv's shim costs about 0.4 s of CPU per start, Python itself 0.03 s),
# and the outage row starts Python a few hundred times at once.
py=$(python3 -c 'import sys; print(sys.executable)') && [ -x "$py" ] || py=python3

# Settings of the caller's environment must not change what is measured.
for v in $(compgen -e | grep '^SPOTD_'); do unset "$v"; done

mockdir=$root/tests/mocks
tmp=$(mktemp -d /tmp/spotd-detect.XXXXXX) || exit 1
spotd=$tmp/spotd
cp "$built" "$spotd" || exit 1

tick=$(getconf CLK_TCK 2>/dev/null) || tick=100
case $tick in '' | *[!0-9]* | 0) tick=100 ;; esac

declare -A URL=() MPID=()
spotds=()              # spotd PIDs that may still run
others=()              # loops and mocks: killed last
status=0
problems=()
notes=()

# tagged: the PIDs of the processes that carry this run's BENCH_DETECT_TAG
# (spotd passes its environment on, so this finds what a dead spotd left).
# shellcheck disable=SC2317  # invoked from traps
tagged() {
    local f
    for f in /proc/[0-9]*/environ; do
        grep -qzxF "BENCH_DETECT_TAG=$tmp" "$f" 2>/dev/null || continue
        f=${f#/proc/}
        echo "${f%/environ}"
    done
}

# alive PID: the process exists and is not a zombie.
alive() {
    local line rest
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    rest=${line##*) }
    case ${rest%% *} in Z | X) return 1 ;; esac
    return 0
}

# kill_tree PID: SIGKILL to PID and everything below it, then reap it.
kill_tree() {
    # shellcheck disable=SC2046
    kill -KILL $(descendants "$1") "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

# shellcheck disable=SC2317  # invoked from traps
cleanup() {
    [ "$cleaned" = 1 ] && return
    cleaned=1
    local p
    if [ ${#spotds[@]} -gt 0 ]; then
        for p in "${spotds[@]}"; do kill -TERM "$p" 2>/dev/null; done
        sleep 0.2
    fi
    for p in "${spotds[@]}" "${others[@]}"; do kill_tree "$p"; done
    # shellcheck disable=SC2046
    kill -KILL $(tagged) 2>/dev/null
    if [ "${BENCH_KEEP:-0}" = 1 ]; then
        echo "detect.sh: event logs, spotd logs and mock records kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
cleaned=0
trap cleanup EXIT
trap 'echo "detect.sh: interrupted" >&2; cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM HUP

# now_us: sets NOW_US, wall-clock microseconds, with no fork.
now_us() { local t=$EPOCHREALTIME; NOW_US=$((10#${t/./})); }

ctl() { "$py" "$mockdir/mockctl.py" "$@"; }

# launch_mock NAME CLOUD: start a mock and set MPID[NAME]; await_mock NAME
# CLOUD waits for it to listen and sets URL[NAME] (exit 1 when it did not
# start).  Launching many first and then awaiting them starts them together.
launch_mock() {
    "$py" "$mockdir/metadata.py" --cloud "$2" --port 0 --port-file "$tmp/mock.$1.port" \
        </dev/null >"$tmp/mock.$1.log" 2>&1 &
    MPID[$1]=$!
    others+=($!)
}
await_mock() {
    local port
    if ! port=$(ctl wait-port "$tmp/mock.$1.port" --timeout 20 --pid "${MPID[$1]}"); then
        echo "detect.sh: the $2 mock did not start: $(cat "$tmp/mock.$1.log")" >&2
        exit 1
    fi
    URL[$1]="http://127.0.0.1:$port"
}

# start_mock NAME CLOUD: sets URL[NAME] and MPID[NAME].
start_mock() { launch_mock "$1" "$2"; await_mock "$1" "$2"; }

# start_spotd CLOUD EVENTS LOG [URL]: sets SPID.  URL: the mock, by default
# URL[CLOUD].
start_spotd() {
    BENCH_DETECT_TAG=$tmp "$spotd" run --cloud "$1" --metadata-url "${4:-${URL[$1]}}" \
        --events "$2" --poll-interval "${poll_ms}ms" -- sleep 86400 </dev/null >"$3" 2>&1 &
    SPID=$!
    spotds+=("$SPID")
}

# forget PID: drop PID from spotds.
forget() {
    local p keep=()
    for p in "${spotds[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    spotds=("${keep[@]}")
}

# died PID WHAT LOG: spotd is gone while it should be watching: a failure.
died() {
    local rc
    wait "$1" 2>/dev/null
    rc=$?
    forget "$1"
    problems+=("spotd died $2 (exit status $rc); the end of its log:")
    while IFS= read -r l; do problems+=("    $l"); done < <(tail -n 5 "$3")
    status=1
}

# stop_spotd PID EVENTS: SIGTERM, and note the time for the event-log check
# (anything stopping before it is a bug); SIGKILL after 5 s.
stop_spotd() {
    local pid=$1 k
    now_us
    printf '%s\t%s\n' "$2" $((NOW_US / 1000)) >>"$tmp/runs.tsv"
    kill -TERM "$pid" 2>/dev/null
    for ((k = 0; k < 100; k++)); do
        alive "$pid" || break
        sleep 0.05
    done
    if alive "$pid"; then
        problems+=("spotd (pid $pid) still ran 5 s after SIGTERM; killed it")
        kill_tree "$pid"
    fi
    wait "$pid" 2>/dev/null
    forget "$pid"
}

# wait_for FILE NEEDLE COUNT TIMEOUT_MS PID: wait until COUNT lines of FILE
# hold NEEDLE; 1 on time-out, 2 when PID (if not empty) is gone.
wait_for() {
    local end n
    now_us
    end=$((NOW_US + $4 * 1000))
    while :; do
        n=$(grep -cF -- "$2" "$1" 2>/dev/null)
        [ "${n:-0}" -ge "$3" ] && return 0
        if [ -n "$5" ] && ! alive "$5"; then return 2; fi
        now_us
        [ "$NOW_US" -lt "$end" ] || return 1
        sleep 0.05
    done
}

# delay MS: sets DELAY to "0.25 + random 0..MS ms" in seconds.
delay() {
    local r=$(((RANDOM * 32768 + RANDOM) % $1 + 250))
    DELAY=$(printf '%d.%03d' $((r / 1000)) $((r % 1000)))
}

# hms I: sets HMS to I seconds as HH:MM:SS.
hms() { HMS=$(printf '%02d:%02d:%02d' $(($1 / 3600)) $(($1 / 60 % 60)) $(($1 % 60))); }

# The notice endpoint each watcher polls first, and a flip per cloud.
declare -A NOTICE_PATH=(
    [aws]=/latest/meta-data/spot/instance-action
    [azure]=/metadata/scheduledevents
    [alibaba]=/latest/meta-data/instance/spot/termination-time
    [tencent]=/latest/meta-data/spot/termination-time
    [gcp]="/computeMetadata/v1/instance/maintenance-event?wait_for_change=true"
)

# flip_for CLOUD I: sets STATE (the JSON to POST, without "after"), NEEDLE
# (what spotd's notice record will hold), COUNT (how many records will hold
# it once flip I is seen) and MATCH (id: NEEDLE is the whole event id;
# prefix: the event id starts with it).
flip_for() {
    hms "$2"
    COUNT=1 MATCH=id
    case $1 in
    aws)
        STATE="{\"notice\":{\"action\":\"terminate\",\"time\":\"2099-01-01T${HMS}Z\"}}"
        EID="aws:instance-action:terminate:2099-01-01T${HMS}Z" ;;
    alibaba)
        STATE="{\"notice\":\"2099-01-01T${HMS}Z\"}"
        EID="alibaba:termination:2099-01-01T${HMS}Z" ;;
    tencent)
        STATE="{\"notice\":\"2099-01-01 ${HMS}\"}"
        EID="tencent:termination:2099-01-01 ${HMS}" ;;
    azure)
        EID=$(printf '0BE4C0DE-0000-4000-8000-%012d' "$2")
        STATE="{\"notice\":{\"EventId\":\"$EID\",\"NotBefore\":\"Thu, 01 Jan 2099 00:00:00 GMT\"}}" ;;
    gcp)
        STATE='{"maintenance_event":"MIGRATE_ON_HOST_MAINTENANCE"}'
        # spotd adds ":N", N counting the returns to NONE, so that a second
        # maintenance event is not taken for the first: the flips are told
        # apart by their order, and each one is a new record.
        NEEDLE='"event_id":"gcp:maintenance:MIGRATE_ON_HOST_MAINTENANCE'
        COUNT=$2 MATCH=prefix
        return ;;
    esac
    NEEDLE="\"event_id\":\"$EID\""
}

# flip CLOUD I EVENTS PID LOG: schedule flip I, wait for spotd's notice;
# 1 when spotd died.
flip() {
    local c=$1 i=$2 ev=$3 pid=$4 ans rc n0
    flip_for "$c" "$i"
    if [ "$c" = gcp ] && [ "$i" -gt 1 ]; then
        # Back to NONE first (not measured); spotd's long-poll answers with
        # it, and the flip waits for the next long-poll to be in flight.
        n0=$(ctl --url "${URL[$c]}" count --path "${NOTICE_PATH[$c]}")
        ctl --url "${URL[$c]}" state '{"maintenance_event":"NONE"}' >/dev/null
        if ! ctl --url "${URL[$c]}" wait-requests --count $((n0 + 1)) \
            --path "${NOTICE_PATH[$c]}" --timeout 10 >/dev/null; then
            alive "$pid" || { died "$pid" "during $c flip $i" "$5"; return 1; }
            problems+=("gcp flip $i: no new maintenance-event long-poll within 10 s of the return to NONE")
        fi
    fi
    delay "$poll_ms"
    if ! ans=$(ctl --url "${URL[$c]}" state "${STATE%\}},\"after\":$DELAY}"); then
        problems+=("$c flip $i: the mock refused $STATE: $ans")
        return 0
    fi
    printf 'spotd-%s\t%s\t%s\t%s\t%s\t%s\n' "$MATCH" "$c" "$i" "$NEEDLE" "$ev" "$ans" \
        >>"$tmp/lat.tsv"
    sleep "$DELAY"
    wait_for "$ev" "$NEEDLE" "$COUNT" $((3 * poll_ms + 5000)) "$pid"
    rc=$?
    if [ $rc = 2 ]; then
        died "$pid" "during $c flip $i" "$5"
        return 1
    fi
    return 0
}

# ---- the curl baseline: what AWS documents, as a user would run it ----

# curl_loop URL OUT: print "us<TAB>body" to OUT whenever the body changes.
curl_loop() {
    local TOKEN body last='' t
    TOKEN=$(curl -s --noproxy '*' -X PUT "$1/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 21600")
    while sleep 5; do
        body=$(curl -s -f --noproxy '*' -H "X-aws-ec2-metadata-token: $TOKEN" \
            "$1/latest/meta-data/spot/instance-action") || continue
        [ "$body" = "$last" ] && continue
        last=$body
        t=$EPOCHREALTIME
        printf '%s\t%s\n' "${t/./}" "$body" >>"$2"
    done
}

# curl_driver: BENCH_FLIPS flips against the baseline's mock, each at a
# random phase of the loop's 5 s period.
curl_driver() {
    local i ans out=$tmp/curl.out
    for ((i = 1; i <= flips; i++)); do
        hms "$i"
        delay 5000
        ans=$(ctl --url "${URL[curl]}" state \
            "{\"notice\":{\"action\":\"terminate\",\"time\":\"2099-01-02T${HMS}Z\"},\"after\":$DELAY}") || continue
        printf 'curl\tcurl loop (5 s)\t%s\t%s\t%s\t%s\n' "$i" "2099-01-02T${HMS}Z" "$out" "$ans" \
            >>"$tmp/curl.tsv"
        sleep "$DELAY"
        wait_for "$out" "2099-01-02T${HMS}Z" 1 15000 "" || true
    done
    ctl --url "${URL[curl]}" flips >"$tmp/flips.curl.json"
}

# ---- latency, one cloud after the other ----

bench_latency() {
    for c in $clouds; do
        echo "detect.sh: $c: $flips flips..." >&2
        ev=$tmp/ev.$c log=$tmp/log.$c
        start_spotd "$c" "$ev" "$log"
        if ! ctl --url "${URL[$c]}" wait-requests --count 1 --path "${NOTICE_PATH[$c]}" \
            --timeout 10 >/dev/null; then
            if alive "$SPID"; then
                problems+=("$c: spotd never polled ${NOTICE_PATH[$c]} within 10 s; skipped")
                stop_spotd "$SPID" "$ev"
            else
                died "$SPID" "before its first $c poll" "$log"
            fi
            continue
        fi
        ok=1
        for ((i = 1; i <= flips; i++)); do
            flip "$c" "$i" "$ev" "$SPID" "$log" || { ok=0; break; }
        done
        if [ $ok = 1 ]; then
            sleep "$(printf '%d.%03d' $((poll_ms * 3 / 2000)) $((poll_ms * 3 / 2 % 1000)))"
            if alive "$SPID"; then stop_spotd "$SPID" "$ev"; else died "$SPID" "after the $c flips" "$log"; fi
        fi
        ctl --url "${URL[$c]}" flips >"$tmp/flips.$c.json"
    done
}

# ---- idle CPU, every cloud at once (and the curl baseline meanwhile) ----

# readcpu PID: sets P_ns (schedstat, all threads), P_sched (0: a schedstat
# was unreadable), P_ticks (utime + stime + cutime + cstime with C=1, else
# utime + stime).
readcpu() {
    local line f v a
    P_ns=0 P_sched=1
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    # shellcheck disable=SC2206
    a=(${line##*) })            # a[0] is field 3
    P_ticks=$((a[11] + a[12]))
    [ "${2:-0}" = 1 ] && P_ticks=$((P_ticks + a[13] + a[14]))
    for f in /proc/"$1"/task/*/schedstat; do
        read -r v _ 2>/dev/null <"$f" || { P_sched=0; continue; }
        P_ns=$((P_ns + v))
    done
}

bench_idle() {
    if [ $use_curl = 1 ]; then
        : >"$tmp/curl.out"
        curl_loop "${URL[curl]}" "$tmp/curl.out" &
        curl_pid=$!
        others+=("$curl_pid")
        now_us
        curl_t0=$NOW_US
        sleep 0.3                          # its token first
        curl_driver &
        driver_pid=$!
        others+=("$driver_pid")
    fi

    echo "detect.sh: idle CPU for $idle s..." >&2
    declare -A IPID=() B_NS=() B_TICKS=() B_SCHED=()
    idle_clouds=()
    for c in $clouds; do
        ctl --url "${URL[$c]}" reset >/dev/null
        start_spotd "$c" "$tmp/ev.idle.$c" "$tmp/log.idle.$c"
        IPID[$c]=$SPID
    done
    for c in $clouds; do
        if ctl --url "${URL[$c]}" wait-requests --count 1 --path "${NOTICE_PATH[$c]}" \
            --timeout 10 >/dev/null; then
            idle_clouds+=("$c")
        elif alive "${IPID[$c]}"; then
            problems+=("$c (idle): spotd never requested ${NOTICE_PATH[$c]} within 10 s; not measured")
        else
            died "${IPID[$c]}" "before its first $c request (idle)" "$tmp/log.idle.$c"
        fi
    done
    sleep 2                                # warm-up: start-up is left out
    for c in "${idle_clouds[@]}"; do
        readcpu "${IPID[$c]}"
        B_NS[$c]=$P_ns B_TICKS[$c]=$P_ticks B_SCHED[$c]=$P_sched
    done
    now_us
    i_t0=$NOW_US
    sleep "$idle" &                        # waited for, so a signal is taken at once
    others+=($!)
    wait $!
    now_us
    i_t1=$NOW_US
    for c in "${idle_clouds[@]}"; do
        if ! alive "${IPID[$c]}" || ! readcpu "${IPID[$c]}"; then
            died "${IPID[$c]}" "while idle-watching $c" "$tmp/log.idle.$c"
            continue
        fi
        sched=$((P_sched & B_SCHED[$c]))
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" $((P_ns - B_NS[$c])) $((P_ticks - B_TICKS[$c])) \
            "$sched" "$i_t0" "$i_t1" "$tmp/requests.$c.json" >>"$tmp/idle.tsv"
    done
    for c in "${idle_clouds[@]}"; do
        ctl --url "${URL[$c]}" requests >"$tmp/requests.$c.json"
        stop_spotd "${IPID[$c]}" "$tmp/ev.idle.$c"
    done

    if [ $use_curl = 1 ]; then
        if alive "$driver_pid"; then
            echo "detect.sh: waiting for the curl loop's flips..." >&2
            wait "$driver_pid"
        fi
        now_us
        if readcpu "$curl_pid" 1; then
            printf 'curl loop (5 s)\t0\t%s\t0\t%s\t%s\t\n' "$P_ticks" "$curl_t0" "$NOW_US" \
                >>"$tmp/idle.tsv"
        fi
        kill_tree "$curl_pid"
        cat "$tmp/curl.tsv" >>"$tmp/lat.tsv" 2>/dev/null
    fi
}

# ---- detection after an outage, every cloud, fault and trial at once ----

# The goals' numbers: each cloud's backoff cap (supervisord/watch.h, read
# from the tree the script is in) and its shortest terminating notice.
# cap_of NAME DEFAULT: sets CAP to NAME's value in ms, or to DEFAULT.
cap_of() {
    CAP=$(sed -n "s/^#define $1 \([0-9][0-9]*\).*/\1/p" "$root/supervisord/watch.h" 2>/dev/null)
    if [ -z "$CAP" ]; then
        notes+=("note: $1 not found in supervisord/watch.h: the goal uses $2 ms")
        CAP=$2
    fi
}

# outage_notice CLOUD I: sets STATE (the terminating notice, as JSON), EID
# and MATCH (id: EID is the whole event id; prefix: the event id starts
# with it).  GCP's preempted notice is gcp:preempted:N.
outage_notice() {
    if [ "$1" = gcp ]; then
        STATE='{"preempted":true}' EID=gcp:preempted MATCH=prefix
        return
    fi
    flip_for "$1" "$2"
}

# outage_seen EVENTS EID MATCH: spotd's notice record is in EVENTS.  Bash
# builtins only: a hundred trials look every 0.2 s.
outage_seen() {
    local l want="\"event_id\":\"$2"
    [ "$3" = id ] && want+='"'
    [ -f "$1" ] || return 1
    while IFS= read -r l; do
        case $l in *'"event":"notice"'*"$want"* | *"$want"*'"event":"notice"'*) return 0 ;; esac
    done <"$1"
    return 1
}

# outage_problem TEXT: from a lane (a subshell), for the report.
outage_problem() { printf '%s\n' "$1" >>"$tmp/outage.problems"; }

# outage_start URL FAULT STATE: the fault now, and outage_s later its end
# with STATE in the same change, two POSTs from one process so that the
# outage lasts outage_s however slow a start of Python is; prints the
# second answer.
outage_start() {
    "$py" - "$1" "$2" "$3" "$outage_s" <<'PY'
import json, sys, urllib.error, urllib.request
url, fault, state, secs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def post(body):
    req = urllib.request.Request(url + "/_mock/state", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with opener.open(req, timeout=30) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        sys.exit("%d %s" % (e.code, e.read().decode(errors="replace")))
    except OSError as e:
        sys.exit(str(e))
post({"fault": fault})
state.update({"fault": None, "after": secs})
print(post(state))
PY
}

# outage_lane CLOUD FAULT NAME TRIAL...: the trials one after the other
# against mock NAME.  A trial: a new spotd, two of its requests answered, a
# random phase of the poll interval, then FAULT; outage_s later (the mock's
# own timer) the fault ends and the notice is served in the same change.
# It ends when spotd's notice record is in, or wait_s after the notice.
# Only the lane's last spotd is left running, and its mock's flips are
# fetched (by bench_outage) once every lane is done, so that no lane starts
# Python while others measure; at most the trials of a lane after its
# first do.
outage_lane() {
    local c=$1 f=$2 name=$3 i prev ev log pid='' ans end zfd k l n seen
    local url=${URL[$name]} path=${NOTICE_PATH[$1]%%\?*}
    shift 3
    [ "$c" = gcp ] && path=/computeMetadata/v1/instance/preempted
    exec {zfd}<> <(:)                  # read -t on it: a sleep without a fork
    for i in "$@"; do
        if [ -n "$pid" ]; then         # the lane's trial before this one
            kill -TERM "$pid" 2>/dev/null
            for ((k = 0; k < 100; k++)); do
                alive "$pid" || break
                read -r -t 0.05 -u "$zfd" _
            done
            kill_tree "$pid"
            ctl --url "$url" flips >"$tmp/outage/flips.$name.$prev"
            ctl --url "$url" reset >/dev/null
        fi
        prev=$i ev=$tmp/outage/ev.$name.$i log=$tmp/outage/log.$name.$i
        start_spotd "$c" "$ev" "$log" "$url"
        pid=$SPID
        # Two requests seen (each watcher's first one has been answered):
        # looked at once a second, not polled, as a hundred lanes start.
        read -r -t 2 -u "$zfd" _
        for ((k = 0; k < 20; k++)); do
            n=$(ctl --url "$url" count --path "$path") && [ "$n" -ge 2 ] && break
            read -r -t 1 -u "$zfd" _
        done
        if [ "$k" = 20 ]; then
            outage_problem "$c $f trial $i: spotd did not request $path twice within 22 s; skipped"
            continue
        fi
        delay "$poll_ms"
        read -r -t "$DELAY" -u "$zfd" _
        outage_notice "$c" "$i"
        if ! ans=$(outage_start "$url" "$f" "$STATE" 2>&1); then
            outage_problem "$c $f trial $i: the mock refused the outage: $ans"
            continue
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$f" "$name" "$i" "$MATCH" "$EID" \
            "$ev" "$tmp/outage/flips.$name.$i" "$ans" >>"$tmp/outage.tsv"
        now_us
        end=$((NOW_US + (outage_s + wait_s) * 1000000))
        read -r -t "$outage_s" -u "$zfd" _
        seen=0
        while :; do
            outage_seen "$ev" "$EID" "$MATCH" && { seen=1; break; }
            if ! alive "$pid"; then
                outage_seen "$ev" "$EID" "$MATCH" && { seen=1; break; }
                outage_problem "$c $f trial $i: spotd exited before its notice; the end of its log:"
                while IFS= read -r l; do outage_problem "    $l"; done < <(tail -n 5 "$log")
                break
            fi
            now_us
            [ "$NOW_US" -lt "$end" ] || break
            read -r -t 0.2 -u "$zfd" _
        done
        [ $seen = 1 ] || echo "detect.sh: $c $f trial $i: no notice within $wait_s s" >&2
    done
    [ -n "$pid" ] && printf '%s %s %s\n' "$pid" "$name" "$prev" >>"$tmp/outage.last"
}

bench_outage() {
    local c f l i p name n=0 lanes=() trials pids left
    mkdir -p "$tmp/outage"
    : >"$tmp/outage.tsv"
    : >"$tmp/outage.last"
    for c in $clouds; do
        for f in $outage_faults; do
            for ((l = 1; l <= outage_lanes; l++)); do
                launch_mock "o-$c-$f-$l" "$c"
                n=$((n + 1))
            done
        done
    done
    for c in $clouds; do
        for f in $outage_faults; do
            for ((l = 1; l <= outage_lanes; l++)); do await_mock "o-$c-$f-$l" "$c"; done
        done
    done
    echo "detect.sh: outage: $n mocks and spotds, $outage_trials trials per cloud and fault," \
        "each a $outage_s s outage..." >&2
    for c in $clouds; do
        for f in $outage_faults; do
            for ((l = 1; l <= outage_lanes; l++)); do
                trials=()
                for ((i = l; i <= outage_trials; i += outage_lanes)); do trials+=("$i"); done
                outage_lane "$c" "$f" "o-$c-$f-$l" "${trials[@]}" &
                lanes+=($!)
                others+=($!)
            done
        done
    done
    wait "${lanes[@]}"
    # Each lane's last trial: its mock's flips, then its spotd stopped.
    pids=()
    while read -r p name i; do
        ctl --url "${URL[$name]}" flips >"$tmp/outage/flips.$name.$i"
        kill -TERM "$p" 2>/dev/null
        pids+=("$p")
    done <"$tmp/outage.last"
    for ((i = 0; i < 100; i++)); do
        left=0
        for p in "${pids[@]}"; do alive "$p" && { left=1; break; }; done
        [ $left = 1 ] || break
        sleep 0.05
    done
    for p in "${pids[@]}"; do alive "$p" && kill_tree "$p"; done
    for c in $clouds; do
        for f in $outage_faults; do
            for ((l = 1; l <= outage_lanes; l++)); do kill "${MPID[o-$c-$f-$l]}" 2>/dev/null; done
        done
    done
    for c in $clouds; do
        for f in $outage_faults; do
            for ((l = 1; l <= outage_lanes; l++)); do wait "${MPID[o-$c-$f-$l]}" 2>/dev/null; done
        done
    done
    if [ -s "$tmp/outage.problems" ]; then
        mapfile -t -O ${#problems[@]} problems <"$tmp/outage.problems"
    fi
}

# ---- start ----

cores=$(nproc 2>/dev/null || echo '?')
cap_of WATCH_CAP_30S_MS 2000
cap30=$CAP
cap_of WATCH_CAP_2MIN_MS 5000
cap2m=$CAP
if [ "$mode" = all ]; then
    echo "detect.sh: $built (copied for the run), $flips flips per cloud," \
        "poll interval $poll_ms ms, idle window $idle s, then $outage_s s outages, $cores CPUs"
else
    echo "detect.sh: $built (copied for the run), detection after a $outage_s s outage:" \
        "$outage_faults; $outage_trials trials per cloud and fault, poll interval $poll_ms ms," \
        "$cores CPUs, load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
fi
: >"$tmp/lat.tsv"
: >"$tmp/runs.tsv"
: >"$tmp/idle.tsv"

use_curl=0
if [ "$mode" = all ]; then
    for c in $clouds; do start_mock "$c" "$c"; done
    if [ "${BENCH_CURL:-1}" = 1 ]; then
        if command -v curl >/dev/null; then
            use_curl=1
            start_mock curl aws
        else
            notes+=("note: curl(1) not installed: the \"curl loop (5 s)\" baseline was skipped")
        fi
    fi
    bench_latency
    bench_idle
fi
bench_outage

# ---- the report ----

cat >"$tmp/report.py" <<'EOF'
import glob, json, math, os, re, sys
from datetime import datetime, timezone

tmp, poll_ms, tick, clouds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
mode, outage_s, wait_s = sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
cap30, cap2m, faults = int(sys.argv[8]), int(sys.argv[9]), sys.argv[10].split()
try:
    problems = open(os.path.join(tmp, "problems.txt")).read().splitlines()   # the script's own
except FileNotFoundError:
    problems = []

def ms_of(ts):
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp() * 1000

def records(path):
    out = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    problems.append("%s line %d is not JSON: %r" % (os.path.basename(path), n, line[:120]))
    except FileNotFoundError:
        pass
    return out

flips = {}
def flip_time(name, answer):
    if name not in flips:
        try:
            flips[name] = json.load(open(os.path.join(tmp, "flips.%s.json" % name)))
        except (OSError, ValueError):
            flips[name] = []
    for f in flips[name]:
        if f.get("scheduled") and f.get("requested_at") == answer.get("requested_at"):
            return f["time"] * 1000
    return None

lat = {}          # row -> [latency ms]
expected = {}     # events file -> set of event ids
prefixes = {}     # events file -> set of event id prefixes
by_order = {}     # events file -> (row, [(flip number, flip ms)]) for prefix matches
order = []

def when_ms(r):
    return ms_of(r.get("detected") or r.get("ts"))

for line in open(os.path.join(tmp, "lat.tsv")):
    kind, row, i, needle, evfile, ans = line.rstrip("\n").split("\t", 5)
    if row not in lat:
        lat[row] = []
        order.append(row)
    mock = "curl" if kind == "curl" else row
    t = flip_time(mock, json.loads(ans))
    if t is None:
        problems.append("%s flip %s: the mock has no record of the flip taking effect" % (row, i))
        continue
    if kind == "curl":
        seen = []
        for l in open(evfile):
            us, body = l.rstrip("\n").split("\t", 1)
            if needle in body:
                seen.append(int(us) / 1000)
        if not seen:
            problems.append("curl loop: flip %s not seen within 15 s" % i)
            continue
        lat[row].append(seen[0] - t)
        continue
    if kind == "spotd-prefix":
        pre = re.match(r'"event_id":"(.*)$', needle).group(1)
        prefixes.setdefault(evfile, set()).add(pre)
        by_order.setdefault(evfile, (row, pre, []))[2].append((int(i), t))
        continue
    eid = re.match(r'"event_id":"(.*)"$', needle).group(1)
    expected.setdefault(evfile, set()).add(eid)
    hits = [r for r in records(evfile) if r.get("event") == "notice" and r.get("event_id") == eid]
    if not hits:
        problems.append("%s flip %s: MISSED: no notice with event_id %s within %d ms of the flip"
                        % (row, i, eid, 3 * poll_ms + 5000))
        continue
    if len(hits) > 1:
        problems.append("%s flip %s: DUPLICATE: %d notice records with event_id %s (detected %s)"
                        % (row, i, len(hits), eid, ", ".join(h.get("detected", "?") for h in hits)))
    lat[row].append(when_ms(hits[0]) - t)
    if hits[0].get("source") != row:
        problems.append("%s flip %s: notice source is %r" % (row, i, hits[0].get("source")))

# Prefix matches (gcp): each notice belongs to the last flip made before it
# was detected (1 ms of slack: "detected" is cut to the millisecond).
for evfile, (row, pre, fl) in by_order.items():
    fl.sort(key=lambda x: x[1])
    got = {n: [] for n, _ in fl}
    ids = {}
    for r in records(evfile):
        if r.get("event") != "notice" or not str(r.get("event_id", "")).startswith(pre):
            continue
        d = when_ms(r)
        ids.setdefault(r.get("event_id"), []).append(r.get("detected"))
        owner = [n for n, t in fl if t <= d + 1]
        if not owner:
            problems.append("%s: UNEXPECTED notice %s before the first flip (detected %s)"
                            % (row, r.get("event_id"), r.get("detected")))
            continue
        got[owner[-1]].append(r)
    for n, t in fl:
        hits = got[n]
        if not hits:
            problems.append("%s flip %d: MISSED: no notice %s... within %d ms of the flip"
                            % (row, n, pre, 3 * poll_ms + 5000))
            continue
        if len(hits) > 1:
            problems.append("%s flip %d: DUPLICATE: %d notices for one flip: %s"
                            % (row, n, len(hits), ", ".join("%s at %s" % (h.get("event_id"), h.get("detected"))
                                                           for h in hits)))
        lat[row].append(when_ms(hits[0]) - t)
    for eid, ds in ids.items():
        if len(ds) > 1:
            problems.append("%s: DUPLICATE event_id %s in %d notices (detected %s)"
                            % (row, eid, len(ds), ", ".join(ds)))

# Every spotd run: unexpected notices, and anything stopping before SIGTERM.
for line in open(os.path.join(tmp, "runs.tsv")):
    evfile, term_ms = line.rstrip("\n").split("\t")
    name = os.path.basename(evfile)
    rs = records(evfile)
    starts = [r for r in rs if r.get("event") == "child_start"]
    if len(starts) != 1:
        problems.append("%s: %d child_start records, expected 1" % (name, len(starts)))
    for r in rs:
        e = r.get("event")
        late = "ts" in r and ms_of(r["ts"]) >= int(term_ms)
        # SIGTERM is itself a notice to spotd: the one the benchmark sent is no surprise.
        eid = str(r.get("event_id", ""))
        if e == "notice" and not late and eid not in expected.get(evfile, set()) \
                and not any(eid.startswith(p) for p in prefixes.get(evfile, ())):
            problems.append("%s: UNEXPECTED notice %s (detected %s)" % (name, r.get("event_id"), r.get("detected")))
        if e in ("child_exit", "stop", "kill", "exit", "error", "restart") and "ts" in r \
                and not late:
            problems.append("%s: %s before the benchmark stopped spotd: %s" % (name, e, json.dumps(r)))

def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]

if mode == "all":
    print()
    print("Detection latency, ms from the mock's flip to spotd's \"detected\" (curl loop: to curl's answer)")
    fmt = "%-16s %-15s %5s %5s %7s %7s %7s %7s  %-13s %s"
    print(fmt % ("cloud", "watching", "flips", "seen", "min", "median", "p99", "max", "goal", "result"))
    for row in order:
        xs = lat[row]
        n = sum(1 for l in open(os.path.join(tmp, "lat.tsv")) if l.split("\t")[1] == row)
        if row == "gcp":
            how, goal = "long-poll", 50
        elif row.startswith("curl"):
            how, goal = "bash+curl, aws", None
        else:
            how, goal = "poll %d ms" % poll_ms, poll_ms + 100
        if not xs:
            print(fmt % (row, how, n, 0, "-", "-", "-", "-", "-", "no data"))
            continue
        p99 = pct(xs, 99)
        res = "baseline" if goal is None else ("met" if p99 <= goal and len(xs) == n else "NOT met")
        print(fmt % (row, how, n, len(xs), "%d" % round(min(xs)), "%d" % round(pct(xs, 50)), "%d" % round(p99),
                     "%d" % round(max(xs)), "-" if goal is None else "p99 <= %d" % goal, res))

    print()
    print("Idle CPU while watching, the spotd process only (curl loop: its shell and all it forked)")
    fmt = "%-16s %8s %9s %8s %8s  %-10s %s"
    print(fmt % ("cloud", "seconds", "cpu_ms", "% core", "req/s", "goal", "result"))
    for line in open(os.path.join(tmp, "idle.tsv")):
        c, ns, ticks, sched, t0, t1, reqfile = line.rstrip("\n").split("\t")
        secs = (int(t1) - int(t0)) / 1e6
        if sched == "1" and not (int(ns) == 0 and int(ticks) > 0):
            cpu_ms, src = int(ns) / 1e6, ""
        else:
            cpu_ms, src = int(ticks) * 1000 / tick, " (clock ticks)"
        rate = "-"
        if reqfile:
            try:
                reqs = json.load(open(reqfile))
                lo, hi = int(t0) / 1e6, int(t1) / 1e6
                rate = "%.2f" % (sum(1 for r in reqs if lo <= r["time"] <= hi) / secs)
            except (OSError, ValueError):
                pass
        share = cpu_ms / (secs * 1000) * 100
        if c.startswith("curl"):
            goal, res = "-", "baseline, rough" + src
        else:
            goal, res = "< 0.1 %", ("met" if share < 0.1 else "NOT met") + src
        print(fmt % (c, "%.1f" % secs, "%.2f" % cpu_ms, "%.4f" % share, rate, goal, res))

# Detection after an outage: a row per cloud and fault.
MIN_NOTICE_S = {"aws": 120, "tencent": 120, "alibaba": 300, "azure": 30, "gcp": 30}
CAP_MS = {"aws": cap2m, "tencent": cap2m, "alibaba": cap2m, "azure": cap30, "gcp": cap30}
outage, o_order, o_n, o_len = {}, [], {}, []
try:
    o_lines = open(os.path.join(tmp, "outage.tsv")).read().splitlines()
except FileNotFoundError:
    o_lines = []
for line in o_lines:
    c, f, name, i, match, eid, evfile, flipsfile, ans = line.split("\t", 8)
    key = (c, f)
    if key not in outage:
        outage[key] = []
        o_order.append(key)
    o_n[key] = o_n.get(key, 0) + 1
    try:
        fl = json.load(open(flipsfile))
    except (OSError, ValueError):
        fl = []
    req = json.loads(ans).get("requested_at")
    on = [x for x in fl if x.get("scheduled") and x.get("requested_at") == req]
    if not on:
        problems.append("%s %s trial %s: the mock has no record of the notice's flip" % (c, f, i))
        continue
    t = on[0]["time"] * 1000
    off = [x for x in fl if not x.get("scheduled") and "fault" in x.get("keys", []) and x["time"] * 1000 <= t]
    if off:
        o_len.append(t - off[-1]["time"] * 1000)
    hits = [r for r in records(evfile) if r.get("event") == "notice"
            and (r.get("event_id") == eid if match == "id" else str(r.get("event_id", "")).startswith(eid))]
    if not hits:
        problems.append("%s %s trial %s: MISSED: no notice %s%s within %d s of its appearance"
                        % (c, f, i, eid, "" if match == "id" else "...", wait_s))
        continue
    d = when_ms(hits[0]) - t
    if d < -1:
        problems.append("%s %s trial %s: notice %s detected %d ms before the mock served it"
                        % (c, f, i, hits[0].get("event_id"), -d))
    outage[key].append(d)

o_order.sort(key=lambda k: (clouds.index(k[0]), faults.index(k[1])))
if o_order:
    print()
    print("Detection after a %d s outage, ms from the notice's appearance (the mock's flip) to spotd's"
          " \"detected\"" % outage_s)
    fmt = "%-8s %-9s %6s %5s %7s %7s %7s %7s  %-27s %s"
    print(fmt % ("cloud", "outage", "trials", "seen", "p50", "p99", "max", "cap", "goal", "result"))
    for key in o_order:
        c, f = key
        xs, n = outage[key], o_n[key]
        g1, g2 = CAP_MS[c] + poll_ms + 100, MIN_NOTICE_S[c] * 100
        goal = "p99 <= %d, max <= %d" % (g1, g2)
        if not xs:
            print(fmt % (c, f, n, 0, "-", "-", "-", CAP_MS[c], goal, "FAIL (none seen)"))
            continue
        p99 = pct(xs, 99)
        ok = len(xs) == n and p99 <= g1 and max(xs) <= g2
        print(fmt % (c, f, n, len(xs), "%d" % round(pct(xs, 50)), "%d" % round(p99), "%d" % round(max(xs)),
                     CAP_MS[c], goal, ("PASS" if ok else "FAIL") + ("" if len(xs) == n else " (missed)")))
    print("outage: down = the connection shut without an answer, 500, throttle = 429, hang = no answer"
          " (spotd's request timeout), garbage = 200 with a body that does not parse")
    print("goal: p99 <= the cloud's backoff cap + the poll interval (%d ms) + 100 ms, and the largest at most"
          " 10 %% of its shortest notice (aws, tencent 2 min; alibaba 5 min; azure, gcp 30 s)" % poll_ms)
    if o_len:
        print("outage length (fault on -> notice served): %.2f to %.2f s" % (min(o_len) / 1000, max(o_len) / 1000))

print()
if problems:
    print("problems:")
    for p in problems:
        print("  " + p)
else:
    print("problems: none (no missed, duplicate or unexpected notices; no early stops)")
EOF

[ ${#problems[@]} -gt 0 ] && printf '%s\n' "${problems[@]}" >"$tmp/problems.txt"
"$py" "$tmp/report.py" "$tmp" "$poll_ms" "$tick" "$clouds" "$mode" "$outage_s" "$wait_s" \
    "$cap30" "$cap2m" "$outage_faults" || status=1
notes+=("note: p99 is nearest-rank: with fewer than 100 flips (or trials) it is the largest latency")
notes+=("note: \"detected\" has millisecond resolution; flip times are the mock's time.time()")
[ "$cores" != '?' ] && [ "$cores" -le 4 ] &&
    notes+=("note: only $cores CPUs, shared with the mocks (Python) and anything else running: expect noise")
for m in "${notes[@]}"; do echo "$m"; done
exit $status
