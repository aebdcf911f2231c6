# Forged generations: what someone who can write the store but holds no
# job key can plant there (an unsigned generation with every digest
# right, a real record moved to another generation number, a generation
# signed with a key of their own) is refused by spotctl verify, fetch,
# resume and gc and by spotd run when a job key is given; without one
# everything reads as before, and verify says whether it is signed.
. "$(dirname "$0")/lib.sh"

S="file://$T/store"
mkdir -p "$T/store" "$T/real" "$T/planted"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/keyA"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/keyB"
chmod 600 "$T/keyA" "$T/keyB"
# The key id as docs/store-format.md defines it.
key_id() {
    python3 -c 'import hmac,hashlib,sys
k=bytes.fromhex(open(sys.argv[1]).read().strip())
print(hmac.new(k,b"spotd job key id v1",hashlib.sha256).digest()[:8].hex())' "$1"
}
idA=$(key_id "$T/keyA") idB=$(key_id "$T/keyB")
echo real >"$T/real/marker"
echo planted >"$T/planted/marker"

# ctl ARGS...: spotctl, output in $T/out and $T/err.
ctl() {
    timeout -k 2 60 "$SPOTCTL" "$@" >"$T/out" 2>"$T/err"
    RC=$?
}

# 1: the real one, signed with key A.
ctl push --store "$S" --job j --step 10 --job-key-file "$T/keyA" "$T/real"
expect_eq "forged: spotctl push --job-key-file commits generation 1" 0 "$RC"
check "forged: ... its record carries key A's id and an HMAC-SHA256" \
    grep -q "\"mac_alg\":\"hmac-sha256\",\"key_id\":\"$idA\",\"mac\":\"[0-9a-f]\{64\}\"" \
    "$T/store/j/gens/00000001/COMMIT.json"
# 2: planted without a key: every digest right, only the MAC missing.
ctl push --store "$S" --job j --step 20 "$T/planted"
expect_eq "forged: a push without a key writes generation 2, unsigned" "0|" \
    "$RC|$(grep -o '"mac"' "$T/store/j/gens/00000002/COMMIT.json")"
# 3: generation 1's objects copied as generation 3, the numbers in them
# rewritten and the manifest's digest in the record put right.
python3 - "$T/store/j/gens" <<'EOF'
import hashlib, os, sys
gens = sys.argv[1]
os.makedirs(f"{gens}/00000003")
mf = open(f"{gens}/00000001/rank-0.json").read().replace('"gen":1,', '"gen":3,', 1)
open(f"{gens}/00000003/rank-0.json", "w").write(mf)
rec = open(f"{gens}/00000001/COMMIT.json").read().replace('"gen":1,', '"gen":3,', 1)
old = rec.split('"sha256":"')[1][:64]
rec = rec.replace(old, hashlib.sha256(mf.encode()).hexdigest())
open(f"{gens}/00000003/COMMIT.json", "w").write(rec)
EOF
# 4: signed, with another key.
ctl push --store "$S" --job j --step 40 --job-key-file "$T/keyB" "$T/planted"
expect_eq "forged: generation 4 is signed with key B" 0 "$RC"

# ---- verify -------------------------------------------------------------------
ctl verify --store "$S" --job j --gen 1 --job-key-file "$T/keyA"
check "verify --job-key-file: a generation of this key: signed by key <id>" \
    eval '[ $RC = 0 ] && grep -q "every hash correct; signed by key $idA$" "$T/out"'
ctl verify --store "$S" --job j --gen 1
check "verify without a key: signed, but not checked" \
    eval '[ $RC = 0 ] && grep -q "signed by key $idA (not checked: no job key given)" "$T/out"'
ctl verify --store "$S" --job j --gen 2
check "verify without a key: unsigned (as before: it verifies)" \
    eval '[ $RC = 0 ] && grep -q "every hash correct; unsigned$" "$T/out"'
ctl verify --store "$S" --job j --gen 2 --job-key-file "$T/keyA"
check "verify: an unsigned generation is refused under a key, in one line" \
    eval '[ $RC = 1 ] && grep -q "^not verified: unsigned$" "$T/out" &&
          grep -q "^spotctl: generation 2 of job .j. is not signed, and job key $idA is set: refusing it; it may be forged by someone who can write the store" "$T/err" &&
          [ "$(wc -l <"$T/err")" = 1 ]'
