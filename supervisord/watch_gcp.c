/* watch_gcp: Compute Engine's metadata server, by long-poll.
 *
 * Two values are watched, each by its own chain of requests:
 * instance/preempted (TRUE once the Spot VM is being preempted; 30 s from
 * then to power-off) and instance/maintenance-event.  Each chain first
 * reads the value (a notice present at start is acted on at once), then
 * waits with ?wait_for_change=true&last_etag=ETAG, which the server
 * answers the moment the value changes or after timeout_sec.
 *
 * A server that answers a long-poll at once with nothing new (a proxy, an
 * emulator, an ETag it does not keep) would have the chain ask again at
 * once, dozens of times a second: between two answers that brought no
 * change there is at least the poll interval.  A failed request backs off
 * to at most WATCH_CAP_30S_MS; an answer that does not parse is said once
 * and the chain goes on as after a good one.
 *
 * A long-poll cannot tell a value that does not change from a server that
 * stopped answering (or a connection a NAT dropped): it would wait out its
 * 300 s, blind, and a notice served meanwhile would go unseen.  So a
 * long-poll that is still open after the poll interval is replaced by a
 * plain read, then a new long-poll: a change is seen at once while the
 * server answers, and within the poll interval (or the backoff) when it
 * does not. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/cloudparse.h"
#include "spot/http.h"
#include "spot/log.h"
#include "watch.h"

#define LONGPOLL_S 300
#define PREEMPT_WINDOW_MS (30 * 1000)
#define MAINTENANCE_WINDOW_MS (60 * 1000)

struct watcher;

struct gcp_key {
    struct watcher *w;
    const char *path;
    unsigned gen;                /* counts returns to FALSE/NONE: each new event is news */
    char etag[128];
    bool waiting;                /* a long-poll, not the first read */
    unsigned failures;
    char last[64];               /* the last value, to tell a change */
    int64_t sent_ms;             /* when the request in flight went out */
    struct http_req *req;
    struct event *retry;
    struct event *probe;         /* ends a long-poll open for the poll interval */
    struct watch_complaint complaint;   /* each key its own: see watch_complain() */
};

struct watcher {
    struct watch_ctx ctx;
    struct gcp_key keys[2];
};

static void key_request(struct gcp_key *k);

static void handle_value(struct gcp_key *k, const struct http_result *res)
{
    struct watcher *w = k->w;
    struct notice n;
    const char *why = NULL;
    int r;

    memset(&n, 0, sizeof(n));
    if (strstr(k->path, "preempted")) {
        r = gcp_parse_preempted(res->body, res->len, &why);
        if (r == 1) {
            snprintf(n.source, sizeof(n.source), "gcp");
            n.kind = NOTICE_TERMINATE;
            n.terminating = true;
            snprintf(n.event_id, sizeof(n.event_id), "gcp:preempted");
            notice_copy_raw(n.raw, sizeof(n.raw), res->body, res->len);
        }
    } else {
        r = gcp_parse_maintenance(res->body, res->len, &n, &why);
    }
    if (r < 0) {
        watch_complain(&k->complaint, "gcp", "garbage", "cannot understand %s%s: %s; ignoring "
                       "it, and watching on", w->ctx.base_url, k->path, why ? why : "malformed");
        return;
    }
    watch_ok(&k->complaint, "gcp");
    if (r == 0) {
        k->gen++;
        return;
    }
    /* The value alone would make a second maintenance event look like the
     * first one; the generation tells them apart. */
    size_t len = strlen(n.event_id);
    snprintf(n.event_id + len, sizeof(n.event_id) - len, ":%u", k->gen);
    n.detected_ms = notice_now_ms();
    if (n.deadline_ms == 0)
        n.deadline_ms = n.detected_ms +
                        (n.kind == NOTICE_TERMINATE ? PREEMPT_WINDOW_MS : MAINTENANCE_WINDOW_MS);
    w->ctx.emit(w->ctx.emit_arg, &n);
}

/* ETags are opaque; keep only what can go into a query string as is. */
static void keep_etag(struct gcp_key *k, const char *etag)
{
    size_t i;

    k->etag[0] = '\0';
    if (!etag)
        return;
    for (i = 0; etag[i] && i + 1 < sizeof(k->etag); i++) {
        char c = etag[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '-' || c == '_'))
            return;
    }
    if (etag[i])
        return;
    memcpy(k->etag, etag, i + 1);
}

static void arm_retry(struct gcp_key *k, uint64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

    evtimer_add(k->retry, &tv);
}

