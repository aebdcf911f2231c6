# Helpers for the world's tests (t-world.sh, t-world-netns.sh); source it
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
