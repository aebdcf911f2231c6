#!/usr/bin/env bash
# The world's checkpoint round as the world grows: 2, 8, 32 and 128 members.
# For each world, how long the coordinator takes from the last shard
# reported (the last `saved`) to the commit announced (`commit`), what the
# round costs it (CPU, peak RSS), and how many times the replicated state
# was uploaded in total.  A report, not a test.  See README.md.
#
#   tests/bench/world.sh                                    # about 40 s
#   BENCH_WORLDS="2 32" BENCH_ROUNDS=1 tests/bench/world.sh # quicker
#
# Worlds of at most BENCH_REAL_MAX (8) members are real: one spotd per rank
# on 127.0.0.1 (own port, own state directory, one shared world key and
# file store), each running the C example trainer (examples/c-trainer,
# BENCH_MIB MiB of state, TRAINER_STEP_US=BENCH_STEP_US): every rank holds
# the same state, as data-parallel ranks do.  Larger worlds are one real
# spotd as rank 0 (the coordinator, with its trainer) and the load
# generator tests/bench/worldgen.py as ranks 1..N-1: it speaks the real
# peer protocol (handshake with the world key, heartbeats, ready, step,
# hashed, saved with a real manifest in the store) from one Python process.  With
# BENCH_COMPARE=1 (default) the generator also plays 8 members, so that the
# generator can be compared with real processes at 8.
#
# A world: the nodes start, rank 0 dials the others, the world resumes
# (every trainer starts), and after BENCH_WARM seconds the script runs
# BENCH_ROUNDS rounds one after another, each one `spotctl checkpoint` on
# rank 0's control socket, waited for until rank 0 logs the generation's
# commit and every other rank has it too (its commit event, or the
# generator's record).  Columns, the median over the rounds unless said:
#
#   saved->commit  from the last `saved` sent to the first `commit` received
#             (ms; the median and, in parentheses, the worst round).  Real
#             worlds: the latest upload_done event of any node (a node
#             broadcasts its saved right after logging it) to the earliest
#             commit event of a node other than rank 0 (logged as the
#             commit message is handled).  Generator worlds: the
#             generator's own clock, when it sent the last saved and when
#             the first commit came in
#   coord     rank 0's own view (ms, the median and the worst round): its
#             log line "every rank saved ...; committing generation G"
#             (written as the last saved is handled) to its commit event
#             (after the commit record is written and the commit handed
#             to the connections); both to the ms
#   bcast     from the first to the last member that received the commit
#   round     rank 0's checkpoint_begin to its commit event
#   cpu_ms    rank 0's CPU time over the round, from just before the
#             trigger to its commit event (seen within 20 ms): the sum of
#             /proc/PID/task/*/schedstat (spotd only, not its trainer)
#   peak_kib  rank 0's VmHWM (/proc/PID/status) at the end of the round,
#             after `echo 5 > /proc/PID/clear_refs` reset it to the RSS
#             just before the trigger: the peak over the round (the largest
#             over the rounds).  Where the reset is refused: the peak since
#             spotd started, and a note says so
#   uploaded  real worlds: the bytes_sent of every node's upload_done
#             event for the generation, summed, divided by the checkpoint's
#             size (upload_done "bytes" of rank 0): how many times the
#             replicated state went to the store.  Generator worlds: "-"
#             (the fake ranks upload nothing but their manifest)
#
# Environment: BENCH_WORLDS ("2 8 32 128"), BENCH_REAL_MAX (8),
# BENCH_COMPARE (1), BENCH_ROUNDS (5), BENCH_MIB (64), BENCH_STEP_US (10000),
# BENCH_WARM (1, seconds), BENCH_KEEP (0; 1 keeps the scratch folder: logs,
# events, the generator's records, the store), O (build).  spotd, spotctl
# and the trainer are built with `make -j2` and copied aside.
#
# Exit status: 0 with a report, whatever the numbers.  1 when spotd could not
# be built, exited during a world, a world did not resume (its trainers never
# started), or a round did not commit.
set -u

