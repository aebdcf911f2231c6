/* snap: the snapshot engine (see snap.h): the struct snap every operation
 * runs on, the listing of generations with their commit records, the
 * fetching and checking of manifests, and the commit.  The operations
 * built on them have a file each: snap_save.c, snap_fetch.c (restore,
 * check, verify) and snap_gc.c, and snap_latest.c the pointer
 * <job>/LATEST; snap_impl.h holds what they share.
 *
 * Every operation keeps the first error, stops starting work, and reports
 * once the work in flight has drained: a callback never races a pool job
 * or a store request that still holds its buffers. */
#include "spot/snap.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spot/bigbuf.h"
#include "spot/genclaim.h"
#include "spot/jobtree.h"
#include "spot/store.h"

#include "snap_impl.h"

#define COMMIT_MAX (1024 * 1024)

/* ---- the engine ----------------------------------------------------------- */

struct snap *snap_new(const struct snap_opts *o, char *err, size_t errlen)
{
    struct snap *s;
    size_t inflight = o->max_inflight_bytes ? o->max_inflight_bytes : SNAP_INFLIGHT_DEFAULT;
    uint32_t cs = o->chunk_size ? o->chunk_size : SNAP_CHUNK_DEFAULT;

    if (!o->job || !manifest_job_valid(o->job)) {
        snprintf(err, errlen, "invalid job name '%.200s': 1 to 128 letters, digits, '.', '_', '-'",
                 o->job ? o->job : "");
        return NULL;
    }
    if (cs < 64 * 1024 || cs > CHUNK_MAX_PLAIN) {
        snprintf(err, errlen, "chunk size %u out of range (64 KiB to 64 MiB)", cs);
        return NULL;
    }
    if (!(s = calloc(1, sizeof(*s)))) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->base = o->base;
    s->pool = o->pool;
    s->store = o->store;
    snprintf(s->job, sizeof(s->job), "%s", o->job);
    s->chunk_size = cs;
    s->max_tasks = (unsigned)(inflight / cs);
    if (s->max_tasks < 2)
        s->max_tasks = 2;
    s->level = o->zstd_level ? o->zstd_level : 1;
    s->min_saving = o->min_saving > 0 ? o->min_saving : SNAP_MIN_SAVING_DEFAULT;
    s->sign = store_wants_sha256(o->store);
    if (o->key && jobkey_init(&s->key, o->key) < 0) {
        snprintf(err, errlen, "cannot derive the job key's id (OpenSSL failed)");
        return snap_free(s);
    }
    s->keyed = o->key != NULL;
    s->preserve_special_modes = o->preserve_special_modes;
    if (!(s->claims = genclaim_new(o->base, o->store, s->job))) {
        snprintf(err, errlen, "out of memory");
        return snap_free(s);
    }
    return s;
}

struct snap *snap_free(struct snap *s)
{
    if (!s)
        return NULL;
    hset_clear(&s->known);
    hset_clear(&s->stored);
    seen_clear(&s->seen);
    bigbuf_trim();
    jobkey_clear(&s->key);
    genclaim_free(s->claims);
    store_entries_free(s->foreign, s->n_foreign);
    free(s);
    return NULL;
}

uint32_t snap_chunk_size(const struct snap *s)
{
    return s->chunk_size;
}

const char *snap_key_id(const struct snap *s)
{
    return s->keyed ? s->key.id : NULL;
}

void snap_refusal(const struct snap *s, const struct snap_gen *g, char *buf, size_t size)
{
    jobkey_refusal(buf, size, s->keyed ? &s->key : NULL, &g->commit, g->auth);
}

void snap_chunk_key(const struct snap *s, const uint8_t *hash, char *key, size_t size)
{
    char hex[2 * CHUNK_HASH_LEN + 1];

    hash_hex(hash, hex);
    snprintf(key, size, "%s/chunks/%.2s/%s", s->job, hex, hex);
}

