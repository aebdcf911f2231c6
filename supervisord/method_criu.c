/* method criu: CRIU snapshots the command's whole process tree; the
 * command needs no change.
 *
 * The command runs under spotd-init (spotd-init/spotd-init.c) as PID 1 of a
 * PID namespace of its own, its output in pipes the outer spotd-init copies
 * to spotd's.  A save runs `criu dump` of that PID 1 into the generation's
 * directory, which the snapshot engine then chunks, deduplicates and uploads
 * like any other: --leave-running for periodic and requested checkpoints,
 * --leave-stopped for the last one before a stop (nothing the tree does
 * after it can contradict the images), and the stop then kills the
 * namespace.  A start from a restored generation runs `spotd-init restore`,
 * which has CRIU bring the tree back under it.
 *
 * CRIU runs from its command line, not its RPC service (criu swrk): the
 * command line needs no protobuf, its options are CRIU's documented
 * interface, and its log says what failed (docs/methods.md, "criu"). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <event2/event.h>

#include "child.h"
#include "cuda.h"
#include "imgstream.h"
#include "method.h"
#include "spot/config.h"
#include "spot/gpuinv.h"
#include "spot/log.h"
#include "spot/notice.h"
#include "spot/parse.h"
#include "spot/proc.h"

#define GPU_MAX 256
/* The most a CUDA lock and checkpoint may take without a deadline. */
#define GPU_LIMIT_MS (5 * 60 * 1000)

/* A save: [GPU processes checkpointed] -> criu dump -> [GPU restored]. */
enum step { S_NONE, S_GPU_OFF, S_DUMP, S_GPU_ON };

struct method {
    struct method_ctx ctx;
    char criu[PATH_MAX], init[PATH_MAX + 16], self[PATH_MAX], work[4200];
    char **argv;                   /* spotd-init ... */
    bool last;                     /* the next save is the last: leave the tree stopped */
    bool frozen;                   /* it is: the stop kills it */
    enum step step;
    pid_t helper;                  /* criu dump, or spotd _cuda */
    pid_t gpu[GPU_MAX];            /* the tree's CUDA processes */
    size_t ngpu;
    int64_t deadline_ms;
    int err;                       /* the save's outcome, once the GPUs are back */
    char msg[1200];
    char dir[4200];
    uint64_t gen;
    struct imgstream *stream;      /* the dump under way streams its pages (imgstream.h) */
    int dump_status;               /* criu dump's, while the stream ends */
    struct imgserve *serve;        /* restore: the pages from the store (imgstream.h) */
    method_saved_fn done;
    void *arg;
    struct event *restored;        /* restore: waits for the tree, for its GPUs */
    int nspids[GPU_MAX];           /* restore: its CUDA processes, in its namespace */
    size_t nns;
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
        { "of that type", "the command holds a kind of file CRIU cannot dump (a perf event, "
          "a device, an io_uring...)" },
        { "Can't dump", "CRIU cannot dump a resource the command holds" },
        { "unsupported", "the command uses a kind of file CRIU does not support" },
        { "nvidia", "the command holds a GPU: GPU processes need the CUDA checkpoint API" },
    };
    char path[4400], line[512], first[512] = "";
    FILE *f;

    snprintf(path, sizeof(path), "%s/dump.log", m->work);
    if ((f = fopen(path, "re"))) {
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
    snprintf(msg, size, "criu dump failed%s%s (its log: %.300s)", first[0] ? ": " : "", first,
             path);
}

/* PID 1 of the command's namespace: the outer spotd-init's one child. */
static pid_t init_pid(const struct method *m)
{
    pid_t outer = child_pid(m->ctx.child), v;
    char path[64], comm[32];
    ssize_t n;
    int fd;

    if (outer <= 0 || proc_children(outer, &v, 1) != 1)
        return -ESRCH;
    /* While a restore runs, the outer's child is CRIU, not the tree. */
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)v);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -ESRCH;
    n = read(fd, comm, sizeof(comm) - 1);
    close(fd);
    comm[n > 0 ? n : 0] = '\0';
    return strcmp(comm, "spotd-init\n") == 0 ? v : -ESRCH;
}

