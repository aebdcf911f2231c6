#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "spot/pool.h"

struct sum_job {
    struct pool_job job;
    struct event_base *base;
    uint64_t n, result;
    int worker;
    pthread_t done_thread;
    int *done_count, total;
};

static void sum_work(struct pool_job *job)
{
    struct sum_job *j = (struct sum_job *)job;

    j->worker = pool_worker_index();
    for (uint64_t i = 1; i <= j->n; i++)
        j->result += i;
}

static void sum_done(struct pool_job *job)
{
    struct sum_job *j = (struct sum_job *)job;

    j->done_thread = pthread_self();
    if (++*j->done_count == j->total)
        event_base_loopbreak(j->base);
}

TEST(pool_results_on_loop)
{
    struct event_base *base = event_base_new();
    struct pool *p = pool_new(base, 2);
    struct sum_job jobs[200];
    int done = 0;

    CHECK(p != NULL);
    if (!p)
        return;
    CHECK_INT(pool_worker_index(), -1);
    for (int i = 0; i < 200; i++) {
        jobs[i] = (struct sum_job){ .job = { sum_work, sum_done, false, NULL }, .base = base,
                                    .n = (uint64_t)i * 1000, .done_count = &done, .total = 200 };
        pool_submit(p, &jobs[i].job);
    }
    CHECK_INT(pool_pending(p), 200);
    event_base_dispatch(base);
    CHECK_INT(done, 200);
    CHECK_INT(pool_pending(p), 0);
    for (int i = 0; i < 200; i++) {
        uint64_t n = (uint64_t)i * 1000;
        if (jobs[i].result != n * (n + 1) / 2 || jobs[i].worker < 0 || jobs[i].worker > 1 ||
            !pthread_equal(jobs[i].done_thread, pthread_self()) || jobs[i].job.cancelled) {
            printf("  job %d: result %llu worker %d\n", i, (unsigned long long)jobs[i].result,
                   jobs[i].worker);
            harness_failed = 1;
            break;
        }
    }
    pool_free(p);
    event_base_free(base);
}

struct slow_job {
    struct pool_job job;
    int dones;
};

static void slow_work(struct pool_job *job)
{
    usleep(100 * 1000);
}

static void slow_done(struct pool_job *job)
{
    ((struct slow_job *)job)->dones++;
}

TEST(pool_free_cancels_queued)
{
    struct event_base *base = event_base_new();
    struct pool *p = pool_new(base, 1);
    struct slow_job jobs[5];
    int cancelled = 0;

    CHECK(p != NULL);
    if (!p)
        return;
    for (int i = 0; i < 5; i++) {
        jobs[i] = (struct slow_job){ .job = { slow_work, slow_done, false, NULL } };
        pool_submit(p, &jobs[i].job);
    }
    usleep(20 * 1000); /* the first job is running */
    pool_free(p);
    for (int i = 0; i < 5; i++) {
        CHECK_INT(jobs[i].dones, 1);   /* exactly one done() each */
        cancelled += jobs[i].job.cancelled;
    }
    CHECK_INT(jobs[0].job.cancelled, 0);
    CHECK(cancelled >= 3);
    CHECK(pool_new(base, 0) == NULL);
    CHECK(pool_new(base, 65) == NULL);
    event_base_free(base);
}
