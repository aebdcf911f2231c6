/* ckpt.h: libckpt, the trainer's side of spotd.
 *
 * This is the only header a trainer includes.  A training loop uses it so:
 *
 *   struct ckpt *c;
 *   ckpt_open(&c);                        // inert when not run under spotd
 *   if (ckpt_resume_dir(c))
 *       load(ckpt_resume_dir(c)), step = ckpt_resume_step(c) + 1;
 *   for (;; step++) {
 *       int a = ckpt_step(c, step);       // a few hundred ns when nothing is asked
 *       if (a == CKPT_SAVE) {
 *           if (save(ckpt_save_dir(c), step) == 0)
 *               ckpt_saved(c, step);
 *           else
 *               ckpt_failed(c, "disk full");
 *       } else if (a == CKPT_STOP) {
 *           break;
 *       }
 *       train_one_step();
 *   }
 *   ckpt_close(c);
 *
 * The library talks to spotd over the Unix socket named by SPOT_SOCKET,
 * with the control protocol of docs/protocols.md.  A handle is used by one
 * thread at a time.  Every ckpt_* function that can fail returns a
 * negative ckpt_error; none of them prints or exits. */
#ifndef CKPT_H
#define CKPT_H

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 2
#define CKPT_VERSION_PATCH 0

/* Errors.  This list only grows; a value never changes meaning.
 *
 *   CKPT_OK           0   success
 *   CKPT_E_INVAL     -1   an argument is invalid (NULL handle, bad step)
 *   CKPT_E_NOMEM     -2   out of memory
 *   CKPT_E_CONNECT   -3   cannot reach spotd's control socket (SPOT_SOCKET)
 *   CKPT_E_PROTOCOL  -4   spotd sent something this library does not understand
 *   CKPT_E_VERSION   -5   spotd speaks a protocol version this library does not
 *   CKPT_E_STATE     -6   the call does not fit the handle's state (saved
 *                         without a save request, for example)
 *   CKPT_E_CLOSED    -7   spotd closed the connection
 *   CKPT_E_IO        -8   a system call failed; errno tells which
 *   CKPT_E_TIMEOUT   -9   spotd did not answer in time
 *   CKPT_E_RESTORE  -10   the checkpoint to resume from could not be restored
 *                         (ckpt_resume_wait(); spotd restarts the command)
 */
enum ckpt_error {
    CKPT_OK = 0,
    CKPT_E_INVAL = -1,
    CKPT_E_NOMEM = -2,
    CKPT_E_CONNECT = -3,
    CKPT_E_PROTOCOL = -4,
    CKPT_E_VERSION = -5,
    CKPT_E_STATE = -6,
    CKPT_E_CLOSED = -7,
    CKPT_E_IO = -8,
    CKPT_E_TIMEOUT = -9,
    CKPT_E_RESTORE = -10,
};

/* What ckpt_step() asks of the training loop. */
enum ckpt_action {
    CKPT_CONTINUE = 0,   /* train on */
    CKPT_SAVE = 1,       /* write a checkpoint into ckpt_save_dir() now, then call
                            ckpt_saved() or ckpt_failed() before the next step */
    CKPT_STOP = 2,       /* spotd is stopping the job (its state is saved): exit */
};

struct ckpt;

/* Connect to spotd through SPOT_SOCKET, introduce this process (its pid,
 * LOCAL_RANK, LOCAL_WORLD_SIZE) and learn what to resume from.  Without
 * SPOT_SOCKET the handle is inert: ckpt_step() always says CONTINUE and
 * nothing is ever requested, so the same trainer runs with or without
 * spotd.  Returns 0 with *ret set, or CKPT_E_CONNECT, CKPT_E_TIMEOUT (no
 * welcome within 10 s), CKPT_E_PROTOCOL, CKPT_E_VERSION, CKPT_E_NOMEM. */
int ckpt_open(struct ckpt **ret);

/* The same with an explicit socket path; NULL gives an inert handle. */
int ckpt_open_at(const char *socket_path, struct ckpt **ret);

/* Close the connection and free the handle.  NULL is fine. */
void ckpt_close(struct ckpt *c);

/* 1 when the handle is inert (not under spotd), else 0. */
int ckpt_inert(const struct ckpt *c);

/* The checkpoint directory to load at start, or NULL for a fresh start;
 * valid until ckpt_close().  ckpt_resume_step() is its step, -1 when none. */
