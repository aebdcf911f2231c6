# An unchanged PyTorch trainer (examples/plain/train.py: no libckpt, no
# spotd variables; it reads CKPT_DIR, saves every SAVE_EVERY steps in its
# own naming, resumes from the newest checkpoint there) run under spotd's
# dir method with flags only, for each naming trainers use: flat files
# (ckpt-00000149.pt), Hugging Face's folders (checkpoint-149/ with
# trainer_state.json last) and Lightning's files (epoch=0-step=149.ckpt).
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

ref=$(CKPT_DIR="$T/ref" timeout -k 2 120 "$PY" "$TRAIN" $NSTEPS 2>"$T/ref.err" | tail -n 1)
check "zero-glue: an uninterrupted run ends with its model's hash" \
    grep -qxE "done $NSTEPS sha256 [0-9a-f]{64}" <<<"$ref"

for layout in files folders lightning; do
    L="zero-glue $layout"
    ck1="$T/$layout-ck1" ck2="$T/$layout-ck2"
    start_spotd run --cloud none --job "zg-$layout" --store "$S" --state-dir "$T/$layout-n1" \
        --method dir --ckpt-dir "$ck1" --settle 2s --notice-file "$T/$layout-notice" \
        --events "$T/$layout-ev1" -- env CKPT_DIR="$ck1" CKPT_LAYOUT="$layout" "$PY" "$TRAIN" $NSTEPS
    one_commit() { has '"event":"commit"' "$T/$layout-ev1" || ! alive "$SPOTD_PID"; }
    wait_for 60 one_commit
    touch "$T/$layout-notice"
    wait_exit "$SPOTD_PID" 60
    expect_eq "$L: after the notice spotd exits 75" 75 "$RC"
    [ "$RC" = 75 ] || { tail -n 20 "$T/stdout"; tail -n 30 "$T/stderr"; }
    last=$(ev "$T/$layout-ev1" commit | tail -n 1)
    step=$(jget "$last" step)
    expect_ge "$L: a checkpoint the trainer wrote was committed" $((SAVE_EVERY - 1)) "${step:--1}"
    # What the generation holds: the checkpoint under the trainer's name.
    "$SPOTCTL" fetch --store "$S" --job "zg-$layout" "$T/$layout-fetch" >/dev/null 2>&1
    case $layout in
    files) name=$(printf 'ckpt-%08d.pt' "$step") ;;
    folders) name="checkpoint-$step" ;;
    lightning) name="epoch=0-step=$step.ckpt" ;;
    esac
    check "$L: the generation holds '$name' as the trainer named it" \
        test -e "$T/$layout-fetch/$name"

    run_spotd run --cloud none --job "zg-$layout" --store "$S" --state-dir "$T/$layout-n2" \
        --method dir --ckpt-dir "$ck2" --settle 2s --events "$T/$layout-ev2" -- \
        env CKPT_DIR="$ck2" CKPT_LAYOUT="$layout" "$PY" "$TRAIN" $NSTEPS
    expect_eq "$L: the replacement node finishes" 0 "$RC"
    [ "$RC" = 0 ] || tail -n 30 "$T/stderr"
    check "$L: the generation was put back into CKPT_DIR under its name" \
        grep -qF "resumed at step $((step + 1)) from $ck2/$name" "$T/stdout"
    expect_eq "$L: the final model equals an uninterrupted run's" "$ref" "$(tail -n 1 "$T/stdout")"
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
    sh -c 'echo x >"$0/last.pt"; echo x >"$0/ckpt-5.pt.tmp"; sleep 20' "$T/bad-ck"
check "zero-glue: no checkpoint counted: the names seen are said, and why" \
    grep -q "'last.pt' (no step number in the name).*'ckpt-5.pt.tmp' (a temporary name)\|'ckpt-5.pt.tmp' (a temporary name).*'last.pt' (no step number in the name)" "$T/stderr"
check "zero-glue: no process of the test is left" wait_for 5 none_left
