/* method: how the files of a checkpoint come to be.
 *
 *   app     the trainer saves through libckpt when asked (method_app.c)
 *   signal  spotd sends a signal; the trainer saves into SPOT_CKPT_DIR and
 *           creates the marker file there (method_signal.c)
 *   dir     the trainer saves on its own schedule into --ckpt-dir (folders
 *           or files); spotd uploads each new complete one (method_dir.c)
 *   criu    CRIU dumps the command's process tree (method_criu.c)
 *
 * The orchestrator (orch.c) drives every method through these operations
 * and knows nothing else about them. */
#ifndef SPOTD_METHOD_H
#define SPOTD_METHOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct child;
struct control;
struct method;
struct mf_file;
struct snap;
struct snap_counters;

struct method_ctx {
    struct event_base *base;
    struct child *child;
    struct control *control;       /* the node's control socket (app) */
    const char *state_dir;
    const char *ckpt_dir;          /* signal: SPOT_CKPT_DIR; dir: the watched directory */
    int signal;                    /* signal: --ckpt-signal; dir: at a notice (saved_when) */
    int saved_when;                /* signal, dir: enum method_saved_when */
    int exit_code;                 /* --preempt-exit-code: "saved, then exited" */
    uint64_t settle_ms;            /* dir: unchanged this long means complete */
    int layout;                    /* dir: enum ckpt_layout */
    const char *step_file;         /* --ckpt-step-file: a fixed name's step, or NULL */
    int64_t resume_step;           /* dir: folders up to this step are not new */
    void (*found)(void *arg);      /* dir: a new complete checkpoint is there */
    char *const *argv;             /* criu: the command line, to wrap (child_set_argv) */
    const char *resume_dir;        /* criu: the restored generation, NULL: none */
    uint64_t resume_gen;           /* criu: its number, and the rank restored */
    uint32_t resume_rank;
    const char *criu;              /* criu: --criu, NULL: "criu" in PATH */
    int criu_stream;               /* criu: enum config_criu_stream */
    struct snap *snap;             /* criu: where streamed dumps are chunked (imgstream.h) */
    void *arg;
};

/* err 0 or -errno with msg; on success the checkpoint's files are in dir
 * (for app and signal, the dir given to save; for dir, the folder found)
 * and hold step.  -EALREADY: the save ended with nothing newer than what
 * was saved before (dir: the trainer saved again the step it had). */
typedef void (*method_saved_fn)(void *arg, int err, const char *msg, int64_t step,
                                const char *dir);

/* What a method is, for the orchestrator's decisions (method_ops.flags). */
enum {
    /* Its trainers connect through libckpt and save when asked: a checkpoint
     * needs a connected one, and the control socket counts them. */
    METHOD_WORKERS = 1 << 0,
    /* It cannot serve a world where every rank writes: its checkpoints
     * appear on each node's own schedule, so the nodes cannot agree on a
     * step (where only global rank 0 writes, its node's are the world's). */
    METHOD_NO_WORLD = 1 << 1,
    /* Its periodic checkpoints are the trainer's own saves, taken as they
     * are: a notice's save that signals the trainer (saves_on_signal)
     * takes another time, measured apart. */
    METHOD_OWN_SCHEDULE = 1 << 2,
};

/* When a save asked for by a signal is complete (--saved-when). */
enum method_saved_when {
    /* signal: the marker, ckpt_saved(), or the command's exit with
     * --preempt-exit-code or 0, whichever first; dir: no signal. */
    METHOD_SAVED_AUTO,
    METHOD_SAVED_MARKER,           /* the marker or ckpt_saved() only */
    /* The command's exit with --preempt-exit-code or 0: the newest
     * checkpoint that appeared in --ckpt-dir after the signal (dir: the
     * signal goes at a terminating notice). */
    METHOD_SAVED_EXIT,
};