int64_t snap_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fail_msg(int *err, char *msg, int e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_msg(int *err, char *msg, int e, const char *fmt, ...)
{
    va_list ap;

    if (*err)
        return; /* the first error is the one reported */
    *err = e;
    va_start(ap, fmt);
    vsnprintf(msg, MSG_MAX, fmt, ap);
    va_end(ap);
}

/* ---- errors found before any work ----------------------------------------- */

static void on_early(evutil_socket_t fd, short what, void *arg);

void snap_early(struct snap *s, void (*report)(struct early *), union snap_cb cb, void *arg,
                int err, const char *fmt, ...)
{
    struct early *e = calloc(1, sizeof(*e));
    struct timeval now = { 0, 0 };
    va_list ap;

    if (!e)
        return;
    e->err = err;
    e->report = report;
    e->cb = cb;
    e->arg = arg;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    if (event_base_once(s->base, -1, EV_TIMEOUT, on_early, e, &now) < 0)
        free(e);
}

static void on_early(evutil_socket_t fd, short what, void *arg)
{
    struct early *e = arg;

    e->report(e);
    free(e);
}

void snap_early_done(struct early *e)
{
    e->cb.done(e->arg, e->err, e->msg);
}

/* ---- listing generations -------------------------------------------------- */

struct commit_get {
    struct gens_op *g;
    size_t idx;
};

static void gens_report(struct gens_op *g);
static void early_gens(struct early *e);
static void on_gens_listed(void *arg, int err, const char *msg, struct store_entry *e, size_t n);
static void on_commit_got(void *arg, int err, const char *msg, void *data, size_t len);
static int keep_foreign(struct snap *s, const struct store_entry *e, size_t n);
static int cmp_gen(const void *a, const void *b);

void snap_gens(struct snap *s, snap_gens_fn done, void *arg)
{
    struct gens_op *g = snap_gens_op_start(s, gens_report, NULL);

    if (!g) {
        snap_early(s, early_gens, (union snap_cb){ .gens = done }, arg, -ENOMEM, "out of memory");
        return;
    }
    g->done = done;
    g->arg = arg;
}

static void gens_report(struct gens_op *g)
{
    if (g->err) {
        g->done(g->arg, g->err, g->msg, NULL, 0);
    } else {
        struct snap_gen *gens = g->gens;
        size_t n = g->n;

        g->gens = NULL;
        g->n = 0;
        g->done(g->arg, 0, "", gens, n);
    }
    snap_gens_op_free(g);
}

static void early_gens(struct early *e)
{
    e->cb.gens(e->arg, e->err, e->msg, NULL, 0);
}

void snap_gens_free(struct snap_gen *gens, size_t n)
{
    for (size_t i = 0; i < n; i++)
        commit_release(&gens[i].commit);
    free(gens);
}

/* List and read commit records, then call next(g) on the loop. */
struct gens_op *snap_gens_op_start(struct snap *s, void (*next)(struct gens_op *), void *owner)
{
    struct gens_op *g = calloc(1, sizeof(*g));

    if (!g)
        return NULL;
    g->s = s;
    g->next = next;
    g->owner = owner;
    snap_gens_list(g);
    return g;
}

/* The whole listing of <job>/gens/ (g->all), into g. */
void snap_gens_list(struct gens_op *g)
{
    char prefix[STORE_KEY_MAX + 1];

    g->all = true;
    snprintf(prefix, sizeof(prefix), "%s/gens/", g->s->job);
    store_list(g->s->store, prefix, on_gens_listed, g);
}

/* Only generation gen: one listing of its own prefix. */
struct gens_op *snap_gens_op_one(struct snap *s, uint64_t gen, void (*next)(struct gens_op *),
                                 void *owner)
{
    struct gens_op *g = calloc(1, sizeof(*g));
    char prefix[STORE_KEY_MAX + 1];

    if (!g)
        return NULL;
    g->s = s;
    g->next = next;
    g->owner = owner;
    snprintf(prefix, sizeof(prefix), "%s/gens/%08llu/", s->job, (unsigned long long)gen);
    store_list(s->store, prefix, on_gens_listed, g);
    return g;
}

static void on_gens_listed(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct gens_op *g = arg;

    if (err) {
        fail_msg(&g->err, g->msg, err, "%s", msg);
        g->next(g);
        return;
    }
    snap_gens_build(g, e, n);
}

/* The generations of listing e (which becomes g's), their commit records
 * read, then next(g). */
void snap_gens_build(struct gens_op *g, struct store_entry *e, size_t n)
{
    struct snap *s = g->s;
    size_t cap = 0;

    g->entries = e;
    g->n_entries = n;
    if (keep_foreign(s, e, n) < 0) {
        fail_msg(&g->err, g->msg, -ENOMEM, "out of memory");
        g->next(g);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct jobtree_name jn;
        struct snap_gen *sg = NULL;

        /* Only the format's own names make a generation: an operator's
         * gens/00000009/COMMIT.json.bak is foreign, not generation 9. */
        if (!jobtree_in_gen(jobtree_parse(s->job, e[i].key, &jn)))
            continue;
        for (size_t j = 0; j < g->n; j++)
            if (g->gens[j].gen == jn.gen)
                sg = &g->gens[j];
        if (!sg) {
            if (g->n == cap) {
                struct snap_gen *ng = realloc(g->gens, (cap ? 2 * cap : 16) * sizeof(*ng));
                if (!ng) {
                    fail_msg(&g->err, g->msg, -ENOMEM, "out of memory");
                    g->next(g);
                    return;
                }
                g->gens = ng;
                cap = cap ? 2 * cap : 16;
            }
            sg = &g->gens[g->n++];
            memset(sg, 0, sizeof(*sg));
            sg->gen = jn.gen;
        }
        if (e[i].mtime_ms > sg->mtime_ms)
            sg->mtime_ms = e[i].mtime_ms;
        sg->stored_bytes += e[i].size;
        if (jn.kind == JOBTREE_MANIFEST)
            sg->manifests++;
        else if (jn.kind == JOBTREE_COMMIT)
            sg->committed = true; /* for now: "has a record"; checked below */
    }
    if (g->n)
        qsort(g->gens, g->n, sizeof(*g->gens), cmp_gen);
    g->pending = 1;
    for (size_t i = 0; i < g->n; i++) {
        struct commit_get *cg;
        char key[STORE_KEY_MAX + 1];

        if (!g->gens[i].committed)
            continue;
        g->gens[i].committed = false;
        if (!(cg = malloc(sizeof(*cg)))) {
            fail_msg(&g->err, g->msg, -ENOMEM, "out of memory");
            break;
        }
        cg->g = g;
        cg->idx = i;
        commit_key(key, sizeof(key), s->job, g->gens[i].gen);
        g->pending++;
        store_get(s->store, key, COMMIT_MAX, on_commit_got, cg);
    }
    if (--g->pending == 0)
        g->next(g);
}

static void on_commit_got(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct commit_get *cg = arg;
    struct gens_op *g = cg->g;
    struct snap_gen *sg = &g->gens[cg->idx];
    const char *why = NULL;

    free(cg);
    if (err == -ENOENT) {
        /* Deleted since the listing (GC): not committed. */
    } else if (err) {
        fail_msg(&g->err, g->msg, err, "%s", msg);
    } else {
        struct commit c;
        int r = commit_parse(data, len, &c, &why);

        if (r == 0 && (c.gen != sg->gen || strcmp(c.job, g->s->job) != 0)) {
            commit_release(&c);
            r = -EINVAL;
            why = "it names another job or generation";
        }
        if (r == 0 && (r = jobkey_check(g->s->keyed ? &g->s->key : NULL, &c, &sg->auth)) < 0)
            commit_release(&c);
        if (r == 0) {
            /* With a key, only what it signed is committed. */
            sg->commit = c;
            sg->committed = !g->s->keyed || sg->auth == JOBKEY_AUTHENTIC;
            sg->unauthentic = !sg->committed;
        } else if (r == -ENOMEM || r == -EIO) {
            fail_msg(&g->err, g->msg, r, "%s", r == -ENOMEM ? "out of memory"
                                                            : "cannot check a commit record's "
                                                              "signature (OpenSSL failed)");
        } else {
            sg->corrupt = true;
        }
    }
    free(data);
    if (--g->pending == 0)
        g->next(g);
}

void snap_gens_op_free(struct gens_op *g)
{
    snap_gens_free(g->gens, g->n);
    store_entries_free(g->entries, g->n_entries);
    free(g);
}

/* The listing's foreign objects, copied into s (snap_foreign()). */
static int keep_foreign(struct snap *s, const struct store_entry *e, size_t n)
{
    struct store_entry *f = NULL;
    size_t nf = 0, cap = 0;

    for (size_t i = 0; i < n; i++) {
        if (jobtree_parse(s->job, e[i].key, NULL) != JOBTREE_FOREIGN)
            continue;
        if (nf == cap) {
            struct store_entry *nfe = realloc(f, (cap ? 2 * cap : 8) * sizeof(*f));

            if (!nfe) {
                store_entries_free(f, nf);
                return -ENOMEM;
            }
            f = nfe;
            cap = cap ? 2 * cap : 8;
        }
        if (!(f[nf].key = strdup(e[i].key))) {
            store_entries_free(f, nf);
            return -ENOMEM;
        }
        f[nf].size = e[i].size;
        f[nf++].mtime_ms = e[i].mtime_ms;
    }
    store_entries_free(s->foreign, s->n_foreign);
    s->foreign = f;
    s->n_foreign = nf;
    return 0;
}

size_t snap_foreign(const struct snap *s, const struct store_entry **ret)
{
    *ret = s->foreign;
    return s->n_foreign;
}

static int cmp_gen(const void *a, const void *b)
{
    uint64_t x = ((const struct snap_gen *)a)->gen, y = ((const struct snap_gen *)b)->gen;

    return x < y ? -1 : x > y;
}

/* ---- fetching and checking manifests --------------------------------------- */

struct mf_get {
    struct mf_fetch *f;
    uint32_t rank;
};

static void on_mf_none(evutil_socket_t fd, short what, void *arg);
static void on_manifest_got(void *arg, int err, const char *msg, void *data, size_t len);

/* only: fetch this rank alone (UINT32_MAX: all). */
struct mf_fetch *snap_mf_fetch_start(struct snap *s, const struct commit *c, uint32_t only,
                                     bool parse, void (*next)(struct mf_fetch *), void *owner)
{
    struct mf_fetch *f = calloc(1, sizeof(*f));

    if (!f)
        return NULL;
    f->s = s;
    f->c = c;
    f->next = next;
    f->owner = owner;
    f->parse = parse;
    f->mfs = calloc(c->world_size, sizeof(*f->mfs));
    f->digests = calloc(c->world_size, sizeof(*f->digests));
    if (!f->mfs || !f->digests) {
        free(f->mfs);
        free(f->digests);
        free(f);
        return NULL;
    }
    for (uint32_t i = 0; i < c->world_size; i++)
        memcpy(f->digests[i], c->ranks[i].sha256, CHUNK_HASH_LEN);
    f->pending = 1;
    for (uint32_t r = 0; r < c->world_size; r++) {
        struct mf_get *mg;
        char key[STORE_KEY_MAX + 1];

        if (only != UINT32_MAX && r != only)
            continue;
        if (!(mg = malloc(sizeof(*mg)))) {
            fail_msg(&f->err, f->msg, -ENOMEM, "out of memory");
            break;
        }
        mg->f = f;
        mg->rank = r;
        manifest_key(key, sizeof(key), s->job, c->gen, r);
        f->pending++;
        store_get(s->store, key, MANIFEST_MAX, on_manifest_got, mg);
    }
    if (--f->pending == 0) {
        /* Nothing started (out of memory): report from the loop all the
         * same, never inside the caller's call. */
        struct timeval now = { 0, 0 };

        f->pending = 1;
        if (event_base_once(s->base, -1, EV_TIMEOUT, on_mf_none, f, &now) < 0)
            f->next(f);
    }
    return f;
}

static void on_mf_none(evutil_socket_t fd, short what, void *arg)
{
    struct mf_fetch *f = arg;

    f->next(f);
}

static void on_manifest_got(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct mf_get *mg = arg;
    struct mf_fetch *f = mg->f;
    uint32_t rank = mg->rank;
    uint8_t sha[CHUNK_HASH_LEN];
    const char *why = NULL;

    free(mg);
    if (err == -ENOENT) {
        fail_msg(&f->err, f->msg, -ENOENT,
                 "generation %llu: the manifest of rank %u is missing from the store",
                 (unsigned long long)f->c->gen, rank);
    } else if (err) {
        fail_msg(&f->err, f->msg, err, "%s", msg);
    } else if (hash_sha256(data, len, sha) < 0) {
        fail_msg(&f->err, f->msg, -EIO, "cannot hash a manifest");
    } else if (memcmp(sha, f->digests[rank], CHUNK_HASH_LEN) != 0) {
        fail_msg(&f->err, f->msg, -EBADMSG,
                 "generation %llu: the manifest of rank %u does not match the digest the "
                 "commit record holds (damaged or replaced in the store)",
                 (unsigned long long)f->c->gen, rank);
    } else if (f->parse) {
        int r = manifest_parse(data, len, &f->mfs[rank], &why);

        if (r < 0)
            fail_msg(&f->err, f->msg, r == -ENOMEM ? r : -EBADMSG,
                     "generation %llu: the manifest of rank %u is invalid: %s",
                     (unsigned long long)f->c->gen, rank, why ? why : "out of memory");
        else if (f->mfs[rank].rank != rank || f->mfs[rank].gen != f->c->gen ||
                 strcmp(f->mfs[rank].job, f->s->job) != 0)
            fail_msg(&f->err, f->msg, -EBADMSG,
                     "generation %llu: the manifest of rank %u names another job, generation "
                     "or rank", (unsigned long long)f->c->gen, rank);
    }
    free(data);
    if (--f->pending == 0)
        f->next(f);
}

void snap_mf_fetch_free(struct mf_fetch *f)
{
    if (f->mfs)
        for (uint32_t i = 0; i < f->c->world_size; i++)
            manifest_release(&f->mfs[i]);
    free(f->mfs);
    free(f->digests);
    free(f);
}

/* ---- commit --------------------------------------------------------------- */

struct commit_op {
    struct snap *s;
    struct commit c;
    snap_done_fn done;
    void *arg;
    char *json;
    size_t json_len;
};

static void on_commit_checked(struct mf_fetch *f);
static void on_commit_put(void *arg, int err, const char *msg);
static void on_commit_there(void *arg, int err, const char *msg, void *data, size_t len);
static void commit_op_end(struct commit_op *op, int err, const char *msg);
static void commit_point(struct commit_op *op);
static void on_pointer_put(void *arg, int err, const char *msg);

void snap_claim(struct snap *s, uint64_t from, snap_claim_fn done, void *arg)
{
    genclaim_claim(s->claims, from, done, arg);
}

void snap_withdraw(struct snap *s, uint64_t gen, snap_done_fn done, void *arg)
{
    genclaim_withdraw(s->claims, gen, done, arg);
}

void snap_commit(struct snap *s, const struct commit *c, snap_done_fn done, void *arg)
{
    struct commit_op *op;

    if (strcmp(c->job, s->job) != 0 || c->gen == 0 || c->gen > GEN_MAX || c->world_size == 0 ||
        c->world_size > WORLD_MAX) {
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -EINVAL,
                   "invalid commit record");
        return;
    }
    for (uint32_t i = 0; i < c->world_size; i++)
        if (c->ranks[i].rank != i) {
            snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -EINVAL,
                       "invalid commit record: rank %u at index %u", c->ranks[i].rank, i);
            return;
        }
    op = calloc(1, sizeof(*op));
    if (op) {
        op->c = *c;
        op->c.ranks = malloc(c->world_size * sizeof(*c->ranks));
    }
    if (!op || !op->c.ranks) {
        free(op);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                   "out of memory");
        return;
    }
    memcpy(op->c.ranks, c->ranks, c->world_size * sizeof(*c->ranks));
    op->s = s;
    op->done = done;
    op->arg = arg;
    if (!snap_mf_fetch_start(s, &op->c, UINT32_MAX, false, on_commit_checked, op)) {
        commit_release(&op->c);
        free(op);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                   "out of memory");
    }
}

