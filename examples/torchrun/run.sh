#!/bin/sh
# An unchanged DDP trainer under torchrun and spotd, with flags only: no
# wrapper, no spotd import.  ../plain/train.py saves ckpt-NNNNNNNN.pt into
# CKPT_DIR every SAVE_EVERY steps (global rank 0 writes), resumes from the
# newest one there, and on SIGTERM saves at the next step and exits 75.
#
#   run.sh STORE_URL CKPT_DIR [STEPS]
#
# spotd uploads each checkpoint as it appears; at a notice it sends SIGTERM
# to the workers (not to torchrun), and the checkpoint they save before
# they exit is the last generation.  On a replacement node the same line
# puts that checkpoint back into CKPT_DIR before torchrun starts.  Any other
# spotd option comes from the environment (SPOTD_JOB, SPOTD_STATE_DIR,
# SPOTD_CLOUD...); NPROC (2) and MASTER_PORT (29500) go to torchrun.
set -eu
[ $# -ge 2 ] || { echo "usage: run.sh STORE_URL CKPT_DIR [STEPS]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
store=$1 ckpt=$2 steps=${3:-100000}
mkdir -p "$ckpt"
exec spotd run --job "${SPOTD_JOB:-torchrun-example}" --store "$store" \
    --method dir --ckpt-dir "$ckpt" --saved-when exit -- \
    env CKPT_DIR="$ckpt" torchrun --nnodes 1 --nproc_per_node "${NPROC:-2}" \
    --master_addr 127.0.0.1 --master_port "${MASTER_PORT:-29500}" \
    --redirects 9:0 --tee 9:0 --monitor_interval 1 "$here/../plain/train.py" "$steps"
