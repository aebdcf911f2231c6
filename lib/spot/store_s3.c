/* store_s3: the s3:// backend, for AWS S3 and the services that speak its
 * API (MinIO, Ceph RGW, Swift's s3api, GCS's interoperability mode, ...).
 *
 * DESIGN.  Every operation is one signed HTTP request on the shared curl
 * multi handle (http.c), so connections are kept and reused, at most
 * max_inflight of them at once; the rest wait in a FIFO.  Objects are at
 * most a chunk (64 MiB), so a single PUT carries each one and is atomic on
 * the server: no multipart upload, nothing to abort after a crash.
 *
 * curl signs (CURLOPT_AWS_SIGV4) but, in 7.88, neither hashes a
 * read-callback body nor adds x-amz-content-sha256: we send the SHA-256 of
 * every payload, computed in the worker pool when the caller does not
 * already know it, and the server checks it against the bytes it got.
 * Keys are restricted to [A-Za-z0-9._-/] (store_key_valid()), so a key
 * needs no percent-encoding in the path; query values are encoded and the
 * query is written in canonical order, as curl 7.88 signs it as given.
 *
 * A failed request is retried, after an exponential backoff with jitter,
 * when trying again can help: connection failures and resets, timeouts,
 * truncated answers, 5xx, 429, SlowDown and RequestTimeout.  Expired
 * temporary credentials are fetched again.  Everything else fails at once
 * with a message naming the operation, bucket, key, HTTP status and the S3
 * error code and message, and what to check: a TLS certificate refused (a
 * CA not given, a host name it does not name, expired), a CA file that
 * cannot be used, 403 and 404 NoSuchBucket are never retried.
 *
 * An endpoint may have a path (a gateway serving S3 below /s3): requests
 * go to /s3/bucket/key, path-style, and curl signs that whole path, as the
 * AWS SDKs do; the gateway must let the server check it (docs/stores.md).
 *
 * Credentials come from s3creds.c (the environment, the shared file, the
 * instance role); a request waits for them in the queue. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "spot/awscreds.h"
#include "spot/backoff.h"
#include "spot/hash.h"
#include "spot/http.h"
#include "spot/parse.h"
#include "spot/pool.h"
#include "spot/s3creds.h"
#include "spot/s3xml.h"
#include "spot/store.h"
#include "store_impl.h"

#define DEFAULT_INFLIGHT 16
#define DEFAULT_RETRIES 6
#define DEFAULT_TIMEOUT_S 30
#define BACKOFF_BASE_MS 200
#define BACKOFF_SLOWDOWN_MS 1000
#define BACKOFF_CAP_MS 10000
/* Hash payloads up to this size on the loop; larger ones in the pool. */
#define HASH_INLINE_MAX (64 * 1024)
#define LIST_MAX_BODY (8 * 1024 * 1024)

enum s3_kind { S3_PUT, S3_GET, S3_LIST, S3_DELETE };

static const char *const kind_name[] = { "PUT", "GET", "LIST", "DELETE" };

struct s3_op;

struct s3_store {
    struct store base;
    struct event_base *evb;
    struct pool *pool;
    struct http *http;
    char bucket[64];
    char prefix[STORE_KEY_MAX + 2];   /* "" or ending in '/' */
    char root_url[640];               /* ".../bucket/" or "https://bucket.host/" */
    char host[256];                   /* the host name requests go to, for messages */
    char sigv4[96];
    char *ca_file;
    unsigned max_inflight, retries, inflight;
    unsigned max_keys;                /* 0, or a listing's page size (tests only) */
    long timeout_s;
    struct s3_op *queue, *queue_tail; /* ready, waiting for a slot or credentials */
    struct s3_op *ops;                /* every live op, doubly linked */
    struct event *kick;               /* runs pump() from the loop */
    unsigned hashing;                 /* ops in the pool */
    bool closing;
    bool pumping;                     /* pump() is on the stack */
    uint64_t rng;
    struct s3creds creds;
};

struct s3_op {
    struct s3_store *s;
    enum s3_kind kind;
    char key[STORE_KEY_MAX + 1];
    const void *data;
    size_t len, max;
    char sha[2 * HASH_LEN + 1];
    bool hashed;
    bool in_pool;                     /* its hash job has not come back */
    store_done_fn done;
    store_get_fn got;
    store_list_fn listed;
    void *arg;
    unsigned tries;
    bool refreshed;                   /* credentials fetched again once */
    bool if_none;                     /* PUT: If-None-Match: * (store_put_new) */
    struct http_req *req;
    struct event *timer;
    struct pool_job job;
    /* listing */
    char token[S3_TOKEN_MAX + 1];
    struct store_entry *entries;
    size_t n, cap;
    /* the last failure, for the message when tries run out */
    char last[640];
    struct s3_op *qnext;
    struct s3_op *prev, *next;
};

static void pump(struct s3_store *s);
static void send_op(struct s3_op *op);
static void maybe_free_store(struct s3_store *s);

