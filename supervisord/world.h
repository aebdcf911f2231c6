/* world: the nodes of one job agree on checkpoints and resume together
 * (docs/protocols.md, "the world").
 *
 * Membership: world_size ranks, each node knowing every peer's address from
 * --peers, or learning them from the store (rendezvous.h, world_set_addr());
 * peer.h dials and authenticates them.  The coordinator is the
 * lowest rank that is up, this node included; when it goes, the next one
 * is, without an election: every node sees the same connections go.
 *
 * A checkpoint is one round, run by the coordinator for a generation G:
 *
 *   trigger (any node: notice, periodic, request, manual) -> coordinator
 *   coordinator -> all: query G          each node asks its trainers their step
 *   all -> coordinator: step G s         (the trainers wait at s meanwhile)
 *   coordinator -> all: prepare G S      S = the largest s + 1, reachable by all
 *   all -> all: hashed G rank fingerprint  each node hashed its shard and stored
 *                                        its share of the chunks; when every
 *                                        fingerprint is the same, the others
 *                                        store the rest, else each does
 *   all -> all: saved G rank digest      each node uploaded its shard
 *   coordinator: writes COMMIT.json once every rank's saved is in
 *   coordinator -> all: commit G         (or abort G, and G is never used)
 *
 * saved goes to every node, so that a coordinator that takes over in the
 * middle of a round knows what the old one knew: it commits G when every
 * shard is in, aborts it when a rank that has not saved is down, and
 * otherwise waits for the rest until the round's deadline.  A round whose
 * query or prepare it did not see is aborted.
 *
 * The command runs only while the world is whole.  A node starts waiting;
 * when every rank is up and waiting (ready), the coordinator announces
 * resume with the newest committed generation, and every node restores its
 * shard and starts its command.  When a peer leaves (after its last
 * commit) or goes down, every other node stops its command and waits
 * again, until a replacement has taken the vacant rank.
 *
 * An elastic world (min_nodes < world_size) also resumes short: once
 * min_nodes or more have waited join_ms for the rest (and more than half
 * of the ranks not known gone are among them), the coordinator resumes
 * those, the members, with the trainers numbered 0..n-1 among them.  A
 * rank that comes up while it runs short waits; the coordinator
 * checkpoints the members, pauses them (pause) and resumes everyone. */
#ifndef SPOTD_WORLD_H
#define SPOTD_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/frame.h"
#include "spot/peermsg.h"

struct event_base;
struct commit;
struct world;

/* What the world asks of its node (the orchestrator); every call is on the
 * loop, never inside the world_* call that caused it unless said so. */
struct world_ops {
    /* Round gen begins: say the trainers' step with world_step() (or
     * world_failed()); terminating: a terminating notice's round, after
     * which the trainers stop (one that saves by exiting may exit). */
    void (*query)(void *arg, uint64_t gen, int64_t deadline_ms, bool terminating,
                  const char *reason);
    /* Save at step, upload, then world_saved(); split: store the share
     * of the chunks this rank owns, then world_hashed() (see split). */
    void (*prepare)(void *arg, uint64_t gen, int64_t step, bool split);
    /* Every rank's shard of gen is hashed (world_hashed()): same when all
     * hold the same content, so that each stores only its share. */
    void (*split)(void *arg, uint64_t gen, bool same);
    /* gen is committed (step: what it holds). */
    void (*commit)(void *arg, uint64_t gen, int64_t step);
    /* gen is given up. */
    void (*abort)(void *arg, uint64_t gen, const char *reason);
    /* A peer is gone: stop the command, then world_ready(). */
    void (*pause)(void *arg, const char *why);
    /* Start the command from gen (0: afresh). */
    void (*resume)(void *arg, uint64_t gen, const char *master_addr, unsigned master_port);
    /* Coordinator only: claim generation gen, or the first free one after
     * it (another writer of the job may hold it), then world_claimed().
     * NULL: gen is taken as it is. */
    void (*claim)(void *arg, uint64_t gen);
    /* Coordinator only: write gen's commit record, then world_committed(). */
    void (*write_commit)(void *arg, const struct commit *c);
    /* Coordinator only: which generation to resume from?  Answer with
     * world_resume_from(). */
    void (*pick_resume)(void *arg);
};

struct world_opts {
    struct event_base *base;
    const char *job;
    uint32_t rank, world_size;
    const char *listen;            /* "ADDR:PORT" */
    const char *const *peers;      /* world_size "ADDR:PORT", ours included; NULL,
                                      or NULL entries: learnt later (world_set_addr) */
    const struct frame_key *key;   /* NULL: --insecure */
    uint64_t dead_ms;              /* a silent peer is down; 0: 5000 */
    uint32_t min_nodes;            /* elastic: resume with this many after join_ms */
    uint64_t join_ms;
    unsigned master_port;          /* SPOT_MASTER_PORT */
    bool split;                    /* a coordinator's rounds split uploads */
    const char *method;            /* for the commit record */
    const struct world_ops *ops;
    void *arg;
};

/* Returns NULL with the reason in err (listening included). */
struct world *world_new(const struct world_opts *o, char *err, size_t errlen);
/* Takes NULL, returns NULL. */
struct world *world_free(struct world *w);

/* The node waits for the world (its command is not running); newest is the
 * newest committed generation it knows (0: none). */
void world_ready(struct world *w, uint64_t newest);

