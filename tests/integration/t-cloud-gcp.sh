#!/usr/bin/env bash
# GCP against the mock: the Metadata-Flavor header, long-poll with ETags,
# preemption present at start and flipping mid-run, maintenance events
# (advisory migrate, terminating terminate, a second event not taken for the
# first), recovery after an outage said once per key, and a server that
# answers long-polls at once.  Outages' timing: t-cloud-outage.sh.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/mocks/lib.sh"

if ! command -v python3 >/dev/null; then
    echo "SKIP: gcp: python3 is needed for the metadata mock"
    exit 0
fi
mock_start gcp || { fail "gcp: the mock starts"; exit 0; }

cat >"$T/cmd.sh" <<'EOF2'
trap 'echo TERM >>"$1/got"; exit 0' TERM
while :; do sleep 0.05; done
EOF2
spotd_gcp() {
    local d=$1
    shift
    start_spotd run --cloud gcp --metadata-url "$MOCK_URL" --events "$d/ev" "$@" -- sh "$T/cmd.sh" "$d"
}
waiting() { mock_get_state | python3 -c 'import json,sys; print(json.load(sys.stdin).get("_waiters", 0))'; }

# 1. Preempted mid-run: the long-poll answers at once, not at the next poll.
d="$T/flip"; mkdir "$d"
spotd_gcp "$d" --poll-interval 30s --notice-margin 1s --grace 2s
wait_for 10 eval '[ "$(waiting)" -ge 2 ]'
check "long-poll: both values are waited on" [ "$(waiting)" -ge 2 ]
check "every request carries Metadata-Flavor: Google" eval \
    '[ "$(mock_header Metadata-Flavor /computeMetadata/v1/instance/preempted)" = Google ]'
check "long-poll: wait_for_change with last_etag" sh -c \
    "python3 '$TOP/tests/mocks/mockctl.py' --url '$MOCK_URL' requests --path /computeMetadata/v1/instance/preempted |
     grep -q 'wait_for_change=true&last_etag=[0-9a-f]*&timeout_sec='"
mock_state '{"preempted":true,"after":0.3}' >/dev/null
wait_for 10 has '"event":"notice"' "$d/ev"
n=$(ev "$d/ev" notice | head -n 1)
# In order, not in milliseconds: the waiting request itself answered the
# flip; no new request (a poll, 30 s later) was needed to see it.  The next
# long-poll goes out right after the detection and can arrive within the
# same millisecond, so the window ends before it.
det=$(ts_ms "$(jget "$n" detected)") flip=$(mock_flip_ms)
expect_eq "preempted: seen from the request waiting at the flip, none sent after it" 0 \
    "$(mock_request_ms /computeMetadata/v1/instance/preempted GET | awk -v f="$flip" -v d="$det" '$1 >= f && $1 < d' | wc -l)"
check "preempted: ... and after the flip" [ "$det" -ge "$flip" ]
expect_eq "preempted: kind terminate" terminate "$(jget "$n" kind)"
det=$(ts_ms "$(jget "$n" detected)") dl=$(ts_ms "$(jget "$n" deadline)")
expect_eq "preempted: deadline = detection + 30 s" 30000 "$((dl - det))"
wait_exit "$SPOTD_PID" 40
expect_eq "preempted: the command stopped cleanly" 0 "$RC"
mock_reset

# 2. Preempted already at start: acted on at once.
d="$T/atstart"; mkdir "$d"
mock_state '{"preempted":true}' >/dev/null
spotd_gcp "$d" --notice-margin 28s --grace 1s
wait_exit "$SPOTD_PID" 20
expect_eq "at start: the command stopped" 0 "$RC"
expect_eq "at start: one notice" 1 "$(event_count "$d/ev" notice)"
mock_reset

