/* method dir: the trainer saves on its own schedule into --ckpt-dir, the
 * way it already does: numbered folders (Hugging Face's checkpoint-500/,
 * DCP's step-500/), files with the step in the name (ckpt-000500.pt,
 * Lightning's epoch=3-step=500.ckpt), or one file of a fixed name rewritten
 * at each save (last.pt); --ckpt-layout says which, auto any
 * (spot/ckptname.h reads the names).  A fixed-name one's step is the
 * number in --ckpt-step-file, else one more than the last handed out: each
 * new version (its signature) is the next checkpoint.
 *
 * spotd scans the directory (woken by inotify, and every settle/4 for the
 * settle clock).  A checkpoint is complete when it was renamed into place,
 * when a folder holds the file its writer writes last (.spotd-complete,
 * trainer_state.json, .metadata), or when nothing in it (names, sizes,
 * mtimes) changed for --settle.  The newest complete one beyond what was
 * handed out before is offered to the orchestrator (ctx.found), which
 * saves it in the background: the checkpoint is linked, under its own
 * name, into the generation's folder (the trainer may delete or rewrite
 * its files while the upload runs; a fixed-name one, rewritten in place,
 * is copied), so that a generation holds
 * "checkpoint-500/..." or "ckpt-000500.pt" as the trainer wrote it.  At a
 * notice there is nothing to ask the trainer: the newest complete one not
 * yet saved is the checkpoint, or there is none (-EALREADY).  With
 * --saved-when exit (a trainer that saves on SIGTERM and exits), the
 * notice's save sends --ckpt-signal and waits for the command's exit: the
 * newest one there then is the checkpoint, complete since its writer is
 * gone.
 *
 * At start, the generation resumed from is linked back into --ckpt-dir
 * under its name, where the trainer looks for its newest checkpoint;
 * nothing of the trainer's there is removed or overwritten. */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "child.h"
#include "method.h"
#include "spot/ckptdir.h"
#include "spot/log.h"
#include "spot/notice.h"
#include "spot/parse.h"

#define ENTRIES_MAX 512
#define RENAMED_MAX 64
/* Without a deadline, how long a save that waits for the exit may take. */
#define EXIT_LIMIT_MS (30 * 60 * 1000)

struct entry {
    char name[256];
    int64_t step;
    bool is_dir;
    bool renamed;                  /* moved into place: written whole */
    bool fixed;                    /* a fixed name (last.pt): step not in it */
    uint64_t sig;                  /* of names, sizes and mtimes */
    int64_t changed_ms;            /* when sig last changed */
    bool seen;                     /* in this scan */
};

struct method {
    struct method_ctx ctx;
    enum ckpt_layout layout;
    char dir[4096];
    int ino_fd;
    struct event *ino_ev, *scan, *now;
    struct entry e[ENTRIES_MAX];
    size_t n;
    char renamed[RENAMED_MAX][256];    /* names moved in since the last scan */
    size_t n_renamed;
    int64_t handed;                /* highest step handed out (or resumed from) */
    int64_t ready_step;            /* newest complete one beyond handed, -1: none */
    char ready[256];
    bool ready_fixed;              /* ready is a fixed-name one: copied, not linked */
    uint64_t fixed_sig;            /* the fixed-name one handed out last, or resumed */
    bool stepped;                  /* the last scan saw a name with a step */
    char ignored[1024];            /* names of the last scan that did not count, and why */
    method_saved_fn done;
    void *arg;
    bool waiting;                  /* save() waits for one to complete */
    bool last;                     /* the next save is the notice's */
    bool exiting;                  /* save() waits for the command's exit */
    bool sent, launcher;           /* the signal went (to a launcher's workers) */
    bool writer_gone;              /* the command saved and exited: all count */
    int64_t deadline_ms;
    char gen_dir[4096];            /* the generation's folder, from save() */
    uint64_t gen;
    char out[4400];
};

static void scan(struct method *m);
static void refresh(struct method *m, int64_t now);
static void read_inotify(struct method *m);
static void deliver(struct method *m);
static void deliver_fixed(struct method *m);
static uint64_t fixed_there(struct method *m);
static int wait_exit(struct method *m, int64_t deadline_ms);
static void exit_tick(struct method *m, int64_t now);

/* ---- the operations ------------------------------------------------------ */

static void on_scan(evutil_socket_t fd, short what, void *arg);
static void on_inotify(evutil_socket_t fd, short what, void *arg);
static void on_now(evutil_socket_t fd, short what, void *arg);

