# The snapshot engine's behaviour on one store, through spotctl: sourced by
# t-store-file.sh (file://) and t-store-s3.sh (a real Swift with s3api), so
# both backends pass the same checks.  Needs lib.sh, and
#   store_cases NAME URL RAW
# where RAW is a command prefix that reads/writes raw objects of the store:
#   $RAW get KEY FILE | put KEY FILE | del KEY
# (the test reaches into the store to damage it the way a crash or a bad
# disk would).

# ctl ARGS...: spotctl against the store under test; sets RC, output in
# $T/out and $T/err.
ctl() {
    timeout -k 2 120 "$SPOTCTL" "$@" --store "$URL" --job "$JOB" >"$T/out" 2>"$T/err"
    RC=$?
}

# A checkpoint-like directory: float32-ish data over several chunks, a
# sparse file, a nested directory, a symlink, modes and old mtimes.
make_ckpt() {
    local d=$1
    mkdir -p "$d/optim/state"
    python3 - "$d" <<'EOF'
import os, random, struct, sys
d = sys.argv[1]
rnd = random.Random(7)
vals = [rnd.gauss(0, 0.02) for _ in range(4096)]
block = struct.pack("<4096f", *vals)
with open(os.path.join(d, "model.bin"), "wb") as f:
    for i in range(80):                     # 1.25 MiB of float32
        f.write(block[i % 7:] + block[:i % 7])
    f.write(b"tail")
with open(os.path.join(d, "optim/state/adam.bin"), "wb") as f:
    f.write(os.urandom(700000))
with open(os.path.join(d, "sparse.bin"), "wb") as f:
    f.seek(3 * 1024 * 1024)
    f.write(b"end")
EOF
    echo '{"step": 1200}' >"$d/meta.json"
    : >"$d/empty"
    ln -s model.bin "$d/latest"
    chmod 0600 "$d/optim/state/adam.bin"
    chmod 0750 "$d/optim"
    touch -h -d '2024-01-02 03:04:05.123456789' "$d/model.bin" "$d/latest" "$d/optim"
}

# same_tree A B: contents, types, modes and mtimes (files and dirs) equal.
same_tree() {
    diff -r --no-dereference "$1" "$2" >/dev/null || return 1
    [ "$(cd "$1" && find . -mindepth 1 -printf '%P %y %m %T@\n' | sort)" = \
      "$(cd "$2" && find . -mindepth 1 -printf '%P %y %m %T@\n' | sort)" ]
}

