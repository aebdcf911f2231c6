/* orch_world: the orchestrator in a world (world.h).  The operations
 * world.c calls (a round's query, prepare, split, commit and abort; pause
 * and resume; claims, the coordinator's commit record, the generation to
 * resume from), what this node asks of the world (a checkpoint, a
 * notice's, leaving), the command line of each start ({rank}, {gen}...),
 * and the rendezvous glue (rendezvous.h) that gives this node its rank. */
#include "orch_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "method.h"
#include "spot/log.h"
#include "spot/snap.h"
#include "rendezvous.h"
#include "world.h"

static void w_query(void *arg, uint64_t gen, int64_t deadline_ms, bool terminating,
                    const char *reason);
static void w_prepare(void *arg, uint64_t gen, int64_t step, bool split);
static void w_split(void *arg, uint64_t gen, bool same);
static void w_commit(void *arg, uint64_t gen, int64_t step);
static void w_abort(void *arg, uint64_t gen, const char *reason);
static void w_pause(void *arg, const char *why);
static void on_parked(void *arg);
static void on_exit_parked(void *arg);
static void w_resume(void *arg, uint64_t gen, const char *master_addr, unsigned master_port);
static void world_gens(struct orch *r);
static void on_world_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n);
static void w_claim(void *arg, uint64_t gen);
static void on_world_claimed(void *arg, int err, const char *msg, uint64_t gen);
static void w_write_commit(void *arg, const struct commit *c);
static void on_world_written(void *arg, int err, const char *msg);
static void w_pick_resume(void *arg);
static void on_pick_newest(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n,
                           bool all);
static void on_pick(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n);
static char *substitute(const struct orch *r, const char *arg);

/* ---- the world (world.h) ------------------------------------------------- */

static const struct world_ops world_ops = {
    .query = w_query,
    .prepare = w_prepare,
    .split = w_split,
    .commit = w_commit,
    .abort = w_abort,
    .pause = w_pause,
    .resume = w_resume,
    .claim = w_claim,
    .write_commit = w_write_commit,
    .pick_resume = w_pick_resume,
};

/* The world, once this node's rank is known. */
int orch_make_world(struct orch *r, uint32_t rank, char *err, size_t errlen)
{
    const struct orch_opts *o = &r->o;
    struct world_opts wo = {
        .base = o->base,
        .job = r->job,
        .rank = rank,
        .world_size = o->world_size,
        .listen = o->listen ? o->listen : o->peers[rank],
        .peers = o->peers,
        .key = o->key,
        .dead_ms = o->peer_timeout_ms,
        .min_nodes = o->min_nodes,
        .join_ms = o->join_timeout_ms,
        .master_port = o->master_port,
        .split = o->split_upload,
        .method = r->mops->name,
        .ops = &world_ops,
        .arg = r,
    };

    if (!(r->world = world_new(&wo, err, errlen)))
        return -EINVAL;
    snprintf(r->master_addr, sizeof(r->master_addr), "%s", world_master_addr(r->world));
    if (r->rv)
        rendezvous_publish(r->rv, rank, world_listen_addr(r->world));
    return 0;
}

static void w_query(void *arg, uint64_t gen, int64_t deadline_ms, bool terminating,
                    const char *reason)
{
    struct orch *r = arg;
    static const char *const whys[] = { "notice", "periodic", "request", "manual", "grow",
                                        "dir" };
    unsigned acts;

    if (gen > r->newest_gen)
        r->newest_gen = gen;
    acts = orch_event(r, EV_QUERY, NULL);
    if (acts & A_REFUSE) {
        char why[96];
        snprintf(why, sizeof(why), "rank %u is %s", world_rank(r->world),
                 r->pausing || r->parked ? "stopping its command" : orch_state_str(r->state));
        world_failed(r->world, gen, why);
        return;
    }
    r->gen = gen;
    r->why = "world";
    for (size_t i = 0; i < sizeof(whys) / sizeof(whys[0]); i++)
        if (strcmp(reason, whys[i]) == 0)
            r->why = whys[i];
    r->terminating = r->want_stop;
    r->round_last = terminating;
    r->exited_early = false;
    r->step = -1;
    r->deadline_ms = deadline_ms > 0 ? deadline_ms : notice_now_ms() + SAVE_LIMIT_MS;
    if (strcmp(r->why, "notice") != 0 || !r->want_stop)
        snprintf(r->reason, sizeof(r->reason), "%s", reason);
    orch_work_dir(r);
    if (acts & A_START)
        orch_start_checkpoint(r);
}

