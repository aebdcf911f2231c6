/* A small deterministic trainer that uses libckpt.
 *
 *   trainer STEPS [STATE_MIB]
 *
 * Its "model" is STATE_MIB MiB (default 4) of 32-bit numbers, all updated
 * every step by a fixed rule, so the state after N steps is the same
 * whether the run was interrupted and resumed or not.  It prints
 * "done STEPS hash H" at the end, H a hash of the state.
 *
 * Under spotd (SPOT_SOCKET set): it resumes from ckpt_resume_dir(), saves
 * when ckpt_step() says SAVE (state.bin and step, written then fsync'ed),
 * and exits 75 (EX_TEMPFAIL: preempted, state saved) on STOP.  With
 * TRAINER_REQUEST_AT=N it asks for a checkpoint itself at step N
 * (ckpt_request_save()), as a trainer on its own schedule would. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"

#define EXIT_PREEMPTED 75

static uint32_t *state;
static size_t words;

static void init(void)
{
    for (size_t i = 0; i < words; i++)
        state[i] = (uint32_t)(i * 2654435761u) ^ 0x9e3779b9u;
}

/* One step: every word mixed with its neighbour and the step number. */
static void train(long long step)
{
    uint32_t carry = (uint32_t)step * 0x85ebca6bu;

    for (size_t i = 0; i < words; i++) {
        uint32_t x = state[i] ^ carry;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        state[i] = x;
        carry = x + (uint32_t)i;
    }
}

static uint64_t hash(void)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)state;

    for (size_t i = 0; i < words * sizeof(*state); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[4096];
    int fd, r = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < len && r == 0;) {
        ssize_t n = write(fd, (const char *)data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            r = -1;
        else
            off += (size_t)n;
    }
    if (fsync(fd) < 0)
        r = -1;
    close(fd);
    return r;
}

static int save(const char *dir, long long step)
{
    char s[32];
    int n = snprintf(s, sizeof(s), "%lld\n", step);

    return write_file(dir, "state.bin", state, words * sizeof(*state)) < 0 ||
                   write_file(dir, "step", s, (size_t)n) < 0
               ? -1
               : 0;
}

static int load(const char *dir)
{
    char path[4096];
    FILE *f;
    size_t got;

    snprintf(path, sizeof(path), "%s/state.bin", dir);
    if (!(f = fopen(path, "rb")))
        return -1;
    got = fread(state, sizeof(*state), words, f);
    fclose(f);
    return got == words ? 0 : -1;
}

int main(int argc, char **argv)
{
    long long steps = argc > 1 ? atoll(argv[1]) : 0, step = 0, request_at = -1;
    long mib = argc > 2 ? atol(argv[2]) : 4;
    struct ckpt *c;
    int r;

    if (steps <= 0 || mib <= 0 || mib > 65536) {
        fprintf(stderr, "usage: trainer STEPS [STATE_MIB]\n");
        return 2;
    }
    words = (size_t)mib * 1024 * 1024 / sizeof(*state);
    if (!(state = malloc(words * sizeof(*state))))
        return 1;
    if ((r = ckpt_open(&c)) < 0) {
        fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(r));
        return 1;
    }
    if (getenv("TRAINER_REQUEST_AT"))
        request_at = atoll(getenv("TRAINER_REQUEST_AT"));
    init();
    if (ckpt_resume_dir(c)) {
        if (load(ckpt_resume_dir(c)) < 0) {
            fprintf(stderr, "trainer: cannot load %s\n", ckpt_resume_dir(c));
            return 1;
        }
        step = ckpt_resume_step(c) + 1;
        printf("resumed at step %lld from %s\n", step, ckpt_resume_dir(c));
    }
    for (; step < steps; step++) {
        int a = ckpt_step(c, step);

        if (a == CKPT_SAVE) {
            /* The state as it is before this step: steps 0..step-1 ran. */
            if (save(ckpt_save_dir(c), step - 1) == 0)
                r = ckpt_saved(c, step - 1);
            else
                r = ckpt_failed(c, strerror(errno));
            if (r < 0)
                fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(r));
            a = ckpt_step(c, step);
        }
        if (a == CKPT_STOP) {
            printf("stopped at step %lld\n", step);
            ckpt_close(c);
            return EXIT_PREEMPTED;
        }
        if (a < 0 && a != CKPT_E_CLOSED)
            fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(a));
        if (step == request_at && (r = ckpt_request_save(c)) < 0)
            fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(r));
        train(step);
    }
    printf("done %lld hash %016" PRIx64 "\n", steps, hash());
    ckpt_close(c);
    free(state);
    return 0;
}
