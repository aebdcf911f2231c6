# The world across network namespaces: each node is a namespace of its own
# with its own address, hostname and hosts file, joined to the others by a
# bridge, and runs spotd (ip netns exec); the store is a file:// directory
# all of them see.  Then:
#   a. three nodes run the C trainer; a notice on rank 1: every rank saves
#      the same step, rank 1 exits 75, the others wait; a replacement in
#      rank 1's namespace takes the rank and the world ends with the hash of
#      an uninterrupted run;
#   b. two nodes; a checkpoint is committed, then rank 1's link goes down:
#      rank 0 finds it down after --peer-timeout, stops its trainer and
#      waits; the link back up, the world resumes from the checkpoint and
#      ends with the uninterrupted hash;
#   c. PyTorch's torchrun, unmodified, with DDP over gloo between two
#      namespaces: a notice, the commit, a replacement, the resume, and the
#      model of an uninterrupted torchrun run on both nodes.
#
# Needs root and iproute2 (skipped otherwise); c needs Debian's torch
# (/usr/bin/python3, examples/pytorch/README.md) and is skipped without it.
# The namespaces are named after this run's $T, so runs side by side do not
# meet; their addresses live only inside them (the bridge is in a namespace
# of its own too, out of reach of the host's firewall), so they clash with
# nothing.  Everything is removed on exit.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"

if [ "$(id -u)" != 0 ]; then
    echo "SKIP: world-netns (network namespaces need root)"
    exit 0
fi
for c in ip unshare; do
    if ! command -v $c >/dev/null; then
        echo "SKIP: world-netns (no '$c' command; apt-get install iproute2 util-linux)"
        exit 0
    fi
done

