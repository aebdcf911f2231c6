#!/usr/bin/env bash
# spotd dies without stopping its command (kill -9, the OOM killer):
#
#   1. the command gets the stop signal from the kernel (PR_SET_PDEATHSIG)
#   2. what is left of its group (a command that ignores the signal, its
#      child) is stopped by the next spotd on the same state directory
#      before that one starts anything: one command at the end, never two;
#      also with --job and --store, the C trainer and a grandchild
#   3. two spotds on one state directory: the second is refused (125)
#   4. a record that does not name the group it was written for (a pid
#      used again, another boot, garbage) is removed and nothing signalled
. "$(dirname "$0")/lib.sh"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
mkdir -p "$T/store"
BOOT=$(cat /proc/sys/kernel/random/boot_id)

# running SCRIPT: how many live processes run sh SCRIPT (builtins only).
running() {
    local f c n=0
    for f in /proc/[0-9]*; do
        { c=$(tr '\0' ' ' <"$f/cmdline"); } 2>/dev/null || continue
        [ "$c" = "sh $1 " ] || [ "${c#sh $1 }" != "$c" ] || continue
        [ "$(proc_field "${f#/proc/}" 3)" = Z ] || n=$((n + 1))
    done
    echo $n
}

# record PGID START BOOT_ID: the record a spotd writes of its command.
record() {
    printf '{"pgid":%s,"start":%s,"boot_id":"%s","spotd_pid":99999}\n' "$1" "$2" "$3"
}

# ---- 1. the kernel tells the command ---------------------------------------

start_spotd run --cloud none --state-dir "$T/s1" -- sleep 300
cmd=$(command_pid "$SPOTD_PID")
check "pdeathsig: the command runs, and spotd records its group" \
    eval '[ -n "$cmd" ] && grep -q "\"pgid\":$cmd," "$T/s1/command.json"'
kill -KILL "$SPOTD_PID"
wait "$SPOTD_PID" 2>/dev/null
check "pdeathsig: the command ends when spotd is SIGKILLed" \
    eval '[ -n "$cmd" ] && wait_for 5 gone "$cmd"'

# ---- 2. the next spotd stops what is left -----------------------------------

# A command that ignores SIGTERM, and its child (which inherits that).
cat >"$T/stubborn.sh" <<'EOF'
trap '' TERM
sleep 300 &
echo $! >"$1.child"
wait
EOF
start_spotd run --cloud none --state-dir "$T/s2" --grace 1s -- sh "$T/stubborn.sh" "$T/old"
old=$(command_pid "$SPOTD_PID")
wait_for 5 test -s "$T/old.child"
oldchild=$(cat "$T/old.child" 2>/dev/null)
kill -KILL "$SPOTD_PID"
wait "$SPOTD_PID" 2>/dev/null
sleep 0.5
check "leftover: a command that ignores SIGTERM outlives a SIGKILLed spotd, with its child" \
    eval '[ -n "$old" ] && [ -n "$oldchild" ] && alive "$old" "$oldchild"'
start_spotd run --cloud none --state-dir "$T/s2" --grace 1s --events "$T/ev2" -- \
    sh "$T/stubborn.sh" "$T/new"
new=$(command_pid "$SPOTD_PID")
check "leftover: the next spotd on the state directory starts its command" \
    eval '[ -n "$new" ] && [ "$new" != "$old" ] && alive "$new"'
check "leftover: ... after the one left running and its child are gone" \
    eval '[ -n "$old" ] && gone "$old" "$oldchild"'
expect_eq "leftover: one command runs, not two" 1 "$(running "$T/stubborn.sh")"
expect_eq "leftover: the leftover event comes before the command starts" \
    "start leftover child_start" "$(events_of "$T/ev2")"
rec=$(ev "$T/ev2" leftover)
check "leftover: the event names the group, its 2 processes, SIGKILL (SIGTERM was ignored)" \
    eval '[ "$(jget "$rec" pgid)" = "$old" ] && [ "$(jget "$rec" processes)" = 2 ] &&
          [ "$(jget "$rec" signal)" = KILL ] && [ "$(jget "$rec" left)" = 0 ]'
check "leftover: stderr says what is stopped and why" \
    has "process group $old (2 processes) was started by a spotd (pid" "$T/stderr"
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID"
check "leftover: the record is removed once the command's group is gone" \
    eval '[ "$RC" = 137 ] && [ -e "$T/s2/lock" ] && [ ! -e "$T/s2/command.json" ]'

# The same with checkpoints: the C trainer, launched by a shell that ignores
# SIGTERM (as a launcher in its exit barrier does), its grandchild.
cat >"$T/launch.sh" <<EOF
trap '' TERM
sh -c 'trap - TERM; exec "$TRAINER" 100000000' &
wait
EOF
start_spotd run --cloud none --job j --store "file://$T/store" --state-dir "$T/s5" \
    --grace 1s -- sh "$T/launch.sh"
launcher=$(command_pid "$SPOTD_PID")
wait_for 10 eval '[ -n "$(children "$launcher")" ]'
trainer=$(children "$launcher" | head -n 1)
kill -KILL "$SPOTD_PID"
wait "$SPOTD_PID" 2>/dev/null
sleep 0.5
check "leftover: the launcher and the C trainer outlive a SIGKILLed spotd" \
    eval '[ -n "$trainer" ] && alive "$launcher" "$trainer"'
start_spotd run --cloud none --job j --store "file://$T/store" --state-dir "$T/s5" \
    --grace 1s --events "$T/ev5" -- sh "$T/launch.sh"
second=$(command_pid "$SPOTD_PID")
check "leftover: the next spotd stops both, then starts its own launcher" \
    eval '[ -n "$second" ] && [ -n "$trainer" ] && gone "$launcher" "$trainer" &&
          [ "$(event_count "$T/ev5" leftover)" = 1 ]'
expect_eq "leftover: one launcher runs, not two" 1 "$(running "$T/launch.sh")"

# ---- 3. two spotds on one state directory -----------------------------------

# $SPOTD_PID (the second launcher's spotd) holds $T/s5.
run_spotd run --cloud none --state-dir "$T/s5" -- touch "$T/ran3"
check "two spotds: the second is refused with 125 and starts nothing" \
    eval '[ "$RC" = 125 ] && [ ! -e "$T/ran3" ]'
check "two spotds: ... saying which spotd holds the state directory" \
    has "another spotd (pid $SPOTD_PID) runs on the state directory '$T/s5'" "$T/stderr"
check "two spotds: ... and the first goes on" alive "$SPOTD_PID" "$second"
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID"

# ---- 4. records that do not name their group --------------------------------

# Someone else's group: a sleep leading one of its own.
setsid sleep 300 &
other=$!
_bg_pids+=("$other")
wait_for 5 eval '[ "$(proc_field "$other" 5)" = "$other" ]'
start=$(proc_field "$other" 22)
mkdir -p "$T/s4"
# stale NAME: spotd runs on $T/s4, leaves $other alone and removes the record.
stale() {
    run_spotd run --cloud none --state-dir "$T/s4" --grace 1s --events "$T/ev4" -- true
    if [ "$RC" = 0 ] && alive "$other" && [ ! -e "$T/s4/command.json" ] &&
        [ "$(event_count "$T/ev4" leftover)" = 0 ]; then
        pass "$1"
    else
        fail "$1" "exit $RC, $(proc_state "$other"), $(ls "$T/s4"), $(head -c 300 "$T/stderr")"
    fi
    rm -f "$T/ev4"
}
record "$other" $((start + 1)) "$BOOT" >"$T/s4/command.json"
stale "stale record: a leader with another start time (its pid used again) is left alone"
record "$other" "$start" 00000000-0000-0000-0000-000000000000 >"$T/s4/command.json"
stale "stale record: a group of another boot is left alone"
printf '{"pgid":%s,"start":"%s"}' "$other" "$start" >"$T/s4/command.json"
stale "stale record: garbage is removed"
check "stale record: ... and said" has "ignoring '$T/s4/command.json' (a member is missing" \
    "$T/stderr"
# The check against: the right start time, and it is stopped.
record "$other" "$start" "$BOOT" >"$T/s4/command.json"
run_spotd run --cloud none --state-dir "$T/s4" --grace 1s --events "$T/ev4" -- true
check "stale record: (the same record with the right start time: that group is stopped)" \
    eval '[ "$RC" = 0 ] && wait_for 2 gone "$other" && [ "$(event_count "$T/ev4" leftover)" = 1 ]'

check "leftover: nothing is left behind" none_left
