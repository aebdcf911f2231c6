/* orch: resume at start, checkpoint at a terminating notice (see orch.h). */
#include "orch.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "control.h"
#include "spot/log.h"
#include "spot/pool.h"
#include "spot/snap.h"
#include "spot/store.h"

enum state { RESUMING, IDLE, SAVING, UPLOADING, COMMITTING, DRAINING };

static const char *const state_name[] = { "resuming", "idle", "saving", "uploading",
                                          "committing", "draining" };

struct orch {
    struct orch_opts o;
    char *job, *store_url, *state_dir;
    struct pool *pool;
    struct store *store;
    struct snap *snap;
    struct control *control;
    enum state state;
    uint64_t newest_gen;           /* the highest generation number seen */
    uint64_t resume_gen;
    int64_t resume_step;
    char resume_dir[4096];
    /* the checkpoint under way */
    uint64_t gen;
    int64_t step;
    char dir[4096];
    char reason[160];
    bool terminating;
    int64_t t_begin, t_saved, t_uploaded;
    struct snap_counters counters;
    struct snap_saved saved;
    bool preempted_saved;
    struct event *drain;           /* stops the command if it does not finish */
    struct event *tick;            /* periodic checkpoints */
    const char *why;               /* "notice", "periodic" */
};

/* Time a trainer has to exit on its own after it was told to stop. */
#define DRAIN_MS 10000

static void set_state(struct orch *r, enum state s)
{
    r->state = s;
}

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[4096];

    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0700) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* ---- the checkpoint ------------------------------------------------------- */

static void on_drain(evutil_socket_t fd, short what, void *arg);
static void on_collected(void *arg, int err, const char *msg, const struct snap_gc_report *g);

static void finish_checkpoint(struct orch *r, int err, const char *msg)
{
    cJSON *e;

    if (err) {
        e = log_event_new("checkpoint_failed");
        cJSON_AddNumberToObject(e, "gen", (double)r->gen);
        cJSON_AddStringToObject(e, "phase", state_name[r->state]);
        cJSON_AddStringToObject(e, "error", msg);
        log_event(LOGL_ERROR, e, "checkpoint of generation %llu failed while %s: %s; generation "
                  "%llu stays the newest", (unsigned long long)r->gen, state_name[r->state], msg,
                  (unsigned long long)r->resume_gen);
    }
    set_state(r, IDLE);
    if (!r->terminating)
        return;
    set_state(r, DRAINING);
    r->preempted_saved = err == 0;
    if (err) {
        /* Nothing more to save: the stop sequence now. */
        child_stop(r->o.child, r->reason, r->o.grace_ms);
        return;
    }
    /* Saved: the trainers are told to stop and exit on their own; the
     * stop sequence follows if they do not. */
    control_stop(r->control, r->reason);
    child_hold(r->o.child);
    {
        struct timeval tv = { DRAIN_MS / 1000, (DRAIN_MS % 1000) * 1000 };
        evtimer_add(r->drain, &tv);
    }
}

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
    struct orch *r = arg;

    child_stop(r->o.child, r->reason, r->o.grace_ms);
}

static void on_collected(void *arg, int err, const char *msg, const struct snap_gc_report *g)
{
    if (err)
        log_msg(LOGL_WARN, "garbage collection: %s", msg);
    else if (g->gens_deleted || g->chunks_deleted)
        log_msg(LOGL_INFO, "garbage collection: %llu generations and %llu chunks deleted",
                (unsigned long long)g->gens_deleted, (unsigned long long)g->chunks_deleted);
}

