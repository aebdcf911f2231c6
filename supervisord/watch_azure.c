/* watch_azure: Azure's Scheduled Events, from the instance metadata service.
 *
 * The document lists events for every VM of an availability set or scale
 * set: only those whose Resources name this VM count, so the VM's name is
 * learnt first (--azure-vm-name, or compute/name).  When the name cannot
 * be had, the events are watched anyway: until it is known, an event that
 * lists exactly one resource is taken as this VM's (the common single-VM
 * case; such an event is never acknowledged), and the name is asked again
 * every NAME_RETRY_MS.
 *
 * The document is polled once per poll interval and read only when its
 * DocumentIncarnation changes; each event stands alone, so one that cannot
 * be understood is said once (by EventId) and skipped.  A failed request
 * backs off to at most WATCH_CAP_30S_MS, counted from the try's start (a
 * service that hangs is tried once per backoff, not per timeout plus
 * backoff); a 200 that does not parse keeps the poll interval.  The very first call may take up to about two minutes
 * while Azure turns the service on for the VM, so it alone gets a long
 * timeout. */
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
#define NAME_RETRY_MS (60 * 1000)

#define MAX_OURS 16
#define MAX_SAID 32

struct watcher {
    struct watch_ctx ctx;
    char ours[MAX_OURS][64];     /* events that list this VM alone: may be acknowledged */
    size_t n_ours;
    struct http_req *ack_req;
    void (*ack_done)(void *arg);
    void *ack_arg;
    char vm_name[128];           /* "" until known */
    int64_t name_next_ms;        /* monotonic: when to ask compute/name again */
    bool name_failed;            /* said once: events are watched without the name */
    bool have_doc;
    int64_t incarnation;
    unsigned failures;
    int64_t sent_ms;             /* monotonic: when the request in flight went out */
    bool first_call_done;
    char said[MAX_SAID][64];     /* EventIds already said to be odd, oldest first out */
    size_t n_said;
    struct http_req *req;
    struct event *timer;
    struct watch_complaint complaint, garbled;
};

static const char *const headers[] = { "Metadata: true", NULL };

bool watch_azure_name_ok(const char *name, size_t len)
{
    if (len == 0 || len >= 128)
        return false;
    for (size_t i = 0; i < len; i++)
        if (name[i] <= 0x20 || name[i] >= 0x7f || name[i] == '"')
            return false;
    return true;
}

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
    arm(w, watch_left(watch_backoff(w->ctx.poll_ms, ++w->failures, WATCH_CAP_30S_MS),
                      w->sent_ms));
}

/* Whether something about event id was said already; remembers it if not.
 * Each odd event is said once, not at every incarnation that still has it. */
static bool said_before(struct watcher *w, const char *what, const char *id)
{
    char key[64];

    snprintf(key, sizeof(key), "%s %s", what, id);
    for (size_t i = 0; i < w->n_said && i < MAX_SAID; i++)
        if (strcmp(w->said[i], key) == 0)
            return true;
    memcpy(w->said[w->n_said++ % MAX_SAID], key, sizeof(key));
    return false;
}

/* Say what of the document was skipped or guessed, once each. */
static void say_odd(struct watcher *w, const struct azure_doc *doc)
{
    for (size_t i = 0; i < doc->n_bad && i < AZURE_MAX_BAD; i++)
        if (!said_before(w, "bad", doc->bad[i].id))
            log_msg(LOGL_WARN, "azure: event %s of incarnation %lld cannot be understood (%s); "
                    "skipping it, the others are read", doc->bad[i].id[0] ? doc->bad[i].id :
                    "without an EventId", (long long)doc->incarnation, doc->bad[i].why);
    if (doc->dropped && !said_before(w, "dropped", "-"))
        log_msg(LOGL_WARN, "azure: the document lists more than %d events of this VM; "
                "reading the first %d", AZURE_MAX_EVENTS, AZURE_MAX_EVENTS);
    for (size_t i = 0; i < doc->n; i++) {
        const struct azure_event *ev = &doc->ev[i];

        if (ev->not_before_bad && !said_before(w, "date", ev->id))
            log_msg(LOGL_WARN, "azure: event %s: NotBefore is not a date; taking the shortest "
                    "window, %d s from now", ev->id, EVENT_WINDOW_MS / 1000);
        if (ev->guessed && !said_before(w, "guess", ev->id))
            log_msg(LOGL_WARN, "azure: this VM's name is not known: taking event %s, which lists "
                    "one resource, as this VM's (never acknowledged)", ev->id);
    }
}

