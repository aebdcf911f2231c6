#!/usr/bin/env bash
# Idle cost of spotd: CPU time and peak RSS of the supervisor process (not
# its child) while it supervises `sleep BENCH_SECONDS`, side by side with
# tini and dumb-init doing the same job.  All supervisors run at once, so
# the whole benchmark takes about BENCH_SECONDS.
#
#   tests/bench/idle.sh                    # 60 s
#   BENCH_SECONDS=10 tests/bench/idle.sh   # quicker, start-up weighs more
#
# Goal (issue): spotd under 5 ms of CPU per minute and under 4 MiB peak RSS.
#
# Everything is read from /proc, polled every BENCH_POLL seconds (default
# 0.2); the last sample taken while the supervisor is still alive counts,
# i.e. just before the supervised sleep ends:
#   cpu_ms      sum of the first field of /proc/PID/task/*/schedstat (ns on
#               CPU, precise), start-up included
#   cpu_ms/min  cpu_ms * 60 / seconds
#   tick_ms     utime + stime of /proc/PID/stat (fields 14, 15) in ms; clock
#               ticks are 1/CLK_TCK s (10 ms at 100 Hz), so this is coarse
#   peak_rss_kib, rss_kib   VmHWM and VmRSS of /proc/PID/status
#
# Environment: BENCH_SECONDS (60), BENCH_POLL (0.2), O (build: spotd is
# $O/spotd under the repository root, built with make when missing),
# BENCH_INSTALL (1: as root, apt-get install tini and dumb-init when missing;
# 0: never), TINI and DUMB_INIT (paths, default from PATH).
#
# It is a report: it exits 0 whatever the numbers, and non-zero only when
# spotd itself could not be built or failed to run.
set -u

secs=${BENCH_SECONDS:-60}
poll=${BENCH_POLL:-0.2}
case $secs in '' | *[!0-9]* | 0)
    echo "idle.sh: BENCH_SECONDS must be a positive whole number, not '$secs'" >&2
    exit 2 ;;
esac

