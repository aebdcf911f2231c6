# The fault matrix: one ordinary fault at a time, and what the store holds
# after spotd came through it (examples/c-trainer, the app method).  Each
# row: the committed generations before and after, the newest one that
# restores (spotctl verify), the steps the trainer lost against the newest
# committed state that was intact, and how many committed generations were
# lost or overwritten, which must be 0 in every row:
#
#   corrupt chunk    a chunk of the newest generation flipped in the store
#   missing manifest the newest generation's rank-0.json deleted
#   list error file  the file store's gens/ unreadable for a moment at start
#   list error s3    Swift behind the fault proxy: the first listings 403,
#                    then 503 (skipped where Swift cannot run)
#   two writers      two spotd of one job checkpointing at once
#   kill -9 PHASE    spotd and its trainer killed while saving, uploading,
#                    committing, then started again on the same node
#   clock step       a world of two, one node's wall clock stepped +8 s and
#                    -8 s while it checkpoints
#
# steps_lost is - for kill -9: no notice came, so what the trainer did since
# the newest commit is lost by the nature of the fault; the row checks that
# the store kept everything committed and the restart resumed from the newest.
# Lost: a generation that was committed, is gone, and has fewer than the
# three committed generations newer than it that retention keeps.
# Overwritten: one whose record changed, or one number committed twice.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"
. "$TOP/tests/mocks/lib.sh"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
S="file://$T/store"
mkdir -p "$T/store"
REF=$(reference "$TRAINER" 6000 2)
KEEP=3

# gens STORE JOB: the committed generations, oldest first, one a line.
gens() {
    "$SPOTCTL" ls --json --store "$1" --job "$2" 2>/dev/null | tr '}' '\n' |
        grep '"state":"committed"' | sed 's/.*"gen":\([0-9]*\).*/\1/'
}

# prints STORE JOB FILE: "GEN FINGERPRINT" of each committed generation
# (its commit record as spotctl ls reads it: step, time, bytes, signature,
# which bind the manifests' digests) into FILE.
prints() {
    "$SPOTCTL" ls --json --store "$1" --job "$2" 2>/dev/null | tr '}' '\n' |
        grep '"state":"committed"' | while read -r l; do
            echo "$(printf '%s\n' "$l" | sed 's/.*"gen":\([0-9]*\).*/\1/') $(printf '%s' "$l" |
                sed 's/^[[,]//; s/"manifests":[0-9]*,//' | sha256sum | cut -c1-16)"
        done >"$3"
}

# newest_ok STORE JOB: the newest committed generation that verifies, or -.
newest_ok() {
    local g
    for g in $(gens "$1" "$2" | sort -rn); do
        "$SPOTCTL" verify --store "$1" --job "$2" --gen "$g" >/dev/null 2>&1 && { echo "$g"; return; }
    done
    echo -
}

# step_of STORE JOB GEN: the step generation GEN holds.
step_of() {
    "$SPOTCTL" ls --json --store "$1" --job "$2" 2>/dev/null | tr '}' '\n' |
        grep "\"gen\":$3,\"state\":\"committed\"" | sed 's/.*"step":\([0-9]*\).*/\1/'
}

# commits EVENTS...: the generations those event logs committed, one a line.
commits() {
    cat "$@" 2>/dev/null | grep '"event":"commit"' | sed 's/.*"gen":\([0-9]*\).*/\1/'
}

printf '%-18s %-14s %-14s %-9s %-10s %s\n' "fault" "before" "after" "restores" "steps_lost" \
    "lost/overwritten" >"$T/table"