static void on_committed(void *arg, int err, const char *msg)
{
    struct orch *r = arg;
    int64_t now = notice_now_ms();
    cJSON *e;

    if (err) {
        finish_checkpoint(r, err, msg);
        return;
    }
    r->newest_gen = r->gen;
    r->resume_gen = r->gen;
    e = log_event_new("commit");
    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddNumberToObject(e, "step", (double)r->step);
    cJSON_AddNumberToObject(e, "bytes", (double)r->saved.bytes);
    cJSON_AddNumberToObject(e, "bytes_sent", (double)r->counters.bytes_sent);
    cJSON_AddNumberToObject(e, "save_ms", (double)(r->t_saved - r->t_begin));
    cJSON_AddNumberToObject(e, "upload_ms", (double)(r->t_uploaded - r->t_saved));
    cJSON_AddNumberToObject(e, "commit_ms", (double)(now - r->t_uploaded));
    cJSON_AddNumberToObject(e, "total_ms", (double)(now - r->t_begin));
    log_event(LOGL_INFO, e, "generation %llu committed: step %lld, %llu bytes, %lld ms",
              (unsigned long long)r->gen, (long long)r->step,
              (unsigned long long)r->saved.bytes, (long long)(now - r->t_begin));
    /* Retention: what the newest generations do not need goes, in the
     * background (snap_gc never deletes what they reference). */
    snap_gc(r->snap, SNAP_KEEP_DEFAULT, SNAP_GRACE_DEFAULT_MS, false, on_collected, r);
    finish_checkpoint(r, 0, "");
}

static void on_uploaded(void *arg, int err, const char *msg, const struct snap_saved *s)
{
    struct orch *r = arg;
    struct commit_rank rank;
    struct commit c;
    cJSON *e;

    if (err) {
        finish_checkpoint(r, err, msg);
        return;
    }
    r->saved = *s;
    r->t_uploaded = notice_now_ms();
    e = log_event_new("upload_done");
    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddNumberToObject(e, "bytes", (double)s->bytes);
    cJSON_AddNumberToObject(e, "bytes_sent", (double)r->counters.bytes_sent);
    cJSON_AddNumberToObject(e, "bytes_skipped", (double)r->counters.bytes_skipped);
    cJSON_AddNumberToObject(e, "ms", (double)(r->t_uploaded - r->t_saved));
    log_event(LOGL_INFO, e, "generation %llu uploaded: %llu bytes sent",
              (unsigned long long)r->gen, (unsigned long long)r->counters.bytes_sent);
    set_state(r, COMMITTING);
    memset(&c, 0, sizeof(c));
    memset(&rank, 0, sizeof(rank));
    snprintf(c.job, sizeof(c.job), "%s", r->job);
    c.gen = r->gen;
    c.step = (uint64_t)r->step;
    c.world_size = 1;
    snprintf(c.reason, sizeof(c.reason), "%s", r->why);
    snprintf(c.method, sizeof(c.method), "app");
    c.created_ms = notice_now_ms();
    snprintf(c.version, sizeof(c.version), "%s", SPOT_VERSION);
    memcpy(rank.sha256, s->sha256, sizeof(rank.sha256));
    rank.bytes = s->bytes;
    c.ranks = &rank;
    snap_commit(r->snap, &c, on_committed, r);
}

static void on_trainers_saved(void *arg, int err, const char *msg, int64_t step)
{
    struct orch *r = arg;
    struct snap_save_req req = { .dir = r->dir, .gen = r->gen, .rank = 0, .method = "app" };
    cJSON *e;

    if (err) {
        finish_checkpoint(r, err, msg);
        return;
    }
    r->step = step;
    r->t_saved = notice_now_ms();
    e = log_event_new("checkpoint_saved");
    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddNumberToObject(e, "step", (double)step);
    cJSON_AddNumberToObject(e, "ms", (double)(r->t_saved - r->t_begin));
    log_event(LOGL_INFO, e, "trainers saved step %lld for generation %llu", (long long)step,
              (unsigned long long)r->gen);
    set_state(r, UPLOADING);
    req.step = (uint64_t)step;
    memset(&r->counters, 0, sizeof(r->counters));
    snap_save(r->snap, &req, &r->counters, on_uploaded, r);
}