root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
case $O in /*) spotd=$O/spotd ;; *) spotd=$root/$O/spotd ;; esac
if [ ! -x "$spotd" ]; then
    echo "idle.sh: $spotd missing, building it with make" >&2
    if ! make -C "$root" O="$O" >&2; then
        echo "idle.sh: make failed" >&2
        exit 1
    fi
    if [ ! -x "$spotd" ]; then
        echo "idle.sh: make did not produce $spotd" >&2
        exit 1
    fi
fi

tick=$(getconf CLK_TCK 2>/dev/null) || tick=100
case $tick in '' | *[!0-9]* | 0) tick=100 ;; esac

# tini and dumb-init: the tools a user would pick instead.
TINI=${TINI:-$(command -v tini || true)}
DUMB_INIT=${DUMB_INIT:-$(command -v dumb-init || true)}
notes=()
missing=()
[ -n "$TINI" ] || missing+=(tini)
[ -n "$DUMB_INIT" ] || missing+=(dumb-init)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "${BENCH_INSTALL:-1}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "idle.sh: installing ${missing[*]} with apt-get" >&2
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; then
            apt-get update -q >/dev/null 2>&1
            apt-get install -y -q "${missing[@]}" >/dev/null 2>&1
        fi
        TINI=${TINI:-$(command -v tini || true)}
        DUMB_INIT=${DUMB_INIT:-$(command -v dumb-init || true)}
    fi
    [ -n "$TINI" ] || notes+=("note: tini not found, skipped (apt-get install tini)")
    [ -n "$DUMB_INIT" ] || notes+=("note: dumb-init not found, skipped (apt-get install dumb-init)")
fi

tmp=$(mktemp -d /tmp/spotd-bench.XXXXXX) || exit 1

# The scenarios: a name and the command line of the supervisor.
names=() cmds=()
add() { names+=("$1"); shift; cmds+=("$(printf '%q ' "$@")"); }
add spotd "$spotd" run -- sleep "$secs"
add "spotd --events" "$spotd" run --events "$tmp/events.jsonl" -- sleep "$secs"
# -s: subreaper, as spotd registers itself when not PID 1 (and tini warns
# without it); -g: signals go to the child's process group.
[ -n "$TINI" ] && add tini "$TINI" -s -g -- sleep "$secs"
[ -n "$DUMB_INIT" ] && add dumb-init "$DUMB_INIT" sleep "$secs"
n=${#names[@]}

pids=() t0=() rcs=()
alive=()                 # 1 while the supervisor has not exited
s_us=() s_ns=() s_ticks=() s_hwm=() s_rss=() s_sched=()   # last sample

# descendants PID...: print every living descendant of the PIDs.
descendants() {
    local -A kids=()
    local f line rest pid ppid q
    for f in /proc/[0-9]*/stat; do
        read -r line <"$f" 2>/dev/null || continue
        pid=${line%% *}
        rest=${line##*) }
        ppid=${rest#* }
        ppid=${ppid%% *}
        kids[$ppid]+=" $pid"
    done
    q=("$@")
    while [ ${#q[@]} -gt 0 ]; do
        pid=${q[0]}
        q=("${q[@]:1}")
        for f in ${kids[$pid]-}; do
            echo "$f"
            q+=("$f")
        done
    done
}

# Kill every supervisor still running and whatever it started: sleep
# children ignore SIGINT (started in the background) and would outlive a
# supervisor killed alone.
cleaned=0
cleanup() {
    [ $cleaned = 1 ] && return
    cleaned=1
    local live=() i
    for i in "${!pids[@]}"; do
        [ "${alive[$i]-0}" = 1 ] && live+=("${pids[$i]}")
    done
    if [ ${#live[@]} -gt 0 ]; then
        # shellcheck disable=SC2046
        kill -KILL "${live[@]}" $(descendants "${live[@]}") 2>/dev/null
        for i in "${live[@]}"; do wait "$i" 2>/dev/null; done
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "idle.sh: interrupted" >&2; cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM HUP

now_us() { local t=$EPOCHREALTIME; echo $((10#${t/./})); }

# sample I: read supervisor I from /proc; keep it only while it is alive.
sample() {
    local i=$1 pid=${pids[$1]} line rest f k v hwm='' rss='' ns=0 ok=1 t a
    t=$EPOCHREALTIME
    read -r line <"/proc/$pid/stat" 2>/dev/null || return 1
    rest=${line##*) }
    # shellcheck disable=SC2206
    a=($rest)                     # a[0] is field 3 (state)
    case ${a[0]} in Z | X) return 1 ;; esac
    while read -r k v _; do
        case $k in VmHWM:) hwm=$v ;; VmRSS:) rss=$v ;; esac
    done <"/proc/$pid/status" 2>/dev/null
    [ -n "$hwm" ] || return 1     # exiting: its memory is gone already
    for f in /proc/"$pid"/task/*/schedstat; do
        read -r v _ <"$f" 2>/dev/null || { ok=0; continue; }
        ns=$((ns + v))
    done
    s_us[$i]=$((10#${t/./} - t0[i]))
    s_ticks[$i]=$((a[11] + a[12]))   # fields 14 (utime) and 15 (stime)
    s_ns[$i]=$ns s_sched[$i]=$ok s_hwm[$i]=$hwm s_rss[$i]=$rss
}

for ((i = 0; i < n; i++)); do
    t0[i]=$(now_us)
    eval "exec ${cmds[i]}" >"$tmp/log.$i" 2>&1 </dev/null &
    pids[i]=$!
    alive[i]=1
done

# Poll until every supervisor has exited, for at most BENCH_SECONDS + 30 s.
deadline=$(( $(now_us) + (secs + 30) * 1000000 ))
while :; do
    left=0
    for ((i = 0; i < n; i++)); do
        [ "${alive[i]}" = 1 ] || continue
        if sample "$i"; then
            left=1
        else
            # Gone or exiting: collect its status.
            wait "${pids[i]}"
            rcs[i]=$?
            alive[i]=0
        fi
    done
    [ $left = 1 ] || break
    if [ "$(now_us)" -gt $deadline ]; then
        echo "idle.sh: supervisors still running $((secs + 30)) s after start, killing them" >&2
        break
    fi
    sleep "$poll"
done
for ((i = 0; i < n; i++)); do
    if [ "${alive[i]}" = 1 ]; then
        kill -KILL "${pids[i]}" $(descendants "${pids[i]}") 2>/dev/null
        wait "${pids[i]}"
        rcs[i]=$?
        alive[i]=0
    fi
done

# dec X SCALE: X / SCALE with two decimals, X and SCALE whole numbers.
dec() { local c=$(( ($1 * 100 + $2 / 2) / $2 )); printf '%d.%02d' $((c / 100)) $((c % 100)); }

status=0 fallback=0 goals=()
printf '%-15s %7s %8s %10s %7s %12s %7s\n' \
    supervisor seconds cpu_ms cpu_ms/min tick_ms peak_rss_kib rss_kib
for ((i = 0; i < n; i++)); do
    name=${names[i]} rc=${rcs[i]-?}
    if [ -z "${s_hwm[i]-}" ]; then
        printf '%-15s failed: exit %s before the first sample\n' "$name" "$rc"
        sed 's/^/    /' "$tmp/log.$i" | tail -n 5
        [ "${name%% *}" = spotd ] && { status=1; goals+=("$name: NOT met (failed to run)"); }
        continue
    fi
    us=${s_us[i]}
    tick_ns=$(( s_ticks[i] * 1000000000 / tick ))
    ns=${s_ns[i]}
    # schedstat off (all zero) or unreadable: fall back to clock ticks.
    if [ "${s_sched[i]}" != 1 ] || { [ "$ns" = 0 ] && [ "$tick_ns" != 0 ]; }; then
        ns=$tick_ns fallback=1
    fi
    per_min_ns=$(( ns * 60000000 / (us > 0 ? us : 1) ))
    printf '%-15s %7s %8s %10s %7s %12s %7s\n' "$name" \
        "$(dec "$us" 1000000)" "$(dec "$ns" 1000000)" "$(dec "$per_min_ns" 1000000)" \
        $((tick_ns / 1000000)) "${s_hwm[i]}" "${s_rss[i]}"
    if [ "${name%% *}" = spotd ]; then
        bad=''
        if [ "$rc" != 0 ]; then
            bad="exit $rc"
        elif [ $us -lt $(( (secs - 2) * 1000000 )) ]; then
            bad="exited after $(dec "$us" 1000000) s"
        fi
        if [ -n "$bad" ]; then
            status=1
            goals+=("$name: NOT met ($bad)")
            sed 's/^/    /' "$tmp/log.$i" | tail -n 5
        elif [ $per_min_ns -lt 5000000 ] && [ "${s_hwm[i]}" -lt 4096 ]; then
            goals+=("$name: met")
        else
            goals+=("$name: NOT met")
        fi
    elif [ "$rc" != 0 ]; then
        notes+=("note: $name exited with $rc")
    fi
done
for g in "${goals[@]}"; do
    echo "goal: ${g%%: *} under 5 ms CPU per minute and 4096 KiB peak RSS: ${g#*: }"
done
[ $fallback = 1 ] && notes+=("note: /proc/PID/schedstat unavailable, cpu_ms from clock ticks (1/$tick s)")
[ "$secs" -lt 60 ] && notes+=("note: cpu_ms includes start-up, which weighs more per minute in a run under 60 s")
for m in "${notes[@]}"; do echo "$m"; done
exit $status
