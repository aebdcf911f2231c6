/* child: the supervised command, its process group, and its restarts. */
#ifndef SPOTD_CHILD_H
#define SPOTD_CHILD_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "spot/config.h"

struct event_base;

struct child_opts {
    char *const *argv;            /* command and arguments; borrowed, outlives the child */
    enum config_restart restart;
    unsigned max_restarts;
    uint64_t grace_ms;
    int stop_signal;
    /* Signals that are notices as well (SIGTERM always; more by
     * --notice-signals).  The ones in notice_only are not forwarded: they
     * mean something to spotd, not to the command. */
    sigset_t notice_only;
    void (*on_notice_signal)(void *arg, int sig);
    void *arg;
    /* Pass the cloud credentials on to the command and the hooks
     * (--pass-credentials); see child_env_new(). */
    bool pass_credentials;
};

/* Backoff between restarts doubles from the first to the last figure; a
 * run that lasted at least BACKOFF_MAX_MS starts the doubling over. */
#define CHILD_BACKOFF_MIN_MS 1000
#define CHILD_BACKOFF_MAX_MS 60000

/* Exit codes when the command cannot be run, as in POSIX shells. */
#define CHILD_EXIT_CANNOT_EXEC 126
#define CHILD_EXIT_NOT_FOUND 127

struct child;

/* Set up supervision on base: the forwarded signals and SIGCHLD become
 * events.  orig_mask is the signal mask spotd was started with; the command
 * gets it back.  opts is copied.  Returns NULL with errno set. */
struct child *child_new(struct event_base *base, const struct child_opts *opts,
                        const sigset_t *orig_mask);

/* Make dir (created 0700 when missing) this spotd's state directory, before
 * the loop runs: an exclusive lock on DIR/lock, held until child_free(), and
 * from then on the record of the command's process group, DIR/command.json,
 * written at each start and removed once the group is gone.  When the
 * record names a group a previous spotd left running (it died without
 * stopping it: SIGKILL, an OOM kill), that group is stopped first, with
 * the stop signal, the grace period and SIGKILL, and a "leftover" event
 * says so.  A group counts as that spotd's only when its leader, if still
 * there, has the recorded start time and no member started before it, on
 * the same boot: a pid used again is never signalled.  Blocks until the
 * group is gone (at most the grace period and 10 s).  Returns 0; -EBUSY
 * when another spotd holds the lock, -EPERM when the group cannot be
 * signalled, other -errno: with err set in every failure. */
int child_claim_state_dir(struct child *c, const char *dir, char *err, size_t errlen);

/* Start the command once the loop runs.  When it ends for good (exit with
 * no restart left, a stop, or a command that cannot be executed) the child
 * breaks the loop and child_exit_code() holds spotd's exit code.  Returns 0
 * or -ENOMEM. */
int child_start(struct child *c);

/* The stop sequence: the stop signal to the group, grace_ms, then SIGKILL;
 * no restart afterwards.  reason goes to the event log.  Nothing happens
 * when a stop is already under way. */
void child_stop(struct child *c, const char *reason, uint64_t grace_ms);

/* No restart after the command ends: it was asked to finish by other
 * means (the orchestrator's stop over the control socket).  No signal is
 * sent. */
void child_hold(struct child *c);

/* The command's next end restarts it whatever --restart says (once, and
 * counted against --max-restarts): a start that could not begin, such as
 * a restore that failed on its way, is tried again. */
void child_restart_once(struct child *c);

/* A world's pause: when the command has ended (after the stop the caller
 * starts), spotd goes on instead of ending, and on_parked is called (at
 * once when the command is not running).  child_start() starts it again,
 * afresh; child_stop() does nothing meanwhile, a stop signal to spotd ends
 * it, and so does child_end(). */
void child_park(struct child *c, void (*on_parked)(void *arg), void *arg);

/* Undo child_park(c, on_parked, ...) while the command still runs: its
 * end is an end again.  A park with another callback stays. */
