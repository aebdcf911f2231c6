/* notices: deduplicate, log, and act on notices: the stop a terminating
 * notice calls for, at the time notice_stop_plan() says (the
 * orchestrator's checkpoint is given up before it, by the same plan). */
#include "notices.h"

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "spot/log.h"

/* Notices remembered for deduplication; the oldest is forgotten first. */
#define SEEN_MAX 64

struct notices {
    struct event_base *base;
    struct child *child;
    struct notices_opts o;
    char seen[SEEN_MAX][NOTICE_SOURCE_LEN + NOTICE_ID_LEN];
    size_t n_seen, next_seen;
    struct event *stop_timer;
    int64_t stop_at_ms;           /* 0: none planned */
    uint64_t stop_grace_ms;       /* of the planned stop */
    int64_t stop_deadline_ms;     /* the deadline the planned stop serves */
    char stop_reason[64];
    struct notice cause;          /* of the planned or begun stop */
    bool have_cause;
};

const struct notice *notices_stop_cause(const struct notices *ns)
{
    return ns->have_cause ? &ns->cause : NULL;
}

static bool seen_before(struct notices *ns, const struct notice *n)
{
    char key[NOTICE_SOURCE_LEN + NOTICE_ID_LEN];

    snprintf(key, sizeof(key), "%s\t%s", n->source, n->event_id);
    for (size_t i = 0; i < ns->n_seen; i++)
        if (strcmp(ns->seen[i], key) == 0)
            return true;
    memcpy(ns->seen[ns->next_seen], key, sizeof(key));
    ns->next_seen = (ns->next_seen + 1) % SEEN_MAX;
    if (ns->n_seen < SEEN_MAX)
        ns->n_seen++;
    return false;
}

static void on_stop_timer(evutil_socket_t fd, short what, void *arg)
{
    struct notices *ns = arg;

    /* A timer that fires late (a loaded machine, a suspended VM) must not
     * push SIGKILL past the deadline: the grace is what is left now. */
    ns->stop_at_ms = 0;
    child_stop(ns->child, ns->stop_reason,
               notice_grace_left(ns->stop_deadline_ms, notice_now_ms(), ns->o.margin_ms,
                                 ns->stop_grace_ms));
}

void notices_emit(void *arg, struct notice *n)
{
    struct notices *ns = arg;
    int64_t now = notice_now_ms(), stop_at;
    struct notice_stop st;
    uint64_t grace;
    char when[40], action[160];
    cJSON *e;

    if (seen_before(ns, n))
        return;
    st = notice_stop_plan(n->deadline_ms, now, ns->o.margin_ms, ns->o.grace_ms,
                          ns->o.on_notice != NULL);
    stop_at = st.stop_at_ms;
    grace = st.grace_ms;
    if (!n->terminating)
        snprintf(action, sizeof(action), "none: advisory");
    else if (stop_at <= now)
        snprintf(action, sizeof(action), "stop now, grace %llu ms", (unsigned long long)grace);
    else
        snprintf(action, sizeof(action), "stop at %s",
                 notice_format_time(stop_at, when, sizeof(when)));

    e = log_event_new("notice");
    notice_to_json(n, e);
    cJSON_AddNumberToObject(e, "deadline_in_ms", (double)(n->deadline_ms - now));
    cJSON_AddStringToObject(e, "action", action);
    log_event(n->terminating ? LOGL_WARN : LOGL_INFO, e, "%s%s notice from %s: %s",
              n->drill ? "drill: " : "", notice_kind_name(n->kind), n->source, action);
    if (ns->o.on_notice)
        ns->o.on_notice(ns->o.arg, n);

    if (!n->terminating)
        return;
    if (!ns->have_cause || stop_at < ns->stop_at_ms) {
        ns->cause = *n;
        ns->have_cause = true;
    }
    snprintf(ns->stop_reason, sizeof(ns->stop_reason), "notice: %s %s%s", n->source,
             notice_kind_name(n->kind), n->drill ? " (drill)" : "");
    if (stop_at <= now) {
        evtimer_del(ns->stop_timer);
        ns->stop_at_ms = 0;
        child_stop(ns->child, ns->stop_reason, grace);
        return;
    }
    if (ns->stop_at_ms == 0 || stop_at < ns->stop_at_ms) {
        struct timeval tv = { (time_t)((stop_at - now) / 1000),
                              (suseconds_t)((stop_at - now) % 1000) * 1000 };
        ns->stop_at_ms = stop_at;
        ns->stop_grace_ms = grace;
        ns->stop_deadline_ms = n->deadline_ms;
        evtimer_add(ns->stop_timer, &tv);
    }
}

struct notices *notices_new(struct event_base *base, struct child *child,
                            const struct notices_opts *o)
{
    struct notices *ns = calloc(1, sizeof(*ns));

    if (!ns)
        return NULL;
    ns->base = base;
    ns->child = child;
    ns->o = *o;
    ns->stop_timer = evtimer_new(base, on_stop_timer, ns);
    if (!ns->stop_timer)
        return notices_free(ns);
    return ns;
}

struct notices *notices_free(struct notices *ns)
{
    if (!ns)
        return NULL;
    if (ns->stop_timer)
        event_free(ns->stop_timer);
    free(ns);
    return NULL;
}
