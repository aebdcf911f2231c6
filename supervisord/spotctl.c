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
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "spot/parse.h"
#include "spot/pool.h"
#include "spot/snap.h"
#include "spot/store.h"

static const struct {
    const char *name;
    const char *what;
    const char *comes_with;       /* NULL: implemented */
} commands[] = {
    { "push", "save directories as the ranks of a new generation", NULL },
    { "ls", "generations in the store", NULL },
    { "verify", "fetch and hash-check a generation", NULL },
    { "fetch", "restore a rank of a generation into a directory", NULL },
    { "gc", "apply retention and delete unreferenced chunks", NULL },
    { "status", "state of the local spotd", NULL },
    { "checkpoint", "checkpoint now", NULL },
    { "drill", "simulated interruption notice", NULL },
    { "show", "one generation's manifest", "issue 8" },
    { "resume", "restore and start the command", "the orchestrator (issue 5, 8)" },
    { "world", "rendezvous records of the job", "the multi-node world (issue 6, 8)" },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f,
            "usage: spotctl COMMAND [OPTIONS] [ARGS]\n\n"
            "  push  [--step N] [--reason R] DIR...   each DIR one rank of a new generation\n"
            "  ls                                     generations, oldest first\n"
            "  verify [--gen N]                       every chunk fetched and checked (newest\n"
            "                                         committed generation by default)\n"
            "  fetch [--gen N] [--rank R] DEST        restore into DEST (must not exist)\n"
            "  gc    [--keep N] [--grace DUR] [--dry-run]\n\n"
            "daemon commands, over spotd's control socket:\n"
            "  status                                 job, state, step, newest generation,\n"
            "                                         the checkpoint under way\n"
            "  checkpoint                             checkpoint now (reason manual)\n"
            "  drill [--kind KIND] [--in DURATION]    a simulated notice (terminate by default;\n"
            "                                         stop, hibernate, rebalance, maintenance),\n"
            "                                         its deadline DURATION away\n"
            "  --socket PATH       else SPOT_SOCKET, else STATE_DIR/control.sock\n"
            "  --state-dir DIR     else SPOTD_STATE_DIR, else /var/lib/spotd/JOB\n\n"
            "store options (or SPOTD_STORE, SPOTD_JOB):\n"
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
            "  --chunk-size SIZE   for push (8MiB)\n"
            "  --min-saving PCT    compress a chunk when zstd saves this much (10)\n"
            "  --threads N         worker threads (the number of CPUs, 2 to 8)\n"
            "  --json              one JSON object on stdout\n\n"
            "not yet:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (commands[i].comes_with)
            fprintf(f, "  %-11s %-40s comes with %s\n", commands[i].name, commands[i].what,
                    commands[i].comes_with);
}

