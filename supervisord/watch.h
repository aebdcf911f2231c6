/* watch: the interface every source of notices implements, and what the
 * watchers share.
 *
 * A watcher runs on the loop, asks its metadata service (or watches a
 * signal, a file, a timer), and hands every notice it sees to emit(); it
 * never decides what a notice means for the command: notices.c does.  A
 * watcher reports a notice each time it sees it; deduplication is
 * notices.c's. */
#ifndef SPOTD_WATCH_H
#define SPOTD_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/notice.h"

struct event_base;
struct http;
struct watcher;

struct watch_ctx {
    struct event_base *base;     /* borrowed */
    struct http *http;           /* borrowed */
    const char *base_url;        /* the metadata service, without a trailing '/' */
    uint64_t poll_ms;            /* poll interval */
    bool imdsv1;                 /* AWS: fall back to IMDSv1 without a token */
    const char *azure_vm_name;   /* Azure: this VM's name; NULL: ask compute/name */
    void (*emit)(void *arg, struct notice *n);
    void *emit_arg;
};

struct watcher_ops {
    const char *name;            /* "aws": the --cloud choice and the notices' source */
    const char *default_url;     /* the service's documented address */
    /* Start watching; NULL when out of memory.  The context is copied. */
    struct watcher *(*start)(const struct watch_ctx *ctx);
    /* Stop, cancel what is in flight, free; takes NULL, returns NULL. */
    struct watcher *(*stop)(struct watcher *w);
    /* Optional: tell the service spotd is done with event_id, so the
     * interruption may start now.  Returns 0 when a request went out (done
     * is called when it ends), or a negative code when there is nothing to
     * send (said in the log). */
    int (*ack)(struct watcher *w, const char *event_id, void (*done)(void *arg), void *arg);
};

extern const struct watcher_ops watch_aws, watch_gcp, watch_azure, watch_alibaba, watch_tencent;

/* Whether name (len bytes) can be an Azure VM's name as Scheduled Events
 * lists it: 1 to 127 printable bytes, no quote, no space. */
bool watch_azure_name_ok(const char *name, size_t len);

/* The watcher of a cloud by name, NULL if none. */
const struct watcher_ops *watch_find(const char *name);

/* Log a failure of a watcher once per kind: the same kind again is
 * silent until a success (watch_ok) or another kind of failure. */
struct watch_complaint {
    char last[64];
};
void watch_complain(struct watch_complaint *c, const char *source, const char *kind,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void watch_ok(struct watch_complaint *c, const char *source);

/* Backoff caps: a small fraction of each cloud's shortest notice, so that
 * a notice served just after an outage is seen with most of it left. */
#define WATCH_CAP_30S_MS 2000        /* Azure Preempt and GCP preemption: 30 s */
#define WATCH_CAP_2MIN_MS 5000       /* AWS and Tencent: 2 min; Alibaba: 5 min */

/* Delay before the next try after `failures` failures in a row: the poll
 * interval doubled per failure, at most cap_ms, with jitter (see
 * backoff_delay()), and never less than the poll interval. */
uint64_t watch_backoff(uint64_t poll_ms, unsigned failures, uint64_t cap_ms);

/* What is left of delay_ms counted from started_ms (notice_mono_ms()): a
 * retry's delay runs from the start of the try that failed, so that a
 * service that hangs (each try waits out its timeout) is still tried once
 * per backoff, not once per timeout plus backoff. */
uint64_t watch_left(uint64_t delay_ms, int64_t started_ms);

/* Local sources: signals (through child.c's hook), a notice file, a drill. */
struct watch_local;
struct watch_local_opts {
    const char *notice_file;     /* NULL: none */
    uint64_t drill_after_ms;     /* 0 with drill_kind < 0: no drill */
    int drill_kind;              /* enum notice_kind, or -1 */
    uint64_t signal_deadline_ms;
};
struct watch_local *watch_local_new(const struct watch_ctx *ctx,
                                    const struct watch_local_opts *o);
struct watch_local *watch_local_free(struct watch_local *l);
/* A signal that is a notice arrived. */
void watch_local_signal(struct watch_local *l, int sig);

/* A drill now (spotctl drill): a notice of kind, deadline window_ms away. */
void watch_local_drill(struct watch_local *l, int kind, uint64_t window_ms, const char *by);

/* Parse "DURATION[:KIND]" for --drill-after.  Returns 0 or -EINVAL. */
int watch_parse_drill(const char *s, uint64_t *ret_ms, int *ret_kind);

#endif
