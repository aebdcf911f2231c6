/* control: the control socket and the checkpoint of the node's workers.
 *
 * DESIGN.  One listening socket and one event per worker connection, all on
 * the loop; reads are non-blocking and lines are parsed with libckpt's own
 * reader (jsonl.c), so both sides agree on what a message is; one table
 * of kinds (kinds[]) says which a connection takes before and after its
 * hello and which members each needs, checked before its handler runs.  A
 * checkpoint is a small state machine over the workers connected when it
 * starts: QUERY (each says its step) -> SAVE (each saves at the common
 * step) -> done; a worker with none to agree with goes to SAVE at once.  Writes are small and rare; a worker whose socket does
 * not take a whole message at once is treated as gone.
 *
 * Who counts.  Anything of spotd's user can connect, so neither a
 * connection nor a hello proves a trainer.  A checkpoint waits for the
 * workers that count (control.h); each rule drops a client that is not a
 * trainer and never one that is:
 * - a connection says its first message at once (libckpt its hello,
 *   spotctl its command): one that has not within hello_ms is closed, and
 *   when every slot is taken the oldest such one makes room for the next;
 *   workers have WORKERS_MAX of the CONNS_MAX slots, so there is always one
 *   for spotctl;
 * - a worker that reports no step (progress, step or saved) within
 *   quiet_ms of its hello stops counting until it reports one.  A trainer
 *   reports its first step at its first ckpt_step(), and is never dropped
 *   for silence after that, however long a step takes; one that loads for
 *   longer than quiet_ms before its first step counts from that step, and
 *   a node of several workers that declares how many (--local-workers, or
 *   LOCAL_WORLD_SIZE, which torchrun sets) still never checkpoints without
 *   it.  The connection stays open.  Not under the signal and dir methods
 *   (o.flat), whose trainers may only ever call ckpt_saved() and whose
 *   checkpoints count no workers;
 * - a worker that reported a step and left still counts for gone_ms, so
 *   that a checkpoint during a trainer's restart does not go ahead without
 *   it, unless a worker of its local rank says hello again; one that never
 *   reported a step stops counting when it leaves.
 * A local_world_size counts while the worker that said it does.  Every
 * timeout here runs on the monotonic clock; only the checkpoint's deadline,
 * which comes from a cloud, is wall-clock time. */
#include "control.h"

#include <errno.h>
#include <limits.h>
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

#define WORKERS_MAX 256            /* connections that said hello */
#define CONNS_MAX (WORKERS_MAX + 16) /* all connections: room for spotctl */
#define HELLO_MS 5000
#define QUIET_MS 60000
#define GONE_MS 60000
#define SILENT_LOG_MS 60000        /* closed silent connections: a line a minute */
#define HOLD_MIN_MS 500            /* a terminating notice's hold at the answered step */
#define HOLD_MAX_MS 5000

/* DECIDE: every worker answered; the step is the caller's (ask). */
enum phase { IDLE, QUERY, DECIDE, SAVE };

struct worker {
    struct control *c;
    int fd;
    struct event *ev;
    struct event *timer;           /* for the first message, then the first step */
    int peer;                      /* SO_PEERCRED's pid */
    int64_t since_ms;              /* monotonic: when it connected */
    bool hello;
    bool stepped;                  /* reported a step since its hello */
    bool quiet;                    /* no step quiet_ms after its hello: does not count */
    long long pid, local_rank, size; /* size: its hello's local_world_size, or -1 */
    char in[JSONL_LINE_MAX];
    size_t in_len;
    char line[JSONL_LINE_MAX];
    /* the checkpoint under way */
    bool in_ck, answered, saved;
    bool held;                     /* it waits at the step it answered */
    long long step;
    bool waits;                    /* its libckpt waits for a restore (hello's resume_wait) */
    bool welcomed;                 /* else its welcome waits for the restore to end */
};

