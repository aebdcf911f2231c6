#!/usr/bin/env bash
# Stopping: SIGTERM to spotd sends the stop to the command's group, waits
# the grace, then SIGKILLs what is left; --stop-signal and --grace options.
. "$(dirname "$0")/lib.sh"

# A command that ignores TERM: SIGKILL after the 1 s grace, exit 137.
f="$T/kill.events"
start_spotd run --grace 1s --events "$f" -- \
    sh -c "trap '' TERM; : >$T/ready; while :; do sleep 0.1; done"
wait_for 10 test -e "$T/ready"
pg=$(command_pid "$SPOTD_PID")
t0=$(now_ms)
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 20
t1=$(now_ms)
expect_eq "TERM-proof command: spotd exits 137 (SIGKILL)" 137 "$RC"
expect_ge "TERM-proof command: not before the 1 s grace (ms)" 950 $((t1 - t0))
expect_lt "TERM-proof command: soon after the grace (ms)" 10000 $((t1 - t0))
expect_eq "TERM-proof command: event order" \
    "start child_start signal stop notice kill child_exit exit" "$(events_of "$f")"
expect_eq "TERM-proof command: stop record with grace_ms 1000" 1000 \
    "$(jget "$(ev "$f" stop)" grace_ms)"
s=$(ts_ms "$(jget "$(ev "$f" stop)" ts)")
k=$(ts_ms "$(jget "$(ev "$f" kill)" ts)")
expect_ge "TERM-proof command: kill record >= 1 s after stop record (ms)" 950 \
    "${k:+${s:+$((k - s))}}"
expect_eq "TERM-proof command: child_exit names KILL" KILL "$(jget "$(ev "$f" child_exit)" signal)"
expect_eq "TERM-proof command: exit reason stopped" stopped "$(jget "$(ev "$f" exit)" reason)"
check "TERM-proof command: nothing of the group survives" wait_for 5 group_gone "${pg:-0}"

# A command that traps TERM and exits 0 at once: exit 0, no SIGKILL.
f="$T/clean.events"
start_spotd run --events "$f" -- \
    sh -c "trap 'exit 0' TERM; : >$T/ready2; while :; do sleep 0.1; done"
wait_for 10 test -e "$T/ready2"
pg=$(command_pid "$SPOTD_PID")
t0=$(now_ms)
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 20
t1=$(now_ms)
expect_eq "clean stop: spotd exits 0" 0 "$RC"
expect_lt "clean stop: promptly, far within the 30 s grace (ms)" 10000 $((t1 - t0))
expect_eq "clean stop: no kill record" 0 "$(event_count "$f" kill)"
expect_eq "clean stop: one stop record" 1 "$(event_count "$f" stop)"
expect_eq "clean stop: stop signal TERM" TERM "$(jget "$(ev "$f" stop)" signal)"
check "clean stop: nothing of the group survives" wait_for 5 group_gone "${pg:-0}"

# A second TERM during the grace does not restart the grace or the stop.
f="$T/twice.events"
start_spotd run --grace 1s --events "$f" -- \
    sh -c "trap '' TERM; : >$T/ready3; while :; do sleep 0.1; done"
wait_for 10 test -e "$T/ready3"
kill -TERM "$SPOTD_PID"
wait_for 5 eval '[ "$(event_count "$f" stop)" -ge 1 ]'
kill -TERM "$SPOTD_PID" 2>/dev/null
wait_exit "$SPOTD_PID" 20
expect_eq "TERM twice: spotd exits 137" 137 "$RC"
expect_eq "TERM twice: one stop record" 1 "$(event_count "$f" stop)"
expect_eq "TERM twice: one kill record" 1 "$(event_count "$f" kill)"

# --stop-signal is accepted and shown by 'spotd config'.
run_spotd config --stop-signal INT
expect_eq "--stop-signal INT accepted" 0 "$RC"
check "--stop-signal INT shown by spotd config" grep -q '"stop_signal":[[:space:]]*"INT"' "$T/stdout"
run_spotd config --stop-signal SIGUSR2
check "--stop-signal SIGUSR2 shown as USR2" grep -q '"stop_signal":[[:space:]]*"USR2"' "$T/stdout"
run_spotd config --stop-signal 10
check "--stop-signal 10 shown by name" grep -q '"stop_signal":[[:space:]]*"USR1"' "$T/stdout"

# --stop-signal is what stops the group left behind by the command: here
# USR1, which the leftover traps (and TERM would not be used).
f="$T/stopsig.events"
start_spotd run --stop-signal USR1 --grace 5s --events "$f" -- sh -c "
    sh -c 'trap \"echo USR1 >$T/left.got; exit 0\" USR1; trap \"echo TERM >$T/left.got\" TERM;
           : >$T/left.ready; while :; do sleep 0.1; done' &
    while [ ! -e $T/left.ready ]; do sleep 0.05; done
    exit 6"
wait_exit "$SPOTD_PID" 20
expect_eq "--stop-signal USR1: spotd exits with the command's 6" 6 "$RC"
expect_eq "--stop-signal USR1: the leftover got USR1" USR1 "$(cat "$T/left.got" 2>/dev/null)"
expect_eq "--stop-signal USR1: stop record names USR1" USR1 "$(jget "$(ev "$f" stop)" signal)"
expect_eq "--stop-signal USR1: no kill record" 0 "$(event_count "$f" kill)"

# Durations accepted by --grace, as spotd config shows them.
for g in 500ms 30s 5m 1h 0 90s 1500ms 720h; do
    run_spotd config --grace "$g"
    want=$g
    [ "$g" = 0 ] && want=0s
    expect_eq "--grace $g accepted" 0 "$RC"
    check "--grace $g shown by spotd config as $want" grep -q "\"grace\":[[:space:]]*\"$want\"" "$T/stdout"
done
# 60s is one minute; 3600s one hour.
run_spotd config --grace 60s
check "--grace 60s shown as 1m" grep -q '"grace":[[:space:]]*"1m"' "$T/stdout"
run_spotd config --grace=2s
check "--grace=2s (with =) accepted" grep -q '"grace":[[:space:]]*"2s"' "$T/stdout"

expect_eq "no zombie children left" 0 "$(zombies_of $$)"
check "nothing of this test is left running" wait_for 5 none_left
