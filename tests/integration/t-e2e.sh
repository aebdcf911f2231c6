#!/usr/bin/env bash
# End to end: examples/c-trainer under spotd, checkpoints in a real S3
# server (OpenStack Swift with s3api, tests/servers/swift.sh), notices from
# the metadata mocks (tests/mocks) at a random moment of the run.  Each run
# ends the way a spot instance's does: the notice's checkpoint is committed,
# spotd exits 75, and a replacement node (a fresh state directory, the same
# job and store) resumes from the newest committed generation and ends
# with the hash of a run that was never interrupted.
#
#   1. each method with a cloud's terminating notice: app (AWS
#      instance-action), signal (GCP preempted), dir (an Azure Preempt
#      scheduled event)
#   2. a terminating notice while an advisory (rebalance) checkpoint of
#      128 MiB is uploading: that checkpoint becomes the last one
#   3. periodic checkpoints (--interval 1s), each committed, none
#      deduplicated, at most 3 kept; then a notice
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/mocks/lib.sh"

. "$(dirname "$0")/s3.sh"
s3_start e2e
expect_eq "e2e: the bucket is created" 200 \
    "$(curl -s --netrc-file "$D/netrc" --aws-sigv4 "aws:amz:$AWS_REGION:s3" -o /dev/null \
        -w '%{http_code}' -H "x-amz-content-sha256: $EMPTY_SHA" -X PUT "$S3_ENDPOINT/bkt")"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
STORE=s3://bkt/e2e
ref=$(reference "$TRAINER" 3000 2)
export TRAINER_STEP_US=2000

# ---- helpers ----------------------------------------------------------------

# rand_s MIN MAX: a random number of seconds from MIN to MAX (tenths).
rand_s() {
    local t=$(( $1 * 10 + RANDOM % (($2 - $1) * 10 + 1) ))
    echo "$((t / 10)).$((t % 10))"
}
iso_in() { date -u -d "@$(( $(date +%s) + $1 ))" +%Y-%m-%dT%H:%M:%SZ; }
rfc1123_in() { LC_ALL=C date -u -d "@$(( $(date +%s) + $1 ))" '+%a, %d %b %Y %H:%M:%S GMT'; }
azure_event() { # ID TYPE RESOURCES-JSON NOTBEFORE
    printf '{"EventId":"%s","EventStatus":"Scheduled","EventType":"%s","ResourceType":"VirtualMachine","Resources":%s,"NotBefore":"%s","Description":"e2e","EventSource":"Platform","DurationInSeconds":-1}' "$1" "$2" "$3" "$4"
}

# committed JOB: the job's committed generations in the store, one JSON
# object a line, oldest first.
committed() {
    "$SPOTCTL" ls --json --store "$STORE" --job "$1" 2>>"$T/ls.err" |
        jq_ "[g for g in d if g['state'] == 'committed']"
}

# connected STATE_DIR: a trainer is connected to that spotd over libckpt.
connected() {
    [ "$(status_get "$1" workers)" -ge 1 ] 2>/dev/null
}

# commits_ge EVENTS N: at least N commit records.
commits_ge() {
    local n
    n=$(event_count "$1" commit)
    [ "${n:-0}" -ge "$2" ]
}

# after_notice NAME JOB EVENTS SOURCE METHOD: spotd exited ($RC) after a
# terminating notice from SOURCE: exit 75, the notice, the newest committed
# generation in the store is the run's last commit, made by METHOD, and it
# verifies.  Sets GEN and STEP to that generation's.
after_notice() {
    local name=$1 job=$2 evf=$3 src=$4 method=$5 n last newest
    expect_eq "$name: spotd exits 75 after the notice's checkpoint" 75 "$RC"
    n=$(ev "$evf" notice | grep "\"source\":\"$src\"" | head -n 1)
    expect_eq "$name: a terminating $src notice" true "$(jget "$n" terminating)"
    expect_eq "$name: one notice" 1 "$(event_count "$evf" notice)"
    expect_eq "$name: no checkpoint failed" 0 "$(event_count "$evf" checkpoint_failed)"
    last=$(ev "$evf" commit | tail -n 1)
    newest=$(committed "$job" | tail -n 1)
    GEN=$(jget "$newest" gen) STEP=$(jget "$newest" step)
    expect_eq "$name: the newest committed generation is the run's last commit" \
        "$(jget "$last" gen) $(jget "$last" step)" "$GEN $STEP"
    expect_eq "$name: spotctl ls names the method" "$method" "$(jget "$newest" method)"
    "$SPOTCTL" verify --store "$STORE" --job "$job" >"$T/verify" 2>&1
    expect_eq "$name: spotctl verify: every chunk there and right" "0 verified" \
        "$? $(cut -d: -f1 "$T/verify")"
}

