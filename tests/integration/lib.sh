# Helpers for integration tests: source it from tests/integration/t-*.sh.
# Tests run the real spotd binary ($SPOTD) on real processes and signals.
# Each check prints "PASS: name" or "FAIL: name: why"; tests/run counts them.
set -u
: "${SPOTD:?run through tests/run or make check}"
T=$(mktemp -d /tmp/spotd-it.XXXXXX)
trap 'cleanup' EXIT
_bg_pids=()

# Tests set the SPOTD_* variables they mean; none comes from outside.
for _v in $(compgen -e | grep "^SPOTD_"); do unset "$_v"; done
unset _v

# Every process started from here on carries SPOT_IT_TAG=$T in its
# environment (spotd passes it on to the command and all below), so what
# escaped the process tree (reparented to init) can still be found.
export SPOT_IT_TAG="$T"

# cleanup: the whole tree below each background process goes, then anything
# else that carries the tag, so a failed test leaves nothing running.
cleanup() {
    local p
    for p in "${_bg_pids[@]}"; do kill_tree "$p"; done
    for p in $(tagged); do kill -KILL "$p" 2>/dev/null; done
    for p in "${_bg_pids[@]}"; do wait "$p" 2>/dev/null; done
    [ -e "$T/.failed" ] && [ -z "${KEEP_T:-}" ] && keep_logs
    [ -n "${KEEP_T:-}" ] || rm -rf "$T"
}

# keep_logs: a failed script's event logs and outputs (the small files)
# outlive it, for a flake seen once on a loaded machine.
keep_logs() {
    local keep f
    keep=$(mktemp -d "/tmp/spotd-failed.$(basename "$0" .sh).XXXXXX") || return
    (cd "$T" && find . -type f -size -4M \( -name '*.ev' -o -name '*ev[0-9]' -o -name 'std*' \
        -o -name '*.log' -o -name '*.err' -o -name '*.out' \) -print0 |
        xargs -0 -r cp --parents -t "$keep" 2>/dev/null)
    echo "the logs of the failed checks are kept in $keep"
}

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1${2:+: $2}"; : >"$T/.failed"; }

# check NAME CONDITION...: pass when the command succeeds.  Returns its
# status, so that `check ... || { diagnostics; }` prints them on a failure.
check() {
    local name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name" "$*"; return 1; fi
}

# expect_eq NAME EXPECTED ACTUAL
expect_eq() {
    if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "expected '$2', got '$3'"; fi
}

# expect_match NAME ERE ACTUAL: ACTUAL matches the whole extended regex ERE.
expect_match() {
    if grep -qxE "$2" <<<"$3"; then pass "$1"; else fail "$1" "expected /$2/, got '$3'"; fi
}

# run_spotd ARGS...: run spotd in the foreground (bounded: a guard against
# a hang, 120 s, for a run that takes seconds on an idle machine and may take
# several times that beside other suites); sets RC, and leaves its stderr in
# $T/stderr and stdout in $T/stdout.
run_spotd() {
    timeout -k 2 120 "$SPOTD" "$@" >"$T/stdout" 2>"$T/stderr"
    RC=$?
}

# start_spotd ARGS...: run spotd in the background; sets SPOTD_PID.  The
# files are emptied here, not by the child's redirection: that one runs
# whenever the child is scheduled, and until then a check reads the last
# run's output (a t-pytorch flake: "training from step 0" found at once,
# from the run before).
start_spotd() {
    : >"$T/stdout"
    : >"$T/stderr"
    "$SPOTD" "$@" >>"$T/stdout" 2>>"$T/stderr" &
    SPOTD_PID=$!
    _bg_pids+=("$SPOTD_PID")
}

# nap [SECONDS]: sleep (a tenth of a second unless told) without a
# process: a read that times out on a pipe nobody writes.  The polling
# loops below use it and builtins only, since on a virtual machine every
# fork costs milliseconds of CPU, and ten tests polling at 10 Hz with a
# few forks each took a core from the suite.  (The pipe is inherited by
# what the test starts, like any descriptor of the shell's.)
exec {_nap_fd}<> <(:)
nap() {
    local _
    read -r -t "${1:-0.1}" -u "$_nap_fd" _ 2>/dev/null || :
}

# nap_until MS: nap until the wall clock (now_ms) reaches MS; at once
# when it has.
nap_until() {
    local left=$(( $1 - $(now_ms) ))
    [ "$left" -le 0 ] || nap "$((left / 1000)).$(printf %03d $((left % 1000)))"
}

