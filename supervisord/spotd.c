/* spotd: the node-local supervisor.
 *
 * Reads top to bottom like tini: parse the configuration, set up signals
 * and the loop, spawn the command, then let the loop forward signals, reap
 * children and restart until the command is done for good.  Everything
 * after start-up happens in callbacks on one libevent event_base. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "child.h"
#include "cuda.h"
#include "method.h"
#include "metrics.h"
#include "notices.h"
#include "orch.h"
#include "spot/config.h"
#include "spot/dmi.h"
#include "spot/frame.h"
#include "spot/http.h"
#include "spot/jobkey.h"
#include "spot/log.h"
#include "spot/parse.h"
#include "spot/worldrec.h"
#include "timeline.h"
#include "watch.h"
#include "webhook.h"

/* spotd's own failures, distinct from 126/127 (see docs/events.md). */
#define EXIT_USAGE 125

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line to stderr in one write(2), before the logger is configured. */
static void say(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    int n;

    n = snprintf(line, sizeof(line), "spotd: ");
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, (size_t)n) < 0) {
        /* Nowhere left to report it. */
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: spotd run [OPTIONS] [--] [COMMAND [ARGS...]]   (else the file's \"command\")\n"
            "       spotd config [OPTIONS]   print the effective configuration as JSON\n"
            "       spotd help               list every option, its spellings and default\n"
            "       spotd version\n"
            "\n"
            "Options (each also a key of the config file and a SPOTD_* variable):\n"
            "  --config FILE        configuration file (default %s when present)\n"
            "  --restart POLICY     never, on-failure or always (default never)\n"
            "  --max-restarts N     restarts allowed over spotd's life (default 10)\n"
            "  --grace DURATION     stop signal to SIGKILL, like 500ms, 30s, 5m, 1h (default 30s)\n"
            "  --stop-signal SIG    signal that starts a stop (default TERM)\n"
            "  --events FILE        append one JSON object per state change\n"
            "  --log-format FORMAT  text or json (default text)\n"
            "  --log-level LEVEL    debug, info, warn or error (default info)\n"
            "'spotd help' lists all options, including those of capabilities to come.\n",
            CONFIG_DEFAULT_FILE);
}

static void help_options(void)
{
    printf("%-16s %-18s %-22s %-8s %s\n", "KEY", "FLAG", "ENVIRONMENT", "DEFAULT", "MEANING");
    for (int i = 0; i < OPT__COUNT; i++) {
        const struct config_option *o = &config_options[i];
        char flag[64], env[64];

        config_flag_name((enum config_id)i, flag, sizeof(flag));
        config_env_name((enum config_id)i, env, sizeof(env));
        printf("%-16s %-18s %-22s %-8s %s%s%s%s\n", o->key, flag, env, o->def ? o->def : "-",
               o->help, o->later ? " [not implemented yet: " : "", o->later ? o->later : "",
               o->later ? "]" : "");
    }
    printf("%-16s %-18s %-22s %-8s %s\n", "-", "--config", "SPOTD_CONFIG", "-",
           "configuration file; default " CONFIG_DEFAULT_FILE " when present");
    printf("%-16s %-18s %-22s %-8s %s\n", "command", "-", "-", "-",
           "the file's command, [\"PROGRAM\", \"ARG\", ...]: run when none follows the options");
}

/* Find --config FILE / --config=FILE among the options before the command. */
static const char *find_config_flag(int argc, char **argv, int start)
{
    for (int i = start; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0 || a[0] != '-')
            break;
        if (strcmp(a, "--config") == 0)
            return i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(a, "--config=", 9) == 0)
            return a + 9;
        if (strchr(a, '=') == NULL && strcmp(a, "-h") != 0 && strcmp(a, "--help") != 0)
            i++; /* skip the option's value */
    }
    return NULL;
}

/* Build the configuration: defaults, file, environment, flags.  Returns the
 * index of the command in argv (argc when none), -1 on an error already
 * reported, or -2 when help was printed.  cfg is to be released in every
 * case. */
static int load_config(struct config *cfg, int argc, char **argv, int start)
{
    char err[1024], warn[1024];
    const char *file;
    int i;

    if (config_init(cfg) < 0) {
        say("out of memory");
        return -1;
    }
    file = find_config_flag(argc, argv, start);
    if (!file && getenv("SPOTD_CONFIG") && *getenv("SPOTD_CONFIG"))
        file = getenv("SPOTD_CONFIG");
    if (!file && access(CONFIG_DEFAULT_FILE, F_OK) == 0)
        file = CONFIG_DEFAULT_FILE;
    if (file && config_load_file(cfg, file, err, sizeof(err)) < 0) {
        say("%s", err);
        return -1;
    }
    if (config_load_env(cfg, (const char *const *)environ, err, sizeof(err), warn, sizeof(warn)) < 0) {
        say("%s", err);
        return -1;
    }
    for (char *w = warn, *nl; *w; w = nl ? nl + 1 : w + strlen(w)) {
        nl = strchr(w, '\n');
        if (nl)
            *nl = '\0';
        say("warning: %s", w);
    }

    for (i = start; i < argc; i++) {
        const char *a = argv[i], *eq, *value;
        char flag[128];
        int id;

        if (strcmp(a, "--") == 0)
            return i + 1;
        if (a[0] != '-' || a[1] == '\0')
            return i;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return -2;
        }
        eq = strchr(a, '=');
        if (eq && (size_t)(eq - a) < sizeof(flag)) {
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = '\0';
            value = eq + 1;
        } else {
            snprintf(flag, sizeof(flag), "%s", a);
            value = NULL;
        }
        id = strcmp(flag, "--config") == 0 ? OPT__COUNT : config_find_flag(flag);
        if (id < 0) {
            say("unknown option '%s'; 'spotd run --help' shows the usage, 'spotd help' every "
                "option (a command must follow '--' if it starts with '-')", flag);
            return -1;
        }
        /* A switch may stand alone: --insecure is --insecure true. */
        if (!value && id < OPT__COUNT && config_options[id].type == CONFIG_BOOL &&
            (i + 1 >= argc ||
             (strcmp(argv[i + 1], "true") != 0 && strcmp(argv[i + 1], "false") != 0)))
            value = "true";
        if (!value) {
            if (i + 1 >= argc) {
                say("option %s needs a value", flag);
                return -1;
            }
            value = argv[++i];
        }
        if (id == OPT__COUNT)
            continue; /* --config: read before the environment */
        if (config_set(cfg, (enum config_id)id, value, CONFIG_FLAG, flag, err, sizeof(err)) < 0) {
            say("%s", err);
            return -1;
        }
    }
    return argc;
}

