/* world_decide: the world's decisions, with no I/O (see world.h): which
 * phases of the round take which peer message and what else it needs
 * (world_admit()), what a lost member does to the round (world_on_down()),
 * what the node that takes a lost coordinator's place does
 * (world_on_take_over()) and the step a generation holds
 * (world_commit_step()).  world.c gathers the facts and carries the
 * verdicts out; tests/unit/test_world.c drives every cell. */
#include "world.h"

#include <stdbool.h>

enum {
    N_COORD = 1 << 0,              /* this node coordinates */
    N_RUNNING = 1 << 1,            /* this node runs the round */
    N_MEMBER = 1 << 2,             /* this node is a member */
    N_FROM_MEMBER = 1 << 3,        /* the sender is a member */
    N_FROM_COORD = 1 << 4,         /* the sender coordinates */
    N_GEN = 1 << 5,                /* the round's generation */
    N_SENDER = 1 << 6,             /* it names its sender as the rank whose shard it reports */
};

/* The state x message table: in which phases of the round each message
 * counts (1) and what else it needs, checked once for all of them
 * (world_admit()); its handler decides the rest.  The round's own messages
 * (step, prepare, saved, hashed) count only in the phases that wait for
 * them and for the round's generation, a step only at the coordinator
 * that asked; the others change what this node knows of the world
 * whatever the round does. */
static const struct rule {
    bool in[WORLD_COMMITTING + 1]; /* by enum world_phase */
    unsigned needs;                /* N_* */
} rules[PEERMSG__COUNT] = {
    /*                    none claim query prepare committing */
    [PEERMSG_NOTICE]  = { { 1, 1, 1, 1, 1 }, 0 },
    [PEERMSG_QUERY]   = { { 1, 1, 1, 1, 1 }, N_MEMBER },
    [PEERMSG_STEP]    = { { 0, 0, 1, 0, 0 }, N_COORD | N_RUNNING | N_GEN },
    [PEERMSG_PREPARE] = { { 0, 0, 1, 0, 0 }, N_MEMBER | N_GEN },
    [PEERMSG_SAVED]   = { { 0, 0, 1, 1, 0 }, N_FROM_MEMBER | N_GEN | N_SENDER },
    [PEERMSG_HASHED]  = { { 0, 0, 1, 1, 0 }, N_FROM_MEMBER | N_GEN | N_SENDER },
    [PEERMSG_COMMIT]  = { { 1, 1, 1, 1, 1 }, 0 },
    [PEERMSG_ABORT]   = { { 1, 1, 1, 1, 1 }, 0 },
    [PEERMSG_RESUME]  = { { 1, 1, 1, 1, 1 }, 0 },
    [PEERMSG_LEAVE]   = { { 1, 1, 1, 1, 1 }, 0 },
    [PEERMSG_READY]   = { { 1, 1, 1, 1, 1 }, 0 },
    [PEERMSG_STATE]   = { { 1, 1, 1, 1, 1 }, 0 },
    [PEERMSG_PAUSE]   = { { 1, 1, 1, 1, 1 }, N_MEMBER | N_FROM_COORD },
};

enum world_verdict world_admit(enum peermsg_type t, const struct world_facts *f)
{
    const struct rule *r;
    unsigned have;

    if ((unsigned)t >= PEERMSG__COUNT)
        return WORLD_IGNORE;
    r = &rules[t];
    /* A lie about whose shard it is, whatever the round does. */
    if (r->needs & N_SENDER && !f->names_sender)
        return WORLD_REFUSE;
    have = (f->coordinator ? N_COORD : 0) | (f->running ? N_RUNNING : 0) |
           (f->member ? N_MEMBER : 0) | (f->from_member ? N_FROM_MEMBER : 0) |
           (f->from_coordinator ? N_FROM_COORD : 0) | (f->same_gen ? N_GEN : 0) |
           (f->names_sender ? N_SENDER : 0);
    if ((unsigned)f->phase > WORLD_COMMITTING || !r->in[f->phase] ||
        (r->needs & have) != r->needs)
        return WORLD_IGNORE;
    return WORLD_TAKE;
}

/* A member lost during the round: at the coordinator, a round whose
 * shards are being saved commits without it or aborts (maybe_commit()
 * tells which); one still asking for the step is given up, since the
 * step must be every member's.  The commit record being written needs
 * nobody.  Unless it said it leaves, the world pauses. */
unsigned world_on_down(const struct world_facts *f, bool left)
{
    unsigned acts = 0;

    if (!f->from_member)
        return 0;
    if (f->coordinator && f->phase == WORLD_PREPARE)
        acts |= WA_COMMIT;
    else if (f->coordinator && f->running &&
             (f->phase == WORLD_QUERY || f->phase == WORLD_CLAIM))
        acts |= WA_ABORT;
    if (!left)
        acts |= WA_PAUSE;
    return acts;
}

/* The coordinator's place fell to this node: a round its old coordinator
 * was asking the step for is given up (this node does not know what the
 * others answered); one being saved, this node runs on to its commit;
 * then the world resumes if it waits. */
unsigned world_on_take_over(const struct world_facts *f)
{
    if (f->phase == WORLD_QUERY && !f->running)
        return WA_ABORT | WA_RESUME;
    if (f->phase == WORLD_PREPARE)
        return WA_RUN | WA_COMMIT | WA_RESUME;
    return WA_RESUME;
}


/* The shards that hold a checkpoint must hold the same step, since the
 * trainers saved when the world asked; those that hold none (where only
 * global rank 0 writes) take it from them.  A generation of nothing but
 * empty shards would resume no one: it is not committed. */
enum world_step_verdict world_commit_step(const int64_t *steps, uint32_t n, int64_t *step,
                                          uint32_t *odd)
{
    *step = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (steps[i] < 0)
            continue;
        if (*step >= 0 && steps[i] != *step) {
            *odd = i;
            return WORLD_STEP_DIFFERS;
        }
        *step = steps[i];
    }
    return *step < 0 ? WORLD_STEP_NONE : WORLD_STEP_AGREED;
}
