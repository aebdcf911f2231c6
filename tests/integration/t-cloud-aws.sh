#!/usr/bin/env bash
# AWS IMDSv2 against the mock in tests/mocks: tokens, the four watched
# endpoints, notices present at start, rebalance then termination, no
# duplicates, token expiry mid-run, the hop-limit message, IMDSv1 fallback,
# a misbehaving service that never disturbs the command, garbled answers
# that keep the poll interval, and no spin on a lost token with IMDSv1
# allowed.  Outages: t-cloud-outage.sh.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/mocks/lib.sh"

if ! command -v python3 >/dev/null; then
    echo "SKIP: aws: python3 is needed for the metadata mock"
    exit 0
fi
mock_start aws || { fail "aws: the mock starts"; exit 0; }

# spot_cmd DIR: a command that records signals and exits 0 on TERM.
cat >"$T/cmd.sh" <<'EOF2'
trap 'echo TERM >>"$1/got"; exit 0' TERM
while :; do sleep 0.05; done
EOF2
iso_in() { date -u -d "@$(( $(date +%s) + $1 ))" +%Y-%m-%dT%H:%M:%SZ; }
spotd_aws() {
    local d=$1
    shift
    start_spotd run --cloud aws --metadata-url "$MOCK_URL" --events "$d/ev" "$@" -- sh "$T/cmd.sh" "$d"
}

# 1. Tokens, headers, and quiet polling with nothing announced; a proxy in
#    the environment (a dead one) is not used for the metadata service.
d="$T/quiet"; mkdir "$d"
export http_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 ALL_PROXY=http://127.0.0.1:9
spotd_aws "$d" --poll-interval 200ms
unset http_proxy HTTP_PROXY ALL_PROXY
mock_wait_requests 3 /latest/meta-data/spot/instance-action GET 10 >/dev/null
expect_eq "token: one PUT with the TTL header" 21600 \
    "$(mock_header X-aws-ec2-metadata-token-ttl-seconds /latest/api/token PUT)"
check "token: every GET carries the token" sh -c \
    "python3 '$TOP/tests/mocks/mockctl.py' --url '$MOCK_URL' requests --path /latest/meta-data/ --method GET |
     python3 -c 'import json,sys; r=json.load(sys.stdin); sys.exit(not r or any(\"x-aws-ec2-metadata-token\" not in {k.lower() for k in q[\"headers\"]} for q in r))'"
for p in spot/instance-action events/recommendations/rebalance events/maintenance/scheduled \
         autoscaling/target-lifecycle-state; do
    check "polls /latest/meta-data/$p" [ "$(mock_count "/latest/meta-data/$p" GET)" -ge 1 ]
done
expect_eq "token: reused, not asked for again" 1 "$(mock_count /latest/api/token PUT)"
expect_eq "nothing announced: no notice" 0 "$(event_count "$d/ev" notice)"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_reset

# 2. A termination already announced at start is acted on at once.
d="$T/atstart"; mkdir "$d"
# 10 s out: a start that is slow on a loaded machine still leaves the whole
# grace before the deadline, so the clean exit is what is checked.
t=$(iso_in 10)
mock_state "{\"notice\":{\"action\":\"terminate\",\"time\":\"$t\"}}" >/dev/null
spotd_aws "$d" --notice-margin 1s --grace 2s
wait_exit "$SPOTD_PID" 20
expect_eq "at start: the command stopped cleanly" 0 "$RC"
n=$(ev "$d/ev" notice | head -n 1)
expect_eq "at start: kind terminate" terminate "$(jget "$n" kind)"
expect_eq "at start: source aws" aws "$(jget "$n" source)"
expect_eq "at start: deadline is the notice's time" "${t%Z}.000Z" "$(jget "$n" deadline)"
stop=$(ev "$d/ev" stop | head -n 1)
dl=$(ts_ms "${t%Z}.000Z") st=$(ts_ms "$(jget "$stop" ts)") det=$(ts_ms "$(jget "$n" detected)")
# Due at margin + grace (3 s) before the deadline, or at once when the
# notice was seen later than that (a slow start on a loaded machine).
due=$(( dl - 3000 > det ? dl - 3000 : det ))
expect_lt "at start: stop signal when due: margin + grace (3 s) before the deadline, or at once" \
    $(late 200) $(( st - due ))
expect_lt "at start: ... and not much earlier" 3600 $(( dl - st ))
expect_eq "at start: one notice" 1 "$(event_count "$d/ev" notice)"
mock_reset

