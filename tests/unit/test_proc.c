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
