# Helpers the benchmarks share: source it from tests/bench/*.sh.

# descendants PID...: print every living descendant of the PIDs.
descendants() {
    local -A kids=()
    local f line rest pid ppid q
    for f in /proc/[0-9]*/stat; do
        read -r line 2>/dev/null <"$f" || continue
        pid=${line%% *}
        rest=${line##*) }
        ppid=${rest#* }
        ppid=${ppid%% *}
        kids[$ppid]+=" $pid"
    done
    q=("$@")
    while [ ${#q[@]} -gt 0 ]; do
        pid=${q[0]}
        q=("${q[@]:1}")
        for f in ${kids[$pid]-}; do
            echo "$f"
            q+=("$f")
        done
    done
}

# scratch_end [NOTE]: remove the scratch folder $tmp, or keep it (and say
# so, with NOTE) when BENCH_KEEP=1.  Needs say() from the script.
scratch_end() {
    if [ "${BENCH_KEEP:-0}" = 1 ]; then
        say "scratch folder kept${1:+ ($1)}: $tmp"
    else
        rm -rf "$tmp"
    fi
}

# cleanup_traps: the script's cleanup() runs on exit, and on INT, TERM and
# HUP (then the script ends with 128 + the signal's number).
cleanup_traps() {
    trap cleanup EXIT
    trap 'say interrupted; cleanup; exit 130' INT
    trap 'cleanup; exit 143' TERM HUP
}