ID=${T##*.}                         # mktemp's random part: unique per run
SW="spotd-$ID-sw"                   # the namespace that holds the bridge
NS=("spotd-$ID-n0" "spotd-$ID-n1" "spotd-$ID-n2")
ADDR=(10.231.0.10 10.231.0.11 10.231.0.12)

# netns_cleanup: after lib.sh's cleanup has ended every process of the test,
# the namespaces and their hosts files go.
netns_cleanup() {
    local n
    for n in "${NS[@]}" "$SW"; do
        ip netns del "$n" 2>/dev/null
        rm -rf "/etc/netns/$n"
    done
}
trap 'cleanup; netns_cleanup' EXIT

# The switch: a bridge in its own namespace; node i is attached by a veth
# pair, p<i> on the bridge and eth0 in the node, with ADDR[i]/24.  Each node
# resolves every node's name (node<i>) through /etc/netns/NS/hosts, which
# ip netns exec mounts over /etc/hosts.
setup_net() {
    local i hosts="127.0.0.1 localhost"
    ip netns add "$SW" || return 1
    ip -n "$SW" link add br0 type bridge || return 1
    ip -n "$SW" link set br0 up || return 1
    for i in 0 1 2; do
        hosts+=$'\n'"${ADDR[$i]} node$i"
    done
    for i in 0 1 2; do
        ip netns add "${NS[$i]}" &&
            ip -n "$SW" link add "p$i" type veth peer name eth0 netns "${NS[$i]}" &&
            ip -n "$SW" link set "p$i" master br0 up &&
            ip -n "${NS[$i]}" addr add "${ADDR[$i]}/24" dev eth0 &&
            ip -n "${NS[$i]}" link set eth0 up &&
            ip -n "${NS[$i]}" link set lo up || return 1
        mkdir -p "/etc/netns/${NS[$i]}" &&
            printf '%s\n' "$hosts" >"/etc/netns/${NS[$i]}/hosts" || return 1
    done
}
if ! setup_net >"$T/netns.log" 2>&1; then
    echo "SKIP: world-netns (cannot create network namespaces: $(tail -n 1 "$T/netns.log"))"
    exit 0
fi

# in_ns I COMMAND...: COMMAND in node I's namespace, with a UTS namespace
# and hostname (node<I>) of its own.  It replaces the shell that calls it
# (ip, unshare and sh each exec the next), so call it only in the
# background or in $(...): the pid of "in_ns ... &" is then COMMAND's own.
in_ns() {
    local i=$1
    shift
    exec ip netns exec "${NS[$i]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$i" "$@"
}

check "world-netns: each node has its own hostname and hosts file" \
    eval '[ "$(in_ns 1 hostname)" = node1 ] && [ "$(in_ns 1 getent hosts node0 | cut -d " " -f 1)" = "${ADDR[0]}" ]'

TRAINER="$TOP/$O/examples/c-trainer/trainer"
STEPS=4000 MIB=1
export TRAINER_STEP_US=1500
ref=$(TRAINER_STEP_US=0 reference "$TRAINER" $STEPS $MIB)
openssl rand -hex 32 >"$T/key" 2>/dev/null ||
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/key"
chmod 600 "$T/key"
mkdir -p "$T/store"
PORT=7100
# gloo's interface in every node (c); the C trainer does not care.
export GLOO_SOCKET_IFNAME=eth0

# peers N: the --peers of a world of N nodes, rank i on node i.
peers() {
    local i p=
    for ((i = 0; i < $1; i++)); do p+="${p:+,}${ADDR[$i]}:$PORT"; done
    echo "$p"
}

# node NAME I RANK SIZE [SPOTD ARGS...] -- COMMAND...: start spotd in node
# I's namespace, in the background; state in $T/NAME, events in
# $T/NAME.ev, its stdout (the command's) in $T/NAME.out.
node() {
    local name=$1 i=$2 rank=$3 size=$4
    shift 4
    in_ns "$i" "$SPOTD" run --cloud none --job "$JOB" --store "file://$T/store" \
        --state-dir "$T/$name" --rank "$rank" --world-size "$size" --peers "$(peers "$size")" \
        --world-key-file "$T/key" --events "$T/$name.ev" --grace 5s "$@" \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}

# netns_of PID: the network namespace PID is in (like net:[4026532...]).
netns_of() {
    readlink "/proc/$1/ns/net" 2>/dev/null
}

# own_netns PID...: each PID is in a network namespace of its own, not
# this shell's.
own_netns() {
    local p n seen
    seen=" $(netns_of $$) "
    for p in "$@"; do
        n=$(netns_of "$p")
        [ -n "$n" ] && [[ $seen != *" $n "* ]] || return 1
        seen+="$n "
    done
}

# ---- a. three namespaces, a notice on rank 1 ---------------------------------
JOB=nsa
node a0 0 0 3 -- "$TRAINER" $STEPS $MIB
node a1 1 1 3 -- "$TRAINER" $STEPS $MIB
node a2 2 2 3 -- "$TRAINER" $STEPS $MIB
check "world-netns: three nodes in three namespaces start their trainers together" \
    wait_for 20 started a0 a1 a2
started a0 a1 a2 || show a0 a1 a2
check "world-netns: each spotd runs in a network namespace of its own" \
    own_netns "${PID[a0]}" "${PID[a1]}" "${PID[a2]}"
check "world-netns: the trainers learn the master address (rank 0's in --peers)" \
    grep -q '"event":"world_resume","gen":0,"rank":2,"world_size":3,"master_addr":"10.231.0.10"' "$T/a2.ev"
sleep 1
"$SPOTCTL" drill --socket "$T/a1/control.sock" >"$T/drill" 2>&1
expect_eq "world-netns: spotctl drill on rank 1 is accepted" 0 "$?"
wait_node a1 30
expect_eq "world-netns: the preempted node exits 75 after the world's commit" 75 "$RC"
s0=$(saved_step a0 1) s1=$(saved_step a1 1) s2=$(saved_step a2 1)
expect_ge "world-netns: rank 0 saved generation 1" 1 "$s0"
check "world-netns: all three ranks saved the same step ($s0 $s1 $s2)" \
    eval '[ "$s0" = "$s1" ] && [ "$s1" = "$s2" ]'
check "world-netns: the commit record names three ranks" \
    grep -q '"world_size":3' "$T/store/$JOB/gens/00000001/COMMIT.json"
check "world-netns: the other two stop their trainers and wait" \
    wait_for 15 eval 'has "\"event\":\"parked\"" "$T/a0.ev" && has "\"event\":\"parked\"" "$T/a2.ev"'
node a1b 1 1 3 -- "$TRAINER" $STEPS $MIB
for n in a0 a1b a2; do
    wait_node $n 60
    expect_eq "world-netns: $n finishes the run" 0 "$RC"
    check "world-netns: $n resumed from generation 1 at the step after the checkpoint" \
        grep -q "resumed at step $((s0 + 1)) " "$T/$n.out"
    expect_eq "world-netns: $n ends with the hash of an uninterrupted run" "$ref" \
        "$(tail -n 1 "$T/$n.out")"
done
check "world-netns: the replacement, in rank 1's namespace, restored generation 1" \
    grep -q '"event":"resume","gen":1' "$T/a1b.ev"
check "world-netns: the peers connected with the key (nothing refused)" \
    eval '! grep -q "refused\|wrong MAC" "$T/a0.err" "$T/a2.err" "$T/a1b.err"'

# ---- b. a network cut between two namespaces -----------------------------------
JOB=nsb
export TRAINER_STEP_US=2500
node b0 0 0 2 --peer-timeout 2s -- "$TRAINER" $STEPS $MIB
node b1 1 1 2 --peer-timeout 2s -- "$TRAINER" $STEPS $MIB
check "world-netns: both trainers run (cut)" wait_for 20 started b0 b1
started b0 b1 || show b0 b1
"$SPOTCTL" checkpoint --socket "$T/b0/control.sock" >/dev/null 2>&1
check "world-netns: a checkpoint is committed before the cut" \
    wait_for 15 test -e "$T/store/$JOB/gens/00000001/COMMIT.json"
sb=$(saved_step b0 1)
sleep 0.5
t_cut=$(now_ms)
# rank 1's port on the bridge goes down: its eth0 loses the carrier, and
# whatever either side sends is dropped without a reset.
ip -n "$SW" link set p1 down
check "world-netns: after the cut rank 0 finds rank 1 down (silent)" \
    wait_for 15 grep -q "peer rank 1 is down: silent for" "$T/b0.err"
t_down=$(now_ms)
check "world-netns: ... no sooner than --peer-timeout allows, and not much later ($((t_down - t_cut)) ms)" \
    eval '[ $((t_down - t_cut)) -ge 1000 ] && [ $((t_down - t_cut)) -lt 8000 ]'
check "world-netns: ... and rank 1 finds rank 0 down" \
    wait_for 10 grep -q "peer rank 0 is down" "$T/b1.err"
check "world-netns: both stop their trainers and wait" \
    wait_for 15 eval 'has "\"event\":\"parked\"" "$T/b0.ev" && has "\"event\":\"parked\"" "$T/b1.ev"'
sleep 1
expect_eq "world-netns: nothing resumes while the link is down" 1 \
    "$(ev "$T/b0.ev" world_resume | wc -l)"
ip -n "$SW" link set p1 up
# resumed_from NAME GEN: NAME's latest world_resume is from GEN.
resumed_from() {
    ev "$T/$1.ev" world_resume | tail -n 1 | grep -q "\"gen\":$2,"
}
check "world-netns: the link back, the world resumes from the committed generation" \
    wait_for 20 eval 'resumed_from b0 1 && resumed_from b1 1'
for n in b0 b1; do
    wait_node $n 60
    expect_eq "world-netns: $n finishes after the cut" 0 "$RC"
    check "world-netns: $n resumed at the step after the checkpoint" \
        grep -q "resumed at step $((sb + 1)) " "$T/$n.out"
    expect_eq "world-netns: $n ends with the uninterrupted hash" "$ref" "$(tail -n 1 "$T/$n.out")"
done
export TRAINER_STEP_US=1500

check "world-netns: nothing of the C trainer's worlds is left running" wait_for 10 none_left

# ---- c. torchrun across two namespaces, DDP over gloo --------------------------
PY=/usr/bin/python3
if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "SKIP: world-netns torchrun ($PY cannot import torch; apt-get install --no-install-recommends python3-torch)"
    exit 0
fi
TRAIN="$TOP/examples/pytorch/train.py"
NSTEPS=800
MPORT=29500
# torchrun's options on every node; --redirects, --tee: TORCHRUN.md.
TR=(/usr/bin/torchrun --nproc_per_node 1 --redirects 9:0 --tee 9:0 --monitor_interval 1)
for i in 0 1; do
    in_ns $i timeout -k 2 120 "${TR[@]}" --nnodes 2 --node_rank $i --master_addr "${ADDR[0]}" \
        --master_port $MPORT "$TRAIN" $NSTEPS >"$T/ref$i.out" 2>&1 &
    node_started ref$i $!
done
wait_exit "${PID[ref0]}" 120
rc0=$RC
wait_exit "${PID[ref1]}" 30
expect_eq "world-netns torchrun: an uninterrupted two-namespace run ends well" "0 0" "$rc0 $RC"
ref2=$(grep '^done ' "$T/ref0.out" | tail -n 1)
rh1=$(grep '^rank 1 sha256 ' "$T/ref1.out" | tail -n 1)
check "world-netns torchrun: ... with its model's hash ($ref2)" \
    eval '[[ $ref2 =~ ^done\ $NSTEPS\ sha256\ [0-9a-f]{64}$ ]]'
[ -n "$ref2" ] || tail -n 20 "$T/ref0.out" "$T/ref1.out"
expect_eq "world-netns torchrun: ... the same on both nodes" "rank 1 sha256 ${ref2##* }" "$rh1"

TRW=("${TR[@]}" --nnodes '{world_size}' --node_rank '{rank}' --master_addr '{master_addr}'
     --master_port '{master_port}' "$TRAIN" "$NSTEPS")
JOB=nsc
node c0 0 0 2 --master-port $MPORT -- "${TRW[@]}"
node c1 1 1 2 --master-port $MPORT -- "${TRW[@]}"
training_or_gone() { has "training from step 0" "$T/c0.out" || ! alive "${PID[c0]}"; }
wait_for 90 training_or_gone
check "world-netns torchrun: the world starts torchrun on both nodes and they train" \
    has "training from step 0" "$T/c0.out"
has "training from step 0" "$T/c0.out" || show c0 c1
check "world-netns torchrun: {rank}, {world_size}, {master_addr}, {master_port} are substituted" \
    grep -q '"event":"child_start".*"--nnodes","2","--node_rank","1","--master_addr","10.231.0.10","--master_port","29500"' "$T/c1.ev"
sleep 0.5
"$SPOTCTL" drill --socket "$T/c1/control.sock" >"$T/drill" 2>&1
wait_node c1 60
expect_eq "world-netns torchrun: the preempted node exits 75 after the world's commit" 75 "$RC"
[ "$RC" = 75 ] || show c0 c1
t0=$(saved_step c0 1) t1=$(saved_step c1 1)
expect_ge "world-netns torchrun: rank 0 saved generation 1" 0 "$t0"
expect_eq "world-netns torchrun: both ranks saved the same step" "$t0" "$t1"
expect_lt "world-netns torchrun: ... before the end of training" $((NSTEPS - 1)) "$t0"
check "world-netns torchrun: the commit record names two ranks" \
    grep -q '"world_size":2' "$T/store/$JOB/gens/00000001/COMMIT.json"
check "world-netns torchrun: rank 0 stops its torchrun and waits" \
    wait_for 20 has '"event":"parked"' "$T/c0.ev"
expect_eq "world-netns torchrun: the workers stopped at one step" 1 \
    "$(cat "$T/c0.out" "$T/c1.out" | grep '^stopped at step ' | sort -u | wc -l)"
node c1b 1 1 2 --master-port $MPORT -- "${TRW[@]}"
for n in c0 c1b; do
    wait_node $n 120
    expect_eq "world-netns torchrun: $n finishes the run" 0 "$RC"
    [ "$RC" = 0 ] || show $n
    # The survivor resumes from the copy it saved (work/), the replacement
    # from what it restored (restore/).
    check "world-netns torchrun: $n's worker resumed from its own directory at the next step" \
        grep -qE "^resumed at step $((t0 + 1)) from $T/$n/(work/gen-00000001|restore/gen-00000001-rank-[01])/w0\$" "$T/$n.out"
done
# Each rank's shard holds its own RNG states (train.py seeds batches and
# dropout by rank): the replacement must restore rank 1's, not rank 0's.
for r in 0 1; do
    "$SPOTCTL" fetch --store "file://$T/store" --job "$JOB" --gen 1 --rank $r "$T/fetch$r" \
        >/dev/null 2>&1
done
check "world-netns torchrun: the ranks' shards differ (rank-specific RNG states)" \
    eval '! cmp -s "$T/fetch0/w0/ckpt.pt" "$T/fetch1/w0/ckpt.pt"'
check "world-netns torchrun: the replacement restored rank 1's shard" \
    cmp -s "$T/fetch1/w0/ckpt.pt" "$T/c1b/restore/gen-00000001-rank-1/w0/ckpt.pt"
expect_eq "world-netns torchrun: the final model equals an uninterrupted run's" "$ref2" \
    "$(grep '^done ' "$T/c0.out" | tail -n 1)"
expect_eq "world-netns torchrun: ... on both nodes" "$rh1" \
    "$(grep '^rank 1 sha256 ' "$T/c1b.err" | tail -n 1)"
check "world-netns: no process of the test is left" wait_for 10 none_left
