/* snap_latest: the pointer <job>/LATEST, which names the newest committed
 * generation so that a resume finds it in a few requests whatever the
 * number of generations the job keeps (docs/store-format.md, "The
 * pointer").
 *
 * The pointer is a hint, never a source of truth.  A writer puts it after
 * each commit record (snap_commit()), and gc rewrites it when it is
 * missing or behind.  A reader trusts it only once the commit record it
 * names checks exactly as a full listing checks records (valid, this
 * job's and generation's, signed by the key where one is set), and then
 * lists the numbers above it ten at a time (the prefix
 * <job>/gens/<first 7 digits>) until GAP numbers in a row past the newest
 * one holding objects are empty.  So a pointer left behind (its write
 * failed, two writers raced) never hides a newer commit, and the numbers
 * a withdrawn claim or a collected abandoned generation left empty are
 * stepped over.  Anything else (no pointer, garbage, another job's, a
 * newer format, a record that is gone, corrupt or unauthentic) falls back
 * to listing every generation, and so does a pointer that cannot be read:
 * the listing's own errors are errors, never an empty job. */
#include "spot/snap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/store.h"
#include "spot/strict.h"

#include "snap_impl.h"

/* Empty numbers in a row that end the search above the pointer: more
 * than a withdrawn claim or two writers' races leave. */
#define GAP 8

static void latest_key(const struct snap *s, char *key, size_t size)
{
    snprintf(key, size, "%s/LATEST", s->job);
}

/* The number of "<job>/gens/<8 digits>/...": which numbers hold anything
 * (what the objects are is snap_gens_build()'s to say). */
static bool key_gen(const struct snap *s, const char *key, uint64_t *ret)
{
    char head[MANIFEST_NAME_MAX + 8];
    size_t hl = (size_t)snprintf(head, sizeof(head), "%s/gens/", s->job);
    const char *p = key + hl;

    /* Eight digits and a slash: strtoull() reads exactly those. */
    if (strncmp(key, head, hl) != 0 || strspn(p, "0123456789") != 8 || p[8] != '/')
        return false;
    *ret = strtoull(p, NULL, 10);
    return true;
}

/* ---- the document ---------------------------------------------------------- */

int snap_latest_parse(const char *data, size_t len, const char *job, uint64_t *ret_gen,
                      const char **ret_why)
{
    const cJSON *f = NULL, *k = NULL, *j = NULL, *g = NULL;
    cJSON *doc;
    int r = -EINVAL;

    if (len > LATEST_MAX)
        return strict_garbage(ret_why, "larger than 4 KiB");
    if (strict_json_has_escaped_nul(data, len))
        return strict_garbage(ret_why, "a string holds \\u0000");
    if (!cJSON_IsObject(doc = cJSON_ParseWithLength(data, len))) {
        cJSON_Delete(doc);
        return strict_garbage(ret_why, "not a JSON object");
    }
    if (strict_json_member(doc, "format", &f, ret_why) < 0 ||
        strict_json_member(doc, "kind", &k, ret_why) < 0 ||
        strict_json_member(doc, "job", &j, ret_why) < 0 ||
        strict_json_member(doc, "gen", &g, ret_why) < 0)
        goto out;
    if (!cJSON_IsNumber(f) || f->valuedouble != 1) {
        r = strict_garbage(ret_why, cJSON_IsNumber(f) && f->valuedouble > 1
                                        ? "written in a newer store format"
                                        : "no \"format\": 1");
    } else if (!cJSON_IsString(k) || strcmp(k->valuestring, "latest") != 0) {
        r = strict_garbage(ret_why, "not a pointer (\"kind\" is not \"latest\")");
    } else if (!cJSON_IsString(j) || strcmp(j->valuestring, job) != 0) {
        r = strict_garbage(ret_why, "it names another job");
    } else if (!cJSON_IsNumber(g) || g->valuedouble < 1 || g->valuedouble > (double)GEN_MAX ||
               g->valuedouble != (double)(uint64_t)g->valuedouble) {
        r = strict_garbage(ret_why, "\"gen\" is not a generation number");
    } else {
        *ret_gen = (uint64_t)g->valuedouble;
        r = 0;
    }
out:
    cJSON_Delete(doc);
    return r;
}

/* ---- writing it -------------------------------------------------------------- */

struct latest_put {
    char doc[MANIFEST_NAME_MAX + 128];
    snap_done_fn done;
    void *arg;
};

static void on_latest_put(void *arg, int err, const char *msg);

void snap_latest_put(struct snap *s, uint64_t gen, snap_done_fn done, void *arg)
{
    struct latest_put *p = calloc(1, sizeof(*p));
    char key[STORE_KEY_MAX + 1];
    int len;

    if (!p) {
        if (done)
            snap_early(s, snap_early_done, (union snap_cb){ .done = done }, arg, -ENOMEM,
                       "out of memory");
        return;
    }
    /* The job name is letters, digits, '.', '_' and '-': nothing to escape. */
    len = snprintf(p->doc, sizeof(p->doc),
                   "{\"format\":1,\"kind\":\"latest\",\"job\":\"%s\",\"gen\":%llu}\n", s->job,
                   (unsigned long long)gen);
    p->done = done;
    p->arg = arg;
    latest_key(s, key, sizeof(key));
    store_put(s->store, key, p->doc, (size_t)len, on_latest_put, p);
}