worlds=${BENCH_WORLDS:-2 8 32 128}
real_max=${BENCH_REAL_MAX:-8}
compare=${BENCH_COMPARE:-1}
rounds=${BENCH_ROUNDS:-5}
mib=${BENCH_MIB:-64}
step_us=${BENCH_STEP_US:-10000}
warm=${BENCH_WARM:-1}
for v in $worlds $real_max $rounds $mib $step_us $warm; do
    case $v in '' | *[!0-9]*)
        echo "world.sh: BENCH_WORLDS, BENCH_REAL_MAX, BENCH_ROUNDS, BENCH_MIB, BENCH_STEP_US and BENCH_WARM are whole numbers, not '$v'" >&2
        exit 2 ;;
    esac
done
for n in $worlds; do
    if [ "$n" -lt 2 ] || [ "$n" -gt 1024 ]; then
        echo "world.sh: a world has 2 to 1024 members, not $n" >&2
        exit 2
    fi
done
[ "$rounds" -ge 1 ] || { echo "world.sh: BENCH_ROUNDS must be at least 1" >&2; exit 2; }
[ "$mib" -ge 1 ] || { echo "world.sh: BENCH_MIB must be at least 1" >&2; exit 2; }

root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
case $O in /*) obuild=$O ;; *) obuild=$root/$O ;; esac
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"

say() { echo "world.sh: $*" >&2; }
die() { say "$*"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spotd-world-bench.XXXXXX") || exit 1
spotd_pids=()
gen_pid=''
cleaned=0
# stop_world: every spotd of the world (and its trainer), then the generator.
stop_world() {
    local p tree=''
    for p in "${spotd_pids[@]}"; do
        kill -0 "$p" 2>/dev/null && tree="$tree $p $(descendants "$p")"
    done
    # shellcheck disable=SC2086
    [ -n "$tree" ] && kill -KILL $tree 2>/dev/null
    for p in "${spotd_pids[@]}"; do wait "$p" 2>/dev/null; done
    spotd_pids=()
    if [ -n "$gen_pid" ]; then
        kill -TERM "$gen_pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$gen_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$gen_pid" 2>/dev/null
        wait "$gen_pid" 2>/dev/null
        gen_pid=''
    fi
}
# shellcheck disable=SC2317  # invoked from traps
cleanup() {
    [ "$cleaned" = 1 ] && return
    cleaned=1
    stop_world
    scratch_end
}
cleanup_traps

mkdir -p "$tmp/log" "$tmp/bin"
if ! make -C "$root" -j2 O="$O" all >"$tmp/log/make.log" 2>&1; then
    tail -n 5 "$tmp/log/make.log" | sed 's/^/    make: /' >&2
    die "make failed"
fi
SPOTD=$tmp/bin/spotd
SPOTCTL=$tmp/bin/spotctl
TRAINER=$tmp/bin/trainer
if ! cp "$obuild/spotd" "$SPOTD" || ! cp "$obuild/spotctl" "$SPOTCTL" ||
    ! cp "$obuild/examples/c-trainer/trainer" "$TRAINER"; then
    die "make made no $O/spotd, $O/spotctl or $O/examples/c-trainer/trainer"
fi
GEN=$root/tests/bench/worldgen.py
have_python=1
command -v python3 >/dev/null 2>&1 || have_python=0

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/key"
echo >>"$tmp/key"
chmod 600 "$tmp/key"

load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
results=$tmp/results.tsv
: >"$results"
: >"$tmp/notes"
failed=0
note() { grep -qxF "$*" "$tmp/notes" || echo "$*" >>"$tmp/notes"; }
record() { local IFS=$'\t'; echo "$*" >>"$results"; }

# free_ports N: N ports of 127.0.0.1 nobody listens on now, comma separated.
free_ports() {
    python3 -c 'import socket,sys
ss=[socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1",0))
print(",".join("127.0.0.1:%d" % s.getsockname()[1] for s in ss))' "$1"
}

# readproc PID: P_ns (schedstat, summed over the threads), P_hwm (KiB).
readproc() {
    local f v k
    P_ns=0 P_hwm=''
    for f in /proc/"$1"/task/*/schedstat; do
        read -r v _ 2>/dev/null <"$f" && P_ns=$((P_ns + v))
    done
    while read -r k v _; do
        [ "$k" = VmHWM: ] && P_hwm=$v
    done 2>/dev/null <"/proc/$1/status"
}

