/* control: the control socket and the checkpoint of the node's workers.
 *
 * DESIGN.  One listening socket and one event per worker connection, all on
 * the loop; reads are non-blocking and lines are parsed with libckpt's own
 * reader (jsonl.c), so both sides agree on what a message is.  A
 * checkpoint is a small state machine over the workers connected when it
 * starts: QUERY (each says its step) -> SAVE (each saves at the common
 * step) -> done.  Writes are small and rare; a worker whose socket does
 * not take a whole message at once is treated as gone. */
#include "control.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "libckpt/jsonl.h"
#include "spot/log.h"
#include "spot/notice.h"

#define WORKERS_MAX 256

/* DECIDE: every worker answered; the step is the caller's (ask). */
enum phase { IDLE, QUERY, DECIDE, SAVE };

struct worker {
    struct control *c;
    int fd;
    struct event *ev;
    bool hello;
    long long pid, local_rank;
    char in[JSONL_LINE_MAX];
    size_t in_len;
    char line[JSONL_LINE_MAX];
    /* the checkpoint under way */
    bool in_ck, answered, saved;
    long long step;
};

struct control {
    struct event_base *base;
    struct control_opts o;
    char *path, *resume_dir;
    int lfd;
    struct event *lev, *timer;
    struct worker *w[WORKERS_MAX];
    unsigned n;
    unsigned peak;                 /* most workers connected at once */
    unsigned said;                 /* the largest local_world_size a hello gave */
    int64_t last_step;             /* the step last reported */
    /* the training rate, from one worker's progress reports */
    long long rate_pid, rate_step;
    int64_t rate_ms;
    double steps_per_s;
    int64_t resume_step;
    uint64_t resume_gen;
    /* the checkpoint under way */
    enum phase phase;
    long long id;
    uint64_t gen;
    char *dir;
    control_step_fn ask;
    control_saved_fn done;
    void *arg;
};

static void end_checkpoint(struct control *c, int err, int64_t step, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int send_kv(struct worker *w, const struct jsonl_kv *kv, size_t n)
{
    char line[JSONL_LINE_MAX + 2];
    int len = jsonl_build(line, sizeof(line), kv, n);

    if (len < 0)
        return -EINVAL;
    /* Small messages to a socket that is drained all the time. */
    if (send(w->fd, line, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT) != len)
        return -EPIPE;
    return 0;
}

static void worker_free(struct worker *w)
{
    struct control *c = w->c;

    for (unsigned i = 0; i < c->n; i++)
        if (c->w[i] == w) {
            c->w[i] = c->w[--c->n];
            break;
        }
    event_free(w->ev);
    close(w->fd);
    free(w);
}

static void worker_gone(struct worker *w, const char *why)
{
    struct control *c = w->c;
    bool was_in = w->in_ck && c->phase != IDLE;
    long long pid = w->pid, rank = w->local_rank;

    log_msg(LOGL_INFO, "trainer pid %lld (local rank %lld) left: %s", pid, rank, why);
    worker_free(w);
    if (was_in)
        end_checkpoint(c, -EPIPE, -1, "trainer pid %lld (local rank %lld) went away during "
                                      "the checkpoint: %s", pid, rank, why);
}

static void worker_dir(const struct worker *w, const char *base, char *out, size_t size)
{
    snprintf(out, size, "%s/w%lld", base, w->local_rank >= 0 ? w->local_rank : 0);
}

/* The largest step the workers of the checkpoint answered. */
static long long largest_step(const struct control *c)
{
    long long step = 0;

    for (unsigned i = 0; i < c->n; i++)
        if (c->w[i]->in_ck && c->w[i]->step > step)
            step = c->w[i]->step;
    return step;
}

/* Ask every worker of the checkpoint to save at target, a step each can
 * still reach (each waits at the step it answered). */
static void start_save(struct control *c, long long target)
{
    c->phase = SAVE;
    for (unsigned i = 0; i < c->n; i++) {
        struct worker *w = c->w[i];
        char dir[4096];

        if (!w->in_ck)
            continue;
        worker_dir(w, c->dir, dir, sizeof(dir));
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
            end_checkpoint(c, -errno, -1, "cannot create '%s': %s", dir, strerror(errno));
            return;
        }
        {
            struct jsonl_kv kv[] = {
                JSONL_STR("type", "checkpoint"),
                JSONL_INT("id", c->id),
                JSONL_INT("gen", (long long)c->gen),
                JSONL_INT("step", target),
                JSONL_STR("dir", dir),
            };
            if (send_kv(w, kv, 5) < 0) {
                worker_gone(w, "cannot write to it");
                return;
            }
        }
    }
}