static void w_prepare(void *arg, uint64_t gen, int64_t step, bool split)
{
    struct orch *r = arg;
    char msg[256];
    int err;

    if (gen != r->gen || r->state != SAVING || r->aborted)
        return;
    r->split_upload = split;
    if (r->saving == SV_METHOD && r->mops->save_at)
        err = r->mops->save_at(r->method, step);
    else if (r->saving == SV_PREPARE && r->exited_early)
        err = -ECHILD;
    else if (r->saving == SV_PREPARE)
        err = r->mops->save(r->method, r->gen, r->dir, r->deadline_ms, orch_on_method_saved, r);
    else
        return;
    r->saving = SV_METHOD;
    if (err == 0)
        orch_follow(r);
    if (err == -ECHILD && orch_empty_shard(r))
        err = -EALREADY; /* its trainers stopped with the others': nothing to save */
    if (err == -EALREADY && orch_empty_shard(r)) {
        orch_on_method_saved(r, err, "", -1, r->dir);
        return;
    }
    if (err < 0) {
        snprintf(msg, sizeof(msg), "cannot save at step %lld (%s method): %s", (long long)step,
                 r->mops->name, err == -EALREADY ? "nothing new to save" : err == -ECHILD ?
                 "the command ended before this node's save began (the other nodes' trainers "
                 "stopped it first?)" : strerror(-err));
        orch_fail(r, err, msg);
    }
}

/* A trainer that saves by exiting ends the command during the round: this
 * node then waits for the world's resume, as after a pause, instead of
 * ending.  Armed at the query, since the trainers of a world stop
 * together: another node's may stop this node's before its own save. */
void orch_exit_park(struct orch *r)
{
    if (!r->mops->may_exit || !r->mops->may_exit(r->method))
        return;
    r->exit_parks = true;
    child_park(r->o.child, on_exit_parked, r);
}

/* The command ended during a save that may end it: the method takes the
 * exit as its answer (its save is done, or failed), and this node waits
 * for the world's resume once the round is over. */
static void on_exit_parked(void *arg)
{
    struct orch *r = arg;

    r->exit_parks = false;
    r->parked = true;
    if (r->state == SAVING && r->saving == SV_PREPARE)
        r->exited_early = true; /* w_prepare() says what becomes of the save */
    else if (r->state == SAVING && r->method && r->mops->exited)
        r->mops->exited(r->method, child_command_code(r->o.child));
    if (r->ending)
        child_end(r->o.child, r->exit_code, "preempted while the world waited");
    else
        orch_maybe_ready(r);
}

/* The save ended with the command still running: its exit no longer parks. */
void orch_exit_unpark(struct orch *r)
{
    if (!r->exit_parks)
        return;
    r->exit_parks = false;
    child_unpark(r->o.child, on_exit_parked);
}

/* Where only global rank 0 writes (--ckpt-writers rank0), the other nodes'
 * trainers save nothing of their own: their save still runs (the signal,
 * the exit), so that every rank stops at the same step, but their shard
 * is empty and the world takes the step from rank 0's. */
bool orch_empty_shard(const struct orch *r)
{
    return r->world && r->o.writers_rank0 && world_trainer_rank(r->world) != 0;
}

static void w_split(void *arg, uint64_t gen, bool same)
{
    struct orch *r = arg;

    if (gen == r->gen && r->state == UPLOADING)
        orch_release_split(r, !same);
}

