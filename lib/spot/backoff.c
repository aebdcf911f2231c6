/* backoff: see backoff.h. */
#include "spot/backoff.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

uint64_t backoff_delay(uint64_t base_ms, unsigned attempt, uint64_t cap_ms, uint64_t rnd)
{
    uint64_t d = base_ms ? base_ms : 1;

    if (cap_ms == 0)
        cap_ms = 1;
    for (unsigned i = 0; i < attempt && d < cap_ms; i++)
        d *= 2;
    if (d > cap_ms)
        d = cap_ms;
    return d - rnd % (d / 2 + 1);
}

uint64_t backoff_seed(void)
{
    static uint64_t calls;
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
           ((uint64_t)getpid() << 32) ^ (++calls * 0x9E3779B97F4A7C15ULL);
}

uint64_t backoff_rand(uint64_t *state)
{
    uint64_t x = *state;

    if (!x)
        x = backoff_seed() | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}
