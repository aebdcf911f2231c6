#include "metrics.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "child.h"
#include "nvml.h"
#include "orch.h"
#include "spot/log.h"
#include "spot/notice.h"
#include "spot/parse.h"
#include "spot/proc.h"

#define LABELED_MAX 64            /* label sets kept per family; more go to "other" */
#define LABEL_MAX 32
#define TREE_MAX 4096             /* processes of the command's tree read */
#define GPU_MAX 16
#define GPU_SAMPLE_MS 1000

/* Histogram buckets for the phases, in seconds: from a small checkpoint on
 * a fast disk to a big one against a 2-minute notice. */
static const double bounds[] = { 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300 };
static const char *const le_text[] = { "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30",
                                       "60", "120", "300" };
#define N_BOUNDS (sizeof(bounds) / sizeof(bounds[0]))

enum phase { PH_SAVE, PH_HASH, PH_UPLOAD, PH_COMMIT, PH_RESTORE, PH__COUNT };
static const char *const phase_names[PH__COUNT] = { "save", "hash_compress", "upload", "commit",
                                                    "restore" };

struct hist {
    uint64_t bucket[N_BOUNDS];    /* not cumulative: observations in (bounds[i-1], bounds[i]] */
    uint64_t count;
    double sum;
};

/* A counter with up to three labels. */
struct labeled {
    char v[3][LABEL_MAX];
    uint64_t n;
};

struct family {
    struct labeled s[LABELED_MAX];
    size_t n;
};

struct pstat {
    double cpu_s;                 /* utime + stime (+ cutime + cstime when asked) */
    uint64_t rss;                 /* bytes */
};

struct metrics {
    struct metrics_opts o;
    struct evhttp *http;
    struct evconnlistener *listener;
    int port;

    struct family notices;        /* source, kind */
    struct family checkpoints;    /* trigger, method, result */
    uint64_t bytes_read, bytes_sent, bytes_skipped, bytes_stored;
    uint64_t restarts;
    struct hist phase[PH__COUNT];
    bool has_margin;
    double margin_s;              /* of the last checkpoint with a deadline */
    double last_commit_ts;
    uint64_t committed_gen;
    /* The checkpoint under way, from its checkpoint_begin. */
    uint64_t gen;
    char trigger[LABEL_MAX], method[LABEL_MAX];

    struct nvml *nvml;
    struct event *gpu_timer;
    struct nvml_gpu gpus[GPU_MAX];
    int n_gpus;                   /* < 0: the last sample failed */
    int64_t idle_since[GPU_MAX];  /* ms; 0: busy */
    /* The command's tree as last read. */
    struct pstat tree;
    pid_t tree_pid;
    int64_t tree_ms;
};

/* ---- from the events ---------------------------------------------------------- */

static void count(struct family *f, const char *a, const char *b, const char *c)
{
    const char *v[3] = { a ? a : "", b ? b : "", c ? c : "" };
    struct labeled *s;

    for (size_t i = 0; i < f->n; i++) {
        s = &f->s[i];
        if (!strcmp(s->v[0], v[0]) && !strcmp(s->v[1], v[1]) && !strcmp(s->v[2], v[2])) {
            s->n++;
            return;
        }
    }
    if (f->n == LABELED_MAX) {
        /* The last slot takes whatever does not fit, so the series stay
         * bounded whatever the events say. */
        s = &f->s[LABELED_MAX - 1];
        snprintf(s->v[0], LABEL_MAX, "other");
        snprintf(s->v[1], LABEL_MAX, "other");
        snprintf(s->v[2], LABEL_MAX, "other");
        s->n++;
        return;
    }
    s = &f->s[f->n++];
    for (int i = 0; i < 3; i++)
        snprintf(s->v[i], LABEL_MAX, "%s", v[i]);
    s->n = 1;
}

static void observe(struct hist *h, double secs)
{
    size_t i = 0;

    if (secs < 0)
        secs = 0;
    while (i < N_BOUNDS && secs > bounds[i])
        i++;
    if (i < N_BOUNDS)
        h->bucket[i]++;
    h->count++;
    h->sum += secs;
}