static struct method *dir_open(const struct method_ctx *ctx, char *err, size_t errlen)
{
    struct method *m = calloc(1, sizeof(*m));
    uint64_t every = ctx->settle_ms / 4;
    struct timeval tv;

    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->ctx = *ctx;
    m->layout = (enum ckpt_layout)ctx->layout;
    m->ino_fd = -1;
    m->handed = ctx->resume_step;
    m->ready_step = -1;
    if (!ctx->ckpt_dir) {
        snprintf(err, errlen, "the dir method needs --ckpt-dir: the directory the trainer "
                 "saves its checkpoints into");
        free(m);
        return NULL;
    }
    snprintf(m->dir, sizeof(m->dir), "%s", ctx->ckpt_dir);
    if (mkdir(m->dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create --ckpt-dir '%s': %s", m->dir, strerror(errno));
        free(m);
        return NULL;
    }
    m->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (m->ino_fd < 0 ||
        inotify_add_watch(m->ino_fd, m->dir,
                          IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR) < 0) {
        snprintf(err, errlen, "cannot watch --ckpt-dir '%s': %s", m->dir, strerror(errno));
        if (m->ino_fd >= 0)
            close(m->ino_fd);
        free(m);
        return NULL;
    }
    m->ino_ev = event_new(ctx->base, m->ino_fd, EV_READ | EV_PERSIST, on_inotify, m);
    m->scan = event_new(ctx->base, -1, EV_PERSIST, on_scan, m);
    m->now = evtimer_new(ctx->base, on_now, m);
    if (every < 100)
        every = 100;
    if (every > 1000)
        every = 1000;
    tv = (struct timeval){ (time_t)(every / 1000), (suseconds_t)(every % 1000) * 1000 };
    if (!m->ino_ev || !m->scan || !m->now || event_add(m->ino_ev, NULL) < 0 ||
        event_add(m->scan, &tv) < 0) {
        snprintf(err, errlen, "out of memory");
        m->ctx.child = NULL;
        method_dir.close(m);
        return NULL;
    }
    if (ctx->resume_dir) {
        ckptdir_place(m->dir, ctx->resume_dir, ctx->resume_step, m->layout);
        m->fixed_sig = fixed_there(m);
    }
    setenv("SPOT_CKPT_DIR", m->dir, 1);
    return m;
}

/* Is a checkpoint newer than the last handed out still being written? */
static bool pending(const struct method *m)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].step > m->handed)
            return true;
    return false;
}

static int dir_save(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                    method_saved_fn done, void *arg)
{
    int r;

    if (m->done)
        return -EBUSY;
    m->gen = gen;
    m->deadline_ms = deadline_ms;
    snprintf(m->gen_dir, sizeof(m->gen_dir), "%s", dir);
    if (m->last && m->ctx.saved_when == METHOD_SAVED_EXIT) {
        if ((r = wait_exit(m, deadline_ms)) == 0) {
            m->done = done;
            m->arg = arg;
        }
        return r;
    }
    /* What the directory holds now, not at the last scan (a second ago, or
     * before inotify's news was read). */
    read_inotify(m);
    refresh(m, notice_now_ms());
    if (m->ready_step <= m->handed && !pending(m))
        return -EALREADY;
    m->done = done;
    m->arg = arg;
    if (m->ready_step <= m->handed) {
        /* The trainer is writing one: wait for it, up to the deadline. */
        m->waiting = true;
        m->deadline_ms = deadline_ms;
        log_msg(LOGL_INFO, "waiting for the checkpoint being written in '%s'", m->dir);
        return 0;
    }
    deliver(m);
    return 0;
}

/* Why save() had nothing: what the directory held, and why none counted. */
static void dir_why_none(struct method *m, char *buf, size_t size)
{
    if (m->ignored[0])
        snprintf(buf, size, "none of what '%s' holds is a checkpoint of --ckpt-layout %s: %s",
                 m->dir, ckptname_layout_name(m->layout), m->ignored);
    else
        snprintf(buf, size, "'%s' holds no checkpoint yet", m->dir);
}

/* The folder a command is told to resume from (SPOT_RESUME_DIR): the
 * checkpoint folder inside a generation that holds one, else the
 * generation's own (one that holds files, or one saved before spotd kept
 * the checkpoint's name). */
