/* world: membership, the coordinator's rounds, pause and resume (world.h).
 *
 * DESIGN.  Every node runs the same code; what a node does with a message
 * depends on whether it is the coordinator at that moment.  Messages to
 * this node itself (the coordinator is one of the ranks) go through a
 * queue drained on the loop, so a node talks to itself exactly as to the
 * others, and no world_* call re-enters the orchestrator.  Every message,
 * a peer's or its own, passes one table of which phases of the round take
 * it and what else it needs (world_admit(), in world_decide.c) before its handler
 * runs.  A one-second tick re-sends what a change of coordinator could
 * have lost (ready) and retries the resume.
 *
 * Ranks are the nodes' places in the world (--rank, the peer layer's
 * names).  The members are the ranks whose commands the last resume
 * started, all of them unless the world is elastic and resumed short; the
 * trainers are numbered 0..n-1 in rank order among the members, and their
 * shards carry those numbers.  The coordinator is the lowest member that
 * is up, so that a node joining a world that runs without it never takes
 * over a round it did not see; each node learns the members from the
 * resume, and a new node from its peers' first message (state). */
#include "world.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer.h"
#include "spot/log.h"
#include "spot/manifest.h"
#include "spot/notice.h"
#include "spot/peermsg.h"

#define TICK_MS 1000
/* Without a deadline from the trigger, how long a round may take. */
#define ROUND_LIMIT_MS (30 * 60 * 1000)
/* After a round to grow the world failed, the next one waits this long. */
#define GROW_RETRY_MS (30 * 1000)

struct member {
    bool in;                       /* a member: its command runs with the others */
    bool synced;                   /* its state came since it was last up */
    char host[64];                 /* where it listens, for the master address */
    bool ready;                    /* coordinator: it waits for resume */
    bool pick;                     /* coordinator: the resume under way starts it */
    bool left;                     /* it said leave */
    char left_why[128];
    /* the round */
    bool answered, saved, hashed;
    int64_t step;
    uint8_t fingerprint[32];
    uint8_t sha256[32];
    uint64_t bytes;
};

struct queued {
    uint32_t from;
    struct peermsg m;
    struct queued *next;
};

struct world {
    struct world_opts o;
    char *job, *method;
    struct peers *peers;
    char master_addr[64];
    char listen_addr[96];
    struct member *m;              /* world_size */
    bool waiting;                  /* our command is not running: ready to resume */
    bool pausing;                  /* our command is being stopped */
    bool resume_pending;           /* a resume came while it was: applied once stopped */
    struct peermsg resume_msg;
    bool leaving;
    bool fresh;                    /* no resume or state has named the members yet */
    uint32_t trank, tsize;         /* our trainers' place among the members, and their number */
    int64_t short_since;           /* coordinator: enough ranks wait, since then (elastic;
                                      notice_mono_ms(), 0: not) */
    bool grow;                     /* coordinator: this round makes room for a new member */
    int64_t grow_after;            /* coordinator: no growing round before then (mono) */
    uint32_t grow_to;              /* coordinator: paused to grow to this many: no waiting */
    uint64_t newest;               /* newest committed generation known */
    uint64_t max_gen;              /* highest generation number seen */
    uint32_t coordinator;
    bool resuming;                 /* coordinator: pick_resume under way */
    /* the round, as this node saw it */
    enum world_phase phase;
    uint64_t gen;
    int64_t step;                  /* prepared */
    bool prepared;                 /* coordinator: the step is chosen */
    int64_t deadline_ms;           /* wall clock: a cloud's, or sent to every node */
    bool terminating;              /* a terminating notice's: the trainers stop once saved */
    char reason[128];
    bool running;                  /* this node runs it as coordinator (it sent the query) */
    struct event *timer;           /* coordinator: the round's deadline */
    struct event *tick;
    struct event *drain;           /* the queue to ourselves */
    struct queued *q, **q_tail;
};

static void handle(struct world *w, uint32_t from, const struct peermsg *m);

static bool up(const struct world *w, uint32_t r)
{
    return r == w->o.rank || peers_up(w->peers, r);
}

static bool elastic(const struct world *w)
{
    return w->o.min_nodes && w->o.min_nodes < w->o.world_size;
}

/* The coordinator: the lowest member up, else the lowest rank up. */
static uint32_t lowest_up(const struct world *w)
{
    for (uint32_t r = 0; r < w->o.world_size; r++)
        if (w->m[r].in && up(w, r))
            return r;
    for (uint32_t r = 0; r < w->o.world_size; r++)
        if (up(w, r))
            return r;
    return w->o.rank;
}

static bool members_up(const struct world *w)
{
    for (uint32_t r = 0; r < w->o.world_size; r++)
        if (w->m[r].in && !up(w, r))
            return false;
    return true;
}

/* Every peer that is up told us what it knows: this node may coordinate. */
static bool all_synced(const struct world *w)
{
    for (uint32_t r = 0; r < w->o.world_size; r++)
        if (r != w->o.rank && peers_up(w->peers, r) && !w->m[r].synced)
            return false;
    return true;
}

