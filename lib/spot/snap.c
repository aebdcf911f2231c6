/* snap: the snapshot engine (see snap.h).
 *
 * DESIGN.  A save walks the directory in the pool, then runs a window of
 * at most max_tasks chunk tasks.  Each task goes
 *
 *   pool: pread, zero check, SHA-256     (stage 1)
 *   loop: zero? known? being stored?     -> done, or
 *   pool: zstd or raw, payload SHA-256   (stage 2)
 *   loop: store_put_hashed()             -> done
 *
 * and frees its buffer when done, so memory is max_tasks chunks whatever
 * the size of the checkpoint.  "Known" is two hash sets: the chunks of the
 * newest committed generation (loaded from its manifests before the
 * first task), and the chunks this generation has stored or is storing
 * (several ranks saved by one process share them; a task that finds its
 * chunk being stored waits for that put).  Deduplicating against the
 * newest committed generation only is what keeps GC safe: GC never
 * deletes what the newest committed generations reference.
 *
 * A restore first refuses a manifest it cannot reproduce exactly and
 * safely (restore_check(): the manifest is anyone's who can write the
 * store), creates the files (sparse, at their final sizes) beside the
 * destination, below a descriptor of that folder, then runs a window of
 * chunk tasks (get, then in the pool: decode, hash check, pwrite), makes
 * the links, sets modes and mtimes, and renames the whole tree into
 * place.  Verify is a restore that writes nothing.
 *
 * Every operation keeps the first error, stops starting work, and reports
 * once the work in flight has drained: a callback never races a pool job
 * or a store request that still holds its buffers. */
#include "spot/snap.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "spot/dircheck.h"
#include "spot/genclaim.h"
#include "spot/pool.h"
#include "spot/store.h"
#include "spot/zipgrid.h"

#include "snap_impl.h"

#define COMMIT_MAX (1024 * 1024)
#define REFETCH_MAX 2             /* a chunk that arrives corrupt is fetched again */
#define SCAN_DEPTH_MAX 64
#define SCAN_FILES_MAX 1000000

/* ---- the engine ----------------------------------------------------------- */

/* Chunk buffers (a whole chunk and room for its trailer) are reused: a fresh
 * multi-megabyte allocation costs a page fault per 4 KiB, and memory
 * returned to the allocator does not always leave the process. */
static uint8_t *buf_get(struct snap *s)
{
    if (s->n_free > 0)
        return s->free_bufs[--s->n_free];
    return malloc((size_t)s->chunk_size + CHUNK_TRAILER_LEN);
}

static void buf_put(struct snap *s, uint8_t *b)
{
    if (b && s->n_free < s->max_tasks)
        s->free_bufs[s->n_free++] = b;
    else
        free(b);
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

void snap_chunk_key(const struct snap *s, const uint8_t *hash, char *key, size_t size)
{
    char hex[2 * CHUNK_HASH_LEN + 1];

    chunk_hex(hash, hex);
    snprintf(key, size, "%s/chunks/%.2s/%s", s->job, hex, hex);
}

int64_t snap_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
    s->free_bufs = calloc(s->max_tasks, sizeof(*s->free_bufs));
    if (!s->free_bufs) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
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

const char *snap_key_id(const struct snap *s)
{
    return s->keyed ? s->key.id : NULL;
}

void snap_refusal(const struct snap *s, const struct snap_gen *g, char *buf, size_t size)
{
    jobkey_refusal(buf, size, s->keyed ? &s->key : NULL, &g->commit, g->auth);
}

struct snap *snap_free(struct snap *s)
{
    if (!s)
        return NULL;
    hset_clear(&s->known);
    hset_clear(&s->stored);
    while (s->n_free > 0)
        free(s->free_bufs[--s->n_free]);
    free(s->free_bufs);
    jobkey_clear(&s->key);
    genclaim_free(s->claims);
    free(s);
    return NULL;
}

/* ---- listing generations -------------------------------------------------- */

/* Parse "<job>/gens/<8 digits>/<name>": the generation and the name. */
bool snap_gen_key(const struct snap *s, const char *key, uint64_t *gen, const char **name)
{
    size_t jl = strlen(s->job);
    uint64_t g = 0;

    if (strncmp(key, s->job, jl) != 0 || strncmp(key + jl, "/gens/", 6) != 0)
        return false;
    key += jl + 6;
    for (int i = 0; i < 8; i++) {
        if (key[i] < '0' || key[i] > '9')
            return false;
        g = g * 10 + (uint64_t)(key[i] - '0');
    }
    if (key[8] != '/' || strchr(key + 9, '/'))
        return false;
    *gen = g;
    *name = key + 9;
    return true;
}

/* A rank manifest's name: "rank-<r>.json", r without leading zeros. */
static bool rank_name(const char *name, uint32_t *rank)
{
    uint64_t r = 0;
    const char *p = name + 5;

    if (strncmp(name, "rank-", 5) != 0 || *p < '0' || *p > '9' || (*p == '0' && p[1] != '.'))
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        r = r * 10 + (uint64_t)(*p - '0');
        if (r >= WORLD_MAX)
            return false;
    }
    if (strcmp(p, ".json") != 0)
        return false;
    *rank = (uint32_t)r;
    return true;
}

static int cmp_gen(const void *a, const void *b)
{
    uint64_t x = ((const struct snap_gen *)a)->gen, y = ((const struct snap_gen *)b)->gen;

    return x < y ? -1 : x > y;
}

struct commit_get {
    struct gens_op *g;
    size_t idx;
};

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

