#!/usr/bin/env bash
# Exit codes: spotd exits with the command's code, 128+n when a signal
# killed it, 127 when the command cannot be found and 126 when it cannot be
# executed; the event log records each.
. "$(dirname "$0")/lib.sh"

# Every code 0..255 comes through unchanged: one PASS, or one FAIL per code.
bad=0
for i in $(seq 0 255); do
    run_spotd run -- sh -c "exit $i"
    if [ "$RC" -ne "$i" ]; then
        fail "exit code $i propagates" "spotd exited $RC"
        bad=$((bad + 1))
    fi
done
[ $bad -eq 0 ] && pass "exit codes 0..255 propagate"

# The event log's child_exit and exit records carry the code, no signal.
for i in 0 3 255; do
    run_spotd run --events "$T/code$i.events" -- sh -c "exit $i"
    line=$(ev "$T/code$i.events" child_exit)
    expect_eq "child_exit of 'exit $i' has code $i" "$i" "$(jget "$line" code)"
    check "child_exit of 'exit $i' has no signal" eval '! printf "%s" "$line" | grep -q "\"signal\""'
    expect_eq "exit record of 'exit $i' has code $i" "$i" "$(jget "$(ev "$T/code$i.events" exit)" code)"
done

# Death by signal: 128+n, and the event names the signal.  The command
# kills itself with the signal; spotd gives it default dispositions, so
# even INT and QUIT kill a plain sh.
for pair in TERM:143 KILL:137 INT:130 HUP:129 USR1:138 SEGV:139 ABRT:134 QUIT:131 \
            USR2:140 ALRM:142; do
    sig=${pair%%:*} code=${pair##*:}
    f="$T/sig-$sig.events"
    run_spotd run --events "$f" -- sh -c "kill -$sig \$\$; sleep 5"
    expect_eq "death by SIG$sig exits $code" "$code" "$RC"
    line=$(ev "$f" child_exit)
    expect_eq "child_exit of SIG$sig names the signal" "$sig" "$(jget "$line" signal)"
    expect_eq "child_exit of SIG$sig has code $code" "$code" "$(jget "$line" code)"
    expect_eq "exit record of SIG$sig has code $code" "$code" "$(jget "$(ev "$f" exit)" code)"
done

# Not found in PATH: 127, and stderr says so.
run_spotd run --events "$T/nf.events" -- spotd-no-such-command-xyz arg
expect_eq "command not found exits 127" 127 "$RC"
check "not found: stderr says 'not found in PATH'" has "not found in PATH" "$T/stderr"
check "not found: stderr names the command" has "spotd-no-such-command-xyz" "$T/stderr"
expect_eq "not found: exit record has code 127" 127 "$(jget "$(ev "$T/nf.events" exit)" code)"
expect_eq "not found: no child_start record" 0 "$(event_count "$T/nf.events" child_start)"
expect_eq "not found: one error record" 1 "$(event_count "$T/nf.events" error)"

# A missing path (with a slash) is also 127.
run_spotd run -- "$T/no/such/file"
expect_eq "missing path exits 127" 127 "$RC"

# A regular file without execute permission: 126.
printf '#!/bin/sh\nexit 0\n' >"$T/noexec"
chmod 0644 "$T/noexec"
run_spotd run --events "$T/ne.events" -- "$T/noexec"
expect_eq "non-executable file exits 126" 126 "$RC"
check "non-executable file: stderr names it" has "$T/noexec" "$T/stderr"
expect_eq "non-executable file: exit record has code 126" 126 \
    "$(jget "$(ev "$T/ne.events" exit)" code)"

# A directory: 126.
mkdir "$T/adir"
run_spotd run -- "$T/adir"
expect_eq "directory exits 126" 126 "$RC"

# An executable script that works, by path, exits with its code.
printf '#!/bin/sh\nexit 42\n' >"$T/script"
chmod 0755 "$T/script"
run_spotd run -- "$T/script"
expect_eq "executable script by path exits with its code" 42 "$RC"

# Nothing was left behind by any of the above: spotd (this shell's child)
# left no zombie here, and no command of ours is still running.
expect_eq "no zombie children left" 0 "$(zombies_of $$)"
check "nothing of this test is left running" wait_for 5 none_left