struct control {
    struct event_base *base;
    struct control_opts o;
    char *path, *resume_dir;
    int lfd;
    struct event *lev, *timer;
    struct worker *w[CONNS_MAX];
    unsigned n;
    int64_t hello_ms, quiet_ms, gone_ms;
    /* Workers that reported a step and left: they count until until_ms
     * (monotonic), or until a worker of their local rank says hello. */
    struct gone {
        long long rank, size;
        int64_t until_ms;
    } gone[WORKERS_MAX];
    unsigned n_gone;
    struct event *gone_timer;
    /* connections closed for saying nothing, not yet said in the log */
    unsigned long long silent;
    int64_t silent_ms;             /* when that was last said; 0: never */
    int64_t last_step;             /* the step last reported */
    /* the training rate, from one worker's progress reports */
    long long rate_pid, rate_step;
    int64_t rate_ms;
    double steps_per_s;
    int64_t resume_step;
    uint64_t resume_gen;
    bool restoring;                /* the command started before its restore ended */
    /* the checkpoint under way */
    enum phase phase;
    long long id;
    uint64_t gen;
    char *dir;
    uint64_t hold_gen;             /* control_hold_next()'s; 0: none */
    int64_t hold_ms;               /* the query's hold; 0: none */
    long long target;              /* the step asked for (SAVE) */
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
    event_free(w->timer);
    close(w->fd);
    free(w);
}

static bool counts(const struct worker *w)
{
    return w->hello && !w->quiet;
}

/* The rank whose directory a worker saves into (a worker without
 * LOCAL_RANK saves as 0). */
static long long dir_rank(long long rank)
{
    return rank >= 0 ? rank : 0;
}

/* A worker that counts has this rank: a record of one that left with it
 * counts no more. */
static bool rank_counted(const struct control *c, long long rank)
{
    for (unsigned i = 0; i < c->n; i++)
        if (counts(c->w[i]) && dir_rank(c->w[i]->local_rank) == dir_rank(rank))
            return true;
    return false;
}

static void check_progress(struct control *c);

/* Forget the workers that left long enough ago (and, by_rank, those of
 * rank: a worker of that rank is back), and arm the timer for the next. */
static void prune_gone(struct control *c, bool by_rank, long long rank)
{
    int64_t now = notice_mono_ms(), next = INT64_MAX;
    unsigned j = 0;

    for (unsigned i = 0; i < c->n_gone; i++) {
        struct gone *g = &c->gone[i];

        if (g->until_ms <= now || (by_rank && dir_rank(g->rank) == dir_rank(rank)))
            continue;
        if (g->until_ms < next)
            next = g->until_ms;
        c->gone[j++] = *g;
    }
    c->n_gone = j;
    evtimer_del(c->gone_timer);
    if (j) {
        int64_t ms = next - now;
        struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = ms % 1000 * 1000 };

        evtimer_add(c->gone_timer, &tv);
    }
}

static void on_gone_timer(evutil_socket_t fd, short what, void *arg)
{
    struct control *c = arg;

    prune_gone(c, false, 0);
    /* Fewer workers to wait for: the others may be all there is. */
    if (c->phase == QUERY)
        check_progress(c);
}

/* Connections closed for saying nothing are said in one line a minute at
 * most: a client that opens the socket in a loop does not flood the log. */
static void closed_silent(struct control *c, int pid, const char *why)
{
    int64_t now = notice_mono_ms();

    c->silent++;
    if (c->silent_ms && now - c->silent_ms < SILENT_LOG_MS)
        return;
    log_msg(LOGL_WARN, "closed %llu connection%s to the control socket that said nothing, the "
            "last (pid %d) because %s; a trainer says hello at once, and spotctl its command "
            "(more such are said once a minute at most)", c->silent,
            c->silent == 1 ? "" : "s", pid, why);
    c->silent = 0;
    c->silent_ms = now;
}

static void worker_gone(struct worker *w, const char *why)
{
    struct control *c = w->c;
    bool was_in = w->in_ck && c->phase != IDLE;
    long long pid = w->pid, rank = w->local_rank;

    log_msg(LOGL_INFO, "trainer pid %lld (local rank %lld) left: %s", pid, rank, why);
    if (w->hello && w->stepped && c->n_gone < WORKERS_MAX) {
        c->gone[c->n_gone++] = (struct gone){ .rank = rank, .size = w->size,
                                              .until_ms = notice_mono_ms() + c->gone_ms };
        prune_gone(c, false, 0);
    }
    worker_free(w);
    if (was_in)
        end_checkpoint(c, -EPIPE, -1, "trainer pid %lld (local rank %lld) went away during "
                                      "the checkpoint: %s", pid, rank, why);
}

static void worker_dir(const struct worker *w, const char *base, char *out, size_t size)
{
    snprintf(out, size, "%s/w%lld", base, w->local_rank >= 0 ? w->local_rank : 0);
}

