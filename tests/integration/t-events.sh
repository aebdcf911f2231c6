#!/usr/bin/env bash
# The event log (--events FILE): one compact JSON object a line, each
# starting with "ts" and "event", appended to; and the stderr log, as
# key=value text or (--log-format json) one JSON object a line.
. "$(dirname "$0")/lib.sh"

TS_RE='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z'

# A simple run.
f="$T/a.events"
start_spotd run --events "$f" -- sh -c 'exit 3'
wait_exit "$SPOTD_PID" 10
expect_eq "simple run exits 3" 3 "$RC"
expect_eq "simple run: events start, child_start, child_exit, exit" \
    "start child_start child_exit exit" "$(events_of "$f")"
expect_eq "simple run: four lines" 4 "$(wc -l <"$f" | tr -d ' ')"
check "every line is one object beginning with ts then event" \
    eval '! grep -vE "^\{\"ts\":\"$TS_RE\",\"event\":\"[a-z_]+\"(,.*)?\}$" "$f" | grep -q .'
check "every ts has the form YYYY-MM-DDTHH:MM:SS.mmmZ" \
    eval '[ "$(grep -cE "^\{\"ts\":\"$TS_RE\"," "$f")" -eq 4 ]'
check "the file ends with a newline" test "$(tail -c 1 "$f" | od -An -c | tr -d ' ')" = '\n'
check "every line is strict JSON (no key twice, no NaN or Infinity)" jcheck "$f"
check "no line is pretty-printed (no tab, no line break inside)" eval '! grep -qP "\t" "$f"'
start=$(ev "$f" start)
expect_eq "start record has spotd's pid" "$SPOTD_PID" "$(jget "$start" pid)"
check "start record has the version" eval 'jget "$start" version | grep -qE "^[0-9]+\.[0-9]+\.[0-9]+"'
check "start record has the settings" has '"settings":{"restart":"never"' "$f"
cs=$(ev "$f" child_start)
check "child_start record has the argv array" has '"argv":["sh","-c","exit 3"]' "$f"
check "child_start record has a pid" eval '[ "$(jget "$cs" pid)" -gt 0 ]'
ce=$(ev "$f" child_exit)
expect_eq "child_exit record has the same pid" "$(jget "$cs" pid)" "$(jget "$ce" pid)"
check "child_exit record has runtime_ms" eval 'jget "$ce" runtime_ms | grep -qE "^[0-9]+$"'
ex=$(ev "$f" exit)
expect_eq "exit record: code 3" 3 "$(jget "$ex" code)"
expect_eq "exit record: reason exited" exited "$(jget "$ex" reason)"
expect_eq "exit record: restarts 0" 0 "$(jget "$ex" restarts)"
t_first=$(ts_ms "$(jget "$(head -n 1 "$f")" ts)")
t_last=$(ts_ms "$(jget "$(tail -n 1 "$f")" ts)")
check "timestamps do not go backwards" test "${t_last:-0}" -ge "${t_first:-1}"
now=$(now_ms)
expect_lt "timestamps are UTC wall-clock time, not far from now (ms)" 600000 \
    "$(( now > t_last ? now - t_last : t_last - now ))"

# Appended to: a second run adds its own records.
run_spotd run --events "$f" -- true
expect_eq "second run: the file is appended to (two start records)" 2 "$(event_count "$f" start)"
expect_eq "second run: eight lines" 8 "$(wc -l <"$f" | tr -d ' ')"
expect_eq "second run: sequence" \
    "start child_start child_exit exit start child_start child_exit exit" "$(events_of "$f")"

# The event log is written whatever the stderr level.
f="$T/quiet.events"
run_spotd run --log-level error --events "$f" -- true
expect_eq "--log-level error: nothing on stderr for a clean run" "" "$(cat "$T/stderr")"
expect_eq "--log-level error: the event log is complete" \
    "start child_start child_exit exit" "$(events_of "$f")"
check "the event log is created mode 0644" test "$(stat -c %a "$f")" = 644

# The command's own output passes through untouched.
run_spotd run -- sh -c 'echo out-line; echo err-line >&2'
expect_eq "the command's stdout passes through" out-line "$(cat "$T/stdout")"
check "the command's stderr passes through" grep -qx err-line "$T/stderr"

