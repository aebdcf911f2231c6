# What anyone who can write the bucket can put in a generation, restored
# and shown by the real spotctl and spotd: setuid programs and a world-
# writable directory (their bits dropped unless --preserve-special-modes),
# a link out of the tree, a path too long to restore whole, a 12 TiB file
# of holes (refused, nothing written), and control bytes, C1 and bytes that
# are not UTF-8 in paths, link targets and names (escaped when printed);
# and a save that meets a link a restore would refuse.
. "$(dirname "$0")/lib.sh"

S="file://$T/store"
mkdir -p "$T/store"

# gen.py STORE GEN KIND: write generation GEN of job j, rank 0, as its
# manifest and commit record, with digests that match.
cat >"$T/gen.py" <<'EOF'
import hashlib, os, sys

store, gen, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def s(b):
    """A JSON string of raw bytes: escapes for JSON's sake only."""
    if isinstance(b, str):
        b = b.encode()
    out = b'"'
    for c in b:
        if c < 0x20:
            out += b'\\u%04x' % c
        elif c in (0x22, 0x5c):
            out += b'\\' + bytes([c])
        else:
            out += bytes([c])
    return out + b'"'

def obj(pairs):
    return b'{' + b','.join(s(k) + b':' + v for k, v in pairs) + b'}'

def n(v):
    return str(v).encode()

def zeros(size, chunk):
    runs, left = [], size
    while left:
        runs.append(b'[' + n(min(chunk, left)) + b']')
        left -= min(chunk, left)
    return b'[' + b','.join(runs) + b']'

chunk = 8 << 20
files, reason = [], b'manual'
if kind == 'modes':
    files = [(b'bin', 'file', 0o6755, 10), (b'pub', 'dir', 0o1777, 0),
             (b'pub/w', 'file', 0o666, 0),
             (b'caf\xff \xc2\x9b1m', 'file', 0o644, 3),
             (b'latest', 'symlink', 0o777, b'x\x1b[31mred\x07\xe2\x80\xae')]
    reason = b'man"ual\xc2\x9b[2J'
elif kind == 'abs-link':
    files = [(b'etc', 'symlink', 0o777, b'/etc')]
elif kind == 'long-path':
    files = [(b'/'.join([b'p' * 200] * 20) + b'/' + b'q' * 70, 'file', 0o644, 0)]
elif kind == 'sparse':
    chunk = 64 << 20
    files = [(b'big', 'file', 0o644, 12 << 40)]
entries, total = [], 0
for path, typ, mode, extra in sorted(files):
    e = [('path', s(path)), ('type', s(typ)), ('mode', n(mode)), ('mtime', b'1796045255')]
    if typ == 'symlink':
        e.append(('target', s(extra)))
    if typ == 'file':
        e += [('size', n(extra)), ('chunks', zeros(extra, chunk))]
        total += extra
    entries.append(obj(e))
head = [('format', b'1'), ('kind', s('manifest')), ('job', s('j')), ('gen', n(gen)),
        ('created', s('2026-11-30T13:27:35.528Z')), ('spotd', s('0.1.0'))]
mf = obj(head + [('rank', b'0'), ('step', b'7'), ('method', s('manual')),
                 ('chunk_size', n(chunk)), ('files', b'[' + b','.join(entries) + b']')])
head[1] = ('kind', s('commit'))
commit = obj(head + [('step', b'7'), ('world_size', b'1'), ('reason', s(reason)),
                     ('method', s('manual')),
                     ('ranks', b'[' + obj([('rank', b'0'),
                                           ('sha256', s(hashlib.sha256(mf).hexdigest())),
                                           ('bytes', n(total))]) + b']')])
d = os.path.join(store, 'j', 'gens', '%08d' % gen)
os.makedirs(d, exist_ok=True)
open(os.path.join(d, 'rank-0.json'), 'wb').write(mf)
open(os.path.join(d, 'COMMIT.json'), 'wb').write(commit)
EOF
python3 "$T/gen.py" "$T/store" 1 modes
python3 "$T/gen.py" "$T/store" 2 abs-link
python3 "$T/gen.py" "$T/store" 3 long-path
python3 "$T/gen.py" "$T/store" 4 sparse

ctl() {
    timeout -k 2 60 "$SPOTCTL" "$@" --store "$S" --job j >"$T/out" 2>"$T/err"
    RC=$?
}
# raw FILE: it holds a control byte (tab and newline aside) or a byte that
# is not UTF-8, or C1 or a direction mark (valid UTF-8, still harmful).
raw() {
    python3 - "$1" <<'EOF'
import re, sys
b = open(sys.argv[1], 'rb').read()
try:
    t = b.decode('utf-8')
except UnicodeDecodeError:
    sys.exit(0)
sys.exit(0 if re.search('[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]', t) else 1)
EOF
}
valid_json() { jcheck "$1"; }
mode() { stat -c %a "$1" 2>/dev/null; }

# ---- show and ls: every stored string escaped ------------------------------------
ctl show --files --gen 1
expect_eq "show --files: exits 0" 0 "$RC"
check "show --files: no control byte, C1, direction mark or non-UTF-8 byte reaches the terminal" \
    eval '! raw "$T/out"'
