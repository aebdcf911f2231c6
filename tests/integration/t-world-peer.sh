# The peer protocol against what issue 16 found (docs/protocols.md, peer
# protocol): worlds of two spotd on 127.0.0.1 training the C example.
#  1. A relay without the key sits between rank 0 (the coordinator, which
#     dials) and rank 1: it records rank 1's notice on one connection and
#     injects it into the next, then reflects rank 0's own frames back to
#     it.  Both are refused (a frame is sealed for one connection and one
#     direction), no round begins that nobody asked for, and the world
#     finishes.
#  2. One node's wall clock is stepped +8 s, back, -8 s and back while both
#     train (tests/clockstep/clockstep.c), the other node's spotd held for
#     2 s across each forward step: no peer goes down, nothing parks, the
#     world finishes with the uninterrupted hash.
#  3. A flood of connections that never say anything (2000 at a time, from
#     16 addresses) at a node whose descriptor limit is 256: the node stays
#     up, its log small, spotctl status answers, and the other node still
#     connects through the flood.
#  4. A node of the previous protocol version (1) is refused, saying so.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"

c_trainer_world
PEERFRAME="$TOP/tests/integration/peerframe.py"

# node NAME RANK PEERS [ARGS...]: one node of a world of two, in the background.
node() {
    local name=$1 rank=$2 peers=$3
    shift 3
    "$SPOTD" run --job "$JOB" --store "file://$T/store" --state-dir "$T/$name" \
        --rank "$rank" --world-size 2 --peers "$peers" --world-key-file "$T/key" \
        --events "$T/$name.ev" --grace 5s --cloud none "$@" -- "$TRAINER" $STEPS $MIB \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}

# port_of N LIST: the port of the Nth (from 1) ADDR:PORT of a comma-separated list.
port_of() {
    local a
    a=$(printf '%s\n' "$2" | cut -d, -f"$1")
    echo "${a##*:}"
}

# listening PORT: something listens on 127.0.0.1:PORT (/proc/net/tcp, state 0A).
listening() {
    grep -qi "^ *[0-9]*: 0100007F:$(printf '%04X' "$1") [0-9A-F:]* 0A " /proc/net/tcp
}

# went_down NAME...: a peer went down in NAME's log before the first one
# left with its work done (the ends of a run close the connections).
went_down() {
    local n
    for n in "$@"; do
        awk '/leaves \(finished\)/ { exit } /is down/ { found = 1; exit } END { exit !found }' \
            "$T/$n.err" && return 0
    done
    return 1
}

# ---- 1. a relay without the key: a frame recorded and injected, a frame reflected ------
JOB=wp
P=$(free_ports 3)
p0=$(port_of 1 "$P") p1=$(port_of 2 "$P") prelay=$(port_of 3 "$P")
python3 "$PEERFRAME" "$prelay" relay "$p1" "$T/relay.log" &
relay=$!
_bg_pids+=("$relay")
export TRAINER_STEP_US=4000
# Rank 0 dials rank 1 through the relay; rank 1 listens where the relay forwards.
node q0 0 "127.0.0.1:$p0,127.0.0.1:$prelay"
node q1 1 "127.0.0.1:$p0,127.0.0.1:$p1"
check "peer (relay): both trainers run, through the relay" wait_for 20 started q0 q1
# Long enough that connection 1's sequence numbers are past those connection
# 2 has when the notice is injected (so that only the key can refuse it).
sleep 4
"$SPOTCTL" checkpoint --socket "$T/q1/control.sock" >/dev/null 2>&1
check "peer (relay): the relay records rank 1's notice on connection 1" \
    wait_for 10 grep -q "conn 1: recorded a notice" "$T/relay.log"
check "peer (relay): generation 1 is committed, then the relay cuts the connection" \
    wait_for 20 eval 'test -e "$T/store/$JOB/gens/00000001/COMMIT.json" && grep -q "conn 1: closed" "$T/relay.log"'
check "peer (relay): the relay injects the recorded notice into connection 2" \
    wait_for 40 grep -q "conn 2: injected" "$T/relay.log"
check "peer (relay): rank 0 refuses it: its MAC is not this connection's" \
    wait_for 10 grep -q "peer rank 1: a frame with a wrong MAC for this connection" "$T/q0.err"
check "peer (relay): the relay reflects rank 0's frames back on connection 3" \
    wait_for 40 grep -q "conn 3: reflecting" "$T/relay.log"
check "peer (relay): rank 0 refuses its own frame, reflected" \
    wait_for 10 eval '[ "$(grep -c "peer rank 1: a frame with a wrong MAC for this connection" "$T/q0.err")" -ge 2 ]'
nodes_finish "peer (relay)" 90 q0 q1
check "peer (relay): no round began but the one asked for" \
    eval '[ "$(grep -c "round for generation" "$T/q0.err")" = 1 ]'
check "peer (relay): ... so generation 2 was never begun" \
    eval '! grep -q "generation 2" "$T/q0.err" "$T/q1.err" && test ! -e "$T/store/$JOB/gens/00000002"'
kill "$relay" 2>/dev/null

# ---- 2. one node's wall clock stepped while both train ------------------------------
SHIM="$TOP/$O/tests/clockstep/clockstep.so"
if [ ! -e "$SHIM" ]; then
    fail "peer (clock): the clock-step library is built" "no $SHIM (make check builds it)"
    exit 1
