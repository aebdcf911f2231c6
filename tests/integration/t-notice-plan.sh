#!/usr/bin/env bash
# What the orchestrator plans at a notice, end to end (examples/c-trainer,
# a file store, the AWS metadata mock):
#   1. an advisory notice whose time is past (AWS rebalance: noticeTime is
#      when it was issued) gets its early checkpoint, with the usual limit
#   2. a command that ignores TERM and whose checkpoint fails: the stop's
#      grace is what is left before the deadline, SIGKILL lands before it
#   3. an active AWS scheduled event whose NotBefore has passed: the
#      deadline is NotAfter (at least 30 s away), never "now, no grace"
#   4. a terminating notice whose deadline is far (an AWS instance-retirement
#      10 days ahead): training goes on, the plan is in spotctl status and
#      /metrics; one just beyond the horizon is acted on when it is due
#   5. a notice while a generation is restored at start (a slow pre-restore
#      hook): terminating or advisory, its checkpoint comes once the trainer
#      is up; when no room is left the command is not started, and spotd
#      says so
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/mocks/lib.sh"

if ! command -v python3 >/dev/null; then
    echo "SKIP: notice-plan: python3 is needed for the metadata mock"
    exit 0
fi
mock_start aws || { fail "notice-plan: the aws mock starts"; exit 0; }

TRAINER="$TOP/$O/examples/c-trainer/trainer"
S="file://$T/store"
mkdir -p "$T/store"
export TRAINER_STEP_US=2000
iso_in() { date -u -d "@$(( $(date +%s) + $1 ))" +%Y-%m-%dT%H:%M:%SZ; }
aws_in() { LC_ALL=C date -u -d "@$(( $(date +%s) + $1 ))" '+%d %b %Y %H:%M:%S GMT'; }

# connected STATE_DIR: a trainer is connected to that spotd over libckpt.
connected() {
    [ "$(status_get "$1" workers)" -ge 1 ] 2>/dev/null
}

# aws_job NAME SPOTD-ARGS... -- COMMAND...: spotd with checkpoints of job NAME
# under the AWS mock, its state in $T/NAME, its events in $T/NAME.ev.
aws_job() {
    local name=$1
    shift
    start_spotd run --cloud aws --metadata-url "$MOCK_URL" --poll-interval 200ms --job "$name" \
        --store "$S" --state-dir "$T/$name" --events "$T/$name.ev" "$@"
}

# ---- 1. an advisory notice's early checkpoint -------------------------------
aws_job rebal -- "$TRAINER" 100000 1
wait_for 30 connected "$T/rebal" || fail "rebalance: the trainer connects"
mock_state "{\"rebalance\":{\"noticeTime\":\"$(iso_in 0)\"}}" >/dev/null
wait_for 30 grep -qE '"event":"(commit|checkpoint_failed)"' "$T/rebal.ev"
expect_eq "rebalance: its early checkpoint commits, though noticeTime has passed" notice \
    "$(jget "$(ev "$T/rebal.ev" commit | head -n 1)" reason)"
expect_eq "rebalance: no checkpoint failed" 0 "$(event_count "$T/rebal.ev" checkpoint_failed)"
check "rebalance: the trainer trains on" alive "$SPOTD_PID"
check "rebalance: no stop" sh -c "! grep -q '\"event\":\"stop\"' '$T/rebal.ev'"
kill -INT "$SPOTD_PID"
wait_exit "$SPOTD_PID" 20
mock_reset

# ---- 2. the fallback stop's grace is what is left ---------------------------
# The trainer never answers the save and ignores TERM (inherited: SIG_IGN
# survives exec); --grace 30s is far more than the time left.
TRAINER_IGNORE_SAVE=1 aws_job deaf --notice-margin 1s --grace 30s \
    -- sh -c 'trap "" TERM; exec "$0" 100000 1' "$TRAINER"