/* The pipes the tree writes its output into, for the restore.  -EAGAIN
 * while they are not all pipes yet: the namespace's init was forked but
 * has not taken them (a dump then would commit a tree that no restore can
 * give its output back to). */
static int write_pipes(const struct method *m, pid_t init, const char *dir)
{
    char path[4400], ids[3][64];
    FILE *f;

    /* Output, errors, and the lifeline (spotd-init/spotd-init.c). */
    for (int fd = 1; fd <= 3; fd++) {
        ssize_t n;
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)init, fd);
        n = readlink(path, ids[fd - 1], sizeof(ids[0]) - 1);
        if (n < 0)
            return -errno;
        ids[fd - 1][n] = '\0';
        if (strncmp(ids[fd - 1], "pipe:[", 6) != 0)
            return -EAGAIN;
    }
    snprintf(path, sizeof(path), "%s/spotd-criu.pipes", dir);
    if (!(f = fopen(path, "we")))
        return -errno;
    fprintf(f, "%s %s %s\n", ids[0], ids[1], ids[2]);
    return fclose(f) == 0 ? 0 : -EIO;
}

static void finish(struct method *m)
{
    method_saved_fn done = m->done;

    m->step = S_NONE;
    m->done = NULL;
    if (m->err)
        m->frozen = false;
    /* No step: CRIU does not know the trainer's. */
    done(m->arg, m->err, m->msg, 0, m->dir);
}

/* The last line of WORK/name, for a message. */
static void last_line(const struct method *m, const char *name, char *out, size_t size)
{
    char path[4400], line[512];
    FILE *f;

    out[0] = '\0';
    snprintf(path, sizeof(path), "%s/%s", m->work, name);
    if (!(f = fopen(path, "re")))
        return;
    while (fgets(line, sizeof(line), f))
        if (line[0] != '\n') {
            line[strcspn(line, "\n")] = '\0';
            snprintf(out, size, "%s", line);
        }
    fclose(f);
}

/* Run argv with its output into WORK/log; fn gets its status. */
static int spawn(struct method *m, char **argv, const char *log, child_reaped_fn fn)
{
    char path[4400];
    pid_t pid;
    int r, fd;

    snprintf(path, sizeof(path), "%s/%s", m->work, log);
    if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        return -errno;
    pid = fork();
    if (pid < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        /* A program of its own: default dispositions, nothing blocked. */
        child_reset_signals(NULL);
        setpgid(0, 0);
        if (null >= 0)
            dup2(null, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd);
    if ((r = child_watch(m->ctx.child, pid, fn, m)) < 0) {
        kill(pid, SIGKILL);
        return r;
    }
    m->helper = pid;
    return 0;
}

/* spotd _cuda OP [TIMEOUT] PID...: argv in buf (freed by the caller). */
static char **cuda_argv(struct method *m, const char *op, unsigned timeout_ms, char *buf,
                        size_t size)
{
    char **argv = calloc(m->ngpu + 6, sizeof(*argv));
    size_t n = 0, len = 0;

    if (!argv)
        return NULL;
#define ARG(...)                                                                          \
    do {                                                                                  \
        argv[n++] = buf + len;                                                            \
        len += (size_t)snprintf(buf + len, size - len, __VA_ARGS__) + 1;                  \
    } while (0)
    ARG("%s", m->self);
    ARG("_cuda");
    ARG("%s", op);
    if (timeout_ms)
        ARG("%u", timeout_ms);
    for (size_t i = 0; i < m->ngpu && len < size - 16; i++)
        ARG("%d", (int)m->gpu[i]);
#undef ARG
    argv[n] = NULL;
    return argv;
}

static void on_gpu_on(void *arg, int status)
{
    struct method *m = arg;
    char line[512];

    m->helper = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        last_line(m, "cuda-restore.log", line, sizeof(line));
        log_msg(LOGL_ERROR, "the command's CUDA processes could not be restored after the "
                "dump: %s (%s/cuda-restore.log)", line, m->work);
        if (!m->err) {
            m->err = -EIO;
            snprintf(m->msg, sizeof(m->msg), "the CUDA processes could not be restored after "
                     "the dump: %.400s", line);
        }
    }
    finish(m);
}