# replacement NAME JOB GEN STEP HASH SPOTD-ARGS... -- COMMAND...: a new node
# (a fresh state directory, no notice) resumes the job and finishes it.
replacement() {
    local name=$1 job=$2 gen=$3 step=$4 want=$5
    shift 5
    run_spotd run --job "$job" --store "$STORE" "$@"
    expect_eq "$name: the replacement node finishes" 0 "$RC"
    check "$name: ... from generation $gen (step $step)" \
        has "\"event\":\"resume\",\"gen\":$gen,\"step\":$step," "$T/rep.ev"
    check "$name: ... the trainer resumed at the step after it" \
        grep -q "^resumed at step $((step + 1)) " "$T/stdout"
    expect_eq "$name: ... and ends with the uninterrupted run's hash" "$want" \
        "$(tail -n 1 "$T/stdout")"
    expect_eq "$name: ... without a notice" 0 "$(event_count "$T/rep.ev" notice)"
    rm -f "$T/rep.ev"
}

# ---- 1. each method, a cloud's notice mid-run ---------------------------------

# app, AWS: an instance-action (terminate, 25 s away) 1 to 3 s after the
# trainer connected.
mock_start aws || { fail "e2e: the aws mock starts"; exit 1; }
start_spotd run --cloud aws --metadata-url "$MOCK_URL" --poll-interval 200ms --job e2e-app \
    --store "$STORE" --state-dir "$T/app1" --method app --events "$T/app1.ev" \
    -- "$TRAINER" 3000 2
wait_for 20 connected "$T/app1" || fail "app: the trainer connects to spotd"
d=$(rand_s 1 3)
echo "app: the aws notice ${d} s after the trainer connected"
sleep "$d"
mock_state "{\"notice\":{\"action\":\"terminate\",\"time\":\"$(iso_in 25)\"}}" >/dev/null
wait_exit "$SPOTD_PID" 40
after_notice app e2e-app "$T/app1.ev" aws app
# The trainer leaves on its own once told to; on a loaded machine it may take
# longer than the drain (10 s), and the stop signal follows: either is right.
expect_match "app: notice, checkpoint, commit, stop, in that order" \
    ".*notice plan checkpoint_begin checkpoint_saved upload_done commit timeline( stop)? child_exit exit" \
    "$(events_of "$T/app1.ev")"
expect_eq "app: generation 1, the notice's" "1 notice" "$GEN $(jget "$(committed e2e-app)" reason)"
mock_reset
replacement app e2e-app "$GEN" "$STEP" "$ref" --cloud aws --metadata-url "$MOCK_URL" \
    --poll-interval 200ms --state-dir "$T/app2" --method app --events "$T/rep.ev" \
    -- "$TRAINER" 3000 2
mock_stop

# signal, GCP: preempted 1 to 3 s after the trainer started (it does not
# connect: SIGUSR1 asks it to save into SPOT_CKPT_DIR).
mock_start gcp || { fail "e2e: the gcp mock starts"; exit 1; }
TRAINER_METHOD=signal start_spotd run --cloud gcp --metadata-url "$MOCK_URL" \
    --poll-interval 200ms --job e2e-sig --store "$STORE" --state-dir "$T/sig1" --method signal \
    --events "$T/sig1.ev" -- "$TRAINER" 3000 2
