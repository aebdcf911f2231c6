#!/bin/sh
# make demo: spotd wraps the toy trainer, restarts it after a crash, then
# takes a simulated interruption notice (a drill: terminate, 8 s deadline)
# and stops the trainer in time for it: the stop signal at deadline -
# margin - grace, which the trainer answers by saving.  Prints the event log.
set -eu
cd "$(dirname "$0")/../.."
O=${O:-build}
dir=$O/demo
rm -rf "$dir"
mkdir -p "$dir"

set -- --cloud none --restart on-failure --max-restarts 3 \
    --drill-after 4s:terminate --signal-deadline 8s --notice-margin 1s --grace 3s \
    --events "$dir/events.jsonl"
echo "== spotd run $* -- examples/toy/train.sh $dir"
code=0
"$O/spotd" run "$@" -- examples/toy/train.sh "$dir" || code=$?
echo "== spotd exited with code $code; the trainer saved step $(cat "$dir/step")"
echo "== event log ($dir/events.jsonl):"
cat "$dir/events.jsonl"
[ "$code" -eq 0 ]
