/* orch_resume: what the command starts from.  At start: the job's
 * generations listed, the candidates newest first (or the one --resume
 * names), each restored (or an earlier copy checked) until one restores;
 * when none does, the start is refused, or afresh where allowed.  A store
 * that cannot be read is tried again for --store-wait, never taken for an
 * empty one.  After a crash: the newest commit's own copy, checked before
 * the restart uses it.  After each commit: the resume point, spotd's own
 * copy, and garbage collection (only once the generations were read). */
#include "orch_impl.h"

#include <cjson/cJSON.h>
#include <dirent.h>
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
#include "hooks.h"
#include "imgstream.h"
#include "method.h"
#include "spot/linktree.h"
#include "spot/log.h"
#include "spot/snap.h"
#include "spot/store.h"
#include "world.h"

static void list_gens(struct orch *r);
static void on_all_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n);
static void on_newest(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n,
                      bool all);
static void on_gens(struct orch *r, int err, const char *msg, struct snap_gen *gens, size_t n);
static int make_cands(struct orch *r, const struct snap_gen *gens, size_t n);
static void resume_next(struct orch *r);
static void on_pre_restore(void *arg, int code, const char *msg);
static void on_checked(void *arg, int err, const char *msg);
static void on_restored(void *arg, int err, const char *msg);
static void unrestorable(struct orch *r);
static void resumed(struct orch *r);
static void start_fresh(struct orch *r);
static bool damaged(int err);
static void tried_list(const struct orch *r, char *buf, size_t size);
static void on_collected(void *arg, int err, const char *msg, const struct snap_gc_report *g);
static bool spare(void *arg, uint64_t gen);
static int cmp_u64(const void *a, const void *b);

/* ---- resume: what the command starts from -------------------------------- */

void orch_start_listing(struct orch *r)
{
    char work[4200];

    /* What an earlier spotd left half-saved here is of no use. */
    snprintf(work, sizeof(work), "%s/work", r->state_dir);
    orch_remove_tree(work);
    list_gens(r);
}

/* The newest generations through <job>/LATEST, in a few requests however
 * many the job keeps (snap_gens_newest()); every one for --resume N, or
 * once those from the pointer on all failed to restore. */
static void list_gens(struct orch *r)
{
    r->find_from = store_requests(r->store);
    if (r->resume_mode == RESUME_GEN || r->gens_all)
        snap_gens(r->snap, on_all_gens, r);
    else
        snap_gens_newest(r->snap, on_newest, r);
}

static void on_all_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    on_newest(arg, err, msg, gens, n, true);
}

static void on_newest(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n,
                      bool all)
{
    struct orch *r = arg;

    r->find_requests = store_requests(r->store) - r->find_from;
    if (!err)
        r->gens_all = all;
    on_gens(r, err, msg, gens, n);
}

static void on_gens(struct orch *r, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    char what[256];

    if (err) {
        snprintf(what, sizeof(what), "cannot list the checkpoints of job '%s' in %s", r->job,
                 r->store_url);
        orch_store_retry(r, list_gens, what, msg);
        return;
    }
    orch_store_ok(r);
    r->gens_read = true;
    for (size_t i = 0; i < n; i++)
        if (gens[i].gen > r->newest_gen)
            r->newest_gen = gens[i].gen;
    /* The first checkpoint's number, while the command starts. */
    orch_claim_next(r);
    if (r->world) {
        /* The world decides when, and from what, the command starts. */
        for (size_t i = 0; i < n; i++)
            if (gens[i].committed && gens[i].gen > r->resume_gen) {
                r->resume_gen = gens[i].gen;
                r->resume_step = (int64_t)gens[i].commit.step;
            }
        snap_gens_free(gens, n);
        r->parked = true;
        orch_maybe_ready(r);
        return;
    }
    if (make_cands(r, gens, n) < 0) {
        snap_gens_free(gens, n);
        log_msg(LOGL_ERROR, "out of memory: not starting the command");
        orch_refuse_start(r);
        return;
    }
    snap_gens_free(gens, n);
    if (!r->n_cands && !r->gens_all && r->resume_mode == RESUME_AUTO) {
        /* Never afresh on the pointer's word: the whole listing decides. */
        r->gens_all = true;
        list_gens(r);
        return;
    }
    if (r->resume_mode == RESUME_GEN && !r->n_cands) {
        log_msg(LOGL_ERROR, "--resume %llu: job '%s' has no committed generation %llu (see "
                "spotctl ls); not starting the command", (unsigned long long)r->resume_want,
                r->job, (unsigned long long)r->resume_want);
        orch_refuse_start(r);
        return;
    }
    if (r->resume_mode == RESUME_FRESH) {
        if (r->newest_gen)
            log_msg(LOGL_INFO, "--resume fresh: starting fresh; the committed generations "
                    "stay, and new ones follow %llu", (unsigned long long)r->newest_gen);
        free(r->cands);
        r->cands = NULL;
        r->n_cands = 0;
    }
    if (!r->n_cands) {
        start_fresh(r);
        return;
    }
    resume_next(r);
}

