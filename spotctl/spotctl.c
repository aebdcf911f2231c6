/* spotctl: the operator's tool.  The store commands (push, ls, verify,
 * fetch, gc) drive the same snapshot engine as spotd (lib/spot/snap.c);
 * the daemon commands arrive with the control socket. */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "spot/config.h"
#include "spot/jobkey.h"
#include "spot/manifest.h"
#include "spot/parse.h"
#include "spot/pool.h"
#include "spot/snap.h"
#include "spot/store.h"
#include "spot/worldrec.h"

/* A commit record's name (job, reason, method, version), escaped. */
#define NAME_ESCAPED (4 * MANIFEST_NAME_MAX + 4)

/* Every command, for `spotctl help` and `spotctl COMMAND --help`. */
enum kind { K_STORE, K_DAEMON, K_RESUME };

static const struct {
    const char *name;
    enum kind kind;
    const char *args;
    const char *brief;
    const char *what;
    const char *opts;             /* its own options, one per line */
} commands[] = {
    { "ls", K_STORE, "", "generations in the store", "the job's generations, oldest first: state, step, ranks, reason, "
      "method, size, time", "" },
    { "show", K_STORE, "[--gen N]", "one generation's commit and manifests", "one committed generation (the newest by default): its "
      "commit record and every rank's manifest, files and chunks",
      "  --gen N             the generation (default: the newest committed)\n"
      "  --files             list every file of every rank\n" },
    { "verify", K_STORE, "[--gen N]", "fetch and hash-check every chunk", "fetch every chunk of every rank and check its hash, and "
      "say whether the commit record is signed and by which key; exit 0 when all are whole "
      "(and, with a job key, signed by it), 1 otherwise",
      "  --gen N             the generation (default: the newest committed)\n" },
    { "fetch", K_STORE, "[--gen N] [--rank R] DEST", "restore a rank into a directory", "restore a rank of a generation into "
      "DEST, which must not exist (whole or absent: it is written beside and renamed)",
      "  --gen N             the generation (default: the newest committed)\n"
      "  --rank R            the rank (default 0)\n"
      "  --preserve-special-modes\n"
      "                      keep setuid, setgid, sticky and others' write bits as stored\n"
      "                      (default: dropped; also preserve_special_modes in the file)\n" },
    { "resume", K_RESUME, "[--gen N] [-- COMMAND [ARGS...]]", "restore here and start the command", "restore a generation onto "
      "this machine and start the command as spotd would: runs `spotd run --resume N` with "
      "the same store, job and configuration (CRIU generations are restored with criu "
      "restore); the command is the configuration file's \"command\" when none is given",
      "  --gen N             the generation (default: the newest committed)\n"
      "  --state-dir DIR     spotd's state directory (default: the configuration's)\n"
      "  --spotd PATH        the spotd to run (default: beside spotctl, else PATH)\n"
      "  --preserve-special-modes\n"
      "                      passed on to spotd: modes restored exactly as stored\n"
      "  --json              spotd logs JSON lines\n" },
    { "gc", K_STORE, "[--keep N] [--grace DUR] [--dry-run]", "retention: delete what nothing kept needs", "apply retention: keep the newest "
      "N committed generations, delete older ones and every chunk no kept one references",
      "  --keep N            committed generations kept (default 3)\n"
      "  --grace DUR         never delete a chunk younger than this (default 6h)\n"
      "  --dry-run           say what would go, delete nothing\n" },
    { "world", K_STORE, "", "the world's rendezvous records", "the world's rendezvous records in the store: the ranks and "
      "their addresses, nodes asking for a rank, ranks given", "" },
    { "push", K_STORE, "[--step N] [--reason R] DIR...", "save directories as a new generation", "save directories as the ranks of a "
      "new committed generation (DIR i is rank i)",
      "  --step N            the step the generation records (default 0)\n"
      "  --reason R          its reason (default manual)\n"
      "  --chunk-size SIZE   (8MiB)\n"
      "  --min-saving PCT    compress a chunk when zstd saves this much (10)\n" },
    { "status", K_DAEMON, "", "state of the local spotd", "the local spotd: job, rank, method, state, step, newest "
      "committed generation, last notice, the checkpoint under way and its upload", "" },
    { "checkpoint", K_DAEMON, "", "checkpoint now", "checkpoint now (reason manual)", "" },
    { "drill", K_DAEMON, "[--kind KIND] [--in DURATION]", "a simulated interruption notice", "a simulated interruption notice, "
      "marked as a drill in the logs and events",
      "  --kind KIND         terminate (default), stop, hibernate, rebalance, maintenance\n"
      "  --in DURATION       its deadline this far away (default: the signal deadline)\n" },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char store_opts[] =
    "store options (else the configuration file's, else SPOTD_STORE, SPOTD_JOB):\n"
    "  --config FILE       the file spotd reads (else SPOTD_CONFIG, else /etc/spotd/spotd.json\n"
    "                      when present): job, store, state_dir, socket\n"
    "  --store URL         file:///path or s3://bucket/prefix\n"
    "  --job NAME\n"
    "  --s3-endpoint URL   else AWS_ENDPOINT_URL, else AWS\n"
    "  --s3-region NAME    else AWS_REGION, AWS_DEFAULT_REGION, us-east-1\n"
    "  --s3-path-style     path-style requests (automatic for IP and localhost)\n"
    "  --s3-virtual-hosted bucket in the host name, whatever the endpoint\n"
    "  --requests N        S3 requests in flight (16)\n"
    "  --s3-timeout DUR    a request stalled this long is retried (30s)\n"
    "  --s3-retries N      tries after the first (6)\n"
    "  --inflight SIZE     chunk memory in flight (128MiB)\n"
    "  --threads N         worker threads (the number of CPUs, 2 to 8)\n"
    "  --json              one JSON document on stdout\n"
    "  --job-key-file FILE the key that signs and checks commit records (else\n"
    "                      SPOTD_JOB_KEY_FILE, job_key_file, else the world key)\n"
    "  --world-key-file FILE\n"
    "                      the world key, the job key when none is given (else\n"
    "                      SPOTD_WORLD_KEY_FILE, SPOTD_WORLD_KEY, the configuration's)\n";

static const char daemon_opts[] =
    "which spotd (else the configuration file's socket or state_dir, else SPOT_SOCKET):\n"
    "  --config FILE       the file spotd reads\n"
    "  --socket PATH       its control socket\n"
    "  --state-dir DIR     its state directory (the socket is DIR/control.sock)\n"
    "  --job NAME          /var/lib/spotd/NAME/control.sock\n"
    "  --json              spotd's answer as one JSON object\n";

static void usage(FILE *f)
{
    fprintf(f, "usage: spotctl COMMAND [OPTIONS] [ARGS]\n\nstore commands (no spotd needed):\n");
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (commands[i].kind == K_DAEMON)
            continue;
        fprintf(f, "  %-10s %-38s %s\n", commands[i].name, commands[i].args, commands[i].brief);
    }
    fprintf(f, "\ndaemon commands, over the control socket of a running spotd:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (commands[i].kind == K_DAEMON)
            fprintf(f, "  %-10s %-38s %s\n", commands[i].name, commands[i].args,
                    commands[i].brief);
    fprintf(f, "\n'spotctl COMMAND --help' says what one does and takes.  Every command "
            "takes --json.\n\n%s\n%s", store_opts, daemon_opts);
}

static int find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(commands[i].name, name))
            return (int)i;
    return -1;
}

