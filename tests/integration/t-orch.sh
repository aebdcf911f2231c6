# The orchestrator, end to end on one node (app method, file store): a
# notice makes the trainer (examples/c-trainer, on libckpt) save, spotd
# stores and commits the generation and stops the trainer (exit 75); a
# replacement node with a fresh state directory resumes from it and ends
# with the hash of a run that was never interrupted.
. "$(dirname "$0")/lib.sh"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
mkdir -p "$T/store"
ref=$(reference "$TRAINER" 3000 2)

run_spotd run --cloud none --job j --store "file://$T/store" --state-dir "$T/node1" \
    --drill-after 1s --events "$T/ev1" -- "$TRAINER" 3000 2
expect_eq "orch: after the notice's checkpoint spotd exits 75 (preempted, state saved)" 75 "$RC"
# (A stop after the timeline when the trainer, told to leave, takes longer
# than the 10 s drain on a loaded machine: the sequence then stops it.)
expect_match "orch: the events of the checkpoint, in order" \
    "start child_start notice plan checkpoint_begin checkpoint_saved upload_done commit timeline( stop)? child_exit exit" \
    "$(events_of "$T/ev1")"
commit=$(ev "$T/ev1" commit)
expect_eq "orch: generation 1 is committed" 1 "$(jget "$commit" gen)"
step=$(jget "$commit" step)
expect_ge "orch: at the step the trainer had reached" 1 "$step"
check "orch: the trainer was stopped over the control socket, not killed" \
    has '"code":75' "$T/ev1"
"$SPOTCTL" ls --store "file://$T/store" --job j >"$T/ls" 2>&1
check "orch: spotctl sees the generation, its step and its reason" \
    grep -qE "^1 +committed +$step +1 +notice " "$T/ls"
check "orch: the control socket is gone after spotd" test ! -e "$T/node1/control.sock"

run_spotd run --cloud none --job j --store "file://$T/store" --state-dir "$T/node2" \
    --events "$T/ev2" -- "$TRAINER" 3000 2
expect_eq "orch: the replacement node finishes the run" 0 "$RC"
check "orch: it resumed from generation 1" has "\"event\":\"resume\",\"gen\":1,\"step\":$step" "$T/ev2"
check "orch: the trainer resumed at the step after the checkpoint" \
    grep -q "resumed at step $((step + 1)) " "$T/stdout"
expect_eq "orch: the final state equals an uninterrupted run's" "$ref" "$(tail -n 1 "$T/stdout")"

# A trainer that never connects: the checkpoint fails with a clear message,
# the generation before stays the newest, and the stop sequence runs.
run_spotd run --cloud none --job j --store "file://$T/store" --state-dir "$T/node3" \
    --drill-after 1s --signal-deadline 5s --notice-margin 1s --grace 2s --events "$T/ev3" -- sleep 30
check "orch: a command without libckpt fails the checkpoint, saying why" \
    grep -q '"event":"checkpoint_failed".*libckpt' "$T/ev3"
expect_eq "orch: ... and is stopped (SIGTERM)" 143 "$RC"
"$SPOTCTL" ls --json --store "file://$T/store" --job j >"$T/ls" 2>"$T/ls.err"
expect_eq "orch: ... and no generation is added" 1 "$(ls_gens "$T/ls" | wc -l)"

# Periodic checkpoints (--interval) while training goes on, deduplicated
# against each other, and the run still ends with the same hash.
run_spotd run --cloud none --job p --store "file://$T/store" --state-dir "$T/node4" \
    --interval 1s --events "$T/ev4" -- "$TRAINER" 4000 2
expect_eq "orch periodic: the run finishes" 0 "$RC"
n=$(ev "$T/ev4" commit | wc -l)
expect_ge "orch periodic: generations were committed while it trained" 2 "$n"
expect_eq "orch periodic: ... with the uninterrupted run's hash" \
    "$(reference "$TRAINER" 4000 2)" "$(tail -n 1 "$T/stdout")"
"$SPOTCTL" ls --json --store "file://$T/store" --job p >"$T/ls" 2>"$T/ls.err"
check "orch periodic: their reason is periodic" \
    test "$(jq_ "any(g.get('reason') == 'periodic' for g in d)" "$T/ls")" = true
check "orch periodic: retention keeps at most 3 committed generations" \
    test "$(ls_gens "$T/ls" | wc -l)" -le 3

# An advisory notice (rebalance): a checkpoint, and training goes on.
run_spotd run --cloud none --job a --store "file://$T/store" --state-dir "$T/node5" \
    --drill-after 1s:rebalance --events "$T/ev5" -- "$TRAINER" 3000 2
expect_eq "orch advisory: the command is not stopped" 0 "$RC"
expect_eq "orch advisory: one checkpoint committed" 1 "$(ev "$T/ev5" commit | wc -l)"
check "orch advisory: no stop" bash -c "! grep -q '\"event\":\"stop\"' '$T/ev5'"

# A trainer asks for a checkpoint on its own schedule (ckpt_request_save).
TRAINER_REQUEST_AT=500 run_spotd run --cloud none --job r --store "file://$T/store" \
    --state-dir "$T/node6" --events "$T/ev6" -- "$TRAINER" 3000 2
expect_eq "orch request: the run finishes" 0 "$RC"
expect_eq "orch request: the trainer's request made one checkpoint" 1 "$(ev "$T/ev6" commit | wc -l)"
"$SPOTCTL" ls --json --store "file://$T/store" --job r >"$T/ls" 2>"$T/ls.err"
expect_eq "orch request: its reason is request" request "$(jq_ 'd[-1]["reason"]' "$T/ls")"
