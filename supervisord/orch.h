/* orch: the orchestrator, the one place that decides about checkpoints.
 *
 * This first version covers one node and the app method (libckpt):
 *
 *   resuming -> idle -> saving -> uploading -> committing -> draining
 *
 * At start it restores the newest committed generation of the job into
 * the state directory and tells the command where (SPOT_RESUME_DIR,
 * SPOT_RESUME_STEP, SPOT_GEN, SPOT_JOB, SPOT_SOCKET).  A terminating notice
 * makes every trainer save at one step (control.c), the snapshot engine
 * store it as the next generation, and the commit record make it exist;
 * then the command is stopped.  Advisory notices and the periodic timer
 * (--interval) checkpoint the same way and training goes on.  After each
 * commit, generations beyond the newest three are collected.  Every
 * transition is an event-log record. */
#ifndef SPOTD_ORCH_H
#define SPOTD_ORCH_H

#include <stdbool.h>
#include <stdint.h>

#include "spot/notice.h"

struct event_base;
struct child;
struct orch;

/* spotd's exit code after a terminating notice whose checkpoint was
 * committed: preempted, state saved (EX_TEMPFAIL). */
#define ORCH_EXIT_PREEMPTED_SAVED 75

struct orch_opts {
    struct event_base *base;
    struct child *child;
    const char *job;
    const char *store;             /* URL */
    const char *state_dir;         /* created when missing */
    uint64_t grace_ms, margin_ms;
    uint64_t interval_ms;          /* periodic checkpoints; 0: none */
};

/* Returns NULL with the reason in err. */
struct orch *orch_new(const struct orch_opts *o, char *err, size_t errlen);
struct orch *orch_free(struct orch *r);

/* Find and restore what to resume from, set the command's environment,
 * open the control socket, then start the command. */
void orch_start(struct orch *r);

/* A new notice (notices.c hands over every one it has not seen). */
void orch_notice(void *arg, const struct notice *n);

/* A checkpoint was committed for a terminating notice and the command
 * stopped after it. */
bool orch_preempted_saved(const struct orch *r);

#endif