ctl verify --store "$S" --job j --gen 3 --job-key-file "$T/keyA"
check "verify: a record moved from generation 1 to 3 is refused (WRONG signature)" \
    eval '[ $RC = 1 ] && grep -q "^not verified: WRONG signature (key $idA" "$T/out" &&
          grep -q "generation 3 of job .j. has a WRONG signature for key $idA" "$T/err"'
ctl verify --store "$S" --job j --gen 1 --job-key-file "$T/keyB"
check "verify: a generation signed with key A is refused under key B" \
    eval '[ $RC = 1 ] && grep -q "WRONG signature (signed by key $idA, not $idB)" "$T/out" &&
          grep -q "signed by another key (id $idA, not $idB)" "$T/err"'
ctl verify --store "$S" --job j --world-key-file "$T/keyA"
check "verify --world-key-file: the newest record (4, key B) is refused, not passed over" \
    eval '[ $RC = 1 ] && grep -q "generation 4 of job .j. is signed by another key" "$T/err"'
echo "{\"store\": \"$S\", \"job\": \"j\", \"world_key_file\": \"$T/keyA\"}" >"$T/spotd.json"
ctl verify --config "$T/spotd.json" --gen 2 --json
check "verify --config with world_key_file: refused, and --json says why" \
    eval '[ $RC = 1 ] && [ "$(jget "$(cat "$T/out")" ok)|$(jget "$(cat "$T/out")" auth)" = false\|unsigned ]'
ctl fetch --store "$S" --job j --gen 2 --job-key-file "$T/keyA" "$T/fetched"
check "fetch: the unsigned generation is refused and nothing is written" \
    eval '[ $RC = 1 ] && grep -q "is not signed" "$T/err" && [ ! -e "$T/fetched" ]'
ctl show --store "$S" --job j --gen 1 --job-key-file "$T/keyA"
check "show: the signature, checked" eval '[ $RC = 0 ] && grep -q "^signature    signed by key $idA$" "$T/out"'
ctl ls --store "$S" --job j --job-key-file "$T/keyA"
check "ls: what each record's signature is" \
    eval 'grep -Eq "^1 +committed " "$T/out" && grep -Eq "^2 +unsigned " "$T/out" &&
          grep -Eq "^3 +bad-mac " "$T/out" && grep -Eq "^4 +other-key " "$T/out"'

# ---- resume -------------------------------------------------------------------
ctl resume --store "$S" --job j --state-dir "$T/r1" --job-key-file "$T/keyA" -- \
    sh -c 'echo "ran $SPOT_GEN"'
check "resume: the newest (forged) generation is refused and no command runs" \
    eval '[ $RC = 1 ] && grep -q "generation 4 of job .j. is signed by another key" "$T/err" &&
          ! grep -q "^ran" "$T/out"'
ctl resume --store "$S" --job j --gen 2 --state-dir "$T/r2" --job-key-file "$T/keyA" -- \
    sh -c 'echo "ran $SPOT_GEN"'
check "resume --gen 2: refused, no command runs" \
    eval '[ $RC = 1 ] && grep -q "generation 2 of job .j. is not signed" "$T/err" &&
          ! grep -q "^ran" "$T/out"'
ctl resume --store "$S" --job j --gen 1 --state-dir "$T/r3" --job-key-file "$T/keyA" -- \
    sh -c 'echo "ran $SPOT_GEN $(cat "$SPOT_RESUME_DIR/marker")"'
check "resume --gen 1: runs, spotd checking with the same key" \
    eval '[ $RC = 0 ] && grep -q "^ran 1 real$" "$T/out" &&
          grep -q "signed and checked with job key $idA" "$T/err"'

# ---- spotd run ----------------------------------------------------------------
run_spotd run --cloud none --job j --store "$S" --state-dir "$T/s1" --job-key-file "$T/keyA" \
    -- sh -c 'echo "ran $SPOT_GEN $(cat "$SPOT_RESUME_DIR/marker")"'
