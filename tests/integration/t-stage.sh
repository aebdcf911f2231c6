#!/usr/bin/env bash
# --stage-dir (supervisord/orch_dirs.c): checkpoints written in a memory
# file system, uploaded from there and freed.  A tmpfs of our own where
# the test may mount one (root: CI), else /dev/shm.
#
#   1. the C trainer (app method, file store) with periodic checkpoints and
#      a terminating notice: each checkpoint is written in the stage, the
#      post-checkpoint hook still sees its folder, the one before is freed
#      by then, nothing is left once spotd exits; a replacement node
#      resumes and ends with the hash of an uninterrupted run
#   2. a stage with too little room: a job whose size is known (resumed)
#      writes to the state directory at once; a job whose first (periodic)
#      checkpoint does not fit has that one fail and the next written to the
#      state directory, and committed; a job whose first checkpoint is a
#      notice's writes it to the state directory
#   3. what a spotd that died left in its stage is freed at the next start
#   4. two nodes of a world, staged, rank 1 preempted: its replacement
#      restores its shard, rank 0 its own, and both end with the
#      uninterrupted hash
#   5. refused: --stage-dir with the signal method, or a missing folder
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
S="file://$T/store"
mkdir -p "$T/store"

SH=$T/shm
mkdir -p "$SH"
if mount -t tmpfs -o size=64m tmpfs "$SH" 2>/dev/null; then
    mounted=1
    trap 'umount -l "$SH" "$T/small" 2>/dev/null; cleanup' EXIT
else
    mounted=0
    rmdir "$SH"
    SH=$(mktemp -d /dev/shm/spotd-t-stage.XXXXXX)
    trap 'rm -rf "$SH"; cleanup' EXIT
fi

ref=$(TRAINER_STEP_US=0 reference "$TRAINER" 3000 4)
export TRAINER_STEP_US=2000

# stage_of STATE_DIR: the folder spotd keeps in $SH for that state directory.
stage_of() {
    python3 -c '
import os, sys
h = 0xcbf29ce484222325
for b in os.path.realpath(sys.argv[2]).encode():
    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
print("%s/spotd-%016x" % (sys.argv[1], h))' "$1" "$2"
}

# ---- 1. periodic and notice checkpoints, staged ----------------------------
mkdir -p "$T/hooks"
cat >"$T/hooks/post-checkpoint" <<'EOF'
#!/bin/sh
# the folder of the checkpoint that ended, and what else the stage holds
echo "$SPOT_GEN $SPOT_RESULT $(test -n "$(find "$SPOT_DIR" -name state.bin 2>/dev/null)" && echo here || echo gone) $(ls "$(dirname "$SPOT_DIR")" | tr '\n' ' ')" >>"$HOOK_LOG"
EOF
chmod +x "$T/hooks/post-checkpoint"
export HOOK_LOG=$T/hook.log
mkdir -p "$T/a"
stage=$(stage_of "$SH" "$T/a")
timeout -k 2 60 "$SPOTD" run --cloud none --job st --store "$S" --state-dir "$T/a" \
    --stage-dir "$SH" --hooks-dir "$T/hooks" --interval 1s --drill-after 3500ms \
    --events "$T/a.ev" -- "$TRAINER" 3000 4 >"$T/a.out" 2>"$T/a.err"
expect_eq "stage: the notice's checkpoint is committed (exit 75)" 75 "$?"
n=$(event_count "$T/a.ev" commit)
expect_ge "stage: periodic checkpoints and the notice's are committed" 2 "$n"
expect_eq "stage: every checkpoint began staged" "$(event_count "$T/a.ev" checkpoint_begin)" \
    "$(ev "$T/a.ev" checkpoint_begin | grep -c '"staged":true')"
