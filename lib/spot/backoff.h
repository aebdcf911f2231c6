/* backoff: the delays of every retry loop: exponential, capped, and with
 * jitter so that a fleet of nodes that failed together does not retry in
 * step.  No I/O and no hidden state: the caller keeps the generator's
 * state, so unit tests drive it directly. */
#ifndef SPOT_BACKOFF_H
#define SPOT_BACKOFF_H

#include <stdint.h>

/* The delay before try `attempt` + 1 after `attempt` failures in a row
 * (attempt 0: base_ms): base_ms doubled per failure, at most cap_ms, then
 * drawn from its upper half, [d/2, d], with rnd.  base_ms 0 counts as 1. */
uint64_t backoff_delay(uint64_t base_ms, unsigned attempt, uint64_t cap_ms, uint64_t rnd);

/* A seed that differs between processes and between calls. */
uint64_t backoff_seed(void);

/* The next number of xorshift64* from *state (never 0: a 0 state is
 * reseeded); jitter needs no more. */
uint64_t backoff_rand(uint64_t *state);

#endif
