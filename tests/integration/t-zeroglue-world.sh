# A world of two nodes whose unchanged DDP trainer (examples/plain/train.py
# under torchrun --nnodes 2: no libckpt, no spotd variables) writes its
# checkpoints on global rank 0 only, run with flags only: --method dir
# --saved-when exit --ckpt-writers rank0.  Rank 0's checkpoints go up as
# they appear, the other node's shard empty.  A notice on rank 1: both
# nodes' workers get SIGTERM, agree on a step, rank 0 saves and all exit
# 75; the generation holds rank 0's file and its step, rank 1 exits 75,
# rank 0 waits.  A replacement for rank 1 with an empty CKPT_DIR gets rank
# 0's checkpoint back there, both trainers resume from it by themselves,
# and the final model equals an uninterrupted two-rank run's.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"

TRAIN="$TOP/examples/plain/train.py"
need_torch zero-glue-world
mkdir -p "$T/store"
S="file://$T/store"
NSTEPS=1500
export SAVE_EVERY=150
KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$KEY" >"$T/key"
chmod 600 "$T/key"
tr_port() { local p; p=$(free_ports 1); echo "${p#*:}"; }
L="zero-glue world"

ref=$(CKPT_DIR="$T/ref" timeout -k 2 300 /usr/bin/torchrun --nnodes 1 --nproc_per_node 2 \
    --master_addr 127.0.0.1 --master_port "$(tr_port)" --redirects 9:0 --tee 9:0 \
    --monitor_interval 1 "$TRAIN" $NSTEPS 2>"$T/ref.err" | grep '^done' | tail -n 1)
check "$L: an uninterrupted two-rank run ends with its model's hash" \
    grep -qxE "done $NSTEPS sha256 [0-9a-f]{64}" <<<"$ref"

# node NAME RANK [ARGS...]: one node in the background, its trainer under
# torchrun with the world's rank and master address, CKPT_DIR its own.
P=$(free_ports 2) MP=$(tr_port)
node() {
    local name=$1 rank=$2
    shift 2
    mkdir -p "$T/$name-ck"
    "$SPOTD" run --cloud none --job zgw --store "$S" --state-dir "$T/$name" \
        --rank "$rank" --world-size 2 --peers "$P" --world-key-file "$T/key" \
        --master-port "$MP" --method dir --ckpt-dir "$T/$name-ck" --settle 2s \
        --saved-when exit --ckpt-writers rank0 --events "$T/$name.ev" --grace 10s "$@" -- \
        env CKPT_DIR="$T/$name-ck" STEP_MS=4 /usr/bin/torchrun --nnodes 2 --node_rank '{rank}' \
        --nproc_per_node 1 --master_addr '{master_addr}' --master_port '{master_port}' \
        --redirects 9:0 --tee 9:0 --monitor_interval 1 "$TRAIN" $NSTEPS \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}

node n0 0
node n1 1 --notice-file "$T/n1-notice"
committed() { has '"event":"commit"' "$T/n0.ev" || ! alive "${PID[n0]}" || ! alive "${PID[n1]}"; }
check "$L: a checkpoint rank 0 wrote is committed while the world trains" wait_for 120 committed
first=$(jget "$(ev "$T/n0.ev" commit | head -n 1)" step)
expect_ge "$L: ... one of its periodic saves" $((SAVE_EVERY - 1)) "${first:--1}"
check "$L: ... the other node's shard of it is empty" \
    grep -q "its shard is empty, global rank 0's is the checkpoint" "$T/n1.err"

touch "$T/n1-notice"
wait_node n1 60
expect_eq "$L: the node with the notice exits 75 after the world's commit" 75 "$RC"
[ "$RC" = 75 ] || show n0 n1
STOPPED=$(sed -n 's/^stopped at step //p' "$T/n0.out" | tail -n 1)
gen=$(jget "$(ev "$T/n0.ev" commit | tail -n 1)" gen)
STEP=$(jget "$(ev "$T/n0.ev" commit | tail -n 1)" step)
expect_eq "$L: the generation is the step the workers saved on the signal" \
    "$((${STOPPED:-0} - 1))" "${STEP:--1}"
[ -n "$gen" ] || { fail "$L: a generation was committed for the notice"; show n0 n1; exit 1; }
rec="$T/store/zgw/gens/$(printf %08d "$gen")"
expect_eq "$L: its commit record names two ranks and that step" "2 ${STEP:--1}" \
    "$(jq_ '"%d %d" % (d["world_size"], d["step"])' "$rec/COMMIT.json")"
