#!/usr/bin/env bash
# Configuration: flags, environment and file; every usage or configuration
# error is one line starting "spotd: " and exit status 125.
. "$(dirname "$0")/lib.sh"

# usage_error NAME TEXT...: the last run_spotd exited 125 with exactly one
# stderr line, starting "spotd: " and containing every TEXT (fixed strings).
usage_error() {
    local name=$1 t lines why=""
    shift
    lines=$(wc -l <"$T/stderr" | tr -d ' ')
    [ "$RC" -eq 125 ] || why="exit $RC, not 125"
    [ -z "$why" ] && [ "$lines" != 1 ] && why="$lines stderr lines, not 1"
    [ -z "$why" ] && ! head -n 1 "$T/stderr" | grep -q '^spotd: ' && why="no 'spotd: ' prefix"
    for t in "$@"; do
        [ -z "$why" ] && ! grep -qF -- "$t" "$T/stderr" && why="no '$t' in the message"
    done
    if [ -z "$why" ]; then pass "$name"; else fail "$name" "$why: $(head -c 300 "$T/stderr")"; fi
}

# no_run NAME: the command given to the last run_spotd never ran.
no_run() {
    if [ -e "$T/ran" ]; then fail "$1" "the command ran"; rm -f "$T/ran"; else pass "$1"; fi
}

# grace_is: the "grace" value that the last run_spotd config printed.
grace_is() {
    sed -n 's/^[[:space:]]*"grace":[[:space:]]*"\([^"]*\)",\{0,1\}$/\1/p' "$T/stdout"
}

# --- flags ---
run_spotd run --bogus -- touch "$T/ran"
usage_error "unknown flag: 125, names it" "--bogus"
no_run "unknown flag: the command does not run"

run_spotd run --grace=1s --frobnicate=3 -- touch "$T/ran"
usage_error "unknown flag with =value: names it" "--frobnicate"

run_spotd run --grace
usage_error "missing value: 125, names the flag" "--grace"

run_spotd run --events
usage_error "missing value for --events: 125, names the flag" "--events"

# --config without its file is the same mistake, for run and for config.
run_spotd run --config
usage_error "missing value for --config (run): 125, names the flag" "--config"
run_spotd config --config
usage_error "missing value for --config (config): 125, names the flag" "--config"

run_spotd run --grace 5x -- touch "$T/ran"
usage_error "--grace 5x: names grace, the value and the format" "grace" "5x" "500ms"
no_run "--grace 5x: the command does not run"

run_spotd run --grace 5 -- true
usage_error "--grace 5 (bare number): refused" "grace" "'5'"

run_spotd run --grace 721h -- true
usage_error "--grace 721h (over 720h): refused" "grace" "720h"

run_spotd run --restart sometimes -- true
usage_error "--restart sometimes: lists the choices" "sometimes" "never, on-failure, always"

run_spotd run --max-restarts -1 -- true
usage_error "--max-restarts -1: refused" "max_restarts" "-1"

run_spotd run --max-restarts abc -- true
usage_error "--max-restarts abc: refused" "max_restarts" "abc"

run_spotd run --stop-signal NOPE -- true
usage_error "--stop-signal NOPE: refused" "stop_signal" "NOPE"

run_spotd run --log-format xml -- true
usage_error "--log-format xml: lists text and json" "xml" "text, json"

run_spotd run
usage_error "no command: 125" "no command"
run_spotd run --grace 1s --
usage_error "no command after --: 125" "no command"

run_spotd frobnicate
usage_error "unknown subcommand: 125, names it" "frobnicate"

"$SPOTD" >"$T/stdout" 2>"$T/stderr"
RC=$?
expect_eq "no subcommand at all: 125" 125 "$RC"
check "no subcommand at all: usage on stderr" grep -q 'usage: spotd run' "$T/stderr"

run_spotd config extra
usage_error "spotd config with an argument: 125, names it" "extra"

# A command that starts with '-' after '--' is the command, not an option.
run_spotd run -- sh -c 'exit 9'
expect_eq "'--' ends the options" 9 "$RC"

# --- configuration file ---
printf '{\n  "grace": "1s",\n  "restart": ,\n}\n' >"$T/bad.json"
run_spotd run --config "$T/bad.json" -- true
usage_error "invalid JSON: FILE:LINE:COL" "$T/bad.json:3:"
check "invalid JSON: a column is given" grep -qE "bad.json:3:[0-9]+: " "$T/stderr"

printf '{"grace": "1s"} trailing' >"$T/trail.json"
run_spotd config --config "$T/trail.json"
usage_error "text after the object: FILE:LINE:COL" "$T/trail.json:1:"

