#!/usr/bin/env bash
# The store at scale: what spotctl's commands and a spotd resume cost in
# store requests and time, for a job of many retained one-rank generations
# and for one generation of many ranks, on a file:// store and on a local
# OpenStack Swift + s3api (tests/servers/swift.sh).  The shards are tiny
# (one 40-byte file a rank, the same in every generation): it measures
# metadata, not bytes.  See README.md.
#
#   tests/bench/scale.sh                  # 2,000 of each, about 15 minutes
#   BENCH_SCALE=200 tests/bench/scale.sh  # about 2 minutes
#
# Each shape is measured at BENCH_SCALE and at a tenth of it, so that the
# table shows how each count grows: "x10" is the count at the full size
# over the count at a tenth.  The goal (issue 19): every operation grows
# linearly with what it must read (x10 about 10 for ls, gc, and for
# everything on the many-ranks generation; about 1 for show --gen,
# fetch and verify of one one-rank generation), and a resume's search for
# the newest generation is O(1) in the number of generations (x10 = 1).
# The "no pointer" row is the same resume with <job>/LATEST deleted: the
# full listing that spotd did before the pointer.
#
# Columns: requests (SPOTCTL_STATS, or the resume event's find_requests:
# every S3 HTTP request, pages and retries included; a file-store
# operation each), seconds (wall, of the command; for resume, of the whole
# spotd run: search, restore, a command that exits at once).
#
# Environment: BENCH_SCALE (2000), BENCH_STORES (file s3), BENCH_KEEP (0;
# 1 keeps the scratch folder), O (build), BENCH_SPOTCTL / BENCH_SPOTD
# (binaries to use instead).  It is a report: it exits 0 whatever the
# numbers, 1 when it could not run (Swift, a push that failed).
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/bench/lib.sh"
say() { echo "scale.sh: $*" >&2; }
die() { say "$*"; exit 1; }

scale=${BENCH_SCALE:-2000}
case $scale in '' | *[!0-9]* | 0 | ?) die "BENCH_SCALE must be a number of at least 10" ;; esac
O=${O:-build}
SPOTCTL=${BENCH_SPOTCTL:-$root/$O/spotctl}
SPOTD=${BENCH_SPOTD:-$root/$O/spotd}
[ -x "$SPOTCTL" ] && [ -x "$SPOTD" ] || die "no $SPOTCTL or $SPOTD: run make first"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spotd-scale-bench.XXXXXX") || exit 1
sw=$tmp/swift
cleaned=0
# shellcheck disable=SC2317  # invoked from traps
cleanup() {
    [ "$cleaned" = 1 ] && return
    cleaned=1
    [ -d "$sw" ] && "$root/tests/servers/swift.sh" stop "$sw" >/dev/null 2>&1
    scratch_end
}
cleanup_traps
mkdir -p "$tmp/log" "$tmp/rank"
echo "one tiny shard, the same in every generation" >"$tmp/rank/shard.bin"

# ctl STORE JOB ARGS...: spotctl; sets RC, REQ and SECS.
ctl() {
    local url=$1 job=$2
    shift 2
    SPOTCTL_STATS=1 "$SPOTCTL" "$@" --store "$url" --job "$job" >"$tmp/out" 2>"$tmp/err"
    RC=$?
    REQ=$(sed -n 's/^spotctl: stats: \([0-9]*\) store requests in \([0-9.]*\) s$/\1/p' "$tmp/err")
    SECS=$(sed -n 's/^spotctl: stats: \([0-9]*\) store requests in \([0-9.]*\) s$/\2/p' "$tmp/err")
}

# resume STORE JOB: a spotd start; sets RC, REQ (find_requests), SECS.
resume() {
    local t0 t1
    rm -rf "$tmp/state" "$tmp/ev"
    t0=$(date +%s.%N)
    "$SPOTD" run --cloud none --job "$2" --store "$1" --state-dir "$tmp/state" \
        --events "$tmp/ev" -- true >"$tmp/out" 2>"$tmp/err"
    RC=$?
    t1=$(date +%s.%N)
    REQ=$(grep -o '"event":"resume".*' "$tmp/ev" | grep -o '"find_requests":[0-9]*' | cut -d: -f2)
    SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
}

rows=()
# row STORE SHAPE N OP: one measurement into rows (REQ SECS of the last run).
declare -A req
row() {
    [ "$RC" = 0 ] || say "$1 $2 $3 $4: exit $RC: $(tail -n 1 "$tmp/err")"
    req["$1|$2|$3|$4"]=$REQ
    rows+=("$1|$2|$3|$4|${REQ:-?}|${SECS:-?}|$RC")
}

# gens URL JOB N: N one-rank generations, pushed one after the other.
make_gens() {
    local i
    for i in $(seq 1 "$3"); do
        "$SPOTCTL" push --store "$1" --job "$2" "$tmp/rank" >/dev/null 2>"$tmp/err" ||
            die "push $i of $2 failed: $(cat "$tmp/err")"
    done
}

# ranks URL JOB N: one generation of N ranks, one push.
make_ranks() {
    local i dirs=()
    for i in $(seq 0 $(($3 - 1))); do
        mkdir -p "$tmp/ranks/$i"
        [ -e "$tmp/ranks/$i/shard.bin" ] || ln "$tmp/rank/shard.bin" "$tmp/ranks/$i/shard.bin"
        dirs+=("$tmp/ranks/$i")
    done
    "$SPOTCTL" push --store "$1" --job "$2" "${dirs[@]:0:$3}" >/dev/null 2>"$tmp/err" ||
        die "the push of $3 ranks to $2 failed: $(cat "$tmp/err")"
}

