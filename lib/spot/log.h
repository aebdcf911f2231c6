/* log: human log lines on stderr and the machine-readable event log.
 *
 * Every line is one write(2), so lines from spotd and from the command it
 * supervises never interleave inside a line.  An *event* is a state change:
 * it goes to stderr (key=value, or JSON with --log-format json) and, when
 * --events is set, as one JSON object per line to the event log, a public
 * interface described in docs/events.md.  A plain *message* goes to stderr
 * only.
 *
 * The logger is process-wide state on purpose: like the stderr it writes
 * to, there is one per process, and every module may need it. */
#ifndef SPOT_LOG_H
#define SPOT_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

enum log_level { LOGL_DEBUG, LOGL_INFO, LOGL_WARN, LOGL_ERROR };
enum log_format { LOG_TEXT, LOG_JSON };

/* Set the stderr format and threshold, and open the event log at
 * events_path (appended to, created 0644) unless it is NULL.  Until this is
 * called, messages go to stderr as text at level info.  Returns 0 or
 * -errno from open(2); the caller reports it. */
int log_open(enum log_format format, enum log_level level, const char *events_path);
void log_close(void);

/* Event records that could not be written to the event log (a full disk),
 * since the start: each is written whole or not at all. */
uint64_t log_events_dropped(void);

/* Start an event record: a JSON object holding "ts" and "event".  Add
 * fields with cJSON_Add*ToObject(); log_event() consumes it.  Returns NULL
 * only when out of memory, which log_event() tolerates. */
struct cJSON *log_event_new(const char *event);

/* Emit rec (and free it): to the event log always, and to stderr with a
 * human message when level reaches the threshold. */
void log_event(enum log_level level, struct cJSON *rec, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Observers see every event record as it is emitted, once it is written
 * and before it is freed: the metrics, the webhooks and the notices'
 * timeline are built from the same events as the event log.  fn runs
 * inside log_event(), on the thread that logs (spotd logs from its loop
 * only); it must not keep rec.  It may log an event of its own, which every
 * observer then sees first (so never one that would make it log again).
 * At most LOG_OBSERVERS_MAX; returns 0 or -ENOSPC. */
#define LOG_OBSERVERS_MAX 4
typedef void (*log_observer_fn)(void *arg, const struct cJSON *rec, enum log_level level);
int log_observe(log_observer_fn fn, void *arg);
void log_unobserve(log_observer_fn fn, void *arg);

/* An event record's member, for observers: a string (def when absent or
 * not a string), or a number (false when absent or not a number). */
const char *log_rec_str(const struct cJSON *rec, const char *key, const char *def);
bool log_rec_num(const struct cJSON *rec, const char *key, double *out);

/* A message that is not an event: stderr only. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* RFC 3339 UTC time with milliseconds, "2026-11-30T10:27:11.123Z", of now.
 * buf must hold LOG_TS_LEN bytes. */
#define LOG_TS_LEN 32
char *log_timestamp(char *buf);

/* Render rec as one key=value line (no newline) into buf, quoting values
 * that need it.  Returns the length written, truncated to size - 1. */
size_t log_format_text(const struct cJSON *rec, char *buf, size_t size);

#endif