static void on_gens_listed(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct gens_op *g = arg;
    struct snap *s = g->s;
    size_t cap = 0;

    if (err) {
        fail_msg(&g->err, g->msg, err, "%s", msg);
        g->next(g);
        return;
    }
    g->entries = e;
    g->n_entries = n;
    for (size_t i = 0; i < n; i++) {
        uint64_t gen;
        const char *name;
        struct snap_gen *sg = NULL;
        uint32_t rank;

        if (!snap_gen_key(s, e[i].key, &gen, &name))
            continue;
        for (size_t j = 0; j < g->n; j++)
            if (g->gens[j].gen == gen)
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
            sg->gen = gen;
        }
        if (e[i].mtime_ms > sg->mtime_ms)
            sg->mtime_ms = e[i].mtime_ms;
        sg->stored_bytes += e[i].size;
        if (rank_name(name, &rank))
            sg->manifests++;
        else if (strcmp(name, "COMMIT.json") == 0)
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

void snap_gens_op_free(struct gens_op *g)
{
    snap_gens_free(g->gens, g->n);
    store_entries_free(g->entries, g->n_entries);
    free(g);
}

/* List and read commit records, then call next(g) on the loop. */
struct gens_op *snap_gens_op_start(struct snap *s, void (*next)(struct gens_op *), void *owner)
{
    struct gens_op *g = calloc(1, sizeof(*g));
    char prefix[STORE_KEY_MAX + 1];

    if (!g)
        return NULL;
    g->s = s;
    g->next = next;
    g->owner = owner;
    snprintf(prefix, sizeof(prefix), "%s/gens/", s->job);
    store_list(s->store, prefix, on_gens_listed, g);
    return g;
}

void snap_gens_free(struct snap_gen *gens, size_t n)
{
    for (size_t i = 0; i < n; i++)
        commit_release(&gens[i].commit);
    free(gens);
}

static void on_early(evutil_socket_t fd, short what, void *arg)
{
    struct early *e = arg;

    e->report(e);
    free(e);
}

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

/* ---- fetching and checking manifests --------------------------------------- */

struct mf_get {
    struct mf_fetch *f;
    uint32_t rank;
};

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
    } else if (chunk_sha256(data, len, sha) < 0) {
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

static void on_mf_none(evutil_socket_t fd, short what, void *arg)
{
    struct mf_fetch *f = arg;

    f->next(f);
}

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

/* ---- save ----------------------------------------------------------------- */

struct task {
    struct pool_job job;
    struct save *sv;
    size_t file, idx;
    uint64_t off;
    uint32_t len;
    uint8_t *buf;
    uint8_t hash[CHUNK_HASH_LEN];
    uint8_t payload_sha[CHUNK_HASH_LEN];
    struct chunk_hasher hasher;  /* the plaintext's hash state, for payload_sha */
    bool zero;
    int stage;
    int err;
    uint64_t cpu_ns;             /* the worker thread's CPU time on this stage */
    char msg[MSG_MAX];
    struct chunk_enc enc;
    char key[STORE_KEY_MAX + 1];
    struct task *next_waiter;
};

struct save {
    struct snap *s;
    struct snap_save_req req;
    char *dir, *method;
    struct snap_counters *c, own;
    snap_saved_fn done;
    void *arg;
    struct manifest m;
    struct pool_job scan;
    size_t next_file, next_chunk;
    uint64_t next_off;
    unsigned alive;
    bool scanned, manifest_sent;
    int err;
    char msg[MSG_MAX];
    char *json;
    size_t json_len;
    struct snap_saved result;
    struct save *next_waiter;    /* in s->known_waiters */
    struct save *prev_active, *next_active;
    bool is_active;
    /* a split save: the chunks left to other ranks, and whether they are
     * being stored here after all (redo) */
    struct deferred {
        size_t file, idx;
        uint64_t off;
        uint32_t len;
    } *def;
    size_t n_def, cap_def, next_def;
    bool split_wait, split_done, redo;
};

static void save_pump(struct save *sv);

static void save_report(struct save *sv)
{
    if (sv->err)
        sv->done(sv->arg, sv->err, sv->msg, NULL);
    else
        sv->done(sv->arg, 0, "", &sv->result);
    manifest_release(&sv->m);
    free(sv->def);
    free(sv->json);
    free(sv->dir);
    free(sv->method);
    free(sv);
}

static void save_fail(struct save *sv, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void save_fail(struct save *sv, int err, const char *fmt, ...)
{
    va_list ap;

    if (sv->err)
        return;
    sv->err = err;
    va_start(ap, fmt);
    vsnprintf(sv->msg, sizeof(sv->msg), fmt, ap);
    va_end(ap);
}

/* -- scanning the directory (pool) -- */

struct scan_state {
    struct save *sv;
    size_t cap;
    char path[PATH_MAX];
};

static ssize_t fd_read(void *ctx, void *buf, size_t len, uint64_t off)
{
    return pread(*(int *)ctx, buf, len, (off_t)off);
}

/* The chunks of f, lengths only: a fixed grid from offset 0, restarted at
 * the data of every large entry when the file is a zip (torch.save), so a
 * tensor that moved keeps its chunks.  fd: the file, -1 if not open. */
static int plan_chunks(const struct snap *s, struct mf_file *f, int fd)
{
    uint64_t *restarts = NULL, p = 0;
    size_t n_restarts = 0, k = 0, n = 0, cap;
    struct mf_chunk *c;

    /* A zip smaller than two chunks gains nothing from it. */
    if (fd >= 0 && f->size >= 2ULL * s->chunk_size &&
        zipgrid_restarts(fd_read, &fd, f->size, s->chunk_size / 4, &restarts, &n_restarts) ==
            -ENOMEM)
        return -ENOMEM;
    cap = (size_t)((f->size + s->chunk_size - 1) / s->chunk_size) + n_restarts;
    if (cap && !(f->chunks = calloc(cap, sizeof(*f->chunks)))) {
        free(restarts);
        return -ENOMEM;
    }
    while (p < f->size) {
        uint64_t end = p + s->chunk_size;

        while (k < n_restarts && restarts[k] <= p)
            k++;
        if (k < n_restarts && restarts[k] < end)
            end = restarts[k];
        if (end > f->size)
            end = f->size;
        c = &f->chunks[n++];
        c->len = (uint32_t)(end - p);
        p = end;
    }
    f->n_chunks = n;
    free(restarts);
    return 0;
}

static int scan_add(struct scan_state *st, const char *rel, const struct stat *stp,
                    enum mf_type type, const char *target, int fd)
{
    struct manifest *m = &st->sv->m;
    struct mf_file *f;

    if (m->n_files >= SCAN_FILES_MAX) {
        save_fail(st->sv, -E2BIG, "'%s' holds more than %d files", st->sv->dir, SCAN_FILES_MAX);
        return -E2BIG;
    }
    if (!manifest_path_valid(rel)) {
        save_fail(st->sv, -EINVAL, "cannot save '%s/%s': the name holds control characters",
                  st->sv->dir, rel);
        return -EINVAL;
    }
    if (m->n_files == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 64;
        struct mf_file *nf = realloc(m->files, cap * sizeof(*nf));
        if (!nf)
            goto oom;
        m->files = nf;
        st->cap = cap;
    }
    f = &m->files[m->n_files];
    memset(f, 0, sizeof(*f));
    if (!(f->path = strdup(rel)))
        goto oom;
    m->n_files++;
    f->type = type;
    f->mode = stp->st_mode & 07777;
    /* Times before 1970 are not worth a signed field in the format. */
    f->mtime_s = stp->st_mtim.tv_sec < 0 ? 0 : stp->st_mtim.tv_sec;
    f->mtime_ns = stp->st_mtim.tv_sec < 0 ? 0 : (uint32_t)stp->st_mtim.tv_nsec;
    if (type == MF_SYMLINK && !(f->target = strdup(target)))
        goto oom;
    if (type == MF_FILE) {
        f->size = (uint64_t)stp->st_size;
        if (plan_chunks(st->sv->s, f, fd) < 0)
            goto oom;
    }
    return 0;
oom:
    save_fail(st->sv, -ENOMEM, "out of memory");
    return -ENOMEM;
}

/* Walk dirfd (whose path below the root is rel, "" for the root). */
static int scan_dir(struct scan_state *st, int dirfd, const char *rel, int depth)
{
    DIR *d;
    struct dirent *de;
    int r = 0;

    if (depth > SCAN_DEPTH_MAX) {
        save_fail(st->sv, -ELOOP, "'%s' is nested more than %d deep", st->sv->dir,
                  SCAN_DEPTH_MAX);
        close(dirfd);
        return -ELOOP;
    }
    if (!(d = fdopendir(dirfd))) {
        save_fail(st->sv, -errno, "cannot read '%s/%s': %s", st->sv->dir, rel, strerror(errno));
        close(dirfd);
        return -errno;
    }
    while (r == 0 && (errno = 0, de = readdir(d))) {
        char sub[PATH_MAX], target[PATH_MAX];
        struct stat stt;
        ssize_t tl;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
            sizeof(sub)) {
            save_fail(st->sv, -ENAMETOOLONG, "a path in '%s' is too long", st->sv->dir);
            r = -ENAMETOOLONG;
            break;
        }
        if (fstatat(dirfd, de->d_name, &stt, AT_SYMLINK_NOFOLLOW) < 0) {
            save_fail(st->sv, -errno, "cannot stat '%s/%s': %s", st->sv->dir, sub,
                      strerror(errno));
            r = -errno;
            break;
        }
        if (S_ISREG(stt.st_mode)) {
            int fd = stt.st_size >= 2 * (off_t)st->sv->s->chunk_size
                         ? openat(dirfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
                         : -1;

            r = scan_add(st, sub, &stt, MF_FILE, NULL, fd);
            if (fd >= 0)
                close(fd);
        } else if (S_ISDIR(stt.st_mode)) {
            int fd = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

            if (fd < 0) {
                save_fail(st->sv, -errno, "cannot open '%s/%s': %s", st->sv->dir, sub,
                          strerror(errno));
                r = -errno;
                break;
            }
            r = scan_add(st, sub, &stt, MF_DIR, NULL, -1);
            if (r == 0)
                r = scan_dir(st, fd, sub, depth + 1);
            else
                close(fd);
        } else if (S_ISLNK(stt.st_mode)) {
            tl = readlinkat(dirfd, de->d_name, target, sizeof(target) - 1);
            if (tl < 0 || tl == 0) {
                save_fail(st->sv, -EIO, "cannot read the link '%s/%s'", st->sv->dir, sub);
                r = -EIO;
                break;
            }
            target[tl] = '\0';
            /* A restore refuses it (snap_restore()): say so now, while the
             * checkpoint can still be fixed, not at the resume. */
            if (!manifest_link_inside(sub, target)) {
                save_fail(st->sv, -EPERM, "cannot save '%s/%s': the link leads to '%s', "
                          "outside the checkpoint directory, and a restore would refuse it; "
                          "make it relative and inside, or remove it", st->sv->dir, sub,
                          target);
                r = -EPERM;
                break;
            }
            r = scan_add(st, sub, &stt, MF_SYMLINK, target, -1);
        } else {
            save_fail(st->sv, -EINVAL,
                      "cannot save '%s/%s': not a regular file, directory or symbolic link "
                      "(sockets, pipes and devices have no place in a checkpoint)",
                      st->sv->dir, sub);
            r = -EINVAL;
        }
    }
    if (r == 0 && errno) {
        save_fail(st->sv, -errno, "cannot read '%s/%s': %s", st->sv->dir, rel, strerror(errno));
        r = -errno;
    }
    closedir(d);
    return r;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const struct mf_file *)a)->path, ((const struct mf_file *)b)->path);
}

static void scan_work(struct pool_job *job)
{
    struct save *sv = (struct save *)((char *)job - offsetof(struct save, scan));
    struct scan_state st = { .sv = sv };
    int fd = open(sv->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0) {
        save_fail(sv, -errno, "cannot open the checkpoint directory '%s': %s", sv->dir,
                  strerror(errno));
        return;
    }
    if (scan_dir(&st, fd, "", 0) == 0 && sv->m.n_files)
        qsort(sv->m.files, sv->m.n_files, sizeof(*sv->m.files), cmp_file);
}

static void scan_done(struct pool_job *job)
{
    struct save *sv = (struct save *)((char *)job - offsetof(struct save, scan));

    if (job->cancelled)
        save_fail(sv, -ECANCELED, "cancelled");
    sv->scanned = true;
    for (size_t i = 0; i < sv->m.n_files; i++) {
        if (sv->m.files[i].type == MF_FILE) {
            sv->c->files++;
            sv->c->bytes_total += sv->m.files[i].size;
        }
    }
    save_pump(sv);
}

/* -- chunk tasks -- */

static void task_run(struct task *t);

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Stage 1 reads, hashes and checks a chunk for zeros; stage 2 encodes it.
 * Both measure the CPU time they cost (snap_counters). */
static void task_work(struct pool_job *job)
{
    struct task *t = (struct task *)job;
    uint64_t t0 = thread_cpu_ns();

    task_run(t);
    t->cpu_ns = thread_cpu_ns() - t0;
}

static void task_run(struct task *t)
{
    struct save *sv = t->sv;
    struct snap *s = sv->s;
    const struct mf_file *f = &sv->m.files[t->file];

    if (t->stage == 1) {
        char path[PATH_MAX];
        struct stat stt;
        size_t got = 0;
        int fd;

        snprintf(path, sizeof(path), "%s/%s", sv->dir, f->path);
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            t->err = -errno;
            snprintf(t->msg, sizeof(t->msg), "cannot open '%s': %s", path, strerror(errno));
            return;
        }
        if (fstat(fd, &stt) < 0 || (uint64_t)stt.st_size != f->size ||
            (stt.st_mtim.tv_sec >= 0 && (stt.st_mtim.tv_sec != f->mtime_s ||
                                         (uint32_t)stt.st_mtim.tv_nsec != f->mtime_ns))) {
            close(fd);
            t->err = -ESTALE;
            snprintf(t->msg, sizeof(t->msg),
                     "'%s' changed while it was being saved: the trainer must finish writing "
                     "before it reports the checkpoint saved", path);
            return;
        }
        while (got < t->len) {
            ssize_t n = pread(fd, t->buf + got, t->len - got, (off_t)(t->off + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                t->err = n < 0 ? -errno : -ESTALE;
                snprintf(t->msg, sizeof(t->msg), "cannot read '%s': %s", path,
                         n < 0 ? strerror(errno) : "it became shorter while being saved");
                close(fd);
                return;
            }
            got += (size_t)n;
        }
        close(fd);
        t->zero = chunk_is_zero(t->buf, t->len);
        if (!t->zero && chunk_hash_plain(t->buf, t->len, t->hash, s->sign ? &t->hasher : NULL) < 0) {
            t->err = -EIO;
            snprintf(t->msg, sizeof(t->msg), "cannot hash '%s'", path);
        }
        return;
    }
    /* Stage 2: encode; buf is consumed on success. */
    t->err = chunk_encode_buf(t->buf, t->len, t->hash, s->level, s->min_saving, &t->enc);
    if (t->err < 0) {
        snprintf(t->msg, sizeof(t->msg), "cannot encode a chunk of '%s': %s", f->path,
                 strerror(-t->err));
        return;
    }
    t->buf = NULL;
    /* A raw chunk's payload hash goes on from its plaintext's: no second
     * pass over the data. */
    if (s->sign && (t->enc.encoding == CHUNK_RAW
                        ? chunk_raw_payload_sha256(&t->hasher, &t->enc, t->payload_sha)
                        : chunk_sha256(t->enc.data, t->enc.len, t->payload_sha)) < 0) {
        t->err = -EIO;
        snprintf(t->msg, sizeof(t->msg), "cannot hash a chunk of '%s'", f->path);
    }
}