const char *ckpt_resume_dir(const struct ckpt *c);
long long ckpt_resume_step(const struct ckpt *c);

/* Wait until ckpt_resume_dir() is there to load.  Under spotd's
 * --early-start the command starts while its checkpoint is still being
 * restored (so that it imports its framework meanwhile): the folder
 * appears whole, verified, once the restore ends, never in part.  Call it
 * before reading the folder.  timeout_ms < 0: as long as it takes.
 * Returns 0 at once without an early start (or on an inert handle);
 * CKPT_E_RESTORE when the restore failed (exit: spotd starts the command
 * again from a checkpoint that restores), CKPT_E_TIMEOUT, CKPT_E_CLOSED,
 * CKPT_E_PROTOCOL, CKPT_E_IO. */
int ckpt_resume_wait(struct ckpt *c, int timeout_ms);

/* Call once per step, with the step about to run.  It reads what spotd
 * sent, answers spotd's questions, and returns CKPT_CONTINUE,
 * CKPT_SAVE or CKPT_STOP, or CKPT_E_STATE (a save is still open: report it
 * first), CKPT_E_CLOSED (spotd went away; train on, or stop), or
 * CKPT_E_PROTOCOL / CKPT_E_IO.
 *
 * It blocks only when a checkpoint begins: the call after the one that
 * told spotd its step waits (at most 10 s) for the step to save at, which
 * spotd sends once every worker of the node has told its own; otherwise a
 * fast trainer could run past it.  At a terminating notice the call that
 * tells the step waits instead (a hold: up to 5 s, two steps as a rule),
 * so that the step saved is that one; a hold that runs out trains on, and
 * the next call waits.  At most once a second it sends its step to spotd
 * (spotctl status, the training rate). */
int ckpt_step(struct ckpt *c, long long step);

/* Where to write after CKPT_SAVE: a directory spotd created for this
 * process.  NULL when no save is open. */
const char *ckpt_save_dir(const struct ckpt *c);

/* Report the open save: written completely (ckpt_saved, with the step the
 * files hold) or not (ckpt_failed, with a reason for spotd's log).
 * Returns 0, CKPT_E_STATE (no save open), CKPT_E_CLOSED, CKPT_E_IO.
 *
 * Under spotd's signal method (--method signal) no save is ever open: the
 * trainer saves into SPOT_CKPT_DIR when it gets the signal, then calls
 * ckpt_saved() in place of writing the marker file.  So ckpt_saved()
 * without an open save, when connected, tells spotd that SPOT_CKPT_DIR
 * holds step; inert, it is CKPT_E_STATE as before. */
int ckpt_saved(struct ckpt *c, long long step);
int ckpt_failed(struct ckpt *c, const char *reason);

/* Say that path (absolute, or relative to the save's directory), a file
 * of the save being written, is finished: spotd uploads the rest of it
 * now, while the trainer writes the others, instead of after
 * ckpt_saved().  Optional: spotd also follows the files as they grow and
 * stores each once it is closed; this only tells it sooner (a file kept
 * open, a zip that torch.save writes).  Writing the file again after the
 * call costs an upload, never a wrong checkpoint: the save reads every
 * file again.  Returns 0, CKPT_E_INVAL, CKPT_E_CLOSED, CKPT_E_IO; 0 and
 * nothing happens on an inert handle. */
int ckpt_file_done(struct ckpt *c, const char *path);

/* Ask spotd for a checkpoint now (the trainer's own schedule); it comes
 * back through ckpt_step() as CKPT_SAVE.  Returns 0, CKPT_E_CLOSED,
 * CKPT_E_IO; 0 and nothing happens on an inert handle. */
int ckpt_request_save(struct ckpt *c);

/* The socket, for trainers with their own event loop: when it is
 * readable, call ckpt_step().  -1 on an inert handle. */
int ckpt_fd(const struct ckpt *c);

/* A static, human-readable description of err; "unknown error" for values
 * outside the table.  Never NULL. */
const char *ckpt_strerror(int err);

/* The library's version as "MAJOR.MINOR.PATCH"; it can differ from the
 * CKPT_VERSION_* macros a program was compiled with.  Never NULL. */
const char *ckpt_version(void);

#ifdef __cplusplus
}
#endif

#endif
