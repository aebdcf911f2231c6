/* child: supervision of one command and everything in its process group.
 *
 * DESIGN.  The command leads its own session and process group, so one
 * kill(-pgid) reaches all of it, and spotd, a child subreaper, inherits and
 * reaps every orphan below it.  Supervision is a small state machine driven
 * by events on the loop (signals, SIGCHLD, two timers):
 *
 *   RUNNING  --main exits, group empty-->   finish
 *   RUNNING  --main exits, others left-->   DRAINING (stop signal, grace, SIGKILL)
 *   DRAINING --group empty or given up-->   finish
 *   finish   --policy says restart-->       BACKOFF --timer--> RUNNING
 *   finish   --otherwise-->                 DONE (loop ends, exit code set)
 *
 * A stop (SIGTERM/SIGINT/SIGQUIT to spotd, or child_stop()) is orthogonal:
 * it sends the signal, arms the grace timer, and forbids any restart.
 * The grace timer has two phases: on the first expiry SIGKILL goes to the
 * group; on the second, one second later, spotd stops waiting for members it
 * cannot reap (a stuck process in D state must not hold it forever).
 *
 * spotd may die without a stop (SIGKILL, the OOM killer).  Its command
 * then gets the stop signal from the kernel (PR_SET_PDEATHSIG), and a
 * spotd started again on the same state directory finds the record of the
 * group (child_claim_state_dir) and stops what is left of it before it
 * starts anything: a second trainer never runs beside the first. */
#include "child.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "spot/log.h"
#include "spot/parse.h"
#include "spot/proc.h"

enum child_state {
    CHILD_IDLE, CHILD_RUNNING, CHILD_DRAINING, CHILD_BACKOFF, CHILD_PARKED, CHILD_DONE
};
enum kill_phase { PHASE_NONE, PHASE_GRACE, PHASE_KILLED };

/* Signals spotd passes on to the command's whole group.  The first three
 * also start the stop sequence. */
static const int forwarded[] = { SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2 };
#define N_FORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))
#define N_EXTRA 8

static bool is_forwarded(int sig)
{
    for (size_t i = 0; i < N_FORWARDED; i++)
        if (forwarded[i] == sig)
            return true;
    return false;
}

struct child {
    struct event_base *base;      /* borrowed */
    struct child_opts opts;
    int argc;
    sigset_t orig_mask;

    enum child_state state;
    enum kill_phase phase;
    bool stopping;                /* a stop was asked: never restart */
    bool held;                    /* no restart: it was asked to finish (child_hold) */
    bool again;                   /* the next end restarts it (child_restart_once) */
    /* A world's pause (child_park): when the command has ended, spotd goes
     * on and this is called; child_start() starts it again. */
    void (*on_parked)(void *arg);
    void *parked_arg;
    uint64_t grace_ms;            /* of the stop under way */
    uint64_t kill_at_ms;          /* monotonic time of SIGKILL in PHASE_GRACE */
    pid_t pid;                    /* the command, 0 when not running */
    pid_t pgid;                   /* its group, kept after it exits */
    int status;                   /* last wait status of the command */
    int exit_code;
    int command_code;             /* the command's own, last time it ended */
    int exit_override;            /* spotd's exit code instead of the command's, or -1 */
    unsigned restarts;
    uint64_t backoff_ms;          /* next restart delay */
    uint64_t started_ms;          /* monotonic */

    struct event *sig_ev[N_FORWARDED];
    struct event *extra_ev[N_EXTRA]; /* notice signals that are not forwarded ones */
    size_t n_extra;
    struct event *sigchld_ev;
    struct event *kill_timer;     /* grace, then give-up */
    struct event *linger_timer;   /* a launcher whose workers are gone */
    unsigned linger_ticks;
    struct event *backoff_timer;
    /* A restart waits for its owner's word (child_before_restart). */
    void (*before_restart)(void *arg);
    void *before_arg;
    bool restart_waits;
    /* The state directory's (child_claim_state_dir): its lock, held while
     * spotd lives, and the record of the command's group; -1 and NULL
     * without one. */
    int lock_fd;
    char *record;
    char boot_id[PROC_BOOT_ID_LEN + 1];
    /* Other children of spotd whose end someone waits for (hooks). */
    struct {
        pid_t pid;
        child_reaped_fn fn;
        void *arg;
    } watched[CHILD_WATCH_MAX];
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct timeval ms_to_tv(uint64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
    return tv;
}

static const char *signame(int sig)
{
    const char *n = parse_signal_name(sig);
    return n ? n : "?";
}

static bool is_stop_signal(int sig)
{
    return sig == SIGTERM || sig == SIGINT || sig == SIGQUIT;
}

static int status_to_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 255;
}

/* Is any process left in the command's group (zombies included)? */
static bool group_alive(const struct child *c)
{
    return c->pgid > 0 && (kill(-c->pgid, 0) == 0 || errno == EPERM);
}

