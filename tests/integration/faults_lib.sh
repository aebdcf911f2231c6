# Helpers for the fault matrix (t-faults.sh, t-faults-kill.sh); source it
# after lib.sh and world_lib.sh.  Each row: the committed generations
# before and after, the newest one that restores (spotctl verify), the
# steps the trainer lost against the newest committed state that was
# intact, and how many committed generations were lost or overwritten,
# which must be 0 in every row.  Lost: a generation that was committed, is
# gone, and has fewer than the three committed generations newer than it
# that retention keeps.  Overwritten: one whose record changed, or one
# number committed twice.

TRAINER="$TOP/$O/examples/c-trainer/trainer"
S="file://$T/store"
mkdir -p "$T/store"
REF=$(reference "$TRAINER" 6000 2)
KEEP=3

# gens STORE JOB: the committed generations, oldest first, one a line.
gens() {
    "$SPOTCTL" ls --json --store "$1" --job "$2" 2>/dev/null | ls_gens /dev/stdin
}

# prints STORE JOB FILE: "GEN FINGERPRINT" of each committed generation
# (its commit record as spotctl ls reads it: step, time, bytes, signature,
# which bind the manifests' digests) into FILE.
prints() {
    "$SPOTCTL" ls --json --store "$1" --job "$2" 2>/dev/null |
        jq_ "[g for g in d if g['state'] == 'committed']" | while read -r l; do
            echo "$(jget "$l" gen) $(printf '%s' "$l" | sed 's/"manifests":[0-9]*,//' |
                sha256sum | cut -c1-16)"
        done >"$3"
}

# newest_ok STORE JOB: the newest committed generation that verifies, or -.
newest_ok() {
    local g
    for g in $(gens "$1" "$2" | sort -rn); do
        "$SPOTCTL" verify --store "$1" --job "$2" --gen "$g" >/dev/null 2>&1 && { echo "$g"; return; }
    done
    echo -
}

# step_of STORE JOB GEN: the step generation GEN holds.
step_of() {
    "$SPOTCTL" ls --json --store "$1" --job "$2" 2>/dev/null |
        jq_ "[g['step'] for g in d if g['gen'] == $3 and g['state'] == 'committed']"
}

# commits EVENTS...: the generations those event logs committed, one a line.
commits() {
    cat "$@" 2>/dev/null | grep '"event":"commit"' | sed 's/.*"gen":\([0-9]*\).*/\1/'
}

printf '%-18s %-14s %-14s %-9s %-10s %s\n' "fault" "before" "after" "restores" "steps_lost" \
    "lost/overwritten" >"$T/table"

# row NAME STORE JOB BEFORE_PRINTS STEPS_LOST [EVENTS...]: the row, and the
# check that nothing committed was lost or overwritten.  EVENTS: the event
# logs of every spotd of the row, whose commits count as committed too.
row() {
    local name=$1 store=$2 job=$3 before=$4 steps=$5 lost=0 over=0 g newer after
    shift 5
    prints "$store" "$job" "$T/after.prints"
    after=$(cut -d' ' -f1 "$T/after.prints" | tr '\n' ' ')
    for g in $( (cut -d' ' -f1 "$before"; commits "$@") | sort -n | uniq); do
        if grep -q "^$g " "$T/after.prints"; then
            continue
        fi
        newer=$(awk -v g="$g" '$1 > g' "$T/after.prints" | wc -l)
        [ "$newer" -lt $KEEP ] && lost=$((lost + 1))
    done
    while read -r g fp; do
        grep -q "^$g " "$T/after.prints" && ! grep -qx "$g $fp" "$T/after.prints" &&
            over=$((over + 1))
    done <"$before"
    # One number committed by two writers (the logs of both say so).
    over=$((over + $(commits "$@" | sort | uniq -d | wc -l)))
    printf '%-18s %-14s %-14s %-9s %-10s %s\n' "$name" \
        "$(cut -d' ' -f1 "$before" | tr '\n' ',' | sed 's/,$//')" \
        "$(echo "$after" | tr ' ' ',' | sed 's/,$//')" "$(newest_ok "$store" "$job")" \
        "$steps" "$lost/$over" >>"$T/table"
    expect_eq "faults ($name): no committed generation lost" 0 "$lost"
    expect_eq "faults ($name): no committed generation overwritten" 0 "$over"
}

# make_gens STORE JOB [ENV...]: a run preempted mid-way, with periodic
# checkpoints before: three committed generations (of MIB MiB, 2 unless set).
make_gens() {
    local store=$1 job=$2
    shift 2
    env TRAINER_STEP_US=1000 "$@" timeout -k 2 60 "$SPOTD" run --cloud none --job "$job" \
        --store "$store" --state-dir "$T/$job.make" --interval 300ms --drill-after 2s \
        -- "$TRAINER" 6000 "${MIB:-2}" >/dev/null 2>"$T/$job.make.err"
}

# recover STORE JOB [ARGS...]: a replacement, to the end: sets RC, and
# RESUMED, the step its trainer resumed at (- when it started afresh).
recover() {
    local store=$1 job=$2
    shift 2
    run_spotd run --cloud none --job "$job" --store "$store" --state-dir "$T/$job.r$RANDOM" \
        --events "$T/$job.rec.ev" "$@" -- "$TRAINER" 6000 2
    RESUMED=$(sed -n 's/^resumed at step \([0-9]*\) .*/\1/p' "$T/stdout" | head -n 1)
    RESUMED=${RESUMED:--}
    expect_eq "faults ($job): the replacement finishes, with the uninterrupted hash" \
        "0 $REF" "$RC $(tail -n 1 "$T/stdout")"
}

# lost_steps FROM_STEP: steps redone after the resume, against FROM_STEP.
lost_steps() {
    [ "$RESUMED" = - ] && { echo "all"; return; }
    echo $(( $1 + 1 - RESUMED ))
}
