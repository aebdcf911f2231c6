/* What spotctl's files share (private to spotctl).
 *
 *   spotctl.c      main: the table of commands, their help, the
 *                  configuration spotd would read, dispatch
 *   store_cmds.c   the store commands (push, ls, show, verify, fetch, gc,
 *                  world) on the snapshot engine: options, the store, the
 *                  loop; push, verify, fetch and gc themselves
 *   store_show.c   ls, show and world: what the store holds, printed
 *   resume.c       resume: the generation to resume, then spotd run
 *                  --resume in spotctl's place
 *   daemon_cmds.c  status, checkpoint, drill: one line to a running spotd
 *                  over its control socket */
#ifndef SPOTCTL_SPOTCTL_H
#define SPOTCTL_SPOTCTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "spot/config.h"
#include "spot/jobkey.h"
#include "spot/manifest.h"
#include "spot/snap.h"

/* Every command, for `spotctl help` and `spotctl COMMAND --help`. */
enum spotctl_kind { K_STORE, K_DAEMON, K_RESUME };

struct spotctl_command {
    const char *name;
    enum spotctl_kind kind;
    const char *args;
    const char *brief;
    const char *what;
    const char *opts;             /* its own options, one per line */
};

/* Indexed by the `which` that main() hands the commands. */
extern const struct spotctl_command spotctl_commands[];

/* `spotctl COMMAND --help` of spotctl_commands[which], on f. */
void spotctl_usage_of(FILE *f, int which);

/* "spotctl: " and the message on stderr; returns 2, the exit code of a
 * usage error. */
int spotctl_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* n bytes for people: "512 B", "1.5 MiB". */
void spotctl_human(char *buf, size_t size, uint64_t n);

/* One store command under way: what its options asked for, the objects it
 * runs on, and its first error.  Callbacks run on c->base's loop. */
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

/* Keeps the first error and its message: the one spotctl reports. */
void ctl_fail(struct ctl *c, int err, const char *msg);

/* Ends the loop (and the progress line): the command is done. */
void ctl_stop(struct ctl *c);

/* The store commands and resume; returns the exit code. */
int store_cmd(int argc, char **argv, struct config *cfg, int which);

/* Each starts its listing; the callbacks print it and end the loop. */
void show_ls(struct ctl *c);
void show_gen(struct ctl *c);             /* c->gen, else the newest committed */
void show_world(struct ctl *c);

/* The n foreign objects keys (jobtree.h) found where, said on f: every
 * one with --json (where f is stderr), else the first 20. */
void show_foreign(const struct ctl *c, FILE *f, const char *const *keys, size_t n,
                  const char *where);

/* Frees what show_world() kept in c; c->wg may be NULL. */
void show_release(struct ctl *c);

/* What a record's signature says, in words, into buf; returns buf. */
const char *show_signature(const struct ctl *c, enum jobkey_auth a, const char *key_id,
                           char *buf, size_t size);

/* status, checkpoint, drill; returns the exit code. */
int daemon_cmd(int argc, char **argv, const struct config *cfg, int which);

/* resume: what it found in the store, and the key file spotd gets. */
struct resume {
    struct ctl *c;
    uint64_t gen;                 /* the one found */
    char method[MANIFEST_NAME_MAX + 1];
    const char *key_file;         /* given as a flag: spotd gets it too */
};

/* Lists the job's generations and picks the one to resume (--gen, else
 * the newest committed) into rs->gen, or fails rs->c; ends the loop. */
void resume_find(struct resume *rs);

/* spotd run --resume GEN with this store and job, the command after
 * them; spotctl becomes it.  Returns 1 when it could not. */
int resume_exec(const struct ctl *c, const struct resume *rs, const char *config_file,
                const char *state_dir, const char *spotd, char **cmd, int n_cmd);

#endif
