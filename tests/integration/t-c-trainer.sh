# examples/c-trainer with libckpt against a scripted spotd
# (tests/integration/c_trainer.py): save, stop, resume, same final hash.
. "$(dirname "$0")/lib.sh"

python3 "$TOP/tests/integration/c_trainer.py" "$TOP/$O/examples/c-trainer/trainer" || true
