/* orch_impl: what the orchestrator's files share; private to
 * supervisord/orch*.c, whose interface is orch.h.  struct orch, its
 * states, and the functions one part calls in another, by the file that
 * defines them:
 *
 *   orch_decide.c  the decisions: (state, event) -> (next state, actions), no I/O
 *   orch.c         life, triggers, one checkpoint from claim to commit: the
 *                  events decided, the actions carried out
 *   orch_resume.c  resume at start and after a crash, gc
 *   orch_world.c   a world's rounds, the command line, the rendezvous
 *   orch_plan.c    figures, the plan at a notice, spotctl's commands */
#ifndef SPOTD_ORCH_IMPL_H
#define SPOTD_ORCH_IMPL_H

#include <event2/util.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "orch.h"
#include "orch_decide.h"
#include "spot/snap.h"

struct jsonl_msg;
struct notice;
struct rendezvous_ops;

/* Where a world's checkpoint is, in SAVING. */
enum orch_saving { SV_HOOK, SV_METHOD, SV_PREPARE };

/* Without a notice's deadline, how long a trainer may take to save. */
#define SAVE_LIMIT_MS (30 * 60 * 1000)

/* What the last checkpoints measured, for the next notice's plan. */
struct figures {
    int64_t save_ms, upload_ms, commit_ms;
    /* A notice's save that signalled a trainer saving on its own schedule
     * (METHOD_OWN_SCHEDULE), unlike save_ms; -1: none measured yet. */
    int64_t signal_save_ms;
    uint64_t bytes, bytes_sent;
    int64_t step, at_ms;           /* of the last commit */
    int64_t prev_step, prev_at_ms; /* of the one before */
};

/* A committed generation the start may resume from, and, once tried,
 * why it did not restore. */
struct cand {
    uint64_t gen;
    int64_t step;
    int err;
    char why[512];
};

struct orch {
    struct orch_opts o;
    char *job, *store_url, *state_dir;
    const struct method_ops *mops;
    struct method *method;
    struct pool *pool;
    struct store *store;
    struct snap *snap;
    struct control *control;
    struct hooks *hooks;
    enum orch_state state;
    uint64_t newest_gen;           /* the highest generation number seen */
    uint64_t resume_gen;           /* the newest committed: what a restart resumes from */
    /* World: whose shard resume_dir holds, of how many, and the trainer
     * rank this node had then (an elastic world renumbers its trainers). */
    uint32_t restore_rank, restore_size, restored_as;
    int64_t resume_step;
    char resume_dir[4096];
    struct figures fig;
    char last_notice[256];
    /* the checkpoint under way */
    uint64_t gen;
    int64_t step;
    char dir[4096];                /* where the method put its files */
    char reason[160];
    const char *why;               /* "notice", "periodic", "request", "manual", "dir" */
    bool terminating;
    bool told_last;                /* the method was told its save is the last */
    bool adopted;                  /* a terminating notice made the one under way the last */
    struct notice *stop_notice;    /* the terminating notice the last checkpoint serves */
    /* Notices acted on later (A_HOLD): the terminating one with the
     * earliest deadline, far (due NOTICE_HORIZON_MS before it) or come while
     * resuming (acted on once the command runs, or given up when no room is
     * left: held_timer); an advisory one that came while resuming. */
    struct notice *held_stop, *held_advice;
    struct event *held_timer;
    const struct notice *deciding; /* the notice orch_decide() decides: facts far, late */
    int64_t deadline_ms;           /* the checkpoint fails here (a notice's: its give-up) */
    int64_t stop_deadline_ms;      /* the terminating notice's own deadline; 0: none */
    int64_t t_begin, t_saved, t_uploaded;   /* monotonic */
    int64_t t_restore;             /* the restore at start began */
    struct snap_counters counters;
    struct snap_saved saved;
    int exit_code;
    bool finishing;                /* spotd is ending: start nothing new */
    bool saved_by_exit;            /* the method took the command's end as its save */
    bool collecting;               /* snap_gc under way */
    bool collect_again;            /* a commit came meanwhile: once more after it */
    struct event *tick;            /* periodic checkpoints */
    /* a world */
    struct world *world;
    struct rendezvous *rv;         /* --rendezvous store */
    enum orch_saving saving;
    bool aborted;                  /* the world gave the checkpoint under way up */
    char abort_reason[128];
    bool want_stop;                /* a terminating notice for this node */
    bool round_last;               /* the round under way is a terminating notice's */
    bool exit_parks;               /* the command's exit during this save parks it
                                      (a trainer that saves by exiting) */
    bool exited_early;             /* ... and it ended before the save began */
    bool pausing, parked;          /* the command is being stopped / is stopped */
    bool ending;                   /* this node goes once the command is not running */
    bool resumed_once;             /* --resume applies to the first resume only */
    /* The start (and a restart's resume): what the store holds, what was
     * tried.  gc runs only once the job's generations were read, and
     * spares what this spotd neither resumed from nor wrote. */
    enum { RESUME_AUTO, RESUME_FRESH, RESUME_GEN } resume_mode;
    uint64_t resume_want;          /* RESUME_GEN */
    bool gens_read;
    bool gens_all;                 /* every generation was listed, not only the
                                      newest ones through <job>/LATEST */
    uint64_t find_from, find_requests; /* store requests: before, and of the
                                      start's search for the newest generation */
    uint64_t resumed_from;         /* 0: started fresh */
    uint64_t *own;                 /* generations this spotd committed, ascending */
    size_t n_own, cap_own;
    struct cand *cands;            /* newest first */
    size_t n_cands, next_cand;
    int64_t wait_from;             /* monotonic ms the store first failed; 0: it did not */
    unsigned store_tries;
    struct event *retry;           /* the next try of a store that could not be read */
    void (*retry_fn)(struct orch *r);
    bool restarting;               /* a restart of the command waits for its resume */
    bool early_restoring;          /* --early-start: the command runs, its restore not ended */
    bool restart_after_restore;    /* ...and it ended meanwhile: restart once it has */
    /* Generation numbers are claimed (snap_claim), the next one ahead of
     * time: a notice's checkpoint does not wait for the store. */
    uint64_t claimed;              /* claimed and not used yet; 0: none */
    bool claiming;
    bool claim_waits;              /* the checkpoint under way waits for it */
    uint64_t world_want;           /* the generation the world resumes from */
    uint64_t commit_gen;           /* coordinator: the commit record being written */
    struct snap_split *split;      /* the upload waits for the world's split */
    bool split_upload;             /* the round's prepare said split */
    struct follow *follow;         /* the trainers' files, stored as written */
    char *stage;                   /* --stage-dir's STAGE/spotd-H; NULL: none */
    bool staged;                   /* dir is in it: freed once the checkpoint ends */
    uint64_t stage_need;           /* bytes of the generation resumed from */
    bool stage_failed;             /* the last staged checkpoint failed; a commit clears it */
    char master_addr[64];
    unsigned master_port;
    char **argv;                   /* the command, substituted */
    size_t argc;
};

