/* follow: store a checkpoint's files while they are written (follow.h).
 *
 * DESIGN.  One inotify descriptor per follow, one watch per folder (the
 * root and the folders made in it, FOLLOW_DIRS at most).  Each file seen
 * is a struct file: how far it is stored (upto, a chunk boundary), whether
 * an early store of it is in flight (busy; at most one per file, so they
 * go in order), and whether it is finished (closed after writing, or
 * named by the trainer).  A file being written is looked at every
 * FOLLOW_POLL_MS (not at each of its events: a writer of small pieces
 * makes one of each), a finished one at once; each look that finds a
 * whole chunk past upto starts an early store of the whole chunks
 * written, and the look after the end stores the rest.  A follow frees itself once stopped and
 * idle; follow_live() says how many have not (spotd waits for them before
 * it frees the snap). */
#include "follow.h"

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

#include "spot/log.h"

#define FOLLOW_DIRS 64
#define FOLLOW_FILES 4096
#define FOLLOW_DEPTH 3

struct file {
    char *rel;
    uint64_t upto;          /* stored from 0 up to here */
    bool busy, writing, finished, stored_all, failed;
    int zip;                /* -1: not known yet */
};

struct follow {
    struct event_base *base;
    struct snap *snap;
    uint64_t gen;
    char *dir;
    uint32_t chunk;
    int fd;
    struct event *ev, *poll;
    struct { int wd; char *rel; } dirs[FOLLOW_DIRS];
    size_t n_dirs;
    struct file *files;
    size_t n_files, cap_files;
    unsigned busy;
    bool stopped;
};

/* One early store in flight: its file, by index (files moves). */
struct ahead {
    struct follow *f;
    size_t file;
    uint64_t from;
    bool final;
};

static unsigned live;

static void on_inotify(evutil_socket_t fd, short what, void *arg);
static void on_poll(evutil_socket_t fd, short what, void *arg);
static void watch_dir(struct follow *f, const char *rel);
static void watch_tree(struct follow *f, const char *rel, int depth);
static struct file *file_of(struct follow *f, const char *rel);
static void look(struct follow *f, struct file *fi);
static void arm_poll(struct follow *f);
static void on_stored(void *arg, int err, const char *msg, const struct snap_saved *s);
static void maybe_free(struct follow *f);

struct follow *follow_start(struct event_base *base, struct snap *snap, uint64_t gen,
                            const char *dir)
{
    struct follow *f = calloc(1, sizeof(*f));

    if (!f)
        return NULL;
    f->base = base;
    f->snap = snap;
    f->gen = gen;
    f->chunk = snap_chunk_size(snap);
    f->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (f->fd < 0 || !(f->dir = strdup(dir)) ||
        !(f->ev = event_new(base, f->fd, EV_READ | EV_PERSIST, on_inotify, f)) ||
        !(f->poll = event_new(base, -1, EV_PERSIST, on_poll, f)) || event_add(f->ev, NULL) < 0) {
        log_msg(LOGL_DEBUG, "cannot follow '%s' while it is written: %s", dir, strerror(errno));
        f->stopped = true;
        live++;
        maybe_free(f);
        return NULL;
    }
    live++;
    watch_tree(f, "", 0);
    if (f->n_dirs == 0) {
        f->stopped = true;
        maybe_free(f);
        return NULL;
    }
    return f;
}

static void watch_dir(struct follow *f, const char *rel)
{
    char path[PATH_MAX];
    int wd;

    if (f->n_dirs == FOLLOW_DIRS ||
        (size_t)snprintf(path, sizeof(path), "%s%s%s", f->dir, *rel ? "/" : "", rel) >=
            sizeof(path))
        return;
    wd = inotify_add_watch(f->fd, path, IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO |
                                            IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK);
    if (wd < 0)
        return;
    if (!(f->dirs[f->n_dirs].rel = strdup(rel))) {
        inotify_rm_watch(f->fd, wd);
        return;
    }
    f->dirs[f->n_dirs++].wd = wd;
}

/* rel and the folders already in it (a worker's w<rank>). */
static void watch_tree(struct follow *f, const char *rel, int depth)
{
    char path[PATH_MAX], sub[PATH_MAX];
    struct dirent *de;
    DIR *d;

    watch_dir(f, rel);
    if (depth == FOLLOW_DEPTH ||
        (size_t)snprintf(path, sizeof(path), "%s%s%s", f->dir, *rel ? "/" : "", rel) >=
            sizeof(path) ||
        !(d = opendir(path)))
        return;
    while ((de = readdir(d)) && f->n_dirs < FOLLOW_DIRS) {
        if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
            strcmp(de->d_name, "..") == 0 ||
            (size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
                sizeof(sub))
            continue;
        watch_tree(f, sub, depth + 1);
    }
    closedir(d);
}