# count FILE PATTERN: lines of FILE with PATTERN (fixed string).
count() {
    local c
    c=$(grep -cF -- "$2" "$1" 2>/dev/null)
    echo "${c:-0}"
}

# wait_until SECONDS COMMAND...: poll COMMAND every 20 ms; 1 on timeout.
wait_until() {
    local end=$((${EPOCHREALTIME/./} + $1 * 1000000))
    shift
    until "$@"; do
        [ "${EPOCHREALTIME/./}" -ge "$end" ] && return 1
        sleep 0.02
    done
}

# The conditions below are called through wait_until.
alive() {
    local p
    for p in "${spotd_pids[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done
}
# shellcheck disable=SC2317
resumed() {
    local r
    for ((r = 0; r < nreal; r++)); do
        [ "$(count "$d/n$r.ev" '"event":"child_start"')" -ge 1 ] || return 1
    done
}
# shellcheck disable=SC2317
round_over() { # rank 0's commit number $1, or a failure
    [ "$(count "$d/n0.ev" '"event":"commit"')" -ge "$1" ] ||
        [ "$(count "$d/n0.ev" '"event":"checkpoint_failed"')" -ge 1 ]
}
# shellcheck disable=SC2317
all_have() { # every other rank has commit number $1
    local r
    for ((r = 1; r < nreal; r++)); do
        [ "$(count "$d/n$r.ev" '"event":"commit"')" -ge "$1" ] || return 1
    done
    # The generator: every fake rank has it (gen.json is written 50 ms after
    # a commit comes in).
    [ "$mode" = real ] ||
        [ "$(grep -o "\"commits\": $((n - 1))," "$d/gen.json" 2>/dev/null | wc -l)" -ge "$1" ]
}
# shellcheck disable=SC2317
gen_listening() {
    [ -s "$d/gen.json" ] && grep -q "\"listening\": $((n - 1))," "$d/gen.json"
}

# run_world N MODE: MODE real (N spotd) or gen (rank 0 spotd, the generator
# for the rest).  Appends a line to results.tsv.
run_world() {
    local n=$1 mode=$2 label peers r i why='' pid0 ns0 reset
    label="$n-$mode"
    d=$tmp/$label
    mkdir -p "$d/store"
    if [ "$mode" = real ]; then nreal=$n; else nreal=1; fi
    peers=$(free_ports "$n") || { record "$n" "$mode" "failed (no free ports)"; return; }
    say "$n members ($mode): starting"
    if [ "$mode" = gen ]; then
        python3 "$GEN" --job "w$n" --key-file "$tmp/key" --peers "$peers" --ranks "1-$((n - 1))" \
            --store "$d/store" --out "$d/gen.json" >"$d/gen.log" 2>&1 &
        gen_pid=$!
        if ! wait_until 20 gen_listening; then
            record "$n" "$mode" "n/a (the generator did not listen: $(tail -n 1 "$d/gen.log" | cut -c1-80))"
            stop_world
            return
        fi
    fi
    for ((r = 0; r < nreal; r++)); do
        TRAINER_STEP_US=$step_us "$SPOTD" run --cloud none --job "w$n" --store "file://$d/store" \
            --state-dir "$d/n$r" --rank "$r" --world-size "$n" --peers "$peers" \
            --world-key-file "$tmp/key" --events "$d/n$r.ev" --grace 2s \
            -- "$TRAINER" 1000000000 "$mib" >"$d/n$r.out" 2>"$d/n$r.err" </dev/null &
        spotd_pids+=("$!")
    done
    pid0=${spotd_pids[0]}
    : >"$d/samples.tsv"
    if ! wait_until 60 resumed; then
        if alive; then why="the world did not resume within 60 s"; else why="a spotd exited"; fi
    elif ! alive; then
        why="a spotd exited"
    fi
    if [ -z "$why" ]; then
        sleep "$warm"
        for ((i = 1; i <= rounds; i++)); do
            readproc "$pid0"
            ns0=$P_ns
            reset=0
            { echo 5 >"/proc/$pid0/clear_refs"; } 2>/dev/null && reset=1
            if ! "$SPOTCTL" checkpoint --socket "$d/n0/control.sock" >>"$d/spotctl.log" 2>&1; then
                why="spotctl checkpoint failed: $(tail -n 1 "$d/spotctl.log" | cut -c1-80)"
                break
            fi
            if ! wait_until 30 round_over "$i"; then
                alive || { why="a spotd exited during round $i"; break; }
                why="round $i did not end within 30 s; rank 0: $("$SPOTCTL" status --socket "$d/n0/control.sock" 2>&1 |
                    sed -n 's/^in progress *//p; s/^state *//p' | tr '\n' ' ' | cut -c1-120)"
                break
            fi
            readproc "$pid0"
            printf '%s\t%s\t%s\t%s\t%s\n' "$i" "$ns0" "$P_ns" "$P_hwm" "$reset" >>"$d/samples.tsv"
            [ "$reset" = 1 ] || note "peak_kib: /proc/PID/clear_refs refused: the peak since spotd started"
            if [ "$(count "$d/n0.ev" '"event":"checkpoint_failed"')" -ge 1 ]; then
                why="round $i failed: $(grep -F '"event":"checkpoint_failed"' "$d/n0.ev" | head -n 1 | cut -c1-160)"
                break
            fi
            if ! wait_until 30 all_have "$i"; then
                why="round $i: rank 0 committed, but not every other rank had the commit within 30 s"
                break
            fi
            [ "$i" -lt "$rounds" ] && sleep 1
        done
    fi
    alive || [ -n "$why" ] || why="a spotd exited"
    stop_world
    if [ -n "$why" ]; then
        record "$n" "$mode" "failed ($why)"
        failed=1
        grep -h 'level=warn\|level=error' "$d"/n*.err 2>/dev/null | cut -c1-200 | head -n 5 |
            sed "s/^/    $label: /" >&2
        return
    fi
    python3 - "$d" "$n" "$mode" "$nreal" >>"$results" <<'PY'
