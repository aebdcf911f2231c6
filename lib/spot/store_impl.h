/* store_impl: what a store backend implements.  One file per backend;
 * store.c holds the table of them. */
#ifndef SPOT_STORE_IMPL_H
#define SPOT_STORE_IMPL_H

#include "spot/store.h"

struct store_backend {
    const char *scheme;          /* "file://" */
    bool wants_sha256;           /* puts go faster with the payload's SHA-256 */
    bool remote;                 /* what it gets comes over the network, not from a disk */
    int (*open)(const char *url, const struct store_ctx *ctx, struct store **ret, char *err,
                size_t errlen);
    /* Each returns 0 when the operation is under way (its callback will
     * come), or -ENOMEM when it could not be started. */
    /* sha256: of data, or NULL when not known. */
    int (*put)(struct store *s, const char *key, const void *data, size_t len,
               const uint8_t *sha256, store_done_fn done, void *arg);
    /* Conditional create (store_put_new()); NULL: the backend has none. */
    int (*put_new)(struct store *s, const char *key, const void *data, size_t len,
                   const uint8_t *sha256, store_done_fn done, void *arg);
    bool put_new_trusted;        /* its condition always holds (no test needed) */
    bool counts_requests;        /* adds to store.requests itself (every HTTP
                                    request: pages, retries); else store.c counts
                                    one per operation */
    int (*get)(struct store *s, const char *key, size_t max, store_get_fn done, void *arg);
    int (*list)(struct store *s, const char *prefix, store_list_fn done, void *arg);
    int (*del)(struct store *s, const char *key, store_done_fn done, void *arg);
    void (*close)(struct store *s);
};

/* The start of every backend's store. */
struct store {
    const struct store_backend *backend;
    char *url;                   /* owned by store.c */
    struct event_base *base;     /* for errors reported before any I/O */
    uint64_t requests;           /* store_requests() */
};

extern const struct store_backend store_file_backend;
extern const struct store_backend store_s3_backend;

#endif
