/* criu_mem: a process with SIZE MiB of memory for tests/bench/criu.sh.
 *
 *   criu_mem SIZE_MIB [REWRITE_FILE [PERCENT]]
 *
 * Fills SIZE MiB with pseudo-random bytes (incompressible, like trained
 * weights), prints "ready", then a line every 100 ms, so that a restored
 * copy shows it runs.  When REWRITE_FILE appears it rewrites PERCENT (10)
 * of the memory in one stretch, removes the file and prints "rewrote": the
 * rest of its pages stay as they were, which is what deduplication across
 * generations can skip (a trainer that updates every weight each step
 * leaves nothing of the kind). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    size_t mib = argc >= 2 ? (size_t)atol(argv[1]) : 0, words, tick = 0;
    const char *flag = argc >= 3 ? argv[2] : NULL;
    size_t pct = argc >= 4 ? (size_t)atol(argv[3]) : 10;
    uint64_t x = 0x2545f4914f6cdd1dull, *mem;

    if (!mib || argc > 4 || pct < 1 || pct > 100) {
        fprintf(stderr, "usage: criu_mem SIZE_MIB [REWRITE_FILE [PERCENT]]\n");
        return 2;
    }
    words = mib << 17;
    if (!(mem = malloc(words * sizeof(*mem))))
        return 1;
    for (size_t i = 0; i < words; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        mem[i] = x;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        if (flag && access(flag, F_OK) == 0) {
            size_t n = words / 100 * pct;
            size_t from = (size_t)(x % (101 - pct)) * (words / 100);

            for (size_t i = from; i < from + n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                mem[i] = x;
            }
            unlink(flag);
            printf("rewrote %zu%%\n", pct);
        }
        printf("tick %zu\n", ++tick);
        fflush(stdout);
        usleep(100000);
    }
}
