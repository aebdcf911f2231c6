/* notice: one normalized interruption notice, whatever its source.
 *
 * Watchers (supervisord/watch_*.c) turn what a metadata service, a signal
 * or a file says into a struct notice; supervisord/notices.c deduplicates
 * them, logs them and decides what to do.  The parsers that read provider
 * responses live in cloudparse.c and timeparse.c, apart from any I/O. */
#ifndef SPOT_NOTICE_H
#define SPOT_NOTICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

enum notice_kind {
    NOTICE_TERMINATE,
    NOTICE_STOP,
    NOTICE_HIBERNATE,
    NOTICE_REBALANCE,   /* advisory: never stops the command */
    NOTICE_MAINTENANCE,
    NOTICE_SIGNAL,
    NOTICE_DRILL,
    NOTICE__COUNT
};

#define NOTICE_SOURCE_LEN 16
#define NOTICE_ID_LEN 160
#define NOTICE_RAW_LEN 512

struct notice {
    char source[NOTICE_SOURCE_LEN];  /* "aws", "gcp", "azure", "alibaba", "tencent",
                                        "signal", "file", "drill" */
    enum notice_kind kind;
    bool terminating;                /* the instance (or the command) goes away */
    bool drill;                      /* simulated: marked as such everywhere */
    int64_t deadline_ms;             /* UTC, ms since the epoch */
    int64_t detected_ms;             /* UTC, ms since the epoch, when spotd saw it */
    char event_id[NOTICE_ID_LEN];    /* stable across polls: the deduplication key */
    char raw[NOTICE_RAW_LEN];        /* what the provider said: printable, tabs and line
                                        ends, truncated */
};

/* "terminate", "stop", ...; NULL for a value out of range. */
const char *notice_kind_name(enum notice_kind kind);

/* Parse a kind name; -EINVAL when unknown. */
int notice_kind_parse(const char *name);

/* Copy text into a fixed field: non-printable bytes become '?', the copy
 * is truncated to fit and always terminated. */
void notice_copy(char *dst, size_t size, const char *src, size_t len);
/* The same for a raw field: tabs and line ends are kept too (JSON escapes
 * them; the text log never prints raw). */
void notice_copy_raw(char *dst, size_t size, const char *src, size_t len);

/* Milliseconds since the epoch, UTC, now. */
int64_t notice_now_ms(void);
/* CLOCK_MONOTONIC ms (an arbitrary origin): for every timeout, interval,
 * duration and liveness check.  The wall clock (notice_now_ms) only for
 * deadlines a cloud gives and timestamps in records: an NTP step moves it. */
int64_t notice_mono_ms(void);

/* Add the notice's fields (source, kind, deadline as RFC 3339, event_id,
 * raw, drill, terminating, detected) to obj. */
void notice_to_json(const struct notice *n, struct cJSON *obj);

/* The stop a terminating notice calls for: the one place that decides
 * when.  SIGKILL must land margin before the deadline, so the stop signal
 * goes grace before that, or now with what is left when that has passed.
 * When spotd checkpoints first (checkpoints), this stop is the fallback for
 * a checkpoint that takes too long, with a grace of at most
 * NOTICE_FALLBACK_GRACE_MS so that the checkpoint has the most time, and
 * the checkpoint is given up NOTICE_GIVE_UP_MS before it begins. */
#define NOTICE_FALLBACK_GRACE_MS 2000
/* A terminating notice whose deadline is further away than this is far
 * (AWS's scheduled retirement days ahead): with checkpoints, it is acted on
 * this long before its deadline, as if it came then; training goes on
 * until then. */
#define NOTICE_HORIZON_MS (15 * 60 * 1000)
#define NOTICE_GIVE_UP_MS 250
struct notice_stop {
    int64_t stop_at_ms;      /* the stop signal, wall clock; <= now: at once */
    uint64_t grace_ms;       /* from the stop signal to SIGKILL */
    int64_t give_up_ms;      /* a checkpoint still under way fails here */
};
struct notice_stop notice_stop_plan(int64_t deadline_ms, int64_t now_ms, uint64_t margin_ms,
                                    uint64_t grace_ms, bool checkpoints);

/* The grace of a stop signal sent now for a notice's deadline: grace_ms,
 * cut to what is left before deadline - margin (0 when that has passed),
 * so that SIGKILL never lands later than the plan's.  Every stop a notice
 * causes (the plan's, the one after its checkpoint failed or committed)
 * takes its grace from here when it is sent. */
uint64_t notice_grace_left(int64_t deadline_ms, int64_t now_ms, uint64_t margin_ms,
                           uint64_t grace_ms);

/* Write ms since the epoch as RFC 3339 UTC with milliseconds into buf
 * (at least 32 bytes).  Returns buf. */
char *notice_format_time(int64_t ms, char *buf, size_t size);

#endif