/* The GPU processes back to running and unlocked, then finish. */
static void gpu_on(struct method *m)
{
    char buf[8192], **argv;
    int r;

    m->step = S_GPU_ON;
    if (!(argv = cuda_argv(m, "restore", 0, buf, sizeof(buf)))) {
        log_msg(LOGL_ERROR, "out of memory: the command's CUDA processes stay checkpointed");
        finish(m);
        return;
    }
    r = spawn(m, argv, "cuda-restore.log", on_gpu_on);
    free(argv);
    if (r < 0) {
        log_msg(LOGL_ERROR, "cannot run spotd _cuda: %s", strerror(-r));
        finish(m);
    }
}

/* criu dump has exited, and its stream, if any, has ended. */
static void dumped(struct method *m, int status)
{
    if (m->err) {
        m->frozen = false; /* cancelled: CRIU let the tree go */
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        explain(m, m->msg, sizeof(m->msg));
        m->err = -EIO;
        m->frozen = false;
    } else {
        log_msg(LOGL_INFO, "criu dumped the command's tree into %s%s%s", m->dir,
                m->stream ? ", its pages streamed to the store, not to files" : "",
                m->frozen ? "; it stays stopped until the stop" : "");
    }
    /* A tree that goes on needs its GPUs back; a frozen one is ended. */
    if (m->ngpu && !m->frozen)
        gpu_on(m);
    else
        finish(m);
}

static void on_streamed(void *arg, int err, const char *msg)
{
    struct method *m = arg;

    if (err && !m->err && WIFEXITED(m->dump_status) && WEXITSTATUS(m->dump_status) == 0) {
        /* CRIU succeeded, its images did not all arrive: no dump. */
        m->err = err;
        m->frozen = false;
        snprintf(m->msg, sizeof(m->msg), "the dump's image stream failed: %.1100s", msg);
        log_msg(LOGL_ERROR, "%s", m->msg);
        if (m->ngpu)
            gpu_on(m);
        else
            finish(m);
        return;
    }
    dumped(m, m->dump_status);
}

static void on_dumped(void *arg, int status)
{
    struct method *m = arg;

    m->helper = 0;
    if (m->stream) {
        m->dump_status = status;
        imgstream_finish(m->stream, on_streamed, m);
        return;
    }
    dumped(m, status);
}

/* Whether this dump streams its pages into the snap, and through what:
 * the last one before a stop by default (the tree stays stopped while a
 * slow store holds the stream back, and nothing waits for it), or every
 * one (--criu-stream). */
static void open_stream(struct method *m)
{
    char err[600];

    m->stream = imgstream_free(m->stream);
    if (!m->ctx.snap || m->ctx.criu_stream == CRIU_STREAM_NEVER ||
        (m->ctx.criu_stream == CRIU_STREAM_LAST && !m->last))
        return;
    if (!(m->stream = imgstream_start(m->ctx.base, m->ctx.snap, m->gen, m->dir, err,
                                      sizeof(err))))
        log_msg(LOGL_WARN, "%s: this dump goes to files", err);
}

