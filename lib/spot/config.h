/* config: every option of spotd, from one table, in three spellings.
 *
 * An option "max_restarts" is the JSON key "max_restarts" in the config
 * file, the environment variable SPOTD_MAX_RESTARTS and the flag
 * --max-restarts.  Later sources win: default < file < environment < flag.
 * Values are checked when they are read; a bad one is refused with one line
 * that names the key, where it came from, the value and what is allowed.
 *
 * Options that later capabilities implement are parsed and checked like
 * the rest, so that spotd can name them, but config_check_implemented()
 * refuses them when set: an option must never be silently ignored. */
#ifndef SPOT_CONFIG_H
#define SPOT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

enum config_id {
    OPT_RESTART,
    OPT_MAX_RESTARTS,
    OPT_GRACE,
    OPT_STOP_SIGNAL,
    OPT_LOG_FORMAT,
    OPT_LOG_LEVEL,
    OPT_EVENTS,
    OPT_CLOUD,
    OPT_METADATA_URL,
    OPT_POLL_INTERVAL,
    OPT_NOTICE_MARGIN,
    OPT_SIGNAL_DEADLINE,
    OPT_NOTICE_SIGNALS,
    OPT_NOTICE_FILE,
    OPT_DRILL_AFTER,
    OPT_AWS_IMDSV1,
    OPT_AZURE_ACK,
    OPT_AZURE_VM_NAME,
    OPT_PASS_CREDENTIALS,
    /* Implemented by later capabilities; refused when set until then. */
    OPT_JOB,
    OPT_STORE,
    OPT_METHOD,
    OPT_CKPT_DIR,
    OPT_STATE_DIR,
    OPT_STAGE_DIR,
    OPT_INTERVAL,
    OPT_CKPT_SIGNAL,
    OPT_SETTLE,
    OPT_CKPT_LAYOUT,
    OPT_CKPT_STEP_FILE,
    OPT_SAVED_WHEN,
    OPT_PREEMPT_EXIT_CODE,
    OPT_CKPT_WRITERS,
    OPT_CKPT_READERS,
    OPT_RESUME,
    OPT_ON_UNRESTORABLE,
    OPT_STORE_WAIT,
    OPT_PRESERVE_SPECIAL_MODES,
    OPT_LOCAL_WORKERS,
    OPT_HOOKS_DIR,
    OPT_HOOK_TIMEOUT,
    OPT_RANK,
    OPT_WORLD_SIZE,
    OPT_PEERS,
    OPT_LISTEN,
    OPT_WORLD_KEY_FILE,
    OPT_WORLD_KEY,
    OPT_JOB_KEY_FILE,
    OPT_INSECURE,
    OPT_PEER_TIMEOUT,
    OPT_MASTER_PORT,
    OPT_SPLIT_UPLOAD,
    OPT_RENDEZVOUS,
    OPT_CRIU,
    OPT_CRIU_STREAM,
    OPT_EARLY_START,
    OPT_MIN_NODES,
    OPT_JOIN_TIMEOUT,
    OPT_SOCKET,
    OPT_METRICS,
    OPT_GPU_IDLE_THRESHOLD,
    OPT_WEBHOOK,
    OPT_WEBHOOK_FILE,
    OPT_WEBHOOK_TEMPLATE,
    OPT_WEBHOOK_TIMEOUT,
    OPT__COUNT
};

enum config_type { CONFIG_STRING, CONFIG_DURATION, CONFIG_UINT, CONFIG_ENUM, CONFIG_SIGNAL, CONFIG_BOOL };

enum config_source { CONFIG_DEFAULT, CONFIG_FILE, CONFIG_ENV, CONFIG_FLAG };

struct config_option {
    const char *key;
    enum config_type type;
    const char *def;              /* default, in the option's syntax; NULL: unset */
    const char *const *choices;   /* CONFIG_ENUM: NULL-terminated */
    uint64_t min, max;            /* CONFIG_UINT */
    /* Redacted by config_to_json(), kept from the command, and never taken
     * from a flag: every user can read a command line (/proc/PID/cmdline). */
    bool secret;
    const char *later;            /* capability that will implement it, NULL if done */
    const char *help;
};

struct config_value {
    char *str;                    /* as given (owned), NULL when unset */
    uint64_t num;                 /* duration in ms, uint, enum index, signal, bool */
    enum config_source source;
    char *origin;                 /* "--grace", "SPOTD_GRACE", "FILE: key 'grace'" (owned) */
};

struct config {
    struct config_value v[OPT__COUNT];
    char *file;                   /* the config file read, NULL if none (owned) */
    char **command;               /* the file's "command", NULL-terminated (owned), or NULL */
};