struct method_ops {
    const char *name;
    unsigned flags;                /* METHOD_* */
    /* The chunk size its saves are cut into; 0: the store's default.  A
     * dump's memory changes in runs of pages: smaller chunks let more of
     * the unchanged ones be skipped. */
    uint32_t chunk_size;
    /* Files (fnmatch(3) pattern) a restore leaves in the store: the
     * method reads them from there itself (criu: its pages, imgstream.h).
     * NULL: a restore writes every file. */
    const char *restore_leaves;
    /* Returns NULL with the reason in err.  Sets the command's
     * environment (SPOT_CKPT_DIR...) before it starts. */
    struct method *(*open)(const struct method_ctx *ctx, char *err, size_t errlen);
    /* Save generation gen before deadline_ms (CLOCK_REALTIME ms, 0: none).
     * dir exists and is empty; the method may put the files elsewhere and
     * say where.  Returns 0 and calls done later, on the loop, or -EBUSY
     * (one under way), -EALREADY (nothing newer than what was saved: dir),
     * or another -errno. */
    int (*save)(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                method_saved_fn done, void *arg);
    /* A world's checkpoint (world.h), where the coordinator picks the
     * step: like save, but once the trainers' largest step is known it
     * goes to ask, and the save waits for save_at() with the world's step.
     * NULL: the method cannot tell its step (the world's save starts with
     * save, at the coordinator's word). */
    int (*query)(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                 void (*ask)(void *arg, int64_t step), method_saved_fn done, void *arg);
    int (*save_at)(struct method *m, int64_t step);
    /* Why save() returned -EALREADY, for the log: what the method saw.
     * NULL: it says nothing more than "nothing new". */
    void (*why_none)(struct method *m, char *buf, size_t size);
    /* The folder to tell the command to resume from (SPOT_RESUME_DIR) for
     * the generation of step whose files are in dir.  NULL: dir. */
    void (*resume_path)(struct method *m, const char *dir, int64_t step, char *buf,
                        size_t size);
    /* The next save is the last one: the stop follows it.  NULL: the
     * method makes no difference. */
    void (*last)(struct method *m);
    /* The save is uploaded: may it be committed?  false, with why, when
     * it may no longer stand for the command.  NULL: it may. */
    bool (*stands)(struct method *m, char *why, size_t size);
    /* The save in dir is committed: a restart of the command resumes from
     * it.  NULL: the command finds it in SPOT_RESUME_DIR itself. */
    void (*committed)(struct method *m, const char *dir);
    /* The command ended with code (its own) while a save was under way,
     * and nothing restarts it: true when the method takes that as its
     * answer, calling done (at once or later on the loop); false: the
     * orchestrator gives the save up.  NULL: false. */
    bool (*exited)(struct method *m, int code);
    /* May the save under way end the command (a trainer that saves on
     * the signal and exits)?  A world's node then waits for the world
     * instead of ending when it does.  NULL: false. */
    bool (*may_exit)(struct method *m);
    /* Does the trainer save anew when a terminating notice's save signals
     * it (so that a periodic save under way at the notice does not serve
     * it, in a world too)?  NULL: false. */
    bool (*saves_on_signal)(struct method *m);
    /* The folder the trainer writes the save under way into, for spotd to
     * upload its files while they are written (follow.h).  NULL, or NULL
     * returned: none. */
    const char *(*writes)(struct method *m);
    /* The files of the save just made that are not in its dir, their
     * chunks stored already (snap_save_req.streamed), valid until the
     * next save; what storing them cost is added into c.  NULL, or NULL
     * returned: none. */
    const struct mf_file *(*streamed)(struct method *m, size_t *n, struct snap_counters *c);
    /* Give up the save under way: done gets -ECANCELED.  Nothing when
     * none is. */
    void (*cancel)(struct method *m, const char *reason);
    /* A trainer said, through libckpt, that it saved step (ckpt_saved()
     * with no save open).  NULL: the method does not take that. */
    void (*trainer_saved)(struct method *m, int64_t step);
    /* The last checkpoint is committed: end the command, within grace_ms of
     * the stop signal. */
    void (*stop)(struct method *m, const char *reason, uint64_t grace_ms);
    /* Takes NULL.  Not from inside its own callbacks. */
    void (*close)(struct method *m);
};

extern const struct method_ops method_app, method_signal, method_dir, method_criu;

/* By name ("app", "signal", "dir", "criu"); NULL when unknown (method.c). */
const struct method_ops *method_find(const char *name);

/* Sends sig to the command's workers (child_signal_workers), or, to a
 * launcher that has started none yet or whose workers have no handler for
 * it yet (torch takes seconds to import), leaves *sent false for a later
 * try.  *launcher: it went to a launcher's
 * workers.  Returns 0 or -errno (-ESRCH: the command is not running). */
int method_send_signal(struct child *c, int sig, bool *sent, bool *launcher);

/* Does the command's exit with code say "saved, then exited"?  0 and
 * exit_code (--preempt-exit-code) do, and 1 from a launcher, which folds
 * every worker's code into it (torchrun). */
bool method_exit_counts(int code, int exit_code, bool launcher);

#endif
