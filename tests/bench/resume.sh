#!/usr/bin/env bash
# Time to resume: from `spotd run` on an empty state directory to the
# trainer's first step after the restore, for generations of 256 MiB and
# 1 GiB (4 GiB with BENCH_SIZES), on a local OpenStack Swift + s3api
# (tests/servers/swift.sh), side by side with what one scripts without
# spotd: `aws s3 cp --recursive` of the same files, then the trainer.  A
# report, not a test.  See README.md.
#
#   tests/bench/resume.sh                       # 256 and 1024 MiB, a few minutes
#   BENCH_SIZES="256 1024 4096" tests/bench/resume.sh
#
# The trainer (resume_trainer.py) sleeps BENCH_IMPORT_S seconds first (2;
# what `import torch` costs), then waits for the restore (libckpt's
# resume_wait()), reads its whole folder, and says when its first step
# starts.  spotd runs twice: as it starts by default (restore, then the
# command), and with --early-start (the command at once, its import
# beside the restore).  The job of the first size keeps BENCH_GENS
# generations (50; the others one): discovery should take as many
# requests for either.
#
# Columns, in ms: discovery (spotd's start to the restore's start: the
# newest committed generation found), restore (the generation's manifest
# and every chunk, each verified as it is written; aws: its copy), start
# (the command's start to its first step: the import, the wait, the
# load), total (the bench's clock, from launching spotd or aws to the
# first step); find_requests (the store requests discovery took).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
SIZES=${BENCH_SIZES:-256 1024}
IMPORT=${BENCH_IMPORT_S:-2}
GENS=${BENCH_GENS:-50}
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"

say() { echo "resume.sh: $*" >&2; }
die() { say "$*"; exit 1; }

SPOTD="$root/$O/spotd" SPOTCTL="$root/$O/spotctl"
TRAINER="$root/tests/bench/resume_trainer.py"
[ -x "$SPOTD" ] && [ -x "$SPOTCTL" ] || die "build first (make)"
AWS=$(command -v aws || echo /usr/bin/aws)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/spotd-bench-resume.XXXXXX") || exit 1
sw=$tmp/swift
cleanup() {
    local p
    for p in $(descendants $$); do kill -KILL "$p" 2>/dev/null; done
    [ -d "$sw" ] && "$root/tests/servers/swift.sh" stop "$sw" >/dev/null 2>&1
    scratch_end
}
cleanup_traps

mkdir -p "$sw" "$tmp/log"
"$root/tests/servers/swift.sh" start "$sw" >"$tmp/log/swift.log" 2>&1 ||
    { tail -n 20 "$tmp/log/swift.log" >&2; die "Swift did not start"; }
set -a
# shellcheck disable=SC1091
. "$sw/env"
set +a
export AWS_ENDPOINT_URL=$S3_ENDPOINT
curl -s -o /dev/null -X PUT --netrc-file "$sw/netrc" --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$S3_ENDPOINT/bench"
have_aws=0
[ -x "$AWS" ] && "$AWS" --version >/dev/null 2>&1 && have_aws=1

now() { date +%s%3N; }
# cold: what a new node has, as far as one machine can: nothing of the
# store's objects or of the last run's files in the page cache (root).
cold() {
    sync
    [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches
}
# times EVENTS: "discovery restore child_start_ms find_requests" from
# spotd's event log.
times() {
    python3 - "$1" <<'EOF'
import datetime, json, sys
def ms(ts):
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp() * 1000)
ev = {}
for line in open(sys.argv[1]):
    e = json.loads(line)
    ev.setdefault(e["event"], e)
s, r, c = ev.get("start"), ev.get("resume"), ev.get("child_start")
if not (s and r and c):
    print("- - 0 -")
else:
    begin = ms(r["ts"]) - r["ms"]
    print(begin - ms(s["ts"]), r["ms"], ms(c["ts"]), r.get("find_requests", "-"))
EOF
}
first_step() { sed -n 's/^first_step \([0-9]*\) .*/\1/p' "$1" | head -n 1; }

