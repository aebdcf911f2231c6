/* The per-step cost of ckpt_step(): on an inert handle, and connected to a
 * peer that has sent nothing since its welcome (the common case: one
 * non-blocking recv() per step).  The peer is a child process on a real
 * Unix socket.  Prints a table; the goal (issue 5) is under 1 us a step.
 *
 *   ckpt_step [STEPS]      default 2000000 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double per_step(struct ckpt *c, long n)
{
    double t0 = now();

    for (long s = 0; s < n; s++)
        if (ckpt_step(c, s) != CKPT_CONTINUE) {
            fprintf(stderr, "ckpt_step: unexpected answer at step %ld\n", s);
            exit(1);
        }
    return (now() - t0) / (double)n * 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    char dir[] = "/tmp/spotd-bench.XXXXXX", path[64];
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct ckpt *c, *inert;
    double ns_conn, ns_inert;
    int l, status;
    pid_t pid;

    if (n < 1000 || !mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/ctl.sock", dir);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    l = socket(AF_UNIX, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0)
        return 1;
    pid = fork();
    if (pid == 0) {
        static const char w[] =
            "{\"v\":1,\"type\":\"welcome\",\"resume_dir\":null,\"resume_step\":null,\"gen\":null}\n";
        char buf[512];
        int fd = accept(l, NULL, NULL);

        if (fd < 0 || read(fd, buf, sizeof(buf)) <= 0 || write(fd, w, sizeof(w) - 1) < 0)
            _exit(1);
        while (read(fd, buf, sizeof(buf)) > 0)
            ;
        _exit(0);
    }
    if (ckpt_open_at(path, &c) != 0 || ckpt_open_at(NULL, &inert) != 0) {
        fprintf(stderr, "ckpt_open_at failed\n");
        return 1;
    }
    per_step(c, n / 10); /* warm up */
    ns_conn = per_step(c, n);
    ns_inert = per_step(inert, n * 10);
    ckpt_close(c);
    ckpt_close(inert);
    waitpid(pid, &status, 0);
    unlink(path);
    rmdir(dir);
    printf("%-34s %12s\n", "ckpt_step()", "ns per step");
    printf("%-34s %12.1f\n", "inert (not under spotd)", ns_inert);
    printf("%-34s %12.1f\n", "connected, nothing pending", ns_conn);
    printf("goal: connected under 1000 ns per step: %s\n", ns_conn < 1000 ? "PASS" : "MISS");
    return 0;
}
