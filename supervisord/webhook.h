/* webhook: a JSON document POSTed to each --webhook URL at notices,
 * commits, missed deadlines and resumes (docs/operations.md, "Webhooks").
 *
 * The documents are built from the event records (log_observe), delivered
 * on the loop through curl's multi interface, one URL's in the order of
 * their events, retried with backoff, and never waited for, except for a
 * few seconds at spotd's exit (webhook_drain). */
#ifndef SPOTD_WEBHOOK_H
#define SPOTD_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct webhook;

/* How long spotd's exit waits, at most, for deliveries still queued. */
#define WEBHOOK_DRAIN_MS 5000

struct webhook_opts {
    struct event_base *base;
    const char *urls;          /* http(s) URLs separated by white space; may be NULL */
    const char *urls_origin;   /* where they came from, for messages ("SPOTD_WEBHOOK") */
    /* A file of more URLs, one a line, '#' starting a comment line; may be
     * NULL.  At least one URL, from either. */
    const char *urls_file;
    const char *urls_file_origin;
    const char *template_path; /* the body's template; NULL: spotd's own document */
    const char *template_origin;
    uint64_t timeout_ms;       /* one delivery's time limit, more than 0 */
    const char *job;           /* may be NULL */
    long rank;                 /* this node's rank in a world; -1: none */
};

/* Read the URLs' file, check the URLs and the template, and start
 * observing events.  Returns NULL with a one-line reason in err (a bad
 * URL, named by its scheme and host only: the rest may hold a token; a
 * URLs' file that is not a regular file, over 64 KiB or holds a NUL; a
 * template that is missing, over 64 KiB, or not JSON once its placeholders
 * are filled).  A URLs' file others can read is warned about. */
struct webhook *webhook_new(const struct webhook_opts *o, char *err, size_t errlen);

/* At exit, after the command is gone: run the loop until every queue is
 * empty, or limit_ms passed; what is left is given up (webhook_dropped).
 * Returns at once when nothing is queued.  Takes NULL. */
void webhook_drain(struct webhook *w, uint64_t limit_ms);

/* Stop observing, cancel what is in flight, free w.  Takes NULL, returns
 * NULL. */
struct webhook *webhook_free(struct webhook *w);

#endif
