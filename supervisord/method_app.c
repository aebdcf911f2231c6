/* method app: the trainers save through libckpt when asked (control.c),
 * and stop the same way: told over the control socket, they exit on their
 * own; the stop sequence follows if they have not after DRAIN_MS. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "control.h"
#include "method.h"

/* Time a trainer has to exit on its own after it was told to stop. */
#define DRAIN_MS 10000

struct method {
    struct method_ctx ctx;
    struct event *drain;
    char reason[160];
    uint64_t grace_ms;
    method_saved_fn done;
    void (*ask)(void *arg, int64_t step);
    void *arg;
    char dir[4096];
};

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
    struct method *m = arg;

    child_stop(m->ctx.child, m->reason, m->grace_ms);
}

static void on_saved(void *arg, int err, const char *msg, int64_t step)
{
    struct method *m = arg;

    m->done(m->arg, err, msg, step, m->dir);
}

static void on_ask(void *arg, int64_t step)
{
    struct method *m = arg;

    m->ask(m->arg, step);
}

static struct method *app_open(const struct method_ctx *ctx, char *err, size_t errlen)
{
    struct method *m = calloc(1, sizeof(*m));

    if (!m || !(m->drain = evtimer_new(ctx->base, on_drain, m))) {
        free(m);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->ctx = *ctx;
    return m;
}

static int app_save(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                    method_saved_fn done, void *arg)
{
    if (!m->ctx.control)
        return -ENOTCONN;
    m->done = done;
    m->arg = arg;
    snprintf(m->dir, sizeof(m->dir), "%s", dir);
    return control_checkpoint(m->ctx.control, gen, dir, deadline_ms, NULL, on_saved, m);
}

static int app_query(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                     void (*ask)(void *arg, int64_t step), method_saved_fn done, void *arg)
{
    if (!m->ctx.control)
        return -ENOTCONN;
    m->done = done;
    m->ask = ask;
    m->arg = arg;
    snprintf(m->dir, sizeof(m->dir), "%s", dir);
    return control_checkpoint(m->ctx.control, gen, dir, deadline_ms, on_ask, on_saved, m);
}

static const char *app_writes(struct method *m)
{
    return m->dir;
}

static int app_save_at(struct method *m, int64_t step)
{
    return m->ctx.control ? control_save_at(m->ctx.control, step) : -ENOTCONN;
}

static void app_cancel(struct method *m, const char *reason)
{
    if (m->ctx.control)
        control_cancel(m->ctx.control, reason);
}

static void app_stop(struct method *m, const char *reason, uint64_t grace_ms)
{
    struct timeval tv = { DRAIN_MS / 1000, (DRAIN_MS % 1000) * 1000 };

    if (!m->ctx.control) {
        child_stop(m->ctx.child, reason, grace_ms);
        return;
    }
    snprintf(m->reason, sizeof(m->reason), "%s", reason);
    m->grace_ms = grace_ms;
    control_stop(m->ctx.control, reason);
    child_hold(m->ctx.child);
    evtimer_add(m->drain, &tv);
}

static void app_close(struct method *m)
{
    if (!m)
        return;
    event_free(m->drain);
    free(m);
}

const struct method_ops method_app = {
    .name = "app",
    .flags = METHOD_WORKERS,
    .open = app_open,
    .save = app_save,
    .query = app_query,
    .save_at = app_save_at,
    .writes = app_writes,
    .cancel = app_cancel,
    .stop = app_stop,
    .close = app_close,
};
