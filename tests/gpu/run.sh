#!/usr/bin/env bash
# The criu method with a CUDA process, on a machine with an NVIDIA GPU
# (driver 550 or later, nvcc): not part of `make check`, run it wherever a
# GPU is at hand (the device tool) and keep its table in the issue's note.
#
#   tests/gpu/run.sh            # from the repository, after make; as root
#   GPU_MIB=4096 tests/gpu/run.sh
#
# devmem.cu keeps GPU_MIB MiB (1024) in device memory and updates it each
# step.  It runs uninterrupted once for its sum; then under spotd run
# --method criu with a notice: the CUDA process is locked, checkpointed,
# dumped by CRIU, uploaded; a new node restores it (criu restore, then the
# CUDA restore and unlock) and it finishes.  PASS when the sum equals the
# uninterrupted run's.  The table, in ms: lock and checkpoint (GPU memory
# to host) of the CUDA process, save (those and the CRIU dump), upload,
# fetch+start (the new node's start to its command's: fetch and criu
# restore), cuda restore (GPU memory back, unlock).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
O=${O:-build}
MIB=${GPU_MIB:-1024}
STEPS=${GPU_STEPS:-1500}
SPOTD="$root/$O/spotd"
say() { echo "gpu: $*"; }

[ "$(id -u)" = 0 ] || { say "SKIP: needs root (CRIU)"; exit 0; }
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 ||
    { say "SKIP: no NVIDIA GPU here"; exit 0; }
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) ||
    { say "SKIP: no nvcc"; exit 0; }
[ -x "$SPOTD" ] || make -C "$root" -j"$(nproc)" >/dev/null || exit 1
CRIU=$("$root/tests/servers/criu.sh" "${SPOTD_CRIU_DIR:-$root/build-criu}") ||
    { say "FAIL: no criu works here"; exit 1; }
T=$(mktemp -d /tmp/spotd-gpu.XXXXXX)
trap 'pkill -KILL -f "$T/" 2>/dev/null; rm -rf "$T"' EXIT
"$NVCC" -O2 -o "$T/devmem" "$root/tests/gpu/devmem.cu" || { say "FAIL: nvcc"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
"$SPOTD" _cuda inventory | sed 's/^/gpu: inventory /'

ref=$("$T/devmem" "$MIB" "$STEPS" | tail -n 1)
say "uninterrupted: $ref"
mkdir -p "$T/store"
"$SPOTD" run --job g --store "file://$T/store" --state-dir "$T/n1" --method criu \
    --criu "$CRIU" --cloud none --notice-file "$T/notice" --events "$T/ev1" \
    -- "$T/devmem" "$MIB" "$STEPS" >"$T/n1.out" 2>"$T/n1.err" &
pid=$!
for _ in $(seq 300); do grep -q "^step 300" "$T/n1.out" && break; sleep 0.1; done
touch "$T/notice"
wait "$pid"
rc1=$?
"$SPOTD" run --job g --store "file://$T/store" --state-dir "$T/n2" --method criu \
    --criu "$CRIU" --cloud none --events "$T/ev2" \
    -- "$T/devmem" "$MIB" "$STEPS" >"$T/n2.out" 2>"$T/n2.err"
rc2=$?
got=$(tail -n 1 "$T/n2.out")

ms() { grep -o "$2 [0-9]*" "$1" 2>/dev/null | head -n 1 | cut -d' ' -f2; }
t0=$(date -d "$(grep -o '"ts":"[^"]*"' "$T/ev2" | head -n 1 | cut -d'"' -f4)" +%s%3N 2>/dev/null)
t1=$(date -d "$(grep '"event":"child_start"' "$T/ev2" | grep -o '"ts":"[^"]*"' | cut -d'"' -f4)" +%s%3N 2>/dev/null)
printf '\n%-10s %8s %12s %8s %8s %14s %14s\n' MiB lock checkpoint save upload "fetch+start" "cuda restore"
printf '%-10s %8s %12s %8s %8s %14s %14s\n' "$MIB" "$(ms "$T/n1/criu/cuda-checkpoint.log" lock_ms)" \
    "$(ms "$T/n1/criu/cuda-checkpoint.log" checkpoint_ms)" \
    "$(grep '"event":"checkpoint_saved"' "$T/ev1" | grep -o '"ms":[0-9]*' | cut -d: -f2)" \
    "$(grep '"event":"upload_done"' "$T/ev1" | grep -o '"ms":[0-9]*' | cut -d: -f2)" \
    "$((t1 - t0))" "$(ms "$T/n2/criu/cuda-restore.log" restore_ms)"
echo
if [ "$rc1" = 75 ] && [ "$rc2" = 0 ] && [ "$got" = "$ref" ]; then
    say "PASS: checkpointed, restored on a new node, the sum equals the uninterrupted run's"
    exit 0
fi
say "FAIL: first node $rc1 (75 expected), second $rc2 (0 expected), '$got' vs '$ref'"
tail -n 20 "$T/n1.err" "$T/n2.err" "$T/n1/criu/"*.log "$T/n2/criu/"*.log 2>/dev/null
exit 1
