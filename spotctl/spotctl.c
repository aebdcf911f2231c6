/* spotctl: the operator's tool.  The store commands (push, ls, show,
 * verify, fetch, gc, world) drive the same snapshot engine as spotd
 * (lib/spot/snap.c); resume restores through it and then runs spotd; the
 * daemon commands talk to a running spotd over its control socket.  This
 * file holds main: the commands' table and help, and the configuration
 * spotd would read (spotctl.h says where the rest is). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spot/config.h"
#include "spotctl.h"

const struct spotctl_command spotctl_commands[] = {
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

#define N_COMMANDS (sizeof(spotctl_commands) / sizeof(spotctl_commands[0]))

static const char store_opts[] =
    "store options (else the configuration file's, else SPOTD_STORE, SPOTD_JOB):\n"
    "  --config FILE       the file spotd reads (else SPOTD_CONFIG, else /etc/spotd/spotd.json\n"
    "                      when present): job, store, state_dir, socket\n"
    "  --store URL         file:///path or s3://bucket/prefix\n"
    "  --job NAME\n"
    "  --s3-endpoint URL   http(s)://host[:port][/path]; else AWS_ENDPOINT_URL,\n"
    "                      else AWS\n"
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
        if (spotctl_commands[i].kind == K_DAEMON)
            continue;
        fprintf(f, "  %-10s %-38s %s\n", spotctl_commands[i].name, spotctl_commands[i].args,
                spotctl_commands[i].brief);
    }
    fprintf(f, "\ndaemon commands, over the control socket of a running spotd:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (spotctl_commands[i].kind == K_DAEMON)
            fprintf(f, "  %-10s %-38s %s\n", spotctl_commands[i].name, spotctl_commands[i].args,
                    spotctl_commands[i].brief);
    fprintf(f, "\n'spotctl COMMAND --help' says what one does and takes.  Every command "
            "takes --json.\n\n%s\n%s", store_opts, daemon_opts);
}

static int find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(spotctl_commands[i].name, name))
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

void spotctl_usage_of(FILE *f, int i)
{
    fprintf(f, "usage: spotctl %s [OPTIONS]%s%s\n\n", spotctl_commands[i].name,
            spotctl_commands[i].args[0] ? " " : "", spotctl_commands[i].args);
    fold(f, spotctl_commands[i].what);
    if (spotctl_commands[i].opts[0])
        fprintf(f, "%s\n", spotctl_commands[i].opts);
    fprintf(f, "%s", spotctl_commands[i].kind == K_DAEMON ? daemon_opts : store_opts);
}

void spotctl_human(char *buf, size_t size, uint64_t n)
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

int spotctl_bad(const char *fmt, ...)
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
        return spotctl_bad("out of memory");
    if ((!file || !*file) && access(CONFIG_DEFAULT_FILE, R_OK) == 0)
        file = CONFIG_DEFAULT_FILE;
    if ((file && *file && config_load_file(cfg, file, err, sizeof(err)) < 0) ||
        config_load_env(cfg, (const char *const *)environ, err, sizeof(err), warn,
                        sizeof(warn)) < 0) {
        config_release(cfg);
        return spotctl_bad("%s", err);
    }
    return 0;
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
            spotctl_usage_of(stdout, which);
        else
            usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("spotctl %s\n", SPOT_VERSION);
        return 0;
    }
    if ((which = find_command(argv[1])) < 0)
        return spotctl_bad("unknown command '%s'; 'spotctl help' lists the commands", argv[1]);
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            spotctl_usage_of(stdout, which);
            return 0;
        }
    if ((code = load_config(argc, argv, &cfg)))
        return code;
    if (spotctl_commands[which].kind == K_DAEMON)
        code = daemon_cmd(argc, argv, &cfg, which);
    else
        code = store_cmd(argc, argv, &cfg, which);
    config_release(&cfg);
    return code;
}
