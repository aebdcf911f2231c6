#!/bin/sh
# make demo: a checkpoint across a simulated interruption, end to end.
#
#   1. the C trainer runs once on its own, never interrupted: its final hash
#      is the reference;
#   2. "node 1": spotd runs it with a file store and a drill (a simulated
#      terminating notice) after 2 s; the trainer saves through libckpt,
#      spotd stores and commits the checkpoint, stops the trainer and exits
#      75 (preempted, state saved);
#   3. spotctl lists the committed generation;
#   4. "node 2", a replacement with an empty state directory: spotd restores
#      the generation and the trainer resumes and finishes;
#   5. its final hash must equal the reference: exit 1 when it does not.
#
# Everything goes under $O/demo (kept for a look afterwards): the store, the
# state directories, the event logs (nodeN.events) and spotd's logs
# (nodeN.log).  Needs only sh, awk and the binaries of `make`.
set -eu
cd "$(dirname "$0")/../.."
O=${O:-build}
SPOTD=$O/spotd
SPOTCTL=$O/spotctl
TRAINER=$O/examples/c-trainer/trainer
STEPS=3000
MIB=2
for b in "$SPOTD" "$SPOTCTL" "$TRAINER"; do
    [ -x "$b" ] || { echo "demo: $b is missing; run: make demo" >&2; exit 1; }
done
dir=$O/demo
rm -rf "$dir"
mkdir -p "$dir/store"

# now_ms: wall clock in ms (date +%s%N is GNU; fall back to whole seconds).
now_ms() {
    t=$(date +%s%N 2>/dev/null)
    case $t in *N | '') echo $(($(date +%s) * 1000)) ;; *) echo $((t / 1000000)) ;; esac
}

# timeline EVENTS: the events that tell the story, one readable line each,
# times relative to spotd's start.  The records are one flat JSON
# object a line (docs/events.md), so awk can pick the fields out.
timeline() {
    [ -s "$1" ] || { echo "   (no event log: spotd did not start)"; return 0; }
    awk '
    function val(k,   s, v) {
        if (!match($0, "\"" k "\":")) return ""
        s = substr($0, RSTART + RLENGTH)
        if (substr(s, 1, 1) == "\"") { s = substr(s, 2); return substr(s, 1, index(s, "\"") - 1) }
        match(s, /^[^,}]*/)
        return substr(s, 1, RLENGTH)
    }
    function ms(ts,   hh, mm, ss) {  # 2026-11-30T16:23:20.756Z -> ms of the day
        hh = substr(ts, 12, 2); mm = substr(ts, 15, 2); ss = substr(ts, 18, 6)
        return ((hh * 60 + mm) * 60 + ss) * 1000
    }
    function mib(b) { return sprintf("%.1f MiB", b / 1048576) }
    function line(what, text,   t) {
        t = ms(val("ts")) - t0
        if (t < -43200000) t += 86400000
        printf "   %+6d ms  %-17s %s\n", t, what, text
    }
    { ev = val("event") }
    t0 == "" { t0 = ms(val("ts")) }
    ev == "start" { line(ev, "spotd " val("version") " starts, pid " val("pid")) }
    ev == "child_start" { line(ev, "the trainer starts, pid " val("pid")) }
    ev == "resume" { line(ev, "generation " val("gen") " (step " val("step") ") restored into " val("dir")) }
    ev == "notice" {
        line(ev, (val("drill") == "true" ? "a drill (simulated notice)" : val("source") " " val("kind")) \
            (val("terminating") == "true" ? ", terminating" : ", advisory") \
            ", deadline in " val("deadline_in_ms") " ms")
    }
    ev == "checkpoint_begin" { line(ev, "generation " val("gen") ": spotd asks the trainer to save") }
    ev == "checkpoint_saved" { line(ev, "the trainer wrote step " val("step") " in " val("ms") " ms") }
    ev == "upload_done" {
        line(ev, mib(val("bytes")) " stored, " mib(val("bytes_sent")) " written, " \
            mib(val("bytes_skipped")) " deduplicated, in " val("ms") " ms")
    }
    ev == "commit" {
        line(ev, "generation " val("gen") " committed at step " val("step") ": save " val("save_ms") \
            " + upload " val("upload_ms") " + commit " val("commit_ms") " = " val("total_ms") " ms")
    }
    ev == "checkpoint_failed" { line(ev, "generation " val("gen") " while " val("phase") ": " val("error")) }
    ev == "stop" || ev == "kill" { line(ev, val("reason") " " val("signal")) }
    ev == "child_exit" { line(ev, "the trainer exited with code " val("code") " after " val("runtime_ms") " ms") }
    ev == "exit" { line(ev, "spotd exits with code " val("code") " (" val("reason") ")") }
    ' "$1"
}