/* The command must not inherit secrets given to spotd through its
 * environment. */
static void drop_secret_env(void)
{
    for (int i = 0; i < OPT__COUNT; i++) {
        char env[64];

        if (config_options[i].secret)
            unsetenv(config_env_name((enum config_id)i, env, sizeof(env)));
    }
}

static int cmd_config(int argc, char **argv)
{
    struct config cfg;
    char err[1024];
    cJSON *json;
    char *text;
    int r;

    r = load_config(&cfg, argc, argv, 2);
    if (r < 0 || r < argc) {
        if (r >= 0)
            say("'spotd config' takes options only, not '%s'", argv[r]);
        config_release(&cfg);
        return r == -2 ? 0 : EXIT_USAGE;
    }
    json = config_to_json(&cfg);
    text = json ? cJSON_Print(json) : NULL;
    if (!text) {
        say("out of memory");
        cJSON_Delete(json);
        config_release(&cfg);
        return EXIT_USAGE;
    }
    printf("%s\n", text);
    if (config_check_implemented(&cfg, err, sizeof(err)) < 0)
        say("note: %s", err);
    free(text);
    cJSON_Delete(json);
    config_release(&cfg);
    return 0;
}

/* --notice-signals "USR1,USR2" into a set.  Returns 0 or -EINVAL with the
 * message said. */
static int parse_notice_signals(const struct config *cfg, sigset_t *set)
{
    const char *list = config_str(cfg, OPT_NOTICE_SIGNALS);
    char buf[256], *tok, *save = NULL;

    sigemptyset(set);
    if (!list)
        return 0;
    snprintf(buf, sizeof(buf), "%s", list);
    for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int sig = parse_signal(tok);
        if (sig < 0 || sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGTERM ||
            sig == SIGINT || sig == SIGQUIT) {
            say("invalid notice_signals '%s' (from %s): '%s' cannot be a notice signal; name "
                "signals such as USR1, USR2 or HUP (SIGTERM is always one)", list,
                cfg->v[OPT_NOTICE_SIGNALS].origin, tok);
            return -EINVAL;
        }
        sigaddset(set, sig);
    }
    return 0;
}

/* The cloud to watch, or NULL; says what auto found. */
static const struct watcher_ops *pick_cloud(const struct config *cfg)
{
    static const char *const names[] = { "auto", "none", "aws", "gcp", "azure", "alibaba",
                                         "tencent" };
    enum config_cloud cloud = (enum config_cloud)config_num(cfg, OPT_CLOUD);
    const char *found;
    char what[512];

    if (cloud == CLOUD_NONE)
        return NULL;
    if (cloud != CLOUD_AUTO)
        return watch_find(names[cloud]);
    found = dmi_detect(NULL, what, sizeof(what));
    if (!found) {
        log_msg(LOGL_INFO, "cloud: none recognised from DMI (%s); watching local signals only; "
                "set --cloud to choose one", what);
        return NULL;
    }
    log_msg(LOGL_INFO, "cloud: %s, from DMI (%s)", found, what);
    return watch_find(found);
}

/* The number of local workers: --local-workers, else LOCAL_WORLD_SIZE,
 * else 0 (as many as connect). */
static unsigned local_workers(const struct config *cfg)
{
    const char *env = getenv("LOCAL_WORLD_SIZE");
    uint64_t n;

    if (config_str(cfg, OPT_LOCAL_WORKERS))
        return (unsigned)config_num(cfg, OPT_LOCAL_WORKERS);
    if (env && parse_u64(env, 1, 256, &n) == 0)
        return (unsigned)n;
    return 0;
}

/* A world: the static membership and the key. */
struct world_cfg {
    uint32_t rank, size, min_nodes; /* min_nodes 0: not elastic */
    bool rendezvous, rank_unknown;
    char *list;                    /* peers, split in place */
    const char *peers[1024];
    struct frame_key key;
    bool keyed;
};

/* The key from world_key_file or world_key.  Returns 0 or -1 after saying
 * why. */
