/* imds: the session token of an instance metadata service (AWS IMDSv2,
 * Alibaba's hardened mode), asynchronous, on http.h.
 *
 * A token is asked for with a PUT that carries a TTL header, kept with its
 * age on the monotonic clock (a stepped wall clock neither ages nor
 * rejuvenates it), and sent as one header on the GETs that follow.  When
 * to ask again is the caller's decision, helped by imds_token_fresh():
 * the polled watchers (watch_poll.c) keep one token until shortly before
 * it expires, the S3 credential chain (s3creds.c) asks for a new one at
 * every credentials fetch.  What a failure means (fall back to IMDSv1,
 * back off, fail the credentials) is the caller's too; this module only
 * says which failure it was.
 *
 * The token is untrusted bytes from the network: at most IMDS_TOKEN_MAX - 1
 * bytes, no CR, LF or NUL (it goes into a header line), trailing line ends
 * dropped. */
#ifndef SPOT_IMDS_H
#define SPOT_IMDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http;
struct http_req;
struct http_result;

#define IMDS_TOKEN_MAX 256
/* The TTL both callers ask for: six hours, the longest IMDSv2 grants. */
#define IMDS_TOKEN_TTL_S 21600

struct imds_token_opts {
    const char *url;            /* the token endpoint: "http://169.254.169.254/latest/api/token" */
    const char *ttl_header;     /* "X-aws-ec2-metadata-token-ttl-seconds" */
    const char *token_header;   /* "X-aws-ec2-metadata-token" */
    int ttl_s;                  /* the TTL asked for */
    int64_t renew_ms;           /* imds_token_fresh() turns false this long before expiry */
    long timeout_ms;            /* the PUT, whole */
    long connect_timeout_ms;    /* 0: curl's default */
};

/* The result of a fetch: 0 with a new token in t; -EBADMSG when the
 * service answered 200 with something that is no token; -EIO when the
 * request failed (res->error set, or an HTTP status other than 200).
 * res is the answer, for the caller's message; the token held before is
 * untouched by a failure. */
typedef void (*imds_token_fn)(void *arg, int r, const struct http_result *res);

/* Embedded in its owner (imds_token_init()/imds_token_release()).  The
 * fields are read by the owner, written only here. */
struct imds_token {
    struct http *http;                  /* not owned */
    char url[1024];
    char ttl_line[128];                 /* "X-...-ttl-seconds: 21600" */
    char name[64];                      /* the token's header name */
    char token[IMDS_TOKEN_MAX];         /* "" before the first token */
    char header[IMDS_TOKEN_MAX + 72];   /* "X-aws-ec2-metadata-token: <token>" */
    int64_t got_ms;                     /* monotonic, when the token came; 0: never */
    int64_t expiry_ms;                  /* monotonic; 0: no token to use */
    int ttl_s;
    int64_t renew_ms;
    long timeout_ms, connect_timeout_ms;
    struct http_req *req;               /* the PUT in flight */
    imds_token_fn done;
    void *arg;
};

/* Set t up for requests on http (which must outlive t's requests).  The
 * strings of o are copied; a longer URL or header name than t holds is
 * cut. */
void imds_token_init(struct imds_token *t, struct http *http, const struct imds_token_opts *o);

/* Cancel a fetch in flight (no callback) and forget the token.  A zeroed
 * struct is fine. */
void imds_token_release(struct imds_token *t);

/* PUT for a new token; done is called once, on the loop.  Returns 0, or
 * -EBUSY while a fetch is in flight, or -ENOMEM when the request cannot be
 * started (then no callback comes). */
int imds_token_fetch(struct imds_token *t, imds_token_fn done, void *arg);

/* Whether the token held can be used at now_ms (monotonic) without asking
 * again: there is one and more than renew_ms of its TTL is left. */
bool imds_token_fresh(const struct imds_token *t, int64_t now_ms);

/* Milliseconds since the token came (monotonic now_ms), whether or not it
 * was dropped since. */
int64_t imds_token_age_ms(const struct imds_token *t, int64_t now_ms);

/* The token was refused or its service wants one after all: the next
 * imds_token_fresh() is false.  Its age is kept. */
void imds_token_drop(struct imds_token *t);

/* Take token (terminated, at most IMDS_TOKEN_MAX - 1 bytes) as got at
 * now_ms (monotonic), for the TTL asked for: what a fetch does on
 * success. */
void imds_token_set(struct imds_token *t, const char *token, int64_t now_ms);

/* Check a token answer's body (len bytes, not terminated): trailing CR and
 * LF dropped, the rest 1 to size - 1 bytes without CR, LF or NUL, copied
 * terminated into out.  Returns 0, or -EBADMSG with out untouched. */
int imds_token_parse(const char *body, size_t len, char *out, size_t size);

#endif
