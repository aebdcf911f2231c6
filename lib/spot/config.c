#include "spot/config.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spot/parse.h"

#define VALUE_MAX 4096

static const char *const restart_choices[] = { "never", "on-failure", "always", NULL };
/* In the order of enum log_format and enum log_level. */
static const char *const log_format_choices[] = { "text", "json", NULL };
static const char *const log_level_choices[] = { "debug", "info", "warn", "error", NULL };
static const char *const cloud_choices[] = { "auto", "none", "aws", "gcp", "azure",
                                             "alibaba", "tencent", NULL };
static const char *const method_choices[] = { "app", "signal", "dir", "criu", NULL };
/* As enum ckpt_layout (ckptname.h). */
static const char *const layout_choices[] = { "auto", "folders", "files", "fixed", NULL };
/* As enum method_saved_when (supervisord/method.h). */
static const char *const saved_when_choices[] = { "auto", "marker", "exit", NULL };
/* As enum config_ckpt_ranks. */
static const char *const ckpt_ranks_choices[] = { "all", "rank0", NULL };
/* As enum config_criu_stream. */
static const char *const criu_stream_choices[] = { "last", "always", "never", NULL };
static const char *const rendezvous_choices[] = { "static", "store", NULL };
/* In the order of enum config_unrestorable. */
static const char *const unrestorable_choices[] = { "older", "fresh", "fail", NULL };