/* What the start may resume from: every committed generation newest
 * first (auto), or the one asked for.  A commit record that cannot be
 * read is a generation that does not restore. */
static int make_cands(struct orch *r, const struct snap_gen *gens, size_t n)
{
    struct cand *tried = r->cands;
    size_t n_tried = r->n_cands;

    r->cands = NULL;
    r->n_cands = r->next_cand = 0;
    if (!n) {
        free(tried);
        return 0;
    }
    if (!(r->cands = calloc(n, sizeof(*r->cands)))) {
        free(tried);
        return -ENOMEM;
    }
    for (size_t i = n; i-- > 0;) {
        struct cand *c = &r->cands[r->n_cands];

        if (!gens[i].committed && !gens[i].corrupt && !gens[i].unauthentic)
            continue;
        if (r->resume_mode == RESUME_GEN && gens[i].gen != r->resume_want)
            continue;
        c->gen = gens[i].gen;
        c->step = gens[i].committed ? (int64_t)gens[i].commit.step : -1;
        if (gens[i].unauthentic) {
            /* A record the job key did not sign: perhaps forged. */
            c->err = -EKEYREJECTED;
            snap_refusal(r->snap, &gens[i], c->why, sizeof(c->why));
        } else if (!gens[i].committed) {
            c->err = -EBADMSG;
            snprintf(c->why, sizeof(c->why), "its commit record is unreadable");
        }
        /* Listed again after those from the pointer on failed: what was
         * tried stays tried. */
        for (size_t j = 0; j < n_tried && !c->err; j++)
            if (tried[j].gen == c->gen && tried[j].err) {
                c->err = tried[j].err;
                snprintf(c->why, sizeof(c->why), "%s", tried[j].why);
            }
        r->n_cands++;
    }
    free(tried);
    return 0;
}

/* The next candidate, newest first; what is left untried when none is. */
static void resume_next(struct orch *r)
{
    while (r->next_cand < r->n_cands && r->cands[r->next_cand].err)
        r->next_cand++;
    if (r->next_cand == r->n_cands && !r->gens_all) {
        /* Older generations are not listed yet: list them all. */
        log_msg(LOGL_INFO, "no generation from %llu on restores; listing every generation of "
                "job '%s'", r->n_cands ? (unsigned long long)r->cands[r->n_cands - 1].gen : 0ull,
                r->job);
        r->gens_all = true;
        list_gens(r);
        return;
    }
    if (r->next_cand == r->n_cands) {
        unrestorable(r);
        return;
    }
    orch_restore_pick(r, r->cands[r->next_cand].gen, r->cands[r->next_cand].step);
}

/* --early-start: the command may start now, before its generation is
 * restored (orch_run_early()): at a start, one node, with trainers that
 * talk to spotd. */
static bool early(const struct orch *r)
{
    return r->o.early_start && !r->restarting && !r->world && !r->early_restoring &&
           r->resume_gen && (r->mops->flags & METHOD_WORKERS) && r->state == RESUMING;
}

