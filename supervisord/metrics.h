/* metrics: spotd's Prometheus endpoint, `--metrics ADDR:PORT`, GET /metrics.
 *
 * Counters and histograms are built from the event records (log_observe()),
 * so the metrics say what the event log says: notices, checkpoints and
 * their phases, bytes, restarts, restores.  Gauges are read when scraped:
 * the orchestrator's status (step, steps per second, the newest committed
 * generation, the world's peers and coordinator), the command's CPU time and
 * resident memory from /proc, spotd's own, and the GPUs through NVML,
 * sampled on a timer so that a scrape never waits for the driver.  The
 * exposition is the Prometheus text format, version 0.0.4; every metric is
 * listed in docs/operations.md. */
#ifndef SPOTD_METRICS_H
#define SPOTD_METRICS_H

#include <stddef.h>

struct event_base;
struct child;
struct orch;
struct metrics;

struct metrics_opts {
    struct event_base *base;
    const char *addr;             /* "ADDR:PORT", "[V6]:PORT", or ":PORT" (127.0.0.1) */
    struct child *child;          /* the command: its CPU and memory */
    struct orch *orch;            /* NULL without checkpoints */
    unsigned gpu_idle_threshold;  /* percent: a GPU under it is idle */
};

/* Listening once it returns; NULL with the reason in err. */
struct metrics *metrics_new(const struct metrics_opts *o, char *err, size_t errlen);
/* Takes NULL. */
void metrics_free(struct metrics *m);
/* The port it listens on (for ":0"). */
int metrics_port(const struct metrics *m);

#endif