static void on_latest_put(void *arg, int err, const char *msg)
{
    struct latest_put *p = arg;

    if (p->done)
        p->done(p->arg, err, msg);
    free(p);
}

/* ---- finding the newest generations ----------------------------------------- */

static void on_latest_got(void *arg, int err, const char *msg, void *data, size_t len);
static void list_more(struct gens_op *g);
static void on_tens_listed(void *arg, int err, const char *msg, struct store_entry *e, size_t n);
static void on_newest_built(struct gens_op *g);
static void fall_back(struct gens_op *g);

struct gens_op *snap_gens_op_newest(struct snap *s, void (*next)(struct gens_op *), void *owner)
{
    struct gens_op *g = calloc(1, sizeof(*g));
    char key[STORE_KEY_MAX + 1];

    if (!g)
        return NULL;
    g->s = s;
    g->then = g->next = next;
    g->owner = owner;
    latest_key(s, key, sizeof(key));
    store_get(s->store, key, LATEST_MAX, on_latest_got, g);
    return g;
}

static void on_latest_got(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct gens_op *g = arg;
    const char *why = NULL;
    uint64_t gen = 0;

    /* A pointer that cannot be read (missing, refused, a store that
     * fails) is one that does not hold: the full listing decides, and its
     * errors are errors. */
    if (err || snap_latest_parse(data, len, g->s->job, &gen, &why) < 0) {
        free(data);
        fall_back(g);
        return;
    }
    free(data);
    g->latest = g->top = gen;
    g->listed_to = gen / 10 * 10;
    list_more(g);
}

/* List the tens of numbers up to GAP past the newest seen; once all are
 * in, build the generations from what they hold. */
static void list_more(struct gens_op *g)
{
    while (g->listed_to <= g->top + GAP && g->listed_to <= GEN_MAX) {
        char prefix[STORE_KEY_MAX + 1];

        snprintf(prefix, sizeof(prefix), "%s/gens/%07llu", g->s->job,
                 (unsigned long long)(g->listed_to / 10));
        g->listed_to += 10;
        g->lists++;
        store_list(g->s->store, prefix, on_tens_listed, g);
    }
    if (g->lists == 0) {
        struct store_entry *e = g->entries;
        size_t n = g->n_entries;

        g->entries = NULL;
        g->n_entries = 0;
        g->next = on_newest_built;
        snap_gens_build(g, e, n);
    }
}

static void on_tens_listed(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct gens_op *g = arg;
    struct store_entry *all = NULL;

    g->lists--;
    if (!err && n && !(all = realloc(g->entries, (g->n_entries + n) * sizeof(*all))))
        err = -ENOMEM, msg = "out of memory";
    if (err && !g->err) {
        g->err = err;
        snprintf(g->msg, sizeof(g->msg), "%s", msg);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t gen;

        /* Below the pointer: not part of the answer. */
        if (err || !key_gen(g->s, e[i].key, &gen) || gen < g->latest) {
            free(e[i].key);
            continue;
        }
        if (gen > g->top)
            g->top = gen;
        all[g->n_entries++] = e[i];
    }
    if (all)
        g->entries = all;
    free(e);
    if (g->lists)
        return;
    if (g->err) {
        g->next = g->then;
        g->next(g);
        return;
    }
    list_more(g);
}

/* The pointer holds only when its generation is committed. */
static void on_newest_built(struct gens_op *g)
{
    const struct snap_gen *named = NULL;

    g->next = g->then;
    for (size_t i = 0; i < g->n; i++)
        if (g->gens[i].gen == g->latest)
            named = &g->gens[i];
    if (g->err || (named && named->committed)) {
        g->next(g);
        return;
    }
    snap_gens_free(g->gens, g->n);
    store_entries_free(g->entries, g->n_entries);
    g->gens = NULL;
    g->entries = NULL;
    g->n = g->n_entries = 0;
    fall_back(g);
}

/* Every generation, as snap_gens() lists them. */
static void fall_back(struct gens_op *g)
{
    g->latest = 0;
    g->next = g->then;
    snap_gens_list(g);
}

/* ---- snap_gens_newest() ------------------------------------------------------- */

static void newest_report(struct gens_op *g);
static void early_newest(struct early *e);

void snap_gens_newest(struct snap *s, snap_newest_fn done, void *arg)
{
    struct gens_op *g = snap_gens_op_newest(s, newest_report, NULL);

    if (!g) {
        snap_early(s, early_newest, (union snap_cb){ .newest = done }, arg, -ENOMEM,
                   "out of memory");
        return;
    }
    g->newest_done = done;
    g->arg = arg;
}

static void newest_report(struct gens_op *g)
{
    if (g->err) {
        g->newest_done(g->arg, g->err, g->msg, NULL, 0, false);
    } else {
        struct snap_gen *gens = g->gens;
        size_t n = g->n;

        g->gens = NULL;
        g->n = 0;
        g->newest_done(g->arg, 0, "", gens, n, g->all);
    }
    snap_gens_op_free(g);
}

static void early_newest(struct early *e)
{
    e->cb.newest(e->arg, e->err, e->msg, NULL, 0, false);
}
