# The world: several spotd on 127.0.0.1 (own ports, own state directories),
# each running the C example trainer.  One node's metadata (the AWS mock)
# announces termination at a random moment; every rank saves the same
# step, the coordinator writes the commit once, the preempted node leaves,
# the others stop and wait; a replacement takes the vacant rank, the world
# resumes from the generation, and every final hash equals an
# uninterrupted run's.  Then: the coordinator itself preempted, a
# coordinator killed in the middle of a round, a peer that goes silent
# (while it trains, and in the middle of a checkpoint), and hostile frames.
# The coordinator killed after the commit: t-world-commit.sh.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"
. "$TOP/tests/mocks/lib.sh"

c_trainer_world

# node NAME RANK SIZE PEERS [ARGS...]: start one node in the background.
node() {
    local name=$1 rank=$2 size=$3 peers=$4
    shift 4
    "$SPOTD" run --job "$JOB" --store "file://$T/store" --state-dir "$T/$name" \
        --rank "$rank" --world-size "$size" --peers "$peers" --world-key-file "$T/key" \
        --events "$T/$name.ev" --grace 5s "$@" -- "$TRAINER" $STEPS $MIB \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}

# ---- 1. three nodes, a notice on rank 1 -----------------------------------
JOB=w3
P=$(free_ports 3)
mock_start aws || { fail "world: the aws mock starts"; exit 1; }
node a0 0 3 "$P" --cloud none
node a1 1 3 "$P" --cloud aws --metadata-url "$MOCK_URL" --poll-interval 200ms
node a2 2 3 "$P" --cloud none
check "world: the three nodes start their trainers together" \
    wait_for 20 eval 'has child_start "$T/a0.ev" && has child_start "$T/a1.ev" && has child_start "$T/a2.ev"'
check "world: none of them started before the world was whole" \
    eval '[ "$(ev "$T/a0.ev" world_resume | wc -l)" = 1 ]'
sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.1f", 0.8 + (r % 20) / 10 }')"
mock_state "{\"notice\":{\"action\":\"terminate\",\"time\":\"$(date -u -d '+40 sec' +%Y-%m-%dT%H:%M:%SZ)\"}}" >/dev/null
wait_node a1 30
expect_eq "world: the preempted node exits 75 after the world's commit" 75 "$RC"
s0=$(saved_step a0 1) s1=$(saved_step a1 1) s2=$(saved_step a2 1)
expect_ge "world: rank 0 saved generation 1" 1 "$s0"
check "world: all three ranks saved the same step ($s0 $s1 $s2)" \
    eval '[ "$s0" = "$s1" ] && [ "$s1" = "$s2" ]'
check "world: the coordinator (rank 0) wrote the commit, once" \
    eval '[ "$(grep -c "committing generation 1" "$T/a0.err")" = 1 ] && ! grep -q "committing generation" "$T/a1.err" "$T/a2.err"'
check "world: the commit record names three ranks" \
    grep -q '"world_size":3' "$T/store/$JOB/gens/00000001/COMMIT.json"
total=0
for n in a0 a1 a2; do
    total=$((total + $(jget "$(ev "$T/$n.ev" upload_done | head -n 1)" bytes_sent)))
done
size=$(jget "$(ev "$T/a0.ev" upload_done | head -n 1)" bytes)
check "world: the replicated state went up once in all ($total bytes sent for $size)" \
    test "$total" -lt $((size * 12 / 10))
check "world: ... the nodes compared their fingerprints" \
    grep -q "the same content everywhere, each stores its share" "$T/a2.err"
"$SPOTCTL" verify --store "file://$T/store" --job "$JOB" --gen 1 --world-key-file "$T/key" \
    >"$T/verify" 2>&1
expect_eq "world: spotctl verify passes generation 1 (every rank's chunks)" 0 "$?"
kid=$(sed -n 's/.*signed and checked with job key \([0-9a-f]\{16\}\).*/\1/p' "$T/a0.err" | head -n 1)
check "world: ... signed by the world key, whose id the coordinator logged" \
    eval '[ -n "$kid" ] && grep -q "every hash correct; signed by key $kid$" "$T/verify"'
check "world: the survivors stop their trainers and wait" \
    wait_for 15 eval 'has "\"event\":\"parked\"" "$T/a0.ev" && has "\"event\":\"parked\"" "$T/a2.ev"'
