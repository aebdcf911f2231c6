/* method criu: CRIU snapshots the command's whole process tree; the
 * command needs no change.
 *
 * The command runs under spotd-init (spotd-init.c) as PID 1 of a PID
 * namespace of its own, its output in pipes the outer spotd-init copies to
 * spotd's.  A save runs `criu dump` of that PID 1 into the generation's
 * directory, which the snapshot engine then chunks, deduplicates and
 * uploads like any other: --leave-running for periodic and requested
 * checkpoints, --leave-stopped for the last one before a stop (nothing the
 * tree does after it can contradict the images), and the stop then kills
 * the namespace.  A start from a restored generation runs `spotd-init
 * restore`, which has CRIU bring the tree back under it.
 *
 * CRIU runs from its command line, not its RPC service (criu swrk): the
 * command line needs no protobuf, its options are CRIU's documented
 * interface, and its log says what failed (docs/methods.md, "criu"). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "method.h"
#include "spot/log.h"

struct method {
    struct method_ctx ctx;
    char criu[PATH_MAX], init[PATH_MAX + 16], work[4200];
    char **argv;                   /* spotd-init ... */
    bool last;                     /* the next save is the last: leave the tree stopped */
    bool frozen;                   /* it is: the stop kills it */
    pid_t dumper;
    char dir[4200];
    method_saved_fn done;
    void *arg;
};

/* The first line of CRIU's log that says Error, made into advice where a
 * cause is known. */
static void explain(const struct method *m, char *msg, size_t size)
{
    static const struct {
        const char *match, *advice;
    } known[] = {
        { "Connected TCP socket", "the command has open TCP connections, which cannot move to "
          "another host (a multi-node job: use the app method)" },
        { "unix socket", "the command holds a UNIX socket whose peer is outside its tree "
          "(libckpt's control socket, a daemon's): such a process cannot be snapshotted" },
        { "Operation not permitted", "CRIU lacks a capability: run spotd as root (CAP_SYS_ADMIN, "
          "CAP_SYS_PTRACE, CAP_CHECKPOINT_RESTORE)" },
        { "vdso", "this CRIU is too old for the kernel (its vDSO check fails): use CRIU 4.2 or "
          "newer (tests/servers/criu.sh fetches one)" },
        { "Can't dump", "CRIU cannot dump a resource the command holds" },
        { "unsupported", "the command uses a kind of file CRIU does not support" },
        { "nvidia", "the command holds a GPU: GPU processes need the CUDA checkpoint API" },
    };
    char path[4400], line[512], first[512] = "";
    FILE *f;

    snprintf(path, sizeof(path), "%s/dump.log", m->work);
    if ((f = fopen(path, "r"))) {
        while (fgets(line, sizeof(line), f)) {
            /* Printed on every run where CAP_SYS_RESOURCE is missing: harmless. */
            if (!strstr(line, "Error") || strstr(line, "RLIMIT_NOFILE"))
                continue;
            line[strcspn(line, "\n")] = '\0';
            snprintf(first, sizeof(first), "%s", line);
            break;
        }
        fclose(f);
    }
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (first[0] && strcasestr(first, known[i].match)) {
            snprintf(msg, size, "criu dump failed: %s (CRIU says: %s; its log: %.300s)",
                     known[i].advice, first, path);
            return;
        }
    snprintf(msg, size, "criu dump failed%s%s (its log: %.300s)", first[0] ? ": " : "", first, path);
}

/* PID 1 of the command's namespace: the outer spotd-init's one child. */
static pid_t init_pid(const struct method *m)
{
    pid_t outer = child_pid(m->ctx.child);
    char path[64], buf[64];
    ssize_t n;
    int fd;

    if (outer <= 0)
        return -ESRCH;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)outer, (int)outer);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -ESRCH;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -ESRCH;
    buf[n] = '\0';
    return (pid_t)atoi(buf) > 0 ? (pid_t)atoi(buf) : -ESRCH;
}

/* The pipes the tree writes its output into, for the restore. */
static int write_pipes(const struct method *m, pid_t init, const char *dir)
{
    char path[4400], ids[2][64];
    FILE *f;

    for (int fd = 1; fd <= 2; fd++) {
        ssize_t n;
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)init, fd);
        n = readlink(path, ids[fd - 1], sizeof(ids[0]) - 1);
        if (n < 0)
            return -errno;
        ids[fd - 1][n] = '\0';
    }
    snprintf(path, sizeof(path), "%s/spotd-criu.pipes", dir);
    if (!(f = fopen(path, "w")))
        return -errno;
    fprintf(f, "%s %s\n", ids[0], ids[1]);
    return fclose(f) == 0 ? 0 : -EIO;
}

