#!/usr/bin/env bash
# The criu method against CRIU by hand: a process of 256 MiB and 1 GiB
# (incompressible; tests/bench/criu_mem.c) under spotd-init, dumped by plain
# `criu dump` into a local directory (then `tar | zstd -1`, what one would
# script instead), with a pre-dump first where the kernel tracks dirty
# pages, and by spotd run --method criu (dump, then the snapshot engine
# into a file store): a first snapshot, a second after 10 % of the memory
# changed, and a restore on a new node (its pages streamed from the store
# into `criu restore --stream` unless BENCH_STREAM=never).  A report, not a
# test; root only.
#
#   tests/bench/criu.sh                        # about a minute and a half
#   BENCH_SIZES="64" tests/bench/criu.sh
#   BENCH_STAGE=/dev/shm tests/bench/criu.sh    # spotd's dumps in memory
#                                              # (--stage-dir, docs/methods.md)
#   BENCH_STREAM=never tests/bench/criu.sh     # spotd's dumps to files, not
#                                              # streamed (default: always)
#
# CPU is user + system time from /proc: of `criu` and of `tar | zstd` by
# hand (bash's time), of spotd and the criu it waited for (utime, stime,
# cutime and cstime of /proc/PID/stat, from the trigger to the commit).
# Per GB: of the image bytes.  See tests/bench/README.md for the columns.
#
# CRIU: tests/servers/criu.sh (BENCH_CRIU_DIR, default build-criu).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
SIZES=${BENCH_SIZES:-256 1024}
CHANGE=${BENCH_CHANGE:-10}
# BENCH_STAGE: spotd's dumps go there (--stage-dir), not to its state directory.
stage=()
[ -n "${BENCH_STAGE:-}" ] && stage=(--stage-dir "$BENCH_STAGE")
# BENCH_STREAM: which of spotd's dumps stream their pages (--criu-stream);
# the snapshots here are periodic ones, which stream only with always.
stage+=(--criu-stream "${BENCH_STREAM:-always}")
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"