printf '[1, 2]\n' >"$T/array.json"
run_spotd run --config "$T/array.json" -- true
usage_error "not an object: refused" "$T/array.json" "object"

printf '' >"$T/empty.json"
run_spotd config --config "$T/empty.json"
usage_error "empty file: refused" "$T/empty.json"

printf '{"gracee": "1s"}\n' >"$T/typo.json"
run_spotd run --config "$T/typo.json" -- touch "$T/ran"
usage_error "unknown key: did you mean" "$T/typo.json" "gracee" "did you mean 'grace'"
no_run "unknown key: the command does not run"

# The same errors after a first valid key.
printf '{"max_restarts": 3, "gracee": "1s"}\n' >"$T/typo2.json"
run_spotd run --config "$T/typo2.json" -- touch "$T/ran"
usage_error "unknown key after a valid one: refused" "$T/typo2.json" "gracee" \
    "did you mean 'grace'"
no_run "unknown key after a valid one: the command does not run"

printf '{"grace": "1s", "grace": "2s"}\n' >"$T/dup.json"
run_spotd config --config "$T/dup.json"
usage_error "duplicate key: refused" "$T/dup.json" "grace" "twice"

printf '{"grace": 30}\n' >"$T/type1.json"
run_spotd config --config "$T/type1.json"
usage_error "grace as a number: refused" "$T/type1.json" "grace" "string"

printf '{"max_restarts": "3"}\n' >"$T/type2.json"
run_spotd config --config "$T/type2.json"
usage_error "max_restarts as a string: refused" "$T/type2.json" "max_restarts" "whole number"

printf '{"max_restarts": 2.5}\n' >"$T/type3.json"
run_spotd config --config "$T/type3.json"
usage_error "max_restarts 2.5: refused" "$T/type3.json" "max_restarts"

printf '{"restart": "always", "grace": 30}\n' >"$T/type4.json"
run_spotd config --config "$T/type4.json"
usage_error "wrong type after a valid key: refused" "$T/type4.json" "grace"

printf '{"grace": "5x"}\n' >"$T/val.json"
run_spotd config --config "$T/val.json"
usage_error "bad value in the file: names key and file" "grace" "5x" "$T/val.json"

run_spotd run --config "$T/nonexistent.json" -- true
usage_error "missing --config file: names the path" "$T/nonexistent.json"

SPOTD_CONFIG="$T/nonexistent2.json" run_spotd config
usage_error "missing SPOTD_CONFIG file: names the path" "$T/nonexistent2.json"

run_spotd config --config "$T"
usage_error "--config naming a directory: refused" "config file '$T' is a directory"

# A FIFO or a device is refused before it is read: a FIFO would hold spotd
# until someone writes to it, a terminal until someone types.
mkfifo "$T/fifo.json"
t0=$(now_ms)
run_spotd run --config "$T/fifo.json" -- touch "$T/ran"
usage_error "--config naming a FIFO: refused" \
    "config file '$T/fifo.json' is a FIFO; --config takes a regular file"
expect_lt "--config naming a FIFO: ... at once, no writer waited for (ms)" 10000 \
    $(($(now_ms) - t0))
no_run "--config naming a FIFO: the command does not run"
SPOTD_CONFIG="$T/fifo.json" run_spotd config
usage_error "SPOTD_CONFIG naming a FIFO: refused" "is a FIFO"
run_spotd config --config /dev/zero
usage_error "--config naming a device: refused" "config file '/dev/zero' is a character device"

# "\u0000" would cut a string short: "3s\u0000junk" would read as 3s.
printf '{"restart": "on-failure",\n "grace": "3s\\u0000junk"}\n' >"$T/nul.json"
run_spotd run --config "$T/nul.json" -- touch "$T/ran"
usage_error "a string holding \\u0000: refused, naming the key and where" \
    "$T/nul.json:2:14: the value of key 'grace' holds a NUL character"
no_run "a string holding \\u0000: the command does not run"
printf '{"command": ["touch", "%s/ran\\u0000x"]}\n' "$T" >"$T/nulcmd.json"
run_spotd run --config "$T/nulcmd.json"
usage_error "an argument of the file's command holding \\u0000: refused" \
    "the value of key 'command' holds a NUL character"
no_run "an argument holding \\u0000: the command does not run"

# Comments ("_" keys) and null (the default) are accepted.
printf '{"_comment": "hi", "grace": null, "restart": "on-failure"}\n' >"$T/ok.json"
run_spotd config --config "$T/ok.json"
expect_eq "_comment key and null value accepted" 0 "$RC"
expect_eq "null means the default grace" 30s "$(grace_is)"

