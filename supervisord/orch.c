/* orch: the orchestrator's core (the design is in orch.h).  Its life (new,
 * free, start, finish), the command's start once resumed, what triggers a
 * checkpoint (a notice, the --interval tick, a trainer's request, spotctl,
 * the dir method's new folder), and one checkpoint, in the order it
 * happens: its number claimed, the pre-checkpoint hook, the method's save,
 * the upload, the commit, then finish (or the stop, after a terminating
 * notice).
 *
 * The other parts share struct orch through orch_impl.h: orch_plan.c (the
 * figures, the plan, spotctl's commands), orch_resume.c (resume at start
 * and after a crash, gc), orch_world.c (a world's rounds, the rendezvous). */
#include "orch_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "child.h"
#include "control.h"
#include "follow.h"
#include "imgstream.h"
#include "hooks.h"
#include "method.h"
#include "spot/log.h"
#include "spot/parse.h"
#include "spot/pool.h"
#include "spot/snap.h"
#include "spot/store.h"
#include "rendezvous.h"
#include "world.h"

/* A world's periodic round has at least this long (see on_tick). */
#define WORLD_PERIODIC_MIN_MS (60 * 1000)

static void on_tick(evutil_socket_t fd, short what, void *arg);
static void on_request(void *arg);
static void on_trainer_saved(void *arg, int64_t step);
static void on_file_done(void *arg, const char *path);
static void on_found(void *arg);
static void on_claimed(void *arg, int err, const char *msg, uint64_t gen);
static void go_checkpoint(struct orch *r);
static void on_pre_checkpoint(void *arg, int code, const char *msg);
static void ask_method(struct orch *r);
static void ask_world(struct orch *r);
static void nothing_new(struct orch *r);
static void on_ask(void *arg, int64_t step);
static void on_split(void *arg, struct snap_split *sp, const uint8_t fingerprint[32]);
static void on_uploaded(void *arg, int err, const char *msg, const struct snap_saved *s);
static void hook_env_now(const struct orch *r, struct hook_env *e, const char *result);
static bool busy(const struct orch *r);
static void finish(struct orch *r, enum orch_state from, int err, const char *msg);
static void stop_follow(struct orch *r);
static void record(struct orch *r);
static void make_last(struct orch *r, const struct notice *n);
static void keep_notice(struct orch *r, const struct notice *n);
static unsigned may_end(struct orch *r, enum orch_event ev, int err, const char *msg);
static bool step_done(struct orch *r, enum orch_event ev, unsigned next);
static void on_withdrawn(void *arg, int err, const char *msg);
static uint64_t stop_grace(const struct orch *r);
static const char *not_running(const struct orch *r);
static struct orch_facts facts(const struct orch *r);

