# An unchanged PyTorch trainer (examples/plain/train.py: no libckpt, no
# spotd variables; it reads CKPT_DIR, saves every SAVE_EVERY steps in its
# own naming, resumes from the newest checkpoint there) run under spotd's
# dir method with flags only, for each naming trainers use: flat files
# (ckpt-00000149.pt), Hugging Face's folders (checkpoint-149/ with
# trainer_state.json last), Lightning's files (epoch=0-step=149.ckpt),
# DCP's folders (step-149/ with .metadata last) and a fixed name rewritten
# in place (last.pt).
# A drill commits the newest complete checkpoint, spotd exits 75; a
# replacement node with an empty CKPT_DIR gets it back there under its own
# name, the trainer resumes from it by itself, and the final model equals
# an uninterrupted run's, bit for bit.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
TRAIN="$TOP/examples/plain/train.py"
need_torch zero-glue
mkdir -p "$T/store"
S="file://$T/store"
NSTEPS=1500
export SAVE_EVERY=150

# noticed L NOTICE EVENTS: the notice comes; spotd exits 75.  Sets STEP to
# the last commit's step and STOPPED to the step the trainer stopped at.
noticed() {
    touch "$2"
    wait_exit "$SPOTD_PID" 60
    expect_eq "$1: after the notice spotd exits 75" 75 "$RC"
    [ "$RC" = 75 ] || { tail -n 20 "$T/stdout"; tail -n 30 "$T/stderr"; }
    STOPPED=$(sed -n 's/^stopped at step //p' "$T/stdout")
    STEP=$(jget "$(ev "$3" commit | tail -n 1)" step)
    STEP=${STEP:--1}
}

# resumed L FROM: the replacement finished, having resumed by itself from
# FROM at the step after STEP, with the model of an uninterrupted run.
resumed() {
    expect_eq "$1: the replacement node finishes" 0 "$RC"
    [ "$RC" = 0 ] || tail -n 30 "$T/stderr"
    check "$1: the replacement resumes by itself from the committed step" \
        grep -qF "resumed at step $((STEP + 1)) from $2" "$T/stdout"
    expect_eq "$1: the final model equals an uninterrupted run's" "$ref" "$(tail -n 1 "$T/stdout")"
}

ref=$(CKPT_DIR="$T/ref" timeout -k 2 120 "$PY" "$TRAIN" $NSTEPS 2>"$T/ref.err" | tail -n 1)
check "zero-glue: an uninterrupted run ends with its model's hash" \
    grep -qxE "done $NSTEPS sha256 [0-9a-f]{64}" <<<"$ref"

for layout in files folders lightning dcp; do
    L="zero-glue $layout"
    ck1="$T/$layout-ck1" ck2="$T/$layout-ck2"
    start_spotd run --cloud none --job "zg-$layout" --store "$S" --state-dir "$T/$layout-n1" \
        --method dir --ckpt-dir "$ck1" --settle 2s --notice-file "$T/$layout-notice" \
        --events "$T/$layout-ev1" -- env CKPT_DIR="$ck1" CKPT_LAYOUT="$layout" "$PY" "$TRAIN" $NSTEPS
    one_commit() { has '"event":"commit"' "$T/$layout-ev1" || ! alive "$SPOTD_PID"; }
    wait_for 60 one_commit
    noticed "$L" "$T/$layout-notice" "$T/$layout-ev1"
    step=$STEP
    expect_ge "$L: a checkpoint the trainer wrote was committed" $((SAVE_EVERY - 1)) "$step"
    # What the generation holds: the checkpoint under the trainer's name.
    "$SPOTCTL" fetch --store "$S" --job "zg-$layout" "$T/$layout-fetch" >/dev/null 2>&1
    case $layout in
    files) name=$(printf 'ckpt-%08d.pt' "$step") ;;
    folders) name="checkpoint-$step" ;;
    lightning) name="epoch=0-step=$step.ckpt" ;;
    dcp) name="step-$step" ;;
    esac
    check "$L: the generation holds '$name' as the trainer named it" \
        test -e "$T/$layout-fetch/$name"

    run_spotd run --cloud none --job "zg-$layout" --store "$S" --state-dir "$T/$layout-n2" \
        --method dir --ckpt-dir "$ck2" --settle 2s --events "$T/$layout-ev2" -- \
        env CKPT_DIR="$ck2" CKPT_LAYOUT="$layout" "$PY" "$TRAIN" $NSTEPS
    resumed "$L" "$ck2/$name"