/* text, then ".", folded at 78 columns. */
static void fold(FILE *f, const char *text)
{
    size_t col = 0;

    while (*text) {
        size_t n = strcspn(text, " ");

        if (col && col + 1 + n > 78) {
            fputc('\n', f);
            col = 0;
        } else if (col) {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, n, f);
        col += n;
        text += n;
        text += strspn(text, " ");
    }
    fputs(".\n\n", f);
}

static void usage_of(FILE *f, int i)
{
    fprintf(f, "usage: spotctl %s [OPTIONS]%s%s\n\n", commands[i].name,
            commands[i].args[0] ? " " : "", commands[i].args);
    fold(f, commands[i].what);
    if (commands[i].opts[0])
        fprintf(f, "%s\n", commands[i].opts);
    fprintf(f, "%s", commands[i].kind == K_DAEMON ? daemon_opts : store_opts);
}

struct ctl {
    struct event_base *base;
    struct pool *pool;
    struct store *store;
    struct snap *snap;
    const char *cmd, *job, *url;
    const char *key_id;           /* the job key's; NULL: none */
    bool json, dry_run;
    uint64_t gen, step;
    uint32_t rank;
    const char *reason;
    unsigned keep;
    int64_t grace_ms;
    char **dirs;
    int n_dirs;
    /* push */
    struct snap_counters c;
    struct snap_saved *saved;
    int pending;
    int err;
    char msg[8192];
    struct timespec t0;
    int status;                   /* exit status */
    bool files;                   /* show: every file */
    bool preserve;                /* fetch, resume: --preserve-special-modes */
    struct event *tick;           /* the progress line, on a terminal */
    /* world */
    struct world_get *wg;
    size_t n_wg, wg_pending;
};

static double since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void human(char *buf, size_t size, uint64_t n)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)n;
    int u = 0;

    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void fail(struct ctl *c, int err, const char *msg)
{
    if (!c->err) {
        c->err = err;
        snprintf(c->msg, sizeof(c->msg), "%s", msg);
    }
}

static void progress_end(struct ctl *c);

static void stop(struct ctl *c)
{
    progress_end(c);
    event_base_loopbreak(c->base);
}

static void print_counters(const struct ctl *c, double secs)
{
    const struct snap_counters *k = &c->c;

    printf("\"files\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"bytes_read\":%" PRIu64
           ",\"bytes_zero\":%" PRIu64 ",\"bytes_skipped\":%" PRIu64
           ",\"bytes_compressed\":%" PRIu64 ",\"bytes_sent\":%" PRIu64
           ",\"bytes_received\":%" PRIu64 ",\"bytes_written\":%" PRIu64 ",\"chunks\":%" PRIu64
           ",\"chunks_sent\":%" PRIu64 ",\"chunks_skipped\":%" PRIu64 ",\"retries\":%" PRIu64
           ",\"seconds\":%.3f",
           k->files, k->bytes_total, k->bytes_read, k->bytes_zero, k->bytes_skipped,
           k->bytes_compressed, k->bytes_sent, k->bytes_received, k->bytes_written, k->chunks,
           k->chunks_sent, k->chunks_skipped, k->retries, secs);
}

/* ---- push ------------------------------------------------------------------- */

static void on_pushed(void *arg, int err, const char *msg)
{
    struct ctl *c = arg;
    double secs = since(&c->t0);
    char a[32], b[32];

    progress_end(c);
    if (err) {
        fail(c, err, msg);
        stop(c);
        return;
    }
    if (c->json) {
        printf("{\"gen\":%" PRIu64 ",\"ranks\":%d,", c->gen, c->n_dirs);
        print_counters(c, secs);
        printf("}\n");
    } else {
        human(a, sizeof(a), c->c.bytes_total);
        human(b, sizeof(b), c->c.bytes_sent);
        printf("generation %" PRIu64 " committed: %d rank%s, %s in %.1f s (%.0f MB/s), %s sent, "
               "%" PRIu64 " of %" PRIu64 " chunks already stored\n",
               c->gen, c->n_dirs, c->n_dirs == 1 ? "" : "s", a, secs,
               secs > 0 ? (double)c->c.bytes_total / secs / 1e6 : 0.0, b, c->c.chunks_skipped,
               c->c.chunks);
    }
    stop(c);
}

static void on_saved(void *arg, int err, const char *msg, const struct snap_saved *s)
{
    struct ctl *c = arg;
    struct commit cm;

    if (err)
        fail(c, err, msg);
    else
        c->saved[s->rank] = *s;
    if (--c->pending > 0)
        return;
    if (c->err) {
        stop(c);
        return;
    }
    memset(&cm, 0, sizeof(cm));
    cm.ranks = calloc((size_t)c->n_dirs, sizeof(*cm.ranks));
    if (!cm.ranks) {
        fail(c, -ENOMEM, "out of memory");
        stop(c);
        return;
    }
    snprintf(cm.job, sizeof(cm.job), "%s", c->job);
    cm.gen = c->gen;
    cm.step = c->step;
    cm.world_size = (uint32_t)c->n_dirs;
    snprintf(cm.reason, sizeof(cm.reason), "%s", c->reason);
    snprintf(cm.method, sizeof(cm.method), "%s", "manual");
    cm.created_ms = (int64_t)time(NULL) * 1000;
    snprintf(cm.version, sizeof(cm.version), "%s", SPOT_VERSION);
    for (int i = 0; i < c->n_dirs; i++) {
        cm.ranks[i].rank = (uint32_t)i;
        memcpy(cm.ranks[i].sha256, c->saved[i].sha256, CHUNK_HASH_LEN);
        cm.ranks[i].bytes = c->saved[i].bytes;
    }
    snap_commit(c->snap, &cm, on_pushed, c);
    free(cm.ranks);
}

