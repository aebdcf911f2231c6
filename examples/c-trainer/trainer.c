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
 * (ckpt_request_save()), as a trainer on its own schedule would.
 *
 * The other methods, for the tests and as examples:
 *
 *   TRAINER_METHOD=signal  SIGUSR1 makes it save into SPOT_CKPT_DIR at the
 *                          next step and then write the step into
 *                          SPOT_CKPT_MARKER (spotd --method signal), or,
 *                          with TRAINER_REPORT=libckpt, call ckpt_saved()
 *   TRAINER_METHOD=dir     it saves SPOT_CKPT_DIR/checkpoint-<step>/ every
 *                          TRAINER_SAVE_EVERY steps (default 500), with the
 *                          marker .spotd-complete when TRAINER_MARKER=1
 *                          (spotd --method dir)
 *
 * Both resume from SPOT_RESUME_DIR and SPOT_RESUME_STEP, without libckpt.
 * Faults, for the tests: TRAINER_CRASH_AT=N exits 3 at step N unless the
 * file TRAINER_CRASH_FLAG exists (it is created: one crash);
 * TRAINER_SAVE_CRASH=N dies in the middle of its N-th save (libckpt or
 * signal), leaving a cut state.bin (once, with TRAINER_CRASH_FLAG);
 * TRAINER_CRASH_WAIT=FILE waits at step TRAINER_CRASH_AT until FILE
 * exists before it crashes (a test does something first); TRAINER_IGNORE_SAVE=1
 * never answers a save request; TRAINER_SAVE_SLEEP_MS=N takes N ms more
 * over each libckpt save; TRAINER_TIMES=1 reports how long each libckpt
 * save took, beside a memcpy of the state; TRAINER_IGNORE_STOP=1 trains on when told to
 * stop; TRAINER_STEP_US=N sleeps N us more per step.  A step sleeps 2.5 ns
 * a word of state by default (the pace of a step on the GPU), TRAINER_PACE=0
 * not at all (a reference run: as fast as the CPU goes). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* One step: every word mixed with the step number and its place.  The
 * words do not depend on each other, so the loop runs at the memory's
 * speed; a step's time is mostly the pacing below, like a trainer waiting
 * on its GPU, not CPU that the tests running beside it need. */
