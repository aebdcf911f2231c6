/* rendezvous: membership through the store (see rendezvous.h). */
#include "rendezvous.h"

#include <errno.h>
#include <event2/event.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/log.h"
#include "spot/notice.h"
#include "spot/store.h"
#include "spot/worldrec.h"

#define TICK_MS 1000
/* A rank given to a joiner is not given again for this long. */
#define ASSIGN_HOLD_MS 30000
/* Records seen, by key, with the mtime they had: only changes are read. */
#define SEEN_MAX 4096

struct seen {
    char *key;
    int64_t mtime_ms;
};

struct rendezvous {
    struct event_base *base;
    struct store *store;
    char *job;
    uint32_t world_size;
    const struct rendezvous_ops *ops;
    void *arg;
    char node[33];                 /* our random name */
    int64_t rank;                  /* -1: none yet */
    char addr[80];
    bool joining, published, stopped;
    bool join_putting;             /* our join record's put is under way */
    unsigned inflight;             /* store operations under way */
    bool listing;
    struct event *tick;
    struct seen *seen;
    size_t n_seen;
    int64_t *given_ms;             /* world_size: when a rank was given to a joiner
                                      (notice_mono_ms(), never 0 after boot; 0: never) */
};

/* One store operation's context: the record written (its buffer must
 * live until done) or the key read. */
struct op {
    struct rendezvous *rv;
    char key[STORE_KEY_MAX + 1];
    char *text;
    int64_t mtime_ms;
    bool join;                     /* the put of our join record */
};

static struct op *op_new(struct rendezvous *rv)
{
    struct op *o = calloc(1, sizeof(*o));

    if (o) {
        o->rv = rv;
        rv->inflight++;
    }
    return o;
}

static void op_free(struct op *o)
{
    o->rv->inflight--;
    free(o->text);
    free(o);
}

static void on_put(void *arg, int err, const char *msg)
{
    struct op *o = arg;

    if (err)
        log_msg(LOGL_WARN, "rendezvous: cannot write '%s': %s", o->key, msg);
    if (o->join)
        o->rv->join_putting = false;
    op_free(o);
}

static void put_record(struct rendezvous *rv, const struct worldrec *r)
{
    struct op *o = op_new(rv);
    size_t len;

    if (!o)
        return;
    worldrec_key(o->key, sizeof(o->key), r);
    if (!(o->text = worldrec_to_json(r, &len))) {
        op_free(o);
        return;
    }
    o->join = r->type == WORLDREC_JOIN;
    rv->join_putting |= o->join;
    store_put(rv->store, o->key, o->text, len, on_put, o);
}

static void on_deleted(void *arg, int err, const char *msg)
{
    op_free(arg);
}

static void delete_key(struct rendezvous *rv, const char *key)
{
    struct op *o = op_new(rv);

    if (!o)
        return;
    snprintf(o->key, sizeof(o->key), "%s", key);
    store_delete(rv->store, o->key, on_deleted, o);
}

/* ---- reading the records ------------------------------------------------------ */

/* A join record: the coordinator gives the lowest vacant rank. */
static void give_rank(struct rendezvous *rv, const struct worldrec *j)
{
    int64_t now = notice_mono_ms();
    /* ts_ms: the record's timestamp, the wall clock (read by spotctl). */
    struct worldrec a = { .type = WORLDREC_ASSIGN, .ts_ms = notice_now_ms() };

    for (uint32_t r = 0; r < rv->world_size; r++) {
        if ((int64_t)r == rv->rank || rv->ops->up(rv->arg, r) ||
            (rv->given_ms[r] && now - rv->given_ms[r] < ASSIGN_HOLD_MS))
            continue;
        rv->given_ms[r] = now;
        a.rank = r;
        snprintf(a.job, sizeof(a.job), "%s", rv->job);
        snprintf(a.node, sizeof(a.node), "%s", j->node);
        log_msg(LOGL_INFO, "rendezvous: node %s%s%s asks for a rank: it takes vacant rank %u",
                j->node, j->addr[0] ? " at " : "", j->addr, r);
        put_record(rv, &a);
        return;
    }
}

