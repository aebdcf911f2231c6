/* orch_decide: the orchestrator's (state, event) -> (next state, actions)
 * table (see orch_decide.h).  One function per event, each a switch over
 * the states; every state is written down, those where the event changes
 * nothing too, so that a missing cell shows. */
#include "orch_decide.h"

#include <stddef.h>

static const char *const state_names[ORCH_NSTATES] = {
    "resuming", "idle", "saving", "uploading", "committing", "draining", "waiting",
};

static const char *const event_names[EV__COUNT] = {
    "notice", "terminating", "tick", "request", "found", "trainer-saved", "query", "go",
    "too-late", "saved", "nothing-new", "uploaded", "committed", "failed", "resumed",
    "world-resume", "parked",
};

/* What each event can yield, for its handler. */
static const unsigned event_acts[EV__COUNT] = {
    [EV_NOTICE] = A_BEGIN | A_HOLD,
    [EV_TERMINATING] = A_EXIT_UNRANKED | A_LEAVE | A_END | A_MAKE_LAST | A_BEGIN | A_HOLD,
    [EV_TICK] = A_BEGIN | A_TRIGGER,
    [EV_REQUEST] = A_BEGIN | A_TRIGGER,
    [EV_FOUND] = A_BEGIN | A_TRIGGER,
    [EV_TRAINER_SAVED] = A_TO_METHOD,
    [EV_QUERY] = A_START | A_REFUSE,
    [EV_GO] = A_START | A_TRIGGER,
    [EV_TOO_LATE] = A_STOP_UNSAVED,
    [EV_SAVED] = A_UPLOAD | A_FINISH | A_STOP_UNSAVED | A_CLAIM_NEXT | A_READY | A_AGAIN,
    [EV_NOTHING_NEW] = A_DISCARD | A_STOP_SAVED | A_STOP_UNSAVED,
    [EV_UPLOADED] = A_COMMIT | A_FINISH | A_STOP_UNSAVED | A_CLAIM_NEXT | A_READY | A_AGAIN,
    [EV_COMMITTED] = A_RECORD | A_FINISH | A_STOP_SAVED | A_CLAIM_NEXT | A_READY | A_AGAIN,
    [EV_FAILED] = A_FINISH | A_STOP_UNSAVED | A_CLAIM_NEXT | A_READY | A_AGAIN,
    [EV_RESUMED] = A_END | A_RUN | A_HELD,
    [EV_WORLD_RESUME] = A_RESTORE,
    [EV_PARKED] = A_WAIT_WORLD,
};

static struct orch_decision stay(const struct orch_facts *f)
{
    return (struct orch_decision){ f->state, A_NONE };
}

static struct orch_decision go(enum orch_state next, unsigned acts)
{
    return (struct orch_decision){ next, acts };
}

static bool under_way(enum orch_state s)
{
    return s == SAVING || s == UPLOADING || s == COMMITTING;
}

/* The checkpoint under way ended, committed or not: the stop follows the
 * last one; otherwise the next number is claimed ahead and a world's node
 * whose command a pause stopped waits for the resume.  A checkpoint made
 * the last after its method's save began (CRIU's dump let the tree run on)
 * is not what the stop may follow: the last one begins again.  So does
 * one that failed after a notice adopted it (a periodic save that missed
 * its interval's deadline with the notice's far off, CI 2026-12-07): the
 * notice's own checkpoint, once, as far as its deadline allows. */
static struct orch_decision ended(const struct orch_facts *f, unsigned acts, bool committed)
{
    if (f->last && (!f->told_last || (!committed && f->adopted && !f->world && !f->finishing)))
        return go(IDLE, acts | A_FINISH | A_AGAIN);
    if (f->last)
        return go(DRAINING, acts | A_FINISH | (committed ? A_STOP_SAVED : A_STOP_UNSAVED));
    return go(IDLE, acts | A_FINISH | A_CLAIM_NEXT | (f->world ? A_READY : 0));
}

/* The resume is done: the command starts, and the notices that came
 * meanwhile are acted on; unless a terminating one left no room for a
 * checkpoint (the node goes instead, exit 75, the restored generation the
 * newest) or spotd is ending. */
static struct orch_decision resumed(const struct orch_facts *f)
{
    if (f->state != RESUMING)
        return stay(f); /* a crash restart's, or late */
    if (f->finishing)
        return go(IDLE, A_NONE);
    if (f->ending || (f->held && f->late))
        return go(DRAINING, A_END);
    return go(IDLE, A_RUN | (f->held ? A_HELD : 0));
}

/* A world's node whose command is not running, by the world's word, and
 * with nothing under way: it waits for the world's resume.  One that goes
 * waits for nothing. */
static struct orch_decision parked(const struct orch_facts *f)
{
    if (!f->ranked || !f->parked || f->ending)
        return stay(f);
    switch (f->state) {
    case RESUMING:
    case IDLE:
    case WAITING:
        return go(WAITING, A_WAIT_WORLD);
    case SAVING:
    case UPLOADING:
    case COMMITTING:
    case DRAINING:
        break; /* A_READY follows the checkpoint's end */
    }
    return stay(f);
}

/* A notice while a node alone resumes at start: held until the command
 * runs, so that what it trains until the deadline is saved; a terminating
 * one whose deadline leaves no room (or that comes while the store cannot
 * be read) has nothing to save: the node goes, the newest generation
 * standing. */
static struct orch_decision resuming(bool terminating, const struct orch_facts *f)
{
    if (terminating && (f->late || f->store_waits))
        return go(RESUMING, A_END);
    return go(RESUMING, A_HOLD);
}

