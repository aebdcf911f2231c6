/* method signal: spotd sends --ckpt-signal (SIGUSR1) to the trainer, which
 * saves into SPOT_CKPT_DIR and then creates the marker SPOT_CKPT_MARKER
 * (SPOT_CKPT_DIR/.spotd-saved) holding the step it saved, or calls
 * ckpt_saved(step).  spotd removes the marker before each signal and polls
 * for it until the deadline.  The stop is the ordinary stop sequence. */
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
};

static void finish(struct method *m, int err, const char *msg, int64_t step)
{
    method_saved_fn done = m->done;

    evtimer_del(m->poll);
    m->done = NULL;
    done(m->arg, err, msg, step, m->dir);
}

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

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct method *m = arg;
    char msg[4400];
    int64_t step = 0;
    int r = read_marker(m->marker, &step, msg, sizeof(msg));

    if (r == 0) {
        finish(m, 0, "", step);
        return;
    }
    if (r == -EINVAL) {
        finish(m, r, msg, -1);
        return;
    }
    if (notice_now_ms() >= m->deadline_ms) {
        snprintf(msg, sizeof(msg), "the trainer did not create '%s' before the deadline "
                 "(it was sent SIG%s; does it handle it, save into SPOT_CKPT_DIR and then "
                 "create SPOT_CKPT_MARKER?)", m->marker,
                 parse_signal_name(m->ctx.signal) ? parse_signal_name(m->ctx.signal) : "?");
        finish(m, -ETIMEDOUT, msg, -1);
    }
}

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
    r = child_signal_workers(m->ctx.child, m->ctx.signal);
    if (r < 0)
        return r;
    m->done = done;
    m->arg = arg;
    m->deadline_ms = deadline_ms > 0 ? deadline_ms : notice_now_ms() + SAVE_LIMIT_MS;
    event_add(m->poll, &tv);
    return 0;
}

static void signal_trainer_saved(struct method *m, int64_t step)
{
    if (m->done)
        finish(m, 0, "", step);
}

static void signal_cancel(struct method *m, const char *reason)
{
    if (m->done)
        finish(m, -ECANCELED, reason, -1);
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
    .trainer_saved = signal_trainer_saved,
    .cancel = signal_cancel,
    .stop = signal_stop,
    .close = signal_close,
};
