/* snap_save: a save, one rank of a generation from a directory
 * (snap_save(), snap_save_split()).
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
 * deletes what the newest committed generations reference. */
#include "spot/snap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "spot/bigbuf.h"
#include "spot/pool.h"
#include "spot/store.h"
#include "spot/zipgrid.h"

#include "snap_impl.h"

#define SCAN_DEPTH_MAX 64
#define SCAN_FILES_MAX 1000000

struct task {
    struct pool_job job;
    struct save *sv;
    size_t file, idx;
    uint64_t off;
    uint32_t len;
    uint8_t *buf;
    uint8_t hash[CHUNK_HASH_LEN];
    uint8_t payload_sha[CHUNK_HASH_LEN];
    struct hash_state hasher;  /* the plaintext's hash state, for payload_sha */
    bool zero;
    /* An early store's task: the check of what it read (s->seen).  A
     * save's: what an early store read at the same place (expect), and
     * whether the bytes read now are those (by_check: hash from it). */
    struct hash_check check, want_check;
    uint8_t want_hash[CHUNK_HASH_LEN];
    bool expect, want_zero, by_check;
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
    /* snap_prestore(): one file, dir/pre_rel, stored from byte pre_from;
     * final: chunked as a save chunks it, else whole chunks only */
    char *pre_rel;
    uint64_t pre_from;
    bool pre_final;
    /* snap_put_chunk(): one chunk of pre_rel's stream, in put_buf (taken
     * by its task), reported to put_done */
    uint8_t *put_buf;
    uint32_t put_len;
    snap_chunk_fn put_done;
    /* req->streamed, copied at the call: joins m.files in the scan */
    struct mf_file *streamed;
    size_t n_streamed;
};

struct scan_state {
    struct save *sv;
    size_t cap;
    char path[PATH_MAX];
};

static void early_saved(struct early *e);
static void save_start(struct save *sv);
static void scan_one(struct save *sv, int dirfd);
static void on_known_gens(struct gens_op *g);
static void on_known_manifests(struct mf_fetch *f);
static void known_loaded(struct snap *s);
static void scan_work(struct pool_job *job);
static int scan_dir(struct scan_state *st, int dirfd, const char *rel, int depth);
static int scan_add(struct scan_state *st, const char *rel, const struct stat *stp,
                    enum mf_type type, const char *target, int fd);
static int plan_chunks(const struct snap *s, struct mf_file *f, int fd);
static int copy_streamed(struct save *sv);
static int add_streamed(struct save *sv);
static void check_streamed(struct save *sv);
static ssize_t fd_read(void *ctx, void *buf, size_t len, uint64_t off);
static int cmp_file(const void *a, const void *b);
static void scan_done(struct pool_job *job);
static void save_pump(struct save *sv);
static void set_active(struct save *sv, bool on);
static void task_work(struct pool_job *job);
static void task_run(struct task *t);
static bool recheck(struct task *t);
static uint64_t thread_cpu_ns(void);
static void task_done(struct pool_job *job);
static bool owns(const struct save *sv, const uint8_t *hash);
static int defer(struct save *sv, const struct task *t);
static void on_put(void *arg, int err, const char *msg);
static void settle(struct task *t, int err, const char *msg);
static void task_end(struct task *t, int err, const char *msg);
static void task_free(struct task *t);
static uint8_t *buf_get(struct snap *s);
static int fingerprint(const struct save *sv, uint8_t out[CHUNK_HASH_LEN]);
static void seen_put(struct snap *s, const struct save *sv, const struct task *t);
static void seen_want(const struct snap *s, const struct save *sv, struct task *t);
static void save_manifest(struct save *sv);
static void on_manifest_put(void *arg, int err, const char *msg);

void snap_save(struct snap *s, const struct snap_save_req *req, struct snap_counters *c,
               snap_saved_fn done, void *arg)
{
    struct save *sv;
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
    copy_streamed(sv); /* a failure is reported from the loop, at the scan's end */
    save_start(sv);
}

