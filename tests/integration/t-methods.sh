# The methods other than app, and the orchestrator's failure paths, on the
# file store with examples/c-trainer: signal (SIGUSR1, SPOT_CKPT_DIR and
# its marker), dir (checkpoint folders the trainer writes on its own),
# each ending on a replacement node with the uninterrupted run's hash; a
# trainer that dies mid-save or ignores the request; a crash restarted from
# the newest generation; --resume; hooks; --local-workers; the plan that
# keeps the newest generation when a new one cannot fit.
. "$(dirname "$0")/lib.sh"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
mkdir -p "$T/store"
S="file://$T/store"
ref=$(reference "$TRAINER" 3000 2)
export TRAINER_STEP_US=1000

# ---- signal -----------------------------------------------------------------
TRAINER_METHOD=signal run_spotd run --cloud none --job sig --store "$S" --state-dir "$T/s1" \
    --method signal --drill-after 1s --events "$T/s1.ev" -- "$TRAINER" 3000 2
expect_eq "signal: spotd exits 75 after the notice's checkpoint" 75 "$RC"
commit=$(ev "$T/s1.ev" commit)
expect_eq "signal: generation 1 committed" 1 "$(jget "$commit" gen)"
check "signal: from SPOT_CKPT_DIR" has "\"dir\":\"$T/s1/ckpt\"" "$T/s1.ev"
check "signal: the marker's step is the generation's" \
    test "$(cat "$T/s1/ckpt/.spotd-saved")" = "$(jget "$commit" step)"
"$SPOTCTL" ls --store "$S" --job sig >"$T/ls" 2>&1
check "signal: spotctl ls names the method" grep -qE "^1 +committed .* signal" "$T/ls"
TRAINER_METHOD=signal run_spotd run --cloud none --job sig --store "$S" --state-dir "$T/s2" \
    --method signal --events "$T/s2.ev" -- "$TRAINER" 3000 2
expect_eq "signal: the replacement node finishes" 0 "$RC"
check "signal: it resumed at the step after the checkpoint" \
    grep -q "resumed at step $(( $(jget "$commit" step) + 1 )) " "$T/stdout"
expect_eq "signal: the final state equals an uninterrupted run's" "$ref" "$(tail -n 1 "$T/stdout")"

# The trainer may say so through libckpt (ckpt_saved) instead of the marker.
TRAINER_METHOD=signal TRAINER_REPORT=libckpt run_spotd run --cloud none --job sigc \
    --store "$S" --state-dir "$T/s5" --method signal --drill-after 1s --events "$T/s5.ev" \
    -- "$TRAINER" 3000 2
expect_eq "signal, ckpt_saved: committed, exit 75" 75 "$RC"
check "signal, ckpt_saved: no marker was needed" test ! -e "$T/s5/ckpt/.spotd-saved"
c5=$(ev "$T/s5.ev" commit)
TRAINER_METHOD=signal run_spotd run --cloud none --job sigc --store "$S" --state-dir "$T/s6" \
    --method signal -- "$TRAINER" 3000 2
check "signal, ckpt_saved: the step it reported is the one resumed after" \
    grep -q "resumed at step $(( $(jget "$c5" step) + 1 )) " "$T/stdout"
expect_eq "signal, ckpt_saved: the final state equals an uninterrupted run's" "$ref" \
    "$(tail -n 1 "$T/stdout")"

# Under a launcher (a script named torchrun) the signal goes to the
# workers, not to the launcher, which would die of it; after the stop, a
# launcher that lingers once its workers are gone is killed.
mkdir "$T/bin"
# (It waits on a FIFO, with no child of its own, as torchrun in its exit
# barrier.)
mkfifo "$T/bin/fifo"
printf '#!/bin/sh\n"$@" &\ntrap "" TERM\nwait\nexec 3<>"%s"\nread x <&3\n' "$T/bin/fifo" \
    >"$T/bin/torchrun"
chmod +x "$T/bin/torchrun"
t0=$(date +%s)
TRAINER_METHOD=signal run_spotd run --cloud none --job sigl --store "$S" --state-dir "$T/s4" \
    --method signal --drill-after 1s --events "$T/s4.ev" -- "$T/bin/torchrun" "$TRAINER" 3000 2
expect_eq "signal, launcher: the workers saved, spotd exits 75" 75 "$RC"
check "signal, launcher: the lingering launcher was killed" \
    grep -q '"event":"kill".*launcher lingers' "$T/s4.ev"