static void signal_group(struct child *c, int sig)
{
    if (c->pgid > 0 && kill(-c->pgid, sig) < 0 && errno != ESRCH)
        log_msg(LOGL_WARN, "cannot send SIG%s to process group %d: %s", signame(sig),
                (int)c->pgid, strerror(errno));
}

static void arm(struct event *ev, uint64_t ms)
{
    struct timeval tv = ms_to_tv(ms);
    evtimer_add(ev, &tv);
}

static void done(struct child *c, const char *reason)
{
    cJSON *e = log_event_new("exit");

    c->state = CHILD_DONE;
    if (c->exit_override >= 0) {
        cJSON_AddNumberToObject(e, "command_code", c->exit_code);
        c->exit_code = c->exit_override;
    }
    cJSON_AddNumberToObject(e, "code", c->exit_code);
    cJSON_AddStringToObject(e, "reason", reason);
    cJSON_AddNumberToObject(e, "restarts", c->restarts);
    log_event(LOGL_INFO, e, "spotd exits with code %d", c->exit_code);
    event_base_loopbreak(c->base);
}

static void spawn(struct child *c);
static void watch_launcher(struct child *c);
static void on_linger(evutil_socket_t fd, short what, void *arg);

/* The command and its group are gone: restart or end. */
static void finish(struct child *c)
{
    uint64_t ran_ms = now_ms() - c->started_ms, delay;
    cJSON *e;

    evtimer_del(c->kill_timer);
    event_del(c->linger_timer);
    c->phase = PHASE_NONE;
    c->exit_code = c->command_code = status_to_code(c->status);
    if (c->record && unlink(c->record) < 0 && errno != ENOENT)
        log_msg(LOGL_WARN, "cannot remove '%s': %s; a spotd started later checks the group "
                "it names and leaves it alone once it is gone", c->record, strerror(errno));

    if (c->on_parked) {
        void (*fn)(void *arg) = c->on_parked;
        e = log_event_new("parked");
        cJSON_AddNumberToObject(e, "code", c->exit_code);
        log_event(LOGL_INFO, e, "the command ended (code %d); spotd waits for the world to "
                  "resume", c->exit_code);
        c->state = CHILD_PARKED;
        c->on_parked = NULL;
        fn(c->parked_arg);
        return;
    }
    if (c->stopping || c->held)
        return done(c, "stopped");
    if (c->again) {
        c->again = false;
    } else if (c->opts.restart == RESTART_NEVER) {
        return done(c, "exited");
    } else if (c->opts.restart == RESTART_ON_FAILURE && c->exit_code == 0) {
        return done(c, "exited");
    }
    if (c->restarts >= c->opts.max_restarts) {
        log_msg(LOGL_WARN, "not restarting the command: it was restarted %u times "
                "(max_restarts); raise --max-restarts to allow more", c->restarts);
        return done(c, "max_restarts");
    }

    if (ran_ms >= CHILD_BACKOFF_MAX_MS)
        c->backoff_ms = CHILD_BACKOFF_MIN_MS;
    delay = c->backoff_ms;
    c->backoff_ms = delay * 2 > CHILD_BACKOFF_MAX_MS ? CHILD_BACKOFF_MAX_MS : delay * 2;

    c->state = CHILD_BACKOFF;
    e = log_event_new("restart");
    cJSON_AddNumberToObject(e, "restarts", c->restarts + 1);
    cJSON_AddNumberToObject(e, "delay_ms", (double)delay);
    cJSON_AddNumberToObject(e, "code", c->exit_code);
    log_event(LOGL_INFO, e, "restarting the command in %llu ms (restart %u of at most %u)",
              (unsigned long long)delay, c->restarts + 1, c->opts.max_restarts);
    arm(c->backoff_timer, delay);
}

static void main_exited(struct child *c, int status)
{
    cJSON *e = log_event_new("child_exit");

    c->status = status;
    cJSON_AddNumberToObject(e, "pid", c->pid);
    if (WIFSIGNALED(status)) {
        cJSON_AddStringToObject(e, "signal", signame(WTERMSIG(status)));
        cJSON_AddNumberToObject(e, "code", 128 + WTERMSIG(status));
    } else {
        cJSON_AddNumberToObject(e, "code", status_to_code(status));
    }
    cJSON_AddNumberToObject(e, "runtime_ms", (double)(now_ms() - c->started_ms));
    if (WIFSIGNALED(status))
        log_event(LOGL_INFO, e, "command killed by SIG%s", signame(WTERMSIG(status)));
    else
        log_event(LOGL_INFO, e, "command exited with code %d", status_to_code(status));
    c->pid = 0;

    if (!group_alive(c))
        return finish(c);

    /* Its group lives on (background jobs, workers): stop them too before
     * a restart can start a second copy beside them. */
    c->state = CHILD_DRAINING;
    if (c->phase != PHASE_NONE)
        return;
    e = log_event_new("stop");
    cJSON_AddStringToObject(e, "reason", "command exited, its group did not");
    cJSON_AddStringToObject(e, "signal", signame(c->opts.stop_signal));
    cJSON_AddNumberToObject(e, "pgid", c->pgid);
    cJSON_AddNumberToObject(e, "grace_ms", (double)c->opts.grace_ms);
    log_event(LOGL_INFO, e, "stopping what is left of process group %d", (int)c->pgid);
    signal_group(c, c->opts.stop_signal);
    c->phase = PHASE_GRACE;
    c->grace_ms = c->opts.grace_ms;
    c->kill_at_ms = now_ms() + c->grace_ms;
    arm(c->kill_timer, c->grace_ms);
}

