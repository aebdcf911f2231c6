#!/usr/bin/env bash
# PID 1: spotd as the init of a new PID namespace (as in a container).
# Needs unshare(1) and the right to create PID namespaces (root).
. "$(dirname "$0")/lib.sh"

if ! command -v unshare >/dev/null 2>&1 ||
    ! timeout 10 unshare --pid --fork --mount-proc true >/dev/null 2>&1; then
    echo "SKIP: pid1: cannot create a PID namespace here (unshare --pid --fork --mount-proc)"
    exit 0
fi

# ns_run ARGS...: spotd run ARGS as PID 1 of a new namespace, bounded.
ns_run() {
    timeout -k 2 30 unshare --pid --fork --mount-proc "$SPOTD" run "$@" \
        >"$T/stdout" 2>"$T/stderr"
    RC=$?
}

ns_run --events "$T/p1.events" -- sh -c 'exit 3'
expect_eq "pid1: exit 3 propagates" 3 "$RC"
expect_eq "pid1: the start record has pid 1" 1 "$(jget "$(ev "$T/p1.events" start)" pid)"
expect_eq "pid1: the command is pid 2" 2 "$(jget "$(ev "$T/p1.events" child_start)" pid)"

ns_run --events "$T/p2.events" -- sh -c 'kill -TERM $$; sleep 5'
expect_eq "pid1: death by SIGTERM exits 143" 143 "$RC"
expect_eq "pid1: child_exit names TERM" TERM "$(jget "$(ev "$T/p2.events" child_exit)" signal)"

ns_run -- sh -c 'kill -INT $$; sleep 5'
expect_eq "pid1: death by SIGINT exits 130" 130 "$RC"

# A signal to PID 1 from inside the namespace reaches spotd (it has a
# handler, so the kernel delivers it) and is forwarded to the group.
ns_run --events "$T/p4.events" -- sh -c 'kill -TERM 1; sleep 5'
expect_eq "pid1: SIGTERM to pid 1 from inside stops the command: 143" 143 "$RC"
expect_eq "pid1: SIGTERM to pid 1 from inside: a stop record" 1 "$(event_count "$T/p4.events" stop)"

# Orphans inside: the command starts two, waits until they are fully gone
# from /proc (reaped by PID 1, not zombies), then looks for any zombie.
ns_run -- sh -c "
    (sleep 0.2 & echo \$! >$T/o1)
    (sleep 0.2 & echo \$! >$T/o2)
    ppid=\$(sed -n 's/^PPid:[[:space:]]*//p' /proc/\$(cat $T/o1)/status)
    echo \"\$ppid\" >$T/o1.ppid
    i=0
    while [ -e /proc/\$(cat $T/o1) ] || [ -e /proc/\$(cat $T/o2) ]; do
        i=\$((i + 1)); [ \$i -gt 200 ] && break; sleep 0.05
    done
    if [ -e /proc/\$(cat $T/o1) ] || [ -e /proc/\$(cat $T/o2) ]; then
        echo stuck >$T/reaped
    else
        echo reaped >$T/reaped
    fi
    grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l >$T/zombies
    exit 0"
expect_eq "pid1: orphan run exits 0" 0 "$RC"
expect_eq "pid1: orphans are reparented to spotd (pid 1)" 1 "$(cat "$T/o1.ppid" 2>/dev/null)"
expect_eq "pid1: orphans are reaped" reaped "$(cat "$T/reaped" 2>/dev/null)"
expect_eq "pid1: no zombie in the namespace" 0 "$(tr -d ' ' <"$T/zombies" 2>/dev/null)"

# SIGTERM to spotd from outside the namespace: the command stops, 143.
unshare --pid --fork --mount-proc "$SPOTD" run --events "$T/p3.events" -- \
    sh -c ": >$T/ready; sleep 30" >"$T/stdout" 2>"$T/stderr" &
upid=$!
_bg_pids+=("$upid")
sp=
if wait_for 10 test -e "$T/ready"; then
    sp=$(children "$upid" | head -n 1)
fi
if [ -n "$sp" ] && [ "$(readlink "/proc/$sp/exe")" = "$(readlink -f "$SPOTD")" ]; then
    kill -TERM "$sp"
    wait_exit "$upid" 15
    expect_eq "pid1: SIGTERM from the host stops the command: 143" 143 "$RC"
    expect_eq "pid1: exit reason stopped" stopped "$(jget "$(ev "$T/p3.events" exit)" reason)"
    expect_eq "pid1: no SIGKILL needed" 0 "$(event_count "$T/p3.events" kill)"
    check "pid1: spotd is gone" wait_for 5 gone "$sp"
else
    fail "pid1: find spotd below unshare" "unshare $upid, child '${sp:-}'"
    kill_tree "$upid"
fi

expect_eq "no zombie children left" 0 "$(zombies_of $$)"
check "nothing of this test is left running" wait_for 5 none_left
