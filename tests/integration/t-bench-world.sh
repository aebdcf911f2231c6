# tests/bench/world.sh in miniature: a round in a world of two real spotd,
# and one in a world of a real coordinator and seven ranks of the load
# generator (tests/bench/worldgen.py), so the bench keeps speaking the peer
# protocol spotd speaks (it once lacked the state message and every
# generated world waited for ever).  The numbers are not judged here.
. "$(dirname "$0")/lib.sh"

BENCH_WORLDS="2 8" BENCH_REAL_MAX=2 BENCH_COMPARE=0 BENCH_ROUNDS=1 BENCH_MIB=1 \
    BENCH_STEP_US=2000 BENCH_WARM=0 TMPDIR=$T O=$O \
    timeout -k 5 300 "$TOP/tests/bench/world.sh" >"$T/out" 2>&1
rc=$?
expect_eq "bench world: world.sh ends well" 0 "$rc"
[ "$rc" = 0 ] || tail -n 15 "$T/out"
check "bench world: a world of two spotd ends its round" grep -Eq '^ +2 2 spotd +1/1 ' "$T/out"
check "bench world: a world of spotd and seven generated ranks ends its round" \
    grep -Eq '^ +8 1 spotd\+7 gen +1/1 ' "$T/out"
check "bench world: the goals are printed" grep -q '^goal: replicated state uploaded' "$T/out"
check "bench world: nothing of the bench is left running" wait_for 10 none_left
