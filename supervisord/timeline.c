#include "timeline.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "spot/log.h"
#include "spot/notice.h"

/* The phases of a notice's checkpoint; each starts with an event. */
enum phase { P_WAIT, P_SAVE, P_UPLOAD, P_COMMIT, P__COUNT };
static const char *const phase_names[P__COUNT] = { "wait", "save", "upload", "commit" };

struct timeline {
    struct event *deadline_timer;
    /* The checkpoint under way, followed whether or not a notice came. */
    uint64_t gen;                 /* 0: none */
    int64_t start[P__COUNT];      /* when each phase began */
    enum phase phase;             /* the one in progress */
    /* The notice followed. */
    bool open;
    char what[96];                /* "aws terminate", "drill terminate (drill)" */
    uint64_t notice_gen;          /* the checkpoint it brought; 0 until it begins */
    int64_t deadline;             /* the checkpoint's, CLOCK_REALTIME ms; 0: none */
    int64_t budget[P__COUNT];     /* the plan's figures; -1: none */
};

/* rec's "text" is the log line's message. */
static void emit(cJSON *rec)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(rec, "text");
    char msg[512];
    double margin;

    snprintf(msg, sizeof(msg), "%s", cJSON_IsString(text) ? text->valuestring : "timeline");
    cJSON_DeleteItemFromObjectCaseSensitive(rec, "text");
    log_event(log_rec_num(rec, "margin_ms", &margin) && margin < 0 ? LOGL_WARN : LOGL_INFO, rec, "%s",
              msg);
}

/* The notice's story ends at end (the instant of the record that ends it,
 * so that the margin is that record's): result "committed", "failed",
 * "nothing new" (the method had nothing newer than the newest generation),
 * "missed" (its deadline passed first) or "ended" (spotd exits). */
static void finish(struct timeline *t, const char *result, int64_t end)
{
    cJSON *rec = log_event_new("timeline");
    int64_t from = t->start[P_WAIT], total = end - from;
    int64_t margin = t->deadline - end;
    char text[512], part[96];
    int missed = -1, over = -1;
    size_t len;

    t->open = false;
    evtimer_del(t->deadline_timer);
    if (!rec)
        return;
    len = (size_t)snprintf(text, sizeof(text), "notice %s: ", t->what);
    cJSON_AddStringToObject(rec, "notice", t->what);
    cJSON_AddStringToObject(rec, "result", result);
    if (t->notice_gen)
        cJSON_AddNumberToObject(rec, "gen", (double)t->notice_gen);
    /* Phases run from the later of their start and the notice. */
    for (int p = P_WAIT; p < P__COUNT; p++) {
        int64_t a = t->start[p], b = p < (int)t->phase ? t->start[p + 1] : end;
        char key[32];

        if (p > (int)t->phase || (p > P_WAIT && !t->notice_gen))
            break;
        a = a < from ? from : a;
        b = b < a ? a : b;
        snprintf(key, sizeof(key), "%s_ms", phase_names[p]);
        cJSON_AddNumberToObject(rec, key, (double)(b - a));
        if (t->budget[p] >= 0 && b - a > t->budget[p] + t->budget[p] / 2 && b - a > 100 &&
            over < 0)
            over = p;
        if (t->deadline && missed < 0 && t->deadline >= a && t->deadline < b)
            missed = p;
        snprintf(part, sizeof(part), "%s%s %lld", p > P_WAIT ? " + " : "", phase_names[p],
                 (long long)(b - a));
        if (len < sizeof(text))
            len += (size_t)snprintf(text + len, sizeof(text) - len, "%s", part);
    }
    cJSON_AddNumberToObject(rec, "total_ms", (double)total);
    if (len < sizeof(text))
        len += (size_t)snprintf(text + len, sizeof(text) - len, " = %lld ms (%s)",
                                (long long)total, result);
    if (t->deadline) {
        cJSON_AddNumberToObject(rec, "margin_ms", (double)margin);
        if (margin < 0 && missed < 0)
            missed = (int)t->phase;
        if (len < sizeof(text) && margin >= 0)
            len += (size_t)snprintf(text + len, sizeof(text) - len, "; %lld ms to spare",
                                    (long long)margin);
        else if (len < sizeof(text))
            len += (size_t)snprintf(text + len, sizeof(text) - len,
                                    "; missed the deadline by %lld ms, in %s", (long long)-margin,
                                    phase_names[missed]);
    }
    if (t->deadline && margin < 0)
        cJSON_AddStringToObject(rec, "missed_in", phase_names[missed]);
    if (over >= 0) {
        char key[32];

        snprintf(key, sizeof(key), "%s_budget_ms", phase_names[over]);
        cJSON_AddStringToObject(rec, "over_budget", phase_names[over]);
        cJSON_AddNumberToObject(rec, key, (double)t->budget[over]);
        if (len < sizeof(text))
            snprintf(text + len, sizeof(text) - len, "; %s took more than its budget of %lld ms",
                     phase_names[over], (long long)t->budget[over]);
    }
    cJSON_AddStringToObject(rec, "text", text);
    /* From inside the observer: the record of the event that ended the
     * story is written already, this one follows it. */
    emit(rec);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct timeline *t = arg;

    if (t->open)
        finish(t, "missed", notice_now_ms());
}

