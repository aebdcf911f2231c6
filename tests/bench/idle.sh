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
#   seconds     from the supervisor's exec to the last sample
#   cpu_ms      sum of the first field of /proc/PID/task/*/schedstat (ns on
#               CPU, precise) from exec on: start-up included, the fork of
#               the launching shell not (each supervisor is started stopped
#               just before its exec, and released with the others)
#   cpu_ms/min  cpu_ms * 60 / seconds: the goal is judged on this
#   idle_ms/min the CPU rate after the first second, start-up left out
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
. "$root/tests/bench/lib.sh"
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

# tini and dumb-init: what a user would pick instead.
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

pids=() t0=() rcs=() start=()
alive=()                        # 1 until the supervisor has been reaped
b_ns=() b_ticks=()              # CPU before exec, subtracted
s_us=() s_ns=() s_ticks=() s_hwm=() s_rss=() s_sched=()   # last sample
i_us=() i_ns=()                 # first sample after 1 s: idle rate from there

# Kill every supervisor still running and whatever it started: the sleep
# children ignore SIGINT (started in the background) and would outlive a
# supervisor killed alone.
# shellcheck disable=SC2317  # invoked from traps
cleanup() {
    [ "$cleaned" = 1 ] && return
    cleaned=1
    local live=() i
    for i in "${!pids[@]}"; do
        [ "${alive[i]-0}" = 1 ] && live+=("${pids[i]}")
    done
    if [ ${#live[@]} -gt 0 ]; then
        # shellcheck disable=SC2046
        kill -KILL "${live[@]}" $(descendants "${live[@]}") 2>/dev/null
        for i in "${live[@]}"; do wait "$i" 2>/dev/null; done
    fi
    rm -rf "$tmp"
}
cleaned=0
trap cleanup EXIT
trap 'echo "idle.sh: interrupted" >&2; cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM HUP

# readproc PID: set P_state, P_start (field 22), P_ticks (utime + stime,
# fields 14 and 15, all threads), P_ns (schedstat, summed over threads),
# P_sched (0 when a schedstat could not be read), P_hwm and P_rss (KiB).
# Reads with builtins only, no fork.
readproc() {
    local line f k v a
    P_hwm='' P_rss='' P_ns=0 P_sched=1
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    # shellcheck disable=SC2206
    a=(${line##*) })            # a[0] is field 3
    P_state=${a[0]} P_start=${a[19]} P_ticks=$((a[11] + a[12]))
    while read -r k v _; do
        case $k in VmHWM:) P_hwm=$v ;; VmRSS:) P_rss=$v ;; esac
    done 2>/dev/null <"/proc/$1/status"
    for f in /proc/"$1"/task/*/schedstat; do
        read -r v _ 2>/dev/null <"$f" || { P_sched=0; continue; }
        P_ns=$((P_ns + v))
    done
}

# sample I: keep a sample of supervisor I; fail once it has exited (bash
# reaps its children by itself, so the PID may even belong to another
# process by now: the start time tells).
sample() {
    local i=$1 t=$EPOCHREALTIME
    readproc "${pids[i]}" || return 1
    case $P_state in Z | X) return 1 ;; esac
    [ "$P_start" = "${start[i]}" ] || return 1
    [ -n "$P_hwm" ] || return 1     # exiting: its memory is gone already
    s_us[i]=$((10#${t/./} - t0[i]))
    s_ns[i]=$((P_ns - b_ns[i])) s_ticks[i]=$((P_ticks - b_ticks[i]))
    s_sched[i]=$P_sched s_hwm[i]=$P_hwm s_rss[i]=$P_rss
    if [ -z "${i_us[i]-}" ] && [ "${s_us[i]}" -ge 1000000 ]; then
        i_us[i]=${s_us[i]} i_ns[i]=${s_ns[i]}
    fi
}

# Start each supervisor stopped just before its exec, so that the shell's
# fork (about 1 ms of CPU on some machines) is not counted, then let them
# all go at once.
for ((i = 0; i < n; i++)); do
    ( kill -STOP "$BASHPID"; eval "exec ${cmds[i]}" ) >"$tmp/log.$i" 2>&1 </dev/null &
    pids[i]=$!
    alive[i]=1
done
for ((i = 0; i < n; i++)); do
    for ((k = 0; k < 500; k++)); do
        readproc "${pids[i]}" && [ "$P_state" = T ] && break
        sleep 0.01
    done
    if [ "$P_state" != T ]; then
        echo "idle.sh: ${names[i]} did not start" >&2
        exit 1
    fi
    b_ns[i]=$P_ns b_ticks[i]=$P_ticks start[i]=$P_start
done
for ((i = 0; i < n; i++)); do
    t=$EPOCHREALTIME
    t0[i]=$((10#${t/./}))
    kill -CONT "${pids[i]}"
done

# Poll until every supervisor has exited, for at most BENCH_SECONDS + 30 s.
deadline=$((t0[0] + (secs + 30) * 1000000))
while :; do
    left=0
    for ((i = 0; i < n; i++)); do
        [ "${alive[i]}" = 1 ] || continue
        if sample "$i"; then
            left=1
        else
            wait "${pids[i]}"
            rcs[i]=$?
            alive[i]=0
        fi
    done
    [ $left = 1 ] || break
    t=$EPOCHREALTIME
    if [ $((10#${t/./})) -gt $deadline ]; then
        echo "idle.sh: supervisors still running $((secs + 30)) s after start, killing them" >&2
        for ((i = 0; i < n; i++)); do
            if [ "${alive[i]}" = 1 ]; then
                # shellcheck disable=SC2046
                kill -KILL "${pids[i]}" $(descendants "${pids[i]}") 2>/dev/null
                wait "${pids[i]}" 2>/dev/null
                rcs[i]=$?
                alive[i]=0
            fi
        done
        break
    fi
    sleep "$poll"
done

# dec X SCALE: X / SCALE with two decimals, X and SCALE whole numbers.
dec() { local c=$(( ($1 * 100 + $2 / 2) / $2 )); printf '%d.%02d' $((c / 100)) $((c % 100)); }

# ms X: X ns in ms, two decimals.
ms() { dec "$1" 1000000; }

fmt='%-15s %7s %7s %10s %11s %7s %12s %7s\n'
status=0 fallback=0 goals=()
# shellcheck disable=SC2059
printf "$fmt" supervisor seconds cpu_ms cpu_ms/min idle_ms/min tick_ms peak_rss_kib rss_kib
for ((i = 0; i < n; i++)); do
    name=${names[i]} rc=${rcs[i]-?}
    if [ -z "${s_hwm[i]-}" ]; then
        printf '%-15s failed: exit %s before the first sample\n' "$name" "$rc"
        sed 's/^/    /' "$tmp/log.$i" | tail -n 5
        [ "${name%% *}" = spotd ] && { status=1; goals+=("$name: NOT met (failed to run)"); }
        continue
    fi
    us=${s_us[i]} ns=${s_ns[i]}
    tick_ns=$((s_ticks[i] * 1000000000 / tick))
    # schedstat off (all zero) or unreadable: fall back to clock ticks.
    by_ticks=0
    if [ "${s_sched[i]}" != 1 ] || { [ "$ns" = 0 ] && [ "$tick_ns" != 0 ]; }; then
        ns=$tick_ns by_ticks=1 fallback=1
    fi
    per_min_ns=$((ns * 60000000 / (us > 0 ? us : 1)))
    idle=-
    if [ -n "${i_us[i]-}" ] && [ $((us - i_us[i])) -ge 1000000 ] && [ $by_ticks = 0 ]; then
        idle=$(ms $(((ns - i_ns[i]) * 60000000 / (us - i_us[i]))))
    fi
    # shellcheck disable=SC2059
    printf "$fmt" "$name" "$(dec "$us" 1000000)" "$(ms "$ns")" "$(ms "$per_min_ns")" \
        "$idle" $((tick_ns / 1000000)) "${s_hwm[i]}" "${s_rss[i]}"
    if [ "${name%% *}" = spotd ]; then
        bad=''
        if [ "$rc" != 0 ]; then
            bad="exit $rc"
        elif [ "$us" -lt $(((secs - 2) * 1000000)) ]; then
            bad="exited after $(dec "$us" 1000000) s"
        fi
        if [ -n "$bad" ]; then
            status=1
            goals+=("$name: NOT met ($bad)")
            sed 's/^/    /' "$tmp/log.$i" | tail -n 5
        elif [ "$per_min_ns" -lt 5000000 ] && [ "${s_hwm[i]}" -lt 4096 ]; then
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
[ $fallback = 1 ] && notes+=("note: /proc/PID/schedstat unreadable for some, their cpu_ms from clock ticks (1/$tick s)")
[ "$secs" -lt 60 ] && notes+=("note: a run under 60 s weighs start-up more in cpu_ms/min; idle_ms/min leaves it out")
for m in "${notes[@]}"; do echo "$m"; done
exit $status
