# The snapshot engine on a real S3 server (OpenStack Swift with s3api,
# tests/servers/swift.sh), which checks every SigV4 signature and payload
# hash: the cases of store_cases.sh, then credentials, errors, and faults
# injected by tests/mocks/faultproxy.py between spotctl and the server.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/store_cases.sh"

. "$(dirname "$0")/s3.sh"
s3_start s3
expect_eq "s3: the bucket is created" 200 \
    "$(s3curl -o /dev/null -w '%{http_code}' -H "x-amz-content-sha256: $EMPTY_SHA" -X PUT "$S3_ENDPOINT/bkt")"

RAW_PREFIX=team/a/
store_cases s3 "s3://bkt/team/a" raw_s3
foreign_cases s3 "s3://bkt/team/a" raw_s3
check "s3: objects live below the store's prefix" \
    bash -c "curl -s --netrc-file '$D/netrc' --aws-sigv4 aws:amz:us-east-1:s3 -H 'x-amz-content-sha256: $EMPTY_SHA' '$S3_ENDPOINT/bkt?list-type=2&prefix=team%2Fa%2Fjob-s3%2Fgens%2F' | grep -q '<Key>team/a/job-s3/gens/'"
store_page_cases s3 "s3://bkt/team/p"

# ---- credentials and errors ----
URL=s3://bkt/creds
JOB=c
make_ckpt "$T/small" 2>/dev/null || true
AWS_SECRET_ACCESS_KEY=wrong ctl push "$T/small"
expect_eq "s3: a wrong secret fails the push" 1 "$RC"
check "s3: ... with the bucket, key, status and S3 error code" \
    grep -qE "S3 (LIST|GET|PUT) s3://bkt/creds/c/.*HTTP 403 SignatureDoesNotMatch.*check the credentials" "$T/err"
printf '[default]\naws_access_key_id = nobody\naws_secret_access_key = x\n[swift]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
    "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$T/credentials"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_SHARED_CREDENTIALS_FILE="$T/credentials" \
    AWS_PROFILE=swift "$SPOTCTL" push --store "$URL" --job "$JOB" "$T/small" >"$T/out" 2>"$T/err"
expect_eq "s3: credentials from the shared file's profile" "0 $(cat "$T/err")" "$? $(cat "$T/err")"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_SHARED_CREDENTIALS_FILE="$T/credentials" \
    "$SPOTCTL" ls --store "$URL" --job "$JOB" >"$T/out" 2>"$T/err"
expect_eq "s3: the default profile is used without AWS_PROFILE (and refused here)" 1 "$?"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$SPOTCTL" ls --store "$URL" --job "$JOB" \
    >"$T/out" 2>"$T/err"
expect_eq "s3: no credentials at all fails" 1 "$?"
check "s3: ... and says where credentials come from" grep -q "AWS_ACCESS_KEY_ID" "$T/err"
"$SPOTCTL" ls --store s3://nobucket --job "$JOB" >"$T/out" 2>"$T/err"
expect_eq "s3: a missing bucket fails" 1 "$?"
check "s3: ... naming it and the S3 error code" grep -q "s3://nobucket/.*NoSuchBucket" "$T/err"
check "s3: ... and what to do" grep -q "create the bucket" "$T/err"
"$SPOTCTL" ls --store "$URL" --job "$JOB" --s3-endpoint http://127.0.0.1:1 --requests 1 \
    >"$T/out" 2>"$T/err"
expect_eq "s3: an endpoint that refuses connections fails after retries" 1 "$?"
check "s3: ... saying it gave up" grep -q "gave up after retries" "$T/err"
check "s3: ... and what to check" grep -q "check the endpoint" "$T/err"

# Virtual-hosted addressing: the bucket in the host name (Swift is set up
# with storage_domain = localhost, and curl resolves *.localhost itself).
"$SPOTCTL" push --store s3://bkt/vh --job v --s3-endpoint "http://localhost:${S3_ENDPOINT##*:}" \
    --s3-virtual-hosted "$T/small" >"$T/out" 2>"$T/err"
