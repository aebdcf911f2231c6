/* genclaim: claiming generation numbers (see genclaim.h). */
#include "spot/genclaim.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "spot/log.h"
#include "spot/manifest.h"
#include "spot/store.h"

/* Numbers tried before a claim gives up: far more than writers race. */
#define TRIES_MAX 64
/* A claim document is small; anything bigger is not one. */
#define DOC_MAX 4096
/* Both writers withdrew: each waits up to this long before the next. */
#define PAUSE_MAX_MS 250

enum mode { MODE_UNKNOWN, MODE_CONDITIONAL, MODE_LIST };

struct genclaim {
    struct event_base *base;
    struct store *store;
    char job[MANIFEST_NAME_MAX + 1];
    char writer[17];
    enum mode mode;
    bool busy;
    uint64_t gen;
    unsigned tries;
    uint64_t lost;
    uint64_t seq;                  /* of the claim under way: its documents say it */
    uint64_t rng;
    int list_err;                  /* the listing after a claim failed: withdrawn */
    char list_msg[1024];
    char key[STORE_KEY_MAX + 1];
    char doc[256];
    size_t doc_len;
    struct event *pause;
    genclaim_fn done;
    void *arg;
};

static void try_gen(struct genclaim *g);

static void end(struct genclaim *g, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void end(struct genclaim *g, int err, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    g->busy = false;
    g->done(g->arg, err, msg, err ? 0 : g->gen);
}

/* The claim document: who, and when (for an operator reading the store). */
static void make_doc(struct genclaim *g)
{
    time_t now = time(NULL);
    struct tm tm;
    char when[32] = "";

    if (gmtime_r(&now, &tm))
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    g->doc_len = (size_t)snprintf(g->doc, sizeof(g->doc),
                                  "{\"format\":1,\"kind\":\"claim\",\"job\":\"%s\",\"gen\":%llu,"
                                  "\"writer\":\"%s\",\"seq\":%llu,\"created\":\"%s\"}\n",
                                  g->job, (unsigned long long)g->gen, g->writer,
                                  (unsigned long long)g->seq, when);
}

/* gen is someone else's: the next one, after a pause when asked. */
static void taken(struct genclaim *g, const char *by, bool pause)
{
    struct timeval tv = { 0, 0 };

    g->lost++;
    log_msg(LOGL_INFO, "generation %llu of job '%s' is taken (%s); claiming %llu instead",
            (unsigned long long)g->gen, g->job, by, (unsigned long long)g->gen + 1);
    g->gen++;
    if (++g->tries >= TRIES_MAX || g->gen > GEN_MAX) {
        end(g, -EAGAIN, "cannot claim a generation number of job '%s': %u taken in a row "
            "(another writer of the same job, or the numbers are used up)", g->job, g->tries);
        return;
    }
    if (pause) {
        g->rng = g->rng * 6364136223846793005ULL + 1442695040888963407ULL;
        tv.tv_usec = (suseconds_t)((g->rng >> 33) % (PAUSE_MAX_MS * 1000));
    }
    event_add(g->pause, &tv);
}

static void on_pause(evutil_socket_t fd, short what, void *arg)
{
    try_gen(arg);
}

/* ---- conditional create ------------------------------------------------------ */

static void on_claim_got(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct genclaim *g = arg;
    cJSON *doc = !err ? cJSON_ParseWithLength(data, len) : NULL;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(doc, "writer");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(doc, "seq");
    /* This very claim (not an earlier one of this writer's: that number is
     * used). */
    bool ours = cJSON_IsString(w) && strcmp(w->valuestring, g->writer) == 0 &&
                cJSON_IsNumber(n) && n->valuedouble == (double)g->seq;
    char by[64];

    snprintf(by, sizeof(by), "claimed by writer %.16s",
             cJSON_IsString(w) ? w->valuestring : "unknown");
    cJSON_Delete(doc);
    free(data);
    if (ours) {
        /* Our own put, whose answer was lost and whose retry met it. */
        end(g, 0, "%s", "");
        return;
    }
    if (err && err != -ENOENT) {
        end(g, err, "cannot read the claim of generation %llu: %s", (unsigned long long)g->gen,
            msg);
        return;
    }
    taken(g, err == -ENOENT ? "claimed, then removed" : by, false);
}

static void on_claim_put(void *arg, int err, const char *msg)
{
    struct genclaim *g = arg;

    if (err == 0) {
        end(g, 0, "%s", "");
    } else if (err == -EEXIST) {
        store_get(g->store, g->key, DOC_MAX, on_claim_got, g);
    } else if (err == -EOPNOTSUPP) {
        log_msg(LOGL_DEBUG, "%s: claiming generation numbers by listing instead", msg);
        g->mode = MODE_LIST;
        try_gen(g);
    } else {
        end(g, err, "cannot claim generation %llu: %s", (unsigned long long)g->gen, msg);
    }
}

/* ---- claim, then list -------------------------------------------------------- */

static void on_withdrawn(void *arg, int err, const char *msg)
{
    struct genclaim *g = arg;

    if (err) {
        end(g, err, "cannot withdraw the claim of generation %llu: %s",
            (unsigned long long)g->gen, msg);
        return;
    }
    if (g->list_err) {
        end(g, g->list_err, "cannot claim generation %llu (cannot list it after claiming "
            "it: %s)", (unsigned long long)g->gen, g->list_msg);
        return;
    }
    taken(g, "claimed by another writer at the same time, or in use", true);
}

static void on_listed(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct genclaim *g = arg;
    bool others = false;

    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].key, g->key) != 0)
            others = true;
    store_entries_free(e, n);
    g->list_err = err;
    snprintf(g->list_msg, sizeof(g->list_msg), "%s", err ? msg : "");
    if (err || others) {
        store_delete(g->store, g->key, on_withdrawn, g);
        return;
    }
    end(g, 0, "%s", "");
}

