#!/usr/bin/env bash
# Signals: TERM INT QUIT HUP USR1 USR2 sent to spotd reach every process of
# the command's group, grandchildren included; TERM/INT/QUIT stop it, the
# others leave it (and spotd) running.  The command leads its own session
# and group, and starts with default dispositions and spotd's original mask.
. "$(dirname "$0")/lib.sh"

# A non-interactive sh starts its background jobs with INT and QUIT
# ignored, and such a job cannot trap them; env --default-signal undoes that
# so that workers can show INT/QUIT arriving.
if env --default-signal=INT,QUIT true 2>/dev/null; then
    SPAWN="env --default-signal=INT,QUIT"
else
    SPAWN=""
fi

# worker.sh SIG DIR MODE DEPTH: trap SIG and record its arrival; start a
# worker of its own while DEPTH > 0; exit after the signal in MODE exit.
cat >"$T/worker.sh" <<EOF
sig=\$1 dir=\$2 mode=\$3 depth=\$4 got=
trap 'echo "\$sig" >"\$dir/got.\$sig.\$\$"; got=1' "\$sig"
if [ "\$depth" -gt 0 ]; then
    $SPAWN sh "$T/worker.sh" "\$sig" "\$dir" "\$mode" \$((depth - 1)) &
fi
: >"\$dir/ready.\$\$"
while :; do
    sleep 0.1
    if [ -n "\$got" ] && [ "\$mode" = exit ]; then break; fi
done
wait
exit 0
EOF

# main.sh SIG DIR MODE CODE: the command; two workers, one of which starts
# a grandchild worker; exits CODE after the signal in MODE exit.
cat >"$T/main.sh" <<EOF
sig=\$1 dir=\$2 mode=\$3 code=\$4 got=
trap 'echo "\$sig" >"\$dir/got.\$sig.\$\$"; got=1' "\$sig"
$SPAWN sh "$T/worker.sh" "\$sig" "\$dir" "\$mode" 1 &
$SPAWN sh "$T/worker.sh" "\$sig" "\$dir" "\$mode" 0 &
: >"\$dir/ready.\$\$"
while :; do
    sleep 0.1
    if [ -n "\$got" ] && [ "\$mode" = exit ]; then break; fi
done
wait
exit "\$code"
EOF

# pids_of DIR PREFIX: the sorted pids of DIR/PREFIX.* marker files.
pids_of() {
    local f
    for f in "$1"/"$2".*; do [ -e "$f" ] && echo "${f##*.}"; done | sort -n | tr '\n' ' '
}

for sig in TERM INT QUIT HUP USR1 USR2; do
    d="$T/$sig"
    mkdir "$d"
    case $sig in TERM|INT|QUIT) mode="exit" ;; *) mode=stay ;; esac
    start_spotd run --events "$d/events" -- sh "$T/main.sh" "$sig" "$d" "$mode" 7
    if ! wait_for 10 eval '[ "$(count_files "$d/ready.*")" -ge 4 ]'; then
        fail "SIG$sig: the command and its 3 workers start" "ready: $(pids_of "$d" ready)"
        kill_tree "$SPOTD_PID"
        continue
    fi
    pgid=$(children "$SPOTD_PID" | head -n 1)
    ready=$(pids_of "$d" ready)
    if [ -z "$SPAWN" ] && [ "$mode" = exit ] && [ "$sig" != TERM ]; then
        echo "SKIP: SIG$sig reaches the workers (no env --default-signal)"
    fi
    kill -"$sig" "$SPOTD_PID"
    wait_for 10 eval '[ "$(count_files "$d/got.$sig.*")" -ge 4 ]'
    expect_eq "SIG$sig reaches all 4 processes of the group (grandchild included)" \
        "$ready" "$(pids_of "$d" "got.$sig")"
    check "SIG$sig: the event log records the forwarding" \
        has "\"event\":\"signal\",\"signal\":\"$sig\",\"pgid\":$pgid" "$d/events"
    if [ "$mode" = exit ]; then
        wait_exit "$SPOTD_PID" 10
        expect_eq "SIG$sig: spotd exits with the command's code" 7 "$RC"
        expect_eq "SIG$sig: exit reason is stopped" stopped \
            "$(jget "$(ev "$d/events" exit)" reason)"
        expect_eq "SIG$sig: stop record with reason signal" signal \
            "$(jget "$(ev "$d/events" stop)" reason)"
        expect_eq "SIG$sig: no SIGKILL needed" 0 "$(event_count "$d/events" kill)"
    else
        # The group keeps running, and spotd with it.
        sleep 0.3
        check "SIG$sig: spotd keeps running" alive "$SPOTD_PID"
        check "SIG$sig: every process of the command keeps running" alive $ready
        expect_eq "SIG$sig: no stop record" 0 "$(event_count "$d/events" stop)"
        kill -TERM "$SPOTD_PID"
        wait_exit "$SPOTD_PID" 10
        expect_eq "SIG$sig: a later SIGTERM stops it with 143" 143 "$RC"
    fi
    check "SIG$sig: nothing of the group is left" wait_for 5 group_gone "${pgid:-0}"