const struct config_option config_options[OPT__COUNT] = {
    [OPT_RESTART] = { "restart", CONFIG_ENUM, "never", restart_choices, 0, 0, false, NULL,
                      "restart the command when it exits: never, on-failure, always" },
    [OPT_MAX_RESTARTS] = { "max_restarts", CONFIG_UINT, "10", NULL, 0, 1000000, false, NULL,
                           "most restarts over spotd's life; then exit with the command's code" },
    [OPT_GRACE] = { "grace", CONFIG_DURATION, "30s", NULL, 0, 0, false, NULL,
                    "time between the stop signal and SIGKILL to the command's group" },
    [OPT_STOP_SIGNAL] = { "stop_signal", CONFIG_SIGNAL, "TERM", NULL, 0, 0, false, NULL,
                          "signal spotd sends the command's group when it decides to stop it" },
    [OPT_LOG_FORMAT] = { "log_format", CONFIG_ENUM, "text", log_format_choices, 0, 0, false,
                         NULL, "stderr log lines: text (key=value) or json" },
    [OPT_LOG_LEVEL] = { "log_level", CONFIG_ENUM, "info", log_level_choices, 0, 0, false, NULL,
                        "least severe stderr line shown: debug, info, warn, error" },
    [OPT_EVENTS] = { "events", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                     "append one JSON object per state change to this file" },
    [OPT_CLOUD] = { "cloud", CONFIG_ENUM, "auto", cloud_choices, 0, 0, false, NULL,
                    "metadata service to watch: auto (from DMI), none, aws, gcp, azure, "
                    "alibaba, tencent" },
    [OPT_METADATA_URL] = { "metadata_url", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                           "base URL of the cloud's metadata service (tests, proxies, emulators)" },
    [OPT_POLL_INTERVAL] = { "poll_interval", CONFIG_DURATION, "1s", NULL, 0, 0, false, NULL,
                            "time between two polls of a metadata service" },
    [OPT_NOTICE_MARGIN] = { "notice_margin", CONFIG_DURATION, "5s", NULL, 0, 0, false, NULL,
                            "safety margin: the command is killed this long before a deadline" },
    [OPT_SIGNAL_DEADLINE] = { "signal_deadline", CONFIG_DURATION, "30s", NULL, 0, 0, false, NULL,
                              "deadline of a notice by signal or file, after its arrival" },
    [OPT_NOTICE_SIGNALS] = { "notice_signals", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                             "further signals that are notices, comma separated (USR1 for "
                             "Slurm --signal=B:USR1@120); they are not forwarded" },
    [OPT_NOTICE_FILE] = { "notice_file", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                          "a file whose appearance is a notice (preStop hooks, schedulers)" },
    [OPT_DRILL_AFTER] = { "drill_after", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                          "simulate a notice after DURATION[:KIND], e.g. 30s:terminate" },
    [OPT_AWS_IMDSV1] = { "aws_imdsv1", CONFIG_BOOL, "false", NULL, 0, 0, false, NULL,
                         "fall back to IMDSv1 when no IMDSv2 token can be had" },
    [OPT_AZURE_ACK] = { "azure_ack", CONFIG_BOOL, "false", NULL, 0, 0, false, NULL,
                        "acknowledge an Azure event for this VM alone once the command stopped" },
    [OPT_AZURE_VM_NAME] = { "azure_vm_name", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                            "this Azure VM's name, as Scheduled Events lists it (default: "
                            "asked of the metadata service)" },
    [OPT_PASS_CREDENTIALS] = { "pass_credentials", CONFIG_BOOL, "false", NULL, 0, 0, false,
                               NULL, "pass the AWS credentials in spotd's environment on to "
                               "the command and the hooks (withheld by default)" },
    [OPT_JOB] = { "job", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                  "name of the training run; the key of its checkpoints" },
    [OPT_STORE] = { "store", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                    "where checkpoints live: file:///path or s3://bucket/prefix" },
    [OPT_METHOD] = { "method", CONFIG_ENUM, "app", method_choices, 0, 0, false, NULL,
                     "how state is captured: app (libckpt), signal, dir, criu" },
    [OPT_CKPT_DIR] = { "ckpt_dir", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                       "signal: where the trainer saves (SPOT_CKPT_DIR); dir: the directory "
                       "whose new checkpoint folders are uploaded" },
    [OPT_STATE_DIR] = { "state_dir", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                        "spotd's own state: sockets, local store, figures" },
    [OPT_STAGE_DIR] = { "stage_dir", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                        "app and criu methods: a memory file system (tmpfs such as /dev/shm) "
                        "where each checkpoint is written, uploaded from and freed; a save "
                        "for which it has no room goes to the state directory" },
    [OPT_INTERVAL] = { "interval", CONFIG_DURATION, NULL, NULL, 0, 0, false, NULL,
                       "time between periodic checkpoints" },
    [OPT_CKPT_SIGNAL] = { "ckpt_signal", CONFIG_SIGNAL, "USR1", NULL, 0, 0, false, NULL,
                          "signal method: the signal that asks the trainer to save" },
    [OPT_SETTLE] = { "settle", CONFIG_DURATION, "10s", NULL, 0, 0, false, NULL,
                     "dir method: a checkpoint unchanged this long is complete" },
    [OPT_CKPT_LAYOUT] = { "ckpt_layout", CONFIG_ENUM, "auto", layout_choices, 0, 0, false, NULL,
                          "dir method: how the trainer names its checkpoints: folders "
                          "(checkpoint-150/), files (ckpt-150.pt), fixed (last.pt, rewritten), "
                          "or auto (any)" },
    [OPT_CKPT_STEP_FILE] = { "ckpt_step_file", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                             "signal and dir methods: a file in --ckpt-dir that holds the step "
                             "of a fixed-name checkpoint (last.pt); without it each new version "
                             "is the step after the last" },
    [OPT_SAVED_WHEN] = { "saved_when", CONFIG_ENUM, "auto", saved_when_choices, 0, 0, false,
                         NULL, "signal and dir methods: when the save asked for by "
                         "--ckpt-signal is complete: marker (SPOT_CKPT_MARKER or ckpt_saved()), "
                         "exit (the command exits with --preempt-exit-code or 0; the newest "
                         "checkpoint in --ckpt-dir after the signal), auto (signal: either; "
                         "dir: no signal)" },
    [OPT_PREEMPT_EXIT_CODE] = { "preempt_exit_code", CONFIG_UINT, "75", NULL, 1, 255, false,
                                NULL, "the code with which a trainer exits once it saved on "
                                "the signal (0 counts too)" },
    [OPT_CKPT_WRITERS] = { "ckpt_writers", CONFIG_ENUM, "all", ckpt_ranks_choices, 0, 0, false,
                           NULL, "a world, signal and dir methods: whose checkpoint files "
                           "are the generation: all (each node's trainers write theirs) or "
                           "rank0 (only global rank 0 writes; the other nodes' shards are "
                           "empty)" },
    [OPT_CKPT_READERS] = { "ckpt_readers", CONFIG_ENUM, "all", ckpt_ranks_choices, 0, 0, false,
                           NULL, "with ckpt_writers rank0: where its checkpoint is restored "
                           "at start: all (every node) or rank0 (the node of global rank 0)" },
    [OPT_RESUME] = { "resume", CONFIG_STRING, "auto", NULL, 0, 0, false, NULL,
                     "what to resume from at start: auto (the newest committed generation "
                     "that restores), fresh (none; never is the same), or a generation "
                     "number" },
    [OPT_ON_UNRESTORABLE] = { "on_unrestorable", CONFIG_ENUM, "older", unrestorable_choices,
                              0, 0, false, NULL,
                              "resume auto, when a committed generation does not restore: "
                              "older (the newest older one that does; none: exit 125), "
                              "fresh (the same, but none: start fresh), fail (exit 125)" },
    [OPT_STORE_WAIT] = { "store_wait", CONFIG_DURATION, "2m", NULL, 0, 0, false, NULL,
                         "at start, how long a store that cannot be read is tried again "
                         "before spotd refuses to start (exit 125)" },
    [OPT_PRESERVE_SPECIAL_MODES] = { "preserve_special_modes", CONFIG_BOOL, "false", NULL, 0, 0,
                                     false, NULL, "restore modes exactly as stored: setuid, "
                                     "setgid, sticky and others' write bits, which a restore "
                                     "drops by default" },
    [OPT_LOCAL_WORKERS] = { "local_workers", CONFIG_UINT, NULL, NULL, 1, 256, false, NULL,
                            "trainer processes on this node (default LOCAL_WORLD_SIZE, else "
                            "as many as connect)" },
    [OPT_HOOKS_DIR] = { "hooks_dir", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                        "directory of hook executables: on-notice, pre-checkpoint, "
                        "post-checkpoint, pre-restore, post-restore" },
    [OPT_HOOK_TIMEOUT] = { "hook_timeout", CONFIG_DURATION, "30s", NULL, 0, 0, false, NULL,
                           "a hook still running after this long is killed (and failed)" },
    [OPT_RANK] = { "rank", CONFIG_UINT, NULL, NULL, 0, 65535, false, NULL,
                   "this node's rank in the world, 0 to world_size - 1" },
    [OPT_WORLD_SIZE] = { "world_size", CONFIG_UINT, NULL, NULL, 1, 1024, false, NULL,
                         "number of nodes in the world (with rank and peers)" },
    [OPT_PEERS] = { "peers", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                    "ADDR:PORT of every node's peer listener, comma separated, in rank "
                    "order (numeric addresses)" },
    [OPT_LISTEN] = { "listen", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                     "ADDR:PORT this node's peer listener binds (default: its entry in "
                     "peers)" },
    [OPT_WORLD_KEY_FILE] = { "world_key_file", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                             "file holding the world's shared key (64+ hex digits, or 16+ "
                             "bytes)" },
    [OPT_WORLD_KEY] = { "world_key", CONFIG_STRING, NULL, NULL, 0, 0, true, NULL,
                        "the world's shared key itself (prefer world_key_file)" },
    [OPT_JOB_KEY_FILE] = { "job_key_file", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                           "file holding the key that signs and checks commit records "
                           "(default: the world key; 64+ hex digits, or 16+ bytes)" },
    [OPT_INSECURE] = { "insecure", CONFIG_BOOL, "false", NULL, 0, 0, false, NULL,
                       "let a world run without a key: anyone who reaches the port can "
                       "join it (tests only)" },
    [OPT_PEER_TIMEOUT] = { "peer_timeout", CONFIG_DURATION, "5s", NULL, 0, 0, false, NULL,
                           "a peer silent this long is down" },
    [OPT_RENDEZVOUS] = { "rendezvous", CONFIG_ENUM, "static", rendezvous_choices, 0, 0, false,
                         NULL, "how the nodes find each other: static (--peers) or store "
                         "(records under the job's world/ prefix; a node without --rank "
                         "takes a vacant one)" },
    [OPT_SPLIT_UPLOAD] = { "split_upload", CONFIG_BOOL, "true", NULL, 0, 0, false, NULL,
                           "upload state that is the same on every node once, each node "
                           "its share (the coordinator's setting rules)" },
    [OPT_MASTER_PORT] = { "master_port", CONFIG_UINT, "29500", NULL, 1, 65535, false, NULL,
                          "SPOT_MASTER_PORT given to the command (torchrun's --master_port)" },
    [OPT_CRIU] = { "criu", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                   "criu: the criu executable (default: criu in PATH; 4.2 or newer on "
                   "6.x kernels)" },
    [OPT_EARLY_START] = { "early_start", CONFIG_BOOL, "false", NULL, 0, 0, false, NULL,
                          "app method, one node: start the command while the generation it "
                          "resumes from is restored; the trainer's ckpt_resume_wait() waits "
                          "until it is there, verified" },
    [OPT_CRIU_STREAM] = { "criu_stream", CONFIG_ENUM, "last", criu_stream_choices, 0, 0, false,
                          NULL, "criu: which dumps stream their pages into the upload instead "
                          "of files (criu dump --stream): last (the one before a stop), "
                          "always, never" },
    [OPT_MIN_NODES] = { "min_nodes", CONFIG_UINT, NULL, NULL, 1, 1024, false, NULL,
                        "an elastic world: resume with this many nodes or more once "
                        "join_timeout has passed without the rest (default: world_size, "
                        "not elastic)" },
    [OPT_JOIN_TIMEOUT] = { "join_timeout", CONFIG_DURATION, "5m", NULL, 0, 0, false, NULL,
                           "how long an elastic world waits for missing nodes before it "
                           "resumes without them" },
    [OPT_SOCKET] = { "socket", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                     "path of the control socket for libckpt and spotctl" },
    [OPT_METRICS] = { "metrics", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                      "serve Prometheus metrics at http://ADDR:PORT/metrics ([ADDR]:PORT; "
                      "the address defaults to 127.0.0.1)" },
    [OPT_GPU_IDLE_THRESHOLD] = { "gpu_idle_threshold", CONFIG_UINT, "30", NULL, 0, 100, false,
                                 NULL, "a GPU under this utilization (percent) counts as "
                                 "idle for spotd_gpu_idle_seconds" },
    [OPT_WEBHOOK] = { "webhook", CONFIG_STRING, NULL, NULL, 0, 0, true, NULL,
                      "POST a JSON document to this URL at notices, commits, missed deadlines "
                      "and resumes (several: separated by spaces); from the file or "
                      "SPOTD_WEBHOOK, never a flag (see webhook_file)" },
    [OPT_WEBHOOK_FILE] = { "webhook_file", CONFIG_STRING, NULL, NULL, 0, 0, false, NULL,
                           "a file of webhook URLs, one a line ('#' starts a comment line), "
                           "added to webhook's; keep it chmod 600" },
    [OPT_WEBHOOK_TEMPLATE] = { "webhook_template", CONFIG_STRING, NULL, NULL, 0, 0, false,
                               NULL, "a file holding the webhook body with {placeholders} "
                               "(Slack-style bodies); default: spotd's JSON document" },
    [OPT_WEBHOOK_TIMEOUT] = { "webhook_timeout", CONFIG_DURATION, "10s", NULL, 0, 0, false,
                              NULL, "a webhook delivery taking longer fails and is "
                              "retried" },
};

