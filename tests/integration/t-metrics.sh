# --metrics: /metrics scraped with curl while the C trainer checkpoints,
# every scrape parsed by a strict exposition parser (promparse.py), and the
# values checked against what the event log says happened.
. "$(dirname "$0")/lib.sh"

TRAINER=$TOP/$O/examples/c-trainer/trainer
ADDR=$(free_ports 1)
URL=http://$ADDR/metrics
mkdir -p "$T/store"

# scrape NAME: /metrics into $T/NAME.txt, parsed into $T/NAME.json; fails
# (saying why on stderr) when curl or the parser does.
scrape() {
    curl -sS --max-time 5 -o "$T/$1.txt" -w '%{http_code} %{content_type}\n' "$URL" \
        >"$T/$1.http" 2>"$T/$1.curl" &&
        grep -q '^200 text/plain; version=0.0.4' "$T/$1.http" &&
        python3 "$TOP/tests/integration/promparse.py" "$T/$1.txt" >"$T/$1.json" 2>"$T/$1.err"
}
# val NAME SERIES: a sample's value (exactly as exposed: name{labels}), "" when absent.
val() {
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))["samples"]; v=d.get(sys.argv[2])
print("" if v is None else ("%d" % v if v == int(v) else "%r" % v))' "$T/$1.json" "$2"
}
# sum_events FILE EVENT KEY: the sum of KEY over EVENT's records.
sum_events() {
    ev "$1" "$2" | grep -o "\"$3\":[0-9]*" | cut -d: -f2 | awk '{s += $1} END {print s + 0}'
}

# ---- the parser itself refuses what the format does not allow ------------------------------
bad_parse=""
while IFS='|' read -r what text; do
    printf '%b' "$text" >"$T/bad.txt"
    python3 "$TOP/tests/integration/promparse.py" "$T/bad.txt" >/dev/null 2>&1 &&
        bad_parse="$bad_parse [$what]"
done <<'CASES'
no TYPE|a_total 1\n
counter without _total|# HELP a x\n# TYPE a counter\na 1\n
series twice|# HELP a x\n# TYPE a gauge\na 1\na 2\n
bad escape|# HELP a x\n# TYPE a gauge\na{l="\\q"} 1\n
not cumulative|# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n
no +Inf|# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n
apart|# HELP a x\n# TYPE a gauge\na{l="1"} 1\n# HELP b x\n# TYPE b gauge\nb 1\na{l="2"} 1\n
no newline at the end|# HELP a x\n# TYPE a gauge\na 1
CASES
expect_eq "the strict parser refuses every malformed exposition" "" "$bad_parse"

# ---- a job with checkpoints ------------------------------------------------------------------
# The trainer sleeps 1 ms a step: it runs until the drill below ends it,
# and needs only to move on between the checkpoints, not to spin a core.
TRAINER_STEP_US=1000 start_spotd run --job m --store "file://$T/store" --state-dir "$T/n1" \
    --cloud none --metrics "$ADDR" --events "$T/ev" -- "$TRAINER" 200000 32
check "spotd serves /metrics once started" wait_for 10 scrape first
check "... the trainer is connected" wait_for 10 eval \
    '[ "$(status_get "$T/n1" workers)" = 1 ]'

# Scrapes in a loop, all through the checkpoints below (curl alone, to
# scrape often; every answer is parsed afterwards).
mkdir -p "$T/loop"
(
    i=0
    # At least 10, however fast the checkpoints are on this machine.
    while { [ ! -e "$T/stop-scraping" ] || [ $i -lt 10 ]; } && [ $i -lt 2000 ]; do
        i=$((i + 1))
        curl -sS --max-time 5 -o "$T/loop/$i.txt" "$URL" 2>>"$T/loop.curl" || echo "$i" >>"$T/loop-failed"
    done
) &
loop=$!
_bg_pids+=("$loop")
N=3
for i in $(seq 1 $N); do
    "$SPOTCTL" checkpoint --state-dir "$T/n1" >/dev/null 2>&1
    wait_for 20 eval '[ "$(ev "$T/ev" commit | wc -l)" -ge '"$i"' ]' || break
