/* peermsg: the world's messages, the bodies of peer frames (no I/O).
 *
 * A body is one JSON object with "v": 1 and "type".  peermsg_parse() takes
 * the types below, checks every member it knows (types, ranges, lengths)
 * and ignores unknown ones, so that a later minor revision may add some:
 *
 *   notice   a node's notice, to the coordinator   kind, terminating, deadline_ms, reason
 *   query    coordinator: say your step            gen, deadline_ms, reason, terminating
 *                                                   (a notice's round: the trainers stop
 *                                                   once saved)
 *   step     the answer                            gen, step
 *   prepare  coordinator: save at step for gen     gen, step, deadline_ms, reason, split
 *   saved    a node's shard is in the store        gen, rank, step (absent: the shard
 *                                                   holds no checkpoint, its trainers
 *                                                   write none), sha256, bytes
 *   commit   coordinator: gen is committed         gen, step
 *   abort    coordinator: gen is given up          gen, reason
 *   resume   coordinator: start from gen (none:    gen, world_size, master_addr, master_port,
 *            afresh)                                members (the ranks that run; absent:
 *                                                   all of them)
 *   leave    a node goes (after a notice)          reason
 *   ready    a node's command is not running: it   gen (the newest committed it knows)
 *            waits for resume
 *   hashed   a node's shard is hashed, its own     gen, rank, sha256 (the fingerprint of
 *            share of the chunks stored             its whole content)
 *   state    what a node knows of the world, the   live (the world's commands run),
 *            first message to a peer that is up     members (which ranks run them), gen
 *   pause    coordinator: stop the command and     reason
 *            wait (the world is about to grow)
 *
 * The handshake's hello/ack and heartbeats are peer.c's. */
#ifndef SPOT_PEERMSG_H
#define SPOT_PEERMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

enum peermsg_type {
    PEERMSG_NOTICE,
    PEERMSG_QUERY,
    PEERMSG_STEP,
    PEERMSG_PREPARE,
    PEERMSG_SAVED,
    PEERMSG_COMMIT,
    PEERMSG_ABORT,
    PEERMSG_RESUME,
    PEERMSG_LEAVE,
    PEERMSG_READY,
    PEERMSG_HASHED,
    PEERMSG_STATE,
    PEERMSG_PAUSE,
    PEERMSG__COUNT
};

/* The most ranks a members list names (and the largest world). */
#define PEERMSG_MAX_MEMBERS 1024

struct peermsg {
    enum peermsg_type type;
    uint64_t gen;                  /* >= 1 where the type has one; 0: absent */
    int64_t step;                  /* >= 0, -1 when absent */
    uint32_t rank, world_size;
    int64_t deadline_ms;           /* 0: none */
    bool terminating;
    bool split;                    /* prepare: split the upload (hashed) */
    bool live;                     /* state */
    uint32_t nmembers;             /* resume, state: 0 when absent */
    uint8_t members[PEERMSG_MAX_MEMBERS / 8]; /* a bit per rank */
    uint8_t sha256[32];
    uint64_t bytes;
    uint16_t master_port;
    char kind[16];                 /* notice kind, printable */
    char reason[128];              /* printable */
    char master_addr[64];          /* numeric address */
};

const char *peermsg_type_name(enum peermsg_type t);

/* Whether rank is in m's members list. */
bool peermsg_member(const struct peermsg *m, uint32_t rank);
/* Add rank (< PEERMSG_MAX_MEMBERS) to m's members list. */
void peermsg_add_member(struct peermsg *m, uint32_t rank);

/* Parse a frame's body.  Returns 0 with *ret set, or -EINVAL with the
 * reason in *why (static) and *ret untouched. */
int peermsg_parse(const char *body, size_t len, struct peermsg *ret, const char **why);

/* The message as a JSON object (with "v" and "type"), for peers_send();
 * NULL when out of memory. */
struct cJSON *peermsg_to_json(const struct peermsg *m);

#endif