check "show --files: the link target and the path, escaped as \\xNN" \
    eval 'grep -qF "latest -> x\\x1b[31mred\\x07\\xe2\\x80\\xae" "$T/out" &&
          grep -qF "caf\\xff \\xc2\\x9b1m" "$T/out"'
check "show: the commit record's reason, escaped" \
    eval 'grep -qF "man\"ual\\xc2\\x9b[2J" "$T/out"'
ctl show --json --files --gen 1
check "show --json: valid UTF-8 JSON, no raw byte" eval 'valid_json "$T/out" && ! raw "$T/out"'
expect_eq "show --json: strings escaped as the text is" 'x\x1b[31mred\x07\xe2\x80\xae|man"ual\xc2\x9b[2J' \
    "$(jq_ '[f for f in d["ranks"][0]["files"] if f["type"] == "symlink"][0]["target"] + "|" + d["reason"]' "$T/out")"
ctl ls
check "ls: the reason escaped" eval '[ $RC = 0 ] && ! raw "$T/out" && grep -qF "man\"ual\\xc2" "$T/out"'
ctl ls --json
check "ls --json: valid JSON though the reason holds a quote" \
    eval 'valid_json "$T/out" && ! raw "$T/out"'

# ---- fetch: special modes ----------------------------------------------------------
ctl fetch --gen 1 "$T/plain"
expect_eq "fetch: exits 0" 0 "$RC"
expect_eq "fetch: setuid and setgid dropped, sticky and others' write too" "755|775|664" \
    "$(mode "$T/plain/bin")|$(mode "$T/plain/pub")|$(mode "$T/plain/pub/w")"
ctl fetch --gen 1 --preserve-special-modes "$T/kept"
expect_eq "fetch --preserve-special-modes: the modes as stored" "6755|1777|666" \
    "$(mode "$T/kept/bin")|$(mode "$T/kept/pub")|$(mode "$T/kept/pub/w")"
SPOTD_PRESERVE_SPECIAL_MODES=true ctl fetch --gen 1 "$T/kept-env"
expect_eq "fetch: SPOTD_PRESERVE_SPECIAL_MODES=true does the same" "6755" "$(mode "$T/kept-env/bin")"
ctl show --preserve-special-modes
check "show takes no --preserve-special-modes" \
    eval '[ $RC = 2 ] && grep -q "show takes no --preserve-special-modes" "$T/err"'

# ---- fetch: refused, nothing written -----------------------------------------------
# none NAME: nothing named NAME or NAME.spotd-partial.* is in $T.
none() { [ -z "$(ls -A "$T" | grep "^$1")" ]; }
ctl fetch --gen 2 "$T/abs"
check "fetch: a link to an absolute target is refused, named, nothing written" \
    eval '[ $RC = 1 ] && grep -qF "refusing the link '\''etc'\'' -> '\''/etc'\''" "$T/err" && none abs'
ctl fetch --gen 3 "$T/long"
check "fetch: a path too long for PATH_MAX is refused, not cut, nothing written" \
    eval '[ $RC = 1 ] && grep -q "cannot restore '\''ppp.*exactly: its path under .* bytes, more than PATH_MAX" "$T/err" && none long'
ctl fetch --gen 4 "$T/sparse"
check "fetch: 12 TiB of holes the disk cannot hold are refused, nothing written" \
    eval '[ $RC = 1 ] && grep -q "declare 13194139533312 bytes.*free" "$T/err" && none sparse'

# ---- spotd: the option in its three spellings reaches the restore ------------------
# resume START ARGS...: spotctl resume, the command printing bin's mode.
resume() {
    timeout -k 2 60 "$SPOTCTL" resume --gen 1 --store "$S" --job j "$@" -- \
        sh -c 'stat -c %a "$SPOT_RESUME_DIR/bin"' >"$T/out" 2>"$T/err"
    RC=$?
}
resume --state-dir "$T/st1"
expect_eq "spotd: a resume drops setuid and setgid" "0|755" "$RC|$(tail -n 1 "$T/out")"
resume --state-dir "$T/st2" --preserve-special-modes
expect_eq "spotctl resume --preserve-special-modes: spotd keeps them" "0|6755" \
    "$RC|$(tail -n 1 "$T/out")"
printf '{"preserve_special_modes": true}\n' >"$T/spotd.json"
resume --state-dir "$T/st3" --config "$T/spotd.json"
expect_eq "spotd: \"preserve_special_modes\": true in the file keeps them" "0|6755" \
    "$RC|$(tail -n 1 "$T/out")"

# ---- save: a link that a restore would refuse is refused when it is made ----------
mkdir -p "$T/src/sub"
echo x >"$T/src/sub/f"
ln -s ../f "$T/src/sub/up"
ln -s /etc "$T/src/sub/etc"
ctl push "$T/src"
check "push: a link to an absolute target fails the save, named, with what to do" \
    eval '[ $RC = 1 ] && grep -qF "sub/etc'\'': the link leads to '\''/etc'\'', outside the checkpoint directory" "$T/err" &&
          grep -q "make it relative and inside" "$T/err"'
rm "$T/src/sub/etc"
ctl push "$T/src"
check "push: a link that climbs but stays inside is saved" eval '[ $RC = 0 ]'