expect_lt "signal, launcher: ... in seconds, not after the 30 s grace" 20 \
    "$(( $(date +%s) - t0 ))"

# A trainer that does not create the marker: the checkpoint fails at the
# deadline, saying what was expected, and nothing is committed.
TRAINER_METHOD=dir run_spotd run --cloud none --job sig2 --store "$S" --state-dir "$T/s3" \
    --method signal --ckpt-signal USR2 --drill-after 500ms --signal-deadline 3s \
    --notice-margin 1s --grace 1s --events "$T/s3.ev" -- sh -c 'trap "" USR2; sleep 20'
check "signal: no marker: the checkpoint fails, naming the marker" \
    grep -q '"event":"checkpoint_failed".*did not create.*spotd-saved' "$T/s3.ev"
check "signal: ... and the command is stopped" test "$RC" -ne 75 -a "$RC" -ne 0
expect_eq "signal: ... no generation" "" "$("$SPOTCTL" ls --store "$S" --job sig2 2>/dev/null | grep committed)"

# ---- dir --------------------------------------------------------------------
# The notice comes (spotctl drill) once two folders were committed.  Its
# steps take 1 ms more (the pace, not the math), so that the run does not
# end before the drill on a loaded machine.
TRAINER_METHOD=dir TRAINER_SAVE_EVERY=400 TRAINER_MARKER=1 TRAINER_STEP_US=1000 \
    start_spotd run --cloud none --job dir --store "$S" --state-dir "$T/d1" --method dir \
    --ckpt-dir "$T/d1ck" --settle 5s --events "$T/d1.ev" -- "$TRAINER" 3000 2
