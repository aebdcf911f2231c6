# The README's five-minute tour, run as written (its code block, with
# /tmp/tour moved into this test's directory and build/ into $O): a new
# user's first steps must work.
. "$(dirname "$0")/lib.sh"

# The first block (an unchanged PyTorch trainer) needs torch: t-zeroglue.sh
# runs it.  This is the second, the C trainer's.
readme_tour 2 "$T/tour.sh"
check "the README has the tour's code block" grep -q "spotctl resume" "$T/tour.sh"
(cd "$TOP" && timeout -k 2 400 bash "$T/tour.sh") >"$T/out" 2>"$T/err"
expect_eq "the tour runs to its end" 0 "$?"
[ -s "$T/err" ] && sed 's/^/  tour stderr: /' "$T/err" | tail -n 5
check "status shows the running job" grep -q "^newest committed" "$T/out"
check "the drill is sent, and spotd exits 75 after its checkpoint" \
    eval 'grep -q "^drill sent" "$T/out" && grep -q "^spotd exited with 75$" "$T/out"'
check "the log shows the drill's notice and its commit" \
    eval 'grep -q "event=notice source=drill" "$T/out" && grep -q "event=commit .*reason=notice" "$T/out"'
check "ls, show and verify describe the generations" \
    eval 'grep -Eq "^[0-9]+ +committed .* notice " "$T/out" && grep -q "^generation " "$T/out" &&
          grep -q "^verified: .* every hash correct; unsigned$" "$T/out"'
check "the resumed run goes on from the saved step" grep -q "^resumed at step " "$T/out"
hashes=$(grep "^done 4000 hash " "$T/out" | sort -u | wc -l)
expect_eq "the resumed run and an uninterrupted one end with the same hash" \
    "2|1" "$(grep -c "^done 4000 hash " "$T/out")|$hashes"
check "nothing of this test is left running" wait_for 5 none_left
