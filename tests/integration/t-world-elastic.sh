# An elastic world (--min-nodes below --world-size): three nodes on
# 127.0.0.1 running the C example trainer with --min-nodes 2.  Rank 2 is
# preempted; after --join-timeout the two others resume without it, their
# trainers numbered 0 and 1 of 2.  A replacement for rank 2 then joins the
# running world: the coordinator checkpoints the two, stops them, and all
# three resume from that generation, the newcomer restoring one of the two
# shards.  Every final hash equals an uninterrupted run's (the trainer's
# state does not depend on its rank).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"

c_trainer_world
JOB=el
P=$(free_ports 3)

# The command says what it was given, then becomes the trainer.
cat >"$T/cmd" <<'CMD'
#!/bin/sh
echo "start rank=$SPOT_NODE_RANK size=$SPOT_WORLD_SIZE gen=${SPOT_GEN:-0} shard=${SPOT_RESUME_RANK:--}/${SPOT_RESUME_WORLD_SIZE:--}" >&2
exec "$@"
CMD
chmod +x "$T/cmd"

# enode NAME RANK [ARGS...]: an elastic node in the background.
enode() {
    local name=$1 rank=$2
    shift 2
    "$SPOTD" run --job "$JOB" --store "file://$T/store" --state-dir "$T/$name" \
        --rank "$rank" --world-size 3 --peers "$P" --world-key-file "$T/key" \
        --min-nodes 2 --join-timeout 2s --cloud none \
        --events "$T/$name.ev" --grace 5s "$@" -- "$T/cmd" "$TRAINER" $STEPS $MIB \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}

# resumes NAME: NAME's world_resume events, one per line.
resumes() { ev "$T/$1.ev" world_resume; }

# ---- the options --------------------------------------------------------------
"$SPOTD" run --job x --store "file://$T/store" --rank 0 --world-size 3 --peers "$P" \
    --insecure --min-nodes 4 -- true >/dev/null 2>"$T/bad.err"
expect_eq "elastic: --min-nodes above --world-size is refused" 125 "$?"
check "elastic: ... saying why" grep -q "min-nodes 4 is more than --world-size 3" "$T/bad.err"

# ---- whole, then short ----------------------------------------------------------
enode e0 0
enode e1 1
enode e2 2 --drill-after 2500ms
check "elastic: the three start whole, the trainers numbered 0 to 2 of 3" \
    wait_for 20 eval 'grep -q "start rank=0 size=3" "$T/e0.err" && grep -q "start rank=2 size=3" "$T/e2.err"'
wait_node e2 30
expect_eq "elastic: preempted rank 2 exits 75 after the world's commit" 75 "$RC"
check "elastic: the two others wait, then resume without it" \
    wait_for 20 eval '[ "$(resumes e0 | wc -l)" = 2 ] && [ "$(resumes e1 | wc -l)" = 2 ]'
check "elastic: ... after the join timeout" \
    grep -q "2 of 3 ranks wait; the world resumes with them in 2 s" "$T/e0.err"
check "elastic: ... from generation 1, as trainers 0 and 1 of 2" eval \
    'resumes e0 | tail -n 1 | grep -q "\"gen\":1,\"rank\":0,\"world_size\":2" &&
     resumes e1 | tail -n 1 | grep -q "\"gen\":1,\"rank\":1,\"world_size\":2"'
# The resume event comes before the restarted command prints its first line
# (here and below: a loaded machine lets seconds pass between them).
check "elastic: ... and the command sees it" \
    wait_for 20 grep -q "start rank=1 size=2 gen=1 shard=1/3" "$T/e1.err"

# ---- a replacement joins the running world ----------------------------------
sleep 1
enode e2b 2
check "elastic: the replacement learns the world runs without it, and waits" \
    wait_for 20 grep -q "this node waits to join" "$T/e2b.err"
check "elastic: the coordinator checkpoints the two for it" \
    wait_for 30 eval 'ev "$T/e0.ev" commit | grep -q "\"gen\":2,.*\"reason\":\"grow\""'
check "elastic: then all three resume from that generation" \
    wait_for 30 eval 'resumes e2b | grep -q "\"gen\":2,\"rank\":2,\"world_size\":3"'
check "elastic: ... rank 0 and 1 as well" eval \
    'resumes e0 | tail -n 1 | grep -q "\"gen\":2,\"rank\":0,\"world_size\":3" &&
     resumes e1 | tail -n 1 | grep -q "\"gen\":2,\"rank\":1,\"world_size\":3"'
check "elastic: the newcomer restores shard 0 of the two generation 2 holds" \
    wait_for 20 grep -q "start rank=2 size=3 gen=2 shard=0/2" "$T/e2b.err"
check "elastic: ... from its restore directory" \
    test -d "$T/e2b/restore/gen-00000002-rank-0"
nodes_finish elastic 90 e0 e1 e2b
step1=$(saved_step e0 1) step2=$(saved_step e0 2)
check "elastic: the two went on short from the step after generation 1's" \
    grep -q "^resumed at step $((step1 + 1)) from $T/e1/work/gen-00000001/w0\$" "$T/e1.out"
check "elastic: the newcomer went on from the step after generation 2's" \
    grep -q "^resumed at step $((step2 + 1)) from $T/e2b/restore/gen-00000002-rank-0/w0\$" "$T/e2b.out"
"$SPOTCTL" ls --json --store "file://$T/store" --job "$JOB" >"$T/ls" 2>"$T/ls.err"
expect_eq "elastic: the store lists generation 1 as saved by three ranks, 2 by two (grow)" \
    "3 2:grow" \
    "$(jq_ '(lambda m: "%s %s:%s" % (m[1]["world_size"], m[2]["world_size"], m[2]["reason"]))({g["gen"]: g for g in d})' "$T/ls")"
for g in 1 2; do
    "$SPOTCTL" verify --store "file://$T/store" --job "$JOB" --gen $g >"$T/verify" 2>&1
    expect_eq "elastic: spotctl verify passes generation $g" 0 "$?"
done
# ---- a first start short ------------------------------------------------------
# Only two of the three come: after the join timeout they start afresh, as
# trainers 0 and 1 of 2, and finish.
JOB=el2
P=$(free_ports 3)
enode f0 0
enode f2 2
check "elastic: two of three start afresh after the join timeout" \
    wait_for 20 eval 'started f0 f2'
check "elastic: ... as trainers 0 and 1 of 2" wait_for 20 eval \
    'grep -q "start rank=0 size=2 gen=0" "$T/f0.err" && grep -q "start rank=1 size=2 gen=0" "$T/f2.err"'
for n in f0 f2; do
    wait_node $n 60
    expect_eq "elastic: $n finishes with the uninterrupted hash" "0 $ref" "$RC $(tail -n 1 "$T/$n.out")"
done
check "elastic: nothing of this test is left running" wait_for 5 none_left