/* Restore gen (holding step) and start the command from it. */
void orch_restore_pick(struct orch *r, uint64_t gen, int64_t step)
{
    struct hook_env he;
    int err;

    r->resume_gen = gen;
    r->resume_step = step;
    r->t_restore = notice_mono_ms();
    /* A world's node may restore another rank's shard of gen later. */
    if (r->world)
        snprintf(r->resume_dir, sizeof(r->resume_dir), "%s/restore/gen-%08llu-rank-%u",
                 r->state_dir, (unsigned long long)r->resume_gen, r->restore_rank);
    else
        snprintf(r->resume_dir, sizeof(r->resume_dir), "%s/restore/gen-%08llu", r->state_dir,
                 (unsigned long long)r->resume_gen);
    he = (struct hook_env){ .job = r->job, .dir = r->resume_dir, .gen = r->resume_gen,
                            .step = r->resume_step, .reason = "resume" };
    /* --early-start: the command starts now, before the hook and the
     * restore (it imports its framework meanwhile). */
    if (early(r))
        orch_run_early(r);
    err = hooks_run(r->hooks, "pre-restore", &he, on_pre_restore, r);
    if (err == -ENOENT)
        orch_restore(r);
    else if (err < 0)
        on_pre_restore(r, -1, "cannot run it");
}

static void on_pre_restore(void *arg, int code, const char *msg)
{
    struct orch *r = arg;

    if (code != 0) {
        log_msg(LOGL_ERROR, "the pre-restore hook refused the restore of generation %llu "
                "(%s): not starting the command", (unsigned long long)r->resume_gen, msg);
        orch_refuse_start(r);
        return;
    }
    orch_restore(r);
}

/* What the restore of r->resume_gen leaves in the store for the method
 * to read from there (method_ops.restore_leaves): at a start, not for a
 * restart (whose command line restores from files), and not with
 * --criu-stream never. */
static const char *leaves(const struct orch *r)
{
    if (r->restarting || !r->mops->restore_leaves || r->o.criu_stream == CRIU_STREAM_NEVER ||
        !imgstream_serve_fits(r->resume_dir))
        return NULL;
    return r->mops->restore_leaves;
}

void orch_restore(struct orch *r)
{
    char dir[4200];

    /* Restores go beside their destination, then into place. */
    snprintf(dir, sizeof(dir), "%s/restore", r->state_dir);
    orch_make_dirs(dir);
    orch_prune_local(r, "restore", r->resume_dir);
    if (early(r))
        orch_run_early(r);
    if (access(r->resume_dir, F_OK) == 0) {
        snap_check_leaving(r->snap, r->resume_gen, r->world ? r->restore_rank : 0,
                           r->resume_dir, leaves(r), on_checked, r);
        return;
    }
    snap_restore_leaving(r->snap, r->resume_gen, r->world ? r->restore_rank : 0, r->resume_dir,
                         leaves(r), NULL, on_restored, r);
}

/* A restore into a directory that has one already (an earlier start of
 * this state directory, or spotd's own copy of a commit) takes it only
 * when it is an exact copy. */
static void on_checked(void *arg, int err, const char *msg)
{
    struct orch *r = arg;

    if (err == 0) {
        on_restored(r, 0, "");
        return;
    }
    if (err != -ENOENT && !damaged(err)) {
        char what[128];
        snprintf(what, sizeof(what), "cannot read generation %llu",
                 (unsigned long long)r->resume_gen);
        orch_store_retry(r, orch_restore, what, msg);
        return;
    }
    if (err != -ENOENT || access(r->resume_dir, F_OK) == 0)
        log_msg(LOGL_WARN, "%s; restoring it again from the store", msg);
    orch_remove_tree(r->resume_dir);
    snap_restore_leaving(r->snap, r->resume_gen, r->world ? r->restore_rank : 0, r->resume_dir,
                         leaves(r), NULL, on_restored, r);
}