/* The smallest step every worker of the checkpoint can still reach: the
 * step it answered where it waits there (a hold), else the one after. */
static long long reach(const struct control *c)
{
    long long step = 0;

    for (unsigned i = 0; i < c->n; i++) {
        const struct worker *w = c->w[i];

        if (w->in_ck && w->step + !w->held > step)
            step = w->step + !w->held;
    }
    return step;
}

static bool held_all(const struct control *c)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->w[i]->in_ck && !c->w[i]->held)
            return false;
    return true;
}

/* Ask w to save at target (-1: at the next step it reaches) into its own
 * directory.  Returns 0, -EPIPE when it cannot be written to, or -errno
 * with the reason in err when its directory cannot be made. */
static int send_checkpoint(struct control *c, struct worker *w, long long target, char *err,
                           size_t errlen)
{
    char dir[4096];
    struct jsonl_kv kv[] = {
        JSONL_STR("type", "checkpoint"),
        JSONL_INT("id", c->id),
        JSONL_INT("gen", (long long)c->gen),
        JSONL_INT("step", target),
        JSONL_STR("dir", dir),
    };

    worker_dir(w, c->dir, dir, sizeof(dir));
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        int e = errno;

        snprintf(err, errlen, "cannot create '%s': %s", dir, strerror(e));
        return -e;
    }
    if (target < 0)
        kv[3] = (struct jsonl_kv)JSONL_NUL("step");
    return send_kv(w, kv, 5) < 0 ? -EPIPE : 0;
}

/* Ask every worker of the checkpoint to save at target, a step each can
 * still reach (each waits at the step it answered). */
static void start_save(struct control *c, long long target)
{
    char err[4200];

    c->phase = SAVE;
    c->target = target;
    for (unsigned i = 0; i < c->n; i++) {
        struct worker *w = c->w[i];
        int r;

        if (!w->in_ck)
            continue;
        r = send_checkpoint(c, w, target, err, sizeof(err));
        if (r == -EPIPE) {
            worker_gone(w, "cannot write to it");
            return;
        }
        if (r < 0) {
            end_checkpoint(c, r, -1, "%s", err);
            return;
        }
    }
}

/* The workers that count, and the largest local_world_size they said. */
static unsigned counted(const struct control *c, long long *ret_size)
{
    int64_t now = notice_mono_ms();
    long long size = 0;
    unsigned n = 0;

    for (unsigned i = 0; i < c->n; i++)
        if (counts(c->w[i])) {
            n++;
            if (c->w[i]->size > size)
                size = c->w[i]->size;
        }
    for (unsigned i = 0; i < c->n_gone; i++)
        if (c->gone[i].until_ms > now && !rank_counted(c, c->gone[i].rank)) {
            n++;
            if (c->gone[i].size > size)
                size = c->gone[i].size;
        }
    *ret_size = size;
    return n;
}

/* Workers a checkpoint needs: --local-workers (or LOCAL_WORLD_SIZE), else
 * as many as count, or as their local_world_size says. */
static unsigned expected(const struct control *c)
{
    long long size;
    unsigned n = counted(c, &size);

    if (size > (long long)n)
        n = (unsigned)size;
    /* At least one: a notice during the trainer's start-up (an import of
     * torch takes seconds) waits for it to connect. */
    return c->o.expect ? c->o.expect : n ? n : 1;
}

/* Why expected() says what it says, for a checkpoint short of workers. */
static void expected_why(const struct control *c, char *buf, size_t size)
{
    int64_t now = notice_mono_ms();
    long long said;
    unsigned n = counted(c, &said);

    if (c->o.expect) {
        snprintf(buf, size, "--local-workers or LOCAL_WORLD_SIZE");
        return;
    }
    if (said > (long long)n) {
        snprintf(buf, size, "the trainers' LOCAL_WORLD_SIZE");
        return;
    }
    for (unsigned i = 0; i < c->n_gone; i++)
        if (c->gone[i].until_ms > now && !rank_counted(c, c->gone[i].rank)) {
            snprintf(buf, size, "local rank %lld left %lld s ago and has not come back",
                     c->gone[i].rank, (long long)(now - (c->gone[i].until_ms - c->gone_ms)) / 1000);
            return;
        }
    snprintf(buf, size, "as many as are connected");
}

