/* lib/spot/snap.c on a real file store: the split save of a replicated
 * checkpoint, and restores of what a hostile store holds. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "harness.h"
#include "spot/hash.h"
#include "spot/pool.h"
#include "spot/snap.h"
#include "spot/store.h"

#define RANKS 2
#define CHUNK (64 * 1024)

struct split_run {
    struct event_base *base;
    struct snap_split *sp[RANKS];
    uint8_t fp[RANKS][32];
    int splits, saved, errs;
    struct snap_saved res[RANKS];
    struct snap_counters c[RANKS];
    int verified, verify_err;
    uint64_t bad;
};

struct rank_arg {
    struct split_run *run;
    int rank;
};

static void on_split(void *arg, struct snap_split *sp, const uint8_t fp[32])
{
    struct rank_arg *a = arg;
    struct split_run *r = a->run;

    r->sp[a->rank] = sp;
    memcpy(r->fp[a->rank], fp, 32);
    /* Every rank's fingerprint in: the rest is stored here only when they
     * differ, as the world decides. */
    if (++r->splits == RANKS) {
        bool same = memcmp(r->fp[0], r->fp[1], 32) == 0;
        for (int i = 0; i < RANKS; i++)
            snap_save_split(r->sp[i], !same);
    }
}

static void on_saved(void *arg, int err, const char *msg, const struct snap_saved *s)
{
    struct rank_arg *a = arg;

    if (err) {
        fprintf(stderr, "    save of rank %d: %s\n", a->rank, msg);
        a->run->errs++;
    } else {
        a->run->res[a->rank] = *s;
    }
    if (++a->run->saved == RANKS)
        event_base_loopbreak(a->run->base);
}

static void on_committed(void *arg, int err, const char *msg)
{
    struct split_run *r = arg;

    if (err)
        fprintf(stderr, "    commit: %s\n", msg);
    r->errs += err != 0;
    event_base_loopbreak(r->base);
}

static void on_verified(void *arg, int err, const char *msg, const struct snap_verify_report *v)
{
    struct split_run *r = arg;

    r->verified = 1;
    r->verify_err = err;
    r->bad = v ? v->bad_chunks : 0;
    event_base_loopbreak(r->base);
}

/* dir/state.bin: n chunks, chunk i filled from seed + i. */
static void write_state(const char *dir, int n, int seed)
{
    char path[4096];
    uint8_t *b = malloc(CHUNK);
    FILE *f;

    mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/state.bin", dir);
    f = fopen(path, "w");
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < CHUNK; j++)
            b[j] = (uint8_t)((seed + i) * 131 + j * 7 + (j >> 9));
        fwrite(b, 1, CHUNK, f);
    }
    fclose(f);
    free(b);
}

/* Save dirs[] as ranks 0 and 1 of gen, split, then commit and verify. */
static void split_save(struct snap *s, struct event_base *base, uint64_t gen,
                       const char *dirs[RANKS], struct split_run *r)
{
    struct rank_arg a[RANKS];
    struct commit_rank cr[RANKS];
    struct commit c;

    memset(r, 0, sizeof(*r));
    r->base = base;
    for (int i = 0; i < RANKS; i++) {
        struct snap_save_req req = { .dir = dirs[i], .gen = gen, .rank = (uint32_t)i,
                                     .step = 7, .method = "app", .share_index = (uint32_t)i,
                                     .share_count = RANKS, .split = on_split,
                                     .split_arg = &a[i] };
        a[i] = (struct rank_arg){ r, i };
        snap_save(s, &req, &r->c[i], on_saved, &a[i]);
    }
    event_base_dispatch(base);
    memset(&c, 0, sizeof(c));
    snprintf(c.job, sizeof(c.job), "j");
    c.gen = gen;
    c.step = 7;
    c.world_size = RANKS;
    snprintf(c.reason, sizeof(c.reason), "manual");
    snprintf(c.method, sizeof(c.method), "app");
    for (int i = 0; i < RANKS; i++) {
        cr[i] = (struct commit_rank){ .rank = (uint32_t)i, .bytes = r->res[i].bytes };
        memcpy(cr[i].sha256, r->res[i].sha256, 32);
    }
    c.ranks = cr;
    snap_commit(s, &c, on_committed, r);
    event_base_dispatch(base);
    snap_verify(s, gen, NULL, on_verified, r);
    event_base_dispatch(base);
}

TEST(snap_split)
{
    char root[] = "/tmp/spotd-unit-snap.XXXXXX", url[128], d0[256], d1[256], d2[256];
    struct event_base *base = event_base_new();
    struct pool *pool = pool_new(base, 2);
    struct store_ctx sc = { .base = base, .pool = pool };
    struct store *st = NULL;
    struct snap *s;
    struct split_run r;
    char err[512];
    const char *same[RANKS], *differ[RANKS];
    uint64_t sent;

    CHECK(mkdtemp(root) != NULL);
    snprintf(url, sizeof(url), "file://%s", root);
    CHECK_INT(store_open(url, &sc, &st, err, sizeof(err)), 0);
    s = snap_new(&(struct snap_opts){ .base = base, .pool = pool, .store = st, .job = "j",
                                      .chunk_size = CHUNK },
                 err, sizeof(err));
    CHECK(s != NULL);
    snprintf(d0, sizeof(d0), "%s-r0", root);
    snprintf(d1, sizeof(d1), "%s-r1", root);
    snprintf(d2, sizeof(d2), "%s-r2", root);
    write_state(d0, 32, 1);
    write_state(d1, 32, 1);
    write_state(d2, 32, 100);

    /* Replicated: the same fingerprint; each rank stores its share only,
     * together everything once, and the generation verifies. */
    same[0] = d0, same[1] = d1;
    split_save(s, base, 1, same, &r);
    CHECK_INT(r.errs, 0);
    CHECK_INT(memcmp(r.fp[0], r.fp[1], 32), 0);
    sent = r.c[0].chunks_sent + r.c[1].chunks_sent;
    CHECK_INT((int)sent, 32);
    CHECK(r.c[0].chunks_sent > 4 && r.c[1].chunks_sent > 4);
    CHECK_INT((int)(r.c[0].bytes_split + r.c[1].bytes_split), 32 * CHUNK);
    CHECK_INT(r.verified, 1);
    CHECK_INT(r.verify_err, 0);
    CHECK_INT((int)r.bad, 0);

    /* Different: the fingerprints differ, each rank stores the rest too,
     * and the generation verifies. */
    differ[0] = d0, differ[1] = d2;
    split_save(s, base, 2, differ, &r);
    CHECK_INT(r.errs, 0);
    CHECK(memcmp(r.fp[0], r.fp[1], 32) != 0);
    /* Rank 0's chunks are all in generation 1: nothing to send; rank 2's
     * are new: all sent, by rank 1, the half it did not own included. */
    CHECK_INT((int)r.c[0].chunks_sent, 0);
    CHECK_INT((int)r.c[1].chunks_sent, 32);
    CHECK_INT((int)r.c[1].bytes_split, 0);
    CHECK_INT(r.verified, 1);
    CHECK_INT(r.verify_err, 0);
    CHECK_INT((int)r.bad, 0);

    s = snap_free(s);
    st = store_close(st);
    pool = pool_free(pool);
    event_base_free(base);
    {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s' '%s' '%s'", root, d0, d1, d2);
        CHECK_INT(system(cmd), 0);
    }
}

