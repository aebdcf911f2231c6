/* store: where generations live, behind one asynchronous interface.
 *
 * A store is opened from a URL (file:///path or s3://bucket[/prefix]) and
 * holds objects under keys such as
 * "llama-ft/chunks/ab/ab12...".  Every operation runs off the loop (the
 * worker pool for files, curl transfers for S3) and ends in exactly one
 * callback on the loop.  A put is atomic: readers see the whole object or
 * none of it, never a part.
 *
 * Keys come from manifests, which are untrusted: store_key_valid() decides
 * what a key may be, and every operation refuses other keys with -EINVAL
 * before touching anything. */
#ifndef SPOT_STORE_H
#define SPOT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct pool;
struct store;

#define STORE_KEY_MAX 1024

struct store_entry {
    char *key;
    uint64_t size;
    int64_t mtime_ms;            /* last modification, ms since the epoch, UTC */
};

/* err is 0 or -errno; msg says what failed on what ("" on success).  Both
 * are valid during the call only. */
typedef void (*store_done_fn)(void *arg, int err, const char *msg);
/* data is malloc'ed and becomes the callee's (NULL on error). */
typedef void (*store_get_fn)(void *arg, int err, const char *msg, void *data, size_t len);
/* entries become the callee's: free them with store_entries_free(). */
typedef void (*store_list_fn)(void *arg, int err, const char *msg, struct store_entry *entries,
                              size_t n);

/* What a store needs from its user.  Only base and pool are required;
 * the S3 settings left NULL/0 come from the environment as the AWS tools
 * read it (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...; see
 * docs/store-format.md). */
struct store_ctx {
    struct event_base *base;
    struct pool *pool;           /* for file I/O and payload hashing */
    const char *s3_endpoint;     /* "https://host[:port]" */
    const char *s3_region;
    int s3_path_style;           /* with s3_path_style_set: 1 path-style, 0
                                    virtual-hosted; without: automatic */
    bool s3_path_style_set;
    unsigned max_inflight;       /* requests at once; 0: 16 */
    unsigned retries;            /* tries after the first; 0: 6 */
    unsigned timeout_s;          /* a request making no progress for this long
                                    fails (and is retried); 0: 30 */
};

/* Open the store at url.  Returns 0, or -EINVAL, -ENOENT (libcurl
 * missing), -ENOMEM with err set.  Credentials are looked for when the
 * first request needs them, not here. */
int store_open(const char *url, const struct store_ctx *ctx, struct store **ret, char *err,
               size_t errlen);

/* Close, once every operation has ended in its callback (the caller runs
 * the loop until they have); never from inside one of the store's own
 * callbacks (as curl_multi_cleanup(), from a later loop turn instead).
 * Takes NULL, returns NULL. */
struct store *store_close(struct store *s);

/* The URL the store was opened with. */
const char *store_url(const struct store *s);

/* data must stay valid until done is called. */
void store_put(struct store *s, const char *key, const void *data, size_t len,
               store_done_fn done, void *arg);
/* The same, with the SHA-256 of data already known (a backend that signs
 * payloads need not hash it again).  sha256 is copied. */
void store_put_hashed(struct store *s, const char *key, const void *data, size_t len,
                      const uint8_t sha256[32], store_done_fn done, void *arg);
/* Create key only if no object has that key (S3: If-None-Match: *; file:
 * link(2)): done gets 0, -EEXIST when one is there (nothing was written),
 * or -EOPNOTSUPP when the store cannot make the condition.  Some S3
 * servers ignore the condition and overwrite: store_put_new_trusted()
 * says whether this store's answer holds without a test (snap.c tests
 * the others once).  sha256 may be NULL. */
void store_put_new(struct store *s, const char *key, const void *data, size_t len,
                   const uint8_t *sha256, store_done_fn done, void *arg);
bool store_put_new_trusted(const struct store *s);

/* Objects larger than max fail with -EFBIG; a missing one with -ENOENT. */
void store_get(struct store *s, const char *key, size_t max, store_get_fn done, void *arg);
/* Every object whose key starts with prefix, in no particular order. */
void store_list(struct store *s, const char *prefix, store_list_fn done, void *arg);
/* Deleting what is not there succeeds. */
void store_delete(struct store *s, const char *key, store_done_fn done, void *arg);

/* The requests this store has made since it was opened: for S3 every
 * HTTP request (each page of a listing, each retry); for a file store
 * each operation (a listing is one).  What spotctl's SPOTCTL_STATS and
 * the benchmarks report. */
uint64_t store_requests(const struct store *s);

/* Whether store_put_hashed() saves this store work (it signs payloads). */
bool store_wants_sha256(const struct store *s);

/* Whether what it gets comes over the network (S3), not from a file
 * system it reads through the page cache (file://). */
bool store_remote(const struct store *s);

/* Relative, at most STORE_KEY_MAX bytes of [A-Za-z0-9._-/], no empty,
 * "." or ".." component. */
bool store_key_valid(const char *key);

void store_entries_free(struct store_entry *entries, size_t n);

#endif
