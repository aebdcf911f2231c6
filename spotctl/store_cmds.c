/* spotctl's store commands: push, ls, show, verify, fetch, gc and world,
 * each one operation of the snapshot engine (lib/spot/snap.h) or the
 * store on one event loop with its worker pool, and resume's options and
 * store (resume.c does the rest; ls, show and world print in
 * store_show.c).  store_cmd() reads the options, opens the store, starts
 * the command's operation, runs the loop until the operation's callback
 * ends it, and frees what it opened. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "spot/config.h"
#include "spot/jobkey.h"
#include "spot/manifest.h"
#include "spot/parse.h"
#include "spot/pool.h"
#include "spot/snap.h"
#include "spot/store.h"
#include "spotctl.h"

static double since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

void ctl_fail(struct ctl *c, int err, const char *msg)
{
    if (!c->err) {
        c->err = err;
        snprintf(c->msg, sizeof(c->msg), "%s", msg);
    }
}

static void progress_end(struct ctl *c);

void ctl_stop(struct ctl *c)
{
    progress_end(c);
    event_base_loopbreak(c->base);
}

/* The counters of a push or fetch as JSON members.  totals false leaves
 * out files, bytes and chunks, which verify reports from what it checked:
 * every key once in a document (a reader such as jq keeps one of two). */
static void print_counters(const struct ctl *c, double secs, bool totals)
{
    const struct snap_counters *k = &c->c;

    if (totals)
        printf("\"files\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"chunks\":%" PRIu64 ",", k->files,
               k->bytes_total, k->chunks);
    printf("\"bytes_read\":%" PRIu64 ",\"bytes_zero\":%" PRIu64 ",\"bytes_skipped\":%" PRIu64
           ",\"bytes_compressed\":%" PRIu64 ",\"bytes_sent\":%" PRIu64
           ",\"bytes_received\":%" PRIu64 ",\"bytes_written\":%" PRIu64
           ",\"bytes_direct\":%" PRIu64
           ",\"chunks_sent\":%" PRIu64 ",\"chunks_skipped\":%" PRIu64 ",\"retries\":%" PRIu64
           ",\"seconds\":%.3f",
           k->bytes_read, k->bytes_zero, k->bytes_skipped, k->bytes_compressed, k->bytes_sent,
           k->bytes_received, k->bytes_written, k->bytes_direct, k->chunks_sent, k->chunks_skipped,
           k->retries, secs);
}

/* s as one JSON string literal, escaped first (manifest_escape()). */
static void print_json_string(const char *s)
{
    static char esc[MANIFEST_ESCAPED_MAX];
    cJSON *v = cJSON_CreateString(manifest_escape(s, esc, sizeof(esc)));
    char *text = v ? cJSON_PrintUnformatted(v) : NULL;

    fputs(text ? text : "\"\"", stdout);
    free(text);
    cJSON_Delete(v);
}

/* ---- push ------------------------------------------------------------------- */

static void on_pushed(void *arg, int err, const char *msg)
{
    struct ctl *c = arg;
    double secs = since(&c->t0);
    char a[32], b[32];

    progress_end(c);
    if (err) {
        ctl_fail(c, err, msg);
        ctl_stop(c);
        return;
    }
    if (c->json) {
        printf("{\"gen\":%" PRIu64 ",\"ranks\":%d,", c->gen, c->n_dirs);
        print_counters(c, secs, true);
        printf("}\n");
    } else {
        spotctl_human(a, sizeof(a), c->c.bytes_total);
        spotctl_human(b, sizeof(b), c->c.bytes_sent);
        printf("generation %" PRIu64 " committed: %d rank%s, %s in %.1f s (%.0f MB/s), %s sent, "
               "%" PRIu64 " of %" PRIu64 " chunks already stored\n",
               c->gen, c->n_dirs, c->n_dirs == 1 ? "" : "s", a, secs,
               secs > 0 ? (double)c->c.bytes_total / secs / 1e6 : 0.0, b, c->c.chunks_skipped,
               c->c.chunks);
    }
    ctl_stop(c);
}