wait_for 30 connected "$T/deaf" || fail "fallback: the trainer connects"
t=$(iso_in 10)
mock_state "{\"notice\":{\"action\":\"terminate\",\"time\":\"$t\"}}" >/dev/null
wait_exit "$SPOTD_PID" 40
expect_eq "fallback: the command is killed" 137 "$RC"
check "fallback: its checkpoint failed" [ "$(event_count "$T/deaf.ev" checkpoint_failed)" -ge 1 ]
dl=$(ts_ms "${t%Z}.000Z")
stop=$(ev "$T/deaf.ev" stop | head -n 1) kill=$(ev "$T/deaf.ev" kill | head -n 1)
st=$(ts_ms "$(jget "$stop" ts)") g=$(jget "$stop" grace_ms)
# SIGKILL is planned at the margin before the deadline (a loaded machine
# may deliver it late, never plan it later); the stop is logged a few ms
# after its grace was computed.
expect_lt "fallback: the stop's grace ends by deadline - margin ($g ms from the stop)" \
    $(( dl - 1000 - st + $(late 10) )) "${g:-99999}"
# The fallback's 2 s at most, and the 250 ms the checkpoint is given up before it.
expect_lt "fallback: at most 2 s of grace, and the give-up's 250 ms" 2500 "${g:-99999}"
expect_lt "fallback: SIGKILL lands before the deadline" $(( dl + $(late 400) )) \
    "$(ts_ms "$(jget "$kill" ts)")"
mock_reset

# ---- 3. a scheduled event under way: NotAfter, not "now" --------------------
# e-after may run until NotAfter, 45 s away; e-open has no NotAfter.  What
# is checked is the plan each notice gets (its stop is half a minute away).
na=$(aws_in 45)
ev1="{\"Code\":\"instance-stop\",\"EventId\":\"e-after\",\"NotBefore\":\"$(aws_in -60)\",\"NotAfter\":\"$na\",\"State\":\"active\"}"
ev2="{\"Code\":\"instance-stop\",\"EventId\":\"e-open\",\"NotBefore\":\"$(aws_in -60)\",\"State\":\"active\"}"
mock_state "{\"maintenance\":[$ev1,$ev2]}" >/dev/null
start_spotd run --cloud aws --metadata-url "$MOCK_URL" --poll-interval 200ms --events "$T/open.ev" \
    --notice-margin 1s --grace 2s -- sleep 120
wait_for 20 grep -q e-open "$T/open.ev"
wait_for 5 grep -q e-after "$T/open.ev"
n1=$(ev "$T/open.ev" notice | grep e-after) n2=$(ev "$T/open.ev" notice | grep e-open)
dl=$(ts_ms "$(date -u -d "$na" +%Y-%m-%dT%H:%M:%S.000Z)")
expect_eq "event under way: the deadline is NotAfter" "$dl" "$(ts_ms "$(jget "$n1" deadline)")"
expect_eq "event under way: its stop is planned margin + grace before it" \
    "stop at $(date -u -d "@$(( dl / 1000 - 3 ))" +%Y-%m-%dT%H:%M:%S.000Z)" "$(jget "$n1" action)"
w=$(( $(ts_ms "$(jget "$n2" deadline)") - $(ts_ms "$(jget "$n2" detected)") ))
check "event under way, no NotAfter: the deadline is 30 s after it was seen ($w ms)" \
    test "$w" -ge 29000 -a "$w" -le 31000
check "event under way, no NotAfter: a stop planned, not at once" \
    grep -q '"action":"stop at ' <<<"$n2"
check "event under way: the command runs on meanwhile" sh -c "! grep -q '\"event\":\"stop\"' '$T/open.ev'"
kill -INT "$SPOTD_PID"
wait_exit "$SPOTD_PID" 20
mock_reset