static void on_event(void *arg, const cJSON *rec, enum log_level level)
{
    struct timeline *t = arg;
    const char *ev = log_rec_str(rec, "event", "");
    int64_t now = notice_now_ms();
    double v;
    uint64_t gen = log_rec_num(rec, "gen", &v) ? (uint64_t)v : 0;

    if (!strcmp(ev, "notice")) {
        const cJSON *drill = cJSON_GetObjectItemCaseSensitive(rec, "drill");

        if (t->open)
            return; /* the first notice's story goes on */
        t->open = true;
        snprintf(t->what, sizeof(t->what), "%s %s%s", log_rec_str(rec, "source", ""), log_rec_str(rec, "kind", ""),
                 cJSON_IsTrue(drill) && strcmp(log_rec_str(rec, "source", ""), "drill") ? " (drill)" : "");
        t->notice_gen = t->gen; /* one under way becomes the notice's */
        t->deadline = 0;
        for (int p = 0; p < P__COUNT; p++)
            t->budget[p] = -1;
        if (!t->gen)
            t->phase = P_WAIT;
        t->start[P_WAIT] = now;
        return;
    }
    if (!strcmp(ev, "checkpoint_begin")) {
        t->gen = gen;
        if (!t->open)
            t->start[P_WAIT] = now;
        else if (!t->notice_gen)
            t->notice_gen = gen;
        t->phase = P_SAVE;
        t->start[P_SAVE] = now;
    } else if (!strcmp(ev, "plan") && t->open) {
        double left;

        if (log_rec_num(rec, "left_ms", &left)) {
            struct timeval tv;

            t->deadline = now + (int64_t)left;
            tv.tv_sec = left > 0 ? (time_t)(left / 1000) : 0;
            tv.tv_usec = left > 0 ? (suseconds_t)((int64_t)left % 1000) * 1000 : 0;
            evtimer_add(t->deadline_timer, &tv);
        }
        if (log_rec_num(rec, "save_ms", &v))
            t->budget[P_SAVE] = (int64_t)v;
        if (log_rec_num(rec, "upload_ms", &v))
            t->budget[P_UPLOAD] = (int64_t)v;
        if (log_rec_num(rec, "commit_ms", &v))
            t->budget[P_COMMIT] = (int64_t)v;
    } else if (!strcmp(ev, "checkpoint_saved") && gen == t->gen) {
        t->phase = P_UPLOAD;
        t->start[P_UPLOAD] = now;
    } else if (!strcmp(ev, "upload_done") && gen == t->gen) {
        t->phase = P_COMMIT;
        t->start[P_COMMIT] = now;
    } else if ((!strcmp(ev, "commit") || !strcmp(ev, "checkpoint_failed")) && gen == t->gen) {
        bool committed = ev[1] == 'o';

        if (t->open && t->notice_gen == gen) {
            double margin;

            /* The commit's own margin is the one the orchestrator reports. */
            if (committed && log_rec_num(rec, "margin_ms", &margin))
                t->deadline = now + (int64_t)margin;
            /* Past the deadline it is missed whichever came first here, the
             * end or the deadline's timer (both due in one loop turn on a
             * loaded machine). */
            finish(t,
                   t->deadline && t->deadline < now ? "missed"
                   : committed                     ? "committed"
                                                   : "failed",
                   now);
        }
        t->gen = 0;
    } else if (!strcmp(ev, "checkpoint_skipped") && t->gen) {
        /* Its gen is the newest generation's, not the skipped one's. */
        if (t->open && t->notice_gen == t->gen)
            finish(t, "nothing new", now);
        t->gen = 0;
    } else if (!strcmp(ev, "exit") && t->open && !(t->notice_gen && t->gen == t->notice_gen)) {
        /* Not while its checkpoint is under way: the command's exit can be
         * its save (--saved-when exit), committed as spotd ends. */
        finish(t, "ended", now);
    }
}

struct timeline *timeline_new(struct event_base *base)
{
    struct timeline *t = calloc(1, sizeof(*t));

    if (!t || !(t->deadline_timer = evtimer_new(base, on_deadline, t)) ||
        log_observe(on_event, t) < 0) {
        log_msg(LOGL_WARN, "out of memory: no timeline of the notices");
        if (t && t->deadline_timer)
            event_free(t->deadline_timer);
        free(t);
        return NULL;
    }
    return t;
}

void timeline_free(struct timeline *t)
{
    if (!t)
        return;
    log_unobserve(on_event, t);
    if (t->open)
        finish(t, "ended", notice_now_ms());
    event_free(t->deadline_timer);
    free(t);
}