/* ---- ops ---------------------------------------------------------------- */

static void op_free(struct s3_op *op)
{
    struct s3_store *s = op->s;

    if (op->prev)
        op->prev->next = op->next;
    else
        s->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    if (op->timer)
        event_free(op->timer);
    store_entries_free(op->entries, op->n);
    free(op);
}

/* End op with err and msg (printf-style), through its callback. */
static void finish(struct s3_op *op, int err, void *data, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void finish(struct s3_op *op, int err, void *data, size_t len, const char *fmt, ...)
{
    struct s3_store *s = op->s;
    char msg[1024 + STORE_KEY_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    switch (op->kind) {
    case S3_PUT:
    case S3_DELETE:
        op->done(op->arg, err, msg);
        break;
    case S3_GET:
        op->got(op->arg, err, msg, data, len);
        break;
    case S3_LIST:
        if (err) {
            op->listed(op->arg, err, msg, NULL, 0);
        } else {
            op->listed(op->arg, 0, msg, op->entries, op->n);
            op->entries = NULL;
            op->n = 0;
        }
        break;
    }
    op_free(op);
    pump(s);
}

static struct s3_op *new_op(struct store *base, enum s3_kind kind, const char *key)
{
    struct s3_store *s = (struct s3_store *)base;
    struct s3_op *op = calloc(1, sizeof(*op));

    if (!op)
        return NULL;
    op->s = s;
    op->kind = kind;
    snprintf(op->key, sizeof(op->key), "%s", key);
    op->next = s->ops;
    if (s->ops)
        s->ops->prev = op;
    s->ops = op;
    return op;
}

static void enqueue(struct s3_op *op)
{
    struct s3_store *s = op->s;

    op->qnext = NULL;
    if (s->queue_tail)
        s->queue_tail->qnext = op;
    else
        s->queue = op;
    s->queue_tail = op;
    /* From the loop, never inside the call that queued: a request that
     * fails at once still reports through a later loop turn. */
    event_active(s->kick, EV_TIMEOUT, 0);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    pump(arg);
}

/* Start what the slots and the credentials allow. */
static void pump(struct s3_store *s)
{
    /* finish() pumps after each callback: one loop on the stack is enough,
     * however many queued ops fail in a row. */
    if (s->closing || s->pumping)
        return;
    s->pumping = true;
    while (s->queue && s->inflight < s->max_inflight && !s->closing) {
        struct s3_op *op = s->queue;
        enum s3creds_verdict v = s3creds_ready(&s->creds);

        if (v == S3CREDS_WAIT)
            break;
        s->queue = op->qnext;
        if (!s->queue)
            s->queue_tail = NULL;
        if (v == S3CREDS_FAIL)
            finish(op, -EACCES, NULL, 0, "S3 %s s3://%s/%s%s: %s", kind_name[op->kind],
                   s->bucket, s->prefix, op->key, s->creds.err);
        else
            send_op(op);
    }
    s->pumping = false;
}

/* ---- requests ------------------------------------------------------------ */

/* Percent-encode a query value: everything but the unreserved characters
 * (RFC 3986), which is what SigV4's canonical query asks for. */
static int query_escape(const char *in, char *out, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            if (o + 1 >= size)
                return -ENOSPC;
            out[o++] = (char)*p;
        } else {
            if (o + 3 >= size)
                return -ENOSPC;
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    if (o >= size)
        return -ENOSPC;
    out[o] = '\0';
    return 0;
}

/* A string from the server, made safe for a log line: printable ASCII
 * only, cut at max bytes. */
static void sanitize(char *out, size_t size, const char *in, size_t len)
{
    size_t o = 0;

    for (size_t i = 0; i < len && o + 1 < size; i++)
        out[o++] = (in[i] >= 0x20 && in[i] < 0x7f) ? in[i] : '?';
    out[o] = '\0';
}

static void on_response(void *arg, const struct http_result *res);

static void retry_later(struct s3_op *op, bool slow);

static void send_op(struct s3_op *op)
{
    struct s3_store *s = op->s;
    char url[sizeof(s->root_url) + 6 * STORE_KEY_MAX + 3 * S3_TOKEN_MAX + 128];
    char sha_hdr[128], tok_hdr[AWS_TOKEN_MAX + 32];
    const char *headers[4] = { sha_hdr, NULL, NULL, NULL };
    struct http_req_opts o = {
        .url = url,
        .headers = headers,
        .aws_sigv4 = s->sigv4,
        .username = s->creds.aws.access_key_id,
        .password = s->creds.aws.secret_access_key,
        .ca_file = s->ca_file,
        .low_speed_time_s = s->timeout_s,
        .connect_timeout_ms = s->timeout_s * 1000,
        .proxy = true,
    };

    s->base.requests++;
    if (s->creds.aws.session_token[0]) {
        snprintf(tok_hdr, sizeof(tok_hdr), "x-amz-security-token: %s",
                 s->creds.aws.session_token);
        headers[1] = tok_hdr;
    }
    if (op->if_none)
        headers[headers[1] ? 2 : 1] = "If-None-Match: *";
    /* The SHA-256 of an empty body, for every request without one. */
    snprintf(sha_hdr, sizeof(sha_hdr), "x-amz-content-sha256: %s",
             op->kind == S3_PUT ? op->sha
                                : "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    switch (op->kind) {
    case S3_PUT:
        snprintf(url, sizeof(url), "%s%s%s", s->root_url, s->prefix, op->key);
        o.method = "PUT";
        o.upload = op->data;
        o.upload_len = op->len;
        o.max_body = 64 * 1024;
        break;
    case S3_GET:
        snprintf(url, sizeof(url), "%s%s%s", s->root_url, s->prefix, op->key);
        /* Room for an error document too; the object's own cap is
         * checked on success. */
        o.max_body = op->max > 64 * 1024 ? op->max : 64 * 1024;
        break;
    case S3_DELETE:
        snprintf(url, sizeof(url), "%s%s%s", s->root_url, s->prefix, op->key);
        o.method = "DELETE";
        break;
    case S3_LIST: {
        char full[2 * STORE_KEY_MAX + 4], pre[3 * 2 * STORE_KEY_MAX + 1], tok[3 * S3_TOKEN_MAX + 1];
        char mk[32] = "";

        snprintf(full, sizeof(full), "%s%s", s->prefix, op->key);
        if (query_escape(full, pre, sizeof(pre)) < 0 ||
            query_escape(op->token, tok, sizeof(tok)) < 0) {
            finish(op, -EINVAL, NULL, 0, "S3 LIST s3://%s/%s: prefix or token too long",
                   s->bucket, full);
            return;
        }
        /* Canonical order: continuation-token < list-type < max-keys <
         * prefix.  max-keys only when a test asks for small pages. */
        if (s->max_keys)
            snprintf(mk, sizeof(mk), "&max-keys=%u", s->max_keys);
        if (op->token[0])
            snprintf(url, sizeof(url), "%s?continuation-token=%s&list-type=2%s&prefix=%s",
                     s->root_url, tok, mk, pre);
        else
            snprintf(url, sizeof(url), "%s?list-type=2%s&prefix=%s", s->root_url, mk, pre);
        o.max_body = LIST_MAX_BODY;
        break;
    }
    }
    op->tries++;
    op->req = http_start(s->http, &o, on_response, op);
    if (!op->req) {
        finish(op, -ENOMEM, NULL, 0, "S3 %s s3://%s/%s%s: cannot start the request",
               kind_name[op->kind], s->bucket, s->prefix, op->key);
        return;
    }
    s->inflight++;
}

static void on_retry_timer(evutil_socket_t fd, short what, void *arg)
{
    struct s3_op *op = arg;

    enqueue(op);
}

/* Try op again after a backoff: exponential from a base, capped, with
 * half of it random so that many clients do not retry in step. */
static void retry_later(struct s3_op *op, bool slow)
{
    struct s3_store *s = op->s;
    uint64_t d = backoff_delay(slow ? BACKOFF_SLOWDOWN_MS : BACKOFF_BASE_MS,
                               op->tries ? op->tries - 1 : 0, BACKOFF_CAP_MS,
                               backoff_rand(&s->rng));
    struct timeval tv;

    if (!op->timer)
        op->timer = evtimer_new(s->evb, on_retry_timer, op);
    if (!op->timer) {
        finish(op, -ENOMEM, NULL, 0, "S3 %s s3://%s/%s%s: out of memory", kind_name[op->kind],
               s->bucket, s->prefix, op->key);
        return;
    }
    tv.tv_sec = (time_t)(d / 1000);
    tv.tv_usec = (suseconds_t)(d % 1000) * 1000;
    evtimer_add(op->timer, &tv);
}

static int status_errno(long status)
{
    switch (status) {
    case 400:
        return -EINVAL;
    case 401:
    case 403:
        return -EACCES;
    case 404:
        return -ENOENT;
    default:
        return -EIO;
    }
}

/* A listing page: keep the entries below the store's prefix, and go on
 * while the server says there is more. */
static int take_page(struct s3_op *op, const struct http_result *res, char *why, size_t wlen)
{
    struct s3_store *s = op->s;
    size_t plen = strlen(s->prefix);
    struct s3_list l;
    const char *reason = NULL;
    int r = s3xml_parse_list(res->body, res->len, &l, &reason);
    bool more;

    if (r < 0) {
        snprintf(why, wlen, "malformed listing (%s)", reason ? reason : strerror(-r));
        return -EBADMSG;
    }
    if (l.url_encoded) {
        s3xml_list_release(&l);
        snprintf(why, wlen, "listing with url-encoded keys, which was not asked for");
        return -EBADMSG;
    }
    for (size_t i = 0; i < l.n_objects; i++) {
        const struct s3_object *ob = &l.objects[i];
        struct store_entry *e;

        if (strncmp(ob->key, s->prefix, plen) != 0 ||
            strncmp(ob->key + plen, op->key, strlen(op->key)) != 0) {
            s3xml_list_release(&l);
            snprintf(why, wlen, "listing holds a key outside the prefix asked for");
            return -EBADMSG;
        }
        /* Objects that another tool put under our prefix with names the
         * store never writes are not the store's: left out. */
        if (!store_key_valid(ob->key + plen))
            continue;
        if (op->n == op->cap) {
            size_t cap = op->cap ? 2 * op->cap : 64;
            e = realloc(op->entries, cap * sizeof(*e));
            if (!e) {
                s3xml_list_release(&l);
                snprintf(why, wlen, "out of memory");
                return -ENOMEM;
            }
            op->entries = e;
            op->cap = cap;
        }
        e = &op->entries[op->n];
        e->key = strdup(ob->key + plen);
        if (!e->key) {
            s3xml_list_release(&l);
            snprintf(why, wlen, "out of memory");
            return -ENOMEM;
        }
        e->size = ob->size;
        e->mtime_ms = ob->last_modified_ms;
        op->n++;
    }
    if (l.truncated && !l.next_token[0]) {
        s3xml_list_release(&l);
        snprintf(why, wlen, "truncated listing without a continuation token");
        return -EBADMSG;
    }
    if (l.truncated && strcmp(l.next_token, op->token) == 0) {
        s3xml_list_release(&l);
        snprintf(why, wlen, "listing repeats its continuation token");
        return -EBADMSG;
    }
    more = l.truncated;
    snprintf(op->token, sizeof(op->token), "%s", more ? l.next_token : "");
    s3xml_list_release(&l);
    return more ? 1 : 0;
}

/* A 2xx answer: the op's result, or a listing's next page. */
static void answered(struct s3_op *op, const struct http_result *res)
{
    struct s3_store *s = op->s;

    switch (op->kind) {
    case S3_GET: {
        size_t len = res->len;
        char *body;

        if (len > op->max) {
            finish(op, -EFBIG, NULL, 0, "S3 GET s3://%s/%s%s: object larger than %zu bytes",
                   s->bucket, s->prefix, op->key, op->max);
            return;
        }
        body = http_take_body(res);
        if (!body) {
            finish(op, -ENOMEM, NULL, 0, "S3 GET s3://%s/%s%s: out of memory", s->bucket,
                   s->prefix, op->key);
            return;
        }
        finish(op, 0, body, len, "%s", "");
        return;
    }
    case S3_LIST: {
        char why[256];
        int r = take_page(op, res, why, sizeof(why));

        if (r < 0) {
            finish(op, r, NULL, 0, "S3 LIST s3://%s/%s%s: %s", s->bucket, s->prefix,
                   op->key, why);
            return;
        }
        if (r > 0) {
            op->tries = 0;
            enqueue(op);
            return;
        }
        finish(op, 0, NULL, 0, "%s", "");
        return;
    }
    default:
        finish(op, 0, NULL, 0, "%s", "");
        return;
    }
}

/* An answer with an error status.  Returns true when that ended op (or
 * sent it back to the queue); else op->last says what came back, and
 * *err, *retry, *slow and *hint what to do with it. */
static bool refused(struct s3_op *op, const struct http_result *res, int *err, bool *retry,
                    bool *slow, const char **hint)
{
    struct s3_store *s = op->s;
    struct s3_error e;
    bool parsed = res->len > 0 && s3xml_parse_error(res->body, res->len, &e, NULL) == 0;

    if (!parsed)
        snprintf(e.code, sizeof(e.code), "%s", "(no S3 error document)");
    *err = status_errno(res->status);
    if (op->if_none && (res->status == 412 || res->status == 409)) {
        /* 412: the object is there; 409 (AWS): another conditional
         * write of it is under way.  Either way it is not ours. */
        finish(op, -EEXIST, NULL, 0, "S3 PUT s3://%s/%s%s: it exists (HTTP %ld)", s->bucket,
               s->prefix, op->key, res->status);
        return true;
    }
    if (op->if_none && res->status == 501) {
        finish(op, -EOPNOTSUPP, NULL, 0, "S3 PUT s3://%s/%s%s: the server does not "
               "create conditionally (If-None-Match: HTTP 501)", s->bucket, s->prefix,
               op->key);
        return true;
    }
    if (res->status == 404 && op->kind == S3_DELETE) {
        finish(op, 0, NULL, 0, "%s", "");
        return true;
    }
    if (res->status == 404 && op->kind == S3_GET && strcmp(e.code, "NoSuchBucket") != 0) {
        finish(op, -ENOENT, NULL, 0, "S3 GET s3://%s/%s%s: no such object", s->bucket,
               s->prefix, op->key);
        return true;
    }
    if (parsed) {
        char m[200];

        sanitize(m, sizeof(m), e.message, strlen(e.message));
        snprintf(op->last, sizeof(op->last), "HTTP %ld %s%s%s", res->status, e.code,
                 m[0] ? ": " : "", m);
    } else {
        snprintf(op->last, sizeof(op->last), "HTTP %ld %s", res->status, e.code);
    }
    if (res->status >= 500 || res->status == 429 || strcmp(e.code, "SlowDown") == 0 ||
        strcmp(e.code, "RequestTimeout") == 0) {
        *retry = true;
        *slow = res->status == 503 || res->status == 429 || strcmp(e.code, "SlowDown") == 0;
        *err = -EIO;
    } else if ((strcmp(e.code, "ExpiredToken") == 0 ||
                strcmp(e.code, "TokenRefreshRequired") == 0) &&
               !op->refreshed && s3creds_expired(&s->creds)) {
        /* The role's credentials ran out early: fetch them again. */
        op->refreshed = true;
        op->tries--;
        enqueue(op);
        return true;
    }
    if (strcmp(e.code, "NoSuchBucket") == 0)
        *hint = "; create the bucket, or fix the store URL";
    else if (strcmp(e.code, "SignatureDoesNotMatch") == 0 ||
             strcmp(e.code, "InvalidAccessKeyId") == 0 ||
             strcmp(e.code, "AuthorizationHeaderMalformed") == 0)
        *hint = "; check the credentials and the region (--s3-region, AWS_REGION)";
    else if (strcmp(e.code, "AccessDenied") == 0)
        *hint = "; the credentials lack permission for this bucket or prefix";
    return false;
}

/* What to check after a transport error that no retry mends (http.h's
 * permanent codes), in buf; false for the others. */
static bool permanent_hint(const struct s3_store *s, int err, char *buf, size_t size)
{
    char ca[PATH_MAX + 32];

    if (s->ca_file)
        snprintf(ca, sizeof(ca), "checked against AWS_CA_BUNDLE='%s'", s->ca_file);
    else
        snprintf(ca, sizeof(ca), "checked against the system's CAs; AWS_CA_BUNDLE is not set");
    switch (err) {
    case -EKEYREJECTED:
        snprintf(buf, size, "; the server's certificate is not trusted (%s): give the CA "
                 "that signed it in AWS_CA_BUNDLE (a PEM file), check that the endpoint's "
                 "host name ('%s') is one the certificate names, and that it has not expired",
                 ca, s->host);
        return true;
    case -ENOKEY:
        if (s->ca_file)
            snprintf(buf, size, "; cannot use the CA file AWS_CA_BUNDLE='%s': check that it "
                     "exists, is readable and holds PEM certificates", s->ca_file);
        else
            snprintf(buf, size, "; the TLS setup cannot be used (the system's CA bundle); "
                     "set AWS_CA_BUNDLE to a PEM file of the CAs to trust");
        return true;
    case -EPROTONOSUPPORT:
        snprintf(buf, size, "; check the endpoint (--s3-endpoint, AWS_ENDPOINT_URL)");
        return true;
    default:
        return false;
    }
}

static void on_response(void *arg, const struct http_result *res)
{
    struct s3_op *op = arg;
    struct s3_store *s = op->s;
    bool retry = false, slow = false;
    const char *hint = "";
    char hbuf[PATH_MAX + 512];
    int err;

    op->req = NULL;
    s->inflight--;
    if (res->error) {
        if (res->error == -EMSGSIZE && op->kind == S3_GET) {
            finish(op, -EFBIG, NULL, 0, "S3 GET s3://%s/%s%s: object larger than %zu bytes",
                   s->bucket, s->prefix, op->key, op->max);
            return;
        }
        err = res->error == -EMSGSIZE ? -EBADMSG : res->error;
        snprintf(op->last, sizeof(op->last), "%s", res->errmsg);
        retry = !permanent_hint(s, err, hbuf, sizeof(hbuf));
        if (!retry)
            hint = hbuf;
        else if (err == -ECONNREFUSED || err == -EHOSTUNREACH)
            hint = "; check the endpoint (--s3-endpoint, AWS_ENDPOINT_URL)";
    } else if (res->status >= 200 && res->status < 300) {
        answered(op, res);
        return;
    } else if (refused(op, res, &err, &retry, &slow, &hint)) {
        return;
    }
    if (retry && op->tries <= s->retries && !s->closing) {
        retry_later(op, slow);
        return;
    }
    finish(op, err, NULL, 0, "S3 %s s3://%s/%s%s: %s%s%s", kind_name[op->kind], s->bucket,
           s->prefix, op->key, op->last, retry ? " (gave up after retries)" : "", hint);
}

/* ---- payload hashing ------------------------------------------------------ */

static void hash_work(struct pool_job *job)
{
    struct s3_op *op = (struct s3_op *)((char *)job - offsetof(struct s3_op, job));
    uint8_t h[HASH_LEN];

    if (hash_sha256(op->data, op->len, h) == 0) {
        hash_hex(h, op->sha);
        op->hashed = true;
    }
}

static void hash_done(struct pool_job *job)
{
    struct s3_op *op = (struct s3_op *)((char *)job - offsetof(struct s3_op, job));
    struct s3_store *s = op->s;

    s->hashing--;
    op->in_pool = false;
    if (s->closing) {
        op_free(op);
        maybe_free_store(s);
        return;
    }
    if (job->cancelled || !op->hashed) {
        finish(op, -EIO, NULL, 0, "S3 PUT s3://%s/%s%s: cannot hash the payload", s->bucket,
               s->prefix, op->key);
        return;
    }
    enqueue(op);
}

/* ---- backend entry points ------------------------------------------------- */

static int put_op(struct store *base, const char *key, const void *data, size_t len,
                  const uint8_t *sha256, bool if_none, store_done_fn done, void *arg)
{
    struct s3_op *op = new_op(base, S3_PUT, key);
    struct s3_store *s = (struct s3_store *)base;

    if (!op)
        return -ENOMEM;
    op->if_none = if_none;
    op->data = data;
    op->len = len;
    op->done = done;
    op->arg = arg;
    if (sha256) {
        hash_hex(sha256, op->sha);
        op->hashed = true;
    } else if (len <= HASH_INLINE_MAX || !s->pool) {
        hash_work(&op->job);
    } else {
        op->job.work = hash_work;
        op->job.done = hash_done;
        op->in_pool = true;
        s->hashing++;
        pool_submit(s->pool, &op->job);
        return 0;
    }
    if (!op->hashed) {
        op_free(op);
        return -ENOMEM;
    }
    enqueue(op);
    return 0;
}

static int s3_put(struct store *base, const char *key, const void *data, size_t len,
                  const uint8_t *sha256, store_done_fn done, void *arg)
{
    return put_op(base, key, data, len, sha256, false, done, arg);
}

/* A retry after an answer that was lost meets the object it created:
 * 412, -EEXIST; the caller compares what is there with what it wrote. */
static int s3_put_new(struct store *base, const char *key, const void *data, size_t len,
                      const uint8_t *sha256, store_done_fn done, void *arg)
{
    return put_op(base, key, data, len, sha256, true, done, arg);
}

static int s3_get(struct store *base, const char *key, size_t max, store_get_fn got, void *arg)
{
    struct s3_op *op = new_op(base, S3_GET, key);

    if (!op)
        return -ENOMEM;
    op->max = max;
    op->got = got;
    op->arg = arg;
    enqueue(op);
    return 0;
}

static int s3_list(struct store *base, const char *prefix, store_list_fn listed, void *arg)
{
    struct s3_op *op = new_op(base, S3_LIST, prefix);

    if (!op)
        return -ENOMEM;
    op->listed = listed;
    op->arg = arg;
    enqueue(op);
    return 0;
}

static int s3_del(struct store *base, const char *key, store_done_fn done, void *arg)
{
    struct s3_op *op = new_op(base, S3_DELETE, key);

    if (!op)
        return -ENOMEM;
    op->done = done;
    op->arg = arg;
    enqueue(op);
    return 0;
}

/* ---- open and close ------------------------------------------------------- */

/* Bucket names: 3 to 63 of [a-z0-9.-] for AWS; S3-compatible services are
 * laxer, so uppercase and '_' are accepted too (path-style then). */
static bool bucket_valid(const char *b, size_t len)
{
    if (len < 1 || len > 63)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_'))
            return false;
    }
    return true;
}

static bool bucket_dns_ok(const char *b)
{
    size_t len = strlen(b);

    if (len < 3 || b[0] == '.' || b[0] == '-' || b[len - 1] == '.' || b[len - 1] == '-')
        return false;
    for (const char *p = b; *p; p++)
        if ((*p >= 'A' && *p <= 'Z') || *p == '_' || *p == '.')
            return false; /* dots break TLS wildcard certificates */
    return true;
}

/* An IP literal or localhost: no DNS name per bucket can exist there. */
static bool host_needs_path_style(const char *host, size_t len)
{
    bool digits_dots = true;

    if (len > 0 && host[0] == '[')
        return true;
    if (len == 9 && strncasecmp(host, "localhost", 9) == 0)
        return true;
    for (size_t i = 0; i < len; i++)
        if (!((host[i] >= '0' && host[i] <= '9') || host[i] == '.'))
            digits_dots = false;
    return digits_dots;
}

static void s3_close(struct store *base);

static void maybe_free_store(struct s3_store *s)
{
    if (!s->closing || s->hashing > 0)
        return;
    free(s->ca_file);
    free(s);
}

static const char *env_first(const char *a, const char *b)
{
    const char *v = getenv(a);

    if (v && *v)
        return v;
    v = b ? getenv(b) : NULL;
    return v && *v ? v : NULL;
}

/* The prefix after "s3://bucket/", ending in '/' (none when empty). */
static int set_prefix(struct s3_store *s, const char *url, const char *slash, char *err,
                      size_t errlen)
{
    size_t plen;
    char tmp[STORE_KEY_MAX + 1];

    if (!slash || !slash[1])
        return 0;
    plen = strlen(slash + 1);
    if (plen > STORE_KEY_MAX - 64) {
        snprintf(err, errlen, "invalid store '%s': prefix too long", url);
        return -EINVAL;
    }
    memcpy(tmp, slash + 1, plen + 1);
    if (tmp[plen - 1] == '/')
        tmp[--plen] = '\0';
    if (!store_key_valid(tmp)) {
        snprintf(err, errlen, "invalid store '%s': the prefix must be a relative path of "
                              "letters, digits, '.', '_', '-'", url);
        return -EINVAL;
    }
    snprintf(s->prefix, sizeof(s->prefix), "%s/", tmp);
    return 0;
}

/* An endpoint's path, "" or "/seg[/seg...]" (a gateway that serves S3 below
 * a path): segments of unreserved characters, so that the path needs no
 * encoding and is signed as sent.  Copied to out without a trailing '/'. */
static bool endpoint_path_ok(const char *v, char *out, size_t size)
{
    size_t len = strlen(v);

    while (len > 0 && v[len - 1] == '/')
        len--;
    if (len >= size)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = v[i];
        if (c == '/') {
            if (v[i + 1] == '/' || v[i + 1] == '\0')
                return false;
            if (v[i + 1] == '.' && (v[i + 2] == '/' || v[i + 2] == '\0' ||
                                    (v[i + 2] == '.' && (v[i + 3] == '/' || i + 3 == len))))
                return false;
        } else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~')) {
            return false;
        }
    }
    memcpy(out, v, len);
    out[len] = '\0';
    return true;
}