/* members: the ranks in the message, or all of them. */
static void set_members(struct world *w, const struct peermsg *m)
{
    w->tsize = 0;
    for (uint32_t r = 0; r < w->o.world_size; r++) {
        w->m[r].in = m->nmembers == 0 || peermsg_member(m, r);
        if (r == w->o.rank)
            w->trank = w->tsize;
        w->tsize += w->m[r].in;
    }
    w->fresh = false;
}

/* ---- sending ---------------------------------------------------------------- */

static void post_self(struct world *w, const struct peermsg *m)
{
    struct queued *q = calloc(1, sizeof(*q));

    if (!q) {
        log_msg(LOGL_ERROR, "world: out of memory; a %s message to ourselves is lost",
                peermsg_type_name(m->type));
        return;
    }
    q->from = w->o.rank;
    q->m = *m;
    *w->q_tail = q;
    w->q_tail = &q->next;
    event_active(w->drain, EV_TIMEOUT, 0);
}

static void send_to(struct world *w, uint32_t rank, const struct peermsg *m)
{
    cJSON *o;
    int r;

    if (rank == w->o.rank) {
        post_self(w, m);
        return;
    }
    if (!(o = peermsg_to_json(m)))
        return;
    r = peers_send(w->peers, rank, o);
    cJSON_Delete(o);
    if (r < 0 && r != -ENOTCONN)
        log_msg(LOGL_WARN, "world: cannot send %s to rank %u: %s", peermsg_type_name(m->type),
                rank, strerror(-r));
}

static void broadcast(struct world *w, const struct peermsg *m)
{
    for (uint32_t r = 0; r < w->o.world_size; r++)
        send_to(w, r, m);
}

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
    struct world *w = arg;

    while (w->q) {
        struct queued *q = w->q;
        w->q = q->next;
        if (!w->q)
            w->q_tail = &w->q;
        handle(w, q->from, &q->m);
        free(q);
    }
}

/* ---- the coordinator's round ------------------------------------------------ */

static void round_clear(struct world *w)
{
    w->phase = WORLD_NONE;
    w->running = false;
    evtimer_del(w->timer);
    for (uint32_t r = 0; r < w->o.world_size; r++) {
        w->m[r].answered = w->m[r].saved = w->m[r].hashed = false;
        w->m[r].step = -1;
    }
}

