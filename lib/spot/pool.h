/* pool: a few worker threads for the work that must not run on the loop
 * (reading and writing files, fsync, SHA-256, zstd).
 *
 * A job's work() runs on a worker and may touch only what the job holds;
 * its done() runs afterwards on the loop thread, where everything else
 * lives.  Every submitted job gets exactly one done() call: after its
 * work(), or with cancelled set when the pool is freed before the job
 * started. */
#ifndef SPOT_POOL_H
#define SPOT_POOL_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct pool;

struct pool_job {
    void (*work)(struct pool_job *job);   /* on a worker thread */
    void (*done)(struct pool_job *job);   /* on the loop thread */
    bool cancelled;                       /* set for jobs that never ran */
    struct pool_job *next;                /* the pool's */
};

/* A pool of threads (1..64) whose results come back on base.  Returns NULL
 * with errno set. */
struct pool *pool_new(struct event_base *base, unsigned threads);

/* Queue a job; never blocks.  The job must stay valid until its done(). */
void pool_submit(struct pool *p, struct pool_job *job);

/* Jobs submitted whose done() has not run yet. */
size_t pool_pending(const struct pool *p);

/* Stop the workers (a running work() finishes first), then call done() of
 * every job left, cancelled or finished, on the calling thread.  Takes
 * NULL, returns NULL. */
struct pool *pool_free(struct pool *p);

/* The index (0..threads-1) of the worker running the caller, -1 on a
 * thread that is not a worker: for per-thread state such as a zstd
 * context. */
int pool_worker_index(void);

#endif