static int read_world_key(const struct config *cfg, struct world_cfg *w)
{
    const char *file = config_str(cfg, OPT_WORLD_KEY_FILE), *why;
    char err[1024], warn[1024];

    if (!file && config_str(cfg, OPT_WORLD_KEY)) {
        if (frame_key_parse(config_str(cfg, OPT_WORLD_KEY), strlen(config_str(cfg, OPT_WORLD_KEY)),
                            &w->key, &why) < 0) {
            say("invalid world_key (from %s): %s", cfg->v[OPT_WORLD_KEY].origin, why);
            return -1;
        }
        w->keyed = true;
        return 0;
    }
    if (!file)
        return 0;
    if (jobkey_read_file(file, "world key", cfg->v[OPT_WORLD_KEY_FILE].origin, &w->key, err,
                         sizeof(err), warn, sizeof(warn)) < 0) {
        say("%s", err);
        return -1;
    }
    if (*warn)
        log_msg(LOGL_WARN, "%s", warn);
    w->keyed = true;
    return 0;
}

/* The job key (jobkey.h): job_key_file, else the world key, in a world or
 * not (world_warned: the world key's file was read, and warned about,
 * already).  Returns 0 (*keyed false: none) or -1 after saying why. */
static int read_job_key(const struct config *cfg, bool world_warned, struct frame_key *key,
                        bool *keyed)
{
    char err[1024], warn[1024];
    struct jobkey jk;
    int r = jobkey_from_config(cfg, key, err, sizeof(err), warn, sizeof(warn));

    *keyed = r > 0;
    if (r < 0) {
        say("%s", err);
        return -1;
    }
    if (*warn && (config_str(cfg, OPT_JOB_KEY_FILE) || !world_warned))
        log_msg(LOGL_WARN, "%s", warn);
    if (r > 0 && jobkey_init(&jk, key) == 0)
        log_msg(LOGL_INFO, "commit records are signed and checked with job key %s (from %s)",
                jk.id, config_str(cfg, OPT_JOB_KEY_FILE) ? cfg->v[OPT_JOB_KEY_FILE].origin
                       : config_str(cfg, OPT_WORLD_KEY_FILE) ? cfg->v[OPT_WORLD_KEY_FILE].origin
                                                             : cfg->v[OPT_WORLD_KEY].origin);
    jobkey_clear(&jk);
    return 0;
}

/* A numeric ADDR:PORT to listen on, port 0 (any) allowed. */
static bool listen_valid(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    char buf[96];

    if (colon && strcmp(colon, ":0") == 0 &&
        snprintf(buf, sizeof(buf), "%.*s:1", (int)(colon - addr), addr) < (int)sizeof(buf))
        return worldrec_addr_valid(buf);
    return worldrec_addr_valid(addr);
}

/* rank, world_size, peers: all or none.  Returns 0 (w->size 0: no world)
 * or -1 after saying why. */
static int world_config(const struct config *cfg, struct world_cfg *w)
{
    bool any = config_str(cfg, OPT_RANK) || config_str(cfg, OPT_WORLD_SIZE) ||
               config_str(cfg, OPT_PEERS), store = config_num(cfg, OPT_RENDEZVOUS) == 1;
    const char *listen = config_str(cfg, OPT_LISTEN);
    uint32_t n = 0;

    memset(w, 0, sizeof(*w));
    if (!any && !store)
        return 0;
    if (store && (!config_str(cfg, OPT_WORLD_SIZE) || !listen || config_str(cfg, OPT_PEERS))) {
        say("--rendezvous store needs --world-size and --listen (the address the other nodes "
            "dial), and no --peers: the nodes find each other in the store");
        return -1;
    }
    if (store && !listen_valid(listen)) {
        say("invalid --listen '%s': expected ADDR:PORT, numeric (port 0: any free port)", listen);
        return -1;
    }
    if (store && (strncmp(listen, "0.0.0.0:", 8) == 0 || strncmp(listen, "[::]:", 5) == 0)) {
        say("--listen %s: with --rendezvous store the address is what the other nodes dial; "
            "give this node's own address", listen);
        return -1;
    }
    if (!store && (!config_str(cfg, OPT_RANK) || !config_str(cfg, OPT_WORLD_SIZE) ||
                   !config_str(cfg, OPT_PEERS))) {
        say("a world needs --rank, --world-size and --peers together (%s is missing)",
            !config_str(cfg, OPT_RANK) ? "--rank" : !config_str(cfg, OPT_WORLD_SIZE)
                                                        ? "--world-size" : "--peers");
        return -1;
    }
    if (!config_str(cfg, OPT_JOB)) {
        say("a world needs --job and --store: its nodes agree on checkpoints of one job");
        return -1;
    }
    w->rank = (uint32_t)config_num(cfg, OPT_RANK);
    w->size = (uint32_t)config_num(cfg, OPT_WORLD_SIZE);
    w->rendezvous = store;
    w->rank_unknown = !config_str(cfg, OPT_RANK);
    if (config_str(cfg, OPT_MIN_NODES)) {
        w->min_nodes = (uint32_t)config_num(cfg, OPT_MIN_NODES);
        if (w->min_nodes > w->size) {
            say("--min-nodes %u is more than --world-size %u: an elastic world runs with "
                "min-nodes to world-size nodes", w->min_nodes, w->size);
            return -1;
        }
    }
    if (!w->rank_unknown && w->rank >= w->size) {
        say("--rank %u does not fit --world-size %u: ranks are 0 to %u", w->rank, w->size,
            w->size - 1);
        return -1;
    }
    if (store)
        goto keyed;
    if (!(w->list = strdup(config_str(cfg, OPT_PEERS)))) {
        say("out of memory");
        return -1;
    }
    for (char *p = w->list, *comma; p; p = comma ? comma + 1 : NULL) {
        if ((comma = strchr(p, ',')))
            *comma = '\0';
        if (n < w->size)
            w->peers[n] = p;
        n++;
    }
    if (n != w->size) {
        say("--peers lists %u addresses for --world-size %u: give one ADDR:PORT per rank, in "
            "rank order", n, w->size);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!worldrec_addr_valid(w->peers[i])) {
            say("invalid address '%s' for rank %u in --peers: expected ADDR:PORT, numeric "
                "(like 10.0.0.5:7400 or [fd00::5]:7400)", w->peers[i], i);
            return -1;
        }
keyed:
    if (config_num(cfg, OPT_METHOD) == CONFIG_METHOD_DIR &&
        config_num(cfg, OPT_CKPT_WRITERS) != CKPT_RANKS_RANK0) {
        say("the dir method cannot serve a world where every rank writes: its checkpoints "
            "appear on each node's own schedule; where only global rank 0 writes (the common "
            "DDP habit), run every node with --ckpt-writers rank0; else use app (libckpt) or "
            "signal");
        return -1;
    }
    if (config_num(cfg, OPT_METHOD) == CONFIG_METHOD_CRIU) {
        say("the criu method cannot serve a world: CRIU cannot snapshot a live NCCL or gloo "
            "world (its TCP connections do not move to other hosts); use app (libckpt)");
        return -1;
    }
    if (read_world_key(cfg, w) < 0)
        return -1;
    if (w->size > 1 && !w->keyed && !config_num(cfg, OPT_INSECURE)) {
        say("a world of %u nodes needs a shared key: --world-key-file FILE (64 hex digits, "
            "from 'openssl rand -hex 32') or SPOTD_WORLD_KEY; --insecure runs without one",
            w->size);
        return -1;
    }
    if (w->size > 1 && !w->keyed)
        log_msg(LOGL_WARN, "INSECURE: this world runs without a key (--insecure): anyone who "
                "can reach %s can join it, stop its training and write its checkpoints",
                listen ? listen : w->peers[w->rank]);
    return 0;
}