static void dir_resume_path(struct method *m, const char *dir, int64_t step, char *buf,
                            size_t size)
{
    char only[256] = "";
    struct dirent *d;
    size_t n = 0;
    DIR *dp = opendir(dir);

    snprintf(buf, size, "%s", dir);
    if (!dp)
        return;
    while ((d = readdir(dp)))
        if (strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0 && n++ == 0)
            snprintf(only, sizeof(only), "%s", d->d_name);
    closedir(dp);
    if (n == 1) {
        char path[4400];
        struct stat st;

        snprintf(path, sizeof(path), "%s/%s", dir, only);
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
            ckptname_step(only, true, m->layout, NULL) == step)
            snprintf(buf, size, "%s", path);
    }
}

static void dir_last(struct method *m)
{
    m->last = true;
}

static bool dir_exited(struct method *m, int code);

/* Committed: the links of older generations in the stage go. */
static void dir_committed(struct method *m, const char *dir)
{
    ckptdir_unstage(m->dir, m->out);
}

static void dir_stop(struct method *m, const char *reason, uint64_t grace_ms)
{
    child_stop(m->ctx.child, reason, grace_ms);
}

static void dir_close(struct method *m)
{
    if (!m)
        return;
    if (m->ino_ev)
        event_free(m->ino_ev);
    if (m->scan)
        event_free(m->scan);
    if (m->now)
        event_free(m->now);
    if (m->ino_fd >= 0)
        close(m->ino_fd);
    free(m);
}

/* The notice's save, with --saved-when exit, ends the command. */
static bool dir_may_exit(struct method *m)
{
    return m->last && m->ctx.saved_when == METHOD_SAVED_EXIT;
}

/* With --saved-when exit the notice's save signals the trainer, which
 * saves its newest state. */
static bool dir_saves_on_signal(struct method *m)
{
    return m->ctx.saved_when == METHOD_SAVED_EXIT;
}

const struct method_ops method_dir = {
    .name = "dir",
    .flags = METHOD_NO_WORLD | METHOD_OWN_SCHEDULE,
    .open = dir_open,
    .save = dir_save,
    .why_none = dir_why_none,
    .resume_path = dir_resume_path,
    .last = dir_last,
    .committed = dir_committed,
    .exited = dir_exited,
    .may_exit = dir_may_exit,
    .saves_on_signal = dir_saves_on_signal,
    .stop = dir_stop,
    .close = dir_close,
};

/* ---- the scan ------------------------------------------------------------ */

static struct entry *entry_get(struct method *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0)
            return &m->e[i];
    if (m->n == ENTRIES_MAX)
        return NULL;
    memset(&m->e[m->n], 0, sizeof(m->e[m->n]));
    snprintf(m->e[m->n].name, sizeof(m->e[m->n].name), "%s", name);
    return &m->e[m->n++];
}