/* A checkpoint is wanted (kind: a notice's, or "checkpoint" for the other
 * triggers; deadline_ms 0: the default).  It goes to the coordinator. */
void world_trigger(struct world *w, const char *kind, const char *reason, bool terminating,
                   int64_t deadline_ms);

/* Answers and reports for round gen.  world_saved()'s step -1: this
 * node's shard holds no checkpoint (its trainers write none, as where
 * only global rank 0 writes: --ckpt-writers rank0). */
void world_step(struct world *w, uint64_t gen, int64_t step);
void world_hashed(struct world *w, uint64_t gen, const uint8_t fingerprint[32]);
void world_saved(struct world *w, uint64_t gen, int64_t step, const uint8_t sha256[32],
                 uint64_t bytes);
void world_failed(struct world *w, uint64_t gen, const char *reason);
void world_committed(struct world *w, uint64_t gen, int err, const char *msg);
/* The round's number, as ops->claim() got it (err: the round is given up). */
void world_claimed(struct world *w, int err, const char *msg, uint64_t gen);
void world_resume_from(struct world *w, uint64_t gen);

/* This node goes (its last checkpoint is committed, or its command ended
 * for good): the others are told why. */
void world_leave(struct world *w, const char *reason);

/* Where rank listens (rendezvous): new, or changed. */
int world_set_addr(struct world *w, uint32_t rank, const char *addr);
/* Where this node listens: "ADDR:PORT", the port the listener got. */
const char *world_listen_addr(const struct world *w);
bool world_up(const struct world *w, uint32_t rank);

bool world_is_coordinator(const struct world *w);
/* This node's rank and the world's size, as --rank and --world-size say. */
uint32_t world_rank(const struct world *w);
uint32_t world_size(const struct world *w);
/* What the trainers see: this node's number among the members of the last
 * resume, and how many they are (the same as above unless an elastic world
 * runs short). */
uint32_t world_trainer_rank(const struct world *w);
uint32_t world_trainer_size(const struct world *w);
/* The coordinator's rank; how many ranks are up (this one included). */
uint32_t world_coordinator(const struct world *w);
uint32_t world_alive(const struct world *w);
/* The master address of the training (rank 0's host). */
const char *world_master_addr(const struct world *w);
/* Frames refused so far. */
uint64_t world_refused(const struct world *w);

/* ---- the checks every peer message passes first ----------------------------
 *
 * Which phases of the round take which message, and what else a message
 * needs before its handler runs: world_decide.c's table, here so that the unit
 * tests can read it without a world (no I/O). */

/* The round as this node sees it.  WORLD_CLAIM: the coordinator claims the
 * round's generation number (no other rank knows of the round yet). */
enum world_phase { WORLD_NONE, WORLD_CLAIM, WORLD_QUERY, WORLD_PREPARE, WORLD_COMMITTING };

/* What those checks look at: the world as this node sees it, and the
 * message from its sender. */
struct world_facts {
    enum world_phase phase;
    bool coordinator;              /* this node coordinates */
    bool running;                  /* this node runs the round (it sent the query) */
    bool member;                   /* this node is a member: it has a trainer to ask */
    bool from_member;              /* the sender is a member */
    bool from_coordinator;         /* the sender coordinates */
    bool same_gen;                 /* the message's generation is the round's */
    bool names_sender;             /* the rank the message names is its sender's */
};

enum world_verdict {
    WORLD_TAKE,                    /* its handler runs */
    WORLD_IGNORE,                  /* not for this phase or this node: dropped */
    WORLD_REFUSE,                  /* it reports another rank's shard: dropped, and said */
};

/* What becomes of a peer message of type t under f. */
enum world_verdict world_admit(enum peermsg_type t, const struct world_facts *f);

/* ---- a peer lost, a coordinator lost: the round's decisions -----------------
 *
 * What this node does with the round when a peer goes down (world_on_down)
 * and when the coordinator's place falls to it (world_on_take_over): from
 * the phase and f's coordinator, running and from_member (the rank that
 * went down is a member), with no I/O; world.c carries the actions out in
 * this order. */
enum world_act {
    WA_COMMIT = 1 << 0,            /* see whether the round commits, or aborts without it */
    WA_ABORT = 1 << 1,             /* the round is given up */
    WA_RUN = 1 << 2,               /* this node runs the round its old coordinator ran */
    WA_PAUSE = 1 << 3,             /* the command stops until the world is whole */
    WA_RESUME = 1 << 4,            /* see whether the world can resume */
};

/* A peer went down; left: it said it leaves first. */
unsigned world_on_down(const struct world_facts *f, bool left);
/* This node became the coordinator. */
unsigned world_on_take_over(const struct world_facts *f);

/* ---- the step a generation holds ---------------------------------------------
 *
 * The members' shards are in; steps[0..n-1] are the steps they hold, -1
 * for a shard that holds no checkpoint (its node's trainers write none).
 * The generation holds the step every other shard names: AGREED with it
 * in *step; DIFFERS when two shards name different steps (*step and
 * steps[*odd]); NONE when no shard names one (nothing was written). */
enum world_step_verdict { WORLD_STEP_AGREED, WORLD_STEP_DIFFERS, WORLD_STEP_NONE };

enum world_step_verdict world_commit_step(const int64_t *steps, uint32_t n, int64_t *step,
                                          uint32_t *odd);

#endif
