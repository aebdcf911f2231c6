#!/usr/bin/env bash
# Notices from this machine: drills, SIGTERM, --notice-signals and
# --notice-file; the stop sequence at deadline - margin - grace, advisory
# kinds leave the command alone, a notice is acted on once.
. "$(dirname "$0")/lib.sh"

# A command that says which signals reached it, and exits 0 on TERM.
cat >"$T/cmd.sh" <<'EOF2'
trap 'echo TERM >>"$1/got"; exit 0' TERM
trap 'echo USR1 >>"$1/got"' USR1
while :; do sleep 0.05; done
EOF2

notice_line() { ev "$1" notice | head -n 1; }

# 1. A drill: marked, and the stop lands at deadline - margin - grace.
d="$T/drill"; mkdir "$d"
start_spotd run --cloud none --events "$d/ev" --drill-after 300ms:terminate --signal-deadline 5s \
    --notice-margin 1s --grace 1s -- sh "$T/cmd.sh" "$d"
wait_exit "$SPOTD_PID" 20
expect_eq "drill: the command exits 0 on the stop signal" 0 "$RC"
n=$(notice_line "$d/ev")
expect_eq "drill: source" drill "$(jget "$n" source)"
expect_eq "drill: kind" terminate "$(jget "$n" kind)"
expect_eq "drill: marked as a drill" true "$(jget "$n" drill)"
expect_eq "drill: terminating" true "$(jget "$n" terminating)"
det=$(ts_ms "$(jget "$n" detected)") dl=$(ts_ms "$(jget "$n" deadline)")
expect_eq "drill: deadline = detection + signal_deadline" 5000 "$((dl - det))"
stop=$(ev "$d/ev" stop | head -n 1)
check "drill: the stop names the drill" has '"reason":"notice: drill terminate (drill)"' "$d/ev"
gap=$(( $(ts_ms "$(jget "$stop" ts)") - det ))
expect_ge "drill: stop signal not before deadline - margin - grace (3 s)" 2950 "$gap"
expect_lt "drill: stop signal soon after deadline - margin - grace" $((3000 + $(late 300))) "$gap"
expect_eq "drill: one notice" 1 "$(event_count "$d/ev" notice)"

# 2. Advisory: the command is left alone.
d="$T/advisory"; mkdir "$d"
start_spotd run --cloud none --events "$d/ev" --drill-after 200ms:rebalance -- sh "$T/cmd.sh" "$d"
wait_for 10 has '"event":"notice"' "$d/ev"
sleep 1
check "advisory: spotd still runs a second after the notice" alive "$SPOTD_PID"
check "advisory: no stop" sh -c "! grep -q '\"event\":\"stop\"' '$d/ev'"
check "advisory: action says advisory" has '"action":"none: advisory"' "$d/ev"
check "advisory: the command got no signal" sh -c "[ ! -e '$d/got' ]"
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 10
expect_eq "advisory: SIGTERM afterwards still stops it" 0 "$RC"

# 3. SIGTERM is a notice of kind signal and reaches the command at once.
d="$T/term"; mkdir "$d"
start_spotd run --cloud none --events "$d/ev" --grace 10s -- sh "$T/cmd.sh" "$d"
wait_for 10 has '"event":"child_start"' "$d/ev"
sleep 0.2
t0=$(now_ms)
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 10
t1=$(now_ms)
expect_eq "SIGTERM: the command's code" 0 "$RC"
expect_lt "SIGTERM: forwarded at once, not at the 10 s grace" $(late 1000) "$((t1 - t0))"
n=$(notice_line "$d/ev")
expect_eq "SIGTERM: a notice from source signal" signal "$(jget "$n" source)"
expect_eq "SIGTERM: of kind signal" signal "$(jget "$n" kind)"
expect_eq "SIGTERM: raw names the signal" TERM "$(jget "$n" raw)"

# 4. --notice-signals USR1: a notice, not forwarded; stop at the deadline.
d="$T/usr1"; mkdir "$d"
start_spotd run --cloud none --events "$d/ev" --notice-signals USR1 --signal-deadline 3s \
    --notice-margin 500ms --grace 500ms -- sh "$T/cmd.sh" "$d"
