/* watch_poll: poll a metadata service's notice endpoints, with session
 * tokens where the service has them (IMDSv2, Alibaba's hardened mode).
 *
 * DESIGN.  A round: renew the token when it is missing or near expiry,
 * then GET every endpoint at once; when the last answer is in, the next
 * round is armed: after the poll interval, after a backoff (capped at the
 * cloud's backoff_cap_ms, and counted from the round's start, so that a
 * service that hangs is tried once per backoff) when a request failed, or at once when a token
 * that worked expired (401), which drops it.  A 200 whose body does not
 * parse is said once and skipped, not backed off: the service answers. */
#include "watch_poll.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/http.h"
#include "spot/imds.h"
#include "spot/log.h"

#define TOKEN_RENEW_MS (60 * 1000)
#define REQUEST_TIMEOUT_MS 2000
#define MAX_ENDPOINTS 8
#define MAX_NOTICES 8

struct watcher;

struct ep_call {
    struct watcher *w;
    size_t idx;
    bool with_token;             /* sent with the session token */
    struct http_req *req;
};

struct watcher {
    const struct poll_cloud *pc;
    struct watch_ctx ctx;
    struct imds_token token;     /* set up only when pc->token_path */
    bool tokenless;              /* IMDSv1 or normal mode */
    struct ep_call calls[MAX_ENDPOINTS];
    size_t pending;
    bool failed, retry_now;
    unsigned failures;
    int64_t round_ms;            /* monotonic: when the round began */
    struct event *timer;
    /* The service's failures, each endpoint's answers that do not parse,
     * and the token's: complaints that come at once must not take turns
     * in one slot, or each would be said again every round. */
    struct watch_complaint complaint;
    struct watch_complaint garbled[MAX_ENDPOINTS];
    struct watch_complaint token_complaint;
};

static void arm(struct watcher *w, uint64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
    evtimer_add(w->timer, &tv);
}

static void round_done(struct watcher *w)
{
    uint64_t delay;

    if (w->retry_now && !w->failed) {
        delay = 0;
    } else if (w->failed) {
        w->failures++;
        delay = watch_left(watch_backoff(w->ctx.poll_ms, w->failures, w->pc->backoff_cap_ms),
                           w->round_ms);
    } else {
        watch_ok(&w->complaint, w->pc->name);
        w->failures = 0;
        delay = w->ctx.poll_ms;
    }
    w->failed = w->retry_now = false;
    arm(w, delay);
}

/* A failed request: say it once per kind, back off. */
static void request_failed(struct watcher *w, struct watch_complaint *c, const char *path,
                           const struct http_result *res)
{
    char kind[64];

    w->failed = true;
    if (res->error) {
        snprintf(kind, sizeof(kind), "error %d", res->error);
        watch_complain(c, w->pc->name, kind, "cannot reach %s%s (%s); retrying "
                       "with backoff; check --metadata-url or --cloud", w->ctx.base_url, path,
                       res->errmsg);
    } else if (res->status == 429 || res->status == 503) {
        watch_complain(c, w->pc->name, "throttled", "%s%s answers %ld: throttled; "
                       "backing off", w->ctx.base_url, path, res->status);
    } else {
        snprintf(kind, sizeof(kind), "status %ld", res->status);
        watch_complain(c, w->pc->name, kind, "%s%s answers HTTP %ld; retrying with "
                       "backoff", w->ctx.base_url, path, res->status);
    }
}

static void on_endpoint(void *arg, const struct http_result *res)
{
    struct ep_call *call = arg;
    struct watcher *w = call->w;
    const struct poll_endpoint *ep = &w->pc->endpoints[call->idx];
    struct notice out[MAX_NOTICES];
    const char *why = NULL;
    int n;

    call->req = NULL;
    /* What a refusal means depends on how the request was sent, not on
     * what an earlier answer of the same round changed since. */
    if (!res->error && res->status == 401 && call->with_token) {
        /* The token expired or was revoked: get another one, at once
         * unless this one is brand new (then something else is wrong). */
        imds_token_drop(&w->token);
        if (imds_token_age_ms(&w->token, notice_mono_ms()) > 1000)
            w->retry_now = true;
        else
            request_failed(w, &w->complaint, ep->path, res);
    } else if (!res->error && (res->status == 401 || res->status == 403) && !call->with_token &&
               w->pc->token_path) {
        /* Without a token and refused: the service wants tokens after all
         * (IMDSv2 required, hardened mode).  Ask for one again, after the
         * backoff: a token that cannot be had is an outage. */
        w->tokenless = false;
        imds_token_drop(&w->token);
        w->failed = true;
        watch_complain(&w->complaint, w->pc->name, "refused without a token", "%s%s answers "
                       "HTTP %ld without a session token: the service requires one; %s",
                       w->ctx.base_url, ep->path, res->status, w->pc->token_hint);
    } else if (!res->error && res->status == 404) {
        /* Nothing announced. */
        watch_ok(&w->garbled[call->idx], w->pc->name);
    } else if (!res->error && res->status == 200) {
        memset(out, 0, sizeof(out));
        n = ep->parse(res->body, res->len, out, MAX_NOTICES, &why);
        /* An answer that does not parse is not an outage: the service is
         * there and the next answer may be good, so the poll interval
         * stays as it is. */
        if (n < 0)
            watch_complain(&w->garbled[call->idx], w->pc->name, "garbage", "cannot understand "
                           "%s%s: %s; ignoring it, and polling on", w->ctx.base_url, ep->path,
                           why ? why : "malformed");
        else if (why)
            watch_complain(&w->garbled[call->idx], w->pc->name, "part", "%s%s: an event "
                           "cannot be read (%s); skipping it, the others are read",
                           w->ctx.base_url, ep->path, why);
        else
            watch_ok(&w->garbled[call->idx], w->pc->name);
        for (int i = 0; i < n; i++) {
            out[i].detected_ms = notice_now_ms();
            if (out[i].deadline_ms == 0)
                out[i].deadline_ms = out[i].detected_ms + (int64_t)ep->window_ms;
            w->ctx.emit(w->ctx.emit_arg, &out[i]);
        }
    } else {
        request_failed(w, &w->complaint, ep->path, res);
    }
    if (--w->pending == 0)
        round_done(w);
}

