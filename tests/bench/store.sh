#!/usr/bin/env bash
# Checkpoint upload and restore: spotd's engine (through spotctl) against
# `aws s3 cp`, rclone, restic and a raw parallel curl PUT, all against one
# local OpenStack Swift + s3api (tests/servers/swift.sh).  See README.md.
#
#   tests/bench/store.sh                        # 2 GiB file, about 10 minutes
#   BENCH_SIZE_MIB=256 tests/bench/store.sh     # about 2 minutes
#
# Phases, each tool in turn (phase after phase, so that the file is in the
# same state for everyone):
#   upload       the file into an empty bucket (restic: a fresh repository)
#   restore      it back into the scratch folder, then cmp against the source
#   incremental  after 10 % of the file (one contiguous region) is rewritten
#                in place: aws s3 sync, rclone sync, restic backup, spotctl
#                push again, to the same place
#   4 ranks      4 folders holding the same file (hard links), into a fresh
#                place: one spotctl push with 4 DIRs, one restic backup into
#                a new repository; aws and rclone (one recursive cp / copy)
#                only with BENCH_RANKS_ALL=1: 4 full uploads, ~5 more minutes
#   file upload, file restore
#                spotd only: the same file pushed into a file store (a
#                local folder, as a shared file system is), then fetched
#                back, beside curl (file:// URLs) and cp reading the same
#                chunk files, 16 at a time; BENCH_FILE_ROUNDS (3) rounds,
#                the three tools in turn, each tool's median reported
# curl has upload and restore only: 8 MiB parts, 16 at a time, UNSIGNED-PAYLOAD.
# restic goes through a second, TLS, Swift proxy (see start_tls_proxy).
#
# Columns: seconds (wall), MB/s (the file's bytes, times 4 for 4 ranks,
# 10^6 bytes a MB, divided by the wall time), sent_MB and recv_MB (bytes
# on the loopback between the tool and the Swift proxy, see below),
# cpu_s (user + sys of the tool and every child it waited for, from
# /usr/bin/time), srv_cpu_s (user + sys of the four Swift servers over the
# phase), peak_MiB (/usr/bin/time %M: the largest RSS of any one process
# of the tool; the largest of a phase's rounds), own_MB (spotctl's own
# bytes_sent, spotd rows only).
#
# Bytes: with nftables (root), two counters on the output hook of lo, TCP
# to and from the proxy's port: every IP packet the tool sent to Swift and
# Swift sent back, headers included (BENCH_NET=nft).  Without it, the
# proxy's access log: request and response body bytes of client requests
# (BENCH_NET=log, headers not counted).
#
# Environment: BENCH_SIZE_MIB (2048), BENCH_KEEP (0; 1 keeps the scratch
# folder under ${TMPDIR:-/tmp}), BENCH_INSTALL (1: as root, apt-get install
# what is missing), BENCH_NET (auto|nft|log), BENCH_TOOLS (curl spotd aws
# rclone restic), BENCH_RANKS_ALL (0), BENCH_FILE_ROUNDS (3), O (build:
# spotctl is built with make and copied aside), BENCH_SPOTCTL (a spotctl
# to use instead, no make).
#
# It is a report: it exits 0 whatever the numbers.  It exits 1 when the
# bench itself could not run (Swift, the data, /usr/bin/time), or when
# spotctl could not be built or failed a phase; the other tools failing
# only gives notes.
set -u

size_mib=${BENCH_SIZE_MIB:-2048}
case $size_mib in '' | *[!0-9]* | 0)
    echo "store.sh: BENCH_SIZE_MIB must be a positive whole number, not '$size_mib'" >&2
    exit 2 ;;
esac
size=$((size_mib * 1048576))
file_rounds=${BENCH_FILE_ROUNDS:-3}
case $file_rounds in '' | *[!0-9]* | 0)
    echo "store.sh: BENCH_FILE_ROUNDS must be a positive whole number, not '$file_rounds'" >&2
    exit 2 ;;