store_cases() {
    local name=$1 raw=$3 g k size blocks want
    URL=$2
    JOB=job-$name
    RAW=$raw
    make_ckpt "$T/ck"

    # ---- round trip ----
    ctl push --json --step 1200 --chunk-size 256KiB "$T/ck"
    expect_eq "$name: push exits 0" 0 "$RC"
    cp "$T/out" "$T/push1"
    g=$(jget "$(cat "$T/out")" gen)
    expect_eq "$name: the first generation is 1" 1 "$g"
    expect_ge "$name: push stored chunks" 5 "$(jget "$(cat "$T/out")" chunks_sent)"
    expect_eq "$name: the sparse file's zeros are not stored" 3145728 \
        "$(jget "$(cat "$T/out")" bytes_zero)"
    ctl fetch "$T/back"
    expect_eq "$name: fetch exits 0" 0 "$RC"
    check "$name: restored tree equals the original (bytes, types, modes, mtimes)" \
        same_tree "$T/ck" "$T/back"
    blocks=$(stat -c %b "$T/back/sparse.bin")
    expect_lt "$name: a sparse file stays sparse" 64 "$blocks"
    expect_eq "$name: a symlink stays a symlink" model.bin "$(readlink "$T/back/latest")"
    check "$name: no partial directory is left" \
        bash -c "! ls -d '$T'/back.spotd-partial.* 2>/dev/null"
    # From a remote store the whole blocks of each chunk go with O_DIRECT
    # (snap_fetch.c's write_chunk): model.bin's 5 chunks of 256 KiB and
    # adam.bin's 2; not model.bin's 4-byte tail, adam.bin's last 175712
    # bytes (a body under 256 KiB is not page-aligned, bigbuf.h) or
    # sparse.bin's 3 bytes past its hole.  The tree is the same, holes,
    # modes and links included, as through the page cache.
    ctl fetch --json "$T/back-direct"
    if [ "$name" = s3 ]; then want=$((7 * 262144)); else want=0; fi
    expect_eq "$name: fetch --json: bytes written with O_DIRECT (a remote store's only)" \
        "0 $want" "$RC $(jget "$(cat "$T/out")" bytes_direct)"
    check "$name: ... and that restore equals the original too (bytes, types, modes, mtimes)" \
        same_tree "$T/ck" "$T/back-direct"
    expect_lt "$name: ... its sparse file stays sparse" 64 "$(stat -c %b "$T/back-direct/sparse.bin")"
    ctl verify --json
    expect_eq "$name: verify exits 0" 0 "$RC"
    check "$name: verify reports every chunk good" grep -q '"ok":true' "$T/out"
    # Each key once (strict JSON), with what verify checked: every stored
    # chunk and its bytes (runs of zeros are not stored); a second
    # "chunks":0 came last before.
    expect_eq "$name: verify --json: one document, files, chunks and bytes as pushed" \
        "$(jq_ '"%s|%s|%s" % (d["files"], d["chunks_sent"], d["bytes"] - d["bytes_zero"])' \
            "$T/push1")" \
        "$(jq_ '"%s|%s|%s" % (d["files"], d["chunks"], d["bytes"])' "$T/out")"
    ctl ls
    check "$name: ls shows the committed generation with its step" \
        grep -qE '^1 +committed +1200 +1 ' "$T/out"
    ctl show --json --files
    expect_eq "$name: show lists the generation's files from its manifest" "0|1200|1" \
        "$RC|$(jget "$(cat "$T/out")" step)|$(grep -c '"path":"latest","type":"symlink"' "$T/out")"
    ctl world --json
    expect_eq "$name: world lists no rendezvous records for a job without any" "0|[]" \
        "$RC|$(cat "$T/out")"

    # ---- deduplication ----
    ctl push --json --chunk-size 256KiB "$T/ck"
    expect_eq "$name: an unchanged checkpoint uploads no chunk" 0 \
        "$(jget "$(cat "$T/out")" chunks_sent)"
    python3 - "$T/ck/model.bin" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(300 * 1024)
    f.write(b"\x01" * 1000)
EOF
    ctl push --json --chunk-size 256KiB "$T/ck"
    expect_eq "$name: a change inside one chunk uploads that chunk" 1 \
        "$(jget "$(cat "$T/out")" chunks_sent)"
    cp -a "$T/ck" "$T/ck2"
    cp -a "$T/ck" "$T/ck3"
    # --inflight 1MiB: four chunk buffers for three ranks, so the ranks
    # wait for each other's slots.
    ctl push --json --chunk-size 256KiB --inflight 1MiB "$T/ck" "$T/ck2" "$T/ck3"
    expect_eq "$name: three identical ranks upload nothing new" 0 \
        "$(jget "$(cat "$T/out")" chunks_sent)"
    echo "rank 2 differs" >>"$T/ck3/meta.json"
    ctl push --json --chunk-size 256KiB --inflight 1MiB "$T/ck" "$T/ck2" "$T/ck3"
    expect_eq "$name: three ranks, one file changed in one: one chunk" 1 \
        "$(jget "$(cat "$T/out")" chunks_sent)"
    g=$(jget "$(cat "$T/out")" gen)
    ctl fetch --gen "$g" --rank 2 "$T/r2"
    check "$name: rank 2 restores its own files" same_tree "$T/ck3" "$T/r2"
    ctl fetch --gen "$g" --rank 3 "$T/r3"
    expect_eq "$name: a rank the generation lacks is refused" 1 "$RC"
    check "$name: ... and says which ranks there are" grep -q "ranks 0 to 2" "$T/err"

    # ---- zip checkpoints (torch.save): tensors that move keep their chunks ----
    mkzip() {
        python3 - "$1" "$2" <<'EOF'
import random, sys, zipfile
path, pkl = sys.argv[1], int(sys.argv[2])
rnd = random.Random(3)
# Fixed times in the headers, as torch writes them.
def entry(name):
    return zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
    z.writestr(entry("archive/data.pkl"), b"p" * pkl)
    for i in range(4):
        z.writestr(entry("archive/data/%d" % i), rnd.randbytes(600000))
EOF
    }
    mkdir -p "$T/zipck"
    mkzip "$T/zipck/ckpt.pt" 100
    ctl push --json --chunk-size 256KiB "$T/zipck"
    mkzip "$T/zipck/ckpt.pt" 400
    ctl push --json --chunk-size 256KiB "$T/zipck"
    expect_eq "$name: a zip whose first member grew re-uploads only what changed" 2 \
        "$(jget "$(cat "$T/out")" chunks_sent)"
    ctl fetch "$T/zipback"
    check "$name: ... and restores byte for byte" cmp "$T/zipck/ckpt.pt" "$T/zipback/ckpt.pt"

    # The chunks of a zip64 file start at its large entries' data, as the
    # zip's own headers place it.
    python3 - "$T/zip64/ckpt.pt" <<'EOF'
import os, random, sys, zipfile
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
rnd = random.Random(5)
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_STORED) as z:
    for name, size in (("a/data.pkl", 333), ("a/data/0", 700000), ("a/data/1", 90000),
                       ("a/data/2", 300000)):
        with z.open(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), "w", force_zip64=True) as f:
            f.write(rnd.randbytes(size))