static void task_free(struct task *t)
{
    struct snap *s = t->sv->s;

    buf_put(s, t->buf);
    chunk_hasher_release(&t->hasher);
    /* A raw chunk is the task's buffer with its trailer written in. */
    if (t->enc.encoding == CHUNK_RAW)
        buf_put(s, t->enc.data);
    else
        free(t->enc.data);
    free(t);
}

static void set_active(struct save *sv, bool on)
{
    struct snap *s = sv->s;

    if (sv->is_active == on)
        return;
    sv->is_active = on;
    if (on) {
        sv->prev_active = NULL;
        sv->next_active = s->active;
        if (s->active)
            s->active->prev_active = sv;
        s->active = sv;
        return;
    }
    if (sv->prev_active)
        sv->prev_active->next_active = sv->next_active;
    else
        s->active = sv->next_active;
    if (sv->next_active)
        sv->next_active->prev_active = sv->prev_active;
}

/* A task slot is free: the saves waiting for one start theirs. */
static void pump_active(struct snap *s)
{
    for (struct save *sv = s->active, *next; sv; sv = next) {
        next = sv->next_active;
        save_pump(sv);
    }
}

/* The task's chunk is settled (stored, known, zero) or failed. */
static void task_end(struct task *t, int err, const char *msg)
{
    struct save *sv = t->sv;
    struct snap *s = sv->s;
    struct mf_chunk *mc = &sv->m.files[t->file].chunks[t->idx];

    if (err)
        save_fail(sv, err, "%s", msg);
    memcpy(mc->hash, t->hash, CHUNK_HASH_LEN);
    mc->len = t->len;
    mc->zero = t->zero;
    sv->alive--;
    s->alive--;
    task_free(t);
    save_pump(sv);     /* may end and free sv */
    pump_active(s);
}

/* t stored its chunk (err 0) or failed to: settle the tasks of other
 * ranks waiting for the same chunk, then t itself. */
static void settle(struct task *t, int err, const char *msg)
{
    struct snap *s = t->sv->s;
    struct slot *slot = hset_find(&s->stored, t->hash);
    struct task *w = slot ? slot->waiters : NULL;

    if (slot) {
        slot->waiters = NULL;
        if (err)
            hset_remove(&s->stored, slot);
        else
            slot->state = SLOT_KNOWN;
    }
    if (!err) {
        t->sv->c->bytes_sent += t->enc.len;
        t->sv->c->chunks_sent++;
    }
    while (w) {
        struct task *next = w->next_waiter;

        if (!err) {
            w->sv->c->bytes_skipped += w->len;
            w->sv->c->chunks_skipped++;
        }
        task_end(w, err, msg);
        w = next;
    }
    task_end(t, err, msg);
}

static void on_put(void *arg, int err, const char *msg)
{
    settle(arg, err, msg);
}

/* A split save stores the chunks whose hash it owns. */
static bool owns(const struct save *sv, const uint8_t *hash)
{
    uint32_t v = (uint32_t)hash[0] << 24 | (uint32_t)hash[1] << 16 | (uint32_t)hash[2] << 8 |
                 hash[3];

    return v % sv->req.share_count == sv->req.share_index;
}

static int defer(struct save *sv, const struct task *t)
{
    if (sv->n_def == sv->cap_def) {
        size_t cap = sv->cap_def ? 2 * sv->cap_def : 64;
        struct deferred *d = realloc(sv->def, cap * sizeof(*d));
        if (!d)
            return -ENOMEM;
        sv->def = d;
        sv->cap_def = cap;
    }
    sv->def[sv->n_def++] = (struct deferred){ t->file, t->idx, t->off, t->len };
    return 0;
}

static void task_done(struct pool_job *job)
{
    struct task *t = (struct task *)job;
    struct save *sv = t->sv;
    struct snap *s = sv->s;
    struct slot *slot;

    if (job->cancelled || t->err) {
        int err = job->cancelled ? -ECANCELED : t->err;
        const char *msg = job->cancelled ? "cancelled" : t->msg;

        if (t->stage == 2)
            settle(t, err, msg);
        else
            task_end(t, err, msg);
        return;
    }
    if (t->stage == 2) {
        sv->c->cpu_encode_ns += t->cpu_ns;
        sv->c->bytes_compressed += t->enc.len;
        snap_chunk_key(s, t->hash, t->key, sizeof(t->key));
        store_put_hashed(s->store, t->key, t->enc.data, t->enc.len,
                         s->sign ? t->payload_sha : NULL, on_put, t);
        return;
    }
    sv->c->cpu_hash_ns += t->cpu_ns;
    sv->c->bytes_read += t->len;
    sv->c->chunks++;
    if (t->zero) {
        sv->c->bytes_zero += t->len;
        task_end(t, 0, "");
        return;
    }
    sv->c->bytes_hashed += t->len;
    slot = hset_find(&s->stored, t->hash);
    if (hset_find(&s->known, t->hash) || (slot && slot->state == SLOT_KNOWN)) {
        sv->c->bytes_skipped += t->len;
        sv->c->chunks_skipped++;
        task_end(t, 0, "");
        return;
    }
    if (sv->req.share_count > 1 && !sv->redo && !owns(sv, t->hash)) {
        if (defer(sv, t) < 0) {
            task_end(t, -ENOMEM, "out of memory");
            return;
        }
        sv->c->bytes_split += t->len;
        task_end(t, 0, "");
        return;
    }
    if (slot) {
        /* Another rank is storing the same chunk: wait for its put. */
        buf_put(s, t->buf);
        t->buf = NULL;
        t->next_waiter = slot->waiters;
        slot->waiters = t;
        return;
    }
    if (!hset_add(&s->stored, t->hash, SLOT_STORING)) {
        task_end(t, -ENOMEM, "out of memory");
        return;
    }
    t->stage = 2;
    pool_submit(s->pool, &t->job);
}

/* -- the manifest, last -- */

static void on_manifest_put(void *arg, int err, const char *msg)
{
    struct save *sv = arg;

    if (err)
        save_fail(sv, err, "%s", msg);
    else
        sv->c->bytes_sent += sv->json_len;
    save_report(sv);
}

static void save_manifest(struct save *sv)
{
    struct snap *s = sv->s;
    struct manifest *m = &sv->m;
    char key[STORE_KEY_MAX + 1];

    snprintf(m->job, sizeof(m->job), "%s", s->job);
    m->gen = sv->req.gen;
    m->rank = sv->req.rank;
    m->step = sv->req.step;
    snprintf(m->method, sizeof(m->method), "%s", sv->method);
    m->created_ms = snap_now_ms();
    snprintf(m->version, sizeof(m->version), "%s", SPOT_VERSION);
    m->chunk_size = s->chunk_size;
    sv->json = manifest_to_json(m, &sv->json_len);
    if (!sv->json || chunk_sha256(sv->json, sv->json_len, sv->result.sha256) < 0) {
        save_fail(sv, -ENOMEM, "out of memory");
        save_report(sv);
        return;
    }
    sv->result.gen = m->gen;
    sv->result.rank = m->rank;
    for (size_t i = 0; i < m->n_files; i++)
        sv->result.bytes += m->files[i].size;
    sv->result.base_gen = s->known_gen;
    manifest_key(key, sizeof(key), s->job, m->gen, m->rank);
    store_put(s->store, key, sv->json, sv->json_len, on_manifest_put, sv);
}

/* Start chunk tasks while the window allows; finish when all are done. */
static bool save_more(const struct save *sv)
{
    return sv->redo ? sv->next_def < sv->n_def : sv->next_file < sv->m.n_files;
}

/* The fingerprint of what a split save holds: every file's path, type
 * and size, and its chunks' hashes and lengths, in manifest order. */
static int fingerprint(const struct save *sv, uint8_t out[CHUNK_HASH_LEN])
{
    size_t cap = 0, len = 0;
    uint8_t *buf;
    int r;

    for (size_t i = 0; i < sv->m.n_files; i++)
        cap += strlen(sv->m.files[i].path) + 10 + sv->m.files[i].n_chunks * (CHUNK_HASH_LEN + 5);
    if (!(buf = malloc(cap ? cap : 1)))
        return -ENOMEM;
    for (size_t i = 0; i < sv->m.n_files; i++) {
        const struct mf_file *f = &sv->m.files[i];
        size_t pl = strlen(f->path) + 1;

        memcpy(buf + len, f->path, pl);
        len += pl;
        buf[len++] = (uint8_t)f->type;
        for (int b = 0; b < 8; b++)
            buf[len++] = (uint8_t)(f->size >> (8 * b));
        for (size_t c = 0; c < f->n_chunks; c++) {
            memcpy(buf + len, f->chunks[c].hash, CHUNK_HASH_LEN);
            len += CHUNK_HASH_LEN;
            for (int b = 0; b < 4; b++)
                buf[len++] = (uint8_t)(f->chunks[c].len >> (8 * b));
            buf[len++] = f->chunks[c].zero;
        }
    }
    r = chunk_sha256(buf, len, out);
    free(buf);
    return r;
}