wait_for 20 has '"event":"child_start"' "$T/sig1.ev" || fail "signal: the trainer starts"
d=$(rand_s 1 3)
echo "signal: the gcp preemption ${d} s after the trainer started"
sleep "$d"
mock_state '{"preempted":true}' >/dev/null
wait_exit "$SPOTD_PID" 45
after_notice signal e2e-sig "$T/sig1.ev" gcp signal
check "signal: notice, checkpoint, commit, stop, in that order" \
    grep -q "notice plan checkpoint_begin checkpoint_saved upload_done commit .*exit$" \
    <(events_of "$T/sig1.ev")
check "signal: the marker's step is the generation's" \
    test "$(cat "$T/sig1/ckpt/.spotd-saved" 2>/dev/null)" = "$STEP"
mock_reset
TRAINER_METHOD=signal replacement signal e2e-sig "$GEN" "$STEP" "$ref" --cloud gcp \
    --metadata-url "$MOCK_URL" --poll-interval 200ms --state-dir "$T/sig2" --method signal \
    --events "$T/rep.ev" -- "$TRAINER" 3000 2
mock_stop

# dir, Azure: the trainer writes checkpoint-N/ every 200 steps, each
# uploaded as it completes; a Preempt event for this VM (NotBefore 25 s
# away) once two were committed, plus up to 1 s.  Its steps take 10 ms more
# (the pace, not the math), 30 s in all: at full speed the 3000 steps took
# 2 s, and beside another suite on 2 cores the test's own shell took 10 s
# from the second commit to the notice, at 2 ms a step long enough for the
# run to end first (exit 0, and the notice's commit after the command's end
# collects nothing: 4 generations).
mock_start azure || { fail "e2e: the azure mock starts"; exit 1; }
TRAINER_METHOD=dir TRAINER_SAVE_EVERY=200 TRAINER_MARKER=1 TRAINER_STEP_US=10000 \
    start_spotd run --cloud azure \
    --metadata-url "$MOCK_URL" --poll-interval 200ms --job e2e-dir --store "$STORE" \
    --state-dir "$T/dir1" --method dir --ckpt-dir "$T/dir1ck" --settle 300ms \
    --events "$T/dir1.ev" -- "$TRAINER" 3000 2
wait_for 30 commits_ge "$T/dir1.ev" 2 || fail "dir: two folders are committed while it trains"
d=$(rand_s 0 1)
echo "dir: the azure Preempt event ${d} s after the second folder's commit"
sleep "$d"
mock_state "{\"events\":[$(azure_event E2E Preempt '["spot-vm-0"]' "$(rfc1123_in 25)")]}" >/dev/null
wait_exit "$SPOTD_PID" 40
after_notice dir e2e-dir "$T/dir1.ev" azure dir
expect_ge "dir: folders were committed while it trained" 2 \
    "$(ev "$T/dir1.ev" commit | grep -c '"reason":"dir"')"
check "dir: the newest generation is a folder the trainer wrote" \
    test -e "$T/dir1ck/checkpoint-$STEP/.spotd-complete"
# A notice while a folder uploads makes that one the last; else no folder
# complete (its marker written) before the notice, 200 ms of scanning
# aside, may be newer than the last generation.
det=$(ts_ms "$(jget "$(ev "$T/dir1.ev" notice | head -n 1)" detected)")
det=${det:-0}
inflight=$(sed -n '/"event":"notice"/q;p' "$T/dir1.ev" |
    grep -oE '"event":"(checkpoint_begin|commit|checkpoint_failed|checkpoint_skipped)"' | tail -n 1)
if [ "$inflight" = '"event":"checkpoint_begin"' ]; then
    # That one is committed; then the notice's own save looks again, and a
    # folder completed meanwhile is the last generation.
    up=$(jget "$(sed -n '/"event":"notice"/q;p' "$T/dir1.ev" | grep '"event":"checkpoint_begin"' | tail -n 1)" gen)
    echo "dir: the notice came while generation $up uploaded; the last is $GEN"
    check "dir: ... which was committed" has "\"event\":\"commit\",\"gen\":$up," "$T/dir1.ev"
    check "dir: ... and the last generation is it or the notice's own, just after" \
        test "$GEN" = "$up" -o "$GEN" = "$((up + 1))"
    [ "$GEN" = "$up" ] ||
        expect_eq "dir: ... made for the notice" notice "$(jget "$(ev "$T/dir1.ev" commit | tail -n 1)" reason)"
