# Helpers for the world's tests (t-world*.sh); source it
# after lib.sh.  Each node is a spotd in the background, known by NAME: its
# state in $T/NAME, events in $T/NAME.ev, stdout in $T/NAME.out, stderr in
# $T/NAME.err, pid in PID[NAME].

declare -A PID

# node_started NAME: remember NAME's background spotd ($!).
node_started() {
    PID[$1]=$2
    _bg_pids+=("$2")
}

# wait_node NAME [SECONDS]: sets RC.
wait_node() {
    wait_exit "${PID[$1]}" "${2:-60}"
}

# saved_step NAME GEN: the step NAME's trainers saved for GEN.
saved_step() {
    jget "$(ev "$T/$1.ev" checkpoint_saved | grep "\"gen\":$2," | head -n 1)" step
}

# started NAME...: each node's command has started.
started() {
    local n
    for n in "$@"; do has child_start "$T/$n.ev" || return 1; done
}

# show NAME...: the tail of each node's log, after a failure.
show() {
    local n
    for n in "$@"; do
        echo "--- $n.err (tail)"
        grep -v '"progress"' "$T/$n.err" 2>/dev/null | tail -n 25 | cut -c1-300
    done
}

# nodes_finish LABEL SECONDS NAME...: each node ends within SECONDS with
# exit 0 and the hash of an uninterrupted run ($ref); the logs of all of
# them when one does not.  LABEL starts the checks' names.
nodes_finish() {
    local label=$1 secs=$2 n
    shift 2
    for n in "$@"; do
        wait_node "$n" "$secs"
        expect_eq "$label: $n finishes" 0 "$RC"
        [ "$RC" = 0 ] || show "$@"
        expect_eq "$label: $n ends with the uninterrupted hash" "$ref" "$(tail -n 1 "$T/$n.out")"
    done
}

# c_trainer_world: the C example trainer (TRAINER, STEPS, MIB; ref, the hash
# of its uninterrupted run), a world key in $T/key (KEY), a store in $T/store.
c_trainer_world() {
    TRAINER="$TOP/$O/examples/c-trainer/trainer"
    STEPS=4000 MIB=1
    export TRAINER_STEP_US=1500
    ref=$(TRAINER_STEP_US=0 reference "$TRAINER" $STEPS $MIB)
    KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    printf '%s\n' "$KEY" >"$T/key"
    chmod 600 "$T/key"
    mkdir -p "$T/store"
}