void snap_prestore(struct snap *s, uint64_t gen, const char *dir, const char *rel, uint64_t from,
                   bool final, struct snap_counters *c, snap_saved_fn done, void *arg)
{
    struct save *sv;

    if (gen == 0 || gen > GEN_MAX || !dir || !*dir || !rel || !manifest_path_valid(rel)) {
        snap_early(s, early_saved, (union snap_cb){ .saved = done }, arg, -EINVAL,
                   "invalid early store request (generation 1..%llu, a file in a directory)",
                   GEN_MAX);
        return;
    }
    sv = calloc(1, sizeof(*sv));
    if (!sv || !(sv->dir = strdup(dir)) || !(sv->pre_rel = strdup(rel)) ||
        !(sv->method = strdup("app"))) {
        if (sv) {
            free(sv->dir);
            free(sv->pre_rel);
        }
        free(sv);
        snap_early(s, early_saved, (union snap_cb){ .saved = done }, arg, -ENOMEM, "out of memory");
        return;
    }
    sv->s = s;
    sv->req.gen = gen;
    sv->req.dir = sv->dir;
    sv->pre_from = from;
    sv->pre_final = final;
    sv->c = c ? c : &sv->own;
    sv->done = done;
    sv->arg = arg;
    save_start(sv);
}

uint8_t *snap_chunk_buf(struct snap *s)
{
    return buf_get(s);
}

void snap_chunk_buf_put(struct snap *s, uint8_t *buf)
{
    (void)s;
    bigbuf_free(buf);
}

static void put_early(struct early *e)
{
    e->cb.chunk(e->arg, e->err, e->msg, NULL);
}

void snap_put_chunk(struct snap *s, uint64_t gen, const char *name, uint8_t *buf, uint32_t len,
                    struct snap_counters *c, snap_chunk_fn done, void *arg)
{
    struct save *sv;

    if (gen == 0 || gen > GEN_MAX || !name || !buf || len == 0 || len > s->chunk_size) {
        bigbuf_free(buf);
        snap_early(s, put_early, (union snap_cb){ .chunk = done }, arg, -EINVAL,
                   "invalid chunk (generation 1..%llu, 1 to %u bytes)", GEN_MAX, s->chunk_size);
        return;
    }
    sv = calloc(1, sizeof(*sv));
    if (!sv || !(sv->pre_rel = strdup(name)) || !(sv->method = strdup("app"))) {
        if (sv)
            free(sv->pre_rel);
        free(sv);
        bigbuf_free(buf);
        snap_early(s, put_early, (union snap_cb){ .chunk = done }, arg, -ENOMEM, "out of memory");
        return;
    }
    sv->s = s;
    sv->req.gen = gen;
    sv->put_buf = buf;
    sv->put_len = len;
    sv->put_done = done;
    sv->c = c ? c : &sv->own;
    sv->arg = arg;
    save_start(sv);
}

/* Scan once the chunks that the store already holds are known. */
static void save_start(struct save *sv)
{
    struct snap *s = sv->s;
    struct gens_op *g;

    sv->scan.work = scan_work;
    sv->scan.done = scan_done;
    /* Chunks stored for another generation may have been collected since
     * (a generation that was never committed): only this one's count. */
    if (s->stored_gen != sv->req.gen) {
        hset_clear(&s->stored);
        s->stored_gen = sv->req.gen;
    }
    /* A stream's chunks come one by one: the newest generation is looked
     * up once for the generation they are for, not for each. */
    if (sv->put_done && !s->known_loading && s->known_for == sv->req.gen) {
        scan_work(&sv->scan);
        scan_done(&sv->scan);
        return;
    }
    sv->next_waiter = s->known_waiters;
    s->known_waiters = sv;
    if (s->known_loading)
        return;
    s->known_loading = true;
    s->known_for = sv->req.gen;
    /* The newest through <job>/LATEST: a few requests, not one per
     * generation the job keeps (snap_latest.c). */
    g = snap_gens_op_newest(s, on_known_gens, NULL);
    if (!g) {
        known_loaded(s);
        return;
    }
    /* The listing's callback comes later, from the loop. */
    g->below = sv->req.gen;
}