esac
tools=${BENCH_TOOLS:-curl spotd aws rclone restic}

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"
O=${O:-build}
case $O in /*) obuild=$O ;; *) obuild=$root/$O ;; esac

say() { echo "store.sh: $*" >&2; }
die() { say "$*"; exit 1; }

AWS=/usr/bin/aws
RCLONE=$(command -v rclone || echo /usr/bin/rclone)
RESTIC=$(command -v restic || echo /usr/bin/restic)
TIME=/usr/bin/time

# ---- packages ---------------------------------------------------------------

want=()
[ -x "$TIME" ] || want+=(time)
case " $tools " in *" aws "*) [ -x "$AWS" ] || want+=(awscli) ;; esac
case " $tools " in *" rclone "*) [ -x "$RCLONE" ] || want+=(rclone) ;; esac
case " $tools " in *" restic "*) [ -x "$RESTIC" ] || want+=(restic) ;; esac
command -v cc >/dev/null || want+=(gcc)
if [ "${BENCH_NET:-auto}" != log ] && [ "$(id -u)" = 0 ] && ! command -v nft >/dev/null; then
    want+=(nftables)
fi
if [ ${#want[@]} -gt 0 ]; then
    if [ "${BENCH_INSTALL:-1}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing ${want[*]} with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt=(apt-get -o DPkg::Lock::Timeout=300 install -y -q)
        if ! "${apt[@]}" "${want[@]}" >/dev/null 2>&1; then
            apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1
            "${apt[@]}" "${want[@]}" >/dev/null 2>&1 || say "apt-get install ${want[*]} failed"
        fi
        RCLONE=$(command -v rclone || echo /usr/bin/rclone)
        RESTIC=$(command -v restic || echo /usr/bin/restic)
    else
        say "missing: ${want[*]} (as root: apt-get install ${want[*]})"
    fi
fi
[ -x "$TIME" ] || die "/usr/bin/time is needed (apt-get install time)"
command -v cc >/dev/null || die "a C compiler is needed for the data generator"

# ---- scratch, Swift, cleanup ------------------------------------------------

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spotd-store-bench.XXXXXX") || exit 1
sw=$tmp/swift
nft_table=''
cleaned=0
# shellcheck disable=SC2317  # invoked from traps
cleanup() {
    [ "$cleaned" = 1 ] && return
    cleaned=1
    [ -n "$nft_table" ] && nft delete table inet "$nft_table" 2>/dev/null
    [ -d "$sw" ] && "$root/tests/servers/swift.sh" stop "$sw" >/dev/null 2>&1
    scratch_end
}
cleanup_traps

# Swift keeps what each tool uploads (about 2 copies of the file each, 5
# more for aws and rclone with BENCH_RANKS_ALL=1) until the tool's last
# phase; the source, curl's parts and one restored copy come on top.
need_kib=$((size * 12 / 1024))
free_kib=$(df -Pk "$tmp" | awk 'NR == 2 { print $4 }')
if [ -n "$free_kib" ] && [ "$free_kib" -lt "$need_kib" ]; then
    die "$((free_kib / 1024)) MiB free under $tmp, $((need_kib / 1024)) MiB needed at BENCH_SIZE_MIB=$size_mib"
fi

mkdir -p "$tmp/log" "$tmp/src" "$tmp/restore" "$sw"
# shellcheck disable=SC2034
for i in 0 1 2 3; do mkdir -p "$tmp/ranks/r$i"; done
"$root/tests/servers/swift.sh" start "$sw" >"$tmp/log/swift-start.log" 2>&1 ||
    { tail -n 20 "$tmp/log/swift-start.log" >&2; die "Swift did not start"; }
S3_ENDPOINT=$(sed -n 's/^S3_ENDPOINT=//p' "$sw/env")
AK=$(sed -n 's/^AWS_ACCESS_KEY_ID=//p' "$sw/env")
SK=$(sed -n 's/^AWS_SECRET_ACCESS_KEY=//p' "$sw/env")
REGION=$(sed -n 's/^AWS_REGION=//p' "$sw/env")
port=${S3_ENDPOINT##*:}
sigv4=(--netrc-file "$sw/netrc" --aws-sigv4 "aws:amz:$REGION:s3")

# restic talks S3 through minio-go, which signs plain-http uploads as
# aws-chunked streams; Swift 2.30's s3api refuses those ("Transfering
# payloads in multiple chunks using aws-chunked is not supported"), and
# over https minio-go sends UNSIGNED-PAYLOAD instead.  So restic gets a
# second proxy-server, same rings and backends, serving TLS with a
# throw-away certificate (Swift's own cert_file/key_file).  swift.sh stop
# ends it with the others (it runs DIR/swiftd.py too).
tls_port=''
start_tls_proxy() {
    local i
    tls_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
        return 1
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 -keyout "$sw/tls.key" -out "$sw/tls.crt" \
        >"$tmp/log/openssl.log" 2>&1 || return 1
    sed -e "s/^bind_port = .*/bind_port = $tls_port/" \
        -e "s|^\[DEFAULT\]\$|[DEFAULT]\ncert_file = $sw/tls.crt\nkey_file = $sw/tls.key|" \
        "$sw/proxy-server.conf" >"$sw/proxy-tls.conf" || return 1
    EVENTLET_NO_GREENDNS=yes /usr/bin/python3 "$sw/swiftd.py" proxy-server "$sw/proxy-tls.conf" \
        "$sw/log/proxy-tls.log" </dev/null >"$sw/log/proxy-tls.out" 2>&1 &
    echo $! >"$sw/run/proxy-tls.pid"
    for i in $(seq 100); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$sw/tls.crt" \
            "https://127.0.0.1:$tls_port/healthcheck")" = 200 ] && return 0
        sleep 0.1
    done
    return 1
}
case " $tools " in *" restic "*)
    if [ -x "$RESTIC" ] && ! start_tls_proxy; then
        say "the TLS proxy for restic did not start (log: $sw/log/proxy-tls.out)"
        RESTIC=/nonexistent/restic
        restic_why="no TLS proxy for restic"
    fi
esac

# bucket NAME: a signed PUT /NAME.
bucket() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "${sigv4[@]}" \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$S3_ENDPOINT/$1")
    [ "$code" = 200 ] || die "PUT /$1 answered $code"
}