# The event log does not leak into the command as an open descriptor.
run_spotd run --events "$T/fd.events" -- sh -c 'ls -l /proc/$$/fd'
check "the event log is not inherited by the command" eval '! grep -q fd.events "$T/stdout"'
base=$(sh -c 'ls /proc/$$/fd' 2>/dev/null | sort -n | tr "\n" " ")
run_spotd run --events "$T/fd.events" -- sh -c 'ls /proc/$$/fd'
expect_eq "the command inherits no descriptor of spotd's own (event loop, log)" \
    "$base" "$(sort -n "$T/stdout" | tr "\n" " ")"

# Default text format on stderr.
run_spotd run --cloud none -- true
check "text stderr: level=info" grep -q 'level=info' "$T/stderr"
check "text stderr: event=child_start" grep -q 'event=child_start' "$T/stderr"
check "text stderr: every line starts with ts= then level=" \
    eval '! grep -vE "^ts=$TS_RE level=(debug|info|warn|error) " "$T/stderr" | grep -q .'
expect_eq "text stderr: four lines" 4 "$(wc -l <"$T/stderr" | tr -d ' ')"

# JSON format on stderr: every line an object with "level".
run_spotd run --log-format json -- true
check "json stderr: every line is an object with ts first" \
    eval '! grep -vE "^\{\"ts\":\"$TS_RE\",.*\}$" "$T/stderr" | grep -q .'
expect_eq "json stderr: every line has \"level\"" "$(wc -l <"$T/stderr" | tr -d ' ')" \
    "$(grep -c '"level":"info"' "$T/stderr")"
check "json stderr: the child_start event" grep -q '"event":"child_start"' "$T/stderr"
check "json stderr: a human message" grep -q '"msg":"' "$T/stderr"
check "json stderr: every line is strict JSON (no key twice)" jcheck "$T/stderr"
SPOTD_LOG_FORMAT=json run_spotd run -- true
check "SPOTD_LOG_FORMAT=json works too" \
    eval '! grep -vE "^\{\"ts\":\"$TS_RE\",.*\"level\":\"[a-z]+\".*\}$" "$T/stderr" | grep -q .'

# Debug level shows more than info (the reaping of orphans, say).
run_spotd run --log-level debug -- sh -c '(sleep 0.1 &); sleep 0.3'
check "--log-level debug: debug lines appear" grep -q 'level=debug' "$T/stderr"

# Warnings and errors go through the logger too: not found is an error record.
f="$T/err.events"
run_spotd run --log-format json --events "$f" -- spotd-no-such-command-xyz
check "json stderr: exec failure is a level error line" \
    grep -q '"event":"error".*"level":"error"' "$T/stderr"
expect_eq "exec failure: event sequence" "start error exit" "$(events_of "$f")"
expect_eq "exec failure: error record has what exec" exec "$(jget "$(ev "$f" error)" what)"

# ---- a full disk ----------------------------------------------------------------------------
# A record is written whole or not at all; a drop is said once on stderr
# (again only after the log was written again and failed again) and
# counted in /metrics.

# all_json FILE: every line of FILE is one JSON object.
all_json() {
    python3 -c 'import strictjson,sys
for n, line in enumerate(open(sys.argv[1], "rb"), 1):
    try:
        assert isinstance(strictjson.loads(line.decode("utf-8")), dict)
    except Exception:
        sys.exit("line %d is not a JSON object: %r" % (n, line[:120]))' "$1"
}
warnings() { grep -c "cannot write the event log" "$T/stderr"; }

run_spotd run --events /dev/full -- true
expect_eq "/dev/full: the command runs, and one warning says why the records are dropped" \
    "0|1" "$RC|$(warnings)"
check "... naming the file and the counter" grep -q \
    "cannot write the event log '/dev/full': No space left on device; .*spotd_events_dropped_total" \
    "$T/stderr"

if [ "$(id -u)" != 0 ] || ! unshare -m --propagation private true 2>/dev/null; then
    echo "SKIP: events on a full tmpfs (needs root to mount one in a mount namespace)"
