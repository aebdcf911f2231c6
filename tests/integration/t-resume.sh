# Resume only from what is proven, and never afresh over committed work
# (app method, file store, examples/c-trainer):
# - a damaged newest generation: spotd resumes from the newest one that
#   restores, says which and why, and its later commits leave the damaged
#   one in the store (gc spares what it neither resumed from nor wrote);
# - no generation restores: exit 125 naming each one and what is wrong,
#   unless --on-unrestorable fresh; --on-unrestorable fail stops at the
#   first; --resume fresh starts afresh and keeps what was there;
# - a store that cannot be listed at start: tried again, then refused
#   (exit 125), never taken for an empty one; a terminating notice meanwhile
#   ends spotd at once (exit 75) without starting the command;
# - a crash restart resumes from spotd's own copy of the newest committed
#   generation, checked first: not from the folder the trainer pruned
#   (dir), nor the live one it half rewrote (signal), nor a copy someone
#   changed (app).
. "$(dirname "$0")/lib.sh"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
S="file://$T/store"
mkdir -p "$T/store"
ref=$(reference "$TRAINER" 6000 2)

# committed JOB: the committed generations, oldest first.
committed() {
    echo $("$SPOTCTL" ls --json --store "$S" --job "$1" 2>/dev/null | ls_gens /dev/stdin)
}

# make_gens JOB: several committed generations of a run preempted mid-way.
make_gens() {
    TRAINER_STEP_US=1000 run_spotd run --cloud none --job "$1" --store "$S" \
        --state-dir "$T/$1.make" --interval 300ms --drill-after 2s -- "$TRAINER" 6000 2
}