/* The number is claimed before anything is stored under it: a spotd of
 * the same job checkpointing meanwhile takes another. */
static void push_claimed(void *arg, int err, const char *msg, uint64_t gen)
{
    struct ctl *c = arg;

    if (err) {
        fail(c, err, msg);
        stop(c);
        return;
    }
    c->gen = gen;
    c->pending = c->n_dirs;
    for (int i = 0; i < c->n_dirs; i++) {
        struct snap_save_req req = {
            .dir = c->dirs[i],
            .gen = c->gen,
            .rank = (uint32_t)i,
            .step = c->step,
            .method = "manual",
        };
        snap_save(c->snap, &req, &c->c, on_saved, c);
    }
}

static void push_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct ctl *c = arg;
    uint64_t from = n ? gens[n - 1].gen + 1 : 1;

    snap_gens_free(gens, n);
    if (err) {
        fail(c, err, msg);
        stop(c);
        return;
    }
    if (from > GEN_MAX) {
        fail(c, -ERANGE, "no generation number left");
        stop(c);
        return;
    }
    snap_claim(c->snap, from, push_claimed, c);
}

/* ---- ls ----------------------------------------------------------------------- */

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
        fail(c, err, msg);
        stop(c);
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
        human(size, sizeof(size), bytes);
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
    snap_gens_free(gens, n);
    stop(c);
}

/* ---- verify, fetch, gc ------------------------------------------------------- */

/* What a record's signature says, in words. */
static const char *signature(const struct ctl *c, enum jobkey_auth a, const char *key_id,
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

static void on_verified(void *arg, int err, const char *msg, const struct snap_verify_report *r)
{
    struct ctl *c = arg;
    char b[32], sig[160] = "";

    progress_end(c);
    human(b, sizeof(b), r->bytes);
    if (r->auth_known)
        signature(c, r->auth, r->key_id, sig, sizeof(sig));
    if (c->json) {
        printf("{\"ok\":%s,\"chunks\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"bad_chunks\":%" PRIu64
               ",",
               err ? "false" : "true", r->chunks, r->bytes, r->bad_chunks);
        if (r->auth_known)
            printf("\"auth\":\"%s\",\"key_id\":\"%s\",", jobkey_auth_name(r->auth), r->key_id);
        print_counters(c, since(&c->t0));
        printf("}\n");
    } else if (!err) {
        printf("verified: %" PRIu64 " chunks, %s, every hash correct; %s\n", r->chunks, b, sig);
    } else if (err == -EKEYREJECTED && r->auth_known) {
        printf("not verified: %s\n", sig);
    }
    if (err)
        fail(c, err, msg);
    stop(c);
}

static void on_fetched(void *arg, int err, const char *msg)
{
    struct ctl *c = arg;
    double secs = since(&c->t0);
    char b[32];

    progress_end(c);
    if (err) {
        fail(c, err, msg);
        stop(c);
        return;
    }
    human(b, sizeof(b), c->c.bytes_total);
    if (c->json) {
        printf("{\"dest\":\"%s\",", c->dirs[0]);
        print_counters(c, secs);
        printf("}\n");
    } else {
        printf("restored %s into %s in %.1f s (%.0f MB/s)\n", b, c->dirs[0], secs,
               secs > 0 ? (double)c->c.bytes_total / secs / 1e6 : 0.0);
    }
    stop(c);
}

static void on_gc(void *arg, int err, const char *msg, const struct snap_gc_report *r)
{
    struct ctl *c = arg;
    char b[32];

    if (err) {
        fail(c, err, msg);
        stop(c);
        return;
    }
    human(b, sizeof(b), r->bytes_deleted);
    if (c->json)
        printf("{\"dry_run\":%s,\"gens_deleted\":%" PRIu64 ",\"gens_kept\":%" PRIu64
               ",\"chunks_deleted\":%" PRIu64 ",\"chunks_kept\":%" PRIu64
               ",\"bytes_deleted\":%" PRIu64 ",\"gens_unauthentic\":%" PRIu64 "}\n",
               c->dry_run ? "true" : "false", r->gens_deleted, r->gens_kept, r->chunks_deleted,
               r->chunks_kept, r->bytes_deleted, r->gens_unauthentic);
    else
        printf("%s%" PRIu64 " generation%s and %" PRIu64 " chunks (%s); kept %" PRIu64
               " generation%s and %" PRIu64 " chunks\n",
               c->dry_run ? "would delete " : "deleted ", r->gens_deleted,
               r->gens_deleted == 1 ? "" : "s", r->chunks_deleted, b, r->gens_kept,
               r->gens_kept == 1 ? "" : "s", r->chunks_kept);
    if (r->gens_unauthentic)
        fprintf(stderr, "spotctl: %" PRIu64 " of the kept generations are not signed by job key "
                "%s: they were left alone, with what they reference ('spotctl ls' shows them; "
                "remove them by hand once you know what they are)\n", r->gens_unauthentic,
                c->key_id ? c->key_id : "?");
    stop(c);
}

/* ---- show -------------------------------------------------------------------- */

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
        chunk_hex(cm->ranks[r].sha256, hex);
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
        fail(c, err, msg);
        stop(c);
        return;
    }
    if (c->json) {
        show_json(c, cm, mfs);
        stop(c);
        return;
    }
    escaped_names(cm, &nm);
    for (uint32_t r = 0; r < cm->world_size; r++)
        bytes += cm->ranks[r].bytes;
    fmt_time(when, sizeof(when), cm->created_ms);
    human(size, sizeof(size), bytes);
    printf("%-12s %" PRIu64 " of job %s\n", "generation", cm->gen, nm.job);
    printf("%-12s %" PRIu64 "\n", "step", cm->step);
    printf("%-12s %s\n", "reason", nm.reason);
    printf("%-12s %s\n", "method", nm.method);
    printf("%-12s %s (spotd %s)\n", "created", when, nm.version);
    printf("%-12s %s\n", "signature", signature(c, shown_auth(c, cm), cm->key_id, sig, sizeof(sig)));
    printf("%-12s %u, %s in all\n\n", "ranks", cm->world_size, size);
    printf("%-5s %-10s %-7s %-8s %-10s %s\n", "RANK", "SIZE", "FILES", "CHUNKS", "CHUNK SIZE",
           "MANIFEST SHA-256");
    for (uint32_t r = 0; r < cm->world_size; r++) {
        const struct manifest *m = &mfs[r];
        uint64_t chunks = 0;
        char cs[32];

        for (size_t i = 0; i < m->n_files; i++)
            chunks += m->files[i].n_chunks;
        human(size, sizeof(size), cm->ranks[r].bytes);
        human(cs, sizeof(cs), m->chunk_size);
        chunk_hex(cm->ranks[r].sha256, hex);
        printf("%-5u %-10s %-7zu %-8" PRIu64 " %-10s %.16s...\n", r, size, m->n_files, chunks,
               cs, hex);
    }
    for (uint32_t r = 0; c->files && r < cm->world_size; r++) {
        printf("\nrank %u:\n%-8s %-6s %-10s %-7s %s\n", r, "TYPE", "MODE", "SIZE", "CHUNKS",
               "PATH");
        for (size_t i = 0; i < mfs[r].n_files; i++) {
            const struct mf_file *f = &mfs[r].files[i];

            human(size, sizeof(size), f->size);
            printf("%-8s %04o   %-10s %-7zu %s%s%s\n", type_name(f->type), f->mode,
                   f->type == MF_FILE ? size : "-", f->n_chunks,
                   manifest_escape(f->path, path_esc, sizeof(path_esc)),
                   f->type == MF_SYMLINK ? " -> " : "",
                   f->type == MF_SYMLINK ? manifest_escape(f->target, target_esc,
                                                           sizeof(target_esc))
                                         : "");
        }
    }
    stop(c);
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
        fail(c, err, msg);
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
    stop(c);
}

