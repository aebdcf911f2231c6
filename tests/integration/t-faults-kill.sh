# The fault matrix, faults of the node (faults_lib.sh says what a row
# holds; each must show 0 lost and 0 overwritten):
#
#   kill -9 PHASE    spotd and its trainer killed while saving, uploading,
#                    committing, then started again on the same node
#   clock step       a world of two, one node's wall clock stepped +8 s and
#                    -8 s while it checkpoints
#
# steps_lost is - for kill -9: no notice came, so what the trainer did since
# the newest commit is lost by the nature of the fault; the row checks that
# the store kept everything committed and the restart resumed from the newest.
# The faults of the store: t-faults.sh.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"
. "$TOP/tests/mocks/lib.sh"
. "$(dirname "$0")/faults_lib.sh"

# ---- kill -9 at each phase ----------------------------------------------------------
# The phase's event is waited for, then spotd and everything it ran die.
for phase in saving uploading committing; do
    case $phase in
    saving) event=checkpoint_begin ;;
    uploading) event=checkpoint_saved ;;
    committing) event=upload_done ;;
    esac
    job=kill-$phase
    MIB=4 make_gens "$S" "$job"
    prints "$S" "$job" "$T/$job.before"
    TRAINER_STEP_US=1000 TRAINER_SAVE_SLEEP_MS=800 start_spotd run --cloud none --job "$job" \
        --store "$S" --state-dir "$T/$job.node" --drill-after 1500ms --events "$T/$job.ev" \
        -- "$TRAINER" 1500 4
    wait_for 30 grep -qs "\"event\":\"$event\"" "$T/$job.ev"
    kill_tree "$SPOTD_PID"
    wait "$SPOTD_PID" 2>/dev/null
    for p in $(tagged); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = trainer ] && kill -KILL "$p"
    done
    # The kill can land after the store's commit and before its event: the
    # generation to resume is the store's newest committed one after the kill.
    prints "$S" "$job" "$T/$job.killed"
    # The same node again: its state directory, what the kill left there.
    run_spotd run --cloud none --job "$job" --store "$S" --state-dir "$T/$job.node" \
        --events "$T/$job.rec.ev" -- "$TRAINER" 1500 4
    RESUMED=$(sed -n 's/^resumed at step \([0-9]*\) .*/\1/p' "$T/stdout" | head -n 1)
    expect_eq "faults (kill -9 $phase): the restarted node finishes" "0 $("$TRAINER" 1500 4 |
        tail -n 1)" "$RC $(tail -n 1 "$T/stdout")"
    expect_eq "faults (kill -9 $phase): it resumed from the newest committed generation" \
        "$(cut -d' ' -f1 "$T/$job.killed" | tail -n 1)" "$(jget "$(ev "$T/$job.rec.ev" resume)" gen)"
    row "kill -9 $phase" "$S" "$job" "$T/$job.before" "-" "$T/$job.ev" "$T/$job.rec.ev"
done

# ---- clock step: a world of two -----------------------------------------------------
SHIM="$TOP/$O/tests/clockstep/clockstep.so"
c_trainer_world
export TRAINER_STEP_US=5000
JOB=clock
P=$(free_ports 2)
wnode() {
    local name=$1 rank=$2
    shift 2
    "$SPOTD" run --job "$JOB" --store "$S" --state-dir "$T/$name" --rank "$rank" \
        --world-size 2 --peers "$P" --world-key-file "$T/key" --events "$T/$name.ev" \
        --grace 5s --cloud none --interval 1s "$@" -- "$TRAINER" $STEPS $MIB \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}
clock_step() { printf '%s\n' "$1" >"$T/clock.tmp" && mv "$T/clock.tmp" "$T/clock"; }
clock_step 0
: >"$T/clock.before"
wnode w0 0
LD_PRELOAD="$SHIM" SPOT_TEST_CLOCK_FILE="$T/clock" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" wnode w1 1
wait_for 30 grep -qs '"event":"commit"' "$T/w0.ev"
prints "$S" "$JOB" "$T/clock.before"
kill -STOP "${PID[w0]}"; clock_step 8000; sleep 2; kill -CONT "${PID[w0]}"; sleep 2
clock_step 0; sleep 2
clock_step -8000; sleep 2
kill -STOP "${PID[w0]}"; clock_step 0; sleep 2; kill -CONT "${PID[w0]}"; sleep 1
check "faults (clock step): no live peer was taken for silent, nothing parked" \
    sh -c "! grep -q 'silent for' '$T/w0.err' '$T/w1.err' && ! grep -q '\"event\":\"parked\"' '$T/w0.ev' '$T/w1.ev'"
check "faults (clock step): no periodic round given up" \
    sh -c "! grep -q 'checkpoint_failed' '$T/w0.ev' '$T/w1.ev'"
# Rank 0 is preempted: the world commits, rank 0 exits 75, rank 1 waits for
# its replacement, and the two resume together.
"$SPOTCTL" drill --state-dir "$T/w0" --in 20s >/dev/null 2>&1
wait_node w0 60
expect_eq "faults (clock step): the preempted node's notice was committed (exit 75)" 75 "$RC"
last=$(jget "$(ev "$T/w0.ev" commit | tail -n 1)" step)
wnode v0 0
nodes_finish "faults (clock step)" 90 v0 w1
RESUMED=$(sed -n 's/^resumed at step \([0-9]*\) .*/\1/p' "$T/v0.out" | head -n 1)
RESUMED=${RESUMED:--}
# Every node of a world logs the world's commits: one node's logs count.
row "clock step +-8 s" "$S" "$JOB" "$T/clock.before" "$(lost_steps "$last")" "$T/w1.ev"

cat "$T/table"
