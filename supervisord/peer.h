/* peer: authenticated connections between the nodes of a world, on the
 * loop (docs/protocols.md, peer protocol).
 *
 * One TCP connection per pair of nodes: a node dials the peers of higher
 * rank and accepts those of lower rank.  A connection is up after the
 * handshake, in which each side proves it holds the world key by MACing a
 * fresh nonce of the other's:
 *
 *   dialer   -> hello {job, rank, nonce}                  handshake key
 *   acceptor -> hello {job, rank, nonce, echo: the dialer's nonce}
 *   dialer   -> ack   {echo: the acceptor's nonce}        connection keys
 *
 * From the ack on, each direction's frames are sealed with a key derived
 * from the world key and both nonces (frame.h): a frame is valid on one
 * connection, one way, at one place in its sequence.  Then messages flow
 * both ways; each side sends a heartbeat every heartbeat_ms and calls a
 * peer down after dead_ms without a frame, on CLOCK_MONOTONIC (a step of
 * the wall clock parts no one).  A frame that fails a check (frame.h: not
 * a frame, another version, too long, wrong MAC, replayed, out of
 * sequence), a malformed message, a job or rank that does not fit: the
 * frame is dropped, logged (rate-limited), and its connection closed;
 * nothing else is disturbed.  A dialer retries with backoff.
 *
 * Anyone can open a connection: those without a handshake are bounded
 * (8 from one source, 64 in all, 3 s to finish it; the slowest closed
 * first), accept() running out of descriptors rests the listener for a
 * second instead of spinning, and every line a remote party can cause is
 * rate-limited (one a second of each kind). */
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

/* Connections refused so far (for tests and metrics): a frame that failed
 * a check, a handshake not done in time, one closed to make room. */
uint64_t peers_refused(const struct peers *p);

#endif