wait_for 10 has '"event":"child_start"' "$d/ev"
sleep 0.2
kill -USR1 "$SPOTD_PID"
wait_exit "$SPOTD_PID" 15
expect_eq "USR1 notice: the command stopped cleanly" 0 "$RC"
expect_eq "USR1 notice: the command never saw USR1" "TERM" "$(cat "$d/got" 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
n=$(notice_line "$d/ev")
expect_eq "USR1 notice: raw names USR1" USR1 "$(jget "$n" raw)"
check "USR1 notice: not forwarded" sh -c "! grep -q '\"event\":\"signal\",\"signal\":\"USR1\"' '$d/ev'"
stop=$(ev "$d/ev" stop | head -n 1)
gap=$(( $(ts_ms "$(jget "$stop" ts)") - $(ts_ms "$(jget "$n" detected)") ))
expect_ge "USR1 notice: stop at deadline - margin - grace (2 s)" 1950 "$gap"

# 5. --notice-file: present at start, acted on at once, and only once.
d="$T/file"; mkdir -p "$d/run"
echo "node draining" >"$d/run/preempt"
start_spotd run --cloud none --events "$d/ev" --notice-file "$d/run/preempt" \
    --signal-deadline 2s --notice-margin 0s --grace 1s -- sh "$T/cmd.sh" "$d"
wait_exit "$SPOTD_PID" 15
expect_eq "notice file at start: the command stopped" 0 "$RC"
n=$(notice_line "$d/ev")
expect_eq "notice file: source" file "$(jget "$n" source)"
expect_eq "notice file: raw is the file's text" 'node draining' "$(jget "$n" raw)"
expect_eq "notice file: one notice" 1 "$(event_count "$d/ev" notice)"

# 6. --notice-file appearing later, by rename as a scheduler would write it.
d="$T/file2"; mkdir -p "$d/run"
start_spotd run --cloud none --events "$d/ev" --notice-file "$d/run/preempt" \
    --signal-deadline 1s --notice-margin 0s --grace 1s -- sh "$T/cmd.sh" "$d"
wait_for 10 has '"event":"child_start"' "$d/ev"
sleep 0.3
check "notice file: nothing before it appears" sh -c "! grep -q '\"event\":\"notice\"' '$d/ev'"
echo later >"$d/run/.tmp" && mv "$d/run/.tmp" "$d/run/preempt"
t0=$(now_ms)
wait_for 10 has '"event":"notice"' "$d/ev"
expect_lt "notice file: seen soon after it appears" $(late 300) "$(( $(now_ms) - t0 ))"
wait_exit "$SPOTD_PID" 10
expect_eq "notice file: the command stopped" 0 "$RC"

# 7. A deadline already past: stop at once with no grace left.
d="$T/late"; mkdir "$d"
start_spotd run --cloud none --events "$d/ev" --drill-after 100ms:terminate --signal-deadline 0 \
    --notice-margin 1s --grace 10s -- sh -c 'trap "" TERM; while :; do sleep 0.05; done'
wait_exit "$SPOTD_PID" 10
expect_eq "past deadline: SIGKILL without waiting for the grace" 137 "$RC"
check "past deadline: the notice says stop now" has '"action":"stop now, grace 0 ms"' "$d/ev"

# 8. Bad values are refused at start.
run_spotd run --drill-after 5x -- true
expect_eq "bad --drill-after: exit 125" 125 "$RC"
check "bad --drill-after: says what is allowed" grep -q "DURATION\[:KIND\]" "$T/stderr"
run_spotd run --drill-after 1s:explode -- true
expect_eq "bad drill kind: exit 125" 125 "$RC"
run_spotd run --notice-signals KILL -- true
expect_eq "--notice-signals KILL: exit 125" 125 "$RC"
check "--notice-signals KILL: names it" grep -q "'KILL' cannot be a notice signal" "$T/stderr"
run_spotd run --notice-file /nonexistent/dir/f -- true
expect_eq "--notice-file in a missing directory: exit 125" 125 "$RC"
check "--notice-file in a missing directory: says which" grep -q "/nonexistent/dir" "$T/stderr"
run_spotd run --cloud mars -- true
expect_eq "--cloud mars: exit 125" 125 "$RC"
run_spotd run --cloud aws --metadata-url ftp://127.0.0.1/ -- true
expect_eq "--metadata-url ftp://: exit 125" 125 "$RC"
check "--metadata-url ftp://: says what is allowed" grep -q "expected an http:// or https:// URL" "$T/stderr"

check "no zombie children left" [ "$(zombies_of $$)" = 0 ]
check "nothing of this test is left running" none_left
