#!/usr/bin/env bash
# Restarts: --restart never|on-failure|always, --max-restarts, and the
# exponential backoff between runs (1 s, 2 s, ...), which a stop cuts short.
. "$(dirname "$0")/lib.sh"

# runs FILE: how many lines the runs file holds.
runs() {
    if [ -e "$1" ]; then wc -l <"$1" | tr -d ' '; else echo 0; fi
}

# on-failure, failing every time, at most 2 restarts: 3 runs, then exit 1.
f="$T/of.events"
run_spotd run --restart on-failure --max-restarts 2 --events "$f" -- \
    sh -c "echo x >>$T/runs1; exit 1"
expect_eq "on-failure, max 2: spotd exits with the last code" 1 "$RC"
expect_eq "on-failure, max 2: 3 runs" 3 "$(runs "$T/runs1")"
expect_eq "on-failure, max 2: 2 restart records" 2 "$(event_count "$f" restart)"
expect_eq "on-failure, max 2: backoff delays 1000 then 2000 ms" "1000 2000" \
    "$(ev "$f" restart | while read -r l; do jget "$l" delay_ms; done | tr '\n' ' ' | sed 's/ $//')"
expect_eq "on-failure, max 2: restart records count 1, 2" "1 2" \
    "$(ev "$f" restart | while read -r l; do jget "$l" restarts; done | tr '\n' ' ' | sed 's/ $//')"
expect_eq "on-failure, max 2: child_start records carry restarts 0, 1, 2" "0 1 2" \
    "$(ev "$f" child_start | while read -r l; do jget "$l" restarts; done | tr '\n' ' ' | sed 's/ $//')"
exitrec=$(ev "$f" exit)
expect_eq "on-failure, max 2: exit reason max_restarts" max_restarts "$(jget "$exitrec" reason)"
expect_eq "on-failure, max 2: exit record has code 1" 1 "$(jget "$exitrec" code)"
expect_eq "on-failure, max 2: exit record has restarts 2" 2 "$(jget "$exitrec" restarts)"
expect_eq "on-failure, max 2: event order" \
    "start child_start child_exit restart child_start child_exit restart child_start child_exit exit" \
    "$(events_of "$f")"
# The backoff is real time, not a busy loop: child_start records at least
# ~1 s, then ~2 s apart (by the event log's own timestamps).
read -r s0 s1 s2 <<<"$(ev "$f" child_start | while read -r l; do ts_ms "$(jget "$l" ts)"; done |
    tr '\n' ' ')"
if [ -n "${s2:-}" ]; then
    expect_ge "on-failure, max 2: first backoff lasts ~1 s or more (ms)" 950 $((s1 - s0))
    expect_ge "on-failure, max 2: second backoff lasts ~2 s or more (ms)" 1950 $((s2 - s1))
    expect_lt "on-failure, max 2: both backoffs take under 10 s (ms)" 10000 $((s2 - s0))
else
    fail "on-failure, max 2: three child_start timestamps" "got '$s0 ${s1:-} ${s2:-}'"
fi

# on-failure: death by a signal (not sent by spotd) is a failure too.
run_spotd run --restart on-failure --max-restarts 1 -- sh -c "echo x >>$T/runs8; kill -KILL \$\$"
expect_eq "on-failure, killed by SIGKILL: spotd exits 137" 137 "$RC"
expect_eq "on-failure, killed by SIGKILL: restarted once (2 runs)" 2 "$(runs "$T/runs8")"

# on-failure with success: one run.
f="$T/ok.events"
run_spotd run --restart on-failure --events "$f" -- sh -c "echo x >>$T/runs2; exit 0"
expect_eq "on-failure, exit 0: spotd exits 0" 0 "$RC"
expect_eq "on-failure, exit 0: 1 run" 1 "$(runs "$T/runs2")"
expect_eq "on-failure, exit 0: no restart record" 0 "$(event_count "$f" restart)"
expect_eq "on-failure, exit 0: exit reason exited" exited "$(jget "$(ev "$f" exit)" reason)"

# always, even on success, within max-restarts 1: two runs.
f="$T/always.events"
run_spotd run --restart always --max-restarts 1 --events "$f" -- sh -c "echo x >>$T/runs3; exit 0"
expect_eq "always, max 1: spotd exits 0" 0 "$RC"
expect_eq "always, max 1: 2 runs" 2 "$(runs "$T/runs3")"
expect_eq "always, max 1: exit reason max_restarts" max_restarts "$(jget "$(ev "$f" exit)" reason)"

# never (the default) with a failure: one run.
f="$T/never.events"
run_spotd run --events "$f" -- sh -c "echo x >>$T/runs4; exit 1"
expect_eq "never (default), exit 1: spotd exits 1" 1 "$RC"
expect_eq "never (default), exit 1: 1 run" 1 "$(runs "$T/runs4")"
expect_eq "never (default), exit 1: exit reason exited" exited "$(jget "$(ev "$f" exit)" reason)"

# always with --max-restarts 0: one run.
run_spotd run --restart always --max-restarts 0 -- sh -c "echo x >>$T/runs5; exit 2"
expect_eq "always, max 0: spotd exits 2" 2 "$RC"
expect_eq "always, max 0: 1 run" 1 "$(runs "$T/runs5")"

# The policy also comes from the environment.
SPOTD_RESTART=on-failure SPOTD_MAX_RESTARTS=1 run_spotd run -- sh -c "echo x >>$T/runs6; exit 3"
expect_eq "SPOTD_RESTART/SPOTD_MAX_RESTARTS: spotd exits 3" 3 "$RC"
expect_eq "SPOTD_RESTART/SPOTD_MAX_RESTARTS: 2 runs" 2 "$(runs "$T/runs6")"

# SIGTERM during the backoff wait: spotd ends at once with the last code,
# and the command does not run again.  The third backoff (4 s) is the one
# interrupted, so that the signal surely lands inside it on a slow machine;
# the exit must come before that backoff would have ended.
f="$T/stop.events"
start_spotd run --restart always --events "$f" -- sh -c "echo x >>$T/runs7; exit 3"
if wait_for 20 eval '[ "$(event_count "$f" restart)" -ge 3 ]'; then
    kill -TERM "$SPOTD_PID"
    wait_exit "$SPOTD_PID" 10
    expect_eq "TERM in backoff: spotd exits with the last code" 3 "$RC"
    expect_eq "TERM in backoff: no further run" 3 "$(runs "$T/runs7")"
    exitrec=$(ev "$f" exit)
    expect_eq "TERM in backoff: exit reason stopped" stopped "$(jget "$exitrec" reason)"
    rr=$(ev "$f" restart | sed -n 3p)
    r=$(ts_ms "$(jget "$rr" ts)") delay=$(jget "$rr" delay_ms)
    e=$(ts_ms "$(jget "$exitrec" ts)")
    expect_eq "TERM in backoff: the third backoff is 4 s" 4000 "$delay"
    check "TERM in backoff: spotd exits before the backoff would have ended" \
        eval '[ -n "$e" ] && [ -n "$r" ] && [ "$e" -lt $((r + delay)) ]'
    expect_eq "TERM in backoff: 3 child_start records" 3 "$(event_count "$f" child_start)"
else
    fail "TERM in backoff: a restart record appears" "$(cat "$f" 2>/dev/null)"
    kill_tree "$SPOTD_PID"
fi

expect_eq "no zombie children left" 0 "$(zombies_of $$)"
check "nothing of this test is left running" wait_for 5 none_left