static unsigned in_checkpoint(const struct control *c)
{
    unsigned n = 0;

    for (unsigned i = 0; i < c->n; i++)
        n += c->w[i]->in_ck;
    return n;
}

/* The one worker of a checkpoint with no other to agree with (the node
 * expects one, and no world picks the step) saves at the next step it
 * reaches: the query's round trip costs one to two steps, the save at the
 * step after the answer.  Not one that has reported no step yet: it is
 * asked, so that what it saves follows a step of its own.  Returns it, or
 * NULL. */
static struct worker *at_once(const struct control *c)
{
    struct worker *one = NULL;

    if (c->ask || expected(c) != 1)
        return NULL;
    for (unsigned i = 0; i < c->n; i++)
        if (c->w[i]->in_ck) {
            if (one)
                return NULL;
            one = c->w[i];
        }
    return one && one->stepped ? one : NULL;
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
    if (c->phase == QUERY && c->hold_ms > 0)
        log_msg(LOGL_INFO, "checkpoint %llu: the trainers answered; the smallest step each can "
                "still reach is %lld (%s)", (unsigned long long)c->gen, reach(c),
                held_all(c) ? "each holds at the step it answered" :
                "one of them does not hold at its answer: the step after");
    if (c->phase == QUERY && c->ask) {
        c->phase = DECIDE;
        c->ask(c->arg, reach(c) - 1);
    } else if (c->phase == QUERY)
        start_save(c, reach(c));
    else
        end_checkpoint(c, 0, step, "%s", "");
}

static unsigned hellos(const struct control *c)
{
    unsigned n = 0;

    for (unsigned i = 0; i < c->n; i++)
        n += c->w[i]->hello;
    return n;
}

/* Ask w its step; in a hold's checkpoint, to wait at it. */
static int send_query(struct worker *w)
{
    struct jsonl_kv q[] = { JSONL_STR("type", "query"), JSONL_INT("id", w->c->id),
                            JSONL_INT("hold_ms", (long long)w->c->hold_ms) };

    return send_kv(w, q, w->c->hold_ms > 0 ? 3 : 2);
}

/* A worker that comes (or counts again) while the others are asked for
 * their step takes part in the checkpoint.  Returns 0, or -1 when it
 * cannot be written to. */
static int join(struct worker *w)
{
    struct control *c = w->c;

    if (c->phase != QUERY || w->in_ck)
        return 0;
    w->in_ck = true;
    w->answered = w->saved = w->held = false;
    return send_query(w);
}

/* A message, with what the checks every message shares took from it for
 * its handler. */
struct said {
    const struct jsonl_msg *m;
    long long id;                  /* where its kind needs one (NEED_ID), else 0 */
    long long step;                /* where its kind needs one (NEED_STEP), else -1 */
};

/* An answer or a report for the checkpoint under way, from one of its
 * workers (not for one that was given up). */
static bool of_checkpoint(const struct worker *w, long long id)
{
    return w->c->phase != IDLE && id == w->c->id && w->in_ck;
}

/* Every report of a step says the worker trains: one that did not count
 * for silence counts again.  Returns 0, or -1 when it cannot be written
 * to. */
static int reported_step(struct worker *w)
{
    if (w->stepped)
        return 0;
    w->stepped = true;
    evtimer_del(w->timer);
    if (!w->quiet)
        return 0;
    w->quiet = false;
    log_msg(LOGL_INFO, "trainer pid %lld (local rank %lld) reported its first step: it "
            "counts again", w->pid, w->local_rank);
    return join(w) < 0 ? -1 : 0;
}

/* spotctl's one command, answered: the connection is done. */
static int msg_command(struct worker *w, const struct said *s)
{
    struct control *c = w->c;
    const struct jsonl_value *cmd = jsonl_get(s->m, "cmd");
    char reply[JSONL_LINE_MAX];

    if (!cmd || cmd->type != JSONL_STRING || !c->o.on_command)
        return -1;
    c->o.on_command(c->o.arg, cmd->str, s->m, reply, sizeof(reply) - 1);
    strcat(reply, "\n");
    send(w->fd, reply, strlen(reply), MSG_NOSIGNAL | MSG_DONTWAIT);
    return 1; /* one command per connection */
}

