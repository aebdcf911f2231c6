/* orch_decide: the orchestrator's decisions, written down as a table.
 * For each state and event, orch_decide() says the next state and what
 * to do; it has no I/O and reads nothing but the facts it is given, so
 * that tests/unit/test_orch.c drives every cell directly.  orch*.c gather
 * the facts, enter the next state, and carry the actions out, in the
 * order of enum orch_act.
 *
 * The events come from the start (the resume done, a world's resume, a
 * world's node with nothing running), from the triggers (a notice, the
 * --interval tick, a trainer's request, the dir method's new folder), from
 * the plan at a terminating notice, and from the steps of one checkpoint
 * (the method's save, the upload, the commit). */
#ifndef SPOTD_ORCH_DECIDE_H
#define SPOTD_ORCH_DECIDE_H

#include <stdbool.h>

enum orch_state { RESUMING, IDLE, SAVING, UPLOADING, COMMITTING, DRAINING, WAITING };
#define ORCH_NSTATES (WAITING + 1)

enum orch_event {
    EV_NOTICE,         /* an advisory notice (a rebalance recommendation) */
    EV_TERMINATING,    /* a terminating notice */
    EV_TICK,           /* --interval */
    EV_REQUEST,        /* a trainer's ckpt_request_save(), or spotctl checkpoint */
    EV_FOUND,          /* the dir method found a new complete checkpoint */
    EV_TRAINER_SAVED,  /* a trainer's ckpt_saved() with no save open (signal method) */
    EV_QUERY,          /* a world's coordinator asks this node to save for its round */
    EV_GO,             /* the checkpoint set up may begin: no plan needed, or it fits */
    EV_TOO_LATE,       /* the plan says a new checkpoint will not fit the deadline */
    EV_SAVED,          /* the method saved the trainers' state */
    EV_NOTHING_NEW,    /* the method has nothing newer than the last checkpoint */
    EV_UPLOADED,       /* the upload is done */
    EV_COMMITTED,      /* the commit record is written (a world's: by its coordinator) */
    EV_FAILED,         /* a step of the checkpoint under way failed */
    EV_RESUMED,        /* the resume is done (restored, or nothing to restore) */
    EV_WORLD_RESUME,   /* the world's coordinator says: resume from this generation */
    EV_PARKED,         /* a world's node: its command is stopped (or not started) */
    EV__COUNT
};

/* What the orchestrator knows when an event comes. */
struct orch_facts {
    enum orch_state state;
    bool world;        /* the job is a world of nodes (--world-size > 1) */
    bool ranked;       /* a world: this node has its rank (the world exists) */
    bool coordinator;  /* a world: this node coordinates its rounds */
    bool stopping;     /* a world's pause stopped the command, or is stopping it */
    bool parked;       /* a world's node: the command is not running, by the world's word */
    bool ending;       /* this node goes once the command is not running (A_END was done) */
    bool finishing;    /* spotd itself is ending: nothing new starts */
    bool last;         /* the checkpoint under way is the last: the stop follows it */
    bool adopted;      /* the checkpoint under way began before a terminating notice and
                        * was made its last: failed, a node alone's notice gets its own */
    bool told_last;    /* the method knew it before its save began (or saves it no
                        * differently): else the last one is saved again */
    bool trainers;     /* someone to save: the method needs no trainers, or one is connected */
    bool aborted;      /* the checkpoint under way was given up (the world's abort) */
    bool have_gen;     /* a committed generation holds the job's state */
    bool writer;       /* a world: this node's checkpoint files are the world's (only
                        * global rank 0 writes, and it runs here: --ckpt-writers rank0) */
    /* Of the terminating notice decided (EV_TERMINATING's, or at EV_RESUMED
     * the one held while resuming): */
    bool far;          /* its deadline is beyond NOTICE_HORIZON_MS: acted on when due */
    bool late;         /* a checkpoint begun now would end after it is given up */
    bool store_waits;  /* the resume waits to try the store again (it could not be read) */
    bool held;         /* notices came while resuming: acted on once the command runs */
};

/* The actions, in the order they are carried out. */
enum orch_act {
    A_NONE = 0,
    A_EXIT_UNRANKED = 1 << 0,   /* no rank yet, preempted: spotd exits, saved */
    A_END = 1 << 1,             /* the command is not running: it is not started, exit 75 */
    A_LEAVE = 1 << 2,           /* a world: this node leaves it, its command not running */
    A_MAKE_LAST = 1 << 3,       /* the checkpoint under way becomes the last one */
    A_BEGIN = 1 << 4,           /* set a checkpoint up (or a world's trigger), then plan */
    A_START = 1 << 5,           /* this node's checkpoint starts: claim, hook, method */
    A_TRIGGER = 1 << 6,         /* a world: ask the coordinator for a round */
    A_REFUSE = 1 << 7,          /* a world: tell the coordinator this node cannot save now */
    A_TO_METHOD = 1 << 8,       /* pass the trainer's word to the method */
    A_UPLOAD = 1 << 9,          /* store what the method saved */
    A_COMMIT = 1 << 10,         /* write the commit record (a world's node: report its shard) */
    A_RECORD = 1 << 11,         /* the commit: figures, the resume point, gc */
    A_DISCARD = 1 << 12,        /* nothing new: the work folder goes */
    A_FINISH = 1 << 13,         /* the checkpoint ends: its events and post-checkpoint hook */
    A_STOP_SAVED = 1 << 14,     /* the method's stop: the newest state is committed */
    A_STOP_UNSAVED = 1 << 15,   /* the stop sequence: nothing new could be saved */
    A_CLAIM_NEXT = 1 << 16,     /* claim the next generation number ahead */
    A_READY = 1 << 17,          /* a world: wait for its resume, if the command is stopped */
    A_AGAIN = 1 << 18,          /* begin the last checkpoint again, for the same notice */
    A_RUN = 1 << 19,            /* start the command: its socket, method, tick */
    A_RESTORE = 1 << 20,        /* a world's resume: restore its generation (or none) */
    A_WAIT_WORLD = 1 << 21,     /* a world: tell its coordinator this node waits to resume */
    A_HOLD = 1 << 22,           /* keep the notice: a far one until it is due, one that
                                 * came while resuming until the command runs */
    A_HELD = 1 << 23,           /* the command runs: act on the notices held while resuming */
};

struct orch_decision {
    enum orch_state next;      /* entered before the actions run */
    unsigned acts;             /* enum orch_act */
};

/* What the orchestrator does with event ev under f. */
struct orch_decision orch_decide(const struct orch_facts *f, enum orch_event ev);

/* The actions event ev can yield: its handler carries out every one. */
unsigned orch_event_acts(enum orch_event ev);

/* Names, for the log and the tests. */
const char *orch_state_str(enum orch_state s);
const char *orch_event_str(enum orch_event ev);

#endif
