/* watch_local: notices that come from this machine rather than a cloud:
 * signals (Kubernetes, systemd, Slurm, GCP's ACPI soft-off), a file that
 * appears (preStop hooks, schedulers), and drills.
 *
 * The notice file is watched with inotify on its directory, so waiting
 * costs nothing; a file already there at start is a notice at once. */
#include "watch.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "spot/log.h"
#include "spot/parse.h"

struct watch_local {
    struct watch_ctx ctx;
    struct watch_local_opts o;
    char *file;                  /* notice file, owned */
    char *file_name;             /* its last component, inside file's buffer copy */
    char *dir;                   /* owned */
    int ino_fd;
    struct event *ino_ev;
    struct event *drill_ev;
    bool file_seen;
};

static void emit_local(struct watch_local *l, const char *source, enum notice_kind kind,
                       uint64_t window_ms, const char *id, const char *raw, bool drill)
{
    struct notice n;

    memset(&n, 0, sizeof(n));
    snprintf(n.source, sizeof(n.source), "%s", source);
    n.kind = kind;
    /* As from the clouds: rebalance, maintenance and hibernate keep the
     * command. */
    n.terminating = kind != NOTICE_REBALANCE && kind != NOTICE_MAINTENANCE &&
                    kind != NOTICE_HIBERNATE;
    n.drill = drill;
    n.detected_ms = notice_now_ms();
    n.deadline_ms = n.detected_ms + (int64_t)window_ms;
    notice_copy(n.event_id, sizeof(n.event_id), id, strlen(id));
    notice_copy_raw(n.raw, sizeof(n.raw), raw, strlen(raw));
    l->ctx.emit(l->ctx.emit_arg, &n);
}

void watch_local_signal(struct watch_local *l, int sig)
{
    char id[64];
    const char *name = parse_signal_name(sig);

    /* Each arrival is its own notice: a second SIGTERM is news. */
    snprintf(id, sizeof(id), "signal:%s:%lld", name ? name : "?", (long long)notice_now_ms());
    emit_local(l, "signal", NOTICE_SIGNAL, l->o.signal_deadline_ms, id, name ? name : "?",
               false);
}

static void check_file(struct watch_local *l)
{
    char raw[NOTICE_RAW_LEN] = "";
    char id[600];
    ssize_t n;
    int fd;

    if (l->file_seen)
        return;
    fd = open(l->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return;
    /* A small, untrusted file: its first bytes go into the notice's raw. */
    n = read(fd, raw, sizeof(raw) - 1);
    close(fd);
    while (n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == '\r' || raw[n - 1] == ' '))
        n--;
    raw[n > 0 ? n : 0] = '\0';
    l->file_seen = true;
    snprintf(id, sizeof(id), "file:%s", l->file);
    emit_local(l, "file", NOTICE_TERMINATE, l->o.signal_deadline_ms, id, raw, false);
}

static void on_inotify(evutil_socket_t fd, short what, void *arg)
{
    struct watch_local *l = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;

    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            if (ev->len && strcmp(ev->name, l->file_name) == 0)
                check_file(l);
            p += sizeof(*ev) + ev->len;
        }
    }
}

static void on_drill(evutil_socket_t fd, short what, void *arg)
{
    struct watch_local *l = arg;
    char id[64];

    snprintf(id, sizeof(id), "drill:%lld", (long long)notice_now_ms());
    emit_local(l, "drill", (enum notice_kind)l->o.drill_kind, l->o.signal_deadline_ms, id,
               "--drill-after", true);
}

void watch_local_drill(struct watch_local *l, int kind, uint64_t window_ms, const char *by)
{
    char id[64];

    snprintf(id, sizeof(id), "drill:%lld", (long long)notice_now_ms());
    emit_local(l, "drill", (enum notice_kind)kind, window_ms, id, by, true);
}

static int watch_file(struct watch_local *l)
{
    char *copy = strdup(l->o.notice_file), *copy2 = strdup(l->o.notice_file);

    if (!copy || !copy2) {
        free(copy);
        free(copy2);
        return -ENOMEM;
    }
    l->file = copy;
    l->dir = strdup(dirname(copy2));
    free(copy2);
    l->file_name = strrchr(l->file, '/') ? strrchr(l->file, '/') + 1 : l->file;
    if (!l->dir)
        return -ENOMEM;
    l->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (l->ino_fd < 0)
        return -errno;
    if (inotify_add_watch(l->ino_fd, l->dir, IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
        int r = -errno;
        log_msg(LOGL_ERROR, "cannot watch directory '%s' for the notice file: %s; create it "
                "or change --notice-file", l->dir, strerror(-r));
        return r;
    }
    l->ino_ev = event_new(l->ctx.base, l->ino_fd, EV_READ | EV_PERSIST, on_inotify, l);
    if (!l->ino_ev || event_add(l->ino_ev, NULL) < 0)
        return -ENOMEM;
    check_file(l);
    return 0;
}

struct watch_local *watch_local_new(const struct watch_ctx *ctx, const struct watch_local_opts *o)
{
    struct watch_local *l = calloc(1, sizeof(*l));

    if (!l)
        return NULL;
    l->ctx = *ctx;
    l->o = *o;
    l->ino_fd = -1;
    if (o->notice_file && watch_file(l) < 0)
        return watch_local_free(l);
    if (o->drill_kind >= 0) {
        struct timeval tv = { (time_t)(o->drill_after_ms / 1000),
                              (suseconds_t)(o->drill_after_ms % 1000) * 1000 };
        l->drill_ev = evtimer_new(ctx->base, on_drill, l);
        if (!l->drill_ev || evtimer_add(l->drill_ev, &tv) < 0)
            return watch_local_free(l);
    }
    return l;
}

struct watch_local *watch_local_free(struct watch_local *l)
{
    if (!l)
        return NULL;
    if (l->ino_ev)
        event_free(l->ino_ev);
    if (l->ino_fd >= 0)
        close(l->ino_fd);
    if (l->drill_ev)
        event_free(l->drill_ev);
    free(l->file);
    free(l->dir);
    free(l);
    return NULL;
}