void child_unpark(struct child *c, void (*on_parked)(void *arg));

/* While parked (or before the first start): end spotd's loop with code. */
void child_end(struct child *c, int code, const char *reason);

/* Each restart, once its backoff is over, calls fn(arg) instead of
 * starting the command, which then starts at child_restart_now() (a stop
 * meanwhile ends spotd as in the backoff).  NULL: restarts start at once. */
void child_before_restart(struct child *c, void (*fn)(void *arg), void *arg);
void child_restart_now(struct child *c);

/* The command line of the next start; borrowed, outlives the child. */
void child_set_argv(struct child *c, char *const *argv);

/* spotd ends with code, whatever the command's (which the exit event
 * keeps as command_code); -1 undoes it. */
void child_set_exit_code(struct child *c, int code);

/* Send sig to the command's workers: the children of a launcher
 * (torchrun and the like, which die of signals they do not handle), else
 * the command's whole group.  Returns how many were signalled, -ESRCH
 * when the command is not running (or a launcher has no workers), -EAGAIN
 * when a launcher's worker has no handler for sig yet (none is sent). */
int child_signal_workers(struct child *c, int sig);
/* Is the running command a launcher (torchrun, deepspeed, accelerate),
 * whose workers child_signal_workers() signals? */
bool child_runs_launcher(const struct child *c);

/* Other processes spotd starts (hooks) are reaped here too: fn gets the
 * wait status of pid when it ends.  At most CHILD_WATCH_MAX at a time;
 * -ENOSPC beyond. */
#define CHILD_WATCH_MAX 8
typedef void (*child_reaped_fn)(void *arg, int status);
int child_watch(struct child *c, pid_t pid, child_reaped_fn fn, void *arg);
void child_unwatch(struct child *c, pid_t pid);

/* The command's exit code (128 + n when killed by signal n, 126/127 when it
 * could not be executed), valid once the loop has ended. */
int child_exit_code(const struct child *c);
/* The command's own code when it last ended (128+N: killed by signal N);
 * -1 before. */
int child_command_code(const struct child *c);

/* Find cmd the way execvp() would, in the parent, so that a child only has
 * to call execve() (a name with a slash is taken as it is).  Returns 0 with
 * the path in buf, or -ENOENT / -EACCES (found, but nothing executable) /
 * -ENAMETOOLONG. */
int child_resolve(const char *cmd, char *buf, size_t size);

/* In a child between fork() and exec(): every signal disposition back to
 * its default, and the mask set to mask (NULL: nothing blocked), so that
 * the program runs as if spotd were not there.  Async-signal-safe. */
void child_reset_signals(const sigset_t *mask);

/* The environment of a program spotd starts (the command, a hook):
 * spotd's own, less what it withholds, after `first` slots left NULL for
 * the caller's own variables.  Withheld always: the secret options'
 * variables (SPOTD_WORLD_KEY, SPOTD_WEBHOOK).  Withheld unless
 * pass_credentials: the AWS credentials spotd's S3 store may use, and what
 * points an AWS SDK at credentials (AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_SECURITY_TOKEN,
 * AWS_CREDENTIAL_EXPIRATION, AWS_SHARED_CREDENTIALS_FILE,
 * AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI,
 * AWS_CONTAINER_CREDENTIALS_FULL_URI, AWS_CONTAINER_AUTHORIZATION_TOKEN,
 * AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE).  Everything else passes (PATH,
 * HOME, CUDA_*, NCCL_*, PYTHON*, the user's own).  A NULL-terminated array
 * of pointers into environ (the strings are not copied), valid until the
 * environment changes; free() it.  NULL when out of memory. */
char **child_env_new(const struct child *c, size_t first);

/* The command's pid while it runs, else 0. */
pid_t child_pid(const struct child *c);

/* Frees c and its events; takes NULL, returns NULL. */
struct child *child_free(struct child *c);

#endif