/* Copy s into a message-safe form: printable, one line, bounded. */
static const char *shown(const char *s, char *buf, size_t size)
{
    size_t i = 0;

    for (; *s && i + 4 < size; s++)
        buf[i++] = isprint((unsigned char)*s) ? *s : '?';
    if (*s)
        buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
    buf[i] = '\0';
    return buf;
}

static void join_choices(const char *const *choices, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    for (; *choices; choices++) {
        int n = snprintf(buf + len, size - len, "%s%s", len ? ", " : "", *choices);
        if (n < 0 || (size_t)n >= size - len)
            return;
        len += (size_t)n;
    }
}

/* Check value against the option's type.  Returns 0 with *ret_num set, or
 * -EINVAL with a description of what is allowed in what. */
static int check_value(const struct config_option *o, const char *value, uint64_t *ret_num,
                       char *what, size_t whatlen)
{
    int r;

    switch (o->type) {
    case CONFIG_STRING:
        if (*value && strlen(value) < VALUE_MAX) {
            *ret_num = 0;
            return 0;
        }
        snprintf(what, whatlen, "expected a non-empty string shorter than %d bytes", VALUE_MAX);
        return -EINVAL;
    case CONFIG_DURATION:
        if (parse_duration(value, ret_num) == 0)
            return 0;
        snprintf(what, whatlen, "expected a duration such as 500ms, 30s, 5m or 1h, at most 720h");
        return -EINVAL;
    case CONFIG_UINT:
        if (parse_u64(value, o->min, o->max, ret_num) == 0)
            return 0;
        snprintf(what, whatlen, "expected a whole number from %llu to %llu",
                 (unsigned long long)o->min, (unsigned long long)o->max);
        return -EINVAL;
    case CONFIG_ENUM:
        for (uint64_t i = 0; o->choices[i]; i++) {
            if (strcmp(value, o->choices[i]) == 0) {
                *ret_num = i;
                return 0;
            }
        }
        {
            char list[256];
            join_choices(o->choices, list, sizeof(list));
            snprintf(what, whatlen, "expected one of: %s", list);
        }
        return -EINVAL;
    case CONFIG_BOOL:
        if (strcmp(value, "true") == 0 || strcmp(value, "false") == 0) {
            *ret_num = value[0] == 't';
            return 0;
        }
        snprintf(what, whatlen, "expected true or false");
        return -EINVAL;
    case CONFIG_SIGNAL:
        r = parse_signal(value);
        if (r > 0) {
            *ret_num = (uint64_t)r;
            return 0;
        }
        snprintf(what, whatlen, "expected a signal name such as TERM, INT or USR1, or a number");
        return -EINVAL;
    }
    return -EINVAL;
}

