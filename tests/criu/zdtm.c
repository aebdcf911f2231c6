/* zdtm: a test program in the style of CRIU's zdtm, for the criu method.
 *
 *   zdtm STEPS FILE
 *
 * It keeps state of every kind a snapshot must carry, works through STEPS
 * steps, checks the state at every step, and prints "done STEPS hash H"
 * at the end, H the same for every run that was not damaged:
 *
 *   memory    16 MiB, a region rewritten each step from a PRNG
 *   a file    FILE, opened once, 4096 bytes, one slot rewritten each step
 *             (its size never changes: CRIU checks it at the restore)
 *   a child   a process of its own that answers each step over two pipes
 *             and counts the questions it got
 *   a timer   an interval timer (SIGALRM) that must still tick at the end
 *             (not a timerfd: CRIU 4.2 restores a periodic timerfd disarmed,
 *             docs/methods.md)
 *
 * ZDTM_STEP_US (default 2000) paces the steps.  Exit 1 with a message on
 * stderr when any check fails. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define MEM (16u << 20)
#define SLOTS 512

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static volatile sig_atomic_t ticks;

static void on_alarm(int sig)
{
    ticks++;
}

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void fail(const char *what, long long step)
{
    fprintf(stderr, "zdtm: %s at step %lld\n", what, step);
    exit(1);
}

static void child(int in, int out)
{
    uint64_t q, count = 0;

    for (;;) {
        ssize_t n = read(in, &q, sizeof(q));
        if (n == 0)
            _exit(0);
        if (n != sizeof(q))
            _exit(2);
        if (q == UINT64_MAX) {
            /* The count, and out. */
            if (write(out, &count, sizeof(count)) != sizeof(count))
                _exit(2);
            _exit(0);
        }
        count++;
        q = q * 3 + 1;
        if (write(out, &q, sizeof(q)) != sizeof(q))
            _exit(2);
    }
}

int main(int argc, char **argv)
{
    long long steps = argc == 3 ? atoll(argv[1]) : 0;
    const char *us = getenv("ZDTM_STEP_US");
    useconds_t step_us = us ? (useconds_t)atol(us) : 2000;
    uint64_t mirror[SLOTS] = { 0 }, disk[SLOTS], h = 0xcbf29ce484222325ull, q;
    struct itimerval its = { { 0, 10 * 1000 }, { 0, 10 * 1000 } };
    struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
    int to[2], from[2], fd, status;
    unsigned char *mem;
    pid_t pid;

    if (steps <= 0) {
        fprintf(stderr, "usage: zdtm STEPS FILE\n");
        return 2;
    }
    if (!(mem = calloc(1, MEM)))
        fail("out of memory", 0);
    fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || pwrite(fd, mirror, sizeof(mirror), 0) != sizeof(mirror))
        fail("cannot set up the file", 0);
    if (pipe(to) < 0 || pipe(from) < 0)
        fail("pipe", 0);
    if ((pid = fork()) < 0)
        fail("fork", 0);
    if (pid == 0) {
        close(to[1]);
        close(from[0]);
        child(to[0], from[1]);
    }
    close(to[0]);
    close(from[1]);
    if (sigaction(SIGALRM, &sa, NULL) < 0 || setitimer(ITIMER_REAL, &its, NULL) < 0)
        fail("setitimer", 0);
    printf("zdtm: pid %d, child %d\n", (int)getpid(), (int)pid);
    fflush(stdout);
    for (long long s = 0; s < steps; s++) {
        size_t off = (size_t)(next() % (MEM - 4096));
        uint64_t v = next();

        /* memory */
        for (size_t i = 0; i < 4096; i += 8)
            memcpy(mem + off + i, &v, 8), v = v * 6364136223846793005ull + 1;
        h = fnv(h, mem + off, 4096);
        /* the file */
        mirror[s % SLOTS] = (uint64_t)s * 2654435761u;
        if (pwrite(fd, &mirror[s % SLOTS], 8, (off_t)(s % SLOTS) * 8) != 8)
            fail("cannot write the file", s);
        if (s % 64 == 63) {
            if (pread(fd, disk, sizeof(disk), 0) != sizeof(disk) ||
                memcmp(disk, mirror, sizeof(disk)) != 0)
                fail("the file does not hold what was written", s);
        }
        /* the child */
        q = (uint64_t)s;
        if (write(to[1], &q, sizeof(q)) != sizeof(q) || read(from[0], &q, sizeof(q)) != sizeof(q))
            fail("the child does not answer", s);
        if (q != (uint64_t)s * 3 + 1)
            fail("the child answers wrong", s);
        h = fnv(h, &q, sizeof(q));
        if (s % 500 == 0) {
            printf("step %lld\n", s);
            fflush(stdout);
        }
        usleep(step_us);
    }
    /* The timer still ticks, the child counted every step. */
    {
        sig_atomic_t before = ticks;
        for (int i = 0; i < 200 && ticks == before; i++)
            usleep(10000);
        if (ticks == before)
            fail("the timer no longer ticks", steps);
    }
    q = UINT64_MAX;
    if (write(to[1], &q, sizeof(q)) != sizeof(q) || read(from[0], &q, sizeof(q)) != sizeof(q))
        fail("the child does not say its count", steps);
    if (q != (uint64_t)steps)
        fail("the child's count is wrong", steps);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("the child did not end well", steps);
    h = fnv(h, mirror, sizeof(mirror));
    printf("done %lld hash %016" PRIx64 "\n", steps, h);
    return 0;
}
