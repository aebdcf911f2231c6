/* What the store holds, shown: ls (the job's generations), show (one
 * generation's commit record and manifests) and world (the rendezvous
 * records).  Every string read from the store is escaped before it is
 * printed (manifest_escape()): a store is anyone's to write. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "spot/jobkey.h"
#include "spot/manifest.h"
#include "spot/snap.h"
#include "spot/store.h"
#include "spot/worldrec.h"
#include "spotctl.h"

/* A commit record's name (job, reason, method, version), escaped. */
#define NAME_ESCAPED (4 * MANIFEST_NAME_MAX + 4)

/* ---- ls ----------------------------------------------------------------------- */

/* At most this many foreign keys in a table; --json has them all. */
#define FOREIGN_SHOWN 20

void show_foreign(const struct ctl *c, FILE *f, const char *const *keys, size_t n,
                  const char *where)
{
    static char esc[MANIFEST_ESCAPED_MAX];

    if (!n)
        return;
    fprintf(f, "%s%zu foreign object%s %s: not the store format's own, so not part of any "
            "generation, and never deleted by gc (remove %s by hand once you know what %s):\n",
            c->json ? "spotctl: " : "\n", n, n == 1 ? "" : "s", where, n == 1 ? "it" : "them",
            n == 1 ? "it is" : "they are");
    for (size_t i = 0; i < n && (c->json || i < FOREIGN_SHOWN); i++)
        fprintf(f, "  %s\n", manifest_escape(keys[i], esc, sizeof(esc)));
    if (!c->json && n > FOREIGN_SHOWN)
        fprintf(f, "  ... and %zu more (--json lists them all)\n", n - FOREIGN_SHOWN);
}

/* The foreign objects the listing of generations found under gens/. */
static void show_gens_foreign(const struct ctl *c)
{
    const struct store_entry *e;
    size_t n = snap_foreign(c->snap, &e);
    const char **keys = n ? calloc(n, sizeof(*keys)) : NULL;

    for (size_t i = 0; keys && i < n; i++)
        keys[i] = e[i].key;
    if (keys)
        show_foreign(c, c->json ? stderr : stdout, keys, n, "under the job's gens/");
    free(keys);
}

