#!/usr/bin/env bash
# The control socket against clients that are not trainers: a thousand
# connections that say nothing, and a stray client that says hello as a
# worker and leaves, while the C trainer (libckpt) runs under spotd.
. "$(dirname "$0")/lib.sh"

TRAINER=$TOP/$O/examples/c-trainer/trainer
CLIENTS=$TOP/tests/integration/control_clients.py
SOCK=$T/a/control.sock
mkdir -p "$T/store"

# status_json: spotctl status --json into $T/status (its stderr in
# $T/status.err); sets RC.
status_json() {
    timeout -k 2 20 "$SPOTCTL" status --state-dir "$T/a" --json >"$T/status" 2>"$T/status.err"
    RC=$?
}
workers_now() {
    status_json
    jget "$(cat "$T/status")" workers
}

TRAINER_STEP_US=1000 start_spotd run --job c --store "file://$T/store" --state-dir "$T/a" \
    --cloud none --events "$T/ev" -- "$TRAINER" 100000000 1
check "the trainer is connected" wait_for 20 eval '[ "$(workers_now)" = 1 ]'

# ---- a thousand connections that say nothing ----------------------------------------------
python3 "$CLIENTS" idle "$SOCK" 1000 "$T/idle" 2>"$T/idle.err" &
idle=$!
_bg_pids+=("$idle")
check "a thousand connections are opened to the control socket" \
    wait_for 30 grep -qs '^opened 1000$' "$T/idle"
status_json
check "spotctl status still answers, with the trainer counted" \
    eval '[ $RC = 0 ] && [ "$(jget "$(cat "$T/status")" workers)" = 1 ]'
[ $RC = 0 ] || sed 's/^/  status: /' "$T/status.err"
check "spotd closes every connection that said nothing (the hello timeout)" \
    wait_for 40 grep -qs '^closed 1000 of 1000 ' "$T/idle"
wait "$idle" 2>/dev/null
check "spotd said why it closed them, without a line per connection" \
    eval '[ "$(grep -c "control socket" "$T/stderr")" -lt 10 ] &&
          grep -q "said nothing" "$T/stderr"'
expect_eq "... and the trainer is still connected" 1 "$(workers_now)"

# ---- a stray hello ---------------------------------------------------------------------------
# Before, a client that said hello as a worker raised the count a checkpoint
# waits for, for the rest of spotd's life, and every terminating checkpoint
# then failed ("only 1 of the 2 local workers took part").
check "a stray client says hello as local rank 1 and leaves" \
    eval 'timeout 20 python3 "$CLIENTS" stray "$SOCK" 1 | grep -q welcomed'
expect_eq "the trainer alone counts" 1 "$(workers_now)"
"$SPOTCTL" drill --json --state-dir "$T/a" --in 15s >"$T/drill" 2>"$T/drill.err"
expect_eq "spotctl drill --json: accepted, one strict JSON document" true \
    "$(jget "$(cat "$T/drill")" ok)"
wait_exit "$SPOTD_PID" 60
expect_eq "a terminating drill afterwards commits and ends in exit 75" "75|1" \
    "$RC|$(ev "$T/ev" commit | wc -l)"
check "... no checkpoint waited for the stray client" eval '! grep -q "took part" "$T/stderr"'
grep -q "took part" "$T/stderr" && grep "took part" "$T/stderr" | head -n 2 | sed 's/^/  /'

check "nothing of this test is left running" wait_for 5 none_left