# row NAME STORE JOB BEFORE_PRINTS STEPS_LOST [EVENTS...]: the row, and the
# check that nothing committed was lost or overwritten.  EVENTS: the event
# logs of every spotd of the row, whose commits count as committed too.
row() {
    local name=$1 store=$2 job=$3 before=$4 steps=$5 lost=0 over=0 g newer after
    shift 5
    prints "$store" "$job" "$T/after.prints"
    after=$(cut -d' ' -f1 "$T/after.prints" | tr '\n' ' ')
    for g in $( (cut -d' ' -f1 "$before"; commits "$@") | sort -n | uniq); do
        if grep -q "^$g " "$T/after.prints"; then
            continue
        fi
        newer=$(awk -v g="$g" '$1 > g' "$T/after.prints" | wc -l)
        [ "$newer" -lt $KEEP ] && lost=$((lost + 1))
    done
    while read -r g fp; do
        grep -q "^$g " "$T/after.prints" && ! grep -qx "$g $fp" "$T/after.prints" &&
            over=$((over + 1))
    done <"$before"
    # One number committed by two writers (the logs of both say so).
    over=$((over + $(commits "$@" | sort | uniq -d | wc -l)))
    printf '%-18s %-14s %-14s %-9s %-10s %s\n' "$name" \
        "$(cut -d' ' -f1 "$before" | tr '\n' ',' | sed 's/,$//')" \
        "$(echo "$after" | tr ' ' ',' | sed 's/,$//')" "$(newest_ok "$store" "$job")" \
        "$steps" "$lost/$over" >>"$T/table"
    expect_eq "faults ($name): no committed generation lost" 0 "$lost"
    expect_eq "faults ($name): no committed generation overwritten" 0 "$over"
}

# make_gens STORE JOB [ENV...]: a run preempted mid-way, with periodic
# checkpoints before: three committed generations (of MIB MiB, 2 unless set).
make_gens() {
    local store=$1 job=$2
    shift 2
    env TRAINER_STEP_US=1000 "$@" timeout -k 2 60 "$SPOTD" run --cloud none --job "$job" \
        --store "$store" --state-dir "$T/$job.make" --interval 300ms --drill-after 2s \
        -- "$TRAINER" 6000 "${MIB:-2}" >/dev/null 2>"$T/$job.make.err"
}

# recover STORE JOB [ARGS...]: a replacement, to the end: sets RC, and
# RESUMED, the step its trainer resumed at (- when it started afresh).
recover() {
    local store=$1 job=$2
    shift 2
    run_spotd run --cloud none --job "$job" --store "$store" --state-dir "$T/$job.r$RANDOM" \
        --events "$T/$job.rec.ev" "$@" -- "$TRAINER" 6000 2
    RESUMED=$(sed -n 's/^resumed at step \([0-9]*\) .*/\1/p' "$T/stdout" | head -n 1)
    RESUMED=${RESUMED:--}
    expect_eq "faults ($job): the replacement finishes, with the uninterrupted hash" \
        "0 $REF" "$RC $(tail -n 1 "$T/stdout")"
}

# lost_steps FROM_STEP: steps redone after the resume, against FROM_STEP.
lost_steps() {
    [ "$RESUMED" = - ] && { echo "all"; return; }
    echo $(( $1 + 1 - RESUMED ))
}

# damage_chunk JOB GEN: flip a byte in the middle of w0/state.bin's chunk.
damage_chunk() {
    python3 - "$T/store/$1" "$2" <<'EOF'
import json, sys
root, gen = sys.argv[1], int(sys.argv[2])
m = json.load(open("%s/gens/%08d/rank-0.json" % (root, gen)))
h = [f for f in m["files"] if f["path"].endswith("state.bin")][0]["chunks"][0][1]
p = "%s/chunks/%s/%s" % (root, h[:2], h)
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0xff
open(p, "wb").write(b)
EOF
}

# ---- a corrupt chunk, a missing manifest ---------------------------------------
for fault in "corrupt chunk" "missing manifest"; do
    job=$(echo "$fault" | tr ' ' '-')
    make_gens "$S" "$job"
    prints "$S" "$job" "$T/$job.before"
    newest=$(tail -n 1 "$T/$job.before" | cut -d' ' -f1)
    top=$(step_of "$S" "$job" "$newest")
    if [ "$fault" = "corrupt chunk" ]; then
        damage_chunk "$job" "$newest"
    else
        rm "$T/store/$job/gens/$(printf %08d "$newest")/rank-0.json"
    fi
    recover "$S" "$job"
    check "faults ($fault): resumed from the generation before the damaged one" \
        test "$(jget "$(ev "$T/$job.rec.ev" resume)" gen)" = "$(sed -n '2p' "$T/$job.before" | cut -d' ' -f1)"
    # The damaged one's record goes from the prints: it stays, unchanged.
    row "$fault" "$S" "$job" "$T/$job.before" "$(lost_steps "$top")" "$T/$job.rec.ev"
done