done

# SPOT_RESUME_DIR names the checkpoint folder itself, as before a
# generation kept the folder's name (--resume_from_checkpoint "$SPOT_RESUME_DIR").
run_spotd run --cloud none --job zg-folders --store "$S" --state-dir "$T/rd" --method dir \
    --ckpt-dir "$T/rd-ck" -- sh -c 'echo "$SPOT_RESUME_DIR" >"$0"' "$T/rd.out"
check "zero-glue folders: SPOT_RESUME_DIR is the checkpoint folder" \
    grep -q "/checkpoint-[0-9]*$" "$T/rd.out"
check "zero-glue folders: ... which holds the trainer's files" \
    test -f "$(cat "$T/rd.out")/trainer_state.json"

# Names that are no checkpoint: the notice says which it saw and why.
mkdir -p "$T/bad-ck"
run_spotd run --cloud none --job zg-bad --store "$S" --state-dir "$T/bad" --method dir \
    --ckpt-dir "$T/bad-ck" --drill-after 1s --events "$T/bad.ev" -- \
    sh -c 'echo x >"$0/model.pt"; echo x >"$0/ckpt-5.pt.tmp"; sleep 20' "$T/bad-ck"
check "zero-glue: no checkpoint counted: the names seen are said, and why" \
    grep -q "'model.pt' (no step number in the name).*'ckpt-5.pt.tmp' (a temporary name)\|'ckpt-5.pt.tmp' (a temporary name).*'model.pt' (no step number in the name)" "$T/stderr"
check "zero-glue: ... and the notice's timeline says nothing new, not a save over its budget" \
    grep -q '"event":"timeline".*"result":"nothing new"' "$T/bad.ev"
# "Saved, then exited": the trainer saves on SIGTERM and exits 75, its
# habit; no marker.  Under --method signal the checkpoint it writes on the
# signal is the generation, not the older periodic one.  STEP_MS slows the
# steps (not the math) so that the notice comes mid-run.
export STEP_MS=4
L="zero-glue saved-then-exited (signal)"
ck1="$T/sx-ck1" ck2="$T/sx-ck2"
start_spotd run --cloud none --job zg-sx --store "$S" --state-dir "$T/sx-n1" --method signal \
    --ckpt-dir "$ck1" --ckpt-signal TERM --notice-file "$T/sx-notice" --events "$T/sx-ev1" -- \
    env CKPT_DIR="$ck1" "$PY" "$TRAIN" $NSTEPS
first_file() { [ -e "$ck1/ckpt-00000149.pt" ] || ! alive "$SPOTD_PID"; }
wait_for 60 first_file
noticed "$L" "$T/sx-notice" "$T/sx-ev1"
expect_eq "$L: the generation is the step the trainer saved on the signal" \
    "$((${STOPPED:-0} - 1))" "$STEP"
check "$L: spotd says the command saved, then exited" \
    grep -q "the command saved, then exited (code 75): 'ckpt-" "$T/stderr"
"$SPOTCTL" fetch --store "$S" --job zg-sx "$T/sx-fetch" >/dev/null 2>&1
name=$(printf 'ckpt-%08d.pt' "$STEP")
expect_eq "$L: the generation holds that checkpoint alone, under its name" "$name" \
    "$(ls "$T/sx-fetch" 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