static void on_acked(void *arg)
{
    event_base_loopbreak(arg);
}

/* The command stopped for a notice of the watched cloud: tell the cloud
 * (Azure: StartRequests), waiting at most a few seconds for the answer. */
static void acknowledge(struct event_base *base, const struct watcher_ops *cloud,
                        struct watcher *w, const struct notice *cause)
{
    struct timeval limit = { 3, 0 };

    if (!cause || strcmp(cause->source, cloud->name) != 0 || cause->drill)
        return;
    if (cloud->ack(w, cause->event_id, on_acked, base) < 0)
        return;
    event_base_loopexit(base, &limit);
    event_base_dispatch(base);
}

/* The state directory: --state-dir, else /var/lib/spotd/JOB with a job,
 * else none (NULL): spotd without either keeps no state. */
static const char *state_dir_of(const struct config *cfg, char *buf, size_t size)
{
    const char *sd = config_str(cfg, OPT_STATE_DIR);

    if (sd)
        snprintf(buf, size, "%s", sd);
    else if (config_str(cfg, OPT_JOB))
        snprintf(buf, size, "/var/lib/spotd/%s", config_str(cfg, OPT_JOB));
    else
        return NULL;
    return buf;
}

/* ---- spotd run ------------------------------------------------------------- */

/* What spotd run checks and builds, in the order it builds it.
 * run_teardown() undoes whatever was built, in the reverse order, from
 * wherever building stopped.  The command's notice signals and the
 * orchestrator's drills reach the local watcher through it. */
struct run {
    struct config cfg;
    int code;                      /* the exit code */
    char **command;                /* the command line's, else the file's */
    sigset_t orig_mask, notice_sigs;
    int drill_kind;
    uint64_t drill_ms;
    bool logging;                  /* log_open() done: the keys are read from here on */
    struct world_cfg wc;
    struct frame_key job_key;
    bool job_keyed;
    struct event_base *base;
    struct child_opts opts;
    struct child *child;           /* everything below needs it */
    struct webhook *webhook;
    char state_dir[4096];
    struct orch *orch;
    struct notices *notices;
    struct timeline *timeline;
    struct metrics *metrics;
    struct watch_ctx ctx;
    struct watch_local_opts lo;
    struct watch_local *local;
    const struct watcher_ops *cloud;
    char url[1024];                /* the watchers keep it */
    struct http *http;
    struct watcher *watcher;
};

/* spotctl drill, through the orchestrator. */
static void on_drill(void *arg, int kind, uint64_t window_ms)
{
    struct run *run = arg;

    if (run->local)
        watch_local_drill(run->local, kind, window_ms, "spotctl drill");
}

static void on_notice_signal(void *arg, int sig)
{
    struct run *run = arg;

    if (run->local)
        watch_local_signal(run->local, sig);
}

/* The options checked, and what spotd refuses, before anything is built;
 * then the event log, the world and the job key, the secrets gone from
 * the environment.  Returns 0, or -1 after saying why (run->code is 0 for
 * --help). */
/* --ckpt-writers and --ckpt-readers: for a world's trainers that write
 * files of their own (signal, dir).  Returns 0, or -1 after saying why. */