/* pid was a watched child: tell its watcher.  Returns whether it was. */
static bool reaped_watched(struct child *c, pid_t pid, int status)
{
    for (size_t i = 0; i < CHILD_WATCH_MAX; i++) {
        if (c->watched[i].pid != pid)
            continue;
        c->watched[i].pid = 0;
        c->watched[i].fn(c->watched[i].arg, status);
        return true;
    }
    return false;
}

int child_watch(struct child *c, pid_t pid, child_reaped_fn fn, void *arg)
{
    for (size_t i = 0; i < CHILD_WATCH_MAX; i++) {
        if (c->watched[i].pid)
            continue;
        c->watched[i].pid = pid;
        c->watched[i].fn = fn;
        c->watched[i].arg = arg;
        return 0;
    }
    return -ENOSPC;
}

void child_unwatch(struct child *c, pid_t pid)
{
    for (size_t i = 0; i < CHILD_WATCH_MAX; i++)
        if (c->watched[i].pid == pid)
            c->watched[i].pid = 0;
}

static void on_sigchld(evutil_socket_t sig, short what, void *arg)
{
    struct child *c = arg;

    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            break;
        if (pid == c->pid) {
            main_exited(c, status);
            continue;
        }
        if (reaped_watched(c, pid, status))
            continue;
        log_msg(LOGL_DEBUG, "reaped pid %d (code %d)", (int)pid, status_to_code(status));
    }
    if (c->state == CHILD_DRAINING && !group_alive(c))
        finish(c);
}

static void on_kill_timer(evutil_socket_t fd, short what, void *arg)
{
    struct child *c = arg;
    cJSON *e;

    if (c->phase == PHASE_GRACE) {
        e = log_event_new("kill");
        cJSON_AddNumberToObject(e, "pgid", c->pgid);
        cJSON_AddNumberToObject(e, "grace_ms", (double)c->grace_ms);
        log_event(LOGL_WARN, e, "grace period over: sending SIGKILL to process group %d",
                  (int)c->pgid);
        signal_group(c, SIGKILL);
        c->phase = PHASE_KILLED;
        arm(c->kill_timer, 1000);
        return;
    }
    if (c->state == CHILD_DRAINING) {
        log_msg(LOGL_WARN, "processes of group %d remain after SIGKILL (stuck in the kernel?); "
                "no longer waiting for them", (int)c->pgid);
        finish(c);
    } else if (c->state == CHILD_RUNNING) {
        log_msg(LOGL_WARN, "command pid %d has not exited 1 s after SIGKILL; still waiting",
                (int)c->pid);
    }
}

static void on_backoff_timer(evutil_socket_t fd, short what, void *arg)
{
    struct child *c = arg;

    c->restarts++;
    if (c->before_restart) {
        c->restart_waits = true;
        c->before_restart(c->before_arg);
        return;
    }
    spawn(c);
}

void child_before_restart(struct child *c, void (*fn)(void *arg), void *arg)
{
    c->before_restart = fn;
    c->before_arg = arg;
}

void child_restart_now(struct child *c)
{
    if (c->state != CHILD_BACKOFF || !c->restart_waits)
        return;
    c->restart_waits = false;
    spawn(c);
}

static void begin_stop(struct child *c, int sig, const char *reason, uint64_t grace_ms)
{
    cJSON *e;

    if (!c->stopping) {
        c->stopping = true;
        c->grace_ms = grace_ms;
        e = log_event_new("stop");
        cJSON_AddStringToObject(e, "reason", reason);
        cJSON_AddStringToObject(e, "signal", signame(sig));
        cJSON_AddNumberToObject(e, "pgid", c->pgid);
        cJSON_AddNumberToObject(e, "grace_ms", (double)grace_ms);
        log_event(LOGL_INFO, e, "stopping the command: SIG%s, then SIGKILL after %llu ms",
                  signame(sig), (unsigned long long)grace_ms);
    }
    if (c->state == CHILD_BACKOFF || c->state == CHILD_PARKED) {
        evtimer_del(c->backoff_timer);
        if (c->state == CHILD_PARKED)
            c->exit_code = 128 + sig;
        done(c, "stopped");
        return;
    }
    watch_launcher(c);
    if ((c->state == CHILD_RUNNING || c->state == CHILD_DRAINING) && c->phase == PHASE_NONE) {
        c->phase = PHASE_GRACE;
        c->kill_at_ms = now_ms() + c->grace_ms;
        arm(c->kill_timer, c->grace_ms);
    }
}

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    struct child *c = arg;
    int sig = (int)fd;
    cJSON *e;

    if (sigismember(&c->opts.notice_only, sig)) {
        c->opts.on_notice_signal(c->opts.arg, sig);
        return;
    }
    if (c->state == CHILD_RUNNING || c->state == CHILD_DRAINING) {
        e = log_event_new("signal");
        cJSON_AddStringToObject(e, "signal", signame(sig));
        cJSON_AddNumberToObject(e, "pgid", c->pgid);
        log_event(LOGL_INFO, e, "forwarding SIG%s to process group %d", signame(sig),
                  (int)c->pgid);
        signal_group(c, sig);
    }
    if (is_stop_signal(sig))
        begin_stop(c, sig, "signal", c->opts.grace_ms);
    if (sig == SIGTERM && c->opts.on_notice_signal)
        c->opts.on_notice_signal(c->opts.arg, sig);
}