static void on_record(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct op *o = arg;
    struct rendezvous *rv = o->rv;
    struct worldrec r;
    const char *why = NULL;
    int bad;

    if (err || rv->stopped) {
        free(data);
        op_free(o);
        return;
    }
    bad = worldrec_parse(data, len, &r, &why) < 0 || strcmp(r.job, rv->job) != 0;
    free(data);
    if (bad) {
        log_msg(LOGL_WARN, "rendezvous: '%s' is not a record of job '%s' (%s); ignored", o->key,
                rv->job, why ? why : "another job");
        op_free(o);
        return;
    }
    if (r.type == WORLDREC_RANK && r.rank < rv->world_size && strcmp(r.node, rv->node) != 0 &&
        (int64_t)r.rank != rv->rank)
        rv->ops->addr(rv->arg, r.rank, r.addr);
    else if (r.type == WORLDREC_JOIN && rv->rank >= 0 && rv->ops->coordinates(rv->arg))
        give_rank(rv, &r);
    else if (r.type == WORLDREC_ASSIGN && rv->joining && strcmp(r.node, rv->node) == 0 &&
             r.rank < rv->world_size) {
        char key[STORE_KEY_MAX + 1];
        struct worldrec j = { .type = WORLDREC_JOIN };

        rv->joining = false;
        snprintf(j.job, sizeof(j.job), "%s", rv->job);
        snprintf(j.node, sizeof(j.node), "%s", rv->node);
        worldrec_key(key, sizeof(key), &j);
        delete_key(rv, key);
        delete_key(rv, o->key);
        log_msg(LOGL_INFO, "rendezvous: this node takes rank %u", r.rank);
        rv->ops->assigned(rv->arg, r.rank);
    }
    op_free(o);
}

static bool changed(struct rendezvous *rv, const char *key, int64_t mtime_ms)
{
    for (size_t i = 0; i < rv->n_seen; i++)
        if (strcmp(rv->seen[i].key, key) == 0) {
            if (rv->seen[i].mtime_ms == mtime_ms)
                return false;
            rv->seen[i].mtime_ms = mtime_ms;
            return true;
        }
    if (rv->n_seen < SEEN_MAX && (rv->seen[rv->n_seen].key = strdup(key)))
        rv->seen[rv->n_seen++].mtime_ms = mtime_ms;
    return true;
}

static void on_list(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct rendezvous *rv = arg;
    char mine[STORE_KEY_MAX + 1] = "";

    rv->listing = false;
    rv->inflight--;
    if (err || rv->stopped) {
        if (err)
            log_msg(LOGL_WARN, "rendezvous: cannot list the world's records: %s", msg);
        store_entries_free(e, n);
        return;
    }
    if (rv->joining) {
        struct worldrec a = { .type = WORLDREC_ASSIGN };
        snprintf(a.job, sizeof(a.job), "%s", rv->job);
        snprintf(a.node, sizeof(a.node), "%s", rv->node);
        worldrec_key(mine, sizeof(mine), &a);
    }
    for (size_t i = 0; i < n; i++) {
        const char *base = strrchr(e[i].key, '/');
        bool want;
        struct op *o;

        base = base ? base + 1 : e[i].key;
        if (rv->joining)
            want = strcmp(e[i].key, mine) == 0;
        else
            want = strncmp(base, "rank-", 5) == 0 ||
                   (strncmp(base, "join-", 5) == 0 && rv->ops->coordinates(rv->arg));
        if (!want || e[i].size > WORLDREC_MAX || !changed(rv, e[i].key, e[i].mtime_ms))
            continue;
        if (!(o = op_new(rv)))
            break;
        snprintf(o->key, sizeof(o->key), "%s", e[i].key);
        store_get(rv->store, o->key, WORLDREC_MAX, on_record, o);
    }
    store_entries_free(e, n);
}

static bool whole(struct rendezvous *rv)
{
    for (uint32_t r = 0; r < rv->world_size; r++)
        if ((int64_t)r != rv->rank && !rv->ops->up(rv->arg, r))
            return false;
    return true;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct rendezvous *rv = arg;
    char prefix[STORE_KEY_MAX + 1];

    if (rv->stopped || rv->listing || (!rv->joining && (rv->rank < 0 || whole(rv))))
        return;
    snprintf(prefix, sizeof(prefix), "%s/world/", rv->job);
    rv->listing = true;
    rv->inflight++;
    store_list(rv->store, prefix, on_list, rv);
}