void snap_save_split(struct snap_split *sp, bool rest)
{
    struct save *sv = (struct save *)sp;

    if (!sv->split_wait)
        return;
    sv->split_wait = false;
    sv->split_done = true;
    sv->manifest_sent = false;
    if (rest && !sv->err) {
        sv->redo = true;
        sv->c->bytes_split = 0;
    }
    save_pump(sv);
}

static void save_pump(struct save *sv)
{
    struct snap *s = sv->s;

    if (!sv->scanned || sv->manifest_sent)
        return;
    set_active(sv, true);
    while (!sv->err && s->alive < s->max_tasks && save_more(sv)) {
        struct mf_file *f;
        struct task *t;

        if (sv->redo) {
            const struct deferred *d = &sv->def[sv->next_def++];

            t = calloc(1, sizeof(*t));
            if (t && !(t->buf = buf_get(s))) {
                free(t);
                t = NULL;
            }
            if (!t) {
                save_fail(sv, -ENOMEM, "out of memory");
                break;
            }
            t->off = d->off;
            t->len = d->len;
            t->file = d->file;
            t->idx = d->idx;
            goto submit;
        }
        f = &sv->m.files[sv->next_file];
        if (f->type != MF_FILE || sv->next_chunk >= f->n_chunks) {
            sv->next_file++;
            sv->next_chunk = 0;
            sv->next_off = 0;
            continue;
        }
        t = calloc(1, sizeof(*t));
        if (t) {
            t->off = sv->next_off;
            t->len = f->chunks[sv->next_chunk].len;
            t->buf = buf_get(s);
        }
        if (!t || !t->buf) {
            free(t);
            save_fail(sv, -ENOMEM, "out of memory");
            break;
        }
        t->file = sv->next_file;
        t->idx = sv->next_chunk++;
        sv->next_off += t->len;
submit:
        t->sv = sv;
        t->stage = 1;
        t->job.work = task_work;
        t->job.done = task_done;
        sv->alive++;
        s->alive++;
        pool_submit(s->pool, &t->job);
    }
    /* Done when every chunk was started (or an error stops the rest) and
     * every task has ended; a save waiting for a slot that other saves
     * hold stays active, with none of its own running. */
    if (!sv->err && save_more(sv))
        return;
    set_active(sv, false);
    if (sv->alive > 0)
        return;
    sv->manifest_sent = true;
    if (!sv->err && sv->req.share_count > 1 && !sv->split_done) {
        uint8_t fp[CHUNK_HASH_LEN];

        if (fingerprint(sv, fp) < 0) {
            save_fail(sv, -ENOMEM, "out of memory");
            save_report(sv);
            return;
        }
        sv->split_wait = true;
        sv->req.split(sv->req.split_arg, (struct snap_split *)sv, fp);
        return;
    }
    if (sv->err)
        save_report(sv);
    else
        save_manifest(sv);
}

/* -- what the store already holds -- */

static void known_loaded(struct snap *s)
{
    struct save *w = s->known_waiters;

    s->known_loading = false;
    s->known_waiters = NULL;
    while (w) {
        struct save *next = w->next_waiter;

        pool_submit(s->pool, &w->scan);
        w = next;
    }
}

static void on_known_manifests(struct mf_fetch *f)
{
    struct snap *s = f->s;
    struct gens_op *g = f->owner;

    /* Deduplication is an optimisation: without a base, everything is
     * uploaded, which is slower but correct. */
    if (!f->err) {
        for (uint32_t r = 0; r < f->c->world_size; r++) {
            const struct manifest *m = &f->mfs[r];
            for (size_t i = 0; i < m->n_files; i++)
                for (size_t j = 0; j < m->files[i].n_chunks; j++)
                    if (!m->files[i].chunks[j].zero &&
                        !hset_add(&s->known, m->files[i].chunks[j].hash, SLOT_KNOWN))
                        f->err = -ENOMEM;
        }
        if (f->err)
            hset_clear(&s->known);
        else
            s->known_gen = f->c->gen;
    }
    snap_mf_fetch_free(f);
    snap_gens_op_free(g);
    known_loaded(s);
}

static void on_known_gens(struct gens_op *g)
{
    struct snap *s = g->s;
    uint64_t below = g->below;
    const struct commit *newest = NULL;
    struct mf_fetch *f;

    for (size_t i = 0; !g->err && i < g->n; i++)
        if (g->gens[i].committed && g->gens[i].gen < below)
            newest = &g->gens[i].commit;
    if (!newest || newest->gen == s->known_gen) {
        if (!newest) {
            hset_clear(&s->known);
            s->known_gen = 0;
        }
        snap_gens_op_free(g);
        known_loaded(s);
        return;
    }
    hset_clear(&s->known);
    s->known_gen = 0;
    f = snap_mf_fetch_start(s, newest, UINT32_MAX, true, on_known_manifests, g);
    if (!f) {
        snap_gens_op_free(g);
        known_loaded(s);
    }
}

static void early_saved(struct early *e)
{
    e->cb.saved(e->arg, e->err, e->msg, NULL);
}