bad=$(ev "$T/a.ev" checkpoint_saved | grep -vc "\"dir\":\"$stage/gen-")
expect_eq "stage: the trainer wrote each one in $stage" 0 "$bad"
check "stage: no checkpoint failed" test "$(event_count "$T/a.ev" checkpoint_failed)" = 0
# Each hook saw its own folder, and no older one beside it.  A newer one may
# be there: the hook runs beside the checkpoint after it, which on a loaded
# machine has begun by then (CI: gen 3's hook saw gen-00000004 too).
bad=$(awk '{
    own = 0; older = 0
    for (i = 4; i <= NF; i++) {
        if ($i == sprintf("gen-%08d", $1)) own = 1
        else if ($i !~ /^gen-[0-9]+$/ || substr($i, 5) + 0 < $1 + 0) older = 1
    }
    if ($2 != "committed" || $3 != "here" || !own || older) print
}' "$T/hook.log")
expect_eq "stage: the hook sees its folder; the one before is freed by then" "" "$bad"
expect_eq "stage: a hook ran for each commit" "$n" "$(wc -l <"$T/hook.log")"
check "stage: nothing is left in the stage once spotd exits" test ! -e "$stage"
if [ "$mounted" = 1 ]; then
    expect_eq "stage: the tmpfs is empty again" "" "$(ls -A "$SH")"
fi
check "stage: no local copy of the last commit in the state directory" \
    eval '[ -z "$(ls -A "$T/a/work" "$T/a/restore" 2>/dev/null | grep gen-)" ]'
"$SPOTCTL" verify --store "$S" --job st >"$T/verify" 2>&1
expect_eq "stage: the store's generations verify" 0 "$?"
# A replacement node, staged too, ends where an uninterrupted run does.
timeout -k 2 60 "$SPOTD" run --cloud none --job st --store "$S" --state-dir "$T/a2" \
    --stage-dir "$SH" --interval 1s --events "$T/a2.ev" \
    -- "$TRAINER" 3000 4 >"$T/a2.out" 2>"$T/a2.err"
expect_eq "stage: the replacement finishes" 0 "$?"
expect_eq "stage: it resumed from the notice's generation" \
    "$(jget "$(ev "$T/a.ev" commit | tail -n 1)" gen)" "$(jget "$(ev "$T/a2.ev" resume)" gen)"
expect_eq "stage: it ends with the uninterrupted hash" "$ref" "$(tail -n 1 "$T/a2.out")"

# ---- 2. too little room ----------------------------------------------------
if [ "$mounted" = 1 ] && mkdir -p "$T/small" && mount -t tmpfs -o size=2m tmpfs "$T/small"; then
    # Resumed: the size is known, the save goes to the state directory.
    # (More steps than the run it resumes: it ran to its end.)
    timeout -k 2 60 "$SPOTD" run --cloud none --job st --store "$S" --state-dir "$T/b" \
        --stage-dir "$T/small" --drill-after 1500ms --events "$T/b.ev" \
        -- "$TRAINER" 6000 4 >"$T/b.out" 2>"$T/b.err"
    expect_eq "stage (small): the notice's checkpoint is committed" 75 "$?"
    check "stage (small): a generation as big as the one resumed goes to the state directory" \
        eval 'ev "$T/b.ev" checkpoint_saved | tail -n 1 | grep -q "\"dir\":\"$T/b/work/gen-"'
    check "stage (small): spotd says why" grep -q "not to --stage-dir .*: it has [0-9]* MiB free, and this checkpoint needs about 4 MiB" "$T/b.err"
    check "stage (small): nothing failed" test "$(event_count "$T/b.ev" checkpoint_failed)" = 0
    # A new job: its first checkpoint is staged, fails (the trainer's
    # write meets a full folder), the next is written to the disk.
    timeout -k 2 60 "$SPOTD" run --cloud none --job st-new --store "$S" --state-dir "$T/c" \
        --stage-dir "$T/small" --interval 1s --drill-after 3500ms --events "$T/c.ev" \
        -- "$TRAINER" 3000 4 >"$T/c.out" 2>"$T/c.err"
    expect_eq "stage (first): the notice's checkpoint is committed" 75 "$?"
    expect_eq "stage (first): the first checkpoint, staged, failed" 1 \
        "$(event_count "$T/c.ev" checkpoint_failed)"
    check "stage (first): the next was written to the state directory and committed" \
        eval 'ev "$T/c.ev" commit | head -n 1 | grep -q "\"gen\":2,"'
    check "stage (first): spotd says why" grep -q "not to --stage-dir .*: the last checkpoint written there failed" "$T/c.err"
    expect_eq "stage (first): the small stage is empty again" "" "$(ls -A "$T/small")"
    # A new job's first checkpoint is a notice's: not risked on the stage.
    timeout -k 2 60 "$SPOTD" run --cloud none --job st-n --store "$S" --state-dir "$T/n" \
        --stage-dir "$T/small" --drill-after 1500ms --events "$T/n.ev" \
        -- "$TRAINER" 3000 4 >"$T/n.out" 2>"$T/n.err"
    expect_eq "stage (notice first): the notice's checkpoint is committed" 75 "$?"
    check "stage (notice first): ... written to the state directory, nothing failed" \
        eval 'ev "$T/n.ev" checkpoint_saved | grep -q "\"dir\":\"$T/n/work/gen-" &&
              [ "$(event_count "$T/n.ev" checkpoint_failed)" = 0 ]'
    check "stage (notice first): spotd says why" grep -q "size not known yet" "$T/n.err"