/* Workers a checkpoint needs: --local-workers (or LOCAL_WORLD_SIZE), else
 * as many as were ever connected at once. */
static unsigned expected(const struct control *c)
{
    unsigned n = c->peak > c->said ? c->peak : c->said;

    /* At least one: a notice during the trainer's start-up (an import of
     * torch takes seconds) waits for it to connect. */
    return c->o.expect ? c->o.expect : n ? n : 1;
}

static unsigned in_checkpoint(const struct control *c)
{
    unsigned n = 0;

    for (unsigned i = 0; i < c->n; i++)
        n += c->w[i]->in_ck;
    return n;
}

static void check_progress(struct control *c)
{
    long long step = -1;
    bool all = in_checkpoint(c) >= expected(c) && in_checkpoint(c) > 0;

    for (unsigned i = 0; i < c->n; i++) {
        struct worker *w = c->w[i];
        if (!w->in_ck)
            continue;
        if (c->phase == SAVE ? !w->saved : !w->answered)
            all = false;
        else if (c->phase == SAVE && step >= 0 && w->step != step) {
            end_checkpoint(c, -EPROTO, -1, "trainers saved different steps (%lld, %lld)", step,
                           w->step);
            return;
        } else
            step = w->step;
    }
    if (!all || c->phase == DECIDE)
        return;
    if (c->phase == QUERY && c->ask) {
        c->phase = DECIDE;
        c->ask(c->arg, largest_step(c));
    } else if (c->phase == QUERY)
        start_save(c, largest_step(c) + 1);
    else
        end_checkpoint(c, 0, step, "%s", "");
}

/* One message from a worker.  Returns 0, 1 when the connection is done
 * (a command was answered), or -1 when it must go for a protocol error. */
