/* clockstep: steps the wall clock of one process tree, for tests (an
 * LD_PRELOAD library; never sanitized, so that it loads into every build).
 *
 *   LD_PRELOAD=$O/tests/clockstep/clockstep.so SPOT_TEST_CLOCK_FILE=FILE cmd...
 *
 * FILE holds one signed integer, milliseconds: the offset added to the
 * wall clock (CLOCK_REALTIME and CLOCK_REALTIME_COARSE in clock_gettime,
 * gettimeofday, time, timespec_get), as an NTP step would move it.
 * CLOCK_MONOTONIC and the other clocks are left alone.  Write the file
 * aside and rename it over (tests/integration/t-world-peer.sh, clock_step):
 * the library looks at it at most every 10 ms of CLOCK_MONOTONIC, rereads
 * it when its inode, size or mtime changed, and keeps the last offset it
 * read when the file is missing or does not hold a number.  Children
 * inherit the environment, so a node's command is stepped with it, as on
 * a machine whose clock was stepped.
 *
 * Under AddressSanitizer, also set ASAN_OPTIONS=verify_asan_link_order=0:
 * the runtime insists on being the first library otherwise. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define CHECK_EVERY_NS (10 * 1000 * 1000LL)

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime(void)
{
    static clock_gettime_fn fn;

    if (!fn)
        fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    return fn;
}

static int64_t offset_ns_now; /* what the file said last, in ns */
static int64_t checked_at;    /* CLOCK_MONOTONIC ns of the last look */
static struct stat seen;
static int busy;              /* one thread looks at a time; the others use offset_ns_now */

static void reread(void)
{
    const char *path = getenv("SPOT_TEST_CLOCK_FILE");
    char buf[64], *end;
    struct stat st;
    long long ms;
    ssize_t n;
    int fd;

    if (!path || stat(path, &st) != 0)
        return;
    if (st.st_ino == seen.st_ino && st.st_size == seen.st_size &&
        st.st_mtim.tv_sec == seen.st_mtim.tv_sec && st.st_mtim.tv_nsec == seen.st_mtim.tv_nsec)
        return;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    errno = 0;
    ms = strtoll(buf, &end, 10);
    if (errno || end == buf || (*end && *end != '\n' && *end != ' '))
        return;
    seen = st;
    __atomic_store_n(&offset_ns_now, (int64_t)ms * 1000000, __ATOMIC_RELAXED);
}

static int64_t offset_ns(void)
{
    struct timespec now;
    int64_t t;
    clock_gettime_fn fn = real_clock_gettime();

    if (fn && fn(CLOCK_MONOTONIC, &now) == 0) {
        t = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
        if (t - __atomic_load_n(&checked_at, __ATOMIC_RELAXED) >= CHECK_EVERY_NS &&
            !__atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE)) {
            int saved = errno;
            reread();
            errno = saved;
            __atomic_store_n(&checked_at, t, __ATOMIC_RELAXED);
            __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
        }
    }
    return __atomic_load_n(&offset_ns_now, __ATOMIC_RELAXED);
}

static void add(struct timespec *ts, int64_t ns)
{
    int64_t t = ts->tv_nsec + ns % 1000000000;

    ts->tv_sec += (time_t)(ns / 1000000000 + (t < 0 ? -1 : t >= 1000000000 ? 1 : 0));
    ts->tv_nsec = (long)(t < 0 ? t + 1000000000 : t >= 1000000000 ? t - 1000000000 : t);
}

EXPORT int clock_gettime(clockid_t clk, struct timespec *ts)
{
    clock_gettime_fn fn = real_clock_gettime();
    int r;

    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    r = fn(clk, ts);
    if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
        add(ts, offset_ns());
    return r;
}

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    struct timespec ts;

    if (tz)
        memset(tz, 0, sizeof(struct timezone));
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

EXPORT time_t time(time_t *out)
{
    struct timespec ts;
    time_t t = clock_gettime(CLOCK_REALTIME, &ts) == 0 ? ts.tv_sec : (time_t)-1;

    if (out)
        *out = t;
    return t;
}

EXPORT int timespec_get(struct timespec *ts, int base)
{
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0)
        return 0;
    return base;
}
