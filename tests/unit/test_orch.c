/* supervisord/orch_decide.c: the orchestrator's (state, event) table,
 * driven cell by cell with the facts set by hand, then its invariants
 * over every combination of facts, then the failure paths as sequences
 * of events.  No orchestrator and no I/O. */
#include <stdbool.h>
#include <string.h>

#include "harness.h"
#include "../../supervisord/orch_decide.h"

#define NS ORCH_NSTATES
#define S_ (-1) /* the cell keeps the state it is in */

struct cell {
    int next;                      /* enum orch_state, or S_ */
    unsigned acts;
};

#define FIN_GO (A_FINISH | A_CLAIM_NEXT)       /* ended, the job goes on */
#define FIN_STOP (A_FINISH | A_STOP_UNSAVED)   /* ended, the last: nothing new */

/* A node alone, trainers connected, a committed generation, nothing
 * making the checkpoint under way the last: every cell, written out
 * again by hand.  Columns: resuming idle saving uploading committing
 * draining waiting. */
static const struct cell alone[EV__COUNT][NS] = {
    [EV_NOTICE] = { { S_, A_HOLD }, { IDLE, A_BEGIN }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                    { S_, 0 }, { S_, 0 } },
    [EV_TERMINATING] = { { RESUMING, A_HOLD }, { IDLE, A_BEGIN }, { SAVING, A_MAKE_LAST },
                         { UPLOADING, A_MAKE_LAST }, { COMMITTING, A_MAKE_LAST }, { S_, 0 },
                         { WAITING, A_END } },
    [EV_TICK] = { { S_, 0 }, { IDLE, A_BEGIN }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                  { S_, 0 } },
    [EV_REQUEST] = { { S_, 0 }, { IDLE, A_BEGIN }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                     { S_, 0 } },
    [EV_FOUND] = { { S_, 0 }, { IDLE, A_BEGIN }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                   { S_, 0 } },
    [EV_TRAINER_SAVED] = { { S_, 0 }, { S_, 0 }, { SAVING, A_TO_METHOD }, { S_, 0 }, { S_, 0 },
                           { S_, 0 }, { S_, 0 } },
    [EV_QUERY] = { { S_, A_REFUSE }, { SAVING, A_START }, { S_, A_REFUSE }, { S_, A_REFUSE },
                   { S_, A_REFUSE }, { S_, A_REFUSE }, { S_, A_REFUSE } },
    [EV_GO] = { { S_, 0 }, { SAVING, A_START }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                { S_, 0 } },
    [EV_TOO_LATE] = { { S_, 0 }, { DRAINING, A_STOP_UNSAVED }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                      { S_, 0 }, { S_, 0 } },
    [EV_SAVED] = { { S_, 0 }, { S_, 0 }, { UPLOADING, A_UPLOAD }, { S_, 0 }, { S_, 0 },
                   { S_, 0 }, { S_, 0 } },
    [EV_NOTHING_NEW] = { { S_, 0 }, { S_, 0 }, { IDLE, A_DISCARD }, { S_, 0 }, { S_, 0 },
                         { S_, 0 }, { S_, 0 } },
    [EV_UPLOADED] = { { S_, 0 }, { S_, 0 }, { S_, 0 }, { COMMITTING, A_COMMIT }, { S_, 0 },
                      { S_, 0 }, { S_, 0 } },
    [EV_COMMITTED] = { { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                       { IDLE, A_RECORD | FIN_GO }, { S_, 0 }, { S_, 0 } },
    [EV_FAILED] = { { S_, 0 }, { S_, 0 }, { IDLE, FIN_GO }, { IDLE, FIN_GO }, { IDLE, FIN_GO },
                    { S_, 0 }, { S_, 0 } },
    [EV_RESUMED] = { { IDLE, A_RUN }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                     { S_, 0 } },
    [EV_WORLD_RESUME] = { { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                          { RESUMING, A_RESTORE } },
    [EV_PARKED] = { { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 }, { S_, 0 },
                    { S_, 0 } },
};

/* The cells that differ from alone[] under one changed fact. */
struct diff {
    enum orch_event ev;
    enum orch_state in;
    struct cell want;
};

/* The checkpoint under way is the last (a terminating notice came). */
static const struct diff last[] = {
    { EV_TERMINATING, SAVING, { S_, 0 } },
    { EV_TERMINATING, UPLOADING, { S_, 0 } },
    { EV_TERMINATING, COMMITTING, { S_, 0 } },
    { EV_NOTHING_NEW, SAVING, { DRAINING, A_DISCARD | A_STOP_SAVED } },
    { EV_COMMITTED, COMMITTING, { DRAINING, A_RECORD | A_FINISH | A_STOP_SAVED } },
    { EV_FAILED, SAVING, { DRAINING, FIN_STOP } },
    { EV_FAILED, UPLOADING, { DRAINING, FIN_STOP } },
    { EV_FAILED, COMMITTING, { DRAINING, FIN_STOP } },
};

/* Made the last after the method's save began, by a method that saves the
 * last one differently (CRIU leaves the tree stopped): it ends, and the
 * last one begins again. */
static const struct diff last_untold[] = {
    { EV_TERMINATING, SAVING, { S_, 0 } },
    { EV_TERMINATING, UPLOADING, { S_, 0 } },
    { EV_TERMINATING, COMMITTING, { S_, 0 } },
    { EV_NOTHING_NEW, SAVING, { DRAINING, A_DISCARD | A_STOP_SAVED } },
    { EV_COMMITTED, COMMITTING, { IDLE, A_RECORD | A_FINISH | A_AGAIN } },
    { EV_FAILED, SAVING, { IDLE, A_FINISH | A_AGAIN } },
    { EV_FAILED, UPLOADING, { IDLE, A_FINISH | A_AGAIN } },
    { EV_FAILED, COMMITTING, { IDLE, A_FINISH | A_AGAIN } },
};

/* The world gave the checkpoint under way up: the step that ends next
 * ends it. */
static const struct diff aborted[] = {
    { EV_SAVED, SAVING, { IDLE, FIN_GO } },
    { EV_UPLOADED, UPLOADING, { IDLE, FIN_GO } },
};

/* A terminating notice came while resuming (A_END): the command is not
 * started, the node goes. */
static const struct diff ending[] = {
    { EV_RESUMED, RESUMING, { DRAINING, A_END } },
};

/* The terminating notice decided is far: it is held until it is due,
 * whatever runs; a node that goes already has no use for it. */
static const struct diff far[] = {
    { EV_TERMINATING, RESUMING, { S_, A_HOLD } },
    { EV_TERMINATING, IDLE, { S_, A_HOLD } },
    { EV_TERMINATING, SAVING, { S_, A_HOLD } },
    { EV_TERMINATING, UPLOADING, { S_, A_HOLD } },
    { EV_TERMINATING, COMMITTING, { S_, A_HOLD } },
    { EV_TERMINATING, WAITING, { S_, A_HOLD } },
};

/* The terminating notice decided leaves no room for a checkpoint, or the
 * store cannot be read: while resuming, the command is not started. */
static const struct diff no_room[] = {
    { EV_TERMINATING, RESUMING, { RESUMING, A_END } },
};

/* Notices came while resuming: once the command runs they are acted on. */
static const struct diff held[] = {
    { EV_RESUMED, RESUMING, { IDLE, A_RUN | A_HELD } },
};

/* ... one of them terminating, and no room is left for its checkpoint. */
static const struct diff held_late[] = {
    { EV_TERMINATING, RESUMING, { RESUMING, A_END } },
    { EV_RESUMED, RESUMING, { DRAINING, A_END } },
};

/* spotd itself is ending (its command gone, or never started): nothing
 * new starts. */
static const struct diff finishing[] = {
    { EV_RESUMED, RESUMING, { IDLE, 0 } },
};

/* No trainer connected (the app method before libckpt's hello). */
static const struct diff nobody[] = {
    { EV_TICK, IDLE, { S_, 0 } },
    { EV_REQUEST, IDLE, { S_, 0 } },
};

/* A world's node with its rank, not the coordinator, its command running. */
static const struct diff world_node[] = {
    { EV_NOTICE, RESUMING, { S_, 0 } },
    { EV_NOTICE, IDLE, { IDLE, A_BEGIN } },
    { EV_TERMINATING, RESUMING, { RESUMING, A_LEAVE | A_END } },
    { EV_TERMINATING, WAITING, { WAITING, A_LEAVE | A_END } },
    { EV_TICK, IDLE, { S_, 0 } },
    { EV_REQUEST, IDLE, { IDLE, A_TRIGGER } },
    { EV_FOUND, IDLE, { S_, 0 } },
    { EV_GO, IDLE, { IDLE, A_TRIGGER } },
    { EV_COMMITTED, COMMITTING, { IDLE, A_RECORD | FIN_GO | A_READY } },
    { EV_FAILED, SAVING, { IDLE, FIN_GO | A_READY } },
    { EV_FAILED, UPLOADING, { IDLE, FIN_GO | A_READY } },
    { EV_FAILED, COMMITTING, { IDLE, FIN_GO | A_READY } },
};

static const struct orch_facts base = {
    .state = IDLE,
    .trainers = true,
    .have_gen = true,
    .told_last = true,
};

static int check_cell(const struct orch_facts *f0, enum orch_event ev, enum orch_state s,
                      struct cell want, const char *table)
{
    struct orch_facts f = *f0;
    struct orch_decision d;
    int next = want.next == S_ ? (int)s : want.next;

    f.state = s;
    d = orch_decide(&f, ev);
    if ((int)d.next == next && d.acts == want.acts)
        return 0;
    printf("  %s: %s in %s: %s with %#x, expected %s with %#x\n", table, orch_event_str(ev),
           orch_state_str(s), orch_state_str(d.next), d.acts,
           orch_state_str((enum orch_state)next), want.acts);
    harness_failed = 1;
    return 1;
}

/* Every cell of alone[], with the cells of diffs[] instead where listed. */
static void check_table(const struct orch_facts *f, const struct diff *diffs, size_t n,
                        const char *name)
{
    for (int ev = 0; ev < EV__COUNT; ev++)
        for (int s = 0; s < NS; s++) {
            struct cell want = alone[ev][s];

            for (size_t i = 0; i < n; i++)
                if ((int)diffs[i].ev == ev && (int)diffs[i].in == s)
                    want = diffs[i].want;
            check_cell(f, (enum orch_event)ev, (enum orch_state)s, want, name);
        }
}

#define DIFFS(a) a, sizeof(a) / sizeof(a[0])

TEST(orch_table_alone)
{
    check_table(&base, NULL, 0, "alone");
}

/* A periodic checkpoint that a terminating notice made its last, and that
 * then failed (its interval's deadline, with the notice's far off): the
 * notice gets a checkpoint of its own, not a stop without one (CI,
 * 2026-12-07: exit 143 with 59 s of the notice left). */
TEST(orch_adopted_fails)
{
    struct orch_facts f = base;
    struct orch_decision d;

    f.last = true, f.adopted = true;
    for (int s = SAVING; s <= COMMITTING; s++) {
        f.state = (enum orch_state)s;
        d = orch_decide(&f, EV_FAILED);
        CHECK(d.next == IDLE && (d.acts & A_AGAIN) && !(d.acts & A_STOP_UNSAVED));
    }
    f.state = COMMITTING;
    d = orch_decide(&f, EV_COMMITTED);
    CHECK((d.acts & A_STOP_SAVED) && !(d.acts & A_AGAIN));
    f.adopted = false, f.state = SAVING;
    d = orch_decide(&f, EV_FAILED);
    CHECK(d.next == DRAINING && (d.acts & A_STOP_UNSAVED) && !(d.acts & A_AGAIN));
}

TEST(orch_table_facts)
{
    struct orch_facts f;

    f = base, f.last = true;
    check_table(&f, DIFFS(last), "last");
    f = base, f.last = true, f.told_last = false;
    check_table(&f, DIFFS(last_untold), "last, the method not told");
    f = base, f.aborted = true;
    check_table(&f, DIFFS(aborted), "aborted");
    f = base, f.trainers = false;
    check_table(&f, DIFFS(nobody), "nobody");
    f = base, f.ending = true;
    check_table(&f, DIFFS(ending), "ending");
    f = base, f.finishing = true;
    check_table(&f, DIFFS(finishing), "finishing");
    f = base, f.far = true;
    check_table(&f, DIFFS(far), "far");
    f = base, f.late = true;
    check_table(&f, DIFFS(no_room), "late");
    f = base, f.store_waits = true;
    check_table(&f, DIFFS(no_room), "the store waits");
    f = base, f.held = true;
    check_table(&f, DIFFS(held), "held");
    f = base, f.held = f.late = true;
    check_table(&f, DIFFS(held_late), "held, late");
    /* Going and ending both: nothing is started, and the node's end
     * already under way is not asked again. */
    f = base, f.ending = f.finishing = true;
    check_table(&f, DIFFS(finishing), "ending, finishing");
    /* Nothing was ever committed: the last checkpoint, with nothing new,
     * has nothing saved to stop on. */
    f = base, f.have_gen = false, f.last = true;
    check_cell(&f, EV_NOTHING_NEW, SAVING, (struct cell){ DRAINING, A_DISCARD | A_STOP_UNSAVED },
               "no generation, last");
    f = base, f.have_gen = false;
    check_table(&f, NULL, 0, "no generation");
}

TEST(orch_table_world)
{
    struct orch_facts f = base;
    static const struct diff coordinator[] = {
        { EV_NOTICE, RESUMING, { S_, 0 } },
        { EV_NOTICE, IDLE, { IDLE, A_BEGIN } },
        { EV_TERMINATING, RESUMING, { RESUMING, A_LEAVE | A_END } },
        { EV_TERMINATING, WAITING, { WAITING, A_LEAVE | A_END } },
        { EV_TICK, IDLE, { IDLE, A_TRIGGER } },
        { EV_REQUEST, IDLE, { IDLE, A_TRIGGER } },
        { EV_FOUND, IDLE, { S_, 0 } },
        { EV_GO, IDLE, { IDLE, A_TRIGGER } },
        { EV_COMMITTED, COMMITTING, { IDLE, A_RECORD | FIN_GO | A_READY } },
        { EV_FAILED, SAVING, { IDLE, FIN_GO | A_READY } },
        { EV_FAILED, UPLOADING, { IDLE, FIN_GO | A_READY } },
        { EV_FAILED, COMMITTING, { IDLE, FIN_GO | A_READY } },
    };

    f.world = f.ranked = true;
    check_table(&f, DIFFS(world_node), "world node");
    f.coordinator = true;
    check_table(&f, DIFFS(coordinator), "world coordinator");
}

/* Where only global rank 0 writes (--ckpt-writers rank0), the dir method's
 * new checkpoint on its node asks the coordinator for a round; nowhere
 * else, and not while the command is stopped or the rank unknown. */
TEST(orch_table_world_writer)
{
    struct orch_facts f = base;
    struct diff writer[sizeof(world_node) / sizeof(world_node[0])];

    /* A world's node, but for the dir method's new checkpoint. */
    memcpy(writer, world_node, sizeof(writer));
    for (size_t i = 0; i < sizeof(writer) / sizeof(writer[0]); i++)
        if (writer[i].ev == EV_FOUND)
            writer[i].want = (struct cell){ IDLE, A_TRIGGER };
    f.world = f.ranked = f.writer = true;
    check_table(&f, DIFFS(writer), "world writer");
    f.stopping = true;
    check_cell(&f, EV_FOUND, IDLE, (struct cell){ S_, 0 }, "writer, stopped");
    f.stopping = false, f.ranked = false;
    check_cell(&f, EV_FOUND, IDLE, (struct cell){ S_, 0 }, "writer, no rank");
    /* Alone, the fact changes nothing. */
    f = base, f.writer = true;
    check_cell(&f, EV_FOUND, IDLE, (struct cell){ IDLE, A_BEGIN }, "alone, writer");
}

/* A world's pause stopped the command (or is stopping it): a terminating
 * notice in any state makes the node leave; nothing else starts. */
TEST(orch_table_world_stopped)
{
    struct orch_facts f = base;

    f.world = f.ranked = f.coordinator = f.stopping = true;
    for (int s = 0; s < NS; s++) {
        check_cell(&f, EV_TERMINATING, (enum orch_state)s,
                   (struct cell){ S_, A_LEAVE | A_END }, "stopped");
        check_cell(&f, EV_NOTICE, (enum orch_state)s, (struct cell){ S_, 0 }, "stopped");
        check_cell(&f, EV_TICK, (enum orch_state)s, (struct cell){ S_, 0 }, "stopped");
        check_cell(&f, EV_REQUEST, (enum orch_state)s, (struct cell){ S_, 0 }, "stopped");
        check_cell(&f, EV_QUERY, (enum orch_state)s, (struct cell){ S_, A_REFUSE }, "stopped");
    }
    /* Parked by the world: it waits for the world's resume, from the
     * resume at start, idle or waiting already; after a checkpoint under
     * way (whose end says A_READY); never when it goes. */
    f.parked = true;
    for (int s = 0; s < NS; s++) {
        bool waits = s == RESUMING || s == IDLE || s == WAITING;

        check_cell(&f, EV_PARKED, (enum orch_state)s,
                   waits ? (struct cell){ WAITING, A_WAIT_WORLD } : (struct cell){ S_, 0 },
                   "parked");
        f.ending = true;
        check_cell(&f, EV_PARKED, (enum orch_state)s, (struct cell){ S_, 0 }, "parked, ending");
        f.ending = false;
    }
    /* Stopping but not yet parked (the pause's stop under way): not yet. */
    f.parked = false;
    check_cell(&f, EV_PARKED, IDLE, (struct cell){ S_, 0 }, "stopping");
    /* Before the rank (spotd is resuming): a terminating notice ends
     * spotd, nothing else. */
    f = base, f.world = true;
    check_cell(&f, EV_TERMINATING, RESUMING, (struct cell){ IDLE, A_EXIT_UNRANKED }, "unranked");
    check_cell(&f, EV_TERMINATING, DRAINING, (struct cell){ S_, 0 }, "unranked");
    for (int s = 0; s < NS; s++) {
        check_cell(&f, EV_NOTICE, (enum orch_state)s, (struct cell){ S_, 0 }, "unranked");
        check_cell(&f, EV_TICK, (enum orch_state)s, (struct cell){ S_, 0 }, "unranked");
    }
}

static bool under_way(enum orch_state s)
{
    return s == SAVING || s == UPLOADING || s == COMMITTING;
}

static int popcount(unsigned v)
{
    int n = 0;

    for (; v; v &= v - 1)
        n++;
    return n;
}

/* What must hold in every cell, over every combination of facts. */
TEST(orch_table_invariants)
{
    unsigned bad = 0, cells = 0;

    for (unsigned bits = 0; bits < 1u << 18; bits++)
        for (int s = 0; s < NS; s++)
            for (int ev = 0; ev < EV__COUNT; ev++) {
                struct orch_facts f = {
                    .state = (enum orch_state)s, .world = bits & 1, .ranked = bits & 2,
                    .coordinator = bits & 4, .stopping = bits & 8, .last = bits & 16,
                    .trainers = bits & 32, .aborted = bits & 64, .have_gen = bits & 128,
                    .told_last = bits & 256, .parked = bits & 512, .ending = bits & 1024,
                    .finishing = bits & 2048, .far = bits & 4096, .late = bits & 8192,
                    .store_waits = bits & 16384, .held = bits & 32768,
                    .writer = bits & 65536, .adopted = bits & 131072,
                };
                struct orch_decision d = orch_decide(&f, (enum orch_event)ev);
                unsigned stops = d.acts & (A_STOP_SAVED | A_STOP_UNSAVED);
                unsigned on = d.acts & (A_CLAIM_NEXT | A_AGAIN);
                const char *why = NULL;

                cells++;
                if (d.acts & ~orch_event_acts((enum orch_event)ev))
                    why = "an action its handler does not carry out";
                else if (s == DRAINING && (d.acts & ~(unsigned)(A_LEAVE | A_END | A_REFUSE)))
                    why = "something begun while the command stops";
                else if (under_way(f.state) && !under_way(d.next) &&
                         !(d.acts & (A_FINISH | A_DISCARD)))
                    why = "a checkpoint under way that vanishes without its end";
                else if ((d.acts & A_FINISH) && popcount(stops | on) != 1)
                    why = "an end that neither stops nor goes on, or both";
                else if (f.last && (d.acts & A_FINISH) && !stops && !(d.acts & A_AGAIN))
                    why = "the last checkpoint ends and the command is not stopped";
                else if ((d.acts & A_AGAIN) && !(f.last && (!f.told_last || f.adopted)))
                    why = "saved again without a reason";
                else if (d.next == DRAINING && s != DRAINING && !stops && !(d.acts & A_END))
                    why = "draining without a stop or an end";
                else if ((d.acts & A_STOP_SAVED) && ev != EV_COMMITTED &&
                         !(ev == EV_NOTHING_NEW && f.have_gen))
                    why = "a stop that says saved with nothing committed";
                else if (ev == EV_TERMINATING && !d.acts && s != DRAINING &&
                         !(under_way(f.state) && f.last))
                    why = "a terminating notice dropped";
                else if ((d.acts & A_END) && !(s == RESUMING || s == WAITING || f.stopping))
                    why = "ended while the command runs";
                else if (ev != EV_TERMINATING && ev != EV_NOTICE && (d.acts & (A_END | A_LEAVE)) &&
                         !(ev == EV_RESUMED && (f.ending || (f.held && f.late)) &&
                           !(d.acts & A_LEAVE)))
                    why = "a node that leaves without being told to";
                else if (ev == EV_TERMINATING && f.far && (d.acts & ~(unsigned)A_HOLD))
                    why = "a far notice acted on before it is due";
                else if ((d.acts & A_HOLD) && !(ev == EV_TERMINATING && f.far) &&
                         !(s == RESUMING && !f.world))
                    why = "a notice held with no reason to wait";
                else if ((d.acts & A_HELD) && !(d.acts & A_RUN))
                    why = "held notices acted on with no command running";
                else if ((d.acts & A_RUN) && (s != RESUMING || f.ending || f.finishing))
                    why = "the command started other than from the resume, or to go";
                else if ((d.acts & A_RESTORE) && s != WAITING)
                    why = "a world's resume taken other than while waiting for it";
                else if ((d.acts & A_WAIT_WORLD) && (!f.parked || f.ending || d.next != WAITING))
                    why = "waiting for the world's resume with a command, or to go";
                else if (s == RESUMING && d.next != RESUMING && d.next != DRAINING &&
                         !(d.acts & (A_RUN | A_EXIT_UNRANKED | A_WAIT_WORLD)) &&
                         !(ev == EV_RESUMED && f.finishing))
                    why = "a resume that ends with nothing started and nothing ended";
                if (why) {
                    if (bad++ < 10)
                        printf("  %s in %s (facts %#x): %s\n", orch_event_str(ev),
                               orch_state_str(f.state), bits, why);
                    harness_failed = 1;
                }
            }
    CHECK_INT(cells, 262144 * NS * EV__COUNT);
    CHECK_INT(bad, 0);
}

/* A node alone that carries each decision's effect on the facts out, for
 * the failure paths as sequences of events. */
struct run {
    struct orch_facts f;
    bool differs;                  /* the method saves the last one differently (CRIU) */
    unsigned acts;                 /* of the last event */
};

static void feed(struct run *r, enum orch_event ev)
{
    struct orch_decision d = orch_decide(&r->f, ev);

    r->f.state = d.next;
    r->acts = d.acts;
    if (d.acts & A_MAKE_LAST)
        r->f.last = true;
    if (d.acts & A_RECORD)
        r->f.have_gen = true;
    if (d.acts & A_START)
        r->f.told_last = !r->differs || r->f.last; /* ask_method() tells the method */
}

/* A terminating notice during an upload: that checkpoint is the last,
 * and the stop (saved) follows its commit. */
TEST(orch_path_notice_during_upload)
{
    struct run r = { .f = base };

    feed(&r, EV_TICK);
    CHECK_INT(r.acts, A_BEGIN);
    feed(&r, EV_GO);
    CHECK_INT(r.f.state, SAVING);
    feed(&r, EV_SAVED);
    CHECK_INT(r.f.state, UPLOADING);
    feed(&r, EV_TERMINATING);
    CHECK_INT(r.acts, A_MAKE_LAST);
    CHECK_INT(r.f.state, UPLOADING);
    feed(&r, EV_TERMINATING); /* the same notice from a second source */
    CHECK_INT(r.acts, 0);
    feed(&r, EV_UPLOADED);
    feed(&r, EV_COMMITTED);
    CHECK_INT(r.f.state, DRAINING);
    CHECK_INT(r.acts, A_RECORD | A_FINISH | A_STOP_SAVED);
    feed(&r, EV_TICK);
    CHECK_INT(r.acts, 0);
}

/* A terminating notice during a periodic CRIU dump, which let the tree
 * run on: that dump is committed, then the last one is saved again (the
 * tree left stopped), and the stop follows it. */
TEST(orch_path_notice_during_a_dump)
{
    struct run r = { .f = base, .differs = true };

    feed(&r, EV_TICK);
    feed(&r, EV_GO);
    CHECK(!r.f.told_last);
    feed(&r, EV_SAVED);
    feed(&r, EV_TERMINATING);
    CHECK(r.f.last);
    feed(&r, EV_UPLOADED);
    feed(&r, EV_COMMITTED);
    CHECK_INT(r.f.state, IDLE);
    CHECK_INT(r.acts, A_RECORD | A_FINISH | A_AGAIN);
    /* A_AGAIN: the notice's checkpoint is set up, planned, begun. */
    feed(&r, EV_GO);
    CHECK_INT(r.f.state, SAVING);
    CHECK(r.f.told_last);
    feed(&r, EV_SAVED);
    feed(&r, EV_UPLOADED);
    feed(&r, EV_COMMITTED);
    CHECK_INT(r.f.state, DRAINING);
    CHECK_INT(r.acts, A_RECORD | A_FINISH | A_STOP_SAVED);
}

/* A terminating notice during a rebalance (advisory) checkpoint whose
 * save then misses its deadline: the stop follows, unsaved. */
TEST(orch_path_rebalance_then_deadline_missed)
{
    struct run r = { .f = base };

    feed(&r, EV_NOTICE);
    feed(&r, EV_GO);
    CHECK_INT(r.f.state, SAVING);
    feed(&r, EV_TERMINATING);
    CHECK(r.f.last);
    feed(&r, EV_FAILED); /* the method's save ran past the deadline */
    CHECK_INT(r.f.state, DRAINING);
    CHECK_INT(r.acts, FIN_STOP);
    /* The method's late answer changes nothing. */
    feed(&r, EV_SAVED);
    CHECK_INT(r.f.state, DRAINING);
    CHECK_INT(r.acts, 0);
}

/* The plan says a new checkpoint will not fit: the newest committed
 * generation stands and the command stops at once. */
TEST(orch_path_too_late)
{
    struct run r = { .f = base };

    feed(&r, EV_TERMINATING);
    CHECK_INT(r.acts, A_BEGIN);
    feed(&r, EV_TOO_LATE);
    CHECK_INT(r.f.state, DRAINING);
    CHECK_INT(r.acts, A_STOP_UNSAVED);
}

/* A peer lost mid-save: the world aborts the round, and the method's
 * save that then comes back ends the checkpoint instead of uploading. */
TEST(orch_path_peer_lost_mid_save)
{
    struct run r = { .f = base };

    r.f.world = r.f.ranked = true;
    feed(&r, EV_QUERY);
    CHECK_INT(r.f.state, SAVING);
    r.f.aborted = true; /* the coordinator's abort */
    feed(&r, EV_SAVED);
    CHECK_INT(r.f.state, IDLE);
    CHECK_INT(r.acts, FIN_GO | A_READY);
    /* The next round's query is taken. */
    r.f.aborted = false;
    feed(&r, EV_QUERY);
    CHECK_INT(r.acts, A_START);
}

/* Notices while resuming at start (a long restore): held, and acted on
 * once the command runs, so that what it trains until the deadline is
 * saved; when no room is left (or the store cannot be read) the command is
 * not started and spotd exits saved, instead of starting it and losing
 * what it then does. */
TEST(orch_path_notice_while_resuming)
{
    struct run r = { .f = base };

    r.f.state = RESUMING;
    feed(&r, EV_NOTICE);
    CHECK_INT(r.acts, A_HOLD);
    feed(&r, EV_TERMINATING);
    CHECK_INT(r.acts, A_HOLD);
    CHECK_INT(r.f.state, RESUMING);
    feed(&r, EV_TICK);
    CHECK_INT(r.acts, 0);
    r.f.held = true;
    feed(&r, EV_RESUMED);
    CHECK_INT(r.acts, A_RUN | A_HELD);
    CHECK_INT(r.f.state, IDLE);
    r.f.held = false;
    feed(&r, EV_TERMINATING); /* the held one, now that the command runs */
    CHECK_INT(r.acts, A_BEGIN);

    /* Its room ran out while the restore went on (held_timer). */
    r.f = base, r.f.state = RESUMING;
    feed(&r, EV_TERMINATING);
    r.f.late = true;
    feed(&r, EV_TERMINATING);
    CHECK_INT(r.acts, A_END);
    CHECK_INT(r.f.state, RESUMING);
    r.f.ending = true; /* orch_end() waits for the resume */
    feed(&r, EV_RESUMED);
    CHECK_INT(r.acts, A_END);
    CHECK_INT(r.f.state, DRAINING);

    /* The store cannot be read: nothing to wait for, spotd goes now. */
    r.f = base, r.f.state = RESUMING, r.f.store_waits = true;
    feed(&r, EV_TERMINATING);
    CHECK_INT(r.acts, A_END);
}

/* A terminating notice days ahead: held, training and checkpoints go on;
 * due, it is a notice like any other. */
TEST(orch_path_far_notice)
{
    struct run r = { .f = base };

    r.f.far = true;
    feed(&r, EV_TERMINATING);
    CHECK_INT(r.acts, A_HOLD);
    CHECK_INT(r.f.state, IDLE);
    CHECK(!r.f.last);
    feed(&r, EV_TICK);
    CHECK_INT(r.acts, A_BEGIN);
    feed(&r, EV_GO);
    feed(&r, EV_TERMINATING); /* a second far one, during the periodic checkpoint */
    CHECK_INT(r.acts, A_HOLD);
    CHECK(!r.f.last);
    feed(&r, EV_SAVED);
    feed(&r, EV_UPLOADED);
    feed(&r, EV_COMMITTED);
    CHECK_INT(r.f.state, IDLE);
    r.f.far = false; /* held_timer: it is due */
    feed(&r, EV_TERMINATING);
    CHECK_INT(r.acts, A_BEGIN);
}

/* A world's node: its rank, its generations read, then parked until the
 * world resumes; a notice on the way there takes it out of the world. */
TEST(orch_path_world_start)
{
    struct run r = { .f = base };

    r.f.world = true;
    r.f.state = RESUMING;
    feed(&r, EV_TERMINATING);       /* still without a rank: nothing would be lost */
    CHECK_INT(r.acts, A_EXIT_UNRANKED);
    r.f.state = RESUMING;
    r.f.ranked = r.f.parked = r.f.stopping = true;
    feed(&r, EV_PARKED);
    CHECK_INT(r.f.state, WAITING);
    CHECK_INT(r.acts, A_WAIT_WORLD);
    feed(&r, EV_QUERY);             /* nothing runs: no save for a round */
    CHECK_INT(r.acts, A_REFUSE);
    feed(&r, EV_WORLD_RESUME);
    CHECK_INT(r.f.state, RESUMING);
    CHECK_INT(r.acts, A_RESTORE);
    feed(&r, EV_WORLD_RESUME);      /* a second word of the same resume */
    CHECK_INT(r.acts, 0);
    r.f.parked = r.f.stopping = false;
    feed(&r, EV_RESUMED);
    CHECK_INT(r.f.state, IDLE);
    CHECK_INT(r.acts, A_RUN);
    feed(&r, EV_RESUMED);           /* late: the command runs already */
    CHECK_INT(r.acts, 0);
}

TEST(orch_names)
{
    CHECK_STR(orch_state_str(RESUMING), "resuming");
    CHECK_STR(orch_state_str(WAITING), "waiting");
    CHECK_STR(orch_state_str((enum orch_state)NS), "?");
    CHECK_STR(orch_event_str(EV_FAILED), "failed");
    CHECK_STR(orch_event_str(EV__COUNT), "?");
    CHECK_INT(orch_event_acts(EV__COUNT), 0);
    /* Unknown events change nothing. */
    struct orch_facts f = base;
    f.state = SAVING;
    CHECK_INT(orch_decide(&f, EV__COUNT).acts, 0);
    CHECK_INT(orch_decide(&f, EV__COUNT).next, SAVING);
}
