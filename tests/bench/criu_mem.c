/* criu_mem: a process with SIZE MiB of memory for tests/bench/criu.sh.
 *
 *   criu_mem SIZE_MIB
 *
 * Fills SIZE MiB with pseudo-random bytes (incompressible, like trained
 * weights), prints "ready", then rewrites 1 % of it, in one stretch, every
 * second (the rest of its pages stay as they were: what deduplication
 * across generations can skip; a trainer that updates every weight each
 * step leaves nothing of the kind), and prints a line every 100 ms, so that
 * a restored copy shows it runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    size_t mib = argc == 2 ? (size_t)atol(argv[1]) : 0, words, tick = 0;
    uint64_t x = 0x2545f4914f6cdd1dull, *mem;

    if (!mib) {
        fprintf(stderr, "usage: criu_mem SIZE_MIB\n");
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
        if (++tick % 10 == 0) {
            /* 1 % in one stretch: the rest of the pages stay as they were. */
            size_t from = (size_t)(x % 100) * (words / 100);
            for (size_t i = from; i < from + words / 100; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                mem[i] = x;
            }
        }
        printf("tick %zu\n", tick);
        fflush(stdout);
        usleep(100000);
    }
}