static void on_dumped(void *arg, int status)
{
    struct method *m = arg;
    method_saved_fn done = m->done;
    char msg[1200] = "";
    int err = 0;

    m->dumper = 0;
    m->done = NULL;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        explain(m, msg, sizeof(msg));
        err = -EIO;
        m->frozen = false;
    } else {
        log_msg(LOGL_INFO, "criu dumped the command's tree into %s%s", m->dir,
                m->frozen ? "; it stays stopped until the stop" : "");
    }
    /* No step: CRIU does not know the trainer's. */
    done(m->arg, err, msg, 0, m->dir);
}

static int criu_save(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                     method_saved_fn done, void *arg)
{
    char a_dump[] = "dump", a_t[] = "-t", a_d[] = "-D", a_w[] = "-W", a_o[] = "-o";
    char a_v[] = "-v2", a_log[] = "dump.log", a_stopped[] = "--leave-stopped";
    char a_running[] = "--leave-running", pidarg[24];
    char *argv[16];
    pid_t init, pid;
    int r, n = 0;

    if (m->done)
        return -EBUSY;
    if ((init = init_pid(m)) < 0)
        return -ESRCH;
    snprintf(m->dir, sizeof(m->dir), "%s", dir);
    if ((r = write_pipes(m, init, dir)) < 0)
        return r;
    if (mkdir(m->work, 0700) < 0 && errno != EEXIST)
        return -errno;
    snprintf(pidarg, sizeof(pidarg), "%d", (int)init);
    argv[n++] = m->criu;
    argv[n++] = a_dump;
    argv[n++] = a_t;
    argv[n++] = pidarg;
    argv[n++] = a_d;
    argv[n++] = m->dir;
    argv[n++] = a_w;
    argv[n++] = m->work;
    argv[n++] = a_o;
    argv[n++] = a_log;
    argv[n++] = a_v;
    argv[n++] = m->last ? a_stopped : a_running;
    argv[n] = NULL;
    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0);
        if (null >= 0) {
            dup2(null, STDIN_FILENO);
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        execv(m->criu, argv);
        _exit(127);
    }
    if ((r = child_watch(m->ctx.child, pid, on_dumped, m)) < 0) {
        kill(pid, SIGKILL);
        return r;
    }
    m->dumper = pid;
    m->frozen = m->last;
    m->done = done;
    m->arg = arg;
    (void)gen;
    (void)deadline_ms;
    return 0;
}

static void criu_last(struct method *m)
{
    m->last = true;
}

static void criu_cancel(struct method *m, const char *reason)
{
    method_saved_fn done = m->done;

    if (!done)
        return;
    /* CRIU unfreezes the tree when it is killed mid-dump. */
    if (m->dumper > 0)
        kill(m->dumper, SIGKILL);
    m->done = NULL;
    done(m->arg, -ECANCELED, reason, -1, m->dir);
}

static void criu_stop(struct method *m, const char *reason, uint64_t grace_ms)
{
    pid_t init = init_pid(m);

    /* A tree left stopped by the last dump dies as it is: its state is in
     * the images, and a stop signal would wake it to run on. */
    if (m->frozen && init > 0) {
        log_msg(LOGL_INFO, "ending the command's namespace (its state is in the last dump)");
        kill(init, SIGKILL);
    }
    child_stop(m->ctx.child, reason, grace_ms);
}

static void criu_close(struct method *m)
{
    if (!m)
        return;
    if (m->dumper > 0) {
        child_unwatch(m->ctx.child, m->dumper);
        kill(m->dumper, SIGKILL);
    }
    for (size_t i = 0; m->argv && m->argv[i]; i++)
        free(m->argv[i]);
    free(m->argv);
    free(m);
}

/* `criu check`, once, before the command starts: a CRIU that cannot work
 * on this kernel is refused now, not at the first notice.  Its output goes
 * to WORK/check.log. */