int config_set(struct config *c, enum config_id id, const char *value,
               enum config_source source, const char *origin, char *err, size_t errlen)
{
    const struct config_option *o = &config_options[id];
    struct config_value *v = &c->v[id];
    char what[320], vbuf[128], name[64], flag[64] = "", env[64];
    uint64_t num;
    char *str = NULL, *org;
    int file_id;

    /* The command line is world-readable; the environment and the file
     * need not be.  world_key_file, webhook_file: where it should be. */
    if (o->secret && source == CONFIG_FLAG) {
        snprintf(name, sizeof(name), "%s_file", o->key);
        if ((file_id = config_find_key(name)) >= 0)
            config_flag_name((enum config_id)file_id, flag, sizeof(flag));
        snprintf(err, errlen, "%s cannot be given on the command line: every user of this "
                 "machine can read a command line (/proc/PID/cmdline); put it in %s%s%s"
                 "the configuration file (\"%s\") or %s", origin,
                 flag[0] ? "a file named by " : "", flag, flag[0] ? ", " : "", o->key,
                 config_env_name(id, env, sizeof(env)));
        return -EINVAL;
    }
    if (value) {
        if (check_value(o, value, &num, what, sizeof(what)) < 0) {
            snprintf(err, errlen, "invalid %s '%s' (from %s): %s", o->key,
                     o->secret ? "<redacted>" : shown(value, vbuf, sizeof(vbuf)), origin, what);
            return -EINVAL;
        }
        str = strdup(value);
        if (!str)
            goto out_nomem;
    } else {
        num = 0;
    }
    org = strdup(origin);
    if (!org)
        goto out_nomem;
    free(v->str);
    free(v->origin);
    v->str = str;
    v->num = num;
    v->source = source;
    v->origin = org;
    return 0;

out_nomem:
    free(str);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
}