import json, os, re, statistics, sys
from datetime import datetime, timezone

d, n, mode, nreal = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])

def ts(s):   # 2026-11-30T10:44:25.382Z
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()

def events(path):
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out

ev = [events(os.path.join(d, "n%d.ev" % r)) for r in range(nreal)]
def first(r, kind, gen):
    for e in ev[r]:
        if e.get("event") == kind and e.get("gen") == gen:
            return e
    return None

committing = {}
for line in open(os.path.join(d, "n0.err")):
    m = re.search(r"^ts=(\S+) .*every rank saved step \d+; committing generation (\d+)", line)
    if m:
        committing.setdefault(int(m.group(2)), ts(m.group(1)))
gj = None
if mode == "gen":
    try:
        gj = json.load(open(os.path.join(d, "gen.json")))
    except (OSError, ValueError):
        gj = None
samples = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "samples.tsv")) if l.strip()]
commits = [e for e in ev[0] if e.get("event") == "commit"]

wire, coord, bcast, rnd, cpu, hwm, upl = [], [], [], [], [], [], []
problems = []
for k, s in enumerate(samples):
    if k >= len(commits):
        break
    c0 = commits[k]
    g = c0["gen"]
    t_commit0 = ts(c0["ts"])
    if g in committing:
        coord.append((t_commit0 - committing[g]) * 1000)
    b = first(0, "checkpoint_begin", g)
    if b:
        rnd.append((t_commit0 - ts(b["ts"])) * 1000)
    cpu.append((int(s[2]) - int(s[1])) / 1e6)
    if s[3]:
        hwm.append(int(s[3]))
    if mode == "real":
        ups = [first(r, "upload_done", g) for r in range(nreal)]
        cms = [first(r, "commit", g) for r in range(1, nreal)]
        if all(ups) and all(cms):
            last_saved = max(ts(u["ts"]) for u in ups)
            cts = [ts(c["ts"]) for c in cms]
            wire.append((min(cts) - last_saved) * 1000)
            bcast.append((max(cts) - min(cts)) * 1000)
            size = ups[0]["bytes"]
            if size:
                upl.append(sum(u["bytes_sent"] for u in ups) / size)
        else:
            problems.append("gen %d: events missing" % g)
    elif gj:
        gg = gj["gens"].get(str(g), {})
        if gg.get("last_saved") and gg.get("commit_first"):
            wire.append((gg["commit_first"] - gg["last_saved"]) * 1000)
            bcast.append((gg["commit_last"] - gg["commit_first"]) * 1000)
            if gg.get("commits") != n - 1:
                problems.append("gen %d: %s of %d fake ranks got the commit" %
                                (g, gg.get("commits"), n - 1))
        else:
            problems.append("gen %d: the generator recorded no saved/commit" % g)
        # When the last shard the coordinator got was not a fake one.
        u0 = first(0, "upload_done", g)
        if u0 and gg.get("last_saved") and ts(u0["ts"]) > gg["last_saved"]:
            problems.append("gen %d: rank 0's own shard came last" % g)