say() { echo "criu.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "CRIU needs root; skipped"; exit 0; }
CRIU=$("$root/tests/servers/criu.sh" "${BENCH_CRIU_DIR:-$root/build-criu}") ||
    { say "no criu works here; skipped"; exit 0; }
SPOTD="$root/$O/spotd" SPOTCTL="$root/$O/spotctl" INIT="$root/$O/spotd-init"
tmp=$(mktemp -d /tmp/spotd-bench-criu.XXXXXX)
cleanup() {
    local p
    for p in $(descendants $$); do kill -KILL "$p" 2>/dev/null; done
    scratch_end
}
cleanup_traps
cc -O2 -o "$tmp/criu_mem" "$root/tests/bench/criu_mem.c" || exit 1
tck=$(getconf CLK_TCK)
if "$CRIU" check --feature mem_dirty_track >"$tmp/track" 2>&1; then
    track=1
else
    track=0
fi

now() { date +%s%3N; }
# until_line FILE TEXT SECONDS: wait for a line in FILE.
until_line() {
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
# field FILE EVENT KEY [N]: KEY of the Nth EVENT record (1).
field() {
    grep "\"event\":\"$2\"" "$1" | sed -n "${4:-1}p" | grep -o "\"$3\":[0-9]*" | cut -d: -f2
}
# cpu_ticks PID: user + system time of PID, and of the children it waited
# for (criu), in clock ticks.
cpu_ticks() {
    local line
    read -r line <"/proc/$1/stat" || return 1
    set -- ${line##*) }
    echo "$(( ${12} + ${13} )) $(( ${14} + ${15} ))"
}
# secs TICKS: in seconds.
secs() { awk -v t="$1" -v k="$tck" 'BEGIN { printf "%.2f", t / k }'; }
# timed FILE CMD...: run CMD; FILE gets "wall_ms cpu_s" (bash's time).
timed() {
    local out=$1 t0 t1 TIMEFORMAT='%U %S'
    shift
    t0=$(now)
    { time "$@" >/dev/null 2>&1; } 2>"$out.t"
    t1=$(now)
    echo "$((t1 - t0)) $(awk '{ printf "%.2f", $1 + $2 }' "$out.t")" >"$out"
}
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
per_gb() { awk -v c="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", c / (b / 1e9); else print "-" }'; }

say "$(nproc) cores, CRIU $("$CRIU" --version | sed -n 's/^Version: //p'), a file store on local disk, $CHANGE % of the memory changed before the second snapshot${BENCH_STAGE:+, the dumps of spotd in $BENCH_STAGE}, --criu-stream ${BENCH_STREAM:-always}"
printf '%-5s %9s | %-27s | %-35s | %-38s | %8s\n' "" "" "CRIU by hand" "spotd: first snapshot" \
    "spotd: second snapshot" ""
printf '%-5s %9s | %6s %6s %6s %6s | %6s %6s %6s %6s %6s | %6s %6s %6s %9s %7s | %8s\n' \
    MiB image_MB dump cpu_s +zstd cpu_s dump upload total cpu_s s/GB dump upload cpu_s \
    sent_MB "% of 1" restore
worst_gb=0 worst_pct=0 pre_lines=() splits=()
for mib in $SIZES; do
    d="$tmp/$mib"
    mkdir -p "$d/store" "$d/img" "$d/work"

    # CRIU by hand: a dump that leaves the tree running, then tar | zstd -1.
    "$INIT" run -- "$tmp/criu_mem" "$mib" >"$d/by-hand.out" 2>&1 &
    outer=$!
    until_line "$d/by-hand.out" ready 60 || { say "$mib MiB: the program did not start"; continue; }
    init=$(tr -d ' ' <"/proc/$outer/task/$outer/children")
    timed "$d/t-dump" "$CRIU" dump -t "$init" -D "$d/img" -W "$d/work" -o dump.log --leave-running ||
        say "$mib MiB: criu dump failed"
    read -r hd_ms hd_cpu <"$d/t-dump"
    if command -v zstd >/dev/null; then
        timed "$d/t-zstd" sh -c "tar -C '$d/img' -cf - . | zstd -q -1 -o '$d/img.tar.zst'"
        read -r hz_ms hz_cpu <"$d/t-zstd"
        hz_ms=$((hz_ms + hd_ms))
    else
        hz_ms=- hz_cpu=-
    fi
    # A pre-dump, then the dump of what changed since, where the kernel
    # tracks dirty pages: the tree is frozen for the second only.
    if [ $track = 1 ]; then
        rm -rf "$d/img"
        mkdir -p "$d/pre" "$d/img"
        timed "$d/t-pre" "$CRIU" pre-dump -t "$init" -D "$d/pre" -W "$d/work" -o pre.log --track-mem
        timed "$d/t-inc" "$CRIU" dump -t "$init" -D "$d/img" -W "$d/work" -o dump2.log \
            --prev-images-dir ../pre --track-mem --leave-running
        pre_lines+=("$mib MiB: full dump $hd_ms ms; pre-dump $(cut -d' ' -f1 "$d/t-pre") ms, then a dump of $(cut -d' ' -f1 "$d/t-inc") ms (the freeze)")
    fi
    kill -KILL "$init" "$outer" 2>/dev/null
    wait "$outer" 2>/dev/null
    rm -rf "$d/img" "$d/pre" "$d/img.tar.zst"

    # spotd: a snapshot, CHANGE % of the memory rewritten, another one.
    "$SPOTD" run --job b --store "file://$d/store" --state-dir "$d/n1" --method criu "${stage[@]}" \
        --criu "$CRIU" --cloud none --events "$d/ev1" \
        -- "$tmp/criu_mem" "$mib" "$d/rewrite" "$CHANGE" >"$d/n1.out" 2>"$d/n1.err" &
    pid=$!
    until_line "$d/n1.out" ready 60 || { say "$mib MiB: spotd's command did not start"; continue; }
    c0=$(cpu_ticks "$pid")
    "$SPOTCTL" checkpoint --socket "$d/n1/control.sock" >/dev/null 2>&1
    until_line "$d/ev1" '"event":"commit"' 120 || say "$mib MiB: no first commit"
    c1=$(cpu_ticks "$pid")
    touch "$d/rewrite"
    until_line "$d/n1.out" rewrote 30 || say "$mib MiB: the memory was not rewritten"
    c2=$(cpu_ticks "$pid")
    "$SPOTCTL" checkpoint --socket "$d/n1/control.sock" >/dev/null 2>&1
    for ((i = 0; i < 2400; i++)); do
        [ "$(grep -c '"event":"commit"' "$d/ev1")" -ge 2 ] && break
        sleep 0.05
    done
    c3=$(cpu_ticks "$pid")
    for p in $(descendants "$pid") "$pid"; do kill -KILL "$p" 2>/dev/null; done
    wait "$pid" 2>/dev/null
    bytes=$(field "$d/ev1" upload_done bytes)
    sent1=$(field "$d/ev1" upload_done bytes_sent)
    sent2=$(field "$d/ev1" upload_done bytes_sent 2)
    read -r o0 k0 <<<"$c0"; read -r o1 k1 <<<"$c1"; read -r o2 k2 <<<"$c2"; read -r o3 k3 <<<"$c3"
    cpu1=$(secs $((o1 - o0 + k1 - k0)))
    cpu2=$(secs $((o3 - o2 + k3 - k2)))
    splits+=("$mib MiB: spotd $(secs $((o1 - o0))) s + criu $(secs $((k1 - k0))) s (first); spotd $(secs $((o3 - o2))) s + criu $(secs $((k3 - k2))) s (second); hashing took $(field "$d/ev1" upload_done hash_ms) ms and $(field "$d/ev1" upload_done hash_ms 2) ms")
    gb=$(per_gb "$cpu1" "${bytes:-0}")
    pct=$(awk -v s="${sent2:-0}" -v f="${sent1:-0}" 'BEGIN { if (f > 0) printf "%.1f", 100 * s / f; else print "-" }')

    # A new node restores the second snapshot.
    t0=$(now)
    "$SPOTD" run --job b --store "file://$d/store" --state-dir "$d/n2" --method criu "${stage[@]}" \
        --criu "$CRIU" --cloud none --events "$d/ev2" \
        -- "$tmp/criu_mem" "$mib" "$d/rewrite" "$CHANGE" >"$d/n2.out" 2>"$d/n2.err" &
    pid=$!
    if until_line "$d/n2.out" tick 120; then
        rs=$(($(now) - t0))
    else
        rs=failed
    fi
    for p in $(descendants "$pid") "$pid"; do kill -KILL "$p" 2>/dev/null; done
    wait "$pid" 2>/dev/null
    printf '%-5s %9s | %6s %6s %6s %6s | %6s %6s %6s %6s %6s | %6s %6s %6s %9s %7s | %8s\n' \
        "$mib" "$(mb "${bytes:-0}")" "$hd_ms" "$hd_cpu" "$hz_ms" "$hz_cpu" \
        "$(field "$d/ev1" checkpoint_saved ms)" "$(field "$d/ev1" upload_done ms)" \
        "$(field "$d/ev1" commit total_ms)" "$cpu1" "$gb" \
        "$(field "$d/ev1" checkpoint_saved ms 2)" "$(field "$d/ev1" upload_done ms 2)" "$cpu2" \
        "$(mb "${sent2:-0}")" "$pct" "$rs"
    worst_gb=$(awk -v a="$worst_gb" -v b="$gb" 'BEGIN { print (b != "-" && b + 0 > a + 0) ? b : a }')
    worst_pct=$(awk -v a="$worst_pct" -v b="$pct" 'BEGIN { print (b != "-" && b + 0 > a + 0) ? b : a }')
    rm -rf "$d"
done
[ ${#splits[@]} = 0 ] || printf 'cpu: %s\n' "${splits[@]}"
if [ $track = 1 ]; then
    printf 'pre-dump: %s\n' "${pre_lines[@]}"
else
    echo "pre-dump: not measured: this kernel does not track dirty pages ($(grep -o 'Dirty tracking is OFF' "$tmp/track" || echo "criu check --feature mem_dirty_track failed")); without it a pre-dump saves the dump nothing"
fi
verdict() { awk -v v="$1" -v g="$2" 'BEGIN { print (v + 0 <= g + 0) ? "PASS" : "MISS" }'; }
echo "goal: dump+upload at most 1.2 CPU-seconds per GB, SHA-256 included: worst $worst_gb s/GB: $(verdict "$worst_gb" 1.2)"
echo "goal: the second snapshot uploads at most 15 % of the first: worst $worst_pct %: $(verdict "$worst_pct" 15)"