# --- environment ---
SPOTD_GRACE=abc run_spotd run -- true
usage_error "SPOTD_GRACE=abc: names the variable" "SPOTD_GRACE" "abc"

SPOTD_RESTART=sometimes run_spotd config
usage_error "SPOTD_RESTART=sometimes: names the variable" "SPOTD_RESTART"

SPOTD_FOO=1 run_spotd config
expect_eq "unknown SPOTD_FOO: spotd config still succeeds" 0 "$RC"
check "unknown SPOTD_FOO: a warning names it" grep -q 'warning.*SPOTD_FOO' "$T/stderr"
SPOTD_FOO=1 run_spotd run -- sh -c 'exit 4'
expect_eq "unknown SPOTD_FOO: spotd run still runs the command" 4 "$RC"

# --- precedence: default < file < environment < flag ---
printf '{"grace": "10s"}\n' >"$T/g.json"
run_spotd config
expect_eq "default grace is 30s" 30s "$(grace_is)"
run_spotd config --config "$T/g.json"
expect_eq "--config FILE selects the file" 10s "$(grace_is)"
run_spotd config --config="$T/g.json"
expect_eq "--config=FILE selects the file" 10s "$(grace_is)"
SPOTD_CONFIG="$T/g.json" run_spotd config
expect_eq "SPOTD_CONFIG selects the file" 10s "$(grace_is)"
SPOTD_CONFIG="$T/g.json" SPOTD_GRACE=20s run_spotd config
expect_eq "SPOTD_GRACE beats the file" 20s "$(grace_is)"
SPOTD_CONFIG="$T/g.json" SPOTD_GRACE=20s run_spotd config --grace 30s
expect_eq "--grace beats SPOTD_GRACE and the file" 30s "$(grace_is)"
SPOTD_GRACE=20s run_spotd config --config "$T/g.json" --grace 45s
expect_eq "--grace beats all (with --config)" 45s "$(grace_is)"
printf '{"grace": "11s"}\n' >"$T/g2.json"
SPOTD_CONFIG="$T/g2.json" run_spotd config --config "$T/g.json"
expect_eq "--config beats SPOTD_CONFIG" 10s "$(grace_is)"
SPOTD_GRACE='' run_spotd config --config "$T/g.json"
expect_eq "an empty SPOTD_GRACE is ignored" 10s "$(grace_is)"

# The settings spotd runs with are the ones config shows: the start record.
SPOTD_GRACE=20s run_spotd run --config "$T/g.json" --events "$T/set.events" -- true
check "spotd run records the file in its start record" \
    has "\"config\":\"$T/g.json\"" "$T/set.events"
check "spotd run records the effective grace in its start record" \
    has '"grace":"20s"' "$T/set.events"

# --- a world: its options go together ---
run_spotd run --rank 1 -- touch "$T/ran"
usage_error "--rank alone: spotd run says what a world needs" "--rank, --world-size and --peers"
no_run "--rank alone: the command does not run"
run_spotd config --rank 1
expect_eq "--rank: spotd config still succeeds" 0 "$RC"
check "--rank: spotd config shows it" grep -q '"rank":[[:space:]]*1' "$T/stdout"
run_spotd run --job j --store "file://$T/ws" --rank 0 --world-size 2 \
    --peers 127.0.0.1:1,127.0.0.1:2 -- touch "$T/ran"
usage_error "a world without a key: refused, saying how to make one" "needs a shared key" \
    "openssl rand -hex 32" "--insecure"
no_run "a world without a key: the command does not run"
run_spotd run --job j --store "file://$T/ws" --rank 2 --world-size 2 \
    --peers 127.0.0.1:1,127.0.0.1:2 --insecure -- touch "$T/ran"
usage_error "--rank beyond --world-size: refused" "ranks are 0 to 1"
run_spotd run --job j --store "file://$T/ws" --rank 0 --world-size 3 \
    --peers 127.0.0.1:1,127.0.0.1:2 --insecure -- touch "$T/ran"
usage_error "--peers of the wrong length: refused" "lists 2 addresses for --world-size 3"
run_spotd run --job j --store "file://$T/ws" --rank 0 --world-size 2 \
    --peers 127.0.0.1:1,host.example:2 --insecure -- touch "$T/ran"
usage_error "--peers with a name instead of an address: refused" "host.example:2" "numeric"
run_spotd run --job j --store "file://$T/ws" --rank 0 --world-size 2 --method dir \
    --ckpt-dir "$T" --peers 127.0.0.1:1,127.0.0.1:2 --insecure -- touch "$T/ran"
