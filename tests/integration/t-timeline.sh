# The notice timeline: after a notice, one `timeline` event (log line and
# event log) that splits the time from the notice to the commit into its
# phases, or names the phase in which the deadline was missed.
. "$(dirname "$0")/lib.sh"

TRAINER=$TOP/$O/examples/c-trainer/trainer
mkdir -p "$T/store"

# ---- a notice whose checkpoint fits -----------------------------------------------------------
run_spotd run --job t --store "file://$T/store" --state-dir "$T/a" --cloud none \
    --drill-after 2s:terminate --events "$T/eva" -- "$TRAINER" 100000 8
expect_eq "the drill's checkpoint commits, spotd exits 75" 75 "$RC"
tl=$(ev "$T/eva" timeline)
expect_eq "one timeline record for the notice" 1 "$(printf '%s\n' "$tl" | grep -c timeline)"
check "... it follows the commit in the event log" \
    eval '[ "$(events_of "$T/eva" | grep -o "commit timeline")" = "commit timeline" ]'
expect_eq "... committed, generation 1, the notice named" "committed|1|drill terminate" \
    "$(jget "$tl" result)|$(jget "$tl" gen)|$(jget "$tl" notice)"
sum=$(( $(jget "$tl" wait_ms) + $(jget "$tl" save_ms) + $(jget "$tl" upload_ms) + $(jget "$tl" commit_ms) ))
expect_eq "... its phases add up to the total" "$(jget "$tl" total_ms)" "$sum"
expect_eq "... its margin is the commit's" "$(jget "$(ev "$T/eva" commit)" margin_ms)" \
    "$(jget "$tl" margin_ms)"
check "... and nothing missed" eval '! grep -q missed_in <<<"$tl"'
check "the log line reads as a sentence" \
    grep -q 'msg="notice drill terminate: wait [0-9]* + save [0-9]* + upload [0-9]* + commit [0-9]* = [0-9]* ms (committed); [0-9]* ms to spare"' "$T/stderr"

# ---- a notice whose deadline is already too close -----------------------------------------------
# 1 s to the deadline with the default 30 s grace: the checkpoint's own
# deadline is already past when it begins, so the timeline says it was
# missed, in the save.
start_spotd run --job t --store "file://$T/store" --state-dir "$T/b" --cloud none \
    --events "$T/evb" -- "$TRAINER" 100000 8
check "the trainer runs" wait_for 10 eval \
    '[ "$(status_get "$T/b" workers)" = 1 ]'
"$SPOTCTL" drill --state-dir "$T/b" --in 1s >/dev/null 2>&1
wait_exit "$SPOTD_PID" 20
tl=$(ev "$T/evb" timeline)
expect_eq "a missed deadline: one record, missed, in save" "1|missed|save" \
    "$(printf '%s\n' "$tl" | grep -c timeline)|$(jget "$tl" result)|$(jget "$tl" missed_in)"
check "... with a negative margin" eval '[ "$(jget "$tl" margin_ms)" -lt 0 ]'
check "... logged as a warning that says where" \
    grep -q 'level=warn event=timeline .*missed the deadline by [0-9]* ms, in save' "$T/stderr"
check "nothing of this test is left running" wait_for 5 none_left