static void on_world_listed(void *arg, int err, const char *msg, struct store_entry *e, size_t n)
{
    struct ctl *c = arg;

    if (err) {
        fail(c, err, msg);
        stop(c);
        return;
    }
    if (!n) {
        world_report(c);
        stop(c);
        return;
    }
    if (!(c->wg = calloc(n, sizeof(*c->wg)))) {
        store_entries_free(e, n);
        fail(c, -ENOMEM, "out of memory");
        stop(c);
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

/* ---- progress ------------------------------------------------------------------ */

/* A line on stderr, redrawn five times a second, while push, fetch or
 * verify moves data; only on a terminal. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct ctl *c = arg;
    const struct snap_counters *k = &c->c;
    uint64_t done = !strcmp(c->cmd, "push") ? k->bytes_read : k->bytes_hashed + k->bytes_zero;
    uint64_t total = k->bytes_total;
    double secs = since(&c->t0), rate = secs > 0 ? (double)done / secs : 0;
    double frac = total ? (double)(done > total ? total : done) / (double)total : 0;
    char d[32], t[32], r[32], bar[31], eta[48] = "";
    int fill = (int)(frac * 30);

    human(d, sizeof(d), done);
    human(t, sizeof(t), total);
    human(r, sizeof(r), (uint64_t)rate);
    memset(bar, '#', (size_t)fill);
    memset(bar + fill, '.', (size_t)(30 - fill));
    bar[30] = '\0';
    if (rate > 0 && total > done)
        snprintf(eta, sizeof(eta), "  ETA %.0f s", (double)(total - done) / rate);
    fprintf(stderr, "\r%s [%s] %3.0f%%  %s of %s  %s/s%s\033[K", c->cmd, bar, frac * 100, d, t,
            r, eta);
}

static void progress_start(struct ctl *c)
{
    struct timeval tv = { 0, 200 * 1000 };

    if (c->json || !isatty(STDERR_FILENO) || (strcmp(c->cmd, "push") && strcmp(c->cmd, "fetch") &&
                                              strcmp(c->cmd, "verify")))
        return;
    if ((c->tick = event_new(c->base, -1, EV_PERSIST, on_tick, c))) {
        event_add(c->tick, &tv);
        on_tick(-1, 0, c);
    }
}

static void progress_end(struct ctl *c)
{
    if (!c->tick)
        return;
    event_free(c->tick);
    c->tick = NULL;
    fprintf(stderr, "\r\033[K");
}

/* "8MiB", "64KiB", "1G", "1048576": bytes. */
static int parse_size(const char *s, uint64_t *ret)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = { { "", 1 }, { "K", 1024 }, { "KiB", 1024 }, { "M", 1024 * 1024 },
                  { "MiB", 1024 * 1024 }, { "G", 1024ULL * 1024 * 1024 },
                  { "GiB", 1024ULL * 1024 * 1024 } };
    char *end;
    unsigned long long n;

    if (*s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    n = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcmp(end, units[i].suffix)) {
            if (n > UINT64_MAX / units[i].mult)
                return -EINVAL;
            *ret = n * units[i].mult;
            return 0;
        }
    return -EINVAL;
}

/* ---- main ------------------------------------------------------------------- */

enum {
    O_STORE = 256, O_JOB, O_ENDPOINT, O_REGION, O_PATH_STYLE, O_VIRTUAL_HOSTED, O_REQUESTS, O_INFLIGHT,
    O_CHUNK, O_THREADS, O_JSON, O_TIMEOUT, O_RETRIES, O_MIN_SAVING, O_GEN, O_RANK, O_STEP, O_REASON, O_KEEP, O_GRACE, O_DRY_RUN,
    O_CONFIG, O_FILES, O_STATE_DIR, O_SPOTD, O_JOB_KEY_FILE, O_WORLD_KEY_FILE, O_PRESERVE,
};

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "spotctl: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 2;
}

/* ---- configuration ----------------------------------------------------------- */

/* What spotd would read: --config FILE (among the options), else
 * SPOTD_CONFIG, else the default file when it can be read; then the
 * SPOTD_* variables.  Flags win over both.  Returns 0, or 2 after saying
 * why. */
static int load_config(int argc, char **argv, struct config *cfg)
{
    const char *file = getenv("SPOTD_CONFIG");
    char err[1024], warn[1024];

    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            file = argv[++i];
        else if (!strncmp(argv[i], "--config=", 9))
            file = argv[i] + 9;
    }
    if (config_init(cfg) < 0)
        return bad("out of memory");
    if ((!file || !*file) && access(CONFIG_DEFAULT_FILE, R_OK) == 0)
        file = CONFIG_DEFAULT_FILE;
    if ((file && *file && config_load_file(cfg, file, err, sizeof(err)) < 0) ||
        config_load_env(cfg, (const char *const *)environ, err, sizeof(err), warn,
                        sizeof(warn)) < 0) {
        config_release(cfg);
        return bad("%s", err);
    }
    return 0;
}