check "world: ... and say why" grep -q "rank 1 left (preempted)" "$T/a0.err"
check "world: ... with their trainers stopped over the control socket (exit 75)" \
    grep -q '"event":"parked","code":75' "$T/a2.ev"
mock_stop
node a1b 1 3 "$P" --cloud none
for n in a0 a1b a2; do
    wait_node $n 60
    expect_eq "world: $n finishes the run" 0 "$RC"
    [ "$RC" = 0 ] || show a0 a1b a2
    check "world: $n resumed from generation 1 at the step after the checkpoint" \
        grep -q "resumed at step $((s0 + 1)) " "$T/$n.out"
    expect_eq "world: $n ends with the hash of an uninterrupted run" "$ref" "$(tail -n 1 "$T/$n.out")"
done
check "world: the replacement restored rank 1's shard" \
    grep -q '"event":"resume","gen":1' "$T/a1b.ev"
check "world: the peers connected with the key (nothing refused)" \
    eval '! grep -q "refused\|wrong MAC" "$T/a0.err" "$T/a2.err" "$T/a1b.err"'

# ---- 2. the coordinator is the one preempted --------------------------------
JOB=wc
P=$(free_ports 2)
node b0 0 2 "$P" --cloud none --drill-after 1500ms
node b1 1 2 "$P" --cloud none
wait_node b0 30
expect_eq "world: a preempted coordinator commits, then exits 75" 75 "$RC"
check "world: rank 1 coordinates once rank 0 is gone" \
    wait_for 10 grep -q "rank 1 coordinates (this node)" "$T/b1.err"
node b0b 0 2 "$P" --cloud none
nodes_finish "world (after the coordinator's preemption)" 60 b0b b1
check "world: the new rank 0 coordinates again" grep -q "rank 0 coordinates" "$T/b1.err"

# ---- 3. the coordinator killed in the middle of a round -------------------------
# A pre-checkpoint hook on rank 0 holds the round; rank 0 is killed with
# SIGKILL meanwhile: rank 1 takes over, gives the generation up (the step
# was never chosen), and nothing is committed; the newest stays none.
JOB=wk
P=$(free_ports 2)
mkdir -p "$T/hooks"
printf '#!/bin/sh\nsleep 30\n' >"$T/hooks/pre-checkpoint"
chmod +x "$T/hooks/pre-checkpoint"
node k0 0 2 "$P" --cloud none --hooks-dir "$T/hooks" --hook-timeout 60s
node k1 1 2 "$P" --cloud none --peer-timeout 2s
check "world: both trainers run" wait_for 20 eval 'has child_start "$T/k0.ev" && has child_start "$T/k1.ev"'
SPOTD_SOCK="$T/k1/control.sock"
"$SPOTCTL" checkpoint --socket "$SPOTD_SOCK" >/dev/null 2>&1
check "world: the round begins on both" \
    wait_for 10 eval 'has checkpoint_begin "$T/k0.ev" && has checkpoint_begin "$T/k1.ev"'
k0_tree="${PID[k0]} $(descendants "${PID[k0]}")"
kill -KILL $k0_tree
check "world: rank 1 takes over and gives the round up" \
    wait_for 15 grep -q "generation 1 is given up: the coordinator (rank 0) went away" "$T/k1.err"
check "world: ... its own checkpoint fails, saying so" \
    wait_for 10 grep -q '"event":"checkpoint_failed","gen":1' "$T/k1.ev"
check "world: ... nothing is committed" test ! -e "$T/store/$JOB/gens/00000001/COMMIT.json"
check "world: ... and rank 1 stops its trainer to wait for the world" \
    wait_for 15 has '"event":"parked"' "$T/k1.ev"
kill -TERM "${PID[k1]}"
wait_node k1 20

# ---- 4. a peer that goes silent (SIGSTOP) ---------------------------------------
JOB=ws
P=$(free_ports 2)
export TRAINER_STEP_US=2500
node s0 0 2 "$P" --cloud none --peer-timeout 2s
node s1 1 2 "$P" --cloud none --peer-timeout 2s
check "world: both trainers run (silent peer)" \
    wait_for 20 eval 'has child_start "$T/s0.ev" && has child_start "$T/s1.ev"'
