#!/bin/sh
# A toy trainer for the demo: one "step" every 0.3 s, its progress saved to
# STATE_DIR/step after every step, resumed from there on a restart.  It
# crashes once (exit 1) at step 4 of its first run, to show a restart, and
# saves and exits 0 on SIGTERM, the way a trainer answers a stop.
dir=${1:?usage: train.sh STATE_DIR}
step=$(cat "$dir/step" 2>/dev/null || echo 0)
echo "train: starting at step $step (pid $$)"
trap 'echo "train: SIGTERM at step $step: saved, exiting"; exit 0' TERM
while :; do
    step=$((step + 1))
    echo "$step" > "$dir/step.tmp" && mv "$dir/step.tmp" "$dir/step"
    echo "train: step $step"
    if [ "$step" -eq 4 ] && [ ! -e "$dir/crashed" ]; then
        : > "$dir/crashed"
        echo "train: simulated crash at step $step"
        exit 1
    fi
    sleep 0.3 &
    wait $!
done