static void begin_checkpoint(struct orch *r, const struct notice *n)
{
    int64_t deadline = n && n->deadline_ms > 0 ? n->deadline_ms - (int64_t)r->o.margin_ms : 0;
    cJSON *e;
    int err;

    r->gen = r->newest_gen + 1;
    r->terminating = n && n->terminating;
    if (n)
        snprintf(r->reason, sizeof(r->reason), "notice: %s %s", n->source,
                 notice_kind_name(n->kind));
    else
        snprintf(r->reason, sizeof(r->reason), "%s", r->why);
    if (n)
        r->why = "notice";
    snprintf(r->dir, sizeof(r->dir), "%s/work/gen-%08llu", r->state_dir,
             (unsigned long long)r->gen);
    r->t_begin = notice_now_ms();
    e = log_event_new("checkpoint_begin");
    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddStringToObject(e, "reason", r->reason);
    cJSON_AddNumberToObject(e, "trainers", control_workers(r->control));
    log_event(LOGL_INFO, e, "checkpoint of generation %llu begins (%s)",
              (unsigned long long)r->gen, r->reason);
    set_state(r, SAVING);
    err = make_dirs(r->dir);
    if (err == 0)
        err = control_checkpoint(r->control, r->gen, r->dir, deadline, on_trainers_saved, r);
    if (err < 0) {
        char msg[4300];
        snprintf(msg, sizeof(msg), "cannot start it in '%s': %s", r->dir, strerror(-err));
        finish_checkpoint(r, err, msg);
    }
}

void orch_notice(void *arg, const struct notice *n)
{
    struct orch *r = arg;

    if (r->state == IDLE) {
        begin_checkpoint(r, n);
        return;
    }
    /* A terminating notice during a periodic or advisory checkpoint: that
     * checkpoint becomes the last one, and the stop follows it. */
    if (n->terminating && r->state != DRAINING && r->state != RESUMING && !r->terminating) {
        r->terminating = true;
        snprintf(r->reason, sizeof(r->reason), "notice: %s %s", n->source,
                 notice_kind_name(n->kind));
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct orch *r = arg;

    if (r->state == IDLE && control_workers(r->control) > 0) {
        r->why = "periodic";
        begin_checkpoint(r, NULL);
    }
}

/* A trainer called ckpt_request_save(). */
static void on_request(void *arg)
{
    struct orch *r = arg;

    if (r->state == IDLE) {
        r->why = "request";
        begin_checkpoint(r, NULL);
    }
}

/* ---- resume --------------------------------------------------------------- */

static void run_command(struct orch *r)
{
    struct control_opts co = {
        .base = r->o.base,
        .resume_dir = r->resume_dir[0] ? r->resume_dir : NULL,
        .resume_step = r->resume_step,
        .resume_gen = r->resume_gen,
        .on_request = on_request,
        .arg = r,
    };
    char path[4200], err[512], num[32];

    snprintf(path, sizeof(path), "%s/control.sock", r->state_dir);
    co.path = path;
    r->control = control_new(&co, err, sizeof(err));
    if (!r->control) {
        log_msg(LOGL_ERROR, "%s; the command runs without checkpoints", err);
    } else {
        setenv("SPOT_SOCKET", path, 1);
    }
    setenv("SPOT_JOB", r->job, 1);
    if (r->resume_dir[0]) {
        setenv("SPOT_RESUME_DIR", r->resume_dir, 1);
        snprintf(num, sizeof(num), "%lld", (long long)r->resume_step);
        setenv("SPOT_RESUME_STEP", num, 1);
        snprintf(num, sizeof(num), "%llu", (unsigned long long)r->resume_gen);
        setenv("SPOT_GEN", num, 1);
    }
    set_state(r, IDLE);
    if (r->o.interval_ms > 0) {
        struct timeval tv = { (time_t)(r->o.interval_ms / 1000),
                              (suseconds_t)(r->o.interval_ms % 1000) * 1000 };
        event_add(r->tick, &tv);
    }
    if (child_start(r->o.child) < 0)
        log_msg(LOGL_ERROR, "cannot schedule the command's start: out of memory");
}

static void on_restored(void *arg, int err, const char *msg)
{
    struct orch *r = arg;
    cJSON *e;

    if (err) {
        log_msg(LOGL_ERROR, "cannot restore generation %llu: %s; starting fresh",
                (unsigned long long)r->resume_gen, msg);
        r->resume_dir[0] = '\0';
        r->resume_gen = 0;
        r->resume_step = -1;
    } else {
        e = log_event_new("resume");
        cJSON_AddNumberToObject(e, "gen", (double)r->resume_gen);
        cJSON_AddNumberToObject(e, "step", (double)r->resume_step);
        cJSON_AddStringToObject(e, "dir", r->resume_dir);
        log_event(LOGL_INFO, e, "resuming from generation %llu (step %lld)",
                  (unsigned long long)r->resume_gen, (long long)r->resume_step);
    }
    run_command(r);
}

static void on_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct orch *r = arg;
    const struct snap_gen *newest = NULL;

    if (err) {
        log_msg(LOGL_ERROR, "cannot list the checkpoints of job '%s': %s; starting fresh",
                r->job, msg);
        run_command(r);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (gens[i].gen > r->newest_gen)
            r->newest_gen = gens[i].gen;
        if (gens[i].committed)
            newest = &gens[i];
    }
    if (!newest) {
        snap_gens_free(gens, n);
        run_command(r);
        return;
    }
    r->resume_gen = newest->gen;
    r->resume_step = (int64_t)newest->commit.step;
    snprintf(r->resume_dir, sizeof(r->resume_dir), "%s/restore/gen-%08llu", r->state_dir,
             (unsigned long long)r->resume_gen);
    snap_gens_free(gens, n);
    /* A restore left by an earlier start of this state directory is
     * replaced: restores go beside their destination, then into place. */
    {
        char cmd[8400];
        snprintf(cmd, sizeof(cmd), "%s/restore", r->state_dir);
        make_dirs(cmd);
    }
    if (access(r->resume_dir, F_OK) == 0) {
        on_restored(r, 0, "");
        return;
    }
    snap_restore(r->snap, r->resume_gen, 0, r->resume_dir, NULL, on_restored, r);
}

