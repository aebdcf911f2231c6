#!/usr/bin/env bash
# Webhooks (webhook, --webhook-file, --webhook-template, --webhook-timeout)
# against a real HTTP receiver on 127.0.0.1 (tests/servers/webhook_receiver.py)
# that records every request and fails, stalls, closes or refuses by path:
#
#   1. a drill: the notice and commit webhooks arrive, as JSON, in order, at
#      a healthy receiver, at one that fails twice (retried) and at one that
#      closes the first connection (retried); SPOTD_WEBHOOK's URL and the
#      --webhook-file's add up
#   2. a replacement node with a Slack-style template: resume, notice and
#      commit as {"text": ...} bodies, in order
#   3. a stalled receiver (--webhook-timeout 1s): the checkpoint commits and
#      spotd exits 75 long before the stall ends; a 404 is not retried; a
#      closed port is given up at exit
#   4. missed deadlines: a failed notice checkpoint, a command killed at
#      the deadline
#   5. refused at start (exit 125): bad URLs, bad templates, bad URL files,
#      and any --webhook URL on the command line
#   6. the URL is a secret: never in stderr, the event log, spotd config,
#      the command's environment or spotd's command line
. "$(dirname "$0")/lib.sh"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
HOST=$(uname -n)
SECRET=T0KEN-b7c9e1f4a2
mkdir -p "$T/store"

python3 "$TOP/tests/servers/webhook_receiver.py" --log "$T/rx" --port-file "$T/rx.port" \
    --behave /fail=fail:2 --behave /close=close:1 --behave /stall=stall:20 \
    --behave /gone=status:404 &
RX_PID=$!
_bg_pids+=("$RX_PID")
wait_for 10 test -s "$T/rx.port" || { fail "webhooks: the receiver starts"; exit 1; }
RX="http://127.0.0.1:$(cat "$T/rx.port")"

# The receiver's log, read with a strict JSON parser: each request's body
# must be one JSON document.
cat >"$T/rx.py" <<'EOF'
import json, strictjson, sys

def bodies(log, prefix, answer):
    out = []
    for line in open(log):
        r = strictjson.loads(line)
        if not r["path"].startswith(prefix) or (answer and str(r["answer"]) != answer):
            continue
        try:
            out.append((r, strictjson.loads(r["body"])))
        except ValueError:
            out.append((r, {"event": "INVALID"}))
    return out

cmd, log, prefix = sys.argv[1:4]
answer = sys.argv[4] if len(sys.argv) > 4 else ""
got = bodies(log, prefix, answer)
if cmd == "events":      # the documents' "event", in arrival order
    print(" ".join(d.get("event", "?") for _, d in got))
elif cmd == "answers":   # how the receiver answered each request
    print(" ".join(str(r["answer"]) for r, _ in got))
elif cmd == "texts":     # Slack-style bodies: their "text"
    print("\n".join(d.get("text", "?") for _, d in got))
elif cmd == "doc":       # the whole first document of an event, and its request
    for r, d in got:
        if d.get("event") == sys.argv[5]:
            print(json.dumps({"request": r, "doc": d}))
            break
EOF
rx() { python3 "$T/rx.py" "$@"; }

# doc_check NAME LINE PYTHON-EXPRESSION: the expression holds for the
# document (d) and its request (r) given as rx doc's line.
doc_check() {
    if python3 -c 'import strictjson, sys
x = strictjson.loads(sys.argv[1]); r, d = x["request"], x["doc"]
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$2" "$3"; then
        pass "$1"
    else
        fail "$1" "$3 does not hold for $2"
    fi
}

# keep N: this run's stderr and stdout, for the secret check at the end.
keep() { cp "$T/stderr" "$T/stderr.$1"; cp "$T/stdout" "$T/stdout.$1"; }

# ---- 1. a drill; healthy, failing and closing receivers ---------------------