else
    echo "SKIP: stage (small): no tmpfs can be mounted here (not root)"
fi

# ---- 3. what a dead spotd left ---------------------------------------------
mkdir -p "$T/d"
left=$(stage_of "$SH" "$T/d")/gen-00000007
mkdir -p "$left" && head -c 1048576 /dev/zero >"$left/state.bin"
start_spotd run --cloud none --job st-d --store "$S" --state-dir "$T/d" --stage-dir "$SH" \
    --events "$T/d.ev" -- sleep 30
check "stage (left): spotd starts its command" wait_for 20 has child_start "$T/d.ev"
check "stage (left): what the spotd before left in the stage is freed" test ! -e "$left"
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 20

# ---- 4. a world of two nodes -----------------------------------------------
c_trainer_world
wnode() {
    local name=$1 rank=$2
    shift 2
    "$SPOTD" run --job sw --store "file://$T/store" --state-dir "$T/$name" --cloud none \
        --rank "$rank" --world-size 2 --peers "$P" --world-key-file "$T/key" --stage-dir "$SH" \
        --events "$T/$name.ev" --grace 5s "$@" -- "$TRAINER" $STEPS $MIB \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}
P=$(free_ports 2)
wnode w0 0 --interval 1s
wnode w1 1 --interval 1s --drill-after 3s
wait_node w1 60
expect_eq "stage (world): the preempted node exits 75 after the world's commit" 75 "$RC"
g=$(jget "$(ev "$T/w1.ev" commit | tail -n 1)" gen)
expect_ge "stage (world): generations were committed" 1 "${g:-0}"
check "stage (world): both ranks saved in the stage" \
    eval 'ev "$T/w0.ev" checkpoint_saved | grep -q "\"dir\":\"$SH/spotd-" &&
          ev "$T/w1.ev" checkpoint_saved | grep -q "\"dir\":\"$SH/spotd-"'
check "stage (world): rank 0 waits for a replacement" \
    wait_for 15 has '"event":"parked"' "$T/w0.ev"
wnode w1b 1
nodes_finish "stage (world)" 60 w0 w1b
expect_eq "stage (world): the replacement resumed from the world's last commit" "$g" \
    "$(jget "$(ev "$T/w1b.ev" resume)" gen)"

# ---- 5. refused ------------------------------------------------------------
run_spotd run --cloud none --job st-e --store "$S" --state-dir "$T/e" --stage-dir "$SH" \
    --method signal --ckpt-dir "$T/e-ckpt" -- true
check "stage (refused): with the signal method" eval '[ "$RC" != 0 ] && grep -q "stage-dir is for the app and criu methods" "$T/stderr"'
run_spotd run --cloud none --job st-e --store "$S" --state-dir "$T/e" --stage-dir "$T/nowhere" -- true
check "stage (refused): a folder that is not there" eval '[ "$RC" != 0 ] && grep -q "stage-dir .*nowhere.*No such file" "$T/stderr"'