# ---- bytes on the wire --------------------------------------------------------

# net_read: NET_S (bytes the tool sent to the proxy), NET_R (received).
net=${BENCH_NET:-auto}
if [ "$net" != log ]; then
    nft_table=spotd_store_bench_$$
    if nft add table inet "$nft_table" 2>/dev/null &&
        nft add chain inet "$nft_table" out '{ type filter hook output priority 0; policy accept; }' &&
        nft add rule inet "$nft_table" out oif lo tcp dport "{ $port${tls_port:+, $tls_port} }" counter &&
        nft add rule inet "$nft_table" out oif lo tcp sport "{ $port${tls_port:+, $tls_port} }" counter; then
        net=nft
    else
        nft delete table inet "$nft_table" 2>/dev/null
        nft_table=''
        [ "$net" = nft ] && die "BENCH_NET=nft: nftables counters could not be set up"
        net=log
    fi
fi
if [ "$net" = nft ]; then
    net_read() {
        local out
        out=$(nft list chain inet "$nft_table" out)
        NET_S=$(awk '/dport/ { for (i = 1; i < NF; i++) if ($i == "bytes") print $(i + 1) }' <<<"$out")
        NET_R=$(awk '/sport/ { for (i = 1; i < NF; i++) if ($i == "bytes") print $(i + 1) }' <<<"$out")
    }
else
    # Access log lines of client requests (subrequests have "-" as client):
    # "HH:MM:SSZ proxy-server: CLIENT REMOTE DATE METHOD PATH PROTO STATUS
    # REFERER AGENT TOKEN BYTES_RECVD BYTES_SENT ...".  Summed over the
    # whole log; a phase is the difference.  A line is written when its
    # request ends, and every tool has ended when the log is read.
    net_read() {
        read -r NET_S NET_R < <(awk '$2 == "proxy-server:" && $3 ~ /^[0-9.:]+$/ && NF > 14 {
                s += ($13 == "-" ? 0 : $13); r += ($14 == "-" ? 0 : $14) }
            END { printf "%.0f %.0f\n", s, r }' "$sw/log/proxy-server.log" "$sw"/log/proxy-tls.log 2>/dev/null)
    }
fi

# srv_cpu: user + sys clock ticks of the Swift servers (one process each).
srv_cpu() {
    local f p line a t=0
    for f in "$sw"/run/*.pid; do
        read -r p <"$f" 2>/dev/null || continue
        read -r line <"/proc/$p/stat" 2>/dev/null || continue
        # shellcheck disable=SC2206
        a=(${line##*) })
        t=$((t + a[11] + a[12]))
    done
    echo $t
}
tick=$(getconf CLK_TCK 2>/dev/null) || tick=100

# ---- the data -------------------------------------------------------------------

# float32 "checkpoint": thirds of weights (normal, a standard deviation
# per 16 MiB "tensor" between 0.01 and 0.03), Adam first moments (normal,
# 1e-3) and second moments (1e-6 * (z^2 + 0.01), positive); Box-Muller on
# splitmix64, seeded.  "mod FILE OFF LEN SEED" rewrites one region with
# new weights.
cat >"$tmp/gen.c" <<'C'
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static uint64_t st;
static uint64_t next(void) {
    uint64_t z = (st += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* kind 0 weights, 1 first moment, 2 second moment; scale per tensor. */
static void fill(float *o, size_t n, int kind, float scale) {
    for (size_t i = 0; i < n; i += 2) {
        uint64_t r = next();
        float u1 = ((float)(r >> 40) + 0.5f) * (1.0f / 16777216.0f);
        float u2 = (float)(r & 0xffffff) * (1.0f / 16777216.0f);
        float m = sqrtf(-2.0f * logf(u1)), s, c;
        sincosf(6.2831853f * u2, &s, &c);
        float z[2] = { m * c, m * s };
        for (int k = 0; k < 2 && i + k < n; k++)
            o[i + k] = kind == 0 ? scale * z[k] : kind == 1 ? 1e-3f * z[k]
                                                           : 1e-6f * (z[k] * z[k] + 0.01f);
    }
}
int main(int argc, char **argv) {
    enum { BUF = 4 << 20, TENSOR = 16 << 20 };
    static float b[BUF / 4];
    if (argc != 5 && argc != 6) return 2;
    int mod = strcmp(argv[1], "mod") == 0;
    long long off = mod ? atoll(argv[3]) : 0, len = atoll(argv[mod ? 4 : 3]);
    st = strtoull(argv[mod ? 5 : 4], NULL, 10);
    int fd = open(argv[2], mod ? O_WRONLY : O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(argv[2]); return 1; }
    long long third = len / 12 * 4;
    float scale = 0.02f;
    for (long long p = 0; p < len;) {
        long long n = len - p < BUF ? len - p : BUF;
        if (mod) {
            fill(b, n / 4, 0, 0.02f);
        } else {
            if (p % TENSOR == 0) scale = 0.01f + 0.02f * (float)(next() >> 40) / 16777216.0f;
            int kind = p < third ? 0 : p < 2 * third ? 1 : 2;
            long long end = kind == 0 ? third : kind == 1 ? 2 * third : len;
            if (n > end - p) n = end - p;
            if (n > TENSOR - p % TENSOR) n = TENSOR - p % TENSOR;
            fill(b, n / 4, kind, scale);
        }
        if (pwrite(fd, b, n, off + p) != n) { perror("write"); return 1; }
        p += n;
    }
    return close(fd) != 0;
}
C
cc -O2 -o "$tmp/gen" "$tmp/gen.c" -lm 2>"$tmp/log/gen-cc.log" ||
    { cat "$tmp/log/gen-cc.log" >&2; die "the data generator did not compile"; }
file=$tmp/src/ckpt.bin
t=$EPOCHREALTIME
"$tmp/gen" gen "$file" "$size" 1 || die "the data generator failed"
say "$size_mib MiB of float32 written in $(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
for i in 0 1 2 3; do ln "$file" "$tmp/ranks/r$i/ckpt.bin" || die "ln failed"; done
# The region rewritten before the incremental phase: 10 % of the file, at
# 37 % plus an odd number of floats, so that it is aligned to nothing.
mod_len=$((size / 10 & ~3))
mod_off=$(((size * 37 / 100 & ~3) + 4 * 12345))

# ---- spotctl --------------------------------------------------------------------

spot_na=''
SPOTCTL=$tmp/spotctl
case " $tools " in *" spotd "*)
    if [ -n "${BENCH_SPOTCTL:-}" ]; then
        cp "$BENCH_SPOTCTL" "$SPOTCTL" 2>/dev/null || spot_na="cannot copy $BENCH_SPOTCTL"
    elif ! make -C "$root" O="$O" >"$tmp/log/make.log" 2>&1; then
        spot_na="make failed"
        tail -n 5 "$tmp/log/make.log" | sed 's/^/    make: /' >&2
    elif ! cp "$obuild/spotctl" "$SPOTCTL" 2>/dev/null; then
        spot_na="make made no $O/spotctl"
    fi
