/* store: the backends' table, key checks, and errors found before any
 * I/O, which still arrive through the callback, from the loop. */
#include "spot/store.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

static const struct store_backend *const backends[] = { &store_file_backend, &store_s3_backend, NULL };

bool store_key_valid(const char *key)
{
    size_t len = strlen(key), comp = 0;

    if (len == 0 || len > STORE_KEY_MAX || key[0] == '/')
        return false;
    for (size_t i = 0; i <= len; i++) {
        char c = key[i];
        if (c == '/' || c == '\0') {
            /* No empty, "." or ".." component. */
            if (comp == 0 || (comp == 1 && key[i - 1] == '.') ||
                (comp == 2 && key[i - 1] == '.' && key[i - 2] == '.'))
                return false;
            comp = 0;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
        comp++;
    }
    return true;
}

/* A prefix may end in '/' or be empty. */
static bool prefix_valid(const char *prefix)
{
    char buf[STORE_KEY_MAX + 2];
    size_t len = strlen(prefix);

    if (len == 0)
        return true;
    if (len > STORE_KEY_MAX)
        return false;
    memcpy(buf, prefix, len + 1);
    if (buf[len - 1] == '/')
        buf[len - 1] = '\0';
    return store_key_valid(buf);
}

enum deferred_kind { DEFER_DONE, DEFER_GET, DEFER_LIST };

struct deferred {
    enum deferred_kind kind;
    int err;
    char msg[STORE_KEY_MAX + 128];
    store_done_fn done;
    store_get_fn got;
    store_list_fn listed;
    void *arg;
};

static void on_deferred(evutil_socket_t fd, short what, void *arg)
{
    struct deferred *d = arg;

    if (d->kind == DEFER_DONE)
        d->done(d->arg, d->err, d->msg);
    else if (d->kind == DEFER_GET)
        d->got(d->arg, d->err, d->msg, NULL, 0);
    else
        d->listed(d->arg, d->err, d->msg, NULL, 0);
    free(d);
}

/* Report err through the callback on the next loop turn: a callback never
 * runs inside the call that started the operation. */
static void defer(struct store *s, struct deferred d, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void defer(struct store *s, struct deferred d, const char *fmt, ...)
{
    struct deferred *p = malloc(sizeof(*p));
    struct timeval now = { 0, 0 };
    va_list ap;

    if (!p)
        return; /* out of memory: nothing left to report with */
    *p = d;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
    va_end(ap);
    if (event_base_once(s->base, -1, EV_TIMEOUT, on_deferred, p, &now) < 0)
        free(p);
}

#define BAD_KEY "invalid store key '%.1100s': keys are relative paths of letters, digits, '.', '_', '-'"

static void count(struct store *s)
{
    if (!s->backend->counts_requests)
        s->requests++;
}

uint64_t store_requests(const struct store *s)
{
    return s->requests;
}

void store_put(struct store *s, const char *key, const void *data, size_t len,
               store_done_fn done, void *arg)
{
    store_put_hashed(s, key, data, len, NULL, done, arg);
}

void store_put_hashed(struct store *s, const char *key, const void *data, size_t len,
                      const uint8_t sha256[32], store_done_fn done, void *arg)
{
    struct deferred d = { .kind = DEFER_DONE, .done = done, .arg = arg, .err = -EINVAL };

    if (!store_key_valid(key))
        return defer(s, d, BAD_KEY, key);
    d.err = -ENOMEM;
    count(s);
    if (s->backend->put(s, key, data, len, sha256, done, arg) < 0)
        defer(s, d, "out of memory storing '%s'", key);
}

void store_put_new(struct store *s, const char *key, const void *data, size_t len,
                   const uint8_t *sha256, store_done_fn done, void *arg)
{
    struct deferred d = { .kind = DEFER_DONE, .done = done, .arg = arg, .err = -EINVAL };

    if (!store_key_valid(key))
        return defer(s, d, BAD_KEY, key);
    d.err = -EOPNOTSUPP;
    if (!s->backend->put_new)
        return defer(s, d, "%s cannot create '%s' only where nothing is", s->url, key);
    d.err = -ENOMEM;
    count(s);
    if (s->backend->put_new(s, key, data, len, sha256, done, arg) < 0)
        defer(s, d, "out of memory storing '%s'", key);
}

bool store_put_new_trusted(const struct store *s)
{
    return s->backend->put_new && s->backend->put_new_trusted;
}

void store_get(struct store *s, const char *key, size_t max, store_get_fn got, void *arg)
{
    struct deferred d = { .kind = DEFER_GET, .got = got, .arg = arg, .err = -EINVAL };

    if (!store_key_valid(key))
        return defer(s, d, BAD_KEY, key);
    d.err = -ENOMEM;
    count(s);
    if (s->backend->get(s, key, max, got, arg) < 0)
        defer(s, d, "out of memory reading '%s'", key);
}

void store_list(struct store *s, const char *prefix, store_list_fn listed, void *arg)
{
    struct deferred d = { .kind = DEFER_LIST, .listed = listed, .arg = arg, .err = -EINVAL };

    if (!prefix_valid(prefix))
        return defer(s, d, BAD_KEY, prefix);
    d.err = -ENOMEM;
    count(s);
    if (s->backend->list(s, prefix, listed, arg) < 0)
        defer(s, d, "out of memory listing '%s'", prefix);
}

void store_delete(struct store *s, const char *key, store_done_fn done, void *arg)
{
    struct deferred d = { .kind = DEFER_DONE, .done = done, .arg = arg, .err = -EINVAL };

    if (!store_key_valid(key))
        return defer(s, d, BAD_KEY, key);
    d.err = -ENOMEM;
    count(s);
    if (s->backend->del(s, key, done, arg) < 0)
        defer(s, d, "out of memory deleting '%s'", key);
}

int store_open(const char *url, const struct store_ctx *ctx, struct store **ret, char *err,
               size_t errlen)
{
    const struct store_backend *const *b = backends;

    for (; *b; b++) {
        struct store *s;
        char *copy;
        int r;

        if (strncmp(url, (*b)->scheme, strlen((*b)->scheme)) != 0)
            continue;
        copy = strdup(url);
        if (!copy) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        r = (*b)->open(url, ctx, &s, err, errlen);
        if (r < 0) {
            free(copy);
            return r;
        }
        s->url = copy;
        s->base = ctx->base;
        *ret = s;
        return 0;
    }
    snprintf(err, errlen, "invalid store '%s': expected file:///path or s3://bucket/prefix", url);
    return -EINVAL;
}

struct store *store_close(struct store *s)
{
    if (!s)
        return NULL;
    free(s->url);
    s->backend->close(s);
    return NULL;
}

bool store_wants_sha256(const struct store *s)
{
    return s->backend->wants_sha256;
}

bool store_remote(const struct store *s)
{
    return s->backend->remote;
}

const char *store_url(const struct store *s)
{
    return s->url;
}

void store_entries_free(struct store_entry *entries, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(entries[i].key);
    free(entries);
}