static int ckpt_ranks_config(const struct run *run, int method)
{
    const struct config *cfg = &run->cfg;
    const struct config_value *w = &cfg->v[OPT_CKPT_WRITERS], *r = &cfg->v[OPT_CKPT_READERS];

    if (w->source != CONFIG_DEFAULT && method != CONFIG_METHOD_SIGNAL &&
        method != CONFIG_METHOD_DIR) {
        say("ckpt_writers (from %s) is for the signal and dir methods, whose trainers write "
            "checkpoint files of their own; the %s method saves every rank's state itself",
            w->origin, method == CONFIG_METHOD_APP ? "app" : "criu");
        return -1;
    }
    if (w->source != CONFIG_DEFAULT && run->wc.size < 2) {
        say("ckpt_writers (from %s) is for a world (--world-size 2 or more): a node alone "
            "saves what its trainers write", w->origin);
        return -1;
    }
    if (r->source != CONFIG_DEFAULT && config_num(cfg, OPT_CKPT_WRITERS) != CKPT_RANKS_RANK0) {
        say("ckpt_readers (from %s) goes with --ckpt-writers rank0: where all ranks write, "
            "each node restores its own shard", r->origin);
        return -1;
    }
    return 0;
}

/* The options that go with a method: --interval, --saved-when.  Returns
 * 0, or -1 after saying why. */
static int method_config(const struct run *run)
{
    const struct config *cfg = &run->cfg;
    int method = (int)config_num(cfg, OPT_METHOD), when = (int)config_num(cfg, OPT_SAVED_WHEN);
    const char *origin = cfg->v[OPT_SAVED_WHEN].origin;

    if (method == CONFIG_METHOD_DIR && config_str(cfg, OPT_INTERVAL)) {
        say("interval (from %s) does nothing for the dir method: the trainer's own saves are "
            "its interval, each checkpoint it completes is uploaded; remove it",
            cfg->v[OPT_INTERVAL].origin);
        return -1;
    }
    if (ckpt_ranks_config(run, method) < 0)
        return -1;
    if (config_num(cfg, OPT_EARLY_START) &&
        (method != CONFIG_METHOD_APP || config_num(cfg, OPT_WORLD_SIZE) > 1)) {
        say("early_start (from %s) is for the app method on one node: its trainers wait for "
            "the restore with ckpt_resume_wait() (the other methods' do not talk to spotd, "
            "and a world's nodes start together once each has restored)",
            cfg->v[OPT_EARLY_START].origin);
        return -1;
    }
    if (cfg->v[OPT_SAVED_WHEN].source == CONFIG_DEFAULT)
        return 0;
    if (method != CONFIG_METHOD_SIGNAL && method != CONFIG_METHOD_DIR) {
        say("saved_when (from %s) is for the signal and dir methods, whose trainers save on "
            "--ckpt-signal", origin);
        return -1;
    }
    if (method == CONFIG_METHOD_DIR && when == METHOD_SAVED_MARKER) {
        say("saved_when marker (from %s): the dir method has no marker; exit sends "
            "--ckpt-signal at a notice and takes the newest checkpoint once the command exits, "
            "auto sends nothing", origin);
        return -1;
    }
    if (when == METHOD_SAVED_EXIT && method == CONFIG_METHOD_SIGNAL && config_str(cfg, OPT_INTERVAL)) {
        say("--interval with --method signal --saved-when exit would end the trainer at every "
            "tick (it exits once it saved): let it save on its own schedule and run --method "
            "dir --saved-when exit, or have it create SPOT_CKPT_MARKER and train on");
        return -1;
    }
    return 0;
}

/* The signal that asks for a save: --ckpt-signal, else TERM for a trainer
 * that saves and exits (its habit), USR1 otherwise. */
static int ckpt_signal(const struct config *cfg)
{
    if (cfg->v[OPT_CKPT_SIGNAL].source == CONFIG_DEFAULT &&
        config_num(cfg, OPT_SAVED_WHEN) == METHOD_SAVED_EXIT)
        return SIGTERM;
    return (int)config_num(cfg, OPT_CKPT_SIGNAL);
}