esac

# ---- the phases -----------------------------------------------------------------

results=$tmp/results.tsv
: >"$results"
notes=()

# record TOOL PHASE STATUS [FIELDS...]: one line of results.tsv.
record() { local IFS=$'\t'; echo "$*" >>"$results"; }

# na TOOL PHASE REASON
na() { record "$1" "$2" "n/a ($3)"; }

# run_phase TOOL PHASE LOGICAL_BYTES CMD...: run CMD under /usr/bin/time,
# stdout in log/TOOL.PHASE.out, stderr in .err; sets RC.
run_phase() {
    local tool=$1 phase=$2 logical=$3 base ta tb s0 r0 c0 c1 line u s m
    shift 3
    base=$tmp/log/$tool.$phase
    sync
    cat "$file" >/dev/null
    net_read
    s0=$NET_S r0=$NET_R
    c0=$(srv_cpu)
    ta=$EPOCHREALTIME
    "$TIME" -f '%U %S %M' -o "$base.time" "$@" >"$base.out" 2>"$base.err" </dev/null
    RC=$?
    tb=$EPOCHREALTIME
    c1=$(srv_cpu)
    net_read
    OWN=''
    [ "$tool" = spotd ] && OWN=$(spot_own "$base.out")
    line=$(tail -n 1 "$base.time")
    read -r u s m <<<"$line"
    if [ $RC != 0 ]; then
        record "$tool" "$phase" "failed (exit $RC: $(grep -v '^\s*$' "$base.err" | tail -n 1 | cut -c1-80))"
        return
    fi
    record "$tool" "$phase" ok "$(awk -v a="$ta" -v b="$tb" 'BEGIN { printf "%.3f", b - a }')" \
        "$logical" "$((NET_S - s0))" "$((NET_R - r0))" "$u" "$s" "$m" \
        "$(awk -v t=$((c1 - c0)) -v k="$tick" 'BEGIN { printf "%.2f", t / k }')" "$OWN"
}

# verify TOOL PATH: cmp the restored file (or the parts, in order) with the
# source; a mismatch turns the restore row (VERIFY_PHASE's: restore unless
# told) into a failure.
verify() {
    local tool=$1 ok=1 phase=${VERIFY_PHASE:-restore}
    shift
    if [ $# = 1 ] && [ ! -f "$1" ]; then
        ok=0
    elif ! cat "$@" | cmp -s - "$file"; then
        ok=0
    fi
    if [ $ok = 0 ]; then
        sed -i "s|^$tool\t$phase\tok\t|$tool\t$phase\tfailed (restored file differs)\t|" "$results"
    fi
    rm -rf "$tmp/restore/$tool"
    sync
}

has() { case " $tools " in *" $1 "*) return 0 ;; esac; return 1; }
avail() {   # avail TOOL: 0 when it can run, else records n/a for PHASES
    local tool=$1 why='' p
    shift
    case $tool in
    spotd) why=$spot_na ;;
    aws) [ -x "$AWS" ] || why="no $AWS" ;;
    rclone) [ -x "$RCLONE" ] || why="rclone not installed" ;;
    restic) [ -x "$RESTIC" ] || why=${restic_why:-restic not installed} ;;
    esac
    [ -z "$why" ] && return 0
    for p in "$@"; do na "$tool" "$p" "$why"; done
    return 1
}

