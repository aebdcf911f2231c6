# The fault matrix, faults of the store: one ordinary fault at a time, and
# what the store holds after spotd came through it (examples/c-trainer, the
# app method).  The rows (faults_lib.sh says what a row holds; each must
# show 0 lost and 0 overwritten):
#
#   corrupt chunk    a chunk of the newest generation flipped in the store
#   missing manifest the newest generation's rank-0.json deleted
#   list error file  the file store's gens/ unreadable for a moment at start
#   list error s3    Swift behind the fault proxy: the first listings 403,
#                    then 503 (skipped where Swift cannot run)
#   two writers      two spotd of one job checkpointing at once
#
# The faults of the node (kill -9, a clock step): t-faults-kill.sh.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/world_lib.sh"
. "$TOP/tests/mocks/lib.sh"
. "$(dirname "$0")/faults_lib.sh"

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

cat "$T/table"
