#!/usr/bin/env bash
# --early-start: spotd starts the command while the generation it resumes
# from is restored (supervisord/orch.c, orch_run_early()).  A trainer on
# libckpt.py (tests/integration/early_start_trainer.py, 64 MiB of random
# state with its SHA-256) that waits in resume_wait() loads the whole,
# verified generation; one that watches the folder without waiting finds
# nothing until the folder appears, whole; a damaged generation fails the
# wait, and the command starts again from the one before.
. "$(dirname "$0")/lib.sh"

TRAINER="$TOP/tests/integration/early_start_trainer.py"
S="file://$T/store"
mkdir -p "$T/store"

# Generations of job e: periodic checkpoints, then, once two are committed,
# a drill's.  (The drill is sent when they are, not at a fixed time: with
# --drill-after 3s a loaded CI machine once made one commit only.  The exit
# 143 CI also saw here was spotd's: a periodic checkpoint the drill adopted
# failed, and the node went unsaved; orch_decide.c ended(), t-notice-plan.)
start_spotd run --cloud none --job e --store "$S" --state-dir "$T/n0" --events "$T/ev0" \
    --interval 1s -- python3 "$TRAINER" wait 100000 64
check "early start: a first run commits two periodic checkpoints" \
    wait_for 90 eval '[ "$(event_count "$T/ev0" commit)" -ge 2 ]'
"$SPOTCTL" drill --state-dir "$T/n0" --in 60s >"$T/drill.out" 2>&1 || cat "$T/drill.out"
wait_exit "$SPOTD_PID" 120
expect_eq "... then the drill's, and exits 75" 75 "$RC"
[ "$RC" = 75 ] || tail -n 20 "$T/stderr"
check "... at least three in all" eval '[ "$(ev "$T/ev0" commit | wc -l)" -ge 3 ]'
last=$(ev "$T/ev0" commit | tail -n 1)
gen=$(jget "$last" gen)
step=$(jget "$last" step)

# early NAME MODE [ARGS...]: a run on a new node with --early-start; the
# trainer stops at the step after the one it resumed from plus 20.
early() {
    local name=$1 mode=$2
    shift 2
    run_spotd run --cloud none --job e --store "$S" --state-dir "$T/$name" --events "$T/$name.ev" \
        --early-start "$@" -- python3 "$TRAINER" "$mode" $((step + 21)) 64
    cp "$T/stdout" "$T/$name.out"
    cp "$T/stderr" "$T/$name.err"
}

early w wait
expect_eq "early start (wait): the run finishes" 0 "$RC"
[ "$RC" = 0 ] || tail -n 20 "$T/w.err"
check "... the command started before the restore ended" \
    eval 'grep -n "\"event\":\"child_start\"\|\"event\":\"resume\"" "$T/w.ev" | head -n 1 | grep -q child_start'
check "... which the resume record says" \
    eval '[ "$(jget "$(ev "$T/w.ev" resume)" early_start)" = true ] &&
          [ "$(jget "$(ev "$T/w.ev" resume)" gen)" = "$gen" ]'
check "... the trainer waited, then loaded the whole generation" \
    grep -q "^resumed $step whole$" "$T/w.out"
check "... and trained on from there" grep -q "^done $((step + 21))$" "$T/w.out"

# A pre-restore hook that takes 2 s: the command, started before it, is
# sure to look before the restore has begun.
mkdir -p "$T/hooks"
printf '#!/bin/sh\nsleep 2\n' >"$T/hooks/pre-restore"
chmod +x "$T/hooks/pre-restore"
early p peek --hooks-dir "$T/hooks"
expect_eq "early start (peek): the run finishes" 0 "$RC"
check "... the folder was not there when the trainer started" grep -q "^at start: absent$" "$T/p.out"
check "... it appeared whole, never in part" grep -q "^peek: appeared whole$" "$T/p.out"
check "... and what the trainer then loaded was the generation" grep -q "^resumed $step whole$" "$T/p.out"

# The newest generation damaged in the store: the restore fails while the
# trainer waits, its wait says so and it exits, and spotd starts it again
# from the generation before (whatever --restart says).
damage_chunk e "$gen"
early d wait
expect_eq "early start (damaged): the run still finishes" 0 "$RC"
[ "$RC" = 0 ] || tail -n 20 "$T/d.err"
check "... the trainer's wait said the restore failed" grep -q "^restore failed$" "$T/d.out"
check "... spotd said why, and started it again" \
    eval 'grep -q "generation $gen cannot be restored: .*corrupt in the store; the command, started early, is told so" "$T/d.err" &&
          [ "$(ev "$T/d.ev" child_start | wc -l)" = 2 ]'
older=$(jget "$(ev "$T/d.ev" resume | tail -n 1)" gen)
check "... from an older generation, which it loaded whole" \
    eval '[ "${older:-0}" -lt "$gen" ] && [ "${older:-0}" -ge 1 ] && grep -q "^resumed [0-9]* whole$" "$T/d.out"'
check "... never fresh" eval '! grep -q "^fresh$" "$T/d.out"'

# Refused where it cannot work.
run_spotd run --cloud none --job e --store "$S" --state-dir "$T/x" --early-start \
    --method signal -- true
expect_eq "early start: refused for the signal method (a usage error)" 125 "$RC"
check "... saying why" grep -q "early_start (from .*) is for the app method on one node" "$T/stderr"

none_left
