#!/usr/bin/env bash
# The upload runs beside the trainer's write (supervisord/follow.c): a
# trainer that writes its 64 MiB state.bin slowly (tests/integration/
# early_writer.py, on libckpt.py) gets a terminating notice; spotd stores
# chunks of the file while it is written (upload_done "bytes_early"), and
# the generation committed holds the file as the trainer left it, also
# when the trainer seeks back and rewrites a chunk already stored, before
# or after saying the file finished (ck.file_done()).
. "$(dirname "$0")/lib.sh"

WRITER="$TOP/tests/integration/early_writer.py"
S="file://$T/store"
mkdir -p "$T/store"

# early NAME [ENV...]: one run; the checks.
early() {
    local name=$1 job=early-$1 gen step want got
    shift
    env "$@" timeout -k 2 60 "$SPOTD" run --cloud none --job "$job" --store "$S" \
        --state-dir "$T/$name" --events "$T/$name.ev" --drill-after 1500ms \
        -- python3 "$WRITER" 64 >"$T/$name.out" 2>"$T/$name.err"
    expect_eq "early ($name): the notice's checkpoint is committed (exit 75)" 75 "$?"
    gen=$(jget "$(ev "$T/$name.ev" commit | tail -n 1)" gen)
    step=$(jget "$(ev "$T/$name.ev" commit | tail -n 1)" step)
    got=$(jget "$(ev "$T/$name.ev" upload_done | tail -n 1)" bytes_early)
    check "early ($name): chunks were stored while the file was written ($got bytes)" \
        test "${got:-0}" -ge $((8 << 20))
    want=$(sed -n "s/^saved $step \([0-9a-f]*\)$/\1/p" "$T/$name.out")
    "$SPOTCTL" fetch --store "$S" --job "$job" --gen "$gen" "$T/$name.fetched" \
        >/dev/null 2>"$T/$name.fetch.err"
    got=$(find "$T/$name.fetched" -name state.bin -exec sha256sum {} + | cut -d" " -f1)
    expect_eq "early ($name): the generation holds state.bin as the trainer left it" \
        "${want:-no sha from the trainer}" "${got:-nothing fetched}"
}

early closed
early done EARLY_DONE=1
# Kept open: only ck.file_done() says that the last piece is written, and
# with it the whole file is stored early, relative path and all.
early done-open EARLY_DONE=1 EARLY_OPEN=1
check "early (done-open): all of state.bin was stored early" \
    test "$(jget "$(ev "$T/done-open.ev" upload_done | tail -n 1)" bytes_early)" = $((64 * 1048576 + 1000))
early rewrite EARLY_REWRITE=1
early done-rewrite EARLY_DONE=1 EARLY_REWRITE=1
