/* notices: what spotd does with a notice.  Today: log it once, and for a
 * terminating notice run the stop sequence so that SIGKILL would land
 * `margin` before the deadline.  With an orchestrator (on_notice), which
 * checkpoints and then stops the command itself, this stop is the fallback,
 * with a grace of at most NOTICE_FALLBACK_GRACE_MS (notice_stop_plan() in
 * spot/notice.h decides when, for both). */
#ifndef SPOTD_NOTICES_H
#define SPOTD_NOTICES_H

#include <stdint.h>

#include "spot/notice.h"

struct event_base;
struct child;
struct notices;

struct notices_opts {
    uint64_t margin_ms;
    uint64_t grace_ms;
    /* Every new notice, after it is logged (the orchestrator); may be NULL. */
    void (*on_notice)(void *arg, const struct notice *n);
    void *arg;
};

struct notices *notices_new(struct event_base *base, struct child *child,
                            const struct notices_opts *o);
struct notices *notices_free(struct notices *ns);

/* Take a notice from a watcher (the watch_ctx emit callback; arg is the
 * struct notices).  The same notice (source and event_id) again is
 * ignored. */
void notices_emit(void *arg, struct notice *n);

/* The notice that made spotd stop the command, if one did: its source and
 * event_id, or NULL. */
const struct notice *notices_stop_cause(const struct notices *ns);

#endif
