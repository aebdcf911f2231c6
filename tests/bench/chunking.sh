#!/usr/bin/env bash
# Fixed-offset or content-defined chunks for checkpoint uploads?  A report,
# not a test.
#
#   tests/bench/chunking.sh                          # about 4-5 minutes
#   BENCH_CHUNK_MIB=256 BENCH_TORCH=0 tests/bench/chunking.sh   # ~30 s
#
# Builds tests/bench/chunking.c into $O/chunking and runs it on pairs of
# files (OLD = the previous checkpoint, NEW = the next one).  For each pair
# and each chunking (fixed 4 MiB, fixed 8 MiB, FastCDC average 4 MiB and
# 8 MiB, and for zip files "entry": fixed chunks whose grid restarts at the
# data of every zip member of at least a quarter chunk) it reports the share of NEW's bytes whose chunks
# are not among OLD's chunks by SHA-256, i.e. what must be uploaded again.
# "changed" is the floor: the bytes the scenario really changed.
#
# Scenarios:
#   weights   BENCH_CHUNK_MIB (1024) MiB of float32 from N(0, 0.02), numpy
#             (python3-numpy is installed with apt-get when missing, if
#             root and BENCH_INSTALL is not 0); NEW = OLD + 1e-4 * N(0, 1)
#             on 10 % of the values, in one contiguous region, or in 100
#             regions of 0.1 % each; and NEW = OLD with 100 bytes inserted
#             at offset 1 MiB.
#   torch     BENCH_TORCH (1; 0 skips): a ~280 MiB model (embedding, 8
#             MLP blocks, head; the embedding and the first 4 blocks, half
#             the parameters, frozen) trained with Adam for 101 steps;
#             torch.save({model, optimizer, step, meta}) after steps 100
#             and 101 (~560 MiB each).  Three pairs: files named
#             ckpt-000100.pt / ckpt-000101.pt (torch writes the name into
#             every zip member's name), both named last.pt, and
#             ckpt-000101.pt whose pickle grew (a new key and a longer
#             meta string).  python3-torch is installed like numpy; it is
#             importable only from /usr/bin/python3.
#
# The throughput row is the median boundary-finding speed over all pairs
# (MB/s = 10^6 B per second of the thread's CPU time, one thread, file
# mmap'ed, no SHA-256); the SHA-256 row is the same program hashing NEW's
# chunks, for scale.
#
# Environment: O (build), BENCH_CHUNK_MIB (1024), BENCH_TORCH (1),
# BENCH_INSTALL (1), BENCH_KEEP (0; 1 keeps the scratch folder and prints
# it), BENCH_VERBOSE (0; 1 prints every run's key=value output), TMPDIR
# (scratch goes there, default /tmp; it needs about 3 GiB).
#
# Exit status: 0 with a report; 1 when chunking.c does not build.
set -u

O=${O:-build}
mib=${BENCH_CHUNK_MIB:-1024}
want_torch=${BENCH_TORCH:-1}
install=${BENCH_INSTALL:-1}
keep=${BENCH_KEEP:-0}
verbose=${BENCH_VERBOSE:-0}
py=/usr/bin/python3
case $mib in '' | *[!0-9]* | 0) echo "chunking.sh: bad BENCH_CHUNK_MIB" >&2; exit 2 ;; esac

cd "$(dirname "$0")/../.." || exit 1
mkdir -p "$O" || exit 1
# shellcheck disable=SC2046
if ! cc -O2 -Wall -o "$O/chunking" tests/bench/chunking.c \
        $(pkg-config --cflags --libs libcrypto 2>/dev/null || echo -lcrypto); then
    echo "chunking.sh: could not build tests/bench/chunking.c" >&2
    exit 1
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/chunking.XXXXXX") || exit 1
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    if [ "$keep" = 1 ]; then
        echo "scratch kept: $scratch"
    else
        rm -rf "$scratch"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cp "$O/chunking" "$scratch/chunking" || exit 1
bin=$scratch/chunking
start=$SECONDS