if gj and gj.get("errors"):
    problems.append("generator: " + "; ".join(gj["errors"][:3]))

def med(xs, fmt="%.0f"):
    return fmt % statistics.median(xs) if xs else "-"

print("\t".join([str(n), mode, "ok", "%d/%d" % (len(commits[:len(samples)]), len(samples)),
                 med(wire, "%.1f"), "%.1f" % max(wire) if wire else "-",
                 med(coord, "%.0f") + (" (%.0f)" % max(coord) if coord else ""),
                 med(bcast, "%.1f"), med(rnd), med(cpu, "%.1f"),
                 "%d" % max(hwm) if hwm else "-", med(upl, "%.2f"),
                 " | ".join(problems)]))
PY
}

for n in $worlds; do
    if [ "$n" -le "$real_max" ]; then
        run_world "$n" real
        if [ "$compare" = 1 ] && [ "$n" = 8 ]; then
            if [ "$have_python" = 1 ]; then run_world "$n" gen; else record "$n" gen "n/a (no python3)"; fi
        fi
    elif [ "$have_python" = 1 ]; then
        run_world "$n" gen
    else
        record "$n" gen "n/a (no python3 for tests/bench/worldgen.py)"
    fi
done

# ---- the report -----------------------------------------------------------------

echo
echo "world.sh: a checkpoint round of the world, $rounds rounds a world, examples/c-trainer with $mib MiB, $(nproc) cores, load $load0 at the start"
echo "members: spotd = every rank a real spotd; gen = rank 0 a real spotd (the coordinator), the rest tests/bench/worldgen.py"
awk -F'\t' '
BEGIN {
    fmt = "%7s %-15s %6s %15s %9s %6s %6s %7s %9s %9s\n"
    printf fmt, "members", "ranks", "rounds", "saved->commit", "coord", "bcast", "round",
        "cpu_ms", "peak_kib", "uploaded"
    printf fmt, "", "", "", "ms med (max)", "med (max)", "ms", "ms", "", "", "x state"
}
{
    who = ($2 == "real") ? $1 " spotd" : "1 spotd+" ($1 - 1) " gen"
}
$3 != "ok" { printf "%7s %-15s  %s\n", $1, who, $3; next }
{
    printf fmt, $1, who, $4, $5 " (" $6 ")", $7, $8, $9, $10, $11, ($12 == "-" ? "-" : $12 "x")
    if ($13 != "") problems = problems sprintf("note: %s members (%s): %s\n", $1, $2, $13)
}
END { printf "%s", problems }' "$results"
sed 's/^/note: /' "$tmp/notes"

# Goals (from the issue).
awk -F'\t' '
$3 == "ok" && $1 == 128 && $2 == "gen" { lat = $6 }
$3 == "ok" && $2 == "real" && $12 != "-" { up = $12; upn = $1 }
END {
    if (lat != "")
        printf "goal: commit within 200 ms of the last shard at 128 members: worst round %s ms: %s\n",
            lat, (lat + 0 <= 200 ? "PASS" : "MISS")
    else
        printf "goal: commit within 200 ms of the last shard at 128 members: n/a (no 128-member row): MISS\n"
    if (up != "")
        printf "goal: replicated state uploaded about once in total: %s times by %s spotd with the same state: %s\n",
            up, upn, (up + 0 <= 1.10 ? "PASS" : "MISS")
    else
        printf "goal: replicated state uploaded about once in total: n/a (no real world): MISS\n"
}' "$results"

[ "$failed" = 1 ] && echo "note: spotd failed in a world (see the rows), so world.sh exits 1"
exit $failed