/* ---- orch.c ---- */

/* Decide event ev on r's facts and enter its next state; returns the
 * actions to carry out (enum orch_act), and the state left in *from. */
unsigned orch_event(struct orch *r, enum orch_event ev, enum orch_state *from);
/* Someone to save: the method needs no trainers, or one is connected. */
bool orch_trainers(const struct orch *r);
/* r's state becomes s (a debug line when it changes). */
void orch_set_state(struct orch *r, enum orch_state s);
/* Notice n is decided: when it came, or when it is due (held). */
void orch_act_on(struct orch *r, const struct notice *n);
/* The resume is done (EV_RESUMED): start the command from what was resumed
 * (control socket, method, environment), or end instead. */
void orch_run_command(struct orch *r);
/* --early-start (orch.c): the command starts before its restore ends, and
 * runs on as resumed once it does, or restarts when it fails. */
void orch_run_early(struct orch *r);
void orch_early_restored(struct orch *r);
void orch_early_failed(struct orch *r, const char *msg);
/* The resume ended for a command that runs already (a restart's after an
 * early start's failure): as orch_run_command() without the start. */
void orch_resume_done(struct orch *r);
/* A checkpoint of this node alone, for notice n (or NULL) or why: set
 * up, planned, begun (EV_GO) or not (EV_TOO_LATE). */
void orch_begin_checkpoint(struct orch *r, const struct notice *n, const char *why);
/* The checkpoint set up in r begins (A_START): its number claimed, the hook, the method. */
void orch_start_checkpoint(struct orch *r);
/* Claim the next generation number ahead, when none is held or being claimed. */
void orch_claim_next(struct orch *r);
/* The method's callback: the trainers saved step into dir; the upload begins. */
void orch_on_method_saved(void *arg, int err, const char *msg, int64_t step, const char *dir);
/* The method's save has started: its files are stored as they are written
 * (follow.h), unless the upload is split across the world. */
void orch_follow(struct orch *r);
/* The upload waiting for the world's split goes on, with the rest or without. */
void orch_release_split(struct orch *r, bool rest);
/* The checkpoint's commit record is written (or failed): figures, resume point, gc. */
void orch_on_committed(void *arg, int err, const char *msg);
/* A step of the checkpoint under way failed with msg (EV_FAILED). */
void orch_fail(struct orch *r, int err, const char *msg);
/* What ends a checkpoint, from acts: the stop, the next claim, a world's ready. */
void orch_after(struct orch *r, unsigned acts);
/* The stop (A_STOP_SAVED: the method's, else the stop sequence at once). */
void orch_stop_command(struct orch *r, bool saved);
/* This node goes, with code, its command not running (A_END): now, once a
 * pause's stop has ended the command, or instead of starting it. */
void orch_end(struct orch *r, int code);

/* ---- orch_dirs.c ---- */

/* mkdir -p path; 0 or -errno. */
int orch_make_dirs(const char *path);
/* rm -rf path. */
void orch_remove_tree(const char *path);
/* Remove the entries "gen-*" of STATE/sub except keep (a path or NULL). */
void orch_prune_local(struct orch *r, const char *sub, const char *keep);
/* --stage-dir: its folder for this state directory, made empty.  0, or
 * -errno with the reason in err. */
