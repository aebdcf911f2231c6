/* hooks: the operator's executables in --hooks-dir, run at fixed points.
 *
 *   on-notice        a notice arrived                (exit code logged)
 *   pre-checkpoint   before the trainers are asked   (non-zero fails the checkpoint)
 *   post-checkpoint  after the commit, or a failure  (exit code logged)
 *   pre-restore      before a generation is restored (non-zero: spotd does not start)
 *   post-restore     after it was restored           (exit code logged)
 *
 * A hook is run as HOOKS_DIR/NAME with argv [path, NAME], never through a
 * shell, with stdin /dev/null, in its own process group, and with SPOT_HOOK,
 * SPOT_JOB, SPOT_RANK, SPOT_GEN, SPOT_STEP, SPOT_DIR, SPOT_REASON,
 * SPOT_DEADLINE_MS and SPOT_RESULT added to spotd's environment (empty
 * when they do not apply), less what spotd withholds from the command too
 * (child_env_new: its secrets, and the cloud credentials unless
 * --pass-credentials).  One still running after --hook-timeout is
 * killed and counts as failed.  A missing hook is not an error. */
#ifndef SPOTD_HOOKS_H
#define SPOTD_HOOKS_H

#include <stdint.h>

struct event_base;
struct child;
struct hooks;

struct hook_env {
    const char *job, *dir, *reason, *result;
    uint64_t gen;                  /* 0: none */
    int64_t step;                  /* -1: none */
    int64_t deadline_ms;           /* 0: none */
};

/* code: the hook's exit code (128 + n when killed by signal n), or -1 when
 * it could not run or ran out of time (msg says which). */
typedef void (*hook_done_fn)(void *arg, int code, const char *msg);

/* dir NULL: no hooks, every hooks_run() answers -ENOENT. */
struct hooks *hooks_new(struct event_base *base, struct child *child, const char *dir,
                        uint64_t timeout_ms);
struct hooks *hooks_free(struct hooks *h);

/* Start hook name.  Returns 0 (done follows on the loop; done may be NULL),
 * -ENOENT when there is no such executable hook, or another -errno. */
int hooks_run(struct hooks *h, const char *name, const struct hook_env *env, hook_done_fn done,
              void *arg);

/* Run the loop until the hooks still running have ended (each within its
 * timeout): spotd calls it before exiting, so that a post-checkpoint hook
 * after the last checkpoint is not cut short. */
void hooks_drain(struct hooks *h);

#endif
