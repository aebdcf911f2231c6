/* orch_plan: what the last checkpoints measured (STATE/figures.json), the
 * plan a terminating notice's checkpoint is held to (does a new one fit
 * before the deadline, or is the newest committed generation kept), the
 * notices held for later (a far deadline, a notice while resuming), and
 * spotctl's commands on the control socket (status, checkpoint, drill). */
#include "orch_impl.h"

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "libckpt/jsonl.h"
#include "method.h"
#include "notices.h"
#include "spot/log.h"
#include "world.h"

/* The figures file's size cap. */
#define FIGURES_MAX 4096

/* ---- figures: what the last checkpoints measured ------------------------- */

static void figures_path(const struct orch *r, char *buf, size_t size)
{
    snprintf(buf, size, "%s/figures.json", r->state_dir);
}

static int64_t json_i64(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 9e15
               ? (int64_t)v->valuedouble
               : -1;
}

/* Read STATE/figures.json when there is one; anything odd in it is
 * ignored (the figures are a prediction, never a decision on their own). */
void orch_figures_load(struct orch *r)
{
    char path[4200], buf[FIGURES_MAX + 1];
    struct figures f;
    cJSON *o;
    ssize_t n;
    int fd;

    figures_path(r, path, sizeof(path));
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    n = read(fd, buf, FIGURES_MAX);
    close(fd);
    if (n <= 0 || n == FIGURES_MAX)
        return;
    buf[n] = '\0';
    if (!(o = cJSON_Parse(buf)))
        return;
    f = (struct figures){
        .save_ms = json_i64(o, "save_ms"),
        .signal_save_ms = json_i64(o, "signal_save_ms"),
        .upload_ms = json_i64(o, "upload_ms"),
        .commit_ms = json_i64(o, "commit_ms"),
        .bytes = (uint64_t)json_i64(o, "bytes"),
        .bytes_sent = (uint64_t)json_i64(o, "bytes_sent"),
        .step = json_i64(o, "step"),
        .at_ms = json_i64(o, "at_ms"),
        .prev_step = json_i64(o, "prev_step"),
        .prev_at_ms = json_i64(o, "prev_at_ms"),
    };
    cJSON_Delete(o);
    if (f.save_ms >= 0 && f.upload_ms >= 0 && f.commit_ms >= 0)
        r->fig = f;
}