done
expect_eq "three manual checkpoints committed" $N "$(ev "$T/ev" commit | wc -l)"
touch "$T/stop-scraping"
wait "$loop"
nscrapes=$(ls "$T/loop" | wc -l)
bad_scrapes=$(python3 "$TOP/tests/integration/promparse.py" --check "$T"/loop/*.txt \
    2>>"$T/loop.err")
expect_eq "every scrape during the checkpoints was answered and parses strictly" "0|0" \
    "$([ -e "$T/loop-failed" ] && wc -l <"$T/loop-failed" || echo 0)|$bad_scrapes"
[ "$bad_scrapes" = 0 ] || head -n 3 "$T/loop.err"
expect_ge "... many of them ($nscrapes)" 10 "$nscrapes"

scrape after
check "a scrape after them parses" test -s "$T/after.json"
c='spotd_checkpoints_total{trigger="manual",method="app",result="committed"}'
expect_eq "checkpoints_total counts the committed manual checkpoints" $N "$(val after "$c")"
for p in save hash_compress upload commit; do
    expect_eq "the $p phase histogram has one observation per checkpoint" $N \
        "$(val after "spotd_checkpoint_phase_seconds_count{phase=\"$p\"}")"
done
expect_eq "... restore has none (nothing was restored)" 0 \
    "$(val after 'spotd_checkpoint_phase_seconds_count{phase="restore"}')"
expect_eq "bytes read are the upload_done records' bytes" "$(sum_events "$T/ev" upload_done bytes)" \
    "$(val after spotd_bytes_read_total)"
expect_eq "bytes sent are their bytes_sent" "$(sum_events "$T/ev" upload_done bytes_sent)" \
    "$(val after spotd_bytes_sent_total)"
expect_eq "bytes skipped are their bytes_skipped" \
    "$(sum_events "$T/ev" upload_done bytes_skipped)" "$(val after spotd_bytes_skipped_total)"
expect_eq "the committed generation is the last commit's" \
    "$(jget "$(ev "$T/ev" commit | tail -n 1)" gen)" "$(val after spotd_committed_generation)"
check "the trainer's step is reported" eval '[ "$(val after spotd_trainer_step)" -gt 0 ]'
check "the command's CPU time and resident memory are there" \
    eval 'python3 -c "import sys; sys.exit(not (float(sys.argv[1]) > 0 and float(sys.argv[2]) > 4 * 2**20))" \
          "$(val after spotd_command_cpu_seconds_total)" "$(val after spotd_command_resident_memory_bytes)"'
expect_eq "no notice yet, no restart" "|0" \
    "$(val after 'spotd_notices_total{source="drill",kind="rebalance"}')|$(val after spotd_command_restarts_total)"
expect_eq "every event record was written (t-events.sh fills the disk)" 0 \
    "$(val after spotd_events_dropped_total)"
check "metric names follow the conventions (base units, _total, _seconds, _bytes)" \
    python3 -c 'import json,re,sys
t=json.load(open(sys.argv[1]))["types"]
bad=[n for n in t if not n.startswith(("spotd_","process_")) or re.search(r"_(ms|milliseconds|kb|kib|mb|percent)(_|$)",n)
     or (t[n]=="counter") != n.endswith("_total")]
sys.exit(1 if bad else 0)' "$T/after.json"
check "without NVML: no GPU metrics, and nothing said about it but one info line" \
    eval '! grep -q "^spotd_gpu_" "$T/after.txt" && ! grep -iE "level=(warn|error).*(nvml|gpu)" "$T/stderr"'

"$SPOTCTL" drill --state-dir "$T/n1" --kind rebalance >/dev/null 2>&1
check "an advisory drill is counted by source and kind" wait_for 10 eval \
    'scrape drill && [ "$(val drill "spotd_notices_total{source=\"drill\",kind=\"rebalance\"}")" = 1 ]'

code=$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/other")
expect_eq "another path is 404" 404 "$code"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data x "$URL")
expect_eq "a POST is refused (405)" 405 "$code"

"$SPOTCTL" drill --state-dir "$T/n1" --in 20s >/dev/null 2>&1
wait_exit "$SPOTD_PID" 40
expect_eq "a terminating drill still ends in exit 75" 75 "$RC"

# ---- supervision alone: restarts ----------------------------------------------------------
ADDR2=$(free_ports 1)
URL=http://$ADDR2/metrics
start_spotd run --metrics "$ADDR2" --restart on-failure --max-restarts 5 --cloud none \
    -- sh -c 'sleep 0.3; exit 3'
check "without a job, restarts are counted" wait_for 10 eval \
    'scrape plain && [ "$(val plain spotd_command_restarts_total)" -ge 1 ]'
check "... and there are no checkpoint gauges" \
    eval '! grep -q "^spotd_committed_generation" "$T/plain.txt"'
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 10

# ---- GPUs, through a test double of NVML ------------------------------------------------------
# tests/gpu/fake_nvml.c: GPU 0 87 % busy, 312.456 W; GPU 1 3 % busy, no
# power reading, a name with a tab, quotes and a backslash.  (The real
# library is checked by tests/gpu/run.sh on a GPU machine.)
ADDR3=$(free_ports 1)
URL=http://$ADDR3/metrics
LD_LIBRARY_PATH="$TOP/$O/tests/gpu/fake" start_spotd run --metrics "$ADDR3" --cloud none \
    --gpu-idle-threshold 30 -- sleep 30
check "with NVML: the GPU gauges are served and parse" wait_for 10 eval \
    'scrape gpu && grep -q "^spotd_gpu_utilization_ratio{gpu=\"1\"" "$T/gpu.txt"'
g0='gpu="0",uuid="GPU-00000000-1111-2222-3333-444444444444",name="NVIDIA H100 80GB HBM3"'
expect_eq "GPU 0: utilization as a ratio, memory in bytes, power in watts" \
    "0.87|12884901888|85899345920|64|312.456" \
    "$(val gpu "spotd_gpu_utilization_ratio{$g0}")|$(val gpu "spotd_gpu_memory_used_bytes{$g0}")|$(val gpu "spotd_gpu_memory_total_bytes{$g0}")|$(val gpu "spotd_gpu_temperature_celsius{$g0}")|$(val gpu "spotd_gpu_power_watts{$g0}")"
expect_eq "GPU 1: no power reading, no power series" 1 "$(grep -c '^spotd_gpu_power_watts{' "$T/gpu.txt")"
check "GPU 0 (busy) is not idle; GPU 1 (3 % < 30 %) has been idle for a while" wait_for 10 eval \
    'scrape gpu && [ "$(val gpu "spotd_gpu_idle_seconds{$g0}")" = 0 ] &&
     python3 -c "import json,sys; d=json.load(open(sys.argv[1]))[\"samples\"]
sys.exit(not [v for k, v in d.items() if k.startswith(\"spotd_gpu_idle_seconds{gpu=\\\"1\\\"\") and v >= 1])" "$T/gpu.json"'
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 10

# ---- refused at start ----------------------------------------------------------------------
run_spotd run --metrics 127.0.0.1 --cloud none -- true
check "a metrics address without a port is refused (125), saying the form" \
    eval '[ $RC = 125 ] && grep -q "expected ADDR:PORT or :PORT" "$T/stderr"'
python3 -c 'import socket,time,sys
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)' >"$T/busy" &
_bg_pids+=("$!")
wait_for 5 test -s "$T/busy"
run_spotd run --metrics "127.0.0.1:$(cat "$T/busy")" --cloud none -- true
check "a port in use is refused (125), saying so" \
    eval '[ $RC = 125 ] && grep -q "cannot listen on .* for metrics" "$T/stderr"'
kill "${_bg_pids[-1]}" 2>/dev/null
check "nothing of this test is left running" wait_for 5 none_left