static void on_mine_put(void *arg, int err, const char *msg)
{
    struct genclaim *g = arg;
    char prefix[STORE_KEY_MAX + 1];

    if (err) {
        end(g, err, "cannot claim generation %llu: %s", (unsigned long long)g->gen, msg);
        return;
    }
    snprintf(prefix, sizeof(prefix), "%s/gens/%08llu/", g->job, (unsigned long long)g->gen);
    store_list(g->store, prefix, on_listed, g);
}

static void try_gen(struct genclaim *g)
{
    make_doc(g);
    if (g->mode == MODE_CONDITIONAL) {
        snprintf(g->key, sizeof(g->key), "%s/gens/%08llu/CLAIM.json", g->job,
                 (unsigned long long)g->gen);
        store_put_new(g->store, g->key, g->doc, g->doc_len, NULL, on_claim_put, g);
    } else {
        snprintf(g->key, sizeof(g->key), "%s/gens/%08llu/claim-%s.json", g->job,
                 (unsigned long long)g->gen, g->writer);
        store_put(g->store, g->key, g->doc, g->doc_len, on_mine_put, g);
    }
}

/* ---- does the store's conditional create hold? ------------------------------- */

static void on_probe_deleted(void *arg, int err, const char *msg)
{
    struct genclaim *g = arg;

    if (g->mode == MODE_LIST)
        log_msg(LOGL_DEBUG, "%s does not create objects conditionally (If-None-Match): "
                "generation numbers are claimed by listing", store_url(g->store));
    try_gen(g);
}

static void on_probe2(void *arg, int err, const char *msg)
{
    struct genclaim *g = arg;

    if (err && err != -EEXIST && err != -EOPNOTSUPP) {
        end(g, err, "cannot claim a generation number: %s", msg);
        return;
    }
    /* Created twice: the server ignored the condition. */
    g->mode = err == -EEXIST ? MODE_CONDITIONAL : MODE_LIST;
    store_delete(g->store, g->key, on_probe_deleted, g);
}

static void on_probe1(void *arg, int err, const char *msg)
{
    struct genclaim *g = arg;

    if (err == 0) {
        store_put_new(g->store, g->key, g->doc, g->doc_len, NULL, on_probe2, g);
    } else if (err == -EOPNOTSUPP || err == -EEXIST) {
        g->mode = MODE_LIST;
        store_delete(g->store, g->key, on_probe_deleted, g);
    } else {
        end(g, err, "cannot claim a generation number: %s", msg);
    }
}

void genclaim_claim(struct genclaim *g, uint64_t from, genclaim_fn done, void *arg)
{
    g->busy = true;
    g->seq++;
    g->gen = from ? from : 1;
    g->tries = 0;
    g->done = done;
    g->arg = arg;
    if (g->mode == MODE_UNKNOWN && store_put_new_trusted(g->store))
        g->mode = MODE_CONDITIONAL;
    if (g->mode != MODE_UNKNOWN) {
        try_gen(g);
        return;
    }
    snprintf(g->key, sizeof(g->key), "%s/writers/probe-%s.json", g->job, g->writer);
    make_doc(g);
    store_put_new(g->store, g->key, g->doc, g->doc_len, NULL, on_probe1, g);
}

void genclaim_withdraw(struct genclaim *g, uint64_t gen, void (*done)(void *arg, int err,
                                                                       const char *msg),
                       void *arg)
{
    char key[STORE_KEY_MAX + 1];

    if (g->mode == MODE_CONDITIONAL)
        snprintf(key, sizeof(key), "%s/gens/%08llu/CLAIM.json", g->job, (unsigned long long)gen);
    else
        snprintf(key, sizeof(key), "%s/gens/%08llu/claim-%s.json", g->job,
                 (unsigned long long)gen, g->writer);
    store_delete(g->store, key, done, arg);
}

bool genclaim_conditional(const struct genclaim *g)
{
    return g->mode == MODE_CONDITIONAL;
}

const char *genclaim_writer(const struct genclaim *g)
{
    return g->writer;
}

uint64_t genclaim_lost(const struct genclaim *g)
{
    return g->lost;
}

struct genclaim *genclaim_new(struct event_base *base, struct store *store, const char *job)
{
    struct genclaim *g = calloc(1, sizeof(*g));
    uint8_t id[8];

    if (!g)
        return NULL;
    if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
        uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)g;
        memcpy(id, &t, sizeof(id));
    }
    for (size_t i = 0; i < sizeof(id); i++)
        snprintf(g->writer + 2 * i, 3, "%02x", id[i]);
    memcpy(&g->rng, id, sizeof(g->rng));
    g->base = base;
    g->store = store;
    snprintf(g->job, sizeof(g->job), "%s", job);
    if (!(g->pause = evtimer_new(base, on_pause, g))) {
        free(g);
        return NULL;
    }
    return g;
}

struct genclaim *genclaim_free(struct genclaim *g)
{
    if (!g)
        return NULL;
    event_free(g->pause);
    free(g);
    return NULL;
}
