/* watch_azure: Azure's Scheduled Events, from the instance metadata service.
 *
 * The document lists events for every VM of an availability set or scale
 * set: only those whose Resources name this VM count, so the VM's name is
 * read first.  The document is polled once per poll interval and parsed
 * only when its DocumentIncarnation changes.  The very first call may take
 * up to about two minutes while Azure turns the service on for the VM, so
 * it alone gets a long timeout. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/cloudparse.h"
#include "spot/http.h"
#include "spot/log.h"
#include "watch.h"

#define EVENTS_PATH "/metadata/scheduledevents?api-version=2020-07-01"
#define NAME_PATH "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
#define FIRST_CALL_TIMEOUT_MS (150 * 1000)
#define EVENT_WINDOW_MS (30 * 1000)

#define MAX_OURS 16

struct watcher {
    struct watch_ctx ctx;
    char ours[MAX_OURS][64];     /* events that list this VM alone: may be acknowledged */
    size_t n_ours;
    struct http_req *ack_req;
    void (*ack_done)(void *arg);
    void *ack_arg;
    char vm_name[128];
    bool have_doc;
    int64_t incarnation;
    unsigned failures;
    bool first_call_done;
    struct http_req *req;
    struct event *timer;
    struct watch_complaint complaint;
};

static const char *const headers[] = { "Metadata: true", NULL };

static void arm(struct watcher *w, uint64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
    evtimer_add(w->timer, &tv);
}

static void failed(struct watcher *w, const char *what, const struct http_result *res)
{
    char kind[64];

    snprintf(kind, sizeof(kind), "%s %d %ld", what, res->error, res->status);
    watch_complain(&w->complaint, "azure", kind, "%s%s: %s (HTTP %ld); retrying with backoff",
                   w->ctx.base_url, what, res->error ? res->errmsg : "unexpected answer",
                   res->status);
    arm(w, watch_backoff(w->ctx.poll_ms, ++w->failures, WATCH_CAP_30S_MS));
}

static void on_events(void *arg, const struct http_result *res)
{
    struct watcher *w = arg;
    struct azure_doc doc;
    const char *why = NULL;

    w->req = NULL;
    w->first_call_done = true;
    if (res->error || res->status != 200)
        return failed(w, EVENTS_PATH, res);
    if (azure_parse_events(res->body, res->len, w->vm_name, &doc, &why) < 0) {
        watch_complain(&w->complaint, "azure", "garbage", "cannot understand %s%s: %s; "
                       "ignoring it", w->ctx.base_url, EVENTS_PATH, why ? why : "malformed");
        arm(w, watch_backoff(w->ctx.poll_ms, ++w->failures, WATCH_CAP_30S_MS));
        return;
    }
    if (w->failures)
        watch_ok(&w->complaint, "azure");
    w->failures = 0;
    if (!w->have_doc || doc.incarnation != w->incarnation) {
        int64_t now = notice_now_ms();

        w->have_doc = true;
        w->incarnation = doc.incarnation;
        for (size_t i = 0; i < doc.n; i++) {
            struct notice n;

            if (!doc.ev[i].for_us)
                continue;
            if (doc.ev[i].only_us) {
                snprintf(w->ours[w->n_ours % MAX_OURS], sizeof(w->ours[0]), "%s", doc.ev[i].id);
                w->n_ours++;
            }
            memset(&n, 0, sizeof(n));
            if (azure_event_notice(&doc.ev[i], now, EVENT_WINDOW_MS, &n) != 1)
                continue;
            notice_copy_raw(n.raw, sizeof(n.raw), res->body, res->len);
            n.detected_ms = now;
            w->ctx.emit(w->ctx.emit_arg, &n);
        }
    }
    arm(w, w->ctx.poll_ms);
}

