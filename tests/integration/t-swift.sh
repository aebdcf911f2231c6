# A real OpenStack Swift with s3api on 127.0.0.1 (tests/servers/swift.sh):
# it starts, answers SigV4-signed S3 requests from curl(1) the way libcurl
# 7.88 signs them, refuses a wrong secret and a wrong payload hash, and
# stops without leaving a process behind.
. "$(dirname "$0")/lib.sh"

SW="$TOP/tests/servers/swift.sh"
D=$T/swift
trap '"$SW" stop "$D" >/dev/null 2>&1; cleanup' EXIT

t0=$(now_ms)
"$SW" start "$D" >"$T/start.out" 2>"$T/start.err"
rc=$?
if [ $rc -eq 2 ]; then
    echo "SKIP: swift: $(head -n 1 "$T/start.err" | sed 's/^swift.sh: //') ($(tail -n 1 "$T/start.out"))"
    exit 0
fi
expect_eq "swift: start exits 0" 0 "$rc"
if [ $rc -ne 0 ]; then
    cat "$T/start.err"
    exit 1
fi
start_ms=$(($(now_ms) - t0))
echo "swift: started in $start_ms ms: $(tail -n 1 "$T/start.err")"
check "swift: start prints the S3 settings" grep -q '^S3_ENDPOINT=http://127\.0\.0\.1:[0-9]*$' "$T/start.out"
. "$D/env"
expect_eq "swift: the access key and region" "test:tester testing us-east-1" \
    "$AWS_ACCESS_KEY_ID $AWS_SECRET_ACCESS_KEY $AWS_REGION"

# Every listening socket of the servers is on 127.0.0.1 (one each).
listeners() {
    local p f i
    for p in $(cat "$D"/run/*.pid); do
        for f in /proc/"$p"/fd/*; do
            i=$(readlink "$f" 2>/dev/null) || continue
            case $i in socket:*) ;; *) continue ;; esac
            i=${i#socket:[}
            awk -v i="${i%]}" '$10 == i && $4 == "0A" { print $2 }' /proc/net/tcp /proc/net/tcp6
        done
    done
}
listeners >"$T/listeners"
expect_eq "swift: four listening sockets" 4 "$(wc -l <"$T/listeners")"
expect_eq "swift: all on 127.0.0.1" 0 "$(grep -vc '^0100007F:' "$T/listeners")"

pids=$(cat "$D"/run/*.pid | sort)
"$SW" start "$D" >"$T/start2.out" 2>&1
rc=$?
expect_eq "swift: start again on the same DIR finds it running" "0 $(cat "$T/start.out")" \
    "$rc $(cat "$T/start2.out")"
expect_eq "swift: ... the same servers, not new ones" "$pids" "$(cat "$D"/run/*.pid | sort)"
check "swift: ... still listening" alive $pids

# curl -u splits at the first colon and the access key holds one
# (test:tester): the credentials go in a netrc file instead.
printf 'machine 127.0.0.1 login %s password %s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$T/netrc"
printf 'machine 127.0.0.1 login %s password wrong\n' "$AWS_ACCESS_KEY_ID" >"$T/netrc.bad"
EMPTY=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855

# s3 NETRC SHA256 OUT ARGS...: a signed request; prints the status code,
# leaves the body in OUT.
s3() {
    local netrc=$1 sha=$2 out=$3
    shift 3
    curl -s --max-time 20 --netrc-file "$netrc" --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
        -H "x-amz-content-sha256: $sha" -o "$out" -w '%{http_code}' "$@"
}

B=spotd-test
code=$(s3 "$T/netrc" $EMPTY "$T/body" -X PUT "$S3_ENDPOINT/$B")
expect_eq "swift: create a bucket (PUT /$B)" 200 "$code"

head -c 1048577 /dev/urandom >"$T/obj"
sha=$(sha256sum <"$T/obj" | cut -d' ' -f1)
code=$(s3 "$T/netrc" "$sha" "$T/body" -T "$T/obj" "$S3_ENDPOINT/$B/dir/obj.bin")
expect_eq "swift: PUT an object with its x-amz-content-sha256" 200 "$code"

code=$(s3 "$T/netrc" $EMPTY "$T/back" "$S3_ENDPOINT/$B/dir/obj.bin")
expect_eq "swift: GET it back" 200 "$code"
check "swift: the object comes back byte-identical" cmp -s "$T/obj" "$T/back"

code=$(s3 "$T/netrc" $EMPTY "$T/list" "$S3_ENDPOINT/$B")
expect_eq "swift: list the bucket" 200 "$code"
check "swift: the listing holds the key and its size" \
    grep -q '<Key>dir/obj.bin</Key>.*<Size>1048577</Size>' "$T/list"

# The same credentials in the URL, the colon percent-encoded, also work.
code=$(curl -s --max-time 20 --aws-sigv4 "aws:amz:$AWS_REGION:s3" -H "x-amz-content-sha256: $EMPTY" \
    -o /dev/null -w '%{http_code}' "http://test%3Atester:testing@${S3_ENDPOINT#http://}/$B")
expect_eq "swift: credentials in the URL (test%3Atester:testing@) work too" 200 "$code"

code=$(s3 "$T/netrc.bad" $EMPTY "$T/body" "$S3_ENDPOINT/$B/dir/obj.bin")
expect_eq "swift: a wrong secret gets 403" 403 "$code"
check "swift: ... SignatureDoesNotMatch" grep -q '<Code>SignatureDoesNotMatch</Code>' "$T/body"

wrong=$(printf 'not the body' | sha256sum | cut -d' ' -f1)
code=$(s3 "$T/netrc" "$wrong" "$T/body" -T "$T/obj" "$S3_ENDPOINT/$B/bad.bin")
expect_eq "swift: a wrong payload hash gets 400" 400 "$code"
check "swift: ... XAmzContentSHA256Mismatch or BadDigest" \
    grep -qE '<Code>(XAmzContentSHA256Mismatch|BadDigest)</Code>' "$T/body"
code=$(s3 "$T/netrc" $EMPTY "$T/body" "$S3_ENDPOINT/$B/bad.bin")
expect_eq "swift: ... and stores nothing" 404 "$code"

pids=$(cat "$D"/run/*.pid)
"$SW" stop "$D" >"$T/stop.out" 2>&1
expect_eq "swift: stop exits 0" 0 "$?"
# Gone, or a zombie until init reaps it: the servers were the children of
# the start command, which has exited.  A process that stop saw leave may
# still be in the kernel's exit path for a moment on a loaded machine
# (its command line already gone): give that a few seconds.
# shellcheck disable=SC2086
check "swift: every server is gone" wait_for 5 gone $pids
check "swift: no process of this test remains" none_left
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$S3_ENDPOINT/healthcheck")
expect_eq "swift: nothing answers on the port any more" 000 "$code"
"$SW" stop "$D" >/dev/null 2>&1
expect_eq "swift: stop again exits 0" 0 "$?"
echo "swift: start $start_ms ms"