/* ---- resume --------------------------------------------------------------------- */

struct resume {
    struct ctl *c;
    uint64_t gen;                 /* the one found */
    char method[MANIFEST_NAME_MAX + 1];
    const char *key_file;         /* given as a flag: spotd gets it too */
};

static void on_resume_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct resume *rs = arg;
    struct ctl *c = rs->c;
    const struct snap_gen *found = NULL;

    if (err) {
        fail(c, err, msg);
        stop(c);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (c->gen ? gens[i].gen == c->gen : gens[i].committed || gens[i].unauthentic)
            found = &gens[i];
    if (found && found->unauthentic) {
        char why[1024];

        snap_refusal(c->snap, found, why, sizeof(why));
        fail(c, -EKEYREJECTED, why);
        found = NULL;
    } else if (!found && !c->gen)
        fail(c, -ENOENT, "the job has no committed generation to resume from; 'spotctl ls' "
             "lists what the store holds");
    else if (!found)
        fail(c, -ENOENT, "the job has no generation of that number; 'spotctl ls' lists them");
    else if (!found->committed)
        fail(c, -ENOENT, "that generation was never committed: it cannot be resumed from; "
             "'spotctl ls' shows the committed ones");
    if (found && found->committed) {
        rs->gen = found->gen;
        snprintf(rs->method, sizeof(rs->method), "%s", found->commit.method);
    }
    snap_gens_free(gens, n);
    stop(c);
}

/* The spotd beside this spotctl, else the one in PATH. */
static void find_spotd(char *buf, size_t size)
{
    char self[3800];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash;

    if (n > 0) {
        self[n] = '\0';
        if ((slash = strrchr(self, '/'))) {
            *slash = '\0';
            snprintf(buf, size, "%s/spotd", self);
            if (access(buf, X_OK) == 0)
                return;
        }
    }
    snprintf(buf, size, "spotd");
}

/* The argument list of exec_resume(), copied. */
struct args {
    char **v;
    int n, cap;
    bool oom;
};

static void arg(struct args *a, const char *s)
{
    if (a->oom)
        return;
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? a->cap * 2 : 32;
        char **v = realloc(a->v, (size_t)cap * sizeof(*v));

        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) {
        a->oom = true;
        return;
    }
    a->v[++a->n] = NULL;
}

/* spotd run --resume GEN with this store and job, the command after
 * them; spotctl becomes it. */
static int exec_resume(const struct ctl *c, const struct resume *rs, const char *config_file,
                       const char *state_dir, const char *spotd, char **cmd, int n_cmd)
{
    struct args a = { NULL, 0, 0, false };
    char gen[32], path[4000];

    if (spotd)
        snprintf(path, sizeof(path), "%s", spotd);
    else
        find_spotd(path, sizeof(path));
    snprintf(gen, sizeof(gen), "%" PRIu64, rs->gen);
    arg(&a, path);
    arg(&a, "run");
    if (config_file) {
        arg(&a, "--config");
        arg(&a, config_file);
    }
    arg(&a, "--store");
    arg(&a, c->url);
    arg(&a, "--job");
    arg(&a, c->job);
    arg(&a, "--resume");
    arg(&a, gen);
    /* A CRIU generation is restored by the criu method alone; the others
     * all reach the command through SPOT_RESUME_DIR, whatever method the
     * configuration sets for its next checkpoints. */
    if (!strcmp(rs->method, "criu")) {
        arg(&a, "--method");
        arg(&a, "criu");
    }
    if (state_dir) {
        arg(&a, "--state-dir");
        arg(&a, state_dir);
    }
    if (rs->key_file) {
        arg(&a, "--job-key-file");
        arg(&a, rs->key_file);
    }
    if (c->preserve)
        arg(&a, "--preserve-special-modes");
    if (c->json) {
        arg(&a, "--log-format");
        arg(&a, "json");
    }
    if (n_cmd) {
        arg(&a, "--");
        for (int k = 0; k < n_cmd; k++)
            arg(&a, cmd[k]);
    }
    if (a.oom) {
        bad("out of memory");
    } else {
        if (!c->json)
            fprintf(stderr, "spotctl: resuming job %s from generation %s (%s) with %s\n", c->job,
                    gen, rs->method, path);
        fflush(NULL);
        execvp(a.v[0], a.v);
        bad("cannot execute %s: %s; give --spotd PATH", path, strerror(errno));
    }
    for (int k = 0; k < a.n; k++)
        free(a.v[k]);
    free(a.v);
    return 1;
}

/* ---- daemon commands ------------------------------------------------------ */

/* Send one command line to the control socket at path and read the one
 * line that answers it (10 s at most).  Returns the parsed answer, or NULL
 * after saying why. */