kill -STOP "${PID[s1]}"
check "world: a silent peer is found down after --peer-timeout" \
    wait_for 10 grep -q "peer rank 1 is down: silent for" "$T/s0.err"
check "world: ... and the other node stops its trainer and waits" \
    wait_for 15 has '"event":"parked"' "$T/s0.ev"
kill -CONT "${PID[s1]}"
check "world: the peer back, the world resumes (from nothing committed: afresh)" \
    wait_for 20 eval '[ "$(ev "$T/s0.ev" world_resume | wc -l)" = 2 ]'
nodes_finish "world (after the silence)" 60 s0 s1

export TRAINER_STEP_US=1500

# ---- 6. the coordinator killed once its shard is in -------------------------------
# Rank 1's trainer takes 3 s to save; rank 0 (the coordinator) is killed
# with SIGKILL after its upload: rank 1 takes over, knows rank 0's saved,
# and commits the generation itself when its own shard is in.  (Without
# the split upload: with it, rank 0's shard waits for rank 1's fingerprint.)
JOB=wd
P=$(free_ports 2)
node d0 0 2 "$P" --cloud none --split-upload false
TRAINER_SAVE_SLEEP_MS=3000 node d1 1 2 "$P" --cloud none --peer-timeout 2s --split-upload false
check "world: both trainers run (takeover)" \
    wait_for 20 eval 'has child_start "$T/d0.ev" && has child_start "$T/d1.ev"'
"$SPOTCTL" checkpoint --socket "$T/d1/control.sock" >/dev/null 2>&1
check "world: rank 0's shard is uploaded first" wait_for 15 has upload_done "$T/d0.ev"
d0_tree="${PID[d0]} $(descendants "${PID[d0]}")"
kill -KILL $d0_tree
check "world: rank 1 coordinates after the kill" \
    wait_for 10 grep -q "rank 1 coordinates (this node)" "$T/d1.err"
check "world: ... and commits generation 1 with both shards" \
    wait_for 15 eval 'grep -q "every rank saved step .*committing generation 1" "$T/d1.err" && has "\"event\":\"commit\",\"gen\":1" "$T/d1.ev"'
check "world: ... a whole commit record" grep -q '"world_size":2' "$T/store/$JOB/gens/00000001/COMMIT.json"
check "world: ... then waits for rank 0" wait_for 15 has '"event":"parked"' "$T/d1.ev"
node d0b 0 2 "$P" --cloud none
nodes_finish "world (after the takeover's commit)" 60 d0b d1
check "world: the replacement resumed from the generation the new coordinator committed" \
    grep -q '"event":"world_resume","gen":1' "$T/d0b.ev"

# ---- 7. two notices at once; replacements before a survivor has stopped ------
# Ranks 1 and 2 get their notices together: one round serves both, both
# leave.  Rank 0's trainer ignores the stop (the drain timer ends it); the
# replacements come at once, and the world resumes only after rank 0 has
# stopped.
JOB=w2n
P=$(free_ports 3)
TRAINER_IGNORE_STOP=1 node t0 0 3 "$P" --cloud none
node t1 1 3 "$P" --cloud none --drill-after 2s
node t2 2 3 "$P" --cloud none --drill-after 2s
wait_node t1 30
expect_eq "world: two notices at once: rank 1 exits 75" 75 "$RC"
wait_node t2 30
expect_eq "world: two notices at once: rank 2 exits 75" 75 "$RC"
expect_eq "world: ... one generation served both" "1 1" \
    "$(ev "$T/t1.ev" commit | wc -l) $(ev "$T/t2.ev" commit | wc -l)"
check "world: ... at one step" eval '[ "$(saved_step t1 1)" = "$(saved_step t2 1)" ] && [ "$(saved_step t0 1)" = "$(saved_step t1 1)" ]'
node t1b 1 3 "$P" --cloud none
node t2b 2 3 "$P" --cloud none
nodes_finish "world (after the double preemption)" 90 t0 t1b t2b
parked=$(ts_ms "$(jget "$(ev "$T/t0.ev" parked)" ts)")
resumed=$(ts_ms "$(jget "$(ev "$T/t1b.ev" world_resume)" ts)")
check "world: the replacements waited for the slow survivor to stop" \
    test -n "$parked" -a -n "$resumed" -a "$resumed" -ge "${parked:-0}"

