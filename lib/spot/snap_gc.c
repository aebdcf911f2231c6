/* snap_gc: garbage collection (snap_gc()).
 *
 * It lists the generations and chooses which go (on_gc_gens()), reads the
 * manifests of every committed generation that stays for the chunks they
 * reference, lists the job's tree for its chunks, then deletes: the
 * dropped generations' commit records first, so that no reader ever sees
 * a committed generation with parts missing, then their other objects and
 * the chunks that nothing kept references and that are older than the
 * grace period.
 * GC never deletes what the newest committed generations reference,
 * and that is all a save deduplicates against (snap_save.c).  It deletes
 * only keys that are exactly the store format's own names (jobtree.h):
 * anything else in the job's tree is foreign, counted and left alone.
 * Before it deletes, it writes <job>/LATEST again where the pointer is
 * missing or behind the newest committed generation (gc_point()). */
#include "spot/snap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/jobtree.h"
#include "spot/store.h"

#include "snap_impl.h"

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
    struct store_entry *chunks;   /* the job's tree */
    size_t n_chunks;
    const char **foreign;         /* keys in g->entries and chunks */
    size_t n_foreign, cap_foreign;
    int err;
    char msg[MSG_MAX];
    struct snap_gc_report report;
    uint64_t newest;              /* committed, for <job>/LATEST */
};

static void early_gc(struct early *e);
static void on_gc_gens(struct gens_op *g);
static void gc_point(struct gc_op *gc);
static void on_gc_latest(void *arg, int err, const char *msg, void *data, size_t len);
static void on_gc_pointed(void *arg, int err, const char *msg);
static void gc_next_kept(struct gc_op *gc);
static void on_gc_manifests(struct mf_fetch *f);
static void on_gc_chunks(void *arg, int err, const char *msg, struct store_entry *e, size_t n);
static int gc_foreign(struct gc_op *gc, const struct store_entry *e);
static int gc_add_key(struct gc_op *gc, const char *key, uint64_t size);
static void gc_pump(struct gc_op *gc);
static void on_gc_deleted(void *arg, int err, const char *msg);
static void gc_end(struct gc_op *gc);

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

static void early_gc(struct early *e)
{
    struct snap_gc_report r = { 0 };

    e->cb.gc(e->arg, e->err, e->msg, &r);
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
    gc_point(gc);
}

/* Before anything is deleted: <job>/LATEST names the newest committed
 * generation, or a newer one (a commit since the listing).  A pointer
 * that is missing, garbage or behind (its write failed, or it names a
 * generation about to go) is written again; one that cannot be read is
 * left as it is (readers check it and fall back). */
static void gc_point(struct gc_op *gc)
{
    const struct gens_op *g = gc->g;
    char key[STORE_KEY_MAX + 1];

    gc->newest = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->gens[i].committed)
            gc->newest = g->gens[i].gen;
    if (!gc->newest || gc->o.dry_run) {
        gc_next_kept(gc);
        return;
    }
    snprintf(key, sizeof(key), "%s/LATEST", gc->s->job);
    store_get(gc->s->store, key, LATEST_MAX, on_gc_latest, gc);
}

static void on_gc_latest(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct gc_op *gc = arg;
    const char *why = NULL;
    uint64_t gen = 0;
    bool stale = err == -ENOENT || err == -EFBIG ||
                 (!err && (snap_latest_parse(data, len, gc->s->job, &gen, &why) < 0 ||
                           gen < gc->newest));

    free(data);
    if (stale)
        snap_latest_put(gc->s, gc->newest, on_gc_pointed, gc);
    else
        gc_next_kept(gc);
}

static void on_gc_pointed(void *arg, int err, const char *msg)
{
    gc_next_kept(arg);
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
    /* The whole tree, not chunks/ alone: foreign objects anywhere in it
     * are counted, and a stray key under chunks/ is never a chunk. */
    snprintf(prefix, sizeof(prefix), "%s/", gc->s->job);
    store_list(gc->s->store, prefix, on_gc_chunks, gc);
}

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
            struct jobtree_name jn;

            jobtree_parse(gc->s->job, g->entries[i].key, &jn);
            if (pass == 0 && jn.kind == JOBTREE_FOREIGN && gc_foreign(gc, &g->entries[i]) < 0)
                gc->err = -ENOMEM;
            if (!jobtree_in_gen(jn.kind) || (jn.kind == JOBTREE_COMMIT) != (pass == 0))
                continue;
            for (size_t j = 0; j < g->n; j++)
                if (g->gens[j].gen == jn.gen && gc->drop[j] &&
                    gc_add_key(gc, g->entries[i].key, g->entries[i].size) < 0)
                    gc->err = -ENOMEM;
            if (pass == 0)
                gc->n_commits = gc->n_keys;
        }
    for (size_t i = 0; i < n && !gc->err; i++) {
        struct jobtree_name jn;
        size_t jl = strlen(gc->s->job);

        /* gens/ was read from the generations' listing, above. */
        if (jobtree_parse(gc->s->job, e[i].key, &jn) != JOBTREE_CHUNK) {
            if (jn.kind == JOBTREE_FOREIGN && strncmp(e[i].key + jl, "/gens/", 6) != 0 &&
                gc_foreign(gc, &e[i]) < 0)
                gc->err = -ENOMEM;
            continue;
        }
        if (hset_find(&gc->refs, jn.hash) || e[i].mtime_ms > gc->now - gc->o.grace_ms) {
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

/* A foreign object: counted, its key reported, never deleted. */
static int gc_foreign(struct gc_op *gc, const struct store_entry *e)
{
    if (gc->n_foreign == gc->cap_foreign) {
        size_t cap = gc->cap_foreign ? 2 * gc->cap_foreign : 16;
        const char **f = realloc(gc->foreign, cap * sizeof(*f));

        if (!f)
            return -ENOMEM;
        gc->foreign = f;
        gc->cap_foreign = cap;
    }
    gc->foreign[gc->n_foreign++] = e->key;
    gc->report.foreign_bytes += e->size;
    return 0;
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

static void gc_end(struct gc_op *gc)
{
    gc->report.foreign = gc->foreign;
    gc->report.n_foreign = gc->n_foreign;
    gc->done(gc->arg, gc->err, gc->err ? gc->msg : "", &gc->report);
    free(gc->foreign);
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
