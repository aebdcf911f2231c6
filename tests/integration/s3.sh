# Sourced by the tests that need an S3 server (after lib.sh).
#
# s3_start NAME: start OpenStack Swift with s3api (tests/servers/swift.sh) in
# $D=$T/swift, stopped when the test exits.  Where Swift cannot run here
# (swift.sh exits 2) the test ends with one SKIP line; when it fails to start,
# with a FAIL line.  Then S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION and AWS_ENDPOINT_URL point at it, nothing of the machine's own
# AWS setup leaks in, and EMPTY_SHA is the SHA-256 of an empty body.  $D/netrc
# holds the credentials for curl.
s3_start() {
    local rc
    SW="$TOP/tests/servers/swift.sh"
    D=$T/swift
    trap '"$SW" stop "$D" >/dev/null 2>&1; cleanup' EXIT
    "$SW" start "$D" >"$T/start.out" 2>"$T/start.err"
    rc=$?
    if [ $rc -eq 2 ]; then
        echo "SKIP: $1: $(head -n 1 "$T/start.err" | sed 's/^swift.sh: //')"
        exit 0
    fi
    if [ $rc -ne 0 ]; then
        fail "$1: swift starts" "$(tail -n 3 "$T/start.err")"
        exit 1
    fi
    . "$D/env"
    export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION
    export AWS_ENDPOINT_URL=$S3_ENDPOINT
    unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL_S3 AWS_CA_BUNDLE
    export AWS_SHARED_CREDENTIALS_FILE=$T/no-such-credentials AWS_EC2_METADATA_DISABLED=true
    EMPTY_SHA=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
}

# s3curl ARGS...: curl(1), SigV4-signed with the test credentials.
s3curl() {
    curl -s --netrc-file "$D/netrc" --aws-sigv4 "aws:amz:$AWS_REGION:s3" "$@"
}

# raw_s3 get KEY FILE | put KEY FILE | del KEY: an object of bucket bkt
# below $RAW_PREFIX (default none), read or written around spotd.
raw_s3() {
    local u="$S3_ENDPOINT/bkt/${RAW_PREFIX:-}$2"
    case $1 in
    get) s3curl -f -H "x-amz-content-sha256: $EMPTY_SHA" -o "$3" "$u" ;;
    put) s3curl -f -H "x-amz-content-sha256: $(sha256sum <"$3" | cut -d' ' -f1)" -T "$3" \
            "$u" -o /dev/null ;;
    del) s3curl -f -H "x-amz-content-sha256: $EMPTY_SHA" -X DELETE "$u" ;;
    esac
}