else
    ADDR=$(free_ports 1)
    mkdir -p "$T/full" "$T/fstore"
    # spotd in a mount namespace of its own, with a 64 KiB tmpfs on $T/full;
    # the test reaches that tmpfs through /proc/PID/root.
    # The trainer sleeps 1 ms a step: it only needs to move on between the
    # checkpoints, not to spin a core for the whole case.
    TRAINER_STEP_US=1000 unshare -m --propagation private \
        sh -c 'mount -t tmpfs -o size=64k spotd-full "$0" && exec "$@"' "$T/full" \
        "$SPOTD" run --job f --store "file://$T/fstore" --state-dir "$T/fs" --cloud none \
        --metrics "$ADDR" --events "$T/full/ev" -- "$TOP/$O/examples/c-trainer/trainer" 100000000 \
        1 >"$T/stdout" 2>"$T/stderr" &
    SPOTD_PID=$!
    _bg_pids+=("$SPOTD_PID")
    FULL=/proc/$SPOTD_PID/root$T/full
    committed() {
        status_get "$T/fs" committed_gen
    }
    # checkpoint N: one more manual checkpoint, committed as generation N.
    checkpoint() {
        [ "$(jget "$("$SPOTCTL" checkpoint --state-dir "$T/fs" --json 2>/dev/null)" ok)" = true ] &&
            wait_for 20 eval '[ "$(committed)" = '"$1"' ]'
    }
    # dropped: spotd_events_dropped_total, from a scrape the strict parser reads.
    dropped() {
        curl -sS --max-time 5 -o "$T/metrics.txt" "http://$ADDR/metrics" 2>/dev/null &&
            python3 "$TOP/tests/integration/promparse.py" "$T/metrics.txt" >"$T/metrics.json" &&
            python3 -c 'import json,sys
v=json.load(open(sys.argv[1]))["samples"].get("spotd_events_dropped_total")
print("" if v is None else "%d" % v)' "$T/metrics.json"
    }
    check "spotd runs with its event log on a 64 KiB tmpfs" wait_for 20 eval \
        '[ "$(status_get "$T/fs" workers)" = 1 ]'
    expect_eq "/metrics: no record dropped yet" 0 "$(dropped)"
    head -c 1M /dev/zero >"$FULL/filler" 2>/dev/null
    gen=0
    for i in $(seq 1 10); do
        gen=$((gen + 1))
        checkpoint $gen || break
        [ "$(dropped)" -gt 0 ] 2>/dev/null && [ $i -ge 2 ] && break
    done
    d1=$(dropped)
    check "the disk full: checkpoints go on, their records are dropped and counted in /metrics" \
        eval '[ "$(committed)" = $gen ] && [ "${d1:-0}" -gt 0 ]'
    check "... every line of the event log is still one JSON object (no cut line)" \
        all_json "$FULL/ev"
    expect_eq "... said once on stderr" 1 "$(warnings)"
    rm -f "$FULL/filler"
    gen=$((gen + 1))
    checkpoint $gen
    check "space again: the next records are written, whole" eval 'all_json "$FULL/ev" &&
        [ "$(jget "$(ev "$FULL/ev" commit | tail -n 1)" gen)" = $gen ]'
    check "... and stderr says the log is written again, with how many were dropped" grep -q \
        "the event log '$T/full/ev' is written again; $d1 records* w[a-z]* dropped" "$T/stderr"
    head -c 1M /dev/zero >"$FULL/filler" 2>/dev/null
    for i in $(seq 1 10); do
        gen=$((gen + 1))
        checkpoint $gen || break
        [ "$(dropped)" -gt "$d1" ] 2>/dev/null && break
    done
    # A record small enough for the slack in the log's last page of the
    # tmpfs is written, and the log is written again: each warning after
    # the first follows such a line, never two in a row.
    agains=$(grep -c "the event log '$T/full/ev' is written again" "$T/stderr")
    check "full again: a second warning" test "$(warnings)" -ge 2
    expect_eq "... and no more than one for each time it was written again" \
        $((agains + 1)) "$(warnings)"
    check "... the event log still holds only whole JSON lines" all_json "$FULL/ev"
    kill -TERM "$SPOTD_PID"
    wait_exit "$SPOTD_PID" 20
fi

expect_eq "no zombie children left" 0 "$(zombies_of $$)"
check "nothing of this test is left running" wait_for 5 none_left