struct ctl {
    struct event_base *base;
    struct pool *pool;
    struct store *store;
    struct snap *snap;
    const char *cmd, *job;
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

static void stop(struct ctl *c)
{
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

static void push_gens(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct ctl *c = arg;

    if (err) {
        fail(c, err, msg);
        stop(c);
        return;
    }
    c->gen = n ? gens[n - 1].gen + 1 : 1;
    snap_gens_free(gens, n);
    if (c->gen > GEN_MAX) {
        fail(c, -ERANGE, "no generation number left");
        stop(c);
        return;
    }
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

/* ---- ls ----------------------------------------------------------------------- */

static void fmt_time(char *buf, size_t size, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void on_ls(void *arg, int err, const char *msg, struct snap_gen *gens, size_t n)
{
    struct ctl *c = arg;

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
        const char *state = g->committed ? "committed" : g->corrupt ? "corrupt" : "incomplete";
        uint64_t bytes = 0;
        char when[32], size[32];

        for (uint32_t r = 0; g->committed && r < g->commit.world_size; r++)
            bytes += g->commit.ranks[r].bytes;
        fmt_time(when, sizeof(when), g->committed ? g->commit.created_ms : g->mtime_ms);
        human(size, sizeof(size), bytes);
        if (c->json) {
            printf("%s{\"gen\":%" PRIu64 ",\"state\":\"%s\",\"manifests\":%u", i ? "," : "",
                   g->gen, state, g->manifests);
            if (g->committed)
                printf(",\"step\":%" PRIu64 ",\"world_size\":%u,\"reason\":\"%s\",\"method\":"
                       "\"%s\",\"bytes\":%" PRIu64 ",\"created\":\"%s\"",
                       g->commit.step, g->commit.world_size, g->commit.reason, g->commit.method,
                       bytes, when);
            printf("}");
        } else if (g->committed) {
            printf("%-9" PRIu64 " %-11s %-12" PRIu64 " %-6u %-12s %-8s %-10s %s\n", g->gen,
                   state, g->commit.step, g->commit.world_size, g->commit.reason,
                   g->commit.method, size, when);
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

static void on_verified(void *arg, int err, const char *msg, const struct snap_verify_report *r)
{
    struct ctl *c = arg;
    char b[32];

    human(b, sizeof(b), r->bytes);
    if (c->json) {
        printf("{\"ok\":%s,\"chunks\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"bad_chunks\":%" PRIu64
               ",",
               err ? "false" : "true", r->chunks, r->bytes, r->bad_chunks);
        print_counters(c, since(&c->t0));
        printf("}\n");
    } else if (!err) {
        printf("verified: %" PRIu64 " chunks, %s, every hash correct\n", r->chunks, b);
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
               ",\"bytes_deleted\":%" PRIu64 "}\n",
               c->dry_run ? "true" : "false", r->gens_deleted, r->gens_kept, r->chunks_deleted,
               r->chunks_kept, r->bytes_deleted);
    else
        printf("%s%" PRIu64 " generation%s and %" PRIu64 " chunks (%s); kept %" PRIu64
               " generation%s and %" PRIu64 " chunks\n",
               c->dry_run ? "would delete " : "deleted ", r->gens_deleted,
               r->gens_deleted == 1 ? "" : "s", r->chunks_deleted, b, r->gens_kept,
               r->gens_kept == 1 ? "" : "s", r->chunks_kept);
    stop(c);
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
static int daemon_cmd(int argc, char **argv)
{
    enum { D_SOCKET = 1, D_STATE, D_JOB, D_JSON, D_KIND, D_IN };
    static const struct option opts[] = {
        { "socket", required_argument, NULL, D_SOCKET },
        { "state-dir", required_argument, NULL, D_STATE },
        { "job", required_argument, NULL, D_JOB },
        { "json", no_argument, NULL, D_JSON },
        { "kind", required_argument, NULL, D_KIND },
        { "in", required_argument, NULL, D_IN },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cmd = argv[1], *sock = getenv("SPOT_SOCKET"), *state = getenv("SPOTD_STATE_DIR");
    const char *job = getenv("SPOTD_JOB"), *kind = NULL;
    char path[4200], line[512];
    bool json = false;
    int64_t in_ms = -1;
    uint64_t v;
    cJSON *o;
    int opt, ok;

    if (getenv("SPOTD_SOCKET"))
        sock = getenv("SPOTD_SOCKET");
    optind = 2;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
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
        case 'h': usage(stdout); return 0;
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

int main(int argc, char **argv)
{
    static const struct option opts[] = {
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
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct ctl c = { .reason = "manual", .keep = SNAP_KEEP_DEFAULT,
                     .grace_ms = SNAP_GRACE_DEFAULT_MS };
    struct store_ctx sctx = { 0 };
    struct snap_opts so = { 0 };
    const char *url = getenv("SPOTD_STORE"), *job = getenv("SPOTD_JOB");
    char err[1024];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = cpus < 2 ? 2 : cpus > 8 ? 8 : (unsigned)cpus;
    uint64_t v;
    int o;

    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    c.cmd = argv[1];
    if (!strcmp(c.cmd, "-h") || !strcmp(c.cmd, "--help") || !strcmp(c.cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c.cmd, "--version") || !strcmp(c.cmd, "version")) {
        printf("spotctl %s\n", SPOT_VERSION);
        return 0;
    }
    if (!strcmp(c.cmd, "status") || !strcmp(c.cmd, "checkpoint") || !strcmp(c.cmd, "drill"))
        return daemon_cmd(argc, argv);
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(c.cmd, commands[i].name) && commands[i].comes_with)
            return bad("'%s' is not implemented yet; 'spotctl help' says when it comes", c.cmd);
    if (strcmp(c.cmd, "push") && strcmp(c.cmd, "ls") && strcmp(c.cmd, "verify") &&
        strcmp(c.cmd, "fetch") && strcmp(c.cmd, "gc"))
        return bad("unknown command '%s'; 'spotctl help' lists the commands", c.cmd);

    optind = 2;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
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
        case 'h':
            usage(stdout);
            return 0;
        default:
            return 2;
        }
    }
    c.dirs = argv + optind;
    c.n_dirs = argc - optind;
    if (!url || !*url)
        return bad("%s needs --store URL (or SPOTD_STORE)", c.cmd);
    if (!job || !*job)
        return bad("%s needs --job NAME (or SPOTD_JOB)", c.cmd);
    if (!strcmp(c.cmd, "push") && (c.n_dirs < 1 || c.n_dirs > WORLD_MAX))
        return bad("%s needs one directory per rank", c.cmd);
    if (!strcmp(c.cmd, "fetch") && c.n_dirs != 1)
        return bad("%s needs one destination directory", c.cmd);
    if (strcmp(c.cmd, "push") && strcmp(c.cmd, "fetch") && c.n_dirs)
        return bad("%s takes no arguments", c.cmd);
    if (strlen(c.reason) > MANIFEST_NAME_MAX)
        return bad("--reason: too long: '%s'", c.reason);
    c.job = job;

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
    if (!(c.snap = snap_new(&so, err, sizeof(err)))) {
        fprintf(stderr, "spotctl: %s\n", err);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &c.t0);
    if (!strcmp(c.cmd, "push")) {
        if (!(c.saved = calloc((size_t)c.n_dirs, sizeof(*c.saved)))) {
            fprintf(stderr, "spotctl: out of memory\n");
            return 1;
        }
        snap_gens(c.snap, push_gens, &c);
    } else if (!strcmp(c.cmd, "ls")) {
        snap_gens(c.snap, on_ls, &c);
    } else if (!strcmp(c.cmd, "verify")) {
        snap_verify(c.snap, c.gen, &c.c, on_verified, &c);
    } else if (!strcmp(c.cmd, "fetch")) {
        snap_restore(c.snap, c.gen, c.rank, c.dirs[0], &c.c, on_fetched, &c);
    } else {
        snap_gc(c.snap, c.keep, c.grace_ms, c.dry_run, on_gc, &c);
    }
    event_base_dispatch(c.base);
    if (c.err)
        fprintf(stderr, "spotctl: %s\n", c.msg);
    c.snap = snap_free(c.snap);
    c.store = store_close(c.store);
    c.pool = pool_free(c.pool);
    event_base_free(c.base);
    free(c.saved);
    return c.err ? 1 : 0;
}