# The file: one URL a line, comment lines, blank lines, spaces around.
printf '# the on-call receivers\n%s/fail/%s\n\n  # closes the first connection\n  %s/close/%s  \n' \
    "$RX" "$SECRET" "$RX" "$SECRET" >"$T/hooks1"
chmod 600 "$T/hooks1"
SPOTD_WEBHOOK="$RX/ok/$SECRET" run_spotd run --cloud none --job j1 --store "file://$T/store" \
    --state-dir "$T/n1" --drill-after 1s --events "$T/ev1" --webhook-file "$T/hooks1" \
    -- "$TRAINER" 3000 2
keep 1
expect_eq "webhooks: the drill's checkpoint is committed and spotd exits 75" 75 "$RC"
expect_eq "webhooks: the healthy receiver gets the notice, then the commit" \
    "notice commit" "$(rx events "$T/rx" /ok/)"
notice=$(rx doc "$T/rx" /ok/ 200 notice)
commit=$(rx doc "$T/rx" /ok/ 200 commit)
doc_check "webhooks: a POST of application/json by spotd" "$notice" \
    'r["method"] == "POST" and r["headers"]["content-type"] == "application/json" and
     r["headers"]["user-agent"].startswith("spotd/")'
doc_check "webhooks: the notice document: v, event, job, node, ts, text, record" "$notice" \
    "d['v'] == 1 and d['event'] == 'notice' and d['job'] == 'j1' and d['node'] == '$HOST' and
     d['ts'] == d['record']['ts'] and d['record']['event'] == 'notice' and
     d['record']['source'] == 'drill' and d['record']['terminating'] is True and
     'rank' not in d and 'drill notice for job j1' in d['text'] and '\n' not in d['text']"
expect_eq "webhooks: ... its ts is the event log's notice's" \
    "$(jget "$(ev "$T/ev1" notice)" ts)" \
    "$(python3 -c 'import strictjson,sys; print(strictjson.loads(sys.argv[1])["doc"]["ts"])' "$notice")"
step=$(jget "$(ev "$T/ev1" commit)" step)
doc_check "webhooks: the commit document carries the commit record (generation 1, its step)" \
    "$commit" "d['event'] == 'commit' and d['record']['gen'] == 1 and
     d['record']['step'] == $step and d['record']['margin_ms'] > 0 and
     d['text'].startswith('generation 1 of job j1 committed at step $step ')"
check "webhooks: the record is the event log's commit, field for field" python3 -c '
import strictjson, sys
sys.exit(0 if strictjson.loads(sys.argv[2])["doc"]["record"] == strictjson.loads(sys.argv[1]) else 1)' \
    "$(ev "$T/ev1" commit)" "$commit"
expect_eq "webhooks: a receiver that fails twice is retried: 500, 500, then both delivered" \
    "500 500 200 200" "$(rx answers "$T/rx" /fail/)"
expect_eq "webhooks: ... the notice three times, and the commit only after it (order kept)" \
    "notice notice notice commit" "$(rx events "$T/rx" /fail/)"
expect_eq "webhooks: a receiver that closes the first connection gets both, in order" \
    "notice commit" "$(rx events "$T/rx" /close/ 200)"
check "webhooks: the retries waited (backoff of 1 s, then 2 s)" python3 -c '
import strictjson, sys
t = [strictjson.loads(l)["t"] for l in open(sys.argv[1]) if "/fail/" in l]
sys.exit(0 if t[1] - t[0] >= 0.9 and t[2] - t[1] >= 1.9 else 1)' "$T/rx"
expect_eq "webhooks: nothing was given up" 0 "$(event_count "$T/ev1" webhook_dropped)"
check "webhooks: a webhook file of mode 600 is not warned about" \
    eval '! grep -q "can be read by other users" "$T/stderr.1"'
check "webhooks: the file's URLs come after SPOTD_WEBHOOK's (the failing one is 2 of 3)" \
    grep -q "(URL 2 of 3): the notice delivery failed (HTTP 500), try 1 of 8" "$T/stderr.1"