/* The region (signatures) and the endpoint, path-style or virtual-hosted:
 * s->sigv4, s->root_url and s->host.  An endpoint with a path
 * (http://gw:7480/s3) puts it before the bucket: /s3/bucket/key, signed
 * over that whole path, as the AWS SDKs do; that takes path-style
 * addressing. */
static int set_endpoint(struct s3_store *s, const struct store_ctx *ctx, char *err,
                        size_t errlen)
{
    const char *endpoint, *region, *scheme_end, *host, *v;
    bool path_style;
    char def_ep[128], path[304];
    size_t hlen;

    region = ctx->s3_region && *ctx->s3_region ? ctx->s3_region
                                               : env_first("AWS_REGION", "AWS_DEFAULT_REGION");
    if (!region)
        region = "us-east-1";
    if (strlen(region) > 40 || strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") !=
                                   strlen(region)) {
        snprintf(err, errlen, "invalid S3 region '%.64s'", region);
        return -EINVAL;
    }
    snprintf(s->sigv4, sizeof(s->sigv4), "aws:amz:%s:s3", region);
    endpoint = ctx->s3_endpoint && *ctx->s3_endpoint
                   ? ctx->s3_endpoint
                   : env_first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
    if (!endpoint) {
        snprintf(def_ep, sizeof(def_ep), "https://s3.%s.amazonaws.com", region);
        endpoint = def_ep;
    }
    scheme_end = strstr(endpoint, "://");
    if (!scheme_end || (strncmp(endpoint, "http://", 7) != 0 &&
                        strncmp(endpoint, "https://", 8) != 0)) {
        snprintf(err, errlen, "invalid S3 endpoint '%.300s': expected http(s)://host[:port]"
                              "[/path]", endpoint);
        return -EINVAL;
    }
    host = scheme_end + 3;
    hlen = strcspn(host, "/:");
    if (host[0] == '[')
        hlen = strcspn(host, "]") + 1;
    v = host + strcspn(host, "/");
    if (hlen == 0 || hlen > 253 || strlen(endpoint) > 300 || strpbrk(host, " \t\r\n?#@") ||
        !endpoint_path_ok(v, path, sizeof(path))) {
        snprintf(err, errlen, "invalid S3 endpoint '%.300s': expected http(s)://host[:port]"
                              "[/path], a path of letters, digits, '-', '_', '.', '~' "
                              "between '/'", endpoint);
        return -EINVAL;
    }
    if (ctx->s3_path_style_set)
        path_style = ctx->s3_path_style != 0;
    else
        path_style = path[0] || host_needs_path_style(host, hlen) || !bucket_dns_ok(s->bucket);
    if (!path_style && path[0]) {
        snprintf(err, errlen, "S3 endpoint '%.300s' has a path ('%s'), which takes path-style "
                              "addressing: drop --s3-virtual-hosted", endpoint, path);
        return -EINVAL;
    }
    if (path_style) {
        snprintf(s->root_url, sizeof(s->root_url), "%.*s%s/%s/",
                 (int)(v - endpoint), endpoint, path, s->bucket);
        snprintf(s->host, sizeof(s->host), "%.*s", (int)hlen, host);
    } else {
        snprintf(s->root_url, sizeof(s->root_url), "%.*s%s.%.*s/",
                 (int)(host - endpoint), endpoint, s->bucket, (int)(v - host), host);
        snprintf(s->host, sizeof(s->host), "%s.%.*s", s->bucket, (int)hlen, host);
    }
    return 0;
}

