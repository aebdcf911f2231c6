/* spotctl: the operator's tool.  Its commands arrive with the control
 * socket (status, checkpoint, drill) and the snapshot store (ls, show,
 * verify, fetch, resume, gc, world); until then it says so. */
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    const char *what;
    const char *comes_with;
} commands[] = {
    { "status", "state of the local spotd", "the control socket (issue 8)" },
    { "checkpoint", "checkpoint now", "the control socket (issue 8)" },
    { "drill", "simulated interruption notice", "the control socket (issue 8)" },
    { "ls", "generations in the store", "the snapshot store (issue 4, 8)" },
    { "show", "one generation's manifest", "the snapshot store (issue 4, 8)" },
    { "verify", "fetch and hash-check a generation", "the snapshot store (issue 4, 8)" },
    { "fetch", "restore a generation into a directory", "the snapshot store (issue 4, 8)" },
    { "resume", "restore and start the command", "the orchestrator (issue 5, 8)" },
    { "gc", "delete unreferenced chunks", "the snapshot store (issue 4, 8)" },
    { "world", "rendezvous records of the job", "the multi-node world (issue 6, 8)" },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: spotctl COMMAND [OPTIONS]\n\ncommands (none is implemented yet in "
               "spotctl %s):\n", SPOT_VERSION);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-11s %-40s comes with %s\n", commands[i].name, commands[i].what,
                commands[i].comes_with);
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;

    if (!cmd) {
        usage(stderr);
        return 2;
    }
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("spotctl %s\n", SPOT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(cmd, commands[i].name) == 0) {
            fprintf(stderr, "spotctl: '%s' is not implemented yet; it comes with %s\n", cmd,
                    commands[i].comes_with);
            return 2;
        }
    }
    fprintf(stderr, "spotctl: unknown command '%s'; 'spotctl help' lists the commands\n", cmd);
    return 2;
}