/* ---- signed commit records ------------------------------------------------ */

struct op {
    struct event_base *base;
    int err;
    char msg[2048];
    struct snap_gen *gens;
    size_t n;
    struct snap_saved saved;
    struct snap_verify_report vr;
    struct snap_gc_report gr;
};

static void op_done(void *arg, int err, const char *msg)
{
    struct op *o = arg;

    o->err = err;
    snprintf(o->msg, sizeof(o->msg), "%s", msg);
    event_base_loopbreak(o->base);
}

static void op_saved(void *arg, int err, const char *msg, const struct snap_saved *s)
{
    struct op *o = arg;

    if (s)
        o->saved = *s;
    op_done(o, err, msg);
}

static void op_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct op *o = arg;

    o->gens = gens;
    o->n = n;
    op_done(o, err, msg);
}

static void op_verified(void *arg, int err, const char *msg, const struct snap_verify_report *r)
{
    struct op *o = arg;

    o->vr = *r;
    op_done(o, err, msg);
}

static void op_gc(void *arg, int err, const char *msg, const struct snap_gc_report *r)
{
    struct op *o = arg;

    o->gr = *r;
    op_done(o, err, msg);
}

static struct snap *keyed_snap(struct event_base *base, struct pool *pool, struct store *st,
                               const struct frame_key *key)
{
    char err[512];
    struct snap *s = snap_new(&(struct snap_opts){ .base = base, .pool = pool, .store = st,
                                                   .job = "j", .chunk_size = CHUNK, .key = key },
                              err, sizeof(err));

    CHECK(s != NULL);
    return s;
}

/* Save dir as the one rank of gen and commit it with s (signed when s has
 * a key).  Returns the commit's error. */
static int save_commit(struct snap *s, struct event_base *base, const char *dir, uint64_t gen)
{
    struct op o = { .base = base };
    struct snap_save_req req = { .dir = dir, .gen = gen, .step = gen * 10, .method = "app" };
    struct commit_rank cr = { .rank = 0 };
    struct commit c = { .job = "j", .gen = gen, .step = gen * 10, .world_size = 1,
                        .reason = "manual", .method = "app", .created_ms = 1796045255000LL,
                        .version = "test", .ranks = &cr };

    snap_save(s, &req, NULL, op_saved, &o);
    event_base_dispatch(base);
    if (o.err)
        return o.err;
    memcpy(cr.sha256, o.saved.sha256, 32);
    cr.bytes = o.saved.bytes;
    snap_commit(s, &c, op_done, &o);
    event_base_dispatch(base);
    return o.err;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    char *buf = f ? calloc(1, 1 << 20) : NULL;

    *len = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    if (f)
        fclose(f);
    return buf;
}

static void spit(const char *path, const char *data, size_t len)
{
    char dir[4096], *slash;
    FILE *f;

    snprintf(dir, sizeof(dir), "%s", path);
    if ((slash = strrchr(dir, '/')))
        *slash = '\0';
    mkdir(dir, 0700);
    f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

/* What someone who can write the store but has no key can do: copy gen
 * from's manifest as generation to (its "gen" rewritten), and write a
 * commit record with the right digest, unsigned or signed with forger. */
static void forge(const char *root, uint64_t from, uint64_t to, const struct frame_key *forger)
{
    char path[4096], old[32], now[32], *mf, *p;
    struct commit_rank cr = { .rank = 0, .bytes = 1 };
    struct commit c = { .job = "j", .gen = to, .step = 12345, .world_size = 1,
                        .reason = "manual", .method = "app", .created_ms = 1796045255000LL,
                        .version = "forged", .ranks = &cr };
    size_t len;
    char *json;

    snprintf(path, sizeof(path), "%s/j/gens/%08llu/rank-0.json", root, (unsigned long long)from);
    mf = slurp(path, &len);
    CHECK(mf != NULL);
    if (!mf)
        return;
    snprintf(old, sizeof(old), "\"gen\":%llu,", (unsigned long long)from);
    snprintf(now, sizeof(now), "\"gen\":%llu,", (unsigned long long)to);
    CHECK((p = strstr(mf, old)) != NULL);
    if (p) {
        memmove(p + strlen(now), p + strlen(old), strlen(p + strlen(old)) + 1);
        memcpy(p, now, strlen(now));
    }
    len = strlen(mf);
    hash_sha256(mf, len, cr.sha256);
    snprintf(path, sizeof(path), "%s/j/gens/%08llu/rank-0.json", root, (unsigned long long)to);
    spit(path, mf, len);
    free(mf);
    if (forger) {
        struct jobkey jk;

        CHECK_INT(jobkey_init(&jk, forger), 0);
        CHECK_INT(jobkey_sign(&jk, &c), 0);
    }
    json = commit_to_json(&c, &len);
    snprintf(path, sizeof(path), "%s/j/gens/%08llu/COMMIT.json", root, (unsigned long long)to);
    spit(path, json, len);
    free(json);
}

static const struct snap_gen *gen_of(const struct op *o, uint64_t gen)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->gens[i].gen == gen)
            return &o->gens[i];
    return NULL;
}

static void list(struct snap *s, struct op *o)
{
    snap_gens_free(o->gens, o->n);
    o->gens = NULL;
    o->n = 0;
    snap_gens(s, op_gens, o);
    event_base_dispatch(o->base);
    CHECK_INT(o->err, 0);
}