static int run_validate(struct run *run, int argc, char **argv)
{
    struct config *cfg = &run->cfg;
    char err[1024];
    int cmd, r;

    cmd = load_config(cfg, argc, argv, 2);
    if (cmd < 0) {
        run->code = cmd == -2 ? 0 : EXIT_USAGE;
        return -1;
    }
    /* The command line's command wins over the file's. */
    run->command = cmd < argc ? argv + cmd : cfg->command;
    if (!run->command) {
        say("no command to run: give it after the options (spotd run [OPTIONS] -- COMMAND "
            "[ARGS...]) or as \"command\" in the configuration file%s%s",
            cfg->file ? " " : "", cfg->file ? cfg->file : "");
        return -1;
    }
    if (config_check_implemented(cfg, err, sizeof(err)) < 0) {
        say("%s", err);
        return -1;
    }
    if (config_str(cfg, OPT_INTERVAL) && !config_str(cfg, OPT_STORE)) {
        say("--interval checkpoints need --job and --store");
        return -1;
    }
    if (!config_str(cfg, OPT_JOB) != !config_str(cfg, OPT_STORE)) {
        say("checkpoints need both --job and --store (%s is missing)",
            config_str(cfg, OPT_JOB) ? "--store" : "--job");
        return -1;
    }
    if (parse_notice_signals(cfg, &run->notice_sigs) < 0)
        return -1;
    /* With checkpoints, SIGTERM to spotd (systemd, Kubernetes) is a notice
     * and nothing else: the trainers save, then spotd stops them.  Passed
     * on at once it would end them before they could. */
    if (config_str(cfg, OPT_JOB))
        sigaddset(&run->notice_sigs, SIGTERM);
    if (config_str(cfg, OPT_DRILL_AFTER) &&
        watch_parse_drill(config_str(cfg, OPT_DRILL_AFTER), &run->drill_ms,
                          &run->drill_kind) < 0) {
        say("invalid drill_after '%s' (from %s): expected DURATION[:KIND], like 30s or "
            "2m:terminate; kinds: terminate, stop, hibernate, rebalance, maintenance, signal, "
            "drill", config_str(cfg, OPT_DRILL_AFTER), cfg->v[OPT_DRILL_AFTER].origin);
        return -1;
    }
    if (config_str(cfg, OPT_METADATA_URL) &&
        strncmp(config_str(cfg, OPT_METADATA_URL), "http://", 7) != 0 &&
        strncmp(config_str(cfg, OPT_METADATA_URL), "https://", 8) != 0) {
        say("invalid metadata_url '%s' (from %s): expected an http:// or https:// URL",
            config_str(cfg, OPT_METADATA_URL), cfg->v[OPT_METADATA_URL].origin);
        return -1;
    }
    if (config_str(cfg, OPT_AZURE_VM_NAME) &&
        !watch_azure_name_ok(config_str(cfg, OPT_AZURE_VM_NAME),
                             strlen(config_str(cfg, OPT_AZURE_VM_NAME)))) {
        say("invalid azure_vm_name '%s' (from %s): expected the VM's name as Scheduled Events "
            "lists it, 1 to 127 printable characters without quotes or spaces",
            config_str(cfg, OPT_AZURE_VM_NAME), cfg->v[OPT_AZURE_VM_NAME].origin);
        return -1;
    }
    r = log_open((enum log_format)config_num(cfg, OPT_LOG_FORMAT),
                 (enum log_level)config_num(cfg, OPT_LOG_LEVEL), config_str(cfg, OPT_EVENTS));
    if (r < 0) {
        say("cannot open event log '%s': %s; check --events", config_str(cfg, OPT_EVENTS),
            strerror(-r));
        return -1;
    }
    run->logging = true;
    if (world_config(cfg, &run->wc) < 0 || method_config(run) < 0)
        return -1;
    if (config_str(cfg, OPT_JOB_KEY_FILE) && !config_str(cfg, OPT_JOB)) {
        say("job_key_file (from %s) signs commit records: it needs --job and --store",
            cfg->v[OPT_JOB_KEY_FILE].origin);
        return -1;
    }
    if (read_job_key(cfg, run->wc.keyed, &run->job_key, &run->job_keyed) < 0)
        return -1;
    drop_secret_env();
    return 0;
}

/* The webhooks, when a URL is given.  Returns 0, or -1 after saying why. */
static int build_webhook(struct run *run)
{
    const struct config *cfg = &run->cfg;
    char err[1024];

    if (config_str(cfg, OPT_WEBHOOK) || config_str(cfg, OPT_WEBHOOK_FILE)) {
        run->webhook = webhook_new(&(struct webhook_opts){
                                       .base = run->base,
                                       .urls = config_str(cfg, OPT_WEBHOOK),
                                       .urls_origin = cfg->v[OPT_WEBHOOK].origin,
                                       .urls_file = config_str(cfg, OPT_WEBHOOK_FILE),
                                       .urls_file_origin = cfg->v[OPT_WEBHOOK_FILE].origin,
                                       .template_path = config_str(cfg, OPT_WEBHOOK_TEMPLATE),
                                       .template_origin = cfg->v[OPT_WEBHOOK_TEMPLATE].origin,
                                       .timeout_ms = config_num(cfg, OPT_WEBHOOK_TIMEOUT),
                                       .job = config_str(cfg, OPT_JOB),
                                       .rank = config_str(cfg, OPT_RANK)
                                                   ? (long)config_num(cfg, OPT_RANK)
                                                   : -1,
                                   },
                                   err, sizeof(err));
        if (!run->webhook) {
            say("%s", err);
            return -1;
        }
    } else if (config_str(cfg, OPT_WEBHOOK_TEMPLATE)) {
        say("webhook_template (from %s) needs webhook or webhook_file: without a URL nothing "
            "is sent", cfg->v[OPT_WEBHOOK_TEMPLATE].origin);
        return -1;
    }
    return 0;
}

/* The orchestrator, for checkpoints (--job and --store).  Returns 0, or -1
 * after saying why. */
