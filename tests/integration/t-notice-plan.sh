#!/usr/bin/env bash
# What the orchestrator plans at a notice, end to end (examples/c-trainer,
# a file store, the AWS metadata mock):
#   1. an advisory notice whose time is past (AWS rebalance: noticeTime is
#      when it was issued) gets its early checkpoint, with the usual limit
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/mocks/lib.sh"

if ! command -v python3 >/dev/null; then
    echo "SKIP: notice-plan: python3 is needed for the metadata mock"
    exit 0
fi
mock_start aws || { fail "notice-plan: the aws mock starts"; exit 0; }

TRAINER="$TOP/$O/examples/c-trainer/trainer"
S="file://$T/store"
mkdir -p "$T/store"
export TRAINER_STEP_US=2000
iso_in() { date -u -d "@$(( $(date +%s) + $1 ))" +%Y-%m-%dT%H:%M:%SZ; }

# connected STATE_DIR: a trainer is connected to that spotd over libckpt.
connected() {
    "$SPOTCTL" status --state-dir "$1" --json 2>/dev/null | grep -q '"workers":[1-9]'
}

# aws_job NAME SPOTD-ARGS... -- COMMAND...: spotd with checkpoints of job NAME
# under the AWS mock, its state in $T/NAME, its events in $T/NAME.ev.
aws_job() {
    local name=$1
    shift
    start_spotd run --cloud aws --metadata-url "$MOCK_URL" --poll-interval 200ms --job "$name" \
        --store "$S" --state-dir "$T/$name" --events "$T/$name.ev" "$@"
}

# ---- 1. an advisory notice's early checkpoint -------------------------------
aws_job rebal -- "$TRAINER" 100000 1
wait_for 30 connected "$T/rebal" || fail "rebalance: the trainer connects"
mock_state "{\"rebalance\":{\"noticeTime\":\"$(iso_in 0)\"}}" >/dev/null
wait_for 30 grep -qE '"event":"(commit|checkpoint_failed)"' "$T/rebal.ev"
expect_eq "rebalance: its early checkpoint commits, though noticeTime has passed" notice \
    "$(jget "$(ev "$T/rebal.ev" commit | head -n 1)" reason)"
expect_eq "rebalance: no checkpoint failed" 0 "$(event_count "$T/rebal.ev" checkpoint_failed)"
check "rebalance: the trainer trains on" alive "$SPOTD_PID"
check "rebalance: no stop" sh -c "! grep -q '\"event\":\"stop\"' '$T/rebal.ev'"
kill -INT "$SPOTD_PID"
wait_exit "$SPOTD_PID" 20
mock_reset

mock_stop
none_left
