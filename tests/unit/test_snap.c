/* lib/spot/snap.c: the split save of a replicated checkpoint, on a real
 * file store. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
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