static void on_saved(void *arg, int err, const char *msg, const struct snap_saved *s)
{
    struct ctl *c = arg;
    struct commit cm;

    if (err)
        ctl_fail(c, err, msg);
    else
        c->saved[s->rank] = *s;
    if (--c->pending > 0)
        return;
    if (c->err) {
        ctl_stop(c);
        return;
    }
    memset(&cm, 0, sizeof(cm));
    cm.ranks = calloc((size_t)c->n_dirs, sizeof(*cm.ranks));
    if (!cm.ranks) {
        ctl_fail(c, -ENOMEM, "out of memory");
        ctl_stop(c);
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
        ctl_fail(c, err, msg);
        ctl_stop(c);
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

/* The number after the newest there is (found through <job>/LATEST, in a
 * few requests: snap_gens_newest()). */
static void push_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n,
                      bool all)
{
    struct ctl *c = arg;
    uint64_t from = n ? gens[n - 1].gen + 1 : 1;

    snap_gens_free(gens, n);
    if (err) {
        ctl_fail(c, err, msg);
        ctl_stop(c);
        return;
    }
    if (from > GEN_MAX) {
        ctl_fail(c, -ERANGE, "no generation number left");
        ctl_stop(c);
        return;
    }
    snap_claim(c->snap, from, push_claimed, c);
}

/* ---- verify, fetch, gc ------------------------------------------------------- */

static void on_verified(void *arg, int err, const char *msg, const struct snap_verify_report *r)
{
    struct ctl *c = arg;
    char b[32], sig[160] = "";

    progress_end(c);
    spotctl_human(b, sizeof(b), r->bytes);
    if (r->auth_known)
        show_signature(c, r->auth, r->key_id, sig, sizeof(sig));
    if (c->json) {
        printf("{\"ok\":%s,\"files\":%" PRIu64 ",\"chunks\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"bad_chunks\":%" PRIu64 ",",
               err ? "false" : "true", r->files, r->chunks, r->bytes, r->bad_chunks);
        if (r->auth_known)
            printf("\"auth\":\"%s\",\"key_id\":\"%s\",", jobkey_auth_name(r->auth), r->key_id);
        print_counters(c, since(&c->t0), false);
        printf("}\n");
    } else if (!err) {
        printf("verified: %" PRIu64 " chunks, %s, every hash correct; %s\n", r->chunks, b, sig);
    } else if (err == -EKEYREJECTED && r->auth_known) {
        printf("not verified: %s\n", sig);
    }
    if (err)
        ctl_fail(c, err, msg);
    ctl_stop(c);
}

static void on_fetched(void *arg, int err, const char *msg)
{
    struct ctl *c = arg;
    double secs = since(&c->t0);
    char b[32];

    progress_end(c);
    if (err) {
        ctl_fail(c, err, msg);
        ctl_stop(c);
        return;
    }
    spotctl_human(b, sizeof(b), c->c.bytes_total);
    if (c->json) {
        printf("{\"dest\":");
        print_json_string(c->dirs[0]);
        printf(",");
        print_counters(c, secs, true);
        printf("}\n");
    } else {
        printf("restored %s into %s in %.1f s (%.0f MB/s)\n", b, c->dirs[0], secs,
               secs > 0 ? (double)c->c.bytes_total / secs / 1e6 : 0.0);
    }
    ctl_stop(c);
}

/* keys as a JSON array of strings, each escaped (manifest_escape()). */
static void print_keys(const char *const *keys, size_t n)
{
    printf("[");
    for (size_t i = 0; i < n; i++) {
        printf("%s", i ? "," : "");
        print_json_string(keys[i]);
    }
    printf("]");
}

static void on_gc(void *arg, int err, const char *msg, const struct snap_gc_report *r)
{
    struct ctl *c = arg;
    char b[32];

    if (err) {
        ctl_fail(c, err, msg);
        ctl_stop(c);
        return;
    }
    spotctl_human(b, sizeof(b), r->bytes_deleted);
    if (c->json) {
        printf("{\"dry_run\":%s,\"gens_deleted\":%" PRIu64 ",\"gens_kept\":%" PRIu64
               ",\"chunks_deleted\":%" PRIu64 ",\"chunks_kept\":%" PRIu64
               ",\"bytes_deleted\":%" PRIu64 ",\"gens_unauthentic\":%" PRIu64
               ",\"foreign_objects\":%zu,\"foreign_bytes\":%" PRIu64 ",\"foreign\":",
               c->dry_run ? "true" : "false", r->gens_deleted, r->gens_kept, r->chunks_deleted,
               r->chunks_kept, r->bytes_deleted, r->gens_unauthentic, r->n_foreign,
               r->foreign_bytes);
        print_keys(r->foreign, r->n_foreign);
        printf("}\n");
    } else {
        printf("%s%" PRIu64 " generation%s and %" PRIu64 " chunks (%s); kept %" PRIu64
               " generation%s and %" PRIu64 " chunks\n",
               c->dry_run ? "would delete " : "deleted ", r->gens_deleted,
               r->gens_deleted == 1 ? "" : "s", r->chunks_deleted, b, r->gens_kept,
               r->gens_kept == 1 ? "" : "s", r->chunks_kept);
        show_foreign(c, stdout, r->foreign, r->n_foreign, "in the job's tree");
    }
    if (r->gens_unauthentic)
        fprintf(stderr, "spotctl: %" PRIu64 " of the kept generations are not signed by job key "
                "%s: they were left alone, with what they reference ('spotctl ls' shows them; "
                "remove them by hand once you know what they are)\n", r->gens_unauthentic,
                c->key_id ? c->key_id : "?");
    ctl_stop(c);
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

    spotctl_human(d, sizeof(d), done);
    spotctl_human(t, sizeof(t), total);
    spotctl_human(r, sizeof(r), (uint64_t)rate);
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

/* ---- options ------------------------------------------------------------------ */

enum {
    O_STORE = 256, O_JOB, O_ENDPOINT, O_REGION, O_PATH_STYLE, O_VIRTUAL_HOSTED, O_REQUESTS,
    O_INFLIGHT, O_CHUNK, O_THREADS, O_JSON, O_TIMEOUT, O_RETRIES, O_MIN_SAVING, O_GEN, O_RANK,
    O_STEP, O_REASON, O_KEEP, O_GRACE, O_DRY_RUN, O_CONFIG, O_FILES, O_STATE_DIR, O_SPOTD,
    O_JOB_KEY_FILE, O_WORLD_KEY_FILE, O_PRESERVE,
};

static const struct option store_options[] = {
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

/* What store_cmd() gathers besides struct ctl: the store's and the
 * engine's options, resume's, and the job key (cleared at the end). */
struct store_args {
    const char *url, *job, *config_file, *state_dir, *spotd;
    struct store_ctx sctx;
    struct snap_opts so;
    unsigned threads;
    struct frame_key key;
    struct jobkey jk;
    int keyed;
};

/* An option that only other store commands take: 2 after saying so, else
 * 0 (the store's options are everyone's). */
static int refuse_foreign(int o, const char *cmd)
{
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
    char spaced[32];

    snprintf(spaced, sizeof(spaced), " %s ", cmd);
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (own[i].opt == o && !strstr(own[i].cmds, spaced))
            for (size_t k = 0; store_options[k].name; k++)
                if (store_options[k].val == o)
                    return spotctl_bad("%s takes no --%s; 'spotctl %s --help' lists its options",
                                       cmd, store_options[k].name, cmd);
    return 0;
}

/* One option o with its optarg into c and a.  Returns 0, or 2 after
 * saying why (getopt_long() has said it for one it does not know). */
static int store_option(int o, struct ctl *c, struct store_args *a, struct config *cfg)
{
    char err[1024];
    uint64_t v;

    switch (o) {
    case O_CONFIG: a->config_file = optarg; break;
    case O_STORE: a->url = optarg; break;
    case O_JOB: a->job = optarg; break;
    case O_ENDPOINT: a->sctx.s3_endpoint = optarg; break;
    case O_REGION: a->sctx.s3_region = optarg; break;
    case O_PATH_STYLE:
    case O_VIRTUAL_HOSTED:
        a->sctx.s3_path_style = o == O_PATH_STYLE;
        a->sctx.s3_path_style_set = true;
        break;
    case O_REQUESTS:
        if (parse_u64(optarg, 1, 256, &v) < 0)
            return spotctl_bad("--requests: expected 1 to 256, not '%s'", optarg);
        a->sctx.max_inflight = (unsigned)v;
        break;
    case O_TIMEOUT:
        if (parse_duration(optarg, &v) < 0 || v < 1000 || v > 3600 * 1000)
            return spotctl_bad("--s3-timeout: expected 1s to 1h, not '%s'", optarg);
        a->sctx.timeout_s = (unsigned)(v / 1000);
        break;
    case O_RETRIES:
        if (parse_u64(optarg, 1, 100, &v) < 0)
            return spotctl_bad("--s3-retries: expected 1 to 100, not '%s'", optarg);
        a->sctx.retries = (unsigned)v;
        break;
    case O_INFLIGHT:
        if (parse_size(optarg, &v) < 0 || v < 1024 * 1024 || v > (1ULL << 34))
            return spotctl_bad("--inflight: expected a size such as 128MiB, not '%s'", optarg);
        a->so.max_inflight_bytes = (size_t)v;
        break;
    case O_CHUNK:
        if (parse_size(optarg, &v) < 0 || v < 65536 || v > CHUNK_MAX_PLAIN)
            return spotctl_bad("--chunk-size: expected 64KiB to 64MiB, not '%s'", optarg);
        a->so.chunk_size = (uint32_t)v;
        break;
    case O_MIN_SAVING:
        if (parse_u64(optarg, 1, 99, &v) < 0)
            return spotctl_bad("--min-saving: expected a percentage from 1 to 99, not '%s'",
                               optarg);
        a->so.min_saving = (double)v / 100.0;
        break;
    case O_THREADS:
        if (parse_u64(optarg, 1, 64, &v) < 0)
            return spotctl_bad("--threads: expected 1 to 64, not '%s'", optarg);
        a->threads = (unsigned)v;
        break;
    case O_JSON: c->json = true; break;
    case O_GEN:
        if (parse_u64(optarg, 1, GEN_MAX, &v) < 0)
            return spotctl_bad("--gen: expected a generation number, not '%s'", optarg);
        c->gen = v;
        break;
    case O_RANK:
        if (parse_u64(optarg, 0, WORLD_MAX - 1, &v) < 0)
            return spotctl_bad("--rank: expected a rank, not '%s'", optarg);
        c->rank = (uint32_t)v;
        break;
    case O_STEP:
        if (parse_u64(optarg, 0, UINT64_MAX, &v) < 0)
            return spotctl_bad("--step: expected a number, not '%s'", optarg);
        c->step = v;
        break;
    case O_REASON: c->reason = optarg; break;
    case O_KEEP:
        if (parse_u64(optarg, 1, 100000, &v) < 0)
            return spotctl_bad("--keep: expected at least 1, not '%s'", optarg);
        c->keep = (unsigned)v;
        break;
    case O_GRACE:
        if (parse_duration(optarg, &v) < 0)
            return spotctl_bad("--grace: expected a duration such as 6h or 0s, not '%s'",
                               optarg);
        c->grace_ms = (int64_t)v;
        break;
    case O_DRY_RUN: c->dry_run = true; break;
    case O_FILES: c->files = true; break;
    case O_STATE_DIR: a->state_dir = optarg; break;
    case O_SPOTD: a->spotd = optarg; break;
    case O_JOB_KEY_FILE:
    case O_WORLD_KEY_FILE:
        if (config_set(cfg, o == O_JOB_KEY_FILE ? OPT_JOB_KEY_FILE : OPT_WORLD_KEY_FILE, optarg,
                       CONFIG_FLAG, o == O_JOB_KEY_FILE ? "--job-key-file" : "--world-key-file",
                       err, sizeof(err)) < 0)
            return spotctl_bad("%s", err);
        break;
    case O_PRESERVE: c->preserve = true; break;
    default:
        return 2;
    }
    return 0;
}

/* The command line after the command's name: options over the
 * configuration's, then what the command needs checked.  resume stops at
 * its first argument, the command it starts.  Returns 0, or 2 after
 * saying why. */
static int parse_args(int argc, char **argv, struct config *cfg, int which, struct ctl *c,
                      struct store_args *a)
{
    const char *shortopts = spotctl_commands[which].kind == K_RESUME ? "+h" : "h";
    int o, code;

    a->url = config_str(cfg, OPT_STORE);
    a->job = config_str(cfg, OPT_JOB);
    optind = 2;
    while ((o = getopt_long(argc, argv, shortopts, store_options, NULL)) != -1)
        if ((code = refuse_foreign(o, c->cmd)) || (code = store_option(o, c, a, cfg)))
            return code;
    c->dirs = argv + optind;
    c->n_dirs = argc - optind;
    if (!a->url || !*a->url)
        return spotctl_bad("%s needs the store: --store URL, SPOTD_STORE, or \"store\" in the "
                           "configuration file", c->cmd);
    if (!a->job || !*a->job)
        return spotctl_bad("%s needs the job: --job NAME, SPOTD_JOB, or \"job\" in the "
                           "configuration file", c->cmd);
    if (!strcmp(c->cmd, "push") && (c->n_dirs < 1 || c->n_dirs > WORLD_MAX))
        return spotctl_bad("%s needs one directory per rank", c->cmd);
    if (!strcmp(c->cmd, "fetch") && c->n_dirs != 1)
        return spotctl_bad("%s needs one destination directory", c->cmd);
    if (strcmp(c->cmd, "push") && strcmp(c->cmd, "fetch") && strcmp(c->cmd, "resume") &&
        c->n_dirs)
        return spotctl_bad("%s takes no arguments ('%s')", c->cmd, c->dirs[0]);
    if (strlen(c->reason) > MANIFEST_NAME_MAX)
        return spotctl_bad("--reason: too long: '%s'", c->reason);
    if (!strcmp(c->cmd, "resume") && !c->n_dirs && !cfg->command)
        return spotctl_bad("resume needs the command to start (spotctl resume -- python3 "
                           "train.py), or \"command\" in the configuration file");
    c->job = a->job;
    c->url = a->url;
    return 0;
}

/* The job key, when the configuration or a flag gives one.  Returns 0, or
 * 2 after saying why. */
static int read_key(struct config *cfg, struct ctl *c, struct store_args *a, struct resume *rs)
{
    char err[1024], warn[1024];
    enum config_id kf;

    /* The key file used, when a flag named it, goes to spotd with resume
     * (the configuration's and the environment's reach it anyway). */
    kf = config_str(cfg, OPT_JOB_KEY_FILE) ? OPT_JOB_KEY_FILE : OPT_WORLD_KEY_FILE;
    if (config_str(cfg, kf) && cfg->v[kf].source == CONFIG_FLAG)
        rs->key_file = config_str(cfg, kf);
    a->keyed = jobkey_from_config(cfg, &a->key, err, sizeof(err), warn, sizeof(warn));
    if (a->keyed < 0) {
        a->keyed = 0;
        return spotctl_bad("%s", err);
    }
    if (*warn)
        fprintf(stderr, "spotctl: warning: %s\n", warn);
    if (a->keyed && jobkey_init(&a->jk, &a->key) < 0)
        return spotctl_bad("cannot derive the job key's id (OpenSSL failed)");
    if (a->keyed)
        c->key_id = a->jk.id;
    return 0;
}

/* The loop, its pool, the store and the engine.  Returns 0, or the exit
 * code after saying why (what was made is freed by close_store()). */
static int open_store(struct config *cfg, struct ctl *c, struct store_args *a)
{
    char err[1024];

    evthread_use_pthreads();
    c->base = event_base_new();
    c->pool = c->base ? pool_new(c->base, a->threads) : NULL;
    if (!c->pool) {
        fprintf(stderr, "spotctl: cannot start: out of memory\n");
        return 1;
    }
    a->sctx.base = c->base;
    a->sctx.pool = c->pool;
    if (store_open(a->url, &a->sctx, &c->store, err, sizeof(err)) < 0) {
        fprintf(stderr, "spotctl: %s\n", err);
        return 1;
    }
    a->so.base = c->base;
    a->so.pool = c->pool;
    a->so.store = c->store;
    a->so.job = a->job;
    a->so.key = a->keyed ? &a->key : NULL;
    a->so.preserve_special_modes = c->preserve || config_num(cfg, OPT_PRESERVE_SPECIAL_MODES);
    if (!(c->snap = snap_new(&a->so, err, sizeof(err)))) {
        fprintf(stderr, "spotctl: %s\n", err);
        return 2;
    }
    return 0;
}

/* ---- the commands, started ---------------------------------------------------- */

/* Each starts its command's first operation, whose callbacks end the loop
 * with ctl_stop(); returns 0, or the exit code after saying why. */

static int start_push(struct ctl *c, struct resume *rs)
{
    if (!(c->saved = calloc((size_t)c->n_dirs, sizeof(*c->saved)))) {
        fprintf(stderr, "spotctl: out of memory\n");
        return 1;
    }
    snap_gens_newest(c->snap, push_gens, c);
    return 0;
}

static int start_ls(struct ctl *c, struct resume *rs)
{
    show_ls(c);
    return 0;
}

static int start_show(struct ctl *c, struct resume *rs)
{
    show_gen(c);
    return 0;
}

static int start_verify(struct ctl *c, struct resume *rs)
{
    snap_verify(c->snap, c->gen, &c->c, on_verified, c);
    return 0;
}

static int start_fetch(struct ctl *c, struct resume *rs)
{
    snap_restore(c->snap, c->gen, c->rank, c->dirs[0], &c->c, on_fetched, c);
    return 0;
}

static int start_resume(struct ctl *c, struct resume *rs)
{
    resume_find(rs);
    return 0;
}

static int start_world(struct ctl *c, struct resume *rs)
{
    show_world(c);
    return 0;
}

static int start_gc(struct ctl *c, struct resume *rs)
{
    snap_gc(c->snap, &(struct snap_gc_opts){ .keep = c->keep, .grace_ms = c->grace_ms,
                                              .dry_run = c->dry_run }, on_gc, c);
    return 0;
}

/* gc last: main() hands store_cmd() no other name. */
static const struct {
    const char *name;
    int (*start)(struct ctl *c, struct resume *rs);
} starts[] = {
    { "push", start_push }, { "ls", start_ls }, { "show", start_show },
    { "verify", start_verify }, { "fetch", start_fetch }, { "resume", start_resume },
    { "world", start_world }, { "gc", start_gc },
};

/* The command, from its start to the end of the loop.  Returns the exit
 * code: 0, or 1 after saying why. */
static void stats(const struct ctl *c);

static int run(struct ctl *c, struct resume *rs)
{
    size_t i = 0;
    int code;

    clock_gettime(CLOCK_MONOTONIC, &c->t0);
    progress_start(c);
    while (i + 1 < sizeof(starts) / sizeof(starts[0]) && strcmp(starts[i].name, c->cmd))
        i++;
    if ((code = starts[i].start(c, rs)))
        return code;
    event_base_dispatch(c->base);
    progress_end(c);
    if (c->err)
        fprintf(stderr, "spotctl: %s\n", c->msg);
    stats(c);
    return c->err ? 1 : 0;
}

/* SPOTCTL_STATS=1: what the command cost the store, one line on stderr
 * (the scale benchmark and the tests read it). */
static void stats(const struct ctl *c)
{
    const char *v = getenv("SPOTCTL_STATS");
    struct timespec t;

    if (!v || strcmp(v, "1") != 0)
        return;
    clock_gettime(CLOCK_MONOTONIC, &t);
    fprintf(stderr, "spotctl: stats: %llu store requests in %.3f s\n",
            (unsigned long long)store_requests(c->store),
            (double)(t.tv_sec - c->t0.tv_sec) + (double)(t.tv_nsec - c->t0.tv_nsec) / 1e9);
}

/* What open_store() and the command made, whatever got made: the engine
 * before the store, the store before the pool, the pool before the loop;
 * the key is wiped. */
static void close_store(struct ctl *c, struct store_args *a)
{
    c->snap = snap_free(c->snap);
    c->store = store_close(c->store);
    c->pool = pool_free(c->pool);
    if (c->tick)
        event_free(c->tick);
    if (c->base)
        event_base_free(c->base);
    free(c->saved);
    show_release(c);
    memset(&a->key, 0, sizeof(a->key));
    if (a->keyed)
        jobkey_clear(&a->jk);
}

int store_cmd(int argc, char **argv, struct config *cfg, int which)
{
    struct ctl c = { .cmd = argv[1], .reason = "manual", .keep = SNAP_KEEP_DEFAULT,
                     .grace_ms = SNAP_GRACE_DEFAULT_MS };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    struct store_args a = { .threads = cpus < 2 ? 2 : cpus > 8 ? 8 : (unsigned)cpus };
    struct resume rs = { &c, 0, "", NULL };
    int code;

    if ((code = parse_args(argc, argv, cfg, which, &c, &a)))
        return code;
    if (!(code = read_key(cfg, &c, &a, &rs)) && !(code = open_store(cfg, &c, &a)))
        code = run(&c, &rs);
    close_store(&c, &a);
    if (!code && rs.gen)
        code = resume_exec(&c, &rs, a.config_file, a.state_dir, a.spotd, c.dirs, c.n_dirs);
    return code;
}
