# S3 endpoints that spotd cannot use, and one that it can only with care,
# against a real Swift with s3api (tests/servers/swift.sh):
# - permanent failures are reported at once, with what to check, never
#   retried: TLS verification (a CA it was not given, a host name the
#   certificate does not name, an expired certificate, an unreadable
#   AWS_CA_BUNDLE), and the S3 errors no retry can mend (SignatureDoesNotMatch,
#   an unknown access key, NoSuchBucket, AccessDenied), counted at a TLS relay
#   (tests/mocks/tlsproxy.py) or the fault proxy (tests/mocks/faultproxy.py);
#   the same requests through the same relay with the right CA succeed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/store_cases.sh"
. "$(dirname "$0")/s3.sh"
. "$TOP/tests/mocks/lib.sh"
s3_start s3-endpoints
s3curl() {
    curl -s --netrc-file "$D/netrc" --aws-sigv4 "aws:amz:$AWS_REGION:s3" "$@"
}
expect_eq "endpoints: the bucket is created" 200 \
    "$(s3curl -o /dev/null -w '%{http_code}' -H "x-amz-content-sha256: $EMPTY_SHA" -X PUT "$S3_ENDPOINT/bkt")"
mkdir -p "$T/small"
echo "some state" >"$T/small/state.bin"
UP=${S3_ENDPOINT#http://}

# ---- TLS: a relay with certificates of a private CA --------------------------
python3 "$TOP/tests/mocks/tlsproxy.py" certs "$T/pki" ||
    { fail "endpoints: the test certificates are made"; exit 1; }
# tls_start NAME: a TLS relay to Swift with certificate NAME; sets TLS_PORT
# (its log is $T/tls-NAME.log, one "accept" per connection).
tls_start() {
    local pf=$T/tls-$1.port pid
    python3 "$TOP/tests/mocks/tlsproxy.py" serve --cert "$T/pki/$1.crt" --key "$T/pki/$1.key" \
        --upstream "$UP" --port-file "$pf" --log "$T/tls-$1.log" </dev/null >"$T/tls-$1.out" 2>&1 &
    pid=$!
    _bg_pids+=("$pid")
    TLS_PIDS+=("$pid")
    TLS_PORT=$(python3 "$TOP/tests/mocks/mockctl.py" wait-port "$pf" --timeout 10 --pid "$pid") ||
        { fail "endpoints: the TLS relay ($1) starts" "$(cat "$T/tls-$1.out")"; exit 1; }
}
# tctl ENDPOINT ARGS...: spotctl against s3://bkt/tls through ENDPOINT;
# sets RC and MS (how long it took).
tctl() {
    local ep=$1 t0
    shift
    t0=$(now_ms)
    timeout -k 2 60 "$SPOTCTL" "$@" --store s3://bkt/tls --job t --s3-endpoint "$ep" \
        >"$T/out" 2>"$T/err"
    RC=$?
    MS=$(($(now_ms) - t0))
}
accepts() {
    local n
    n=$(grep -c '^accept' "$T/tls-$1.log" 2>/dev/null)
    echo "${n:-0}"
}
TLS_PIDS=()
tls_start good
GOOD=$TLS_PORT
tls_start ip-only
IPONLY=$TLS_PORT
tls_start expired
EXPIRED=$TLS_PORT

AWS_CA_BUNDLE=$T/pki/ca.crt tctl "https://127.0.0.1:$GOOD" push "$T/small"
expect_eq "tls: with the CA in AWS_CA_BUNDLE a push through the relay succeeds" "0 " \
    "$RC $(cat "$T/err")"
AWS_CA_BUNDLE=$T/pki/ca.crt tctl "https://localhost:$GOOD" ls --json
check "tls: ... and so does ls by the name localhost" grep -q '"state":"committed"' "$T/out"

# The retries of a transport error add up to about 12 s (6 of them, 0.2 s
# doubling): "at once" is well under that, whatever the machine's load.
n0=$(accepts good)
tctl "https://127.0.0.1:$GOOD" ls
expect_eq "tls: a certificate of a CA spotctl was not given fails" 1 "$RC"
expect_lt "tls: ... at once, not after retries (ms)" 3000 "$MS"
expect_eq "tls: ... after one connection" 1 "$(($(accepts good) - n0))"
check "tls: ... saying the certificate is not trusted and to give its CA" \
    grep -qE "S3 LIST s3://bkt/tls/t/gens/: .*certificate.*; the server's certificate is not trusted.*AWS_CA_BUNDLE" "$T/err"
check "tls: ... and not that it gave up after retries" bash -c "! grep -q 'gave up' '$T/err'"
AWS_CA_BUNDLE=$T/pki/other-ca.crt tctl "https://127.0.0.1:$GOOD" ls
expect_eq "tls: the same with another CA in AWS_CA_BUNDLE, at once" "1 1" \
    "$RC $(( MS < 3000 ))"
check "tls: ... naming the CA file given" grep -q "AWS_CA_BUNDLE='$T/pki/other-ca.crt'" "$T/err"

n0=$(accepts ip-only)
AWS_CA_BUNDLE=$T/pki/ca.crt tctl "https://localhost:$IPONLY" ls
expect_eq "tls: a certificate that does not name the host (localhost) fails at once" "1 1" \
    "$RC $(( MS < 3000 ))"
expect_eq "tls: ... after one connection" 1 "$(($(accepts ip-only) - n0))"
check "tls: ... saying to check the endpoint's host name" \
    grep -qE "certificate.*check that the endpoint's host name \('localhost'\) is one the certificate names" "$T/err"
AWS_CA_BUNDLE=$T/pki/ca.crt tctl "https://127.0.0.1:$IPONLY" ls
expect_eq "tls: ... while by its address it is accepted" 0 "$RC"

n0=$(accepts expired)
AWS_CA_BUNDLE=$T/pki/ca.crt tctl "https://127.0.0.1:$EXPIRED" ls
expect_eq "tls: an expired certificate fails at once, after one connection" "1 1 1" \
    "$RC $(( MS < 3000 )) $(($(accepts expired) - n0))"
check "tls: ... saying it expired" grep -qi "expired" "$T/err"

AWS_CA_BUNDLE=$T/no-such-ca.pem tctl "https://127.0.0.1:$GOOD" ls
expect_eq "tls: an AWS_CA_BUNDLE that cannot be read fails at once" "1 1" "$RC $(( MS < 3000 ))"
check "tls: ... naming it" grep -q "cannot use the CA file AWS_CA_BUNDLE='$T/no-such-ca.pem'" "$T/err"

kill -TERM "${TLS_PIDS[@]}"
wait "${TLS_PIDS[@]}" 2>/dev/null || true

# ---- S3 errors that no retry mends: one request each ------------------------
fault_start "$UP" || { fail "endpoints: the fault proxy starts"; exit 1; }
# fctl ARGS...: spotctl through the fault proxy; RC, MS, and N (requests).
fctl() {
    local t0
    fault_reset
    t0=$(now_ms)
    timeout -k 2 60 "$SPOTCTL" "$@" --s3-endpoint "$FAULT_URL" >"$T/out" 2>"$T/err"
    RC=$?
    MS=$(($(now_ms) - t0))
    N=$(fault_count)
}
AWS_SECRET_ACCESS_KEY=wrong fctl ls --store s3://bkt/tls --job t
expect_eq "4xx: SignatureDoesNotMatch fails at once, after one request" "1 1 1" \
    "$RC $(( MS < 3000 )) $N"
check "4xx: ... with what to check" grep -q "SignatureDoesNotMatch.*check the credentials" "$T/err"
# (AWS says InvalidAccessKeyId; Swift's tempauth, SignatureDoesNotMatch.)
AWS_ACCESS_KEY_ID=nobody:none fctl ls --store s3://bkt/tls --job t
expect_eq "4xx: an unknown access key fails at once, after one request" "1 1 1" \
    "$RC $(( MS < 3000 )) $N"
check "4xx: ... with what to check" \
    grep -qE "(InvalidAccessKeyId|SignatureDoesNotMatch).*check the credentials" "$T/err"
fctl ls --store s3://nobucket/x --job t
expect_eq "4xx: NoSuchBucket fails at once, after one request" "1 1 1" "$RC $(( MS < 3000 )) $N"
check "4xx: ... with what to do" grep -q "NoSuchBucket.*create the bucket" "$T/err"
AWS_ACCESS_KEY_ID=test:reader AWS_SECRET_ACCESS_KEY=reading fctl ls --store s3://bkt/tls --job t
expect_eq "4xx: AccessDenied (a user without rights on the account) fails at once, after one request" \
    "1 1 1" "$RC $(( MS < 3000 )) $N"
check "4xx: ... with what to check" grep -q "AccessDenied.*lack permission" "$T/err"
fault_stop

# ---- an endpoint below a path: http://gateway/s3 ----------------------------
# tests/mocks/prefixgw.py is the gateway: it takes S3 below /s3 only, checks
# the client's signature over the path it received (prefix included), and
# passes the request on to Swift without the prefix, signed again, with
# X-Forwarded-Prefix (what nginx's stripping proxy_pass and a server that
# honours X-Forwarded-Prefix do together).
pf=$T/gw.port
python3 "$TOP/tests/mocks/prefixgw.py" --prefix /s3 --upstream "$UP" \
    --secret "$AWS_SECRET_ACCESS_KEY" --port-file "$pf" --log "$T/gw.log" \
    </dev/null >"$T/gw.out" 2>&1 &
GW_PID=$!
_bg_pids+=("$GW_PID")
GW_PORT=$(python3 "$TOP/tests/mocks/mockctl.py" wait-port "$pf" --timeout 10 --pid "$GW_PID") ||
    { fail "prefix: the gateway starts" "$(cat "$T/gw.out")"; exit 1; }
GW=http://127.0.0.1:$GW_PORT
# gctl ENDPOINT ARGS...: spotctl against s3://bkt/gw through ENDPOINT.
gctl() {
    local ep=$1
    shift
    timeout -k 2 60 "$SPOTCTL" "$@" --store s3://bkt/gw --job g --s3-endpoint "$ep" \
        >"$T/out" 2>"$T/err"
    RC=$?
}
mkdir -p "$T/gwck"
head -c 200000 /dev/urandom >"$T/gwck/a.bin"
echo one >"$T/gwck/b.txt"
gctl "$GW/s3" push --step 10 --chunk-size 64KiB "$T/gwck"
expect_eq "prefix: a push through http://gateway/s3 succeeds" "0 " "$RC $(cat "$T/err")"
echo two >"$T/gwck/b.txt"
gctl "$GW/s3/" push --step 20 --chunk-size 64KiB "$T/gwck"
expect_eq "prefix: ... and with a trailing '/'" "0 " "$RC $(cat "$T/err")"
gctl "$GW/s3" ls --json
expect_eq "prefix: ls lists both generations" "0 2" \
    "$RC $(tr '}' '\n' <"$T/out" | grep -c '"state":"committed"')"
gctl "$GW/s3" fetch "$T/gwback"
check "prefix: fetch restores the newest" same_tree "$T/gwck" "$T/gwback"
gctl "$GW/s3" verify --gen 1
expect_eq "prefix: verify passes" 0 "$RC"
gctl "$GW/s3" gc --keep 1 --grace 0s --json
expect_eq "prefix: gc deletes the older generation" "0 1" "$RC $(jget "$(cat "$T/out")" gens_deleted)"
expect_eq "prefix: every request went below /s3/bkt/, none refused by the gateway" \
    "0 0" "$(grep -vc '^[A-Z]* /s3/bkt/' "$T/gw.log") $(grep -c ' refused$' "$T/gw.log")"
seen() { grep -qE "$1" "$T/gw.log" && echo yes || echo no; }
expect_eq "prefix: ... PUTs, GETs, listings and DELETEs among them" "yes yes yes yes" \
    "$(seen '^PUT ') $(seen '^GET /s3/bkt/gw/') $(seen '^GET /s3/bkt/\?.*list-type=2') $(seen '^DELETE ')"
gctl "$S3_ENDPOINT" ls --json
expect_eq "prefix: Swift itself holds what went through the gateway" "0 1" \
    "$RC $(tr '}' '\n' <"$T/out" | grep -c '"state":"committed"')"
: >"$T/gw.log"
AWS_SECRET_ACCESS_KEY=wrong gctl "$GW/s3" ls
expect_eq "prefix: the gateway checks signatures (a wrong secret: 403 there)" "1 1" \
    "$RC $(grep -c ' 403 refused$' "$T/gw.log")"
gctl "$GW" ls
check "prefix: the gateway's root is not S3 (the prefix is needed)" grep -q "NoSuchPrefix" "$T/err"
gctl "$GW/s3" ls --s3-virtual-hosted
expect_eq "prefix: a path with --s3-virtual-hosted is refused" 1 "$RC"
check "prefix: ... saying it takes path-style addressing" \
    grep -q "has a path ('/s3'), which takes path-style addressing: drop --s3-virtual-hosted" "$T/err"
for ep in "$GW/s3?x=1" "$GW/a/../s3" "$GW/s%203" "$GW/s3//x" "$GW/s3/./x"; do
    gctl "$ep" ls
    expect_eq "prefix: the endpoint '${ep#$GW}' is refused as invalid" "1 1" \
        "$RC $(grep -c "invalid S3 endpoint" "$T/err")"
done
kill -TERM "$GW_PID"
wait "$GW_PID" 2>/dev/null || true
