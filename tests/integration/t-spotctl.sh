# spotctl as an operator uses it, on the file store (the same commands
# against S3 run in t-store-s3.sh through store_cases.sh): show, world,
# resume, the configuration file spotd reads, per-command help, --json
# everywhere, and the progress line on a terminal only.
. "$(dirname "$0")/lib.sh"

S="file://$T/store"
mkdir -p "$T/store" "$T/r0/sub" "$T/r1"
head -c 3000000 /dev/urandom >"$T/r0/weights.bin"
echo "step 40" >"$T/r0/sub/meta.txt"
ln -s weights.bin "$T/r0/latest"
echo one >"$T/r1/shard"

# ctl ARGS...: spotctl on the store, output in $T/out and $T/err.
ctl() {
    timeout -k 2 60 "$SPOTCTL" "$@" >"$T/out" 2>"$T/err"
    RC=$?
}
# valid_json FILE: the file is one strict JSON document (lib.sh: jcheck).
valid_json() { jcheck "$1"; }

ctl push --store "$S" --job j --step 40 --reason test "$T/r0" "$T/r1"
expect_eq "spotctl push: a generation of two ranks" 0 "$RC"

# ---- show ------------------------------------------------------------------------
ctl show --store "$S" --job j
expect_eq "show: exits 0" 0 "$RC"
check "show: the generation, its step and reason" \
    eval 'grep -q "^generation   1 of job j" "$T/out" && grep -q "^step         40" "$T/out" &&
          grep -q "^reason       test" "$T/out"'
check "show: a line per rank with its files and chunks" \
    eval 'grep -Eq "^0 +2\.9 MiB +4 +2 " "$T/out" && grep -Eq "^1 +4 B +1 +1 " "$T/out"'
ctl show --files --gen 1 --store "$S" --job j
check "show --files: every file, a symlink with its target" \
    eval 'grep -Eq "^file +0644 +2\.9 MiB +1 +weights.bin$" "$T/out" &&
          grep -Eq "^symlink .* latest -> weights.bin$" "$T/out" && grep -Eq "^dir .* sub$" "$T/out"'
ctl show --json --files --store "$S" --job j
check "show --json: one JSON document" valid_json "$T/out"
expect_eq "show --json: ranks, files, sizes" "2|40|3000008|sub/meta.txt" \
    "$(jq_ '"%d|%d|%d|%s" % (len(d["ranks"]), d["step"], d["ranks"][0]["bytes"], d["ranks"][0]["files"][2]["path"])' "$T/out")"
ctl show --gen 9 --store "$S" --job j
check "show: a missing generation exits 1 and says so" \
    eval '[ $RC = 1 ] && grep -q "has no generation 9" "$T/err"'
# A damaged manifest: show refuses it (the commit record's digest).
mf=$(find "$T/store/j/gens" -name 'rank-1.json' | head -n 1)
cp "$mf" "$T/mf.bak"
sed -i 's/"shard"/"shard2"/' "$mf"
ctl show --store "$S" --job j
check "show: a manifest that does not match its commit record is refused" \
    eval '[ $RC = 1 ] && grep -q "does not match the digest" "$T/err"'
cp "$T/mf.bak" "$mf"

# ---- world -----------------------------------------------------------------------
ctl world --store "$S" --job j
check "world: no records, said in words" \
    eval '[ $RC = 0 ] && grep -q "no records" "$T/out"'
mkdir -p "$T/store/j/world"
now=$(( $(date +%s) * 1000 ))
node0=0123456789abcdef0123456789abcdef
node1=fedcba9876543210fedcba9876543210
printf '{"v":1,"type":"rank","job":"j","node":"%s","rank":0,"addr":"10.0.0.5:7070","ts_ms":%s}' \
    "$node0" "$now" >"$T/store/j/world/rank-0.json"
printf '{"v":1,"type":"join","job":"j","node":"%s","ts_ms":%s}' "$node1" "$now" \
    >"$T/store/j/world/join-$node1.json"
printf '{"v":1,"type":"rank","job":"other","node":"%s","rank":1,"addr":"10.0.0.6:7070","ts_ms":%s}' \
    "$node0" "$now" >"$T/store/j/world/rank-1.json"
echo 'not json' >"$T/store/j/world/rank-2.json"
ctl world --store "$S" --job j
expect_eq "world: exits 0" 0 "$RC"
check "world: a rank with its address, a node asking for one" \
    eval 'grep -Eq "^rank +0 +10\.0\.0\.5:7070 +0123456789abcdef " "$T/out" &&
          grep -Eq "^join +- +- +fedcba9876543210 " "$T/out"'
check "world: records of another job or not JSON are shown as invalid, with why" \
    eval 'grep -Eq "^invalid .*rank-1.json \(a record of another job\)" "$T/out" &&
          grep -Eq "^invalid .*rank-2.json \(" "$T/out"'
ctl world --json --store "$S" --job j
check "world --json: one JSON document" valid_json "$T/out"
expect_eq "world --json: four records, two valid" "4|2" \
    "$(jq_ '"%d|%d" % (len(d), sum(1 for r in d if "error" not in r))' "$T/out")"
rm -rf "$T/store/j/world"

# ---- the configuration file spotd reads --------------------------------------------
printf '{"store": "%s", "job": "j", "state_dir": "%s/st", "command": ["sh", "-c", "cat \\"$SPOT_RESUME_DIR/shard\\" 2>/dev/null || cat \\"$SPOT_RESUME_DIR/sub/meta.txt\\""]}\n' \
    "$S" "$T" >"$T/spotd.json"