static void on_commit_checked(struct mf_fetch *f)
{
    struct commit_op *op = f->owner;
    char key[STORE_KEY_MAX + 1];

    if (f->err) {
        char msg[MSG_MAX];

        snprintf(msg, sizeof(msg), "cannot commit: %.4000s", f->msg);
        snap_mf_fetch_free(f);
        commit_op_end(op, -EBADMSG, msg);
        return;
    }
    snap_mf_fetch_free(f);
    op->c.has_mac = false;
    if (op->s->keyed && jobkey_sign(&op->s->key, &op->c) < 0) {
        commit_op_end(op, -EIO, "cannot sign the commit record (out of memory, or OpenSSL "
                      "failed)");
        return;
    }
    op->json = commit_to_json(&op->c, &op->json_len);
    if (!op->json) {
        commit_op_end(op, -ENOMEM, "out of memory");
        return;
    }
    commit_key(key, sizeof(key), op->s->job, op->c.gen);
    if (genclaim_conditional(op->s->claims))
        store_put_new(op->s->store, key, op->json, op->json_len, NULL, on_commit_put, op);
    else
        store_put(op->s->store, key, op->json, op->json_len, on_commit_put, op);
}

static void on_commit_put(void *arg, int err, const char *msg)
{
    struct commit_op *op = arg;
    char key[STORE_KEY_MAX + 1];

    if (err == -EEXIST) {
        commit_key(key, sizeof(key), op->s->job, op->c.gen);
        store_get(op->s->store, key, COMMIT_MAX, on_commit_there, op);
        return;
    }
    if (!err)
        commit_point(op);
    else
        commit_op_end(op, err, msg);
}

