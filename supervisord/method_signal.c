/* method signal: spotd sends --ckpt-signal (SIGUSR1) to the trainer, which
 * saves into SPOT_CKPT_DIR and then says so, in one of two ways
 * (--saved-when):
 *
 *   marker  it creates the marker SPOT_CKPT_MARKER (SPOT_CKPT_DIR/.spotd-saved)
 *           holding the step it saved, or calls ckpt_saved(step); the
 *           generation is SPOT_CKPT_DIR as it is then
 *   exit    it exits with --preempt-exit-code (75) or 0, the habit of
 *           trainers that save on SIGTERM; the generation is the newest
 *           checkpoint (named as ckptname.h reads names) that appeared or
 *           changed in SPOT_CKPT_DIR after the signal, linked under its name
 *   auto    whichever comes first (the default)
 *
 * spotd removes the marker before each signal and polls for it until the
 * deadline.  A launcher (torchrun) gets no signal itself: its workers do,
 * once it has started them.  The stop is the ordinary stop sequence.  With
 * --ckpt-dir (the trainer's own folder), the resumed checkpoint is put back
 * there at start (ckptdir_place). */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "child.h"
#include "method.h"
#include "spot/ckptdir.h"
#include "spot/log.h"
#include "spot/notice.h"
#include "spot/parse.h"

#define MARKER ".spotd-saved"
#define POLL_MS 50
/* Without a deadline (periodic checkpoints), how long a save may take. */
#define SAVE_LIMIT_MS (30 * 60 * 1000)

struct method {
    struct method_ctx ctx;
    char dir[4096], marker[4200];
    struct event *poll;
    int64_t deadline_ms;
    method_saved_fn done;
    void *arg;
    bool last;                     /* the next save is the notice's */
    bool sent;                     /* the signal went (else: no workers yet) */
    bool launcher;                 /* it went to a launcher's workers */
    uint64_t gen;
    char gen_dir[4096];
    char out[4400];                /* where the exit's checkpoint is linked */
    struct ckptdir_seen seen;      /* what SPOT_CKPT_DIR held at the signal */
};

static void finish(struct method *m, int err, const char *msg, int64_t step,
                   const char *dir)
{
    method_saved_fn done = m->done;

    evtimer_del(m->poll);
    m->done = NULL;
    done(m->arg, err, msg, step, dir);
}

static const char *sig_name(const struct method *m)
{
    const char *s = parse_signal_name(m->ctx.signal);
    return s ? s : "?";
}

/* ---- the operations ------------------------------------------------------ */

static void on_poll(evutil_socket_t fd, short what, void *arg);

static struct method *signal_open(const struct method_ctx *ctx, char *err, size_t errlen)
{
    struct method *m = calloc(1, sizeof(*m));

    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->ctx = *ctx;
    if (ctx->ckpt_dir)
        snprintf(m->dir, sizeof(m->dir), "%s", ctx->ckpt_dir);
    else
        snprintf(m->dir, sizeof(m->dir), "%s/ckpt", ctx->state_dir);
    snprintf(m->marker, sizeof(m->marker), "%s/" MARKER, m->dir);
    if (mkdir(m->dir, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create the checkpoint directory '%s': %s", m->dir,
                 strerror(errno));
        free(m);
        return NULL;
    }
    m->poll = event_new(ctx->base, -1, EV_PERSIST, on_poll, m);
    if (!m->poll) {
        snprintf(err, errlen, "out of memory");
        free(m);
        return NULL;
    }
    /* The trainer's own folder: it resumes from what it finds there. */
    if (ctx->ckpt_dir && ctx->resume_dir)
        ckptdir_place(m->dir, ctx->resume_dir, ctx->resume_step, (enum ckpt_layout)ctx->layout);
    setenv("SPOT_CKPT_DIR", m->dir, 1);
    setenv("SPOT_CKPT_MARKER", m->marker, 1);
    return m;
}