/* A notice.  A terminating one whose deadline is far is held until it is
 * due: training goes on.  A terminating one while nothing runs (a world's
 * pause, the wait for a world's resume) has nothing new to save: the node
 * goes, the newest committed generation standing.  During a checkpoint,
 * that checkpoint serves, and a terminating notice makes it the last. */
static struct orch_decision notice(const struct orch_facts *f, bool terminating)
{
    if (terminating && f->far)
        return f->state == DRAINING ? stay(f) : go(f->state, A_HOLD);
    if (!f->world && f->state == RESUMING)
        return resuming(terminating, f);
    if (f->world && !f->ranked) {
        /* Still asking the coordinator for a rank: nothing runs yet. */
        if (!terminating || f->state == DRAINING)
            return stay(f);
        return go(f->state == RESUMING ? IDLE : f->state, A_EXIT_UNRANKED);
    }
    if (f->world && f->stopping)
        return terminating ? go(f->state, A_LEAVE | A_END) : stay(f);
    switch (f->state) {
    case RESUMING:
    case WAITING:
        if (!terminating)
            return stay(f);
        return go(f->state, (f->world ? A_LEAVE : 0) | A_END);
    case IDLE:
        return go(IDLE, A_BEGIN);
    case SAVING:
    case UPLOADING:
    case COMMITTING:
        return terminating && !f->last ? go(f->state, A_MAKE_LAST) : stay(f);
    case DRAINING:
        return stay(f);
    }
    return stay(f);
}

/* The --interval tick and a request: a node alone checkpoints when idle
 * and someone is there to save; in a world, the go goes to the
 * coordinator, which runs the round (the tick only at the coordinator:
 * its round asks every node). */
static struct orch_decision wanted(const struct orch_facts *f, bool tick)
{
    if (f->state != IDLE)
        return stay(f);
    if (!f->world)
        return f->trainers ? go(IDLE, A_BEGIN) : stay(f);
    if (!f->ranked || f->stopping || (tick ? !f->coordinator : !f->trainers))
        return stay(f);
    return go(IDLE, A_TRIGGER);
}

/* The dir method found a new checkpoint: a node alone saves it when idle.
 * In a world, where only global rank 0 writes, its node asks the
 * coordinator for a round (the others' shards are empty); where every
 * rank writes, the nodes' checkpoints go up at the rounds' times. */
static struct orch_decision found(const struct orch_facts *f)
{
    if (f->state != IDLE)
        return stay(f);
    if (!f->world)
        return go(IDLE, A_BEGIN);
    if (!f->ranked || f->stopping || !f->writer)
        return stay(f);
    return go(IDLE, A_TRIGGER);
}

/* The coordinator's query: this node saves for the round if it is idle. */
static struct orch_decision query(const struct orch_facts *f)
{
    if (f->state == IDLE && !f->stopping)
        return go(SAVING, A_START);
    return go(f->state, A_REFUSE);
}

/* The checkpoint set up by A_BEGIN, once planned. */
static struct orch_decision planned(const struct orch_facts *f, bool fits)
{
    if (f->state != IDLE)
        return stay(f);
    if (!fits)
        return go(DRAINING, A_STOP_UNSAVED);
    return f->world ? go(IDLE, A_TRIGGER) : go(SAVING, A_START);
}

/* One step of the checkpoint under way is done, in state in: the next
 * state and act, unless the world gave the checkpoint up meanwhile. */
static struct orch_decision step(const struct orch_facts *f, enum orch_state in,
                                 enum orch_state next, unsigned act)
{
    if (f->state != in)
        return stay(f); /* late: that checkpoint has ended */
    if (f->aborted)
        return ended(f, A_NONE, false);
    return go(next, act);
}

static struct orch_decision nothing_new(const struct orch_facts *f)
{
    if (f->state != SAVING)
        return stay(f);
    if (!f->last)
        return go(IDLE, A_DISCARD);
    return go(DRAINING, A_DISCARD | (f->have_gen ? A_STOP_SAVED : A_STOP_UNSAVED));
}

struct orch_decision orch_decide(const struct orch_facts *f, enum orch_event ev)
{
    switch (ev) {
    case EV_NOTICE:
        return notice(f, false);
    case EV_TERMINATING:
        return notice(f, true);
    case EV_TICK:
        return wanted(f, true);
    case EV_REQUEST:
        return wanted(f, false);
    case EV_FOUND:
        return found(f);
    case EV_TRAINER_SAVED:
        return f->state == SAVING ? go(SAVING, A_TO_METHOD) : stay(f);
    case EV_QUERY:
        return query(f);
    case EV_GO:
        return planned(f, true);
    case EV_TOO_LATE:
        return planned(f, false);
    case EV_SAVED:
        return step(f, SAVING, UPLOADING, A_UPLOAD);
    case EV_NOTHING_NEW:
        return nothing_new(f);
    case EV_UPLOADED:
        return step(f, UPLOADING, COMMITTING, A_COMMIT);
    case EV_COMMITTED:
        return f->state == COMMITTING ? ended(f, A_RECORD, true) : stay(f);
    case EV_FAILED:
        return under_way(f->state) ? ended(f, A_NONE, false) : stay(f);
    case EV_RESUMED:
        return resumed(f);
    case EV_WORLD_RESUME:
        return f->state == WAITING ? go(RESUMING, A_RESTORE) : stay(f);
    case EV_PARKED:
        return parked(f);
    case EV__COUNT:
        break;
    }
    return stay(f);
}

unsigned orch_event_acts(enum orch_event ev)
{
    return (unsigned)ev < EV__COUNT ? event_acts[ev] : A_NONE;
}

const char *orch_state_str(enum orch_state s)
{
    return (unsigned)s < ORCH_NSTATES ? state_names[s] : "?";
}

const char *orch_event_str(enum orch_event ev)
{
    return (unsigned)ev < EV__COUNT ? event_names[ev] : "?";
}
