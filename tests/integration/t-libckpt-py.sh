# lib/python/libckpt.py, the pure-Python libckpt, against a scripted spotd
# on a real Unix socket (tests/integration/libckpt_py.py).
. "$(dirname "$0")/lib.sh"

# Its checks print PASS and FAIL; one that dies on the way prints no FAIL.
python3 "$TOP/tests/integration/libckpt_py.py" >"$T/py.out" 2>"$T/py.err"
rc=$?
cat "$T/py.out"
[ "$rc" -eq 0 ] || grep -q '^FAIL: ' "$T/py.out" ||
    fail "libckpt.py: the script ran to its end" "exit $rc: $(tail -n 1 "$T/py.err")"