/* The signature of the entry name in the folder now, 0: gone. */
static uint64_t entry_sig(struct method *m, const char *name)
{
    int fd = open(m->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    uint64_t sig = fd < 0 ? 0 : ckptdir_entry_signature(fd, name, NULL);

    if (fd >= 0)
        close(fd);
    return sig;
}

static bool was_renamed(struct method *m, const char *name)
{
    for (size_t i = 0; i < m->n_renamed; i++)
        if (strcmp(m->renamed[i], name) == 0)
            return true;
    return false;
}

/* Say once per scan what did not count, for dir_why_none(). */
static void note_text(struct method *m, const char *name, const char *why)
{
    size_t len = strlen(m->ignored);

    if (len + 8 >= sizeof(m->ignored))
        return;
    snprintf(m->ignored + len, sizeof(m->ignored) - len, "%s'%s' (%.300s)", len ? ", " : "",
             name, why);
}

static void note_ignored(struct method *m, const char *name, enum ckptname_why why)
{
    note_text(m, name, ckptname_why_text(why));
}

/* The step of a fixed-name one with signature sig: -1 when it is the
 * version handed out last, else the number its step file names when that
 * is newer, else (no step file) the step after the last handed out. */
static int64_t fixed_step(struct method *m, const char *name, uint64_t sig)
{
    char why[4500];
    int64_t step;

    if (sig == 0 || sig == m->fixed_sig)
        return -1;
    if (!m->ctx.step_file)
        return m->handed + 1;
    step = ckptdir_fixed_step(m->dir, m->ctx.step_file, why, sizeof(why));
    if (step >= 0 && step <= m->handed)
        snprintf(why, sizeof(why), "its step file '%s' names step %lld, not newer than %lld",
                 m->ctx.step_file, (long long)step, (long long)m->handed);
    if (step <= m->handed) {
        note_text(m, name, why);
        return -1;
    }
    return step;
}

/* The signature of the fixed-name file there, 0: none. */
static uint64_t fixed_there(struct method *m)
{
    enum ckptname_why why;
    struct dirent *d;
    uint64_t sig = 0;
    DIR *dp = opendir(m->dir);

    if (!dp)
        return 0;
    while (!sig && (d = readdir(dp)))
        if (ckptname_step(d->d_name, false, m->layout, &why) < 0 && why == CKPTNAME_FIXED)
            sig = ckptdir_entry_signature(dirfd(dp), d->d_name, NULL);
    closedir(dp);
    return sig;
}

/* One name of the directory: its entry, with its signature and whether it
 * is complete.  NULL when it is no checkpoint newer than handed. */
static struct entry *look(struct method *m, DIR *dp, const char *name, int64_t now)
{
    enum ckptname_why why;
    struct entry *e;
    struct stat st;
    bool last = false, fixed;
    uint64_t sig;
    int64_t step;

    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strcmp(name, CKPTDIR_STAGE) == 0 ||
        fstatat(dirfd(dp), name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)))
        return NULL;
    step = ckptname_step(name, S_ISDIR(st.st_mode), m->layout, &why);
    m->stepped = m->stepped || step >= 0;
    fixed = why == CKPTNAME_FIXED && m->layout != CKPT_LAYOUT_FILES;
    if (step < 0 && !fixed)
        note_ignored(m, name, why);
    if ((!fixed && step <= m->handed) || strlen(name) >= sizeof(e->name))
        return NULL;
    if (S_ISDIR(st.st_mode)) {
        int fd = openat(dirfd(dp), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return NULL;
        sig = ckptdir_signature(fd, &last);
    } else {
        sig = ckptdir_entry_signature(dirfd(dp), name, NULL);
    }
    if (fixed && (step = fixed_step(m, name, sig)) < 0)
        return NULL;
    if (!(e = entry_get(m, name)))
        return NULL;
    e->seen = true;
    e->fixed = fixed;
    e->step = step;
    e->is_dir = S_ISDIR(st.st_mode);
    if (was_renamed(m, name))
        e->renamed = true;
    if (sig != e->sig || sig == 0) {
        /* Written to after it was moved into place: not whole after all. */
        if (e->sig)
            e->renamed = false;
        e->sig = sig;
        e->changed_ms = now;
    }
    if (last)
        e->renamed = true;
    return e;
}

/* Renamed into place, its writer gone, or quiet for --settle. */
static bool complete(const struct method *m, const struct entry *e, int64_t now)
{
    return e->renamed || m->writer_gone || now - e->changed_ms >= (int64_t)m->ctx.settle_ms;
}

/* Reads the directory: each entry's signature, and the newest complete
 * one (ready).  No callbacks. */
static void refresh(struct method *m, int64_t now)
{
    int64_t best = -1;
    const struct entry *best_e = NULL;
    struct dirent *d;
    DIR *dp = opendir(m->dir);

    if (!dp)
        return;
    m->ignored[0] = '\0';
    m->stepped = false;
    for (size_t i = 0; i < m->n; i++)
        m->e[i].seen = false;
    while ((d = readdir(dp)))
        look(m, dp, d->d_name, now);
    closedir(dp);
    m->n_renamed = 0;
    for (size_t i = 0; i < m->n; i++) {
        struct entry *e = &m->e[i];

        /* Under auto a fixed name beside names with a step is their copy
         * (Lightning's last.ckpt): they are the checkpoints. */
        if (e->seen && e->fixed && m->layout == CKPT_LAYOUT_AUTO && m->stepped) {
            note_text(m, e->name, CKPTNAME_FIXED_BESIDE);
            e->seen = false;
        }
        if (e->seen && complete(m, e, now) && e->step > best) {
            best = e->step;
            best_e = e;
        }
    }
    if (best_e && best > m->ready_step) {
        m->ready_step = best;
        m->ready_fixed = best_e->fixed;
        snprintf(m->ready, sizeof(m->ready), "%s", best_e->name);
        log_msg(LOGL_INFO, "checkpoint '%s/%s' is complete (step %lld)", m->dir, m->ready,
                (long long)best);
    }
    /* Those that went away, or were handed out, are forgotten. */
    for (size_t i = 0; i < m->n;)
        if (!m->e[i].seen)
            m->e[i] = m->e[--m->n];
        else
            i++;
}

