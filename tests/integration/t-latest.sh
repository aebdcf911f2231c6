# The pointer <job>/LATEST (docs/store-format.md, "The pointer"), on a
# file:// store and on a real Swift with s3api: a resume (spotd run, and
# spotctl fetch of the newest generation) finds the newest of many
# generations in a few store requests, whatever their number; and it still
# takes the newest committed generation when the pointer is missing,
# garbage, unreadable, names a generation that is gone or whose record is
# corrupt, or is behind the newest commit (a pointer write that failed,
# two writers, a gap of withdrawn numbers).  gc writes a missing pointer
# again.
. "$(dirname "$0")/lib.sh"

N=${LATEST_GENS:-24}

# ctl ARGS...: spotctl against the store under test, with its request
# count (SPOTCTL_STATS); sets RC and REQ, output in $T/out and $T/err.
ctl() {
    SPOTCTL_STATS=1 timeout -k 2 120 "$SPOTCTL" "$@" --store "$URL" --job "$JOB" \
        >"$T/out" 2>"$T/err"
    RC=$?
    REQ=$(sed -n 's/^spotctl: stats: \([0-9]*\) store requests.*/\1/p' "$T/err")
}

# resume_ok NAME WANT: spotd resumes from generation WANT (its files say so);
# FIND is the store requests its search for the newest generation made.
resume_ok() {
    rm -rf "$T/state"
    run_spotd run --cloud none --job "$JOB" --store "$URL" --state-dir "$T/state" \
        --store-wait 5s --events "$T/ev" -- sh -c 'cat "$SPOT_RESUME_DIR/gen.txt"'
    LAST=$(ev "$T/ev" resume)
    FIND=$(jget "$LAST" find_requests)
    expect_eq "$1: spotd resumes from generation $2" "0|$2|$2" \
        "$RC|$(jget "$(ev "$T/ev" resume)" gen)|$(cat "$T/stdout")"
    rm -f "$T/ev"
}

# fetch_ok NAME WANT: spotctl fetch takes generation WANT.
fetch_ok() {
    rm -rf "$T/back"
    ctl fetch "$T/back"
    expect_eq "$1: fetch restores generation $2" "0|$2" "$RC|$(cat "$T/back/gen.txt" 2>/dev/null)"
}

gkey() { printf '%s/gens/%08d/%s' "$JOB" "$1" "$2"; }

