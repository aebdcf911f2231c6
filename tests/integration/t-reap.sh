#!/usr/bin/env bash
# Reaping: spotd is a child subreaper, so the command's orphans become its
# children and it reaps them; when the command exits, what is left of its
# group is stopped (stop signal, grace, SIGKILL) before spotd exits.
. "$(dirname "$0")/lib.sh"

# Orphans: each ( ... & ) subshell exits at once and leaves its background
# loop to be reparented.  They run until $T/die appears; the command itself
# until $T/go appears.
start_spotd run --events "$T/orphans.events" -- sh -c "
    (while [ ! -e $T/die ]; do sleep 0.05; done & echo \$! >$T/o1)
    (while [ ! -e $T/die ]; do sleep 0.05; done & echo \$! >$T/o2)
    while [ ! -e $T/go ]; do sleep 0.05; done"
wait_for 10 test -s "$T/o1" -a -s "$T/o2"
o1=$(cat "$T/o1") o2=$(cat "$T/o2")
check "orphan 1 is reparented to spotd" \
    wait_for 10 eval '[ "$(proc_field "$o1" 4)" = "$SPOTD_PID" ]'
check "orphan 2 is reparented to spotd" \
    wait_for 10 eval '[ "$(proc_field "$o2" 4)" = "$SPOTD_PID" ]'
touch "$T/die"
check "the orphans are reaped (not left as zombies)" wait_for 10 reaped "$o1" "$o2"
check "spotd is still running" alive "$SPOTD_PID"
expect_eq "spotd has no zombie children" 0 "$(zombies_of "$SPOTD_PID")"
touch "$T/go"
wait_exit "$SPOTD_PID" 10
expect_eq "spotd exits 0 after the command" 0 "$RC"

# Many short-lived orphans at once: none stays a zombie.
rm -f "$T/go"
start_spotd run -- sh -c "
    for i in 1 2 3 4 5 6 7 8 9 10; do (sleep 0.2 & echo \$! >>$T/many); done
    : >$T/spawned
    while [ ! -e $T/go ]; do sleep 0.05; done"
wait_for 10 test -e "$T/spawned"
expect_eq "ten orphans recorded" 10 "$(wc -l <"$T/many" 2>/dev/null | tr -d " ")"
check "ten orphans die and are all reaped" wait_for 10 reaped $(cat "$T/many" 2>/dev/null)
expect_eq "no zombie among spotd's children after ten orphans" 0 "$(zombies_of "$SPOTD_PID")"
touch "$T/go"
wait_exit "$SPOTD_PID" 10
expect_eq "spotd exits 0" 0 "$RC"

# The command exits, a background job of its group remains: spotd stops
# it (sleep dies of TERM at once, well within the 30 s default grace) and
# exits with the command's code.
t0=$(now_ms)
start_spotd run --events "$T/left.events" -- sh -c "sleep 30 & echo \$! >$T/left; exit 5"
wait_exit "$SPOTD_PID" 20
t1=$(now_ms)
expect_eq "command exits 5, its group left behind: spotd exits 5" 5 "$RC"
expect_lt "group leftover: spotd exits promptly, well within the 30 s grace (ms)" 10000 $((t1 - t0))
stop=$(ev "$T/left.events" stop)
check "group leftover: a stop record naming the group" eval 'jget "$stop" reason | grep -q group'
expect_eq "group leftover: the stop record has the default stop signal" TERM "$(jget "$stop" signal)"
expect_eq "group leftover: no SIGKILL needed" 0 "$(event_count "$T/left.events" kill)"
expect_eq "group leftover: exit record has code 5" 5 "$(jget "$(ev "$T/left.events" exit)" code)"
left=$(cat "$T/left" 2>/dev/null)
check "group leftover: the leftover sleep is gone" eval '[ -n "$left" ] && wait_for 5 gone "$left"'
expect_eq "group leftover: event order" "start child_start child_exit stop exit" "$(events_of "$T/left.events")"

# A leftover that ignores TERM: SIGKILL after the grace (1 s).  The command
# waits until the leftover has set its trap, so the TERM cannot come first.
start_spotd run --grace 1s --events "$T/kill.events" -- sh -c "
    sh -c 'trap \"\" TERM; echo \$\$ >$T/stub; sleep 30' &
    while [ ! -s $T/stub ]; do sleep 0.05; done
    exit 4"
wait_exit "$SPOTD_PID" 20
expect_eq "TERM-proof leftover: spotd exits with the command's 4" 4 "$RC"
expect_eq "TERM-proof leftover: a kill record" 1 "$(event_count "$T/kill.events" kill)"
expect_eq "TERM-proof leftover: event order" "start child_start child_exit stop kill exit" \
    "$(events_of "$T/kill.events")"
s=$(ts_ms "$(jget "$(ev "$T/kill.events" stop)" ts)")
k=$(ts_ms "$(jget "$(ev "$T/kill.events" kill)" ts)")
expect_ge "TERM-proof leftover: SIGKILL comes no sooner than the 1 s grace (ms)" 950 "${k:+${s:+$((k - s))}}"
stub=$(cat "$T/stub" 2>/dev/null)
check "TERM-proof leftover: the leftover is gone" eval '[ -n "$stub" ] && wait_for 5 gone "$stub"'
pg=$(jget "$(ev "$T/kill.events" child_start)" pid)
check "TERM-proof leftover: nothing of its group is left" wait_for 5 group_gone "${pg:-0}"

expect_eq "no zombie children left" 0 "$(zombies_of $$)"
check "nothing of this test is left running" wait_for 5 none_left