EOF
    ctl push --json --chunk-size 256KiB "$T/zip64"
    g=$(jget "$(cat "$T/out")" gen)
    $RAW get "$(printf '%s/gens/%08d/rank-0.json' "$JOB" "$g")" "$T/m64"
    check "$name: a zip64 file's chunks restart at each entry of 64 KiB or more" \
        python3 - "$T/zip64/ckpt.pt" "$T/m64" <<'EOF'
import strictjson, struct, sys, zipfile
starts = []
with open(sys.argv[1], "rb") as f, zipfile.ZipFile(sys.argv[1]) as z:
    for i in z.infolist():
        if i.compress_size >= 65536:
            f.seek(i.header_offset)
            h = f.read(30)
            starts.append(i.header_offset + 30 + struct.unpack("<HH", h[26:30])[0] +
                          struct.unpack("<HH", h[26:30])[1])
m = strictjson.load(sys.argv[2])
off, cuts = 0, set()
for c in m["files"][0]["chunks"]:
    off += c[0]
    cuts.add(off)
sys.exit(0 if all(s in cuts or s == 0 for s in starts) and len(starts) == 3 else 1)
EOF

    # ---- refusals ----
    ctl fetch "$T/ck"
    expect_eq "$name: fetch into a non-empty directory fails" 1 "$RC"
    check "$name: ... and says why" grep -q "not an empty directory" "$T/err"
    mkfifo "$T/ck2/pipe"
    ctl push "$T/ck2"
    expect_eq "$name: a fifo in the checkpoint fails the push" 1 "$RC"
    check "$name: ... naming it" grep -q "pipe': not a regular file" "$T/err"
    rm -f "$T/ck2/pipe"
    ctl push "$T/nonexistent"
    expect_eq "$name: a missing directory fails the push" 1 "$RC"
    ctl fetch --gen 99 "$T/x"
    expect_eq "$name: an unknown generation fails" 1 "$RC"
    check "$name: ... saying so" grep -q "no generation 99" "$T/err"

    # ---- damage in the store ----
    ctl ls --json
    # (A push that failed left its claimed number behind, uncommitted.)
    g=$(ls_gens "$T/out" | tail -n 1)
    # A chunk of the newest committed generation, from its manifest.
    $RAW get "$(printf '%s/gens/%08d/rank-0.json' "$JOB" "$g")" "$T/m0"
    k=$(grep -o '[0-9a-f]\{64\}' "$T/m0" | head -n 1)
    k=$JOB/chunks/${k:0:2}/$k
    $RAW get "$k" "$T/chunk.orig"
    python3 -c "