int config_init(struct config *c)
{
    char err[512];

    memset(c, 0, sizeof(*c));
    for (int i = 0; i < OPT__COUNT; i++) {
        int r = config_set(c, (enum config_id)i, config_options[i].def, CONFIG_DEFAULT,
                           "default", err, sizeof(err));
        if (r < 0) {
            config_release(c);
            return r;
        }
    }
    return 0;
}

static void free_command(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

void config_release(struct config *c)
{
    for (int i = 0; i < OPT__COUNT; i++) {
        free(c->v[i].str);
        free(c->v[i].origin);
    }
    free(c->file);
    free_command(c->command);
    memset(c, 0, sizeof(*c));
}

int config_find_key(const char *key)
{
    for (int i = 0; i < OPT__COUNT; i++)
        if (strcmp(key, config_options[i].key) == 0)
            return i;
    return -ENOENT;
}

/* "--max-restarts" and "SPOTD_MAX_RESTARTS" both name "max_restarts". */
static int find_spelled(const char *name, char sep, bool upper)
{
    char key[64];
    size_t i;

    for (i = 0; name[i] && i + 1 < sizeof(key); i++) {
        char ch = name[i];
        if ((ch == '_' && sep != '_') || (ch >= 'A' && ch <= 'Z' && !upper) ||
            (ch >= 'a' && ch <= 'z' && upper))
            return -ENOENT;
        key[i] = ch == sep ? '_' : (char)tolower((unsigned char)ch);
    }
    if (name[i])
        return -ENOENT;
    key[i] = '\0';
    return config_find_key(key);
}

/* Write prefix + key into buf with '_' turned into sep, in upper case if asked. */
static char *spell(enum config_id id, const char *prefix, char sep, bool upper, char *buf,
                   size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "%s%s", prefix, config_options[id].key);

    for (size_t i = strlen(prefix); i < n && i < size; i++) {
        if (buf[i] == '_')
            buf[i] = sep;
        else if (upper)
            buf[i] = (char)toupper((unsigned char)buf[i]);
    }
    return buf;
}

char *config_flag_name(enum config_id id, char *buf, size_t size)
{
    return spell(id, "--", '-', false, buf, size);
}

char *config_env_name(enum config_id id, char *buf, size_t size)
{
    return spell(id, "SPOTD_", '_', true, buf, size);
}

int config_find_flag(const char *flag)
{
    if (strncmp(flag, "--", 2) != 0)
        return -ENOENT;
    return find_spelled(flag + 2, '-', false);
}

/* Edit distance for "did you mean"; keys are short. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];

    if (la >= 63 || lb >= 63)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *closest_key(const char *key)
{
    const char *best = NULL;
    size_t bestd = 3;

    for (int i = 0; i < OPT__COUNT; i++) {
        size_t d = distance(key, config_options[i].key);
        if (d < bestd) {
            bestd = d;
            best = config_options[i].key;
        }
    }
    return best;
}

static void position(const char *text, const char *at, unsigned *line, unsigned *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = text; p < at; p++) {
        if (*p == '\n')
            (*line)++, *col = 1;
        else
            (*col)++;
    }
}

/* Check every member of root and, when apply is set, apply it.  A file is
 * first checked whole, then applied, so a bad key changes nothing. */
