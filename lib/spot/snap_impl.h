/* snap_impl: what the parts of the snapshot engine share.  snap.c holds
 * the engine, the listing of generations, the fetching of manifests and
 * the commit; snap_save.c, snap_fetch.c and snap_gc.c the operations
 * built on them; snap_latest.c the pointer <job>/LATEST and the search
 * for the newest generations through it. */
#ifndef SPOT_SNAP_IMPL_H
#define SPOT_SNAP_IMPL_H

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spot/hash.h"
#include "spot/snap.h"
#include "spot/store.h"

struct genclaim;

#define MSG_MAX (PATH_MAX + 512)

/* ---- hash sets ------------------------------------------------------------ */

enum { SLOT_EMPTY, SLOT_KNOWN, SLOT_STORING };

struct task;

struct slot {
    uint8_t key[CHUNK_HASH_LEN];
    uint8_t state;
    bool early;                  /* s->stored: by snap_prestore() */
    struct task *waiters;        /* SLOT_STORING: tasks of the same chunk */
};

/* Open addressing over SHA-256 hashes, which are uniform already. */
struct hset {
    struct slot *slots;
    size_t cap, n;
};

static inline size_t hpos(const uint8_t *key, size_t cap)
{
    uint64_t h;

    memcpy(&h, key, sizeof(h));
    return (size_t)(h & (cap - 1));
}

static inline struct slot *hset_find(const struct hset *h, const uint8_t *key)
{
    if (!h->cap)
        return NULL;
    for (size_t i = hpos(key, h->cap);; i = (i + 1) & (h->cap - 1)) {
        struct slot *s = &h->slots[i];
        if (s->state == SLOT_EMPTY)
            return NULL;
        if (memcmp(s->key, key, CHUNK_HASH_LEN) == 0)
            return s;
    }
}

/* Insert key (or find it).  NULL when out of memory. */
static inline struct slot *hset_add(struct hset *h, const uint8_t *key, uint8_t state)
{
    struct slot *s;

    if ((s = hset_find(h, key)))
        return s;
    if ((h->n + 1) * 4 > h->cap * 3) {
        size_t cap = h->cap ? h->cap * 2 : 1024;
        struct slot *old = h->slots, *ns = calloc(cap, sizeof(*ns));

        if (!ns)
            return NULL;
        for (size_t i = 0; i < h->cap; i++) {
            if (old[i].state == SLOT_EMPTY)
                continue;
            size_t j = hpos(old[i].key, cap);
            while (ns[j].state != SLOT_EMPTY)
                j = (j + 1) & (cap - 1);
            ns[j] = old[i];
        }
        free(old);
        h->slots = ns;
        h->cap = cap;
    }
    for (size_t i = hpos(key, h->cap);; i = (i + 1) & (h->cap - 1)) {
        s = &h->slots[i];
        if (s->state == SLOT_EMPTY)
            break;
    }
    memcpy(s->key, key, CHUNK_HASH_LEN);
    s->state = state;
    s->waiters = NULL;
    h->n++;
    return s;
}

/* Removing from open addressing: reinsert the rest of the cluster. */
static inline void hset_remove(struct hset *h, struct slot *s)
{
    size_t i = (size_t)(s - h->slots);

    s->state = SLOT_EMPTY;
    h->n--;
    for (i = (i + 1) & (h->cap - 1); h->slots[i].state != SLOT_EMPTY;
         i = (i + 1) & (h->cap - 1)) {
        struct slot tmp = h->slots[i];
        size_t j;

        h->slots[i].state = SLOT_EMPTY;
        for (j = hpos(tmp.key, h->cap); h->slots[j].state != SLOT_EMPTY; j = (j + 1) & (h->cap - 1))
            ;
        h->slots[j] = tmp;
    }
}

static inline void hset_clear(struct hset *h)
{
    free(h->slots);
    memset(h, 0, sizeof(*h));
}

/* ---- what early stores read ---------------------------------------------- */

/* A chunk that an early store (snap_prestore()) read: where in which file,
 * its SHA-256 (none when zero), and the fast check of its bytes.  The save
 * after ckpt_saved() reads every chunk again, since the trainer may have
 * rewritten any of them; one whose check is unchanged takes its hash from
 * here instead of hashing the same bytes a second time. */
struct seen {
    char *rel;                   /* NULL: an empty slot */
    uint64_t off;
    uint32_t len;
    bool zero;
    uint8_t hash[CHUNK_HASH_LEN];
    struct hash_check check;
};

/* Open addressing over (rel, off), for one generation's folder. */
struct seen_map {
    struct seen *slots;
    size_t cap, n;
    char *dir;
    uint64_t gen;
};

void seen_clear(struct seen_map *m);

/* ---- the engine ----------------------------------------------------------- */

struct save;