import sys
b = bytearray(open('$T/chunk.orig','rb').read())
b[len(b) // 2] ^= 0xff
open('$T/chunk.bad','wb').write(b)"
    $RAW put "$k" "$T/chunk.bad"
    ctl verify --json
    expect_eq "$name: verify fails on a corrupt chunk" 1 "$RC"
    check "$name: ... naming the chunk as corrupt" grep -q "is corrupt in the store" "$T/err"
    check "$name: ... and counting it" grep -q '"bad_chunks":1' "$T/out"
    ctl fetch "$T/bad"
    expect_eq "$name: fetch fails on a corrupt chunk" 1 "$RC"
    check "$name: ... and leaves no destination" test ! -e "$T/bad"
    check "$name: ... and no partial directory" bash -c "! ls -d '$T'/bad.spotd-partial.* 2>/dev/null"
    $RAW put "$k" "$T/chunk.orig"
    $RAW del "$k"
    ctl verify
    expect_eq "$name: verify fails on a missing chunk" 1 "$RC"
    check "$name: ... saying it is missing" grep -q "is missing from the store" "$T/err"
    $RAW put "$k" "$T/chunk.orig"
    ctl verify
    expect_eq "$name: verify passes again once the chunk is back" 0 "$RC"

    k=$(printf '%s/gens/%08d/rank-0.json' "$JOB" "$g")
    $RAW get "$k" "$T/m.orig"
    sed 's/"step":[0-9]*/"step":1/' "$T/m.orig" >"$T/m.bad"
    $RAW put "$k" "$T/m.bad"
    ctl fetch "$T/bad"
    expect_eq "$name: a replaced manifest fails the fetch" 1 "$RC"
    check "$name: ... because its digest differs from the commit record's" \
        grep -q "does not match the digest" "$T/err"
    $RAW put "$k" "$T/m.orig"

    k=$(printf '%s/gens/%08d/COMMIT.json' "$JOB" "$g")
    $RAW get "$k" "$T/c.orig"
    $RAW del "$k"
    ctl fetch --gen "$g" "$T/bad"
    expect_eq "$name: a generation without its commit record cannot be restored" 1 "$RC"
    check "$name: ... it was never committed" grep -q "never committed" "$T/err"
    ctl ls
    check "$name: ls shows it incomplete" grep -qE "^$g +incomplete" "$T/out"
    ctl fetch "$T/prev"
    expect_eq "$name: the newest committed generation is restored instead" 0 "$RC"
    $RAW put "$k" "$T/c.orig"

    # ---- retention and garbage collection ----
    ctl ls --json
    local before
    before=$(ls_gens "$T/out" | wc -l)
    ctl gc --keep 2 --grace 0s --dry-run --json
    expect_eq "$name: gc --dry-run exits 0" 0 "$RC"
    ctl ls --json
    expect_eq "$name: gc --dry-run deletes nothing" "$before" "$(ls_gens "$T/out" | wc -l)"
    ctl gc --keep 2 --grace 1h --json
    expect_eq "$name: gc with a grace period keeps every chunk" 0 \
        "$(jget "$(cat "$T/out")" chunks_deleted)"
    ctl gc --keep 2 --grace 0s --json
    expect_eq "$name: gc exits 0" 0 "$RC"
    expect_ge "$name: gc deletes the chunks only old generations used" 1 \
        "$(jget "$(cat "$T/out")" chunks_deleted)"
    ctl ls --json
    expect_eq "$name: gc keeps the newest 2 committed generations" 2 "$(ls_gens "$T/out" | wc -l)"
    for g in $(ls_gens "$T/out"); do
        ctl verify --gen "$g"
        expect_eq "$name: generation $g is whole after gc" 0 "$RC"
    done
}