latest_cases() {
    local name=$1 i one
    URL=$2
    RAW=$3
    JOB=job-latest-$name

    mkdir -p "$T/ck"
    for i in $(seq 1 "$N"); do
        echo "$i" >"$T/ck/gen.txt"
        ctl push "$T/ck"
        [ "$RC" = 0 ] || { fail "$name: push $i" "$(cat "$T/err")"; return; }
    done
    one=$REQ

    # ---- the pointer is used ----
    $RAW get "$JOB/LATEST" "$T/latest"
    check "$name: every commit writes <job>/LATEST naming its generation" \
        grep -q "\"kind\":\"latest\",\"job\":\"$JOB\",\"gen\":$N}" "$T/latest"
    fetch_ok "$name: pointer" "$N"
    expect_lt "$name: ... in at most 8 store requests, not one per generation ($N)" 9 "$REQ"
    resume_ok "$name: pointer" "$N"
    expect_lt "$name: ... its search for the newest made at most 5 requests" 6 "$FIND"
    expect_lt "$name: ... and a push's requests do not grow with the generations ($N)" 25 "$one"

    # ---- missing, garbage: the whole listing ----
    $RAW del "$JOB/LATEST"
    fetch_ok "$name: no pointer (an old store)" "$N"
    expect_ge "$name: ... from the whole listing ($N commit records read)" "$N" "$REQ"
    resume_ok "$name: no pointer" "$N"
    expect_ge "$name: ... listing every generation" "$N" "$FIND"
    printf 'not json' >"$T/garbage"
    $RAW put "$JOB/LATEST" "$T/garbage"
    fetch_ok "$name: a garbage pointer" "$N"
    resume_ok "$name: a garbage pointer" "$N"
    sed "s/\"job\":\"$JOB\"/\"job\":\"other\"/" "$T/latest" >"$T/other"
    $RAW put "$JOB/LATEST" "$T/other"
    resume_ok "$name: another job's pointer" "$N"
    sed 's/"format":1/"format":2/' "$T/latest" >"$T/newer"
    $RAW put "$JOB/LATEST" "$T/newer"
    resume_ok "$name: a pointer in a newer format" "$N"

    # ---- it names a generation that is gone, or corrupt ----
    printf '{"format":1,"kind":"latest","job":"%s","gen":%d}\n' "$JOB" $((N + 40)) >"$T/gone"
    $RAW put "$JOB/LATEST" "$T/gone"
    fetch_ok "$name: a pointer naming a generation that is not there" "$N"
    resume_ok "$name: a pointer naming a generation that is not there" "$N"
    printf '{"format":1,"kind":"latest","job":"%s","gen":3}\n' "$JOB" >"$T/three"
    $RAW get "$(gkey 3 COMMIT.json)" "$T/c3"
    $RAW del "$(gkey 3 COMMIT.json)"
    $RAW put "$JOB/LATEST" "$T/three"
    resume_ok "$name: a pointer naming a generation gc deleted" "$N"
    printf '{"format":1,"kind":"commit"' >"$T/c3.bad"
    $RAW put "$(gkey 3 COMMIT.json)" "$T/c3.bad"
    fetch_ok "$name: a pointer naming a corrupt commit record" "$N"
    resume_ok "$name: a pointer naming a corrupt commit record" "$N"
    sed 's/"gen":3,/"gen":4,/' "$T/c3" >"$T/c3.moved"
    $RAW put "$(gkey 3 COMMIT.json)" "$T/c3.moved"
    resume_ok "$name: a pointer naming a record of another generation" "$N"
    $RAW put "$(gkey 3 COMMIT.json)" "$T/c3"

    # ---- behind the newest commit ----
    resume_ok "$name: a pointer $((N - 3)) generations behind" "$N"
    printf '{"format":1,"kind":"latest","job":"%s","gen":%d}\n' "$JOB" $((N - 2)) >"$T/behind"
    $RAW put "$JOB/LATEST" "$T/behind"
    for f in CLAIM.json rank-0.json COMMIT.json; do $RAW del "$(gkey $((N - 1)) $f)"; done
    fetch_ok "$name: a pointer behind, an empty number between (a withdrawn claim)" "$N"
    resume_ok "$name: a pointer behind, an empty number between" "$N"
    # The newest generation's pointer write failed: a commit that follows
    # (an operator's push) still takes the next number, and a resume the
    # newest.
    printf '{"format":1,"kind":"latest","job":"%s","gen":%d}\n' "$JOB" $((N - 3)) >"$T/behind"
    $RAW put "$JOB/LATEST" "$T/behind"
    echo $((N + 1)) >"$T/ck/gen.txt"
    ctl push --json "$T/ck"
    expect_eq "$name: a push after a stale pointer takes the next number" "0|$((N + 1))" \
        "$RC|$(jget "$(cat "$T/out")" gen)"
    resume_ok "$name: after it" $((N + 1))

    # ---- gc: a missing pointer is written again ----
    $RAW del "$JOB/LATEST"
    ctl gc --keep 30 --grace 1h
    $RAW get "$JOB/LATEST" "$T/after-gc"
    check "$name: gc writes a missing pointer again, naming the newest" \
        grep -q "\"gen\":$((N + 1))}" "$T/after-gc"
    printf '{"format":1,"kind":"latest","job":"%s","gen":2}\n' "$JOB" >"$T/two"
    $RAW put "$JOB/LATEST" "$T/two"
    ctl gc --keep 2 --grace 0s
    $RAW get "$JOB/LATEST" "$T/after-gc"
    check "$name: gc deleting the generation the pointer names rewrites it first" \
        grep -q "\"gen\":$((N + 1))}" "$T/after-gc"
    fetch_ok "$name: after gc" $((N + 1))
    ctl ls
    expect_eq "$name: ls after gc lists the 2 kept generations" 2 "$(grep -c committed "$T/out")"
}

# ---- the file store ----
mkdir -p "$T/store"
latest_cases file "file://$T/store" raw_file

# A pointer that cannot be read (here a folder) is no pointer: the listing
# decides, and the resume takes the newest.
rm -f "$T/store/$JOB/LATEST"
mkdir "$T/store/$JOB/LATEST"
resume_ok "file: an unreadable pointer" $((N + 1))
rmdir "$T/store/$JOB/LATEST"

# With a job key, a pointer naming a record the key did not sign (a push
# without the key, or a bucket writer's) is not trusted: the resume takes
# the newest signed generation, and says why it skipped the other.
openssl rand -hex 32 >"$T/key"
JOB=job-latest-keyed
for i in 1 2 3; do
    echo "$i" >"$T/ck/gen.txt"
    SPOTD_JOB_KEY_FILE=$T/key ctl push "$T/ck"
done
echo 4 >"$T/ck/gen.txt"
ctl push "$T/ck"
check "file: keyed: an unsigned push moved the pointer to its generation" \
    grep -q '"gen":4}' "$T/store/$JOB/LATEST"
SPOTD_JOB_KEY_FILE=$T/key resume_ok "file: keyed: a pointer naming an unsigned record" 3
check "file: keyed: ... and the resume event names the one it skipped" \
    grep -q '"skipped":\[{"gen":4,' <<<"$LAST"
SPOTD_JOB_KEY_FILE=$T/key ctl fetch "$T/keyed-back"
expect_eq "file: keyed: fetch of the newest refuses the unsigned one by name" "1|1" \
    "$RC|$(grep -c 'generation 4' "$T/err")"

# ---- Swift ----
. "$(dirname "$0")/s3.sh"
s3_start latest
expect_eq "s3: the bucket is created" 200 \
    "$(s3curl -o /dev/null -w '%{http_code}' -H "x-amz-content-sha256: $EMPTY_SHA" -X PUT "$S3_ENDPOINT/bkt")"
latest_cases s3 "s3://bkt" raw_s3