done

# A command that does not trap TERM dies of it: 143, background job too.
start_spotd run -- sh -c "sleep 30 & echo \$! >$T/bg; sleep 30"
wait_for 10 test -s "$T/bg"
bg=$(cat "$T/bg")
pgid=$(children "$SPOTD_PID" | head -n 1)
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 10
expect_eq "untrapped TERM: spotd exits 143" 143 "$RC"
check "untrapped TERM: the background job is gone too" \
    eval '[ -n "$bg" ] && wait_for 5 gone "$bg" && wait_for 5 group_gone "${pgid:-0}"'

# Own session and process group: pgid == sid == pid of the command, unlike
# spotd's own.
start_spotd run -- sleep 30
c=$(command_pid "$SPOTD_PID")
c=${c:-none}
expect_eq "the command leads its own process group" "$c" "$(proc_field "$c" 5)"
expect_eq "the command leads its own session" "$c" "$(proc_field "$c" 6)"
check "spotd is not in the command's group" \
    test "$(proc_field "$SPOTD_PID" 5)" != "$c"
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 10
expect_eq "sleep stopped by TERM: 143" 143 "$RC"

# Dispositions: spotd started with signals ignored (they survive exec);
# the command must get every one back at its default.  ALRM and WINCH are
# not signals spotd handles, so spotd itself keeps them ignored.
( trap '' HUP INT QUIT TERM ALRM WINCH USR2; exec "$SPOTD" run -- sleep 30 ) \
    >"$T/stdout" 2>"$T/stderr" &
SPOTD_PID=$!
_bg_pids+=("$SPOTD_PID")
c=$(command_pid "$SPOTD_PID")
c=${c:-none}
ign=$(proc_status "$SPOTD_PID" SigIgn)
check "setup: spotd was started with ALRM ignored" \
    test $(( (0x${ign:-0} >> ($(kill -l ALRM) - 1)) & 1 )) -eq 1
cign=$(proc_status "$c" SigIgn)
check "the command starts with no standard signal (1-31) ignored" \
    test $(( 0x${cign:-ffffffff} & 0x7fffffff )) -eq 0
# Signals 32 and 33 too: "every disposition at its default" (child.c).
expect_eq "the command starts with no signal ignored at all (32, 33 included)" \
    0000000000000000 "$cign"
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 10
expect_eq "spotd started with TERM ignored still stops on TERM: 143" 143 "$RC"

# Mask: the command gets the mask spotd was started with.  A wrapper
# records its own mask, then execs spotd, which starts with that mask.
sh -c 'grep "^SigBlk:" /proc/$$/status | sed "s/^SigBlk:[[:space:]]*//" >"$0"; exec "$@"' \
    "$T/blk0" "$SPOTD" run -- sleep 30 >"$T/stdout" 2>"$T/stderr" &
SPOTD_PID=$!
_bg_pids+=("$SPOTD_PID")
c=$(command_pid "$SPOTD_PID")
c=${c:-none}
expect_eq "the command's mask is the one spotd was started with" \
    "$(cat "$T/blk0")" "$(proc_status "$c" SigBlk)"
kill -TERM "$SPOTD_PID"
wait_exit "$SPOTD_PID" 10

# ... and with signals blocked at spotd's start (needs perl to block them).
if command -v perl >/dev/null 2>&1; then
    usr1=$(kill -l USR1) winch=$(kill -l WINCH)
    want=$(printf '%016x' $(( (1 << (usr1 - 1)) | (1 << (winch - 1)) )))
    perl -MPOSIX -e 'my $s = POSIX::SigSet->new(shift, shift);
                     sigprocmask(SIG_BLOCK, $s) or die "sigprocmask: $!";
                     exec @ARGV or die "exec: $!"' "$usr1" "$winch" "$SPOTD" run -- sleep 30 \
        >"$T/stdout" 2>"$T/stderr" &
    SPOTD_PID=$!
    _bg_pids+=("$SPOTD_PID")
    c=$(command_pid "$SPOTD_PID")
    c=${c:-none}
    expect_eq "setup: spotd was started with USR1 and WINCH blocked" "$want" \
        "$(proc_status "$SPOTD_PID" SigBlk)"
    expect_eq "the command keeps spotd's original blocked mask (USR1, WINCH)" \
        "$want" "$(proc_status "$c" SigBlk)"
    kill -TERM "$SPOTD_PID"
    wait_exit "$SPOTD_PID" 10
    expect_eq "spotd with a blocked mask still stops on TERM: 143" 143 "$RC"
else
    echo "SKIP: mask with signals blocked (no perl)"
fi

expect_eq "no zombie children left" 0 "$(zombies_of $$)"
check "nothing of this test is left running" wait_for 5 none_left