static int handle(struct worker *w, const struct jsonl_msg *m)
{
    struct control *c = w->c;
    const char *type = jsonl_type(m);
    const struct jsonl_value *v = jsonl_get(m, "v");
    const struct jsonl_value *id = jsonl_get(m, "id"), *step = jsonl_get(m, "step");

    if (!type || !v || v->type != JSONL_INT || v->num != 1)
        return -1;
    if (!w->hello && strcmp(type, "command") == 0) {
        const struct jsonl_value *cmd = jsonl_get(m, "cmd");
        char reply[JSONL_LINE_MAX];

        if (!cmd || cmd->type != JSONL_STRING || !c->o.on_command)
            return -1;
        c->o.on_command(c->o.arg, cmd->str, m, reply, sizeof(reply) - 1);
        strcat(reply, "\n");
        send(w->fd, reply, strlen(reply), MSG_NOSIGNAL | MSG_DONTWAIT);
        return 1; /* one command per connection */
    }
    if (!w->hello) {
        const struct jsonl_value *pid = jsonl_get(m, "pid"), *rank = jsonl_get(m, "local_rank");
        const struct jsonl_value *size = jsonl_get(m, "local_world_size");
        char dir[4096];
        const char *resume = NULL;

        if (strcmp(type, "hello") != 0 || !pid || pid->type != JSONL_INT || !rank ||
            rank->type != JSONL_INT)
            return -1;
        w->hello = true;
        w->pid = pid->num;
        w->local_rank = rank->num;
        if (size && size->type == JSONL_INT && size->num > (long long)c->said &&
            size->num <= WORKERS_MAX)
            c->said = (unsigned)size->num;
        if (c->resume_dir && c->o.flat) {
            resume = c->resume_dir;
        } else if (c->resume_dir) {
            worker_dir(w, c->resume_dir, dir, sizeof(dir));
            resume = dir;
        }
        {
            struct jsonl_kv kv[] = {
                JSONL_STR("type", "welcome"),
                JSONL_STR("resume_dir", resume),
                JSONL_INT("resume_step", c->resume_step),
                JSONL_INT("gen", (long long)c->resume_gen),
            };

            if (!resume)
                kv[2].type = kv[3].type = JSONL_NULL; /* a fresh start */
            if (send_kv(w, kv, 4) < 0)
                return -1;
        }
        log_msg(LOGL_INFO, "trainer pid %lld (local rank %lld) connected", w->pid, w->local_rank);
        if (control_workers(c) > c->peak)
            c->peak = control_workers(c);
        /* A worker that comes while the others are asked for their step
         * takes part in the checkpoint. */
        if (c->phase == QUERY) {
            struct jsonl_kv q[] = { JSONL_STR("type", "query"), JSONL_INT("id", c->id) };
            w->in_ck = true;
            w->answered = w->saved = false;
            if (send_kv(w, q, 2) < 0)
                return -1;
        }
        return 0;
    }
    if (strcmp(type, "progress") == 0) {
        int64_t now = notice_now_ms();

        if (!step || step->type != JSONL_INT || step->num < 0)
            return -1;
        /* The rate over reports at least 5 s apart, from one worker. */
        if (c->rate_pid != w->pid || step->num < c->rate_step) {
            c->rate_pid = w->pid;
            c->rate_step = step->num;
            c->rate_ms = now;
        } else if (now - c->rate_ms >= 5000) {
            c->steps_per_s =
                (double)(step->num - c->rate_step) * 1000.0 / (double)(now - c->rate_ms);
            c->rate_step = step->num;
            c->rate_ms = now;
        }
        c->last_step = step->num;
        return 0;
    }
    if (strcmp(type, "request") == 0) {
        if (c->o.on_request)
            c->o.on_request(c->o.arg);
        return 0;
    }
    if ((strcmp(type, "step") == 0 || strcmp(type, "saved") == 0 ||
         strcmp(type, "failed") == 0) &&
        (!id || id->type != JSONL_INT))
        return -1;
    if (strcmp(type, "step") == 0 || strcmp(type, "saved") == 0) {
        if (!step || step->type != JSONL_INT || step->num < 0)
            return -1;
        /* Answers to a checkpoint that was given up are ignored. */
        if (step->num > c->last_step)
            c->last_step = step->num;
        if (id->num == 0 && strcmp(type, "saved") == 0) {
            if (c->o.on_saved)
                c->o.on_saved(c->o.arg, step->num);
            return 0;
        }
        if (c->phase == IDLE || id->num != c->id || !w->in_ck)
            return 0;
        w->step = step->num;
        if (strcmp(type, "step") == 0)
            w->answered = true;
        else
            w->saved = true;
        check_progress(c);
        return 0;
    }
    if (strcmp(type, "failed") == 0) {
        const struct jsonl_value *why = jsonl_get(m, "reason");

        if (c->phase != IDLE && id->num == c->id && w->in_ck)
            end_checkpoint(c, -EIO, -1, "trainer pid %lld (local rank %lld) could not save: %.200s",
                           w->pid, w->local_rank,
                           why && why->type == JSONL_STRING ? why->str : "no reason given");
        return 0;
    }
    return -1;
}