# The order checks can fail: the same deliveries reversed do not pass, and
# a body that is not JSON is seen as such.
tac "$T/rx" >"$T/rx.reversed"
check "webhooks: (the order check sees reversed deliveries)" \
    test "$(rx events "$T/rx.reversed" /ok/)" = "commit notice"
printf '{"t":0,"path":"/bad","answer":200,"body":"{\\"event\\": \\"notice\\"","headers":{}}\n' \
    >"$T/rx.bad"
check "webhooks: (the parser refuses a body that is not JSON)" \
    test "$(rx events "$T/rx.bad" /bad)" = INVALID

# ---- 2. a replacement node resumes, with a Slack-style template -------------

printf '{"text": "spot {event} on {host}: {text}", "gen": "{gen}", "kind": "{kind}"}\n' \
    >"$T/slack.json"
SPOTD_WEBHOOK="$RX/slack/$SECRET" run_spotd run --cloud none --job j1 \
    --store "file://$T/store" --state-dir "$T/n2" --drill-after 1s --events "$T/ev2" \
    --webhook-template "$T/slack.json" -- "$TRAINER" 3000 2
keep 2
expect_eq "webhooks template: the replacement node is preempted again (75)" 75 "$RC"
texts=$(rx texts "$T/rx" /slack/)
expect_eq "webhooks template: Slack-style bodies for the resume, the notice, the commit" \
    "resume notice commit" \
    "$(printf '%s\n' "$texts" | sed -n 's/^spot \([a-z_]*\) on .*/\1/p' | tr '\n' ' ' | sed 's/ $//')"
check "webhooks template: resume first: from generation 1 at the step committed" \
    test "$(printf '%s\n' "$texts" | sed -n 1p)" = \
    "spot resume on $HOST: job j1 resumed from generation 1 at step $step"
check "webhooks template: then the notice" \
    grep -q "^spot notice on $HOST: drill notice for job j1: deadline in " <<<"$(printf '%s\n' "$texts" | sed -n 2p)"
check "webhooks template: then the commit of generation 2" \
    grep -q "^spot commit on $HOST: generation 2 of job j1 committed at step " <<<"$(printf '%s\n' "$texts" | sed -n 3p)"
check "webhooks template: each body is exactly the template's JSON, placeholders filled" python3 -c '
import strictjson, sys
docs = [strictjson.loads(strictjson.loads(l)["body"]) for l in open(sys.argv[1]) if "/slack/" in l]
ok = [sorted(d) == ["gen", "kind", "text"] for d in docs] == [True] * 3
ok = ok and [d["gen"] for d in docs] == ["1", "", "2"] and docs[1]["kind"] == "drill"
sys.exit(0 if ok else 1)' "$T/rx"

# ---- 3. a stalled receiver does not hold spotd ------------------------------

dead=$(free_ports 1)
SPOTD_WEBHOOK="$RX/stall/$SECRET $RX/gone/$SECRET http://$dead/$SECRET" run_spotd run \
    --cloud none --job j3 --store "file://$T/store" --state-dir "$T/n3" \
    --drill-after 1s --events "$T/ev3" --webhook-timeout 1s -- "$TRAINER" 3000 2