/* Limits on the file's "command": arguments, and bytes of each. */
#define CONFIG_COMMAND_ARGS 4096
#define CONFIG_COMMAND_ARG_MAX (128 * 1024)

/* The option table, OPT__COUNT entries in enum config_id order. */
extern const struct config_option config_options[OPT__COUNT];

/* Default configuration file, read when present and none is named. */
#define CONFIG_DEFAULT_FILE "/etc/spotd/spotd.json"

/* Size cap on a configuration file. */
#define CONFIG_FILE_MAX (1024 * 1024)

/* Fill c with the defaults.  Returns 0 or -ENOMEM. */
int config_init(struct config *c);
void config_release(struct config *c);

/* Set option id from text given by origin (for messages).  On a bad value
 * writes the one-line reason into err and returns -EINVAL; so it does for
 * a secret option from a flag (source CONFIG_FLAG), saying where else it
 * can be given. */
int config_set(struct config *c, enum config_id id, const char *value,
               enum config_source source, const char *origin, char *err, size_t errlen);

/* Find an option by JSON key, flag ("--max-restarts") or environment name;
 * -ENOENT when there is none. */
int config_find_key(const char *key);
int config_find_flag(const char *flag);

/* The flag ("--max-restarts") and environment ("SPOTD_MAX_RESTARTS")
 * spellings of option id, written into buf.  Return buf. */
char *config_flag_name(enum config_id id, char *buf, size_t size);
char *config_env_name(enum config_id id, char *buf, size_t size);

/* Apply a configuration file's text (JSON object).  path names it in
 * messages.  Unknown keys, duplicate keys, wrong JSON types and bad values
 * are refused.  Besides the options, the key "command" (an array of
 * strings, the first the program) is the command spotd runs when none
 * follows the options; it has no flag or environment spelling.  A string
 * or key holding a NUL (written "\u0000") is refused, with its key named:
 * cut there, it would mean something else.  Returns 0 or -EINVAL with err
 * set. */
int config_load_json(struct config *c, const char *path, const char *text, size_t len,
                     char *err, size_t errlen);

/* Read and apply the file at path (size-capped).  Anything but a regular
 * file (a FIFO, a device, a directory, a socket) is refused before it is
 * opened, and again after (opened without blocking): reading a FIFO or a
 * terminal would hold spotd's start.  Returns 0, -errno, or -EINVAL with
 * err set; err is set in every failure. */
int config_load_file(struct config *c, const char *path, char *err, size_t errlen);

/* Apply SPOTD_* variables from envp.  Empty values are skipped.  Unknown
 * SPOTD_ names are written into warn (newline separated) for the caller to
 * log.  Returns 0 or -EINVAL with err set. */
int config_load_env(struct config *c, const char *const *envp, char *err, size_t errlen,
                    char *warn, size_t warnlen);

/* Refuse the options that later capabilities implement when one is set.
 * Returns 0 or -ENOTSUP with err set. */
int config_check_implemented(const struct config *c, char *err, size_t errlen);

/* The effective configuration as a JSON object, secrets redacted.  Caller
 * owns the result (cJSON_Delete). */
struct cJSON *config_to_json(const struct config *c);

static inline uint64_t config_num(const struct config *c, enum config_id id)
{
    return c->v[id].num;
}

static inline const char *config_str(const struct config *c, enum config_id id)
{
    return c->v[id].str;
}

/* Clouds, in the order of OPT_CLOUD's choices. */
enum config_cloud { CLOUD_AUTO, CLOUD_NONE, CLOUD_AWS, CLOUD_GCP, CLOUD_AZURE, CLOUD_ALIBABA,
                    CLOUD_TENCENT };

/* Restart policies, in the order of OPT_RESTART's choices. */
enum config_restart { RESTART_NEVER, RESTART_ON_FAILURE, RESTART_ALWAYS };
enum config_unrestorable { UNRESTORABLE_OLDER, UNRESTORABLE_FRESH, UNRESTORABLE_FAIL };
/* OPT_CKPT_WRITERS, OPT_CKPT_READERS: every node's trainers, or global
 * rank 0's alone. */
enum config_ckpt_ranks { CKPT_RANKS_ALL, CKPT_RANKS_RANK0 };
/* OPT_CRIU_STREAM: which dumps go through spotd's image streamer. */
enum config_criu_stream { CRIU_STREAM_LAST, CRIU_STREAM_ALWAYS, CRIU_STREAM_NEVER };
/* Methods, in the order of OPT_METHOD's choices. */
enum config_method {
    CONFIG_METHOD_APP,
    CONFIG_METHOD_SIGNAL,
    CONFIG_METHOD_DIR,
    CONFIG_METHOD_CRIU,
};

#endif