/* criu dump, on_dumped() next; -errno when it cannot start. */
static int dump(struct method *m)
{
    char a_dump[] = "dump", a_t[] = "-t", a_d[] = "-D", a_w[] = "-W", a_o[] = "-o";
    char a_v[] = "-v2", a_log[] = "dump.log", a_stopped[] = "--leave-stopped";
    char a_running[] = "--leave-running", a_stream[] = "--stream", pidarg[24];
    char *argv[16];
    pid_t init = init_pid(m);
    int r, n = 0;

    m->step = S_DUMP;
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
    if (init <= 0)
        return -ESRCH;
    open_stream(m);
    if (m->stream)
        argv[n++] = a_stream;
    argv[n] = NULL;
    if ((r = spawn(m, argv, "dump.out", on_dumped)) < 0) {
        m->stream = imgstream_free(m->stream);
        return r;
    }
    m->frozen = m->last;
    return 0;
}

static void on_gpu_off(void *arg, int status)
{
    struct method *m = arg;
    char line[512];

    m->helper = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        int r = m->err ? m->err : dump(m);
        if (r == 0)
            return;
        /* Cancelled meanwhile, or no dump: the GPUs back first. */
        if (!m->err) {
            m->err = r;
            snprintf(m->msg, sizeof(m->msg), "cannot run criu dump: %s", strerror(-r));
        }
        gpu_on(m);
        return;
    }
    last_line(m, "cuda-checkpoint.log", line, sizeof(line));
    m->err = -EIO;
    snprintf(m->msg, sizeof(m->msg), "the CUDA checkpoint of the command's GPU processes "
             "failed, they run on unlocked: %.400s (%.300s/cuda-checkpoint.log)", line, m->work);
    finish(m);
}

/* What the images need on the restoring machine: the GPUs. */
static void write_gpus(const struct method *m, const char *dir)
{
    char path[4400], inv[8192];
    FILE *f;

    if (!m->ngpu)
        return;
    snprintf(path, sizeof(path), "%s/spotd-gpu.json", dir);
    if (cuda_inventory(inv, sizeof(inv)) < 0)
        snprintf(inv, sizeof(inv), "null");
    if (!(f = fopen(path, "we")))
        return;
    /* The processes by their pids in the namespace (remember_gpus()). */
    fprintf(f, "{\"processes\":[");
    for (size_t i = 0; i < m->nns; i++)
        fprintf(f, "%s%d", i ? "," : "", m->nspids[i]);
    fprintf(f, "],\"inventory\":%s}\n", inv);
    fclose(f);
}

/* The CUDA processes of the last dump, by their pids in the namespace:
 * the ones a restore of it brings back. */
static void remember_gpus(struct method *m)
{
    m->nns = 0;
    for (size_t i = 0; i < m->ngpu && m->nns < GPU_MAX; i++) {
        int ns = cuda_nspid(m->gpu[i]);
        if (ns > 0)
            m->nspids[m->nns++] = ns;
    }
}


static int criu_save(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                     method_saved_fn done, void *arg)
{
    pid_t init;
    int r;

    if (m->done)
        return -EBUSY;
    if ((init = init_pid(m)) < 0)
        return -ESRCH;
    snprintf(m->dir, sizeof(m->dir), "%s", dir);
    m->gen = gen;
    if ((r = write_pipes(m, init, dir)) < 0)
        return r;
    if (mkdir(m->work, 0700) < 0 && errno != EEXIST)
        return -errno;
    m->ngpu = cuda_gpu_processes(init, m->gpu, GPU_MAX);
    remember_gpus(m);
    for (size_t i = 0; m->ngpu > 1 && i < m->ngpu; i++)
        if (cuda_uses_nccl(m->gpu[i])) {
            log_msg(LOGL_ERROR, "the command runs %zu CUDA processes with NCCL: CRIU cannot "
                    "snapshot a live NCCL job (its communicators span the processes and the "
                    "GPUs' links); use the app method (libckpt) for it", m->ngpu);
            return -ENOTSUP;
        }
    write_gpus(m, dir);
    m->deadline_ms = deadline_ms;
    m->err = 0;
    m->msg[0] = '\0';
    m->done = done;
    m->arg = arg;
    if (m->ngpu) {
        int64_t left = deadline_ms > 0 ? deadline_ms - notice_now_ms() : GPU_LIMIT_MS;
        char buf[8192], **argv;

        /* Half of what is left for the GPUs, the rest for the dump. */
        left = left / 2 > 1000 ? left / 2 : 1000;
        if (!(argv = cuda_argv(m, "checkpoint", (unsigned)left, buf, sizeof(buf)))) {
            m->done = NULL;
            return -ENOMEM;
        }
        log_msg(LOGL_INFO, "%zu process%s of the command hold%s a GPU: locking and "
                "checkpointing %s (CUDA checkpoint API)", m->ngpu, m->ngpu == 1 ? "" : "es",
                m->ngpu == 1 ? "s" : "", m->ngpu == 1 ? "it" : "them");
        m->step = S_GPU_OFF;
        r = spawn(m, argv, "cuda-checkpoint.log", on_gpu_off);
        free(argv);
        if (r < 0) {
            m->done = NULL;
            m->step = S_NONE;
            return r;
        }
        return 0;
    }
    if ((r = dump(m)) < 0) {
        m->done = NULL;
        m->step = S_NONE;
        return r;
    }
    return 0;
}