static void observe_ms(struct metrics *m, enum phase p, const cJSON *rec, const char *key)
{
    double ms;

    if (log_rec_num(rec, key, &ms))
        observe(&m->phase[p], ms / 1000.0);
}

/* "notice: aws terminate" -> "notice": a checkpoint's trigger, from a
 * small set so that the series stay few. */
static void trigger_of(const char *reason, char *out)
{
    static const char *const known[] = { "notice", "periodic", "request", "manual", "dir",
                                         "grow", "world" };
    size_t n = reason ? strcspn(reason, ":") : 0;

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (n == strlen(known[i]) && !strncmp(reason, known[i], n)) {
            snprintf(out, LABEL_MAX, "%s", known[i]);
            return;
        }
    snprintf(out, LABEL_MAX, "%s", reason ? "other" : "unknown");
}

static void on_event(void *arg, const cJSON *rec, enum log_level level)
{
    struct metrics *m = arg;
    const char *ev = log_rec_str(rec, "event", NULL);
    double v;

    if (!ev)
        return;
    if (!strcmp(ev, "notice")) {
        count(&m->notices, log_rec_str(rec, "source", NULL), log_rec_str(rec, "kind", NULL), NULL);
    } else if (!strcmp(ev, "checkpoint_begin")) {
        m->gen = log_rec_num(rec, "gen", &v) ? (uint64_t)v : 0;
        trigger_of(log_rec_str(rec, "reason", NULL), m->trigger);
        snprintf(m->method, sizeof(m->method), "%s", log_rec_str(rec, "method", NULL) ? log_rec_str(rec, "method", NULL)
                                                                         : "unknown");
    } else if (!strcmp(ev, "upload_done")) {
        double hash = 0, encode = 0;

        if (log_rec_num(rec, "bytes", &v))
            m->bytes_read += (uint64_t)v;
        if (log_rec_num(rec, "bytes_sent", &v))
            m->bytes_sent += (uint64_t)v;
        if (log_rec_num(rec, "bytes_skipped", &v))
            m->bytes_skipped += (uint64_t)v;
        if (log_rec_num(rec, "hash_ms", &hash) | log_rec_num(rec, "encode_ms", &encode))
            observe(&m->phase[PH_HASH], (hash + encode) / 1000.0);
    } else if (!strcmp(ev, "commit")) {
        char trigger[LABEL_MAX];

        /* A world's member logs the coordinator's commit with no phases of
         * its own. */
        trigger_of(log_rec_str(rec, "reason", NULL), trigger);
        count(&m->checkpoints, trigger, m->method[0] ? m->method : "unknown", "committed");
        observe_ms(m, PH_SAVE, rec, "save_ms");
        observe_ms(m, PH_UPLOAD, rec, "upload_ms");
        observe_ms(m, PH_COMMIT, rec, "commit_ms");
        if (log_rec_num(rec, "bytes", &v))
            m->bytes_stored += (uint64_t)v;
        if (!strcmp(trigger, "notice") && log_rec_num(rec, "margin_ms", &v)) {
            m->has_margin = true;
            m->margin_s = v / 1000.0;
        }
        if (log_rec_num(rec, "gen", &v))
            m->committed_gen = (uint64_t)v;
        {
            struct timeval tv;

            gettimeofday(&tv, NULL);
            m->last_commit_ts = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
        }
    } else if (!strcmp(ev, "checkpoint_failed")) {
        count(&m->checkpoints, m->trigger[0] ? m->trigger : "unknown",
              m->method[0] ? m->method : "unknown", "failed");
    } else if (!strcmp(ev, "restart")) {
        m->restarts++;
    } else if (!strcmp(ev, "resume")) {
        observe_ms(m, PH_RESTORE, rec, "ms");
        if (log_rec_num(rec, "gen", &v))
            m->committed_gen = (uint64_t)v;
    }
}

/* ---- /proc ------------------------------------------------------------------------- */