/* The file's "command": a non-empty array of strings, the first not
 * empty.  Checked when !apply, kept when apply. */
static int apply_command(struct config *c, const char *path, const cJSON *it, bool apply,
                         char *err, size_t errlen)
{
    int n = cJSON_GetArraySize(it);
    const cJSON *a;
    char **argv;
    int i = 0;

    if (cJSON_IsNull(it)) {
        if (apply) {
            free_command(c->command);
            c->command = NULL;
        }
        return 0;
    }
    if (!cJSON_IsArray(it) || n < 1 || n > CONFIG_COMMAND_ARGS) {
        snprintf(err, errlen, "invalid command in %s: expected an array of 1 to %d strings, "
                 "the program first, like \"command\": [\"python3\", \"train.py\"]", path,
                 CONFIG_COMMAND_ARGS);
        return -EINVAL;
    }
    cJSON_ArrayForEach(a, it) {
        if (!cJSON_IsString(a) || strlen(a->valuestring) > CONFIG_COMMAND_ARG_MAX ||
            (i == 0 && !a->valuestring[0])) {
            snprintf(err, errlen, "invalid command in %s: argument %d is %s", path, i,
                     !cJSON_IsString(a) ? "not a string" : i == 0 && !a->valuestring[0]
                     ? "empty (the program)" : "longer than 128 KiB");
            return -EINVAL;
        }
        i++;
    }
    if (!apply)
        return 0;
    if (!(argv = calloc((size_t)n + 1, sizeof(*argv))))
        goto oom;
    i = 0;
    cJSON_ArrayForEach(a, it)
        if (!(argv[i++] = strdup(a->valuestring)))
            goto oom;
    free_command(c->command);
    c->command = argv;
    return 0;
oom:
    free_command(argv);
    snprintf(err, errlen, "out of memory reading %s", path);
    return -ENOMEM;
}