static void on_restored(void *arg, int err, const char *msg)
{
    struct orch *r = arg;
    struct cand *c = r->next_cand < r->n_cands ? &r->cands[r->next_cand] : NULL;
    char what[128];

    if (!err) {
        resumed(r);
        return;
    }
    if (r->early_restoring && damaged(err)) {
        orch_early_failed(r, msg);
        return;
    }
    if (!damaged(err)) {
        snprintf(what, sizeof(what), "cannot restore generation %llu",
                 (unsigned long long)r->resume_gen);
        orch_store_retry(r, orch_restore, what, msg);
        return;
    }
    orch_store_ok(r);
    if (r->world) {
        /* The world's generation: one to take or none. */
        log_msg(LOGL_ERROR, "cannot restore generation %llu: %s; this node leaves the world "
                "rather than start its shard afresh", (unsigned long long)r->resume_gen, msg);
        world_leave(r->world, "cannot restore");
        orch_refuse_start(r);
        return;
    }
    if (!c || c->gen != r->resume_gen) {
        /* A restart's generation does not restore: choose again, as at
         * start. */
        log_msg(LOGL_WARN, "generation %llu cannot be restored for the restart: %s; looking "
                "for the newest one that can", (unsigned long long)r->resume_gen, msg);
        list_gens(r);
        return;
    }
    c->err = err;
    snprintf(c->why, sizeof(c->why), "%s", msg);
    r->next_cand++;
    if (r->resume_mode == RESUME_GEN || r->o.on_unrestorable == UNRESTORABLE_FAIL ||
        (r->next_cand == r->n_cands && r->gens_all)) {
        unrestorable(r);
        return;
    }
    log_msg(LOGL_WARN, "generation %llu cannot be restored: %s; trying an older one",
            (unsigned long long)c->gen, msg);
    resume_next(r);
}

/* No committed generation restores: refuse, or afresh when allowed. */
static void unrestorable(struct orch *r)
{
    char tried[2048];

    tried_list(r, tried, sizeof(tried));
    if (r->resume_mode == RESUME_AUTO && r->o.on_unrestorable == UNRESTORABLE_FRESH &&
        !r->world) {
        r->resume_dir[0] = '\0';
        r->resume_gen = 0;
        r->resume_step = -1;
        resumed(r);
        return;
    }
    log_msg(LOGL_ERROR, "job '%s': %s%s; not starting the command: nothing is started afresh "
            "over committed work (see spotctl verify; resume another generation with --resume "
            "N, or start afresh with --resume fresh)", r->job,
            r->resume_mode == RESUME_AUTO && r->o.on_unrestorable == UNRESTORABLE_OLDER
                ? "no committed generation can be restored: " : "", tried);
    if (r->world)
        world_leave(r->world, "cannot restore");
    orch_refuse_start(r);
}

