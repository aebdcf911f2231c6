/* rendezvous: a world's membership through the store (--rendezvous store),
 * on the loop.
 *
 * Each node with a rank writes <job>/world/rank-<r>.json with the address
 * its peer listener has (worldrec.h); while a rank is not up, the nodes
 * read the records that changed and learn where to dial.  A node started
 * without a rank (a replacement from an instance group, which cannot know
 * which node it replaces) writes join-<node>.json and waits; the
 * coordinator gives it the lowest vacant rank (a rank that is not up) in
 * assign-<node>.json, and the node takes it.  The store is the only
 * shared state: a record is as trusted as the store's credentials. */
#ifndef SPOTD_RENDEZVOUS_H
#define SPOTD_RENDEZVOUS_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct store;
struct rendezvous;

struct rendezvous_ops {
    /* rank listens at addr (new, or changed). */
    void (*addr)(void *arg, uint32_t rank, const char *addr);
    /* Is rank up (connected)?  Ranks that are not are vacant. */
    bool (*up)(void *arg, uint32_t rank);
    /* Does this node coordinate (and so give ranks to joiners)? */
    bool (*coordinates)(void *arg);
    /* join: the rank given (on the loop, once). */
    void (*assigned)(void *arg, uint32_t rank);
};

/* Returns NULL when out of memory.  store and ops are borrowed. */
struct rendezvous *rendezvous_new(struct event_base *base, struct store *store, const char *job,
                                  uint32_t world_size, const struct rendezvous_ops *ops,
                                  void *arg);
/* Start nothing new; true while a store operation is still under way (the
 * caller runs the loop until it is not, before freeing the store). */
bool rendezvous_stop(struct rendezvous *rv);
/* Only once rendezvous_stop() says false.  Takes NULL, returns NULL. */
struct rendezvous *rendezvous_free(struct rendezvous *rv);

/* This node holds rank at addr: write its record, and from now on, once a
 * second while some rank is not up, read the records that changed. */
void rendezvous_publish(struct rendezvous *rv, uint32_t rank, const char *addr);

/* This node has no rank: ask for one, reachable at addr. */
void rendezvous_join(struct rendezvous *rv, const char *addr);

#endif
