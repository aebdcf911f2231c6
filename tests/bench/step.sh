#!/usr/bin/env bash
# The per-step cost of libckpt's ckpt_step() (tests/bench/ckpt_step.c): a
# table of ns per step, inert and connected.  Exits 0 whatever the numbers.
set -eu
cd "$(dirname "$0")/../.."
O=${O:-build}
make -s O="$O" "$O/libckpt.a" >/dev/null
mkdir -p "$O/tests/bench"
${CC:-cc} -O2 -Iinclude -o "$O/tests/bench/ckpt_step" tests/bench/ckpt_step.c "$O/libckpt.a"
"$O/tests/bench/ckpt_step" "${BENCH_STEPS:-2000000}"