/* The answer to a hello: where the worker resumes from, if anywhere. */
static int send_welcome(struct worker *w)
{
    struct control *c = w->c;
    const char *resume = NULL;
    char dir[4096];

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
            JSONL_BOOLV("restoring", c->restoring),
        };

        if (!resume)
            kv[2].type = kv[3].type = JSONL_NULL; /* a fresh start */
        w->welcomed = true;
        return send_kv(w, kv, c->restoring ? 5 : 4);
    }
}

static int msg_hello(struct worker *w, const struct said *s)
{
    struct control *c = w->c;
    const struct jsonl_value *pid = jsonl_get(s->m, "pid");
    const struct jsonl_value *rank = jsonl_get(s->m, "local_rank");
    const struct jsonl_value *size = jsonl_get(s->m, "local_world_size");
    const struct jsonl_value *waits = jsonl_get(s->m, "resume_wait");

    if (!pid || pid->type != JSONL_INT || !rank || rank->type != JSONL_INT)
        return -1;
    if (hellos(c) == WORKERS_MAX) {
        log_msg(LOGL_WARN, "refused a trainer (pid %lld): %d are connected to the control "
                "socket already", pid->num, WORKERS_MAX);
        return -1;
    }
    w->hello = true;
    w->pid = pid->num;
    w->local_rank = rank->num;
    w->size = size && size->type == JSONL_INT && size->num > 0 && size->num <= WORKERS_MAX
                  ? size->num
                  : -1;
    w->waits = waits && waits->type == JSONL_BOOL && waits->num;
    /* A worker of a rank that left is that worker back. */
    prune_gone(c, true, w->local_rank);
    /* Under the signal and dir methods a trainer may only ever call
     * ckpt_saved(), and no checkpoint here counts workers. */
    if (c->o.flat) {
        evtimer_del(w->timer);
    } else {
        struct timeval tv = { .tv_sec = c->quiet_ms / 1000,
                              .tv_usec = c->quiet_ms % 1000 * 1000 };
        evtimer_add(w->timer, &tv);
    }
    /* A libckpt that cannot wait for the restore is told where to resume
     * once the restore ended (its ckpt_open() waits for the answer). */
    if ((!c->restoring || w->waits) && send_welcome(w) < 0)
        return -1;
    log_msg(LOGL_INFO, "trainer pid %lld (local rank %lld) connected%s", w->pid, w->local_rank,
            c->restoring && !w->waits ? "; its libckpt does not wait for the restore, which "
            "it is told of once it ends" : "");
    return join(w);
}

static int msg_progress(struct worker *w, const struct said *s)
{
    struct control *c = w->c;
    int64_t now = notice_mono_ms();

    /* The rate over reports at least 5 s apart (the first estimate 1 s),
     * from one worker. */
    if (c->rate_pid != w->pid || s->step < c->rate_step) {
        c->rate_pid = w->pid;
        c->rate_step = s->step;
        c->rate_ms = now;
    } else if (now - c->rate_ms >= (c->steps_per_s > 0 ? 5000 : 1000)) {
        c->steps_per_s = (double)(s->step - c->rate_step) * 1000.0 / (double)(now - c->rate_ms);
        c->rate_step = s->step;
        c->rate_ms = now;
    }
    c->last_step = s->step;
    return 0;
}

static int msg_request(struct worker *w, const struct said *s)
{
    if (w->c->o.on_request)
        w->c->o.on_request(w->c->o.arg);
    return 0;
}

static int msg_file_done(struct worker *w, const struct said *s)
{
    const struct jsonl_value *path = jsonl_get(s->m, "path");
    char dir[PATH_MAX], full[2 * PATH_MAX];

    if (!path || path->type != JSONL_STRING)
        return -1;
    if (!w->c->o.on_file_done || strlen(path->str) >= PATH_MAX)
        return 0;
    /* Relative to the folder this worker was given to save in. */
    if (path->str[0] != '/' && w->in_ck && w->c->phase != IDLE) {
        worker_dir(w, w->c->dir, dir, sizeof(dir));
        snprintf(full, sizeof(full), "%s/%s", dir, path->str);
        w->c->o.on_file_done(w->c->o.arg, full);
        return 0;
    }
    w->c->o.on_file_done(w->c->o.arg, path->str);
    return 0;
}

/* step (saved false) or saved: the worker's answer to the query, or its
 * report of the save; a saved of id 0 is one the trainer made on its
 * own. */