t1=$(now_ms)
keep 3
expect_eq "webhooks stall: spotd exits 75 while the receiver stalls" 75 "$RC"
notice_ms=$(ts_ms "$(jget "$(ev "$T/ev3" notice)" ts)")
commit_ms=$(ts_ms "$(jget "$(ev "$T/ev3" commit)" ts)")
first_stall_ms=$(python3 -c 'import strictjson, sys
print(min(int(strictjson.loads(l)["t"] * 1000) for l in open(sys.argv[1]) if "/stall/" in l))' "$T/rx")
expect_lt "webhooks stall: the commit comes soon after the notice" $(late 1000) \
    $((commit_ms - notice_ms))
expect_lt "webhooks stall: ... long before the stall (20 s) ends" $((first_stall_ms + 10000)) \
    "$commit_ms"
expect_lt "webhooks stall: spotd is gone soon after the commit (the exit waits 5 s at most)" \
    $((5000 + $(late 300))) $((t1 - commit_ms))
expect_ge "webhooks stall: a delivery that gets no answer in 1 s is tried again" 2 \
    "$(rx answers "$T/rx" /stall/ | wc -w)"
expect_eq "webhooks stall: the 404 receiver is asked once per delivery, never again" \
    "404 404" "$(rx answers "$T/rx" /gone/)"
expect_eq "webhooks stall: ... each refusal is a webhook_dropped (rejected)" 2 \
    "$(ev "$T/ev3" webhook_dropped | grep -c '"reason":"rejected","error":"HTTP 404"')"
check "webhooks stall: what is left at exit is given up (webhook_dropped, exit)" \
    grep -q '"event":"webhook_dropped","target":"http://127.0.0.1:[0-9]*","url":1,"reason":"exit"' \
    "$T/ev3"
check "webhooks stall: ... and for the closed port, saying why" \
    grep -q "\"target\":\"http://$dead\",\"url\":3,\"reason\":\"exit\",\"error\":\"connection refused\"" \
    "$T/ev3"
check "webhooks stall: failures are logged with the scheme and host only" \
    grep -q "webhook http://$dead (URL 3 of 3): the notice delivery failed (connection refused), try 1 of 8" \
    "$T/stderr"

# ---- 4. missed deadlines ----------------------------------------------------

# A command without libckpt: the notice's checkpoint fails.
SPOTD_WEBHOOK="$RX/missed1/$SECRET" run_spotd run --cloud none --job j4 \
    --store "file://$T/store" --state-dir "$T/n4" --drill-after 1s --signal-deadline 4s \
    --notice-margin 1s --grace 1s --events "$T/ev4" -- sleep 30
keep 4
expect_eq "webhooks missed: a failed notice checkpoint is a missed deadline" \
    "notice deadline_missed" "$(rx events "$T/rx" /missed1/)"
doc_check "webhooks missed: ... with the checkpoint_failed record and why" \
    "$(rx doc "$T/rx" /missed1/ 200 deadline_missed)" \
    "d['record']['event'] == 'checkpoint_failed' and
     d['text'].startswith('job j4 missed the notice\'s deadline: the checkpoint of generation 1 failed')"

# No checkpoints: a command that ignores SIGTERM is killed at the deadline.
SPOTD_WEBHOOK="$RX/missed2/$SECRET" run_spotd run --cloud none --drill-after 1s \
    --signal-deadline 3s --notice-margin 1s --grace 1s --events "$T/ev5" -- \
    sh -c 'trap "" TERM; sleep 30'
keep 5
expect_eq "webhooks missed: a command killed at the deadline is a missed deadline" \
    "notice deadline_missed" "$(rx events "$T/rx" /missed2/)"
doc_check "webhooks missed: ... with the kill record; the job is null without one" \
    "$(rx doc "$T/rx" /missed2/ 200 deadline_missed)" \
    "d['record']['event'] == 'kill' and d['job'] is None and
     d['text'].startswith('the command did not stop before the notice\'s deadline and was killed')"
expect_eq "webhooks missed: a drill that commits in time is no missed deadline" "" \
    "$(rx events "$T/rx" /ok/ | grep -o deadline_missed)"

# ---- 5. refused at start ----------------------------------------------------

# refused NAME EXPECTED-TEXT ARGS...: spotd exits 125 before the command
# runs, with one line that says EXPECTED-TEXT.
refused() {
    local name=$1 text=$2
    shift 2
    rm -f "$T/ran"
    run_spotd run --cloud none "$@" -- touch "$T/ran"
    cat "$T/stderr" >>"$T/stderr.refused"
    if [ "$RC" = 125 ] && [ ! -e "$T/ran" ] && [ "$(wc -l <"$T/stderr")" = 1 ] &&
        grep -qF -- "$text" "$T/stderr"; then
        pass "$name"
    else
        fail "$name" "exit $RC, stderr: $(head -c 400 "$T/stderr")"
    fi
}
refused "webhooks refused: a --webhook URL on the command line (every user can read it)" \
    "--webhook cannot be given on the command line: every user of this machine can read a command line (/proc/PID/cmdline); put it in a file named by --webhook-file, the configuration file (\"webhook\") or SPOTD_WEBHOOK" \
    --webhook "$RX/ok/$SECRET"
refused "webhooks refused: ... --webhook=URL too" "--webhook cannot be given on the command line" \
    --webhook="$RX/ok/$SECRET"
SPOTD_WEBHOOK="ftp://example.com/hooks/$SECRET" refused \
    "webhooks refused: an ftp:// URL, named by scheme and host only" \
    "invalid webhook URL 'ftp://example.com/...' (URL 1 of 1, from SPOTD_WEBHOOK)"
printf '%s/ok/%s\n# a comment\nftp://example.com/hooks/%s\n' "$RX" "$SECRET" "$SECRET" >"$T/bad-hooks"
chmod 600 "$T/bad-hooks"
refused "webhooks refused: a bad URL in the webhook file, named by the file's option" \
    "invalid webhook URL 'ftp://example.com/...' (URL 2 of 2, from --webhook-file)" \
    --webhook-file "$T/bad-hooks"
refused "webhooks refused: a webhook file that does not exist" \
    "cannot read webhook_file '$T/none' (from --webhook-file): No such file or directory" \
    --webhook-file "$T/none"
printf '# nothing but comments\n\n' >"$T/empty-hooks"
chmod 600 "$T/empty-hooks"
refused "webhooks refused: a webhook file that names no URL" \
    "no webhook URL (from --webhook-file)" --webhook-file "$T/empty-hooks"
mkfifo "$T/fifo-hooks"
t0=$(now_ms)
refused "webhooks refused: a FIFO as the webhook file, at once (no writer is waited for)" \
    "webhook_file '$T/fifo-hooks' (from --webhook-file) is not a regular file" \
    --webhook-file "$T/fifo-hooks"
expect_lt "webhooks refused: ... within 10 s (ms)" 10000 $(($(now_ms) - t0))
SPOTD_WEBHOOK="$RX/ok/$SECRET https://" refused \
    "webhooks refused: a URL without a host, among several" \
    "invalid webhook URL 'https://' (URL 2 of 2, from SPOTD_WEBHOOK)"
SPOTD_WEBHOOK="hooks.example.com/services/$SECRET" refused \
    "webhooks refused: a URL without a scheme" \
    "invalid webhook URL 'hooks.example.com/...'"
SPOTD_WEBHOOK="$RX/x" refused "webhooks refused: a template that does not exist" \
    "cannot read webhook_template '$T/none.json' (from --webhook-template)" \
    --webhook-template "$T/none.json"
printf '{"text": {text}}' >"$T/unquoted.json"
SPOTD_WEBHOOK="$RX/x" refused "webhooks refused: a template that is not JSON once filled" \
    "with its placeholders filled it is not JSON (line 1)" \
    --webhook-template "$T/unquoted.json"
printf '{\n  "text": "{text}",\n  "gen": {gen}\n}\n' >"$T/number.json"
SPOTD_WEBHOOK="$RX/x" refused \
    "webhooks refused: a placeholder outside a string (empty when an event lacks it)" \
    "with {gen} empty, as events without that value leave it, it is not JSON (line 3)" \
    --webhook-template "$T/number.json"
{ printf '{"text": "'; head -c 70000 /dev/zero | tr '\0' x; printf '"}'; } >"$T/big.json"
SPOTD_WEBHOOK="$RX/x" refused "webhooks refused: a template over 64 KiB" \
    "is larger than 64 KiB" --webhook-template "$T/big.json"
refused "webhooks refused: a template without a webhook" \
    "webhook_template (from --webhook-template) needs webhook or webhook_file" \
    --webhook-template "$T/slack.json"
SPOTD_WEBHOOK="$RX/x" refused "webhooks refused: a delivery without a time limit" \
    "webhook_timeout must be more than 0" --webhook-timeout 0
check "webhooks refused: no request was made by a refused spotd" \
    test "$(rx answers "$T/rx" /x)" = ""

# ---- 6. the URL is a secret -------------------------------------------------

SPOTD_WEBHOOK="$RX/ok/$SECRET" "$SPOTD" config --webhook-file "$T/hooks1" >"$T/config" 2>&1
check "webhooks secret: spotd config redacts the webhook, names the webhook file" \
    eval 'grep -q "\"webhook\":[[:space:]]*\"<redacted>\"" "$T/config" &&
          grep -q "\"webhook_file\":[[:space:]]*\"$T/hooks1\"" "$T/config"'
printf '{"webhook": "%s/ok/%s"}\n' "$RX" "$SECRET" >"$T/wh.json"
"$SPOTD" config --config "$T/wh.json" >>"$T/config" 2>&1
check "webhooks secret: ... the file's too" \
    test "$(grep -c '"webhook":[[:space:]]*"<redacted>"' "$T/config")" = 2

# Every user can read spotd's command line; its environment only its own
# user (and root) can.
chmod 644 "$T/hooks1"
start_spotd run --cloud none --webhook-file "$T/hooks1" -- sleep 30
cmd=$(command_pid "$SPOTD_PID")
cmdline=$(tr '\0' ' ' <"/proc/$SPOTD_PID/cmdline" 2>/dev/null)
check "webhooks secret: spotd runs with --webhook-file" \
    eval '[ -n "$cmd" ] && [ "${cmdline#*--webhook-file }" != "$cmdline" ]'
check "webhooks secret: ... and its /proc/PID/cmdline holds no URL, no token" \
    eval '[ -n "$cmdline" ] && [ "${cmdline#*$SECRET}" = "$cmdline" ] &&
          [ "${cmdline#*http}" = "$cmdline" ]'
expect_eq "webhooks secret: /proc/PID/environ, where SPOTD_WEBHOOK would be, is its user's alone" \
    400 "$(stat -c %a "/proc/$SPOTD_PID/environ")"
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID"
cp "$T/stderr" "$T/stderr.7"
check "webhooks secret: a webhook file others can read is warned about" \
    grep -q "webhook_file '$T/hooks1' can be read by other users (mode 0644): its URLs may hold tokens; chmod 600 it" \
    "$T/stderr.7"
SPOTD_WEBHOOK="$RX/ok/$SECRET" "$SPOTD" config >>"$T/config" 2>&1
SPOTD_WEBHOOK="$RX/env/$SECRET" run_spotd run --cloud none -- sh -c "env >'$T/env'"
keep 6
expect_eq "webhooks secret: a run without notices ends as its command does" 0 "$RC"
check "webhooks secret: the command does not inherit SPOTD_WEBHOOK" \
    bash -c "test -s '$T/env' && ! grep -q SPOTD_WEBHOOK '$T/env'"
leaks=$(grep -lF -- "$SECRET" "$T"/stderr.* "$T"/stdout.* "$T"/ev[0-9] "$T/config" \
    "$T/env" 2>/dev/null | tr '\n' ' ')
expect_eq "webhooks secret: the URL's path is in no stderr, event log, config or environment" \
    "" "$leaks"
check "webhooks secret: (the leak check finds the secret where it is: the receiver's log)" \
    grep -qF -- "$SECRET" "$T/rx"
# Only the receiver (and its stalled thread) is left.
none_left_but_receiver() { [ -z "$(tagged)" ] || [ "$(tagged)" = "$RX_PID" ]; }
check "webhooks: nothing of the runs is left behind" none_left_but_receiver
kill -TERM "$RX_PID" 2>/dev/null
wait "$RX_PID" 2>/dev/null
