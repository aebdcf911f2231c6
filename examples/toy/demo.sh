#!/bin/sh
# make demo: spotd wraps the toy trainer, restarts it after a crash, then
# stops it on a simulated interruption (SIGTERM, as systemd, Kubernetes or
# an ACPI soft-off from the cloud deliver it) and shows the event log.
set -eu
cd "$(dirname "$0")/../.."
O=${O:-build}
dir=$O/demo
rm -rf "$dir"
mkdir -p "$dir"

echo "== spotd run --restart on-failure --grace 5s --events $dir/events.jsonl -- examples/toy/train.sh"
"$O/spotd" run --restart on-failure --max-restarts 3 --grace 5s --events "$dir/events.jsonl" \
    -- examples/toy/train.sh "$dir" &
pid=$!
# Wait for the restarted trainer to make progress past the crash.
i=0
while [ "$(cat "$dir/step" 2>/dev/null || echo 0)" -lt 7 ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
echo "== simulated interruption notice: SIGTERM to spotd (pid $pid)"
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
echo "== spotd exited with code $code; the trainer reached step $(cat "$dir/step")"
echo "== event log ($dir/events.jsonl):"
cat "$dir/events.jsonl"
[ "$code" -eq 0 ]