# ---- 8. rendezvous through the store; a replacement without a rank -----------
# No --peers: each node writes its listener's address (port 0: any) under
# the job's world/ prefix; the replacement of rank 1 is started without
# --rank and is given the vacant rank by the coordinator.
JOB=wr
rdv() {
    local name=$1
    shift
    "$SPOTD" run --job "$JOB" --store "file://$T/store" --state-dir "$T/$name" \
        --rendezvous store --world-size 3 --listen 127.0.0.1:0 --world-key-file "$T/key" \
        --events "$T/$name.ev" --grace 5s --cloud none "$@" -- "$TRAINER" $STEPS $MIB \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}
rdv r0 --rank 0
rdv r1 --rank 1 --drill-after 2s
rdv r2 --rank 2
wait_node r1 40
expect_eq "world (rendezvous): the preempted node exits 75" 75 "$RC"
check "world (rendezvous): each rank's record is in the store" \
    test -e "$T/store/$JOB/world/rank-0.json" -a -e "$T/store/$JOB/world/rank-2.json"
rdv r1b
nodes_finish "world (rendezvous)" 60 r0 r1b r2
check "world (rendezvous): the rank-less replacement was given rank 1" \
    grep -q "this node takes rank 1" "$T/r1b.err"
check "world (rendezvous): ... by the coordinator" grep -q "it takes vacant rank 1" "$T/r0.err"
check "world (rendezvous): ... and restored rank 1's shard" \
    grep -q '"event":"world_resume","gen":1,"rank":1' "$T/r1b.ev"
check "world (rendezvous): the join and assign records are gone" \
    eval '[ -z "$(ls "$T/store/$JOB/world" | grep -v "^rank-")" ]'
# A rank-less node that nobody answers (the world is gone) still stops on
# SIGTERM, as systemd and Kubernetes stop it.
rdv r9
check "world (rendezvous): a rank-less node asks for a rank" \
    wait_for 10 grep -q "asking the world's coordinator for one" "$T/r9.err"
kill -TERM "${PID[r9]}"
wait_node r9 10
expect_eq "world (rendezvous): ... and exits on SIGTERM while it waits" 75 "$RC"
check "world (rendezvous): ... taking its join record with it" \
    eval '[ -z "$(ls "$T/store/$JOB/world" | grep "^join-")" ]'

# ---- 9. a peer that goes silent in the middle of a checkpoint -----------------
# Generation 1 is committed.  In generation 2's round rank 1's spotd is
# stopped (SIGSTOP) once the step is chosen, while its trainer saves (it
# takes 1.5 s): rank 0 gives the round up
# once rank 1 has been silent for --peer-timeout and waits; nothing of
# generation 2 is committed, even after rank 1 wakes up with its shard
# saved, and the world resumes from generation 1.
JOB=wm
P=$(free_ports 2)
node m0 0 2 "$P" --cloud none --peer-timeout 2s
TRAINER_SAVE_SLEEP_MS=1500 node m1 1 2 "$P" --cloud none --peer-timeout 2s
check "world: both trainers run (silent mid-checkpoint)" wait_for 20 started m0 m1
"$SPOTCTL" checkpoint --socket "$T/m0/control.sock" >/dev/null 2>&1
check "world: generation 1 is committed first" \
    wait_for 20 has '"event":"commit","gen":1' "$T/m1.ev"
"$SPOTCTL" checkpoint --socket "$T/m0/control.sock" >/dev/null 2>&1
check "world: generation 2's step is chosen (rank 1's trainer now takes 1.5 s to save)" \
    wait_for 10 grep -q "generation 2 saves at step" "$T/m0.err"
kill -STOP "${PID[m1]}"
check "world: rank 0 gives generation 2 up once rank 1 is silent" \
    wait_for 15 eval 'grep -q "generation 2 is given up: rank 1 went down before it saved" "$T/m0.err"'
check "world: ... and stops its trainer to wait" wait_for 15 has '"event":"parked"' "$T/m0.ev"
kill -CONT "${PID[m1]}"
check "world: rank 1 back, its generation 2 fails too" \
    wait_for 15 has '"event":"checkpoint_failed","gen":2' "$T/m1.ev"