int orch_stage_open(struct orch *r, char *err, size_t errlen);
/* Remove it and all in it (spotd ends). */
void orch_stage_close(struct orch *r);
/* The checkpoint's folder into r->dir: in the stage when it has room
 * (r->staged), else STATE/work/gen-N. */
void orch_work_dir(struct orch *r);
/* What the stage's room is measured against, from the files of dir. */
void orch_stage_measure(struct orch *r, const char *dir);
/* The staged folder of the checkpoint that ended with err (malloc'ed;
 * NULL: none), for orch_unstage(): r->dir is no longer the stage's. */
char *orch_unstage_take(struct orch *r, int err);
/* A hook_done_fn: remove folder arg and free the string. */
void orch_unstage(void *arg, int code, const char *msg);

/* ---- orch_resume.c ---- */

/* The start: clear STATE/work, list the job's generations, resume. */
void orch_start_listing(struct orch *r);
/* Restore gen (holding step), after the pre-restore hook, then start the command. */
void orch_restore_pick(struct orch *r, uint64_t gen, int64_t step);
/* Restore resume_gen into resume_dir, or take the copy there once it proves exact. */
void orch_restore(struct orch *r);
/* child.c's hook before a restart: resume from the newest commit's checked copy. */
void orch_on_before_restart(void *arg);
/* gen (holding step, its files in dir; 0 and NULL: none) is what a start resumes from. */
void orch_set_resume(struct orch *r, uint64_t gen, int64_t step, const char *dir);
/* Where a restart finds the generation just committed, into buf (made when needed). */
void orch_own_copy(struct orch *r, char *buf, size_t size);
/* A store read at start failed: again(r) later, or refuse after --store-wait. */
void orch_store_retry(struct orch *r, void (*again)(struct orch *), const char *what,
                      const char *msg);
/* The retry timer's callback (r->retry). */
void orch_on_retry(evutil_socket_t fd, short what, void *arg);
/* A store read worked: the next failure has its --store-wait again. */
void orch_store_ok(struct orch *r);
/* The command is not started: spotd ends with 125. */
void orch_refuse_start(struct orch *r);
/* Remember gen as committed by this spotd (gc may collect it). */
void orch_add_own(struct orch *r, uint64_t gen);
/* Garbage collection in the background, once the generations were read. */
void orch_collect(struct orch *r);

/* ---- orch_world.c ---- */

/* The world, once this node's rank is known; -EINVAL with the reason in err. */
int orch_make_world(struct orch *r, uint32_t rank, char *err, size_t errlen);
/* A checkpoint wanted here (A_TRIGGER): the world's coordinator runs it. */
void orch_world_want(struct orch *r, const char *why, int64_t deadline_ms);
/* Nothing under way and the command stopped: wait for the world's resume. */
void orch_maybe_ready(struct orch *r);
void orch_exit_park(struct orch *r);
void orch_exit_unpark(struct orch *r);
bool orch_empty_shard(const struct orch *r);
/* The world's environment and command line for the next start; 0 or -ENOMEM. */
int orch_world_command(struct orch *r);
/* Free the substituted command line. */
void orch_free_argv(struct orch *r);
/* What the rendezvous asks of the orchestrator (rendezvous.h). */
extern const struct rendezvous_ops orch_rv_ops;

/* ---- orch_plan.c ---- */

/* "notice: aws terminate", "notice: drill" into buf. */
void orch_notice_reason(const struct notice *n, char *buf, size_t size);
/* Read STATE/figures.json when there is one (anything odd in it is ignored). */
void orch_figures_load(struct orch *r);
/* Write r->fig to STATE/figures.json. */
void orch_figures_save(struct orch *r);
/* Whether a new checkpoint fits before the notice's deadline (the plan is logged). */
bool orch_plan_fits(struct orch *r);
/* Does a notice's save that is the last (last) signal a trainer that
 * otherwise saves on its own schedule?  Its time is measured apart. */
bool orch_signal_save(const struct orch *r, bool last);
/* When a notice's checkpoint is given up: before notices.c's fallback stop. */
int64_t orch_notice_deadline(const struct orch *r, const struct notice *n);
/* The last moment a checkpoint for terminating notice n may begin: its
 * give-up time less what the last checkpoints took (nothing when unknown). */
int64_t orch_notice_last_start(const struct orch *r, const struct notice *n);
/* Whether terminating notice n is far: its deadline beyond NOTICE_HORIZON_MS. */
bool orch_notice_far(const struct notice *n, int64_t now_ms);
/* Keep notice n for later (A_HOLD); orch_on_held() is r->held_timer's
 * callback; orch_act_on_held() acts on what was held once the command runs
 * (A_HELD). */
void orch_hold(struct orch *r, const struct notice *n);
void orch_on_held(evutil_socket_t fd, short what, void *arg);
void orch_act_on_held(struct orch *r);
/* spotctl's commands on the control socket: status, checkpoint, drill. */
void orch_on_command(void *arg, const char *cmd, const struct jsonl_msg *m, char *reply,
                     size_t len);

#endif