static void w_commit(void *arg, uint64_t gen, int64_t step)
{
    struct orch *r = arg;

    if (gen > r->newest_gen)
        r->newest_gen = gen;
    if (gen == r->gen && r->state == COMMITTING) {
        r->step = step; /* an empty shard's node learns it here */
        orch_on_committed(r, 0, "");
    }
}

static void w_abort(void *arg, uint64_t gen, const char *reason)
{
    struct orch *r = arg;

    if (gen > r->newest_gen)
        r->newest_gen = gen;
    if (gen != r->gen || r->state < SAVING || r->state > COMMITTING || r->aborted)
        return;
    r->aborted = true;
    snprintf(r->abort_reason, sizeof(r->abort_reason), "the world gave it up: %s", reason);
    if (r->state == COMMITTING || (r->state == SAVING && r->saving == SV_PREPARE))
        orch_fail(r, -ECANCELED, r->abort_reason);
    else if (r->state == SAVING && r->saving == SV_METHOD && r->mops->cancel)
        r->mops->cancel(r->method, r->abort_reason);
    else if (r->state == UPLOADING)
        orch_release_split(r, false);
    /* SV_HOOK: ask_method() sees it; UPLOADING: on_uploaded() does. */
}

static void w_pause(void *arg, const char *why)
{
    struct orch *r = arg;

    if (r->parked || r->pausing || r->state == DRAINING)
        return;
    r->exit_parks = false; /* the pause's park replaces it */
    r->pausing = true;
    if (r->method)
        r->mops->stop(r->method, why, r->o.grace_ms);
    child_park(r->o.child, on_parked, r);
}

static void on_parked(void *arg)
{
    struct orch *r = arg;

    r->pausing = false;
    r->parked = true;
    if (r->ending)
        child_end(r->o.child, r->exit_code, "preempted while the world waited");
    else
        orch_maybe_ready(r);
}

static void w_resume(void *arg, uint64_t gen, const char *master_addr, unsigned master_port)
{
    struct orch *r = arg;
    cJSON *e;

    if (!(orch_event(r, EV_WORLD_RESUME, NULL) & A_RESTORE))
        return;
    r->resumed_once = true;
    snprintf(r->master_addr, sizeof(r->master_addr), "%s", master_addr);
    r->master_port = master_port;
    e = log_event_new("world_resume");
    cJSON_AddNumberToObject(e, "gen", (double)gen);
    cJSON_AddNumberToObject(e, "rank", world_trainer_rank(r->world));
    cJSON_AddNumberToObject(e, "world_size", world_trainer_size(r->world));
    if (world_trainer_size(r->world) != world_size(r->world))
        cJSON_AddNumberToObject(e, "node", world_rank(r->world));
    cJSON_AddStringToObject(e, "master_addr", master_addr);
    log_event(LOGL_INFO, e, "the world resumes from generation %llu: starting the command as "
              "rank %u of %u", (unsigned long long)gen, world_trainer_rank(r->world),
              world_trainer_size(r->world));
    if (gen == 0) {
        r->resume_dir[0] = '\0';
        r->resume_gen = 0;
        r->resume_step = -1;
        orch_run_command(r);
    } else if (gen == r->resume_gen && r->resume_dir[0] &&
               r->restored_as == world_trainer_rank(r->world)) {
        /* This node's own copy, once it proves exact. */
        r->t_restore = notice_mono_ms();
        orch_restore(r);
    } else {
        r->world_want = gen;
        world_gens(r);
    }
}

static void world_gens(struct orch *r)
{
    snap_gens(r->snap, on_world_gens, r);
}