static int answer(struct worker *w, const struct said *s, bool saved)
{
    struct control *c = w->c;

    if (s->step > c->last_step)
        c->last_step = s->step;
    if (s->id == 0 && saved) {
        if (c->o.on_saved)
            c->o.on_saved(c->o.arg, s->step);
        return 0;
    }
    /* Answers to a checkpoint that was given up are ignored. */
    if (!of_checkpoint(w, s->id))
        return 0;
    w->step = s->step;
    if (saved) {
        w->saved = true;
    } else {
        const struct jsonl_value *hold = jsonl_get(s->m, "hold_ms");

        w->answered = true;
        w->held = c->hold_ms > 0 && hold && hold->type == JSONL_INT && hold->num > 0;
    }
    check_progress(c);
    return 0;
}

/* A worker that held at the step it answered heard no step to save at in
 * time and trains on (another worker may have needed its next step to
 * reach its own): the step it can reach is the next.  Once asked for, the
 * caller hears the new answer; once the checkpoint named this step, the
 * worker cannot save it. */
static int msg_released(struct worker *w, const struct said *s)
{
    struct control *c = w->c;
    long long was;

    if (!of_checkpoint(w, s->id) || !w->held || w->saved)
        return 0;
    was = reach(c);
    w->held = false;
    log_msg(LOGL_INFO, "trainer pid %lld (local rank %lld) held at step %lld (up to %lld ms) "
            "and heard no step to save at: it trains on to the next", w->pid, w->local_rank,
            w->step, (long long)c->hold_ms);
    if (c->phase == DECIDE && reach(c) > was)
        c->ask(c->arg, reach(c) - 1);
    else if (c->phase == SAVE && c->target <= w->step)
        end_checkpoint(c, -ERANGE, -1, "trainer pid %lld (local rank %lld) trained on from step "
                       "%lld before it heard to save it", w->pid, w->local_rank, w->step);
    return 0;
}

static int msg_step(struct worker *w, const struct said *s)
{
    return answer(w, s, false);
}

static int msg_saved(struct worker *w, const struct said *s)
{
    return answer(w, s, true);
}

static int msg_failed(struct worker *w, const struct said *s)
{
    const struct jsonl_value *why = jsonl_get(s->m, "reason");

    if (of_checkpoint(w, s->id))
        end_checkpoint(w->c, -EIO, -1, "trainer pid %lld (local rank %lld) could not save: %.200s",
                       w->pid, w->local_rank,
                       why && why->type == JSONL_STRING ? why->str : "no reason given");
    return 0;
}

/* What a kind of message needs before its handler runs. */
enum {
    NEED_ID = 1 << 0,              /* "id": an integer, the checkpoint's */
    NEED_STEP = 1 << 1,            /* "step": an integer >= 0 */
    STEPS = 1 << 2,                /* a report of a step: the worker trains (reported_step()) */
};

/* The kinds of message, by the connection's state: its first message is
 * a hello (a worker) or a command (spotctl); after a hello come the
 * worker's reports.  Anything else is a protocol error: the connection
 * goes. */
static const struct kind {
    const char *type;
    bool hello;                    /* said after a hello (else: as the first message) */
    unsigned needs;                /* NEED_*, STEPS */
    int (*fn)(struct worker *w, const struct said *s);
} kinds[] = {
    { "command", false, 0, msg_command },
    { "hello", false, 0, msg_hello },
    { "progress", true, NEED_STEP | STEPS, msg_progress },
    { "request", true, 0, msg_request },
    { "file_done", true, 0, msg_file_done },
    { "step", true, NEED_ID | NEED_STEP | STEPS, msg_step },
    { "saved", true, NEED_ID | NEED_STEP | STEPS, msg_saved },
    { "released", true, NEED_ID | NEED_STEP | STEPS, msg_released },
    { "failed", true, NEED_ID, msg_failed },
};

/* One message from a worker: the checks every message shares, then its
 * kind's handler.  Returns 0, 1 when the connection is done (a command
 * was answered), or -1 when it must go for a protocol error. */
