/* notices: deduplicate, log, and act on notices. */
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

    ns->stop_at_ms = 0;
    child_stop(ns->child, ns->stop_reason, ns->o.grace_ms);
}

void notices_emit(void *arg, struct notice *n)
{
    struct notices *ns = arg;
    int64_t now = notice_now_ms(), stop_at, left;
    uint64_t grace = ns->o.grace_ms;
    char when[40], action[160];
    cJSON *e;

    if (seen_before(ns, n))
        return;

    /* With an orchestrator, this stop is only the fallback for a
     * checkpoint that takes too long (the orchestrator stops the command
     * itself once the checkpoint is committed): a short grace leaves the
     * checkpoint the most time. */
    if (ns->o.on_notice && grace > NOTICE_FALLBACK_GRACE_MS)
        grace = NOTICE_FALLBACK_GRACE_MS;
    /* SIGKILL must land margin before the deadline: the stop signal goes
     * grace before that, or now with what is left when that has passed. */
    stop_at = n->deadline_ms - (int64_t)ns->o.margin_ms - (int64_t)grace;
    if (stop_at <= now) {
        left = n->deadline_ms - (int64_t)ns->o.margin_ms - now;
        if (left < (int64_t)grace)
            grace = left > 0 ? (uint64_t)left : 0;
    }
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