run_spotd run --cloud none --job zg-sx --store "$S" --state-dir "$T/sx-n2" --method signal \
    --ckpt-dir "$ck2" --ckpt-signal TERM --events "$T/sx-ev2" -- \
    env CKPT_DIR="$ck2" "$PY" "$TRAIN" $NSTEPS
resumed "$L" "$ck2/$name"

# The same habit under the dir method: each checkpoint it writes is
# uploaded as it counts, and at the notice spotd sends SIGTERM (the
# default with --saved-when exit) and commits the one saved before the exit.
L="zero-glue saved-then-exited (dir)"
ck1="$T/dx-ck1" ck2="$T/dx-ck2"
start_spotd run --cloud none --job zg-dx --store "$S" --state-dir "$T/dx-n1" --method dir \
    --ckpt-dir "$ck1" --settle 2s --saved-when exit --notice-file "$T/dx-notice" \
    --events "$T/dx-ev1" -- env CKPT_DIR="$ck1" CKPT_LAYOUT=folders "$PY" "$TRAIN" $NSTEPS
dx_commit() { has '"event":"commit"' "$T/dx-ev1" || ! alive "$SPOTD_PID"; }
wait_for 60 dx_commit
noticed "$L" "$T/dx-notice" "$T/dx-ev1"
expect_eq "$L: the last generation is the step saved on the signal" \
    "$((${STOPPED:-0} - 1))" "$STEP"
expect_ge "$L: a periodic one was committed before it" 2 "$(ev "$T/dx-ev1" commit | wc -l)"
# The command's exit is the save: its commit, after it, ends the notice's story.
check "$L: the notice's timeline says committed" \
    eval 'ev "$T/dx-ev1" timeline | grep -q "\"result\":\"committed\""'
run_spotd run --cloud none --job zg-dx --store "$S" --state-dir "$T/dx-n2" --method dir \
    --ckpt-dir "$ck2" --settle 2s --saved-when exit --events "$T/dx-ev2" -- \
    env CKPT_DIR="$ck2" CKPT_LAYOUT=folders "$PY" "$TRAIN" $NSTEPS
resumed "$L" "$ck2/checkpoint-$STEP"

# A fixed name rewritten in place at each save (last.pt, as Lightning's
# save_last writes last.ckpt), found by auto where no name has a step.
# Each version that settles is uploaded, copied (the trainer rewrites it in
# place while the upload runs), and the one saved on the signal before the
# exit is the last generation.  Its step is the number in --ckpt-step-file;
# without one, each version is the step after the last.
export STEP_MS=10
for sf in step.txt ""; do
    L="zero-glue fixed name${sf:+ and a step file}"
    j="zg-fixed${sf:+-sf}" ck1="$T/fx${sf:+sf}-ck1" ck2="$T/fx${sf:+sf}-ck2"
    start_spotd run --cloud none --job "$j" --store "$S" --state-dir "$T/$j-n1" --method dir \
        --ckpt-dir "$ck1" --settle 1s --saved-when exit ${sf:+--ckpt-step-file "$sf"} \
        --notice-file "$T/$j-notice" --events "$T/$j-ev1" -- \
        env CKPT_DIR="$ck1" CKPT_LAYOUT=last STEP_FILE="$sf" "$PY" "$TRAIN" $NSTEPS
    fx_commit() { has '"event":"commit"' "$T/$j-ev1" || ! alive "$SPOTD_PID"; }
    wait_for 60 fx_commit
    noticed "$L" "$T/$j-notice" "$T/$j-ev1"
    n=$(ev "$T/$j-ev1" commit | wc -l)
    expect_ge "$L: a version that settled was committed before the notice's" 2 "$n"
    if [ -n "$sf" ]; then
        expect_eq "$L: the last generation's step is its step file's" "$((${STOPPED:-0} - 1))" \
            "$STEP"
    else
        expect_eq "$L: each version is the step after the last" "$((n - 1))" "$STEP"
    fi
    check "$L: auto takes last.pt where no name has a step" \
        grep -q "checkpoint '$ck1/last.pt' is complete" "$T/stderr"
    "$SPOTCTL" fetch --store "$S" --job "$j" "$T/$j-fetch" >/dev/null 2>&1
    expect_eq "$L: the generation holds last.pt alone" "last.pt" \
        "$(ls "$T/$j-fetch" 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
    STEP_MS=0 run_spotd run --cloud none --job "$j" --store "$S" --state-dir "$T/$j-n2" \
        --method dir --ckpt-dir "$ck2" --settle 1s --saved-when exit \
        ${sf:+--ckpt-step-file "$sf"} --events "$T/$j-ev2" -- \
        env CKPT_DIR="$ck2" CKPT_LAYOUT=last STEP_FILE="$sf" "$PY" "$TRAIN" $NSTEPS
    STEP=$((${STOPPED:-0} - 1)) resumed "$L" "$ck2/last.pt"