void child_set_exit_code(struct child *c, int code)
{
    c->exit_override = code;
}

void child_restart_once(struct child *c)
{
    c->again = true;
}

void child_hold(struct child *c)
{
    c->held = true;
    watch_launcher(c);
}

void child_park(struct child *c, void (*on_parked)(void *arg), void *arg)
{
    c->on_parked = on_parked;
    c->parked_arg = arg;
    if (c->state != CHILD_RUNNING && c->state != CHILD_DRAINING &&
        c->state != CHILD_BACKOFF) {
        /* Not running (not started yet, or parked already). */
        c->on_parked = NULL;
        c->state = CHILD_PARKED;
        on_parked(arg);
        return;
    }
    if (c->state == CHILD_BACKOFF) {
        evtimer_del(c->backoff_timer);
        c->restart_waits = false;
        c->on_parked = NULL;
        c->state = CHILD_PARKED;
        on_parked(arg);
    }
}

void child_unpark(struct child *c, void (*on_parked)(void *arg))
{
    if (c->on_parked == on_parked)
        c->on_parked = NULL;
}

void child_stop(struct child *c, const char *reason, uint64_t grace_ms)
{
    /* A pause's stop whose command has ended already. */
    if (c->state == CHILD_PARKED)
        return;
    if (c->stopping) {
        /* A tighter deadline brings SIGKILL forward, never back. */
        uint64_t now = now_ms();
        if (c->phase == PHASE_GRACE && now + grace_ms < c->kill_at_ms) {
            log_msg(LOGL_INFO, "%s: SIGKILL brought forward to %llu ms from now", reason,
                    (unsigned long long)grace_ms);
            c->kill_at_ms = now + grace_ms;
            arm(c->kill_timer, grace_ms);
        }
        return;
    }
    if (c->state == CHILD_RUNNING || c->state == CHILD_DRAINING)
        signal_group(c, c->opts.stop_signal);
    begin_stop(c, c->opts.stop_signal, reason, grace_ms);
}

void child_end(struct child *c, int code, const char *reason)
{
    if (c->state != CHILD_PARKED && c->state != CHILD_IDLE)
        return;
    c->exit_code = code;
    done(c, reason);
}

void child_set_argv(struct child *c, char *const *argv)
{
    c->opts.argv = argv;
    for (c->argc = 0; argv[c->argc]; c->argc++)
        ;
}

int child_resolve(const char *cmd, char *buf, size_t size)
{
    const char *path = getenv("PATH"), *p, *end;
    int r = -ENOENT;

    if (strchr(cmd, '/'))
        return (size_t)snprintf(buf, size, "%s", cmd) < size ? 0 : -ENAMETOOLONG;
    if (!path || !*path)
        path = "/bin:/usr/bin";
    for (p = path; p; p = *end ? end + 1 : NULL) {
        struct stat st;
        size_t len;

        end = strchrnul(p, ':');
        len = (size_t)(end - p);
        if ((size_t)snprintf(buf, size, "%.*s%s%s", (int)len, len ? p : ".", "/", cmd) >= size)
            continue;
        if (stat(buf, &st) < 0) {
            if (errno == EACCES)
                r = -EACCES;
            continue;
        }
        if (S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
            return 0;
        r = -EACCES;
    }
    return r;
}

void child_reset_signals(const sigset_t *mask)
{
    /* Every disposition back to default, glibc's internal signals (32, 33)
     * included, which sigaction() refuses to touch and posix_spawn() leaves
     * ignored: hence the system call.  A zeroed kernel sigaction is SIG_DFL
     * with no flags and an empty mask. */
    unsigned long ksa[4] = { 0, 0, 0, 0 };
    sigset_t none;

    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            syscall(SYS_rt_sigaction, sig, ksa, NULL, (size_t)8);
    if (!mask) {
        sigemptyset(&none);
        mask = &none;
    }
    sigprocmask(SIG_SETMASK, mask, NULL);
}

/* In the child, between fork() and execve(): only async-signal-safe calls. */
static __attribute__((noreturn)) void exec_child(const struct child *c, const char *path,
                                                  char *const *envp, pid_t parent, int errfd)
{
    int err;

    setsid();
    child_reset_signals(&c->orig_mask);
    /* spotd dying without a stop sends the command the stop signal; what
     * is left of its group, the next spotd stops (child_claim_state_dir).
     * A spotd gone before the prctl() is seen by getppid(). */
    prctl(PR_SET_PDEATHSIG, c->opts.stop_signal);
    if (getppid() != parent)
        _exit(128 + c->opts.stop_signal);
    execve(path, c->opts.argv, envp);
    err = errno;
    if (write(errfd, &err, sizeof(err)) < 0) {
        /* The parent then sees EOF and a child that exits 127. */
    }
    _exit(CHILD_EXIT_NOT_FOUND);
}

/* fork and exec the command; returns its pid, or -errno when it could not
 * be executed (the exec's own errno, passed back over a close-on-exec pipe). */
static pid_t fork_exec(const struct child *c)
{
    char path[4096], **envp;
    sigset_t all, saved;
    int fds[2], err = 0, r;
    pid_t pid, parent = getpid();
    ssize_t n;

    r = child_resolve(c->opts.argv[0], path, sizeof(path));
    if (r < 0)
        return r;
    if (!(envp = child_env_new(c, 0)))
        return -ENOMEM;
    if (pipe2(fds, O_CLOEXEC) < 0) {
        free(envp);
        return -errno;
    }
    /* No signal may run libevent's handler in the child before the reset. */
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &saved);
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        exec_child(c, path, envp, parent, fds[1]);
    }
    r = -errno;
    sigprocmask(SIG_SETMASK, &saved, NULL);
    free(envp);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return r;
    }
    /* Blocks only until the exec: EOF means it succeeded. */
    do
        n = read(fds[0], &err, sizeof(err));
    while (n < 0 && errno == EINTR);
    close(fds[0]);
    if (n == (ssize_t)sizeof(err)) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return -err;
    }
    return pid;
}

