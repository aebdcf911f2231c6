/* control: spotd's side of the control protocol (docs/protocols.md), on
 * the loop.
 *
 * A Unix socket (mode 0600, peers of another user refused) where the
 * trainer processes of this node connect through libckpt.  Each is a
 * worker, known by its local rank.  control_checkpoint() asks every worker
 * for its step, picks the next step all of them can still reach, asks all
 * of them to save at it, each into its own directory (DIR/w<local rank>),
 * and reports once every worker has said saved, or as soon as one fails,
 * goes away, or the deadline passes (then the others are told to cancel).
 * A checkpoint is never reported saved with a worker missing.
 *
 * Who counts as a worker (docs/protocols.md, "Who counts"): a connection
 * that said hello, unless it went quiet (no step reported within quiet_ms
 * of its hello; a trainer that has started training never does, since
 * ckpt_step() reports its first step at once), and one that reported a
 * step and left, for gone_ms or until a worker of its local rank says
 * hello again.  A connection whose first message does not come within
 * hello_ms is closed, and so is the oldest silent one when every slot is
 * taken: an operator's command always gets in. */
#ifndef SPOTD_CONTROL_H
#define SPOTD_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct control;
struct jsonl_msg;

struct control_opts {
    struct event_base *base;
    const char *path;              /* the socket; created, and removed by control_free() */
    const char *resume_dir;        /* restored checkpoint, NULL for a fresh start: a
                                      worker resumes from resume_dir/w<rank> */
    int64_t resume_step;
    uint64_t resume_gen;
    bool restoring;                /* resume_dir is being restored (--early-start): see
                                      control_restored() */
    bool flat;                     /* resume_dir is the files themselves, not one
                                      w<rank> folder per worker (signal, dir) */
    unsigned expect;               /* local workers a checkpoint needs; 0: as many as
                                      count (see above) */
    /* In ms, 0 for the defaults (5 s, 60 s, 60 s; the tests take less). */
    unsigned hello_ms;             /* for a connection's first message */
    unsigned quiet_ms;             /* for a worker's first step after its hello */
    unsigned gone_ms;              /* a worker that left counts that long */
    void (*on_request)(void *arg); /* a trainer asked for a checkpoint */
    /* A trainer reported step saved outside a checkpoint of this socket
     * (id 0: the signal method's ckpt_saved()). */
    void (*on_saved)(void *arg, int64_t step);
    /* A trainer says a file of the save it is writing is finished
     * (ckpt_file_done()): path as it sent it, unchecked, under PATH_MAX
     * bytes, made absolute when relative to the folder of its open save. */
    void (*on_file_done)(void *arg, const char *path);
    /* A command from spotctl ({"type":"command","cmd":...}): write the
     * answer, one JSON object without the newline, into reply. */
    void (*on_command)(void *arg, const char *cmd, const struct jsonl_msg *m, char *reply,
                       size_t len);
    void *arg;
};

/* err 0 or -errno; step: what the workers' files hold. */
typedef void (*control_saved_fn)(void *arg, int err, const char *msg, int64_t step);

/* Returns NULL with the reason in err. */
struct control *control_new(const struct control_opts *o, char *err, size_t errlen);
/* Not from inside its own callbacks.  Takes NULL, returns NULL. */
struct control *control_free(struct control *c);

/* Workers that count: connected, hello answered, not gone quiet. */
unsigned control_workers(const struct control *c);

/* Every worker answered: step is one less than the smallest step every
 * worker can still reach (the largest answered, less one where the
 * workers hold at it).  Said again, larger, when a worker that held trains
 * on before control_save_at(). */
typedef void (*control_step_fn)(void *arg, int64_t step);

/* Checkpoint generation gen into dir (which exists) before deadline_ms
 * (CLOCK_REALTIME ms, since it comes from a cloud's notice; -EINVAL when
 * 0).  Waits for the local workers it expects (struct control_opts.expect,
 * else as many as count, or as a hello's local_world_size says, at least
 * one) until the deadline.  The workers save at the smallest step each can
 * still reach (the step after the largest they report, or that step where
 * they hold at it); with ask non-NULL the step is the caller's instead
 * (a world's): ask gets the largest, and the checkpoint waits for
 * control_save_at().  Without ask, one worker that is expected alone and
 * has reported a step is not asked: it saves at the next step it reaches.  One at a time: -EBUSY when one is under way.
 * Returns 0 when started; done comes later, on the loop. */
int control_checkpoint(struct control *c, uint64_t gen, const char *dir, int64_t deadline_ms,
                       control_step_fn ask, control_saved_fn done, void *arg);

/* After ask: save at step, one every worker can still reach (-ERANGE
 * otherwise; -EINVAL when no checkpoint waits for one). */
int control_save_at(struct control *c, int64_t step);

/* The checkpoint of generation gen is a terminating notice's: its
 * workers wait at the step they answer (a hold, up to two steps and at
 * most 5 s) so that they save that step, not the next. */
void control_hold_next(struct control *c, uint64_t gen);

/* Give up the checkpoint under way (the workers are told to cancel); done
 * gets -ECANCELED with reason.  Nothing when none is. */
void control_cancel(struct control *c, const char *reason);

/* What a worker that connects from now on resumes from (after a commit,
 * for a command restarted after a crash).  dir NULL: a fresh start. */
int control_set_resume(struct control *c, const char *dir, int64_t step, uint64_t gen);

/* The restore the command started before (control_opts.restoring) ended:
 * error NULL when resume_dir is there, verified, else why not.  Workers
 * whose libckpt waits (ckpt_resume_wait()) are told {"type":"restored"};
 * the others get their welcome only now, or, after a failure, none (the
 * command is restarted). */
void control_restored(struct control *c, const char *error);

/* The step a worker last reported (ckpt_step() sends one a second), -1
 * before any; and the training rate in steps per second, 0 when unknown. */
int64_t control_step(const struct control *c);
double control_rate(const struct control *c);

/* Tell every worker to stop (ckpt_step() returns STOP). */
void control_stop(struct control *c, const char *reason);

#endif
