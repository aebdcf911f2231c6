/* timeline: after every notice, where its time went.
 *
 * From the event records (log_observe()) it follows a notice to the
 * checkpoint it brought (or the one it found under way) and, when that
 * checkpoint commits, fails, or its deadline passes first, logs one
 * `timeline` event: the time from the notice split into its phases (wait,
 * save, upload, commit), the margin left before the checkpoint's deadline,
 * and, when the deadline was missed, the phase it was missed in and the
 * phases that took longer than the plan's figures (their budgets, from the
 * last checkpoints).  docs/events.md has the record. */
#ifndef SPOTD_TIMELINE_H
#define SPOTD_TIMELINE_H

struct event_base;
struct timeline;

/* NULL when out of memory (said in the log; nothing else changes). */
struct timeline *timeline_new(struct event_base *base);
/* Takes NULL. */
void timeline_free(struct timeline *t);

#endif
