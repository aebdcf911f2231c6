/* pool: worker threads that hand results back to the loop.
 *
 * DESIGN (after redis' bio.c).  One queue of jobs under a mutex, with a
 * condition variable for idle workers.  A finished job goes on a done
 * list under the same mutex, and the first job to land on an empty list
 * writes to an eventfd the loop watches.  The loop swaps the whole list
 * out under the lock and runs the done() callbacks outside it, in the
 * order the jobs finished, so a callback may submit more jobs. */
#include "spot/pool.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define POOL_MAX_THREADS 64

struct worker {
    struct pool *p;
    pthread_t thread;
    int index;
    bool started;
};

struct pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct pool_job *queue, *queue_tail;     /* not started */
    struct pool_job *finished, *finished_tail;
    bool stopping;
    size_t pending;                          /* loop thread only */
    int efd;
    struct event *ev;
    unsigned n;
    struct worker workers[POOL_MAX_THREADS];
};

static __thread int worker_index = -1;

int pool_worker_index(void)
{
    return worker_index;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pool *p = w->p;

    worker_index = w->index;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        struct pool_job *job;
        bool wake_loop;

        while (!p->queue && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stopping)
            break;
        job = p->queue;
        p->queue = job->next;
        if (!p->queue)
            p->queue_tail = NULL;
        pthread_mutex_unlock(&p->lock);

        job->work(job);

        pthread_mutex_lock(&p->lock);
        job->next = NULL;
        wake_loop = p->finished == NULL;
        if (p->finished_tail)
            p->finished_tail->next = job;
        else
            p->finished = job;
        p->finished_tail = job;
        if (wake_loop) {
            uint64_t one = 1;
            /* A full counter still wakes the loop: ignore EAGAIN. */
            if (write(p->efd, &one, sizeof(one)) < 0) {
            }
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Run done() for a list of jobs, in order. */
static void run_done(struct pool *p, struct pool_job *job)
{
    while (job) {
        struct pool_job *next = job->next;
        job->next = NULL;
        p->pending--;
        job->done(job);
        job = next;
    }
}

static void on_finished(evutil_socket_t fd, short what, void *arg)
{
    struct pool *p = arg;
    struct pool_job *list;
    uint64_t n;

    if (read(p->efd, &n, sizeof(n)) < 0) {
        /* EAGAIN: another wake-up already drained it. */
    }
    pthread_mutex_lock(&p->lock);
    list = p->finished;
    p->finished = p->finished_tail = NULL;
    pthread_mutex_unlock(&p->lock);
    run_done(p, list);
}

void pool_submit(struct pool *p, struct pool_job *job)
{
    job->next = NULL;
    job->cancelled = false;
    p->pending++;
    pthread_mutex_lock(&p->lock);
    if (p->queue_tail)
        p->queue_tail->next = job;
    else
        p->queue = job;
    p->queue_tail = job;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

size_t pool_pending(const struct pool *p)
{
    return p->pending;
}

struct pool *pool_new(struct event_base *base, unsigned threads)
{
    struct pool *p;

    if (threads < 1 || threads > POOL_MAX_THREADS) {
        errno = EINVAL;
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->efd = -1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->efd < 0)
        goto out_free;
    p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, on_finished, p);
    if (!p->ev || event_add(p->ev, NULL) < 0)
        goto out_free;
    for (unsigned i = 0; i < threads; i++) {
        struct worker *w = &p->workers[i];
        int r;

        w->p = p;
        w->index = (int)i;
        r = pthread_create(&w->thread, NULL, worker_main, w);
        if (r != 0) {
            errno = r;
            goto out_free;
        }
        w->started = true;
        p->n++;
    }
    return p;

out_free: {
        int saved = errno;
        pool_free(p);
        errno = saved;
        return NULL;
    }
}

struct pool *pool_free(struct pool *p)
{
    struct pool_job *queued, *finished;

    if (!p)
        return NULL;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->n; i++)
        if (p->workers[i].started)
            pthread_join(p->workers[i].thread, NULL);

    /* No worker runs now: the lists are ours. */
    finished = p->finished;
    queued = p->queue;
    p->finished = p->queue = NULL;
    run_done(p, finished);
    for (struct pool_job *j = queued; j; j = j->next)
        j->cancelled = true;
    run_done(p, queued);

    if (p->ev)
        event_free(p->ev);
    if (p->efd >= 0)
        close(p->efd);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
    return NULL;
}