void snap_save(struct snap *s, const struct snap_save_req *req, struct snap_counters *c,
               snap_saved_fn done, void *arg)
{
    struct save *sv;
    struct gens_op *g;
    const char *method = req->method ? req->method : "app";

    if (req->gen == 0 || req->gen > GEN_MAX || req->rank >= WORLD_MAX || !req->dir ||
        !*req->dir || strlen(method) > MANIFEST_NAME_MAX ||
        (req->share_count > 1 && (req->share_index >= req->share_count || !req->split))) {
        snap_early(s, early_saved, (union snap_cb){ .saved = done }, arg, -EINVAL,
                   "invalid save request (generation 1..%llu, rank below %d, a directory)",
                   GEN_MAX, WORLD_MAX);
        return;
    }
    sv = calloc(1, sizeof(*sv));
    if (!sv || !(sv->dir = strdup(req->dir)) || !(sv->method = strdup(method))) {
        if (sv)
            free(sv->dir);
        free(sv);
        snap_early(s, early_saved, (union snap_cb){ .saved = done }, arg, -ENOMEM, "out of memory");
        return;
    }
    sv->s = s;
    sv->req = *req;
    sv->c = c ? c : &sv->own;
    sv->done = done;
    sv->arg = arg;
    sv->scan.work = scan_work;
    sv->scan.done = scan_done;
    /* Chunks stored for another generation may have been collected since
     * (a generation that was never committed): only this one's count. */
    if (s->stored_gen != req->gen) {
        hset_clear(&s->stored);
        s->stored_gen = req->gen;
    }
    sv->next_waiter = s->known_waiters;
    s->known_waiters = sv;
    if (s->known_loading)
        return;
    s->known_loading = true;
    g = snap_gens_op_start(s, on_known_gens, NULL);
    if (!g) {
        known_loaded(s);
        return;
    }
    /* The listing's callback comes later, from the loop. */
    g->below = req->gen;
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

static void commit_op_end(struct commit_op *op, int err, const char *msg)
{
    op->done(op->arg, err, msg);
    free(op->json);
    commit_release(&op->c);
    free(op);
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
        commit_op_end(op, 0, "");
    else if (err && err != -ENOENT)
        commit_op_end(op, err, msg);
    else
        commit_op_end(op, -EEXIST, err ? "cannot commit: its commit record came and went"
                                       : "cannot commit: another writer committed this "
                                         "generation number first; nothing was overwritten");
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
    commit_op_end(op, err, msg);
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

void snap_claim(struct snap *s, uint64_t from, snap_claim_fn done, void *arg)
{
    genclaim_claim(s->claims, from, done, arg);
}

void snap_withdraw(struct snap *s, uint64_t gen, snap_done_fn done, void *arg)
{
    genclaim_withdraw(s->claims, gen, done, arg);
}

void snap_early_done(struct early *e)
{
    e->cb.done(e->arg, e->err, e->msg);
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

/* ---- restore and verify --------------------------------------------------- */

struct fetch;

struct ftask {
    struct pool_job job;
    struct fetch *fe;
    const struct manifest *m;
    size_t file, idx;
    uint64_t off;
    const struct mf_chunk *ch;
    char key[STORE_KEY_MAX + 1];
    void *data;
    size_t len;
    unsigned refetch;
    int err;
    char msg[MSG_MAX];
};

struct fetch {
    struct snap *s;
    bool verify;
    bool check;                   /* snap_check: dest against the manifest */
    snap_manifests_fn shown;      /* snap_manifests: the manifests are all it wants */
    uint64_t gen;
    uint32_t rank;                /* restore: the rank; verify: all */
    char *dest, *tmp;
    int tmpfd;                    /* restore: tmp, once made; every path is below it */
    bool made_tmp;
    struct snap_counters *c, own;
    snap_done_fn done;
    snap_verify_fn verified;
    void *arg;
    struct gens_op *g;
    struct commit commit;
    struct mf_fetch *f;
    uint32_t cur_rank;            /* verify walks the ranks */
    size_t next_file, next_chunk;
    uint64_t next_off;
    unsigned alive;
    bool all_started, finishing;
    struct hset seen;             /* verify: chunks checked already */
    struct pool_job prep;         /* restore: layout, then finishing touches */
    int err;
    char msg[MSG_MAX];
    struct snap_verify_report report;
};

static void fetch_pump(struct fetch *fe);

static void fetch_fail(struct fetch *fe, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fetch_fail(struct fetch *fe, int err, const char *fmt, ...)
{
    va_list ap;

    if (fe->err)
        return;
    fe->err = err;
    va_start(ap, fmt);
    vsnprintf(fe->msg, sizeof(fe->msg), fmt, ap);
    va_end(ap);
}

static const struct manifest *cur_manifest(const struct fetch *fe)
{
    return &fe->f->mfs[fe->cur_rank];
}

/* A stored string, escaped and cut short, for a message. */
#define SHOWN_MAX 160
static const char *shown(const char *s, char buf[SHOWN_MAX])
{
    return manifest_escape(s, buf, SHOWN_MAX);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

static void fetch_report(struct fetch *fe)
{
    if (fe->shown) {
        fe->shown(fe->arg, fe->err, fe->err ? fe->msg : "", fe->err ? NULL : &fe->commit,
                  fe->err || !fe->f ? NULL : fe->f->mfs);
    } else if (fe->verify) {
        fe->verified(fe->arg, fe->err, fe->err ? fe->msg : "", &fe->report);
    } else {
        fe->done(fe->arg, fe->err, fe->err ? fe->msg : "");
    }
    if (fe->f)
        snap_mf_fetch_free(fe->f);
    commit_release(&fe->commit);
    hset_clear(&fe->seen);
    if (fe->tmpfd >= 0)
        close(fe->tmpfd);
    free(fe->dest);
    free(fe->tmp);
    free(fe);
}

/* Pool: undo a failed restore: what the manifest names, deepest first,
 * with the directories made above it, through tmpfd (a path may fit under
 * dest and not under tmp, which is longer); then tmp itself, and whatever
 * else is left in it. */
static void cleanup_work(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));
    const struct manifest *m = cur_manifest(fe);
    char path[PATH_MAX];

    if (!fe->made_tmp)
        return;
    for (size_t i = m->n_files; fe->tmpfd >= 0 && i-- > 0;) {
        const struct mf_file *f = &m->files[i];
        char *slash;

        if ((size_t)snprintf(path, sizeof(path), "%s", f->path) >= sizeof(path))
            continue;
        unlinkat(fe->tmpfd, path, f->type == MF_DIR ? AT_REMOVEDIR : 0);
        while ((slash = strrchr(path, '/'))) {
            *slash = '\0';
            if (unlinkat(fe->tmpfd, path, AT_REMOVEDIR) < 0 && errno != ENOENT)
                break;
        }
    }
    if (rmdir(fe->tmp) < 0 && errno != ENOENT)
        nftw(fe->tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void cleanup_done(struct pool_job *job)
{
    fetch_report((struct fetch *)((char *)job - offsetof(struct fetch, prep)));
}

static void fetch_end(struct fetch *fe)
{
    if (fe->err && fe->made_tmp && !fe->verify && fe->f) {
        fe->prep.work = cleanup_work;
        fe->prep.done = cleanup_done;
        pool_submit(fe->s->pool, &fe->prep);
        return;
    }
    fetch_report(fe);
}

static void ftask_work(struct pool_job *job)
{
    struct ftask *t = (struct ftask *)job;
    struct fetch *fe = t->fe;
    const struct mf_file *f = &t->m->files[t->file];
    const void *plain;
    size_t len;
    void *owned = NULL;
    char path[SHOWN_MAX];
    int fd, r;

    r = chunk_decode_view(t->data, t->len, t->ch->hash, &plain, &len, &owned);
    if (r == 0 && len != t->ch->len)
        r = -EBADMSG;
    if (r < 0) {
        t->err = r;
        snprintf(t->msg, sizeof(t->msg), "%s", r == -ENOMEM ? "out of memory" : "corrupt");
        free(owned);
        return;
    }
    if (fe->verify) {
        free(owned);
        return;
    }
    shown(f->path, path);
    fd = openat(fe->tmpfd, f->path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        t->err = -errno;
        snprintf(t->msg, sizeof(t->msg), "cannot open '%s' in '%s': %s", path, fe->tmp,
                 strerror(errno));
        free(owned);
        return;
    }
    for (size_t done = 0; done < len;) {
        ssize_t n = pwrite(fd, (const char *)plain + done, len - done, (off_t)(t->off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            t->err = n < 0 ? -errno : -EIO;
            snprintf(t->msg, sizeof(t->msg), "cannot write '%s' in '%s': %s", path, fe->tmp,
                     strerror(n < 0 ? errno : EIO));
            break;
        }
        done += (size_t)n;
    }
    close(fd);
    free(owned);
}

static void ftask_get(struct ftask *t);

static void ftask_end(struct ftask *t)
{
    struct fetch *fe = t->fe;

    free(t->data);
    free(t);
    fe->alive--;
    fetch_pump(fe);
}

static void ftask_done(struct pool_job *job)
{
    struct ftask *t = (struct ftask *)job;
    struct fetch *fe = t->fe;
    const struct mf_file *f = &t->m->files[t->file];
    char hex[2 * CHUNK_HASH_LEN + 1], path[SHOWN_MAX];

    if (job->cancelled) {
        fetch_fail(fe, -ECANCELED, "cancelled");
    } else if (t->err == -EBADMSG && t->refetch < REFETCH_MAX) {
        /* Damaged on the way, perhaps: fetch it again before calling the
         * stored copy corrupt. */
        t->refetch++;
        fe->c->retries++;
        free(t->data);
        t->data = NULL;
        t->err = 0;
        ftask_get(t);
        return;
    } else if (t->err == -EBADMSG) {
        chunk_hex(t->ch->hash, hex);
        fe->report.bad_chunks++;
        fetch_fail(fe, -EBADMSG,
                   "generation %llu, rank %u: chunk %s of '%s' (offset %llu) is corrupt in the "
                   "store", (unsigned long long)fe->gen, t->m->rank, hex, shown(f->path, path),
                   (unsigned long long)t->off);
    } else if (t->err) {
        fetch_fail(fe, t->err, "%s", t->msg);
    } else {
        fe->c->bytes_hashed += t->ch->len;
        if (!fe->verify)
            fe->c->bytes_written += t->ch->len;
        fe->report.chunks++;
        fe->report.bytes += t->ch->len;
    }
    ftask_end(t);
}

static void on_chunk_got(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct ftask *t = arg;
    struct fetch *fe = t->fe;
    char hex[2 * CHUNK_HASH_LEN + 1], path[SHOWN_MAX];

    if (err) {
        chunk_hex(t->ch->hash, hex);
        if (err == -ENOENT || err == -EFBIG)
            fe->report.bad_chunks++;
        if (err == -ENOENT)
            fetch_fail(fe, -EBADMSG,
                       "generation %llu, rank %u: chunk %s of '%s' is missing from the store",
                       (unsigned long long)fe->gen, t->m->rank, hex,
                       shown(t->m->files[t->file].path, path));
        else
            fetch_fail(fe, err == -EFBIG ? -EBADMSG : err, "%s", msg);
        free(data);
        ftask_end(t);
        return;
    }
    fe->c->bytes_received += len;
    t->data = data;
    t->len = len;
    pool_submit(fe->s->pool, &t->job);
}

static void ftask_get(struct ftask *t)
{
    struct snap *s = t->fe->s;

    /* A stored chunk is at most its plaintext and its trailer (raw), or
     * less (zstd, kept only when smaller). */
    store_get(s->store, t->key, (size_t)t->ch->len + CHUNK_TRAILER_LEN, on_chunk_got, t);
}

/* The mode a restore gives f: as stored with preserve_special_modes;
 * else without setuid, setgid, sticky and others' write.  The manifest
 * comes from whoever can write the store, and spotd restores as root:
 * setuid-root programs and directories anyone can change files in (the
 * checkpoint the trainer loads next) are not its to hand out. */
static mode_t restore_mode(const struct fetch *fe, const struct mf_file *f)
{
    if (fe->s->preserve_special_modes)
        return (mode_t)f->mode;
    return (mode_t)f->mode & ~(mode_t)(S_ISUID | S_ISGID | S_ISVTX | S_IWOTH);
}

/* Pool: the finishing touches of a restore, then the rename into place.
 * Each file is opened without following links and checked to be what
 * the manifest declares (a regular file of its size) before its mode and
 * times are set through the descriptor. */
static void finish_work(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));
    const struct manifest *m = cur_manifest(fe);
    char path[SHOWN_MAX], target[SHOWN_MAX];

    /* Links, then files, then directories deepest first (reverse order of
     * the sorted paths), so setting a directory's mtime comes last. */
    for (size_t i = m->n_files; i-- > 0 && !fe->err;) {
        const struct mf_file *f = &m->files[i];
        struct timespec ts[2] = { { f->mtime_s, f->mtime_ns }, { f->mtime_s, f->mtime_ns } };
        struct stat st;
        int fd;

        shown(f->path, path);
        if (f->type == MF_SYMLINK) {
            if (symlinkat(f->target, fe->tmpfd, f->path) < 0) {
                fetch_fail(fe, -errno, "cannot create the link '%s' -> '%s' in '%s': %s", path,
                           shown(f->target, target), fe->tmp, strerror(errno));
                break;
            }
            utimensat(fe->tmpfd, f->path, ts, AT_SYMLINK_NOFOLLOW);
            continue;
        }
        fd = openat(fe->tmpfd, f->path,
                    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (f->type == MF_DIR ? O_DIRECTORY : 0));
        if (fd < 0 || fstat(fd, &st) < 0) {
            fetch_fail(fe, -errno, "cannot open '%s' in '%s': %s", path, fe->tmp,
                       strerror(errno));
        } else if (f->type == MF_FILE && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size)) {
            fetch_fail(fe, -EIO, "'%s' in '%s' is %lld bytes once written, not the %llu its "
                       "manifest declares", path, fe->tmp, (long long)st.st_size,
                       (unsigned long long)f->size);
        } else if (fchmod(fd, restore_mode(fe, f)) < 0 || futimens(fd, ts) < 0) {
            fetch_fail(fe, -errno, "cannot set the mode or time of '%s' in '%s': %s", path,
                       fe->tmp, strerror(errno));
        }
        if (fd >= 0)
            close(fd);
    }
    if (fe->err)
        return;
    /* An empty directory in the way goes; anything else stays and fails. */
    rmdir(fe->dest);
    if (rename(fe->tmp, fe->dest) < 0)
        fetch_fail(fe, -errno, "cannot move the restored files to '%s': %s", fe->dest,
                   strerror(errno));
}

static void finish_done(struct pool_job *job)
{
    fetch_end((struct fetch *)((char *)job - offsetof(struct fetch, prep)));
}

static void fetch_pump(struct fetch *fe)
{
    struct snap *s = fe->s;

    while (!fe->err && !fe->all_started && fe->alive < s->max_tasks) {
        const struct manifest *m = cur_manifest(fe);
        const struct mf_file *f;
        struct ftask *t;

        if (fe->next_file >= m->n_files) {
            /* Verify goes on with the next rank. */
            if (fe->verify && fe->cur_rank + 1 < fe->commit.world_size) {
                fe->cur_rank++;
                fe->next_file = fe->next_chunk = 0;
                fe->next_off = 0;
                continue;
            }
            fe->all_started = true;
            break;
        }
        f = &m->files[fe->next_file];
        if (fe->next_chunk == 0 && f->type == MF_FILE) {
            fe->report.files++;
        }
        if (f->type != MF_FILE || fe->next_chunk >= f->n_chunks) {
            fe->next_file++;
            fe->next_chunk = 0;
            fe->next_off = 0;
            continue;
        }
        if (f->chunks[fe->next_chunk].zero) {
            fe->c->bytes_zero += f->chunks[fe->next_chunk].len;
            fe->next_off += f->chunks[fe->next_chunk].len;
            fe->next_chunk++;
            continue;
        }
        if (fe->verify) {
            const uint8_t *h = f->chunks[fe->next_chunk].hash;
            if (hset_find(&fe->seen, h)) {
                fe->next_off += f->chunks[fe->next_chunk].len;
                fe->next_chunk++;
                continue;
            }
            if (!hset_add(&fe->seen, h, SLOT_KNOWN)) {
                fetch_fail(fe, -ENOMEM, "out of memory");
                break;
            }
        }
        if (!(t = calloc(1, sizeof(*t)))) {
            fetch_fail(fe, -ENOMEM, "out of memory");
            break;
        }
        t->fe = fe;
        t->m = m;
        t->file = fe->next_file;
        t->idx = fe->next_chunk;
        t->ch = &f->chunks[fe->next_chunk];
        t->off = fe->next_off;
        t->job.work = ftask_work;
        t->job.done = ftask_done;
        snap_chunk_key(s, t->ch->hash, t->key, sizeof(t->key));
        fe->next_chunk++;
        fe->next_off += t->ch->len;
        fe->alive++;
        ftask_get(t);
    }
    if (fe->alive > 0 || fe->finishing)
        return;
    fe->finishing = true;
    if (fe->verify || fe->err) {
        fetch_end(fe);
        return;
    }
    fe->prep.work = finish_work;
    fe->prep.done = finish_done;
    fe->prep.cancelled = false;
    pool_submit(s->pool, &fe->prep);
}

/* Room a restore leaves free on dest's filesystem, besides its files. */
#define RESTORE_SPACE_MARGIN (64ULL * 1024 * 1024)

/* bsearch() over the sorted paths for the first len bytes of s. */
struct prefix {
    const char *s;
    size_t len;
};

static int cmp_prefix(const void *key, const void *elem)
{
    const struct prefix *k = key;
    const char *path = ((const struct mf_file *)elem)->path;
    int c = strncmp(k->s, path, k->len);

    return c ? c : path[k->len] ? -1 : 0;
}

/* Pool: whether dest's filesystem holds m's files: bytes as the manifest
 * declares them, each file rounded up to whole blocks, a block per entry
 * and RESTORE_SPACE_MARGIN, against the blocks and inodes left to an
 * unprivileged user.  Declared, not allocated: runs of zeros restore as
 * holes that cost nothing now, but the manifest's author chooses how
 * much of a file is holes, and the trainer that reads the files, or a
 * copy without --sparse, fills them; a generation that cannot land whole
 * on this disk is refused before it half fills it. */
static int restore_space(struct fetch *fe, const struct manifest *m, uint64_t bytes)
{
    char dir[PATH_MAX], have[32], want[32];
    const char *slash = strrchr(fe->dest, '/');
    struct statvfs sv;
    uint64_t need = RESTORE_SPACE_MARGIN, avail, block;

    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else
        snprintf(dir, sizeof(dir), "%.*s", slash == fe->dest ? 1 : (int)(slash - fe->dest),
                 fe->dest);
    if (statvfs(dir, &sv) < 0) {
        fetch_fail(fe, -errno, "cannot tell the free space in '%s': %s", dir, strerror(errno));
        return fe->err;
    }
    block = sv.f_frsize ? sv.f_frsize : 4096;
    for (size_t i = 0; i < m->n_files && need != UINT64_MAX; i++) {
        uint64_t size = m->files[i].type == MF_FILE ? m->files[i].size : 0;
        uint64_t blocks = size / block + (size % block != 0) + 1;

        need = blocks > (UINT64_MAX - need) / block ? UINT64_MAX : need + blocks * block;
    }
    avail = sv.f_bavail > UINT64_MAX / block ? UINT64_MAX : (uint64_t)sv.f_bavail * block;
    snprintf(have, sizeof(have), "%.1f GiB", (double)avail / (1 << 30));
    snprintf(want, sizeof(want), "%.1f GiB", (double)bytes / (1 << 30));
    if (need > avail) {
        fetch_fail(fe, -ENOSPC, "generation %llu, rank %u: its files declare %llu bytes (%s, "
                   "runs of zeros included), more than '%s' has free (%s, less a 64 MiB "
                   "margin): free space there or restore elsewhere",
                   (unsigned long long)fe->gen, m->rank, (unsigned long long)bytes, want, dir,
                   have);
        return fe->err;
    }
    if (sv.f_files && sv.f_favail < (fsfilcnt_t)m->n_files + 1) {
        fetch_fail(fe, -ENOSPC, "generation %llu, rank %u: %zu files and directories, and "
                   "'%s' has %llu inodes free: free some or restore elsewhere",
                   (unsigned long long)fe->gen, m->rank, m->n_files, dir,
                   (unsigned long long)sv.f_favail);
        return fe->err;
    }
    return 0;
}

/* Pool: refuse, before anything is written, a manifest that the restore
 * cannot reproduce exactly and safely under dest (see snap_restore()). */
static int restore_check(struct fetch *fe, const struct manifest *m)
{
    size_t dest_len = strlen(fe->dest);
    uint64_t bytes, declared = fe->commit.ranks[m->rank].bytes;
    char path[SHOWN_MAX], other[SHOWN_MAX];

    for (size_t i = 0; i < m->n_files; i++) {
        const struct mf_file *f = &m->files[i];
        size_t len = dest_len + 1 + strlen(f->path);

        if (len >= PATH_MAX) {
            fetch_fail(fe, -ENAMETOOLONG, "generation %llu, rank %u: cannot restore '%s' "
                       "exactly: its path under '%s' would be %zu bytes, more than PATH_MAX "
                       "(%d) allows; restore into a shorter destination",
                       (unsigned long long)fe->gen, m->rank, shown(f->path, path), fe->dest,
                       len, PATH_MAX - 1);
            return fe->err;
        }
        if (f->type == MF_SYMLINK && !manifest_link_inside(f->path, f->target)) {
            fetch_fail(fe, -EPERM, "generation %llu, rank %u: refusing the link '%s' -> '%s': "
                       "it leads out of the restored directory (an absolute target, or '..' "
                       "above it, or after a name)", (unsigned long long)fe->gen, m->rank,
                       shown(f->path, path), shown(f->target, other));
            return fe->err;
        }
        /* Every directory above it is one (a link there would lead
         * wherever it points). */
        for (const char *slash = f->path; (slash = strchr(slash, '/')); slash++) {
            const struct mf_file *up =
                bsearch(&(struct prefix){ f->path, (size_t)(slash - f->path) }, m->files,
                        m->n_files, sizeof(*m->files), cmp_prefix);

            if (up && up->type != MF_DIR) {
                fetch_fail(fe, -EINVAL, "generation %llu, rank %u: '%s' lies below '%s', "
                           "which the manifest says is not a directory",
                           (unsigned long long)fe->gen, m->rank, shown(f->path, path),
                           shown(up->path, other));
                return fe->err;
            }
        }
    }
    if (manifest_bytes(m, &bytes) < 0) {
        fetch_fail(fe, -EFBIG, "generation %llu, rank %u: the manifest's files add up to more "
                   "than 2^64 bytes", (unsigned long long)fe->gen, m->rank);
        return fe->err;
    }
    if (bytes != declared) {
        fetch_fail(fe, -EBADMSG, "generation %llu, rank %u: the manifest's files add up to "
                   "%llu bytes, its commit record says %llu: refusing both",
                   (unsigned long long)fe->gen, m->rank, (unsigned long long)bytes,
                   (unsigned long long)declared);
        return fe->err;
    }
    return restore_space(fe, m, bytes);
}

/* Pool: lay the restored tree out beside dest, files at their sizes.
 * Every path is made and opened below tmpfd, without following links (no
 * link exists yet: finish_work() makes them), so a path is bounded by
 * what fits under dest, not by tmp's longer name. */
static void prep_work(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));
    const struct manifest *m = cur_manifest(fe);
    struct stat st;
    char path[PATH_MAX], name[SHOWN_MAX];

    if (lstat(fe->dest, &st) == 0) {
        DIR *d = S_ISDIR(st.st_mode) ? opendir(fe->dest) : NULL;
        struct dirent *de;
        bool empty = d != NULL;

        while (d && (de = readdir(d)))
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                empty = false;
        if (d)
            closedir(d);
        if (!empty) {
            fetch_fail(fe, -EEXIST, "'%s' exists and is not an empty directory: restore into "
                                    "a new one", fe->dest);
            return;
        }
    }
    if (restore_check(fe, m) < 0)
        return;
    if (mkdir(fe->tmp, 0700) < 0) {
        fetch_fail(fe, -errno, "cannot create '%s': %s", fe->tmp, strerror(errno));
        return;
    }
    fe->made_tmp = true;
    if ((fe->tmpfd = open(fe->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        fetch_fail(fe, -errno, "cannot open '%s': %s", fe->tmp, strerror(errno));
        return;
    }
    for (size_t i = 0; i < m->n_files && !fe->err; i++) {
        const struct mf_file *f = &m->files[i];
        int fd;

        /* restore_check() made sure it fits. */
        snprintf(path, sizeof(path), "%s", f->path);
        shown(f->path, name);
        /* Parents that the manifest does not list (it need not). */
        for (char *p = path; (p = strchr(p, '/')); p++) {
            *p = '\0';
            if (mkdirat(fe->tmpfd, path, 0700) < 0 && errno != EEXIST)
                fetch_fail(fe, -errno, "cannot create the directory above '%s' in '%s': %s",
                           name, fe->tmp, strerror(errno));
            *p = '/';
        }
        if (f->type == MF_DIR) {
            if (mkdirat(fe->tmpfd, path, 0700) < 0 && errno != EEXIST)
                fetch_fail(fe, -errno, "cannot create '%s' in '%s': %s", name, fe->tmp,
                           strerror(errno));
            continue;
        }
        if (f->type != MF_FILE)
            continue;
        fd = openat(fe->tmpfd, path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            fetch_fail(fe, -errno, "cannot create '%s' in '%s': %s", name, fe->tmp,
                       strerror(errno));
            break;
        }
        /* The size first: what no chunk covers stays a hole. */
        if (ftruncate(fd, (off_t)f->size) < 0)
            fetch_fail(fe, -errno, "cannot size '%s' in '%s': %s", name, fe->tmp,
                       strerror(errno));
        close(fd);
    }
}

static void prep_done(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));

    if (fe->err) {
        fetch_end(fe);
        return;
    }
    fetch_pump(fe);
}

/* Pool: snap_check's comparison. */
static void check_work(struct pool_job *job)
{
    struct fetch *fe = (struct fetch *)((char *)job - offsetof(struct fetch, prep));
    char why[MSG_MAX - 64];
    int r = dircheck_manifest(&fe->f->mfs[fe->rank], fe->dest, why, sizeof(why));

    if (r < 0)
        fetch_fail(fe, r, "the copy of generation %llu in '%s' does not match it: %s",
                   (unsigned long long)fe->gen, fe->dest, why);
}

static void check_done(struct pool_job *job)
{
    fetch_report((struct fetch *)((char *)job - offsetof(struct fetch, prep)));
}

static void on_fetch_manifests(struct mf_fetch *f)
{
    struct fetch *fe = f->owner;

    fe->f = f;
    if (f->err) {
        fetch_fail(fe, f->err, "%s", f->msg);
        fetch_report(fe);
        return;
    }
    if (fe->shown) {
        fetch_report(fe);
        return;
    }
    if (fe->check) {
        fe->prep.work = check_work;
        fe->prep.done = check_done;
        pool_submit(fe->s->pool, &fe->prep);
        return;
    }
    if (fe->verify) {
        for (uint32_t r = 0; r < fe->commit.world_size; r++)
            for (size_t i = 0; i < f->mfs[r].n_files; i++)
                if (f->mfs[r].files[i].type == MF_FILE)
                    fe->c->bytes_total += f->mfs[r].files[i].size;
        fe->cur_rank = 0;
        fetch_pump(fe);
        return;
    }
    fe->cur_rank = fe->rank;
    for (size_t i = 0; i < f->mfs[fe->rank].n_files; i++)
        if (f->mfs[fe->rank].files[i].type == MF_FILE) {
            fe->c->files++;
            fe->c->bytes_total += f->mfs[fe->rank].files[i].size;
        }
    fe->prep.work = prep_work;
    fe->prep.done = prep_done;
    pool_submit(fe->s->pool, &fe->prep);
}

static void on_fetch_gens(struct gens_op *g)
{
    struct fetch *fe = g->owner;
    struct snap_gen *found = NULL;

    fe->g = NULL;
    if (g->err) {
        fetch_fail(fe, g->err, "%s", g->msg);
        snap_gens_op_free(g);
        fetch_report(fe);
        return;
    }
    for (size_t i = 0; i < g->n; i++) {
        if (fe->gen ? g->gens[i].gen == fe->gen
                    : g->gens[i].committed || g->gens[i].unauthentic)
            found = &g->gens[i];
    }
    if (found && (found->committed || found->unauthentic)) {
        fe->report.auth_known = true;
        fe->report.auth = found->auth;
        snprintf(fe->report.key_id, sizeof(fe->report.key_id), "%s",
                 found->commit.has_mac ? found->commit.key_id : "");
    }
    if (found && found->unauthentic) {
        char why[MSG_MAX];

        snap_refusal(fe->s, found, why, sizeof(why));
        fetch_fail(fe, -EKEYREJECTED, "%s", why);
        snap_gens_op_free(g);
        fetch_report(fe);
        return;
    }
    if (!found || !found->committed) {
        if (!fe->gen)
            fetch_fail(fe, -ENOENT, "job '%s' has no committed generation in %s", fe->s->job,
                       store_url(fe->s->store));
        else if (!found)
            fetch_fail(fe, -ENOENT, "job '%s' has no generation %llu in %s", fe->s->job,
                       (unsigned long long)fe->gen, store_url(fe->s->store));
        else if (found->corrupt)
            fetch_fail(fe, -EBADMSG, "generation %llu: its commit record is unreadable",
                       (unsigned long long)fe->gen);
        else
            fetch_fail(fe, -ENOENT, "generation %llu was never committed (no commit record): "
                                    "it cannot be restored", (unsigned long long)fe->gen);
        snap_gens_op_free(g);
        fetch_report(fe);
        return;
    }
    fe->gen = found->gen;
    fe->commit = found->commit;
    memset(&found->commit, 0, sizeof(found->commit));
    snap_gens_op_free(g);
    if (!fe->verify && fe->rank >= fe->commit.world_size) {
        fetch_fail(fe, -ENOENT, "generation %llu has ranks 0 to %u, not %u",
                   (unsigned long long)fe->gen, fe->commit.world_size - 1, fe->rank);
        fetch_report(fe);
        return;
    }
    if (!snap_mf_fetch_start(fe->s, &fe->commit, fe->verify ? UINT32_MAX : fe->rank, true,
                             on_fetch_manifests, fe)) {
        fetch_fail(fe, -ENOMEM, "out of memory");
        fetch_report(fe);
    }
}

static struct fetch *fetch_new(struct snap *s, uint64_t gen, struct snap_counters *c)
{
    struct fetch *fe = calloc(1, sizeof(*fe));

    if (!fe)
        return NULL;
    fe->s = s;
    fe->gen = gen;
    fe->tmpfd = -1;
    fe->c = c ? c : &fe->own;
    return fe;
}

void snap_restore(struct snap *s, uint64_t gen, uint32_t rank, const char *dest,
                  struct snap_counters *c, snap_done_fn done, void *arg)
{
    struct fetch *fe = fetch_new(s, gen, c);
    size_t len = dest ? strlen(dest) : 0;

    while (len > 1 && dest[len - 1] == '/')
        len--;
    if (!fe || !len || len > PATH_MAX - 64 || !(fe->dest = strndup(dest, len)) ||
        asprintf(&fe->tmp, "%s.spotd-partial.%ld", fe->dest, (long)getpid()) < 0) {
        if (fe)
            free(fe->dest);
        free(fe);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg,
                   len ? -ENOMEM : -EINVAL, len ? "out of memory" : "no destination directory");
        return;
    }
    fe->rank = rank;
    fe->done = done;
    fe->arg = arg;
    if (!(fe->g = snap_gens_op_start(s, on_fetch_gens, fe))) {
        free(fe->dest);
        free(fe->tmp);
        free(fe);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                   "out of memory");
    }
}

