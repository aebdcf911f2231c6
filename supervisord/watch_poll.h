/* watch_poll: the engine of the clouds whose metadata service is polled
 * (AWS, Alibaba, Tencent).  Each such cloud is a table in its own file. */
#ifndef SPOTD_WATCH_POLL_H
#define SPOTD_WATCH_POLL_H

#include <stddef.h>
#include <stdint.h>

#include "watch.h"

struct poll_endpoint {
    const char *path;
    /* Parse a 200 body into at most max notices: returns how many, or
     * -EINVAL with *why set.  *why set with a count: part of the answer
     * (an event) was skipped, the rest read. */
    int (*parse)(const char *body, size_t len, struct notice *out, size_t max,
                 const char **why);
    uint64_t window_ms;          /* deadline = detection + this when the parser left it 0 */
};

struct poll_cloud {
    const char *name;
    const char *token_path;      /* PUT here for a session token; NULL: no tokens */
    const char *ttl_header;      /* "X-aws-ec2-metadata-token-ttl-seconds" */
    const char *token_header;    /* "X-aws-ec2-metadata-token" */
    bool token_optional;         /* without a token when none can be had (Alibaba's
                                    normal mode); AWS needs --aws-imdsv1 for that */
    const char *token_hint;      /* what to do when the token request times out */
    uint64_t backoff_cap_ms;     /* the longest retry delay: see watch_backoff() */
    const struct poll_endpoint *endpoints;
    size_t n_endpoints;
};

struct watcher *poll_start(const struct poll_cloud *pc, const struct watch_ctx *ctx);
struct watcher *poll_stop(struct watcher *w);

#endif