/* Write the record of the command's group (child_claim_state_dir): a
 * temporary file renamed over the last, so that a reader never sees half
 * of one.  A record that cannot be written is said, and the command runs. */
static void record_group(struct child *c)
{
    struct proc_grouprec rec = { .pgid = c->pgid, .spotd_pid = getpid() };
    char tmp[4200], text[256];
    struct proc_stat st;
    int fd, n, r;

    if (!c->record)
        return;
    if ((r = proc_stat_read(c->pid, &st)) < 0) {
        log_msg(LOGL_WARN, "cannot read the start time of pid %d (%s): no record of its group "
                "in '%s'", (int)c->pid, strerror(-r), c->record);
        return;
    }
    rec.start = st.start;
    memcpy(rec.boot_id, c->boot_id, sizeof(rec.boot_id));
    n = proc_grouprec_format(&rec, text, sizeof(text));
    snprintf(tmp, sizeof(tmp), "%s.tmp", c->record);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        r = -errno;
        goto fail;
    }
    r = n < 0 ? n : write(fd, text, (size_t)n) == n ? 0 : -EIO;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, c->record) < 0)
        r = -errno;
    if (r == 0)
        return;
    unlink(tmp);
fail:
    log_msg(LOGL_WARN, "cannot write '%s': %s; should this spotd die, the next could not stop "
            "what is left of the command", c->record, strerror(-r));
}

static void spawn(struct child *c)
{
    const char *cmd = c->opts.argv[0];
    pid_t pid;
    cJSON *e;
    int r;

    pid = fork_exec(c);
    r = pid < 0 ? (int)-pid : 0;
    if (r != 0) {
        bool missing = r == ENOENT || r == ENOTDIR;
        e = log_event_new("error");
        cJSON_AddStringToObject(e, "what", "exec");
        cJSON_AddStringToObject(e, "command", cmd);
        cJSON_AddStringToObject(e, "error", strerror(r));
        if (missing && !strchr(cmd, '/'))
            log_event(LOGL_ERROR, e, "cannot execute '%s': not found in PATH; check the "
                      "command name or give its full path", cmd);
        else if (missing)
            log_event(LOGL_ERROR, e, "cannot execute '%s': %s; check the path (and the "
                      "interpreter on its #! line)", cmd, strerror(r));
        else
            log_event(LOGL_ERROR, e, "cannot execute '%s': %s; check that it is an "
                      "executable file (chmod +x) and not a directory", cmd, strerror(r));
        c->exit_code = missing ? CHILD_EXIT_NOT_FOUND : CHILD_EXIT_CANNOT_EXEC;
        done(c, "cannot execute");
        return;
    }

    c->pid = pid;
    c->pgid = pid;
    c->state = CHILD_RUNNING;
    c->started_ms = now_ms();
    record_group(c);
    e = log_event_new("child_start");
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddItemToObject(e, "argv",
                          cJSON_CreateStringArray((const char *const *)c->opts.argv,
                                                  c->argc));
    cJSON_AddNumberToObject(e, "restarts", c->restarts);
    log_event(LOGL_INFO, e, "started '%s' as pid %d", cmd, (int)pid);
}