usage_error "the dir method in a world: refused, saying what to use" "dir method" "app"

run_spotd run --interval 10m -- touch "$T/ran"
usage_error "--interval without a store: spotd run says what it needs" "--job and --store"
no_run "--interval without a store: the command does not run"

SPOTD_PEERS=a:1 run_spotd run -- true
usage_error "SPOTD_PEERS alone: spotd run says what a world needs" "--rank, --world-size and --peers"
SPOTD_PEERS=a:1 run_spotd config
expect_eq "SPOTD_PEERS: spotd config still succeeds" 0 "$RC"
check "SPOTD_PEERS: spotd config shows it" grep -q '"peers":[[:space:]]*"a:1"' "$T/stdout"

SPOTD_JOB=j run_spotd run -- touch "$T/ran"
usage_error "SPOTD_JOB without a store: spotd run says both are needed" "--job and --store"
no_run "SPOTD_JOB without a store: the command does not run"

printf '{"method": "criu", "criu": "/nonexistent/criu"}\n' >"$T/m.json"
mkdir -p "$T/mstore"
run_spotd run --config "$T/m.json" --job m --store "file://$T/mstore" --state-dir "$T/mstate" \
    -- true
check "method in the file: spotd run takes it (and the criu it names)" \
    eval '[ "$RC" != 0 ] && grep -qE "method criu(: no executable criu at /nonexistent/criu| needs root)" "$T/stderr"'
run_spotd config --config "$T/m.json"
expect_eq "method in the file: spotd config still succeeds" 0 "$RC"
check "method in the file: spotd config shows it" grep -q '"method":[[:space:]]*"criu"' "$T/stdout"

# --- secrets ---
SPOTD_WORLD_KEY=s3cr3t-value-x9 run_spotd config
expect_eq "SPOTD_WORLD_KEY: spotd config succeeds" 0 "$RC"
check "SPOTD_WORLD_KEY: shown as <redacted>" grep -q '"world_key":[[:space:]]*"<redacted>"' "$T/stdout"
check "SPOTD_WORLD_KEY: the secret appears nowhere in the output" \
    eval '! grep -q s3cr3t-value-x9 "$T/stdout" "$T/stderr"'
SPOTD_WORLD_KEY=s3cr3t-value-x9 run_spotd run --job j --store "file://$T/ws" --rank 0 \
    --world-size 2 --peers 127.0.0.1:1,127.0.0.1:2 -- true
check "SPOTD_WORLD_KEY: spotd run's refusal of a short key does not show the secret" \
    eval '[ "$RC" -eq 125 ] && grep -q "invalid world_key" "$T/stderr" && ! grep -q s3cr3t-value-x9 "$T/stdout" "$T/stderr"'
# Every user can read a command line (/proc/PID/cmdline): no secret from a flag.
run_spotd run --world-key s3cr3t-value-x9 -- touch "$T/ran"
usage_error "--world-key on the command line: refused, saying where a key goes" \
    "--world-key cannot be given on the command line" "--world-key-file" "SPOTD_WORLD_KEY"
no_run "--world-key on the command line: the command does not run"
check "--world-key on the command line: the refusal does not show the key" \
    eval '! grep -q s3cr3t-value-x9 "$T/stdout" "$T/stderr"'

# --- spotd config prints valid JSON: an object, one "key": value a line ---
run_spotd config
expect_eq "spotd config exits 0" 0 "$RC"
check "spotd config: opens with {" test "$(head -n 1 "$T/stdout")" = "{"
check "spotd config: closes with }" test "$(tail -n 1 "$T/stdout")" = "}"
n=$(($(wc -l <"$T/stdout") - 2))
members=$(sed '1d;$d' "$T/stdout")
check "spotd config: every member is \"key\": string, number, boolean or null" \
    eval '[ "$(printf "%s\n" "$members" | grep -cE "^[[:space:]]*\"[a-z0-9_]+\":[[:space:]]*(\"[^\"\\\\]*\"|[0-9]+|true|false|null),?$")" -eq $n ]'
check "spotd config: commas between members, none after the last" \
    eval '[ "$(printf "%s\n" "$members" | grep -c ",$")" -eq $((n - 1)) ] &&
          ! printf "%s\n" "$members" | tail -n 1 | grep -q ",$"'
for kv in '"restart":[[:space:]]*"never"' '"max_restarts":[[:space:]]*10' \
          '"stop_signal":[[:space:]]*"TERM"' '"log_format":[[:space:]]*"text"' \
          '"log_level":[[:space:]]*"info"' '"events":[[:space:]]*null'; do
    check "spotd config: default $kv" grep -qE "^[[:space:]]*$kv,?$" "$T/stdout"
