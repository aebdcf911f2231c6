# NVML without a GPU: supervisord/nvml.c and what is built on it (`spotd
# _cuda inventory`, the GPU gauges of --metrics) against a test double of
# the driver's libnvidia-ml.so.1 (tests/gpu/fake_nvml.c, loaded through
# LD_LIBRARY_PATH: two GPUs with fixed values, one without power, one with
# hostile strings), and against no NVML at all.  The real driver's path is
# checked by tests/gpu/run.sh on a machine with a GPU.
. "$(dirname "$0")/lib.sh"

FAKE="$TOP/$O/tests/gpu/fake"
if [ ! -e "$FAKE/libnvidia-ml.so.1" ]; then
    fail "nvml: the test double is built" "no $FAKE/libnvidia-ml.so.1 (make check builds it)"
    exit 1
fi
# Whether this machine has the real library (then "absent" cannot be tried).
real_nvml() { ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1 '; }

# ---- the module, through the unit test (tests/unit/test_nvml.c) -------------------
LD_LIBRARY_PATH="$FAKE" "$TOP/$O/tests/unit/run" nvml_open >"$T/unit.out" 2>&1
expect_eq "nvml: the double's two GPUs read exactly (power NOT_SUPPORTED absent, strings made printable, its descriptor close-on-exec, shut down at close)" \
    0 "$?"
grep -v '^PASS: \|passed,' "$T/unit.out" | sed 's/^/  /'

# ---- spotd _cuda inventory ---------------------------------------------------------
uuid1="GPU-$(printf 'f%.0s' $(seq 91))"
want='{"driver":"555.42.06","gpus":[{"model":"NVIDIA H100 80GB HBM3","uuid":"GPU-00000000-1111-2222-3333-444444444444"},{"model":"Fake?GPU ?1? ? 24GB","uuid":"'$uuid1'"}]}'
got=$(LD_LIBRARY_PATH="$FAKE" "$SPOTD" _cuda inventory 2>"$T/inv.err")
expect_eq "nvml: spotd _cuda inventory lists the double's GPUs as the criu method records them" \
    "$want" "$got"
check "nvml: ... as strict JSON" eval 'printf "%s\n" "$got" | python3 "$STRICTJSON" check' 
if real_nvml; then
    echo "SKIP: nvml: spotd _cuda inventory without NVML (this machine has NVML)"
else
    "$SPOTD" _cuda inventory >"$T/inv.out" 2>"$T/inv.err"
    expect_eq "nvml: without NVML, spotd _cuda inventory exits 3" 3 "$?"
    expect_eq "nvml: ... and says why in one line" \
        "no NVIDIA GPU inventory: NVML (libnvidia-ml.so.1) is not installed" "$(cat "$T/inv.err")"
fi

# ---- the GPU gauges of /metrics ----------------------------------------------------
if ! "$SPOTD" help 2>/dev/null | grep -q '^metrics .*--metrics' ||
   "$SPOTD" help 2>/dev/null | grep '^metrics ' | grep -q 'not implemented'; then
    echo "SKIP: nvml: GPU gauges in /metrics (this spotd has no --metrics)"
    exit 0
fi
scrape() {
    python3 -c 'import sys,urllib.request
sys.stdout.write(urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=5).read().decode())' "$1"
}
# The command lists where its descriptors lead: one run with NVML loaded in
# spotd, one without, must list the same.
# (The files spotd's stdout and stderr go to differ by name: FILE.)
# A shell pipeline would race with its own pipes (one of them, not yet
# closed by the shell, was seen once): the listing is one Python process.
lister='import os, sys, time
out = []
for f in os.listdir("/proc/self/fd"):
    try:
        t = os.readlink("/proc/self/fd/" + f)
    except OSError:
        continue
    if not t.startswith("/proc/"):
        out.append(t)
print("\n".join(sorted(out)), flush=True)
time.sleep(float(sys.argv[1]))'
fds_of() { sed "s|^$T/.*|FILE|" "$1"; }
addr=$(free_ports 1)
LD_LIBRARY_PATH="$FAKE" "$SPOTD" run --cloud none --metrics "$addr" --gpu-idle-threshold 30 \
    -- python3 -c "$lister" 20 >"$T/m.out" 2>"$T/m.err" &