static void on_start(evutil_socket_t fd, short what, void *arg)
{
    struct child *c = arg;

    /* A start after a pause begins afresh: the stop that ended the last
     * run was the pause's. */
    if (c->state == CHILD_PARKED) {
        c->stopping = c->held = false;
        c->phase = PHASE_NONE;
        c->restarts = 0;
    }
    /* A stop signal that came before the loop first ran: never start. */
    if (c->stopping) {
        c->exit_code = 128 + c->opts.stop_signal;
        done(c, "stopped");
        return;
    }
    spawn(c);
}

/* The first spawn runs from the loop, like every later one, so that an
 * immediate failure can end the loop it is already in. */
int child_start(struct child *c)
{
    struct timeval now = { 0, 0 };

    return event_base_once(c->base, -1, EV_TIMEOUT, on_start, c, &now) < 0 ? -ENOMEM : 0;
}

int child_exit_code(const struct child *c)
{
    return c->exit_code;
}

int child_command_code(const struct child *c)
{
    return c->command_code;
}

struct child *child_new(struct event_base *base, const struct child_opts *opts,
                        const sigset_t *orig_mask)
{
    struct child *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->base = base;
    c->opts = *opts;
    c->orig_mask = *orig_mask;
    while (opts->argv[c->argc])
        c->argc++;
    c->backoff_ms = CHILD_BACKOFF_MIN_MS;
    c->exit_override = -1;
    c->command_code = -1;
    c->lock_fd = -1;
    for (size_t i = 0; i < N_FORWARDED; i++) {
        c->sig_ev[i] = evsignal_new(base, forwarded[i], on_signal, c);
        if (!c->sig_ev[i] || evsignal_add(c->sig_ev[i], NULL) < 0)
            goto out_free;
    }
    for (int sig = 1; sig < NSIG; sig++) {
        if (!sigismember(&opts->notice_only, sig) || is_forwarded(sig))
            continue;
        if (c->n_extra >= N_EXTRA)
            goto out_free;
        c->extra_ev[c->n_extra] = evsignal_new(base, sig, on_signal, c);
        if (!c->extra_ev[c->n_extra] || evsignal_add(c->extra_ev[c->n_extra], NULL) < 0)
            goto out_free;
        c->n_extra++;
    }
    c->sigchld_ev = evsignal_new(base, SIGCHLD, on_sigchld, c);
    c->kill_timer = evtimer_new(base, on_kill_timer, c);
    c->linger_timer = event_new(base, -1, EV_PERSIST, on_linger, c);
    c->backoff_timer = evtimer_new(base, on_backoff_timer, c);
    if (!c->sigchld_ev || !c->kill_timer || !c->linger_timer || !c->backoff_timer ||
        evsignal_add(c->sigchld_ev, NULL) < 0)
        goto out_free;
    return c;

out_free:
    child_free(c);
    errno = ENOMEM;
    return NULL;
}

pid_t child_pid(const struct child *c)
{
    return c->pid;
}

struct child *child_free(struct child *c)
{
    if (!c)
        return NULL;
    for (size_t i = 0; i < N_FORWARDED; i++)
        if (c->sig_ev[i])
            event_free(c->sig_ev[i]);
    for (size_t i = 0; i < c->n_extra; i++)
        event_free(c->extra_ev[i]);
    if (c->sigchld_ev)
        event_free(c->sigchld_ev);
    if (c->kill_timer)
        event_free(c->kill_timer);
    if (c->linger_timer)
        event_free(c->linger_timer);
    if (c->backoff_timer)
        event_free(c->backoff_timer);
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    free(c->record);
    free(c);
    return NULL;
}

/* Is pid a training launcher whose children are the workers (torchrun,
 * python -m torch.distributed.run, deepspeed, accelerate launch)?  Such a
 * launcher dies of signals it does not expect (../docs/methods.md). */
static bool is_launcher(pid_t pid)
{
    static const char *const names[] = { "torchrun", "torch.distributed.run",
                                         "torch.distributed.launch", "deepspeed",
                                         "accelerate" };
    char path[64], buf[4096];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    /* The first three arguments: the interpreter, "-m" and a module, or
     * the script. */
    buf[n] = '\0';
    for (char *arg = buf; arg < buf + n; arg += strlen(arg) + 1) {
        const char *base = strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(base, names[i]) == 0)
                return true;
        if (arg - buf > 256)
            break;
    }
    return false;
}

bool child_runs_launcher(const struct child *c)
{
    return c->state == CHILD_RUNNING && c->pid > 0 && is_launcher(c->pid);
}

int child_signal_workers(struct child *c, int sig)
{
    pid_t pids[256];
    size_t n;

    if (c->state != CHILD_RUNNING || c->pid <= 0)
        return -ESRCH;
    if (!is_launcher(c->pid)) {
        signal_group(c, sig);
        return 1;
    }
    n = proc_children(c->pid, pids, sizeof(pids) / sizeof(pids[0]));
    /* A worker still starting (importing torch) dies of a signal it has no
     * handler for yet: all of them, once all can take it. */
    for (size_t i = 0; i < n; i++)
        if (proc_catches(pids[i], sig) == 0)
            return -EAGAIN;
    for (size_t i = 0; i < n; i++)
        if (kill(pids[i], sig) < 0 && errno != ESRCH)
            log_msg(LOGL_WARN, "cannot send SIG%s to worker pid %d: %s", signame(sig),
                    (int)pids[i], strerror(errno));
    if (n)
        log_msg(LOGL_INFO, "SIG%s sent to the %zu workers of launcher pid %d", signame(sig), n,
                (int)c->pid);
    return n ? (int)n : -ESRCH;
}