/* The generation to resume from is in resume_dir (or none: afresh). */
static void resumed(struct orch *r)
{
    char tried[2048];
    struct hook_env he;
    cJSON *e, *skipped;

    orch_store_ok(r);
    r->resumed_from = r->resume_gen;
    tried_list(r, tried, sizeof(tried));
    e = log_event_new("resume");
    cJSON_AddNumberToObject(e, "gen", (double)r->resume_gen);
    cJSON_AddNumberToObject(e, "step", (double)r->resume_step);
    if (r->resume_gen)
        cJSON_AddStringToObject(e, "dir", r->resume_dir);
    cJSON_AddNumberToObject(e, "ms", (double)(notice_mono_ms() - r->t_restore));
    cJSON_AddNumberToObject(e, "find_requests", (double)r->find_requests);
    if (r->restarting)
        cJSON_AddBoolToObject(e, "restart", 1);
    if (r->early_restoring)
        cJSON_AddBoolToObject(e, "early_start", 1);
    skipped = cJSON_AddArrayToObject(e, "skipped");
    for (size_t i = 0; skipped && i < r->n_cands; i++) {
        cJSON *o;
        if (!r->cands[i].err || !(o = cJSON_CreateObject()))
            continue;
        cJSON_AddNumberToObject(o, "gen", (double)r->cands[i].gen);
        cJSON_AddStringToObject(o, "error", r->cands[i].why);
        cJSON_AddItemToArray(skipped, o);
    }
    if (!r->resume_gen) {
        cJSON_AddBoolToObject(e, "fresh", 1);
        log_event(LOGL_WARN, e, "no committed generation restores (%s); starting fresh as "
                  "--on-unrestorable fresh allows; they stay in the store, and new generations "
                  "follow %llu", tried, (unsigned long long)r->newest_gen);
    } else if (tried[0]) {
        log_event(LOGL_WARN, e, "resuming from generation %llu (step %lld), not a newer one: "
                  "%s", (unsigned long long)r->resume_gen, (long long)r->resume_step, tried);
    } else {
        log_event(LOGL_INFO, e, "resuming from generation %llu (step %lld)",
                  (unsigned long long)r->resume_gen, (long long)r->resume_step);
    }
    if (r->resume_gen) {
        orch_stage_measure(r, r->resume_dir);
        he = (struct hook_env){ .job = r->job, .dir = r->resume_dir, .gen = r->resume_gen,
                                .step = r->resume_step, .reason = "resume" };
        hooks_run(r->hooks, "post-restore", &he, NULL, NULL);
    }
    if (r->restarting) {
        /* The command's restart (child.c) waited for this. */
        r->restarting = false;
        orch_set_resume(r, r->resume_gen, r->resume_step, r->resume_gen ? r->resume_dir : NULL);
        if (r->mops->committed && r->method && r->resume_gen)
            r->mops->committed(r->method, r->resume_dir);
        child_restart_now(r->o.child);
        /* After an early start that failed, the resume ends only now. */
        if (r->state == RESUMING)
            orch_resume_done(r);
        return;
    }
    if (r->early_restoring) {
        orch_early_restored(r);
        return;
    }
    orch_run_command(r);
}

/* Nothing to resume from: the command starts (or restarts) afresh. */
static void start_fresh(struct orch *r)
{
    r->resume_dir[0] = '\0';
    r->resume_gen = 0;
    r->resume_step = -1;
    if (r->restarting) {
        r->restarting = false;
        orch_set_resume(r, 0, -1, NULL);
        child_restart_now(r->o.child);
        if (r->state == RESUMING)
            orch_resume_done(r);
        return;
    }
    orch_run_command(r);
}

/* ---- a restart after a crash --------------------------------------------- */

/* A restart after a crash resumes from the newest committed generation
 * as spotd holds it, once that copy proves exact (else it is restored
 * again from the store, or an older one is), never from what the trainer
 * may have changed since. */
void orch_on_before_restart(void *arg)
{
    struct orch *r = arg;

    if (r->early_restoring) {
        /* Started early, the command ended before its restore did. */
        r->restart_after_restore = true;
        return;
    }
    if (!r->resume_gen) {
        child_restart_now(r->o.child);
        return;
    }
    log_msg(LOGL_INFO, "checking the copy of generation %llu in '%s' before the restart",
            (unsigned long long)r->resume_gen, r->resume_dir);
    r->restarting = true;
    r->t_restore = notice_mono_ms();
    free(r->cands);
    r->cands = NULL;
    r->n_cands = r->next_cand = 0;
    orch_restore(r);
}

/* ---- after a commit: what a restart resumes from ------------------------- */

/* gen is the newest committed generation, its files in dir on this node: a
 * command restarted from now on resumes from it. */
