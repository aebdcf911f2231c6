/* supervisord/world_decide.c: its table of messages (world_admit()),
 * which phases of the round take which peer message and what else each
 * needs, and what a lost member and a lost coordinator do to the round.
 * No world and no I/O: the facts are set by hand. */
#include <stdbool.h>

#include "harness.h"
#include "../../supervisord/world.h"

#define NPHASES (WORLD_COMMITTING + 1)

/* Every fact that lets a message through. */
static const struct world_facts all = {
    .coordinator = true, .running = true, .member = true, .from_member = true,
    .from_coordinator = true, .same_gen = true, .names_sender = true,
};

/* The table written out again by hand, to hold world.c's to it:
 * the phases that take each message (none claim query prepare committing). */
static const struct {
    enum peermsg_type t;
    bool in[NPHASES];
} phases[] = {
    { PEERMSG_NOTICE, { 1, 1, 1, 1, 1 } },
    { PEERMSG_QUERY, { 1, 1, 1, 1, 1 } },
    { PEERMSG_STEP, { 0, 0, 1, 0, 0 } },
    { PEERMSG_PREPARE, { 0, 0, 1, 0, 0 } },
    { PEERMSG_SAVED, { 0, 0, 1, 1, 0 } },
    { PEERMSG_HASHED, { 0, 0, 1, 1, 0 } },
    { PEERMSG_COMMIT, { 1, 1, 1, 1, 1 } },
    { PEERMSG_ABORT, { 1, 1, 1, 1, 1 } },
    { PEERMSG_RESUME, { 1, 1, 1, 1, 1 } },
    { PEERMSG_LEAVE, { 1, 1, 1, 1, 1 } },
    { PEERMSG_READY, { 1, 1, 1, 1, 1 } },
    { PEERMSG_STATE, { 1, 1, 1, 1, 1 } },
    { PEERMSG_PAUSE, { 1, 1, 1, 1, 1 } },
};

static enum world_verdict admit_in(enum peermsg_type t, enum world_phase p)
{
    struct world_facts f = all;

    f.phase = p;
    return world_admit(t, &f);
}

TEST(world_admit_phases)
{
    CHECK_INT(sizeof(phases) / sizeof(phases[0]), PEERMSG__COUNT);
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
        for (int p = 0; p < NPHASES; p++) {
            enum world_verdict v = admit_in(phases[i].t, (enum world_phase)p);

            if (v != (phases[i].in[p] ? WORLD_TAKE : WORLD_IGNORE))
                printf("  %s in phase %d:\n", peermsg_type_name(phases[i].t), p);
            CHECK_INT(v, phases[i].in[p] ? WORLD_TAKE : WORLD_IGNORE);
        }
    /* Nothing unknown gets through. */
    CHECK_INT(admit_in(PEERMSG__COUNT, WORLD_NONE), WORLD_IGNORE);
    CHECK_INT(admit_in((enum peermsg_type)-1, WORLD_NONE), WORLD_IGNORE);
    CHECK_INT(admit_in(PEERMSG_NOTICE, (enum world_phase)NPHASES), WORLD_IGNORE);
}

/* Each message, in a phase that takes it, with one fact missing. */
static enum world_verdict admit_without(enum peermsg_type t, enum world_phase p, int fact)
{
    struct world_facts f = all;
    bool *facts[] = { &f.coordinator, &f.running, &f.member, &f.from_member,
                      &f.from_coordinator, &f.same_gen, &f.names_sender };

    f.phase = p;
    *facts[fact] = false;
    return world_admit(t, &f);
}

TEST(world_admit_needs)
{
    enum { COORD, RUNNING, MEMBER, FROM_MEMBER, FROM_COORD, GEN, SENDER, NFACTS };
    /* What each message needs, by fact; R: refused (said in the log). */
    static const struct {
        enum peermsg_type t;
        enum world_phase p;
        const char *needs;         /* by fact: '.' not needed, 'I' ignored, 'R' refused */
    } rows[] = {
        { PEERMSG_NOTICE, WORLD_NONE, "......." },
        { PEERMSG_QUERY, WORLD_NONE, "..I...." },
        { PEERMSG_STEP, WORLD_QUERY, "II...I." },
        { PEERMSG_PREPARE, WORLD_QUERY, "..I..I." },
        { PEERMSG_SAVED, WORLD_PREPARE, "...I.IR" },
        { PEERMSG_HASHED, WORLD_QUERY, "...I.IR" },
        { PEERMSG_COMMIT, WORLD_COMMITTING, "......." },
        { PEERMSG_ABORT, WORLD_CLAIM, "......." },
        { PEERMSG_RESUME, WORLD_NONE, "......." },
        { PEERMSG_LEAVE, WORLD_NONE, "......." },
        { PEERMSG_READY, WORLD_NONE, "......." },
        { PEERMSG_STATE, WORLD_PREPARE, "......." },
        { PEERMSG_PAUSE, WORLD_NONE, "..I.I.." },
    };

    CHECK_INT(sizeof(rows) / sizeof(rows[0]), PEERMSG__COUNT);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        for (int fact = 0; fact < NFACTS; fact++) {
            char want = rows[i].needs[fact];
            enum world_verdict v = admit_without(rows[i].t, rows[i].p, fact);
            enum world_verdict expect = want == 'I' ? WORLD_IGNORE
                                        : want == 'R' ? WORLD_REFUSE : WORLD_TAKE;

            if (v != expect)
                printf("  %s without fact %d:\n", peermsg_type_name(rows[i].t), fact);
            CHECK_INT(v, expect);
        }
}

