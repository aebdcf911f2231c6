#!/usr/bin/env bash
# How long a periodic checkpoint blocks the trainer, with and without
# --stage-dir (supervisord/orch_dirs.c), beside a memcpy of its state.
# A report, not a test.  See README.md.
#
#   tests/bench/stage.sh                       # about 2 minutes
#   BENCH_SIZES=256 tests/bench/stage.sh       # about 40 s
#
# Each run: spotd run --interval 3s -- examples/c-trainer/trainer STEPS
# SIZE_MIB with TRAINER_TIMES=1, the file store, for about 12 s (3 or 4
# periodic checkpoints).  libckpt's ckpt_saved() does not wait for the
# upload, so the trainer is blocked for its own write of state.bin alone;
# at each save it reports that time and, beside it, a memcpy of its state.
# The columns (medians over a run's saves, ms):
#
#   disk      the trainer's write() + fsync of state.bin into the state
#             directory (${TMPDIR:-/tmp}: a disk), no --stage-dir
#   shm       the same write with --stage-dir /dev/shm (tmpfs, 4 KiB pages)
#   huge      --stage-dir on a tmpfs of our own mounted huge=always (2 MiB
#             pages; "-" where no tmpfs can be mounted: not root)
#   memcpy    memcpy() of the state into a buffer touched before
#   fresh     memcpy() into a buffer just allocated (its page faults too),
#             what a snapshot into new memory costs
#   x_memcpy  the best staged (huge, else shm) / memcpy: issue 21's goal is
#             at most 1.2
#   x_fresh   the best staged / fresh
#   x_disk    the best staged / disk
#
# Environment: BENCH_SIZES ("256 1024", MiB; a run needs about 3x its size
# of memory, and as much on the disk), BENCH_KEEP (0; 1 keeps the scratch
# folder), O (build).
set -u

sizes=${BENCH_SIZES:-256 1024}
for s in $sizes; do
    case $s in '' | *[!0-9]* | 0)
        echo "stage.sh: BENCH_SIZES must be positive whole numbers of MiB, not '$s'" >&2
        exit 2 ;;
    esac
    [ "$s" -le 8192 ] || { echo "stage.sh: at most 8192 MiB a size" >&2; exit 2; }
done
root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
case $O in /*) obuild=$O ;; *) obuild=$root/$O ;; esac

# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"
say() { echo "stage.sh: $*" >&2; }
die() { say "$*"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spotd-stage-bench.XXXXXX") || exit 1
shm=$(mktemp -d /dev/shm/spotd-stage-bench.XXXXXX) || exit 1
huge=$tmp/huge
mounted=0
# shellcheck disable=SC2317  # invoked from traps
cleanup() {
    [ "$mounted" = 1 ] && umount -l "$huge" 2>/dev/null
    rm -rf "$shm"
    scratch_end
}
cleanup_traps

mkdir -p "$tmp/log" "$tmp/bin" "$tmp/store" "$huge"
if ! make -C "$root" O="$O" all >"$tmp/log/make.log" 2>&1; then
    tail -n 5 "$tmp/log/make.log" | sed 's/^/    make: /' >&2
    die "make failed"
fi
SPOTD=$tmp/bin/spotd
TRAINER=$tmp/bin/trainer
cp "$obuild/spotd" "$SPOTD" && cp "$obuild/examples/c-trainer/trainer" "$TRAINER" ||
    die "make made no $O/spotd or $O/examples/c-trainer/trainer"
if mount -t tmpfs -o size=16g,huge=always tmpfs "$huge" 2>/dev/null; then
    mounted=1
fi

# median: of the numbers on stdin, one a line.
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }

# run NAME SIZE [SPOTD ARGS...]: one run; its saves' times in $tmp/NAME.times
# (save_ms memcpy_ms fresh_ms, a line a save).  False when it did not end
# well with two commits at least.
run() {
    local name=$1 size=$2 steps rc n
    shift 2
    steps=$(( 12288 / size ))
    [ "$steps" -ge 8 ] || steps=8
    TRAINER_TIMES=1 timeout -k 5 300 "$SPOTD" run --cloud none --job "$name" \
        --store "file://$tmp/store" --state-dir "$tmp/node-$name" --interval 3s \
        --events "$tmp/log/$name.ev" "$@" -- "$TRAINER" "$steps" "$size" \
        >"$tmp/log/$name.out" 2>"$tmp/log/$name.err"
    rc=$?
    sed -n 's/^trainer: times: step [0-9]* save_ms \([0-9.]*\) memcpy_ms \([0-9.]*\) fresh_ms \([0-9.]*\) .*/\1 \2 \3/p' \
        "$tmp/log/$name.err" >"$tmp/$name.times"
    n=$(grep -c '"event":"commit"' "$tmp/log/$name.ev" 2>/dev/null)
    rm -rf "$tmp/node-$name" "$tmp/store/$name"
    if [ "$rc" != 0 ] || [ "${n:-0}" -lt 2 ]; then
        say "$name: exit $rc, ${n:-0} commits (see $tmp/log/$name.err)"
        return 1
    fi
}

col() { awk -v c="$1" '{ print $c }' "$tmp/$2.times" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }

failed=0
rows=()
for size in $sizes; do
    run "disk-$size" "$size" || failed=1
    run "shm-$size" "$size" --stage-dir "$shm" || failed=1
    h=-
    if [ "$mounted" = 1 ]; then
        run "huge-$size" "$size" --stage-dir "$huge" || failed=1
        h=$(col 1 "huge-$size")
    fi
    d=$(col 1 "disk-$size") s=$(col 1 "shm-$size")
    # The copies, over every save of the three runs.
    cat "$tmp"/*-"$size".times >"$tmp/all-$size.times"
    m=$(col 2 "all-$size") f=$(col 3 "all-$size")
    best=$s
    [ "$h" != - ] && best=$h
    rows+=("$(printf '%-6s %8s %8s %8s %8s %8s %9s %8s %7s' "$size" "$d" "$s" "$h" "$m" "$f" \
        "$(ratio "$best" "$m")" "$(ratio "$best" "$f")" "$(ratio "$best" "$d")")")
done

echo "A periodic checkpoint: how long the trainer is blocked (median ms; $(nproc) cores)"
echo
printf '%-6s %8s %8s %8s %8s %8s %9s %8s %7s\n' MiB disk shm huge memcpy fresh x_memcpy x_fresh x_disk
for r in "${rows[@]}"; do echo "$r"; done
exit "$failed"
