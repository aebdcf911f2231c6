#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "spot/proc.h"

static bool has(const pid_t *pids, size_t n, pid_t p)
{
    for (size_t i = 0; i < n; i++)
        if (pids[i] == p)
            return true;
    return false;
}

/* A child that forks a grandchild; both wait to be killed.  The pipe says
 * the grandchild's pid once it exists. */
TEST(proc_tree)
{
    pid_t child, grandchild = 0, pids[64];
    int fds[2];
    size_t n;

    CHECK_INT(pipe(fds), 0);
    child = fork();
    if (child == 0) {
        pid_t g = fork();

        if (g == 0) {
            pause();
            _exit(0);
        }
        if (write(fds[1], &g, sizeof(g)) != (ssize_t)sizeof(g))
            _exit(1);
        pause();
        _exit(0);
    }
    CHECK(child > 0);
    CHECK_INT((int)read(fds[0], &grandchild, sizeof(grandchild)), (int)sizeof(grandchild));
    close(fds[0]);
    close(fds[1]);

    n = proc_children(child, pids, 64);
    CHECK_INT((int)n, 1);
    CHECK_INT(pids[0], grandchild);
    CHECK(has(pids, proc_children(getpid(), pids, 64), child));
    n = proc_tree(getpid(), pids, 64);
    CHECK_INT(pids[0], getpid());
    CHECK(has(pids, n, child) && has(pids, n, grandchild));
    /* max bounds what is written, the root first. */
    CHECK_INT((int)proc_tree(child, pids, 1), 1);
    CHECK_INT(pids[0], child);
    CHECK_INT((int)proc_tree(child, pids, 0), 0);

    kill(grandchild, SIGKILL);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* Gone: no children, no error. */
    CHECK_INT((int)proc_children(child, pids, 64), 0);
    CHECK_INT((int)proc_children(-5, pids, 64), 0);
}

/* /proc/PID/stat: a COMM with spaces and parentheses ends at the last ')'. */
TEST(proc_stat_parse)
{
    static const char good[] =
        "4761 (a) b (c)) S 4759 4761 4761 0 -1 4194560 106 0 0 0 0 0 0 0 20 0 1 0 147511 "
        "2654208 239 18446744073709551615 1 1 0 0 0 0 0 0 65536 0 0 0 17 3 0 0 0 0 0\n";
    static const char *const bad[] = {
        "", "4761 (sh", "4761 (sh) S", "4761 (sh) S 1 2", "4761 (sh) 5 1 2 3",
        "4761 (sh) S 1 2 3 0 -1 4194560 106 0 0 0 0 0 0 0 20 0 1 0",
        "4761 (sh) S 1 2 3 0 -1 4194560 106 0 0 0 0 0 0 0 20 0 1 0 x",
        "4761 (sh) S 99999999 2 3 0 -1 4194560 106 0 0 0 0 0 0 0 20 0 1 0 5",
    };
    struct proc_stat st;

    CHECK_INT(proc_stat_parse(good, strlen(good), &st), 0);
    CHECK_INT(st.state, 'S');
    CHECK_INT(st.ppid, 4759);
    CHECK_INT(st.pgrp, 4761);
    CHECK_INT(st.session, 4761);
    CHECK_INT(st.start, 147511);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        st.start = 42;
        if (proc_stat_parse(bad[i], strlen(bad[i]), &st) != -EINVAL || st.start != 42) {
            printf("  accepted '%s'\n", bad[i]);
            harness_failed = 1;
        }
    }
    /* Our own: running, in our group, started no later than now. */
    CHECK_INT(proc_stat_read(getpid(), &st), 0);
    CHECK_INT(st.state, 'R');
    CHECK_INT(st.pgrp, getpgrp());
    CHECK_INT(st.ppid, getppid());
}

/* A child in a group of its own: its members, then none once it is gone. */
TEST(proc_group_members)
{
    struct proc_stat st;
    uint64_t oldest;
    pid_t child, pids[4];
    char boot[PROC_BOOT_ID_LEN + 1];

    child = fork();
    if (child == 0) {
        setpgid(0, 0);
        pause();
        _exit(0);
    }
    CHECK(child > 0);
    setpgid(child, child);
    CHECK_INT(proc_group_members(child, pids, 4, &oldest), 1);
    CHECK_INT(pids[0], child);
    CHECK_INT(proc_stat_read(child, &st), 0);
    CHECK(oldest == st.start);
    kill(child, SIGKILL);
    /* A zombie is no member. */
    for (int i = 0; i < 100 && proc_stat_read(child, &st) == 0 && st.state != 'Z'; i++)
        usleep(10000);
    CHECK_INT(proc_group_members(child, pids, 4, NULL), 0);
    waitpid(child, NULL, 0);
    CHECK_INT(proc_stat_read(child, &st), -ENOENT);
    CHECK_INT(proc_boot_id(boot, sizeof(boot)), 0);
    CHECK_INT((int)strlen(boot), PROC_BOOT_ID_LEN);
}