static void on_answer(void *arg, const struct http_result *res)
{
    struct gcp_key *k = arg;
    struct watcher *w = k->w;
    char kind[64], value[sizeof(k->last)], etag[sizeof(k->etag)];
    int64_t took = notice_mono_ms() - k->sent_ms;
    bool was_waiting = k->waiting, same;

    k->req = NULL;
    evtimer_del(k->probe);
    if (res->error || res->status != 200) {
        snprintf(kind, sizeof(kind), "error %d status %ld", res->error, res->status);
        if (res->error)
            watch_complain(&k->complaint, "gcp", kind, "%s%s: %s; retrying with backoff "
                           "(check --metadata-url or --cloud)", w->ctx.base_url, k->path,
                           res->errmsg);
        else
            watch_complain(&k->complaint, "gcp", kind, "%s%s answers HTTP %ld; retrying with "
                           "backoff (check --metadata-url or --cloud)", w->ctx.base_url,
                           k->path, res->status);
        k->waiting = false;
        arm_retry(k, watch_left(watch_backoff(w->ctx.poll_ms, ++k->failures, WATCH_CAP_30S_MS),
                                k->sent_ms));
        return;
    }
    k->failures = 0;
    memcpy(etag, k->etag, sizeof(etag));
    keep_etag(k, res->etag);
    notice_copy(value, sizeof(value), res->body, res->len);
    same = strcmp(value, k->last) == 0 && strcmp(etag, k->etag) == 0;
    memcpy(k->last, value, sizeof(value));
    handle_value(k, res);
    k->waiting = true;
    if (was_waiting && same && took >= 0 && (uint64_t)took < w->ctx.poll_ms) {
        arm_retry(k, w->ctx.poll_ms - (uint64_t)took);
        return;
    }
    key_request(k);
}

static void key_request(struct gcp_key *k)
{
    struct watcher *w = k->w;
    static const char *const headers[] = { "Metadata-Flavor: Google", NULL };
    char url[1024];
    struct http_req_opts o = {
        .url = url,
        .headers = headers,
        .timeout_ms = 2000,
        .connect_timeout_ms = 1000,
        .max_body = 4096,
    };

    if (k->waiting) {
        snprintf(url, sizeof(url), "%s%s?wait_for_change=true%s%s&timeout_sec=%d",
                 w->ctx.base_url, k->path, k->etag[0] ? "&last_etag=" : "", k->etag, LONGPOLL_S);
        o.timeout_ms = (LONGPOLL_S + 10) * 1000L;
    } else {
        snprintf(url, sizeof(url), "%s%s", w->ctx.base_url, k->path);
    }
    k->sent_ms = notice_mono_ms();
    k->req = http_start(w->ctx.http, &o, on_answer, k);
    if (!k->req) {
        arm_retry(k, 1000);
    } else if (k->waiting) {
        struct timeval tv = { (time_t)(w->ctx.poll_ms / 1000),
                              (suseconds_t)(w->ctx.poll_ms % 1000) * 1000 };
        evtimer_add(k->probe, &tv);
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    key_request(arg);
}

/* The long-poll has been open for the poll interval: read the value
 * plainly instead (which starts a new long-poll when it answers). */
static void on_probe(evutil_socket_t fd, short what, void *arg)
{
    struct gcp_key *k = arg;

    if (!k->req || !k->waiting)
        return;
    http_cancel(k->req);
    k->req = NULL;
    k->waiting = false;
    key_request(k);
}

static struct watcher *gcp_stop(struct watcher *w)
{
    if (!w)
        return NULL;
    for (size_t i = 0; i < 2; i++) {
        http_cancel(w->keys[i].req);
        if (w->keys[i].retry)
            event_free(w->keys[i].retry);
        if (w->keys[i].probe)
            event_free(w->keys[i].probe);
    }
    free(w);
    return NULL;
}

static struct watcher *gcp_start(const struct watch_ctx *ctx)
{
    static const char *const paths[2] = { "/computeMetadata/v1/instance/preempted",
                                          "/computeMetadata/v1/instance/maintenance-event" };
    struct watcher *w = calloc(1, sizeof(*w));

    if (!w)
        return NULL;
    w->ctx = *ctx;
    for (size_t i = 0; i < 2; i++) {
        w->keys[i].w = w;
        w->keys[i].path = paths[i];
        w->keys[i].retry = evtimer_new(ctx->base, on_retry, &w->keys[i]);
        w->keys[i].probe = evtimer_new(ctx->base, on_probe, &w->keys[i]);
        if (!w->keys[i].retry || !w->keys[i].probe)
            return gcp_stop(w);
    }
    log_msg(LOGL_INFO, "gcp: watching %s (long-poll)", ctx->base_url);
    for (size_t i = 0; i < 2; i++)
        key_request(&w->keys[i]);
    return w;
}

const struct watcher_ops watch_gcp = {
    .name = "gcp",
    .default_url = "http://metadata.google.internal",
    .start = gcp_start,
    .stop = gcp_stop,
};