static cJSON *ask_daemon(const char *path, const char *line)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char buf[65536];
    size_t len = 0;
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        bad("control socket path '%s' is too long", path);
        return NULL;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        bad("cannot connect to spotd's control socket '%s': %s; is spotd running with --job "
            "and --store, and is this its --state-dir (or give --socket)?", path,
            strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (send(fd, line, strlen(line), MSG_NOSIGNAL) != (ssize_t)strlen(line)) {
        bad("cannot write to '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    while (len < sizeof(buf) - 1 && !memchr(buf, '\n', len)) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        ssize_t n;

        if (poll(&p, 1, 10000) <= 0) {
            bad("spotd did not answer within 10 s on '%s'", path);
            close(fd);
            return NULL;
        }
        n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    {
        cJSON *o = cJSON_Parse(buf);
        if (!o || !cJSON_IsObject(o)) {
            bad("spotd's answer on '%s' is not a JSON object: '%.200s'", path, buf);
            cJSON_Delete(o);
            return NULL;
        }
        return o;
    }
}

static const char *jstr(const cJSON *o, const char *key, const char *def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    return cJSON_IsString(v) ? v->valuestring : def;
}

static double jnum(const cJSON *o, const char *key, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static void print_status(const cJSON *o)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "in_progress");
    char b1[32], b2[32];

    printf("%-16s %s\n", "job", jstr(o, "job", "?"));
    printf("%-16s %s\n", "store", jstr(o, "store", "?"));
    printf("%-16s %.0f\n", "rank", jnum(o, "rank", 0));
    printf("%-16s %s\n", "method", jstr(o, "method", "?"));
    printf("%-16s %s\n", "state", jstr(o, "state", "?"));
    printf("%-16s %.0f\n", "trainers", jnum(o, "workers", 0));
    if (jnum(o, "step", -1) >= 0)
        printf("%-16s %.0f (as last reported)\n", "step", jnum(o, "step", -1));
    else
        printf("%-16s -\n", "step");
    if (jnum(o, "steps_per_s", 0) > 0)
        printf("%-16s %.1f\n", "steps/s", jnum(o, "steps_per_s", 0));
    if (jnum(o, "committed_gen", 0) > 0)
        printf("%-16s %.0f (step %.0f)\n", "newest committed", jnum(o, "committed_gen", 0),
               jnum(o, "committed_step", -1));
    else
        printf("%-16s none\n", "newest committed");
    printf("%-16s %s\n", "last notice", jstr(o, "last_notice", "none"));
    if (cJSON_IsObject(p)) {
        human(b1, sizeof(b1), (uint64_t)jnum(p, "bytes_sent", 0));
        human(b2, sizeof(b2), (uint64_t)jnum(p, "bytes_total", 0));
        printf("%-16s generation %.0f, %s, %s (%s sent of %s, %.1f s)\n", "in progress",
               jnum(p, "gen", 0), jstr(p, "phase", "?"), jstr(p, "reason", "?"), b1, b2,
               jnum(p, "ms", 0) / 1000.0);
    }
}

/* status, checkpoint, drill. */
static int daemon_cmd(int argc, char **argv, const struct config *cfg, int which)
{
    enum { D_SOCKET = 1, D_STATE, D_JOB, D_JSON, D_KIND, D_IN, D_CONFIG };
    static const struct option opts[] = {
        { "config", required_argument, NULL, D_CONFIG },
        { "socket", required_argument, NULL, D_SOCKET },
        { "state-dir", required_argument, NULL, D_STATE },
        { "job", required_argument, NULL, D_JOB },
        { "json", no_argument, NULL, D_JSON },
        { "kind", required_argument, NULL, D_KIND },
        { "in", required_argument, NULL, D_IN },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cmd = argv[1], *sock = config_str(cfg, OPT_SOCKET);
    const char *state = config_str(cfg, OPT_STATE_DIR), *job = config_str(cfg, OPT_JOB);
    const char *kind = NULL;
    char path[4200], line[512];
    bool json = false;
    int64_t in_ms = -1;
    uint64_t v;
    cJSON *o;
    int opt, ok;

    /* A trainer's environment names its spotd. */
    if (!sock && !state && getenv("SPOT_SOCKET"))
        sock = getenv("SPOT_SOCKET");
    optind = 2;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case D_CONFIG: break; /* read by load_config() */
        case D_SOCKET: sock = optarg; break;
        case D_STATE: state = optarg; sock = NULL; break;
        case D_JOB: job = optarg; break;
        case D_JSON: json = true; break;
        case D_KIND: kind = optarg; break;
        case D_IN:
            if (parse_duration(optarg, &v) < 0)
                return bad("--in: expected a duration such as 30s or 2m, not '%s'", optarg);
            in_ms = (int64_t)v;
            break;
        case 'h': usage_of(stdout, which); return 0;
        default: return 2;
        }
    }
    if (optind < argc)
        return bad("'%s' takes no arguments ('%s')", cmd, argv[optind]);
    if ((kind || in_ms >= 0) && strcmp(cmd, "drill") != 0)
        return bad("--kind and --in are options of drill");
    if (sock)
        snprintf(path, sizeof(path), "%s", sock);
    else if (state)
        snprintf(path, sizeof(path), "%s/control.sock", state);
    else if (job)
        snprintf(path, sizeof(path), "/var/lib/spotd/%s/control.sock", job);
    else
        return bad("which spotd? give --socket, --state-dir or --job (or set SPOT_SOCKET)");
    {
        cJSON *q = cJSON_CreateObject();
        char *text;

        cJSON_AddNumberToObject(q, "v", 1);
        cJSON_AddStringToObject(q, "type", "command");
        cJSON_AddStringToObject(q, "cmd", cmd);
        if (kind)
            cJSON_AddStringToObject(q, "kind", kind);
        if (in_ms >= 0)
            cJSON_AddNumberToObject(q, "in_ms", (double)in_ms);
        text = cJSON_PrintUnformatted(q);
        cJSON_Delete(q);
        if (!text || strlen(text) + 2 > sizeof(line)) {
            free(text);
            return bad("out of memory");
        }
        snprintf(line, sizeof(line), "%s\n", text);
        free(text);
    }
    if (!(o = ask_daemon(path, line)))
        return 1;
    ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"));
    if (json) {
        char *text = cJSON_PrintUnformatted(o);
        printf("%s\n", text ? text : "{}");
        free(text);
    } else if (!ok) {
        fprintf(stderr, "spotctl: %s: %s\n", cmd, jstr(o, "error", "refused"));
    } else if (strcmp(cmd, "status") == 0) {
        print_status(o);
    } else if (strcmp(cmd, "checkpoint") == 0) {
        printf("checkpoint of generation %.0f started; 'spotctl status' follows it\n",
               jnum(o, "gen", 0));
    } else {
        printf("drill sent: a simulated %s notice\n", kind ? kind : "terminate");
    }
    cJSON_Delete(o);
    return ok ? 0 : 1;
}