# measure STORE URL SHAPE N JOB: every operation on one job.
measure() {
    local st=$1 url=$2 shape=$3 n=$4 job=$5 newest
    ctl "$url" "$job" ls
    row "$st" "$shape" "$n" ls
    newest=$(awk '$2 == "committed" { g = $1 } END { print g }' "$tmp/out")
    ctl "$url" "$job" show --gen "$newest"
    row "$st" "$shape" "$n" "show --gen"
    rm -rf "$tmp/back"
    ctl "$url" "$job" fetch "$tmp/back"
    row "$st" "$shape" "$n" fetch
    ctl "$url" "$job" verify
    row "$st" "$shape" "$n" verify
    resume "$url" "$job"
    row "$st" "$shape" "$n" "resume: find newest"
    case $url in
    file://*) rm -f "${url#file://}/$job/LATEST" ;;
    s3://*) curl -s "${sigv4[@]}" -H "x-amz-content-sha256: $EMPTY_SHA" -X DELETE \
                "$S3_ENDPOINT/bkt/$job/LATEST" -o /dev/null ;;
    esac
    resume "$url" "$job"
    row "$st" "$shape" "$n" "resume: no pointer"
    ctl "$url" "$job" gc --keep 3 --grace 1h
    row "$st" "$shape" "$n" "gc --keep 3"
}

EMPTY_SHA=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
for st in ${BENCH_STORES:-file s3}; do
    case $st in
    file)
        mkdir -p "$tmp/store"
        url=file://$tmp/store
        ;;
    s3)
        mkdir -p "$sw"
        "$root/tests/servers/swift.sh" start "$sw" >"$tmp/log/swift-start.log" 2>&1 ||
            { tail -n 20 "$tmp/log/swift-start.log" >&2; die "Swift did not start"; }
        . "$sw/env"
        export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION
        export AWS_ENDPOINT_URL=$S3_ENDPOINT
        unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL_S3 AWS_CA_BUNDLE
        export AWS_SHARED_CREDENTIALS_FILE=$tmp/none AWS_EC2_METADATA_DISABLED=true
        sigv4=(--netrc-file "$sw/netrc" --aws-sigv4 "aws:amz:$AWS_REGION:s3")
        curl -s "${sigv4[@]}" -H "x-amz-content-sha256: $EMPTY_SHA" -X PUT "$S3_ENDPOINT/bkt" \
            -o /dev/null
        url=s3://bkt
        ;;
    *) die "unknown store '$st' in BENCH_STORES (file, s3)" ;;
    esac
    for n in $((scale / 10)) "$scale"; do
        say "$st: $n generations of one rank"
        t0=$(date +%s)
        make_gens "$url" "gens-$n" "$n"
        say "$st: ... pushed in $(($(date +%s) - t0)) s; measuring"
        measure "$st" "$url" "gens" "$n" "gens-$n"
        say "$st: one generation of $n ranks"
        make_ranks "$url" "ranks-$n" "$n"
        measure "$st" "$url" "ranks" "$n" "ranks-$n"
    done
    if [ "$st" = s3 ]; then
        "$root/tests/servers/swift.sh" stop "$sw" >/dev/null 2>&1
        rm -rf "$sw"
    fi
done

# ---- the table ----------------------------------------------------------------
small=$((scale / 10))
verdicts=()
printf '%-5s %-6s %-20s %10s %8s %10s %8s %6s\n' store shape operation "req@$small" "s@$small" \
    "req@$scale" "s@$scale" x10
for r in "${rows[@]}"; do
    IFS='|' read -r st shape n op rq secs rc <<<"$r"
    [ "$n" = "$scale" ] || continue
    lo=${req["$st|$shape|$small|$op"]:-}
    s_lo=$(for x in "${rows[@]}"; do IFS='|' read -r a b c d e f g <<<"$x"
        [ "$a|$b|$c|$d" = "$st|$shape|$small|$op" ] && echo "$f"; done)
    ratio=$(awk -v a="$rq" -v b="$lo" 'BEGIN { if (b + 0 > 0 && a != "?") printf "%.1f", a / b; else print "?" }')
    printf '%-5s %-6s %-20s %10s %8s %10s %8s %6s\n' "$st" "$shape" "$op" "${lo:-?}" "${s_lo:-?}" \
        "$rq" "$secs" "$ratio"
    # What each operation must read grows 10 times on ranks, and on gens
    # for ls, gc and the full listing; not for one one-rank generation.
    want="at most linear"
    if [ "$shape" = gens ]; then
        case $op in "show --gen" | fetch | verify | "resume: find newest") want="O(1)" ;; esac
    fi
    ok=$(awk -v r="$ratio" -v w="$want" 'BEGIN {
        if (r == "?") print "?"; else if (w == "O(1)") print (r <= 1.5 ? "PASS" : "FAIL");
        else print (r <= 12 ? "PASS" : "FAIL") }')
    verdicts+=("$ok $st $shape $op: x$ratio, wanted $want")
done
echo
for v in "${verdicts[@]}"; do echo "$v"; done
if printf '%s\n' "${verdicts[@]}" | grep -q '^FAIL\|^?'; then
    echo "goal: not met (see the FAIL lines)"
else
    echo "goal: met: every count grows at most linearly with what the operation reads, and a resume finds the newest of $scale generations in ${req["file|gens|$scale|resume: find newest"]:-?} (file) / ${req["s3|gens|$scale|resume: find newest"]:-?} (s3) requests"
fi
exit 0
