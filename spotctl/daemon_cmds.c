/* spotctl's daemon commands: status, checkpoint and drill, each one JSON
 * line to a running spotd's control socket (supervisord/control.c) and
 * the one line that answers it. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "spot/config.h"
#include "spot/parse.h"
#include "spotctl.h"

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
        spotctl_bad("control socket path '%s' is too long", path);
        return NULL;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        spotctl_bad("cannot connect to spotd's control socket '%s': %s; is spotd running "
                    "with --job and --store, and is this its --state-dir (or give --socket)?",
                    path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (send(fd, line, strlen(line), MSG_NOSIGNAL) != (ssize_t)strlen(line)) {
        spotctl_bad("cannot write to '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    while (len < sizeof(buf) - 1 && !memchr(buf, '\n', len)) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        ssize_t n;

        if (poll(&p, 1, 10000) <= 0) {
            spotctl_bad("spotd did not answer within 10 s on '%s'", path);
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
            spotctl_bad("spotd's answer on '%s' is not a JSON object: '%.200s'", path, buf);
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
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(o, "planned");
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
    if (cJSON_IsObject(pl))
        printf("%-16s checkpoint at %s, stop by %s (%s, deadline %s); training goes on\n",
               "planned", jstr(pl, "checkpoint_at", "?"), jstr(pl, "stop_by", "?"),
               jstr(pl, "reason", "?"), jstr(pl, "deadline", "?"));
    if (cJSON_IsObject(p)) {
        spotctl_human(b1, sizeof(b1), (uint64_t)jnum(p, "bytes_sent", 0));
        spotctl_human(b2, sizeof(b2), (uint64_t)jnum(p, "bytes_total", 0));
        printf("%-16s generation %.0f, %s, %s (%s sent of %s, %.1f s)\n", "in progress",
               jnum(p, "gen", 0), jstr(p, "phase", "?"), jstr(p, "reason", "?"), b1, b2,
               jnum(p, "ms", 0) / 1000.0);
    }
}

/* status, checkpoint, drill. */
int daemon_cmd(int argc, char **argv, const struct config *cfg, int which)
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
                return spotctl_bad("--in: expected a duration such as 30s or 2m, not '%s'", optarg);
            in_ms = (int64_t)v;
            break;
        case 'h': spotctl_usage_of(stdout, which); return 0;
        default: return 2;
        }
    }
    if (optind < argc)
        return spotctl_bad("'%s' takes no arguments ('%s')", cmd, argv[optind]);
    if ((kind || in_ms >= 0) && strcmp(cmd, "drill") != 0)
        return spotctl_bad("--kind and --in are options of drill");
    if (sock)
        snprintf(path, sizeof(path), "%s", sock);
    else if (state)
        snprintf(path, sizeof(path), "%s/control.sock", state);
    else if (job)
        snprintf(path, sizeof(path), "/var/lib/spotd/%s/control.sock", job);
    else
        return spotctl_bad("which spotd? give --socket, --state-dir or --job (or set SPOT_SOCKET)");
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
            return spotctl_bad("out of memory");
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