ctl ls --config "$T/spotd.json"
check "config: --config gives the store and the job" \
    eval '[ $RC = 0 ] && grep -Eq "^1 +committed +40 +2 " "$T/out"'
SPOTD_CONFIG="$T/spotd.json" ctl ls --json
check "config: so does SPOTD_CONFIG" eval '[ $RC = 0 ] && valid_json "$T/out"'
ctl ls --config "$T/spotd.json" --job nothing
check "config: a flag wins over the file" \
    eval '[ $RC = 0 ] && ! grep -q committed "$T/out"'
echo '{"store": "file:///x", "jobb": "j"}' >"$T/bad.json"
ctl ls --config "$T/bad.json"
check "config: a bad file is refused, naming the key" \
    eval '[ $RC = 2 ] && grep -q "unknown key .jobb." "$T/err"'
ctl ls --job j
check "a store command without a store says every way to give one" \
    eval '[ $RC = 2 ] && grep -q -- "--store URL, SPOTD_STORE, or \"store\" in the configuration file" "$T/err"'

# ---- resume ------------------------------------------------------------------------
ctl resume --config "$T/spotd.json"
expect_eq "resume: runs the file's command through spotd, resumed (rank 0)" "0|step 40" \
    "$RC|$(tail -n 1 "$T/out")"
check "resume: ... from the newest generation, said on stderr" \
    grep -q "resuming job j from generation 1 (manual)" "$T/err"
check "resume: ... spotd restored it into its state directory" \
    test -f "$T/st/restore/gen-00000001/weights.bin"
ctl resume --gen 1 --state-dir "$T/st2" --store "$S" --job j -- \
    sh -c 'echo "$SPOT_GEN $SPOT_RESUME_STEP $(cat "$SPOT_RESUME_DIR/sub/meta.txt")"'
expect_eq "resume -- COMMAND: the command given, with SPOT_GEN and SPOT_RESUME_STEP" \
    "0|1 40 step 40" "$RC|$(tail -n 1 "$T/out")"
ctl resume --json --gen 1 --state-dir "$T/st3" --store "$S" --job j -- true
expect_eq "resume --json: spotd's log is strict JSON lines, the resume event among them" "0|1" \
    "$RC|$(jget "$(grep '"event":"resume"' "$T/err")" gen)"
check "resume --json: ... every line of it (no key twice, no NaN)" jcheck "$T/err"
ctl resume --store "$S" --job j
check "resume without a command says where one goes" \
    eval '[ $RC = 2 ] && grep -q "resume needs the command" "$T/err"'
ctl resume --gen 5 --store "$S" --job j -- true
check "resume: a generation that is not there exits 1 and says so" \
    eval '[ $RC = 1 ] && grep -q "no generation of that number" "$T/err"'
ctl resume --store "$S" --job none -- true
check "resume: a job with nothing committed exits 1 and says so" \
    eval '[ $RC = 1 ] && grep -q "no committed generation to resume from" "$T/err"'
ctl resume --spotd "$T/no-spotd" --store "$S" --job j --state-dir "$T/st3" -- true
check "resume: a spotd that cannot run is named" \
    eval '[ $RC = 1 ] && grep -q "cannot execute $T/no-spotd" "$T/err"'

# ---- help, options, --json -----------------------------------------------------------
bad_help=""
for cmd in ls show verify fetch resume gc world push status checkpoint drill; do
    "$SPOTCTL" "$cmd" --help >"$T/out" 2>&1 && grep -q "^usage: spotctl $cmd " "$T/out" ||
        bad_help="$bad_help $cmd"
    "$SPOTCTL" help "$cmd" >"$T/out2" 2>&1 && cmp -s "$T/out" "$T/out2" || bad_help="$bad_help help:$cmd"
done
expect_eq "every command has --help (and spotctl help COMMAND)" "" "$bad_help"
ctl ls --rank 1 --store "$S" --job j
check "an option of another command is refused, naming it" \
    eval '[ $RC = 2 ] && grep -q "ls takes no --rank" "$T/err"'
ctl frobnicate
check "an unknown command: exit 2, pointing at help" \
    eval '[ $RC = 2 ] && grep -q "spotctl help" "$T/err"'
bad_json=""
for args in "ls" "show" "verify" "world" "gc --dry-run --keep 1"; do
    ctl $args --json --store "$S" --job j
    [ "$RC" = 0 ] && valid_json "$T/out" || bad_json="$bad_json [$args]"
done
ctl fetch --json --store "$S" --job j "$T/f1"
[ "$RC" = 0 ] && valid_json "$T/out" || bad_json="$bad_json [fetch]"
ctl push --json --store "$S" --job j "$T/r1"
[ "$RC" = 0 ] && valid_json "$T/out" || bad_json="$bad_json [push]"
expect_eq "the store commands' --json is one JSON document each" "" "$bad_json"

# ---- progress on a terminal only ----------------------------------------------------------
head -c 16000000 /dev/urandom >"$T/r0/big.bin"
ctl push --store "$S" --job j "$T/r0"
check "no progress line when stderr is not a terminal" \
    eval '[ $RC = 0 ] && ! grep -q "push \[" "$T/err"'
SPOTCTL_ARGS="fetch --threads 1 --store $S --job j $T/f2"
script -qec "$SPOTCTL $SPOTCTL_ARGS" /dev/null >"$T/tty" 2>&1
check "on a terminal, fetch draws a progress line with its rate" \
    eval 'grep -aq "fetch \[" "$T/tty" && grep -aq "/s" "$T/tty" && test -f "$T/f2/big.bin"'
check "nothing of this test is left running" wait_for 5 none_left
