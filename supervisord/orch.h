/* orch: the orchestrator, the one place that decides about checkpoints.
 *
 * One node, any method (method.h):
 *
 *   resuming -> idle -> saving -> uploading -> committing -> idle ...
 *                                                        \-> draining
 *
 * At start it restores the generation to resume from (--resume: the newest
 * committed one, none, or a given one) into the state directory and tells
 * the command where (SPOT_RESUME_DIR, SPOT_RESUME_STEP, SPOT_GEN, SPOT_JOB,
 * SPOT_SOCKET, and SPOT_CKPT_DIR for the signal and dir methods).  A
 * trigger (a notice, the --interval timer, a trainer's request, spotctl
 * checkpoint, a new folder of the dir method) makes the method produce the
 * checkpoint's files, the snapshot engine store them as the next
 * generation, and the commit record make it exist.  After a terminating
 * notice's commit the command is stopped and spotd exits 75; an advisory
 * notice's checkpoint lets training go on.  Each checkpoint's figures
 * (save, upload and commit times, bytes) are kept in STATE/figures.json;
 * at a notice they predict whether a new checkpoint fits before the
 * deadline, and when it cannot, the newest committed generation is kept
 * and the command stopped at once.  After each commit, generations beyond
 * the newest three are collected, and a command restarted after a crash
 * resumes from the new one.  Every transition is an event-log record;
 * hooks (hooks.h) run at the documented points.
 *
 * In a world (world.h) the coordinator decides instead: a trigger goes to
 * it, and this node's checkpoint runs when the world's round asks (query,
 * prepare), its shard being this node's rank of the generation; the
 * commit comes from the coordinator.  The command starts only at the
 * world's resume, and stops (waiting) when a peer leaves or goes down:
 *
 *   resuming -> waiting -> (resume) -> idle -> saving -> ... -> idle
 *                  ^------- (a peer gone: stop, park) ------/ */
#ifndef SPOTD_ORCH_H
#define SPOTD_ORCH_H

#include <stdbool.h>
#include <stdint.h>

#include "spot/frame.h"
#include "spot/notice.h"

struct event_base;
struct child;
struct orch;
struct cJSON;

/* spotd's exit code after a terminating notice whose checkpoint was
 * committed: preempted, state saved (EX_TEMPFAIL). */
#define ORCH_EXIT_PREEMPTED_SAVED 75

struct orch_opts {
    struct event_base *base;
    struct child *child;
    const char *job;
    const char *store;             /* URL */
    const char *state_dir;         /* created when missing */
    const char *stage_dir;         /* app, criu: checkpoints written in memory; NULL: none */
    uint64_t grace_ms, margin_ms;
    uint64_t interval_ms;          /* periodic checkpoints; 0: none */
    const char *method;            /* "app", "signal", "dir" */
    const char *ckpt_dir;          /* signal and dir methods */
    int ckpt_signal;
    uint64_t settle_ms;
    int ckpt_layout;               /* dir method: enum ckpt_layout */
    const char *ckpt_step_file;    /* a fixed name's step, NULL: its versions count */
    int saved_when;                /* signal, dir: enum method_saved_when */
    int preempt_exit_code;         /* "saved, then exited" */
    bool writers_rank0;            /* a world: only global rank 0 writes checkpoint files */
    bool readers_rank0;            /* ... and only its node gets them back at start */
    const char *resume;            /* "auto", "fresh" ("never") or a generation */
    int on_unrestorable;           /* enum config_unrestorable */
    uint64_t store_wait_ms;        /* at start, retry an unreadable store this long */
    bool preserve_special_modes;   /* restores keep setuid, setgid, sticky, o+w */
    unsigned local_workers;        /* 0: LOCAL_WORLD_SIZE, else as many as connect */
    const char *socket;            /* NULL: STATE/control.sock */
    const char *hooks_dir;         /* NULL: none */
    uint64_t hook_timeout_ms;
    uint64_t drill_window_ms;      /* a drill's deadline when spotctl gives none */
    /* The command line; {rank}, {world_size}, {master_addr}, {master_port}
     * and {gen} in it are replaced at each start.  Borrowed. */
    char *const *argv;
    /* A world (world.h) when world_size > 1; else this node alone. */
    uint32_t rank, world_size;
    bool rank_unknown;             /* rendezvous: ask the coordinator for one */
    bool rendezvous;               /* through the store (rendezvous.h), not peers */
    const char *listen;            /* NULL: peers[rank] */
    const char *const *peers;      /* world_size "ADDR:PORT"; NULL with rendezvous */
    const struct frame_key *key;   /* NULL: --insecure */
    const struct frame_key *job_key; /* signs and checks commit records; NULL: none */
    uint64_t peer_timeout_ms;
    const char *criu;              /* --criu: CRIU's path */
    int criu_stream;               /* --criu-stream: enum config_criu_stream */
    uint32_t min_nodes;            /* elastic below world_size; 0: not elastic */
    uint64_t join_timeout_ms;
    unsigned master_port;
    bool split_upload;             /* replicated state uploaded once, split */
    bool early_start;              /* the command starts while it is restored */
    /* spotctl drill: simulate a notice of kind with that window. */
    void (*drill)(void *arg, int kind, uint64_t window_ms);
    void *drill_arg;
};

/* Returns NULL with the reason in err. */
struct orch *orch_new(const struct orch_opts *o, char *err, size_t errlen);
struct orch *orch_free(struct orch *r);

/* Find and restore what to resume from, set the command's environment,
 * open the control socket, then start the command. */
void orch_start(struct orch *r);

/* A new notice (notices.c hands over every one it has not seen). */
void orch_notice(void *arg, const struct notice *n);

/* Before spotd exits: let the hooks still running end. */
void orch_finish(struct orch *r);

/* spotd's exit code when the orchestrator decides it (75 after a committed
 * preemption checkpoint; 125 when it refused to start the command: a store
 * that stayed unreadable for store_wait_ms, no committed generation that
 * restores, a pre-restore hook's refusal), else -1: the command's. */
int orch_exit_code(const struct orch *r);

/* Its state as `spotctl status` shows it (job, rank, state, step,
 * steps_per_s, committed_gen, the world's coordinator and alive...), added
 * to o. */
void orch_status(struct orch *r, struct cJSON *o);

/* A far terminating notice is held (NOTICE_HORIZON_MS): true, with when its
 * checkpoint begins and its deadline (UTC ms) in the ret_ values. */
bool orch_planned(const struct orch *r, int64_t *ret_checkpoint_ms, int64_t *ret_deadline_ms);

#endif