static void on_world_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct orch *r = arg;
    uint32_t trank = world_trainer_rank(r->world), saved_by = 0;
    int64_t step = -1;

    if (err) {
        char what[128];
        snprintf(what, sizeof(what), "cannot read generation %llu to resume the world",
                 (unsigned long long)r->world_want);
        orch_store_retry(r, world_gens, what, msg);
        return;
    }
    orch_store_ok(r);
    for (size_t i = 0; i < n; i++)
        if (gens[i].committed && gens[i].gen == r->world_want) {
            step = (int64_t)gens[i].commit.step;
            saved_by = gens[i].commit.world_size;
        }
    snap_gens_free(gens, n);
    if (step < 0) {
        log_msg(LOGL_ERROR, "cannot resume the world from generation %llu: it is not "
                "committed in the store; this node leaves", (unsigned long long)r->world_want);
        world_leave(r->world, "cannot restore");
        orch_refuse_start(r);
        return;
    }
    /* An elastic world may run with more or fewer trainers than saved gen:
     * each takes its own number's shard, or one of the others' in turn.
     * Where only global rank 0 writes, its shard is the checkpoint: every
     * node takes it, unless --ckpt-readers rank0 leaves the others their
     * own (empty) one. */
    r->restore_rank = saved_by && trank >= saved_by ? trank % saved_by : trank;
    if (r->o.writers_rank0 && !r->o.readers_rank0)
        r->restore_rank = 0;
    if (saved_by != world_trainer_size(r->world))
        log_msg(LOGL_INFO, "generation %llu was saved by %u trainers and the world now runs %u: "
                "rank %u restores shard %u (SPOT_RESUME_RANK, SPOT_RESUME_WORLD_SIZE)",
                (unsigned long long)r->world_want, saved_by, world_trainer_size(r->world),
                trank, r->restore_rank);
    r->restore_size = saved_by;
    r->restored_as = trank;
    orch_restore_pick(r, r->world_want, step);
}

static void w_claim(void *arg, uint64_t gen)
{
    struct orch *r = arg;

    r->claiming = true;
    snap_claim(r->snap, gen, on_world_claimed, r);
}

static void on_world_claimed(void *arg, int err, const char *msg, uint64_t gen)
{
    struct orch *r = arg;

    r->claiming = false;
    if (gen > r->newest_gen)
        r->newest_gen = gen;
    world_claimed(r->world, err, msg, gen);
}

static void w_write_commit(void *arg, const struct commit *c)
{
    struct orch *r = arg;

    r->commit_gen = c->gen;
    snap_commit(r->snap, c, on_world_written, r);
}

static void on_world_written(void *arg, int err, const char *msg)
{
    struct orch *r = arg;

    world_committed(r->world, r->commit_gen, err, msg);
}

static void w_pick_resume(void *arg)
{
    struct orch *r = arg;

    /* The newest through <job>/LATEST (a few requests), unless --resume N
     * names one that may be older. */
    if (!r->resumed_once && r->resume_mode == RESUME_GEN)
        snap_gens(r->snap, on_pick, r);
    else
        snap_gens_newest(r->snap, on_pick_newest, r);
}

static void on_pick_newest(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n,
                           bool all)
{
    on_pick(arg, err, msg, gens, n);
}

static void on_pick(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct orch *r = arg;
    uint64_t pick = 0, want = 0;
    bool first = !r->resumed_once;
    char what[128];

    if (err) {
        snprintf(what, sizeof(what), "cannot list the checkpoints of job '%s' to resume the "
                 "world", r->job);
        orch_store_retry(r, (void (*)(struct orch *))w_pick_resume, what, msg);
        return;
    }
    orch_store_ok(r);
    r->gens_read = true;
    if (first && r->resume_mode == RESUME_GEN)
        want = r->resume_want;
    for (size_t i = 0; i < n; i++) {
        if (gens[i].gen > r->newest_gen)
            r->newest_gen = gens[i].gen;
        if (gens[i].committed && (!want || gens[i].gen == want))
            pick = gens[i].gen;
    }
    snap_gens_free(gens, n);
    if (first && r->resume_mode == RESUME_FRESH)
        pick = 0;
    world_resume_from(r->world, pick);
}

/* ---- what this node asks of the world ------------------------------------ */

/* A checkpoint wanted here (A_TRIGGER): the world's coordinator runs it. */
void orch_world_want(struct orch *r, const char *why, int64_t deadline_ms)
{
    world_trigger(r->world, "checkpoint", why, false, deadline_ms);
}

/* The command is stopped (or never started) and nothing is under way:
 * this node waits for the world's resume. */