else
    before=-1
    for f in "$T"/dir1ck/checkpoint-*/.spotd-complete; do
        [ -e "$f" ] || continue
        m=$(stat -c %.3Y "$f" | tr -d .) s=${f%/.spotd-complete}
        s=${s##*-}
        [ "$m" -le $((det - 200)) ] && [ "$s" -gt "$before" ] && before=$s
    done
    expect_ge "dir: the last generation is the newest folder complete before the notice ($before)" \
        "$before" "$STEP"
fi
check "dir: retention keeps at most 3 committed generations" \
    test "$(committed e2e-dir | wc -l)" -le 3
mock_reset
TRAINER_METHOD=dir TRAINER_SAVE_EVERY=400 replacement dir e2e-dir "$GEN" "$STEP" "$ref" \
    --cloud azure --metadata-url "$MOCK_URL" --poll-interval 200ms --state-dir "$T/dir2" \
    --method dir --ckpt-dir "$T/dir2ck" --settle 300ms --events "$T/rep.ev" \
    -- "$TRAINER" 3000 2
mock_stop

# ---- 2. a terminating notice while a checkpoint uploads -----------------------

# 128 MiB of state (about 0.12 s a step here, without TRAINER_STEP_US; the
# upload to Swift takes a second or more).  A rebalance drill 1 to 2 s after
# the trainer connected; once its files are saved (checkpoint_saved), a
# terminate drill while they upload: that checkpoint is the last one.
ref_big=$(TRAINER_STEP_US=0 reference "$TRAINER" 100 128)
TRAINER_STEP_US=0 start_spotd run --cloud none --job e2e-big --store "$STORE" \
    --state-dir "$T/big1" --events "$T/big1.ev" -- "$TRAINER" 100 128
wait_for 30 connected "$T/big1" || fail "upload: the trainer connects to spotd"
d=$(rand_s 1 2)
echo "upload: the rebalance drill ${d} s after the trainer connected"
sleep "$d"
"$SPOTCTL" drill --state-dir "$T/big1" --kind rebalance >"$T/drill.out" 2>&1
expect_eq "upload: spotctl drill --kind rebalance" "0" "$?"
wait_for 30 has '"event":"checkpoint_saved"' "$T/big1.ev" || fail "upload: the rebalance's files are saved"
"$SPOTCTL" drill --state-dir "$T/big1" --kind terminate --in 30s >"$T/drill.out" 2>&1
expect_eq "upload: spotctl drill --kind terminate --in 30s" "0" "$?"
wait_exit "$SPOTD_PID" 60
expect_eq "upload: spotd exits 75" 75 "$RC"
seq=$(events_of "$T/big1.ev")
check "upload: the terminating notice came while the rebalance's checkpoint uploaded" \
    grep -q "checkpoint_saved notice upload_done commit timeline child_exit exit$" <(echo "$seq")
expect_eq "upload: one checkpoint, not a second for the terminating notice" "1 1" \
    "$(event_count "$T/big1.ev" checkpoint_begin) $(event_count "$T/big1.ev" commit)"
expect_eq "upload: the notices: rebalance (advisory), then terminate" \
    "rebalance false terminate true" \
    "$(ev "$T/big1.ev" notice | while read -r l; do printf '%s %s ' "$(jget "$l" kind)" "$(jget "$l" terminating)"; done | sed 's/ $//')"
commit=$(ev "$T/big1.ev" commit)
expect_ge "upload: the generation holds the 128 MiB" 134217728 "$(jget "$commit" bytes)"
c=$(committed e2e-big)
expect_eq "upload: exactly one committed generation, the rebalance's" "1 1 $(jget "$commit" step)" \
    "$(echo "$c" | grep -c .) $(jget "$c" gen) $(jget "$c" step)"
"$SPOTCTL" verify --store "$STORE" --job e2e-big >"$T/verify" 2>&1
expect_eq "upload: spotctl verify" "0 verified" "$? $(cut -d: -f1 "$T/verify")"
TRAINER_STEP_US=0 replacement upload e2e-big 1 "$(jget "$commit" step)" "$ref_big" --cloud none \
    --state-dir "$T/big2" --events "$T/rep.ev" -- "$TRAINER" 100 128
rm -rf "$T/big1" "$T/big2"

# ---- 3. periodic checkpoints, then a notice -------------------------------------

# A checkpoint every second to S3: every word of the trainer's state changes
# every step, so nothing deduplicates, but each one commits; retention keeps
# 3.  A GCP preemption once four were committed, plus up to 1 s.  The
# steps are slept long enough (3000 take 22 s at least) that the trainer
# cannot finish first on a loaded machine, where the commits come slower
# but the sleeps do not shorten; the notice comes after the commits, so an
# idle machine waits no longer.
mock_start gcp || { fail "e2e: the gcp mock starts"; exit 1; }
TRAINER_STEP_US=6000 start_spotd run --cloud gcp --metadata-url "$MOCK_URL" \
    --poll-interval 200ms --job e2e-per --store "$STORE" --state-dir "$T/per1" --interval 1s \
    --events "$T/per1.ev" -- "$TRAINER" 3000 2
wait_for 40 commits_ge "$T/per1.ev" 4 || fail "periodic: four generations are committed while it trains"
d=$(rand_s 0 1)
echo "periodic: the gcp preemption ${d} s after the fourth commit"
sleep "$d"
mock_state '{"preempted":true}' >/dev/null
wait_exit "$SPOTD_PID" 45
after_notice periodic e2e-per "$T/per1.ev" gcp app
expect_ge "periodic: periodic generations committed before the notice" 4 \
    "$(sed -n '/"event":"notice"/q;p' "$T/per1.ev" | grep '"event":"commit"' | grep -c '"reason":"periodic"')"
expect_eq "periodic: every checkpoint begun was committed" \
    "$(event_count "$T/per1.ev" checkpoint_begin)" "$(event_count "$T/per1.ev" commit)"
expect_eq "periodic: nothing deduplicated (bytes_skipped of every upload)" "" \
    "$(ev "$T/per1.ev" upload_done | grep -v '"bytes_skipped":0,')"
short=0
while read -r l; do
    # stored while the trainer wrote (bytes_early), or by the save
    early=$(jget "$l" bytes_early)
    [ $(( $(jget "$l" bytes_sent) + ${early:-0} )) -ge "$(jget "$l" bytes)" ] 2>/dev/null ||
        short=$((short + 1))
done < <(ev "$T/per1.ev" upload_done)
expect_eq "periodic: every upload stored all its bytes" 0 "$short"
check "periodic: the last commit came after the notice" \
    grep -q "notice .*commit timeline child_exit exit$" <(events_of "$T/per1.ev")
cs=$(committed e2e-per)
n=$(echo "$cs" | grep -c .)
check "periodic: retention keeps at most 3 committed generations ($n)" test "$n" -ge 1 -a "$n" -le 3
expect_eq "periodic: the oldest generations are gone" "" "$(echo "$cs" | grep '"gen":1,')"
check "periodic: the older ones are periodic" grep -q '"reason":"periodic"' <(echo "$cs")
mock_reset
replacement periodic e2e-per "$GEN" "$STEP" "$ref" --cloud gcp --metadata-url "$MOCK_URL" \
    --poll-interval 200ms --state-dir "$T/per2" --events "$T/rep.ev" -- "$TRAINER" 3000 2
mock_stop

# Swift's servers carry the test's tag too: only spotd and trainers count.
left() {
    local p
    for p in $(tagged); do
        case $(readlink "/proc/$p/exe" 2>/dev/null) in */spotd | */trainer) return 1 ;; esac
    done
}
check "e2e: no spotd or trainer is left running" left
check "e2e: no zombie children left" [ "$(zombies_of $$)" = 0 ]