void orch_set_resume(struct orch *r, uint64_t gen, int64_t step, const char *dir)
{
    char num[32];

    r->resume_gen = gen;
    r->resume_step = step;
    if (dir != r->resume_dir)
        snprintf(r->resume_dir, sizeof(r->resume_dir), "%s", dir ? dir : "");
    if (!dir) {
        unsetenv("SPOT_RESUME_DIR");
        unsetenv("SPOT_RESUME_STEP");
        unsetenv("SPOT_GEN");
    } else {
        char path[4400];

        snprintf(path, sizeof(path), "%s", dir);
        if (r->method && r->mops->resume_path)
            r->mops->resume_path(r->method, dir, step, path, sizeof(path));
        setenv("SPOT_RESUME_DIR", path, 1);
        snprintf(num, sizeof(num), "%lld", (long long)step);
        setenv("SPOT_RESUME_STEP", num, 1);
        snprintf(num, sizeof(num), "%llu", (unsigned long long)gen);
        setenv("SPOT_GEN", num, 1);
    }
    if (r->world && dir) {
        snprintf(num, sizeof(num), "%u", r->restore_rank);
        setenv("SPOT_RESUME_RANK", num, 1);
        snprintf(num, sizeof(num), "%u", r->restore_size);
        setenv("SPOT_RESUME_WORLD_SIZE", num, 1);
    } else {
        unsetenv("SPOT_RESUME_RANK");
        unsetenv("SPOT_RESUME_WORLD_SIZE");
    }
    if (r->control)
        control_set_resume(r->control, dir, step, gen);
}

/* Where a restart finds the generation just committed: the method's own
 * folder when it is spotd's (STATE/work/gen-N, written through libckpt or
 * by criu), else (signal, dir: the trainer's folder, which it rewrites
 * and prunes) STATE/restore/gen-N, hard links to the same files.  Either
 * is checked against the manifest before a restart uses it, and restored
 * from the store when it does not match. */
void orch_own_copy(struct orch *r, char *buf, size_t size)
{
    char work[4200];
    int err;

    snprintf(work, sizeof(work), "%s/work/", r->state_dir);
    if (strncmp(r->dir, work, strlen(work)) == 0) {
        snprintf(buf, size, "%s", r->dir);
        return;
    }
    snprintf(buf, size, "%s/restore/gen-%08llu%s", r->state_dir, (unsigned long long)r->gen,
             r->world ? "-rank-" : "");
    if (r->world) {
        size_t len = strlen(buf);
        snprintf(buf + len, size - len, "%u", r->restore_rank);
    }
    if (r->staged) {
        /* In memory, freed once committed: none is kept. */
        log_msg(LOGL_INFO, "no local copy of generation %llu (staged in '%s', freed once "
                "committed); a restart restores it from the store", (unsigned long long)r->gen,
                r->stage);
        return;
    }
    snprintf(work, sizeof(work), "%s/restore", r->state_dir);
    orch_make_dirs(work);
    orch_remove_tree(buf);
    /* Names only, no data: a checkpoint's few files take microseconds. */
    if ((err = linktree_link(r->dir, buf)) < 0) {
        log_msg(LOGL_INFO, "no local copy of generation %llu (cannot link '%s' into '%s': %s); "
                "a restart restores it from the store", (unsigned long long)r->gen, r->dir,
                buf, strerror(-err));
        orch_remove_tree(buf);
    }
}

/* ---- a store that cannot be read, a start refused ------------------------ */

/* A store that could not be read at start is tried again (again(r)), 1 s,
 * 2 s, 4 s ... 10 s apart, for --store-wait; after that spotd refuses to
 * start.  Could not read is never nothing there: a start that took a
 * failed listing for an empty store would number generations from 1 again
 * over committed ones. */
void orch_store_retry(struct orch *r, void (*again)(struct orch *), const char *what,
                        const char *msg)
{
    int64_t now = notice_mono_ms(), left;
    uint64_t delay = 1000ull << (r->store_tries < 4 ? r->store_tries : 4);
    struct timeval tv;

    if (!r->wait_from)
        r->wait_from = now;
    left = r->wait_from + (int64_t)r->o.store_wait_ms - now;
    if (left <= 0) {
        log_msg(LOGL_ERROR, "%s: %s; not starting the command after %lld s of tries: a store "
                "that cannot be read is never taken for an empty one (check the store's "
                "address, credentials and permissions, or raise --store-wait)", what, msg,
                (long long)(now - r->wait_from) / 1000);
        orch_refuse_start(r);
        return;
    }
    if (delay > 10000)
        delay = 10000;
    if ((int64_t)delay > left)
        delay = (uint64_t)left;
    r->store_tries++;
    log_msg(LOGL_WARN, "%s: %s; trying again in %.1f s (for %lld s more: --store-wait)", what,
            msg, (double)delay / 1000, (long long)(left / 1000));
    r->retry_fn = again;
    tv.tv_sec = (time_t)(delay / 1000);
    tv.tv_usec = (suseconds_t)(delay % 1000) * 1000;
    event_add(r->retry, &tv);
}