static int build_orch(struct run *run)
{
    const struct config *cfg = &run->cfg;
    const struct world_cfg *wc = &run->wc;
    char err[1024];

    run->orch = orch_new(&(struct orch_opts){
                             .base = run->base,
                             .child = run->child,
                             .job = config_str(cfg, OPT_JOB),
                             .store = config_str(cfg, OPT_STORE),
                             .state_dir = run->state_dir,
                             .grace_ms = config_num(cfg, OPT_GRACE),
                             .margin_ms = config_num(cfg, OPT_NOTICE_MARGIN),
                             .interval_ms = config_str(cfg, OPT_INTERVAL)
                                                ? config_num(cfg, OPT_INTERVAL)
                                                : 0,
                             .stage_dir = config_str(cfg, OPT_STAGE_DIR),
                             .method = config_str(cfg, OPT_METHOD),
                             .ckpt_dir = config_str(cfg, OPT_CKPT_DIR),
                             .ckpt_signal = ckpt_signal(cfg),
                             .settle_ms = config_num(cfg, OPT_SETTLE),
                             .ckpt_layout = (int)config_num(cfg, OPT_CKPT_LAYOUT),
                             .ckpt_step_file = config_str(cfg, OPT_CKPT_STEP_FILE),
                             .saved_when = (int)config_num(cfg, OPT_SAVED_WHEN),
                             .preempt_exit_code = (int)config_num(cfg, OPT_PREEMPT_EXIT_CODE),
                             .writers_rank0 = config_num(cfg, OPT_CKPT_WRITERS) ==
                                              CKPT_RANKS_RANK0,
                             .readers_rank0 = config_num(cfg, OPT_CKPT_READERS) ==
                                              CKPT_RANKS_RANK0,
                             .resume = config_str(cfg, OPT_RESUME),
                             .on_unrestorable = (int)config_num(cfg, OPT_ON_UNRESTORABLE),
                             .store_wait_ms = config_num(cfg, OPT_STORE_WAIT),
                             .preserve_special_modes =
                                 config_num(cfg, OPT_PRESERVE_SPECIAL_MODES) != 0,
                             .local_workers = local_workers(cfg),
                             .socket = config_str(cfg, OPT_SOCKET),
                             .hooks_dir = config_str(cfg, OPT_HOOKS_DIR),
                             .hook_timeout_ms = config_num(cfg, OPT_HOOK_TIMEOUT),
                             .drill_window_ms = config_num(cfg, OPT_SIGNAL_DEADLINE),
                             .argv = run->command,
                             .rank = wc->rank,
                             .rank_unknown = wc->rank_unknown,
                             .rendezvous = wc->rendezvous,
                             .world_size = wc->size,
                             .listen = config_str(cfg, OPT_LISTEN),
                             .peers = wc->rendezvous ? NULL : wc->peers,
                             .key = wc->keyed ? &wc->key : NULL,
                             .job_key = run->job_keyed ? &run->job_key : NULL,
                             .peer_timeout_ms = config_num(cfg, OPT_PEER_TIMEOUT),
                             .criu = config_str(cfg, OPT_CRIU),
                             .criu_stream = (int)config_num(cfg, OPT_CRIU_STREAM),
                             .early_start = config_num(cfg, OPT_EARLY_START) != 0,
                             .min_nodes = wc->min_nodes,
                             .join_timeout_ms = config_num(cfg, OPT_JOIN_TIMEOUT),
                             .master_port = (unsigned)config_num(cfg, OPT_MASTER_PORT),
                             .split_upload = config_num(cfg, OPT_SPLIT_UPLOAD) != 0,
                             .drill = on_drill,
                             .drill_arg = run,
                         },
                         err, sizeof(err));
    if (!run->orch) {
        say("%s", err);
        return -1;
    }
    return 0;
}

/* The metrics endpoint (--metrics).  Returns 0, or -1 after saying why. */
static int build_metrics(struct run *run)
{
    char err[1024];

    run->metrics = metrics_new(&(struct metrics_opts){
                                   .base = run->base,
                                   .addr = config_str(&run->cfg, OPT_METRICS),
                                   .child = run->child,
                                   .orch = run->orch,
                                   .gpu_idle_threshold = (unsigned)config_num(
                                       &run->cfg, OPT_GPU_IDLE_THRESHOLD),
                               },
                               err, sizeof(err));
    if (!run->metrics) {
        say("%s", err);
        return -1;
    }
    return 0;
}

/* The notice sources: the local ones (signals, the notice file, drills),
 * then the cloud's metadata service when there is one.  Returns 0, or -1
 * after saying why. */
static int build_watchers(struct run *run)
{
    const struct config *cfg = &run->cfg;
    char err[1024];

    run->ctx = (struct watch_ctx){
        .base = run->base,
        .poll_ms = config_num(cfg, OPT_POLL_INTERVAL),
        .imdsv1 = config_num(cfg, OPT_AWS_IMDSV1) != 0,
        .azure_vm_name = config_str(cfg, OPT_AZURE_VM_NAME),
        .emit = notices_emit,
        .emit_arg = run->notices,
    };
    run->lo = (struct watch_local_opts){
        .notice_file = config_str(cfg, OPT_NOTICE_FILE),
        .drill_after_ms = run->drill_ms,
        .drill_kind = run->drill_kind,
        .signal_deadline_ms = config_num(cfg, OPT_SIGNAL_DEADLINE),
    };
    run->local = watch_local_new(&run->ctx, &run->lo);
    if (!run->local) {
        say("cannot set up the local notice sources (see above)");
        return -1;
    }
    run->cloud = pick_cloud(cfg);
    if (run->cloud) {
        const char *u = config_str(cfg, OPT_METADATA_URL);
        size_t len;

        snprintf(run->url, sizeof(run->url), "%s", u ? u : run->cloud->default_url);
        len = strlen(run->url);
        while (len > 0 && run->url[len - 1] == '/')
            run->url[--len] = '\0';
        run->http = http_new(run->base, err, sizeof(err));
        if (!run->http) {
            say("cannot watch %s: %s", run->cloud->name, err);
            return -1;
        }
        run->ctx.http = run->http;
        run->ctx.base_url = run->url;
        run->watcher = run->cloud->start(&run->ctx);
        if (!run->watcher) {
            say("cannot start watching %s", run->cloud->name);
            return -1;
        }
    }
    return 0;
}

/* Everything the loop runs on: the loop, the command's supervision, the
 * webhooks, the state directory, the orchestrator, notices, metrics and
 * the watchers.  Returns 0, or -1 after saying why. */