static int apply_members(struct config *c, const char *path, const cJSON *root, bool apply,
                         char *err, size_t errlen)
{
    char origin[512], num[32], kbuf[96], what[320];
    const cJSON *it;

    cJSON_ArrayForEach(it, root) {
        const char *key = it->string;
        const struct config_option *o;
        const char *value;
        uint64_t unused;
        int id;

        /* Keys beginning with '_' are comments ("_comment": "..."). */
        if (key[0] == '_')
            continue;
        for (const cJSON *prev = root->child; prev != it; prev = prev->next) {
            if (strcmp(prev->string, key) == 0) {
                snprintf(err, errlen, "%s: key '%s' appears twice", path,
                         shown(key, kbuf, sizeof(kbuf)));
                return -EINVAL;
            }
        }
        if (strcmp(key, "command") == 0) {
            int r = apply_command(c, path, it, apply, err, errlen);
            if (r < 0)
                return r;
            continue;
        }
        id = config_find_key(key);
        if (id < 0) {
            const char *hint = closest_key(key);
            snprintf(err, errlen, "%s: unknown key '%s'%s%s%s; 'spotd help' lists the options",
                     path, shown(key, kbuf, sizeof(kbuf)), hint ? " (did you mean '" : "",
                     hint ? hint : "", hint ? "'?)" : "");
            return -EINVAL;
        }
        o = &config_options[id];
        snprintf(origin, sizeof(origin), "key '%s' in %s", key, path);
        if (cJSON_IsNull(it)) {
            value = o->def;
        } else if (o->type == CONFIG_UINT) {
            double d = cJSON_GetNumberValue(it);
            if (!cJSON_IsNumber(it) || d < 0 || d > 9007199254740991.0 || d != (double)(uint64_t)d) {
                snprintf(err, errlen, "invalid %s in %s: expected a whole number, like \"%s\": %s",
                         key, path, key, o->def ? o->def : "1");
                return -EINVAL;
            }
            snprintf(num, sizeof(num), "%llu", (unsigned long long)d);
            value = num;
        } else if (o->type == CONFIG_BOOL) {
            if (!cJSON_IsBool(it)) {
                snprintf(err, errlen, "invalid %s in %s: expected true or false, like \"%s\": %s",
                         key, path, key, o->def ? o->def : "false");
                return -EINVAL;
            }
            value = cJSON_IsTrue(it) ? "true" : "false";
        } else if (cJSON_IsString(it)) {
            value = it->valuestring;
        } else {
            snprintf(err, errlen, "invalid %s in %s: expected a JSON string, like \"%s\": \"%s\"",
                     key, path, key, o->def ? o->def : "...");
            return -EINVAL;
        }
        if (!apply) {
            /* config_set() refuses the same value and writes the message. */
            if (value && check_value(o, value, &unused, what, sizeof(what)) < 0)
                return config_set(c, (enum config_id)id, value, CONFIG_FILE, origin, err, errlen);
            continue;
        }
        int r = config_set(c, (enum config_id)id, value,
                           cJSON_IsNull(it) ? CONFIG_DEFAULT : CONFIG_FILE, origin, err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The first string of a JSON text that holds an escaped NUL ("\u0000"),
 * which cJSON would cut there: NULL when none.  *ret_key is the key it is
 * (or is the value of, or is inside the array of), as written, and
 * *ret_klen its length; *ret_is_key says whether the string is the key
 * itself.  text must be valid JSON. */
static const char *escaped_nul(const char *text, size_t len, const char **ret_key,
                               size_t *ret_klen, bool *ret_is_key)
{
    const char *key = NULL, *str = NULL, *nul = NULL;
    size_t klen = 0;

    for (size_t i = 0; i < len; i++) {
        if (!str) {
            if (text[i] == '"')
                str = text + i + 1, nul = NULL;
            continue;
        }
        if (text[i] == '\\') {
            if (i + 5 < len && memcmp(text + i + 1, "u0000", 5) == 0)
                nul = text + i;
            i++;
            continue;
        }
        if (text[i] != '"')
            continue;
        /* The string ends: a key when a ':' follows. */
        size_t j = i + 1;
        while (j < len && isspace((unsigned char)text[j]))
            j++;
        bool is_key = j < len && text[j] == ':';
        if (is_key)
            key = str, klen = (size_t)(text + i - str);
        if (nul) {
            *ret_key = key;
            *ret_klen = klen;
            *ret_is_key = is_key;
            return nul;
        }
        str = NULL;
    }
    return NULL;
}

int config_load_json(struct config *c, const char *path, const char *text, size_t len,
                     char *err, size_t errlen)
{
    const char *end = NULL, *nul, *key;
    unsigned line, col;
    bool is_key;
    size_t klen;
    cJSON *root;
    int r = -EINVAL;

    if (memchr(text, '\0', len)) {
        snprintf(err, errlen, "%s: not a JSON text (it holds NUL bytes)", path);
        return -EINVAL;
    }
    root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        position(text, end && end >= text && end <= text + len ? end : text + len, &line, &col);
        snprintf(err, errlen, "%s:%u:%u: invalid JSON; the file must hold one JSON object",
                 path, line, col);
        return -EINVAL;
    }
    while (end && end < text + len && isspace((unsigned char)*end))
        end++;
    if (end && end < text + len) {
        position(text, end, &line, &col);
        snprintf(err, errlen, "%s:%u:%u: unexpected text after the JSON object", path, line, col);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: the configuration must be a JSON object, like {\"grace\": \"30s\"}",
                 path);
        goto out;
    }
    if ((nul = escaped_nul(text, len, &key, &klen, &is_key))) {
        char kbuf[96], kcopy[96];

        position(text, nul, &line, &col);
        snprintf(kcopy, sizeof(kcopy), "%.*s", (int)(klen < sizeof(kcopy) ? klen : sizeof(kcopy) - 1),
                 key ? key : "");
        snprintf(err, errlen, "%s:%u:%u: %s '%s' holds a NUL character (\\u0000); spotd refuses "
                 "it rather than cut the string there", path, line, col,
                 is_key ? "the key" : "the value of key", shown(kcopy, kbuf, sizeof(kbuf)));
        goto out;
    }
    r = apply_members(c, path, root, false, err, errlen);
    if (r == 0)
        r = apply_members(c, path, root, true, err, errlen);
out:
    cJSON_Delete(root);
    return r;
}

/* What a file that is not a regular one is, for messages. */
static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode)
           ? "a character device" : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode)
           ? "a socket" : "not a regular file";
}