void orch_on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct orch *r = arg;

    r->retry_fn(r);
}

/* A store read worked: the next failure has its --store-wait again. */
void orch_store_ok(struct orch *r)
{
    r->wait_from = 0;
    r->store_tries = 0;
}

/* Whether err says that a generation itself cannot be restored here
 * (damaged, missing, not signed by the job key, a manifest that restore
 * refuses, more than the disk holds), as opposed to a store that cannot be
 * read now. */
static bool damaged(int err)
{
    return err == -EBADMSG || err == -ENOENT || err == -EKEYREJECTED || err == -EPERM ||
           err == -EINVAL || err == -ENAMETOOLONG || err == -ENOSPC || err == -EFBIG;
}

/* "generation 5: chunk ... corrupt; generation 4: ..." for what was tried. */
static void tried_list(const struct orch *r, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < r->n_cands && len < size; i++) {
        if (!r->cands[i].err)
            continue;
        len += (size_t)snprintf(buf + len, size - len, "%sgeneration %llu: %s",
                                len ? "; " : "", (unsigned long long)r->cands[i].gen,
                                r->cands[i].why);
    }
    if (len >= size && size > 4)
        memcpy(buf + size - 4, "...", 4);
}

/* The command is not started: spotd ends with 125 (see orch.h). */
void orch_refuse_start(struct orch *r)
{
    if (r->early_restoring) {
        r->early_restoring = false;
        control_restored(r->control, "spotd cannot restore a generation, and stops");
    }
    r->exit_code = 125;
    orch_set_state(r, IDLE);
    event_base_loopbreak(r->o.base);
}

/* ---- garbage collection -------------------------------------------------- */

/* Remember gen as written by this spotd (when memory fails it stays
 * spared: the safe side). */
void orch_add_own(struct orch *r, uint64_t gen)
{
    if (r->n_own && r->own[r->n_own - 1] >= gen)
        return;
    if (r->n_own == r->cap_own) {
        size_t cap = r->cap_own ? 2 * r->cap_own : 16;
        uint64_t *o = realloc(r->own, cap * sizeof(*o));
        if (!o)
            return;
        r->own = o;
        r->cap_own = cap;
    }
    r->own[r->n_own++] = gen;
}

/* One collection at a time; a commit during one asks for another.  Never
 * by a spotd that has not read the job's generations. */
void orch_collect(struct orch *r)
{
    if (!r->gens_read)
        return;
    if (r->collecting) {
        r->collect_again = true;
        return;
    }
    r->collecting = true;
    r->collect_again = false;
    snap_gc(r->snap, &(struct snap_gc_opts){ .keep = SNAP_KEEP_DEFAULT,
                                             .grace_ms = SNAP_GRACE_DEFAULT_MS,
                                             .spare = spare,
                                             .spare_arg = r },
            on_collected, r);
}

static void on_collected(void *arg, int err, const char *msg, const struct snap_gc_report *g)
{
    struct orch *r = arg;

    r->collecting = false;
    if (r->collect_again)
        orch_collect(r);
    if (err)
        log_msg(LOGL_WARN, "garbage collection: %s", msg);
    else if (g->gens_deleted || g->chunks_deleted)
        log_msg(LOGL_INFO, "garbage collection: %llu generations and %llu chunks deleted",
                (unsigned long long)g->gens_deleted, (unsigned long long)g->chunks_deleted);
}

/* gc spares every committed generation newer than the one this spotd
 * resumed from that it did not write itself: a generation it could not
 * restore, or another writer's, is the operator's to delete (spotctl gc). */
static bool spare(void *arg, uint64_t gen)
{
    const struct orch *r = arg;

    return gen > r->resumed_from && !bsearch(&gen, r->own, r->n_own, sizeof(*r->own), cmp_u64);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}
