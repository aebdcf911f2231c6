#!/usr/bin/env bash
# What spotd's secrets reach: the AWS credentials in its environment (its S3
# store's) are withheld from the command and from every hook unless
# --pass-credentials; its own secrets (SPOTD_WORLD_KEY, SPOTD_WEBHOOK) are
# withheld always; everything else passes.  The command and a hook are
# real processes; their environment is read from /proc as the kernel has it.
. "$(dirname "$0")/lib.sh"

TRAINER="$TOP/$O/examples/c-trainer/trainer"
mkdir -p "$T/store" "$T/hooks"

# The on-notice hook and the command save their environment as the kernel
# holds it (/proc/self/environ), one variable a line.
printf '#!/bin/sh\ntr "\\0" "\\n" </proc/$$/environ >"%s/hook.env"\n' "$T" >"$T/hooks/on-notice"
chmod +x "$T/hooks/on-notice"

# run_with NAME ARGS...: a drill on the C trainer, the credentials set.
run_with() {
    local name=$1
    shift
    rm -f "$T/hook.env" "$T/cmd.env"
    AWS_ACCESS_KEY_ID=AKIAEXAMPLEKEYID AWS_SECRET_ACCESS_KEY=s3cr3t-k3y-w1 \
        AWS_SESSION_TOKEN=t0ken-w1 AWS_SECURITY_TOKEN=t0ken-w1 \
        AWS_CONTAINER_AUTHORIZATION_TOKEN=ecs-t0ken-w1 \
        AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.170.23/v1/credentials \
        AWS_SHARED_CREDENTIALS_FILE="$T/credentials" AWS_WEB_IDENTITY_TOKEN_FILE="$T/token" \
        SPOTD_WORLD_KEY=w0rld-k3y-w1-of-the-secrets-test \
        AWS_REGION=eu-west-1 AWS_PROFILE=training CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=INFO \
        PYTHONPATH=/opt/lib MY_OWN_SETTING=kept \
        run_spotd run --cloud none --job sec --store "file://$T/store" --state-dir "$T/$name" \
        --hooks-dir "$T/hooks" --drill-after 1s "$@" -- \
        sh -c "tr '\\0' '\\n' </proc/\$\$/environ >'$T/cmd.env'; exec '$TRAINER' 3000 2"
}

# has_var FILE NAME: FILE (NAME=value lines) sets NAME.
has_var() { grep -q "^$2=" "$1" 2>/dev/null; }

CREDS="AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_SECURITY_TOKEN
       AWS_CONTAINER_AUTHORIZATION_TOKEN AWS_CONTAINER_CREDENTIALS_FULL_URI
       AWS_SHARED_CREDENTIALS_FILE AWS_WEB_IDENTITY_TOKEN_FILE"
KEPT="AWS_REGION AWS_PROFILE CUDA_VISIBLE_DEVICES NCCL_DEBUG PYTHONPATH MY_OWN_SETTING PATH HOME"

run_with s1
expect_eq "credentials: the drill's checkpoint commits (spotd exits 75)" 75 "$RC"
for who in cmd hook; do
    what=$([ $who = cmd ] && echo "the command" || echo "the on-notice hook")
    check "credentials: $what ran and saved its environment" test -s "$T/$who.env"
    for v in $CREDS; do
        check "credentials: $what does not get $v" eval '! has_var "$T/$who.env" $v'
    done
    check "credentials: $what does not get SPOTD_WORLD_KEY" \
        eval '! has_var "$T/$who.env" SPOTD_WORLD_KEY'
    for v in $KEPT; do
        check "credentials: $what gets $v" has_var "$T/$who.env" "$v"
    done
    check "credentials: $what gets spotd's own (SPOT_JOB)" grep -qx "SPOT_JOB=sec" "$T/$who.env"
    check "credentials: no secret value is in $what's environment" \
        eval '! grep -qE "s3cr3t-k3y-w1|t0ken-w1|w0rld-k3y-w1-of-the-secrets-test" "$T/$who.env"'
done

run_with s2 --pass-credentials
expect_eq "--pass-credentials: the drill's checkpoint commits" 75 "$RC"
for who in cmd hook; do
    what=$([ $who = cmd ] && echo "the command" || echo "the on-notice hook")
    for v in $CREDS; do
        check "--pass-credentials: $what gets $v" has_var "$T/$who.env" "$v"
    done
    check "--pass-credentials: $what gets the secret as it is" \
        grep -qx "AWS_SECRET_ACCESS_KEY=s3cr3t-k3y-w1" "$T/$who.env"
    check "--pass-credentials: $what still does not get SPOTD_WORLD_KEY" \
        eval '! has_var "$T/$who.env" SPOTD_WORLD_KEY'
done
check "--pass-credentials: the start event shows the setting" \
    grep -q "settings.pass_credentials=true" "$T/stderr"

# The other spellings, and the setting in spotd config.
SPOTD_PASS_CREDENTIALS=true run_spotd config
check "pass_credentials: SPOTD_PASS_CREDENTIALS=true is taken" \
    grep -q '"pass_credentials":[[:space:]]*true' "$T/stdout"
printf '{"pass_credentials": true}\n' >"$T/pass.json"
run_spotd config --config "$T/pass.json"
check "pass_credentials: the file's key is taken" \
    grep -q '"pass_credentials":[[:space:]]*true' "$T/stdout"
run_spotd config
check "pass_credentials: false by default" \
    grep -q '"pass_credentials":[[:space:]]*false' "$T/stdout"

check "secrets: nothing is left behind" none_left