# store_page_cases NAME URL: every listing path across many pages.  The
# test knob SPOTD_TEST_S3_MAX_KEYS=3 makes each S3 listing ask for pages of
# 3 keys (the file store lists a directory at once and ignores it): 8
# generations of 3 objects each under gens/, 11 chunks under chunks/.
store_page_cases() {
    local name=$1 i g own
    URL=$2
    JOB=pages-$name
    export SPOTD_TEST_S3_MAX_KEYS=3
    mkdir -p "$T/pg"
    head -c 300000 /dev/urandom >"$T/pg/shared.bin"
    for i in 1 2 3 4 5 6 7 8; do
        echo "generation $i's own bytes" >"$T/pg/own.bin"
        ctl push --json --step $((i * 100)) --chunk-size 256KiB "$T/pg"
        [ "$RC" -eq 0 ] || break
    done
    expect_eq "$name pages: 8 pushes, the last one generation 8" "0 8" \
        "$RC $(jget "$(cat "$T/out")" gen)"
    ctl ls --json
    expect_eq "$name pages: ls shows all 8 committed generations" "0 8" \
        "$RC $(tr '}' '\n' <"$T/out" | grep -c '"state":"committed"')"
    ctl show --json
    expect_eq "$name pages: show's newest generation is 8 (step 800)" "0 8 800" \
        "$RC $(jget "$(cat "$T/out")" gen) $(jget "$(cat "$T/out")" step)"
    ctl show --json --gen 7
    expect_eq "$name pages: show --gen 7 (on a later page)" "0 700" \
        "$RC $(jget "$(cat "$T/out")" step)"
    ctl fetch "$T/pg-$name-back"
    expect_eq "$name pages: fetch restores generation 8's files" \
        "0 generation 8's own bytes" "$RC $(cat "$T/pg-$name-back/own.bin" 2>/dev/null)"
    ctl verify --json --gen 8
    expect_eq "$name pages: verify --gen 8 passes" "0 3" "$RC $(jget "$(cat "$T/out")" chunks)"
    echo "generation 9's own bytes" >"$T/pg/own.bin"
    ctl push --json --step 900 --chunk-size 256KiB "$T/pg"
    expect_eq "$name pages: the next push takes generation 9" "0 9" \
        "$RC $(jget "$(cat "$T/out")" gen)"
    check "$name pages: ... at once, finding no number taken" bash -c "! grep -q 'is taken' '$T/err'"
    ctl gc --keep 2 --grace 0s --json
    expect_eq "$name pages: gc --keep 2 deletes 7 generations and their 7 own chunks" "0 7 7 4" \
        "$RC $(jget "$(cat "$T/out")" gens_deleted) $(jget "$(cat "$T/out")" chunks_deleted) $(jget "$(cat "$T/out")" chunks_kept)"
    ctl gc --keep 2 --grace 0s --json
    expect_eq "$name pages: a second gc finds nothing left to delete" "0 0 0 4" \
        "$RC $(jget "$(cat "$T/out")" gens_deleted) $(jget "$(cat "$T/out")" chunks_deleted) $(jget "$(cat "$T/out")" chunks_kept)"
    for g in 8 9; do
        ctl verify --gen "$g"
        expect_eq "$name pages: generation $g is whole after gc" 0 "$RC"
    done
    # A spotd resume's discovery of the newest generation: pushes 10 to 16,
    # so that the 9 generations listed span 9 pages.
    for i in 10 11 12 13 14 15 16; do
        echo "generation $i's own bytes" >"$T/pg/own.bin"
        ctl push --step $((i * 100)) --chunk-size 256KiB "$T/pg"
    done
    run_spotd run --cloud none --method dir --ckpt-dir "$T/pg-$name-ck" --job "$JOB" --store "$URL" \
        --state-dir "$T/pg-$name-sd" --events "$T/pg-$name.ev" -- true
    own=$(ev "$T/pg-$name.ev" resume)
    expect_eq "$name pages: spotd resumes from the newest generation, 16" "0 16 1600" \
        "$RC $(jget "$own" gen) $(jget "$own" step)"
    unset SPOTD_TEST_S3_MAX_KEYS
}