static int handle(struct worker *w, const struct jsonl_msg *m)
{
    const char *type = jsonl_type(m);
    const struct jsonl_value *v = jsonl_get(m, "v");
    const struct jsonl_value *id = jsonl_get(m, "id"), *step = jsonl_get(m, "step");
    bool step_ok = step && step->type == JSONL_INT && step->num >= 0;
    struct said s = { .m = m, .id = 0, .step = -1 };
    const struct kind *k = NULL;

    if (!type || !v || v->type != JSONL_INT || v->num != 1)
        return -1;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]) && !k; i++)
        if (kinds[i].hello == w->hello && strcmp(kinds[i].type, type) == 0)
            k = &kinds[i];
    if (!k)
        return -1;
    /* A report of a step says the worker trains even when the rest of
     * it is wrong. */
    if (k->needs & STEPS && step_ok && reported_step(w) < 0)
        return -1;
    if ((k->needs & NEED_ID && (!id || id->type != JSONL_INT)) ||
        (k->needs & NEED_STEP && !step_ok))
        return -1;
    if (k->needs & NEED_ID)
        s.id = id->num;
    if (k->needs & NEED_STEP)
        s.step = step->num;
    return k->fn(w, &s);
}

/* Read what came and handle its lines.  Returns 0, or -1 when w is gone
 * (freed). */
static int worker_read(struct worker *w)
{
    ssize_t n = recv(w->fd, w->in + w->in_len, sizeof(w->in) - w->in_len, MSG_DONTWAIT);
    char *nl;
    int r;

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        worker_gone(w, n == 0 ? "closed the connection" : strerror(errno));
        return -1;
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
            return -1;
        }
        if (r < 0) {
            worker_gone(w, "protocol error");
            return -1;
        }
        /* handle() may have ended a checkpoint; its callback cannot free
         * a worker (workers go only here), so w is still valid. */
    }
    if (w->in_len == sizeof(w->in)) {
        worker_gone(w, "line over 64 KiB");
        return -1;
    }
    return 0;
}

static void on_worker(evutil_socket_t fd, short what, void *arg)
{
    worker_read(arg);
}

/* Before the first message: the hello timeout; after a hello: the time a
 * worker has to report its first step. */
static void on_worker_timer(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct control *c = w->c;
    bool hello = w->hello;
    char why[64];

    /* What came while the loop was busy elsewhere counts (a hello that
     * came just now armed the timer again). */
    if (worker_read(w) < 0 || w->stepped || w->quiet || w->hello != hello)
        return;
    if (!w->hello) {
        snprintf(why, sizeof(why), "it said nothing within %lld s",
                 (long long)(c->hello_ms + 999) / 1000);
        closed_silent(c, w->peer, why);
        worker_free(w);
        return;
    }
    w->quiet = true;
    log_msg(LOGL_WARN, "trainer pid %lld (local rank %lld) said hello %lld s ago and has reported "
            "no step: it does not count until it does (a trainer calls ckpt_step() when it "
            "starts training)", w->pid, w->local_rank, (long long)(c->quiet_ms + 999) / 1000);
    if (w->in_ck && c->phase == QUERY) {
        struct jsonl_kv kv[] = { JSONL_STR("type", "cancel"), JSONL_INT("id", c->id) };

        w->in_ck = false;
        send_kv(w, kv, 2);
        check_progress(c);
    }
}

/* Make room for a connection: the oldest one that has said nothing yet
 * goes.  Returns 0, or -ENOSPC when every connection said hello. */