static int signal_save(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                       method_saved_fn done, void *arg)
{
    struct timeval tv = { 0, POLL_MS * 1000 };
    int r;

    if (m->done)
        return -EBUSY;
    if (unlink(m->marker) < 0 && errno != ENOENT)
        return -errno;
    if (m->ctx.saved_when != METHOD_SAVED_MARKER && ckptdir_mark(m->dir, &m->seen) < 0)
        m->seen.n = 0;
    m->sent = false;
    if ((r = method_send_signal(m->ctx.child, m->ctx.signal, &m->sent, &m->launcher)) < 0)
        return r;
    if (!m->sent)
        log_msg(LOGL_INFO, "the workers of launcher pid %d are not there yet, or have no "
                "handler for SIG%s yet: it goes to them once they have", (int)child_pid(m->ctx.child), sig_name(m));
    /* The trainer may save by exiting: that is no failure to restart. */
    if (m->last && m->ctx.saved_when != METHOD_SAVED_MARKER)
        child_hold(m->ctx.child);
    m->done = done;
    m->arg = arg;
    m->gen = gen;
    snprintf(m->gen_dir, sizeof(m->gen_dir), "%s", dir);
    m->deadline_ms = deadline_ms > 0 ? deadline_ms : notice_now_ms() + SAVE_LIMIT_MS;
    event_add(m->poll, &tv);
    return 0;
}

static const char *signal_writes(struct method *m)
{
    return m->dir;
}

static void signal_last(struct method *m)
{
    m->last = true;
}

static bool signal_exited(struct method *m, int code);

/* Each save signals the trainer: the notice's is of its newest state. */
static bool signal_saves_on_signal(struct method *m)
{
    return true;
}

static bool signal_may_exit(struct method *m)
{
    return m->ctx.saved_when != METHOD_SAVED_MARKER;
}

static void signal_trainer_saved(struct method *m, int64_t step)
{
    if (m->done)
        finish(m, 0, "", step, m->dir);
}

static void signal_committed(struct method *m, const char *dir)
{
    ckptdir_unstage(m->dir, dir);
}

static void signal_cancel(struct method *m, const char *reason)
{
    if (m->done)
        finish(m, -ECANCELED, reason, -1, m->dir);
}

static void signal_stop(struct method *m, const char *reason, uint64_t grace_ms)
{
    child_stop(m->ctx.child, reason, grace_ms);
}

static void signal_close(struct method *m)
{
    if (!m)
        return;
    event_free(m->poll);
    free(m);
}

const struct method_ops method_signal = {
    .name = "signal",
    .open = signal_open,
    .save = signal_save,
    .writes = signal_writes,
    .last = signal_last,
    .committed = signal_committed,
    .exited = signal_exited,
    .may_exit = signal_may_exit,
    .saves_on_signal = signal_saves_on_signal,
    .trainer_saved = signal_trainer_saved,
    .cancel = signal_cancel,
    .stop = signal_stop,
    .close = signal_close,
};

/* ---- the marker ------------------------------------------------------------ */

/* The marker's content: the step, in decimal; empty when not given. */
static int read_marker(const char *path, int64_t *step, char *msg, size_t msglen)
{
    char buf[64];
    uint64_t v;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd < 0)
        return -errno;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0)
        return -EIO;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    if (n == 0) {
        *step = 0;
        return 0;
    }
    if (parse_u64(buf, 0, INT64_MAX, &v) < 0) {
        snprintf(msg, msglen, "the marker '%s' holds '%.32s'; write the step saved, in "
                 "decimal (or nothing)", path, buf);
        return -EINVAL;
    }
    *step = (int64_t)v;
    return 0;
}