# Per-tool settings: nothing from the user's own configuration.
export AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK AWS_REGION=$REGION AWS_DEFAULT_REGION=$REGION
export AWS_CONFIG_FILE=$tmp/none/aws-config AWS_SHARED_CREDENTIALS_FILE=$tmp/none/aws-credentials
export AWS_EC2_METADATA_DISABLED=true
unset AWS_PROFILE AWS_SESSION_TOKEN
aws() { "$AWS" --endpoint-url "$S3_ENDPOINT" "$@"; }
rclone_env=(env -u AWS_CA_BUNDLE RCLONE_CONFIG="$tmp/none/rclone.conf"
    RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Other
    RCLONE_CONFIG_BENCH_ACCESS_KEY_ID="$AK" RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY="$SK"
    RCLONE_CONFIG_BENCH_ENDPOINT="$S3_ENDPOINT" RCLONE_CONFIG_BENCH_REGION="$REGION"
    RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true)
restic_env=(env RESTIC_PASSWORD=spotd-bench RESTIC_CACHE_DIR="$tmp/restic-cache")
restic_cmd=("${restic_env[@]}" "$RESTIC" --cacert "$sw/tls.crt")
restic_repo=s3:https://127.0.0.1:$tls_port
spot_env=(env AWS_ENDPOINT_URL="$S3_ENDPOINT")

for b in bench-curl bench-spotd bench-spotd-ranks bench-aws bench-rclone bench-restic bench-restic-ranks; do
    bucket "$b"
done
if has restic && [ -x "$RESTIC" ]; then
    for r in bench-restic bench-restic-ranks; do
        "${restic_cmd[@]}" -r "$restic_repo/$r" init >"$tmp/log/restic-init-$r.log" 2>&1 ||
            { notes+=("restic init $r failed: $(tail -n 1 "$tmp/log/restic-init-$r.log")"); }
    done
fi

# spot_own: bytes_sent from spotctl's --json line of the last phase.
spot_own() {
    sed -n 's/.*"bytes_sent"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$1" | tail -n 1
}

# spotd after a failed phase: the following phases are n/a.
spot_phase() {   # spot_phase PHASE LOGICAL CMD...
    local phase=$1
    if [ -n "$spot_na" ]; then na spotd "$phase" "$spot_na"; return 1; fi
    shift
    run_phase spotd "$phase" "$@"
    if [ $RC != 0 ]; then
        spot_na="failed in $phase"
        return 1
    fi
}

nparts=$(((size + 8388607) / 8388608))
parts=()
step() { say "$1"; }