/* Committed: <job>/LATEST names the generation now (snap_latest.c).  A
 * pointer that could not be written leaves the commit as it is: readers
 * check the pointer and look above it, and the next commit or gc writes
 * it again. */
static void commit_point(struct commit_op *op)
{
    snap_latest_put(op->s, op->c.gen, on_pointer_put, op);
}

static void on_pointer_put(void *arg, int err, const char *msg)
{
    commit_op_end(arg, 0, "");
}

/* A record already there: the same generation of the same manifests
 * (authentic, with a key) is this commit; anything else is another's. */
static void on_commit_there(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct commit_op *op = arg;
    const struct commit *c = &op->c;
    enum jobkey_auth auth = JOBKEY_UNSIGNED;
    const char *why = NULL;
    struct commit old;
    bool same = false;

    if (!err && commit_parse(data, len, &old, &why) == 0) {
        same = strcmp(old.job, c->job) == 0 && old.gen == c->gen &&
               old.world_size == c->world_size &&
               (!op->s->keyed ||
                (jobkey_check(&op->s->key, &old, &auth) == 0 && auth == JOBKEY_AUTHENTIC));
        for (uint32_t r = 0; same && r < c->world_size; r++)
            same = memcmp(old.ranks[r].sha256, c->ranks[r].sha256, CHUNK_HASH_LEN) == 0;
        commit_release(&old);
    }
    free(data);
    if (same)
        commit_point(op);
    else if (err && err != -ENOENT)
        commit_op_end(op, err, msg);
    else
        commit_op_end(op, -EEXIST, err ? "cannot commit: its commit record came and went"
                                       : "cannot commit: another writer committed this "
                                         "generation number first; nothing was overwritten");
}

static void commit_op_end(struct commit_op *op, int err, const char *msg)
{
    op->done(op->arg, err, msg);
    free(op->json);
    commit_release(&op->c);
    free(op);
}