# ---- a listing error at start: file ---------------------------------------------
job=list-file
make_gens "$S" "$job"
prints "$S" "$job" "$T/$job.before"
top=$(step_of "$S" "$job" "$(tail -n 1 "$T/$job.before" | cut -d' ' -f1)")
# gens/ a link to itself (ELOOP) for 3 s, then, in one rename, a link to the
# real folder: never a moment without gens/, which would be a job with
# nothing in it, not an error.
mv "$T/store/$job/gens" "$T/store/$job/gens.real"
ln -s gens "$T/store/$job/gens"
( sleep 3; ln -s gens.real "$T/store/$job/gens.new"; mv -T "$T/store/$job/gens.new" "$T/store/$job/gens" ) &
recover "$S" "$job" --store-wait 60s
wait
check "faults (list error file): the listing failed, and was tried again" \
    grep -q "cannot list the checkpoints of job '$job'.*trying again" "$T/stderr"
row "list error file" "$S" "$job" "$T/$job.before" "$(lost_steps "$top")" "$T/$job.rec.ev"

# ---- a listing error at start: S3 (Swift behind the fault proxy) --------------------
. "$(dirname "$0")/s3.sh"
swift_row() {
    local job=list-s3 st=s3://faults/m
    s3_start faults-s3 || return
    curl -s --netrc-file "$D/netrc" --aws-sigv4 "aws:amz:$AWS_REGION:s3" -o /dev/null \
        -H "x-amz-content-sha256: $EMPTY_SHA" -X PUT "$S3_ENDPOINT/faults"
    fault_start "${S3_ENDPOINT#http://}" || { fail "faults (list error s3): the proxy starts"; return; }
    make_gens "$st" "$job" AWS_ENDPOINT_URL="$FAULT_URL"
    prints "$st" "$job" "$T/$job.before"
    top=$(step_of "$st" "$job" "$(tail -n 1 "$T/$job.before" | cut -d' ' -f1)")
    fault_rules '[{"method":"GET","path":"list-type=2.*gens","action":"403","times":3},
                  {"method":"GET","path":"list-type=2.*gens","action":"503","times":8}]' >/dev/null
    AWS_ENDPOINT_URL=$FAULT_URL recover "$st" "$job" --store-wait 120s
    check "faults (list error s3): the 403s were said, and tried again" \
        grep -q "cannot list the checkpoints of job '$job'.*403 AccessDenied.*trying again" "$T/stderr"
    row "list error s3" "$st" "$job" "$T/$job.before" "$(lost_steps "$top")" "$T/$job.rec.ev"
}
if [ -x /usr/bin/swift-proxy-server ]; then
    swift_row
else
    echo "SKIP: faults (list error s3): no Swift here (CI installs it)"
    printf '%-18s skipped: no Swift\n' "list error s3" >>"$T/table"
fi

# ---- two writers of one job --------------------------------------------------------
job=two-writers
make_gens "$S" "$job"
prints "$S" "$job" "$T/$job.before"
top=$(step_of "$S" "$job" "$(tail -n 1 "$T/$job.before" | cut -d' ' -f1)")
for w in a b; do
    TRAINER_STEP_US=1000 "$SPOTD" run --cloud none --job "$job" --store "$S" \
        --state-dir "$T/$job.$w" --interval 200ms --drill-after 3s --events "$T/$job.$w.ev" \
        -- "$TRAINER" 6000 2 >"$T/$job.$w.out" 2>"$T/$job.$w.err" &
    node_started "$job.$w" $!
done
wait_node "$job.a" 60
ra=$RC
wait_node "$job.b" 60
expect_eq "faults (two writers): both preempted with their state saved" "75 75" "$ra $RC"
check "faults (two writers): a number taken by the other was said, and the next one taken" \
    grep -qh "of job '$job' is taken" "$T/$job.a.err" "$T/$job.b.err"
row "two writers" "$S" "$job" "$T/$job.before" "0" "$T/$job.a.ev" "$T/$job.b.ev"

