#!/usr/bin/env bash
# The criu method against CRIU by hand: a process of 64 MiB, 256 MiB and
# 1 GiB (incompressible; tests/bench/criu_mem.c) under spotd-init, dumped
# by plain `criu dump` into a local directory (then `tar | zstd -1`, what
# one would script instead), and by spotd run --method criu (dump, then the
# snapshot engine into a file store).  A report, not a test; root only.
#
#   tests/bench/criu.sh                        # about a minute
#   BENCH_SIZES="64" tests/bench/criu.sh
#
# Columns:
#   criu      `criu dump --leave-running` of the tree, alone: the freeze
#   +tar|zstd that, then tar and zstd -1 of the images into one file
#   dump      spotd: checkpoint_begin -> checkpoint_saved (criu dump inside)
#   upload    spotd: upload_done "ms" (chunk, hash, compress, store)
#   total     spotd: commit "total_ms", begin -> committed
#   gen 2     the second generation, a second later (1 % of the memory
#             rewritten in one stretch): bytes sent of the images' bytes
#   restore   a new node: spotd started -> the restored process prints
#             (fetch the generation, criu restore)
#
# CRIU: tests/servers/criu.sh (BENCH_CRIU_DIR, default build-criu).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
SIZES=${BENCH_SIZES:-64 256 1024}
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

printf '%-6s %8s %10s | %8s %8s %8s %16s %9s\n' MiB criu +tar\|zstd dump upload total "gen 2 sent" restore
for mib in $SIZES; do
    d="$tmp/$mib"
    mkdir -p "$d/store" "$d/img" "$d/work"
    # CRIU by hand.
    "$INIT" run -- "$tmp/criu_mem" "$mib" >"$d/by-hand.out" 2>&1 &
    outer=$!
    until_line "$d/by-hand.out" ready 60 || { say "$mib MiB: the program did not start"; continue; }
    init=$(tr -d ' ' <"/proc/$outer/task/$outer/children")
    t0=$(now)
    "$CRIU" dump -t "$init" -D "$d/img" -W "$d/work" -o dump.log --leave-running || say "criu dump failed"
    t1=$(now)
    cm=$((t1 - t0))
    if command -v zstd >/dev/null; then
        tar -C "$d/img" -cf - . | zstd -q -1 -o "$d/img.tar.zst"
        t2=$(now)
        tz=$((t2 - t0))
    else
        tz=-
    fi
    kill -KILL "$init" "$outer" 2>/dev/null
    wait "$outer" 2>/dev/null
    rm -rf "$d/img" "$d/img.tar.zst"

    # spotd: a checkpoint, one more a second later (the notice's).
    "$SPOTD" run --job b --store "file://$d/store" --state-dir "$d/n1" --method criu \
        --criu "$CRIU" --cloud none --notice-file "$d/notice" --events "$d/ev1" \
        -- "$tmp/criu_mem" "$mib" >"$d/n1.out" 2>"$d/n1.err" &
    pid=$!
    until_line "$d/n1.out" ready 60 || { say "$mib MiB: spotd's command did not start"; continue; }
    "$SPOTCTL" checkpoint --socket "$d/n1/control.sock" >/dev/null 2>&1
    until_line "$d/ev1" '"event":"commit"' 120 || say "$mib MiB: no first commit"
    sleep 1
    touch "$d/notice"
    wait "$pid"
    dump=$(field "$d/ev1" checkpoint_saved ms)
    up=$(field "$d/ev1" upload_done ms)
    total=$(field "$d/ev1" commit total_ms)
    b2=$(field "$d/ev1" upload_done bytes 2)
    s2=$(field "$d/ev1" upload_done bytes_sent 2)

    # A new node.
    t0=$(now)
    "$SPOTD" run --job b --store "file://$d/store" --state-dir "$d/n2" --method criu \
        --criu "$CRIU" --cloud none --events "$d/ev2" \
        -- "$tmp/criu_mem" "$mib" >"$d/n2.out" 2>"$d/n2.err" &
    pid=$!
    if until_line "$d/n2.out" tick 120; then
        rs=$(($(now) - t0))
    else
        rs=failed
    fi
    for p in $(descendants "$pid") "$pid"; do kill -KILL "$p" 2>/dev/null; done
    wait "$pid" 2>/dev/null
    printf '%-6s %8s %10s | %8s %8s %8s %16s %9s\n' "$mib" "$cm" "$tz" \
        "${dump:--}" "${up:--}" "${total:--}" "$(awk -v s="${s2:-0}" -v b="${b2:-0}" \
        'BEGIN { if (b > 0) printf "%.1f of %.1f MB", s / 1e6, b / 1e6; else print "-" }')" "$rs"
    rm -rf "$d"
done
scratch_end
