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
#
# When this spotd has --metrics, the first node serves them and they are
# scraped while devmem runs: the GPU gauges (NVML through supervisord/nvml.c)
# follow the table, one row a GPU, and must agree with nvidia-smi (UUIDs,
# memory totals) and show devmem's memory in use.  The unit test of nvml.c
# runs against the real library first.
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
unit=ok
if [ -x "$root/$O/tests/unit/run" ] || make -C "$root" "$O/tests/unit/run" >/dev/null; then
    "$root/$O/tests/unit/run" nvml_open | sed 's/^/gpu: /' || unit=bad
fi

# The GPU gauges: --metrics on the first node when this spotd has it.
metrics=()
if "$SPOTD" help 2>/dev/null | grep '^metrics ' | grep -vq 'not implemented'; then
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 19464)
    metrics=(--metrics "127.0.0.1:$PORT")
else
    say "this spotd has no --metrics: the GPU gauges are not checked"
fi

ref=$("$T/devmem" "$MIB" "$STEPS" | tail -n 1)
say "uninterrupted: $ref"
mkdir -p "$T/store"
"$SPOTD" run --job g --store "file://$T/store" --state-dir "$T/n1" --method criu \
    --criu "$CRIU" --cloud none --notice-file "$T/notice" --events "$T/ev1" \
    ${metrics[@]+"${metrics[@]}"} -- "$T/devmem" "$MIB" "$STEPS" >"$T/n1.out" 2>"$T/n1.err" &
pid=$!
for _ in $(seq 300); do grep -q "^step 300" "$T/n1.out" && break; sleep 0.1; done
if [ ${#metrics[@]} -gt 0 ]; then
    sleep 1.5 # a GPU sample (one a second) with devmem's memory in place
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$T/metrics" || say "cannot scrape /metrics"
    nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits \
        >"$T/smi"
fi
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

# The GPU rows of the scrape, against nvidia-smi's figures of the same moment:
# the UUIDs and memory totals equal, memory in use within 1 GiB (nvidia-smi
# may leave out what the driver reserves), devmem's MiB in use somewhere.
# Utilization may be absent (NVML does not report it for a MIG-enabled GPU).
gauges=ok
# gauge NAME UUID: its value for that GPU ("-" when absent).
gauge() {
    awk -v n="$1{" -v u="uuid=\"$2\"" 'index($0, n) == 1 && index($0, u) { v = $NF }
        END { print (v == "" ? "-" : v) }' "$T/metrics" 2>/dev/null || echo -
}
mib() { if [ "$1" = - ]; then echo -; else echo $(( ${1%.*} / 1048576 )); fi; }
short() { if [ "$1" = - ]; then echo -; else awk -v v="$1" 'BEGIN { printf "%.4g", v }'; fi; }
if [ ${#metrics[@]} -gt 0 ]; then
    printf '%-4s %-42s %6s %10s %10s %6s %8s %7s  %s\n' GPU uuid util "used MiB" "total MiB" \
        temp power "idle s" name
    used_max=0
    while IFS=, read -r idx uuid total used_smi; do
        uuid=${uuid# } total=${total# } used_smi=${used_smi# }
        util=$(gauge spotd_gpu_utilization_ratio "$uuid")
        used=$(mib "$(gauge spotd_gpu_memory_used_bytes "$uuid")")
        mtot=$(mib "$(gauge spotd_gpu_memory_total_bytes "$uuid")")
        name=$(grep -F "uuid=\"$uuid\"" "$T/metrics" 2>/dev/null | head -n 1 |
               sed 's/.*name="\([^"]*\)".*/\1/')
        printf '%-4s %-42s %6s %10s %10s %6s %8s %7s  %s\n' "$idx" "$uuid" "$(short "$util")" \
            "$used" "$mtot" "$(short "$(gauge spotd_gpu_temperature_celsius "$uuid")")" \
            "$(short "$(gauge spotd_gpu_power_watts "$uuid")")" \
            "$(short "$(gauge spotd_gpu_idle_seconds "$uuid")")" "$name"
        [[ $used_smi =~ ^[0-9]+$ ]] || used_smi=$used
        if [ "$used" = - ] || [ "$mtot" != "$total" ] ||
           [ $((used - used_smi)) -gt 1024 ] || [ $((used_smi - used)) -gt 1024 ]; then
            say "GPU $idx ($uuid): memory $used of $mtot MiB where nvidia-smi says $used_smi of $total"
            gauges=bad
        elif [ "$used" -gt "$used_max" ]; then
            used_max=$used
        fi
    done <"$T/smi"
    if [ "$used_max" -lt "$MIB" ]; then
        say "no GPU shows devmem's $MIB MiB in use (most: $used_max MiB)"
        gauges=bad
    fi
    echo
fi
if [ "$rc1" = 75 ] && [ "$rc2" = 0 ] && [ "$got" = "$ref" ] && [ "$gauges" = ok ] &&
   [ "$unit" = ok ]; then
    say "PASS: checkpointed, restored on a new node, the sum equals the uninterrupted run's${metrics[0]+; the GPU gauges agree with nvidia-smi}"
    exit 0
fi
say "FAIL: first node $rc1 (75 expected), second $rc2 (0 expected), '$got' vs '$ref', GPU gauges $gauges, unit test of nvml.c $unit"
tail -n 20 "$T/n1.err" "$T/n2.err" "$T/n1/criu/"*.log "$T/n2/criu/"*.log 2>/dev/null
exit 1