static const struct mf_file *criu_streamed(struct method *m, size_t *n,
                                           struct snap_counters *c)
{
    *n = 0;
    return m->stream ? imgstream_files(m->stream, n, c) : NULL;
}

static void criu_last(struct method *m)
{
    m->last = true;
}

static void on_restored_poll(evutil_socket_t fd, short what, void *arg);

/* After a restore (CRIU's pid file appears), the CUDA processes of the
 * images get their GPUs back. */
static int watch_restore(struct method *m)
{
    struct timeval tv = { 0, 50 * 1000 };
    char pidfile[4400];

    snprintf(pidfile, sizeof(pidfile), "%s/restored.pid", m->work);
    unlink(pidfile);
    if (!m->restored && !(m->restored = event_new(m->ctx.base, -1, EV_PERSIST,
                                                  on_restored_poll, m)))
        return -ENOMEM;
    return event_add(m->restored, &tv) < 0 ? -ENOMEM : 0;
}

/* A dump that left the tree running stands only if the tree still runs
 * once it is uploaded.  A command that ended in the meantime may have been
 * dumped on its way out (between a fatal error and its exit): restored,
 * that dump would only end again, and a restart would restore it again. */
static bool criu_stands(struct method *m, char *why, size_t size)
{
    if (m->frozen || init_pid(m) > 0)
        return true;
    snprintf(why, size, "the command ended while its dump was uploaded, and the dump may "
             "have caught it ending; the one before stays the newest");
    return false;
}

/* A restart of the command (--restart) restores the newest dump, kept in
 * dir until the next commit. */
static void criu_committed(struct method *m, const char *dir)
{
    char **argv = calloc(6, sizeof(*argv));

    if (!argv || !(argv[0] = strdup(m->init)) || !(argv[1] = strdup("restore")) ||
        !(argv[2] = strdup(m->criu)) || !(argv[3] = strdup(dir)) ||
        !(argv[4] = strdup(m->work))) {
        for (size_t i = 0; argv && argv[i]; i++)
            free(argv[i]);
        free(argv);
        log_msg(LOGL_WARN, "out of memory: a restart of the command starts it afresh");
        return;
    }
    child_set_argv(m->ctx.child, argv);
    for (size_t i = 0; m->argv && m->argv[i]; i++)
        free(m->argv[i]);
    free(m->argv);
    m->argv = argv;
    if (m->nns && watch_restore(m) < 0)
        log_msg(LOGL_WARN, "out of memory: a restart would leave the CUDA processes locked");
}

/* done gets -ECANCELED once the tree runs as before: a dump is killed
 * (CRIU lets the tree go), the GPU processes are put back. */