static int check_criu(const struct method *m, char *err, size_t errlen)
{
    char log[4400], line[512], first[512] = "", exe[PATH_MAX], a_check[] = "check";
    char *argv[] = { exe, a_check, NULL };
    int status, fd;
    pid_t pid;
    FILE *f;

    snprintf(exe, sizeof(exe), "%s", m->criu);
    snprintf(log, sizeof(log), "%s/check.log", m->work);
    if ((fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        snprintf(err, errlen, "cannot create '%s': %s", log, strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv(exe, argv);
        _exit(127);
    }
    close(fd);
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        snprintf(err, errlen, "--method criu: cannot run %s check", m->criu);
        return -1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if ((f = fopen(log, "r"))) {
        while (fgets(line, sizeof(line), f))
            if (strstr(line, "Error") && !strstr(line, "RLIMIT_NOFILE")) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(first, sizeof(first), "%s", line);
                break;
            }
        fclose(f);
    }
    snprintf(err, errlen, "--method criu: '%s check' fails on this machine%s%s%s (its output: "
             "%.300s)", m->criu, first[0] ? ": " : "", first,
             strcasestr(first, "vdso") ? "; this CRIU is too old for the kernel: use 4.2 or "
             "newer (tests/servers/criu.sh fetches one)" : "", log);
    return -1;
}

/* An executable named name: in PATH unless it has a slash. */
static int find_exe(const char *name, char *out, size_t size)
{
    const char *path = getenv("PATH");

    if (strchr(name, '/')) {
        if (access(name, X_OK) < 0)
            return -errno;
        snprintf(out, size, "%s", name);
        return 0;
    }
    for (const char *p = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin"; *p;) {
        size_t len = strcspn(p, ":");
        snprintf(out, size, "%.*s/%s", (int)len, p, name);
        if (len && access(out, X_OK) == 0)
            return 0;
        p += len + (p[len] == ':');
    }
    return -ENOENT;
}

static struct method *criu_open(const struct method_ctx *ctx, char *err, size_t errlen)
{
    struct method *m = calloc(1, sizeof(*m));
    char self[PATH_MAX], *slash, images[4200];
    size_t n = 0, i = 0;
    ssize_t len;
    bool restore;

    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->ctx = *ctx;
    if (geteuid() != 0) {
        snprintf(err, errlen, "--method criu needs root: CRIU dumps and restores other "
                 "processes (CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_CHECKPOINT_RESTORE)");
        goto fail;
    }
    if (find_exe(ctx->criu ? ctx->criu : "criu", m->criu, sizeof(m->criu)) < 0) {
        snprintf(err, errlen, "--method criu: no executable criu%s%s (install CRIU 4.2 or newer, "
                 "or give its path with --criu)", ctx->criu ? " at " : " in PATH",
                 ctx->criu ? ctx->criu : "");
        goto fail;
    }
    /* spotd-init lives beside spotd. */
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) {
        snprintf(err, errlen, "--method criu: cannot find spotd's own path: %s", strerror(errno));
        goto fail;
    }
    self[len] = '\0';
    if ((slash = strrchr(self, '/')))
        *slash = '\0';
    snprintf(m->init, sizeof(m->init), "%s/spotd-init", self);
    if (access(m->init, X_OK) < 0) {
        snprintf(err, errlen, "--method criu: %s is missing (it is installed with spotd)",
                 m->init);
        goto fail;
    }
    snprintf(m->work, sizeof(m->work), "%s/criu", ctx->state_dir);
    if (mkdir(m->work, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create '%s': %s", m->work, strerror(errno));
        goto fail;
    }
    if (check_criu(m, err, errlen) < 0)
        goto fail;
    snprintf(images, sizeof(images), "%s/spotd-criu.pipes",
             ctx->resume_dir ? ctx->resume_dir : "");
    restore = ctx->resume_dir && access(images, F_OK) == 0;
    if (ctx->resume_dir && !restore) {
        snprintf(err, errlen, "--method criu: generation %s holds no CRIU images (it was not "
                 "saved by the criu method)", ctx->resume_dir);
        goto fail;
    }
    while (ctx->argv[n])
        n++;
    if (!(m->argv = calloc(n + 6, sizeof(*m->argv))))
        goto oom;
    if (!(m->argv[i++] = strdup(m->init)))
        goto oom;
    if (restore) {
        if (!(m->argv[i++] = strdup("restore")) || !(m->argv[i++] = strdup(m->criu)) ||
            !(m->argv[i++] = strdup(ctx->resume_dir)) || !(m->argv[i++] = strdup(m->work)))
            goto oom;
    } else {
        if (!(m->argv[i++] = strdup("run")) || !(m->argv[i++] = strdup("--")))
            goto oom;
        for (size_t k = 0; k < n; k++)
            if (!(m->argv[i++] = strdup(ctx->argv[k])))
                goto oom;
    }
    child_set_argv(ctx->child, m->argv);
    /* A process holding a connection to spotd's socket could not be
     * dumped: libckpt stays out of it. */
    unsetenv("SPOT_SOCKET");
    return m;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    criu_close(m);
    return NULL;
}

const struct method_ops method_criu = {
    .name = "criu",
    .open = criu_open,
    .save = criu_save,
    .last = criu_last,
    .cancel = criu_cancel,
    .stop = criu_stop,
    .close = criu_close,
};
