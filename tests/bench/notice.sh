#!/usr/bin/env bash
# From a terminating notice to a committed checkpoint: how long each part
# takes, for a trainer of 256 MiB, 1 GiB and 4 GiB of state, on the file
# store and on S3 (OpenStack Swift + s3api on 127.0.0.1, tests/servers/
# swift.sh).  Then ckpt_step()'s per-step cost (tests/bench/step.sh).
# A report, not a test.  See README.md.
#
#   tests/bench/notice.sh                                   # about 4 minutes
#   BENCH_SIZES="64 256" BENCH_STORES=file tests/bench/notice.sh   # about 20 s
#
# Each run: spotd run --job --store --state-dir --drill-after T
# --signal-deadline 120s -- examples/c-trainer/trainer 1000000 SIZE_MIB.
# The drill (a terminating notice) comes after T = 2 s + 5 ms per MiB, once
# the trainer has initialised its state and run a few steps.  The trainer
# saves through libckpt (write() + fsync of state.bin), spotd stores and
# commits the generation and stops it (exit 75); it never reaches its last
# step.  The columns come from spotd's event log (docs/events.md):
#
#   step       the step saved (commit "step"): the drill landed mid-run
#   save       checkpoint_begin -> checkpoint_saved (checkpoint_saved "ms")
#     wait     checkpoint_begin -> state.bin created (its birth time): the
#              trainer reaching the step spotd asks for
#     steps    wait in training steps: wait x checkpoint_begin "steps_per_s"
#     write    state.bin created -> checkpoint_saved: write() and fsync of
#              state.bin (and of the small step file), the answer to spotd
#   upload     upload_done "ms": read, chunk, hash, compress (in worker
#              threads, pipelined) and store, with the manifest
#   MB/s       upload_done "bytes" / upload, 10^6 bytes a MB
#   hash, encode  upload_done "hash_ms" and "encode_ms" when spotd writes
#              them, else "-"
#   commit     commit "commit_ms": the commit record
#   total      commit "total_ms": checkpoint_begin -> commit
#   n->commit  the commit record's ts minus the notice record's ts
#   overlap    upload_done "bytes_early" / "bytes": the share stored while
#              the trainer was still writing (supervisord/follow.c)
#   baseline   what a user scripts without spotd on the same machine and
#              store: the trainer's write (the write column) plus a copy
#              of state.bin into the store, cp + sync for file, aws s3 cp
#              for s3 ("-" without the AWS CLI); compare with n->commit
#
# wait and write need the file system to keep birth times (statx;
# ext4, xfs, btrfs do) and spotd to leave the saved files in its state
# directory (it does: STATE_DIR/work/gen-N/w0); else they are "-".
#
# Environment: BENCH_SIZES ("256 1024 4096", MiB), BENCH_STORES ("file s3"),
# BENCH_STEP (1; 0 leaves out ckpt_step()'s table, which `make bench`
# prints with step.sh just before), BENCH_KEEP (0; 1 keeps the scratch
# folder: event logs, spotd logs, Swift's logs; the big files are deleted
# all the same), O (build).  spotd and the trainer are built with make and
# copied aside, so a rebuild during the run does not change what is
# measured.  The scratch folder is under ${TMPDIR:-/tmp}; a run needs about
# 2x its state free there (spotd's copy of the trainer's files and the
# store's), plus the earlier S3 runs' objects, which Swift keeps until the
# end.
#
# Exit status: 0 with a report, whatever the numbers; also when Swift cannot
# start (the s3 rows say why).  1 when spotd or the trainer could not be
# built, or a run did not end with a committed checkpoint and exit 75.
set -u

sizes=${BENCH_SIZES:-256 1024 4096}
stores=${BENCH_STORES:-file s3}
for s in $sizes; do
    case $s in '' | *[!0-9]* | 0)
        echo "notice.sh: BENCH_SIZES must be positive whole numbers of MiB, not '$s'" >&2
        exit 2 ;;
    esac
    [ "$s" -le 16384 ] || { echo "notice.sh: at most 16384 MiB a size" >&2; exit 2; }