# ---- a damaged newest generation -------------------------------------------
make_gens j
gens=$(committed j)
newest=${gens##* }
older=$(echo "$gens" | awk '{ print $(NF - 1) }')
check "damaged: the first run left 3 committed generations" test "$(echo "$gens" | wc -w)" -eq 3
damage_chunk j "$newest"
TRAINER_STEP_US=800 run_spotd run --cloud none --job j --store "$S" --state-dir "$T/j2" \
    --interval 300ms --events "$T/j2.ev" -- "$TRAINER" 6000 2
expect_eq "damaged: the replacement finishes" 0 "$RC"
r=$(ev "$T/j2.ev" resume)
expect_eq "damaged: it resumed from the newest generation that restores" "$older" "$(jget "$r" gen)"
check "damaged: the resume event names the damaged one and why" \
    has "\"skipped\":[{\"gen\":$newest,\"error\":\"generation $newest, rank 0: chunk" "$T/j2.ev"
check "damaged: the log says which and why" \
    grep -q "resuming from generation $older (step [0-9]*), not a newer one: generation $newest: .*corrupt in the store" "$T/stderr"
check "damaged: the trainer resumed, not from step 0" grep -q "^resumed at step" "$T/stdout"
expect_eq "damaged: the final state equals an uninterrupted run's" "$ref" "$(tail -n 1 "$T/stdout")"
expect_ge "damaged: it committed 3 or more generations of its own (gc ran)" 3 \
    "$(event_count "$T/j2.ev" commit)"
check "damaged: the damaged generation is still in the store (gc spared it)" \
    bash -c "[[ ' $(committed j) ' == *' $newest '* ]]"

# ---- nothing restores ------------------------------------------------------
make_gens k
gens=$(committed k)
for g in $gens; do damage_chunk k "$g"; done
run_spotd run --cloud none --job k --store "$S" --state-dir "$T/k2" --events "$T/k2.ev" \
    -- "$TRAINER" 6000 2
expect_eq "none restores: spotd refuses to start (exit 125)" 125 "$RC"
for g in $gens; do
    check "none restores: the message names generation $g and what is wrong" \
        grep -q "generation $g: generation $g, rank 0: chunk .* corrupt in the store" "$T/stderr"
done
check "none restores: ... and what the operator can do" grep -q "resume fresh" "$T/stderr"
check "none restores: the command never ran" test ! -s "$T/stdout"
expect_eq "none restores: the store holds what it held" "$gens" "$(committed k)"

run_spotd run --cloud none --job k --store "$S" --state-dir "$T/k3" --on-unrestorable fail \
    --events "$T/k3.ev" -- "$TRAINER" 6000 2
expect_eq "on-unrestorable fail: exit 125" 125 "$RC"
check "on-unrestorable fail: only the newest was tried" \
    bash -c "grep -c 'corrupt in the store' '$T/stderr' | grep -qx 1 &&
             grep -q 'generation ${gens##* }: ' '$T/stderr'"

TRAINER_STEP_US=800 run_spotd run --cloud none --job k --store "$S" --state-dir "$T/k4" \
    --on-unrestorable fresh --interval 300ms --events "$T/k4.ev" -- "$TRAINER" 6000 2
expect_eq "on-unrestorable fresh: the run starts afresh and finishes" 0 "$RC"
check "on-unrestorable fresh: its resume event says fresh, with what was skipped" \
    grep -q '"event":"resume","gen":0,.*"skipped":\[{"gen":.*"fresh":true' "$T/k4.ev"
check "on-unrestorable fresh: the trainer started at step 0" sh -c "! grep -q resumed '$T/stdout'"
expect_ge "on-unrestorable fresh: it committed generations of its own" 3 \
    "$(event_count "$T/k4.ev" commit)"
first=$(jget "$(ev "$T/k4.ev" commit | head -n 1)" gen)
check "on-unrestorable fresh: new generations follow the old ones" test "$first" -gt "${gens##* }"
after=" $(committed k) "
for g in $gens; do
    check "on-unrestorable fresh: generation $g stays in the store" \
        bash -c "[[ '$after' == *' $g '* ]]"
done

make_gens f
gens=$(committed f)
TRAINER_STEP_US=800 run_spotd run --cloud none --job f --store "$S" --state-dir "$T/f2" \
    --resume fresh --interval 300ms --events "$T/f2.ev" -- "$TRAINER" 6000 2
expect_eq "resume fresh: the run starts afresh and finishes" 0 "$RC"
check "resume fresh: the trainer started at step 0" sh -c "! grep -q resumed '$T/stdout'"
expect_ge "resume fresh: it committed generations of its own" 3 "$(event_count "$T/f2.ev" commit)"
after=" $(committed f) "
for g in $gens; do
    check "resume fresh: the committed generation $g stays" bash -c "[[ '$after' == *' $g '* ]]"
done

# ---- a store that cannot be listed at start ----------------------------------
# gens/ becomes a link to itself (ELOOP, as root would get no EACCES): the
# store cannot be read until it is put back.
make_gens l
gens=$(committed l)
mv "$T/store/l/gens" "$T/store/l/gens.real"
ln -s gens "$T/store/l/gens"
start_spotd run --cloud none --job l --store "$S" --state-dir "$T/l2" --store-wait 60s \
    --events "$T/l2.ev" -- "$TRAINER" 6000 2
wait_for 20 grep -qs "cannot list the checkpoints of job 'l'.*trying again" "$T/stderr"
check "store unreadable: spotd says so and tries again" \
    grep -q "cannot list the checkpoints of job 'l'.*trying again in" "$T/stderr"
check "store unreadable: the command waits" sh -c "! grep -q child_start '$T/l2.ev'"
sleep 1
rm "$T/store/l/gens"
mv "$T/store/l/gens.real" "$T/store/l/gens"
wait_exit "$SPOTD_PID" 60
expect_eq "store back: the run finishes" 0 "$RC"
expect_eq "store back: it resumed from the newest generation" "${gens##* }" \
    "$(jget "$(ev "$T/l2.ev" resume)" gen)"
expect_eq "store back: the final state equals an uninterrupted run's" "$ref" \
    "$(tail -n 1 "$T/stdout")"

mv "$T/store/l/gens" "$T/store/l/gens.real"
ln -s gens "$T/store/l/gens"
run_spotd run --cloud none --job l --store "$S" --state-dir "$T/l3" --store-wait 3s \
    --events "$T/l3.ev" -- "$TRAINER" 6000 2
expect_eq "store unreadable for --store-wait: spotd refuses to start (exit 125)" 125 "$RC"
check "store unreadable: never taken for an empty store, said so" \
    grep -q "never taken for an empty one" "$T/stderr"
check "store unreadable: the command never ran" test ! -s "$T/stdout"
rm "$T/store/l/gens"
mv "$T/store/l/gens.real" "$T/store/l/gens"
expect_eq "store unreadable: nothing was written over the committed generations" "$gens" \
    "$(committed l)"

# A terminating notice (the drill, 1 s in) while the start waits for the
# store: nothing runs that a checkpoint could save, so the command is not
# started and spotd exits at once, preempted with the committed state
# saved, instead of waiting out --store-wait (or starting the command and
# losing what it does before the stop).
mv "$T/store/l/gens" "$T/store/l/gens.real"
ln -s gens "$T/store/l/gens"
run_spotd run --cloud none --job l --store "$S" --state-dir "$T/l4" --store-wait 20s \
    --drill-after 1s --events "$T/l4.ev" -- "$TRAINER" 6000 2
expect_eq "notice while resuming: spotd exits preempted, saved (75)" 75 "$RC"
check "notice while resuming: the command never ran" test ! -s "$T/stdout"
check "notice while resuming: said so" grep -q "terminating notice.*it is not started" \
    "$T/stderr"
rm "$T/store/l/gens"
mv "$T/store/l/gens.real" "$T/store/l/gens"
expect_eq "notice while resuming: the committed generations stay" "$gens" "$(committed l)"

# ---- crash restarts resume from spotd's own checked copy -------------------
# dir: the trainer's own retention deleted the committed folder before the
# crash (here the test does it, at a moment it controls).
TRAINER_METHOD=dir TRAINER_SAVE_EVERY=500 TRAINER_CRASH_AT=800 TRAINER_CRASH_FLAG="$T/d.crashed" \
    TRAINER_CRASH_WAIT="$T/d.go" start_spotd run --cloud none --job d --store "$S" \
    --state-dir "$T/d1" --method dir --ckpt-dir "$T/d1.ckpt" --settle 300ms --restart on-failure \
    --events "$T/d1.ev" -- "$TRAINER" 2000 2
wait_for 30 grep -qs '"event":"commit"' "$T/d1.ev"
rm -rf "$T/d1.ckpt"/checkpoint-*
touch "$T/d.go"
wait_exit "$SPOTD_PID" 60
expect_eq "restart dir: the restarted run finishes" 0 "$RC"
check "restart dir: the restart resumed from the committed step, in spotd's copy" \
    grep -q "^resumed at step 500 from $T/d1/\(work\|restore\)/gen-00000001/checkpoint-499$" "$T/stdout"
expect_eq "restart dir: the final state equals an uninterrupted run's" \
    "$(reference "$TRAINER" 2000 2)" "$(tail -n 1 "$T/stdout")"

# signal: the trainer died in the middle of its second save, in place, in
# the live folder (and so in spotd's links to the committed files).
TRAINER_METHOD=signal TRAINER_SAVE_CRASH=2 TRAINER_CRASH_FLAG="$T/s.crashed" TRAINER_STEP_US=1000 \
    run_spotd run --cloud none --job s --store "$S" --state-dir "$T/s1" --method signal \
    --interval 700ms --restart on-failure --events "$T/s1.ev" -- "$TRAINER" 3000 2
expect_eq "restart signal: the restarted run finishes" 0 "$RC"
c=$(ev "$T/s1.ev" commit | head -n 1)
check "restart signal: spotd's copy no longer matched, and was restored from the store" \
    grep -q "the copy of generation 1 in '$T/s1/restore/gen-00000001' does not match it.*restoring it again from the store" "$T/stderr"
check "restart signal: the restart resumed from the committed step" \
    grep -q "^resumed at step $(( $(jget "$c" step) + 1 )) from $T/s1/restore/gen-00000001" "$T/stdout"
expect_eq "restart signal: the final state equals an uninterrupted run's" \
    "$(reference "$TRAINER" 3000 2)" "$(tail -n 1 "$T/stdout")"

# app: the committed copy changed in place before the crash.
TRAINER_CRASH_AT=900 TRAINER_CRASH_FLAG="$T/a.crashed" TRAINER_CRASH_WAIT="$T/a.go" \
    start_spotd run --cloud none --job a --store "$S" --state-dir "$T/a1" --drill-after 500ms:rebalance \
    --restart on-failure --events "$T/a1.ev" -- "$TRAINER" 2000 2
wait_for 30 grep -qs '"event":"commit"' "$T/a1.ev"
c=$(ev "$T/a1.ev" commit | head -n 1)
printf 'garbage' | dd of="$T/a1/work/gen-00000001/w0/state.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
touch "$T/a.go"
wait_exit "$SPOTD_PID" 60
expect_eq "restart app: the restarted run finishes" 0 "$RC"
check "restart app: the changed copy was found out" \
    grep -q "does not match it: 'w0/state.bin' changed (chunk 0 at offset 0)" "$T/stderr"
check "restart app: the restart resumed from the committed step" \
    grep -q "^resumed at step $(( $(jget "$c" step) + 1 )) " "$T/stdout"
expect_eq "restart app: the final state equals an uninterrupted run's" \
    "$(reference "$TRAINER" 2000 2)" "$(tail -n 1 "$T/stdout")"