/* A scan: the directory read, then what waits for it. */
static void scan(struct method *m)
{
    int64_t now = notice_now_ms();

    refresh(m, now);
    if (m->exiting) {
        exit_tick(m, now);
        return;
    }
    if (m->waiting && m->ready_step > m->handed) {
        m->waiting = false;
        deliver(m);
        return;
    }
    if (m->waiting && now >= m->deadline_ms) {
        method_saved_fn done = m->done;
        m->waiting = false;
        m->done = NULL;
        snprintf(m->out, sizeof(m->out), "no checkpoint in '%s' completed before the deadline "
                 "(one is still being written, or did not settle for --settle)", m->dir);
        done(m->arg, -ETIMEDOUT, m->out, -1, m->dir);
        return;
    }
    /* Last: the orchestrator may call dir_save() from found(). */
    if (m->ready_step > m->handed && !m->done)
        m->ctx.found(m->ctx.arg);
}

static void on_scan(evutil_socket_t fd, short what, void *arg)
{
    scan(arg);
}

static void on_inotify(evutil_socket_t fd, short what, void *arg)
{
    read_inotify(arg);
    scan(arg);
}

/* The names moved into place since the last read. */
static void read_inotify(struct method *m)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;

    while ((n = read(m->ino_fd, buf, sizeof(buf))) > 0)
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;

            if ((ev->mask & IN_MOVED_TO) && ev->len > 0 && m->n_renamed < RENAMED_MAX &&
                strlen(ev->name) < sizeof(m->renamed[0]))
                snprintf(m->renamed[m->n_renamed++], sizeof(m->renamed[0]), "%s", ev->name);
            p += sizeof(*ev) + ev->len;
        }
}

/* ---- handing a checkpoint out -------------------------------------------- */

/* The ready checkpoint is linked, under its name, into the generation's
 * folder (ckptdir_link), and done is called from the loop. */
static void deliver(struct method *m)
{
    struct timeval zero = { 0, 0 };
    char msg[9400];
    int err;

    if (m->ready_fixed && !m->writer_gone) {
        deliver_fixed(m);
        return;
    }
    if (m->ready_fixed)
        m->fixed_sig = entry_sig(m, m->ready);
    m->handed = m->ready_step;
    err = ckptdir_link(m->dir, m->ready, m->gen_dir, m->gen, m->out, sizeof(m->out), msg,
                       sizeof(msg));
    if (err < 0) {
        method_saved_fn done = m->done;

        m->done = NULL;
        done(m->arg, err, msg, -1, m->dir);
        return;
    }
    evtimer_add(m->now, &zero);
}

/* A fixed-name one is copied, not linked: its trainer rewrites it in
 * place.  Rewritten since it counted, or while it was copied, it is not
 * whole: the notice's save waits for it to settle again, a periodic one
 * fails (the next version is offered once it settles). */
static void deliver_fixed(struct method *m)
{
    struct timeval zero = { 0, 0 };
    struct entry *e = entry_get(m, m->ready);
    int64_t now = notice_now_ms();
    uint64_t sig = 0;
    char msg[9400];
    int err = -EAGAIN;

    snprintf(msg, sizeof(msg), "'%s/%s' was rewritten after it settled", m->dir, m->ready);
    if (e && e->seen && e->step == m->ready_step && complete(m, e, now) &&
        e->sig == entry_sig(m, m->ready))
        err = ckptdir_copy(m->dir, m->ready, m->gen_dir, &sig, msg, sizeof(msg));
    if (err == 0) {
        m->handed = m->ready_step;
        m->fixed_sig = sig;
        snprintf(m->out, sizeof(m->out), "%s", m->gen_dir);
        evtimer_add(m->now, &zero);
        return;
    }
    if (err == -EAGAIN) {
        if (e) {
            e->renamed = false;
            e->changed_ms = now;
        }
        m->ready_step = m->handed;
        if (m->last) {
            log_msg(LOGL_INFO, "%s: waiting for it to settle again", msg);
            m->waiting = true;
            return;
        }
    }
    method_saved_fn done = m->done;
    m->done = NULL;
    done(m->arg, err, msg, -1, m->dir);
}

static void on_now(evutil_socket_t fd, short what, void *arg)
{
    struct method *m = arg;
    method_saved_fn done = m->done;

    m->done = NULL;
    done(m->arg, 0, "", m->handed, m->out);
}

/* ---- "saved, then exited" ------------------------------------------------ */

static const char *sig_name(const struct method *m)
{
    const char *s = parse_signal_name(m->ctx.signal);
    return s ? s : "?";
}

/* The notice's save of a trainer that saves on the signal and exits: the
 * signal (to a launcher's workers once they are there), and no restart. */