# ---- 4. a far terminating notice ---------------------------------------------
addr=$(free_ports 1)
ret=$(aws_in 864000)
mock_state "{\"maintenance\":[{\"Code\":\"instance-retirement\",\"EventId\":\"e-far\",\"NotBefore\":\"$ret\",\"State\":\"active\"}]}" >/dev/null
aws_job far --metrics "$addr" -- "$TRAINER" 100000 1
wait_for 30 connected "$T/far" || fail "far: the trainer connects"
wait_for 10 grep -q e-far "$T/far.ev"
sleep 2
check "far: the command trains on" alive "$SPOTD_PID"
expect_eq "far: no checkpoint, no stop" "" \
    "$(grep -oE '"event":"(checkpoint_begin|stop|child_exit)"' "$T/far.ev")"
dl=$(ts_ms "$(jget "$(ev "$T/far.ev" notice)" deadline)")
at=$(date -u -d "@$(( dl / 1000 - 900 ))" +%Y-%m-%dT%H:%M:%S.000Z)
st=$("$SPOTCTL" status --state-dir "$T/far" --json 2>/dev/null)
expect_eq "far: spotctl status shows the checkpoint planned 15 min before the deadline" "$at" \
    "$(jget "$st" checkpoint_at)"
expect_eq "far: spotctl status says why" "notice: aws maintenance" "$(jget "$st" reason)"
check "far: ... in words too" sh -c "'$SPOTCTL' status --state-dir '$T/far' | grep -q '^planned .*$at'"
expect_eq "far: /metrics shows when" "spotd_planned_checkpoint_timestamp_seconds $(( dl / 1000 - 900 ))" \
    "$(curl -s "http://$addr/metrics" | grep '^spotd_planned_checkpoint_timestamp_seconds')"
kill -INT "$SPOTD_PID"
wait_exit "$SPOTD_PID" 20
mock_reset

# Just beyond the horizon (15 min and 3 s): held, then acted on when due.
t=$(iso_in 903)
aws_job soon -- "$TRAINER" 100000 1
wait_for 30 connected "$T/soon" || fail "due: the trainer connects"
mock_state "{\"notice\":{\"action\":\"terminate\",\"time\":\"$t\"}}" >/dev/null
wait_exit "$SPOTD_PID" 40
expect_eq "due: spotd exits 75 after the notice's checkpoint" 75 "$RC"
expect_match "due: notice, then (when due) the checkpoint, its commit, the exit" \
    ".*notice .*checkpoint_begin checkpoint_saved upload_done commit .*exit" "$(events_of "$T/soon.ev")"
b=$(ts_ms "$(jget "$(ev "$T/soon.ev" checkpoint_begin)" ts)")
expect_ge "due: not before 15 min before the deadline" $(( $(ts_ms "${t%Z}.000Z") - 900000 )) "$b"
mock_reset

# ---- 5. a notice while resuming ----------------------------------------------
# Generation 1 of job res, then runs that restore it through a pre-restore
# hook that takes 3 s, a drill (from --drill-after) coming 1 s in.
run_spotd run --cloud none --job res --store "$S" --state-dir "$T/res0" --drill-after 1s \
    -- "$TRAINER" 100000 1
expect_eq "resuming: generation 1 is made" 75 "$RC"
mkdir "$T/hooks"
printf '#!/bin/sh\nsleep 3\n' >"$T/hooks/pre-restore"
chmod +x "$T/hooks/pre-restore"
# resumed NAME SPOTD-ARGS... -- COMMAND...: spotd resumes job res under the hook.
resumed() {
    local name=$1
    shift
    run_spotd run --cloud none --job res --store "$S" --state-dir "$T/$name" \
        --hooks-dir "$T/hooks" --events "$T/$name.ev" "$@"
}

resumed rterm --drill-after 1s -- "$TRAINER" 100000 1
expect_eq "resuming, terminating: spotd exits 75 after the notice's checkpoint" 75 "$RC"
expect_match "resuming, terminating: notice, resume, start, then the checkpoint and its commit" \
    ".*notice .*resume .*(child_start .*checkpoint_begin|checkpoint_begin .*child_start) .*checkpoint_saved upload_done commit .*exit" \
    "$(events_of "$T/rterm.ev")"