# -- upload
step upload
if has curl; then
    mkdir -p "$tmp/parts"
    split -b 8M -a 5 -d "$file" "$tmp/parts/p"
    : >"$tmp/curl-up.cfg"
    : >"$tmp/curl-down.cfg"
    for ((i = 0; i < nparts; i++)); do
        p=$(printf 'p%05d' $i)
        parts+=("$tmp/restore/curl/$p")
        printf 'upload-file = "%s"\nurl = "%s"\n' "$tmp/parts/$p" "$S3_ENDPOINT/bench-curl/$p" >>"$tmp/curl-up.cfg"
        printf 'output = "%s"\nurl = "%s"\n' "$tmp/restore/curl/$p" "$S3_ENDPOINT/bench-curl/$p" >>"$tmp/curl-down.cfg"
    done
    curl_par=(curl -sS --no-progress-meter --fail --parallel --parallel-max 16 "${sigv4[@]}"
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
    run_phase curl upload "$size" "${curl_par[@]}" -K "$tmp/curl-up.cfg"
    rm -rf "$tmp/parts"
fi
if has spotd; then
    spot_phase upload "$size" "${spot_env[@]}" "$SPOTCTL" push --store s3://bench-spotd/ckpt --job bench --json "$tmp/src"
fi
if has aws && avail aws upload restore incremental "4 ranks"; then
    run_phase aws upload "$size" "$AWS" --endpoint-url "$S3_ENDPOINT" s3 cp --no-progress "$file" s3://bench-aws/ckpt/ckpt.bin
fi
if has rclone && avail rclone upload restore incremental "4 ranks"; then
    run_phase rclone upload "$size" "${rclone_env[@]}" "$RCLONE" copyto "$file" bench:bench-rclone/ckpt/ckpt.bin
fi
if has restic && avail restic upload restore incremental "4 ranks"; then
    run_phase restic upload "$size" "${restic_cmd[@]}" -r "$restic_repo/bench-restic" \
        backup -q --host bench "$tmp/src"
fi

# -- restore
step restore
if has curl; then
    mkdir -p "$tmp/restore/curl"
    run_phase curl restore "$size" "${curl_par[@]}" -K "$tmp/curl-down.cfg"
    verify curl "${parts[@]}"
    aws s3 rm --only-show-errors --recursive s3://bench-curl/ >/dev/null 2>&1
fi
if has spotd && spot_phase restore "$size" "${spot_env[@]}" "$SPOTCTL" fetch \
    --store s3://bench-spotd/ckpt --job bench "$tmp/restore/spotd"; then
    f=$tmp/restore/spotd/ckpt.bin
    [ -f "$f" ] || f=$(find "$tmp/restore/spotd" -name ckpt.bin -type f | head -n 1)
    verify spotd "${f:-$tmp/restore/spotd/ckpt.bin}"
    grep -q "^spotd	restore	failed" "$results" && spot_na="restore differs"
fi
if has aws && [ -x "$AWS" ]; then
    run_phase aws restore "$size" "$AWS" --endpoint-url "$S3_ENDPOINT" s3 cp --no-progress \
        s3://bench-aws/ckpt/ckpt.bin "$tmp/restore/aws/ckpt.bin"
    verify aws "$tmp/restore/aws/ckpt.bin"
fi
if has rclone && [ -x "$RCLONE" ]; then
    run_phase rclone restore "$size" "${rclone_env[@]}" "$RCLONE" copyto \
        bench:bench-rclone/ckpt/ckpt.bin "$tmp/restore/rclone/ckpt.bin"
    verify rclone "$tmp/restore/rclone/ckpt.bin"
fi
if has restic && [ -x "$RESTIC" ]; then
    run_phase restic restore "$size" "${restic_cmd[@]}" -r "$restic_repo/bench-restic" \
        restore -q latest --target "$tmp/restore/restic"
    verify restic "$tmp/restore/restic$tmp/src/ckpt.bin"
fi

# -- incremental
"$tmp/gen" mod "$file" "$mod_off" "$mod_len" 2 || die "rewriting the region failed"
step "incremental ($((mod_len / 1048576)) MiB rewritten at offset $mod_off)"
if has spotd; then
    spot_phase incremental "$size" "${spot_env[@]}" "$SPOTCTL" push --store s3://bench-spotd/ckpt --job bench --json "$tmp/src"
fi
if has aws && [ -x "$AWS" ]; then
    run_phase aws incremental "$size" "$AWS" --endpoint-url "$S3_ENDPOINT" s3 sync --no-progress "$tmp/src/" s3://bench-aws/ckpt/
fi
if has rclone && [ -x "$RCLONE" ]; then
    run_phase rclone incremental "$size" "${rclone_env[@]}" "$RCLONE" sync "$tmp/src" bench:bench-rclone/ckpt
fi
if has restic && [ -x "$RESTIC" ]; then
    run_phase restic incremental "$size" "${restic_cmd[@]}" -r "$restic_repo/bench-restic" \
        backup -q --host bench "$tmp/src"
fi

# -- 4 ranks, each tool's objects deleted after it (disk space)
step "4 ranks"
if has spotd; then
    spot_phase "4 ranks" $((4 * size)) "${spot_env[@]}" "$SPOTCTL" push --store s3://bench-spotd-ranks/ckpt \
        --job bench --json "$tmp"/ranks/r0 "$tmp"/ranks/r1 "$tmp"/ranks/r2 "$tmp"/ranks/r3
fi
# aws and rclone have nothing to share between files: their 4 ranks are 4
# full uploads, 4x the bytes by construction and about 4x the upload's
# time (checked: 3.99x and 4.01x).  At 2 GiB that is 16 GiB more through
# a 2-core Swift, 5 minutes or more, so it is measured on request only.
ranks_all=${BENCH_RANKS_ALL:-0}
skip_ranks="skipped: 4 full uploads, 4x by construction; BENCH_RANKS_ALL=1 measures it"
if has aws && [ -x "$AWS" ] && [ "$ranks_all" != 1 ]; then
    record aws "4 ranks" "$skip_ranks"
    aws s3 rm --only-show-errors --recursive s3://bench-aws/ >/dev/null 2>&1
elif has aws && [ -x "$AWS" ]; then
    run_phase aws "4 ranks" $((4 * size)) "$AWS" --endpoint-url "$S3_ENDPOINT" s3 cp --no-progress --recursive \
        "$tmp/ranks/" s3://bench-aws/ranks/
    aws s3 rm --only-show-errors --recursive s3://bench-aws/ >/dev/null 2>&1
fi
if has rclone && [ -x "$RCLONE" ] && [ "$ranks_all" != 1 ]; then
    record rclone "4 ranks" "$skip_ranks"
    [ -x "$AWS" ] && aws s3 rm --only-show-errors --recursive s3://bench-rclone/ >/dev/null 2>&1
elif has rclone && [ -x "$RCLONE" ]; then
    run_phase rclone "4 ranks" $((4 * size)) "${rclone_env[@]}" "$RCLONE" copy "$tmp/ranks" bench:bench-rclone/ranks
    [ -x "$AWS" ] && aws s3 rm --only-show-errors --recursive s3://bench-rclone/ >/dev/null 2>&1
fi
if has restic && [ -x "$RESTIC" ]; then
    run_phase restic "4 ranks" $((4 * size)) "${restic_cmd[@]}" -r "$restic_repo/bench-restic-ranks" \
        backup -q --host bench "$tmp/ranks"
fi

# -- the file store (a shared file system): spotd's restore against the
# same chunk files read by curl (file://, 16 at a time: the issue's "raw
# parallel GETs", which read and write through user space as spotd does)
# and by cp (16 at a time: copy_file_range, a copy in the kernel that no
# verifying reader can match).  curl and cp copy the store's chunk files as
# they are; spotd also checks each one's SHA-256 and writes the file.
step "file store"
if has spotd; then
    fs=$tmp/fstore
    mkdir -p "$fs"
    spot_phase "file upload" "$size" "$SPOTCTL" push --store "file://$fs" --job bench --json "$tmp/src"
fi
if has spotd && [ -z "$spot_na" ]; then
    # The chunk files, listed once for curl and cp alike (outside the timing).
    find "$fs" -path '*/chunks/*' -type f -print0 >"$tmp/file-chunks"
    if has curl; then
        : >"$tmp/curl-file.cfg"
        i=0
        while IFS= read -r -d '' c; do
            printf 'output = "%s"\nurl = "file://%s"\n' "$tmp/restore/curlf/c$i" "$c" >>"$tmp/curl-file.cfg"
            i=$((i + 1))
        done <"$tmp/file-chunks"
    fi
    # Rounds, the tools alternating: what a local copy costs on a virtual
    # machine moves by 2x from one second to the next, so one run of each
    # compares the moment more than the tools.  The report takes each
    # tool's median.  Each run starts 3 s after the last one's files went:
    # free page reporting hands freed memory back to the host after 2 s, so
    # each tool writes into memory the host must fault in again, as on a
    # replacement instance, and none into what the one before it freed.
    settle() { sleep 3; }
    for ((round = 1; round <= file_rounds; round++)); do
        if has curl; then
            mkdir -p "$tmp/restore/curlf"
            settle
            run_phase curl "file restore" "$size" curl -sS --fail --parallel --parallel-max 16 \
                -K "$tmp/curl-file.cfg"
            rm -rf "$tmp/restore/curlf"
        fi
        mkdir -p "$tmp/restore/cp"
        settle
        run_phase cp "file restore" "$size" sh -c 'xargs -0 -P16 -n8 cp -t "$2" <"$1"' sh \
            "$tmp/file-chunks" "$tmp/restore/cp"
        rm -rf "$tmp/restore/cp"
        settle
        if spot_phase "file restore" "$size" "$SPOTCTL" fetch --store "file://$fs" --job bench \
            "$tmp/restore/spotd"; then
            f=$(find "$tmp/restore/spotd" -name ckpt.bin -type f | head -n 1)
            VERIFY_PHASE="file restore" verify spotd "${f:-$tmp/restore/spotd/ckpt.bin}"
        fi
    done
    rm -rf "$fs"
fi

# ---- the report -----------------------------------------------------------------

if [ "$net" = nft ]; then
    how="sent/recv: IP bytes on lo to/from the proxy port (nftables counters)"
else
    how="sent/recv: body bytes of client requests (Swift proxy access log), headers not counted"
fi
echo
echo "store.sh: ${size_mib} MiB float32 checkpoint, Swift + s3api on 127.0.0.1, $(nproc) cores; MB = 10^6 bytes"
echo "$how"
awk -F'\t' -v size="$size" -v order="$tools cp" '
function mb(x) { return sprintf("%.1f", x / 1e6) }
BEGIN {
    fmt = "%-7s %-12s %8s %8s %9s %9s %7s %9s %9s %8s\n"
    printf fmt, "tool", "phase", "seconds", "MB/s", "sent_MB", "recv_MB", "cpu_s", "srv_cpu_s", "peak_MiB", "own_MB"
    nt = split(order, tl, " ")
    np = split("upload|restore|incremental|4 ranks|file upload|file restore", pl, "|")
}
{
    # A phase run in rounds has a line per round: a failed round fails it,
    # else its median round (by wall time) stands for it.
    k = $1 SUBSEP $2
    if (!(k in st) || st[k] == "ok") st[k] = $3
    if ($3 == "ok") {
        n = ++runs[k]
        for (i = 4; i <= 12; i++) row[k, n, i] = $i
    }
}
END {
    for (k in runs) {
        n = runs[k]
        for (a = 1; a <= n; a++) ord[a] = a
        for (a = 2; a <= n; a++)
            for (b = a; b > 1 && row[k, ord[b], 4] + 0 < row[k, ord[b - 1], 4] + 0; b--) {
                t = ord[b]; ord[b] = ord[b - 1]; ord[b - 1] = t
            }
        m = ord[int((n + 1) / 2)]
        sec[k] = row[k, m, 4]; lb[k] = row[k, m, 5]; sent[k] = row[k, m, 6]; recv[k] = row[k, m, 7]
        cpu[k] = row[k, m, 8] + row[k, m, 9]; srv[k] = row[k, m, 11]; own[k] = row[k, m, 12]
        for (a = 1; a <= n; a++) if (row[k, a, 10] + 0 > rss[k] + 0) rss[k] = row[k, a, 10]
        if (n > 1)
            spread[k] = sprintf("median of %d rounds, %.2f to %.2f s", n, row[k, ord[1], 4], row[k, ord[n], 4])
    }
    for (i = 1; i <= nt; i++) for (j = 1; j <= np; j++) {
        k = tl[i] SUBSEP pl[j]
        if (!(k in st)) continue
        if (st[k] != "ok") { printf "%-7s %-12s %s\n", tl[i], pl[j], st[k]; continue }
        printf fmt, tl[i], pl[j], sprintf("%.2f", sec[k]), sprintf("%.1f", lb[k] / 1e6 / (sec[k] > 0 ? sec[k] : 1e-9)),
            mb(sent[k]), mb(recv[k]), sprintf("%.2f", cpu[k]), srv[k], sprintf("%.1f", rss[k] / 1024),
            own[k] == "" ? "-" : mb(own[k])
    }
    for (i = 1; i <= nt; i++) for (j = 1; j <= np; j++) {
        k = tl[i] SUBSEP pl[j]
        if ((k in spread) && st[k] == "ok") printf "%-7s %-12s %s\n", tl[i], pl[j], spread[k]
    }
    print ""
    printf "%-7s %16s %16s\n", "tool", "incr/full sent", "4ranks/1 sent"
    for (i = 1; i <= nt; i++) {
        t = tl[i]; f = t SUBSEP "upload"; n = t SUBSEP "incremental"; r = t SUBSEP "4 ranks"
        if (!(f in sec) || sent[f] <= 0) continue
        printf "%-7s %16s %16s\n", t, (n in sec) ? sprintf("%.1f %%", 100 * sent[n] / sent[f]) : "-",
            (r in sec) ? sprintf("%.2fx", sent[r] / sent[f]) : "-"
    }
    print ""
    goal("spotd upload MB/s / rclone upload", ">= 2.0x", rate("spotd", "upload"), rate("rclone", "upload"), 2.0, 1, "x")
    goal("spotd upload MB/s / aws-cli upload", ">= 2.5x", rate("spotd", "upload"), rate("aws", "upload"), 2.5, 1, "x")
    goal("spotd upload MB/s / raw curl PUT", ">= 80 %", rate("spotd", "upload"), rate("curl", "upload"), 0.8, 1, "%")
    goal("spotd incremental sent / upload sent", "<= 12 %", bytes("spotd", "incremental"), bytes("spotd", "upload"), 0.12, 0, "%")
    goal("spotd 4 ranks sent / 1 rank sent", "<= 1.10x", bytes("spotd", "4 ranks"), bytes("spotd", "upload"), 1.10, 0, "x")
    goal("spotd restore MB/s / aws-cli restore", ">= 1.5x", rate("spotd", "restore"), rate("aws", "restore"), 1.5, 1, "x")
    goal("spotd restore MB/s / raw curl GET", ">= 90 %", rate("spotd", "restore"), rate("curl", "restore"), 0.9, 1, "%")
    goal("file store: spotd restore / curl file://", ">= 90 %", rate("spotd", "file restore"), rate("curl", "file restore"), 0.9, 1, "%")
    r = rate("cp", "file restore")
    if (r > 0 && rate("spotd", "file restore") > 0)
        printf "info: %-40s %-9s %10s\n", "file store: spotd restore / cp (kernel)", "-", sprintf("%.1f %%", 100 * rate("spotd", "file restore") / r)
    m = -1
    for (j = 1; j <= np; j++) { k = "spotd" SUBSEP pl[j]; if (k in sec && rss[k] > m) m = rss[k] }
    if (m < 0) printf "goal: %-40s %-9s %10s  %s\n", "spotd peak RSS", "< 300 MiB", "n/a", "MISS"
    else printf "goal: %-40s %-9s %10s  %s\n", "spotd peak RSS", "< 300 MiB", sprintf("%.1f MiB", m / 1024), (m < 300 * 1024 ? "PASS" : "MISS")
}
function rate(t, p,   k) { k = t SUBSEP p; return (k in sec && sec[k] > 0) ? lb[k] / sec[k] : -1 }
function bytes(t, p,   k) { k = t SUBSEP p; return (k in sec) ? sent[k] : -1 }
# goal(NAME, TARGET, A, B, LIMIT, AT_LEAST, UNIT): A / B against LIMIT.
function goal(name, target, a, b, limit, atleast, unit,   r, v) {
    if (a < 0 || b <= 0) { printf "goal: %-40s %-9s %10s  %s\n", name, target, "n/a", "MISS"; return }
    r = a / b
    v = unit == "%" ? sprintf("%.1f %%", 100 * r) : sprintf("%.2fx", r)
    printf "goal: %-40s %-9s %10s  %s\n", name, target, v, ((atleast ? r >= limit : r <= limit) ? "PASS" : "MISS")
}
' "$results"

status=0
while IFS=$'\t' read -r t p st _; do
    case $st in ok | skipped*) continue ;; esac
    if [ "$t" = spotd ]; then
        status=1
    else
        notes+=("$t $p: $st")
    fi
done <"$results"
for n in "${notes[@]}"; do echo "note: $n"; done
[ $status = 1 ] && echo "note: spotd could not run every phase ($spot_na), so store.sh exits 1"
exit $status