static void criu_cancel(struct method *m, const char *reason)
{
    if (!m->done || m->err)
        return;
    m->err = -ECANCELED;
    snprintf(m->msg, sizeof(m->msg), "%s", reason);
    if (m->step == S_DUMP && m->helper > 0)
        kill(m->helper, SIGKILL);
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
    if (m->helper > 0) {
        child_unwatch(m->ctx.child, m->helper);
        kill(m->helper, SIGKILL);
    }
    if (m->restored)
        event_free(m->restored);
    imgstream_free(m->stream);
    imgstream_serve_free(m->serve);
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
        child_reset_signals(NULL);
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
    if ((f = fopen(log, "re"))) {
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

/* Images of CUDA processes (spotd-gpu.json): the GPUs they were dumped
 * with must be here too, model for model.  Fills m->nspids.  0, or -1
 * with the difference in err. */
static int check_gpus(struct method *m, const char *dir, char *err, size_t errlen)
{
    char path[4400], buf[16384], here[8192], diff[1200];
    struct gpuinv saved, local;
    const char *why;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "%s/spotd-gpu.json", dir);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0; /* no GPU process in these images */
    n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n < 0 || n == (ssize_t)sizeof(buf) ||
        gpuinv_parse_images(buf, (size_t)n, &saved, &why) < 0) {
        snprintf(err, errlen, "--method criu: %.300s is not what spotd writes (%s)", path,
                 n < 0 ? strerror(errno) : n == (ssize_t)sizeof(buf) ? "too big" : why);
        return -1;
    }
    memset(&local, 0, sizeof(local));
    if (cuda_inventory(here, sizeof(here)) == 0 &&
        gpuinv_parse_inventory(here, strlen(here), &local, &why) < 0)
        log_msg(LOGL_WARN, "NVML's inventory here cannot be read (%s)", why);
    if (gpuinv_compare(&saved, &local, diff, sizeof(diff)) < 0) {
        snprintf(err, errlen, "--method criu: %s: restore it on a machine like the first", diff);
        return -1;
    }
    if (!saved.known && saved.nprocs)
        log_msg(LOGL_WARN, "the generation's CUDA processes were dumped without a GPU "
                "inventory (no NVML then): the GPUs here are not checked");
    for (uint32_t i = 0; i < saved.nprocs && m->nns < GPU_MAX; i++)
        m->nspids[m->nns++] = saved.procs[i];
    return 0;
}

static void on_gpu_restored(void *arg, int status)
{
    struct method *m = arg;
    char line[512];

    m->helper = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        log_msg(LOGL_INFO, "the restored CUDA processes run on their GPUs again");
        return;
    }
    last_line(m, "cuda-restore.log", line, sizeof(line));
    log_msg(LOGL_ERROR, "the restored CUDA processes could not be restored on the GPUs: %s "
            "(%s/cuda-restore.log); stopping the command", line, m->work);
    child_stop(m->ctx.child, "the restored CUDA processes could not be restored", 0);
}

/* Restore: once CRIU has brought the tree back (the pid file), its CUDA
 * processes get their GPU memory back and are unlocked. */
