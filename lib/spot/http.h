/* http: HTTP requests on the libevent loop through curl's multi-socket
 * interface.  No threads, no blocking: curl tells us which sockets to watch
 * (CURLMOPT_SOCKETFUNCTION) and when to wake it (CURLMOPT_TIMERFUNCTION),
 * and a finished transfer ends in its callback, on the loop.
 *
 * The whole response body is collected, up to a cap: metadata answers,
 * S3 listings and chunks of at most a few tens of MiB.  A request body is
 * copied (body) or borrowed (upload), and S3 requests are signed by curl
 * itself (CURLOPT_AWS_SIGV4). */
#ifndef SPOT_HTTP_H
#define SPOT_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct http;
struct http_req;

struct http_result {
    int error;            /* 0, or -ETIMEDOUT, -ECONNREFUSED, -EMSGSIZE (body over
                             the cap), -EHOSTUNREACH (name or route), -ECONNRESET
                             (connection lost or answer cut short), -EIO (other);
                             permanent, where a retry cannot help: -EKEYREJECTED
                             (the server's certificate was refused), -ENOKEY (the
                             CA file or other local TLS setup is unusable),
                             -EPROTONOSUPPORT (a URL curl cannot use) */
    const char *errmsg;   /* curl's words for error, "" when none */
    long status;          /* HTTP status, 0 when there was no response */
    const char *body;     /* terminated; valid during the callback only */
    size_t len;
    const char *etag;     /* ETag header without quotes' removal, NULL if none */
    double total_s;       /* time the request took */
    struct http_req *req; /* for http_take_body() */
};

/* Called once per request, on the loop, unless it was cancelled.  The
 * request is freed after the callback returns. */
typedef void (*http_done_fn)(void *arg, const struct http_result *res);

struct http_req_opts {
    const char *method;           /* "GET" when NULL */
    const char *url;
    const char *const *headers;   /* "Name: value", NULL-terminated; may be NULL */
    const char *body;             /* request body for PUT/POST, may be NULL */
    size_t body_len;
    long timeout_ms;              /* whole request; 0: no limit */
    long connect_timeout_ms;      /* 0: curl's default */
    const void *upload;           /* PUT body sent from here, not copied: it must stay
                                     valid until the callback or http_cancel() */
    size_t upload_len;
    const char *aws_sigv4;        /* "aws:amz:REGION:s3": curl signs the request with
                                     username (key id) and password (secret) */
    const char *username, *password;
    const char *ca_file;          /* CA bundle; NULL: the system's */
    long low_speed_time_s;        /* fail when under 1 KiB/s for this long; 0: never */
    size_t max_body;              /* response cap; 0: 64 KiB */
    bool proxy;                   /* false: never through a proxy (metadata services) */
};

/* A request engine on base.  The first one loads libcurl (dlopen) and runs
 * its global initialisation; the last http_free() undoes the latter.
 * Returns NULL with the reason in err. */
struct http *http_new(struct event_base *base, char *err, size_t errlen);

/* Cancels what is in flight (no callbacks) and frees h; takes NULL,
 * returns NULL. */
struct http *http_free(struct http *h);

/* Start a request.  Returns a handle for http_cancel(), or NULL when it
 * could not be started (out of memory, bad option); then no callback
 * comes.  Strings in o are copied or used only during this call. */
struct http_req *http_start(struct http *h, const struct http_req_opts *o, http_done_fn done,
                            void *arg);

/* Take the response body out of res (malloc'ed, terminated, res->len
 * bytes); res->body stays readable until the callback returns.  Only
 * during the callback.  NULL when out of memory. */
char *http_take_body(const struct http_result *res);

/* Allow at most n connections to one host (0: no limit). */
void http_set_max_host_connections(struct http *h, long n);

/* Abandon a request: its callback will not be called.  Takes NULL. */
void http_cancel(struct http_req *r);

#endif