static void fmt_time(char *buf, size_t size, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The names of a commit record escaped (manifest_escape()), as every
 * stored string spotctl prints is: a store is anyone's to write. */
struct names {
    char job[NAME_ESCAPED], reason[NAME_ESCAPED], method[NAME_ESCAPED], version[NAME_ESCAPED];
};

static const struct names *escaped_names(const struct commit *cm, struct names *n)
{
    manifest_escape(cm->job, n->job, sizeof(n->job));
    manifest_escape(cm->reason, n->reason, sizeof(n->reason));
    manifest_escape(cm->method, n->method, sizeof(n->method));
    manifest_escape(cm->version, n->version, sizeof(n->version));
    return n;
}

/* A string as one JSON string literal; s is printable UTF-8 already. */
static void print_json_str(const char *s)
{
    cJSON *v = cJSON_CreateString(s);
    char *text = v ? cJSON_PrintUnformatted(v) : NULL;

    fputs(text ? text : "\"\"", stdout);
    free(text);
    cJSON_Delete(v);
}

static void on_ls(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct ctl *c = arg;
    struct names nm;

    if (err) {
        ctl_fail(c, err, msg);
        ctl_stop(c);
        return;
    }
    if (c->json)
        printf("[");
    else
        printf("%-9s %-11s %-12s %-6s %-12s %-8s %-10s %s\n", "GEN", "STATE", "STEP", "RANKS",
               "REASON", "METHOD", "SIZE", "CREATED");
    for (size_t i = 0; i < n; i++) {
        const struct snap_gen *g = &gens[i];
        const char *state = g->committed     ? "committed"
                            : g->unauthentic ? jobkey_auth_name(g->auth)
                            : g->corrupt     ? "corrupt"
                                             : "incomplete";
        uint64_t bytes = 0;
        char when[32], size[32];

        for (uint32_t r = 0; g->committed && r < g->commit.world_size; r++)
            bytes += g->commit.ranks[r].bytes;
        if (g->committed)
            escaped_names(&g->commit, &nm);
        fmt_time(when, sizeof(when), g->committed ? g->commit.created_ms : g->mtime_ms);
        spotctl_human(size, sizeof(size), bytes);
        if (c->json) {
            printf("%s{\"gen\":%" PRIu64 ",\"state\":\"%s\",\"manifests\":%u", i ? "," : "",
                   g->gen, state, g->manifests);
            if (g->committed) {
                printf(",\"step\":%" PRIu64 ",\"world_size\":%u,\"reason\":", g->commit.step,
                       g->commit.world_size);
                print_json_str(nm.reason);
                printf(",\"method\":");
                print_json_str(nm.method);
                printf(",\"bytes\":%" PRIu64 ",\"created\":\"%s\"", bytes, when);
            }
            if (g->committed || g->unauthentic)
                printf(",\"auth\":\"%s\",\"key_id\":\"%s\"", jobkey_auth_name(g->auth),
                       g->commit.has_mac ? g->commit.key_id : "");
            printf("}");
        } else if (g->committed) {
            printf("%-9" PRIu64 " %-11s %-12" PRIu64 " %-6u %-12s %-8s %-10s %s\n", g->gen,
                   state, g->commit.step, g->commit.world_size, nm.reason, nm.method, size, when);
        } else {
            printf("%-9" PRIu64 " %-11s %-12s %-6u %-12s %-8s %-10s %s\n", g->gen, state, "-",
                   g->manifests, "-", "-", "-", when);
        }
    }
    if (c->json)
        printf("]\n");
    show_gens_foreign(c);
    snap_gens_free(gens, n);
    ctl_stop(c);
}

void show_ls(struct ctl *c)
{
    snap_gens(c->snap, on_ls, c);
}

/* ---- show -------------------------------------------------------------------- */

const char *show_signature(const struct ctl *c, enum jobkey_auth a, const char *key_id,
                           char *buf, size_t size)
{
    switch (a) {
    case JOBKEY_AUTHENTIC: snprintf(buf, size, "signed by key %s", key_id); break;
    case JOBKEY_UNCHECKED:
        snprintf(buf, size, "signed by key %s (not checked: no job key given)", key_id);
        break;
    case JOBKEY_UNSIGNED: snprintf(buf, size, "unsigned"); break;
    case JOBKEY_OTHER_KEY:
        snprintf(buf, size, "WRONG signature (signed by key %s, not %s)", key_id,
                 c->key_id ? c->key_id : "?");
        break;
    case JOBKEY_BAD_MAC:
        snprintf(buf, size, "WRONG signature (key %s: altered, moved or forged)", key_id);
        break;
    }
    return buf;
}

static const char *type_name(enum mf_type t)
{
    return t == MF_FILE ? "file" : t == MF_DIR ? "dir" : "symlink";
}

/* What show says of a record: with a key, only one it signed gets this far. */
static enum jobkey_auth shown_auth(const struct ctl *c, const struct commit *cm)
{
    return !cm->has_mac ? JOBKEY_UNSIGNED : c->key_id ? JOBKEY_AUTHENTIC : JOBKEY_UNCHECKED;
}

/* Paths and link targets are escaped too, into these: JSON cannot hold
 * bytes that are not UTF-8, and a terminal must not get control bytes. */
static char path_esc[MANIFEST_ESCAPED_MAX], target_esc[MANIFEST_ESCAPED_MAX];

/* "foreign": the keys of show_gens_foreign(), escaped. */
static void add_foreign(const struct ctl *c, cJSON *o)
{
    const struct store_entry *e;
    size_t n = snap_foreign(c->snap, &e);
    cJSON *a = cJSON_AddArrayToObject(o, "foreign");

    for (size_t i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(manifest_escape(e[i].key, path_esc,
                                                                   sizeof(path_esc))));
}

static void show_json(const struct ctl *c, const struct commit *cm, const struct manifest *mfs)
{
    cJSON *o = cJSON_CreateObject(), *ranks;
    char when[32], hex[2 * CHUNK_HASH_LEN + 1], *text;
    struct names nm;

    escaped_names(cm, &nm);
    fmt_time(when, sizeof(when), cm->created_ms);
    cJSON_AddNumberToObject(o, "gen", (double)cm->gen);
    cJSON_AddStringToObject(o, "job", nm.job);
    cJSON_AddNumberToObject(o, "step", (double)cm->step);
    cJSON_AddNumberToObject(o, "world_size", cm->world_size);
    cJSON_AddStringToObject(o, "reason", nm.reason);
    cJSON_AddStringToObject(o, "method", nm.method);
    cJSON_AddStringToObject(o, "created", when);
    cJSON_AddStringToObject(o, "version", nm.version);
    cJSON_AddStringToObject(o, "auth", jobkey_auth_name(shown_auth(c, cm)));
    if (cm->has_mac)
        cJSON_AddStringToObject(o, "key_id", cm->key_id);
    ranks = cJSON_AddArrayToObject(o, "ranks");
    for (uint32_t r = 0; ranks && r < cm->world_size; r++) {
        const struct manifest *m = &mfs[r];
        cJSON *jr = cJSON_CreateObject(), *files = NULL;
        uint64_t chunks = 0;

        cJSON_AddItemToArray(ranks, jr);
        hash_hex(cm->ranks[r].sha256, hex);
        cJSON_AddNumberToObject(jr, "rank", r);
        cJSON_AddNumberToObject(jr, "bytes", (double)cm->ranks[r].bytes);
        cJSON_AddStringToObject(jr, "manifest_sha256", hex);
        cJSON_AddNumberToObject(jr, "chunk_size", m->chunk_size);
        if (c->files)
            files = cJSON_AddArrayToObject(jr, "files");
        for (size_t i = 0; i < m->n_files; i++) {
            const struct mf_file *f = &m->files[i];
            cJSON *jf;

            chunks += f->n_chunks;
            if (!files || !(jf = cJSON_CreateObject()))
                continue;
            cJSON_AddItemToArray(files, jf);
            cJSON_AddStringToObject(jf, "path", manifest_escape(f->path, path_esc,
                                                                sizeof(path_esc)));
            cJSON_AddStringToObject(jf, "type", type_name(f->type));
            cJSON_AddNumberToObject(jf, "mode", f->mode);
            if (f->type == MF_FILE) {
                cJSON_AddNumberToObject(jf, "size", (double)f->size);
                cJSON_AddNumberToObject(jf, "chunks", (double)f->n_chunks);
            } else if (f->type == MF_SYMLINK) {
                cJSON_AddStringToObject(jf, "target", manifest_escape(f->target, target_esc,
                                                                      sizeof(target_esc)));
            }
        }
        cJSON_AddNumberToObject(jr, "files_count", (double)m->n_files);
        cJSON_AddNumberToObject(jr, "chunks", (double)chunks);
    }
    add_foreign(c, o);
    text = cJSON_PrintUnformatted(o);
    printf("%s\n", text ? text : "{}");
    free(text);
    cJSON_Delete(o);
}

static void on_shown(void *arg, int err, const char *msg, const struct commit *cm,
                     const struct manifest *mfs)
{
    struct ctl *c = arg;
    char when[32], size[32], hex[2 * CHUNK_HASH_LEN + 1], sig[160];
    uint64_t bytes = 0;
    struct names nm;

    if (err) {
        ctl_fail(c, err, msg);
        ctl_stop(c);
        return;
    }
    if (c->json) {
        show_json(c, cm, mfs);
        ctl_stop(c);
        return;
    }
    escaped_names(cm, &nm);
    for (uint32_t r = 0; r < cm->world_size; r++)
        bytes += cm->ranks[r].bytes;
    fmt_time(when, sizeof(when), cm->created_ms);
    spotctl_human(size, sizeof(size), bytes);
    printf("%-12s %" PRIu64 " of job %s\n", "generation", cm->gen, nm.job);
    printf("%-12s %" PRIu64 "\n", "step", cm->step);
    printf("%-12s %s\n", "reason", nm.reason);
    printf("%-12s %s\n", "method", nm.method);
    printf("%-12s %s (spotd %s)\n", "created", when, nm.version);
    printf("%-12s %s\n", "signature", show_signature(c, shown_auth(c, cm), cm->key_id, sig, sizeof(sig)));
    printf("%-12s %u, %s in all\n\n", "ranks", cm->world_size, size);
    printf("%-5s %-10s %-7s %-8s %-10s %s\n", "RANK", "SIZE", "FILES", "CHUNKS", "CHUNK SIZE",
           "MANIFEST SHA-256");
    for (uint32_t r = 0; r < cm->world_size; r++) {
        const struct manifest *m = &mfs[r];
        uint64_t chunks = 0;
        char cs[32];

        for (size_t i = 0; i < m->n_files; i++)
            chunks += m->files[i].n_chunks;
        spotctl_human(size, sizeof(size), cm->ranks[r].bytes);
        spotctl_human(cs, sizeof(cs), m->chunk_size);
        hash_hex(cm->ranks[r].sha256, hex);
        printf("%-5u %-10s %-7zu %-8" PRIu64 " %-10s %.16s...\n", r, size, m->n_files, chunks,
               cs, hex);
    }
    for (uint32_t r = 0; c->files && r < cm->world_size; r++) {
        printf("\nrank %u:\n%-8s %-6s %-10s %-7s %s\n", r, "TYPE", "MODE", "SIZE", "CHUNKS",
               "PATH");
        for (size_t i = 0; i < mfs[r].n_files; i++) {
            const struct mf_file *f = &mfs[r].files[i];

            spotctl_human(size, sizeof(size), f->size);
            printf("%-8s %04o   %-10s %-7zu %s%s%s\n", type_name(f->type), f->mode,
                   f->type == MF_FILE ? size : "-", f->n_chunks,
                   manifest_escape(f->path, path_esc, sizeof(path_esc)),
                   f->type == MF_SYMLINK ? " -> " : "",
                   f->type == MF_SYMLINK ? manifest_escape(f->target, target_esc,
                                                           sizeof(target_esc))
                                         : "");
        }
    }
    show_gens_foreign(c);
    ctl_stop(c);
}

void show_gen(struct ctl *c)
{
    snap_manifests(c->snap, c->gen, on_shown, c);
}

/* ---- world ------------------------------------------------------------------- */

struct world_get {
    struct ctl *c;
    char *key;
    int64_t mtime_ms;
    int err;
    const char *why;
    struct worldrec r;
};

static int cmp_wg(const void *a, const void *b)
{
    const struct world_get *x = a, *y = b;

    if (!x->err && !y->err && x->r.type != y->r.type)
        return (int)x->r.type - (int)y->r.type;
    if (!x->err && !y->err && x->r.rank != y->r.rank)
        return x->r.rank < y->r.rank ? -1 : 1;
    return strcmp(x->key, y->key);
}

static void world_report(struct ctl *c)
{
    static const char *const types[] = { "rank", "join", "assign" };
    cJSON *a = c->json ? cJSON_CreateArray() : NULL;
    int64_t now = (int64_t)time(NULL) * 1000;

    if (c->n_wg)
        qsort(c->wg, c->n_wg, sizeof(*c->wg), cmp_wg);
    if (!c->json && c->n_wg)
        printf("%-7s %-5s %-22s %-18s %-9s %s\n", "RECORD", "RANK", "ADDRESS", "NODE", "AGE",
               "KEY");
    for (size_t i = 0; i < c->n_wg; i++) {
        const struct world_get *g = &c->wg[i];
        double age = (double)(now - (g->err ? g->mtime_ms : g->r.ts_ms)) / 1000.0;
        char ages[32], rank[16];

        if (c->json) {
            cJSON *o = cJSON_CreateObject();

            cJSON_AddItemToArray(a, o);
            cJSON_AddStringToObject(o, "key", g->key);
            if (g->err) {
                cJSON_AddStringToObject(o, "error", g->why);
                continue;
            }
            cJSON_AddStringToObject(o, "type", types[g->r.type]);
            if (g->r.type != WORLDREC_JOIN)
                cJSON_AddNumberToObject(o, "rank", g->r.rank);
            if (g->r.addr[0])
                cJSON_AddStringToObject(o, "addr", g->r.addr);
            cJSON_AddStringToObject(o, "node", g->r.node);
            cJSON_AddNumberToObject(o, "ts_ms", (double)g->r.ts_ms);
            continue;
        }
        snprintf(ages, sizeof(ages), age < 120 ? "%.0f s" : age < 7200 ? "%.0f min" : "%.0f h",
                 age < 120 ? age : age < 7200 ? age / 60 : age / 3600);
        if (g->err) {
            printf("%-7s %-5s %-22s %-18s %-9s %s (%s)\n", "invalid", "-", "-", "-", ages, g->key,
                   g->why);
            continue;
        }
        snprintf(rank, sizeof(rank), "%u", g->r.rank);
        printf("%-7s %-5s %-22s %-18.16s %-9s %s\n", types[g->r.type],
               g->r.type == WORLDREC_JOIN ? "-" : rank, g->r.addr[0] ? g->r.addr : "-",
               g->r.node, ages, g->key);
    }
    if (c->json) {
        char *text = cJSON_PrintUnformatted(a);

        printf("%s\n", text ? text : "[]");
        free(text);
        cJSON_Delete(a);
    } else if (!c->n_wg) {
        printf("(no records: the job's nodes use static peers, or none has started)\n");
    }
}

static void on_world_got(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct world_get *g = arg;
    struct ctl *c = g->c;

    if (err == -ENOENT) {
        g->err = err;
        g->why = "gone while listed";
    } else if (err) {
        ctl_fail(c, err, msg);
    } else if (worldrec_parse(data, len, &g->r, &g->why) < 0) {
        g->err = -EBADMSG;
    } else if (strcmp(g->r.job, c->job) != 0) {
        g->err = -EBADMSG;
        g->why = "a record of another job";
    }
    free(data);
    if (--c->wg_pending)
        return;
    if (!c->err)
        world_report(c);
    ctl_stop(c);
}

static void on_world_listed(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct ctl *c = arg;

    if (err) {
        ctl_fail(c, err, msg);
        ctl_stop(c);
        return;
    }
    if (!n) {
        world_report(c);
        ctl_stop(c);
        return;
    }
    if (!(c->wg = calloc(n, sizeof(*c->wg)))) {
        store_entries_free(e, n);
        ctl_fail(c, -ENOMEM, "out of memory");
        ctl_stop(c);
        return;
    }
    c->n_wg = c->wg_pending = n;
    for (size_t i = 0; i < n; i++) {
        c->wg[i].c = c;
        c->wg[i].key = e[i].key;
        c->wg[i].mtime_ms = e[i].mtime_ms;
        e[i].key = NULL;
    }
    store_entries_free(e, n);
    for (size_t i = 0; i < n; i++)
        store_get(c->store, c->wg[i].key, WORLDREC_MAX, on_world_got, &c->wg[i]);
}

void show_world(struct ctl *c)
{
    char prefix[STORE_KEY_MAX + 1];

    snprintf(prefix, sizeof(prefix), "%s/world/", c->job);
    store_list(c->store, prefix, on_world_listed, c);
}

void show_release(struct ctl *c)
{
    for (size_t i = 0; i < c->n_wg; i++)
        free(c->wg[i].key);
    free(c->wg);
    c->wg = NULL;
    c->n_wg = 0;
}
