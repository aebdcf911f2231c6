/* hooks: run the operator's executables (see hooks.h). */
#include "hooks.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "spot/log.h"

#define RUNS_MAX 4
#define ENV_ADDED 9

struct run {
    struct hooks *h;
    pid_t pid;
    char name[32];
    struct event *timer;
    hook_done_fn done;
    void *arg;
};

struct hooks {
    struct event_base *base;
    struct child *child;
    char *dir;
    uint64_t timeout_ms;
    struct run runs[RUNS_MAX];
};

static void end_run(struct run *r, int code, const char *msg)
{
    hook_done_fn done = r->done;
    void *arg = r->arg;

    evtimer_del(r->timer);
    r->pid = 0;
    if (code != 0)
        log_msg(LOGL_WARN, "hook %s: %s", r->name, msg);
    else
        log_msg(LOGL_INFO, "hook %s: %s", r->name, msg);
    if (done)
        done(arg, code, msg);
}

static void on_reaped(void *arg, int status)
{
    struct run *r = arg;
    char msg[128];
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

    if (WIFSIGNALED(status))
        snprintf(msg, sizeof(msg), "killed by signal %d", WTERMSIG(status));
    else
        snprintf(msg, sizeof(msg), "exited with code %d", code);
    end_run(r, code, msg);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct run *r = arg;
    char msg[128];

    kill(-r->pid, SIGKILL);
    /* Reaped later by child.c, for no one. */
    child_unwatch(r->h->child, r->pid);
    snprintf(msg, sizeof(msg), "still running after %llu ms (--hook-timeout): killed",
             (unsigned long long)r->h->timeout_ms);
    end_run(r, -1, msg);
}

/* "KEY=value" into buf; returns buf. */
static char *env_str(char *buf, size_t size, const char *key, const char *value)
{
    snprintf(buf, size, "%s=%s", key, value ? value : "");
    return buf;
}

int hooks_run(struct hooks *h, const char *name, const struct hook_env *env, hook_done_fn done,
              void *arg)
{
    char path[4200], vars[ENV_ADDED][4200], num[32], arg1[32];
    char *argv[3], **envp;
    struct run *r = NULL;
    struct timeval tv;
    size_t k = 0;
    pid_t pid;

    if (!h || !h->dir)
        return -ENOENT;
    snprintf(path, sizeof(path), "%s/%s", h->dir, name);
    if (access(path, X_OK) < 0)
        return -ENOENT;
    for (size_t i = 0; i < RUNS_MAX; i++)
        if (!h->runs[i].pid)
            r = &h->runs[i];
    if (!r)
        return -EAGAIN;
    /* spotd's environment less what it withholds (child_env_new), ours
     * first: the first of two equal names is the one getenv() finds. */
    if (!(envp = child_env_new(h->child, ENV_ADDED)))
        return -ENOMEM;
    envp[k++] = env_str(vars[0], sizeof(vars[0]), "SPOT_HOOK", name);
    envp[k++] = env_str(vars[1], sizeof(vars[1]), "SPOT_JOB", env->job);
    envp[k++] = env_str(vars[2], sizeof(vars[2]), "SPOT_RANK", "0");
    snprintf(num, sizeof(num), "%llu", (unsigned long long)env->gen);
    envp[k++] = env_str(vars[3], sizeof(vars[3]), "SPOT_GEN", env->gen ? num : NULL);
    snprintf(num, sizeof(num), "%lld", (long long)env->step);
    envp[k++] = env_str(vars[4], sizeof(vars[4]), "SPOT_STEP", env->step >= 0 ? num : NULL);
    envp[k++] = env_str(vars[5], sizeof(vars[5]), "SPOT_DIR", env->dir);
    envp[k++] = env_str(vars[6], sizeof(vars[6]), "SPOT_REASON", env->reason);
    snprintf(num, sizeof(num), "%lld", (long long)env->deadline_ms);
    envp[k++] = env_str(vars[7], sizeof(vars[7]), "SPOT_DEADLINE_MS",
                        env->deadline_ms > 0 ? num : NULL);
    envp[k++] = env_str(vars[8], sizeof(vars[8]), "SPOT_RESULT", env->result);
    argv[0] = path;
    snprintf(arg1, sizeof(arg1), "%s", name);
    argv[1] = arg1;
    argv[2] = NULL;

    pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        /* Its own group, default dispositions, nothing blocked: a hook
         * is a program of its own, not part of spotd. */
        setpgid(0, 0);
        child_reset_signals(NULL);
        if (fd >= 0)
            dup2(fd, STDIN_FILENO);
        execve(path, argv, envp);
        _exit(127);
    }
    free(envp);
    if (pid < 0)
        return -errno;
    setpgid(pid, pid); /* before any kill(-pid), whoever runs first */
    if (child_watch(h->child, pid, on_reaped, r) < 0) {
        kill(pid, SIGKILL);
        return -EAGAIN;
    }
    r->h = h;
    r->pid = pid;
    r->done = done;
    r->arg = arg;
    snprintf(r->name, sizeof(r->name), "%s", name);
    tv = (struct timeval){ (time_t)(h->timeout_ms / 1000),
                           (suseconds_t)(h->timeout_ms % 1000) * 1000 };
    evtimer_add(r->timer, &tv);
    log_msg(LOGL_DEBUG, "hook %s started as pid %d", name, (int)pid);
    return 0;
}

void hooks_drain(struct hooks *h)
{
    for (;;) {
        bool running = false;

        for (size_t i = 0; h && i < RUNS_MAX; i++)
            running = running || h->runs[i].pid;
        if (!running || event_base_loop(h->base, EVLOOP_ONCE) < 0)
            return;
    }
}

struct hooks *hooks_new(struct event_base *base, struct child *child, const char *dir,
                        uint64_t timeout_ms)
{
    struct hooks *h = calloc(1, sizeof(*h));

    if (!h)
        return NULL;
    h->base = base;
    h->child = child;
    h->timeout_ms = timeout_ms;
    if (dir && !(h->dir = strdup(dir)))
        return hooks_free(h);
    for (size_t i = 0; i < RUNS_MAX; i++)
        if (!(h->runs[i].timer = evtimer_new(base, on_timeout, &h->runs[i])))
            return hooks_free(h);
    return h;
}

struct hooks *hooks_free(struct hooks *h)
{
    if (!h)
        return NULL;
    for (size_t i = 0; i < RUNS_MAX; i++) {
        if (h->runs[i].pid) {
            kill(-h->runs[i].pid, SIGKILL);
            child_unwatch(h->child, h->runs[i].pid);
        }
        if (h->runs[i].timer)
            event_free(h->runs[i].timer);
    }
    free(h->dir);
    free(h);
    return NULL;
}