# 3. Maintenance: migrate is advisory; the next event is a new notice;
#    terminate stops the command.
d="$T/maint"; mkdir "$d"
spotd_gcp "$d" --notice-margin 58s --grace 1s
wait_for 10 eval '[ "$(waiting)" -ge 2 ]'
mock_state '{"maintenance_event":"MIGRATE_ON_HOST_MAINTENANCE"}' >/dev/null
wait_for 10 has '"kind":"maintenance"' "$d/ev"
check "migrate: an advisory maintenance notice" has '"action":"none: advisory"' "$d/ev"
mock_state '{"maintenance_event":"NONE"}' >/dev/null
sleep 0.3
mock_state '{"maintenance_event":"MIGRATE_ON_HOST_MAINTENANCE"}' >/dev/null
wait_for 10 eval '[ "$(event_count "$d/ev" notice)" -ge 2 ]'
expect_eq "migrate again: a second, distinct notice" 2 "$(event_count "$d/ev" notice)"
check "migrate: the command runs on" alive "$SPOTD_PID"
mock_state '{"maintenance_event":"TERMINATE_ON_HOST_MAINTENANCE"}' >/dev/null
wait_exit "$SPOTD_PID" 20
expect_eq "terminate on maintenance: the command stopped" 0 "$RC"
check "terminate on maintenance: terminating" has '"terminating":true' "$d/ev"
mock_reset

# 4. An outage: said once per key with the HTTP status (each key its own
#    complaint: sharing one, they took turns and each was said again at
#    every retry), then the long-poll resumes.
d="$T/down"; mkdir "$d"
mock_state '{"fault":"500"}' >/dev/null
spotd_gcp "$d" --poll-interval 100ms --notice-margin 29s --grace 500ms
sleep 1.5
check "500s: the command is untouched" alive "$SPOTD_PID"
lines=$(grep -c "said once until it changes" "$T/stderr")
check "500s: logged without a flood ($lines lines)" eval '[ "$lines" -ge 1 ] && [ "$lines" -le 4 ]'
for k in preempted maintenance-event; do
    expect_eq "500s: $k: said once, not at every retry ($(mock_count /computeMetadata/v1/instance/$k GET) tries)" \
        1 "$(grep -c "instance/$k.*said once until it changes" "$T/stderr")"
done
check "500s: the warning has the HTTP status" grep -q "instance/preempted answers HTTP 500" "$T/stderr"
mock_state '{"fault":null}' >/dev/null
sleep 1
mock_state '{"preempted":true}' >/dev/null
wait_exit "$SPOTD_PID" 40
expect_eq "after the outage: the preemption is seen" 0 "$RC"
check "after the outage: it says the service answers again" grep -q "answers again" "$T/stderr"
mock_reset

# 5. A server that answers every long-poll at once with nothing new (a
#    proxy, an emulator: the mock's wait_ignored): each key asks at most
#    once per poll interval, where the chain used to ask again at once
#    (about 20 times a second), and a preemption is still seen.
d="$T/ignored"; mkdir "$d"
mock_state '{"wait_ignored":true}' >/dev/null
spotd_gcp "$d" --poll-interval 500ms --notice-margin 29s --grace 500ms
mock_wait_requests 1 /computeMetadata/v1/instance/preempted GET 10
first=$(mock_request_ms /computeMetadata/v1/instance/preempted GET | sed -n 1p)
nap_until $((first + 3000))
for k in preempted maintenance-event; do
    n=$(mock_count_ms /computeMetadata/v1/instance/$k GET "$first" $((first + 3000)))
    # The first read, the first long-poll, then one every 500 ms.
    check "wait ignored: $k: $n requests in 3 s, at most one per poll interval" [ "$n" -le 9 ]
done
mock_state '{"preempted":true}' >/dev/null
flip=$(mock_flip_ms)
wait_for 10 has '"event":"notice"' "$d/ev"
det=$(ts_ms "$(jget "$(ev "$d/ev" notice | sed -n 1p)" detected)")
expect_lt "wait ignored: the preemption is seen within the poll interval ($((det - flip)) ms)" \
    $((500 + $(late 400))) $((det - flip))
wait_exit "$SPOTD_PID" 40
expect_eq "wait ignored: the command stopped cleanly" 0 "$RC"
mock_reset

mock_stop
check "no zombie children left" [ "$(zombies_of $$)" = 0 ]
check "nothing of this test is left running" none_left
