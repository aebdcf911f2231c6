/* method dir: the trainer saves on its own schedule into numbered folders
 * of --ckpt-dir (Hugging Face's checkpoint-500/, checkpoint-1000/...).
 * spotd scans the directory (woken by inotify, and every SCAN_MS for the
 * settle clock): a folder whose name ends in a step number is complete
 * when the marker .spotd-complete appears in it, or when nothing in it
 * (names, sizes, mtimes) changed for --settle.  The newest complete folder
 * beyond what was handed out before is offered to the orchestrator
 * (ctx.found), which uploads it in the background.  At a notice there is
 * nothing to ask the trainer: the newest complete folder not yet saved is
 * the checkpoint, or there is none (-EALREADY). */
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
#include "spot/log.h"
#include "spot/notice.h"

#define MARKER ".spotd-complete"
#define ENTRIES_MAX 512
#define DEPTH_MAX 16

struct entry {
    char name[256];
    int64_t step;
    uint64_t sig;                  /* of names, sizes and mtimes */
    int64_t changed_ms;            /* when sig last changed */
    bool seen;                     /* in this scan */
};

struct method {
    struct method_ctx ctx;
    char dir[4096];
    int ino_fd;
    struct event *ino_ev, *scan, *now;
    struct entry e[ENTRIES_MAX];
    size_t n;
    int64_t handed;                /* highest step handed out (or resumed from) */
    int64_t ready_step;            /* newest complete folder beyond handed, -1: none */
    char ready[256];
    method_saved_fn done;
    void *arg;
    bool waiting;                  /* save() waits for a folder to complete */
    int64_t deadline_ms;
    char out[4400];
};

/* The step a folder name ends with ("checkpoint-500": 500), or -1. */
static int64_t name_step(const char *name)
{
    size_t len = strlen(name), i = len;
    int64_t v = 0;

    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
        i--;
    if (i == len || len - i > 15)
        return -1;
    for (; i < len; i++)
        v = v * 10 + (name[i] - '0');
    return v;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

/* A signature of everything under dirfd; sets *marker when the marker is
 * at the top.  Returns the signature, 0 on an error (treated as changing). */
static uint64_t signature(int dirfd, int depth, bool *marker)
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
        if (depth == 0 && marker && strcmp(d->d_name, MARKER) == 0)
            *marker = true;
        for (const char *p = d->d_name; *p; p++)
            h = mix(h, (unsigned char)*p);
        h = mix(h, (uint64_t)st.st_size);
        h = mix(h, (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec);
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

static void scan(struct method *m)
{
    int64_t now = notice_now_ms(), best = -1;
    const char *best_name = NULL;
    struct dirent *d;
    DIR *dp = opendir(m->dir);

    if (!dp)
        return;
    for (size_t i = 0; i < m->n; i++)
        m->e[i].seen = false;
    while ((d = readdir(dp))) {
        int64_t step = name_step(d->d_name);
        struct entry *e;
        bool marker = false;
        uint64_t sig;
        int fd;

        if (d->d_name[0] == '.' || step < 0 || step <= m->handed ||
            strlen(d->d_name) >= sizeof(e->name))
            continue;
        fd = openat(dirfd(dp), d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        sig = signature(fd, 0, &marker);
        if (!(e = entry_get(m, d->d_name)))
            continue;
        e->seen = true;
        e->step = step;
        if (sig != e->sig || sig == 0) {
            e->sig = sig;
            e->changed_ms = now;
        }
        if ((marker || now - e->changed_ms >= (int64_t)m->ctx.settle_ms) && step > best) {
            best = step;
            best_name = e->name;
        }
    }
    closedir(dp);
    if (best > m->ready_step) {
        m->ready_step = best;
        snprintf(m->ready, sizeof(m->ready), "%s", best_name);
        log_msg(LOGL_INFO, "checkpoint folder '%s/%s' is complete (step %lld)", m->dir, m->ready,
                (long long)best);
    }
    /* Folders that went away, or were handed out, are forgotten. */
    for (size_t i = 0; i < m->n;)
        if (!m->e[i].seen)
            m->e[i] = m->e[--m->n];
        else
            i++;
    if (m->waiting && m->ready_step > m->handed) {
        struct timeval zero = { 0, 0 };
        m->waiting = false;
        m->handed = m->ready_step;
        snprintf(m->out, sizeof(m->out), "%s/%s", m->dir, m->ready);
        evtimer_add(m->now, &zero);
        return;
    }
    if (m->waiting && now >= m->deadline_ms) {
        method_saved_fn done = m->done;
        m->waiting = false;
        m->done = NULL;
        snprintf(m->out, sizeof(m->out), "no folder of '%s' completed before the deadline (one "
                 "is still being written, or did not settle for --settle)", m->dir);
        done(m->arg, -ETIMEDOUT, m->out, -1, m->dir);
        return;
    }
    /* Last: the orchestrator may call dir_save() from found(). */
    if (m->ready_step > m->handed && !m->done)
        m->ctx.found(m->ctx.arg);
}

/* Is a folder newer than the last handed out still being written? */
static bool pending(const struct method *m)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].step > m->handed)
            return true;
    return false;
}

static void on_scan(evutil_socket_t fd, short what, void *arg)
{
    scan(arg);
}

static void on_inotify(evutil_socket_t fd, short what, void *arg)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    scan(arg);
}

static void on_now(evutil_socket_t fd, short what, void *arg)
{
    struct method *m = arg;
    method_saved_fn done = m->done;

    m->done = NULL;
    done(m->arg, 0, "", m->handed, m->out);
}

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
    m->ino_fd = -1;
    m->handed = ctx->resume_step;
    m->ready_step = -1;
    if (!ctx->ckpt_dir) {
        snprintf(err, errlen, "the dir method needs --ckpt-dir: the directory the trainer "
                 "saves its checkpoint folders into");
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
    setenv("SPOT_CKPT_DIR", m->dir, 1);
    return m;
}

static int dir_save(struct method *m, uint64_t gen, const char *dir, int64_t deadline_ms,
                    method_saved_fn done, void *arg)
{
    struct timeval now = { 0, 0 };

    if (m->done)
        return -EBUSY;
    if (m->ready_step <= m->handed && !pending(m))
        return -EALREADY;
    m->done = done;
    m->arg = arg;
    if (m->ready_step <= m->handed) {
        /* The trainer is writing one: wait for it, up to the deadline. */
        m->waiting = true;
        m->deadline_ms = deadline_ms;
        log_msg(LOGL_INFO, "waiting for the checkpoint folder being written in '%s'", m->dir);
        return 0;
    }
    m->handed = m->ready_step;
    snprintf(m->out, sizeof(m->out), "%s/%s", m->dir, m->ready);
    evtimer_add(m->now, &now);
    return 0;
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
    .stop = dir_stop,
    .close = dir_close,
};