void snap_check(struct snap *s, uint64_t gen, uint32_t rank, const char *dir,
                snap_done_fn done, void *arg)
{
    struct fetch *fe = fetch_new(s, gen, NULL);

    if (!fe || !(fe->dest = strdup(dir))) {
        free(fe);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                   "out of memory");
        return;
    }
    fe->check = true;
    fe->rank = rank;
    fe->done = done;
    fe->arg = arg;
    if (!(fe->g = snap_gens_op_start(s, on_fetch_gens, fe))) {
        free(fe->dest);
        free(fe);
        snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                   "out of memory");
    }
}

static void early_verified(struct early *e)
{
    struct snap_verify_report r = { 0 };

    e->cb.verified(e->arg, e->err, e->msg, &r);
}

void snap_verify(struct snap *s, uint64_t gen, struct snap_counters *c, snap_verify_fn done,
                 void *arg)
{
    struct fetch *fe = fetch_new(s, gen, c);

    if (!fe) {
        snap_early(s, early_verified, (union snap_cb){ .verified = done }, arg, -ENOMEM,
                   "out of memory");
        return;
    }
    fe->verify = true;
    fe->verified = done;
    fe->arg = arg;
    if (!(fe->g = snap_gens_op_start(s, on_fetch_gens, fe))) {
        free(fe);
        snap_early(s, early_verified, (union snap_cb){ .verified = done }, arg, -ENOMEM,
                   "out of memory");
    }
}

