/* imds: a metadata service's session token: the PUT that asks for it, the
 * check of what comes back, and the freshness decision.  See imds.h. */
#include "spot/imds.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "spot/http.h"
#include "spot/notice.h"

void imds_token_init(struct imds_token *t, struct http *http, const struct imds_token_opts *o)
{
    *t = (struct imds_token){
        .http = http,
        .ttl_s = o->ttl_s,
        .renew_ms = o->renew_ms,
        .timeout_ms = o->timeout_ms,
        .connect_timeout_ms = o->connect_timeout_ms,
    };
    snprintf(t->url, sizeof(t->url), "%s", o->url);
    snprintf(t->ttl_line, sizeof(t->ttl_line), "%s: %d", o->ttl_header, o->ttl_s);
    snprintf(t->name, sizeof(t->name), "%s", o->token_header);
}

void imds_token_release(struct imds_token *t)
{
    http_cancel(t->req);
    t->req = NULL;
    explicit_bzero(t->token, sizeof(t->token));
    explicit_bzero(t->header, sizeof(t->header));
    t->expiry_ms = 0;
}

int imds_token_parse(const char *body, size_t len, char *out, size_t size)
{
    while (len > 0 && (body[len - 1] == '\n' || body[len - 1] == '\r'))
        len--;
    if (len == 0 || len >= size || memchr(body, '\n', len) || memchr(body, '\r', len) ||
        memchr(body, '\0', len))
        return -EBADMSG;
    memcpy(out, body, len);
    out[len] = '\0';
    return 0;
}

void imds_token_set(struct imds_token *t, const char *token, int64_t now_ms)
{
    snprintf(t->token, sizeof(t->token), "%s", token);
    snprintf(t->header, sizeof(t->header), "%s: %s", t->name, t->token);
    t->got_ms = now_ms;
    t->expiry_ms = now_ms + t->ttl_s * 1000LL;
}

bool imds_token_fresh(const struct imds_token *t, int64_t now_ms)
{
    return t->expiry_ms != 0 && t->expiry_ms - now_ms > t->renew_ms;
}

int64_t imds_token_age_ms(const struct imds_token *t, int64_t now_ms)
{
    return now_ms - t->got_ms;
}

void imds_token_drop(struct imds_token *t)
{
    t->expiry_ms = 0;
}

static void on_put(void *arg, const struct http_result *res)
{
    struct imds_token *t = arg;
    imds_token_fn done = t->done;
    char tok[IMDS_TOKEN_MAX];
    int r;

    t->req = NULL;
    if (res->error || res->status != 200) {
        r = -EIO;
    } else {
        r = imds_token_parse(res->body, res->len, tok, sizeof(tok));
        if (r == 0)
            imds_token_set(t, tok, notice_mono_ms());
        explicit_bzero(tok, sizeof(tok));
    }
    /* The callback may release or free t: nothing of it is touched after. */
    done(t->arg, r, res);
}

int imds_token_fetch(struct imds_token *t, imds_token_fn done, void *arg)
{
    const char *headers[2] = { t->ttl_line, NULL };
    struct http_req_opts o = {
        .method = "PUT",
        .url = t->url,
        .headers = headers,
        .body = "",
        .body_len = 0,
        .timeout_ms = t->timeout_ms,
        .connect_timeout_ms = t->connect_timeout_ms,
        .max_body = 1024,
    };

    if (t->req)
        return -EBUSY;
    t->done = done;
    t->arg = arg;
    t->req = http_start(t->http, &o, on_put, t);
    return t->req ? 0 : -ENOMEM;
}