done
keys=$(sed -n 's/^[[:space:]]*"\([a-z_]*\)":.*/\1/p' "$T/stdout")
check "spotd config: no key twice" test "$(printf '%s\n' "$keys" | sort | uniq -d | wc -l)" -eq 0

# --- spotd help: every option with its three spellings ---
run_spotd help
expect_eq "spotd help exits 0" 0 "$RC"
missing=""
for k in $keys; do
    flag="--$(printf '%s' "$k" | tr _ -)"
    env="SPOTD_$(printf '%s' "$k" | tr '[:lower:]' '[:upper:]')"
    [ "$k" = command ] && { flag=-; env=-; } # the file's alone
    grep -E "^${k}[[:space:]]+${flag}[[:space:]]+${env}[[:space:]]" "$T/stdout" >/dev/null ||
        missing="$missing $k"
done
expect_eq "spotd help lists every option with key, flag and variable" "" "$missing"
check "spotd help: max_restarts --max-restarts SPOTD_MAX_RESTARTS" \
    grep -qE '^max_restarts +--max-restarts +SPOTD_MAX_RESTARTS ' "$T/stdout"
check "spotd help: --config and SPOTD_CONFIG" grep -qE -- '--config +SPOTD_CONFIG' "$T/stdout"

# Every option spelled as a flag and as a variable is accepted by config.
bad=""
for k in restart max_restarts grace stop_signal log_format log_level; do
    case $k in
        restart) v=always ;; max_restarts) v=7 ;; grace) v=7s ;;
        stop_signal) v=USR2 ;; log_format) v=json ;; log_level) v=warn ;;
    esac
    flag="--$(printf '%s' "$k" | tr _ -)"
    env="SPOTD_$(printf '%s' "$k" | tr '[:lower:]' '[:upper:]')"
    run_spotd config "$flag" "$v"
    grep -qE "\"${k}\":[[:space:]]*\"?$v\"?,?$" "$T/stdout" || bad="$bad $flag"
    env "$env=$v" "$SPOTD" config >"$T/stdout" 2>"$T/stderr"
    grep -qE "\"${k}\":[[:space:]]*\"?$v\"?,?$" "$T/stdout" || bad="$bad $env"
    printf '{"%s": %s}\n' "$k" "$([ "$k" = max_restarts ] && echo "$v" || echo "\"$v\"")" >"$T/k.json"
    run_spotd config --config "$T/k.json"
    grep -qE "\"${k}\":[[:space:]]*\"?$v\"?,?$" "$T/stdout" || bad="$bad $k(file)"
done
expect_eq "each option works as flag, variable and file key" "" "$bad"

# --- event log path ---
run_spotd run --events /nonexistent/dir/f -- touch "$T/ran"
usage_error "--events in a missing directory: names the path" "/nonexistent/dir/f"
no_run "--events in a missing directory: the command does not run"

# --- the file's "command" ---
printf '{"command": ["sh", "-c", "echo \\"$1\\" >%s", "sh", "from the file"]}\n' "$T/said" >"$T/cmd.json"
run_spotd run --config "$T/cmd.json"
expect_eq "the file's command runs when none is given" "0|from the file" "$RC|$(cat "$T/said" 2>/dev/null)"
run_spotd run --config "$T/cmd.json" -- sh -c "echo line >$T/said"
expect_eq "... a command on the command line wins" "0|line" "$RC|$(cat "$T/said" 2>/dev/null)"
run_spotd config --config "$T/cmd.json"
check "... spotd config shows it" grep -q '"command":.*"from the file"' "$T/stdout"
for bad in '[]' '"sh -c x"' '["", "x"]' '["sh", 3]' '{"a": 1}'; do
    printf '{"command": %s}\n' "$bad" >"$T/bad.json"
    run_spotd run --config "$T/bad.json"
    usage_error "a command of $bad is refused" "invalid command in $T/bad.json"
done
echo '{"grace": "5s"}' >"$T/nocmd.json"
run_spotd run --config "$T/nocmd.json"
usage_error "no command anywhere: says where one goes" '"command" in the configuration file'

# --help and -h print the usage and exit 0.
run_spotd run --help
expect_eq "spotd run --help exits 0" 0 "$RC"
check "spotd run --help prints the usage" grep -q 'usage: spotd run' "$T/stdout"
run_spotd version
expect_eq "spotd version exits 0" 0 "$RC"
check "spotd version prints a version" grep -qE '^spotd [0-9]+\.[0-9]+\.[0-9]+' "$T/stdout"
check "nothing of this test is left running" wait_for 5 none_left