static void on_name(void *arg, const struct http_result *res)
{
    struct watcher *w = arg;
    size_t len = res->len;

    w->req = NULL;
    while (len > 0 && (res->body[len - 1] == '\n' || res->body[len - 1] == '\r'))
        len--;
    if (res->error || res->status != 200 || len == 0 || len >= sizeof(w->vm_name) ||
        memchr(res->body, '"', len) || memchr(res->body, '\n', len))
        return failed(w, NAME_PATH, res);
    memcpy(w->vm_name, res->body, len);
    w->vm_name[len] = '\0';
    log_msg(LOGL_INFO, "azure: this VM is '%s'; watching its scheduled events", w->vm_name);
    w->failures = 0;
    arm(w, 0);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct watcher *w = arg;
    char url[1024];
    struct http_req_opts o = {
        .url = url,
        .headers = headers,
        .timeout_ms = 2000,
        .connect_timeout_ms = 1000,
    };

    if (!w->vm_name[0]) {
        snprintf(url, sizeof(url), "%s%s", w->ctx.base_url, NAME_PATH);
        o.max_body = 1024;
        w->req = http_start(w->ctx.http, &o, on_name, w);
    } else {
        snprintf(url, sizeof(url), "%s%s", w->ctx.base_url, EVENTS_PATH);
        if (!w->first_call_done)
            o.timeout_ms = FIRST_CALL_TIMEOUT_MS;
        w->req = http_start(w->ctx.http, &o, on_events, w);
    }
    if (!w->req)
        arm(w, 1000);
}

static void on_ack(void *arg, const struct http_result *res)
{
    struct watcher *w = arg;

    w->ack_req = NULL;
    if (res->error || res->status < 200 || res->status > 299)
        log_msg(LOGL_WARN, "azure: the acknowledgment was not taken: %s (HTTP %ld); the event "
                "starts at its NotBefore time anyway", res->error ? res->errmsg : "refused",
                res->status);
    else
        log_msg(LOGL_INFO, "azure: event acknowledged; Azure may start it now");
    w->ack_done(w->ack_arg);
}

/* Acknowledge an event (StartRequests) that lists this VM alone: with
 * other VMs in it, starting it early would cut their time short. */
static int azure_ack(struct watcher *w, const char *event_id, void (*done)(void *arg), void *arg)
{
    char url[1024], body[256];
    size_t i, n = w->n_ours < MAX_OURS ? w->n_ours : MAX_OURS;

    for (i = 0; i < n; i++)
        if (strcmp(w->ours[i], event_id) == 0)
            break;
    if (i == n) {
        log_msg(LOGL_INFO, "azure: not acknowledging event %s: it does not list this VM alone",
                event_id);
        return -EPERM;
    }
    snprintf(url, sizeof(url), "%s%s", w->ctx.base_url, EVENTS_PATH);
    snprintf(body, sizeof(body), "{\"StartRequests\":[{\"EventId\":\"%s\"}]}", event_id);
    static const char *const post_headers[] = { "Metadata: true",
                                                "Content-Type: application/json", NULL };
    struct http_req_opts o = {
        .method = "POST",
        .url = url,
        .headers = post_headers,
        .body = body,
        .body_len = strlen(body),
        .timeout_ms = 2000,
        .connect_timeout_ms = 1000,
    };
    w->ack_done = done;
    w->ack_arg = arg;
    w->ack_req = http_start(w->ctx.http, &o, on_ack, w);
    return w->ack_req ? 0 : -ENOMEM;
}

static struct watcher *azure_stop(struct watcher *w)
{
    if (!w)
        return NULL;
    http_cancel(w->req);
    http_cancel(w->ack_req);
    if (w->timer)
        event_free(w->timer);
    free(w);
    return NULL;
}

static struct watcher *azure_start(const struct watch_ctx *ctx)
{
    struct watcher *w = calloc(1, sizeof(*w));

    if (!w)
        return NULL;
    w->ctx = *ctx;
    w->timer = evtimer_new(ctx->base, on_timer, w);
    if (!w->timer)
        return azure_stop(w);
    arm(w, 0);
    return w;
}

const struct watcher_ops watch_azure = {
    .name = "azure",
    .default_url = "http://169.254.169.254",
    .start = azure_start,
    .stop = azure_stop,
    .ack = azure_ack,
};