fi
# clock_step MS: the stepped node's wall clock is MS ahead of the real one from now on.
clock_step() {
    printf '%s\n' "$1" >"$T/clock.tmp" && mv "$T/clock.tmp" "$T/clock"
}
clock_step 8000
shifted=$(LD_PRELOAD="$SHIM" SPOT_TEST_CLOCK_FILE="$T/clock" date +%s)
check "peer (clock): the library steps a process's wall clock ($shifted, $(date +%s))" \
    test $((shifted - $(date +%s))) -ge 6
clock_step 0
JOB=wt
P=$(free_ports 2)
export TRAINER_STEP_US=4000
node c0 0 "$P"
LD_PRELOAD="$SHIM" SPOT_TEST_CLOCK_FILE="$T/clock" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" node c1 1 "$P"
check "peer (clock): both trainers run" wait_for 20 started c0 c1
check "peer (clock): the stepped node's spotd has the library loaded" \
    grep -q clockstep.so "/proc/${PID[c1]}/maps"
# Each forward step is taken while rank 0's spotd is held for 2 s (well
# within the 5 s peer timeout): no heartbeat can come in first and hide the
# step from a liveness check on the wall clock, which then sees 8 s and more.
kill -STOP "${PID[c0]}"
clock_step 8000
sleep 2
kill -CONT "${PID[c0]}"
sleep 2
clock_step 0
sleep 3
clock_step -8000
sleep 3
kill -STOP "${PID[c0]}"
clock_step 0
sleep 2
kill -CONT "${PID[c0]}"
sleep 2
nodes_finish "peer (clock)" 60 c0 c1
check "peer (clock): no peer went down" eval '! went_down c0 c1'
check "peer (clock): nothing parked" eval '! has "\"event\":\"parked\"" "$T/c0.ev" && ! has "\"event\":\"parked\"" "$T/c1.ev"'
check "peer (clock): the world resumed once (its start)" \
    eval '[ "$(ev "$T/c0.ev" world_resume | wc -l)" = 1 ] && [ "$(ev "$T/c1.ev" world_resume | wc -l)" = 1 ]'

# ---- 3. a flood of connections at a node with 256 descriptors -----------------------
JOB=wf
P=$(free_ports 2)
p1=$(port_of 2 "$P")
export TRAINER_STEP_US=4000
(
    ulimit -n 256
    exec "$SPOTD" run --job "$JOB" --store "file://$T/store" --state-dir "$T/f1" \
        --rank 1 --world-size 2 --peers "$P" --world-key-file "$T/key" \
        --events "$T/f1.ev" --grace 5s --cloud none -- "$TRAINER" $STEPS $MIB \
        >"$T/f1.out" 2>"$T/f1.err"
) &
node_started f1 $!
check "peer (flood): rank 1 listens" wait_for 10 listening "$p1"
sources=$(seq -s, -f '127.0.2.%g' 1 16)
python3 "$PEERFRAME" "$p1" hold 2000 15 "$sources" >"$T/flood.out" 2>&1 &
flood=$!
_bg_pids+=("$flood")
sleep 2
node f0 0 "$P"
check "peer (flood): rank 0 still gets through to rank 1, the trainers start" \
    wait_for 30 started f0 f1
# The flood holds every descriptor the node has at moments; spotctl's
# connection can wait in the backlog past its 10 s while the listener and
# the flood take each freed one, so it is asked up to three times while the
# flood runs (15 s), which the next check proves.
status_ok() { "$SPOTCTL" status --socket "$T/f1/control.sock" >"$T/status" 2>&1; }
check "peer (flood): spotctl status answers during the flood" wait_for 30 status_ok
check "peer (flood): ... while the flood still runs" alive "$flood"
wait "$flood"
check "peer (flood): the node closed the connections it would not keep ($(cat "$T/flood.out"))" \
    eval '[ "$(sed -n "s/.*closed \([0-9]*\).*/\1/p" "$T/flood.out")" -ge 1000 ]'
nodes_finish "peer (flood)" 90 f0 f1
size=$(wc -c <"$T/f1.err")
check "peer (flood): the flooded node's log stays small ($size bytes)" test "$size" -lt 200000
check "peer (flood): ... saying what it closed, rate-limited" \
    eval '[ "$(grep -c "peer listener on port $p1: .*the slowest is closed" "$T/f1.err")" -ge 1 ] && [ "$(grep -c "peer listener on port" "$T/f1.err")" -le 40 ]'
check "peer (flood): no peer went down" eval '! went_down f0 f1'

# ---- 4. a node of the previous protocol version --------------------------------------
JOB=wv
P=$(free_ports 2)
node v1 1 "$P"
p1=$(port_of 2 "$P")
check "peer (version): rank 1 listens" wait_for 10 listening "$p1"
python3 "$PEERFRAME" "$p1" v1 "$KEY"
expect_eq "peer (version): a hello of protocol version 1 is refused, the connection closed" 0 "$?"
check "peer (version): ... saying so" \
    wait_for 5 grep -q "a frame of peer protocol version 1 (this spotd speaks 2)" "$T/v1.err"
kill -TERM "${PID[v1]}"
wait_node v1 10

check "peer: nothing of this test is left running" wait_for 10 none_left