static void early_shown(struct early *e)
{
    e->cb.shown(e->arg, e->err, e->msg, NULL, NULL);
}

void snap_manifests(struct snap *s, uint64_t gen, snap_manifests_fn done, void *arg)
{
    struct fetch *fe = fetch_new(s, gen, NULL);

    if (!fe) {
        snap_early(s, early_shown, (union snap_cb){ .shown = done }, arg, -ENOMEM, "out of memory");
        return;
    }
    fe->verify = true;            /* every rank, nothing written */
    fe->shown = done;
    fe->arg = arg;
    if (!(fe->g = snap_gens_op_start(s, on_fetch_gens, fe))) {
        free(fe);
        snap_early(s, early_shown, (union snap_cb){ .shown = done }, arg, -ENOMEM, "out of memory");
    }
}

/* ---- garbage collection --------------------------------------------------- */

#define GC_WINDOW 32

struct gc_op {
    struct snap *s;
    struct snap_gc_opts o;
    int64_t now;
    snap_gc_fn done;
    void *arg;
    struct gens_op *g;
    bool *drop;                   /* per generation of g */
    size_t cur;                   /* the kept committed generation being read */
    struct hset refs;
    struct mf_fetch *f;
    char **keys;                  /* to delete, in order */
    uint64_t *sizes;
    size_t n_keys, cap_keys, next_key;
    size_t n_commits;             /* commit records, at the front of keys */
    bool commits_done;
    unsigned alive;
    struct store_entry *chunks;
    size_t n_chunks;
    int err;
    char msg[MSG_MAX];
    struct snap_gc_report report;
};