# foreign_cases NAME URL RAW: objects the store format does not name
# (docs/store-format.md, Keys) in several places of a job's tree: never
# part of a generation, shown as foreign, left alone by gc, while gc still
# deletes every object of the store's own that it should.
foreign_cases() {
    local name=$1 k g own
    URL=$2
    JOB=foreign-$name
    RAW=$3
    mkdir -p "$T/fa" "$T/fb" "$T/fc"
    echo one >"$T/fa/f"
    echo two >"$T/fb/f"
    echo three >"$T/fc/f"
    for d in fa fb fc; do ctl push --json "$T/$d"; done
    expect_eq "$name foreign: three generations pushed" 3 "$(jget "$(cat "$T/out")" gen)"
    # An operator's backup of a record that gc will drop, one of a
    # generation that never was, a manifest-like name that is not one,
    # stray files at every level, and the pointer <job>/LATEST (the
    # store's own).
    $RAW get "$JOB/gens/00000001/COMMIT.json" "$T/c1"
    local foreign="gens/00000001/COMMIT.json.bak gens/00000009/COMMIT.json.bak
        gens/00000002/rank-00.json gens/00000002/old/rank-0.json gens/notes.txt
        chunks/README chunks/ab/backup.tar README.txt world/notes"
    for k in $foreign; do
        cp "$T/c1" "$T/obj" && echo "$k" >>"$T/obj"
        $RAW put "$JOB/$k" "$T/obj"
    done
    printf '{"format":1,"kind":"latest","job":"%s","gen":3}\n' "$JOB" >"$T/latest"
    $RAW put "$JOB/LATEST" "$T/latest"

    ctl ls
    expect_eq "$name foreign: ls exits 0" 0 "$RC"
    check "$name foreign: ls shows no generation 9 (only foreign objects there)" \
        bash -c "! grep -qE '^9 ' '$T/out'"
    check "$name foreign: ls shows generations 1 to 3 committed, nothing else" \
        test "$(grep -cE '^[0-9]+ +committed ' "$T/out")|$(grep -cE '^[0-9]+ +(committed|incomplete|corrupt|unsigned|other-key|bad-mac) ' "$T/out")" = "3|3"
    check "$name foreign: ls says the foreign objects under gens/ are there" \
        grep -q "5 foreign objects under the job's gens/" "$T/out"
    check "$name foreign: ... naming the backup" grep -q "$JOB/gens/00000009/COMMIT.json.bak" "$T/out"
    ctl ls --json
    expect_eq "$name foreign: ls --json lists generations 1 to 3 only" "1 2 3|" \
        "$(echo $(ls_gens "$T/out"))|$(ls_gens "$T/out" incomplete)"
    check "$name foreign: ... and says the foreign objects on stderr" \
        grep -q "$JOB/gens/00000002/rank-00.json" "$T/err"
    # show finds the newest through LATEST and lists only the numbers above
    # it (docs/store-format.md, The pointer), not the whole of gens/.
    ctl show --json
    expect_eq "$name foreign: show --json names generation 3, and the foreign object above it" \
        "0 3 $JOB/gens/00000009/COMMIT.json.bak" \
        "$RC $(jget "$(cat "$T/out")" gen) $(jq_ 'sorted(d["foreign"])' "$T/out" | tr '\n' ' ' | sed 's/ $//')"

    ctl gc --grace 0s --keep 1 --json
    expect_eq "$name foreign: gc exits 0" 0 "$RC"
    expect_eq "$name foreign: gc deletes generations 1 and 2, and counts 9 foreign objects" \
        "2|9" "$(jget "$(cat "$T/out")" gens_deleted)|$(jget "$(cat "$T/out")" foreign_objects)"
    expect_eq "$name foreign: gc's report names every foreign object, and not LATEST" \
        "$(for k in $foreign; do echo "$JOB/$k"; done | sort | tr '\n' ' ')" \
        "$(jq_ 'sorted(d["foreign"])' "$T/out" | tr '\n' ' ')"
    for k in $foreign; do
        rm -f "$T/obj.back"
        $RAW get "$JOB/$k" "$T/obj.back"
        cp "$T/c1" "$T/obj" && echo "$k" >>"$T/obj"
        check "$name foreign: gc left $k alone, byte for byte" cmp -s "$T/obj" "$T/obj.back"
    done
    rm -f "$T/latest.back"
    $RAW get "$JOB/LATEST" "$T/latest.back"
    check "$name foreign: gc left LATEST (naming the newest, 3) alone" cmp -s "$T/latest" "$T/latest.back"
    # Nothing of the store's own is left of the generations gc dropped.
    own=
    for g in 1 2; do
        for k in COMMIT.json rank-0.json CLAIM.json; do
            rm -f "$T/own"
            $RAW get "$(printf '%s/gens/%08d/%s' "$JOB" "$g" "$k")" "$T/own" 2>/dev/null
            [ -s "$T/own" ] && own="$own $g/$k"
        done
    done
    expect_eq "$name foreign: no record, manifest or claim of generations 1 and 2 is left" "" "$own"
    ctl gc --grace 0s --keep 1 --json
    expect_eq "$name foreign: a second gc finds nothing of the store's own to delete" "0|0|1|9" \
        "$(jget "$(cat "$T/out")" gens_deleted)|$(jget "$(cat "$T/out")" chunks_deleted)|$(jget "$(cat "$T/out")" gens_kept)|$(jget "$(cat "$T/out")" foreign_objects)"
    ctl verify --gen 3
    expect_eq "$name foreign: generation 3 is whole after gc" 0 "$RC"
    ctl ls --json
    expect_eq "$name foreign: ls lists generation 3 alone" "3" "$(ls_gens "$T/out" | tr '\n' ' ' | sed 's/ $//')"
}