expect_eq "s3: virtual-hosted requests (bkt.localhost) push" "0 " "$? $(cat "$T/err")"
"$SPOTCTL" ls --json --store s3://bkt/vh --job v >"$T/out" 2>"$T/err"
check "s3: ... and path-style requests read what they wrote" grep -q '"state":"committed"' "$T/out"

# ---- faults between spotctl and the server ----
. "$TOP/tests/mocks/lib.sh"
fault_start "${S3_ENDPOINT#http://}" || { fail "s3: the fault proxy starts"; exit 1; }
URL=s3://bkt/faults
JOB=f
mkdir -p "$T/fck"
head -c $((6 * 1024 * 1024)) /dev/urandom >"$T/fck/a.bin"
cp "$T/ck/model.bin" "$T/fck/model.bin"
fctl() {
    local chunks=()
    [ "$1" = push ] && chunks=(--chunk-size 256KiB)
    timeout -k 2 120 "$SPOTCTL" "$@" --store "$URL" --job "$JOB" --s3-endpoint "$FAULT_URL" \
        "${chunks[@]}" --requests 4 >"$T/out" 2>"$T/err"
    RC=$?
}
fault_rules '[{"nth":2,"action":500},
              {"every":5,"method":"PUT","action":"503","times":3},
              {"method":"GET","path":"list-type=2","nth":2,"action":"reset"},
              {"method":"PUT","path":"/chunks/","every":7,"action":"reset_body","times":2},
              {"method":"PUT","path":"/chunks/","nth":11,"action":"stall","seconds":30}]' >/dev/null
fctl push --json --s3-timeout 2s "$T/fck"
expect_eq "s3 faults: push through 500, SlowDown, resets and a stall succeeds" 0 "$RC"
expect_eq "s3 faults: every fault fired" 8 \
    "$(fault_get_rules | python3 -c 'import json,sys; print(sum(r["fired"] for r in json.load(sys.stdin)))')"
fault_reset
fault_rules '[{"method":"GET","path":"/chunks/","nth":2,"action":"truncate"},
              {"method":"GET","path":"/chunks/","nth":4,"action":"corrupt"},
              {"method":"GET","path":"/chunks/","nth":6,"action":"reset"},
              {"method":"GET","every":9,"action":"503","times":2}]' >/dev/null
fctl fetch --json "$T/fback"
expect_eq "s3 faults: fetch through truncated, corrupted and reset answers succeeds" 0 "$RC"
check "s3 faults: ... and the files are right" same_tree "$T/fck" "$T/fback"
expect_ge "s3 faults: the corrupted chunk was fetched again" 1 "$(jget "$(cat "$T/out")" retries)"
fault_reset

# A fault that does not go away: a clear error, and nothing committed.
fault_rules '[{"method":"PUT","path":"/chunks/","action":500}]' >/dev/null
echo changed >>"$T/fck/a.bin"
fctl push --s3-retries 2 "$T/fck"
expect_eq "s3 faults: a server that keeps failing fails the push" 1 "$RC"
check "s3 faults: ... with the key, the status and the S3 error code" \
    grep -qE "S3 PUT s3://bkt/faults/f/chunks/[0-9a-f]{2}/[0-9a-f]{64}: HTTP 500 InternalError.*gave up after retries" "$T/err"
fault_reset
fctl ls --json
expect_eq "s3 faults: the failed generation is not committed" 1 "$(ls_gens "$T/out" | wc -l)"