pid=$!
_bg_pids+=("$pid")
wait_for 15 eval 'scrape "$addr" >"$T/m1" 2>/dev/null'
g0='gpu="0",uuid="GPU-00000000-1111-2222-3333-444444444444",name="NVIDIA H100 80GB HBM3"'
g1='gpu="1",uuid="'$uuid1'",name="Fake?GPU ?1? ? 24GB"'
row() { grep -F "$1{$2} " "$T/m1" | sed 's/.*} //'; }
num() { python3 -c 'import sys; print(round(float(sys.argv[1]), 6))' "${1:-nan}" 2>/dev/null; }
expect_eq "nvml: /metrics: GPU 0's utilization" 0.87 "$(num "$(row spotd_gpu_utilization_ratio "$g0")")"
expect_eq "nvml: /metrics: GPU 1's (3 %)" 0.03 "$(num "$(row spotd_gpu_utilization_ratio "$g1")")"
expect_eq "nvml: /metrics: memory used and total" "12884901888 85899345920 1073741824 25769803776" \
    "$(row spotd_gpu_memory_used_bytes "$g0") $(row spotd_gpu_memory_total_bytes "$g0") $(row spotd_gpu_memory_used_bytes "$g1") $(row spotd_gpu_memory_total_bytes "$g1")"
expect_eq "nvml: /metrics: temperatures" "64 41" \
    "$(row spotd_gpu_temperature_celsius "$g0") $(row spotd_gpu_temperature_celsius "$g1")"
expect_eq "nvml: /metrics: GPU 0's power" 312.456 "$(num "$(row spotd_gpu_power_watts "$g0")")"
expect_eq "nvml: /metrics: no power row for GPU 1 (NOT_SUPPORTED)" 0 \
    "$(grep -c '^spotd_gpu_power_watts{gpu="1"' "$T/m1")"
# idle SCRAPE GPU_LABELS: the idle seconds of that GPU in that scrape.
idle() { grep -F "spotd_gpu_idle_seconds{$2} " "$1" | sed 's/.*} //'; }
idle_grows() {
    scrape "$addr" >"$T/m2" 2>/dev/null &&
        python3 -c 'import sys; assert float(sys.argv[1]) > 1' "$(idle "$T/m2" "$g1")" 2>/dev/null
}
wait_for 15 idle_grows
check "nvml: /metrics: GPU 0 (87 %) is not idle, GPU 1 (3 %, under 30 %) has been for a while" \
    python3 -c 'import sys; assert float(sys.argv[1]) == 0 and float(sys.argv[2]) > 1' \
    "$(idle "$T/m2" "$g0")" "$(idle "$T/m2" "$g1")"
cp "$T/m.err" "$T/m.err.running" # (the TERM below is a notice, logged as a warning)
kill -TERM "$pid"
wait_exit "$pid" 10
"$SPOTD" run --cloud none -- python3 -c "$lister" 0 >"$T/plain.out" 2>"$T/plain.err"
expect_eq "nvml: the command inherits no descriptor NVML opened in spotd" \
    "$(fds_of "$T/plain.out")" "$(fds_of "$T/m.out")"
check "nvml: ... and spotd said nothing above info" \
    eval '! grep -Eq "level=(warn|error)" "$T/m.err.running"'

if ! real_nvml; then
    addr=$(free_ports 1)
    start_spotd run --cloud none --metrics "$addr" -- sleep 3
    wait_for 15 eval 'scrape "$addr" >"$T/m3" 2>/dev/null'
    check "nvml: without NVML, /metrics has no GPU rows" eval '! grep -q "^spotd_gpu_" "$T/m3"'
    wait_exit "$SPOTD_PID" 10
    check "nvml: ... and spotd says nothing above info" \
        eval '! grep -Eq "level=(warn|error)" "$T/stderr"'
fi
