/* method dir: the trainer saves on its own schedule into --ckpt-dir, the
 * way it already does: numbered folders (Hugging Face's checkpoint-500/,
 * DCP's step-500/) or files with the step in the name (ckpt-000500.pt,
 * Lightning's epoch=3-step=500.ckpt); --ckpt-layout says which, auto
 * either (spot/ckptname.h reads the names).
 *
 * spotd scans the directory (woken by inotify, and every settle/4 for the
 * settle clock).  A checkpoint is complete when it was renamed into place,
 * when a folder holds the file its writer writes last (.spotd-complete,
 * trainer_state.json, .metadata), or when nothing in it (names, sizes,
 * mtimes) changed for --settle.  The newest complete one beyond what was
 * handed out before is offered to the orchestrator (ctx.found), which
 * saves it in the background: the checkpoint is linked, under its own
 * name, into the generation's folder (the trainer may delete or rewrite
 * its files while the upload runs), so that a generation holds
 * "checkpoint-500/..." or "ckpt-000500.pt" as the trainer wrote it.  At a
 * notice there is nothing to ask the trainer: the newest complete one not
 * yet saved is the checkpoint, or there is none (-EALREADY).
 *
 * At start, the generation resumed from is linked back into --ckpt-dir
 * under its name, where the trainer looks for its newest checkpoint;
 * nothing of the trainer's there is removed or overwritten. */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <ftw.h>
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
#include "spot/ckptname.h"
#include "spot/linktree.h"
#include "spot/log.h"
#include "spot/notice.h"

/* Where checkpoints are linked when the state directory is on another
 * file system (a dot name: no trainer takes it for a checkpoint). */
#define STAGE ".spotd-stage"
#define ENTRIES_MAX 512
#define DEPTH_MAX 16
#define RENAMED_MAX 64

struct entry {
    char name[256];
    int64_t step;
    bool is_dir;
    bool renamed;                  /* moved into place: written whole */
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
    char ignored[1024];            /* names of the last scan that did not count, and why */
    method_saved_fn done;
    void *arg;
    bool waiting;                  /* save() waits for one to complete */
    int64_t deadline_ms;
    char gen_dir[4096];            /* the generation's folder, from save() */
    uint64_t gen;
    char out[4400];
};

static void scan(struct method *m);
static void deliver(struct method *m);

/* ---- the operations ------------------------------------------------------ */

static void on_scan(evutil_socket_t fd, short what, void *arg);
static void on_inotify(evutil_socket_t fd, short what, void *arg);
static void on_now(evutil_socket_t fd, short what, void *arg);
static void place_resume(struct method *m);

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
    if (ctx->resume_dir)
        place_resume(m);
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
    if (m->done)
        return -EBUSY;
    if (m->ready_step <= m->handed && !pending(m))
        return -EALREADY;
    m->done = done;
    m->arg = arg;
    m->gen = gen;
    snprintf(m->gen_dir, sizeof(m->gen_dir), "%s", dir);
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

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