static void on_restored_poll(evutil_socket_t fd, short what, void *arg)
{
    struct method *m = arg;
    char path[4400], buf[32], cbuf[8192], **argv;
    uint64_t v;
    ssize_t n;
    pid_t root;
    int pfd, r;

    snprintf(path, sizeof(path), "%s/restored.pid", m->work);
    if ((pfd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    n = read(pfd, buf, sizeof(buf) - 1);
    close(pfd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    buf[strcspn(buf, " \n")] = '\0';
    event_del(m->restored);
    root = parse_u64(buf, 2, INT32_MAX, &v) == 0 ? (pid_t)v : 0;
    m->ngpu = root > 0 ? cuda_find_nspids(root, m->nspids, m->nns, m->gpu) : 0;
    if (m->ngpu < m->nns)
        log_msg(LOGL_WARN, "%zu of the %zu CUDA processes of the images are in the restored "
                "tree", m->ngpu, m->nns);
    if (!m->ngpu)
        return;
    if (!(argv = cuda_argv(m, "restore", 0, cbuf, sizeof(cbuf))))
        return;
    r = spawn(m, argv, "cuda-restore.log", on_gpu_restored);
    free(argv);
    if (r < 0)
        log_msg(LOGL_ERROR, "cannot run spotd _cuda: %s", strerror(-r));
}

/* Whether dir holds the pages of its dump (a restore that left them in
 * the store does not: imgstream.h). */
static bool has_pages(const char *dir)
{
    char pat[4200];
    glob_t g;
    bool some;

    snprintf(pat, sizeof(pat), "%s/%s", dir, IMGSERVE_LEAVE);
    some = glob(pat, GLOB_NOSORT, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return some;
}

/* The stream failed (a chunk missing or corrupt, the store down): CRIU's
 * restore fails with it, and the start is tried again as a restart, which
 * restores from files, every chunk checked first, so that a damaged
 * generation gives way to an older one as at any start. */
static void on_serve_failed(void *arg)
{
    struct method *m = arg;

    log_msg(LOGL_WARN, "the restore of generation %llu is tried again from files",
            (unsigned long long)m->ctx.resume_gen);
    child_restart_once(m->ctx.child);
}

/* The restore takes the pages from the store, through spotd: CRIU asks
 * for every image at DIR/streamer-serve.sock (criu restore --stream). */
static int open_serve(struct method *m, char *err, size_t errlen)
{
    const struct method_ctx *ctx = &m->ctx;
    char why[600];

    if (!ctx->snap) {
        snprintf(err, errlen, "--method criu: '%s' holds no pages-*.img and there is no store "
                 "to take them from", ctx->resume_dir);
        return -1;
    }
    if (!(m->serve = imgstream_serve(ctx->base, ctx->snap, ctx->resume_gen, ctx->resume_rank,
                                     ctx->resume_dir, on_serve_failed, m, why, sizeof(why)))) {
        snprintf(err, errlen, "--method criu: cannot serve the pages of generation %llu to "
                 "CRIU: %s", (unsigned long long)ctx->resume_gen, why);
        return -1;
    }
    log_msg(LOGL_INFO, "criu restores generation %llu with its pages streamed from the store, "
            "not from files", (unsigned long long)ctx->resume_gen);
    return 0;
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
    if (child_resolve(ctx->criu ? ctx->criu : "criu", m->criu, sizeof(m->criu)) < 0 ||
        access(m->criu, X_OK) < 0) {
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
    snprintf(m->self, sizeof(m->self), "%s", self);
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
    if (restore && check_gpus(m, ctx->resume_dir, err, errlen) < 0)
        goto fail;
    if (restore && m->nns && watch_restore(m) < 0)
        goto oom;
    if (restore && !has_pages(ctx->resume_dir) && open_serve(m, err, errlen) < 0)
        goto fail;
    while (ctx->argv[n])
        n++;
    if (!(m->argv = calloc(n + 7, sizeof(*m->argv))))
        goto oom;
    if (!(m->argv[i++] = strdup(m->init)))
        goto oom;
    if (restore) {
        if (!(m->argv[i++] = strdup("restore")) ||
            (m->serve && !(m->argv[i++] = strdup("--stream"))) ||
            !(m->argv[i++] = strdup(m->criu)) ||
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
    .restore_leaves = IMGSERVE_LEAVE,
    /* 10 % of 256 MiB rewritten: 8 MiB chunks store 19 % again, 2 MiB
     * chunks 12 % (tests/bench/criu.sh). */
    .chunk_size = 2 << 20,
    .open = criu_open,
    .save = criu_save,
    .last = criu_last,
    .stands = criu_stands,
    .streamed = criu_streamed,
    .committed = criu_committed,
    .cancel = criu_cancel,
    .stop = criu_stop,
    .close = criu_close,
};