static void on_inotify(evutil_socket_t fd, short what, void *arg)
{
    struct follow *f = arg;
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;

    while ((n = read(f->fd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ie = (const struct inotify_event *)p;
            char rel[PATH_MAX];
            struct file *fi;
            size_t d;

            p += sizeof(*ie) + ie->len;
            for (d = 0; d < f->n_dirs && f->dirs[d].wd != ie->wd; d++)
                ;
            if (f->stopped || d == f->n_dirs || !ie->len ||
                (size_t)snprintf(rel, sizeof(rel), "%s%s%s", f->dirs[d].rel,
                                 *f->dirs[d].rel ? "/" : "", ie->name) >= sizeof(rel))
                continue;
            if (ie->mask & IN_ISDIR) {
                if (ie->mask & (IN_CREATE | IN_MOVED_TO))
                    watch_dir(f, rel);
                continue;
            }
            if (!(fi = file_of(f, rel)))
                continue;
            if (ie->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) {
                fi->writing = false, fi->finished = true;
                look(f, fi);
            } else {
                /* Looked at by the poll: a writer of small pieces makes
                 * an event of each. */
                fi->writing = true, fi->finished = false, fi->stored_all = false;
                arm_poll(f);
            }
        }
    }
}

static void arm_poll(struct follow *f)
{
    struct timeval tv = { 0, FOLLOW_POLL_MS * 1000 };

    if (!event_pending(f->poll, EV_TIMEOUT, NULL))
        event_add(f->poll, &tv);
}

/* A file open for writing says nothing while one long write() runs. */
static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct follow *f = arg;
    bool any = false;

    for (size_t i = 0; i < f->n_files && !f->stopped; i++) {
        if (f->files[i].writing) {
            any = true;
            look(f, &f->files[i]);
        }
    }
    if (!any || f->stopped)
        event_del(f->poll);
}

void follow_file_done(struct follow *f, const char *path)
{
    size_t dl;
    struct file *fi;

    if (!f || f->stopped || !path)
        return;
    dl = strlen(f->dir);
    if (path[0] == '/') {
        if (strncmp(path, f->dir, dl) != 0 || path[dl] != '/')
            return;
        path += dl + 1;
    }
    if (!manifest_path_valid(path) || !(fi = file_of(f, path)))
        return;
    fi->writing = false;
    fi->finished = true;
    look(f, fi);
}

static struct file *file_of(struct follow *f, const char *rel)
{
    struct file *fi;

    for (size_t i = 0; i < f->n_files; i++)
        if (strcmp(f->files[i].rel, rel) == 0)
            return &f->files[i];
    if (f->n_files == FOLLOW_FILES)
        return NULL;
    if (f->n_files == f->cap_files) {
        size_t cap = f->cap_files ? 2 * f->cap_files : 16;
        struct file *nf = realloc(f->files, cap * sizeof(*nf));

        if (!nf)
            return NULL;
        f->files = nf;
        f->cap_files = cap;
    }
    fi = &f->files[f->n_files];
    memset(fi, 0, sizeof(*fi));
    fi->zip = -1;
    if (!(fi->rel = strdup(rel)))
        return NULL;
    f->n_files++;
    return fi;
}

/* Start the early store that fi's size allows, if none is in flight. */
static void look(struct follow *f, struct file *fi)
{
    char path[PATH_MAX];
    struct ahead *e;
    struct stat st;
    uint64_t whole, from;

    if (fi->busy || fi->failed || fi->stored_all || f->stopped)
        return;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", f->dir, fi->rel) >= sizeof(path) ||
        lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
        return;
    if (fi->zip < 0 && st.st_size >= 4) {
        unsigned char magic[4];
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

        if (fd >= 0 && pread(fd, magic, 4, 0) == 4)
            fi->zip = memcmp(magic, "PK\3\4", 4) == 0;
        if (fd >= 0)
            close(fd);
    }
    whole = (uint64_t)st.st_size - (uint64_t)st.st_size % f->chunk;
    if (fi->finished) {
        /* A zip is chunked at its entries: all of it, once. */
        from = fi->zip == 1 ? 0 : fi->upto;
    } else {
        if (fi->zip != 0 || whole <= fi->upto)
            return;
        from = fi->upto;
    }
    if (!(e = calloc(1, sizeof(*e))))
        return;
    e->f = f;
    e->file = (size_t)(fi - f->files);
    e->from = from;
    e->final = fi->finished;
    fi->busy = true;
    f->busy++;
    snap_prestore(f->snap, f->gen, f->dir, fi->rel, from, e->final, NULL, on_stored, e);
}

static void on_stored(void *arg, int err, const char *msg, const struct snap_saved *s)
{
    struct ahead *e = arg;
    struct follow *f = e->f;
    struct file *fi = &f->files[e->file];

    fi->busy = false;
    f->busy--;
    if (err) {
        /* The save stores it: an early store is only ahead of it. */
        log_msg(LOGL_DEBUG, "generation %llu: early store of '%s' failed (the save does it): %s",
                (unsigned long long)f->gen, fi->rel, msg);
        fi->failed = true;
    } else {
        fi->upto = s->bytes;
        if (e->final && fi->finished)
            fi->stored_all = true;
    }
    free(e);
    if (f->stopped)
        maybe_free(f);
    else
        look(f, fi);
}

struct follow *follow_stop(struct follow *f)
{
    if (!f)
        return NULL;
    f->stopped = true;
    maybe_free(f);
    return NULL;
}

unsigned follow_live(void)
{
    return live;
}

static void maybe_free(struct follow *f)
{
    if (f->busy)
        return;
    if (f->ev)
        event_free(f->ev);
    if (f->poll)
        event_free(f->poll);
    if (f->fd >= 0)
        close(f->fd);
    for (size_t i = 0; i < f->n_dirs; i++)
        free(f->dirs[i].rel);
    for (size_t i = 0; i < f->n_files; i++)
        free(f->files[i].rel);
    free(f->files);
    free(f->dir);
    free(f);
    live--;
}
