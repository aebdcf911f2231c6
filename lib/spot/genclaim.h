/* genclaim: generation numbers are claimed, never assumed.
 *
 * Two writers of one job (a replacement started while the old instance
 * still checkpoints, an operator's push, a restarted unit) both see the
 * same newest generation; were each to take "newest + 1", the second would
 * overwrite the first's manifests and commit record.  Before a writer puts
 * anything under gens/<gen>/ it claims gen:
 *
 * - where the store creates conditionally (the file store's link(2), an
 *   S3 server that honours If-None-Match: *), by creating
 *   gens/<gen>/CLAIM.json, which only one writer can do;
 * - where it cannot (Swift's s3api answers 501) or silently does not (a
 *   server that ignores the header: found out once, at the first claim, by
 *   creating a probe object twice), by writing gens/<gen>/claim-<writer>.json
 *   and listing gens/<gen>/ afterwards: a writer that sees anything there
 *   but its own claim withdraws it.  On a store whose listings show every
 *   write that finished before them (AWS S3, Swift, a file system), two
 *   writers can never both keep one number: the second to list sees the
 *   first's claim.  Both may withdraw; then each tries the next number
 *   after a random pause.
 *
 * The loser of a race takes the next number and says so in the log.  See
 * docs/store-format.md, "Claims". */
#ifndef SPOT_GENCLAIM_H
#define SPOT_GENCLAIM_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct store;
struct genclaim;

/* err 0 with the claimed generation (>= the one asked for), or -errno with
 * msg. */
typedef void (*genclaim_fn)(void *arg, int err, const char *msg, uint64_t gen);

/* job is copied; the writer id is random, one per genclaim.  NULL when out
 * of memory. */
struct genclaim *genclaim_new(struct event_base *base, struct store *store, const char *job);
/* Only with no claim under way.  Takes NULL, returns NULL. */
struct genclaim *genclaim_free(struct genclaim *g);

/* Claim the first free generation at or above from (1 .. GEN_MAX).  One
 * claim at a time per genclaim. */
void genclaim_claim(struct genclaim *g, uint64_t from, genclaim_fn done, void *arg);

/* Give back generation gen, claimed by this genclaim and never used: its
 * claim is deleted (nothing else is stored under it), so that a writer
 * that ends leaves no empty generation behind.  done as a store's. */
void genclaim_withdraw(struct genclaim *g, uint64_t gen, void (*done)(void *arg, int err,
                                                                       const char *msg),
                       void *arg);

/* Whether this store's conditional create holds (known after the first
 * claim): then commit records are created with it too. */
bool genclaim_conditional(const struct genclaim *g);

/* This writer's id (16 hex digits). */
const char *genclaim_writer(const struct genclaim *g);

/* How many numbers the claims found taken (for tests and the log). */
uint64_t genclaim_lost(const struct genclaim *g);

#endif