static void early_saved(struct early *e)
{
    e->cb.saved(e->arg, e->err, e->msg, NULL);
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

static void save_report(struct save *sv)
{
    if (sv->put_done)
        sv->put_done(sv->arg, sv->err, sv->msg, sv->err ? NULL : &sv->m.files[0].chunks[0]);
    else if (sv->err)
        sv->done(sv->arg, sv->err, sv->msg, NULL);
    else
        sv->done(sv->arg, 0, "", &sv->result);
    manifest_release(&sv->m);
    free(sv->def);
    free(sv->json);
    free(sv->pre_rel);
    free(sv->dir);
    free(sv->method);
    bigbuf_free(sv->put_buf);
    for (size_t i = 0; i < sv->n_streamed; i++) {
        free(sv->streamed[i].path);
        free(sv->streamed[i].chunks);
    }
    free(sv->streamed);
    free(sv);
}

/* -- what the store already holds -- */

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

/* -- scanning the directory (pool) -- */

static void scan_work(struct pool_job *job)
{
    struct save *sv = (struct save *)((char *)job - offsetof(struct save, scan));
    struct scan_state st = { .sv = sv };
    int fd;

    if (sv->put_done) {
        /* One chunk, from no file. */
        struct mf_file *f = calloc(1, sizeof(*f));

        if (!f || !(f->path = strdup(sv->pre_rel)) || !(f->chunks = calloc(1, sizeof(*f->chunks)))) {
            if (f)
                free(f->path);
            free(f);
            save_fail(sv, -ENOMEM, "out of memory");
            return;
        }
        f->type = MF_FILE;
        f->size = sv->put_len;
        f->chunks[0].len = sv->put_len;
        f->n_chunks = 1;
        sv->m.files = f;
        sv->m.n_files = 1;
        return;
    }
    if ((fd = open(sv->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        save_fail(sv, -errno, "cannot open the checkpoint directory '%s': %s", sv->dir,
                  strerror(errno));
        return;
    }
    if (sv->pre_rel) {
        scan_one(sv, fd);
        return;
    }
    if (scan_dir(&st, fd, "", 0) == 0 && add_streamed(sv) == 0 && sv->m.n_files) {
        qsort(sv->m.files, sv->m.n_files, sizeof(*sv->m.files), cmp_file);
        for (size_t i = 1; i < sv->m.n_files; i++)
            if (strcmp(sv->m.files[i - 1].path, sv->m.files[i].path) == 0) {
                save_fail(sv, -EEXIST, "'%s/%s' is in the directory and came as a stream "
                          "too", sv->dir, sv->m.files[i].path);
                break;
            }
    }
}

/* The request's streamed files, copied at the call: the caller's may go
 * before the scan. */
static int copy_streamed(struct save *sv)
{
    const struct mf_file *from = sv->req.streamed;
    size_t n = sv->req.n_streamed;

    sv->req.streamed = NULL;
    sv->req.n_streamed = 0;
    if (!n)
        return 0;
    if (!(sv->streamed = calloc(n, sizeof(*sv->streamed)))) {
        save_fail(sv, -ENOMEM, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const struct mf_file *g = &from[i];
        struct mf_file *f = &sv->streamed[i];

        if (g->type != MF_FILE || !g->path || !manifest_path_valid(g->path)) {
            save_fail(sv, -EINVAL, "invalid streamed file '%s'", g->path ? g->path : "");
            return -EINVAL;
        }
        sv->n_streamed++;
        if (!(f->path = strdup(g->path)) ||
            (g->n_chunks && !(f->chunks = malloc(g->n_chunks * sizeof(*f->chunks))))) {
            save_fail(sv, -ENOMEM, "out of memory");
            return -ENOMEM;
        }
        f->type = MF_FILE;
        f->mode = g->mode & 07777;
        f->mtime_s = g->mtime_s;
        f->mtime_ns = g->mtime_ns;
        f->streamed = true;
        if (g->n_chunks)
            memcpy(f->chunks, g->chunks, g->n_chunks * sizeof(*f->chunks));
        f->n_chunks = g->n_chunks;
        for (size_t c = 0; c < g->n_chunks; c++)
            f->size += g->chunks[c].len;
    }
    return 0;
}

/* The streamed files join the manifest (the pool). */
static int add_streamed(struct save *sv)
{
    struct manifest *m = &sv->m;
    struct mf_file *nf;

    if (sv->err || !sv->n_streamed)
        return sv->err;
    if (!(nf = realloc(m->files, (m->n_files + sv->n_streamed) * sizeof(*nf)))) {
        save_fail(sv, -ENOMEM, "out of memory");
        return -ENOMEM;
    }
    m->files = nf;
    memcpy(m->files + m->n_files, sv->streamed, sv->n_streamed * sizeof(*nf));
    m->n_files += sv->n_streamed;
    free(sv->streamed);
    sv->streamed = NULL;
    sv->n_streamed = 0;
    return 0;
}

/* Every chunk of a streamed file is zero, or stored: snap_put_chunk()
 * said so for this generation, or the newest committed one holds it (on
 * the loop, where s->stored changes). */
static void check_streamed(struct save *sv)
{
    struct snap *s = sv->s;

    for (size_t i = 0; !sv->err && i < sv->m.n_files; i++) {
        const struct mf_file *f = &sv->m.files[i];

        for (size_t c = 0; f->streamed && c < f->n_chunks; c++) {
            const struct mf_chunk *mc = &f->chunks[c];
            struct slot *slot;

            if (mc->zero) {
                sv->c->bytes_zero += mc->len;
                continue;
            }
            slot = s->stored_gen == sv->req.gen ? hset_find(&s->stored, mc->hash) : NULL;
            if ((!slot || slot->state != SLOT_KNOWN) && !hset_find(&s->known, mc->hash)) {
                save_fail(sv, -ENOENT, "chunk %zu of the streamed '%s' was not stored: the "
                          "stream's upload failed", c, f->path);
                break;
            }
            if (hset_find(&s->known, mc->hash))
                sv->c->bytes_skipped += mc->len;
            else
                sv->c->bytes_early += mc->len;
            sv->c->chunks++;
            sv->c->chunks_skipped++;
        }
    }
}

/* snap_prestore()'s one file: what is written of it so far. */
static void scan_one(struct save *sv, int dirfd)
{
    struct scan_state st = { .sv = sv };
    uint32_t cs = sv->s->chunk_size;
    struct stat stt;
    int fd = openat(dirfd, sv->pre_rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0 || fstat(fd, &stt) < 0 || !S_ISREG(stt.st_mode)) {
        save_fail(sv, fd < 0 ? -errno : -EINVAL, "cannot store '%s/%s' early: %s", sv->dir,
                  sv->pre_rel, fd < 0 ? strerror(errno) : "not a regular file");
    } else {
        /* Being written: whole chunks of the fixed grid, which is what a
         * save makes of a file that is not a zip. */
        if (!sv->pre_final)
            stt.st_size -= stt.st_size % cs;
        scan_add(&st, sv->pre_rel, &stt, MF_FILE, NULL, sv->pre_final ? fd : -1);
    }
    if (fd >= 0)
        close(fd);
    close(dirfd);
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

static ssize_t fd_read(void *ctx, void *buf, size_t len, uint64_t off)
{
    return pread(*(int *)ctx, buf, len, (off_t)off);
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const struct mf_file *)a)->path, ((const struct mf_file *)b)->path);
}

static void scan_done(struct pool_job *job)
{
    struct save *sv = (struct save *)((char *)job - offsetof(struct save, scan));

    if (job->cancelled)
        save_fail(sv, -ECANCELED, "cancelled");
    sv->scanned = true;
    check_streamed(sv);
    if (sv->pre_rel && sv->m.n_files == 1) {
        const struct mf_file *f = &sv->m.files[0];

        while (sv->next_chunk < f->n_chunks &&
               sv->next_off + f->chunks[sv->next_chunk].len <= sv->pre_from)
            sv->next_off += f->chunks[sv->next_chunk++].len;
        sv->result.bytes = sv->next_off;
    }
    for (size_t i = 0; i < sv->m.n_files; i++) {
        if (sv->m.files[i].type == MF_FILE) {
            sv->c->files++;
            sv->c->bytes_total += sv->m.files[i].size;
        }
    }
    save_pump(sv);
}

/* -- chunk tasks -- */

static bool save_more(const struct save *sv)
{
    return sv->redo ? sv->next_def < sv->n_def : sv->next_file < sv->m.n_files;
}

/* Start chunk tasks while the window allows; finish when all are done. */
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
        if (f->type != MF_FILE || f->streamed || sv->next_chunk >= f->n_chunks) {
            sv->next_file++;
            sv->next_chunk = 0;
            sv->next_off = 0;
            continue;
        }
        t = calloc(1, sizeof(*t));
        if (t) {
            t->off = sv->next_off;
            t->len = f->chunks[sv->next_chunk].len;
            if (sv->put_buf) {
                t->buf = sv->put_buf;
                sv->put_buf = NULL;
            } else {
                t->buf = buf_get(s);
            }
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
        seen_want(s, sv, t);
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
    if (sv->pre_rel) {
        /* An early store has no manifest: what it stored is in s->stored,
         * for the save that follows. */
        if (!sv->err && sv->m.n_files == 1)
            sv->result.bytes = sv->m.files[0].size;
        sv->result.gen = sv->req.gen;
        save_report(sv);
        return;
    }
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

    if (t->stage == 1 && sv->put_done) {
        /* snap_put_chunk(): the bytes are in buf already. */
        t->zero = chunk_is_zero(t->buf, t->len);
        if (!t->zero && chunk_hash_plain(t->buf, t->len, t->hash, s->sign ? &t->hasher : NULL) < 0) {
            t->err = -EIO;
            snprintf(t->msg, sizeof(t->msg), "cannot hash a chunk of '%s'", f->path);
        }
        return;
    }
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
        if (fstat(fd, &stt) < 0 ||
            (!sv->pre_rel && (uint64_t)stt.st_size != f->size) ||
            (!sv->pre_rel && stt.st_mtim.tv_sec >= 0 && (stt.st_mtim.tv_sec != f->mtime_s ||
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
        if (sv->pre_rel || t->expect)
            hash_check(t->buf, t->len, &t->check);
        if (t->expect && t->check.lo == t->want_check.lo && t->check.hi == t->want_check.hi) {
            /* The bytes an early store hashed: its hash, not a second. */
            t->by_check = true;
            t->zero = t->want_zero;
            memcpy(t->hash, t->want_hash, CHUNK_HASH_LEN);
            return;
        }
        t->zero = chunk_is_zero(t->buf, t->len);
        if (!t->zero && chunk_hash_plain(t->buf, t->len, t->hash, s->sign ? &t->hasher : NULL) < 0) {
            t->err = -EIO;
            snprintf(t->msg, sizeof(t->msg), "cannot hash '%s'", path);
        }
        return;
    }
    if (t->by_check && !recheck(t))
        return;
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
                        : hash_sha256(t->enc.data, t->enc.len, t->payload_sha)) < 0) {
        t->err = -EIO;
        snprintf(t->msg, sizeof(t->msg), "cannot hash a chunk of '%s'", f->path);
    }
}

/* A chunk whose hash came from its early store's check is stored after
 * all (that store failed): hashed here, before it is stored under that
 * name, and for the payload hash.  False (t->err) when it differs. */
static bool recheck(struct task *t)
{
    struct snap *s = t->sv->s;
    uint8_t hash[CHUNK_HASH_LEN];

    if (chunk_hash_plain(t->buf, t->len, hash, s->sign ? &t->hasher : NULL) < 0) {
        t->err = -EIO;
        snprintf(t->msg, sizeof(t->msg), "cannot hash a chunk of '%s'",
                 t->sv->m.files[t->file].path);
        return false;
    }
    if (memcmp(hash, t->hash, CHUNK_HASH_LEN) != 0) {
        t->err = -ESTALE;
        snprintf(t->msg, sizeof(t->msg), "a chunk of '%s' passed its check but not its hash: "
                 "it is not stored", t->sv->m.files[t->file].path);
        return false;
    }
    return true;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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
    if (sv->pre_rel && !sv->put_done)
        seen_put(s, sv, t);
    if (t->zero) {
        sv->c->bytes_zero += t->len;
        task_end(t, 0, "");
        return;
    }
    sv->c->bytes_hashed += t->len;
    if (t->by_check)
        sv->c->bytes_checked += t->len;
    slot = hset_find(&s->stored, t->hash);
    if (hset_find(&s->known, t->hash) || (slot && slot->state == SLOT_KNOWN)) {
        if (slot && slot->early && !sv->pre_rel && !hset_find(&s->known, t->hash))
            sv->c->bytes_early += t->len;
        else
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
        bigbuf_free(t->buf);
        t->buf = NULL;
        t->next_waiter = slot->waiters;
        slot->waiters = t;
        return;
    }
    if (!(slot = hset_add(&s->stored, t->hash, SLOT_STORING))) {
        task_end(t, -ENOMEM, "out of memory");
        return;
    }
    slot->early = sv->pre_rel != NULL;
    t->stage = 2;
    pool_submit(s->pool, &t->job);
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

static void on_put(void *arg, int err, const char *msg)
{
    settle(arg, err, msg);
}

/* t stored its chunk (err 0) or failed to: settle the tasks of other
 * ranks waiting for the same chunk, then t itself. */
static void settle(struct task *t, int err, const char *msg)
{
    struct snap *s = t->sv->s;
    struct slot *slot = hset_find(&s->stored, t->hash);
    struct task *w = slot ? slot->waiters : NULL;
    bool early = slot && slot->early;

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
            if (early && !w->sv->pre_rel)
                w->sv->c->bytes_early += w->len;
            else
                w->sv->c->bytes_skipped += w->len;
            w->sv->c->chunks_skipped++;
        }
        task_end(w, err, msg);
        w = next;
    }
    task_end(t, err, msg);
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

static void task_free(struct task *t)
{
    bigbuf_free(t->buf);
    hash_release(&t->hasher);
    /* A raw chunk is the task's buffer with its trailer written in, a zstd
     * one zstd's: bigbuf's either way. */
    bigbuf_free(t->enc.data);
    free(t);
}

/* A whole chunk and room for its trailer; bigbuf keeps the last ones
 * freed for the next. */
static uint8_t *buf_get(struct snap *s)
{
    return bigbuf_alloc((size_t)s->chunk_size + CHUNK_TRAILER_LEN);
}

/* -- the manifest, last -- */

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
    r = hash_sha256(buf, len, out);
    free(buf);
    return r;
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
    if (!sv->json || hash_sha256(sv->json, sv->json_len, sv->result.sha256) < 0) {
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

static void on_manifest_put(void *arg, int err, const char *msg)
{
    struct save *sv = arg;

    if (err)
        save_fail(sv, err, "%s", msg);
    else
        sv->c->bytes_sent += sv->json_len;
    save_report(sv);
}

/* -- what early stores read (struct seen_map) -- */

static size_t seen_pos(const char *rel, uint64_t off, size_t cap)
{
    struct hash_check h;

    hash_check(rel, strlen(rel), &h);
    return (size_t)((h.lo ^ off * 0x9e3779b97f4a7c15ull) & (cap - 1));
}

static struct seen *seen_find(const struct seen_map *m, const char *rel, uint64_t off)
{
    if (!m->cap)
        return NULL;
    for (size_t i = seen_pos(rel, off, m->cap);; i = (i + 1) & (m->cap - 1)) {
        struct seen *e = &m->slots[i];

        if (!e->rel)
            return NULL;
        if (e->off == off && strcmp(e->rel, rel) == 0)
            return e;
    }
}

static int seen_grow(struct seen_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 256;
    struct seen *ns = calloc(cap, sizeof(*ns));

    if (!ns)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        const struct seen *e = &m->slots[i];
        size_t j;

        if (!e->rel)
            continue;
        for (j = seen_pos(e->rel, e->off, cap); ns[j].rel; j = (j + 1) & (cap - 1))
            ;
        ns[j] = *e;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = cap;
    return 0;
}

/* Whether m holds the reads of sv's generation and folder. */
static bool seen_for(const struct seen_map *m, const struct save *sv)
{
    return m->dir && m->gen == sv->req.gen && strcmp(m->dir, sv->dir) == 0;
}

void seen_clear(struct seen_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].rel);
    free(m->slots);
    free(m->dir);
    memset(m, 0, sizeof(*m));
}

/* What the early store sv read in its task t, for the save that follows
 * (the newest read of a place wins).  Out of memory, that save only
 * hashes the chunk again. */
static void seen_put(struct snap *s, const struct save *sv, const struct task *t)
{
    struct seen_map *m = &s->seen;
    const char *rel = sv->m.files[t->file].path;
    struct seen *e;

    if (!seen_for(m, sv)) {
        seen_clear(m);
        if (!(m->dir = strdup(sv->dir)))
            return;
        m->gen = sv->req.gen;
    }
    if (!(e = seen_find(m, rel, t->off))) {
        char *copy;
        size_t i;

        if (((m->n + 1) * 4 > m->cap * 3 && seen_grow(m) < 0) || !(copy = strdup(rel)))
            return;
        for (i = seen_pos(rel, t->off, m->cap); m->slots[i].rel; i = (i + 1) & (m->cap - 1))
            ;
        e = &m->slots[i];
        e->rel = copy;
        e->off = t->off;
        m->n++;
    }
    e->len = t->len;
    e->zero = t->zero;
    memcpy(e->hash, t->hash, CHUNK_HASH_LEN);
    e->check = t->check;
}

/* The save sv's task t: what an early store of the same folder read at
 * its place, if one did. */
static void seen_want(const struct snap *s, const struct save *sv, struct task *t)
{
    const struct seen_map *m = &s->seen;
    const struct seen *e;

    if (sv->pre_rel || !seen_for(m, sv))
        return;
    if (!(e = seen_find(m, sv->m.files[t->file].path, t->off)) || e->len != t->len)
        return;
    t->expect = true;
    t->want_zero = e->zero;
    memcpy(t->want_hash, e->hash, CHUNK_HASH_LEN);
    t->want_check = e->check;
}