/* A report of another rank's shard is refused whatever the round does,
 * before anything else is looked at. */
TEST(world_admit_sender)
{
    struct world_facts f = { .phase = WORLD_NONE, .names_sender = false };

    CHECK_INT(world_admit(PEERMSG_SAVED, &f), WORLD_REFUSE);
    CHECK_INT(world_admit(PEERMSG_HASHED, &f), WORLD_REFUSE);
    CHECK_INT(world_admit(PEERMSG_STEP, &f), WORLD_IGNORE);
    CHECK_INT(world_admit(PEERMSG_COMMIT, &f), WORLD_TAKE);
    f.names_sender = true;
    CHECK_INT(world_admit(PEERMSG_SAVED, &f), WORLD_IGNORE);
}

/* A peer lost: what the round does, by phase, written out again by hand
 * (none claim query prepare committing), for a member that did not say it
 * leaves.  C: commit or abort without it; A: abort; P: pause. */
TEST(world_on_down_phases)
{
    enum { C = WA_COMMIT, A = WA_ABORT, P = WA_PAUSE };
    static const struct {
        bool coordinator, running;
        unsigned want[NPHASES];
    } rows[] = {
        /* the coordinator running the round */
        { true, true, { P, A | P, A | P, C | P, P } },
        /* the coordinator of a round another rank ran (it took over) */
        { true, false, { P, P, P, C | P, P } },
        /* any other node: only the pause */
        { false, true, { P, P, P, P, P } },
        { false, false, { P, P, P, P, P } },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        for (int p = 0; p < NPHASES; p++) {
            struct world_facts f = { .phase = (enum world_phase)p,
                                     .coordinator = rows[i].coordinator,
                                     .running = rows[i].running, .from_member = true };

            if (world_on_down(&f, false) != rows[i].want[p])
                printf("  row %zu, phase %d:\n", i, p);
            CHECK_INT(world_on_down(&f, false), rows[i].want[p]);
            /* One that said it leaves: the same, without the pause. */
            CHECK_INT(world_on_down(&f, true), rows[i].want[p] & ~(unsigned)WA_PAUSE);
            /* One that is not a member: nothing. */
            f.from_member = false;
            CHECK_INT(world_on_down(&f, false), 0);
        }
}

/* The coordinator lost: the node that takes its place gives up a round
 * whose step was still being chosen, runs on one being saved (to its
 * commit, or its abort), and resumes a waiting world. */
TEST(world_on_take_over_phases)
{
    enum { A = WA_ABORT, R = WA_RUN, C = WA_COMMIT, S = WA_RESUME };
    /* (none claim query prepare committing), not running / running */
    static const unsigned want[2][NPHASES] = {
        { S, S, A | S, R | C | S, S },
        { S, S, S, R | C | S, S },
    };

    for (int run = 0; run < 2; run++)
        for (int p = 0; p < NPHASES; p++) {
            struct world_facts f = { .phase = (enum world_phase)p, .running = run };

            CHECK_INT(world_on_take_over(&f), want[run][p]);
        }
}

/* The step a generation holds: every shard that holds a checkpoint names
 * the same one; shards that hold none (-1: only global rank 0 writes)
 * take it; nothing but empty shards, or two steps, commit nothing. */
TEST(world_commit_step_rows)
{
    static const struct {
        int64_t steps[4];
        uint32_t n;
        enum world_step_verdict want;
        int64_t step;
        uint32_t odd;
    } rows[] = {
        { { 150, 150, 150 }, 3, WORLD_STEP_AGREED, 150, 0 },
        { { 150, -1, -1, -1 }, 4, WORLD_STEP_AGREED, 150, 0 },   /* rank 0 writes */
        { { -1, -1, 149 }, 3, WORLD_STEP_AGREED, 149, 0 },       /* the writer is last */
        { { 0, 0 }, 2, WORLD_STEP_AGREED, 0, 0 },                /* markers with no step */
        { { 150, -1, 300 }, 3, WORLD_STEP_DIFFERS, 150, 2 },
        { { 150, 151 }, 2, WORLD_STEP_DIFFERS, 150, 1 },
        { { -1, -1 }, 2, WORLD_STEP_NONE, -1, 0 },
        { { 0 }, 0, WORLD_STEP_NONE, -1, 0 },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t step = 7;
        uint32_t odd = 0;

        CHECK_INT(world_commit_step(rows[i].steps, rows[i].n, &step, &odd), rows[i].want);
        CHECK_INT((int)step, (int)rows[i].step);
        if (rows[i].want == WORLD_STEP_DIFFERS)
            CHECK_INT((int)odd, (int)rows[i].odd);
    }
}
