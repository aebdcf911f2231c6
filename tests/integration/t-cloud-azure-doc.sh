#!/usr/bin/env bash
# Azure Scheduled Events documents as a real scale set and a bad day serve
# them: other VMs' events spotd cannot read (an ISO 8601 NotBefore, as
# Microsoft's emulator writes it; a broken Resources), more than 32 events,
# a garbled document, an outage, and a VM whose compute/name does not
# answer.  Each time, this VM's notice is still seen, and seen soon.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/mocks/lib.sh"

if ! command -v python3 >/dev/null; then
    echo "SKIP: azure documents: python3 is needed for the metadata mock"
    exit 0
fi
mock_start azure || { fail "azure documents: the mock starts"; exit 0; }

azure_cmd "$T/cmd.sh"
# iso_in SECONDS: an ISO 8601 date that many seconds from now.
iso_in() { date -u -d "@$(( $(date +%s) + $1 ))" +%Y-%m-%dT%H:%M:%SZ; }
# others N: N events of other VMs, comma separated.
others() {
    local i
    for ((i = 0; i < $1; i++)); do
        [ "$i" = 0 ] || printf ,
        azure_event "O$i" Freeze "[\"spot-vm-$((i + 10))\"]" "$(rfc1123_in 600)"
    done
}
# flip_to_poll PATH: ms from the last flip to the first request after it.
flip_to_poll() {
    local flip
    flip=$(mock_flip_ms)
    mock_request_ms "$1" GET | awk -v f="$flip" '$1 >= f { print $1 - f; exit }'
}

# 1. One document: 40 events of other VMs (one with an ISO 8601 NotBefore,
# one whose Resources is no list), and this VM's Preempt.
d="$T/mixed"; mkdir "$d"
nb=$(iso_in 10)
bad='{"EventId":"BAD1","EventStatus":"Scheduled","EventType":"Reboot","Resources":"spot-vm-3","NotBefore":""}'
iso=$(azure_event ISO1 Reboot '["spot-vm-2"]' "$(iso_in 300)")
mock_state "{\"events\":[$(others 40),$bad,$iso,$(azure_event OURS Preempt '["spot-vm-0"]' "$nb")]}" >/dev/null
spotd_az "$d" --poll-interval 200ms --notice-margin 1s --grace 3s
wait_for 10 has '"event":"notice"' "$d/ev"
n=$(ev "$d/ev" notice | head -n 1)
expect_eq "mixed: this VM's Preempt is seen beside events it cannot read" OURS "$(jget "$n" event_id)"
expect_eq "mixed: its deadline is its ISO 8601 NotBefore" \
    "$(date -u -d "$nb" +%Y-%m-%dT%H:%M:%S.000Z)" "$(jget "$n" deadline)"
expect_eq "mixed: no other VM's event is a notice" 1 "$(event_count "$d/ev" notice)"
mock_wait_requests 8 /metadata/scheduledevents GET 10 >/dev/null
expect_eq "mixed: the odd event is said once, by its EventId" 1 "$(grep -c "event BAD1 .*cannot be understood" "$T/stderr")"
check "mixed: the document is not called garbage" sh -c "! grep -q 'cannot understand' '$T/stderr'"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 20
mock_reset

# trouble_then_preempt DIR FAULT SECONDS ID: the mock answers with FAULT
# for SECONDS from spotd's first poll, then serves this VM's Preempt ID.
trouble_then_preempt() {
    mkdir "$1"
    mock_state "{\"fault\":\"$2\"}" >/dev/null
    spotd_az "$1" --poll-interval 200ms --notice-margin 1s --grace 3s
    mock_wait_requests 1 /metadata/scheduledevents GET 10 >/dev/null
    sleep "$3"
    polls=$(mock_count /metadata/scheduledevents GET)
    mock_state "{\"fault\":null,\"events\":[$(azure_event "$4" Preempt '["spot-vm-0"]' "$(rfc1123_in 12)")]}" >/dev/null
    wait_for 10 has '"event":"notice"' "$1/ev"
    check "$2: the notice is seen" has "\"event_id\":\"$4\"" "$1/ev"
}