/* /proc/PID/stat: fields after the command's ")" */
static int read_stat(pid_t pid, bool children, struct pstat *ps)
{
    static long tck, page;
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    long long cut, cst, rss;
    ssize_t n;
    int fd;

    if (!tck) {
        tck = sysconf(_SC_CLK_TCK);
        page = sysconf(_SC_PAGESIZE);
    }
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -errno;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -EIO;
    buf[n] = '\0';
    if (!(p = strrchr(buf, ')')))
        return -EIO;
    /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime stime cutime cstime priority nice threads itrealvalue starttime
     * vsize rss */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld "
                      "%*d %*d %*d %*d %*u %*u %lld", &ut, &st, &cut, &cst, &rss) != 5)
        return -EIO;
    ps->cpu_s += (double)(ut + st + (children ? (unsigned long long)(cut + cst) : 0)) /
                 (double)tck;
    ps->rss += rss > 0 ? (uint64_t)rss * (uint64_t)page : 0;
    return 0;
}

/* pid and everything below it. */
static void read_tree(pid_t pid, struct pstat *ps)
{
    pid_t pids[TREE_MAX];
    size_t n = proc_tree(pid, pids, TREE_MAX);

    for (size_t i = 0; i < n; i++)
        read_stat(pids[i], i == 0, ps);
}

/* ---- GPUs ------------------------------------------------------------------------ */

static void on_gpu_timer(evutil_socket_t fd, short what, void *arg)
{
    struct metrics *m = arg;
    int64_t now = notice_mono_ms();
    int n = nvml_sample(m->nvml, m->gpus, GPU_MAX);

    m->n_gpus = n;
    for (int i = 0; i < n; i++) {
        bool idle = m->gpus[i].has_util &&
                    m->gpus[i].util_ratio * 100.0 < (double)m->o.gpu_idle_threshold;

        if (!idle)
            m->idle_since[i] = 0;
        else if (!m->idle_since[i])
            m->idle_since[i] = now;
    }
}

/* ---- the exposition ------------------------------------------------------------- */

/* v as the text format wants it, cheaply: most values are whole numbers
 * (counts, bytes), written without the floating-point printf. */
static const char *num(double v, char buf[40])
{
    if (v == (double)(int64_t)v && v > -9007199254740992.0 && v < 9007199254740992.0) {
        uint64_t u = (uint64_t)(v < 0 ? -v : v);
        char *p = buf + 39;

        *p = '\0';
        do
            *--p = (char)('0' + u % 10);
        while (u /= 10);
        if (v < 0)
            *--p = '-';
        return p;
    }
    snprintf(buf, 40, "%.10g", v);
    return buf;
}

/* A label value, escaped as the text format wants (\\, \", \n). */
static void add_label(struct evbuffer *b, const char *name, const char *v, bool first)
{
    char out[2 * 128 + 1];
    size_t n = 0;

    evbuffer_add_printf(b, "%s%s=\"", first ? "" : ",", name);
    for (; *v && n + 2 < sizeof(out); v++) {
        if (*v == '\\' || *v == '"')
            out[n++] = '\\', out[n++] = *v;
        else if (*v == '\n')
            out[n++] = '\\', out[n++] = 'n';
        else
            out[n++] = *v;
    }
    out[n++] = '"';
    evbuffer_add(b, out, n);
}