done
for s in $stores; do
    case $s in file | s3) ;; *) echo "notice.sh: unknown store '$s' in BENCH_STORES" >&2; exit 2 ;; esac
done

root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
case $O in /*) obuild=$O ;; *) obuild=$root/$O ;; esac

# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"
say() { echo "notice.sh: $*" >&2; }
die() { say "$*"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spotd-notice-bench.XXXXXX") || exit 1
sw=$tmp/swift
run_pid=''
cleaned=0
# shellcheck disable=SC2317  # invoked from traps
cleanup() {
    [ "$cleaned" = 1 ] && return
    cleaned=1
    # A run still going (interrupted): spotd, and the trainer it leads.
    if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
        kill -TERM "$run_pid" 2>/dev/null
        sleep 1
        kill -KILL "$run_pid" 2>/dev/null
    fi
    [ -d "$sw" ] && "$root/tests/servers/swift.sh" stop "$sw" >/dev/null 2>&1
    [ "${BENCH_KEEP:-0}" = 1 ] && rm -rf "$tmp/node" "$tmp/store" "$sw/srv"
    scratch_end "without the state, the store and Swift's data"
}
cleanup_traps

mkdir -p "$tmp/log" "$tmp/bin"
if ! make -C "$root" O="$O" all >"$tmp/log/make.log" 2>&1; then
    tail -n 5 "$tmp/log/make.log" | sed 's/^/    make: /' >&2
    die "make failed"
fi
SPOTD=$tmp/bin/spotd
TRAINER=$tmp/bin/trainer
if ! cp "$obuild/spotd" "$SPOTD" || ! cp "$obuild/examples/c-trainer/trainer" "$TRAINER"; then
    die "make made no $O/spotd or $O/examples/c-trainer/trainer"
fi

results=$tmp/results.tsv
: >"$results"
failed=0
s3_na=''

# record STORE SIZE STATUS [FIELDS...]: one line of results.tsv.
record() { local IFS=$'\t'; echo "$*" >>"$results"; }

free_mib() { df -Pk "$tmp" | awk 'NR == 2 { printf "%d", $4 / 1024 }'; }

# row EVENTS STATE_DIR: the fields of a run, tab-separated, from its event
# log and the birth time of the saved state.bin.  (Its mtime would not say
# when the writing ended: the trainer writes it with one write() call, and
# the kernel sets the mtime as a write() begins.)
row() {
    local f bt=''
    f=$(find "$2/work" -name state.bin 2>/dev/null | head -n 1)
    [ -n "$f" ] && bt=$(stat -c %.3W "$f" 2>/dev/null)
    /usr/bin/python3 - "$1" "${bt:-0}" <<'PY'
import json, sys
from datetime import datetime, timezone

def ms(ts):   # 2026-11-30T10:44:25.382Z
    t = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    return t.timestamp() * 1000

ev = {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    ev.setdefault(r.get("event"), r)          # the first of each
bt = float(sys.argv[2]) * 1000
b, s, u, c, n = (ev.get(k) for k in ("checkpoint_begin", "checkpoint_saved", "upload_done",
                                      "commit", "notice"))
if not (b and s and u and c and n):
    print("missing events: " + " ".join(k for k in ("notice", "checkpoint_begin", "checkpoint_saved",
          "upload_done", "commit") if not ev.get(k)))
    sys.exit(0)
t_begin, t_saved = ms(b["ts"]), ms(s["ts"])
# The birth time is in ms here, the events' ts are whole ms: allow 1 ms.
split = bt > 0 and t_begin - 1 <= bt <= t_saved + 1
def opt(r, k):
    v = r.get(k)
    return "-" if v is None else "%d" % v
print("\t".join(str(x) for x in (
    "ok", c["step"], s["ms"],
    "%d" % max(0, bt - t_begin) if split else "-",
    "%d" % max(0, t_saved - bt) if split else "-",
    u["ms"], u["bytes"], opt(u, "hash_ms"), opt(u, "encode_ms"),
    c["commit_ms"], c["total_ms"], "%d" % (ms(c["ts"]) - ms(n["ts"])),
    # the wait in training steps, at the rate the trainer reported
    "%.1f" % (max(0, bt - t_begin) * b["steps_per_s"] / 1000)
    if split and b.get("steps_per_s") else "-",
    # the share stored while the trainer wrote
    "%d" % (100 * u.get("bytes_early", 0) / u["bytes"]) if u["bytes"] else "-")))
PY
}

# baseline STORE STATE_DIR WRITE_MS: what a user scripts without spotd, on
# the same machine and store: the trainer's own write (the run's write
# column), then a copy of what it wrote into the store: cp and sync for
# the file store, aws s3 cp for S3.  "-" when the write is not known or
# the AWS CLI is not installed.
baseline() {
    local f t0 t1
    f=$(find "$2/work" -name state.bin 2>/dev/null | head -n 1)
    case $3 in '' | *[!0-9]*) echo -; return ;; esac
    [ -n "$f" ] || { echo -; return; }
    t0=${EPOCHREALTIME/./}
    if [ "$1" = file ]; then
        cp "$f" "$tmp/store/baseline.bin" && sync -f "$tmp/store/baseline.bin" || { echo -; return; }
    else
        command -v aws >/dev/null 2>&1 &&
            aws --endpoint-url "$S3_ENDPOINT" s3 cp --only-show-errors "$f" \
                s3://bench-notice/baseline/state.bin \
                >>"$tmp/log/aws.log" 2>&1 || { echo -; return; }
    fi
    t1=${EPOCHREALTIME/./}
    echo $(( $3 + (t1 - t0) / 1000 ))
}

# run_one STORE SIZE_MIB URL: one notice, one checkpoint; a line of results.
run_one() {
    local store=$1 size=$2 url=$3 base=$tmp/log/$1-$2 rc need free drill limit line
    need=$((2 * size + 1024))
    free=$(free_mib)
    if [ "$size" -ge 4096 ]; then
        say "free under $tmp before the $size MiB $store run: $free MiB"
        echo "df before the $size MiB $store run: $free MiB free under $tmp" >>"$tmp/notes"
    fi
    if [ "$free" -lt "$need" ]; then
        record "$store" "$size" "n/a (only $free MiB free under $tmp, $need MiB needed)"
        return
    fi
    drill=$((2000 + 5 * size))ms
    limit=$((60 + size / 16))
    rm -rf "$tmp/node"
    sync
    say "$store, $size MiB: the drill after $drill"
    timeout -k 10 "$limit" "$SPOTD" run --cloud none --job "notice-$size" --store "$url" \
        --state-dir "$tmp/node" --drill-after "$drill" --signal-deadline 120s \
        --events "$base.events" -- "$TRAINER" 1000000 "$size" \
        >"$base.out" 2>"$base.err" </dev/null &
    run_pid=$!
    wait "$run_pid"
    rc=$?
    run_pid=''
    if [ "$rc" != 75 ]; then
        case $rc in 124 | 137) line="timed out after $limit s" ;;
        *) line="exit $rc: $(grep -v '^\s*$' "$base.err" | tail -n 1 | cut -c1-100)" ;;
        esac
        record "$store" "$size" "failed ($line)"
        failed=1
    else
        line=$(row "$base.events" "$tmp/node")
        case $line in
        ok*) record "$store" "$size" "$line" \
                "$(baseline "$store" "$tmp/node" "$(echo "$line" | cut -f5)")" ;;
        *) record "$store" "$size" "failed ($line)"; failed=1 ;;
        esac
    fi
    # The trainer's state and spotd's copy of it; the file store's chunks.
    rm -rf "$tmp/node"
    [ "$store" = file ] && rm -rf "$tmp/store" && mkdir -p "$tmp/store"
}

# ---- the file store -------------------------------------------------------------

case " $stores " in *" file "*)
    mkdir -p "$tmp/store"
    for s in $sizes; do run_one file "$s" "file://$tmp/store"; done
    rm -rf "$tmp/store"
esac

# ---- S3: Swift + s3api on 127.0.0.1 ---------------------------------------------

case " $stores " in *" s3 "*)
    mkdir -p "$sw"
    if ! "$root/tests/servers/swift.sh" start "$sw" >"$tmp/log/swift-start.log" 2>&1; then
        s3_na="Swift did not start: $(grep -v '^\s*$' "$tmp/log/swift-start.log" | tail -n 1 | cut -c1-80)"
    else
        S3_ENDPOINT=$(sed -n 's/^S3_ENDPOINT=//p' "$sw/env")
        REGION=$(sed -n 's/^AWS_REGION=//p' "$sw/env")
        # Only these settings: nothing from the user's own AWS configuration,
        # and no instance-metadata lookup for credentials.
        AWS_ACCESS_KEY_ID=$(sed -n 's/^AWS_ACCESS_KEY_ID=//p' "$sw/env")
        AWS_SECRET_ACCESS_KEY=$(sed -n 's/^AWS_SECRET_ACCESS_KEY=//p' "$sw/env")
        export AWS_ENDPOINT_URL=$S3_ENDPOINT AWS_REGION=$REGION AWS_DEFAULT_REGION=$REGION
        export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
        export AWS_CONFIG_FILE=$tmp/none/aws-config AWS_SHARED_CREDENTIALS_FILE=$tmp/none/aws-credentials
        export AWS_EC2_METADATA_DISABLED=true
        unset AWS_PROFILE AWS_SESSION_TOKEN AWS_CA_BUNDLE AWS_ENDPOINT_URL_S3
        code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT --netrc-file "$sw/netrc" \
            --aws-sigv4 "aws:amz:$REGION:s3" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
            "$S3_ENDPOINT/bench-notice")
        [ "$code" = 200 ] || s3_na="PUT /bench-notice answered $code"
    fi
    for s in $sizes; do
        if [ -n "$s3_na" ]; then
            record s3 "$s" "n/a ($s3_na)"
        else
            run_one s3 "$s" "s3://bench-notice/ckpt"
        fi
    done
    "$root/tests/servers/swift.sh" stop "$sw" >/dev/null 2>&1
esac

# ---- the report -------------------------------------------------------------------

echo
echo "notice.sh: terminating notice (drill) to committed checkpoint, examples/c-trainer, $(nproc) cores"
echo "store: file = a directory under $(dirname "$tmp"), s3 = Swift + s3api on 127.0.0.1; times in ms"
awk -F'\t' '
BEGIN {
    fmt = "%-5s %6s %5s %7s %7s %6s %7s %8s %6s %6s %7s %7s %7s %10s %8s %9s\n"
    printf fmt, "store", "MiB", "step", "save", "wait", "steps", "write", "upload", "MB/s",
        "hash", "encode", "commit", "total", "n->commit", "overlap", "baseline"
}
$3 != "ok" { printf "%-5s %6s  %s\n", $1, $2, $3; next }
{
    printf fmt, $1, $2, $4, $5, $6, $15, $7, $8, ($8 > 0 ? sprintf("%.0f", $9 / $8 / 1000) : "-"),
        $10, $11, $12, $13, $14, $16 "%", $17
}' "$results"
[ -f "$tmp/notes" ] && sed 's/^/note: /' "$tmp/notes"
[ -n "$s3_na" ] && echo "note: s3 rows n/a: $s3_na"

if [ "${BENCH_STEP:-1}" != 0 ]; then
    echo
    O=$O "$root/tests/bench/step.sh" || say "step.sh failed"
fi
[ "$failed" = 1 ] && echo "note: a run did not end with a committed checkpoint and exit 75, so notice.sh exits 1"
exit $failed
