#!/usr/bin/env bash
# Alibaba (hardened mode token, RFC 3339 time) and Tencent (UTC+8 time
# without a zone marker) against the mocks.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/mocks/lib.sh"

if ! command -v python3 >/dev/null; then
    echo "SKIP: alibaba/tencent: python3 is needed for the metadata mock"
    exit 0
fi
cat >"$T/cmd.sh" <<'EOF2'
trap 'echo TERM >>"$1/got"; exit 0' TERM
while :; do sleep 0.05; done
EOF2

# Alibaba: token, termination time mid-run.
mock_start alibaba || { fail "alibaba: the mock starts"; exit 0; }
d="$T/ali"; mkdir "$d"
start_spotd run --cloud alibaba --metadata-url "$MOCK_URL" --events "$d/ev" --poll-interval 200ms \
    --notice-margin 1s --grace 1s -- sh "$T/cmd.sh" "$d"
mock_wait_requests 2 /latest/meta-data/instance/spot/termination-time GET 10 >/dev/null
expect_eq "alibaba: token asked for with its TTL header" 21600 \
    "$(mock_header X-aliyun-ecs-metadata-token-ttl-seconds /latest/api/token PUT)"
check "alibaba: GETs carry the token" [ -n "$(mock_header X-aliyun-ecs-metadata-token /latest/meta-data/instance/spot/termination-time GET)" ]
t=$(date -u -d "@$(( $(date +%s) + 5 ))" +%Y-%m-%dT%H:%M:%SZ)
mock_state "{\"termination_time\":\"$t\"}" >/dev/null
wait_exit "$SPOTD_PID" 20
expect_eq "alibaba: the command stopped" 0 "$RC"
n=$(ev "$d/ev" notice | head -n 1)
expect_eq "alibaba: deadline is the termination time" "${t%Z}.000Z" "$(jget "$n" deadline)"
expect_eq "alibaba: kind terminate" terminate "$(jget "$n" kind)"
mock_stop

# Alibaba in normal mode with the token service down: polls without one.
mock_start alibaba || { fail "alibaba: the mock starts again"; exit 0; }
mock_state '{"hardened":false,"termination_time":"2099-01-05T18:02:00Z"}' >/dev/null
python3 "$TOP/tests/mocks/mockctl.py" --url "$MOCK_URL" state '{"fault":"500","fault_scope":"all"}' >/dev/null
d="$T/ali2"; mkdir "$d"
start_spotd run --cloud alibaba --metadata-url "$MOCK_URL" --events "$d/ev" --poll-interval 200ms \
    -- sh "$T/cmd.sh" "$d"
sleep 0.5
mock_state '{"fault":null}' >/dev/null
wait_for 15 has '"event":"notice"' "$d/ev"
check "alibaba normal mode: notice seen without a token" has '"event_id":"alibaba:termination:2099-01-05T18:02:00Z"' "$d/ev"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_stop

# Tencent: the time is UTC+8 with no zone marker.
mock_start tencent || { fail "tencent: the mock starts"; exit 0; }
d="$T/tc"; mkdir "$d"
mock_state '{"termination_time":"2099-08-18 12:05:33"}' >/dev/null
start_spotd run --cloud tencent --metadata-url "$MOCK_URL" --events "$d/ev" --poll-interval 200ms \
    -- sh "$T/cmd.sh" "$d"
wait_for 10 has '"event":"notice"' "$d/ev"
n=$(ev "$d/ev" notice | head -n 1)
expect_eq "tencent: 12:05:33 UTC+8 is 04:05:33Z" 2099-08-18T04:05:33.000Z "$(jget "$n" deadline)"
expect_eq "tencent: source" tencent "$(jget "$n" source)"
sleep 0.6
expect_eq "tencent: seen once over several polls" 1 "$(event_count "$d/ev" notice)"
check "tencent: a far deadline leaves the command running for now" alive "$SPOTD_PID"
kill -TERM "$SPOTD_PID"; wait_exit "$SPOTD_PID" 10
mock_stop

check "no zombie children left" [ "$(zombies_of $$)" = 0 ]
check "nothing of this test is left running" none_left
