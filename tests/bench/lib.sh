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