# 3. Rebalance (advisory), then a stop action appearing mid-run.
d="$T/flip"; mkdir "$d"
spotd_aws "$d" --poll-interval 1s --notice-margin 0s --grace 1s
mock_wait_requests 1 /latest/meta-data/spot/instance-action GET 10 >/dev/null
mock_state "{\"rebalance\":{\"noticeTime\":\"$(iso_in 0)\"}}" >/dev/null
wait_for 10 has '"kind":"rebalance"' "$d/ev"
sleep 1.5
check "rebalance: advisory, the command runs on" alive "$SPOTD_PID"
check "rebalance: no stop" sh -c "! grep -q '\"event\":\"stop\"' '$d/ev'"
expect_eq "rebalance: seen once over several polls" 1 "$(grep -c '"kind":"rebalance"' "$d/ev")"
# 8 s out: room for a late poll on a loaded machine and a whole grace,
# so the command's clean exit is what is checked, not how soon spotd saw it.
t=$(iso_in 8)
mock_state "{\"notice\":{\"action\":\"stop\",\"time\":\"$t\"},\"after\":0.2}" >/dev/null
wait_exit "$SPOTD_PID" 20
expect_eq "stop action: the command stopped" 0 "$RC"
n=$(ev "$d/ev" notice | grep '"kind":"stop"' | head -n 1)
check "stop action: a notice of kind stop" [ -n "$n" ]
# In order, not in milliseconds: the notice is seen from the first poll that
# served it, before the one after (a loaded machine makes both later).
det=$(ts_ms "$(jget "$n" detected)") flip=$(mock_flip_ms)
after=($(mock_request_ms /latest/meta-data/spot/instance-action GET | awk -v f="$flip" '$1 >= f'))
check "stop action: detected at the first poll after the flip, not a later one" \
    eval '[ ${#after[@]} -ge 1 ] && [ "$det" -ge "${after[0]}" ] && { [ ${#after[@]} -lt 2 ] || [ "$det" -le "${after[1]}" ]; }'
mock_reset

# 4. Scheduled maintenance (the AWS date format) and the lifecycle state.
d="$T/maint"; mkdir "$d"
mock_state '{"maintenance":[{"Code":"system-reboot","Description":"scheduled reboot","EventId":"instance-event-0d59937288b749b32","NotBefore":"21 Jan 2099 09:00:43 GMT","NotAfter":"21 Jan 2099 09:17:23 GMT","State":"active"},{"Code":"system-reboot","Description":"old","EventId":"instance-event-0000000000000000a","NotBefore":"21 Jan 2019 09:00:43 GMT","NotAfter":"21 Jan 2019 09:17:23 GMT","State":"completed"}]}' >/dev/null
spotd_aws "$d" --poll-interval 200ms
wait_for 10 has '"kind":"maintenance"' "$d/ev"
n=$(ev "$d/ev" notice | head -n 1)
expect_eq "maintenance: deadline from NotBefore" 2099-01-21T09:00:43.000Z "$(jget "$n" deadline)"
expect_eq "maintenance: event_id is the EventId" instance-event-0d59937288b749b32 "$(jget "$n" event_id)"
check "maintenance: a stop planned for later, not now" has '"action":"stop at 2099-01-21T09:00' "$d/ev"
sleep 0.6
expect_eq "maintenance: completed events ignored, active one seen once" 1 "$(event_count "$d/ev" notice)"
mock_state '{"lifecycle":"Terminated"}' >/dev/null
wait_exit "$SPOTD_PID" 40
check "lifecycle Terminated: a terminate notice" has '"event_id":"aws:lifecycle' "$d/ev"
expect_eq "lifecycle Terminated: the command was stopped" 0 "$RC"
mock_reset

# 5. A token that expires mid-run: 401, a new token, watching goes on.
d="$T/expiry"; mkdir "$d"
mock_state '{"token_ttl_cap":1}' >/dev/null
spotd_aws "$d" --poll-interval 300ms
sleep 2.5
check "token expiry: a new token after the 401" [ "$(mock_count /latest/api/token PUT)" -ge 2 ]
mock_state "{\"notice\":{\"action\":\"hibernate\",\"time\":\"$(iso_in 100)\"}}" >/dev/null
wait_for 10 has '"kind":"hibernate"' "$d/ev"
check "token expiry: the notice is still seen" has '"kind":"hibernate"' "$d/ev"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_reset

# 6. The token PUT hangs (hop limit 1 in a container): the message says so.
d="$T/hop"; mkdir "$d"
mock_state '{"fault":"hang","fault_scope":"all"}' >/dev/null
spotd_aws "$d" --poll-interval 200ms
wait_for 15 grep -q "hop limit" "$T/stderr"
check "hop limit: the message names the fix" grep -q "http-put-response-hop-limit 2" "$T/stderr"
check "hop limit: the command is untouched" alive "$SPOTD_PID"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_reset

# 7. IMDSv1 fallback only when allowed, and said in the log.
d="$T/v1"; mkdir "$d"
mock_state '{"imdsv1":true,"fault":"500","fault_scope":"all"}' >/dev/null
spotd_aws "$d" --poll-interval 200ms --aws-imdsv1 true
sleep 0.5
mock_state '{"fault":null,"notice":{"action":"terminate","time":"2099-01-01T00:00:00Z"}}' >/dev/null
wait_for 10 has '"event":"notice"' "$d/ev"
check "IMDSv1: falls back and says so" grep -q "polling without one, as --aws-imdsv1 allows" "$T/stderr"
check "IMDSv1: notices still seen" has '"event_id":"aws:instance-action:terminate:2099-01-01T00:00:00Z"' "$d/ev"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_reset