echo "== 1. the reference: $TRAINER $STEPS $MIB, alone, never interrupted"
echo "   (a deterministic trainer: $MIB MiB of state, every word updated each step;"
echo "   it prints a hash of its state at the end)"
t=$(now_ms)
ref=$("$TRAINER" "$STEPS" "$MIB" | tail -n 1)
echo "   $ref   (in $(awk -v ms=$(($(now_ms) - t)) 'BEGIN { printf "%.1f", ms / 1000 }') s)"

store=file://$(cd "$dir/store" && pwd)
echo
echo "== 2. node 1: the same run under spotd, with a drill (a simulated terminating notice) after 2 s"
echo "   \$ spotd run --cloud none --job demo --store $store \\"
echo "         --state-dir $dir/node1 --drill-after 2s --events $dir/node1.events \\"
echo "         -- $TRAINER $STEPS $MIB"
code=0
"$SPOTD" run --cloud none --job demo --store "$store" --state-dir "$dir/node1" \
    --drill-after 2s --events "$dir/node1.events" -- "$TRAINER" "$STEPS" "$MIB" \
    >"$dir/node1.out" 2>"$dir/node1.log" || code=$?
sed 's/^/   trainer: /' "$dir/node1.out"
echo "   what happened ($dir/node1.events; spotd's log: $dir/node1.log):"
timeline "$dir/node1.events"
if [ "$code" -eq 75 ]; then
    echo "   spotd's exit code: 75 = preempted, state saved (the checkpoint is committed)"
else
    echo "   spotd's exit code: $code, expected 75 (preempted, state saved); its log:"
    tail -n 5 "$dir/node1.log" | sed 's/^/   | /'
    exit 1
fi

echo
echo "== 3. the store: spotctl ls --store $store --job demo"
"$SPOTCTL" ls --store "$store" --job demo | sed 's/^/   /'

echo
echo "== 4. node 2, a replacement with an empty state directory: the same command, no drill"
echo "   \$ spotd run --cloud none --job demo --store $store \\"
echo "         --state-dir $dir/node2 --events $dir/node2.events \\"
echo "         -- $TRAINER $STEPS $MIB"
code=0
"$SPOTD" run --cloud none --job demo --store "$store" --state-dir "$dir/node2" \
    --events "$dir/node2.events" -- "$TRAINER" "$STEPS" "$MIB" \
    >"$dir/node2.out" 2>"$dir/node2.log" || code=$?
sed 's/^/   trainer: /' "$dir/node2.out"
echo "   what happened ($dir/node2.events; spotd's log: $dir/node2.log):"
timeline "$dir/node2.events"
got=$(tail -n 1 "$dir/node2.out")

echo
echo "== 5. the result"
echo "   uninterrupted run:      $ref"
echo "   interrupted + resumed:  $got"
if [ "$code" -eq 0 ] && [ "$got" = "$ref" ]; then
    echo "   same final state: the checkpoint lost nothing"
else
    echo "   MISMATCH (node 2 exited with $code): the resumed run does not end where the uninterrupted one does"
    exit 1
fi