expect_eq "resuming, terminating: the new work is generation 2" "2 notice" \
    "$(c=$(ev "$T/rterm.ev" commit); echo "$(jget "$c" gen) $(jget "$c" reason)")"

resumed radv --drill-after 1s:rebalance -- "$TRAINER" 3000 1
expect_eq "resuming, advisory: the trainer finishes" 0 "$RC"
expect_match "resuming, advisory: its early checkpoint once the command runs" \
    ".*notice .*resume .*(child_start .*checkpoint_begin|checkpoint_begin .*child_start) .*commit .*exit" \
    "$(events_of "$T/radv.ev")"
expect_eq "resuming, advisory: the commit is the notice's" notice \
    "$(jget "$(ev "$T/radv.ev" commit | head -n 1)" reason)"

# No room: the drill's deadline is 4 s away, its checkpoint given up 3.25 s
# before it (margin 1 s, the fallback's 2 s, 250 ms), while the hook still runs.
resumed rlate --drill-after 1s --signal-deadline 4s --notice-margin 1s -- "$TRAINER" 100000 1
expect_eq "resuming, no room: spotd exits 75" 75 "$RC"
check "resuming, no room: the command never started" sh -c "! grep -q child_start '$T/rlate.ev'"
g=$(jget "$(ev "$T/radv.ev" commit | tail -n 1)" gen)
check "resuming, no room: said so, generation $g the newest" grep -q \
    "no room is left for a checkpoint before its deadline: it is not started (generation $g is the newest)" \
    "$T/stderr"
expect_eq "resuming, no room: nothing committed" 0 "$(event_count "$T/rlate.ev" commit)"

# ---- a periodic checkpoint that a notice adopted, then failed ------------------------------------
# The notice comes while a periodic save runs (a drill sent once the first
# periodic checkpoint has begun); that save takes 3 s and misses its
# interval's deadline (2 s) with the notice's 60 s far off.  The notice
# gets a checkpoint of its own and the node goes saved (exit 75); before,
# the failed periodic one was its last and spotd stopped the command
# unsaved, exit 143 with most of the notice left (CI, 2026-12-07,
# t-early-start).
cat >"$T/slow_first.py" <<EOF
import os, sys, time
sys.path.insert(0, "$TOP/lib/python")
import libckpt
ck = libckpt.open(); n = 0; step = 0
while step < 100000:
    a = ck.step(step)
    if a == libckpt.SAVE:
        n += 1
        time.sleep(3 if n == 1 else 0.05)
        with open(os.path.join(ck.save_dir, "s"), "w") as f:
            f.write(str(step))
        try:
            ck.saved(step)
        except libckpt.CkptError as e:
            print("save refused: %s" % e, flush=True)
    elif a == libckpt.STOP:
        sys.exit(75)
    time.sleep(0.01)
    step += 1
EOF
mkdir -p "$T/adopt-store"
start_spotd run --cloud none --job adopt --store "file://$T/adopt-store" --state-dir "$T/adopt" \
    --events "$T/adopt.ev" --interval 2s -- python3 "$T/slow_first.py"
wait_for 60 has '"event":"checkpoint_begin"' "$T/adopt.ev"
"$SPOTCTL" drill --state-dir "$T/adopt" --in 60s >"$T/adopt.drill" 2>&1 || cat "$T/adopt.drill"
wait_exit "$SPOTD_PID" 90
expect_eq "adopted and failed: the notice's own checkpoint is committed (exit 75)" 75 "$RC"
check "... after the periodic one it came during failed" \
    eval '[ "$(event_count "$T/adopt.ev" checkpoint_failed)" -ge 1 ] &&
          [ "$(jget "$(ev "$T/adopt.ev" commit | tail -n 1)" reason)" = notice ]'
check "... saying so" grep -q "the checkpoint under way at the notice failed: the notice gets one of its own" "$T/stderr"

mock_stop
none_left