# ---- kill -9 at each phase ----------------------------------------------------------
# The phase's event is waited for, then spotd and everything it ran die.
for phase in saving uploading committing; do
    case $phase in
    saving) event=checkpoint_begin ;;
    uploading) event=checkpoint_saved ;;
    committing) event=upload_done ;;
    esac
    job=kill-$phase
    MIB=4 make_gens "$S" "$job"
    prints "$S" "$job" "$T/$job.before"
    TRAINER_STEP_US=1000 TRAINER_SAVE_SLEEP_MS=800 start_spotd run --cloud none --job "$job" \
        --store "$S" --state-dir "$T/$job.node" --drill-after 1500ms --events "$T/$job.ev" \
        -- "$TRAINER" 1500 4
    wait_for 30 grep -qs "\"event\":\"$event\"" "$T/$job.ev"
    kill_tree "$SPOTD_PID"
    wait "$SPOTD_PID" 2>/dev/null
    for p in $(tagged); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = trainer ] && kill -KILL "$p"
    done
    # The same node again: its state directory, what the kill left there.
    run_spotd run --cloud none --job "$job" --store "$S" --state-dir "$T/$job.node" \
        --events "$T/$job.rec.ev" -- "$TRAINER" 1500 4
    RESUMED=$(sed -n 's/^resumed at step \([0-9]*\) .*/\1/p' "$T/stdout" | head -n 1)
    expect_eq "faults (kill -9 $phase): the restarted node finishes" "0 $("$TRAINER" 1500 4 |
        tail -n 1)" "$RC $(tail -n 1 "$T/stdout")"
    newest=$(gens "$S" "$job" | tail -n 1)
    check "faults (kill -9 $phase): it resumed from the newest committed generation" \
        test "$(jget "$(ev "$T/$job.rec.ev" resume)" gen)" = "$(cut -d' ' -f1 "$T/$job.before" |
            tail -n 1)" -o "$(jget "$(ev "$T/$job.ev" commit)" gen)" = \
            "$(jget "$(ev "$T/$job.rec.ev" resume)" gen)"
    row "kill -9 $phase" "$S" "$job" "$T/$job.before" "-" "$T/$job.ev" "$T/$job.rec.ev"
done

# ---- clock step: a world of two -----------------------------------------------------
SHIM="$TOP/$O/tests/clockstep/clockstep.so"
c_trainer_world
export TRAINER_STEP_US=5000
JOB=clock
P=$(free_ports 2)
wnode() {
    local name=$1 rank=$2
    shift 2
    "$SPOTD" run --job "$JOB" --store "$S" --state-dir "$T/$name" --rank "$rank" \
        --world-size 2 --peers "$P" --world-key-file "$T/key" --events "$T/$name.ev" \
        --grace 5s --cloud none --interval 1s "$@" -- "$TRAINER" $STEPS $MIB \
        >"$T/$name.out" 2>"$T/$name.err" &
    node_started "$name" $!
}
clock_step() { printf '%s\n' "$1" >"$T/clock.tmp" && mv "$T/clock.tmp" "$T/clock"; }
clock_step 0
: >"$T/clock.before"
wnode w0 0
LD_PRELOAD="$SHIM" SPOT_TEST_CLOCK_FILE="$T/clock" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" wnode w1 1
wait_for 30 grep -qs '"event":"commit"' "$T/w0.ev"
prints "$S" "$JOB" "$T/clock.before"
kill -STOP "${PID[w0]}"; clock_step 8000; sleep 2; kill -CONT "${PID[w0]}"; sleep 2
clock_step 0; sleep 2
clock_step -8000; sleep 2
kill -STOP "${PID[w0]}"; clock_step 0; sleep 2; kill -CONT "${PID[w0]}"; sleep 1
check "faults (clock step): no live peer was taken for silent, nothing parked" \
    sh -c "! grep -q 'silent for' '$T/w0.err' '$T/w1.err' && ! grep -q '\"event\":\"parked\"' '$T/w0.ev' '$T/w1.ev'"
check "faults (clock step): no periodic round given up" \
    sh -c "! grep -q 'checkpoint_failed' '$T/w0.ev' '$T/w1.ev'"
# Rank 0 is preempted: the world commits, rank 0 exits 75, rank 1 waits for
# its replacement, and the two resume together.
"$SPOTCTL" drill --state-dir "$T/w0" --in 20s >/dev/null 2>&1
wait_node w0 60
expect_eq "faults (clock step): the preempted node's notice was committed (exit 75)" 75 "$RC"
last=$(jget "$(ev "$T/w0.ev" commit | tail -n 1)" step)
wnode v0 0
nodes_finish "faults (clock step)" 90 v0 w1
RESUMED=$(sed -n 's/^resumed at step \([0-9]*\) .*/\1/p' "$T/v0.out" | head -n 1)
RESUMED=${RESUMED:--}
# Every node of a world logs the world's commits: one node's logs count.
row "clock step +-8 s" "$S" "$JOB" "$T/clock.before" "$(lost_steps "$last")" "$T/w1.ev"

cat "$T/table"