# 8. Garbage, 1 MB bodies, throttling and an outage: said once, never fatal.
mock_state '{"fault_delay":3}' >/dev/null
for fault in garbage huge throttle down slow; do
    d="$T/fault-$fault"; mkdir "$d"
    mock_state "{\"fault\":\"$fault\"}" >/dev/null
    spotd_aws "$d" --poll-interval 100ms
    # slow: the answers come after 3 s, past the 2 s request timeout.
    if [ $fault = slow ]; then sleep 3; else sleep 1.5; fi
    check "$fault: the command is untouched" alive "$SPOTD_PID"
    lines=$(grep -c "said once until it changes" "$T/stderr")
    check "$fault: logged, without a flood ($lines lines)" eval '[ "$lines" -ge 1 ] && [ "$lines" -le 4 ]'
    mock_state "{\"fault\":null,\"notice\":{\"action\":\"terminate\",\"time\":\"2099-01-01T00:00:0${#fault}Z\"}}" >/dev/null
    wait_for 40 has '"event":"notice"' "$d/ev"
    check "$fault: notices seen once the service recovers" has '"event":"notice"' "$d/ev"
    kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
    mock_reset
    mock_state '{"fault_delay":3}' >/dev/null
done

# 9. Garbled 200s are not an outage: every watched path answers garbage for
#    7 s, then a valid notice.  Polling keeps its 200 ms (backing off, the
#    old code asked at 0, 0.4, 1.2, 2.8 and 6 s, then 12.4 s), each path's
#    complaint is said once, and the notice is seen at the next poll.
mock_reset
IA=/latest/meta-data/spot/instance-action
d="$T/garbled"; mkdir "$d"
mock_state '{"fault":"garbage"}' >/dev/null
spotd_aws "$d" --poll-interval 200ms
mock_wait_requests 1 $IA GET 10
first=$(mock_request_ms $IA GET | sed -n 1p)
nap_until $((first + 7000))
mock_state "{\"fault\":null,\"notice\":{\"action\":\"terminate\",\"time\":\"$(iso_in 300)\"}}" >/dev/null
flip=$(mock_flip_ms)
wait_for 20 has '"event":"notice"' "$d/ev"
n=$(mock_count_ms $IA GET "$first" "$flip")
check "garbage: polling keeps its interval ($n requests in 7 s at 200 ms; backing off: 5)" [ "$n" -ge 12 ]
lines=$(grep -c "cannot understand .*spot/instance-action" "$T/stderr")
expect_eq "garbage: said once for the path, not at every poll" 1 "$lines"
lines=$(grep -c "cannot understand" "$T/stderr")
check "garbage: at most once per watched path ($lines lines)" [ "$lines" -le 4 ]
det=$(ts_ms "$(jget "$(ev "$d/ev" notice | sed -n 1p)" detected)")
expect_lt "garbage: the notice is seen at the next poll ($((det - flip)) ms after it is served)" \
    $((200 + $(late 400))) $((det - flip))
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_reset

# 10. IMDSv2 required, the token PUT's answer lost (hop limit 1 in a
#     container) and --aws-imdsv1 true, as the hint says: the tokenless
#     GETs are refused.  That is an outage to back off from, said once with
#     what to do; the old code took the second 401 of the round for an
#     expired token and began again at once: a PUT every 2 s (its time-out),
#     with a warning each time.
d="$T/hop-v1"; mkdir "$d"
mock_state '{"fault":"hang","fault_scope":"token"}' >/dev/null
spotd_aws "$d" --poll-interval 200ms --aws-imdsv1 true
mock_wait_requests 1 /latest/api/token PUT 10
first=$(mock_request_ms /latest/api/token PUT | sed -n 1p)
nap_until $((first + 10000))
n=$(mock_count_ms /latest/api/token PUT "$first" $((first + 10000)))
check "hop limit with IMDSv1 allowed: no spin ($n token PUTs in 10 s; spinning: 5)" [ "$n" -le 4 ]
mock_wait_requests 4 /latest/api/token PUT 10
puts=($(mock_request_ms /latest/api/token PUT))
# Each round is the PUT's 2 s time-out, then the backoff: at least 0.8 s
# after the third failure (a spin has none).
expect_ge "hop limit with IMDSv1 allowed: it backs off (the 4th PUT 2.5 s or more after the 3rd)" \
    2500 $((puts[3] - puts[2]))
expect_eq "hop limit with IMDSv1 allowed: the lost token is said once" 1 \
    "$(grep -c "no session token" "$T/stderr")"
check "hop limit with IMDSv1 allowed: the refusal says what to do" \
    grep -q "http-put-response-hop-limit 2" "$T/stderr"
check "hop limit with IMDSv1 allowed: the command is untouched" alive "$SPOTD_PID"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_reset

mock_stop
check "no zombie children left" [ "$(zombies_of $$)" = 0 ]
check "nothing of this test is left running" none_left