say "$(nproc) cores, Swift + s3api on 127.0.0.1, the trainer imports for ${IMPORT} s, $GENS generations kept for the first size"
printf '%-5s %5s %-12s | %9s %8s %7s %7s | %5s\n' MiB gens tool discovery restore start total finds
declare -A total
first=1
for mib in $SIZES; do
    job=r$mib
    rm -rf "$tmp/src" "$tmp/small"
    mkdir -p "$tmp/src/w0" "$tmp/small/w0"
    head -c $((mib << 20)) /dev/urandom >"$tmp/src/w0/state.bin"
    echo small >"$tmp/small/w0/state.bin"
    gens=1
    if [ $first = 1 ]; then
        for ((i = 1; i < GENS; i++)); do
            "$SPOTCTL" push --store s3://bench/ckpt --job "$job" "$tmp/small" >/dev/null 2>&1 ||
                die "spotctl push of generation $i failed"
        done
        gens=$GENS
    fi
    "$SPOTCTL" push --store s3://bench/ckpt --job "$job" --step 100 "$tmp/src" \
        >"$tmp/log/push-$mib.log" 2>&1 || { cat "$tmp/log/push-$mib.log" >&2; die "spotctl push failed"; }
    [ $have_aws = 1 ] && "$AWS" s3 cp --quiet --recursive "$tmp/src" "s3://bench/plain-$mib/" \
        >"$tmp/log/aws-up-$mib.log" 2>&1
    rm -rf "$tmp/src" "$tmp/small"

    for tool in spotd spotd-early; do
        st=$tmp/n-$tool-$mib
        extra=()
        [ $tool = spotd-early ] && extra=(--early-start)
        cold
        t0=$(now)
        "$SPOTD" run --cloud none --job "$job" --store s3://bench/ckpt --state-dir "$st" \
            --events "$st.ev" "${extra[@]}" -- python3 "$TRAINER" "$IMPORT" \
            >"$st.out" 2>"$st.err"
        t1=$(first_step "$st.out")
        read -r disc rest child finds <<<"$(times "$st.ev")"
        if [ -z "$t1" ]; then
            say "$mib MiB, $tool: no first step (see $st.err)"
            tail -n 5 "$st.err" >&2
            continue
        fi
        total[$tool-$mib]=$((t1 - t0))
        printf '%-5s %5s %-12s | %9s %8s %7s %7s | %5s\n' "$mib" "$gens" "$tool" "$disc" "$rest" \
            $((t1 - child)) $((t1 - t0)) "$finds"
        rm -rf "$st"
    done

    if [ $have_aws = 1 ]; then
        cold
        t0=$(now)
        "$AWS" s3 cp --quiet --recursive "s3://bench/plain-$mib/" "$tmp/base-$mib" \
            >"$tmp/log/aws-down-$mib.log" 2>&1
        t2=$(now)
        python3 "$TRAINER" "$IMPORT" "$tmp/base-$mib/w0" >"$tmp/base-$mib.out" 2>&1
        t1=$(first_step "$tmp/base-$mib.out")
        if [ -n "$t1" ]; then
            total[aws-$mib]=$((t1 - t0))
            printf '%-5s %5s %-12s | %9s %8s %7s %7s | %5s\n' "$mib" 1 "aws+start" - $((t2 - t0)) \
                $((t1 - t2)) $((t1 - t0)) -
        fi
        rm -rf "$tmp/base-$mib"
    fi
    first=0
done

for mib in $SIZES; do
    b=${total[aws-$mib]:-}
    for tool in spotd spotd-early; do
        s=${total[$tool-$mib]:-}
        if [ -n "$b" ] && [ -n "$s" ]; then
            awk -v s="$s" -v b="$b" -v m="$mib" -v t="$tool" 'BEGIN {
                r = s / b; printf "goal: %s at %s MiB at most 0.6 x aws+start: %.2f x: %s\n", t, m, r,
                (m < 1024) ? "(not a goal size)" : (r <= 0.6 ? "PASS" : "MISS") }'
        fi
    done
done
[ $have_aws = 1 ] || echo "aws+start: not measured (no aws CLI: apt-get install awscli)"