static int make_room(struct control *c)
{
    struct worker *old = NULL;

    for (unsigned i = 0; i < c->n; i++)
        if (!c->w[i]->hello && (!old || c->w[i]->since_ms < old->since_ms))
            old = c->w[i];
    if (!old)
        return -ENOSPC;
    closed_silent(c, old->peer, "every slot was taken and it was the oldest silent one");
    worker_free(old);
    return 0;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct control *c = arg;
    struct timeval tv = { .tv_sec = c->hello_ms / 1000, .tv_usec = c->hello_ms % 1000 * 1000 };
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
    if ((c->n == CONNS_MAX && make_room(c) < 0) || !(w = calloc(1, sizeof(*w)))) {
        close(fd);
        return;
    }
    w->c = c;
    w->fd = fd;
    w->peer = (int)cred.pid;
    w->since_ms = notice_mono_ms();
    w->local_rank = w->size = -1;
    w->ev = event_new(c->base, fd, EV_READ | EV_PERSIST, on_worker, w);
    w->timer = evtimer_new(c->base, on_worker_timer, w);
    if (!w->ev || !w->timer || event_add(w->ev, NULL) < 0 || evtimer_add(w->timer, &tv) < 0) {
        if (w->ev)
            event_free(w->ev);
        if (w->timer)
            event_free(w->timer);
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
    if (hellos(c) && in_checkpoint(c) < expected(c)) {
        char why[160];

        expected_why(c, why, sizeof(why));
        end_checkpoint(c, -ETIMEDOUT, -1, "only %u of the %u local workers took part (%s): "
                       "one did not connect, or died; check --local-workers", in_checkpoint(c),
                       expected(c), why);
        return;
    }
    end_checkpoint(c, hellos(c) ? -ETIMEDOUT : -ENOTCONN, -1, "%s",
                   hellos(c) ? "the deadline passed"
                             : "no trainer is connected to the control socket: is it linked "
                               "with libckpt (or libckpt.py), and run under spotd?");
}

/* How long a terminating notice's trainers wait at the step they answer
 * for the step to save at: the others' answers come within a step (theirs
 * at most one ahead), and the round trip is short beside it.  A hold that
 * runs out costs its length, once (a collective that needed this worker's
 * next step); a quarter of the time left at most. */
static int64_t hold_for(const struct control *c, int64_t deadline_ms)
{
    double rate = control_rate(c);
    int64_t step_ms = rate > 0 ? (int64_t)(1000.0 / rate) : 1000;
    int64_t hold = 2 * step_ms + 250, quarter = (deadline_ms - notice_now_ms()) / 4;

    if (hold < HOLD_MIN_MS)
        hold = HOLD_MIN_MS;
    if (hold > HOLD_MAX_MS)
        hold = HOLD_MAX_MS;
    return hold < quarter ? hold : quarter > 0 ? quarter : 0;
}

void control_hold_next(struct control *c, uint64_t gen)
{
    c->hold_gen = gen;
}

int control_checkpoint(struct control *c, uint64_t gen, const char *dir, int64_t deadline_ms,
                       control_step_fn ask, control_saved_fn done, void *arg)
{
    struct worker *one;

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
    c->hold_ms = gen && gen == c->hold_gen ? hold_for(c, deadline_ms) : 0;
    for (unsigned i = 0; i < c->n; i++)
        if (counts(c->w[i])) {
            c->w[i]->in_ck = true;
            c->w[i]->answered = c->w[i]->saved = c->w[i]->held = false;
        }
    if ((one = at_once(c))) {
        char err[4200];
        int r = send_checkpoint(c, one, -1, err, sizeof(err));

        /* Unwritable: the read that sees the worker gone ends it. */
        if (r < 0 && r != -EPIPE) {
            log_msg(LOGL_ERROR, "checkpoint %llu: %s", (unsigned long long)gen, err);
            one->in_ck = false;
            c->phase = IDLE;
            free(c->dir);
            c->dir = NULL;
            return r;
        }
        c->phase = SAVE;
    } else {
        for (unsigned i = 0; i < c->n; i++)
            if (c->w[i]->in_ck)
                send_query(c->w[i]);
    }
    {
        /* the deadline is a cloud's: wall-clock time */
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
    if (step < reach(c))
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

void control_restored(struct control *c, const char *error)
{
    struct jsonl_kv kv[] = { JSONL_STR("type", "restored"), JSONL_STR("error", error) };

    if (!c->restoring)
        return;
    c->restoring = false;
    for (unsigned i = 0; i < c->n; i++) {
        struct worker *w = c->w[i];

        if (!w->hello)
            continue;
        if (w->welcomed)
            send_kv(w, kv, 2);
        else if (!error)
            send_welcome(w);
    }
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
        n += counts(c->w[i]);
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
    c->restoring = o->restoring && o->resume_dir;
    c->path = strdup(o->path);
    c->resume_dir = o->resume_dir ? strdup(o->resume_dir) : NULL;
    c->hello_ms = o->hello_ms ? o->hello_ms : HELLO_MS;
    c->quiet_ms = o->quiet_ms ? o->quiet_ms : QUIET_MS;
    c->gone_ms = o->gone_ms ? o->gone_ms : GONE_MS;
    c->timer = evtimer_new(o->base, on_deadline, c);
    c->gone_timer = evtimer_new(o->base, on_gone_timer, c);
    if (!c->path || (o->resume_dir && !c->resume_dir) || !c->timer || !c->gone_timer) {
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
    if (c->gone_timer)
        event_free(c->gone_timer);
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