static int wait_exit(struct method *m, int64_t deadline_ms)
{
    int r;

    m->sent = false;
    if ((r = method_send_signal(m->ctx.child, m->ctx.signal, &m->sent, &m->launcher)) < 0)
        return r;
    child_hold(m->ctx.child);
    m->exiting = true;
    m->deadline_ms = deadline_ms > 0 ? deadline_ms : notice_now_ms() + EXIT_LIMIT_MS;
    log_msg(LOGL_INFO, "%s; the checkpoint is the newest in '%s' once the command exits",
            m->sent ? "the trainer was sent its signal" : "the launcher's workers are not there "
            "yet, or have no handler for the signal yet: it goes to them once they have", m->dir);
    return 0;
}

/* While waiting for the exit: the signal, if it has not gone yet, and the
 * deadline, at which the newest complete one is saved, if any. */
static void exit_tick(struct method *m, int64_t now)
{
    method_saved_fn done = m->done;
    int r;

    if (!m->sent &&
        (r = method_send_signal(m->ctx.child, m->ctx.signal, &m->sent, &m->launcher)) < 0) {
        m->exiting = false;
        m->done = NULL;
        snprintf(m->out, sizeof(m->out), "cannot send SIG%s to the trainer: %s", sig_name(m),
                 strerror(-r));
        done(m->arg, r, m->out, -1, m->dir);
        return;
    }
    if (now < m->deadline_ms)
        return;
    m->exiting = false;
    if (m->ready_step > m->handed) {
        log_msg(LOGL_WARN, "the command did not exit before the deadline after SIG%s: saving "
                "the newest complete checkpoint, '%s'", sig_name(m), m->ready);
        deliver(m);
        return;
    }
    m->done = NULL;
    snprintf(m->out, sizeof(m->out), "%s before the deadline (--saved-when exit: the trainer "
             "saves into '%s' and exits with code 0 or %d)",
             m->sent ? "the command did not exit after its signal"
                     : "the launcher's workers were not there, or had no handler for the signal",
             m->dir, m->ctx.exit_code);
    done(m->arg, -ETIMEDOUT, m->out, -1, m->dir);
}

/* The command ended during a save.  One linked already is handed out; one
 * waited for counts if it completed; and when the notice's save waited for
 * the exit, everything the command wrote counts when it said it saved (its
 * code), else only what was complete already. */
static bool dir_exited(struct method *m, int code)
{
    method_saved_fn done = m->done;

    if (!m->done)
        return false;
    if (!m->exiting && !m->waiting)
        return true; /* linked already: on_now hands it out */
    if (m->waiting) {
        /* What completed before the end still counts. */
        m->waiting = false;
        refresh(m, notice_now_ms());
        if (m->ready_step > m->handed) {
            deliver(m);
            return true;
        }
        m->done = NULL;
        snprintf(m->out, sizeof(m->out), "the command exited with code %d while a checkpoint "
                 "in '%s' was still being written", code, m->dir);
        done(m->arg, -ECANCELED, m->out, -1, m->dir);
        return true;
    }
    m->exiting = false;
    m->writer_gone = m->sent && method_exit_counts(code, m->ctx.exit_code, m->launcher);
    scan(m);
    if (m->ready_step > m->handed) {
        if (m->writer_gone)
            log_msg(LOGL_INFO, "the command saved, then exited (code %d%s): '%s' (step %lld) "
                    "is the checkpoint", code, code == 1 && m->launcher ? ", the launcher's "
                    "for its workers' exit" : "", m->ready, (long long)m->ready_step);
        else
            log_msg(LOGL_WARN, "the command exited with code %d %s SIG%s (not 0 or %d): "
                    "saving the newest checkpoint that was complete, '%s'", code,
                    m->sent ? "after" : "before", sig_name(m), m->ctx.exit_code, m->ready);
        deliver(m);
        return true;
    }
    m->done = NULL;
    snprintf(m->out, sizeof(m->out), "the command exited with code %d %s SIG%s, and '%s' holds "
             "no complete checkpoint newer than step %lld", code, m->sent ? "after" : "before",
             sig_name(m), m->dir, (long long)m->handed);
    /* Saved, then exited, with nothing newer than the last handed out (it
     * saved again the step a periodic save had just taken): that one is
     * the checkpoint, and it is saved already. */
    done(m->arg, m->writer_gone && m->handed >= 0 ? -EALREADY : -ENOENT, m->out, -1, m->dir);
    return true;
}