void orch_maybe_ready(struct orch *r)
{
    if (orch_event(r, EV_PARKED, NULL) & A_WAIT_WORLD)
        world_ready(r->world, r->resume_gen);
}

/* ---- the command line of each start -------------------------------------- */

/* The world's environment and command line for the next start. */
int orch_world_command(struct orch *r)
{
    char num[24];
    size_t n = 0;

    snprintf(num, sizeof(num), "%u", world_trainer_rank(r->world));
    setenv("SPOT_NODE_RANK", num, 1);
    snprintf(num, sizeof(num), "%u", world_trainer_size(r->world));
    setenv("SPOT_WORLD_SIZE", num, 1);
    setenv("SPOT_MASTER_ADDR", r->master_addr, 1);
    snprintf(num, sizeof(num), "%u", r->master_port);
    setenv("SPOT_MASTER_PORT", num, 1);
    orch_free_argv(r);
    while (r->o.argv[n])
        n++;
    if (!(r->argv = calloc(n + 1, sizeof(*r->argv))))
        return -ENOMEM;
    for (r->argc = 0; r->argc < n; r->argc++)
        if (!(r->argv[r->argc] = substitute(r, r->o.argv[r->argc])))
            return -ENOMEM;
    child_set_argv(r->o.child, r->argv);
    return 0;
}

/* "{name}" in the command line: rank, world_size, master_addr,
 * master_port, gen.  Unknown names stay as they are. */
static char *substitute(const struct orch *r, const char *arg)
{
    char num[4][24], out[8192];
    const char *names[] = { "{rank}", "{world_size}", "{master_addr}", "{master_port}", "{gen}" };
    const char *values[5];
    size_t len = 0;

    snprintf(num[0], sizeof(num[0]), "%u", world_trainer_rank(r->world));
    snprintf(num[1], sizeof(num[1]), "%u", world_trainer_size(r->world));
    snprintf(num[2], sizeof(num[2]), "%u", r->master_port);
    snprintf(num[3], sizeof(num[3]), "%llu", (unsigned long long)r->resume_gen);
    values[0] = num[0], values[1] = num[1], values[2] = r->master_addr, values[3] = num[2];
    values[4] = num[3];
    while (*arg && len < sizeof(out) - 1) {
        size_t i = 0;
        for (; i < 5; i++)
            if (strncmp(arg, names[i], strlen(names[i])) == 0)
                break;
        if (i < 5) {
            len += (size_t)snprintf(out + len, sizeof(out) - len, "%s", values[i]);
            if (len >= sizeof(out))
                len = sizeof(out) - 1;
            arg += strlen(names[i]);
        } else {
            out[len++] = *arg++;
        }
    }
    out[len] = '\0';
    return strdup(out);
}

void orch_free_argv(struct orch *r)
{
    for (size_t i = 0; r->argv && i < r->argc; i++)
        free(r->argv[i]);
    free(r->argv);
    r->argv = NULL;
    r->argc = 0;
}

/* ---- rendezvous (rendezvous.h): this node's rank ------------------------- */

static void rv_addr(void *arg, uint32_t rank, const char *addr)
{
    struct orch *r = arg;

    if (r->world && !world_up(r->world, rank))
        world_set_addr(r->world, rank, addr);
}

static bool rv_up(void *arg, uint32_t rank)
{
    struct orch *r = arg;

    return r->world && world_up(r->world, rank);
}

static bool rv_coordinates(void *arg)
{
    struct orch *r = arg;

    return r->world && world_is_coordinator(r->world);
}

static void rv_assigned(void *arg, uint32_t rank)
{
    struct orch *r = arg;
    char err[512];

    if (orch_make_world(r, rank, err, sizeof(err)) < 0) {
        log_msg(LOGL_ERROR, "%s", err);
        orch_refuse_start(r);
        return;
    }
    orch_start_listing(r);
}

const struct rendezvous_ops orch_rv_ops = {
    .addr = rv_addr,
    .up = rv_up,
    .coordinates = rv_coordinates,
    .assigned = rv_assigned,
};