/* Committed: the links of older generations in STAGE go. */
static void dir_committed(struct method *m, const char *dir)
{
    char stage[4200], path[4500];
    struct dirent *d;
    DIR *dp;

    snprintf(stage, sizeof(stage), "%s/" STAGE, m->dir);
    if (!(dp = opendir(stage)))
        return;
    while ((d = readdir(dp))) {
        if (strncmp(d->d_name, "gen-", 4) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", stage, d->d_name);
        if (strcmp(path, m->out) != 0)
            nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    }
    closedir(dp);
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

const struct method_ops method_dir = {
    .name = "dir",
    .flags = METHOD_NO_WORLD,
    .open = dir_open,
    .save = dir_save,
    .why_none = dir_why_none,
    .resume_path = dir_resume_path,
    .committed = dir_committed,
    .stop = dir_stop,
    .close = dir_close,
};

/* ---- the scan ------------------------------------------------------------ */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t mix_stat(uint64_t h, const char *name, const struct stat *st)
{
    for (const char *p = name; *p; p++)
        h = mix(h, (unsigned char)*p);
    h = mix(h, (uint64_t)st->st_size);
    h = mix(h, (uint64_t)st->st_ino);
    return mix(h, (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec);
}

/* A signature of everything under dirfd; sets *last when the file its
 * writer writes last is at the top.  Returns the signature, 0 on an error
 * (treated as changing). */
static uint64_t signature(int dirfd, int depth, bool *last)
{
    uint64_t h = 1469598103934665603ull;
    struct dirent *d;
    DIR *dp = fdopendir(dirfd);

    if (!dp) {
        close(dirfd);
        return 0;
    }
    while ((d = readdir(dp))) {
        struct stat st;

        if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (depth == 0 && last && ckptname_last_file(d->d_name))
            *last = true;
        h = mix_stat(h, d->d_name, &st);
        if (S_ISDIR(st.st_mode) && depth < DEPTH_MAX) {
            int fd = openat(dirfd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0)
                h = mix(h, signature(fd, depth + 1, NULL));
        }
    }
    closedir(dp);
    return h ? h : 1;
}

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

static bool was_renamed(struct method *m, const char *name)
{
    for (size_t i = 0; i < m->n_renamed; i++)
        if (strcmp(m->renamed[i], name) == 0)
            return true;
    return false;
}

/* Say once per scan what did not count, for dir_why_none(). */
static void note_ignored(struct method *m, const char *name, enum ckptname_why why)
{
    size_t len = strlen(m->ignored);

    if (len + 8 >= sizeof(m->ignored))
        return;
    snprintf(m->ignored + len, sizeof(m->ignored) - len, "%s'%s' (%s)", len ? ", " : "", name,
             ckptname_why_text(why));
}

/* One name of the directory: its entry, with its signature and whether it
 * is complete.  NULL when it is no checkpoint newer than handed. */
static struct entry *look(struct method *m, DIR *dp, const char *name, int64_t now)
{
    enum ckptname_why why;
    struct entry *e;
    struct stat st;
    bool last = false;
    uint64_t sig;
    int64_t step;

    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strcmp(name, STAGE) == 0 ||
        fstatat(dirfd(dp), name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)))
        return NULL;
    step = ckptname_step(name, S_ISDIR(st.st_mode), m->layout, &why);
    if (step < 0)
        note_ignored(m, name, why);
    if (step <= m->handed || strlen(name) >= sizeof(e->name))
        return NULL;
    if (S_ISDIR(st.st_mode)) {
        int fd = openat(dirfd(dp), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return NULL;
        sig = signature(fd, 0, &last);
    } else {
        sig = mix_stat(1469598103934665603ull, name, &st);
    }
    if (!(e = entry_get(m, name)))
        return NULL;
    e->seen = true;
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

static void scan(struct method *m)
{
    int64_t now = notice_now_ms(), best = -1;
    const char *best_name = NULL;
    struct dirent *d;
    DIR *dp = opendir(m->dir);

    if (!dp)
        return;
    m->ignored[0] = '\0';
    for (size_t i = 0; i < m->n; i++)
        m->e[i].seen = false;
    while ((d = readdir(dp))) {
        struct entry *e = look(m, dp, d->d_name, now);

        if (e && (e->renamed || now - e->changed_ms >= (int64_t)m->ctx.settle_ms) &&
            e->step > best) {
            best = e->step;
            best_name = e->name;
        }
    }
    closedir(dp);
    m->n_renamed = 0;
    if (best > m->ready_step) {
        m->ready_step = best;
        snprintf(m->ready, sizeof(m->ready), "%s", best_name);
        log_msg(LOGL_INFO, "checkpoint '%s/%s' is complete (step %lld)", m->dir, m->ready,
                (long long)best);
    }
    /* Those that went away, or were handed out, are forgotten. */
    for (size_t i = 0; i < m->n;)
        if (!m->e[i].seen)
            m->e[i] = m->e[--m->n];
        else
            i++;
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
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    struct method *m = arg;
    ssize_t n;

    while ((n = read(fd, buf, sizeof(buf))) > 0)
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;

            if ((ev->mask & IN_MOVED_TO) && ev->len > 0 && m->n_renamed < RENAMED_MAX &&
                strlen(ev->name) < sizeof(m->renamed[0]))
                snprintf(m->renamed[m->n_renamed++], sizeof(m->renamed[0]), "%s", ev->name);
            p += sizeof(*ev) + ev->len;
        }
    scan(m);
}

/* ---- handing a checkpoint out -------------------------------------------- */

/* The ready checkpoint is linked, under its name, into the generation's
 * folder (or into STAGE when that is on another file system), and done
 * is called from the loop. */
static void deliver(struct method *m)
{
    char src[4400], dst[4800];
    struct timeval zero = { 0, 0 };
    int err;

    m->handed = m->ready_step;
    snprintf(src, sizeof(src), "%s/%s", m->dir, m->ready);
    snprintf(m->out, sizeof(m->out), "%s", m->gen_dir);
    snprintf(dst, sizeof(dst), "%s/%s", m->out, m->ready);
    err = linktree_link(src, dst);
    if (err == -EXDEV || err == -EPERM || err == -EMLINK) {
        snprintf(dst, sizeof(dst), "%s/" STAGE, m->dir);
        mkdir(dst, 0700);
        snprintf(m->out, sizeof(m->out), "%s/" STAGE "/gen-%08llu", m->dir,
                 (unsigned long long)m->gen);
        nftw(m->out, remove_one, 16, FTW_DEPTH | FTW_PHYS);
        snprintf(dst, sizeof(dst), "%s/%s", m->out, m->ready);
        err = mkdir(m->out, 0700) < 0 ? -errno : linktree_link(src, dst);
    }
    if (err < 0) {
        method_saved_fn done = m->done;
        char msg[9400];

        m->done = NULL;
        snprintf(msg, sizeof(msg), "cannot link '%s' into '%s': %s", src, dst, strerror(-err));
        done(m->arg, err, msg, -1, m->dir);
        return;
    }
    evtimer_add(m->now, &zero);
}

static void on_now(evutil_socket_t fd, short what, void *arg)
{
    struct method *m = arg;
    method_saved_fn done = m->done;

    m->done = NULL;
    done(m->arg, 0, "", m->handed, m->out);
}

/* ---- resuming: the generation back in --ckpt-dir -------------------------- */

/* The restored generation's checkpoint, under its name, where the trainer
 * looks for its newest; what the trainer has there stays. */
static void place_resume(struct method *m)
{
    char src[4400], dst[4400], newer[1024] = "";
    struct dirent *d;
    int64_t step = m->ctx.resume_step;
    DIR *dp = opendir(m->ctx.resume_dir);
    size_t placed = 0;

    if (!dp)
        return;
    while ((d = readdir(dp))) {
        struct stat st;
        int err;

        snprintf(src, sizeof(src), "%s/%s", m->ctx.resume_dir, d->d_name);
        if (d->d_name[0] == '.' || lstat(src, &st) < 0 ||
            ckptname_step(d->d_name, S_ISDIR(st.st_mode), m->layout, NULL) != step)
            continue;
        snprintf(dst, sizeof(dst), "%s/%s", m->dir, d->d_name);
        if (lstat(dst, &st) == 0) {
            log_msg(LOGL_INFO, "'%s' is there already: the trainer's own is kept", dst);
            placed++;
            continue;
        }
        if ((err = linktree_copy(src, dst)) < 0) {
            log_msg(LOGL_WARN, "cannot put the resumed checkpoint into '%s': %s (it is in "
                    "SPOT_RESUME_DIR)", dst, strerror(-err));
            continue;
        }
        log_msg(LOGL_INFO, "resumed checkpoint (step %lld) put back as '%s'", (long long)step,
                dst);
        placed++;
    }
    closedir(dp);
    if (!placed)
        log_msg(LOGL_INFO, "the resumed generation holds no checkpoint named for --ckpt-layout "
                "%s at step %lld (saved by an older spotd?): it is only in SPOT_RESUME_DIR",
                ckptname_layout_name(m->layout), (long long)step);
    /* Newer ones of the trainer's own: it will likely resume from them. */
    if (!(dp = opendir(m->dir)))
        return;
    while ((d = readdir(dp))) {
        size_t len = strlen(newer);
        struct stat st;

        if (d->d_name[0] != '.' && fstatat(dirfd(dp), d->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            ckptname_step(d->d_name, S_ISDIR(st.st_mode), m->layout, NULL) > step &&
            len + 8 < sizeof(newer))
            snprintf(newer + len, sizeof(newer) - len, "%s'%s'", len ? ", " : "", d->d_name);
    }
    closedir(dp);
    if (newer[0])
        log_msg(LOGL_WARN, "'%s' holds checkpoints newer than the resumed step %lld that no "
                "committed generation holds: %s; the trainer may resume from them, and spotd "
                "uploads them as they count", m->dir, (long long)step, newer);
}