TEST(snap_signed)
{
    char root[] = "/tmp/spotd-unit-signed.XXXXXX", url[128], d0[256], dest[300], err[512];
    struct frame_key ka = { .k = "job key A of the snap unit test!", .len = 32 };
    struct frame_key kb = { .k = "job key B of the snap unit test!", .len = 32 };
    struct event_base *base = event_base_new();
    struct pool *pool = pool_new(base, 2);
    struct store_ctx sc = { .base = base, .pool = pool };
    struct store *st = NULL;
    struct snap *sa, *sb, *none;
    struct op o = { .base = base };
    const struct snap_gen *g;

    CHECK(mkdtemp(root) != NULL);
    snprintf(url, sizeof(url), "file://%s", root);
    CHECK_INT(store_open(url, &sc, &st, err, sizeof(err)), 0);
    sa = keyed_snap(base, pool, st, &ka);
    sb = keyed_snap(base, pool, st, &kb);
    none = keyed_snap(base, pool, st, NULL);
    CHECK(snap_key_id(sa) && snap_key_id(sb) && strcmp(snap_key_id(sa), snap_key_id(sb)) != 0);
    CHECK(snap_key_id(none) == NULL);
    snprintf(d0, sizeof(d0), "%s-r0", root);
    write_state(d0, 4, 1);

    /* Generation 1, signed with A: committed under A, unchecked without a
     * key, refused under B. */
    CHECK_INT(save_commit(sa, base, d0, 1), 0);
    list(sa, &o);
    CHECK((g = gen_of(&o, 1)) && g->committed && !g->unauthentic && g->auth == JOBKEY_AUTHENTIC);
    list(none, &o);
    CHECK((g = gen_of(&o, 1)) && g->committed && g->auth == JOBKEY_UNCHECKED);
    list(sb, &o);
    CHECK((g = gen_of(&o, 1)) && !g->committed && g->unauthentic && g->auth == JOBKEY_OTHER_KEY);
    snap_verify(sb, 1, NULL, op_verified, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, -EKEYREJECTED);
    CHECK_HAS(o.msg, "generation 1 of job 'j' is signed by another key");
    CHECK(o.vr.auth_known && o.vr.auth == JOBKEY_OTHER_KEY);
    CHECK_STR(o.vr.key_id, snap_key_id(sa));
    snap_verify(sa, 1, NULL, op_verified, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, 0);
    CHECK(o.vr.auth == JOBKEY_AUTHENTIC && o.vr.chunks == 4);
    snprintf(dest, sizeof(dest), "%s-dest", root);
    snap_restore(sb, 1, 0, dest, NULL, op_done, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, -EKEYREJECTED);
    CHECK(access(dest, F_OK) < 0);

    /* Forged generations, digests right, the MAC missing (2), made with
     * another key (3), or A's key id over a MAC it did not make (4):
     * none is committed under A, all are under no key (as before). */
    forge(root, 1, 2, NULL);
    forge(root, 1, 3, &kb);
    forge(root, 1, 4, &ka);
    {
        char path[4096], *rec, *p;
        size_t len;

        /* 4: signed with A, then its step changed. */
        snprintf(path, sizeof(path), "%s/j/gens/00000004/COMMIT.json", root);
        rec = slurp(path, &len);
        CHECK(rec && (p = strstr(rec, "\"step\":12345")) != NULL);
        if (rec && p) {
            p[8] = '9';
            spit(path, rec, len);
        }
        free(rec);
    }
    list(sa, &o);
    CHECK((g = gen_of(&o, 2)) && g->unauthentic && !g->committed && g->auth == JOBKEY_UNSIGNED);
    CHECK((g = gen_of(&o, 3)) && g->unauthentic && g->auth == JOBKEY_OTHER_KEY);
    CHECK((g = gen_of(&o, 4)) && g->unauthentic && g->auth == JOBKEY_BAD_MAC);
    list(none, &o);
    CHECK((g = gen_of(&o, 2)) && g->committed && g->auth == JOBKEY_UNSIGNED);
    CHECK((g = gen_of(&o, 4)) && g->committed && g->auth == JOBKEY_UNCHECKED);
    /* Newest (gen 0) is the forged 4: refused, not passed over. */
    snap_restore(sa, 0, 0, dest, NULL, op_done, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, -EKEYREJECTED);
    CHECK_HAS(o.msg, "generation 4 of job 'j' has a WRONG signature for key");
    snap_verify(sa, 2, NULL, op_verified, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, -EKEYREJECTED);
    CHECK_HAS(o.msg, "generation 2 of job 'j' is not signed");
    CHECK(o.vr.auth == JOBKEY_UNSIGNED);
    snap_restore(sa, 1, 0, dest, NULL, op_done, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, 0);

    /* Retention under A keeps one generation: the real one, not the
     * newest forged; the forged ones stay too (never counted), and so
     * does every chunk. */
    snap_gc(sa, &(struct snap_gc_opts){ .keep = 1 }, op_gc, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, 0);
    CHECK_INT(o.gr.gens_deleted, 0);
    CHECK_INT(o.gr.gens_unauthentic, 3);
    CHECK_INT(o.gr.chunks_deleted, 0);
    list(sa, &o);
    CHECK((g = gen_of(&o, 1)) && g->committed);
    CHECK(gen_of(&o, 2) && gen_of(&o, 3) && gen_of(&o, 4));
    /* A new generation under A follows the newest number, and the next
     * retention of one drops the older real one only. */
    CHECK_INT(save_commit(sa, base, d0, 5), 0);
    snap_gc(sa, &(struct snap_gc_opts){ .keep = 1 }, op_gc, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, 0);
    CHECK_INT(o.gr.gens_deleted, 1);
    list(sa, &o);
    CHECK(!gen_of(&o, 1) && (g = gen_of(&o, 5)) && g->committed);
    CHECK(gen_of(&o, 2) && gen_of(&o, 3) && gen_of(&o, 4));
    snap_verify(sa, 5, NULL, op_verified, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, 0);

    snap_gens_free(o.gens, o.n);
    sa = snap_free(sa);
    sb = snap_free(sb);
    none = snap_free(none);
    st = store_close(st);
    pool = pool_free(pool);
    event_base_free(base);
    {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s' '%s'", root, d0, dest);
        CHECK_INT(system(cmd), 0);
    }
}

/* ---- restoring what a hostile store holds ---------------------------------- */

/* Everything in a manifest is untrusted: these generations are written by
 * hand into a file store, as anyone who can write the bucket
 * could, with correct digests (the commit record binds each manifest). */