static void gc_end(struct gc_op *gc)
{
    gc->done(gc->arg, gc->err, gc->err ? gc->msg : "", &gc->report);
    for (size_t i = 0; i < gc->n_keys; i++)
        free(gc->keys[i]);
    free(gc->keys);
    free(gc->sizes);
    free(gc->drop);
    hset_clear(&gc->refs);
    store_entries_free(gc->chunks, gc->n_chunks);
    if (gc->g)
        snap_gens_op_free(gc->g);
    free(gc);
}

static int gc_add_key(struct gc_op *gc, const char *key, uint64_t size)
{
    if (gc->n_keys == gc->cap_keys) {
        size_t cap = gc->cap_keys ? 2 * gc->cap_keys : 64;
        char **k = realloc(gc->keys, cap * sizeof(*k));
        uint64_t *sz;

        if (!k)
            return -ENOMEM;
        gc->keys = k;
        if (!(sz = realloc(gc->sizes, cap * sizeof(*sz))))
            return -ENOMEM;
        gc->sizes = sz;
        gc->cap_keys = cap;
    }
    if (!(gc->keys[gc->n_keys] = strdup(key)))
        return -ENOMEM;
    gc->sizes[gc->n_keys++] = size;
    return 0;
}

static void gc_pump(struct gc_op *gc);

static void on_gc_deleted(void *arg, int err, const char *msg)
{
    struct gc_op *gc = arg;

    gc->alive--;
    if (err && !gc->err) {
        gc->err = err;
        snprintf(gc->msg, sizeof(gc->msg), "%s", msg);
    }
    gc_pump(gc);
}

/* Delete the keys in order, GC_WINDOW at a time.  Commit records come
 * first in the list, and a generation's other objects only after its
 * record is gone, so no reader ever sees a committed generation with
 * parts missing. */
static void gc_pump(struct gc_op *gc)
{
    while (!gc->err && gc->alive < GC_WINDOW && gc->next_key < gc->n_keys) {
        const char *key = gc->keys[gc->next_key];

        /* Every commit record gone before anything else goes. */
        if (gc->next_key == gc->n_commits && !gc->commits_done) {
            if (gc->alive > 0)
                break;
            gc->commits_done = true;
        }
        gc->alive++;
        gc->next_key++;
        store_delete(gc->s->store, key, on_gc_deleted, gc);
    }
    if (gc->alive == 0 && (gc->err || gc->next_key == gc->n_keys))
        gc_end(gc);
}

static bool chunk_name(const struct snap *s, const char *key, uint8_t hash[CHUNK_HASH_LEN])
{
    size_t jl = strlen(s->job);
    const char *p = key + jl + 8;
    char hex[2 * CHUNK_HASH_LEN + 1];

    if (strncmp(key, s->job, jl) != 0 || strncmp(key + jl, "/chunks/", 8) != 0 ||
        strlen(p) != 3 + 2 * CHUNK_HASH_LEN || p[2] != '/' || strncmp(p, p + 3, 2) != 0)
        return false;
    memcpy(hex, p + 3, sizeof(hex));
    for (size_t i = 0; i < CHUNK_HASH_LEN; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1 || !((hex[2 * i] >= '0' && hex[2 * i] <= '9') ||
                                                     (hex[2 * i] >= 'a' && hex[2 * i] <= 'f')))
            return false;
        hash[i] = (uint8_t)v;
    }
    return true;
}

static void on_gc_chunks(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct gc_op *gc = arg;
    struct gens_op *g = gc->g;

    if (err) {
        gc->err = err;
        snprintf(gc->msg, sizeof(gc->msg), "%s", msg);
        gc_end(gc);
        return;
    }
    gc->chunks = e;
    gc->n_chunks = n;
    /* Dropped generations: commit records first, then the rest. */
    for (int pass = 0; pass < 2 && !gc->err; pass++)
        for (size_t i = 0; i < g->n_entries; i++) {
            uint64_t gen;
            const char *name;
            bool is_commit;

            if (!snap_gen_key(gc->s, g->entries[i].key, &gen, &name))
                continue;
            is_commit = strcmp(name, "COMMIT.json") == 0;
            if (is_commit != (pass == 0))
                continue;
            for (size_t j = 0; j < g->n; j++)
                if (g->gens[j].gen == gen && gc->drop[j] &&
                    gc_add_key(gc, g->entries[i].key, g->entries[i].size) < 0)
                    gc->err = -ENOMEM;
            if (pass == 0)
                gc->n_commits = gc->n_keys;
        }
    for (size_t i = 0; i < n && !gc->err; i++) {
        uint8_t hash[CHUNK_HASH_LEN];

        if (!chunk_name(gc->s, e[i].key, hash))
            continue;
        if (hset_find(&gc->refs, hash) || e[i].mtime_ms > gc->now - gc->o.grace_ms) {
            gc->report.chunks_kept++;
            continue;
        }
        gc->report.chunks_deleted++;
        gc->report.bytes_deleted += e[i].size;
        if (gc_add_key(gc, e[i].key, e[i].size) < 0)
            gc->err = -ENOMEM;
    }
    for (size_t j = 0; j < g->n; j++) {
        if (gc->drop[j])
            gc->report.gens_deleted++;
        else
            gc->report.gens_kept++;
    }
    if (gc->err) {
        snprintf(gc->msg, sizeof(gc->msg), "out of memory");
        gc_end(gc);
        return;
    }
    if (gc->o.dry_run) {
        gc_end(gc);
        return;
    }
    gc_pump(gc);
}

static void gc_next_kept(struct gc_op *gc);

static void on_gc_manifests(struct mf_fetch *f)
{
    struct gc_op *gc = f->owner;

    if (f->err) {
        /* Never delete on a partial view of what is referenced. */
        gc->err = f->err;
        snprintf(gc->msg, sizeof(gc->msg), "nothing deleted: %.4000s", f->msg);
        snap_mf_fetch_free(f);
        gc_end(gc);
        return;
    }
    for (uint32_t r = 0; r < f->c->world_size && !gc->err; r++) {
        const struct manifest *m = &f->mfs[r];
        for (size_t i = 0; i < m->n_files; i++)
            for (size_t j = 0; j < m->files[i].n_chunks; j++)
                if (!m->files[i].chunks[j].zero &&
                    !hset_add(&gc->refs, m->files[i].chunks[j].hash, SLOT_KNOWN))
                    gc->err = -ENOMEM;
    }
    snap_mf_fetch_free(f);
    if (gc->err) {
        snprintf(gc->msg, sizeof(gc->msg), "out of memory");
        gc_end(gc);
        return;
    }
    gc->cur++;
    gc_next_kept(gc);
}

/* Read the manifests of each kept committed generation, one after the
 * other, then list the chunks. */
static void gc_next_kept(struct gc_op *gc)
{
    struct gens_op *g = gc->g;
    char prefix[STORE_KEY_MAX + 1];

    for (; gc->cur < g->n; gc->cur++) {
        if (gc->drop[gc->cur] || !(g->gens[gc->cur].committed || g->gens[gc->cur].unauthentic))
            continue;
        if (!snap_mf_fetch_start(gc->s, &g->gens[gc->cur].commit, UINT32_MAX, true, on_gc_manifests,
                                 gc)) {
            gc->err = -ENOMEM;
            snprintf(gc->msg, sizeof(gc->msg), "out of memory");
            gc_end(gc);
        }
        return;
    }
    snprintf(prefix, sizeof(prefix), "%s/chunks/", gc->s->job);
    store_list(gc->s->store, prefix, on_gc_chunks, gc);
}

static void on_gc_gens(struct gens_op *g)
{
    struct gc_op *gc = g->owner;
    unsigned committed = 0;

    gc->g = g;
    if (g->err) {
        gc->err = g->err;
        snprintf(gc->msg, sizeof(gc->msg), "%s", g->msg);
        gc_end(gc);
        return;
    }
    if (!(gc->drop = calloc(g->n ? g->n : 1, sizeof(*gc->drop)))) {
        gc->err = -ENOMEM;
        snprintf(gc->msg, sizeof(gc->msg), "out of memory");
        gc_end(gc);
        return;
    }
    /* Newest first: the first keep committed generations stay; older
     * committed ones go; uncommitted ones go once older than the grace
     * period (abandoned, not in progress).  Unauthentic ones stay, with
     * what they reference, and never count among the keep: forged newer
     * records must not push real ones out, and under a wrong key every
     * real record looks forged, so deleting them would destroy committed
     * work.  They cost storage until an operator removes them. */
    for (size_t i = g->n; i-- > 0;) {
        struct snap_gen *sg = &g->gens[i];

        if (sg->committed && gc->o.spare && gc->o.spare(gc->o.spare_arg, sg->gen))
            gc->drop[i] = false;
        else if (sg->committed)
            gc->drop[i] = ++committed > gc->o.keep;
        else if (sg->unauthentic)
            gc->report.gens_unauthentic++; /* kept: see snap_gc() */
        else
            gc->drop[i] = sg->mtime_ms < gc->now - gc->o.grace_ms;
    }
    gc->cur = 0;
    gc_next_kept(gc);
}

static void early_gc(struct early *e)
{
    struct snap_gc_report r = { 0 };

    e->cb.gc(e->arg, e->err, e->msg, &r);
}

void snap_gc(struct snap *s, const struct snap_gc_opts *o, snap_gc_fn done, void *arg)
{
    struct gc_op *gc;

    if (o->keep == 0 || o->grace_ms < 0) {
        snap_early(s, early_gc, (union snap_cb){ .gc = done }, arg, -EINVAL,
                   "garbage collection keeps at least one generation");
        return;
    }
    if (!(gc = calloc(1, sizeof(*gc)))) {
        snap_early(s, early_gc, (union snap_cb){ .gc = done }, arg, -ENOMEM, "out of memory");
        return;
    }
    gc->s = s;
    gc->o = *o;
    gc->now = snap_now_ms();
    gc->done = done;
    gc->arg = arg;
    if (!snap_gens_op_start(s, on_gc_gens, gc)) {
        free(gc);
        snap_early(s, early_gc, (union snap_cb){ .gc = done }, arg, -ENOMEM, "out of memory");
    }
}

