/* cloudparse: what each cloud's metadata service answers, parsed strictly
 * into notices.  No I/O: the watchers hand in the body they fetched; unit
 * tests and fuzzers call these directly.
 *
 * Bodies are untrusted: (body, len) need not be terminated and may hold
 * anything.  Functions that fill a notice return 1 when there is a notice,
 * 0 when the answer means "nothing", and -EINVAL for garbage, with a short
 * static reason in *ret_why (for the log) when ret_why is not NULL.
 * They set every field of the notice except detected_ms (the caller's);
 * source is the cloud's name, raw the body (truncated). */
#ifndef SPOT_CLOUDPARSE_H
#define SPOT_CLOUDPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "spot/notice.h"

/* Largest body any parser accepts. */
#define CLOUDPARSE_MAX_BODY (64 * 1024)

/* AWS /latest/meta-data/spot/instance-action (200 only; 404 is "nothing"
 * and never reaches here): {"action": "terminate"|"stop"|"hibernate",
 * "time": RFC 3339}.  Kind from action, deadline from time, terminating. */
int aws_parse_instance_action(const char *body, size_t len, struct notice *n,
                              const char **ret_why);

/* AWS /latest/meta-data/events/recommendations/rebalance:
 * {"noticeTime": RFC 3339}.  Kind rebalance, advisory; deadline = the
 * notice time (no window is promised). */
int aws_parse_rebalance(const char *body, size_t len, struct notice *n, const char **ret_why);

/* AWS /latest/meta-data/events/maintenance/scheduled: a JSON array of
 * {"Code", "Description", "EventId", "NotAfter", "NotBefore", "State"},
 * dates like "21 Jan 2019 09:00:43 GMT".  Fills up to max notices, one per
 * event whose State is "active" (kind maintenance, event_id EventId;
 * terminating for the codes that take the instance down: instance-stop,
 * instance-retirement, instance-reboot, system-reboot), sets *ret_n.  The
 * deadline is NotBefore while it is after now_ms (UTC ms); once it has
 * passed, NotAfter, but at least AWS_EVENT_MIN_WINDOW_MS after now_ms.
 * "[]" gives 0 notices.  Returns -EINVAL when the body is no JSON array
 * (out untouched); otherwise 0, each event standing alone: one that
 * cannot be read is skipped and the others are read, and *ret_why then
 * says why the first skipped one was (it stays as it was when none was). */
#define AWS_EVENT_MIN_WINDOW_MS (30 * 1000)
int aws_parse_maintenance(const char *body, size_t len, int64_t now_ms, struct notice *out,
                          size_t max, size_t *ret_n, const char **ret_why);

/* AWS /latest/meta-data/autoscaling/target-lifecycle-state: plain text such
 * as "InService", "Warmed:Stopped", "Terminated".  "Terminated" is a notice
 * (kind terminate; the deadline is now + window_ms, computed by the caller:
 * here deadline_ms is left 0); any other state of letters, digits and ':'
 * is 0. */
int aws_parse_lifecycle(const char *body, size_t len, struct notice *n, const char **ret_why);

/* GCP /computeMetadata/v1/instance/preempted: "TRUE" or "FALSE" (a
 * trailing newline allowed).  Returns 1, 0 or -EINVAL. */
int gcp_parse_preempted(const char *body, size_t len, const char **ret_why);

/* GCP /computeMetadata/v1/instance/maintenance-event: "NONE" -> 0;
 * "MIGRATE_ON_HOST_MAINTENANCE" -> maintenance, advisory;
 * "TERMINATE_ON_HOST_MAINTENANCE" -> maintenance, terminating.  Deadline
 * left 0 for the caller (arrival + window). */
int gcp_parse_maintenance(const char *body, size_t len, struct notice *n, const char **ret_why);

/* Azure Scheduled Events document.  A scale set's placement group lists
 * the events of many VMs in one document: the cap on the body is larger
 * than the other clouds', and only this VM's events are kept. */
#define AZURE_MAX_BODY (256 * 1024)
#define AZURE_MAX_EVENTS 64          /* this VM's events kept; more are counted */
#define AZURE_MAX_BAD 8              /* events not understood, kept for the log */
struct azure_event {
    char id[64];                 /* EventId */
    char type[16];               /* Preempt, Terminate, Reboot, Redeploy, Freeze */
    char status[16];             /* Scheduled, Started */
    int64_t not_before_ms;       /* 0 when NotBefore is empty (Started) or not a date */
    int not_before_bad;          /* NotBefore was given but is not a date */
    int64_t duration_s;          /* DurationInSeconds, -1 when absent */
    int for_us;                  /* Resources holds vm_name, or guessed */
    int only_us;                 /* Resources holds vm_name and nothing else */
    int guessed;                 /* vm_name unknown: Resources holds one name */
    char description[160];
};
struct azure_doc {
    int64_t incarnation;         /* DocumentIncarnation */
    size_t total;                /* events in the document */
    size_t others;               /* events of other VMs (not kept) */
    size_t dropped;              /* this VM's events past AZURE_MAX_EVENTS */
    size_t n_bad;                /* events not understood (skipped) */
    struct {
        char id[64];             /* its EventId, "" when it has none */
        const char *why;         /* static */
    } bad[AZURE_MAX_BAD];
    size_t n;
    struct azure_event ev[AZURE_MAX_EVENTS];     /* this VM's */
};

/* Parse {"DocumentIncarnation": N, "Events": [...]} (at most
 * AZURE_MAX_BODY bytes) for the VM named vm_name (Resources is compared
 * case-insensitively: Azure VM names are).  When vm_name is NULL or "",
 * an event whose Resources lists exactly one name is taken as this VM's
 * (guessed; never only_us).  The document must be an object with its
 * incarnation and an Events array, or it is garbage (-EINVAL, *doc
 * untouched); each event then stands alone: one that cannot be understood
 * is counted in n_bad and skipped, the others are read.  Unknown fields
 * are ignored; known ones must have their types.  NotBefore is RFC 1123 as
 * documented or RFC 3339 (ISO 8601 with a zone). */
int azure_parse_events(const char *body, size_t len, const char *vm_name, struct azure_doc *doc,
                       const char **ret_why);

/* The notice for one Azure event: Preempt and Terminate -> terminate;
 * Reboot and Redeploy -> maintenance, terminating; Freeze -> maintenance,
 * advisory.  deadline = NotBefore, or now_ms + window_ms when empty.
 * event_id is the EventId.  Returns 1, or 0 for an unknown type. */
int azure_event_notice(const struct azure_event *ev, int64_t now_ms, int64_t window_ms,
                       struct notice *n);

/* Alibaba /latest/meta-data/instance/spot/termination-time: RFC 3339 UTC
 * ("2015-01-05T18:02:00Z").  Kind terminate, deadline that time. */
int alibaba_parse_termination(const char *body, size_t len, struct notice *n,
                              const char **ret_why);

/* Tencent /latest/meta-data/spot/termination-time: "2018-08-18 12:05:33"
 * in UTC+8.  Kind terminate, deadline that time. */
int tencent_parse_termination(const char *body, size_t len, struct notice *n,
                              const char **ret_why);

#endif