# 2. A garbled document is no outage: polling keeps its interval, and the
# notice that follows is seen at the next poll.
trouble_then_preempt "$T/garbage" garbage 5 G1
# 5 s at 200 ms is 25 polls; a backoff would have made 4 or 5.
expect_ge "garbage: polled on at the interval (polls in 5 s)" 12 "$polls"
expect_eq "garbage: said once" 1 "$(grep -c "cannot understand" "$T/stderr")" || cat "$T/stderr" >&2
wait_exit "$SPOTD_PID" 20
mock_reset

# 3. An outage (13 s of 500s, as Azure's 410s during maintenance): the
# backoff stops at 2 s, so the first poll after the service is back comes
# within 2 s + the interval (a 30 s-capped doubling came 12 s later).
trouble_then_preempt "$T/outage" 500 13 U1
gap=$(flip_to_poll /metadata/scheduledevents)
# 2,000 ms cap + 200 ms interval + room for a loaded machine.
expect_lt "outage: the first poll after the outage comes within the cap (ms)" 4701 "$gap"
check "outage: said once" [ "$(grep -c "retrying with backoff" "$T/stderr")" = 1 ]
check "outage: and said when over" grep -q "answers again" "$T/stderr"
wait_exit "$SPOTD_PID" 20
mock_reset

# 4. compute/name answers 404: the events are watched anyway, an event
# that lists one resource is taken as this VM's (and never acknowledged),
# an event of two VMs is not.
d="$T/noname"; mkdir "$d"
mock_state "{\"name_status\":404,\"events\":[$(azure_event TWO Preempt '["spot-vm-0","spot-vm-1"]' "$(rfc1123_in 300)")]}" >/dev/null
spotd_az "$d" --poll-interval 200ms --notice-margin 1s --grace 3s --azure-ack true
mock_wait_requests 3 /metadata/scheduledevents GET 10 >/dev/null
expect_eq "no name: an event of two VMs is no notice" 0 "$(event_count "$d/ev" notice)"
mock_state "{\"events\":[$(azure_event ONE Preempt '["spot-vm-0"]' "$(rfc1123_in 15)")]}" >/dev/null
wait_for 10 has '"event":"notice"' "$d/ev"
check "no name: the event of one resource is a notice" has '"event_id":"ONE"' "$d/ev"
expect_eq "no name: said once" 1 "$(grep -c "cannot learn this VM's name" "$T/stderr")"
check "no name: the guess is said" grep -q "taking event ONE, which lists one resource" "$T/stderr"
wait_exit "$SPOTD_PID" 20
expect_eq "no name: the command stopped" 0 "$RC"
expect_eq "no name: a guessed event is never acknowledged" 0 "$(mock_count /metadata/scheduledevents POST)"
mock_reset

# 5. --azure-vm-name: no discovery; that name's events only.
d="$T/named"; mkdir "$d"
mock_state "{\"name_status\":404,\"events\":[$(azure_event NINE Preempt '["spot-vm-9"]' "$(rfc1123_in 300)"),$(azure_event THREE Preempt '["SPOT-VM-3"]' "$(rfc1123_in 15)")]}" >/dev/null
spotd_az "$d" --poll-interval 200ms --notice-margin 1s --grace 3s --azure-vm-name spot-vm-3
wait_for 10 has '"event":"notice"' "$d/ev"
wait_exit "$SPOTD_PID" 20
expect_eq "named: the named VM's event is the one notice" THREE \
    "$(ev "$d/ev" notice | sed -n 's/.*"event_id":"\([^"]*\)".*/\1/p' | tr '\n' ' ' | sed 's/ $//')"
expect_eq "named: compute/name is never asked" 0 "$(mock_count /metadata/instance/compute/name GET)"
mock_reset

# 6. A name that cannot be a VM's is refused at start.
run_spotd run --cloud azure --metadata-url "$MOCK_URL" --azure-vm-name 'vm "0"' -- true
check "bad name: refused" [ "$RC" != 0 ]
check "bad name: says what is wrong" grep -q "invalid azure_vm_name" "$T/stderr"

mock_stop
check "no zombie children left" [ "$(zombies_of $$)" = 0 ]
check "nothing of this test is left running" none_left