two_commits() { local n; n=$(event_count "$T/d1.ev" commit); [ "${n:-0}" -ge 2 ]; }
wait_for 30 two_commits
"$SPOTCTL" drill --state-dir "$T/d1" >/dev/null
wait_exit "$SPOTD_PID" 30
expect_eq "dir: spotd exits 75 after the notice" 75 "$RC"
expect_ge "dir: folders were uploaded while it trained" 2 "$(ev "$T/d1.ev" commit | grep -c '"reason":"dir"')"
last=$(ev "$T/d1.ev" commit | tail -n 1)
newest=$(jget "$last" step)
# The trainer trains on while the last one uploads (and until the stop
# lands): the folders complete before the notice are what it must cover.
# 10 ms for the file system's coarse mtime clock.
det=$(ts_ms "$(jget "$(ev "$T/d1.ev" notice | head -n 1)" detected)")
before=-1
for f in "$T"/d1ck/checkpoint-*/.spotd-complete; do
    [ -e "$f" ] || continue
    m=$(stat -c %.3Y "$f" | tr -d .) s=${f%/.spotd-complete}
    s=${s##*-}
    [ "$m" -le $((${det:-0} - 10)) ] && [ "$s" -gt "$before" ] && before=$s
done
expect_ge "dir: the newest generation is the newest folder complete before the notice ($before)" \
    "$before" "${newest:--1}"
steps=$(ev "$T/d1.ev" commit | grep -oE '"step":[0-9]+' | sort)
expect_eq "dir: no folder twice" "$(sort -u <<<"$steps")" "$steps"
check "dir: each generation a folder the trainer wrote" \
    test -z "$(for x in ${steps//\"step\":/}; do [ -d "$T/d1ck/checkpoint-$x" ] || echo "$x"; done)"
TRAINER_METHOD=dir TRAINER_SAVE_EVERY=400 run_spotd run --cloud none --job dir --store "$S" \
    --state-dir "$T/d2" --method dir --ckpt-dir "$T/d2ck" --events "$T/d2.ev" -- "$TRAINER" 3000 2
expect_eq "dir: the replacement node finishes" 0 "$RC"
check "dir: it resumed from the newest folder" grep -q "resumed at step $((newest + 1)) " "$T/stdout"
expect_eq "dir: the final state equals an uninterrupted run's" "$ref" "$(tail -n 1 "$T/stdout")"
# Without the marker a folder is complete once it settled.
TRAINER_METHOD=dir TRAINER_SAVE_EVERY=300 run_spotd run --cloud none --job dir2 --store "$S" \
    --state-dir "$T/d3" --method dir --ckpt-dir "$T/d3ck" --settle 300ms --events "$T/d3.ev" \
    -- "$TRAINER" 3000 2
expect_ge "dir: without markers, settled folders are uploaded" 1 "$(event_count "$T/d3.ev" commit)"
run_spotd run --cloud none --job dir3 --store "$S" --state-dir "$T/d4" --method dir -- true
check "dir: --ckpt-dir is required, said clearly" grep -q "needs --ckpt-dir" "$T/stderr"

# ---- app: failures ----------------------------------------------------------
run_spotd run --cloud none --job app --store "$S" --state-dir "$T/a1" --drill-after 1s:rebalance \
    --events "$T/a1.ev" -- "$TRAINER" 1500 2
expect_eq "app: an advisory checkpoint, the run finishes" 0 "$RC"
TRAINER_SAVE_CRASH=1 run_spotd run --cloud none --job app --store "$S" --state-dir "$T/a2" \
    --drill-after 1s --grace 1s --events "$T/a2.ev" -- "$TRAINER" 3000 2
check "app: a trainer dying mid-save fails the checkpoint" \
    grep -q '"event":"checkpoint_failed".*went away' "$T/a2.ev"
expect_eq "app: ... spotd exits with the trainer's code, not 75" 4 "$RC"
"$SPOTCTL" ls --json --store "$S" --job app >"$T/ls" 2>"$T/ls.err"
expect_eq "app: ... generation 1 stays the only committed one" 1 "$(ls_gens "$T/ls" | wc -l)"
"$SPOTCTL" verify --store "$S" --job app >"$T/verify" 2>&1
expect_eq "app: ... and verifies" 0 "$?"
# The drill comes once the trainer has connected, on a loaded machine too
# (before, a committed generation and nobody to save would end it saved).
TRAINER_IGNORE_SAVE=1 run_spotd run --cloud none --job app --store "$S" --state-dir "$T/a3" \
    --drill-after 3s --signal-deadline 3s --notice-margin 1s --grace 1s \
    --events "$T/a3.ev" -- "$TRAINER" 30000 2
check "app: a trainer that ignores the request times out, saying so" \
    grep -q '"event":"checkpoint_failed".*did not report its save before the deadline' "$T/a3.ev"
check "app: ... and is stopped" test "$RC" -eq 143

# A crash restarts the command from the newest generation.
TRAINER_CRASH_AT=1800 TRAINER_CRASH_FLAG="$T/crashed" run_spotd run --cloud none --job crash \
    --store "$S" --state-dir "$T/c1" --interval 500ms --restart on-failure --events "$T/c1.ev" \
    -- "$TRAINER" 3000 2
expect_eq "crash: the restarted run finishes" 0 "$RC"
# The newest commit before the command started again (one may land after
# the crash, during the restart's backoff: the restart resumes from it).
before=$(awk '/"event":"child_start"/ && ++n == 2 { exit } /"event":"commit"/ { c = $0 }
              END { print c }' "$T/c1.ev")
check "crash: a generation was committed before the restart" test -n "$before"
check "crash: the restarted trainer resumed from it" \
    grep -q "resumed at step $(( $(jget "$before" step) + 1 )) " "$T/stdout"
expect_eq "crash: the final state equals an uninterrupted run's" "$ref" "$(tail -n 1 "$T/stdout")"

# ---- --resume ---------------------------------------------------------------
run_spotd run --cloud none --job crash --store "$S" --state-dir "$T/r1" --resume never \
    --events "$T/r1.ev" -- "$TRAINER" 10 2
check "resume never: a fresh start" sh -c "! grep -q resumed '$T/stdout'"
g=$("$SPOTCTL" ls --json --store "$S" --job crash | ls_gens /dev/stdin | head -n 1)
run_spotd run --cloud none --job crash --store "$S" --state-dir "$T/r2" --resume "$g" \
    --events "$T/r2.ev" -- "$TRAINER" 10 2
check "resume GEN: that generation" has "\"event\":\"resume\",\"gen\":$g," "$T/r2.ev"
run_spotd run --cloud none --job crash --store "$S" --state-dir "$T/r3" --resume 999 -- true
expect_eq "resume GEN: a generation that is not there refuses to start" 125 "$RC"
check "resume GEN: ... saying so" grep -q "no committed generation 999" "$T/stderr"

# ---- hooks ------------------------------------------------------------------
mkdir "$T/hooks"
# The hook reads its own signal mask with builtins only: a forked grep would
# read the shell's while dash blocks every signal around its vfork (dash
# does, until the child has exec'd), and see them all blocked.
for h in on-notice pre-checkpoint post-checkpoint pre-restore post-restore; do
    printf '#!/bin/sh\nenv | grep "^SPOT_" | sort >"%s/%s.env"\necho "$1" >"%s/%s.argv"\nwhile read -r k v; do case $k in SigBlk:|SigIgn:) printf "%%s\\t%%s\\n" "$k" "$v";; esac; done </proc/$$/status >"%s/%s.sig"\n' \
        "$T" "$h" "$T" "$h" "$T" "$h" >"$T/hooks/$h"
    chmod +x "$T/hooks/$h"
done
run_spotd run --cloud none --job hk --store "$S" --state-dir "$T/h1" --hooks-dir "$T/hooks" \
    --drill-after 1s --events "$T/h1.ev" -- "$TRAINER" 3000 2
expect_eq "hooks: the checkpoint still commits" 75 "$RC"
for h in on-notice pre-checkpoint post-checkpoint; do
    check "hooks: $h ran with its name as argv[1]" grep -qx "$h" "$T/$h.argv"
done
expect_eq "hooks: a hook runs with no signal ignored or blocked (spotd's own are reset)" \
    "SigBlk:	0000000000000000 SigIgn:	0000000000000000" "$(sort "$T/pre-checkpoint.sig" | xargs -d '\n')"
check "hooks: the environment names the job" grep -qx "SPOT_JOB=hk" "$T/pre-checkpoint.env"
check "hooks: ... the generation" grep -qx "SPOT_GEN=1" "$T/post-checkpoint.env"
check "hooks: ... the result" grep -qx "SPOT_RESULT=committed" "$T/post-checkpoint.env"
check "hooks: ... the deadline" grep -q "^SPOT_DEADLINE_MS=[0-9]" "$T/pre-checkpoint.env"
run_spotd run --cloud none --job hk --store "$S" --state-dir "$T/h2" --hooks-dir "$T/hooks" \
    -- "$TRAINER" 3000 2
check "hooks: pre-restore and post-restore ran" test -s "$T/pre-restore.env" -a -s "$T/post-restore.env"
check "hooks: post-restore knows where" grep -qx "SPOT_DIR=$T/h2/restore/gen-00000001" "$T/post-restore.env"
printf '#!/bin/sh\nexit 3\n' >"$T/hooks/pre-checkpoint"
printf '#!/bin/sh\nexit 1\n' >"$T/hooks/pre-restore"
run_spotd run --cloud none --job hk --store "$S" --state-dir "$T/h3" --hooks-dir "$T/hooks" -- true
expect_eq "hooks: a failing pre-restore stops spotd" 125 "$RC"
check "hooks: ... saying so" grep -q "pre-restore hook refused" "$T/stderr"
rm "$T/hooks/pre-restore"
printf '#!/bin/sh\nsleep 30\n' >"$T/hooks/on-notice"
run_spotd run --cloud none --job hk2 --store "$S" --state-dir "$T/h4" --hooks-dir "$T/hooks" \
    --hook-timeout 500ms --drill-after 1s:rebalance --events "$T/h4.ev" -- "$TRAINER" 2500 2
check "hooks: a failing pre-checkpoint fails the checkpoint" \
    grep -q '"event":"checkpoint_failed".*pre-checkpoint hook refused' "$T/h4.ev"
check "hooks: a hook past --hook-timeout is killed" grep -q "hook on-notice: still running" "$T/stderr"
expect_eq "hooks: ... and the run goes on" 0 "$RC"

# The examples in hooks/ work as they are.
SPOT_HOOK_LOG="$T/hook.log" SPOT_HOOK_MIN_FREE_MB=1 run_spotd run --cloud none --job hx \
    --store "$S" --state-dir "$T/h5" --hooks-dir "$TOP/hooks" --drill-after 1s \
    -- "$TRAINER" 3000 2
expect_eq "hooks/: a checkpoint with the example hooks" 75 "$RC"
check "hooks/: post-checkpoint logged it" grep -q '"job":"hx","gen":1,.*"result":"committed"' "$T/hook.log"
check "hooks/: no example failed" sh -c "! grep -q 'hook [a-z-]*: exited with code [1-9]' '$T/stderr'"
SPOT_HOOK_MIN_FREE_MB=1 run_spotd run --cloud none --job hx --store "$S" --state-dir "$T/h6" \
    --hooks-dir "$TOP/hooks" -- "$TRAINER" 3000 2
check "hooks/: post-restore says what came back" grep -q "post-restore: generation 1 .*2 files" "$T/stdout"
SPOT_HOOK_MIN_FREE_MB=999999999 run_spotd run --cloud none --job hx --store "$S" \
    --state-dir "$T/h7" --hooks-dir "$TOP/hooks" -- "$TRAINER" 3000 2
expect_eq "hooks/: pre-restore refuses a file system too full" 125 "$RC"

# ---- local workers ----------------------------------------------------------
cat >"$T/two.sh" <<EOF2
LOCAL_RANK=0 "$TRAINER" 3000 2 >"$T/w0.out" & a=\$!
LOCAL_RANK=1 "$TRAINER" 3000 2 >"$T/w1.out" & b=\$!
wait \$a; ra=\$?; wait \$b; rb=\$?
[ \$ra -eq \$rb ] && exit \$ra; exit 1
EOF2
run_spotd run --cloud none --job two --store "$S" --state-dir "$T/l1" --local-workers 2 \
    --drill-after 1s --events "$T/l1.ev" -- sh "$T/two.sh"
expect_eq "local workers: both saved, committed, exit 75" 75 "$RC"
check "local workers: one folder each" test -s "$T/l1/work/gen-00000001/w0/state.bin" -a \
    -s "$T/l1/work/gen-00000001/w1/state.bin"
run_spotd run --cloud none --job two --store "$S" --state-dir "$T/l2" --local-workers 2 \
    -- sh "$T/two.sh"
expect_eq "local workers: both resume and finish" 0 "$RC"
expect_eq "local workers: worker 0 ends with the uninterrupted hash" "$ref" "$(tail -n 1 "$T/w0.out")"
expect_eq "local workers: worker 1 too" "$ref" "$(tail -n 1 "$T/w1.out")"
run_spotd run --cloud none --job one --store "$S" --state-dir "$T/l3" --local-workers 2 \
    --drill-after 1s --signal-deadline 3s --notice-margin 1s --grace 1s --events "$T/l3.ev" \
    -- "$TRAINER" 30000 2
check "local workers: one of two missing fails the checkpoint, saying so" \
    grep -q '"event":"checkpoint_failed".*only 1 of the 2 local workers' "$T/l3.ev"

run_spotd run --cloud none --job one --store "$S" --state-dir "$T/l4" --drill-after 1s \
    --signal-deadline 3s --notice-margin 1s --grace 1s --events "$T/l4.ev" \
    -- env LOCAL_WORLD_SIZE=2 "$TRAINER" 30000 2
check "local workers: a trainer's LOCAL_WORLD_SIZE counts too" \
    grep -q '"event":"checkpoint_failed".*only 1 of the 2 local workers' "$T/l4.ev"

# ---- the plan ---------------------------------------------------------------
# Figures from an earlier run say a checkpoint takes 9 s; the notice leaves
# 3: the newest generation (1) is kept and the command stopped at once.
run_spotd run --cloud none --job plan --store "$S" --state-dir "$T/p1" --drill-after 1s \
    -- "$TRAINER" 3000 2
check "plan: figures are kept after a commit" grep -q '"save_ms"' "$T/p1/figures.json"
printf '{"save_ms":3000,"upload_ms":5000,"commit_ms":1000,"bytes":1,"bytes_sent":1,"step":100,"at_ms":%s,"prev_step":0,"prev_at_ms":%s}\n' \
    "$(( $(date +%s) * 1000 - 1000 ))" "$(( $(date +%s) * 1000 - 2000 ))" >"$T/p1/figures.json"
run_spotd run --cloud none --job plan --store "$S" --state-dir "$T/p1" --drill-after 500ms \
    --signal-deadline 4s --notice-margin 1s --grace 1s --events "$T/p2.ev" -- "$TRAINER" 30000 2
check "plan: too slow to fit: the newest generation is kept" \
    grep -q '"event":"plan".*"fits":false,"kept_gen":1,"steps_lost":[0-9]' "$T/p2.ev"
check "plan: ... saying so, and how much is lost" \
    grep -q 'keeping generation 1 (step [0-9]*); the work since is lost, about [0-9]* steps' "$T/stderr"
check "plan: ... no checkpoint begins" sh -c "! grep -q checkpoint_begin '$T/p2.ev'"
check "plan: ... and the command is stopped (not 75)" test "$RC" -ne 75