static void abort_round(struct world *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void abort_round(struct world *w, const char *fmt, ...)
{
    struct peermsg m = { .type = PEERMSG_ABORT, .gen = w->gen, .step = -1 };
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(m.reason, sizeof(m.reason), fmt, ap);
    va_end(ap);
    log_msg(LOGL_WARN, "world: generation %llu is given up: %s", (unsigned long long)w->gen,
            m.reason);
    broadcast(w, &m);
    /* Our own copy ends the round here; make sure no later saved of this
     * generation revives it. */
    if (w->grow) {
        w->grow = false;
        w->grow_after = notice_mono_ms() + GROW_RETRY_MS;
    }
    w->phase = WORLD_NONE;
    w->running = false;
    evtimer_del(w->timer);
}

/* The round's number is claimed: every rank is asked its step. */
static void send_query(struct world *w)
{
    struct peermsg q = { .type = PEERMSG_QUERY, .step = -1 };

    w->phase = WORLD_QUERY;
    w->prepared = false;
    log_msg(LOGL_INFO, "world: round for generation %llu begins (%s), %lld ms to the deadline",
            (unsigned long long)w->gen, w->reason,
            (long long)(w->deadline_ms - notice_now_ms()));
    q.gen = w->gen;
    q.deadline_ms = w->deadline_ms;
    q.terminating = w->terminating;
    snprintf(q.reason, sizeof(q.reason), "%s", w->reason);
    broadcast(w, &q);
}

static void start_round(struct world *w, const struct peermsg *n)
{
    int64_t now = notice_now_ms();
    struct timeval tv;
    int64_t left;

    round_clear(w);
    w->gen = (w->max_gen > w->newest ? w->max_gen : w->newest) + 1;
    w->max_gen = w->gen;
    w->deadline_ms = n->deadline_ms > 0 ? n->deadline_ms : now + ROUND_LIMIT_MS;
    w->terminating = n->terminating;
    snprintf(w->reason, sizeof(w->reason), "%s", n->reason[0] ? n->reason : n->kind);
    w->running = true;
    left = w->deadline_ms - now;
    tv = (struct timeval){ left > 0 ? left / 1000 : 0, left > 0 ? (left % 1000) * 1000 : 0 };
    evtimer_add(w->timer, &tv);
    if (!w->o.ops->claim) {
        send_query(w);
        return;
    }
    /* The number first: another writer of the job may hold this one. */
    w->phase = WORLD_CLAIM;
    w->o.ops->claim(w->o.arg, w->gen);
}

void world_claimed(struct world *w, int err, const char *msg, uint64_t gen)
{
    if (w->phase != WORLD_CLAIM || !w->running)
        return; /* the round was given up meanwhile; the number stays unused */
    if (err) {
        abort_round(w, "%s", msg);
        return;
    }
    w->gen = gen;
    if (gen > w->max_gen)
        w->max_gen = gen;
    send_query(w);
}

/* Every rank answered its step: the step all of them can reach. */
static void maybe_prepare(struct world *w)
{
    struct peermsg p = { .type = PEERMSG_PREPARE, .gen = w->gen, .step = 0,
                         .deadline_ms = w->deadline_ms };

    if (w->prepared)
        return; /* a revised answer after the step was chosen */
    for (uint32_t r = 0; r < w->o.world_size; r++) {
        if (!w->m[r].in)
            continue;
        if (!w->m[r].answered)
            return;
        if (w->m[r].step + 1 > p.step)
            p.step = w->m[r].step + 1;
    }
    snprintf(p.reason, sizeof(p.reason), "%s", w->reason);
    p.split = w->o.split;
    log_msg(LOGL_INFO, "world: every rank answered; generation %llu saves at step %lld",
            (unsigned long long)w->gen, (long long)p.step);
    w->prepared = true;
    broadcast(w, &p);
}

/* The coordinator, in a prepared round: commit once every shard is in;
 * give the round up when a rank that has not saved is down. */
static void maybe_commit(struct world *w)
{
    struct commit c;
    int64_t step = -1, steps[PEERMSG_MAX_MEMBERS];
    uint32_t i = 0, n = 0, unsaved = 0, odd;

    if (w->phase != WORLD_PREPARE || w->coordinator != w->o.rank)
        return;
    for (uint32_t r = 0; r < w->o.world_size; r++) {
        if (!w->m[r].in || w->m[r].saved)
            continue;
        if (!up(w, r)) {
            abort_round(w, "rank %u went down before it saved its shard", r);
            return;
        }
        unsaved++;
    }
    if (unsaved)
        return;
    for (uint32_t r = 0; r < w->o.world_size; r++)
        if (w->m[r].in && n < PEERMSG_MAX_MEMBERS)
            steps[n++] = w->m[r].step;
    switch (world_commit_step(steps, n, &step, &odd)) {
    case WORLD_STEP_DIFFERS:
        abort_round(w, "the ranks saved different steps (%lld and %lld): the trainers "
                    "must save when the world asks", (long long)step, (long long)steps[odd]);
        return;
    case WORLD_STEP_NONE:
        abort_round(w, "no rank's shard holds a checkpoint: the trainers wrote none");
        return;
    case WORLD_STEP_AGREED:
        break;
    }
    memset(&c, 0, sizeof(c));
    if (!(c.ranks = calloc(w->tsize, sizeof(*c.ranks)))) {
        abort_round(w, "out of memory");
        return;
    }
    snprintf(c.job, sizeof(c.job), "%s", w->job);
    c.gen = w->gen;
    c.step = (uint64_t)step;
    c.world_size = w->tsize;
    snprintf(c.reason, sizeof(c.reason), "%s", w->reason);
    snprintf(c.method, sizeof(c.method), "%s", w->method);
    c.created_ms = notice_now_ms();
    snprintf(c.version, sizeof(c.version), "%s", SPOT_VERSION);
    /* The shards carry the trainers' numbers. */
    for (uint32_t r = 0; r < w->o.world_size && i < w->tsize; r++) {
        if (!w->m[r].in)
            continue;
        c.ranks[i].rank = i;
        memcpy(c.ranks[i].sha256, w->m[r].sha256, 32);
        c.ranks[i].bytes = w->m[r].bytes;
        i++;
    }
    w->phase = WORLD_COMMITTING;
    w->step = step;
    log_msg(LOGL_INFO, "world: every rank saved step %lld; committing generation %llu",
            (long long)step, (unsigned long long)w->gen);
    w->o.ops->write_commit(w->o.arg, &c);
    free(c.ranks);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct world *w = arg;
    char who[256] = "";
    size_t len = 0;
    uint32_t n = 0;

    if (w->phase == WORLD_NONE || w->phase == WORLD_COMMITTING)
        return;
    for (uint32_t r = 0; r < w->o.world_size && len < sizeof(who) - 16; r++)
        if (w->m[r].in && (w->phase == WORLD_QUERY ? !w->m[r].answered : !w->m[r].saved)) {
            len += (size_t)snprintf(who + len, sizeof(who) - len, "%s%u", len ? ", " : "", r);
            n++;
        }
    if (w->phase == WORLD_CLAIM)
        abort_round(w, "the deadline passed before its generation number was claimed");
    else
        abort_round(w, "the deadline passed before %s %s %s", n > 1 ? "ranks" : "rank", who,
                    w->phase == WORLD_QUERY ? "answered" : "saved");
}

/* The coordinator, the world running: a rank that waits outside an
 * elastic world that runs short gets in through a checkpoint, a pause and
 * a resume of everyone. */
static void maybe_grow(struct world *w)
{
    struct peermsg n = { .type = PEERMSG_NOTICE, .step = -1 };
    uint32_t joins = w->o.world_size;

    if (!elastic(w) || w->pausing || !members_up(w) || notice_mono_ms() < w->grow_after)
        return;
    for (uint32_t r = 0; r < w->o.world_size && joins == w->o.world_size; r++)
        if (!w->m[r].in && up(w, r) && w->m[r].ready)
            joins = r;
    if (joins == w->o.world_size)
        return;
    log_msg(LOGL_INFO, "world: rank %u waits to join the %u that run; a checkpoint first, "
            "then all resume from it", joins, w->tsize);
    snprintf(n.kind, sizeof(n.kind), "checkpoint");
    snprintf(n.reason, sizeof(n.reason), "grow");
    start_round(w, &n);
    w->grow = true;
}

/* The coordinator: when the whole world waits, resume it; an elastic world
 * also when min_nodes or more have waited join_timeout for the rest, and
 * more than half of the ranks not known gone are among them (two halves of
 * a cut network never both run). */
static void maybe_resume(struct world *w)
{
    int64_t now = notice_mono_ms();
    uint32_t n = 0, gone = 0;

    if (w->coordinator != w->o.rank || w->leaving || w->resuming || w->phase != WORLD_NONE ||
        !all_synced(w))
        return;
    if (!w->waiting) {
        maybe_grow(w);
        return;
    }
    for (uint32_t r = 0; r < w->o.world_size; r++) {
        w->m[r].pick = r == w->o.rank || (up(w, r) && w->m[r].ready);
        n += w->m[r].pick;
        gone += w->m[r].left && !up(w, r);
    }
    if (n < w->o.world_size && !(w->grow_to && n >= w->grow_to)) {
        if (!elastic(w) || n < w->o.min_nodes || 2 * n <= w->o.world_size - gone) {
            w->short_since = 0;
            return;
        }
        if (!w->short_since) {
            w->short_since = now;
            log_msg(LOGL_INFO, "world: %u of %u ranks wait; the world resumes with them in "
                    "%llu s unless the rest join", n, w->o.world_size,
                    (unsigned long long)(w->o.join_ms / 1000));
        }
        if (now - w->short_since < (int64_t)w->o.join_ms)
            return;
    }
    w->resuming = true;
    log_msg(LOGL_INFO, "world: %u of %u ranks are up and waiting; resuming", n,
            w->o.world_size);
    w->o.ops->pick_resume(w->o.arg);
}

/* The coordinator changed (up, down): the new one takes over what it can. */
static void take_over(struct world *w)
{
    uint32_t was = w->coordinator;
    struct world_facts f = { .phase = w->phase, .running = w->running };
    unsigned acts;

    w->coordinator = lowest_up(w);
    if (w->coordinator == was)
        return;
    log_msg(LOGL_INFO, "world: rank %u coordinates%s", w->coordinator,
            w->coordinator == w->o.rank ? " (this node)" : "");
    if (w->coordinator != w->o.rank) {
        w->resuming = false;
        return;
    }
    acts = world_on_take_over(&f);
    if (acts & WA_ABORT)
        abort_round(w, "the coordinator (rank %u) went away before the step was chosen", was);
    if (acts & WA_RUN) {
        int64_t left = w->deadline_ms - notice_now_ms();
        struct timeval tv = { left > 0 ? left / 1000 : 0, left > 0 ? (left % 1000) * 1000 : 0 };
        w->running = true;
        evtimer_add(w->timer, &tv);
    }
    if (acts & WA_COMMIT)
        maybe_commit(w);
    if (acts & WA_RESUME)
        maybe_resume(w);
}

/* ---- messages ------------------------------------------------------------------ */

/* Every rank's fingerprint is in: the same everywhere, or not. */
static void maybe_split(struct world *w)
{
    const uint8_t *first = NULL;
    bool same = true;

    for (uint32_t r = 0; r < w->o.world_size; r++) {
        if (!w->m[r].in)
            continue;
        if (!w->m[r].hashed)
            return;
        if (!first)
            first = w->m[r].fingerprint;
        same = same && memcmp(w->m[r].fingerprint, first, 32) == 0;
    }
    log_msg(LOGL_INFO, "world: every rank hashed generation %llu: %s",
            (unsigned long long)w->gen,
            same ? "the same content everywhere, each stores its share"
                 : "contents differ, each stores all of its own");
    w->o.ops->split(w->o.arg, w->gen, same);
}

static void pause_world(struct world *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void pause_world(struct world *w, const char *fmt, ...)
{
    char why[160];
    va_list ap;

    if (w->waiting || w->pausing || w->leaving)
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    log_msg(LOGL_WARN, "world: %s; stopping the command until the world is whole again", why);
    w->pausing = true; /* no new round; world_ready() follows the stop */
    w->resume_pending = false;
    /* Only readiness said from now on counts: a ready sent just before
     * the last resume may have come after it. */
    for (uint32_t r = 0; r < w->o.world_size; r++)
        w->m[r].ready = false;
    w->o.ops->pause(w->o.arg, why);
}

/* The handlers, one per message type: each runs once world_admit() has
 * let its message through, and decides the rest itself. */

static void msg_notice(struct world *w, uint32_t from, const struct peermsg *m)
{
    if (w->coordinator != w->o.rank) {
        /* It thought we coordinate: pass it on (towards lower ranks, so
         * this ends). */
        send_to(w, w->coordinator, m);
    } else if (w->waiting || w->pausing || !members_up(w)) {
        log_msg(LOGL_INFO, "world: rank %u wants a checkpoint (%s), but the world is not "
                "running; the newest committed generation stands", from, m->kind);
    } else if (w->phase != WORLD_NONE) {
        if (m->deadline_ms > 0 && m->deadline_ms < w->deadline_ms &&
            w->phase != WORLD_COMMITTING)
            w->deadline_ms = m->deadline_ms;
        log_msg(LOGL_INFO, "world: rank %u wants a checkpoint (%s) during generation "
                "%llu's: it waits for that one%s", from, m->kind, (unsigned long long)w->gen,
                m->terminating && !w->terminating ? " (which serves it, or the rank asks "
                "again for a terminating round of its own)" : "");
    } else {
        start_round(w, m);
    }
}

static void msg_query(struct world *w, uint32_t from, const struct peermsg *m)
{
    /* Our own query: start_round() set the round up already. */
    if (from != w->o.rank) {
        round_clear(w);
        w->gen = m->gen;
        if (m->gen > w->max_gen)
            w->max_gen = m->gen;
        w->deadline_ms = m->deadline_ms;
        w->terminating = m->terminating;
        snprintf(w->reason, sizeof(w->reason), "%s", m->reason);
        w->phase = WORLD_QUERY;
    } else if (!w->running || m->gen != w->gen) {
        return;
    }
    w->o.ops->query(w->o.arg, m->gen, m->deadline_ms, w->terminating, w->reason);
}

static void msg_step(struct world *w, uint32_t from, const struct peermsg *m)
{
    w->m[from].answered = true;
    w->m[from].step = m->step;
    maybe_prepare(w);
}

static void msg_prepare(struct world *w, uint32_t from, const struct peermsg *m)
{
    w->phase = WORLD_PREPARE;
    w->step = m->step;
    snprintf(w->reason, sizeof(w->reason), "%s", m->reason);
    w->o.ops->prepare(w->o.arg, m->gen, m->step, m->split);
}

static void msg_saved(struct world *w, uint32_t from, const struct peermsg *m)
{
    w->m[from].saved = true;
    w->m[from].step = m->step;
    memcpy(w->m[from].sha256, m->sha256, 32);
    w->m[from].bytes = m->bytes;
    if (w->coordinator == w->o.rank)
        maybe_commit(w);
}

static void msg_hashed(struct world *w, uint32_t from, const struct peermsg *m)
{
    if (w->m[from].hashed)
        return;
    w->m[from].hashed = true;
    memcpy(w->m[from].fingerprint, m->sha256, 32);
    maybe_split(w);
}

static void msg_commit(struct world *w, uint32_t from, const struct peermsg *m)
{
    if (m->gen > w->newest)
        w->newest = m->gen;
    if (m->gen > w->max_gen)
        w->max_gen = m->gen;
    if (m->gen == w->gen && w->phase != WORLD_NONE)
        round_clear(w);
    w->o.ops->commit(w->o.arg, m->gen, m->step);
}

static void msg_abort(struct world *w, uint32_t from, const struct peermsg *m)
{
    if (from != w->o.rank && w->coordinator == w->o.rank && m->gen == w->gen &&
        w->running && w->phase != WORLD_NONE && w->phase != WORLD_COMMITTING) {
        /* A rank could not save: the round is over for everyone. */
        abort_round(w, "rank %u: %s", from, m->reason[0] ? m->reason : "failed");
        return;
    }
    if (m->gen > w->max_gen)
        w->max_gen = m->gen;
    if (m->gen == w->gen)
        round_clear(w);
    w->o.ops->abort(w->o.arg, m->gen, m->reason[0] ? m->reason : "given up");
}

static void msg_resume(struct world *w, uint32_t from, const struct peermsg *m)
{
    if (w->leaving)
        return;
    set_members(w, m);
    w->short_since = 0;
    w->grow_to = 0;
    for (uint32_t r = 0; r < w->o.world_size; r++)
        w->m[r].ready = false;
    take_over(w);
    if (!w->m[w->o.rank].in) {
        log_msg(LOGL_INFO, "world: the world resumes with %u ranks, not this one: it "
                "waits to join", w->tsize);
        return;
    }
    if (!w->waiting) {
        /* Still stopping the command: resume once it has stopped. */
        if (w->pausing) {
            w->resume_msg = *m;
            w->resume_pending = true;
        }
        return;
    }
    w->waiting = false;
    w->resuming = false;
    for (uint32_t r = 0; r < w->o.world_size; r++)
        w->m[r].ready = false;
    w->o.ops->resume(w->o.arg, m->gen, m->master_addr, m->master_port);
}

static void msg_leave(struct world *w, uint32_t from, const struct peermsg *m)
{
    w->m[from].left = true;
    snprintf(w->m[from].left_why, sizeof(w->m[from].left_why), "%s", m->reason);
    if (from == w->o.rank)
        return;
    log_msg(LOGL_INFO, "world: rank %u leaves (%s)", from,
            m->reason[0] ? m->reason : "no reason given");
    if (strcmp(m->reason, "finished") != 0 && w->m[from].in)
        pause_world(w, "rank %u left (%s)", from, m->reason);
}

static void msg_ready(struct world *w, uint32_t from, const struct peermsg *m)
{
    if (m->gen > w->newest)
        w->newest = m->gen;
    if (w->coordinator != w->o.rank)
        return;
    w->m[from].ready = true;
    maybe_resume(w);
}

static void msg_state(struct world *w, uint32_t from, const struct peermsg *m)
{
    w->m[from].synced = true;
    if (w->fresh && m->nmembers) {
        set_members(w, m);
        log_msg(LOGL_INFO, "world: rank %u says the world %s with %u of %u ranks%s", from,
                m->live ? "runs" : "stopped", w->tsize, w->o.world_size,
                w->m[w->o.rank].in ? "" : "; this node waits to join");
    }
    take_over(w);
}

static void msg_pause(struct world *w, uint32_t from, const struct peermsg *m)
{
    pause_world(w, "%s", m->reason[0] ? m->reason : "the coordinator pauses the world");
}

/* What a message needs besides its phase (struct world_facts). */
/* The handlers, by message type: each runs once world_admit()
 * (world_decide.c) has let its message through. */
static void (*const handlers[PEERMSG__COUNT])(struct world *w, uint32_t from,
                                              const struct peermsg *m) = {
    [PEERMSG_NOTICE] = msg_notice, [PEERMSG_QUERY] = msg_query,
    [PEERMSG_STEP] = msg_step,     [PEERMSG_PREPARE] = msg_prepare,
    [PEERMSG_SAVED] = msg_saved,   [PEERMSG_HASHED] = msg_hashed,
    [PEERMSG_COMMIT] = msg_commit, [PEERMSG_ABORT] = msg_abort,
    [PEERMSG_RESUME] = msg_resume, [PEERMSG_LEAVE] = msg_leave,
    [PEERMSG_READY] = msg_ready,   [PEERMSG_STATE] = msg_state,
    [PEERMSG_PAUSE] = msg_pause,
};

/* A message from rank from (this node's own included): the checks every
 * message shares, then its handler. */
static void handle(struct world *w, uint32_t from, const struct peermsg *m)
{
    struct world_facts f = {
        .phase = w->phase,
        .coordinator = w->coordinator == w->o.rank,
        .running = w->running,
        .member = w->m[w->o.rank].in,
        .from_member = w->m[from].in,
        .from_coordinator = from == w->coordinator,
        .same_gen = m->gen == w->gen,
        .names_sender = m->rank == from,
    };

    switch (world_admit(m->type, &f)) {
    case WORLD_TAKE:
        if (handlers[m->type])
            handlers[m->type](w, from, m);
        break;
    case WORLD_REFUSE:
        log_msg(LOGL_WARN, "world: rank %u reports rank %u's shard: refused", from, m->rank);
        break;
    case WORLD_IGNORE:
        break;
    }
}

static void on_msg(void *arg, uint32_t rank, const char *body, size_t len)
{
    struct world *w = arg;
    struct peermsg m;
    const char *why;

    if (peermsg_parse(body, len, &m, &why) < 0) {
        log_msg(LOGL_WARN, "world: a message from rank %u is refused: %s", rank, why);
        return;
    }
    handle(w, rank, &m);
}

static void send_ready(struct world *w)
{
    struct peermsg m = { .type = PEERMSG_READY, .gen = w->newest, .step = -1 };

    if (w->waiting && !w->leaving)
        send_to(w, w->coordinator, &m);
}

/* What this node knows of the world, to a peer that just came up: its
 * first message. */
static void send_state(struct world *w, uint32_t rank)
{
    struct peermsg m = { .type = PEERMSG_STATE, .gen = w->newest, .step = -1 };

    m.live = w->m[w->o.rank].in && !w->waiting && !w->pausing;
    for (uint32_t r = 0; !w->fresh && r < w->o.world_size; r++)
        if (w->m[r].in)
            peermsg_add_member(&m, r);
    send_to(w, rank, &m);
}

static void on_up(void *arg, uint32_t rank)
{
    struct world *w = arg;

    w->m[rank].left = false;
    w->m[rank].ready = false;
    w->m[rank].synced = false;
    send_state(w, rank);
    take_over(w);
    send_ready(w);
}

static void on_down(void *arg, uint32_t rank, const char *why)
{
    struct world *w = arg;
    struct world_facts f;
    unsigned acts;

    w->m[rank].ready = false;
    w->m[rank].synced = false;
    take_over(w);
    f = (struct world_facts){ .phase = w->phase, .coordinator = w->coordinator == w->o.rank,
                              .running = w->running, .from_member = w->m[rank].in };
    acts = world_on_down(&f, w->m[rank].left);
    if (acts & WA_COMMIT)
        maybe_commit(w);
    if (acts & WA_ABORT)
        abort_round(w, "rank %u went down (%s) before it said its step", rank, why);
    if (acts & WA_PAUSE)
        pause_world(w, "rank %u is down (%s)", rank, why);
    send_ready(w);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct world *w = arg;

    send_ready(w);
    maybe_resume(w);
}

/* ---- the API ------------------------------------------------------------------ */

void world_ready(struct world *w, uint64_t newest)
{
    if (newest > w->newest)
        w->newest = newest;
    w->waiting = true;
    w->pausing = false;
    if (w->resume_pending) {
        w->resume_pending = false;
        post_self(w, &w->resume_msg);
        return;
    }
    send_ready(w);
}

void world_trigger(struct world *w, const char *kind, const char *reason, bool terminating,
                   int64_t deadline_ms)
{
    struct peermsg m = { .type = PEERMSG_NOTICE, .step = -1, .terminating = terminating,
                         .deadline_ms = deadline_ms > 0 ? deadline_ms : 0 };

    snprintf(m.kind, sizeof(m.kind), "%s", kind);
    snprintf(m.reason, sizeof(m.reason), "%s", reason);
    send_to(w, w->coordinator, &m);
}

void world_step(struct world *w, uint64_t gen, int64_t step)
{
    struct peermsg m = { .type = PEERMSG_STEP, .gen = gen, .step = step < 0 ? 0 : step };

    send_to(w, w->coordinator, &m);
}

void world_hashed(struct world *w, uint64_t gen, const uint8_t fingerprint[32])
{
    struct peermsg m = { .type = PEERMSG_HASHED, .gen = gen, .step = -1, .rank = w->o.rank };

    memcpy(m.sha256, fingerprint, 32);
    broadcast(w, &m);
}

void world_saved(struct world *w, uint64_t gen, int64_t step, const uint8_t sha256[32],
                 uint64_t bytes)
{
    struct peermsg m = { .type = PEERMSG_SAVED, .gen = gen, .step = step, .rank = w->o.rank,
                         .bytes = bytes };

    memcpy(m.sha256, sha256, 32);
    broadcast(w, &m);
}

void world_failed(struct world *w, uint64_t gen, const char *reason)
{
    struct peermsg m = { .type = PEERMSG_ABORT, .gen = gen, .step = -1 };

    snprintf(m.reason, sizeof(m.reason), "%s", reason);
    if (w->coordinator == w->o.rank) {
        if (gen == w->gen && w->running && w->phase != WORLD_NONE && w->phase != WORLD_COMMITTING)
            abort_round(w, "rank %u: %s", w->o.rank, reason);
        return;
    }
    send_to(w, w->coordinator, &m);
}

void world_committed(struct world *w, uint64_t gen, int err, const char *msg)
{
    struct peermsg m = { .type = PEERMSG_COMMIT, .gen = gen, .step = w->step };

    if (gen != w->gen || w->phase != WORLD_COMMITTING)
        return;
    if (err) {
        abort_round(w, "the commit record could not be written: %s", msg);
        return;
    }
    broadcast(w, &m);
    if (w->grow) {
        struct peermsg p = { .type = PEERMSG_PAUSE, .step = -1 };
        uint32_t joins = 0;

        w->grow = false;
        for (uint32_t r = 0; r < w->o.world_size; r++)
            joins += !w->m[r].in && up(w, r) && w->m[r].ready;
        w->grow_to = w->tsize + joins;
        snprintf(p.reason, sizeof(p.reason), "the world grows from %u to %u ranks at "
                 "generation %llu", w->tsize, w->grow_to, (unsigned long long)gen);
        broadcast(w, &p);
    }
}

void world_resume_from(struct world *w, uint64_t gen)
{
    struct peermsg m = { .type = PEERMSG_RESUME, .gen = gen, .step = -1,
                         .master_port = (uint16_t)w->o.master_port };
    const char *master = NULL;

    if (!w->resuming)
        return;
    /* Only if nothing changed while the store was read. */
    w->resuming = false;
    if (w->coordinator != w->o.rank || !w->waiting)
        return;
    for (uint32_t r = 0; r < w->o.world_size; r++) {
        if (!w->m[r].pick)
            continue;
        if (r != w->o.rank && !(peers_up(w->peers, r) && w->m[r].ready))
            return;
        peermsg_add_member(&m, r);
        if (!master)
            master = w->m[r].host[0] ? w->m[r].host : w->master_addr;
    }
    m.world_size = m.nmembers;
    snprintf(m.master_addr, sizeof(m.master_addr), "%s", master ? master : w->master_addr);
    log_msg(LOGL_INFO, "world: resume from generation %llu%s with %u of %u ranks",
            (unsigned long long)gen, gen ? "" : " (none: a fresh start)", m.world_size,
            w->o.world_size);
    broadcast(w, &m);
}

void world_leave(struct world *w, const char *reason)
{
    struct peermsg m = { .type = PEERMSG_LEAVE, .step = -1 };

    if (w->leaving)
        return;
    snprintf(m.reason, sizeof(m.reason), "%s", reason);
    w->leaving = true;
    for (uint32_t r = 0; r < w->o.world_size; r++)
        if (r != w->o.rank)
            send_to(w, r, &m);
}

static void host_of(const char *addr, char *out, size_t size);

int world_set_addr(struct world *w, uint32_t rank, const char *addr)
{
    char err[256];

    if (rank >= w->o.world_size || rank == w->o.rank)
        return -EINVAL;
    if (peers_set_addr(w->peers, rank, addr, err, sizeof(err)) < 0) {
        log_msg(LOGL_WARN, "world: %s", err);
        return -EINVAL;
    }
    host_of(addr, w->m[rank].host, sizeof(w->m[rank].host));
    if (rank == 0)
        host_of(addr, w->master_addr, sizeof(w->master_addr));
    return 0;
}

const char *world_listen_addr(const struct world *w)
{
    return w->listen_addr;
}

bool world_up(const struct world *w, uint32_t rank)
{
    return rank == w->o.rank || (rank < w->o.world_size && peers_up(w->peers, rank));
}

bool world_is_coordinator(const struct world *w)
{
    return w->coordinator == w->o.rank;
}

uint32_t world_rank(const struct world *w)
{
    return w->o.rank;
}

uint32_t world_size(const struct world *w)
{
    return w->o.world_size;
}

uint32_t world_trainer_rank(const struct world *w)
{
    return w->trank;
}

uint32_t world_trainer_size(const struct world *w)
{
    return w->tsize;
}

uint32_t world_coordinator(const struct world *w)
{
    return w->coordinator;
}

uint32_t world_alive(const struct world *w)
{
    uint32_t n = 0;

    for (uint32_t r = 0; r < w->o.world_size; r++)
        n += r == w->o.rank || peers_up(w->peers, r);
    return n;
}

const char *world_master_addr(const struct world *w)
{
    return w->master_addr;
}

uint64_t world_refused(const struct world *w)
{
    return peers_refused(w->peers);
}

/* The host of "ADDR:PORT" or "[V6]:PORT". */
static void host_of(const char *addr, char *out, size_t size)
{
    const char *colon = strrchr(addr, ':');
    size_t len = colon ? (size_t)(colon - addr) : strlen(addr);

    if (len >= 2 && addr[0] == '[' && addr[len - 1] == ']')
        addr++, len -= 2;
    snprintf(out, size, "%.*s", (int)len, addr);
}

struct world *world_new(const struct world_opts *o, char *err, size_t errlen)
{
    struct world *w = calloc(1, sizeof(*w));
    struct frame_key none = { .len = 0 };
    struct peers_opts po = {
        .base = o->base,
        .key = o->key ? o->key : &none,
        .job = o->job,
        .rank = o->rank,
        .world_size = o->world_size,
        .dead_ms = o->dead_ms,
        .on_msg = on_msg,
        .on_up = on_up,
        .on_down = on_down,
    };
    struct timeval tv = { TICK_MS / 1000, (TICK_MS % 1000) * 1000 };

    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->o = *o;
    w->q_tail = &w->q;
    w->coordinator = o->rank;
    w->fresh = true;
    w->trank = o->rank;
    w->tsize = o->world_size;
    po.arg = w;
    w->job = strdup(o->job);
    w->method = strdup(o->method ? o->method : "app");
    w->m = calloc(o->world_size ? o->world_size : 1, sizeof(*w->m));
    w->timer = evtimer_new(o->base, on_timer, w);
    w->tick = event_new(o->base, -1, EV_PERSIST, on_tick, w);
    w->drain = event_new(o->base, -1, 0, on_drain, w);
    if (!w->job || !w->method || !w->m || !w->timer || !w->tick || !w->drain) {
        snprintf(err, errlen, "out of memory");
        return world_free(w);
    }
    for (uint32_t r = 0; r < o->world_size; r++)
        w->m[r].in = true;
    round_clear(w);
    if (!(w->peers = peers_new(&po, err, errlen)))
        return world_free(w);
    if (peers_listen(w->peers, o->listen, err, errlen) < 0)
        return world_free(w);
    host_of(o->listen, w->master_addr, sizeof(w->master_addr));
    snprintf(w->listen_addr, sizeof(w->listen_addr), "%s%s%s:%d",
             strchr(w->master_addr, ':') ? "[" : "", w->master_addr,
             strchr(w->master_addr, ':') ? "]" : "", peers_port(w->peers));
    host_of(o->listen, w->m[o->rank].host, sizeof(w->m[o->rank].host));
    for (uint32_t r = 0; r < o->world_size; r++) {
        if (o->peers && o->peers[r])
            host_of(o->peers[r], w->m[r].host, sizeof(w->m[r].host));
        if (r != o->rank && o->peers && o->peers[r] &&
            peers_set_addr(w->peers, r, o->peers[r], err, errlen) < 0)
            return world_free(w);
    }
    if (o->peers && o->peers[0])
        host_of(o->peers[0], w->master_addr, sizeof(w->master_addr));
    event_add(w->tick, &tv);
    return w;
}

struct world *world_free(struct world *w)
{
    if (!w)
        return NULL;
    w->peers = peers_free(w->peers);
    while (w->q) {
        struct queued *q = w->q;
        w->q = q->next;
        free(q);
    }
    if (w->timer)
        event_free(w->timer);
    if (w->tick)
        event_free(w->tick);
    if (w->drain)
        event_free(w->drain);
    free(w->m);
    free(w->job);
    free(w->method);
    free(w);
    return NULL;
}
