/* watch: the table of clouds and what the watchers share. */
#include "watch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "spot/backoff.h"
#include "spot/log.h"
#include "spot/parse.h"

static const struct watcher_ops *const watchers[] = {
    &watch_aws, &watch_gcp, &watch_azure, &watch_alibaba, &watch_tencent,
};

const struct watcher_ops *watch_find(const char *name)
{
    for (size_t i = 0; i < sizeof(watchers) / sizeof(watchers[0]); i++)
        if (strcmp(watchers[i]->name, name) == 0)
            return watchers[i];
    return NULL;
}

void watch_complain(struct watch_complaint *c, const char *source, const char *kind,
                    const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    if (strcmp(c->last, kind) == 0)
        return;
    snprintf(c->last, sizeof(c->last), "%s", kind);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_msg(LOGL_WARN, "%s: %s (said once until it changes)", source, msg);
}

void watch_ok(struct watch_complaint *c, const char *source)
{
    if (!c->last[0])
        return;
    log_msg(LOGL_INFO, "%s: the metadata service answers again (after: %s)", source, c->last);
    c->last[0] = '\0';
}

uint64_t watch_backoff(uint64_t poll_ms, unsigned failures, uint64_t cap_ms)
{
    static uint64_t rng;
    uint64_t poll = poll_ms ? poll_ms : 1000;
    uint64_t d = backoff_delay(poll, failures, cap_ms > poll ? cap_ms : poll,
                               backoff_rand(&rng));

    return d > poll ? d : poll;
}

uint64_t watch_left(uint64_t delay_ms, int64_t started_ms)
{
    int64_t spent = notice_mono_ms() - started_ms;

    if (spent <= 0)
        return delay_ms;
    return (uint64_t)spent >= delay_ms ? 0 : delay_ms - (uint64_t)spent;
}

int watch_parse_drill(const char *s, uint64_t *ret_ms, int *ret_kind)
{
    const char *colon = strchr(s, ':');
    char dur[32];
    uint64_t ms;
    int kind = NOTICE_DRILL;

    if (colon) {
        if ((size_t)(colon - s) >= sizeof(dur))
            return -EINVAL;
        memcpy(dur, s, (size_t)(colon - s));
        dur[colon - s] = '\0';
        kind = notice_kind_parse(colon + 1);
        if (kind < 0)
            return -EINVAL;
    } else {
        if (strlen(s) >= sizeof(dur))
            return -EINVAL;
        strcpy(dur, s);
    }
    if (parse_duration(dur, &ms) < 0)
        return -EINVAL;
    *ret_ms = ms;
    *ret_kind = kind;
    return 0;
}