void orch_figures_save(struct orch *r)
{
    char path[4200], tmp[4300], *text;
    cJSON *o = cJSON_CreateObject();
    FILE *f;

    if (!o)
        return;
    cJSON_AddNumberToObject(o, "save_ms", (double)r->fig.save_ms);
    if (r->fig.signal_save_ms >= 0)
        cJSON_AddNumberToObject(o, "signal_save_ms", (double)r->fig.signal_save_ms);
    cJSON_AddNumberToObject(o, "upload_ms", (double)r->fig.upload_ms);
    cJSON_AddNumberToObject(o, "commit_ms", (double)r->fig.commit_ms);
    cJSON_AddNumberToObject(o, "bytes", (double)r->fig.bytes);
    cJSON_AddNumberToObject(o, "bytes_sent", (double)r->fig.bytes_sent);
    cJSON_AddNumberToObject(o, "step", (double)r->fig.step);
    cJSON_AddNumberToObject(o, "at_ms", (double)r->fig.at_ms);
    cJSON_AddNumberToObject(o, "prev_step", (double)r->fig.prev_step);
    cJSON_AddNumberToObject(o, "prev_at_ms", (double)r->fig.prev_at_ms);
    text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return;
    figures_path(r, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if ((f = fopen(tmp, "we"))) {
        bool ok = fprintf(f, "%s\n", text) > 0;
        if (fclose(f) == 0 && ok)
            rename(tmp, path);
    }
    free(text);
}

/* Steps per second between the last two commits, 0 when unknown. */
static double steps_per_s(const struct orch *r)
{
    const struct figures *f = &r->fig;

    if (f->prev_at_ms <= 0 || f->at_ms <= f->prev_at_ms || f->step <= f->prev_step ||
        f->prev_step < 0)
        return 0;
    return (double)(f->step - f->prev_step) * 1000.0 / (double)(f->at_ms - f->prev_at_ms);
}

/* ---- the plan at a terminating notice ------------------------------------ */

/* A terminating notice: will a new checkpoint fit before its deadline?
 * Returns false after logging the plan when it will not, so that the
 * newest committed generation is kept and the command stopped now. */
bool orch_plan_fits(struct orch *r)
{
    int64_t left = r->deadline_ms - notice_now_ms();
    int64_t save = orch_signal_save(r, true) ? r->fig.signal_save_ms : r->fig.save_ms;
    int64_t need = (save > 0 ? save : 0) + r->fig.upload_ms + r->fig.commit_ms;
    bool known = r->fig.at_ms > 0, fits = !known || need <= left;
    double rate = steps_per_s(r);
    cJSON *e = log_event_new("plan");

    cJSON_AddNumberToObject(e, "gen", (double)r->gen);
    cJSON_AddNumberToObject(e, "left_ms", (double)left);
    if (known) {
        cJSON_AddNumberToObject(e, "predicted_ms", (double)need);
        if (save >= 0) /* else unknown: the timeline then has no budget for it */
            cJSON_AddNumberToObject(e, "save_ms", (double)save);
        cJSON_AddNumberToObject(e, "upload_ms", (double)r->fig.upload_ms);
        cJSON_AddNumberToObject(e, "commit_ms", (double)r->fig.commit_ms);
    }
    cJSON_AddBoolToObject(e, "fits", fits);
    if (!known)
        log_event(LOGL_INFO, e, "plan: %lld ms left before the deadline, no figures measured "
                  "yet: checkpointing", (long long)left);
    else if (fits && save < 0)
        log_event(LOGL_INFO, e, "plan: a checkpoint takes about %lld ms and the trainer's save "
                  "on the signal (not measured yet), %lld ms are left: checkpointing",
                  (long long)need, (long long)left);
    else if (fits)
        log_event(LOGL_INFO, e, "plan: a checkpoint takes about %lld ms (save %lld, upload "
                  "%lld, commit %lld), %lld ms are left: checkpointing", (long long)need,
                  (long long)save, (long long)r->fig.upload_ms, (long long)r->fig.commit_ms,
                  (long long)left);
    else if (r->resume_gen == 0)
        log_event(LOGL_WARN, e, "plan: a checkpoint takes about %lld ms, only %lld ms are "
                  "left, and there is no committed generation: trying all the same",
                  (long long)need, (long long)left);
    else {
        double steps = rate * (double)(notice_now_ms() - r->fig.at_ms) / 1000.0;
        char lost[96] = "";

        /* The trainers' own progress says it best; else the rate. */
        if (r->control && control_step(r->control) > r->resume_step) {
            steps = (double)(control_step(r->control) - r->resume_step);
            rate = 1;
        }
        cJSON_AddNumberToObject(e, "kept_gen", (double)r->resume_gen);
        if (rate > 0) {
            cJSON_AddNumberToObject(e, "steps_lost", (double)(int64_t)steps);
            snprintf(lost, sizeof(lost), ", about %.0f steps", steps);
        }
        log_event(LOGL_WARN, e, "plan: a checkpoint takes about %lld ms, only %lld ms are left: "
                  "keeping generation %llu (step %lld); the work since is lost%s",
                  (long long)need, (long long)left, (unsigned long long)r->resume_gen,
                  (long long)r->resume_step, lost);
    }
    return fits || r->resume_gen == 0;
}

bool orch_signal_save(const struct orch *r, bool last)
{
    return last && (r->mops->flags & METHOD_OWN_SCHEDULE) && r->mops->saves_on_signal &&
           r->method && r->mops->saves_on_signal(r->method);
}

/* A notice's checkpoint is given up (and says why) a little before
 * notices.c's fallback stop begins. */
int64_t orch_notice_deadline(const struct orch *r, const struct notice *n)
{
    return notice_stop_plan(n->deadline_ms, notice_now_ms(), r->o.margin_ms, r->o.grace_ms, true)
        .give_up_ms;
}

int64_t orch_notice_last_start(const struct orch *r, const struct notice *n)
{
    int64_t save = orch_signal_save(r, true) ? r->fig.signal_save_ms : r->fig.save_ms;
    int64_t need = r->fig.at_ms > 0 ? (save > 0 ? save : 0) + r->fig.upload_ms + r->fig.commit_ms
                                    : 0;

    return orch_notice_deadline(r, n) - need;
}

bool orch_notice_far(const struct notice *n, int64_t now_ms)
{
    return n->terminating && n->deadline_ms - now_ms > NOTICE_HORIZON_MS;
}

bool orch_planned(const struct orch *r, int64_t *ret_checkpoint_ms, int64_t *ret_deadline_ms)
{
    const struct notice *n = r->held_stop;

    if (!n || !orch_notice_far(n, notice_now_ms()))
        return false;
    *ret_checkpoint_ms = n->deadline_ms - NOTICE_HORIZON_MS;
    *ret_deadline_ms = n->deadline_ms;
    return true;
}

/* The far notice's plan, for `spotctl status`: when its checkpoint
 * begins, when the stop comes at the latest (the fallback), the deadline. */
static void add_plan(const struct orch *r, cJSON *o)
{
    int64_t at, deadline;
    char buf[48], reason[160];
    cJSON *p;

    if (!orch_planned(r, &at, &deadline) || !(p = cJSON_AddObjectToObject(o, "planned")))
        return;
    orch_notice_reason(r->held_stop, reason, sizeof(reason));
    cJSON_AddStringToObject(p, "reason", reason);
    cJSON_AddStringToObject(p, "event_id", r->held_stop->event_id);
    cJSON_AddStringToObject(p, "checkpoint_at", notice_format_time(at, buf, sizeof(buf)));
    cJSON_AddStringToObject(p, "stop_by",
                            notice_format_time(notice_stop_plan(deadline, at, r->o.margin_ms,
                                                                r->o.grace_ms, true).stop_at_ms,
                                               buf, sizeof(buf)));
    cJSON_AddStringToObject(p, "deadline", notice_format_time(deadline, buf, sizeof(buf)));
    cJSON_AddNumberToObject(p, "checkpoint_in_ms", (double)(at - notice_now_ms()));
}

/* ---- notices held for later --------------------------------------------- */

/* Keep notice n for later (A_HOLD): a far terminating one until
 * NOTICE_HORIZON_MS before its deadline, one that came while resuming until
 * the command runs; a terminating one held while resuming is given up when
 * a checkpoint would no longer fit (held_timer, both).  Of two terminating
 * ones, the earlier deadline is kept: its checkpoint serves the other. */
void orch_hold(struct orch *r, const struct notice *n)
{
    struct notice **slot = n->terminating ? &r->held_stop : &r->held_advice;
    int64_t now = notice_now_ms(), due;
    bool far = orch_notice_far(n, now);
    char when[48], reason[160];
    struct timeval tv;

    if (*slot && n->terminating && (*slot)->deadline_ms <= n->deadline_ms)
        return;
    if (!*slot && !(*slot = malloc(sizeof(**slot)))) {
        log_msg(LOGL_ERROR, "out of memory: a notice is not kept for later; the stop at its "
                "deadline still comes");
        return;
    }
    **slot = *n;
    orch_notice_reason(n, reason, sizeof(reason));
    if (!n->terminating) {
        log_msg(LOGL_INFO, "%s while resuming: its early checkpoint comes once the command "
                "runs", reason);
        return;
    }
    due = far ? n->deadline_ms - NOTICE_HORIZON_MS : orch_notice_last_start(r, n);
    if (far)
        log_msg(LOGL_INFO, "%s: its deadline is more than %d min away; training goes on, and "
                "its checkpoint begins at %s", reason, NOTICE_HORIZON_MS / 60000,
                notice_format_time(due, when, sizeof(when)));
    else
        log_msg(LOGL_INFO, "%s while resuming: its checkpoint comes once the command runs, if "
                "that is before %s", reason, notice_format_time(due, when, sizeof(when)));
    due = due > now ? due - now : 0;
    tv = (struct timeval){ (time_t)(due / 1000), (suseconds_t)(due % 1000) * 1000 };
    evtimer_add(r->held_timer, &tv);
}

/* The held terminating notice is due: far no more, or no room left for
 * its checkpoint while the resume goes on. */
void orch_on_held(evutil_socket_t fd, short what, void *arg)
{
    struct orch *r = arg;
    struct notice *n = r->held_stop;

    r->held_stop = NULL;
    if (n)
        orch_act_on(r, n);
    free(n);
}

/* The command runs (A_HELD): the notices held while resuming are acted on,
 * the terminating one (whose checkpoint serves an advisory one too) first. */
void orch_act_on_held(struct orch *r)
{
    struct notice *n = r->held_stop, *advice = r->held_advice;

    r->held_advice = NULL;
    if (n && !orch_notice_far(n, notice_now_ms())) {
        r->held_stop = NULL;
        evtimer_del(r->held_timer);
        orch_act_on(r, n);
        free(n);
    } else if (advice) {
        orch_act_on(r, advice);
    }
    free(advice);
}

/* ---- spotctl's commands -------------------------------------------------- */

static void reply_json(cJSON *o, char *reply, size_t len)
{
    char *text = cJSON_PrintUnformatted(o);

    if (!text || strlen(text) >= len)
        snprintf(reply, len, "{\"v\":1,\"type\":\"result\",\"ok\":false,\"error\":\"out of "
                 "memory\"}");
    else
        snprintf(reply, len, "%s", text);
    free(text);
    cJSON_Delete(o);
}

/* What `spotctl status` shows and the metrics read: added to o. */
void orch_status(struct orch *r, cJSON *o)
{
    double rate = r->control && control_rate(r->control) > 0 ? control_rate(r->control)
                                                              : steps_per_s(r);

    cJSON_AddStringToObject(o, "job", r->job);
    cJSON_AddStringToObject(o, "store", r->store_url);
    cJSON_AddNumberToObject(o, "rank", r->world ? world_rank(r->world) : 0);
    if (r->world) {
        cJSON_AddNumberToObject(o, "world_size", world_size(r->world));
        cJSON_AddNumberToObject(o, "trainer_rank", world_trainer_rank(r->world));
        cJSON_AddNumberToObject(o, "trainers_size", world_trainer_size(r->world));
        cJSON_AddNumberToObject(o, "coordinator", world_coordinator(r->world));
        cJSON_AddNumberToObject(o, "alive", world_alive(r->world));
    }
    cJSON_AddStringToObject(o, "method", r->mops->name);
    cJSON_AddStringToObject(o, "state", orch_state_str(r->state));
    cJSON_AddNumberToObject(o, "workers", r->control ? control_workers(r->control) : 0);
    cJSON_AddNumberToObject(o, "step", r->control ? (double)control_step(r->control) : -1);
    cJSON_AddNumberToObject(o, "committed_gen", (double)r->resume_gen);
    cJSON_AddNumberToObject(o, "committed_step", (double)r->resume_step);
    if (rate > 0)
        cJSON_AddNumberToObject(o, "steps_per_s", rate);
    if (r->last_notice[0])
        cJSON_AddStringToObject(o, "last_notice", r->last_notice);
    add_plan(r, o);
    if (r->state >= SAVING && r->state <= COMMITTING) {
        cJSON *p = cJSON_AddObjectToObject(o, "in_progress");
        cJSON_AddNumberToObject(p, "gen", (double)r->gen);
        cJSON_AddStringToObject(p, "reason", r->reason);
        cJSON_AddStringToObject(p, "phase", orch_state_str(r->state));
        cJSON_AddNumberToObject(p, "bytes_total", (double)r->counters.bytes_total);
        cJSON_AddNumberToObject(p, "bytes_read", (double)r->counters.bytes_read);
        cJSON_AddNumberToObject(p, "bytes_sent", (double)r->counters.bytes_sent);
        cJSON_AddNumberToObject(p, "ms", (double)(notice_mono_ms() - r->t_begin));
    }
}

void orch_on_command(void *arg, const char *cmd, const struct jsonl_msg *m, char *reply,
                       size_t len)
{
    struct orch *r = arg;
    cJSON *o = cJSON_CreateObject();

    cJSON_AddNumberToObject(o, "v", 1);
    cJSON_AddStringToObject(o, "type", "result");
    if (strcmp(cmd, "status") == 0) {
        cJSON_AddBoolToObject(o, "ok", 1);
        orch_status(r, o);
    } else if (strcmp(cmd, "checkpoint") == 0) {
        unsigned acts = orch_event(r, EV_REQUEST, NULL);

        if (acts & A_TRIGGER)
            orch_world_want(r, "manual", 0);
        if (acts & A_BEGIN)
            orch_begin_checkpoint(r, NULL, "manual");
        cJSON_AddBoolToObject(o, "ok", acts != 0);
        if (acts & A_TRIGGER) {
            cJSON_AddStringToObject(o, "note", "asked the world's coordinator");
        } else if (acts & A_BEGIN) {
            cJSON_AddNumberToObject(o, "gen", (double)r->gen);
        } else if (r->state == IDLE && !orch_trainers(r)) {
            cJSON_AddStringToObject(o, "error", "no trainer is connected to the control "
                                    "socket (yet): is it linked with libckpt?");
        } else {
            char why[160];
            snprintf(why, sizeof(why), "spotd is %s%s", orch_state_str(r->state),
                     r->state >= SAVING && r->state <= COMMITTING
                         ? " (a checkpoint is under way): try again when it is done"
                         : r->pausing || r->parked ? " (the world's command is stopped)" : "");
            cJSON_AddStringToObject(o, "error", why);
        }
    } else if (strcmp(cmd, "drill") == 0) {
        const struct jsonl_value *kind = jsonl_get(m, "kind"), *in = jsonl_get(m, "in_ms");
        int k = NOTICE_TERMINATE;
        bool ok = r->o.drill != NULL;

        if (kind && kind->type == JSONL_STRING) {
            k = -1;
            for (int i = 0; i < NOTICE__COUNT; i++)
                if (strcmp(kind->str, notice_kind_name((enum notice_kind)i)) == 0)
                    k = i;
            ok = ok && k >= 0;
        }
        if (in && (in->type != JSONL_INT || in->num < 0))
            ok = false;
        if (ok)
            r->o.drill(r->o.drill_arg, k,
                       in ? (uint64_t)in->num : r->o.drill_window_ms);
        cJSON_AddBoolToObject(o, "ok", ok);
        if (!ok)
            cJSON_AddStringToObject(o, "error", "expected kind terminate, stop, hibernate, "
                                    "rebalance or maintenance, and in_ms >= 0");
    } else {
        cJSON_AddBoolToObject(o, "ok", 0);
        cJSON_AddStringToObject(o, "error", "unknown command; commands: status, checkpoint, "
                                "drill");
    }
    reply_json(o, reply, len);
}

/* "notice: aws terminate", "notice: drill" */
void orch_notice_reason(const struct notice *n, char *buf, size_t size)
{
    const char *kind = notice_kind_name(n->kind);

    if (strcmp(n->source, kind) == 0)
        snprintf(buf, size, "notice: %s", kind);
    else
        snprintf(buf, size, "notice: %s %s", n->source, kind);
}