expect_eq "$L: rank 1's shard holds no file" 0 "$(jq_ 'len(d["files"])' "$rec/rank-1.json")"
expect_eq "$L: rank 0's shard holds the checkpoint under its own name" \
    "$(printf 'ckpt-%08d.pt' "${STEP:-0}")" "$(jq_ '[f["path"] for f in d["files"]]' "$rec/rank-0.json")"
check "$L: rank 0 waits for the world, its trainer stopped" \
    eval 'alive "${PID[n0]}" && has "\"event\":\"parked\"" "$T/n0.ev"'

# The replacement: an empty CKPT_DIR; rank 0's checkpoint is put there.
node n1b 1
nodes_finish "$L" 120 n0
wait_node n1b 60
expect_eq "$L: the replacement finishes" 0 "$RC"
[ "$RC" = 0 ] || show n0 n1b
for n in n0 n1b; do
    check "$L: $n's trainer resumes by itself from the committed step" \
        grep -qF "resumed at step $((STEP + 1)) from $T/$n-ck/$(printf 'ckpt-%08d.pt' "$STEP")" \
        "$T/$n.out"
done

# --ckpt-readers rank0: rank 0's checkpoint goes back to rank 0's node only.
# A shell trainer stands for the DDP one: on SIGTERM rank 0 writes its
# file, every rank exits 75.
L="zero-glue world, readers rank0"
P=$(free_ports 2) MP=$(tr_port)
snode() {
    local name=$1 rank=$2
    shift 2
    mkdir -p "$T/$name-ck"
    "$SPOTD" run --cloud none --job zgw-rd --store "$S" --state-dir "$T/$name" \
        --rank "$rank" --world-size 2 --peers "$P" --world-key-file "$T/key" \
        --master-port "$MP" --method signal --ckpt-dir "$T/$name-ck" --saved-when exit \
        --ckpt-writers rank0 --ckpt-readers rank0 --events "$T/$name.ev" "$@" -- \
        sh -c 'trap "[ $0 = 0 ] && echo s >$1/ckpt-00000042.pt; exit 75" TERM
               while :; do sleep 0.1; done' '{rank}' "$T/$name-ck" \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}
snode m0 0
snode m1 1 --notice-file "$T/m1-notice"
check "$L: both nodes start their trainers" wait_for 30 started m0 m1
touch "$T/m1-notice"
wait_node m1 30
expect_eq "$L: the node with the notice exits 75" 75 "$RC"
[ "$RC" = 75 ] || show m0 m1
expect_eq "$L: rank 0's file is the generation" 42 \
    "$(jget "$(ev "$T/m0.ev" commit | tail -n 1)" step)"
snode m1b 1
resumed2() { [ "$(ev "$T/m0.ev" child_start | wc -l)" = 2 ] && started m1b; }
check "$L: the world resumes with the replacement" wait_for 30 resumed2
check "$L: rank 0's node has its checkpoint" test -s "$T/m0-ck/ckpt-00000042.pt"
expect_eq "$L: the replacement's folder stays empty" "" "$(ls -A "$T/m1b-ck")"
check "$L: ... though it resumed from the generation, at its step" \
    has '"event":"resume","gen":1,"step":42,' "$T/m1b.ev"
{
    kill_tree "${PID[m0]}"
    kill_tree "${PID[m1b]}"
    wait "${PID[m0]}" "${PID[m1b]}"
} 2>/dev/null
L="zero-glue world"

# What cannot work is refused before anything starts, saying why.
refused() {
    run_spotd run --cloud none --job zgw-r --store "$S" --state-dir "$T/r" "$@" -- true
    [ "$RC" = 125 ]
}
W=(--world-size 2 --rank 0 --peers "$P" --world-key-file "$T/key")
check "$L: a world of the dir method where every rank writes is refused" \
    refused "${W[@]}" --method dir --ckpt-dir "$T/r-ck"
check "$L: ... naming --ckpt-writers rank0" grep -q "run every node with --ckpt-writers rank0" \
    "$T/stderr"
check "$L: --ckpt-writers with the app method is refused" refused "${W[@]}" --ckpt-writers rank0
check "$L: --ckpt-writers for a node alone is refused" \
    refused --method dir --ckpt-dir "$T/r-ck" --ckpt-writers rank0
check "$L: --ckpt-readers without --ckpt-writers rank0 is refused" \
    refused "${W[@]}" --method signal --ckpt-readers rank0
check "$L: no process of the test is left" wait_for 10 none_left