struct snap {
    struct event_base *base;
    struct pool *pool;
    struct store *store;
    char job[MANIFEST_NAME_MAX + 1];
    uint32_t chunk_size;
    unsigned max_tasks;
    int level;
    double min_saving;
    bool sign;                   /* the store wants payload hashes */
    struct jobkey key;           /* signs and checks commit records, when keyed */
    bool keyed;
    bool preserve_special_modes; /* restore: modes exactly as stored */
    struct genclaim *claims;     /* generation numbers, and whether records are
                                    created conditionally */
    struct hset known;           /* chunks of generation known_gen */
    uint64_t known_gen;
    bool known_loading;
    uint64_t known_for;          /* the generation the last load was for */
    struct save *known_waiters;  /* saves waiting for known to load */
    struct hset stored;          /* chunks stored for generation stored_gen */
    uint64_t stored_gen;
    struct seen_map seen;        /* read by early stores of stored_gen */
    unsigned alive;              /* save tasks of every save, against max_tasks */
    struct save *active;         /* saves with chunks left to start */
    struct store_entry *foreign; /* under gens/, in the newest listing (owned) */
    size_t n_foreign;
};

/* "<job>/chunks/<2 hex>/<hex>": where the chunk of that hash is stored. */
void snap_chunk_key(const struct snap *s, const uint8_t *hash, char *key, size_t size);
/* The wall clock in milliseconds since 1970. */
int64_t snap_now_ms(void);

/* ---- listing generations -------------------------------------------------- */

struct gens_op {
    struct snap *s;
    struct snap_gen *gens;
    size_t n;
    struct store_entry *entries;   /* the listing, kept for GC */
    size_t n_entries;
    size_t pending;
    int err;
    char msg[MSG_MAX];
    void (*next)(struct gens_op *g);   /* called once the commits are read */
    void *owner;
    uint64_t below;                    /* the generation a save dedups for */
    snap_gens_fn done;
    snap_newest_fn newest_done;
    void *arg;
    bool all;                          /* gens is every generation (a full
                                          listing), not those from one on */
    /* Discovery through <job>/LATEST (snap_latest.c). */
    uint64_t latest;                   /* the pointer's generation */
    uint64_t listed_to;                /* numbers below it are listed */
    uint64_t top;                      /* the newest number with objects */
    size_t lists;                      /* listings in flight */
    void (*then)(struct gens_op *g);   /* the owner's next */
};

/* List and read commit records, then call next(g) on the loop.  NULL when
 * out of memory (nothing started). */
struct gens_op *snap_gens_op_start(struct snap *s, void (*next)(struct gens_op *), void *owner);
/* Only generation gen (one listing of its prefix), then next(g). */
struct gens_op *snap_gens_op_one(struct snap *s, uint64_t gen, void (*next)(struct gens_op *),
                                 void *owner);
/* The newest generations, from the one <job>/LATEST names on, found in a
 * few requests whatever the number of generations; where the pointer
 * does not hold, every generation (g->all).  Then next(g).  See
 * snap_latest.c. */
struct gens_op *snap_gens_op_newest(struct snap *s, void (*next)(struct gens_op *), void *owner);
/* Start the full listing of <job>/gens/ into g (g->all). */
void snap_gens_list(struct gens_op *g);
/* Take listing e (n entries, becoming g's), read the commit records, then
 * g->next(g). */
void snap_gens_build(struct gens_op *g, struct store_entry *e, size_t n);
/* Frees g with its generations and its listing. */
void snap_gens_op_free(struct gens_op *g);

/* Write <job>/LATEST naming gen (after its commit record).  done may be
 * NULL; a failure is only reported: readers never depend on it. */
void snap_latest_put(struct snap *s, uint64_t gen, snap_done_fn done, void *arg);

/* ---- errors found before any work ----------------------------------------- */

/* Report an error found before any work, from the loop. */
union snap_cb {
    snap_done_fn done;
    snap_saved_fn saved;
    snap_gens_fn gens;
    snap_verify_fn verified;
    snap_gc_fn gc;
    snap_manifests_fn shown;
    snap_newest_fn newest;
    snap_chunk_fn chunk;
};

struct early {
    int err;
    char msg[MSG_MAX];
    void (*report)(struct early *e);
    union snap_cb cb;
    void *arg;
};

/* Report err and the formatted message through report(), from the loop. */
void snap_early(struct snap *s, void (*report)(struct early *), union snap_cb cb, void *arg,
                int err, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The report() of an operation whose callback is a snap_done_fn. */
void snap_early_done(struct early *e);

/* ---- fetching and checking manifests --------------------------------------- */

/* Get the manifests of ranks [0, c->world_size) of a committed generation,
 * each checked against the digest in the commit record. */
struct mf_fetch {
    struct snap *s;
    const struct commit *c;
    struct manifest *mfs;         /* world_size, filled */
    uint8_t (*digests)[CHUNK_HASH_LEN];
    size_t pending;
    int err;
    char msg[MSG_MAX];
    void (*next)(struct mf_fetch *f);
    void *owner;
    bool parse;                   /* false: digests only (commit) */
};

/* Fetch c's manifests, then call next(f) on the loop; f->err is the first
 * error (one missing, not matching its digest, or, with parse, invalid).
 * only: this rank alone (UINT32_MAX: all); parse: false to check the
 * digests alone.  NULL when out of memory (nothing started). */
struct mf_fetch *snap_mf_fetch_start(struct snap *s, const struct commit *c, uint32_t only,
                                     bool parse, void (*next)(struct mf_fetch *), void *owner);
/* Frees f and the manifests it holds. */
void snap_mf_fetch_free(struct mf_fetch *f);

#endif
