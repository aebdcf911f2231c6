/* jobtree: the store format's own names below a job (docs/store-format.md,
 * Keys).  A key that is not exactly one of them is foreign: an operator's
 * backup copy, another tool's file, a stray upload.  The store's readers
 * never take a foreign object for part of a generation, and gc never
 * deletes one.
 *
 *   <job>/chunks/<2 hex>/<64 hex>           a chunk (the 2 are the first 2)
 *   <job>/gens/<8 digits>/COMMIT.json       the commit record
 *   <job>/gens/<8 digits>/rank-<r>.json     a node manifest (r: no leading 0)
 *   <job>/gens/<8 digits>/CLAIM.json        the number's claim
 *   <job>/gens/<8 digits>/claim-<16 hex>.json  a writer's claim
 *   <job>/writers/probe-<16 hex>.json       a writer's test of the store
 *   <job>/world/rank-<r>.json, join-<node>.json, assign-<node>.json
 *   <job>/LATEST                            the pointer to the newest record
 *
 * Hex digits are lowercase; a generation is 00000001 to 99999999. */
#ifndef SPOT_JOBTREE_H
#define SPOT_JOBTREE_H

#include <stdint.h>

#include "spot/chunk.h"

enum jobtree_kind {
    JOBTREE_FOREIGN,      /* not below the job, or no name of the format */
    JOBTREE_CHUNK,
    JOBTREE_COMMIT,
    JOBTREE_MANIFEST,
    JOBTREE_CLAIM,        /* CLAIM.json */
    JOBTREE_WRITER_CLAIM, /* claim-<writer>.json */
    JOBTREE_PROBE,
    JOBTREE_WORLD,
    JOBTREE_LATEST,
};

struct jobtree_name {
    enum jobtree_kind kind;
    uint64_t gen;                  /* COMMIT, MANIFEST, CLAIM, WRITER_CLAIM */
    uint32_t rank;                 /* MANIFEST */
    uint8_t hash[CHUNK_HASH_LEN];  /* CHUNK */
};

/* What key is below job.  Returns the kind (also in *ret when ret is not
 * NULL); JOBTREE_FOREIGN leaves the rest of *ret zero. */
enum jobtree_kind jobtree_parse(const char *job, const char *key, struct jobtree_name *ret);

/* Whether kind is a generation's object (COMMIT to WRITER_CLAIM). */
static inline int jobtree_in_gen(enum jobtree_kind kind)
{
    return kind >= JOBTREE_COMMIT && kind <= JOBTREE_WRITER_CLAIM;
}

#endif