# have MODULE: whether /usr/bin/python3 imports it, installing the Debian
# package when missing (root, BENCH_INSTALL not 0).
have() {
    "$py" -c "import $1" 2>/dev/null && return 0
    if [ "$install" != 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing python3-$1 (apt-get) ..." >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            -o DPkg::Lock::Timeout=600 "python3-$1" >"$scratch/apt.log" 2>&1 ||
            tail -5 "$scratch/apt.log" >&2
        "$py" -c "import $1" 2>/dev/null && return 0
    fi
    return 1
}

configs=("fixed 4M" "fixed 8M" "cdc 4M" "cdc 8M" "zip 4M" "zip 8M")
heads=("fixed 4M" "fixed 8M" "cdc 4M" "cdc 8M" "entry 4M" "entry 8M")
declare -A pct chunks mbps sha
scenarios=()
declare -A floor
notes=()

# pair NAME OLD NEW ZIP FLOOR_PCT: run every chunking on the pair.
pair() {
    local name=$1 old=$2 new=$3 zip=$4 c k v out
    scenarios+=("$name")
    floor[$name]=$5
    for c in "${configs[@]}"; do
        [ "$zip" = 1 ] || [ "${c%% *}" != zip ] || continue
        # shellcheck disable=SC2086
        if ! out=$("$bin" --$c "$old" "$new"); then
            notes+=("$name, $c: chunking failed")
            continue
        fi
        [ "$verbose" = 1 ] && echo "== $name, $c" && echo "$out"
        while IFS='=' read -r k v; do
            case $k in
            upload_pct) pct[$name,$c]=$v ;;
            chunks) chunks[$name,$c]=$v ;;
            chunk_avg) chunks[$name,$c]+=/$(awk -v b="$v" 'BEGIN {printf "%.1f", b / 1048576}') ;;
            boundary_mbps) mbps[$c]+=" $v" ;;
            sha256_mbps) sha[$c]+=" $v" ;;
            esac
        done <<<"$out"
    done
}

median() {
    # shellcheck disable=SC2048,SC2086
    printf '%s\n' $* | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'
}

best() {
    # shellcheck disable=SC2048,SC2086
    printf '%s\n' $* | sort -n | tail -1
}

# ---- weights -------------------------------------------------------------
if have numpy; then
    w=$scratch/w
    mkdir -p "$w"
    echo "weights: generating $mib MiB of float32 ..." >&2
    if "$py" - "$w" "$mib" <<'EOF'