static int run_build(struct run *run)
{
    struct config *cfg = &run->cfg;
    char err[1024];
    cJSON *e;

    /* The command gets the mask spotd was given; its dispositions are reset
     * in child.c.  A closed stderr must not kill spotd. */
    sigprocmask(SIG_SETMASK, NULL, &run->orig_mask);
    signal(SIGPIPE, SIG_IGN);
    if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        log_msg(LOGL_WARN, "cannot become a child subreaper (%s): orphans of the command "
                "will not be reaped by spotd", strerror(errno));

    run->base = event_base_new();
    if (!run->base) {
        say("cannot create the event loop");
        return -1;
    }
    run->opts = (struct child_opts){
        .argv = run->command,
        .restart = (enum config_restart)config_num(cfg, OPT_RESTART),
        .max_restarts = (unsigned)config_num(cfg, OPT_MAX_RESTARTS),
        .grace_ms = config_num(cfg, OPT_GRACE),
        .stop_signal = (int)config_num(cfg, OPT_STOP_SIGNAL),
        .notice_only = run->notice_sigs,
        .on_notice_signal = on_notice_signal,
        .arg = run,
        .pass_credentials = config_num(cfg, OPT_PASS_CREDENTIALS) != 0,
    };
    run->child = child_new(run->base, &run->opts, &run->orig_mask);
    if (!run->child) {
        say("cannot set up signal handling: %s", strerror(errno));
        return -1;
    }
    if (build_webhook(run) < 0)
        return -1;

    e = log_event_new("start");
    cJSON_AddStringToObject(e, "version", SPOT_VERSION);
    cJSON_AddNumberToObject(e, "pid", getpid());
    if (cfg->file)
        cJSON_AddStringToObject(e, "config", cfg->file);
    cJSON_AddItemToObject(e, "settings", config_to_json(cfg));
    log_event(LOGL_INFO, e, "spotd %s starting", SPOT_VERSION);

    /* Before anything uses the state directory: it is this spotd's, and
     * what a spotd that died left running there is stopped. */
    if (state_dir_of(cfg, run->state_dir, sizeof(run->state_dir)) &&
        child_claim_state_dir(run->child, run->state_dir, err, sizeof(err)) < 0) {
        say("%s", err);
        return -1;
    }
    if ((config_str(cfg, OPT_JOB) || config_str(cfg, OPT_STORE)) && build_orch(run) < 0)
        return -1;
    run->notices = notices_new(run->base, run->child, &(struct notices_opts){
                                   .margin_ms = config_num(cfg, OPT_NOTICE_MARGIN),
                                   .grace_ms = config_num(cfg, OPT_GRACE),
                                   .on_notice = run->orch ? orch_notice : NULL,
                                   .arg = run->orch,
                               });
    if (!run->notices) {
        say("out of memory");
        return -1;
    }
    if (run->orch)
        run->timeline = timeline_new(run->base);
    if (config_str(cfg, OPT_METRICS) && build_metrics(run) < 0)
        return -1;
    return build_watchers(run);
}

/* The command started (by the orchestrator, which resumes first), the
 * loop until it is done for good, and the exit code it leaves. */
static void run_loop(struct run *run)
{
    if (run->orch) {
        orch_start(run->orch); /* resumes, then starts the command */
    } else if (child_start(run->child) < 0) {
        say("cannot schedule the command's start: out of memory");
        return;
    }
    event_base_dispatch(run->base);
    orch_finish(run->orch);
    /* A preemption's commit webhook gets its chance before spotd goes. */
    webhook_drain(run->webhook, WEBHOOK_DRAIN_MS);
    run->code = child_exit_code(run->child);
    if (orch_exit_code(run->orch) >= 0 && orch_exit_code(run->orch) != run->code) {
        log_msg(LOGL_INFO, "spotd exits with code %d after all, not %d: %s",
                orch_exit_code(run->orch), run->code,
                orch_exit_code(run->orch) == ORCH_EXIT_PREEMPTED_SAVED
                    ? "the checkpoint of the preemption was committed after the command ended"
                    : "the checkpoints decide it");
        run->code = orch_exit_code(run->orch);
    }
    if (config_num(&run->cfg, OPT_AZURE_ACK) && run->cloud && run->cloud->ack)
        acknowledge(run->base, run->cloud, run->watcher, notices_stop_cause(run->notices));
}

/* What run_validate() and run_build() made, from wherever they stopped. */
static void run_teardown(struct run *run)
{
    if (run->child) {
        if (run->cloud)
            run->cloud->stop(run->watcher);
        http_free(run->http);
        watch_local_free(run->local);
        metrics_free(run->metrics);
        timeline_free(run->timeline);
        notices_free(run->notices);
        orch_free(run->orch);
        webhook_free(run->webhook);

        child_free(run->child);
    }
    if (run->base)
        event_base_free(run->base);
    if (run->logging) {
        free(run->wc.list);
        memset(&run->wc.key, 0, sizeof(run->wc.key));
        memset(&run->job_key, 0, sizeof(run->job_key));
        log_close();
    }
    config_release(&run->cfg);
}

static int cmd_run(int argc, char **argv)
{
    struct run run = { .code = EXIT_USAGE, .drill_kind = -1 };

    if (run_validate(&run, argc, argv) == 0 && run_build(&run) == 0)
        run_loop(&run);
    run_teardown(&run);
    return run.code;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;

    if (!cmd || strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        usage(cmd ? stdout : stderr);
        return cmd ? 0 : EXIT_USAGE;
    }
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc, argv);
    /* The criu method's helper for CUDA processes (cuda.h), not for people. */
    if (strcmp(cmd, "_cuda") == 0)
        return cuda_main(argc, argv);
    if (strcmp(cmd, "config") == 0)
        return cmd_config(argc, argv);
    if (strcmp(cmd, "help") == 0) {
        help_options();
        return 0;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("spotd %s\n", SPOT_VERSION);
        return 0;
    }
    say("unknown command '%s'; commands: run, config, help, version", cmd);
    return EXIT_USAGE;
}