/* A launcher (torchrun) can outlive its workers by minutes: in its exit
 * barrier it ignores SIGTERM (../shared/TORCHRUN.md).  Once a stop is under
 * way and its workers are gone, it gets LINGER_MS, then SIGKILL. */
#define LINGER_POLL_MS 500
#define LINGER_MS 3000

static void on_linger(evutil_socket_t fd, short what, void *arg)
{
    struct child *c = arg;
    pid_t pids[1];
    cJSON *e;

    if (c->pid <= 0 || c->state != CHILD_RUNNING) {
        event_del(c->linger_timer);
        return;
    }
    if (proc_children(c->pid, pids, 1) > 0) {
        c->linger_ticks = 0;
        return;
    }
    if (++c->linger_ticks * LINGER_POLL_MS < LINGER_MS)
        return;
    event_del(c->linger_timer);
    e = log_event_new("kill");
    cJSON_AddNumberToObject(e, "pgid", c->pgid);
    cJSON_AddStringToObject(e, "reason", "launcher lingers after its workers ended");
    log_event(LOGL_WARN, e, "launcher pid %d is still there %d ms after its workers ended: "
              "SIGKILL", (int)c->pid, LINGER_MS);
    signal_group(c, SIGKILL);
}

static void watch_launcher(struct child *c)
{
    struct timeval tv = { 0, LINGER_POLL_MS * 1000 };

    if (c->state != CHILD_RUNNING || c->pid <= 0 ||
        event_pending(c->linger_timer, EV_TIMEOUT, NULL) || !is_launcher(c->pid))
        return;
    c->linger_ticks = 0;
    event_add(c->linger_timer, &tv);
}

/* What child_env_new() keeps from the programs spotd starts unless
 * pass_credentials (child.h says which and why). */
static const char *const credential_vars[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_CREDENTIAL_EXPIRATION", "AWS_SHARED_CREDENTIALS_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
};
#define N_CREDENTIAL_VARS (sizeof(credential_vars) / sizeof(credential_vars[0]))

/* Is entry ("NAME=value") named name? */
static bool env_named(const char *entry, const char *name)
{
    size_t len = strlen(name);

    return strncmp(entry, name, len) == 0 && entry[len] == '=';
}

static bool withheld(const struct child *c, const char *entry)
{
    char name[64];

    for (size_t i = 0; !c->opts.pass_credentials && i < N_CREDENTIAL_VARS; i++)
        if (env_named(entry, credential_vars[i]))
            return true;
    if (strncmp(entry, "SPOTD_", 6) != 0)
        return false;
    for (int i = 0; i < OPT__COUNT; i++)
        if (config_options[i].secret &&
            env_named(entry, config_env_name((enum config_id)i, name, sizeof(name))))
            return true;
    return false;
}

char **child_env_new(const struct child *c, size_t first)
{
    size_t n = 0, k = first;
    char **envp;

    while (environ[n])
        n++;
    if (!(envp = calloc(first + n + 1, sizeof(*envp))))
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!withheld(c, environ[i]))
            envp[k++] = environ[i];
    return envp;
}