/* The store commands, and resume. */
static int store_cmd(int argc, char **argv, struct config *cfgp, int which)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, O_CONFIG },
        { "store", required_argument, NULL, O_STORE },
        { "job", required_argument, NULL, O_JOB },
        { "s3-endpoint", required_argument, NULL, O_ENDPOINT },
        { "s3-region", required_argument, NULL, O_REGION },
        { "s3-path-style", no_argument, NULL, O_PATH_STYLE },
        { "s3-virtual-hosted", no_argument, NULL, O_VIRTUAL_HOSTED },
        { "requests", required_argument, NULL, O_REQUESTS },
        { "s3-timeout", required_argument, NULL, O_TIMEOUT },
        { "s3-retries", required_argument, NULL, O_RETRIES },
        { "inflight", required_argument, NULL, O_INFLIGHT },
        { "chunk-size", required_argument, NULL, O_CHUNK },
        { "min-saving", required_argument, NULL, O_MIN_SAVING },
        { "threads", required_argument, NULL, O_THREADS },
        { "json", no_argument, NULL, O_JSON },
        { "gen", required_argument, NULL, O_GEN },
        { "rank", required_argument, NULL, O_RANK },
        { "step", required_argument, NULL, O_STEP },
        { "reason", required_argument, NULL, O_REASON },
        { "keep", required_argument, NULL, O_KEEP },
        { "grace", required_argument, NULL, O_GRACE },
        { "dry-run", no_argument, NULL, O_DRY_RUN },
        { "files", no_argument, NULL, O_FILES },
        { "state-dir", required_argument, NULL, O_STATE_DIR },
        { "spotd", required_argument, NULL, O_SPOTD },
        { "job-key-file", required_argument, NULL, O_JOB_KEY_FILE },
        { "world-key-file", required_argument, NULL, O_WORLD_KEY_FILE },
        { "preserve-special-modes", no_argument, NULL, O_PRESERVE },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    /* Which options each store command takes (the store's are everyone's). */
    static const struct {
        int opt;
        const char *cmds;
    } own[] = {
        { O_GEN, " show verify fetch resume " }, { O_RANK, " fetch " },
        { O_STEP, " push " }, { O_REASON, " push " }, { O_CHUNK, " push " },
        { O_MIN_SAVING, " push " }, { O_KEEP, " gc " }, { O_GRACE, " gc " },
        { O_DRY_RUN, " gc " }, { O_FILES, " show " }, { O_STATE_DIR, " resume " },
        { O_SPOTD, " resume " }, { O_PRESERVE, " fetch resume " },
    };
    struct ctl c = { .reason = "manual", .keep = SNAP_KEEP_DEFAULT,
                     .grace_ms = SNAP_GRACE_DEFAULT_MS };
    struct store_ctx sctx = { 0 };
    struct snap_opts so = { 0 };
    struct resume rs = { &c, 0, "", NULL };
    const char *url, *job, *config_file = NULL, *state_dir = NULL, *spotd = NULL;
    char err[1024], warn[1024], spaced[32];
    struct frame_key key;
    struct jobkey jk;
    enum config_id kf;
    int keyed;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = cpus < 2 ? 2 : cpus > 8 ? 8 : (unsigned)cpus;
    uint64_t v;
    int o, code;

    c.cmd = argv[1];
    url = config_str(cfgp, OPT_STORE);
    job = config_str(cfgp, OPT_JOB);
    snprintf(spaced, sizeof(spaced), " %s ", c.cmd);

    optind = 2;
    while ((o = getopt_long(argc, argv, commands[which].kind == K_RESUME ? "+h" : "h", opts,
                            NULL)) != -1) {
        for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
            if (own[i].opt == o && !strstr(own[i].cmds, spaced))
                for (size_t k = 0; opts[k].name; k++)
                    if (opts[k].val == o)
                        return bad("%s takes no --%s; 'spotctl %s --help' lists its options",
                                   c.cmd, opts[k].name, c.cmd);
        switch (o) {
        case O_CONFIG: config_file = optarg; break;
        case O_STORE: url = optarg; break;
        case O_JOB: job = optarg; break;
        case O_ENDPOINT: sctx.s3_endpoint = optarg; break;
        case O_REGION: sctx.s3_region = optarg; break;
        case O_PATH_STYLE:
        case O_VIRTUAL_HOSTED:
            sctx.s3_path_style = o == O_PATH_STYLE;
            sctx.s3_path_style_set = true;
            break;
        case O_REQUESTS:
            if (parse_u64(optarg, 1, 256, &v) < 0)
                return bad("--requests: expected 1 to 256, not '%s'", optarg);
            sctx.max_inflight = (unsigned)v;
            break;
        case O_TIMEOUT:
            if (parse_duration(optarg, &v) < 0 || v < 1000 || v > 3600 * 1000)
                return bad("--s3-timeout: expected 1s to 1h, not '%s'", optarg);
            sctx.timeout_s = (unsigned)(v / 1000);
            break;
        case O_RETRIES:
            if (parse_u64(optarg, 1, 100, &v) < 0)
                return bad("--s3-retries: expected 1 to 100, not '%s'", optarg);
            sctx.retries = (unsigned)v;
            break;
        case O_INFLIGHT:
            if (parse_size(optarg, &v) < 0 || v < 1024 * 1024 || v > (1ULL << 34))
                return bad("--inflight: expected a size such as 128MiB, not '%s'", optarg);
            so.max_inflight_bytes = (size_t)v;
            break;
        case O_CHUNK:
            if (parse_size(optarg, &v) < 0 || v < 65536 || v > CHUNK_MAX_PLAIN)
                return bad("--chunk-size: expected 64KiB to 64MiB, not '%s'", optarg);
            so.chunk_size = (uint32_t)v;
            break;
        case O_MIN_SAVING:
            if (parse_u64(optarg, 1, 99, &v) < 0)
                return bad("--min-saving: expected a percentage from 1 to 99, not '%s'", optarg);
            so.min_saving = (double)v / 100.0;
            break;
        case O_THREADS:
            if (parse_u64(optarg, 1, 64, &v) < 0)
                return bad("--threads: expected 1 to 64, not '%s'", optarg);
            threads = (unsigned)v;
            break;
        case O_JSON: c.json = true; break;
        case O_GEN:
            if (parse_u64(optarg, 1, GEN_MAX, &v) < 0)
                return bad("--gen: expected a generation number, not '%s'", optarg);
            c.gen = v;
            break;
        case O_RANK:
            if (parse_u64(optarg, 0, WORLD_MAX - 1, &v) < 0)
                return bad("--rank: expected a rank, not '%s'", optarg);
            c.rank = (uint32_t)v;
            break;
        case O_STEP:
            if (parse_u64(optarg, 0, UINT64_MAX, &v) < 0)
                return bad("--step: expected a number, not '%s'", optarg);
            c.step = v;
            break;
        case O_REASON: c.reason = optarg; break;
        case O_KEEP:
            if (parse_u64(optarg, 1, 100000, &v) < 0)
                return bad("--keep: expected at least 1, not '%s'", optarg);
            c.keep = (unsigned)v;
            break;
        case O_GRACE:
            if (parse_duration(optarg, &v) < 0)
                return bad("--grace: expected a duration such as 6h or 0s, not '%s'", optarg);
            c.grace_ms = (int64_t)v;
            break;
        case O_DRY_RUN: c.dry_run = true; break;
        case O_FILES: c.files = true; break;
        case O_STATE_DIR: state_dir = optarg; break;
        case O_SPOTD: spotd = optarg; break;
        case O_JOB_KEY_FILE:
        case O_WORLD_KEY_FILE:
            if (config_set(cfgp, o == O_JOB_KEY_FILE ? OPT_JOB_KEY_FILE : OPT_WORLD_KEY_FILE,
                           optarg, CONFIG_FLAG,
                           o == O_JOB_KEY_FILE ? "--job-key-file" : "--world-key-file", err,
                           sizeof(err)) < 0)
                return bad("%s", err);
            break;
        case O_PRESERVE: c.preserve = true; break;
        default:
            return 2;
        }
    }
    c.dirs = argv + optind;
    c.n_dirs = argc - optind;
    if (!url || !*url)
        return bad("%s needs the store: --store URL, SPOTD_STORE, or \"store\" in the "
                   "configuration file", c.cmd);
    if (!job || !*job)
        return bad("%s needs the job: --job NAME, SPOTD_JOB, or \"job\" in the configuration "
                   "file", c.cmd);
    if (!strcmp(c.cmd, "push") && (c.n_dirs < 1 || c.n_dirs > WORLD_MAX))
        return bad("%s needs one directory per rank", c.cmd);
    if (!strcmp(c.cmd, "fetch") && c.n_dirs != 1)
        return bad("%s needs one destination directory", c.cmd);
    if (strcmp(c.cmd, "push") && strcmp(c.cmd, "fetch") && strcmp(c.cmd, "resume") && c.n_dirs)
        return bad("%s takes no arguments ('%s')", c.cmd, c.dirs[0]);
    if (strlen(c.reason) > MANIFEST_NAME_MAX)
        return bad("--reason: too long: '%s'", c.reason);
    if (!strcmp(c.cmd, "resume") && !c.n_dirs && !cfgp->command)
        return bad("resume needs the command to start (spotctl resume -- python3 train.py), or "
                   "\"command\" in the configuration file");
    c.job = job;
    c.url = url;
    /* The key file used, when a flag named it, goes to spotd with resume
     * (the configuration's and the environment's reach it anyway). */
    kf = config_str(cfgp, OPT_JOB_KEY_FILE) ? OPT_JOB_KEY_FILE : OPT_WORLD_KEY_FILE;
    if (config_str(cfgp, kf) && cfgp->v[kf].source == CONFIG_FLAG)
        rs.key_file = config_str(cfgp, kf);
    if ((keyed = jobkey_from_config(cfgp, &key, err, sizeof(err), warn, sizeof(warn))) < 0)
        return bad("%s", err);
    if (*warn)
        fprintf(stderr, "spotctl: warning: %s\n", warn);
    if (keyed && jobkey_init(&jk, &key) < 0)
        return bad("cannot derive the job key's id (OpenSSL failed)");
    if (keyed)
        c.key_id = jk.id;

    evthread_use_pthreads();
    c.base = event_base_new();
    c.pool = c.base ? pool_new(c.base, threads) : NULL;
    if (!c.pool) {
        fprintf(stderr, "spotctl: cannot start: out of memory\n");
        return 1;
    }
    sctx.base = c.base;
    sctx.pool = c.pool;
    if (store_open(url, &sctx, &c.store, err, sizeof(err)) < 0) {
        fprintf(stderr, "spotctl: %s\n", err);
        return 1;
    }
    so.base = c.base;
    so.pool = c.pool;
    so.store = c.store;
    so.job = job;
    so.key = keyed ? &key : NULL;
    so.preserve_special_modes = c.preserve || config_num(cfgp, OPT_PRESERVE_SPECIAL_MODES);
    if (!(c.snap = snap_new(&so, err, sizeof(err)))) {
        fprintf(stderr, "spotctl: %s\n", err);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &c.t0);
    progress_start(&c);
    if (!strcmp(c.cmd, "push")) {
        if (!(c.saved = calloc((size_t)c.n_dirs, sizeof(*c.saved)))) {
            fprintf(stderr, "spotctl: out of memory\n");
            return 1;
        }
        snap_gens(c.snap, push_gens, &c);
    } else if (!strcmp(c.cmd, "ls")) {
        snap_gens(c.snap, on_ls, &c);
    } else if (!strcmp(c.cmd, "show")) {
        snap_manifests(c.snap, c.gen, on_shown, &c);
    } else if (!strcmp(c.cmd, "verify")) {
        snap_verify(c.snap, c.gen, &c.c, on_verified, &c);
    } else if (!strcmp(c.cmd, "fetch")) {
        snap_restore(c.snap, c.gen, c.rank, c.dirs[0], &c.c, on_fetched, &c);
    } else if (!strcmp(c.cmd, "resume")) {
        snap_gens(c.snap, on_resume_gens, &rs);
    } else if (!strcmp(c.cmd, "world")) {
        char prefix[STORE_KEY_MAX + 1];

        snprintf(prefix, sizeof(prefix), "%s/world/", job);
        store_list(c.store, prefix, on_world_listed, &c);
    } else {
        snap_gc(c.snap, &(struct snap_gc_opts){ .keep = c.keep, .grace_ms = c.grace_ms,
                                                 .dry_run = c.dry_run }, on_gc, &c);
    }
    event_base_dispatch(c.base);
    progress_end(&c);
    if (c.err)
        fprintf(stderr, "spotctl: %s\n", c.msg);
    c.snap = snap_free(c.snap);
    c.store = store_close(c.store);
    c.pool = pool_free(c.pool);
    event_base_free(c.base);
    free(c.saved);
    for (size_t i = 0; i < c.n_wg; i++)
        free(c.wg[i].key);
    free(c.wg);
    memset(&key, 0, sizeof(key));
    if (keyed)
        jobkey_clear(&jk);
    code = c.err ? 1 : 0;
    if (!code && rs.gen)
        code = exec_resume(&c, &rs, config_file, state_dir, spotd, c.dirs, c.n_dirs);
    return code;
}

int main(int argc, char **argv)
{
    struct config cfg;
    int which, code;

    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        if (argc > 2 && (which = find_command(argv[2])) >= 0)
            usage_of(stdout, which);
        else
            usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("spotctl %s\n", SPOT_VERSION);
        return 0;
    }
    if ((which = find_command(argv[1])) < 0)
        return bad("unknown command '%s'; 'spotctl help' lists the commands", argv[1]);
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage_of(stdout, which);
            return 0;
        }
    if ((code = load_config(argc, argv, &cfg)))
        return code;
    if (commands[which].kind == K_DAEMON)
        code = daemon_cmd(argc, argv, &cfg, which);
    else
        code = store_cmd(argc, argv, &cfg, which);
    config_release(&cfg);
    return code;
}