static void head(struct evbuffer *b, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(struct evbuffer *b, const char *name, const char *type, const char *help,
                double v)
{
    char buf[40];

    head(b, name, type, help);
    evbuffer_add_printf(b, "%s %s\n", name, num(v, buf));
}

static void family(struct evbuffer *b, const char *name, const char *help,
                   const struct family *f, const char *const labels[3])
{
    head(b, name, "counter", help);
    for (size_t i = 0; i < f->n; i++) {
        evbuffer_add_printf(b, "%s{", name);
        for (int k = 0; k < 3 && labels[k]; k++)
            add_label(b, labels[k], f->s[i].v[k], k == 0);
        evbuffer_add_printf(b, "} %" PRIu64 "\n", f->s[i].n);
    }
}

static void gpu_gauge(struct evbuffer *b, const struct metrics *m, const char *name,
                      const char *help, int which, int64_t now)
{
    bool any = false;

    for (int i = 0; i < m->n_gpus; i++) {
        const struct nvml_gpu *g = &m->gpus[i];
        char idx[16], buf[40];
        double v;

        switch (which) {
        case 0: if (!g->has_util) continue; v = g->util_ratio; break;
        case 1: if (!g->has_mem) continue; v = (double)g->mem_used; break;
        case 2: if (!g->has_mem) continue; v = (double)g->mem_total; break;
        case 3: if (!g->has_temp) continue; v = g->temp_c; break;
        case 4: if (!g->has_power) continue; v = g->power_w; break;
        default:
            if (!g->has_util)
                continue;
            v = m->idle_since[i] ? (double)(now - m->idle_since[i]) / 1000.0 : 0;
        }
        if (!any)
            head(b, name, "gauge", help);
        any = true;
        snprintf(idx, sizeof(idx), "%u", g->index);
        evbuffer_add_printf(b, "%s{", name);
        add_label(b, "gpu", idx, true);
        add_label(b, "uuid", g->uuid, false);
        add_label(b, "name", g->name, false);
        evbuffer_add_printf(b, "} %s\n", num(v, buf));
    }
}

/* A far terminating notice's plan: training goes on until its checkpoint. */
static void planned(struct metrics *m, struct evbuffer *b)
{
    int64_t at, deadline;

    if (!orch_planned(m->o.orch, &at, &deadline))
        return;
    one(b, "spotd_planned_checkpoint_timestamp_seconds", "gauge", "When the checkpoint of a "
        "far terminating notice (a deadline beyond 15 min) begins, in seconds since the epoch.",
        (double)at / 1000.0);
    one(b, "spotd_planned_deadline_timestamp_seconds", "gauge", "The deadline of that notice, "
        "in seconds since the epoch.", (double)deadline / 1000.0);
}

static void expose(struct metrics *m, struct evbuffer *b)
{
    static const char *const notice_labels[3] = { "source", "kind", NULL };
    static const char *const ckpt_labels[3] = { "trigger", "method", "result" };
    struct pstat self = { 0, 0 }, cmd = { 0, 0 };
    pid_t pid = child_pid(m->o.child);
    int64_t now = notice_mono_ms();

    head(b, "spotd_build_info", "gauge", "spotd's version, as a label; always 1.");
    evbuffer_add_printf(b, "spotd_build_info{version=\"%s\"} 1\n", SPOT_VERSION);
    family(b, "spotd_notices_total", "Interruption notices seen, by source and kind.",
           &m->notices, notice_labels);
    family(b, "spotd_checkpoints_total", "Checkpoints ended, by trigger, method and result "
           "(committed or failed).", &m->checkpoints, ckpt_labels);
    one(b, "spotd_bytes_read_total", "counter", "Bytes of checkpoint files read for upload.",
        (double)m->bytes_read);
    one(b, "spotd_bytes_sent_total", "counter", "Bytes sent to the store (chunks and "
        "manifests, compressed).", (double)m->bytes_sent);
    one(b, "spotd_bytes_skipped_total", "counter", "Bytes of checkpoint files not sent: "
        "the store had their chunks (deduplication).", (double)m->bytes_skipped);
    one(b, "spotd_bytes_stored_total", "counter", "Bytes of checkpoint files in committed "
        "generations.", (double)m->bytes_stored);
    head(b, "spotd_checkpoint_phase_seconds", "histogram", "Time of each checkpoint phase: "
         "save (the trainer or CRIU), hash_compress (worker CPU), upload, commit, and "
         "restore at start.");
    for (int p = 0; p < PH__COUNT; p++) {
        const struct hist *h = &m->phase[p];
        uint64_t cum = 0;
        char buf[40];

        for (size_t i = 0; i < N_BOUNDS; i++) {
            cum += h->bucket[i];
            evbuffer_add_printf(b, "spotd_checkpoint_phase_seconds_bucket{phase=\"%s\",le=\"%s\"} %"
                                PRIu64 "\n", phase_names[p], le_text[i], cum);
        }
        evbuffer_add_printf(b, "spotd_checkpoint_phase_seconds_bucket{phase=\"%s\",le=\"+Inf\"} %"
                            PRIu64 "\n", phase_names[p], h->count);
        evbuffer_add_printf(b, "spotd_checkpoint_phase_seconds_sum{phase=\"%s\"} %s\n",
                            phase_names[p], num(h->sum, buf));
        evbuffer_add_printf(b, "spotd_checkpoint_phase_seconds_count{phase=\"%s\"} %" PRIu64 "\n",
                            phase_names[p], h->count);
    }
    if (m->has_margin)
        one(b, "spotd_notice_margin_seconds", "gauge", "Time left before the deadline when the "
            "last notice's checkpoint committed; negative when it was missed.", m->margin_s);
    if (m->last_commit_ts > 0)
        one(b, "spotd_last_commit_timestamp_seconds", "gauge", "When the last generation was "
            "committed, in seconds since the epoch.", m->last_commit_ts);
    one(b, "spotd_command_restarts_total", "counter", "Restarts of the command.",
        (double)m->restarts);
    one(b, "spotd_events_dropped_total", "counter", "Event records not written to the event "
        "log (--events), its disk full: each is written whole or not at all.",
        (double)log_events_dropped());
    if (m->o.orch) {
        cJSON *st = cJSON_CreateObject();
        double v;

        if (st) {
            orch_status(m->o.orch, st);
            if (log_rec_num(st, "committed_gen", &v) && v > (double)m->committed_gen)
                m->committed_gen = (uint64_t)v;
            if (log_rec_num(st, "step", &v) && v >= 0)
                one(b, "spotd_trainer_step", "gauge", "The step the trainers last reported "
                    "through libckpt.", v);
            one(b, "spotd_trainer_steps_per_second", "gauge", "Training steps per second, "
                "from the trainers' reports.", log_rec_num(st, "steps_per_s", &v) ? v : 0);
            if (log_rec_num(st, "alive", &v))
                one(b, "spotd_peers_alive", "gauge", "Nodes of the world that are up, this one "
                    "included.", v);
            if (log_rec_num(st, "coordinator", &v))
                one(b, "spotd_coordinator_rank", "gauge", "The rank of the world's coordinator "
                    "(-1: none).", v);
            cJSON_Delete(st);
        }
        one(b, "spotd_committed_generation", "gauge", "The newest committed generation this "
            "node knows (0: none).", (double)m->committed_gen);
        planned(m, b);
    }
    if (pid > 0) {
        /* The tree is walked at most once a second, however often scraped. */
        if (pid != m->tree_pid || now - m->tree_ms >= 1000) {
            read_tree(pid, &cmd);
            m->tree = cmd;
            m->tree_pid = pid;
            m->tree_ms = now;
        }
        cmd = m->tree;
        one(b, "spotd_command_cpu_seconds_total", "counter", "CPU time of the command's "
            "process tree (user and system).", cmd.cpu_s);
        one(b, "spotd_command_resident_memory_bytes", "gauge", "Resident memory of the "
            "command's process tree.", (double)cmd.rss);
    }
    read_stat(getpid(), false, &self);
    one(b, "process_cpu_seconds_total", "counter", "CPU time of spotd itself.", self.cpu_s);
    one(b, "process_resident_memory_bytes", "gauge", "Resident memory of spotd itself.",
        (double)self.rss);
    gpu_gauge(b, m, "spotd_gpu_utilization_ratio", "GPU utilization over the driver's last "
              "sample period, 0 to 1 (NVML).", 0, now);
    gpu_gauge(b, m, "spotd_gpu_memory_used_bytes", "GPU memory in use.", 1, now);
    gpu_gauge(b, m, "spotd_gpu_memory_total_bytes", "GPU memory in all.", 2, now);
    gpu_gauge(b, m, "spotd_gpu_temperature_celsius", "GPU core temperature.", 3, now);
    gpu_gauge(b, m, "spotd_gpu_power_watts", "GPU power draw.", 4, now);
    gpu_gauge(b, m, "spotd_gpu_idle_seconds", "How long the GPU's utilization has stayed "
              "under gpu_idle_threshold (0: busy now).", 5, now);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct metrics *m = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    struct evbuffer *b;

    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET &&
        evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        evhttp_send_error(req, 405, "metrics are read with GET");
        return;
    }
    if (!path || strcmp(path, "/metrics") != 0) {
        evhttp_send_error(req, HTTP_NOTFOUND, "spotd serves /metrics only");
        return;
    }
    if (!(b = evbuffer_new())) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    expose(m, b);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

/* ---- the API ---------------------------------------------------------------------- */

struct metrics *metrics_new(const struct metrics_opts *o, char *err, size_t errlen)
{
    struct metrics *m = calloc(1, sizeof(*m));
    struct sockaddr_storage ss;
    char addr[128], why[256];
    int len = sizeof(ss);

    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->o = *o;
    /* ":PORT" is 127.0.0.1:PORT: metrics are for the node unless asked. */
    snprintf(addr, sizeof(addr), "%s%s", o->addr[0] == ':' ? "127.0.0.1" : "", o->addr);
    if (parse_sockaddr(addr, &ss, &len) < 0) {
        snprintf(err, errlen, "invalid metrics '%s': expected ADDR:PORT or :PORT, numeric "
                 "(127.0.0.1:9464, [::1]:9464, :9464)", o->addr);
        goto fail;
    }
    m->listener = evconnlistener_new_bind(o->base, NULL, NULL,
                                          LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
                                              LEV_OPT_CLOSE_ON_EXEC,
                                          64, (struct sockaddr *)&ss, len);
    if (!m->listener) {
        snprintf(err, errlen, "cannot listen on '%s' for metrics: %s; check --metrics (is the "
                 "port in use?)", o->addr, strerror(errno));
        goto fail;
    }
    if (!(m->http = evhttp_new(o->base)) || !evhttp_bind_listener(m->http, m->listener)) {
        snprintf(err, errlen, "cannot serve metrics: out of memory");
        goto fail;
    }
    {
        struct sockaddr_storage bound;
        socklen_t bl = sizeof(bound);

        if (getsockname(evconnlistener_get_fd(m->listener), (struct sockaddr *)&bound, &bl) == 0)
            m->port = ntohs(bound.ss_family == AF_INET6
                                ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                : ((struct sockaddr_in *)&bound)->sin_port);
    }
    evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE);
    evhttp_set_max_headers_size(m->http, 16384);
    evhttp_set_max_body_size(m->http, 4096);
    evhttp_set_timeout(m->http, 10);
    evhttp_set_gencb(m->http, on_request, m);
    if (log_observe(on_event, m) < 0) {
        snprintf(err, errlen, "cannot serve metrics: no event observer left");
        goto fail;
    }
    /* GPUs, when NVML is there; none is no error. */
    if ((m->nvml = nvml_open(why, sizeof(why)))) {
        struct timeval tv = { GPU_SAMPLE_MS / 1000, (GPU_SAMPLE_MS % 1000) * 1000 };

        if ((m->gpu_timer = event_new(o->base, -1, EV_PERSIST, on_gpu_timer, m)))
            event_add(m->gpu_timer, &tv);
        on_gpu_timer(-1, 0, m);
    }
    log_msg(LOGL_INFO, "metrics at http://%s/metrics (port %d)%s", addr, m->port,
            m->nvml ? "" : "; no GPU metrics (no NVML)");
    return m;
fail:
    metrics_free(m);
    return NULL;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    log_unobserve(on_event, m);
    if (m->gpu_timer)
        event_free(m->gpu_timer);
    nvml_close(m->nvml);
    if (m->http)
        evhttp_free(m->http); /* frees the bound listener too */
    else if (m->listener)
        evconnlistener_free(m->listener);
    free(m);
}

int metrics_port(const struct metrics *m)
{
    return m->port;
}