# wait_exit PID [SECONDS]: wait for a background spotd; sets RC (124 on
# time-out, after which it and everything below it are killed).
wait_exit() {
    local pid=$1 limit=$(( ${2:-20} * 10 )) i=0
    while kill -0 "$pid" 2>/dev/null && read_stat "$pid" && [ "${STAT[0]:-}" != Z ]; do
        i=$((i + 1))
        if [ $i -gt $limit ]; then
            kill_tree "$pid"
            wait "$pid" 2>/dev/null
            RC=124
            return
        fi
        nap
    done
    wait "$pid"
    RC=$?
}

# wait_for SECONDS COMMAND...: poll until the command succeeds; false once
# it has been tried SECONDS x 10 times and SECONDS have passed, whichever
# is later (on a loaded machine each try costs time of its own).
wait_for() {
    local limit=$(( $1 * 10 )) i=0 end=$(( ${EPOCHREALTIME/./} + $1 * 1000000 ))
    shift
    until "$@"; do
        i=$((i + 1))
        [ $i -gt $limit ] && [ "${EPOCHREALTIME/./}" -ge $end ] && return 1
        nap
    done
}

# read_stat PID: STAT holds the fields of /proc/PID/stat from the third on
# (STAT[0] the one-letter state, STAT[1] the ppid, STAT[2] the process
# group...), none when the process is gone; builtins only, for the polling
# loops.  Always true.
read_stat() {
    local s= try
    STAT=()
    # A read can fail (a signal to the shell) or see a line torn by an exec
    # that renames the process; only a pid that is gone has no line.
    for try in 1 2 3; do
        { read -r s <"/proc/$1/stat"; } 2>/dev/null && [[ $s == *") "* ]] && break
        s=
        kill -0 "$1" 2>/dev/null || return 0
    done
    [ -n "$s" ] || return 0
    s=${s##*) }
    read -r -a STAT <<<"$s"
}

# proc_state PID: the one-letter state of a process ("" when gone).
proc_state() {
    read_stat "$1"
    echo "${STAT[0]:-}"
}

# children PID: pids whose parent is PID, one a line.
children() {
    local f c
    for f in /proc/"$1"/task/*/children; do
        c=()
        { read -r -a c <"$f"; } 2>/dev/null
        [ ${#c[@]} -eq 0 ] || printf '%s\n' "${c[@]}"
    done
}

# zombies_of PID: count of zombie children of PID.
zombies_of() {
    local n=0 c
    for c in $(children "$1"); do
        read_stat "$c"
        [ "${STAT[0]:-}" = Z ] && n=$((n + 1))
    done
    echo $n
}

# alive PID...: true when every pid exists and is not a zombie.  Whether
# it exists is kill's word (a t-pytorch flake: a failed read of its stat
# took a starting spotd for gone); the stat says only whether it is a zombie.
alive() {
    local p
    for p in "$@"; do
        kill -0 "$p" 2>/dev/null || return 1
        read_stat "$p"
        [ "${STAT[0]:-}" != Z ] || return 1
    done
}

# gone PID...: true when no pid exists (or only as a zombie).
gone() {
    local p
    for p in "$@"; do
        kill -0 "$p" 2>/dev/null || continue
        read_stat "$p"
        [ "${STAT[0]:-}" = Z ] || return 1
    done
}

# event_count FILE EVENT: how many records of that event the event log holds.
event_count() {
    grep -c "\"event\":\"$2\"" "$1" 2>/dev/null || true
}

# ---- additions: process inspection, event-log parsing, timing ----

# No core files from the commands tests kill with SIGSEGV/SIGABRT/SIGQUIT.
ulimit -c 0 2>/dev/null || true

# proc_field PID N: field N of /proc/PID/stat (3 state, 4 ppid, 5 pgrp,
# 6 session); "" when the process is gone.
proc_field() {
    read_stat "$1"
    echo "${STAT[$(($2 - 3))]:-}"
}

# proc_status PID FIELD: a field of /proc/PID/status (SigIgn, SigBlk...).
proc_status() {
    sed -n "s/^$2:[[:space:]]*//p" "/proc/$1/status" 2>/dev/null
}

# descendants PID: every pid below PID, depth first.
descendants() {
    local c
    for c in $(children "$1"); do
        echo "$c"
        descendants "$c"
    done
}

# group_members PGID: live (non-zombie) pids whose process group is PGID.
group_members() {
    local f s a
    for f in /proc/[0-9]*/stat; do
        { read -r s <"$f"; } 2>/dev/null || continue
        s=${s##*) }
        read -r -a a <<<"$s"
        [ "${a[2]}" = "$1" ] && [ "${a[0]}" != Z ] && echo "${f//[!0-9]/}"
    done
    return 0
}

# group_gone PGID: true when no live process is left in the group.
group_gone() {
    [ -z "$(group_members "$1")" ]
}

# reaped PID...: true when no pid exists at all, not even as a zombie.
reaped() {
    local p
    for p in "$@"; do
        [ -e "/proc/$p" ] && return 1
    done
    return 0
}

# kill_tree PID: SIGKILL every descendant of PID, then PID; a PID that is no
# longer this shell's child is left alone.
kill_tree() {
    local d
    read_stat "$1"
    [ "${STAT[1]:-}" = "$$" ] || return 0
    for d in $(descendants "$1"); do kill -KILL "$d" 2>/dev/null; done
    kill -KILL "$1" 2>/dev/null
}

# tagged: pids of live processes (zombies aside) that carry this test's tag.
# Builtins only: an exec'd helper would carry the tag itself (so never pipe
# its output into a command while it runs).
tagged() {
    local f p x e
    for f in /proc/[0-9]*; do
        p=${f#/proc/}
        [ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] && continue
        e=()
        { mapfile -d '' -t e <"$f/environ"; } 2>/dev/null || continue
        for x in "${e[@]}"; do
            if [ "$x" = "SPOT_IT_TAG=$T" ]; then
                read_stat "$p"
                [ "${STAT[0]:-}" = Z ] || echo "$p"
                break
            fi
        done
    done
    return 0
}

# none_left: true when no process of this test is left running.
none_left() {
    [ -z "$(tagged)" ]
}

# count_files GLOB: how many files match (0 when none).
count_files() {
    local f n=0
    for f in $1; do [ -e "$f" ] && n=$((n + 1)); done
    echo $n
}

# now_ms: wall-clock milliseconds, for generous elapsed-time bounds.
now_ms() {
    local t=${EPOCHREALTIME:-}
    if [ -n "$t" ]; then
        t=${t//[.,]/}
        echo $(( ${t:0:${#t}-3} ))
    else
        date +%s%3N
    fi
}

# ts_ms TS: an event timestamp (2026-11-30T10:42:01.106Z) as milliseconds
# since the epoch; "" when TS does not have that form.
ts_ms() {
    local p y m d era yoe mp doy doe days
    p=$(printf '%s\n' "$1" | sed -n 's/^\([0-9]\{4\}\)-\([0-9][0-9]\)-\([0-9][0-9]\)T\([0-9][0-9]\):\([0-9][0-9]\):\([0-9][0-9]\)\.\([0-9]\{3\}\)Z$/\1 \2 \3 \4 \5 \6 \7/p')
    [ -n "$p" ] || return 0
    set -- $p
    y=$((10#$1)) m=$((10#$2)) d=$((10#$3))
    [ $m -le 2 ] && y=$((y - 1))
    era=$((y / 400)) yoe=$((y % 400)) mp=$(((m + 9) % 12))
    doy=$(((153 * mp + 2) / 5 + d - 1))
    doe=$((yoe * 365 + yoe / 4 - yoe / 100 + doy))
    days=$((era * 146097 + doe - 719468))
    echo $(( (((days * 24 + 10#$4) * 60 + 10#$5) * 60 + 10#$6) * 1000 + 10#$7 ))
}

# ev FILE EVENT: the event log's records of that event, one a line.
ev() {
    grep "\"event\":\"$2\"" "$1" 2>/dev/null
    return 0
}

# Every JSON document a test reads (--json outputs, event log lines,
# control answers) goes through strictjson.py: a key twice in one object,
# NaN, Infinity or anything that is not JSON prints "FAIL: strict JSON: ..."
# (a failed check).  Python snippets import it (PYTHONPATH).
STRICTJSON=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/strictjson.py
export PYTHONPATH="${STRICTJSON%/*}${PYTHONPATH:+:$PYTHONPATH}"

# jget TEXT KEY: the value of KEY's first occurrence (depth first, in
# document order) in TEXT, one JSON document or JSON Lines; strings come
# unquoted, numbers as written; nothing when there is none.
jget() {
    printf '%s\n' "$1" | python3 "$STRICTJSON" get "$2"
    return 0
}

# jcheck FILE: FILE is one strict JSON document (or JSON Lines of them).
jcheck() {
    python3 "$STRICTJSON" check "$1"
}

# jq_ EXPR FILE: Python EXPR over FILE's document d, strictly parsed; a list
# prints one item a line.  jq_ '[g["gen"] for g in d if g["state"] ==
# "committed"]' "$T/out": the committed generations of spotctl ls --json.
jq_() {
    python3 "$STRICTJSON" eval "$1" "${2:-/dev/stdin}"
}

# status_get STATE_DIR KEY: KEY of spotctl status --json, strictly parsed;
# nothing while spotd does not answer.
status_get() {
    jget "$("$SPOTCTL" status --state-dir "$1" --json 2>/dev/null)" "$2"
}

# ls_gens FILE [STATE]: the generations of a spotctl ls --json in FILE in
# that state (committed by default), oldest first, one a line.
ls_gens() {
    jq_ "[g['gen'] for g in d if g['state'] == '${2:-committed}']" "$1"
}

# events_of FILE: the sequence of event names, space separated.
events_of() {
    sed -n 's/^{"ts":"[^"]*","event":"\([a-z_]*\)".*/\1/p' "$1" 2>/dev/null | tr '\n' ' ' |
        sed 's/ $//'
}

# has TEXT FILE: true when FILE contains TEXT (fixed string, one line's);
# builtins only, for the polling loops.  NUL bytes count as line ends: a
# file truncated under a writer that still holds an older offset starts
# with a hole of them.
has() {
    local _s= _p=
    { while IFS= read -r -d '' _p; do _s+=$_p$'\n'; done; _s+=$_p; } 2>/dev/null <"$2"
    [[ $_s == *"$1"* ]]
}

# command_pid SPOTD_PID: wait (10 s at most) until SPOTD_PID runs spotd and
# its command has left spotd's image for its own; print the command's pid
# ("" on time-out).
command_pid() {
    local sp=$1 me c=
    me=$(readlink -f "$SPOTD")
    _cmd_ready() {
        [ "$(readlink "/proc/$sp/exe" 2>/dev/null)" = "$me" ] || return 1
        c=$(children "$sp" | head -n 1)
        [ -n "$c" ] && [ -e "/proc/$c/exe" ] &&
            [ "$(readlink "/proc/$c/exe" 2>/dev/null)" != "$me" ]
    }
    wait_for 10 _cmd_ready && echo "$c"
}

# reference PROGRAM ARGS...: the last line PROGRAM ARGS prints, as the hash of
# an uninterrupted run, computed once per build and kept in $O/tests/refs:
# the key covers the arguments, the TRAINER_* and ZDTM_* environment, and
# the contents of every argument that is a file (the program itself).  A run
# that fails is not kept.
reference() {
    local dir=$TOP/$O/tests/refs key a out
    key=$({ printf '%s\n' "$@"; env | grep -E '^(TRAINER|ZDTM)_' | sort
            for a in "$@"; do [ -f "$a" ] && sha256sum <"$a"; done; } | sha256sum | cut -c1-32)
    if [ -s "$dir/$key" ]; then
        cat "$dir/$key"
        return
    fi
    # Unpaced (the C trainer's steps sleep otherwise): the result is the same.
    out=$(TRAINER_PACE=0 "$@" | tail -n 1; exit "${PIPESTATUS[0]}") || { echo "$out"; return 1; }
    mkdir -p "$dir" && echo "$out" >"$dir/$key.$$" && mv "$dir/$key.$$" "$dir/$key"
    echo "$out"
}

# late MS: how late MS of ideal-machine lateness may be here.  Suites run
# side by side on a few cores, so a timer, a fork or a poll can be late by
# several times what it is on an idle machine; a bound on how late something
# came is written as "on time + late N", never as N alone.  Bounds on how
# EARLY something came (correctness: a stop never before its time) take no
# slack.  SPOTD_TEST_SLACK sets the factor (default 5).
late() { echo $(( $1 * ${SPOTD_TEST_SLACK:-5} )); }

# expect_ge NAME MIN ACTUAL / expect_lt NAME LIMIT ACTUAL: integer bounds.
expect_ge() {
    if [ -n "$3" ] && [ "$3" -ge "$2" ] 2>/dev/null; then pass "$1"
    else fail "$1" "expected at least $2, got '$3'"; fi
}
expect_lt() {
    if [ -n "$3" ] && [ "$3" -lt "$2" ] 2>/dev/null; then pass "$1"
    else fail "$1" "expected less than $2, got '$3'"; fi
}

# free_ports N: N ports nobody listens on now, as 127.0.0.1:PORT,...  They
# are drawn below the kernel's ephemeral range (ip_local_port_range), which
# every connect() and bind(0) of the suites running beside draws from: a
# port picked there was taken again by someone's outgoing connection before
# torchrun could bind it.  Each is checked free on 0.0.0.0 and [::] too.
free_ports() {
    python3 -c 'import random, socket, sys
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
top, held, out = lo - 1, [], []
bottom = max(1024, top - 12000)
def grab(port):
    ss = []
    for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(fam)
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
            ss.append(s)
        except OSError:
            if fam == socket.AF_INET6 and ss:
                continue
            for x in ss: x.close()
            return None
    return ss
while len(out) < int(sys.argv[1]):
    if top - bottom > 100:
        port = random.randint(bottom, top)
        ss = grab(port)
    else:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; ss = [s]
    if ss and port not in out:
        held += ss
        out.append(port)
print(",".join("127.0.0.1:%d" % p for p in out))' "$1"
}

# need_torch NAME: /usr/bin/python3 imports torch, or the script ends: as
# root it installs Debian's python3-torch first (waiting for the dpkg lock
# of an install under way, as .ci/run starts one); without torch it fails
# in CI and is skipped elsewhere.
need_torch() {
    local apt why
    have_torch() { /usr/bin/python3 -c 'import torch' 2>/dev/null; }
    if ! have_torch && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing python3-torch with apt-get (about 90 s)"
        apt=(apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends python3-torch)
        { DEBIAN_FRONTEND=noninteractive "${apt[@]}" ||
          { apt-get -o DPkg::Lock::Timeout=600 update -q &&
            DEBIAN_FRONTEND=noninteractive "${apt[@]}"; }
        } >"$T/apt.log" 2>&1 || tail -n 5 "$T/apt.log"
    fi
    have_torch && return 0
    why="/usr/bin/python3 cannot import torch; install Debian's python3-torch: apt-get install --no-install-recommends python3-torch"
    if [ "$(id -u)" != 0 ] && [ "${CI:-}" != true ]; then
        echo "SKIP: $1 ($why)"
        exit 0
    fi
    fail "$1: torch is importable" "$why"
    exit 1
}

# readme_tour N FILE: the README's five-minute tour's Nth code block, as a
# user runs it from the repository, into FILE, with /tmp/tour moved into
# this test's directory and build/ into $O.
readme_tour() {
    awk -v want="$1" '/^## A five-minute tour/ { intour = 1 } /^## / && !/five-minute/ { intour = 0 }
        intour && /^```sh$/ { n++; inblock = (n == want); next }
        inblock && /^```$/ { inblock = 0 } inblock' "$TOP/README.md" >"$2"
    sed -i -e "s|/tmp/tour|$T/tour|g" -e "s|\\\$PWD/build|$TOP/$O|g" \
        -e "s|build/examples|$O/examples|g" "$2"
}

# raw_file get|put|del KEY [FILE]: an object of the file store $T/store
# behind the store's back (put is atomic), as raw_s3 (s3.sh) does in S3.
raw_file() {
    case $1 in
    get) cp "$T/store/$2" "$3" ;;
    put) mkdir -p "$(dirname "$T/store/$2")" && cp "$3" "$T/store/$2.new" &&
        mv "$T/store/$2.new" "$T/store/$2" ;;
    del) rm -f "$T/store/$2" ;;
    esac
}

# damage_chunk JOB GEN: flip a byte in the middle of the chunk of
# w0/state.bin that generation GEN of JOB holds in the file store $T/store
# (the state differs every step: no other generation holds that chunk).
damage_chunk() {
    python3 - "$T/store/$1" "$2" <<'EOF'
import strictjson, sys
root, gen = sys.argv[1], int(sys.argv[2])
m = strictjson.load("%s/gens/%08d/rank-0.json" % (root, gen))
h = [f for f in m["files"] if f["path"].endswith("state.bin")][0]["chunks"][0][1]
p = "%s/chunks/%s/%s" % (root, h[:2], h)
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0xff
open(p, "wb").write(b)
EOF
}