check "spotd run --job-key-file: resumes the real generation 1, not a planted one" \
    eval '[ $RC = 0 ] && grep -q "^ran 1 real$" "$T/stdout"'
check "spotd run: ... and says why it refused each newer one" \
    eval 'grep -q "generation 4 of job .j. is signed by another key" "$T/stderr" &&
          grep -q "generation 3 of job .j. has a WRONG signature" "$T/stderr" &&
          grep -q "generation 2 of job .j. is not signed" "$T/stderr"'
run_spotd run --cloud none --job j --store "$S" --state-dir "$T/s2" --world-key-file "$T/keyA" \
    -- sh -c 'echo "ran $SPOT_GEN $(cat "$SPOT_RESUME_DIR/marker")"'
check "spotd run --world-key-file on one node: the world key is the job key" \
    eval '[ $RC = 0 ] && grep -q "^ran 1 real$" "$T/stdout" && grep -q "refusing it" "$T/stderr"'
run_spotd run --cloud none --job j --store "$S" --state-dir "$T/s3" --job-key-file "$T/keyA" \
    --resume 2 -- sh -c 'echo "ran $SPOT_GEN"'
check "spotd run --resume 2 (unsigned): refused, the command never starts" \
    eval '[ $RC != 0 ] && ! grep -q "^ran" "$T/stdout" &&
          grep -q "generation 2 of job .j. is not signed" "$T/stderr"'
run_spotd run --cloud none --job j --store "$S" --state-dir "$T/s4" \
    -- sh -c 'echo "ran $SPOT_GEN $(cat "$SPOT_RESUME_DIR/marker")"'
check "spotd run without a key: the newest generation, as before" \
    eval '[ $RC = 0 ] && grep -q "^ran 4 planted$" "$T/stdout"'

# ---- gc -----------------------------------------------------------------------
ctl gc --store "$S" --job j --keep 1 --grace 0s --job-key-file "$T/keyA"
check "gc --keep 1 under key A: the real generation stays, the planted ones too" \
    eval '[ $RC = 0 ] && grep -q "^deleted 0 generations and 0 chunks" "$T/out" &&
          grep -q "3 of the kept generations are not signed by job key $idA" "$T/err" &&
          [ -e "$T/store/j/gens/00000001/COMMIT.json" ]'
ctl verify --store "$S" --job j --gen 1 --job-key-file "$T/keyA"
check "gc: ... and generation 1 still verifies" eval '[ $RC = 0 ]'

# ---- the key itself -----------------------------------------------------------
run_spotd run --cloud none --job j --store "$S" --state-dir "$T/s5" --job-key-file "$T/nokey" \
    -- touch "$T/ran"
check "spotd run: a job key file that cannot be read stops start-up (125), in one line" \
    eval '[ $RC = 125 ] && [ ! -e "$T/ran" ] && [ "$(wc -l <"$T/stderr")" = 1 ] &&
          grep -q "cannot read the job key file .*nokey. (from --job-key-file)" "$T/stderr"'
printf 'short' >"$T/shortkey"
SPOTD_JOB_KEY_FILE="$T/shortkey" run_spotd run --cloud none --job j --store "$S" \
    --state-dir "$T/s6" -- touch "$T/ran"
check "spotd run: SPOTD_JOB_KEY_FILE with a short key is refused, saying how to make one" \
    eval '[ $RC = 125 ] && [ ! -e "$T/ran" ] &&
          grep -q "invalid job key in .*(from SPOTD_JOB_KEY_FILE): the key is shorter than 16 bytes; make one with .openssl rand -hex 32." "$T/stderr"'
ctl verify --store "$S" --job j --job-key-file "$T/nokey"
check "spotctl: a job key file that cannot be read is a usage error (2)" \
    eval '[ $RC = 2 ] && grep -q "cannot read the job key file" "$T/err"'
chmod 644 "$T/keyA"
ctl verify --store "$S" --job j --gen 1 --job-key-file "$T/keyA"
check "spotctl: a key file others can read is warned about" \
    eval '[ $RC = 0 ] && grep -q "can be read by other users (mode 0644): chmod 600 it" "$T/err"'
