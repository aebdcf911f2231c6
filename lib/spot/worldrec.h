/* worldrec: the rendezvous records of a world in the store (no I/O).
 *
 *   <job>/world/rank-<r>.json     a node holds rank r and listens at addr
 *   <job>/world/join-<node>.json  a node without a rank asks for one
 *   <job>/world/assign-<node>.json  the coordinator gives it rank r
 *
 * One JSON object each: {"v":1, "type":"rank"|"join"|"assign", "job",
 * "node" (16 to 64 lowercase hex digits, a node's random name), "rank"
 * (rank, assign), "addr" (rank; join, where known: numeric ADDR:PORT), "ts_ms"}.  What
 * is read comes from a store: every member is checked, unknown ones are
 * ignored, and a record of another job or a newer version is refused. */
#ifndef SPOT_WORLDREC_H
#define SPOT_WORLDREC_H

#include <stddef.h>
#include <stdint.h>

#define WORLDREC_MAX 4096           /* a record's size cap */
#define WORLDREC_NODE_MAX 64

enum worldrec_type { WORLDREC_RANK, WORLDREC_JOIN, WORLDREC_ASSIGN };

struct worldrec {
    enum worldrec_type type;
    char job[129];
    char node[WORLDREC_NODE_MAX + 1];
    uint32_t rank;
    char addr[80];
    int64_t ts_ms;
};

/* Returns 0, or -EINVAL with a static reason in *why (*ret untouched). */
int worldrec_parse(const char *text, size_t len, struct worldrec *ret, const char **why);

/* The record as compact JSON, malloc'ed; NULL when out of memory. */
char *worldrec_to_json(const struct worldrec *r, size_t *ret_len);

/* Its key: <job>/world/rank-<r>.json, join-<node>.json, assign-<node>.json. */
void worldrec_key(char *buf, size_t size, const struct worldrec *r);

/* A numeric "ADDR:PORT" or "[V6]:PORT", port 1..65535. */
int worldrec_addr_valid(const char *addr);

#endif
