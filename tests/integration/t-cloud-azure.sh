#!/usr/bin/env bash
# Azure Scheduled Events against the mock: the Metadata header, the VM's
# name, events for other VMs ignored, Preempt acted on with NotBefore as the
# deadline, incarnations deduplicated, Freeze advisory, and the optional
# acknowledgment only for events that list this VM alone.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/mocks/lib.sh"

if ! command -v python3 >/dev/null; then
    echo "SKIP: azure: python3 is needed for the metadata mock"
    exit 0
fi
mock_start azure || { fail "azure: the mock starts"; exit 0; }

azure_cmd "$T/cmd.sh"

# 1. Headers, the name, and an event for a neighbour that must be ignored.
d="$T/other"; mkdir "$d"
mock_state "{\"vm_name\":\"spot-vm-0\",\"events\":[$(azure_event A1 Preempt '["spot-vm-1"]' "$(rfc1123_in 30)")]}" >/dev/null
spotd_az "$d" --poll-interval 200ms --notice-margin 1s --grace 3s
mock_wait_requests 3 /metadata/scheduledevents GET 10 >/dev/null
expect_eq "every request carries Metadata: true" true "$(mock_header Metadata /metadata/scheduledevents)"
check "the VM's name is read" [ "$(mock_count /metadata/instance/compute/name GET)" -ge 1 ]
check "api-version 2020-07-01" sh -c "python3 '$TOP/tests/mocks/mockctl.py' --url '$MOCK_URL' requests --path /metadata/scheduledevents | grep -q 'api-version=2020-07-01'"
expect_eq "a neighbour's event is no notice" 0 "$(event_count "$d/ev" notice)"
check "a neighbour's event leaves the command alone" alive "$SPOTD_PID"

# 2. Our Preempt: deadline from NotBefore; seen once across polls.  Each
# NotBefore here leaves seconds beyond margin + grace (a date has whole
# seconds, and a loaded machine starts spotd and the mock's client slowly),
# so that the command always gets its grace and exits on its own; the grace
# is 3 s, as a command told to stop on a loaded machine can take over 1 s.
nb=$(rfc1123_in 10)
mock_state "{\"events\":[$(azure_event A1 Preempt '["spot-vm-1"]' "$(rfc1123_in 30)"),$(azure_event B2 Preempt '["SPOT-VM-0"]' "$nb")]}" >/dev/null
wait_for 10 has '"event":"notice"' "$d/ev"
n=$(ev "$d/ev" notice | head -n 1)
expect_eq "Preempt: kind terminate" terminate "$(jget "$n" kind)"
expect_eq "Preempt: event_id is the EventId" B2 "$(jget "$n" event_id)"
want=$(date -u -d "$nb" +%Y-%m-%dT%H:%M:%S.000Z)
expect_eq "Preempt: deadline is NotBefore (RFC 1123)" "$want" "$(jget "$n" deadline)"
wait_exit "$SPOTD_PID" 20
expect_eq "Preempt: the command stopped" 0 "$RC"
expect_eq "Preempt: one notice" 1 "$(event_count "$d/ev" notice)"
expect_eq "no acknowledgment unless asked for" 0 "$(mock_count /metadata/scheduledevents POST)"
mock_reset

# 3. Freeze is advisory.
d="$T/freeze"; mkdir "$d"
mock_state "{\"events\":[$(azure_event F1 Freeze '["spot-vm-0"]' "$(rfc1123_in 20)")]}" >/dev/null
spotd_az "$d" --poll-interval 200ms
wait_for 10 has '"event":"notice"' "$d/ev"
check "Freeze: advisory" has '"action":"none: advisory"' "$d/ev"
sleep 0.5
check "Freeze: the command runs on" alive "$SPOTD_PID"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_reset

# 4. --azure-ack: our event alone is acknowledged after the command stopped.
d="$T/ack"; mkdir "$d"
mock_state "{\"events\":[$(azure_event C3 Preempt '["spot-vm-0"]' "$(rfc1123_in 8)")]}" >/dev/null
spotd_az "$d" --poll-interval 200ms --azure-ack true --notice-margin 1s --grace 1s
wait_exit "$SPOTD_PID" 20
expect_eq "ack: the command stopped" 0 "$RC"
check "ack: StartRequests for our event" sh -c "python3 '$TOP/tests/mocks/mockctl.py' --url '$MOCK_URL' acks | grep -q C3"
post=$(python3 "$TOP/tests/mocks/mockctl.py" --url "$MOCK_URL" requests --path /metadata/scheduledevents --method POST |
       python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["time"] if r else 0)')
exit_ts=$(ts_ms "$(jget "$(ev "$d/ev" child_exit | head -n 1)" ts)")
check "ack: sent after the command exited" python3 -c "import sys; sys.exit(not ($post * 1000 >= $exit_ts - 5))"
mock_reset

# 5. --azure-ack with an event that lists other VMs too: no acknowledgment.
d="$T/noack"; mkdir "$d"
mock_state "{\"events\":[$(azure_event D4 Preempt '["spot-vm-0","spot-vm-1"]' "$(rfc1123_in 8)")]}" >/dev/null
spotd_az "$d" --poll-interval 200ms --azure-ack true --notice-margin 1s --grace 500ms
wait_exit "$SPOTD_PID" 20
expect_eq "shared event: the command stopped" 0 "$RC"
expect_eq "shared event: not acknowledged" 0 "$(mock_count /metadata/scheduledevents POST)"
check "shared event: says why" grep -q "does not list this VM alone" "$T/stderr"
mock_reset

# 6. Garbage documents: said once, never fatal.
d="$T/garbage"; mkdir "$d"
mock_state '{"fault":"garbage"}' >/dev/null
spotd_az "$d" --poll-interval 100ms
sleep 1.5
check "garbage: the command is untouched" alive "$SPOTD_PID"
expect_eq "garbage: said once" 1 "$(grep -c "cannot understand" "$T/stderr")"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10

mock_stop
check "no zombie children left" [ "$(zombies_of $$)" = 0 ]
check "nothing of this test is left running" none_left