# Expired temporary credentials are fetched again from the instance role.
mock_start aws
mock_state '{"role":{"name":"trainer","AccessKeyId":"'"$AWS_ACCESS_KEY_ID"'","SecretAccessKey":"'"$AWS_SECRET_ACCESS_KEY"'","Token":"t1"}}' >/dev/null
fault_rules '[{"nth":3,"action":"expired"}]' >/dev/null
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_EC2_METADATA_DISABLED \
    AWS_EC2_METADATA_SERVICE_ENDPOINT="$MOCK_URL" \
    "$SPOTCTL" verify --store "$URL" --job "$JOB" --s3-endpoint "$FAULT_URL" >"$T/out" 2>"$T/err"
expect_eq "s3: credentials from the instance role (IMDSv2), fetched again when expired" \
    "0 " "$? $(cat "$T/err")"
expect_eq "s3: ... the role's credentials were read twice" 2 \
    "$(mock_count /latest/meta-data/iam/security-credentials/trainer GET)"
expect_eq "s3: ... with a session token each time" 2 "$(mock_count /latest/api/token PUT)"

# Credentials five minutes and ten seconds from expiring when served (the
# mock's expires_in: counted from each request, so a slow start on a loaded
# machine cannot make them short-lived ones, kept for a minute) are fetched
# again ten seconds later, before they expire, in the middle of a push (a
# request stalled for 12 s makes it last longer than that).
mock_reset
mock_state '{"role":{"name":"trainer","AccessKeyId":"'"$AWS_ACCESS_KEY_ID"'","SecretAccessKey":"'"$AWS_SECRET_ACCESS_KEY"'","Token":"t2","expires_in":310}}' >/dev/null
fault_reset
fault_rules '[{"method":"PUT","path":"/chunks/","nth":1,"action":"stall","seconds":30}]' >/dev/null
echo "another change" >>"$T/fck/a.bin"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_EC2_METADATA_DISABLED \
    AWS_EC2_METADATA_SERVICE_ENDPOINT="$MOCK_URL" \
    "$SPOTCTL" push --store "$URL" --job "$JOB" --s3-endpoint "$FAULT_URL" --s3-timeout 12s \
    --chunk-size 256KiB "$T/fck" >"$T/out" 2>"$T/err"
expect_eq "s3: a push outliving its role credentials' refresh point succeeds" "0 " \
    "$? $(cat "$T/err")"
expect_ge "s3: ... and fetched them again before they expired" 2 \
    "$(mock_count /latest/meta-data/iam/security-credentials/trainer GET)"
mock_stop
fault_reset

# kill -9 in the middle of an upload: the previous generation stays whole.
ctl ls --json
committed=$(ls_gens "$T/out" | wc -l)
newest=$(ls_gens "$T/out" | tail -n 1)
head -c $((12 * 1024 * 1024)) /dev/urandom >"$T/fck/b.bin"
fault_rules '[{"method":"PUT","path":"/chunks/","from":20,"action":"stall","seconds":20}]' >/dev/null
"$SPOTCTL" push --store "$URL" --job "$JOB" --s3-endpoint "$FAULT_URL" --chunk-size 256KiB \
    "$T/fck" >"$T/out" 2>"$T/err" &
pid=$!
_bg_pids+=("$pid")
for _ in $(seq 200); do
    [ "$(fault_count PUT /chunks/ stall)" -ge 1 ] && break
    sleep 0.1
done
expect_ge "s3 kill -9: the upload was under way" 19 "$(fault_count PUT /chunks/)"
kill -KILL "$pid"
wait "$pid" 2>/dev/null
fault_reset
ctl ls --json
expect_eq "s3 kill -9: the same committed generations as before" "$committed" \
    "$(ls_gens "$T/out" | wc -l)"
expect_eq "s3 kill -9: the newest committed generation is still the one before" "$newest" \
    "$(ls_gens "$T/out" | tail -n 1)"
ctl verify
expect_eq "s3 kill -9: the previous generation verifies" 0 "$RC"
ctl fetch "$T/after-kill"
expect_eq "s3 kill -9: the previous generation restores" 0 "$RC"
fault_stop