static void get_endpoints(struct watcher *w)
{
    char url[1024];
    const char *headers[2] = { NULL, NULL };
    bool with_token = !w->tokenless && w->pc->token_path;

    if (with_token)
        headers[0] = w->token.header;
    /* The round's tries start here: a token request that had to time out
     * first (a hop limit) is not counted against the backoff. */
    w->round_ms = notice_mono_ms();
    w->pending = 0;
    for (size_t i = 0; i < w->pc->n_endpoints; i++) {
        struct http_req_opts o = {
            .url = url,
            .headers = headers,
            .timeout_ms = REQUEST_TIMEOUT_MS,
            .connect_timeout_ms = REQUEST_TIMEOUT_MS / 2,
        };
        snprintf(url, sizeof(url), "%s%s", w->ctx.base_url, w->pc->endpoints[i].path);
        w->calls[i].w = w;
        w->calls[i].idx = i;
        w->calls[i].with_token = with_token;
        w->calls[i].req = http_start(w->ctx.http, &o, on_endpoint, &w->calls[i]);
        if (w->calls[i].req)
            w->pending++;
    }
    if (w->pending == 0) {
        w->failed = true;
        round_done(w);
    }
}

static void on_token(void *arg, int r, const struct http_result *res)
{
    struct watcher *w = arg;

    if (r == 0) {
        watch_ok(&w->token_complaint, w->pc->name);
        get_endpoints(w);
        return;
    }
    if (w->ctx.imdsv1 || w->pc->token_optional) {
        watch_complain(&w->token_complaint, w->pc->name, "tokenless", "no session token from "
                       "%s%s (%s); polling without one, as %s", w->ctx.base_url,
                       w->pc->token_path, res->error ? res->errmsg : "refused",
                       w->pc->token_optional ? "the service's normal mode allows"
                                             : "--aws-imdsv1 allows");
        w->tokenless = true;
        get_endpoints(w);
        return;
    }
    w->failed = true;
    if (res->error == -ETIMEDOUT)
        watch_complain(&w->token_complaint, w->pc->name, "token timeout", "the token request "
                       "to %s%s timed out; %s", w->ctx.base_url, w->pc->token_path,
                       w->pc->token_hint);
    else
        request_failed(w, &w->token_complaint, w->pc->token_path, res);
    round_done(w);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct watcher *w = arg;

    w->round_ms = notice_mono_ms();
    if (w->tokenless || !w->pc->token_path || imds_token_fresh(&w->token, notice_mono_ms())) {
        get_endpoints(w);
        return;
    }
    if (imds_token_fetch(&w->token, on_token, w) < 0) {
        w->failed = true;
        round_done(w);
    }
}

struct watcher *poll_start(const struct poll_cloud *pc, const struct watch_ctx *ctx)
{
    struct watcher *w = calloc(1, sizeof(*w));

    if (!w)
        return NULL;
    w->pc = pc;
    w->ctx = *ctx;
    if (pc->token_path) {
        char url[1024];
        struct imds_token_opts o = {
            .url = url,
            .ttl_header = pc->ttl_header,
            .token_header = pc->token_header,
            .ttl_s = IMDS_TOKEN_TTL_S,
            .renew_ms = TOKEN_RENEW_MS,
            .timeout_ms = REQUEST_TIMEOUT_MS,
            .connect_timeout_ms = REQUEST_TIMEOUT_MS / 2,
        };

        snprintf(url, sizeof(url), "%s%s", ctx->base_url, pc->token_path);
        imds_token_init(&w->token, ctx->http, &o);
    }
    w->timer = evtimer_new(ctx->base, on_timer, w);
    if (!w->timer)
        return poll_stop(w);
    log_msg(LOGL_INFO, "%s: watching %s every %llu ms", pc->name, ctx->base_url,
            (unsigned long long)ctx->poll_ms);
    /* The first round at once: a notice already present is acted on now. */
    arm(w, 0);
    return w;
}

struct watcher *poll_stop(struct watcher *w)
{
    if (!w)
        return NULL;
    imds_token_release(&w->token);
    for (size_t i = 0; i < MAX_ENDPOINTS; i++)
        http_cancel(w->calls[i].req);
    if (w->timer)
        event_free(w->timer);
    free(w);
    return NULL;
}