/* mkdir -p for the store's folders. */
static void make_parents(char *path)
{
    for (char *p = path + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
}

static void write_file(const char *path, const char *data, size_t len)
{
    char copy[4096];
    FILE *f;

    snprintf(copy, sizeof(copy), "%s", path);
    make_parents(copy);
    f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_INT(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* files as rank 0 of generation gen of job "j" in the file store at
 * store, committed with bytes
 * (UINT64_MAX: the sum of the files' sizes, as spotd writes it). */
static void put_gen(const char *store, uint64_t gen, uint32_t chunk_size, struct mf_file *files,
                    size_t n, uint64_t bytes)
{
    struct manifest m = { .job = "j", .gen = gen, .step = 1, .method = "manual",
                          .created_ms = 1796045255000LL, .version = "0.1.0",
                          .chunk_size = chunk_size, .files = files, .n_files = n };
    struct commit_rank cr = { .rank = 0 };
    struct commit c = { .job = "j", .gen = gen, .step = 1, .world_size = 1, .reason = "manual",
                        .method = "manual", .created_ms = 1796045255000LL, .version = "0.1.0",
                        .ranks = &cr };
    char key[512], path[1024], *json;
    size_t len;

    for (size_t i = 0; i < n; i++)
        cr.bytes += files[i].size;
    if (bytes != UINT64_MAX)
        cr.bytes = bytes;
    json = manifest_to_json(&m, &len);
    CHECK(json != NULL);
    hash_sha256(json, len, cr.sha256);
    manifest_key(key, sizeof(key), "j", gen, 0);
    snprintf(path, sizeof(path), "%s/%s", store, key);
    write_file(path, json, len);
    free(json);
    json = commit_to_json(&c, &len);
    CHECK(json != NULL);
    commit_key(key, sizeof(key), "j", gen);
    snprintf(path, sizeof(path), "%s/%s", store, key);
    write_file(path, json, len);
    free(json);
}

struct restored {
    struct event_base *base;
    int err;
    char msg[8192];
};

static void on_restored(void *arg, int err, const char *msg)
{
    struct restored *r = arg;

    r->err = err;
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
    event_base_loopbreak(r->base);
}

static int restore(struct snap *s, struct event_base *base, uint64_t gen, const char *dest,
                   struct restored *r)
{
    memset(r, 0, sizeof(*r));
    r->base = base;
    snap_restore(s, gen, 0, dest, NULL, on_restored, r);
    event_base_dispatch(base);
    return r->err;
}

/* Nothing named dest, or dest.spotd-partial.*, is left in root. */
static bool nothing_at(const char *root, const char *name)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s' | grep '^%s')\"", root, name);
    return system(cmd) == 0;
}

static unsigned mode_of(const char *root, const char *rel)
{
    char path[1024];
    struct stat st;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    if (lstat(path, &st) < 0)
        return 0xffffffffu;
    return st.st_mode & 07777;
}

struct hostile {
    char root[64], store[96], url[128];
    struct event_base *base;
    struct pool *pool;
    struct store *st;
    struct snap *s, *keep;        /* keep: preserve_special_modes */
};

static void hostile_open(struct hostile *h)
{
    struct store_ctx sc;
    char err[512];

    snprintf(h->root, sizeof(h->root), "/tmp/spotd-unit-hostile.XXXXXX");
    CHECK(mkdtemp(h->root) != NULL);
    snprintf(h->store, sizeof(h->store), "%s/store", h->root);
    CHECK_INT(mkdir(h->store, 0700), 0);
    snprintf(h->url, sizeof(h->url), "file://%s", h->store);
    h->base = event_base_new();
    h->pool = pool_new(h->base, 2);
    sc = (struct store_ctx){ .base = h->base, .pool = h->pool };
    CHECK_INT(store_open(h->url, &sc, &h->st, err, sizeof(err)), 0);
    h->s = snap_new(&(struct snap_opts){ .base = h->base, .pool = h->pool, .store = h->st,
                                         .job = "j" },
                    err, sizeof(err));
    h->keep = snap_new(&(struct snap_opts){ .base = h->base, .pool = h->pool, .store = h->st,
                                            .job = "j", .preserve_special_modes = true },
                       err, sizeof(err));
    CHECK(h->s && h->keep);
}

static void hostile_close(struct hostile *h)
{
    char cmd[256];

    h->s = snap_free(h->s);
    h->keep = snap_free(h->keep);
    h->st = store_close(h->st);
    h->pool = pool_free(h->pool);
    event_base_free(h->base);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", h->root);
    CHECK_INT(system(cmd), 0);
}

/* Generation gen is refused with err and a message holding why, and
 * nothing is left at root/out. */
static void refused(struct hostile *h, struct snap *s, uint64_t gen, int err, const char *why)
{
    struct restored r;
    char dest[128];

    snprintf(dest, sizeof(dest), "%s/out", h->root);
    if (restore(s, h->base, gen, dest, &r) != err)
        printf("  generation %llu: %d (%s), expected %d\n", (unsigned long long)gen, r.err,
               r.msg, err);
    CHECK_INT(r.err, err);
    CHECK_HAS(r.msg, why);
    CHECK(nothing_at(h->root, "out"));
}

static char p_bin[] = "bin", p_pub[] = "pub", p_pubw[] = "pub/w";

/* setuid and setgid programs, a world-writable sticky directory, a file
 * anyone may change: without --preserve-special-modes the bits go. */
TEST(snap_restore_modes)
{
    struct hostile h;
    struct mf_chunk zero = { .zero = true, .len = 10 };
    struct mf_file files[] = {
        { .path = p_bin, .type = MF_FILE, .mode = 06755, .size = 10, .chunks = &zero,
          .n_chunks = 1 },
        { .path = p_pub, .type = MF_DIR, .mode = 01777 },
        { .path = p_pubw, .type = MF_FILE, .mode = 0666 },
    };
    struct restored r;
    char dest[128];

    hostile_open(&h);
    put_gen(h.store, 1, SNAP_CHUNK_DEFAULT, files, 3, UINT64_MAX);
    snprintf(dest, sizeof(dest), "%s/plain", h.root);
    CHECK_INT(restore(h.s, h.base, 1, dest, &r), 0);
    CHECK_INT(mode_of(dest, "bin"), 0755);
    CHECK_INT(mode_of(dest, "pub"), 0775);
    CHECK_INT(mode_of(dest, "pub/w"), 0664);
    snprintf(dest, sizeof(dest), "%s/kept", h.root);
    CHECK_INT(restore(h.keep, h.base, 1, dest, &r), 0);
    CHECK_INT(mode_of(dest, "bin"), 06755);
    CHECK_INT(mode_of(dest, "pub"), 01777);
    CHECK_INT(mode_of(dest, "pub/w"), 0666);
    hostile_close(&h);
}

/* A path that does not fit in PATH_MAX under dest is refused, named, and
 * nothing is created: never a file under a cut name. */
TEST(snap_restore_long_path)
{
    struct hostile h;
    char path[4200], dest[128];
    struct mf_file f = { .path = path, .type = MF_FILE, .mode = 0644 };
    struct restored r;
    size_t len = 0;

    hostile_open(&h);
    for (int i = 0; i < 20; i++) {
        memset(path + len, 'a' + i, 200);
        len += 200;
        path[len++] = '/';
    }
    memset(path + len, 'z', 70);
    len += 70;
    path[len] = '\0';
    CHECK_INT(len, 4090);
    CHECK(manifest_path_valid(path));
    put_gen(h.store, 1, SNAP_CHUNK_DEFAULT, &f, 1, UINT64_MAX);
    refused(&h, h.s, 1, -ENAMETOOLONG, "cannot restore 'aaaa");
    snprintf(dest, sizeof(dest), "%s/out", h.root);
    restore(h.s, h.base, 1, dest, &r);
    CHECK_HAS(r.msg, "exactly: its path under '");
    CHECK_HAS(r.msg, "PATH_MAX");
    CHECK(strlen(r.msg) < 600);
    hostile_close(&h);
}

static char p_l[] = "l", p_a[] = "a", p_al[] = "a/l", p_d[] = "d", p_q[] = "q";
static char t_etc[] = "/etc", t_up2[] = "../../x", t_dot[] = ".", t_dup[] = "d/..",
            t_up1[] = "../b";

/* Links that lead out of the restored directory are refused, whether
 * absolute, climbing too high, or climbing from a name (itself a link to
 * "."); one that climbs inside it is restored as it is. */
TEST(snap_restore_links)
{
    struct hostile h;
    struct mf_file abs[] = { { .path = p_l, .type = MF_SYMLINK, .mode = 0777, .target = t_etc } };
    struct mf_file high[] = { { .path = p_a, .type = MF_DIR, .mode = 0755 },
                              { .path = p_al, .type = MF_SYMLINK, .mode = 0777,
                                .target = t_up2 } };
    struct mf_file via[] = { { .path = p_d, .type = MF_SYMLINK, .mode = 0777, .target = t_dot },
                             { .path = p_q, .type = MF_SYMLINK, .mode = 0777, .target = t_dup } };
    struct mf_file fine[] = { { .path = p_a, .type = MF_DIR, .mode = 0755 },
                              { .path = p_al, .type = MF_SYMLINK, .mode = 0777,
                                .target = t_up1 } };
    struct restored r;
    char dest[128], link[256], got[64];
    ssize_t n;

    hostile_open(&h);
    put_gen(h.store, 1, SNAP_CHUNK_DEFAULT, abs, 1, UINT64_MAX);
    put_gen(h.store, 2, SNAP_CHUNK_DEFAULT, high, 2, UINT64_MAX);
    put_gen(h.store, 3, SNAP_CHUNK_DEFAULT, via, 2, UINT64_MAX);
    put_gen(h.store, 4, SNAP_CHUNK_DEFAULT, fine, 2, UINT64_MAX);
    refused(&h, h.s, 1, -EPERM, "refusing the link 'l' -> '/etc'");
    refused(&h, h.keep, 2, -EPERM, "'a/l' -> '../../x'");
    refused(&h, h.s, 3, -EPERM, "'q' -> 'd/..'");
    snprintf(dest, sizeof(dest), "%s/out", h.root);
    CHECK_INT(restore(h.s, h.base, 4, dest, &r), 0);
    snprintf(link, sizeof(link), "%s/a/l", dest);
    n = readlink(link, got, sizeof(got) - 1);
    got[n > 0 ? n : 0] = '\0';
    CHECK_STR(got, "../b");
    hostile_close(&h);
}

static char p_big[] = "big", p_f[] = "f", p_fg[] = "f/g", p_s[] = "s", p_sxy[] = "s/x/y";

/* Sizes: a sparse file of 12 TiB (zero runs, nothing stored) is refused
 * when the disk cannot hold it whole; a manifest whose sizes disagree
 * with its commit record is refused; so is an entry below a file or a
 * link. */
TEST(snap_restore_sizes)
{
    struct hostile h;
    const uint64_t big = 12ULL << 40;
    size_t n = (size_t)(big / CHUNK_MAX_PLAIN);
    struct mf_chunk *zeros = calloc(n, sizeof(*zeros));
    struct mf_chunk ten = { .zero = true, .len = 10 };
    struct mf_file sparse = { .path = p_big, .type = MF_FILE, .mode = 0644, .size = big,
                              .chunks = zeros, .n_chunks = n };
    struct mf_file small = { .path = p_f, .type = MF_FILE, .mode = 0644, .size = 10,
                             .chunks = &ten, .n_chunks = 1 };
    struct mf_file below[] = { { .path = p_f, .type = MF_FILE, .mode = 0644 },
                               { .path = p_fg, .type = MF_FILE, .mode = 0644 } };
    struct mf_file via_link[] = { { .path = p_s, .type = MF_SYMLINK, .mode = 0777,
                                    .target = t_dot },
                                  { .path = p_sxy, .type = MF_FILE, .mode = 0644 } };
    struct statvfs sv;

    hostile_open(&h);
    CHECK(zeros != NULL);
    for (size_t i = 0; zeros && i < n; i++)
        zeros[i] = (struct mf_chunk){ .zero = true, .len = CHUNK_MAX_PLAIN };
    /* The test means a disk smaller than the file. */
    CHECK_INT(statvfs(h.root, &sv), 0);
    CHECK((uint64_t)sv.f_bavail * sv.f_frsize < big);
    put_gen(h.store, 1, CHUNK_MAX_PLAIN, &sparse, 1, UINT64_MAX);
    put_gen(h.store, 2, SNAP_CHUNK_DEFAULT, &small, 1, 5);
    put_gen(h.store, 3, SNAP_CHUNK_DEFAULT, below, 2, UINT64_MAX);
    put_gen(h.store, 4, SNAP_CHUNK_DEFAULT, via_link, 2, UINT64_MAX);
    refused(&h, h.s, 1, -ENOSPC, "declare 13194139533312 bytes");
    refused(&h, h.s, 2, -EBADMSG, "add up to 10 bytes, its commit record says 5");
    refused(&h, h.s, 3, -EINVAL, "'f/g' lies below 'f'");
    refused(&h, h.s, 4, -EINVAL, "'s/x/y' lies below 's'");
    free(zeros);
    hostile_close(&h);
}

/* The pointer <job>/LATEST: what is taken, and why the rest is not. */
TEST(snap_latest_parse)
{
    static const struct {
        const char *doc, *why;
    } bad[] = {
        { "{\"format\":2,\"kind\":\"latest\",\"job\":\"j\",\"gen\":3}", "newer store format" },
        { "{\"format\":1,\"kind\":\"commit\",\"job\":\"j\",\"gen\":3}", "not a pointer" },
        { "{\"format\":1,\"kind\":\"latest\",\"job\":\"k\",\"gen\":3}", "another job" },
        { "{\"format\":1,\"kind\":\"latest\",\"job\":\"j\",\"gen\":0}", "not a generation" },
        { "{\"format\":1,\"kind\":\"latest\",\"job\":\"j\",\"gen\":2.5}", "not a generation" },
        { "{\"format\":1,\"kind\":\"latest\",\"job\":\"j\",\"gen\":100000000}", "not a generation" },
        { "{\"format\":1,\"kind\":\"latest\",\"job\":\"j\",\"gen\":\"3\"}", "not a generation" },
        { "{\"format\":1,\"kind\":\"latest\",\"job\":\"j\",\"gen\":3,\"gen\":4}", "" },
        { "[3]", "not a JSON object" },
        { "{\"format\":1,\"kind\":\"latest\",\"job\":\"j\\u0000\",\"gen\":3}", "\\u0000" },
    };
    const char *good = "{\"format\":1,\"kind\":\"latest\",\"job\":\"j\",\"gen\":99999999,\"new\":1}";
    const char *why = NULL;
    uint64_t gen = 0;

    CHECK_INT(snap_latest_parse(good, strlen(good), "j", &gen, &why), 0);
    CHECK_INT((int)gen, 99999999);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gen = 7;
        why = NULL;
        CHECK_INT(snap_latest_parse(bad[i].doc, strlen(bad[i].doc), "j", &gen, &why), -EINVAL);
        CHECK(why != NULL);
        CHECK_HAS(why, bad[i].why);
        CHECK_INT((int)gen, 7);
    }
}

/* ---- early stores of a file being written ---------------------------------- */

static int prestore(struct snap *s, struct event_base *base, const char *dir, const char *rel,
                    uint64_t from, bool final, struct snap_counters *c, uint64_t *upto)
{
    struct op o = { .base = base };

    snap_prestore(s, 1, dir, rel, from, final, c, op_saved, &o);
    event_base_dispatch(base);
    *upto = o.saved.bytes;
    return o.err;
}

/* The writer goes back and writes len bytes of data at off in path. */
static void rewrite(const char *path, const uint8_t *data, long off, size_t len)
{
    FILE *f = fopen(path, "r+");

    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_INT(fseek(f, off, SEEK_SET), 0);
    CHECK_INT((int)fwrite(data + off, 1, len, f), (int)len);
    CHECK_INT(fclose(f), 0);
}

/* Commit saved as generation 1 (step), restore it into dest and check
 * that its state.bin is data. */
static void commit_restore(struct snap *s, struct event_base *base, const struct snap_saved *saved,
                           int64_t step, const char *dest, const uint8_t *data, size_t size)
{
    struct commit_rank cr = { .rank = 0, .bytes = saved->bytes };
    struct commit c = { .job = "j", .gen = 1, .step = step, .world_size = 1,
                        .reason = "manual", .method = "app", .created_ms = 1796045255000LL,
                        .version = "test", .ranks = &cr };
    struct op o = { .base = base };
    struct restored rs;
    char path[400];
    size_t got = 0;
    char *back;

    memcpy(cr.sha256, saved->sha256, 32);
    snap_commit(s, &c, op_done, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, 0);
    CHECK_INT(restore(s, base, 1, dest, &rs), 0);
    snprintf(path, sizeof(path), "%s/state.bin", dest);
    back = slurp(path, &got);
    CHECK(back != NULL);
    CHECK_INT((int)got, (int)size);
    CHECK(back && memcmp(back, data, size) == 0);
    free(back);
}

/* An early-store test's world: a file store under root, the folder dir
 * the trainer writes (path: its state.bin), dest to restore into. */
struct pre_fix {
    char root[64], url[128], dir[256], path[400], dest[300];
    struct event_base *base;
    struct pool *pool;
    struct store_ctx sc;
    struct store *st;
    struct snap *s;
};

static void pre_open(struct pre_fix *fx, const char *name)
{
    char err[512];

    snprintf(fx->root, sizeof(fx->root), "/tmp/spotd-unit-%s.XXXXXX", name);
    CHECK(mkdtemp(fx->root) != NULL);
    snprintf(fx->url, sizeof(fx->url), "file://%s", fx->root);
    snprintf(fx->dir, sizeof(fx->dir), "%s-w", fx->root);
    snprintf(fx->path, sizeof(fx->path), "%s/state.bin", fx->dir);
    snprintf(fx->dest, sizeof(fx->dest), "%s-r", fx->root);
    CHECK_INT(mkdir(fx->dir, 0700), 0);
    fx->base = event_base_new();
    fx->pool = pool_new(fx->base, 2);
    fx->sc = (struct store_ctx){ .base = fx->base, .pool = fx->pool };
    fx->st = NULL;
    CHECK_INT(store_open(fx->url, &fx->sc, &fx->st, err, sizeof(err)), 0);
    fx->s = keyed_snap(fx->base, fx->pool, fx->st, NULL);
}

static void pre_close(struct pre_fix *fx)
{
    char cmd[1024];

    fx->s = snap_free(fx->s);
    fx->st = store_close(fx->st);
    fx->pool = pool_free(fx->pool);
    event_base_free(fx->base);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s' '%s'", fx->root, fx->dir, fx->dest);
    CHECK_INT(system(cmd), 0);
}

/* A file written in three steps, stored early after each; then a writer
 * that seeks back and rewrites a chunk it had stored already.  The save
 * sends only the rewritten chunk and the tail, and the generation restores
 * to the file as it ended, not as it was stored early. */
TEST(snap_prestore)
{
    struct pre_fix fx;
    struct snap_counters early = { 0 }, late = { 0 };
    struct snap_saved saved;
    size_t size = 5 * CHUNK + 100;
    uint8_t *data = malloc(size);
    uint64_t upto = 0;
    struct event_base *base;
    struct snap *s;
    const char *dir, *path, *dest;
    struct op o;

    pre_open(&fx, "pre");
    base = fx.base, s = fx.s, dir = fx.dir, path = fx.path, dest = fx.dest;
    o = (struct op){ .base = base };

    for (size_t i = 0; i < size; i++)
        data[i] = (uint8_t)(i * 7 + i / 4099);

    /* 1.5 chunks written: one whole chunk stored, up to its end. */
    spit(path, (const char *)data, CHUNK + CHUNK / 2);
    CHECK_INT(prestore(s, base, dir, "state.bin", 0, false, &early, &upto), 0);
    CHECK_INT((int)upto, CHUNK);
    CHECK_INT((int)early.chunks_sent, 1);
    /* 4 chunks and a bit: from where it stopped, three more. */
    spit(path, (const char *)data, 4 * CHUNK + 10);
    CHECK_INT(prestore(s, base, dir, "state.bin", upto, false, &early, &upto), 0);
    CHECK_INT((int)upto, 4 * CHUNK);
    CHECK_INT((int)early.chunks_sent, 4);
    /* Finished: the rest, the short last chunk included. */
    spit(path, (const char *)data, size);
    CHECK_INT(prestore(s, base, dir, "state.bin", upto, true, &early, &upto), 0);
    CHECK_INT((int)upto, (int)size);
    CHECK_INT((int)early.chunks_sent, 6);

    /* The writer goes back and rewrites chunk 1, after its early store. */
    memset(data + CHUNK + 5, 0xab, 1000);
    rewrite(path, data, CHUNK + 5, 1000);

    /* The save reads everything and sends the one chunk that changed. */
    snap_save(s, &(struct snap_save_req){ .dir = dir, .gen = 1, .step = 10, .method = "app" },
              &late, op_saved, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, 0);
    saved = o.saved;
    CHECK_INT((int)late.chunks, 6);
    CHECK_INT((int)late.chunks_sent, 1);
    CHECK_INT((int)late.chunks_skipped, 5);
    /* found stored early, which is no deduplication */
    CHECK_INT((int)late.bytes_early, (int)(size - CHUNK));
    CHECK_INT((int)late.bytes_skipped, 0);
    /* the five unchanged ones by their check, not hashed again */
    CHECK_INT((int)late.bytes_checked, (int)(size - CHUNK));
    commit_restore(s, base, &saved, 10, dest, data, size);

    /* Bad requests are refused, from the loop. */
    CHECK(prestore(s, base, dir, "../x", 0, true, NULL, &upto) == -EINVAL);
    CHECK(prestore(s, base, dir, "missing", 0, true, NULL, &upto) == -ENOENT);

    free(data);
    pre_close(&fx);
}

/* What the save takes from an early store's check, chunk by chunk: an
 * unchanged chunk and an unchanged hole by their check; a rewritten one
 * hashed again and sent; and an unchanged one whose early put failed
 * (its place in the store was taken by a folder) hashed again before it
 * is stored under its name.  The generation restores exactly. */
TEST(snap_prestore_check)
{
    struct pre_fix fx;
    char block[600], hex[HASH_HEX_LEN + 1];
    struct snap_counters early = { 0 }, late = { 0 };
    size_t size = 4 * CHUNK + 100;
    uint8_t *data = malloc(size), hash[HASH_LEN];
    uint64_t upto = 0;
    struct event_base *base;
    struct snap *s;
    const char *dir, *path, *dest, *root;
    struct op o;

    pre_open(&fx, "chk");
    base = fx.base, s = fx.s, dir = fx.dir, path = fx.path, dest = fx.dest, root = fx.root;
    o = (struct op){ .base = base };

    for (size_t i = 0; i < size; i++)
        data[i] = (uint8_t)(i * 11 + i / 4093);
    memset(data + 2 * CHUNK, 0, CHUNK); /* chunk 2: a hole */

    /* Chunk 0's early put fails: a folder holds its name. */
    CHECK_INT(hash_sha256(data, CHUNK, hash), 0);
    hash_hex(hash, hex);
    snprintf(block, sizeof(block), "mkdir -p '%s/j/chunks/%.2s/%s/x'", root, hex, hex);
    CHECK_INT(system(block), 0);
    spit(path, (const char *)data, CHUNK + CHUNK / 2);
    CHECK(prestore(s, base, dir, "state.bin", 0, false, &early, &upto) < 0);
    snprintf(block, sizeof(block), "rm -rf '%s/j/chunks/%.2s/%s'", root, hex, hex);
    CHECK_INT(system(block), 0);
    /* The rest, stored early; then chunk 1 rewritten after its store. */
    spit(path, (const char *)data, size);
    CHECK_INT(prestore(s, base, dir, "state.bin", CHUNK, true, &early, &upto), 0);
    CHECK_INT((int)upto, (int)size);
    memset(data + CHUNK + 7, 0x5a, 300);
    rewrite(path, data, CHUNK + 7, 300);

    snap_save(s, &(struct snap_save_req){ .dir = dir, .gen = 1, .step = 3, .method = "app" },
              &late, op_saved, &o);
    event_base_dispatch(base);
    CHECK_INT(o.err, 0);
    CHECK_INT((int)late.chunks, 5);
    CHECK_INT((int)late.bytes_zero, CHUNK);
    /* chunks 0, 3 and 4 by their check; 1 hashed again */
    CHECK_INT((int)late.bytes_checked, 2 * CHUNK + 100);
    CHECK_INT((int)late.bytes_hashed, 3 * CHUNK + 100);
    /* 0 (its early put failed) and 1 (rewritten) */
    CHECK_INT((int)late.chunks_sent, 2);
    CHECK_INT((int)late.bytes_early, CHUNK + 100);
    commit_restore(s, base, &o.saved, 3, dest, data, size);

    free(data);
    pre_close(&fx);
}

/* ---- chunks that come as a stream ------------------------------------------ */

struct puts {
    struct event_base *base;
    unsigned left;
    int err;
    struct mf_chunk *chunks;     /* by index */
};

struct put_one {
    struct puts *p;
    size_t idx;
};

static void on_put_chunk(void *arg, int err, const char *msg, const struct mf_chunk *c)
{
    struct put_one *one = arg;
    struct puts *p = one->p;

    if (err && !p->err)
        p->err = err;
    if (c)
        p->chunks[one->idx] = *c;
    if (--p->left == 0)
        event_base_loopbreak(p->base);
}

/* Put data (len bytes) as a stream of gen, all chunks in flight at once;
 * f gets the streamed file. */
static int put_stream(struct snap *s, struct event_base *base, uint64_t gen, char *name,
                      const uint8_t *data, size_t len, struct snap_counters *c, struct mf_file *f)
{
    size_t n = (len + CHUNK - 1) / CHUNK;
    struct put_one *ones = calloc(n, sizeof(*ones));
    struct puts p = { .base = base, .left = (unsigned)n, .chunks = calloc(n, sizeof(struct mf_chunk)) };

    for (size_t i = 0; i < n; i++) {
        uint32_t l = (uint32_t)(len - i * CHUNK < CHUNK ? len - i * CHUNK : CHUNK);
        uint8_t *b = snap_chunk_buf(s);

        memcpy(b, data + i * CHUNK, l);
        ones[i] = (struct put_one){ &p, i };
        snap_put_chunk(s, gen, name, b, l, c, on_put_chunk, &ones[i]);
    }
    event_base_dispatch(base);
    free(ones);
    *f = (struct mf_file){ .path = name, .type = MF_FILE, .mode = 0600,
                           .mtime_s = 1796045255, .chunks = p.chunks, .n_chunks = n };
    return p.err;
}

static int save_streamed(struct snap *s, struct event_base *base, const char *dir, uint64_t gen,
                         const struct mf_file *f, struct snap_counters *c, struct op *o)
{
    o->base = base;
    snap_save(s, &(struct snap_save_req){ .dir = dir, .gen = gen, .step = gen * 10,
                                          .method = "criu", .streamed = f, .n_streamed = 1 },
              c, op_saved, o);
    event_base_dispatch(base);
    if (o->err)
        return o->err;
    {
        struct commit_rank cr = { .rank = 0, .bytes = o->saved.bytes };
        struct commit cm = { .job = "j", .gen = gen, .step = gen * 10, .world_size = 1,
                             .reason = "manual", .method = "criu", .created_ms = 1796045255000LL,
                             .version = "test", .ranks = &cr };

        memcpy(cr.sha256, o->saved.sha256, 32);
        snap_commit(s, &cm, op_done, o);
        event_base_dispatch(base);
    }
    return o->err;
}

/* snap_stream_open()'s reader: every byte into buf, the next asked for
 * from inside the callback. */
struct rd {
    struct event_base *base;
    struct snap_stream *ss;
    uint8_t *buf;
    size_t got, cap;
    unsigned calls;
    int err;
    char msg[600];
    bool ended;
};

static void on_read(void *arg, int err, const char *msg, const uint8_t *data, size_t len)
{
    struct rd *r = arg;

    r->calls++;
    if (err || !data) {
        r->err = err;
        snprintf(r->msg, sizeof(r->msg), "%s", msg);
        r->ended = true;
        return;
    }
    if (r->got + len <= r->cap)
        memcpy(r->buf + r->got, data, len);
    r->got += len;
    snap_stream_next(r->ss);
}

static int read_stream(struct snap *s, struct event_base *base, const struct mf_file *f,
                       struct snap_counters *c, struct rd *r, size_t cap)
{
    memset(r, 0, sizeof(*r));
    r->base = base;
    r->cap = cap;
    r->buf = malloc(cap);
    r->ss = snap_stream_open(s, f, c, on_read, r);
    CHECK(r->ss != NULL);
    /* Never a call from inside the open. */
    CHECK_INT((int)r->calls, 0);
    while (!r->ended && event_base_loop(base, EVLOOP_ONCE) == 0)
        ;
    snap_stream_free(r->ss);
    while (snap_streams_live() > 0 && event_base_loop(base, EVLOOP_ONCE) == 0)
        ;
    return r->err;
}

static int check_leaving(struct snap *s, struct event_base *base, uint64_t gen,
                         const char *dir, const char *leave, struct restored *r)
{
    memset(r, 0, sizeof(*r));
    r->base = base;
    snap_check_leaving(s, gen, 0, dir, leave, on_restored, r);
    event_base_dispatch(base);
    return r->err;
}

static char s_pages[] = "pages-1.img", s_inv[] = "inventory.img";

/* A file that is never on disk (CRIU's pages through the image streamer):
 * its chunks stored one by one from buffers, named in the save, restored
 * whole beside the directory's own file; a second generation of the same
 * bytes sends none; a chunk that was never stored, or a name the
 * directory holds too, fails the save. */
TEST(snap_stream)
{
    char root[] = "/tmp/spotd-unit-stream.XXXXXX", url[128], dir[256], path[400], dest[300];
    struct event_base *base = event_base_new();
    struct pool *pool = pool_new(base, 2);
    struct store_ctx sc = { .base = base, .pool = pool };
    struct store *st = NULL;
    struct snap_counters c1 = { 0 }, c2 = { 0 }, sv = { 0 };
    struct restored rs;
    struct op o = { .base = base };
    struct mf_file f;
    struct snap *s;
    char err[512], cmd[1024];
    /* The last chunk ends off a block (a restore from S3 writes its
     * whole blocks with O_DIRECT and its tail buffered). */
    size_t size = 3 * CHUNK + CHUNK / 2 + 123, got = 0;
    uint8_t *data = malloc(size);
    char *back;

    CHECK(mkdtemp(root) != NULL);
    snprintf(url, sizeof(url), "file://%s", root);
    snprintf(dir, sizeof(dir), "%s-w", root);
    snprintf(dest, sizeof(dest), "%s-r", root);
    CHECK_INT(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/inventory.img", dir);
    spit(path, "small", 5);
    CHECK_INT(store_open(url, &sc, &st, err, sizeof(err)), 0);
    s = keyed_snap(base, pool, st, NULL);
    for (size_t i = 0; i < size; i++)
        data[i] = (uint8_t)(i * 13 + i / 4001);
    memset(data + CHUNK, 0, CHUNK); /* chunk 1: a hole */

    CHECK_INT(put_stream(s, base, 1, s_pages, data, size, &c1, &f), 0);
    CHECK_INT((int)c1.chunks, 4);
    CHECK_INT((int)c1.chunks_sent, 3);
    CHECK_INT((int)c1.bytes_zero, CHUNK);
    CHECK(f.chunks[1].zero && !f.chunks[0].zero && f.chunks[3].len == CHUNK / 2 + 123);
    CHECK_INT(save_streamed(s, base, dir, 1, &f, &sv, &o), 0);
    CHECK_INT((int)o.saved.bytes, (int)(size + 5));
    CHECK_INT((int)sv.bytes_early, (int)(size - CHUNK));
    CHECK_INT((int)sv.chunks_sent, 1); /* inventory.img, the one read from the directory */
    CHECK_INT(restore(s, base, 1, dest, &rs), 0);
    snprintf(path, sizeof(path), "%s/pages-1.img", dest);
    back = slurp(path, &got);
    CHECK(back != NULL);
    CHECK_INT((int)got, (int)size);
    CHECK(back && memcmp(back, data, size) == 0);
    CHECK_INT((int)mode_of(dest, "pages-1.img"), 0600);
    free(back);

    /* Restored without its pages, which a stream reads in order: the
     * hole as zeros, each chunk checked. */
    {
        char dest2[320], key[400], hex[65];
        struct snap_counters cr = { 0 };
        struct rd r;

        snprintf(dest2, sizeof(dest2), "%s-l", root);
        memset(&rs, 0, sizeof(rs));
        rs.base = base;
        snap_restore_leaving(s, 1, 0, dest2, "pages-*.img", NULL, on_restored, &rs);
        event_base_dispatch(base);
        CHECK_INT(rs.err, 0);
        CHECK(nothing_at(dest2, "pages-1.img"));
        CHECK(!nothing_at(dest2, "inventory.img"));
        CHECK_INT(check_leaving(s, base, 1, dest2, "pages-*.img", &rs), 0);
        CHECK_INT(check_leaving(s, base, 1, dest2, NULL, &rs), -EBADMSG);
        CHECK_HAS(rs.msg, "'pages-1.img' is missing");
        /* A full copy is not a copy without the pages. */
        CHECK_INT(check_leaving(s, base, 1, dest, "pages-*.img", &rs), -EBADMSG);

        CHECK_INT(read_stream(s, base, &f, &cr, &r, size), 0);
        CHECK_INT((int)r.got, (int)size);
        CHECK(memcmp(r.buf, data, size) == 0);
        CHECK_INT((int)r.calls, 5); /* four chunks, then the end */
        CHECK_INT((int)cr.bytes_zero, CHUNK);
        CHECK_INT((int)cr.chunks, 3);
        CHECK_INT((int)cr.bytes_hashed, (int)(size - CHUNK));
        free(r.buf);

        /* A chunk damaged in the store: fetched again, then named. */
        hash_hex(f.chunks[2].hash, hex);
        snprintf(key, sizeof(key), "%s/j/chunks/%.2s/%s", root, hex, hex);
        back = slurp(key, &got);
        CHECK(back != NULL && got > 8);
        back[got / 2] ^= 0x40;
        spit(key, back, got);
        memset(&cr, 0, sizeof(cr));
        CHECK_INT(read_stream(s, base, &f, &cr, &r, size), -EBADMSG);
        CHECK_HAS(r.msg, "chunk ");
        CHECK_HAS(r.msg, " of 'pages-1.img' (offset 131072) is corrupt in the store");
        CHECK_INT((int)cr.retries, 2);
        CHECK(r.got <= 2 * CHUNK);
        free(r.buf);
        back[got / 2] ^= 0x40;
        spit(key, back, got);
        free(back);

        /* Freed at once, with fetches under way: they end on their own. */
        r.ss = snap_stream_open(s, &f, NULL, on_read, &r);
        CHECK(r.ss != NULL);
        snap_stream_free(r.ss);
        while (snap_streams_live() > 0 && event_base_loop(base, EVLOOP_ONCE) == 0)
            ;
        CHECK_INT((int)snap_streams_live(), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dest2);
        CHECK_INT(system(cmd), 0);
    }
    free(f.chunks);

    /* The same bytes again: found in generation 1, nothing sent. */
    CHECK_INT(put_stream(s, base, 2, s_pages, data, size, &c2, &f), 0);
    CHECK_INT((int)c2.chunks_sent, 0);
    CHECK_INT((int)c2.chunks_skipped, 3);
    CHECK_INT(save_streamed(s, base, dir, 2, &f, NULL, &o), 0);

    /* A chunk nobody stored, and a name the directory has. */
    f.chunks[2].hash[0] ^= 1;
    CHECK_INT(save_streamed(s, base, dir, 3, &f, NULL, &o), -ENOENT);
    CHECK_HAS(o.msg, "chunk 2 of the streamed 'pages-1.img' was not stored");
    f.chunks[2].hash[0] ^= 1;
    f.path = s_inv;
    CHECK_INT(save_streamed(s, base, dir, 3, &f, NULL, &o), -EEXIST);
    CHECK_HAS(o.msg, "came as a stream too");
    free(f.chunks);

    /* A chunk larger than the chunk size is refused, from the loop. */
    {
        struct puts p = { .base = base, .left = 1, .chunks = calloc(1, sizeof(struct mf_chunk)) };
        struct put_one one = { &p, 0 };

        snap_put_chunk(s, 3, "x", snap_chunk_buf(s), CHUNK + 1, NULL, on_put_chunk, &one);
        CHECK_INT(p.left, 1);
        event_base_dispatch(base);
        CHECK_INT(p.err, -EINVAL);
        free(p.chunks);
    }

    free(data);
    s = snap_free(s);
    st = store_close(st);
    pool = pool_free(pool);
    event_base_free(base);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s' '%s'", root, dir, dest);
    CHECK_INT(system(cmd), 0);
}
