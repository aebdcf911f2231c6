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
#include <sys/prctl.h>
#include <unistd.h>

#include "child.h"
#include "spot/config.h"
#include "spot/log.h"
#include "spot/parse.h"

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
            "usage: spotd run [OPTIONS] [--] COMMAND [ARGS...]\n"
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

static int cmd_run(int argc, char **argv)
{
    struct child_opts opts;
    struct event_base *base;
    struct config cfg;
    struct child *child;
    sigset_t orig_mask;
    char err[1024];
    int cmd, code = EXIT_USAGE, r;
    cJSON *e;

    cmd = load_config(&cfg, argc, argv, 2);
    if (cmd < 0) {
        code = cmd == -2 ? 0 : EXIT_USAGE;
        goto out_config;
    }
    if (cmd >= argc) {
        say("no command to run; usage: spotd run [OPTIONS] -- COMMAND [ARGS...]");
        goto out_config;
    }
    if (config_check_implemented(&cfg, err, sizeof(err)) < 0) {
        say("%s", err);
        goto out_config;
    }
    r = log_open((enum log_format)config_num(&cfg, OPT_LOG_FORMAT),
                 (enum log_level)config_num(&cfg, OPT_LOG_LEVEL), config_str(&cfg, OPT_EVENTS));
    if (r < 0) {
        say("cannot open event log '%s': %s; check --events", config_str(&cfg, OPT_EVENTS),
            strerror(-r));
        goto out_config;
    }
    drop_secret_env();

    /* The command gets the mask spotd was given; its dispositions are reset
     * in child.c.  A closed stderr must not kill spotd. */
    sigprocmask(SIG_SETMASK, NULL, &orig_mask);
    signal(SIGPIPE, SIG_IGN);
    if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        log_msg(LOGL_WARN, "cannot become a child subreaper (%s): orphans of the command "
                "will not be reaped by spotd", strerror(errno));

    base = event_base_new();
    if (!base) {
        say("cannot create the event loop");
        goto out_log;
    }
    opts = (struct child_opts){
        .argv = argv + cmd,
        .restart = (enum config_restart)config_num(&cfg, OPT_RESTART),
        .max_restarts = (unsigned)config_num(&cfg, OPT_MAX_RESTARTS),
        .grace_ms = config_num(&cfg, OPT_GRACE),
        .stop_signal = (int)config_num(&cfg, OPT_STOP_SIGNAL),
    };
    child = child_new(base, &opts, &orig_mask);
    if (!child) {
        say("cannot set up signal handling: %s", strerror(errno));
        goto out_base;
    }

    e = log_event_new("start");
    cJSON_AddStringToObject(e, "version", SPOT_VERSION);
    cJSON_AddNumberToObject(e, "pid", getpid());
    if (cfg.file)
        cJSON_AddStringToObject(e, "config", cfg.file);
    cJSON_AddItemToObject(e, "settings", config_to_json(&cfg));
    log_event(LOGL_INFO, e, "spotd %s starting", SPOT_VERSION);

    if (child_start(child) < 0) {
        say("cannot schedule the command's start: out of memory");
        goto out_child;
    }
    event_base_dispatch(base);
    code = child_exit_code(child);
out_child:

    child_free(child);
out_base:
    event_base_free(base);
out_log:
    log_close();
out_config:
    config_release(&cfg);
    return code;
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