import sys, numpy as np
d, mib = sys.argv[1], int(sys.argv[2])
n = mib * 2**20 // 4
rng = np.random.default_rng(1)
old = rng.standard_normal(n, dtype=np.float32)
old *= np.float32(0.02)
old.tofile(d + "/old")
new = old.copy()
# 10 % in one region, at an offset aligned to nothing in particular
L = n // 10
s = int(n * 0.4321) | 1
new[s:s + L] += rng.standard_normal(L, dtype=np.float32) * np.float32(1e-4)
new.tofile(d + "/contig")
changed = int(np.count_nonzero(new != old))
new[s:s + L] = old[s:s + L]
# 10 % in 100 regions of 0.1 %, one at a random place in each 1 % stretch
L = n // 1000
for k in range(100):
    s = k * (n // 100) + int(rng.integers(0, n // 100 - L))
    new[s:s + L] += rng.standard_normal(L, dtype=np.float32) * np.float32(1e-4)
new.tofile(d + "/scatter")
changed2 = int(np.count_nonzero(new != old))
with open(d + "/changed", "w") as f:
    f.write("%.2f %.2f\n" % (100 * changed / n, 100 * changed2 / n))
EOF
    then
        # the values that changed, as a share (a changed float is 4 bytes)
        read -r fc fs <"$w/changed"
        { head -c 1048576 "$w/old"; head -c 100 /dev/urandom; tail -c +1048577 "$w/old"; } >"$w/insert"
        echo "weights: chunking ..." >&2
        pair "weights, 10% in 1 region" "$w/old" "$w/contig" 0 "$fc"
        pair "weights, 10% in 100 regions" "$w/old" "$w/scatter" 0 "$fs"
        pair "weights, +100 B at 1 MiB" "$w/old" "$w/insert" 0 \
            "$(awk -v m="$mib" 'BEGIN {printf "%.5f", 100 * 100 / (m * 1048576)}')"
    else
        notes+=("weights: generation failed")
    fi
    [ "$keep" = 1 ] || rm -rf "$w"
else
    notes+=("weights: skipped, /usr/bin/python3 has no numpy (apt-get install python3-numpy)")
fi

# ---- torch ---------------------------------------------------------------
torch_version=
if [ "$want_torch" = 0 ]; then
    notes+=("torch: skipped (BENCH_TORCH=0)")
elif have torch; then
    t=$scratch/t
    mkdir -p "$t"/{a,b,c,d,e}
    torch_version=$("$py" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)' 2>/dev/null)
    echo "torch: training 101 steps and saving ..." >&2
    if "$py" - "$t" >"$t/log" 2>&1 <<'EOF'
import sys, torch, torch.nn as nn
t = sys.argv[1]
torch.manual_seed(0)
torch.set_num_threads(2)
D, FF, V, NB = 1024, 3584, 7168, 8

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln, s.up, s.down = nn.LayerNorm(D), nn.Linear(D, FF), nn.Linear(FF, D)
    def forward(s, x):
        return x + s.down(torch.relu(s.up(s.ln(x))))

class Model(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, D)
        s.blocks = nn.ModuleList(Block() for _ in range(NB))
        s.ln, s.head = nn.LayerNorm(D), nn.Linear(D, V)
    def forward(s, tok):
        x = s.emb(tok)
        for b in s.blocks:
            x = b(x)
        return s.head(s.ln(x))

m = Model()
for mod in [m.emb] + list(m.blocks[:NB // 2]):
    for p in mod.parameters():
        p.requires_grad_(False)
n = sum(p.numel() for p in m.parameters())
nf = sum(p.numel() for p in m.parameters() if not p.requires_grad)
print("params %.1fM (%.0f MiB), frozen %.0f%%" % (n / 1e6, n * 4 / 2**20, 100 * nf / n))
opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-4, foreach=True)
g = torch.Generator().manual_seed(1)

def ckpt(step, grown=False):
    meta = {"run": "chunking-bench", "lr": 1e-4, "loss": float(loss),
            "saved_at": "2024-01-01T00:%02d:%02d" % (step // 60 % 60, step % 60)}
    d = {"model": m.state_dict(), "optimizer": opt.state_dict(), "step": step, "meta": meta}
    if grown:
        meta["resumed_from"] = "/checkpoints/run-2024-01-01/ckpt-%06d.pt" % (step - 1)
        d["best"] = {"loss": float(loss), "step": step, "note": "the pickle grows " * 8}
    return d

frozen0 = {n: p.detach().clone() for n, p in m.named_parameters() if not p.requires_grad}
head0 = m.head.weight.detach().clone()
for step in range(1, 102):
    # one token per step: Debian's torch uses the reference BLAS, and the
    # compute is not what is measured
    tok = torch.randint(0, V, (1, 2), generator=g)
    loss = nn.functional.cross_entropy(m(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step == 100:
        torch.save(ckpt(step), t + "/a/ckpt-000100.pt")
        torch.save(ckpt(step), t + "/d/last.pt")
torch.save(ckpt(101), t + "/b/ckpt-000101.pt")
torch.save(ckpt(101, grown=True), t + "/c/ckpt-000101.pt")
torch.save(ckpt(101), t + "/e/last.pt")
sd = m.state_dict()
assert all(torch.equal(v, sd[k]) for k, v in frozen0.items()), "frozen tensors changed"
assert not torch.equal(sd["head.weight"], head0), "the trainable half did not change"
EOF
    then
        sed 's/^/torch: /' "$t/log" >&2
        # What moved in torch's zip layout: members matched by name without
        # the first path component (torch names it after the file).
        "$py" - "$t" >"$t/layout" 2>&1 <<'EOF'
import sys, zipfile
t = sys.argv[1]
def members(p):
    return {i.filename.split("/", 1)[1]: i for i in zipfile.ZipFile(p).infolist()}
for lab, a, b in (("ckpt-N.pt", "a/ckpt-000100.pt", "b/ckpt-000101.pt"),
                  ("last.pt", "d/last.pt", "e/last.pt"),
                  ("pickle grew", "a/ckpt-000100.pt", "c/ckpt-000101.pt")):
    A, B = members(t + "/" + a), members(t + "/" + b)
    names = [n for n in A if n in B]
    same = [n for n in names if A[n].CRC == B[n].CRC and A[n].file_size == B[n].file_size]
    moved = [n for n in same if A[n].header_offset != B[n].header_offset]
    size = sum(i.compress_size for i in B.values())
    changed = sum(B[n].compress_size for n in B if n not in same)
    shifts = sorted({B[n].header_offset - A[n].header_offset for n in names})
    print("%s|%d|%d|%d|%d|%d|%s|%.2f" % (lab, len(B), len(same), len(moved),
          A["data.pkl"].file_size, B["data.pkl"].file_size,
          ",".join(map(str, shifts[:4])), 100 * changed / size))
EOF
        declare -A tfloor=()
        while IFS='|' read -r lab nm same moved pa pb shifts fl; do
            tfloor[$lab]=$fl
            notes+=("torch $lab: $nm zip members, $same with identical bytes, $moved of those at another offset; data.pkl $pa -> $pb B; member offset shifts (B): $shifts")
        done <"$t/layout"
        echo "torch: chunking ..." >&2
        pair "torch 100->101, ckpt-N.pt" "$t/a/ckpt-000100.pt" "$t/b/ckpt-000101.pt" 1 "${tfloor[ckpt-N.pt]:-?}"
        pair "torch 100->101, last.pt" "$t/d/last.pt" "$t/e/last.pt" 1 "${tfloor[last.pt]:-?}"
        pair "torch 100->101, pickle grew" "$t/a/ckpt-000100.pt" "$t/c/ckpt-000101.pt" 1 "${tfloor[pickle grew]:-?}"
    else
        notes+=("torch: the trainer failed: $(tail -3 "$t/log" | tr '\n' ' ')")
    fi
    [ "$keep" = 1 ] || rm -rf "$t"
else
    notes+=("torch: skipped, /usr/bin/python3 has no torch (apt-get install python3-torch)")
fi

# ---- report --------------------------------------------------------------
echo
echo "Share of NEW's bytes uploaded again (chunks whose SHA-256 is not among OLD's)"
echo
w0=32
printf "%-${w0}s %8s" scenario changed
for h in "${heads[@]}"; do printf " %9s" "$h"; done
echo
for s in "${scenarios[@]}"; do
    printf "%-${w0}s %7s%%" "$s" "${floor[$s]}"
    for c in "${configs[@]}"; do
        if [ -n "${pct[$s,$c]+x}" ]; then
            printf " %8s%%" "${pct[$s,$c]}"
        else
            printf " %9s" -
        fi
    done
    echo
done
for how in median best; do
    printf "%-${w0}s %8s" "boundaries MB/s, $how" ""
    for c in "${configs[@]}"; do
        case $c in
        cdc*)
            if [ $how = median ]; then v=$(median "${mbps[$c]-}"); else v=$(best "${mbps[$c]-}"); fi
            printf " %9s" "${v:--}" ;;
        *) printf " %9s" "no scan" ;;
        esac
    done
    echo
done
printf "%-${w0}s %8s" "SHA-256 MB/s, median" ""
for c in "${configs[@]}"; do
    v=$(median "${sha[$c]-}")
    printf " %9s" "${v:--}"
done
echo
echo
echo "Chunks in NEW / their mean size in MiB"
printf "%-${w0}s %8s" scenario ""
for h in "${heads[@]}"; do printf " %9s" "$h"; done
echo
for s in "${scenarios[@]}"; do
    printf "%-${w0}s %8s" "$s" ""
    for c in "${configs[@]}"; do printf " %9s" "${chunks[$s,$c]:--}"; done
    echo
done
echo
[ -n "$torch_version" ] && echo "$torch_version"
for n in "${notes[@]}"; do echo "note: $n"; done
echo "cdc: FastCDC, gear hash, normalized chunking (2 masks), min avg/4, max avg*4"
echo "entry: fixed grid restarted at the data of each zip member of at least size/4; headers and"
echo "       smaller members between are cut on a grid that starts after the previous large member"
echo "$((SECONDS - start)) s"
exit 0
