# The world's coordinator killed (SIGKILL) after the commit, against a real
# S3 server (Swift with s3api) behind the fault proxy:
#
#   1. the commit record is in the store, but its PUT's answer is lost on
#      the way back, so the coordinator never announces it; killed then,
#      rank 1 takes over, finds every shard saved, writes the same commit
#      again and announces it; the world resumes from that generation;
#   2. the commit announced, the coordinator killed at once: rank 1 keeps
#      the generation and the world resumes from it with a replacement.
#
# Either way one generation is committed, whole, and every final hash is an
# uninterrupted run's.  (Killed before and during the commit: t-world.sh.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"
. "$TOP/tests/mocks/lib.sh"
. "$(dirname "$0")/s3.sh"

s3_start world-commit
expect_eq "world-commit: the bucket is created" 200 \
    "$(curl -s --netrc-file "$D/netrc" --aws-sigv4 "aws:amz:$AWS_REGION:s3" -o /dev/null \
        -w '%{http_code}' -H "x-amz-content-sha256: $EMPTY_SHA" -X PUT "$S3_ENDPOINT/bkt")"
fault_start "${S3_ENDPOINT#http://}" || { fail "world-commit: the fault proxy starts"; exit 1; }
c_trainer_world
# Slower steps than the other world tests: the cases below kill nodes while
# their trainers run, and a loaded machine must not let a trainer reach the
# end of its 4000 steps first (seen: "rank 0 leaves (finished)" before the
# kill, in a parallel CI run).
export TRAINER_STEP_US=4000
STORE=s3://bkt/world
JOB=wc
P=$(free_ports 2)

# node NAME RANK [ARGS...]: a node of the world of two, its store through
# the fault proxy.
node() {
    local name=$1 rank=$2
    shift 2
    AWS_ENDPOINT_URL=$FAULT_URL "$SPOTD" run --job "$JOB" --store "$STORE" \
        --state-dir "$T/$name" --rank "$rank" --world-size 2 --peers "$P" \
        --world-key-file "$T/key" --events "$T/$name.ev" --grace 5s --cloud none \
        --peer-timeout 2s "$@" -- "$TRAINER" $STEPS $MIB >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}

# committed: the job's committed generations, one number a line.
committed() {
    "$SPOTCTL" ls --json --store "$STORE" --job "$JOB" 2>>"$T/ls.err" | ls_gens /dev/stdin
}

# kill_node NAME: SIGKILL to a node and everything under it.
kill_node() {
    kill_tree "${PID[$1]}"
    wait_node "$1" 10 2>/dev/null
}

# ---- 1. the commit written, its answer lost, the coordinator killed --------
node a0 0
node a1 1
check "world-commit: both trainers run" wait_for 20 started a0 a1
fault_rules '[{"method":"PUT","path":"/gens/0*1/COMMIT\\.json$","action":"lose","seconds":60,"times":1}]' \
    >/dev/null
"$SPOTCTL" checkpoint --socket "$T/a1/control.sock" >/dev/null 2>&1
check "world-commit: the coordinator's commit record reaches the store" \
    wait_for 30 eval '[ "$(fault_count PUT COMMIT lose)" = 1 ]'
expect_eq "world-commit: ... generation 1 is committed there" 1 "$(committed)"
sleep 1
check "world-commit: ... but nobody has heard of it" \
    eval '! has "\"event\":\"commit\"" "$T/a0.ev" && ! has "\"event\":\"commit\"" "$T/a1.ev"'
step=$(saved_step a0 1)
kill_node a0
check "world-commit: rank 1 coordinates after the kill" \
    wait_for 10 grep -q "rank 1 coordinates (this node)" "$T/a1.err"
check "world-commit: ... finds every shard saved and commits generation 1 itself" \
    wait_for 15 eval 'grep -q "every rank saved step $step; committing generation 1" "$T/a1.err" && has "\"event\":\"commit\",\"gen\":1" "$T/a1.ev"'
expect_eq "world-commit: ... the same generation, not a second one" 1 "$(committed)"
"$SPOTCTL" verify --store "$STORE" --job "$JOB" --gen 1 >"$T/verify" 2>&1
expect_eq "world-commit: spotctl verify passes generation 1 (both shards)" 0 "$?"
check "world-commit: the commit record names both ranks" \
    eval '[ "$(jget "$("$SPOTCTL" show --json --store "$STORE" --job "$JOB" --gen 1)" world_size)" = 2 ]'
check "world-commit: rank 1 stops its trainer and waits" wait_for 15 has '"event":"parked"' "$T/a1.ev"
node a0b 0
check "world-commit: the replacement resumes the world from generation 1" \
    wait_for 30 has '"event":"world_resume","gen":1' "$T/a0b.ev"

# ---- 2. the commit announced, the coordinator killed at once ---------------
check "world-commit: both trainers run again" \
    wait_for 20 eval '[ "$(ev "$T/a1.ev" child_start | wc -l)" = 2 ] && started a0b'
"$SPOTCTL" checkpoint --socket "$T/a0b/control.sock" >/dev/null 2>&1
check "world-commit: generation 2 is announced" \
    wait_for 30 has '"event":"commit","gen":2' "$T/a0b.ev"
kill_node a0b
check "world-commit: rank 1 has generation 2 too" has '"event":"commit","gen":2' "$T/a1.ev"
check "world-commit: ... coordinates, stops its trainer and waits" \
    wait_for 15 eval '[ "$(ev "$T/a1.ev" parked | wc -l)" = 2 ]'
node a0c 0
nodes_finish world-commit 90 a0c a1
check "world-commit: the last replacement resumed from generation 2" \
    has '"event":"world_resume","gen":2' "$T/a0c.ev"
expect_eq "world-commit: two generations committed, each once" "1 2" "$(committed | xargs)"
fault_stop
"$SW" stop "$D" >/dev/null 2>&1
check "world-commit: no process of the test is left" wait_for 10 none_left