static void act_on(struct watcher *w, const struct azure_doc *doc, const struct http_result *res)
{
    int64_t now = notice_now_ms();

    say_odd(w, doc);
    for (size_t i = 0; i < doc->n; i++) {
        const struct azure_event *ev = &doc->ev[i];
        struct notice n;

        if (ev->only_us) {
            snprintf(w->ours[w->n_ours % MAX_OURS], sizeof(w->ours[0]), "%s", ev->id);
            w->n_ours++;
        }
        memset(&n, 0, sizeof(n));
        if (azure_event_notice(ev, now, EVENT_WINDOW_MS, &n) != 1)
            continue;
        notice_copy_raw(n.raw, sizeof(n.raw), res->body, res->len);
        n.detected_ms = now;
        w->ctx.emit(w->ctx.emit_arg, &n);
    }
}

static void on_events(void *arg, const struct http_result *res)
{
    struct watcher *w = arg;
    struct azure_doc *doc;
    const char *why = NULL;

    w->req = NULL;
    w->first_call_done = true;
    if (res->error || res->status != 200)
        return failed(w, EVENTS_PATH, res);
    watch_ok(&w->complaint, "azure");
    w->failures = 0;
    doc = malloc(sizeof(*doc));
    if (!doc) {
        arm(w, w->ctx.poll_ms);
        return;
    }
    /* A document that does not parse is not an outage: the service
     * answers, and the next one may be good; the interval stays. */
    if (azure_parse_events(res->body, res->len, w->vm_name, doc, &why) < 0) {
        watch_complain(&w->garbled, "azure", "garbage", "cannot understand %s%s: %s; ignoring "
                       "it, and polling on", w->ctx.base_url, EVENTS_PATH,
                       why ? why : "malformed");
    } else {
        watch_ok(&w->garbled, "azure");
        if (!w->have_doc || doc->incarnation != w->incarnation) {
            w->have_doc = true;
            w->incarnation = doc->incarnation;
            act_on(w, doc, res);
        }
    }
    free(doc);
    arm(w, w->ctx.poll_ms);
}

static void on_name(void *arg, const struct http_result *res)
{
    struct watcher *w = arg;
    size_t len = res->len;

    w->req = NULL;
    while (len > 0 && (res->body[len - 1] == '\n' || res->body[len - 1] == '\r'))
        len--;
    if (res->error || res->status != 200 || !watch_azure_name_ok(res->body, len)) {
        w->name_next_ms = notice_mono_ms() + NAME_RETRY_MS;
        if (!w->name_failed)
            log_msg(LOGL_WARN, "azure: cannot learn this VM's name from %s%s (%s, HTTP %ld); "
                    "watching its scheduled events anyway, taking an event that lists one "
                    "resource as this VM's until the name is known (asked again every %d s); "
                    "--azure-vm-name NAME names it", w->ctx.base_url, NAME_PATH,
                    res->error ? res->errmsg : res->status == 200 ? "not a VM name"
                                                                  : "unexpected answer",
                    res->status, NAME_RETRY_MS / 1000);
        w->name_failed = true;
        arm(w, 0);
        return;
    }
    memcpy(w->vm_name, res->body, len);
    w->vm_name[len] = '\0';
    log_msg(LOGL_INFO, "azure: this VM is '%s'; watching its scheduled events", w->vm_name);
    /* Read the document again with the name: which events are ours alone
     * (and may be acknowledged) was not known. */
    w->have_doc = false;
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

    w->sent_ms = notice_mono_ms();
    if (!w->vm_name[0] && w->sent_ms >= w->name_next_ms) {
        snprintf(url, sizeof(url), "%s%s", w->ctx.base_url, NAME_PATH);
        o.max_body = 1024;
        w->req = http_start(w->ctx.http, &o, on_name, w);
    } else {
        snprintf(url, sizeof(url), "%s%s", w->ctx.base_url, EVENTS_PATH);
        o.max_body = AZURE_MAX_BODY;
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
    if (ctx->azure_vm_name) {
        snprintf(w->vm_name, sizeof(w->vm_name), "%s", ctx->azure_vm_name);
        log_msg(LOGL_INFO, "azure: this VM is '%s' (--azure-vm-name); watching its scheduled "
                "events", w->vm_name);
    }
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
