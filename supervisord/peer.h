/* peer: authenticated connections between the nodes of a world, on the
 * loop (docs/protocols.md, peer protocol).
 *
 * One TCP connection per pair of nodes: a node dials the peers of higher
 * rank and accepts those of lower rank.  A connection is up after the
 * handshake, in which each side proves it holds the world key by MACing a
 * fresh nonce of the other's:
 *
 *   dialer   -> hello {job, rank, nonce}
 *   acceptor -> hello {job, rank, nonce, echo: the dialer's nonce}
 *   dialer   -> ack   {echo: the acceptor's nonce}
 *
 * Then messages flow both ways; each side sends a heartbeat every
 * heartbeat_ms and calls a peer down after dead_ms without a frame.  A
 * frame that fails a check (frame.h: not a frame, too long, wrong MAC,
 * replayed, outside the clock window), a malformed message, a job or rank
 * that does not fit: the frame is dropped, logged (rate-limited), and its
 * connection closed; nothing else is disturbed.  A dialer retries with
 * backoff. */
#ifndef SPOTD_PEER_H
#define SPOTD_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/frame.h"

struct event_base;
struct cJSON;
struct peers;

#define PEER_RANKS_MAX 1024

struct peers_opts {
    struct event_base *base;
    const struct frame_key *key;   /* copied */
    const char *job;
    uint32_t rank;                 /* ours */
    uint32_t world_size;
    uint64_t heartbeat_ms;         /* 0: 1000 */
    uint64_t dead_ms;              /* 0: 5000 */
    uint64_t clock_window_ms;      /* 0: 30000 */
    /* A message from an up peer (type other than the handshake's and
     * heartbeat): the frame's body, a version 1 JSON object, valid during
     * the call (peermsg_parse() reads it). */
    void (*on_msg)(void *arg, uint32_t rank, const char *body, size_t len);
    void (*on_up)(void *arg, uint32_t rank);
    void (*on_down)(void *arg, uint32_t rank, const char *why);
    void *arg;
};

/* Returns NULL with the reason in err. */
struct peers *peers_new(const struct peers_opts *o, char *err, size_t errlen);
/* Takes NULL, returns NULL.  Not from inside its own callbacks. */
struct peers *peers_free(struct peers *p);

/* Listen on "ADDR:PORT" (numeric; port 0 picks one: peers_port()). */
int peers_listen(struct peers *p, const char *addr, char *err, size_t errlen);
int peers_port(const struct peers *p);

/* The address of rank (numeric "ADDR:PORT"); ranks above ours are dialed,
 * and redialed with backoff while they are not up. */
int peers_set_addr(struct peers *p, uint32_t rank, const char *addr, char *err, size_t errlen);

/* Send msg (an object; "v" is added) to rank.  -ENOTCONN when it is not
 * up, -EMSGSIZE when too long. */
int peers_send(struct peers *p, uint32_t rank, struct cJSON *msg);

bool peers_up(const struct peers *p, uint32_t rank);

/* Frames refused so far (for tests and metrics). */
uint64_t peers_refused(const struct peers *p);

#endif