static void on_worker(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    ssize_t n = recv(fd, w->in + w->in_len, sizeof(w->in) - w->in_len, MSG_DONTWAIT);
    char *nl;
    int r;

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        worker_gone(w, n == 0 ? "closed the connection" : strerror(errno));
        return;
    }
    w->in_len += (size_t)n;
    while ((nl = memchr(w->in, '\n', w->in_len))) {
        size_t len = (size_t)(nl - w->in);
        struct jsonl_msg m;

        memcpy(w->line, w->in, len);
        w->in_len -= len + 1;
        memmove(w->in, nl + 1, w->in_len);
        r = jsonl_parse(w->line, len, &m) < 0 ? -1 : handle(w, &m);
        if (r > 0) {
            worker_free(w);
            return;
        }
        if (r < 0) {
            worker_gone(w, "protocol error");
            return;
        }
        /* handle() may have ended a checkpoint; its callback cannot free
         * a worker (workers go only here), so w is still valid. */
    }
    if (w->in_len == sizeof(w->in))
        worker_gone(w, "line over 64 KiB");
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct control *c = arg;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    struct worker *w;
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0)
        return;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
        (cred.uid != getuid() && cred.uid != 0)) {
        log_msg(LOGL_WARN, "a process of another user (uid %d) tried the control socket",
                (int)cred.uid);
        close(fd);
        return;
    }
    if (c->n == WORKERS_MAX || !(w = calloc(1, sizeof(*w)))) {
        close(fd);
        return;
    }
    w->c = c;
    w->fd = fd;
    w->local_rank = -1;
    w->ev = event_new(c->base, fd, EV_READ | EV_PERSIST, on_worker, w);
    if (!w->ev || event_add(w->ev, NULL) < 0) {
        if (w->ev)
            event_free(w->ev);
        free(w);
        close(fd);
        return;
    }
    c->w[c->n++] = w;
}

static void end_checkpoint(struct control *c, int err, int64_t step, const char *fmt, ...)
{
    control_saved_fn done = c->done;
    void *arg = c->arg;
    char msg[1024];
    va_list ap;

    if (c->phase == IDLE)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (err) {
        struct jsonl_kv kv[] = { JSONL_STR("type", "cancel"), JSONL_INT("id", c->id) };
        for (unsigned i = 0; i < c->n; i++)
            if (c->w[i]->in_ck)
                send_kv(c->w[i], kv, 2);
    }
    for (unsigned i = 0; i < c->n; i++)
        c->w[i]->in_ck = false;
    c->phase = IDLE;
    evtimer_del(c->timer);
    free(c->dir);
    c->dir = NULL;
    done(arg, err, msg, step);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct control *c = arg;

    for (unsigned i = 0; i < c->n; i++) {
        struct worker *w = c->w[i];
        if (w->in_ck && !(c->phase == SAVE ? w->saved : w->answered)) {
            end_checkpoint(c, -ETIMEDOUT, -1,
                           "trainer pid %lld (local rank %lld) did not %s before the deadline",
                           w->pid, w->local_rank,
                           c->phase == SAVE ? "report its save" : "say its step");
            return;
        }
    }
    if (c->phase == DECIDE) {
        end_checkpoint(c, -ETIMEDOUT, -1, "the step to save at was not given before the "
                       "deadline");
        return;
    }
    if (c->n && in_checkpoint(c) < expected(c)) {
        end_checkpoint(c, -ETIMEDOUT, -1, "only %u of the %u local workers took part (%s): "
                       "one did not connect, or died; check --local-workers", in_checkpoint(c),
                       expected(c), c->o.expect       ? "--local-workers or LOCAL_WORLD_SIZE"
                                    : c->said > c->peak ? "the trainers' LOCAL_WORLD_SIZE"
                                                        : "as many as were connected before");
        return;
    }
    end_checkpoint(c, c->n ? -ETIMEDOUT : -ENOTCONN, -1, "%s",
                   c->n ? "the deadline passed"
                        : "no trainer is connected to the control socket: is it linked with "
                          "libckpt (or libckpt.py), and run under spotd?");
}

