# lib/python/libckpt.py, the pure-Python libckpt, against a scripted spotd
# on a real Unix socket (tests/integration/libckpt_py.py).
. "$(dirname "$0")/lib.sh"

python3 "$TOP/tests/integration/libckpt_py.py" || true