done
unset STEP_MS

# examples/torchrun/run.sh as it stands: the same trainer, two workers
# under torchrun, flags only.  SIGTERM goes to the workers; they agree on a
# step, rank 0 saves, they exit 75 and torchrun exits 1 for them.
L="zero-glue torchrun example"
RUN="$TOP/examples/torchrun/run.sh"
tr_port() { local p; p=$(free_ports 1); echo "${p#*:}"; }
start_cmd() {
    : >"$T/stdout"
    : >"$T/stderr"
    "$@" >>"$T/stdout" 2>>"$T/stderr" &
    SPOTD_PID=$!
    _bg_pids+=("$SPOTD_PID")
}
run_cmd() { timeout -k 2 120 "$@" >"$T/stdout" 2>"$T/stderr"; RC=$?; }
ref_tr=$(CKPT_DIR="$T/tr-ref" timeout -k 2 300 /usr/bin/torchrun --nnodes 1 \
    --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$(tr_port)" --redirects 9:0 \
    --tee 9:0 --monitor_interval 1 "$TRAIN" $NSTEPS 2>"$T/tr-ref.err" | grep '^done' | tail -n 1)
check "$L: an uninterrupted torchrun run ends with its model's hash" \
    grep -qxE "done $NSTEPS sha256 [0-9a-f]{64}" <<<"$ref_tr"
export STEP_MS=4
PATH="$(dirname "$SPOTD"):$PATH" SPOTD_CLOUD=none SPOTD_JOB=zg-tr SPOTD_STATE_DIR="$T/tr-n1" \
    SPOTD_NOTICE_FILE="$T/tr-notice" SPOTD_EVENTS="$T/tr-ev1" MASTER_PORT=$(tr_port) \
    start_cmd "$RUN" "$S" "$T/tr-ck1" $NSTEPS
tr_commit() { has '"event":"commit"' "$T/tr-ev1" || ! alive "$SPOTD_PID"; }
wait_for 120 tr_commit
noticed "$L" "$T/tr-notice" "$T/tr-ev1"
expect_eq "$L: the last generation is the step the workers saved on the signal" \
    "$((${STOPPED:-0} - 1))" "$STEP"
check "$L: torchrun's 1 counted for its workers' exit" \
    grep -q "the command saved, then exited (code 1, the launcher's for its workers' exit)" \
    "$T/stderr"
PATH="$(dirname "$SPOTD"):$PATH" SPOTD_CLOUD=none SPOTD_JOB=zg-tr SPOTD_STATE_DIR="$T/tr-n2" \
    MASTER_PORT=$(tr_port) run_cmd "$RUN" "$S" "$T/tr-ck2" $NSTEPS
ref=$ref_tr resumed "$L" "$T/tr-ck2/$(printf 'ckpt-%08d.pt' "$STEP")"
unset STEP_MS

# What does not count is said: an exit with another code names the marker;
# an exit 75 with nothing new written says what it looked for.
run_spotd run --cloud none --job zg-x3 --store "$S" --state-dir "$T/x3" --method signal \
    --ckpt-dir "$T/x3-ck" --ckpt-signal TERM --drill-after 1s:terminate -- \
    sh -c 'trap "exit 3" TERM; while :; do sleep 0.1; done'
check "zero-glue: an exit with another code names the marker it did not create" \
    grep -q "the command exited with code 3 after SIGTERM, before it created the marker '$T/x3-ck/.spotd-saved'; a trainer that saves on the signal and exits says so" "$T/stderr"
run_spotd run --cloud none --job zg-x75 --store "$S" --state-dir "$T/x75" --method signal \
    --ckpt-dir "$T/x75-ck" --ckpt-signal TERM --drill-after 1s:terminate --events "$T/x75.ev" -- \
    sh -c 'echo x >"$0/ckpt-5.pt"; trap "echo y >$0/model.pt; echo y >$0/last.pt; exit 75" TERM; while :; do sleep 0.1; done' "$T/x75-ck"
check "zero-glue: an exit 75 with no new checkpoint says what it looked for" \
    grep -q "the command exited with code 75 after SIGTERM, but no checkpoint of --ckpt-layout auto appeared in '$T/x75-ck' after the signal: .*'model.pt' (no step number in the name)" "$T/stderr"
check "zero-glue: ... and why a fixed name beside names with a step did not count" \
    grep -q "'last.pt' (a fixed name beside names with a step: --ckpt-layout fixed takes it)" "$T/stderr"
expect_eq "zero-glue: ... and commits nothing" 0 "$(ev "$T/x75.ev" commit | wc -l)"

# A launcher (torchrun) that has not started its workers when the notice
# comes, and then a worker that has no handler yet (torch takes seconds to
# import; the signal would kill it): the signal waits for both, and the
# launcher's 1 for its workers' 75 counts, as torchrun folds codes.
mkdir -p "$T/bin"
cat >"$T/bin/torchrun" <<'EOS'
#!/usr/bin/python3
# Stands for torchrun: it imports for a while (no workers yet), starts one
# worker, which imports for a while too (no handler yet), and exits 1 when
# that fails, whatever its code.
import subprocess, sys, time
time.sleep(2)
w = subprocess.Popen(["sh", "-c", 'sleep 1; trap "echo w >\\"$CKPT_DIR/ckpt-00000007.pt\\"; '
                      'exit 75" TERM; while :; do sleep 0.1; done'])
sys.exit(1 if w.wait() else 0)
EOS
chmod +x "$T/bin/torchrun"
run_spotd run --cloud none --job zg-la --store "$S" --state-dir "$T/la" --method signal \
    --ckpt-dir "$T/la-ck" --ckpt-signal TERM --drill-after 200ms:terminate \
    --events "$T/la.ev" -- env CKPT_DIR="$T/la-ck" "$T/bin/torchrun"
check "zero-glue launcher: the signal waits for the workers and their handler" \
    grep -q "the workers of launcher pid [0-9]* are not there yet, or have no handler for SIGTERM yet" \
    "$T/stderr"
expect_eq "zero-glue launcher: the worker's checkpoint is committed" 7 \
    "$(jget "$(ev "$T/la.ev" commit | tail -n 1)" step)"
expect_eq "zero-glue launcher: spotd exits 75" 75 "$RC"

# The README tour's first block, as a new user runs it: the unchanged
# trainer under one spotd line, a drill, and a replacement that goes on
# from the committed step to the model of an uninterrupted run.
L="zero-glue README tour"
readme_tour 1 "$T/tour1.sh"
check "$L: the README's first tour block is the unchanged trainer" \
    grep -q "examples/plain/train.py" "$T/tour1.sh"
(cd "$TOP" && timeout -k 2 300 bash "$T/tour1.sh") >"$T/tour1.out" 2>"$T/tour1.err"
expect_eq "$L: runs to its end" 0 "$?"
[ -s "$T/tour1.err" ] && sed 's/^/  tour stderr: /' "$T/tour1.err" | tail -n 5
check "$L: the drill ends spotd with 75" grep -q "^spotd exited with 75$" "$T/tour1.out"
# The step the trainer stopped at is the replacement's first: not one lost
# (the notice's save, or a periodic one of the same step just before it).
stopped=$(sed -n 's/^stopped at step \([0-9]*\)$/\1/p' "$T/tour/plain1.out")
from=$(sed -n 's/^training from step \([0-9]*\)$/\1/p' "$T/tour1.out" | head -n 1)
check "$L: the replacement goes on from the step the trainer stopped at (${stopped:-none}, ${from:-none})" \
    eval '[ "${from:-0}" -gt 0 ] && [ "$from" = "$stopped" ]'
check "$L: no checkpoint failed" eval '! grep -q "event=checkpoint_failed" "$T/tour/plain1.log"'
expect_eq "$L: the replacement and an uninterrupted run end with the same model" "2|1" \
    "$(grep -c "^done 1000 sha256 " "$T/tour1.out")|$(grep "^done 1000 sha256 " "$T/tour1.out" | sort -u | wc -l)"

# The notice lands on a step the trainer has just saved on its own (it
# saves every step here), and on SIGTERM it saves that step again and
# exits: nothing is newer than the newest generation, which is the state.
# Not a failure, and no empty generation is left in the store.
L="zero-glue same step"
run_spotd run --cloud none --job zg-same --store "$S" --state-dir "$T/same" --method dir \
    --ckpt-dir "$T/same-ck" --saved-when exit --drill-after 4s:terminate --events "$T/same.ev" -- \
    env CKPT_DIR="$T/same-ck" SAVE_EVERY=1 STEP_MS=200 "$TOP/examples/plain/train.py" 100000
expect_eq "$L: spotd exits 75" 75 "$RC"
stopped=$(sed -n 's/^stopped at step \([0-9]*\)$/\1/p' "$T/stdout")
expect_eq "$L: the newest generation holds the step before the one it stopped at" \
    "$((${stopped:-0} - 1))" "$(jget "$(ev "$T/same.ev" commit | tail -n 1)" step)"
# Which save takes the step (the periodic one, then nothing new at the exit;
# or the notice's) depends on the moment: either is right, neither fails.
check "$L: no checkpoint failed" eval '! ev "$T/same.ev" checkpoint_failed | grep -q .'
# The periodic saves only link the trainer's files; the notice's waits for
# its save on the signal: one is no budget for the other.
check "$L: the timeline holds the save to no budget measured on the periodic ones" \
    eval 'ev "$T/same.ev" timeline | grep -q . && ! ev "$T/same.ev" timeline | grep -q over_budget'
"$SPOTCTL" ls --store "$S" --job zg-same --json >"$T/same.ls" 2>&1
check "$L: spotctl ls lists its generations" eval '[ -n "$(ls_gens "$T/same.ls")" ]'
expect_eq "$L: no incomplete generation is left" "" "$(ls_gens "$T/same.ls" incomplete)"

# Combinations that cannot work are refused before anything starts.
refused() {
    run_spotd run --cloud none --job zg-r --store "$S" --state-dir "$T/r" "$@" -- true
    [ "$RC" = 125 ]
}
check "zero-glue: --interval with --method signal --saved-when exit is refused" \
    refused --method signal --saved-when exit --interval 10s
check "zero-glue: ... saying why" grep -q "would end the trainer at every tick" "$T/stderr"
check "zero-glue: --interval with the dir method is refused" \
    refused --method dir --ckpt-dir "$T/r-ck" --interval 10s
check "zero-glue: ... saying why" grep -q "the trainer's own saves are its interval" "$T/stderr"
check "zero-glue: --saved-when with the app method is refused" refused --saved-when exit
check "zero-glue: --saved-when marker with the dir method is refused" \
    refused --method dir --ckpt-dir "$T/r-ck" --saved-when marker
check "zero-glue: no process of the test is left" wait_for 5 none_left