/* The marker, when this mode takes it: 1 when it finished the save. */
static int check_marker(struct method *m)
{
    char msg[4400];
    int64_t step = 0;
    int r;

    if (m->ctx.saved_when == METHOD_SAVED_EXIT)
        return 0;
    r = read_marker(m->marker, &step, msg, sizeof(msg));
    if (r == 0)
        finish(m, 0, "", step, m->dir);
    else if (r == -EINVAL)
        finish(m, r, msg, -1, m->dir);
    return r == 0 || r == -EINVAL;
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct method *m = arg;
    char msg[4400];
    int r;

    if (!m->sent &&
        (r = method_send_signal(m->ctx.child, m->ctx.signal, &m->sent, &m->launcher)) < 0) {
        snprintf(msg, sizeof(msg), "cannot send SIG%s to the trainer: %s", sig_name(m),
                 strerror(-r));
        finish(m, r, msg, -1, m->dir);
        return;
    }
    if (check_marker(m) || notice_now_ms() < m->deadline_ms)
        return;
    if (!m->sent)
        snprintf(msg, sizeof(msg), "the workers of launcher pid %d were not there, or had no "
                 "handler for SIG%s, before the deadline: it was never sent", (int)child_pid(m->ctx.child), sig_name(m));
    else if (m->ctx.saved_when == METHOD_SAVED_EXIT)
        snprintf(msg, sizeof(msg), "the command did not exit before the deadline (it was sent "
                 "SIG%s; with --saved-when exit it saves into '%s' and exits with code %d)",
                 sig_name(m), m->dir, m->ctx.exit_code);
    else
        snprintf(msg, sizeof(msg), "the trainer did not create '%s' before the deadline "
                 "(it was sent SIG%s; does it handle it, save into SPOT_CKPT_DIR and then "
                 "create SPOT_CKPT_MARKER%s?)", m->marker, sig_name(m),
                 m->ctx.saved_when == METHOD_SAVED_AUTO ? ", or exit" : "");
    finish(m, -ETIMEDOUT, msg, -1, m->dir);
}

/* ---- "saved, then exited" ------------------------------------------------ */

/* The command ended while the save was under way.  A marker there counts
 * first; else, where this mode takes an exit, the newest checkpoint that
 * appeared after the signal; else the save fails, saying what was missing. */
static bool signal_exited(struct method *m, int code)
{
    char name[256], why[1024], fixed_why[4500], msg[16384];
    int64_t step, fixed;
    bool counts;
    int err;

    if (!m->done)
        return false;
    if (check_marker(m))
        return true;
    counts = method_exit_counts(code, m->ctx.exit_code, m->launcher);
    if (m->ctx.saved_when == METHOD_SAVED_MARKER || !m->sent || !counts) {
        snprintf(msg, sizeof(msg), "the command exited with code %d %s SIG%s, before it "
                 "created the marker '%s'%s", code, m->sent ? "after" : "before", sig_name(m),
                 m->marker, m->ctx.saved_when == METHOD_SAVED_MARKER ? " (--saved-when marker)"
                 : counts ? "" : "; a trainer that saves on the signal and exits says so with "
                 "code 0 or --preempt-exit-code");
        finish(m, -ECANCELED, msg, -1, m->dir);
        return true;
    }
    /* A fixed-name one (last.pt) is the step its step file names, else
     * the step after the one resumed from. */
    fixed_why[0] = '\0';
    fixed = m->ctx.step_file ? ckptdir_fixed_step(m->dir, m->ctx.step_file, fixed_why,
                                                  sizeof(fixed_why))
                             : m->ctx.resume_step + 1;
    step = ckptdir_newest_since(m->dir, &m->seen, (enum ckpt_layout)m->ctx.layout, fixed, name,
                                sizeof(name), why, sizeof(why));
    if (step < 0) {
        snprintf(msg, sizeof(msg), "the command exited with code %d after SIG%s, but no "
                 "checkpoint of --ckpt-layout %s appeared in '%s' after the signal%s%s%s%s; "
                 "a trainer that saves under another name creates the marker '%s' once saved",
                 code, sig_name(m), ckptname_layout_name((enum ckpt_layout)m->ctx.layout),
                 m->dir, why[0] ? ": " : "", why, fixed_why[0] ? "; a fixed name's step: " : "",
                 fixed_why, m->marker);
        finish(m, -ENOENT, msg, -1, m->dir);
        return true;
    }
    if ((err = ckptdir_link(m->dir, name, m->gen_dir, m->gen, m->out, sizeof(m->out), msg,
                            sizeof(msg))) < 0) {
        finish(m, err, msg, -1, m->dir);
        return true;
    }
    log_msg(LOGL_INFO, "the command saved, then exited (code %d%s): '%s' (step %lld) is the "
            "checkpoint", code, code == 1 && m->launcher ? ", the launcher's for "
            "its workers' exit" : "", name, (long long)step);
    if (!m->last)
        log_msg(LOGL_WARN, "the command exited after a periodic checkpoint's SIG%s: a trainer "
                "that exits once it saved needs a signal it survives for --interval, or runs "
                "--method dir --saved-when exit and saves on its own schedule", sig_name(m));
    finish(m, 0, "", step, m->out);
    return true;
}