/* ---- the API ------------------------------------------------------------------ */

void rendezvous_publish(struct rendezvous *rv, uint32_t rank, const char *addr)
{
    struct worldrec r = { .type = WORLDREC_RANK, .rank = rank, .ts_ms = notice_now_ms() };

    rv->rank = rank;
    snprintf(rv->addr, sizeof(rv->addr), "%s", addr);
    snprintf(r.job, sizeof(r.job), "%s", rv->job);
    snprintf(r.node, sizeof(r.node), "%s", rv->node);
    snprintf(r.addr, sizeof(r.addr), "%s", addr);
    log_msg(LOGL_INFO, "rendezvous: rank %u listens at %s (%s/world/rank-%u.json)", rank, addr,
            rv->job, rank);
    put_record(rv, &r);
    rv->published = true;
    on_tick(-1, 0, rv);
}

void rendezvous_join(struct rendezvous *rv, const char *addr)
{
    struct worldrec j = { .type = WORLDREC_JOIN, .ts_ms = notice_now_ms() };

    rv->joining = true;
    snprintf(rv->addr, sizeof(rv->addr), "%s", addr);
    snprintf(j.job, sizeof(j.job), "%s", rv->job);
    snprintf(j.node, sizeof(j.node), "%s", rv->node);
    if (worldrec_addr_valid(addr)) /* not with port 0 */
        snprintf(j.addr, sizeof(j.addr), "%s", addr);
    log_msg(LOGL_INFO, "rendezvous: no rank given; asking the world's coordinator for one "
            "(%s/world/join-%s.json)", rv->job, rv->node);
    put_record(rv, &j);
}

bool rendezvous_stop(struct rendezvous *rv)
{
    if (!rv)
        return false;
    /* Nobody is to give a rank to a node that is gone.  Its join record
     * goes once its put is done: a delete run beside the put could
     * overtake it and leave the record behind (the caller asks again
     * while anything is in flight). */
    if (rv->joining && !rv->join_putting) {
        char key[STORE_KEY_MAX + 1];
        struct worldrec j = { .type = WORLDREC_JOIN };

        snprintf(j.job, sizeof(j.job), "%s", rv->job);
        snprintf(j.node, sizeof(j.node), "%s", rv->node);
        worldrec_key(key, sizeof(key), &j);
        rv->joining = false;
        delete_key(rv, key);
    }
    rv->stopped = true;
    event_del(rv->tick);
    return rv->inflight > 0;
}

struct rendezvous *rendezvous_new(struct event_base *base, struct store *store, const char *job,
                                  uint32_t world_size, const struct rendezvous_ops *ops,
                                  void *arg)
{
    struct rendezvous *rv = calloc(1, sizeof(*rv));
    struct timeval tv = { TICK_MS / 1000, (TICK_MS % 1000) * 1000 };
    unsigned char name[16];

    if (!rv)
        return NULL;
    rv->base = base;
    rv->store = store;
    rv->world_size = world_size;
    rv->ops = ops;
    rv->arg = arg;
    rv->rank = -1;
    rv->job = strdup(job);
    rv->seen = calloc(SEEN_MAX, sizeof(*rv->seen));
    rv->given_ms = calloc(world_size, sizeof(*rv->given_ms));
    rv->tick = event_new(base, -1, EV_PERSIST, on_tick, rv);
    if (!rv->job || !rv->seen || !rv->given_ms || !rv->tick || RAND_bytes(name, 16) != 1)
        return rendezvous_free(rv);
    for (int i = 0; i < 16; i++)
        snprintf(rv->node + 2 * i, 3, "%02x", name[i]);
    event_add(rv->tick, &tv);
    return rv;
}

struct rendezvous *rendezvous_free(struct rendezvous *rv)
{
    if (!rv)
        return NULL;
    if (rv->tick)
        event_free(rv->tick);
    for (size_t i = 0; rv->seen && i < rv->n_seen; i++)
        free(rv->seen[i].key);
    free(rv->seen);
    free(rv->given_ms);
    free(rv->job);
    free(rv);
    return NULL;
}