TEST(proc_grouprec)
{
    static const char *const bad[] = {
        "", "[]", "{}", "{\"pgid\":10,\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\"}",
        "{\"pgid\":1,\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\",\"spotd_pid\":9}",
        "{\"pgid\":10.5,\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\",\"spotd_pid\":9}",
        "{\"pgid\":\"10\",\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\",\"spotd_pid\":9}",
        "{\"pgid\":10,\"start\":-5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\",\"spotd_pid\":9}",
        "{\"pgid\":10,\"start\":5,\"boot_id\":\"84704a04\",\"spotd_pid\":9}",
        "{\"pgid\":10,\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fbX\",\"spotd_pid\":9}",
        "{\"pgid\":10,\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\",\"spotd_pid\":9,\"x\":1}",
        "{\"pgid\":10,\"pgid\":11,\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\",\"spotd_pid\":9}",
        "{\"pgid\":10,\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\",\"spotd_pid\":9} x",
        "{\"pgid\":10,\"start\":5,\"boot_id\":\"84704a04-d157-42e1-87ea-168b8ba69fba\\u0000\",\"spotd_pid\":9}",
    };
    struct proc_grouprec r = { .pgid = 4761, .start = 147511, .spotd_pid = 4759 }, back;
    const char *why;
    char text[256];
    int n;

    memcpy(r.boot_id, "84704a04-d157-42e1-87ea-168b8ba69fba", PROC_BOOT_ID_LEN + 1);
    n = proc_grouprec_format(&r, text, sizeof(text));
    CHECK(n > 0);
    CHECK_INT(proc_grouprec_parse(text, (size_t)n, &back, &why), 0);
    CHECK_INT(back.pgid, 4761);
    CHECK(back.start == 147511);
    CHECK_INT(back.spotd_pid, 4759);
    CHECK_STR(back.boot_id, r.boot_id);
    CHECK_INT(proc_grouprec_format(&r, text, 20), -ENOSPC);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        back.pgid = 42;
        why = NULL;
        if (proc_grouprec_parse(bad[i], strlen(bad[i]), &back, &why) != -EINVAL || !why ||
            back.pgid != 42) {
            printf("  accepted '%s'\n", bad[i]);
            harness_failed = 1;
        }
    }
}

/* The signals a process catches, from /proc/PID/status; this process's
 * own, before and after a handler. */
static void on_usr2(int sig)
{
    (void)sig;
}

TEST(proc_sigcgt)
{
    static const char status[] = "Name:\tpython3\nSigIgn:\t0000000001001000\n"
                                 "SigCgt:\t0000000180004a02\nCapInh:\t0\n";
    uint64_t mask = 7;
    struct sigaction sa = { .sa_handler = on_usr2 }, old;

    CHECK_INT(proc_sigcgt_parse(status, sizeof(status) - 1, &mask), 0);
    CHECK(mask == 0x180004a02ull);
    /* Garbled or missing: refused, the mask untouched. */
    mask = 7;
    CHECK_INT(proc_sigcgt_parse("SigCgt:\t12\n", 11, &mask), -EINVAL); /* not after a line */
    CHECK_INT(proc_sigcgt_parse("x\nSigCgt:\t\n", 11, &mask), -EINVAL);
    CHECK_INT(proc_sigcgt_parse("x\nSigCgt:\t12g4\n", 15, &mask), -EINVAL);
    CHECK_INT(proc_sigcgt_parse("x\nSigCgt:\t00000000000000001\n", 27, &mask), -EINVAL);
    CHECK_INT(proc_sigcgt_parse("x\nSigBlk:\t12\n", 13, &mask), -EINVAL);
    CHECK(mask == 7);
    /* Truncated mid-number at the end of the text: what is there. */
    CHECK_INT(proc_sigcgt_parse("x\nSigCgt:\t4a", 12, &mask), 0);
    CHECK(mask == 0x4a);

    sigaction(SIGUSR2, NULL, &old);
    signal(SIGUSR2, SIG_DFL);
    CHECK_INT(proc_catches(getpid(), SIGUSR2), 0);
    sigaction(SIGUSR2, &sa, NULL);
    CHECK_INT(proc_catches(getpid(), SIGUSR2), 1);
    sigaction(SIGUSR2, &old, NULL);
    CHECK_INT(proc_catches(getpid(), 0), -EINVAL);
    CHECK_INT(proc_catches(getpid(), 65), -EINVAL);
    CHECK_INT(proc_catches(4194304 + 1, SIGUSR2), -ENOENT);
}