nodes_finish "world (after the silence mid-checkpoint)" 60 m0 m1
check "world: generation 2 was never committed" test ! -e "$T/store/$JOB/gens/00000002/COMMIT.json"
check "world: both resumed from generation 1" \
    eval 'has "\"event\":\"world_resume\",\"gen\":1" "$T/m0.ev" && has "\"event\":\"world_resume\",\"gen\":1" "$T/m1.ev"'

# ---- 10. a rank that cannot save before the deadline ---------------------------
# Rank 0 gets a notice with 4 s to go (less the margin and the stop: under
# a second for the round); rank 1's trainer takes 8 s to save.  At the
# deadline rank 1 aborts the generation, or the coordinator's own timer
# fires first; either way it is given up for everyone, nothing is committed, the preempted node stops its command
# (spotd exits with the command's code, not 75: nothing was saved), and the
# world starts afresh with its replacement.
JOB=wl
P=$(free_ports 2)
node l0 0 2 "$P" --cloud none --notice-margin 1s
TRAINER_SAVE_SLEEP_MS=8000 node l1 1 2 "$P" --cloud none --notice-margin 1s
check "world: both trainers run (deadline)" wait_for 20 started l0 l1
"$SPOTCTL" drill --in 4s --socket "$T/l0/control.sock" >/dev/null 2>&1
expect_eq "world: spotctl drill with a 4 s deadline is accepted" 0 "$?"
wait_node l0 30
expect_eq "world: the preempted node stops its command, with nothing committed (143, not 75)" \
    143 "$RC"
check "world: the coordinator gave generation 1 up: rank 1 missed the deadline" \
    grep -Eq "generation 1 is given up: (rank 1: .* did not report its save before the deadline|the deadline passed before ranks? ([0-9]+, )*1 saved)" "$T/l0.err"
check "world: ... and nothing is committed" test ! -e "$T/store/$JOB/gens/00000001/COMMIT.json"
check "world: rank 1's checkpoint fails too" \
    wait_for 15 has '"event":"checkpoint_failed","gen":1' "$T/l1.ev"
node l0b 0 2 "$P" --cloud none
nodes_finish "world (after the missed deadline)" 60 l0b l1

# ---- 5. hostile frames ---------------------------------------------------------------
JOB=wh
P=$(free_ports 2)
node h0 0 2 "$P" --cloud none
port0=${P%%,*}
port0=${port0##*:}
for mode in garbage big wrongkey v1 flood; do
    python3 "$TOP/tests/integration/peerframe.py" "$port0" "$mode" "$KEY"
    expect_eq "world: a $mode connection is closed" 0 "$?"
done
check "world: refused frames are logged, rate-limited" \
    eval '[ "$(grep -c "peer connection: .*connection closed" "$T/h0.err")" -le 6 ]'
check "world: ... saying why (not a frame, over 64 KiB, wrong MAC, an older protocol)" \
    eval 'grep -q "not a frame of the peer protocol\|over 64 KiB\|wrong MAC\|protocol version 1" "$T/h0.err"'
node h1 1 2 "$P" --cloud none
for n in h0 h1; do
    wait_node $n 60
    expect_eq "world: $n still runs its world after the hostile frames" 0 "$RC"
done
# A node with another key never joins: its hello is refused.
JOB=wx
P=$(free_ports 2)
node x0 0 2 "$P" --cloud none
printf '%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$T/key2"
"$SPOTD" run --job "$JOB" --store "file://$T/store" --state-dir "$T/x1" --rank 1 --world-size 2 \
    --peers "$P" --world-key-file "$T/key2" --events "$T/x1.ev" -- "$TRAINER" 10 \
    >"$T/x1.out" 2>"$T/x1.err" &
node_started x1 $!
check "world: a node with another key is refused" \
    wait_for 10 eval 'grep -qs "wrong MAC" "$T/x0.err" "$T/x1.err"'
sleep 1
check "world: ... and no trainer starts" \
    eval '! has child_start "$T/x0.ev" && ! has child_start "$T/x1.ev"'
kill -TERM "${PID[x0]}" "${PID[x1]}"
wait_node x0 10
wait_node x1 10

check "world: nothing of this test is left running" wait_for 10 none_left