static void train(long long step)
{
    uint32_t k = (uint32_t)step * 0x85ebca6bu;

    for (size_t i = 0; i < words; i++) {
        uint32_t x = state[i] ^ (k + (uint32_t)i * 0x9e3779b9u);
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        state[i] = x;
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

static volatile sig_atomic_t save_asked;

static void on_usr1(int sig)
{
    save_asked = 1;
}

static long long env_ll(const char *name, long long def)
{
    const char *v = getenv(name);

    return v && *v ? atoll(v) : def;
}

static int crash_flag(void);

/* TRAINER_SAVE_CRASH=N: the N-th save writes 4 KiB of state.bin in
 * place and dies there. */
static void maybe_save_crash(const char *dir)
{
    static long long saves;
    const char *n = getenv("TRAINER_SAVE_CRASH");
    char path[4096];
    int fd;

    if (!n || ++saves != atoll(n) || crash_flag() < 0)
        return;
    snprintf(path, sizeof(path), "%s/state.bin", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && write(fd, state, 4096) < 0)
        fprintf(stderr, "trainer: %s\n", strerror(errno));
    fprintf(stderr, "trainer: dying in the middle of a save (TRAINER_SAVE_CRASH)\n");
    _exit(4);
}

static double now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* TRAINER_TIMES=1: how long a save blocked it, beside what a memcpy of
 * the state takes, into memory touched before (warm) and into memory just
 * allocated (fresh: its page faults too), for tests/bench/stage.sh. */
static void report_times(long long step, double save_ms)
{
    size_t len = words * sizeof(*state);
    static char *warm;
    double t0, warm_ms, fresh_ms;
    char *fresh;

    if (!warm && (warm = malloc(len)))
        memset(warm, 1, len);
    fresh = malloc(len);
    if (!warm || !fresh) {
        free(fresh);
        return;
    }
    t0 = now_ms();
    memcpy(warm, state, len);
    warm_ms = now_ms() - t0;
    t0 = now_ms();
    memcpy(fresh, state, len);
    fresh_ms = now_ms() - t0;
    /* Used, so that neither copy is optimised away. */
    fprintf(stderr, "trainer: times: step %lld save_ms %.1f memcpy_ms %.1f fresh_ms %.1f (%d)\n",
            step, save_ms, warm_ms, fresh_ms, warm[len - 1] + fresh[len / 2]);
    free(fresh);
}

/* TRAINER_METHOD=signal: save when SIGUSR1 came, then the marker (or
 * ckpt_saved()). */
static void signal_save(struct ckpt *c, long long step)
{
    const char *dir = getenv("SPOT_CKPT_DIR"), *marker = getenv("SPOT_CKPT_MARKER");
    char s[32];
    int n = snprintf(s, sizeof(s), "%lld\n", step);
    char *slash;

    if (dir)
        maybe_save_crash(dir);
    if (!dir || !marker || save(dir, step) < 0) {
        fprintf(stderr, "trainer: cannot save into SPOT_CKPT_DIR: %s\n", strerror(errno));
        return;
    }
    if (getenv("TRAINER_REPORT") && strcmp(getenv("TRAINER_REPORT"), "libckpt") == 0) {
        int r = ckpt_saved(c, step);
        if (r < 0)
            fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(r));
        return;
    }
    slash = strrchr(marker, '/');
    if (!slash || write_file(dir, slash + 1, s, (size_t)n) < 0)
        fprintf(stderr, "trainer: cannot write the marker: %s\n", strerror(errno));
}

/* TRAINER_METHOD=dir: a checkpoint folder of its own. */
static void dir_save(long long step)
{
    const char *dir = getenv("SPOT_CKPT_DIR");
    char sub[4096];

    if (!dir)
        return;
    snprintf(sub, sizeof(sub), "%s/checkpoint-%lld", dir, step);
    if (mkdir(sub, 0755) < 0 || save(sub, step) < 0 ||
        (env_ll("TRAINER_MARKER", 0) && write_file(sub, ".spotd-complete", "", 0) < 0))
        fprintf(stderr, "trainer: cannot save %s: %s\n", sub, strerror(errno));
}

/* TRAINER_CRASH_FLAG: 0 the first time, -1 after (or without one). */
static int crash_flag(void)
{
    const char *flag = getenv("TRAINER_CRASH_FLAG");
    int fd;

    if (!flag)
        return getenv("TRAINER_SAVE_CRASH") ? 0 : -1;
    if ((fd = open(flag, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
        return -1;
    close(fd);
    return 0;
}

/* TRAINER_CRASH_AT: crash once. */
static void maybe_crash(long long step)
{
    const char *wait = getenv("TRAINER_CRASH_WAIT");

    if (step != env_ll("TRAINER_CRASH_AT", -1) || !getenv("TRAINER_CRASH_FLAG") ||
        crash_flag() < 0)
        return;
    for (int i = 0; wait && i < 6000 && access(wait, F_OK) < 0; i++)
        usleep(10000);
    fprintf(stderr, "trainer: crashing at step %lld (TRAINER_CRASH_AT)\n", step);
    exit(3);
}

int main(int argc, char **argv)
{
    long long steps = argc > 1 ? atoll(argv[1]) : 0, step = 0, request_at = -1;
    long mib = argc > 2 ? atol(argv[2]) : 4;
    const char *method = getenv("TRAINER_METHOD") ? getenv("TRAINER_METHOD") : "app";
    bool app = strcmp(method, "app") == 0;
    long long every = env_ll("TRAINER_SAVE_EVERY", 500), sleep_us = env_ll("TRAINER_STEP_US", 0);
    struct ckpt *c;
    double t0;
    int r;

    if (steps <= 0 || mib <= 0 || mib > 65536) {
        fprintf(stderr, "usage: trainer STEPS [STATE_MIB]\n");
        return 2;
    }
    words = (size_t)mib * 1024 * 1024 / sizeof(*state);
    if (!(state = malloc(words * sizeof(*state))))
        return 1;
    /* The pace: 2.5 ns a word of state per step, slept, on top of
     * TRAINER_STEP_US: what a step took in CPU when its words were chained
     * one to the next, so that the tests see the same cadence of steps,
     * saves and folders. */
    if (env_ll("TRAINER_PACE", 1))
        sleep_us += (long long)(words * 5 / 2000);
    if (!app) {
        /* libckpt inert: the other methods do without, unless told */
        if (!getenv("TRAINER_REPORT"))
            unsetenv("SPOT_SOCKET");
        signal(SIGUSR1, on_usr1);
    }
    if ((r = ckpt_open(&c)) < 0) {
        fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(r));
        return 1;
    }
    if (getenv("TRAINER_REQUEST_AT"))
        request_at = atoll(getenv("TRAINER_REQUEST_AT"));
    init();
    {
        const char *rdir = app ? ckpt_resume_dir(c) : getenv("SPOT_RESUME_DIR");
        long long rstep = app ? ckpt_resume_step(c) : env_ll("SPOT_RESUME_STEP", -1);

        if (rdir) {
            if (load(rdir) < 0) {
                fprintf(stderr, "trainer: cannot load %s\n", rdir);
                return 1;
            }
            step = rstep + 1;
            printf("resumed at step %lld from %s\n", step, rdir);
        }
    }
    for (; step < steps; step++) {
        int a = ckpt_step(c, step);

        maybe_crash(step);
        if (save_asked) {
            save_asked = 0;
            signal_save(c, step - 1);
        }
        if (!app && strcmp(method, "dir") == 0 && step > 0 && step % every == 0)
            dir_save(step - 1);
        if (a == CKPT_SAVE && getenv("TRAINER_IGNORE_SAVE")) {
            a = CKPT_CONTINUE;
        }
        if (a == CKPT_SAVE) {
            maybe_save_crash(ckpt_save_dir(c));
            /* A slow disk, for the tests of the world's takeover. */
            if (env_ll("TRAINER_SAVE_SLEEP_MS", 0) > 0)
                usleep((useconds_t)env_ll("TRAINER_SAVE_SLEEP_MS", 0) * 1000);
            /* The state as it is before this step: steps 0..step-1 ran. */
            t0 = now_ms();
            if (step == 0)
                /* Asked before its first step (a notice during a long
                 * start): no step has run, and a fresh start is this. */
                r = ckpt_failed(c, "no step has run yet");
            else if (save(ckpt_save_dir(c), step - 1) == 0)
                r = ckpt_saved(c, step - 1);
            else
                r = ckpt_failed(c, strerror(errno));
            if (r < 0)
                fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(r));
            if (getenv("TRAINER_TIMES"))
                report_times(step - 1, now_ms() - t0);
            a = ckpt_step(c, step);
        }
        if (a == CKPT_STOP && getenv("TRAINER_IGNORE_STOP"))
            a = CKPT_CONTINUE;
        if (a == CKPT_STOP) {
            printf("stopped at step %lld\n", step);
            ckpt_close(c);
            return EXIT_PREEMPTED;
        }
        if (a < 0 && a != CKPT_E_CLOSED)
            fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(a));
        if (step == request_at && (r = ckpt_request_save(c)) < 0)
            fprintf(stderr, "trainer: libckpt: %s\n", ckpt_strerror(r));
        /* The step's own time, after any save: a save asked for at this
         * step holds the state before it. */
        if (sleep_us > 0)
            usleep((useconds_t)sleep_us);
        train(step);
    }
    printf("done %lld hash %016" PRIx64 "\n", steps, hash());
    ckpt_close(c);
    free(state);
    return 0;
}