/* mkdir -p, each new directory 0700. */
static int make_dir(const char *path)
{
    char buf[4096];
    size_t len = strlen(path);

    if (len >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (char *slash = strchr(buf + 1, '/');; slash = strchr(slash + 1, '/')) {
        if (slash)
            *slash = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
            return -errno;
        if (!slash)
            return 0;
        *slash = '/';
    }
}

/* How many processes are left of the group rec names, when it is the
 * group that record's spotd started: 0 when it is gone, or when its pgid
 * names someone else's group now (see child_claim_state_dir). */
static int leftover(const struct child *c, const struct proc_grouprec *rec)
{
    struct proc_stat leader;
    uint64_t oldest;
    pid_t one;
    int n;

    if (strcmp(rec->boot_id, c->boot_id) != 0)
        return 0;
    if (proc_stat_read(rec->pgid, &leader) == 0 && leader.start != rec->start)
        return 0;
    n = proc_group_members(rec->pgid, &one, 1, &oldest);
    return n > 0 && oldest >= rec->start ? n : 0;
}

/* Wait until nothing is left of rec's group, or ms passed.  Returns how
 * many processes are left. */
static int wait_leftover(const struct child *c, const struct proc_grouprec *rec, uint64_t ms)
{
    uint64_t until = now_ms() + ms;
    int n;

    while ((n = leftover(c, rec)) > 0 && now_ms() < until)
        nanosleep(&(struct timespec){ 0, 50 * 1000 * 1000 }, NULL);
    return n;
}

/* Read the record at c->record.  Returns 1 with *rec set, 0 when there is
 * none, or none that can be read (said, and removed). */
static int read_record(const struct child *c, struct proc_grouprec *rec)
{
    char text[PROC_GROUPREC_MAX + 1];
    const char *why = "it cannot be read";
    struct stat st;
    ssize_t n = -1;
    int fd;

    fd = open(c->record, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        n = read(fd, text, sizeof(text));
    else if (fd >= 0)
        why = "it is not a regular file";
    if (fd >= 0)
        close(fd);
    if (n >= 0 && proc_grouprec_parse(text, (size_t)n, rec, &why) == 0)
        return 1;
    log_msg(LOGL_WARN, "ignoring '%s' (%s): it cannot say what a previous spotd left running",
            c->record, why);
    unlink(c->record);
    return 0;
}

/* Stop the group a previous spotd left running, if any (child.h). */
static int stop_leftover(struct child *c, char *err, size_t errlen)
{
    struct proc_grouprec rec;
    uint64_t t0 = now_ms();
    bool killed = false;
    int n, left, r;
    cJSON *e;

    if (read_record(c, &rec) == 0)
        return 0;
    if ((n = leftover(c, &rec)) == 0)
        goto out_unlink;
    log_msg(LOGL_WARN, "process group %d (%d process%s) was started by a spotd (pid %d) that "
            "ended without stopping it: stopping it (SIG%s, then SIGKILL after %llu ms) before "
            "starting anything", (int)rec.pgid, n, n == 1 ? "" : "es", (int)rec.spotd_pid,
            signame(c->opts.stop_signal), (unsigned long long)c->opts.grace_ms);
    if (kill(-rec.pgid, c->opts.stop_signal) < 0 && errno != ESRCH) {
        r = -errno;
        snprintf(err, errlen, "cannot stop process group %d, left running by a spotd that is "
                 "gone (pid %d): %s; stop it yourself (kill -KILL -- -%d), then start spotd "
                 "again", (int)rec.pgid, (int)rec.spotd_pid, strerror(-r), (int)rec.pgid);
        return r;
    }
    left = wait_leftover(c, &rec, c->opts.grace_ms);
    if (left > 0) {
        killed = true;
        kill(-rec.pgid, SIGKILL);
        left = wait_leftover(c, &rec, 10000);
    }
    e = log_event_new("leftover");
    cJSON_AddNumberToObject(e, "pgid", rec.pgid);
    cJSON_AddNumberToObject(e, "spotd_pid", rec.spotd_pid);
    cJSON_AddNumberToObject(e, "processes", n);
    cJSON_AddStringToObject(e, "signal", signame(killed ? SIGKILL : c->opts.stop_signal));
    cJSON_AddNumberToObject(e, "left", left);
    cJSON_AddNumberToObject(e, "ms", (double)(now_ms() - t0));
    if (left > 0)
        log_event(LOGL_WARN, e, "%d process%s of group %d still there 10 s after SIGKILL "
                  "(stuck in the kernel): going on", left, left == 1 ? "" : "es", (int)rec.pgid);
    else
        log_event(LOGL_INFO, e, "process group %d, left by spotd pid %d, is gone (%s)",
                  (int)rec.pgid, (int)rec.spotd_pid, killed ? "SIGKILL" : "it stopped");
out_unlink:
    unlink(c->record);
    return 0;
}

int child_claim_state_dir(struct child *c, const char *dir, char *err, size_t errlen)
{
    char path[4200], holder[32] = "";
    ssize_t n;
    int fd, r;

    if ((r = make_dir(dir)) < 0) {
        snprintf(err, errlen, "cannot create the state directory '%s': %s; check --state-dir",
                 dir, strerror(-r));
        return r;
    }
    if ((r = proc_boot_id(c->boot_id, sizeof(c->boot_id))) < 0) {
        snprintf(err, errlen, "cannot read this boot's id from /proc (%s): spotd needs /proc",
                 strerror(-r));
        return r;
    }
    snprintf(path, sizeof(path), "%s/lock", dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (fd < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot open '%s': %s; check --state-dir", path, strerror(-r));
        return r;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        r = errno == EWOULDBLOCK ? -EBUSY : -errno;
        n = pread(fd, holder, sizeof(holder) - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strspn(holder, "0123456789")] = '\0';
        close(fd);
        if (r == -EBUSY)
            snprintf(err, errlen, "another spotd%s%s%s runs on the state directory '%s': two "
                     "would each start the command; give each spotd its own --state-dir",
                     holder[0] ? " (pid " : "", holder, holder[0] ? ")" : "", dir);
        else
            snprintf(err, errlen, "cannot lock '%s': %s", path, strerror(-r));
        return r;
    }
    n = snprintf(holder, sizeof(holder), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, holder, (size_t)n, 0) != n)
        log_msg(LOGL_WARN, "cannot write spotd's pid into '%s': %s", path, strerror(errno));
    snprintf(path, sizeof(path), "%s/command.json", dir);
    if (!(c->record = strdup(path))) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    c->lock_fd = fd;
    return stop_leftover(c, err, errlen);
}