int control_checkpoint(struct control *c, uint64_t gen, const char *dir, int64_t deadline_ms,
                       control_step_fn ask, control_saved_fn done, void *arg)
{
    if (c->phase != IDLE)
        return -EBUSY;
    if (deadline_ms <= 0)
        return -EINVAL;
    if (!(c->dir = strdup(dir)))
        return -ENOMEM;
    c->id++;
    c->gen = gen;
    c->ask = ask;
    c->done = done;
    c->arg = arg;
    c->phase = QUERY;
    for (unsigned i = 0; i < c->n; i++) {
        struct worker *w = c->w[i];
        struct jsonl_kv kv[] = { JSONL_STR("type", "query"), JSONL_INT("id", c->id) };

        if (!w->hello)
            continue;
        w->in_ck = true;
        w->answered = w->saved = false;
        send_kv(w, kv, 2);
    }
    {
        int64_t left = deadline_ms - notice_now_ms();
        struct timeval tv = { .tv_sec = left > 0 ? left / 1000 : 0,
                              .tv_usec = left > 0 ? (left % 1000) * 1000 : 0 };
        evtimer_add(c->timer, &tv);
    }
    return 0;
}

int control_save_at(struct control *c, int64_t step)
{
    if (c->phase != DECIDE)
        return -EINVAL;
    if (step <= largest_step(c))
        return -ERANGE;
    start_save(c, step);
    return 0;
}

void control_cancel(struct control *c, const char *reason)
{
    end_checkpoint(c, -ECANCELED, -1, "%s", reason);
}

void control_stop(struct control *c, const char *reason)
{
    struct jsonl_kv kv[] = { JSONL_STR("type", "stop"), JSONL_STR("reason", reason) };

    for (unsigned i = 0; i < c->n; i++)
        if (c->w[i]->hello)
            send_kv(c->w[i], kv, 2);
}

int control_set_resume(struct control *c, const char *dir, int64_t step, uint64_t gen)
{
    char *copy = dir ? strdup(dir) : NULL;

    if (dir && !copy)
        return -ENOMEM;
    free(c->resume_dir);
    c->resume_dir = copy;
    c->resume_step = step;
    c->resume_gen = gen;
    return 0;
}

int64_t control_step(const struct control *c)
{
    return c->last_step;
}

double control_rate(const struct control *c)
{
    return c->steps_per_s;
}

unsigned control_workers(const struct control *c)
{
    unsigned n = 0;

    for (unsigned i = 0; i < c->n; i++)
        n += c->w[i]->hello;
    return n;
}

struct control *control_new(const struct control_opts *o, char *err, size_t errlen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct control *c;
    mode_t old;

    if (strlen(o->path) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "control socket path '%s' is too long", o->path);
        return NULL;
    }
    if (!(c = calloc(1, sizeof(*c)))) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->base = o->base;
    c->o = *o;
    c->lfd = -1;
    c->last_step = -1;
    c->resume_step = o->resume_step;
    c->resume_gen = o->resume_gen;
    c->path = strdup(o->path);
    c->resume_dir = o->resume_dir ? strdup(o->resume_dir) : NULL;
    c->timer = evtimer_new(o->base, on_deadline, c);
    if (!c->path || (o->resume_dir && !c->resume_dir) || !c->timer) {
        snprintf(err, errlen, "out of memory");
        return control_free(c);
    }
    memcpy(sa.sun_path, o->path, strlen(o->path) + 1);
    unlink(o->path); /* a socket left by a spotd that died */
    c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    old = umask(0077);
    if (c->lfd < 0 || bind(c->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(c->lfd, 64) < 0) {
        umask(old);
        snprintf(err, errlen, "cannot listen on the control socket '%s': %s", o->path,
                 strerror(errno));
        return control_free(c);
    }
    umask(old);
    chmod(o->path, 0600);
    c->lev = event_new(o->base, c->lfd, EV_READ | EV_PERSIST, on_accept, c);
    if (!c->lev || event_add(c->lev, NULL) < 0) {
        snprintf(err, errlen, "out of memory");
        return control_free(c);
    }
    return c;
}

struct control *control_free(struct control *c)
{
    if (!c)
        return NULL;
    while (c->n > 0)
        worker_free(c->w[0]);
    if (c->lev)
        event_free(c->lev);
    if (c->timer)
        event_free(c->timer);
    if (c->lfd >= 0) {
        close(c->lfd);
        unlink(c->path);
    }
    free(c->path);
    free(c->resume_dir);
    free(c->dir);
    free(c);
    return NULL;
}