struct orch *orch_new(const struct orch_opts *o, char *err, size_t errlen)
{
    struct orch *r = calloc(1, sizeof(*r));
    struct store_ctx sc = { .base = o->base };
    struct snap_opts so = { .base = o->base };
    uint64_t gen;
    int e;

    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->o = *o;
    r->exit_code = -1;
    r->resume_step = -1;
    r->restored_as = UINT32_MAX;
    r->fig.step = r->fig.prev_step = -1;
    r->fig.signal_save_ms = -1;
    if (!(r->mops = method_find(o->method))) {
        snprintf(err, errlen, "method '%s' is not available", o->method);
        return orch_free(r);
    }
    if (strcmp(o->resume, "auto") == 0) {
        r->resume_mode = RESUME_AUTO;
    } else if (strcmp(o->resume, "fresh") == 0 || strcmp(o->resume, "never") == 0) {
        r->resume_mode = RESUME_FRESH;
    } else if (parse_u64(o->resume, 1, UINT64_MAX, &gen) == 0) {
        r->resume_mode = RESUME_GEN;
        r->resume_want = gen;
    } else {
        snprintf(err, errlen, "invalid resume '%s': expected auto, fresh (or never) or a "
                 "generation number (see spotctl ls)", o->resume);
        return orch_free(r);
    }
    if (strcmp(o->method, "dir") == 0 && !o->ckpt_dir) {
        snprintf(err, errlen, "the dir method needs --ckpt-dir: the directory where the "
                 "trainer saves its checkpoint folders");
        return orch_free(r);
    }
    r->job = strdup(o->job);
    r->store_url = strdup(o->store);
    r->state_dir = strdup(o->state_dir);
    if (!r->job || !r->store_url || !r->state_dir) {
        snprintf(err, errlen, "out of memory");
        return orch_free(r);
    }
    if ((e = orch_make_dirs(r->state_dir)) < 0) {
        snprintf(err, errlen, "cannot create the state directory '%s': %s", r->state_dir,
                 strerror(-e));
        return orch_free(r);
    }
    if (orch_stage_open(r, err, errlen) < 0)
        return orch_free(r);
    orch_figures_load(r);
    r->tick = event_new(o->base, -1, EV_PERSIST, on_tick, r);
    r->retry = evtimer_new(o->base, orch_on_retry, r);
    r->held_timer = evtimer_new(o->base, orch_on_held, r);
    r->hooks = hooks_new(o->base, o->child, o->hooks_dir, o->hook_timeout_ms);
    if (!r->tick || !r->retry || !r->held_timer || !r->hooks) {
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
    so.chunk_size = r->mops->chunk_size;
    so.key = o->job_key;
    so.preserve_special_modes = o->preserve_special_modes;
    if (!(r->snap = snap_new(&so, err, errlen)))
        return orch_free(r);
    r->master_port = o->master_port;
    snprintf(r->master_addr, sizeof(r->master_addr), "127.0.0.1");
    if (o->world_size > 1 && (r->mops->flags & METHOD_NO_WORLD) && !o->writers_rank0) {
        snprintf(err, errlen, "the %s method cannot serve a world where every rank writes: its "
                 "checkpoints appear on each node's own schedule; where only global rank 0 "
                 "writes, run every node with --ckpt-writers rank0; else use app (libckpt) or "
                 "signal", r->mops->name);
        return orch_free(r);
    }
    if (o->world_size > 1 && o->rendezvous &&
        !(r->rv = rendezvous_new(o->base, r->store, r->job, o->world_size, &orch_rv_ops, r))) {
        snprintf(err, errlen, "out of memory");
        return orch_free(r);
    }
    if (o->world_size > 1 && !o->rank_unknown && orch_make_world(r, o->rank, err, errlen) < 0)
        return orch_free(r);
    return r;
}

struct orch *orch_free(struct orch *r)
{
    if (!r)
        return NULL;
    r->world = world_free(r->world);
    r->rv = rendezvous_free(r->rv);
    orch_free_argv(r);
    if (r->tick)
        event_free(r->tick);
    if (r->retry)
        event_free(r->retry);
    if (r->held_timer)
        event_free(r->held_timer);
    free(r->held_stop);
    free(r->held_advice);
    free(r->own);
    free(r->cands);
    free(r->stop_notice);
    if (r->mops && r->method)
        r->mops->close(r->method);
    /* A streamed dump's chunks being stored end before the snap goes. */
    while (imgstream_live() > 0 && event_base_loop(r->o.base, EVLOOP_ONCE) == 0)
        ;
    r->hooks = hooks_free(r->hooks);
    r->control = control_free(r->control);
    r->snap = snap_free(r->snap);
    orch_stage_close(r);
    r->store = store_close(r->store);
    r->pool = pool_free(r->pool);
    free(r->job);
    free(r->store_url);
    free(r->state_dir);
    free(r);
    return NULL;
}

void orch_start(struct orch *r)
{
    orch_set_state(r, RESUMING);
    if (r->o.world_size > 1 && !r->world) {
        /* A rank first, from the coordinator. */
        rendezvous_join(r->rv, r->o.listen);
        return;
    }
    orch_start_listing(r);
}

void orch_finish(struct orch *r)
{
    if (!r)
        return;
    r->finishing = true;
    evtimer_del(r->held_timer); /* nothing is acted on later now */
    if (r->world) {
        int code = child_exit_code(r->o.child);
        struct timeval flush = { 0, 200 * 1000 };

        world_leave(r->world, code == 0 ? "finished" : "its command failed");
        /* Let the frames go out. */
        event_base_loopexit(r->o.base, &flush);
        event_base_dispatch(r->o.base);
    }
    /* A method that saves by exiting takes the end as its answer. */
    if (r->state == SAVING && !r->world && r->mops->exited &&
        r->mops->exited(r->method, child_command_code(r->o.child)))
        r->saved_by_exit = true;
    else if (r->state == SAVING) {
        r->terminating = false;
        orch_fail(r, -ECANCELED, "the command ended before its trainers saved");
    }
    /* An upload waiting for the other nodes' word stores what it has: the
     * world gives the generation up without this node. */
    orch_release_split(r, false);
    /* A checkpoint whose files are saved is worth finishing: nothing in
     * it depends on the command any more. */
    if (r->state == UPLOADING || r->state == COMMITTING)
        log_msg(LOGL_INFO, "the command ended; finishing generation %llu before exiting",
                (unsigned long long)r->gen);
    while ((busy(r) || (r->saved_by_exit && r->state == SAVING) || rendezvous_stop(r->rv)) &&
           event_base_loop(r->o.base, EVLOOP_ONCE) == 0)
        ;
    /* Early stores end before the snap goes (follow.h). */
    r->follow = follow_stop(r->follow);
    while (follow_live() > 0 && event_base_loop(r->o.base, EVLOOP_ONCE) == 0)
        ;
    /* The number claimed ahead and never used goes back: no empty
     * generation is left in the store. */
    if (r->claimed && !r->claiming) {
        r->claiming = true;
        snap_withdraw(r->snap, r->claimed, on_withdrawn, r);
        while (r->claiming && event_base_loop(r->o.base, EVLOOP_ONCE) == 0)
            ;
    }
    hooks_drain(r->hooks);
}

int orch_exit_code(const struct orch *r)
{
    return r ? r->exit_code : -1;
}

/* ---- the command runs, and what triggers a checkpoint -------------------- */

/* The resume ended: the terminating notice held meanwhile, if any, is
 * decided now (a far one waits for its time).  The command runs (or runs
 * on, started early) with A_RUN. */
static unsigned resumed_acts(struct orch *r)
{
    unsigned acts;

    if (r->held_stop && !orch_notice_far(r->held_stop, notice_now_ms()))
        r->deciding = r->held_stop;
    acts = orch_event(r, EV_RESUMED, NULL);
    r->deciding = NULL;
    if ((acts & A_END) && !r->ending)
        log_msg(LOGL_INFO, "a terminating notice while the command is not running, and no room "
                "is left for a checkpoint before its deadline: it is not started (generation "
                "%llu is the newest)", (unsigned long long)r->resume_gen);
    if (acts & A_END)
        orch_end(r, r->ending ? r->exit_code : ORCH_EXIT_PREEMPTED_SAVED);
    return acts;
}

/* The command starts, with a control socket and a method of its own and
 * its environment.  -1 when it is refused. */
static int start_command(struct orch *r)
{
    struct control_opts co = {
        .base = r->o.base,
        .resume_dir = r->resume_dir[0] ? r->resume_dir : NULL,
        .resume_step = r->resume_step,
        .resume_gen = r->resume_gen,
        .restoring = r->early_restoring,
        .expect = r->o.local_workers,
        .flat = !(r->mops->flags & METHOD_WORKERS),
        .on_request = on_request,
        .on_saved = on_trainer_saved,
        .on_file_done = on_file_done,
        .on_command = orch_on_command,
        .arg = r,
    };
    struct method_ctx mc = {
        .base = r->o.base,
        .child = r->o.child,
        .state_dir = r->state_dir,
        .ckpt_dir = r->o.ckpt_dir,
        .signal = r->o.ckpt_signal,
        .settle_ms = r->o.settle_ms,
        .layout = r->o.ckpt_layout,
        .step_file = r->o.ckpt_step_file,
        .saved_when = r->o.saved_when,
        .exit_code = r->o.preempt_exit_code,
        .resume_step = r->resume_step,
        .found = on_found,
        .argv = r->argv ? r->argv : r->o.argv,
        .resume_dir = r->resume_dir[0] ? r->resume_dir : NULL,
        .resume_gen = r->resume_gen,
        .resume_rank = r->world ? r->restore_rank : 0,
        .criu = r->o.criu,
        .criu_stream = r->o.criu_stream,
        .snap = r->snap,
        .arg = r,
    };
    char path[4200], err[512];

    if (r->world) {
        /* A new run after a pause: a method and a socket of its own. */
        if (r->method)
            r->mops->close(r->method);
        r->method = NULL;
        r->control = control_free(r->control);
        r->parked = false;
        if (orch_world_command(r) < 0) {
            log_msg(LOGL_ERROR, "out of memory: the command is not started");
            orch_refuse_start(r);
            return -1;
        }
    }
    /* --resume is for the start; a restart resumes from the newest. */
    r->resume_mode = RESUME_AUTO;
    if (r->o.socket)
        snprintf(path, sizeof(path), "%s", r->o.socket);
    else
        snprintf(path, sizeof(path), "%s/control.sock", r->state_dir);
    co.path = path;
    r->control = control_new(&co, err, sizeof(err));
    if (!r->control)
        log_msg(LOGL_ERROR, "%s; the command runs without checkpoints by libckpt", err);
    else
        setenv("SPOT_SOCKET", path, 1);
    mc.control = r->control;
    r->method = r->mops->open(&mc, err, sizeof(err));
    if (!r->method) {
        log_msg(LOGL_ERROR, "%s", err);
        orch_refuse_start(r);
        return -1;
    }
    setenv("SPOT_JOB", r->job, 1);
    orch_set_resume(r, r->resume_gen, r->resume_step, r->resume_dir[0] ? r->resume_dir : NULL);
    if (!r->world)
        child_before_restart(r->o.child, orch_on_before_restart, r);
    if (child_start(r->o.child) < 0)
        log_msg(LOGL_ERROR, "cannot schedule the command's start: out of memory");
    return 0;
}

/* The --interval tick, once the command runs from a resume that ended. */
static void start_tick(struct orch *r)
{
    if (r->o.interval_ms > 0) {
        struct timeval tv = { (time_t)(r->o.interval_ms / 1000),
                              (suseconds_t)(r->o.interval_ms % 1000) * 1000 };
        event_add(r->tick, &tv);
    }
}

/* Resumed (or afresh): the command starts, and the --interval tick. */
void orch_run_command(struct orch *r)
{
    unsigned acts = resumed_acts(r);

    if (!(acts & A_RUN) || start_command(r) < 0)
        return;
    start_tick(r);
    if (acts & A_HELD)
        orch_act_on_held(r);
}

/* --early-start: the command starts while r->resume_gen is restored into
 * r->resume_dir (renamed into place once verified, so never seen in
 * part).  The orchestrator stays RESUMING meanwhile: no checkpoint, a
 * notice held; orch_early_restored() or orch_early_failed() ends it. */
void orch_run_early(struct orch *r)
{
    r->early_restoring = true;
    log_msg(LOGL_INFO, "starting the command while generation %llu is restored into '%s' "
            "(--early-start): its trainers wait in ckpt_resume_wait()",
            (unsigned long long)r->resume_gen, r->resume_dir);
    if (start_command(r) < 0)
        r->early_restoring = false;
}

void orch_resume_done(struct orch *r)
{
    unsigned acts = resumed_acts(r);

    if (acts & A_END) {
        /* It runs, but has done nothing the newest generation lacks. */
        child_set_exit_code(r->o.child, r->exit_code);
        child_stop(r->o.child, "a terminating notice came while the command waited for its "
                   "restore", stop_grace(r));
        return;
    }
    if (acts & A_RUN)
        start_tick(r);
    if (acts & A_HELD)
        orch_act_on_held(r);
}

/* The early start's restore ended, verified: the trainers are told, and
 * the command runs on as one resumed. */
void orch_early_restored(struct orch *r)
{
    r->early_restoring = false;
    control_restored(r->control, NULL);
    orch_resume_done(r);
    if (r->restart_after_restore) {
        /* The command ended meanwhile: its restart resumes from here. */
        r->restart_after_restore = false;
        child_restart_now(r->o.child);
    }
}

/* The early start's restore failed: the trainers are told (their
 * ckpt_resume_wait() fails, and they exit), and the command's end
 * restarts it, from a generation that restores (orch_on_before_restart). */
void orch_early_failed(struct orch *r, const char *msg)
{
    r->early_restoring = false;
    log_msg(LOGL_WARN, "generation %llu cannot be restored: %s; the command, started early, is "
            "told so and started again once a generation restores",
            (unsigned long long)r->resume_gen, msg);
    control_restored(r->control, msg);
    if (r->restart_after_restore) {
        r->restart_after_restore = false;
        orch_on_before_restart(r);
        return;
    }
    child_restart_once(r->o.child);
}

void orch_notice(void *arg, const struct notice *n)
{
    struct orch *r = arg;
    struct hook_env he = { .job = r->job, .reason = notice_kind_name(n->kind),
                           .gen = r->resume_gen, .step = r->resume_step,
                           .deadline_ms = n->deadline_ms };

    snprintf(r->last_notice, sizeof(r->last_notice), "%s %s%s", n->source,
             notice_kind_name(n->kind), n->drill ? " (drill)" : "");
    hooks_run(r->hooks, "on-notice", &he, NULL, NULL);
    orch_act_on(r, n);
}

/* Notice n is decided: when it came, or when it is due (held). */
void orch_act_on(struct orch *r, const struct notice *n)
{
    unsigned acts;

    /* A world's node that is told to go saves in no later round. */
    if (r->world && n->terminating && !orch_notice_far(n, notice_now_ms()))
        r->want_stop = true;
    r->deciding = n;
    acts = orch_event(r, n->terminating ? EV_TERMINATING : EV_NOTICE, NULL);
    r->deciding = NULL;
    if (acts & A_HOLD)
        orch_hold(r, n);
    if (acts & A_EXIT_UNRANKED) {
        log_msg(LOGL_INFO, "a terminating notice before this node had a rank: exiting");
        r->exit_code = ORCH_EXIT_PREEMPTED_SAVED;
        child_end(r->o.child, ORCH_EXIT_PREEMPTED_SAVED, "preempted before joining");
    }
    if (acts & (A_LEAVE | A_END))
        log_msg(LOGL_INFO, "a terminating notice while the command is %s: %s (generation %llu "
                "is the newest)", r->pausing ? "stopping" : not_running(r),
                r->world ? "leaving the world" : "it is not started",
                (unsigned long long)r->resume_gen);
    if (acts & A_LEAVE)
        world_leave(r->world, "preempted while the world waited");
    if (acts & A_END)
        orch_end(r, ORCH_EXIT_PREEMPTED_SAVED);
    if (acts & A_MAKE_LAST)
        make_last(r, n);
    if (acts & A_BEGIN)
        orch_begin_checkpoint(r, n, "notice");
}

/* Why a node alone does not start its command for a terminating notice
 * that came while resuming, for the log. */
static const char *not_running(const struct orch *r)
{
    if (r->world || r->state != RESUMING)
        return "not running";
    if (event_pending(r->retry, EV_TIMEOUT, NULL))
        return "not running (the store cannot be read)";
    return "not running, and no room is left for a checkpoint before its deadline";
}

/* A terminating notice during a periodic or advisory checkpoint: that
 * checkpoint becomes the last one, and the stop follows it. */
static void make_last(struct orch *r, const struct notice *n)
{
    r->terminating = true;
    r->adopted = true;
    keep_notice(r, n);
    orch_notice_reason(n, r->reason, sizeof(r->reason));
    /* The deadline that matters now, for the margin reported; the method
     * keeps the one it was given (an earlier one fails the checkpoint
     * sooner; the fallback stop bounds a later one). */
    if (n->deadline_ms > 0) {
        r->deadline_ms = orch_notice_deadline(r, n);
        r->stop_deadline_ms = n->deadline_ms;
    }
}

/* A copy of the terminating notice, for the last checkpoint again. */
static void keep_notice(struct orch *r, const struct notice *n)
{
    if (!r->stop_notice && !(r->stop_notice = malloc(sizeof(*r->stop_notice))))
        return; /* then the stop follows the checkpoint under way */
    *r->stop_notice = *n;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct orch *r = arg;
    unsigned acts = orch_event(r, EV_TICK, NULL);

    if (acts & A_TRIGGER) {
        /* The round's deadline goes to every node as a time of day, which
         * the nodes' clocks read apart (an NTP step, a skew): a periodic
         * round gets at least WORLD_PERIODIC_MIN_MS, so a node whose clock
         * is seconds ahead does not find it passed on arrival. */
        uint64_t limit = r->o.interval_ms > WORLD_PERIODIC_MIN_MS ? r->o.interval_ms
                                                                   : WORLD_PERIODIC_MIN_MS;
        orch_world_want(r, "periodic", notice_now_ms() + (int64_t)limit);
    }
    if (acts & A_BEGIN)
        orch_begin_checkpoint(r, NULL, "periodic");
}

/* A trainer called ckpt_request_save(). */
static void on_request(void *arg)
{
    struct orch *r = arg;
    unsigned acts = orch_event(r, EV_REQUEST, NULL);

    if (acts & A_TRIGGER)
        orch_world_want(r, "request", 0);
    if (acts & A_BEGIN)
        orch_begin_checkpoint(r, NULL, "request");
}

/* A trainer's ckpt_saved() with no save open (the signal method). */
static void on_trainer_saved(void *arg, int64_t step)
{
    struct orch *r = arg;

    if ((orch_event(r, EV_TRAINER_SAVED, NULL) & A_TO_METHOD) && r->mops->trainer_saved)
        r->mops->trainer_saved(r->method, step);
}

/* The dir method found a new complete folder. */
static void on_file_done(void *arg, const char *path)
{
    struct orch *r = arg;

    follow_file_done(r->follow, path);
}

static void on_found(void *arg)
{
    struct orch *r = arg;
    unsigned acts = orch_event(r, EV_FOUND, NULL);

    if (acts & A_TRIGGER)
        orch_world_want(r, "dir", 0);
    if (acts & A_BEGIN)
        orch_begin_checkpoint(r, NULL, "dir");
}

/* ---- one checkpoint: claim, hook, method, upload, commit, finish --------- */

void orch_begin_checkpoint(struct orch *r, const struct notice *n, const char *why)
{
    bool late;
    unsigned acts;

    /* What it will be, for the plan's message: the claim (or a world's
     * coordinator) says for sure. */
    r->gen = r->claimed && !r->world ? r->claimed : r->newest_gen + 1;
    r->why = n ? "notice" : why;
    r->terminating = n && n->terminating;
    r->adopted = false;
    r->step = -1;
    if (n)
        orch_notice_reason(n, r->reason, sizeof(r->reason));
    else
        snprintf(r->reason, sizeof(r->reason), "%s", why);
    /* Only a terminating notice's deadline bounds its checkpoint.  An
     * advisory one has none of its own (AWS's rebalance noticeTime is when
     * it was issued, always past): its early checkpoint has the usual limit. */
    r->stop_deadline_ms = r->terminating ? n->deadline_ms : 0;
    if (r->terminating && n->deadline_ms > 0)
        r->deadline_ms = orch_notice_deadline(r, n);
    else if (!n && strcmp(why, "periodic") == 0)
        r->deadline_ms = notice_now_ms() + (int64_t)r->o.interval_ms;
    else
        r->deadline_ms = notice_now_ms() + SAVE_LIMIT_MS;
    snprintf(r->dir, sizeof(r->dir), "%s/work/gen-%08llu", r->state_dir,
             (unsigned long long)r->gen);
    late = r->terminating && n->deadline_ms > 0 && !orch_plan_fits(r);
    acts = orch_event(r, late ? EV_TOO_LATE : EV_GO, NULL);
    if (acts & A_STOP_UNSAVED)
        orch_stop_command(r, false);
    if (acts & A_START)
        orch_start_checkpoint(r);
    if (acts & A_TRIGGER)
        world_trigger(r->world, n ? notice_kind_name(n->kind) : "checkpoint", r->why,
                      r->terminating, r->terminating && n->deadline_ms > 0 ? r->deadline_ms : 0);
}

/* The checkpoint set up in r begins: its generation number claimed (a
 * world's comes from its coordinator), the pre-checkpoint hook, then the
 * method. */
void orch_start_checkpoint(struct orch *r)
{
    r->t_begin = notice_mono_ms();
    r->aborted = false;
    r->told_last = false;
    r->saving = SV_HOOK;
    if (!r->world && (!r->claimed || r->claimed <= r->newest_gen)) {
        /* None held (or one made stale by a world's number). */
        r->claimed = 0;
        r->claim_waits = true;
        orch_claim_next(r);
        return;
    }
    go_checkpoint(r);
}

/* Claim the number after the newest seen, unless one is held, being
 * claimed, or spotd is on its way out. */
void orch_claim_next(struct orch *r)
{
    if (r->world || !r->gens_read || r->claimed || r->claiming || r->finishing)
        return;
    r->claiming = true;
    snap_claim(r->snap, r->newest_gen + 1, on_claimed, r);
}

static void on_claimed(void *arg, int err, const char *msg, uint64_t gen)
{
    struct orch *r = arg;
    bool waits = r->claim_waits;

    r->claiming = false;
    r->claim_waits = false;
    if (err) {
        if (waits)
            orch_fail(r, err, msg);
        else
            log_msg(LOGL_WARN, "%s; the next checkpoint tries again", msg);
        return;
    }
    r->claimed = gen;
    if (waits)
        go_checkpoint(r);
}

/* The checkpoint set up in r begins: pre-checkpoint hook, then the method. */
static void go_checkpoint(struct orch *r)
{
    struct hook_env he;
    cJSON *e;
    int err;

    if (!r->world) {
        r->gen = r->claimed;
        r->claimed = 0;
        if (r->gen > r->newest_gen)
            r->newest_gen = r->gen;
        orch_work_dir(r);
    }
    e = log_event_new("checkpoint_begin");
    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddStringToObject(e, "reason", r->reason);
    cJSON_AddStringToObject(e, "method", r->mops->name);
    cJSON_AddNumberToObject(e, "trainers", r->control ? control_workers(r->control) : 0);
    /* how far the trainers are, for how long the save waits for them */
    if (r->control && control_step(r->control) >= 0)
        cJSON_AddNumberToObject(e, "step", (double)control_step(r->control));
    if (r->control && control_rate(r->control) > 0)
        cJSON_AddNumberToObject(e, "steps_per_s", control_rate(r->control));
    if (r->world)
        cJSON_AddNumberToObject(e, "rank", world_rank(r->world));
    if (r->staged)
        cJSON_AddBoolToObject(e, "staged", 1);
    log_event(LOGL_INFO, e, "checkpoint of generation %llu begins (%s)",
              (unsigned long long)r->gen, r->reason);
    hook_env_now(r, &he, NULL);
    err = hooks_run(r->hooks, "pre-checkpoint", &he, on_pre_checkpoint, r);
    if (err == -ENOENT)
        ask_method(r);
    else if (err < 0)
        orch_fail(r, err, "cannot run the pre-checkpoint hook");
}

static void on_pre_checkpoint(void *arg, int code, const char *msg)
{
    struct orch *r = arg;
    char why[256];

    if (code != 0) {
        snprintf(why, sizeof(why), "the pre-checkpoint hook refused it: %s", msg);
        orch_fail(r, -ECANCELED, why);
        return;
    }
    ask_method(r);
}

static void ask_method(struct orch *r)
{
    char msg[4400];
    int err;

    if (r->aborted) {
        orch_fail(r, -ECANCELED, r->abort_reason);
        return;
    }
    if (r->world) {
        ask_world(r);
        return;
    }
    err = orch_make_dirs(r->dir);
    if (err == 0 && r->terminating && r->mops->last) {
        r->mops->last(r->method);
        r->told_last = true;
    }
    if (err == 0 && r->terminating && r->control)
        control_hold_next(r->control, r->gen); /* several trainers: each saves the step it is at */
    if (err == 0)
        err = r->mops->save(r->method, r->gen, r->dir, r->deadline_ms, orch_on_method_saved, r);
    if (err == 0)
        orch_follow(r);
    if (err == -EALREADY) {
        nothing_new(r);
        return;
    }
    if (err < 0) {
        snprintf(msg, sizeof(msg), "cannot start it (%s method, '%s'): %s", r->mops->name,
                 r->dir, strerror(-err));
        orch_fail(r, err, msg);
    }
}

/* The method has nothing newer than the newest generation to save. */
static void nothing_new(struct orch *r)
{
    unsigned acts = orch_event(r, EV_NOTHING_NEW, NULL);
    char why[1400] = "";
    cJSON *e;

    if (acts & A_DISCARD) {
        e = log_event_new("checkpoint_skipped");
        cJSON_AddNumberToObject(e, "gen", (double)r->resume_gen);
        cJSON_AddStringToObject(e, "why", "nothing new");
        if (r->resume_gen)
            log_event(LOGL_INFO, e, "no checkpoint newer than generation %llu (step %lld) to "
                      "save", (unsigned long long)r->resume_gen, (long long)r->resume_step);
        else {
            if (r->mops->why_none && r->method)
                r->mops->why_none(r->method, why, sizeof(why));
            log_event(LOGL_WARN, e, "no checkpoint to save: %s",
                      why[0] ? why : "the trainer has written none yet");
        }
        orch_remove_tree(r->dir);
        r->staged = false;
        /* Its number holds nothing: given back at exit (no incomplete
         * generation is left), unless a later checkpoint claims anew. */
        if (!r->world && !r->claimed)
            r->claimed = r->gen;
    }
    orch_after(r, acts);
}

/* World: ask the method for the node's step (or answer 0 for a method
 * that cannot tell: it saves when the prepare comes). */
static void ask_world(struct orch *r)
{
    char msg[4400];
    int err = orch_make_dirs(r->dir);

    /* A terminating notice's round: every node's trainers stop once they
     * saved, and a method that saves differently then knows it. */
    if (err == 0 && r->round_last && r->mops->last) {
        r->mops->last(r->method);
        r->told_last = true;
    }
    if (err == 0 && r->mops->query) {
        r->saving = SV_METHOD;
        if (r->round_last && r->control)
            control_hold_next(r->control, r->gen); /* the world saves the step it is at */
        err = r->mops->query(r->method, r->gen, r->dir, r->deadline_ms, on_ask,
                             orch_on_method_saved, r);
    } else if (err == 0) {
        r->saving = SV_PREPARE;
        orch_exit_park(r);
        world_step(r->world, r->gen, r->control ? control_step(r->control) : 0);
    }
    if (err < 0) {
        snprintf(msg, sizeof(msg), "cannot start it (%s method, '%s'): %s", r->mops->name,
                 r->dir, strerror(-err));
        orch_fail(r, err, msg);
    }
}

/* World: the trainers' largest step, for the coordinator. */
void orch_follow(struct orch *r)
{
    const char *dir = r->mops->writes ? r->mops->writes(r->method) : NULL;

    r->follow = follow_stop(r->follow);
    if (dir && *dir && !r->split_upload)
        r->follow = follow_start(r->o.base, r->snap, r->gen, dir);
}

static void stop_follow(struct orch *r)
{
    r->follow = follow_stop(r->follow);
}

static void on_ask(void *arg, int64_t step)
{
    struct orch *r = arg;

    world_step(r->world, r->gen, step);
}

void orch_on_method_saved(void *arg, int err, const char *msg, int64_t step, const char *dir)
{
    struct orch *r = arg;
    struct snap_save_req req = { .gen = r->gen,
                                 .rank = r->world ? world_trainer_rank(r->world) : 0,
                                 .method = r->mops->name };
    char empty[sizeof(r->dir)];
    cJSON *e;

    orch_exit_unpark(r);
    stop_follow(r);
    if (orch_empty_shard(r) && (err == 0 || err == -ENOENT || err == -EALREADY)) {
        /* Whatever this node's trainers wrote (nothing, as a rule), its
         * shard is empty: global rank 0's files are the generation. */
        err = snprintf(empty, sizeof(empty), "%s/work/gen-%08llu-empty", r->state_dir,
                       (unsigned long long)r->gen) < (int)sizeof(empty) ? 0 : -ENAMETOOLONG;
        if (err == 0) {
            orch_remove_tree(empty);
            err = orch_make_dirs(empty);
        }
        if (err < 0)
            msg = "cannot create the empty shard's folder";
        step = -1, dir = empty;
        log_msg(LOGL_INFO, "generation %llu: this node's trainers write no checkpoint "
                "(--ckpt-writers rank0): its shard is empty, global rank 0's is the checkpoint",
                (unsigned long long)r->gen);
    }
    if (err == -EALREADY && !r->world) {
        /* The save ended with nothing newer than the newest generation. */
        nothing_new(r);
        return;
    }
    if (err) {
        orch_fail(r, err, msg);
        return;
    }
    if (!step_done(r, EV_SAVED, A_UPLOAD))
        return;
    r->step = step;
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    r->t_saved = notice_mono_ms();
    e = log_event_new("checkpoint_saved");
    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddNumberToObject(e, "step", (double)step);
    cJSON_AddStringToObject(e, "dir", dir);
    cJSON_AddNumberToObject(e, "ms", (double)(r->t_saved - r->t_begin));
    log_event(LOGL_INFO, e, "trainers saved step %lld for generation %llu", (long long)step,
              (unsigned long long)r->gen);
    req.dir = r->dir;
    req.step = step < 0 ? 0 : (uint64_t)step;
    if (r->world && world_trainer_size(r->world) > 1 && r->split_upload) {
        /* Replicated state goes up once, split across the nodes. */
        req.share_index = world_trainer_rank(r->world);
        req.share_count = world_trainer_size(r->world);
        req.split = on_split;
        req.split_arg = r;
    }
    memset(&r->counters, 0, sizeof(r->counters));
    if (r->mops->streamed)
        req.streamed = r->mops->streamed(r->method, &req.n_streamed, &r->counters);
    snap_save(r->snap, &req, &r->counters, on_uploaded, r);
}

/* The node's shard is hashed and its share stored: the world compares. */
static void on_split(void *arg, struct snap_split *sp, const uint8_t fingerprint[32])
{
    struct orch *r = arg;

    r->split = sp;
    if (r->aborted || r->finishing) {
        r->split = NULL;
        snap_save_split(sp, false);
        return;
    }
    log_msg(LOGL_INFO, "generation %llu: this node's share of the chunks is stored; waiting "
            "for the other nodes' fingerprints", (unsigned long long)r->gen);
    world_hashed(r->world, r->gen, fingerprint);
}

/* The upload waiting for the world goes on, with the rest or without. */
void orch_release_split(struct orch *r, bool rest)
{
    struct snap_split *sp = r->split;

    r->split = NULL;
    if (sp)
        snap_save_split(sp, rest);
}

static void on_uploaded(void *arg, int err, const char *msg, const struct snap_saved *s)
{
    struct orch *r = arg;
    struct commit_rank rank;
    struct commit c;
    char why[160];
    cJSON *e;

    if (!err && !r->aborted && r->mops->stands && !r->mops->stands(r->method, why, sizeof(why)))
        err = -ECANCELED, msg = why;
    if (err) {
        orch_fail(r, err, msg);
        return;
    }
    if (!step_done(r, EV_UPLOADED, A_COMMIT))
        return;
    r->saved = *s;
    r->t_uploaded = notice_mono_ms();
    e = log_event_new("upload_done");
    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddNumberToObject(e, "bytes", (double)s->bytes);
    cJSON_AddNumberToObject(e, "bytes_sent", (double)r->counters.bytes_sent);
    cJSON_AddNumberToObject(e, "bytes_skipped", (double)r->counters.bytes_skipped);
    if (r->counters.bytes_early)
        cJSON_AddNumberToObject(e, "bytes_early", (double)r->counters.bytes_early);
    if (r->counters.bytes_checked)
        cJSON_AddNumberToObject(e, "bytes_checked", (double)r->counters.bytes_checked);
    if (r->counters.bytes_split)
        cJSON_AddNumberToObject(e, "bytes_split", (double)r->counters.bytes_split);
    cJSON_AddNumberToObject(e, "ms", (double)(r->t_uploaded - r->t_saved));
    cJSON_AddNumberToObject(e, "hash_ms", (double)(r->counters.cpu_hash_ns / 1000000));
    cJSON_AddNumberToObject(e, "encode_ms", (double)(r->counters.cpu_encode_ns / 1000000));
    log_event(LOGL_INFO, e, "generation %llu uploaded: %llu bytes sent",
              (unsigned long long)r->gen, (unsigned long long)r->counters.bytes_sent);
    if (r->world) {
        /* The coordinator commits once every rank's shard is in. */
        world_saved(r->world, r->gen, r->step, s->sha256, s->bytes);
        return;
    }
    memset(&c, 0, sizeof(c));
    memset(&rank, 0, sizeof(rank));
    snprintf(c.job, sizeof(c.job), "%s", r->job);
    c.gen = r->gen;
    c.step = (uint64_t)r->step;
    c.world_size = 1;
    snprintf(c.reason, sizeof(c.reason), "%s", r->why);
    snprintf(c.method, sizeof(c.method), "%s", r->mops->name);
    c.created_ms = notice_now_ms();
    snprintf(c.version, sizeof(c.version), "%s", SPOT_VERSION);
    memcpy(rank.sha256, s->sha256, sizeof(rank.sha256));
    rank.bytes = s->bytes;
    c.ranks = &rank;
    snap_commit(r->snap, &c, orch_on_committed, r);
}

/* Event ev, which may end the checkpoint under way (with err and msg):
 * its end carried out when the table says so; returns the actions. */
static unsigned may_end(struct orch *r, enum orch_event ev, int err, const char *msg)
{
    enum orch_state from;
    unsigned acts = orch_event(r, ev, &from);

    if (acts & A_FINISH) {
        finish(r, from, err, msg);
        orch_after(r, acts);
    }
    return acts;
}

/* A step of the checkpoint is done (ev): whether the next (act) follows,
 * or the checkpoint ends here because the world gave it up meanwhile. */
static bool step_done(struct orch *r, enum orch_event ev, unsigned next)
{
    return may_end(r, ev, -ECANCELED, r->abort_reason) & next;
}

void orch_on_committed(void *arg, int err, const char *msg)
{
    struct orch *r = arg;
    enum orch_state from;
    unsigned acts;

    if (err) {
        orch_fail(r, err, msg);
        return;
    }
    acts = orch_event(r, EV_COMMITTED, &from);
    if (acts & A_RECORD)
        record(r);
    if (acts & A_FINISH)
        finish(r, from, 0, "");
    orch_after(r, acts);
}

/* The commit: the figures, its event, what a restart resumes from, gc. */
static void record(struct orch *r)
{
    /* Durations on the monotonic clock; the deadline and the figures' time
     * of the commit (kept across runs) on the wall clock. */
    int64_t now = notice_now_ms(), mono = notice_mono_ms();
    char copy[4200];
    cJSON *e;

    r->newest_gen = r->gen;
    r->stage_failed = false;
    orch_add_own(r, r->gen);
    if (orch_signal_save(r, r->told_last))
        r->fig.signal_save_ms = r->t_saved - r->t_begin;
    else
        r->fig.save_ms = r->t_saved - r->t_begin;
    r->fig.upload_ms = r->t_uploaded - r->t_saved;
    r->fig.commit_ms = mono - r->t_uploaded;
    r->fig.bytes = r->saved.bytes;
    r->fig.bytes_sent = r->counters.bytes_sent;
    r->fig.prev_step = r->fig.step;
    r->fig.prev_at_ms = r->fig.at_ms;
    r->fig.step = r->step;
    r->fig.at_ms = now;
    orch_figures_save(r);
    e = log_event_new("commit");
    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddNumberToObject(e, "step", (double)r->step);
    cJSON_AddStringToObject(e, "reason", r->why);
    cJSON_AddNumberToObject(e, "bytes", (double)r->saved.bytes);
    cJSON_AddNumberToObject(e, "bytes_sent", (double)r->counters.bytes_sent);
    cJSON_AddNumberToObject(e, "save_ms", (double)(r->t_saved - r->t_begin));
    cJSON_AddNumberToObject(e, "upload_ms", (double)r->fig.upload_ms);
    cJSON_AddNumberToObject(e, "commit_ms", (double)r->fig.commit_ms);
    cJSON_AddNumberToObject(e, "total_ms", (double)(mono - r->t_begin));
    if (r->deadline_ms > 0)
        cJSON_AddNumberToObject(e, "margin_ms", (double)(r->deadline_ms - now));
    log_event(LOGL_INFO, e, "generation %llu committed: step %lld, %llu bytes, %lld ms",
              (unsigned long long)r->gen, (long long)r->step,
              (unsigned long long)r->saved.bytes, (long long)(mono - r->t_begin));
    /* A restart resumes from here (spotd's own copy, checked before it is
     * used); local copies of older ones go. */
    if (r->world) {
        r->restore_rank = r->restored_as = world_trainer_rank(r->world);
        r->restore_size = world_trainer_size(r->world);
    }
    orch_own_copy(r, copy, sizeof(copy));
    orch_set_resume(r, r->gen, r->step, copy);
    if (r->mops->committed && r->method)
        r->mops->committed(r->method, copy);
    orch_prune_local(r, "work", r->dir);
    orch_prune_local(r, "restore", copy);
    /* Retention: what the newest generations do not need goes, in the
     * background (snap_gc never deletes what they reference).  Also when
     * this commit finished an upload after the command ended (spotd waits
     * for it then), but not after a preemption's: spotd should be gone. */
    if (!(r->finishing && r->terminating) && (!r->world || world_is_coordinator(r->world)))
        orch_collect(r);
}

void orch_fail(struct orch *r, int err, const char *msg)
{
    may_end(r, EV_FAILED, err, msg);
}

/* The checkpoint that was in state from ends, committed (err 0) or failed
 * with msg: its event and the post-checkpoint hook. */
static void finish(struct orch *r, enum orch_state from, int err, const char *msg)
{
    struct hook_env he;
    char *gone;
    cJSON *e;

    if (r->world)
        orch_exit_unpark(r);
    stop_follow(r);
    if (err && r->world && !r->aborted)
        world_failed(r->world, r->gen, msg);
    r->claim_waits = false;
    if (err) {
        /* Its number is claimed, and objects of it may be in the store:
         * the next one takes the next number, and gc collects these. */
        if (r->gen > r->newest_gen && !r->world)
            r->newest_gen = r->gen;
        e = log_event_new("checkpoint_failed");
        cJSON_AddNumberToObject(e, "gen", (double)r->gen);
        cJSON_AddStringToObject(e, "phase", orch_state_str(from));
        cJSON_AddStringToObject(e, "error", msg);
        log_event(LOGL_ERROR, e, "checkpoint of generation %llu failed while %s: %s; generation "
                  "%llu stays the newest", (unsigned long long)r->gen, orch_state_str(from), msg,
                  (unsigned long long)r->resume_gen);
    }
    hook_env_now(r, &he, err ? "failed" : "committed");
    /* A staged folder is freed once the hook, which is told it, ended. */
    gone = orch_unstage_take(r, err);
    if (hooks_run(r->hooks, "post-checkpoint", &he, gone ? orch_unstage : NULL, gone) < 0)
        orch_unstage(gone, -1, "");
}

void orch_after(struct orch *r, unsigned acts)
{
    if (acts & A_AGAIN) {
        if (facts(r).told_last)
            log_msg(LOGL_WARN, "the checkpoint under way at the notice failed: the notice gets "
                    "one of its own");
        else
            log_msg(LOGL_INFO, "the %s method's save began before the notice: saving again, as "
                    "the last one", r->mops->name);
        orch_begin_checkpoint(r, r->stop_notice, "notice");
    }
    if (acts & (A_STOP_SAVED | A_STOP_UNSAVED))
        orch_stop_command(r, acts & A_STOP_SAVED);
    if (acts & A_CLAIM_NEXT)
        orch_claim_next(r);
    if (acts & A_READY)
        orch_maybe_ready(r);
}

/* After a terminating notice: the method's stop when the checkpoint was
 * saved, else the stop sequence at once. */
void orch_stop_command(struct orch *r, bool saved)
{
    if (r->world)
        world_leave(r->world, saved ? "preempted" : "preempted without a new checkpoint");
    if (r->world && (r->parked || r->pausing)) {
        /* A world's pause stopped the command already, or is stopping it. */
        orch_end(r, saved ? ORCH_EXIT_PREEMPTED_SAVED : child_exit_code(r->o.child));
        return;
    }
    if (r->finishing) {
        /* The command is gone already. */
        if (saved)
            r->exit_code = ORCH_EXIT_PREEMPTED_SAVED;
        return;
    }
    if (!saved) {
        child_stop(r->o.child, r->reason, stop_grace(r));
        return;
    }
    r->exit_code = ORCH_EXIT_PREEMPTED_SAVED;
    child_set_exit_code(r->o.child, ORCH_EXIT_PREEMPTED_SAVED);
    r->mops->stop(r->method, r->reason, stop_grace(r));
}

/* The grace of the stop after a notice's checkpoint: --grace, less when
 * the deadline is nearer, so that SIGKILL still lands the margin before it
 * (a checkpoint given up leaves the fallback's 2 s at most). */
static uint64_t stop_grace(const struct orch *r)
{
    if (r->stop_deadline_ms <= 0)
        return r->o.grace_ms;
    return notice_grace_left(r->stop_deadline_ms, notice_now_ms(), r->o.margin_ms,
                             r->o.grace_ms);
}

/* This node goes, with code, its command not running: now, once a pause's
 * stop has ended the command, or, while resuming, instead of starting it
 * (at once when the resume only waits to try the store again). */
void orch_end(struct orch *r, int code)
{
    r->exit_code = code;
    r->ending = true;
    if (r->state == RESUMING && event_pending(r->retry, EV_TIMEOUT, NULL)) {
        event_del(r->retry);
        orch_run_command(r);
    } else if (!r->pausing && r->state != RESUMING) {
        child_end(r->o.child, code, r->world ? "preempted while the world waited"
                                             : "preempted before the command started");
    }
}

/* ---- the decisions ------------------------------------------------------- */

/* What orch_decide() reads, from r. */
static struct orch_facts facts(const struct orch *r)
{
    return (struct orch_facts){
        .state = r->state,
        .world = r->o.world_size > 1,
        .ranked = r->world != NULL,
        .coordinator = r->world && world_is_coordinator(r->world),
        .stopping = r->pausing || r->parked,
        .parked = r->parked,
        .ending = r->ending,
        .finishing = r->finishing,
        .last = r->terminating,
        .adopted = r->adopted && r->stop_notice,
        /* A command that has ended cannot save again.  In a world, a
         * periodic round under way at the notice serves it, unless the
         * trainers save anew on the notice's signal: a round of its own. */
        .told_last = r->told_last || !r->mops->last || r->finishing || !r->stop_notice ||
                     (r->world && !(r->mops->saves_on_signal &&
                                    r->mops->saves_on_signal(r->method))),
        .trainers = orch_trainers(r),
        .aborted = r->aborted,
        .have_gen = r->resume_gen > 0,
        .writer = r->world && r->o.writers_rank0 && world_trainer_rank(r->world) == 0,
        .far = r->deciding && orch_notice_far(r->deciding, notice_now_ms()),
        .late = r->deciding && r->deciding->terminating &&
                orch_notice_last_start(r, r->deciding) <= notice_now_ms(),
        .store_waits = event_pending(r->retry, EV_TIMEOUT, NULL),
        .held = r->held_advice || (r->held_stop && !orch_notice_far(r->held_stop,
                                                                    notice_now_ms())),
    };
}

bool orch_trainers(const struct orch *r)
{
    return !(r->mops->flags & METHOD_WORKERS) || (r->control && control_workers(r->control) > 0);
}

unsigned orch_event(struct orch *r, enum orch_event ev, enum orch_state *from)
{
    struct orch_facts f = facts(r);
    struct orch_decision d = orch_decide(&f, ev);

    if (from)
        *from = r->state;
    if (d.acts || d.next != r->state)
        log_msg(LOGL_DEBUG, "orchestrator: %s in %s", orch_event_str(ev),
                orch_state_str(r->state));
    orch_set_state(r, d.next);
    return d.acts;
}

/* ---- helpers ------------------------------------------------------------- */

static void hook_env_now(const struct orch *r, struct hook_env *e, const char *result)
{
    *e = (struct hook_env){
        .job = r->job,
        .dir = r->dir[0] ? r->dir : NULL,
        .reason = r->reason,
        .result = result,
        .gen = r->gen,
        .step = r->step,
        .deadline_ms = r->deadline_ms,
    };
}

/* Is the snapshot engine still working for us? */
static bool busy(const struct orch *r)
{
    return r->state == RESUMING || r->state == UPLOADING || r->state == COMMITTING ||
           r->collecting || r->claiming;
}

static void on_withdrawn(void *arg, int err, const char *msg)
{
    struct orch *r = arg;

    r->claiming = false;
    if (err)
        log_msg(LOGL_DEBUG, "cannot give back generation %llu's claim: %s",
                (unsigned long long)r->claimed, msg);
    r->claimed = 0;
}

void orch_set_state(struct orch *r, enum orch_state s)
{
    if (r->state != s)
        log_msg(LOGL_DEBUG, "orchestrator: %s -> %s", orch_state_str(r->state),
                orch_state_str(s));
    r->state = s;
}