int config_load_file(struct config *c, const char *path, char *err, size_t errlen)
{
    struct stat st;
    char *text = NULL;
    size_t len = 0;
    int fd, r;

    /* Looked at before it is opened: opening a device can do something (a
     * watchdog starts counting), opening a FIFO waits for a writer. */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "config file '%s' is %s; --config takes a regular file", path,
                 file_kind(st.st_mode));
        return -EINVAL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot open config file '%s': %s", path, strerror(-r));
        return r;
    }
    /* Again on what was opened: it may have been swapped in between. */
    if (fstat(fd, &st) < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot read config file '%s': %s", path, strerror(-r));
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "config file '%s' is %s; --config takes a regular file", path,
                 file_kind(st.st_mode));
        r = -EINVAL;
        goto out_close;
    }
    if (st.st_size > CONFIG_FILE_MAX) {
        snprintf(err, errlen, "config file '%s' is larger than %d bytes", path, CONFIG_FILE_MAX);
        r = -EFBIG;
        goto out_close;
    }
    text = malloc((size_t)st.st_size + 1);
    if (!text) {
        snprintf(err, errlen, "out of memory reading '%s'", path);
        r = -ENOMEM;
        goto out_close;
    }
    /* Read to EOF, not to st_size: the file may change under us. */
    for (;;) {
        ssize_t n = read(fd, text + len, (size_t)st.st_size + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            snprintf(err, errlen, "cannot read config file '%s': %s", path, strerror(-r));
            goto out_free;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > (size_t)st.st_size) {
            snprintf(err, errlen, "config file '%s' changed while it was read", path);
            r = -EAGAIN;
            goto out_free;
        }
    }
    r = config_load_json(c, path, text, len, err, errlen);
    if (r == 0) {
        free(c->file);
        c->file = strdup(path);
    }
out_free:
    free(text);
out_close:
    close(fd);
    return r;
}

int config_load_env(struct config *c, const char *const *envp, char *err, size_t errlen,
                    char *warn, size_t warnlen)
{
    size_t wlen = 0;

    if (warnlen)
        warn[0] = '\0';
    for (; envp && *envp; envp++) {
        const char *eq = strchr(*envp, '=');
        char name[96], nbuf[96];
        int id, r;

        if (strncmp(*envp, "SPOTD_", 6) != 0 || !eq || (size_t)(eq - *envp) >= sizeof(name))
            continue;
        memcpy(name, *envp, (size_t)(eq - *envp));
        name[eq - *envp] = '\0';
        /* SPOTD_TEST_*: knobs of the test suite (store_s3.c's page size),
         * read where they apply, never configuration. */
        if (strcmp(name, "SPOTD_CONFIG") == 0 || strncmp(name, "SPOTD_TEST_", 11) == 0 ||
            eq[1] == '\0')
            continue;
        id = find_spelled(name + 6, '_', true);
        if (id < 0) {
            int n = snprintf(warn + wlen, warnlen - wlen, "%sunknown environment variable %s ignored",
                             wlen ? "\n" : "", shown(name, nbuf, sizeof(nbuf)));
            if (n > 0 && (size_t)n < warnlen - wlen)
                wlen += (size_t)n;
            continue;
        }
        r = config_set(c, (enum config_id)id, eq + 1, CONFIG_ENV, name, err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

int config_check_implemented(const struct config *c, char *err, size_t errlen)
{
    for (int i = 0; i < OPT__COUNT; i++) {
        const struct config_option *o = &config_options[i];
        if (!o->later || !c->v[i].str || c->v[i].source == CONFIG_DEFAULT)
            continue;
        snprintf(err, errlen, "option %s (from %s) is not implemented yet: it comes with %s; "
                 "remove it to run this version", o->key, c->v[i].origin, o->later);
        return -ENOTSUP;
    }
    return 0;
}

cJSON *config_to_json(const struct config *c)
{
    cJSON *root = cJSON_CreateObject();
    char buf[32];

    for (int i = 0; i < OPT__COUNT; i++) {
        const struct config_option *o = &config_options[i];
        const struct config_value *v = &c->v[i];

        if (!v->str)
            cJSON_AddNullToObject(root, o->key);
        else if (o->secret)
            cJSON_AddStringToObject(root, o->key, "<redacted>");
        else if (o->type == CONFIG_DURATION)
            cJSON_AddStringToObject(root, o->key, parse_format_duration(v->num, buf, sizeof(buf)));
        else if (o->type == CONFIG_UINT)
            cJSON_AddNumberToObject(root, o->key, (double)v->num);
        else if (o->type == CONFIG_BOOL)
            cJSON_AddBoolToObject(root, o->key, v->num != 0);
        else if (o->type == CONFIG_SIGNAL)
            cJSON_AddStringToObject(root, o->key, parse_signal_name((int)v->num)
                                                      ? parse_signal_name((int)v->num) : v->str);
        else
            cJSON_AddStringToObject(root, o->key, v->str);
    }
    if (c->command) {
        cJSON *a = cJSON_AddArrayToObject(root, "command");
        for (size_t i = 0; a && c->command[i]; i++)
            cJSON_AddItemToArray(a, cJSON_CreateString(c->command[i]));
    } else {
        cJSON_AddNullToObject(root, "command");
    }
    return root;
}