/* SPOTD_TEST_S3_MAX_KEYS=N: every listing asks for pages of at most N keys
 * (max-keys), so that tests drive pagination with a few objects.  Not an
 * option: nothing but a test needs pages smaller than the server's. */
static int set_max_keys(struct s3_store *s, char *err, size_t errlen)
{
    const char *v = getenv("SPOTD_TEST_S3_MAX_KEYS");
    uint64_t n;

    if (!v || !*v)
        return 0;
    if (parse_u64(v, 1, 1000, &n) < 0) {
        snprintf(err, errlen, "invalid SPOTD_TEST_S3_MAX_KEYS '%.32s': expected 1 to 1000 "
                              "(a test knob; unset it)", v);
        return -EINVAL;
    }
    s->max_keys = (unsigned)n;
    return 0;
}

static void on_creds(void *arg)
{
    pump(arg);
}

static int s3_open(const char *url, const struct store_ctx *ctx, struct store **ret, char *err,
                   size_t errlen)
{
    const char *b = url + 5, *slash = strchr(b, '/'), *v;
    size_t blen = slash ? (size_t)(slash - b) : strlen(b);
    struct s3_store *s;
    int r;

    if (!bucket_valid(b, blen)) {
        snprintf(err, errlen, "invalid store '%s': expected s3://bucket[/prefix], a bucket of "
                              "1 to 63 letters, digits, '.', '-', '_'", url);
        return -EINVAL;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    memcpy(s->bucket, b, blen);
    r = set_prefix(s, url, slash, err, errlen);
    if (r == 0)
        r = set_endpoint(s, ctx, err, errlen);
    if (r == 0)
        r = set_max_keys(s, err, errlen);
    if (r < 0)
        goto out_free;
    v = getenv("AWS_CA_BUNDLE");
    if (v && *v && !(s->ca_file = strdup(v))) {
        snprintf(err, errlen, "out of memory");
        r = -ENOMEM;
        goto out_free;
    }
    s->max_inflight = ctx->max_inflight ? ctx->max_inflight : DEFAULT_INFLIGHT;
    s->retries = ctx->retries ? ctx->retries : DEFAULT_RETRIES;
    s->timeout_s = ctx->timeout_s ? ctx->timeout_s : DEFAULT_TIMEOUT_S;
    s->evb = ctx->base;
    s->pool = ctx->pool;
    s->rng = backoff_seed() ^ (uintptr_t)s;

    r = s3creds_init(&s->creds, err, errlen);
    if (r < 0)
        goto out_free;
    s->http = http_new(ctx->base, err, errlen);
    if (!s->http) {
        r = -ENOENT;
        goto out_wipe;
    }
    http_set_max_host_connections(s->http, (long)s->max_inflight);
    s3creds_attach(&s->creds, s->http, on_creds, s);
    s->kick = event_new(ctx->base, -1, 0, on_kick, s);
    if (!s->kick) {
        snprintf(err, errlen, "out of memory");
        r = -ENOMEM;
        goto out_http;
    }
    s->base.backend = &store_s3_backend;
    *ret = &s->base;
    return 0;

out_http:
    http_free(s->http);
out_wipe:
    s3creds_release(&s->creds);
out_free:
    free(s->ca_file);
    free(s);
    return r;
}

/* Requests still in flight are cancelled without their callbacks; the
 * caller has run the loop until its own operations ended. */
static void s3_close(struct store *base)
{
    struct s3_store *s = (struct s3_store *)base;

    s->closing = true;
    s3creds_release(&s->creds);
    for (struct s3_op *op = s->ops, *next; op; op = next) {
        next = op->next;
        if (op->req)
            http_cancel(op->req);
        op->req = NULL;
        /* An op being hashed is freed when its pool job comes back. */
        if (!op->in_pool)
            op_free(op);
    }
    s->http = http_free(s->http);
    event_free(s->kick);
    maybe_free_store(s);
}

const struct store_backend store_s3_backend = {
    .scheme = "s3://",
    .wants_sha256 = true,
    .remote = true,
    .open = s3_open,
    .put = s3_put,
    .put_new = s3_put_new,
    .put_new_trusted = false,     /* Swift's s3api answers 501, others may ignore it */
    .counts_requests = true,      /* send_op(): every page and retry */
    .get = s3_get,
    .list = s3_list,
    .del = s3_del,
    .close = s3_close,
};