void orch_start(struct orch *r)
{
    set_state(r, RESUMING);
    snap_gens(r->snap, on_gens, r);
}

bool orch_preempted_saved(const struct orch *r)
{
    return r && r->preempted_saved;
}

struct orch *orch_new(const struct orch_opts *o, char *err, size_t errlen)
{
    struct orch *r = calloc(1, sizeof(*r));
    struct store_ctx sc = { .base = o->base };
    struct snap_opts so = { .base = o->base };
    int e;

    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->o = *o;
    r->resume_step = -1;
    r->job = strdup(o->job);
    r->store_url = strdup(o->store);
    r->state_dir = strdup(o->state_dir);
    if (!r->job || !r->store_url || !r->state_dir) {
        snprintf(err, errlen, "out of memory");
        return orch_free(r);
    }
    if ((e = make_dirs(r->state_dir)) < 0) {
        snprintf(err, errlen, "cannot create the state directory '%s': %s", r->state_dir,
                 strerror(-e));
        return orch_free(r);
    }
    r->drain = evtimer_new(o->base, on_drain, r);
    r->tick = event_new(o->base, -1, EV_PERSIST, on_tick, r);
    if (!r->drain || !r->tick) {
        snprintf(err, errlen, "out of memory");
        return orch_free(r);
    }
    r->pool = pool_new(o->base, 2);
    if (!r->pool) {
        snprintf(err, errlen, "cannot start worker threads: %s", strerror(errno));
        return orch_free(r);
    }
    sc.pool = r->pool;
    if (store_open(r->store_url, &sc, &r->store, err, errlen) < 0)
        return orch_free(r);
    so.pool = r->pool;
    so.store = r->store;
    so.job = r->job;
    if (!(r->snap = snap_new(&so, err, errlen)))
        return orch_free(r);
    return r;
}

struct orch *orch_free(struct orch *r)
{
    if (!r)
        return NULL;
    if (r->drain)
        event_free(r->drain);
    if (r->tick)
        event_free(r->tick);
    r->control = control_free(r->control);
    r->snap = snap_free(r->snap);
    r->store = store_close(r->store);
    r->pool = pool_free(r->pool);
    free(r->job);
    free(r->store_url);
    free(r->state_dir);
    free(r);
    return NULL;
}
