#!/usr/bin/env bash
# A terminating notice in a world of two: how long the trainers train on
# before they save (the wait), in ms and in training steps, for steps of
# 200 ms and 1 s; with BENCH_BEFORE=REV, side by side with the spotd and
# libckpt of that revision (before the hold: 833e9a8).  A report, not a
# test.  See README.md.
#
#   tests/bench/hold.sh                                   # about 90 s
#   BENCH_BEFORE=833e9a8 tests/bench/hold.sh              # about 4 minutes (a build)
#
# Each run: two spotd on 127.0.0.1 (--rank 0 and 1, --world-size 2, one
# world key, a file store), each running examples/c-trainer with
# BENCH_MIB (16) MiB of state and TRAINER_STEP_US = the step; rank 1 gets
# the drill (--drill-after, a terminating notice) after 3 s plus a random
# share of a step, so that it lands anywhere in a step.  The world saves,
# commits, rank 1 exits 75; rank 0 is then stopped.  Columns, the median
# over BENCH_ROUNDS (5) runs and, in parentheses, the worst:
#
#   wait     per node, checkpoint_begin -> state.bin created (its birth
#            time): the trainer reaching the step the world chose; the
#            larger of the two nodes' (the world waits for the later)
#   steps    wait in training steps (wait / the step)
#   n->commit  rank 1's notice record to its commit record
#
# Before the hold, the answer to the world's query came at the trainer's
# next step and the step chosen was the one after (one to two steps); with
# it, the trainers wait where they answer and save that step (up to one).
#
# Environment: BENCH_STEPS_MS ("200 1000"), BENCH_ROUNDS (5), BENCH_MIB
# (16), BENCH_BEFORE (none: a git revision to build and compare),
# BENCH_KEEP (0), O (build).  wait needs birth times (statx; ext4, xfs,
# btrfs).
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
case $O in /*) obuild=$O ;; *) obuild=$root/$O ;; esac
steps_ms=${BENCH_STEPS_MS:-200 1000}
rounds=${BENCH_ROUNDS:-5}
mib=${BENCH_MIB:-16}
before=${BENCH_BEFORE:-}
for v in $steps_ms $rounds $mib; do
    case $v in '' | *[!0-9]* | 0) echo "hold.sh: BENCH_STEPS_MS, BENCH_ROUNDS and BENCH_MIB are positive whole numbers, not '$v'" >&2; exit 2 ;; esac
done

# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"
say() { echo "hold.sh: $*" >&2; }
die() { say "$*"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spotd-hold-bench.XXXXXX") || exit 1
pids=()
# shellcheck disable=SC2317  # invoked from traps
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    sleep 0.5
    for p in "${pids[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    scratch_end
}
cleanup_traps
mkdir -p "$tmp/log" "$tmp/now"

# build NAME TREE: make TREE's spotd and trainer, copied to $tmp/NAME.
build() {
    if ! make -C "$2" O=build all -j"$(nproc)" >"$tmp/log/make-$1.log" 2>&1; then
        tail -n 5 "$tmp/log/make-$1.log" | sed 's/^/    make: /' >&2
        die "make failed ($1)"
    fi
    mkdir -p "$tmp/$1"
    cp "$2/build/spotd" "$2/build/examples/c-trainer/trainer" "$tmp/$1/" ||
        die "make made no spotd or trainer ($1)"
}
if ! make -C "$root" O="$O" all >"$tmp/log/make-now.log" 2>&1; then
    tail -n 5 "$tmp/log/make-now.log" | sed 's/^/    make: /' >&2
    die "make failed"
fi
cp "$obuild/spotd" "$obuild/examples/c-trainer/trainer" "$tmp/now/" || die "no $O/spotd"
versions=now
if [ -n "$before" ]; then
    mkdir -p "$tmp/src-before"
    git -C "$root" archive "$before" | tar -x -C "$tmp/src-before" || die "no revision '$before'"
    # The same workload: this tree's trainer, on that revision's libckpt.
    cp "$root/examples/c-trainer/trainer.c" "$tmp/src-before/examples/c-trainer/trainer.c"
    say "building $before"
    build before "$tmp/src-before"
    rm -rf "$tmp/src-before"
    versions="before now"
fi
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/key"
chmod 600 "$tmp/key"

free_ports() {
    /usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(",".join("127.0.0.1:%d" % x.getsockname()[1] for x in s))'
}

# times EVENTS STATE: "WAIT N_COMMIT" in ms: checkpoint_begin to state.bin's
# birth, and the notice record to the commit record ("-" where unknown).
times() {
    local f bt
    f=$(find "$2/work" -name state.bin 2>/dev/null | head -n 1)
    [ -n "$f" ] && bt=$(stat -c %.3W "$f" 2>/dev/null)
    /usr/bin/python3 - "$1" "${bt:-0}" <<'PY'
import json, sys
from datetime import datetime, timezone
def ms(ts):
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp() * 1000
ev = {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    ev.setdefault(r.get("event"), r)
b, n, c, bt = ev.get("checkpoint_begin"), ev.get("notice"), ev.get("commit"), float(sys.argv[2]) * 1000
print("%d" % max(0, bt - ms(b["ts"])) if b and bt > 0 else "-",
      "%d" % (ms(c["ts"]) - ms(n["ts"])) if n and c else "-")
PY
}

# run_one VERSION STEP_MS I: one world, one notice; a line of results.
run_one() {
    local v=$1 step=$2 i=$3 d=$tmp/run P drill w0 w1 nc rc
    rm -rf "$d"
    mkdir -p "$d/store"
    P=$(free_ports)
    drill=$((3000 + RANDOM % step))ms
    for r in 0 1; do
        TRAINER_STEP_US=$((step * 1000)) "$tmp/$v/spotd" run --cloud none --job hold \
            --store "file://$d/store" --state-dir "$d/n$r" --rank $r --world-size 2 --peers "$P" \
            --world-key-file "$tmp/key" --events "$d/n$r.ev" --grace 5s \
            $([ $r = 1 ] && echo --drill-after "$drill") -- "$tmp/$v/trainer" 1000000 "$mib" \
            >"$d/n$r.out" 2>"$d/n$r.err" </dev/null &
        pids[r]=$!
    done
    wait_exit_ "${pids[1]}" 60
    rc=$?
    kill -TERM "${pids[0]}" 2>/dev/null
    wait_exit_ "${pids[0]}" 20
    if [ "$rc" != 75 ]; then
        cp "$d/n1.err" "$tmp/log/$v-$step-$i.err" 2>/dev/null
        echo "$v $step failed"
        return
    fi
    read -r w0 _ < <(times "$d/n0.ev" "$d/n0")
    read -r w1 nc < <(times "$d/n1.ev" "$d/n1")
    if [ "$w0" = - ] || [ "$w1" = - ]; then
        echo "$v $step - $nc"
    else
        echo "$v $step $((w0 > w1 ? w0 : w1)) $nc"
    fi
}

# wait_exit_ PID SECONDS: its exit status, or 124 (killed) after SECONDS.
wait_exit_() {
    local n=0
    while kill -0 "$1" 2>/dev/null && [ $n -lt $(($2 * 10)) ]; do
        sleep 0.1
        n=$((n + 1))
    done
    kill -0 "$1" 2>/dev/null && { kill -KILL "$1"; wait "$1" 2>/dev/null; return 124; }
    wait "$1"
}

: >"$tmp/results"
for step in $steps_ms; do
    for i in $(seq "$rounds"); do
        for v in $versions; do
            say "$v, $step ms steps, run $i"
            run_one "$v" "$step" "$i" >>"$tmp/results"
        done
    done
done

echo
echo "hold.sh: a terminating notice in a world of two (examples/c-trainer, $mib MiB, file store), $(nproc) cores"
echo "median over $rounds runs (worst in parentheses); wait and n->commit in ms"
/usr/bin/python3 - "$tmp/results" "$before" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault((f[0], int(f[1])), []).append(f[2:])
def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None
fmt = "%-8s %8s %5s %16s %12s %16s"
print(fmt % ("spotd", "step_ms", "runs", "wait", "steps", "n->commit"))
for (v, step), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "before")):
    ok = [r for r in rs if r[0] != "failed"]
    waits = [int(r[0]) for r in ok if r[0] != "-"]
    commits = [int(r[1]) for r in ok if r[1] != "-"]
    name = ("%s" % sys.argv[2])[:8] if v == "before" else "now"
    if not waits:
        print(fmt % (name, step, len(rs), "-", "-", "-") + ("  (%d failed)" % (len(rs) - len(ok))))
        continue
    print(fmt % (name, step, len(rs), "%d (%d)" % (med(waits), max(waits)),
                 "%.2f (%.2f)" % (med(waits) / step, max(waits) / step),
                 "%d (%d)" % (med(commits), max(commits)) if commits else "-")
          + ("  (%d failed)" % (len(rs) - len(ok)) if len(ok) < len(rs) else ""))
PY
