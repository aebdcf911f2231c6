/* webhook: POST a JSON document to each --webhook URL at notices, commits,
 * missed deadlines and resumes.
 *
 * DESIGN.  The documents come from the event records: log_observe() hands
 * every record to on_event(), which keeps the few that make a webhook,
 * builds the body, queues it and wakes the loop (kick); no request starts
 * inside log_event(), and nothing here waits for a network.  Every URL has
 * its own FIFO queue with one request in flight, so a receiver gets its
 * deliveries in the order of their events: a failed delivery is retried,
 * with backoff, before the next one goes (order before latency), at most
 * WEBHOOK_TRIES times.  A queue holds WEBHOOK_QUEUE_MAX deliveries; when
 * it is full the oldest waiting one goes.  Whatever is given up is told
 * once, as a webhook_dropped event, and failures in between by a message
 * at most every WEBHOOK_TELL_EVERY_MS.
 *
 * A URL is a secret (Slack's carry a token in their path): no message
 * shows more of it than its scheme and host (target.where, target.label).
 *
 * A missed deadline is told once, for the first terminating notice, by the
 * first of these records that follows it before a checkpoint commits in
 * time:
 *   plan               fits false and kept_gen set: no checkpoint is tried,
 *                      the work since generation kept_gen is lost;
 *   checkpoint_failed  the notice's checkpoint is lost;
 *   commit             margin_ms < 0: committed after the checkpoint's
 *                      deadline, which is the notice's less the time the
 *                      stop needs (the instance may be gone already);
 *   kill               the command did not stop in time and got SIGKILL (a
 *                      kill with a reason, a launcher outliving its
 *                      workers, is not about a deadline).
 * A commit in time settles the notice: a kill after it loses nothing. */
#include "webhook.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "spot/http.h"
#include "spot/log.h"

#define WEBHOOK_URLS_MAX 16
#define WEBHOOK_QUEUE_MAX 256
#define WEBHOOK_TRIES 8
#define WEBHOOK_BACKOFF_MIN_MS 1000
#define WEBHOOK_BACKOFF_MAX_MS 60000
#define WEBHOOK_TELL_EVERY_MS 30000
#define WEBHOOK_TEMPLATE_MAX (64 * 1024)
#define WEBHOOK_URLS_FILE_MAX (64 * 1024)
/* A template that repeats {text} thousands of times could make more. */
#define WEBHOOK_BODY_MAX (1024 * 1024)
/* Answers are not read; a longer one is cut, and still a success. */
#define WEBHOOK_ANSWER_MAX 4096
#define TEXT_MAX 768

enum kind { K_NOTICE, K_COMMIT, K_DEADLINE_MISSED, K_RESUME };

static const char *const kind_name[] = { "notice", "commit", "deadline_missed", "resume" };

/* The template's placeholders, "{event}" and so on. */
enum ph { PH_EVENT, PH_JOB, PH_HOST, PH_TEXT, PH_TS, PH_GEN, PH_STEP, PH_KIND, PH_SOURCE,
          PH_MARGIN, PH__COUNT };

static const char *const ph_name[PH__COUNT] = { "event", "job",  "host",   "text",     "ts",
                                                "gen",   "step", "kind", "source", "margin_ms" };

struct delivery {
    char *body; /* owned */
    size_t len;
    enum kind kind;
};

struct target {
    struct webhook *w;
    const char *url;                      /* in w->urls; never in a message */
    char where[160];                      /* scheme://host[:port] */
    char label[192];                      /* where, and "(URL 2 of 3)" when several */
    struct delivery q[WEBHOOK_QUEUE_MAX]; /* a ring: q[head] goes next */
    unsigned head, count;
    struct http_req *req;                 /* q[head] in flight, or NULL */
    struct event *retry;                  /* the backoff before q[head]'s next try */
    unsigned tries;                       /* q[head]'s so far */
    unsigned full_drops;                  /* dropped for a full queue, not yet told */
    bool told;                            /* a failure message went out, at told_ms */
    int64_t told_ms;
    unsigned untold;                      /* failures since */
    char last_error[96];                  /* the last failure since a success, or "" */
};

/* The first terminating notice: none yet, waiting for its checkpoint, or
 * settled (committed in time, or its missed deadline told). */
enum watch { W_NONE, W_NOTICE, W_SETTLED };

struct webhook {
    struct event_base *base;
    struct http *http;
    char *urls;                /* the option's value and the file's, split in place */
    size_t urls_split;         /* where the file's begin in urls; 0: no file */
    struct target *t;
    size_t n;
    struct event *kick;
    char *tmpl;                /* NULL: spotd's own document */
    size_t tmpl_len;
    long timeout_ms;
    char *job;
    char host[256];
    long rank;
    enum watch watch;
    char notice_kind[32], notice_source[32];
    long long newest_gen, newest_step; /* the newest generation seen; -1: none */
};

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- records ------------------------------------------------------------ */

static const cJSON *field(const cJSON *rec, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(rec, key);
}

/* ---- the body ----------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
    bool bad; /* out of memory, or over WEBHOOK_BODY_MAX */
};

static void put(struct buf *b, const char *s, size_t n)
{
    if (b->bad)
        return;
    if (b->len + n + 1 > WEBHOOK_BODY_MAX) {
        b->bad = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        char *p;

        while (cap < b->len + n + 1)
            cap *= 2;
        if (!(p = realloc(b->p, cap))) {
            b->bad = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* s as the inside of a JSON string. */
static void put_escaped(struct buf *b, const char *s)
{
    char e[8];

    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            put(b, e, 2);
        } else if (c < 0x20) {
            snprintf(e, sizeof(e), "\\u%04x", c);
            put(b, e, 6);
        } else {
            put(b, s, 1);
        }
    }
}

/* The template with each placeholder replaced by its value (v[i], NULL
 * for empty), JSON-escaped.  Other braces stay.  Returns the text
 * (malloc'ed) or NULL when out of memory or over WEBHOOK_BODY_MAX. */
static char *fill(const char *tmpl, size_t len, const char *const v[PH__COUNT], size_t *ret_len)
{
    const char *p = tmpl, *end = tmpl + len;
    struct buf b = { 0 };

    put(&b, "", 0);
    while (p < end) {
        const char *brace = memchr(p, '{', (size_t)(end - p));
        size_t n = 0;
        int i;

        if (!brace) {
            put(&b, p, (size_t)(end - p));
            break;
        }
        put(&b, p, (size_t)(brace - p));
        for (i = 0; i < PH__COUNT; i++) {
            n = strlen(ph_name[i]);
            if ((size_t)(end - brace) >= n + 2 && memcmp(brace + 1, ph_name[i], n) == 0 &&
                brace[n + 1] == '}')
                break;
        }
        if (i == PH__COUNT) {
            put(&b, brace, 1);
            p = brace + 1;
            continue;
        }
        put_escaped(&b, v[i] ? v[i] : "");
        p = brace + n + 2;
    }
    if (b.bad) {
        free(b.p);
        return NULL;
    }
    *ret_len = b.len;
    return b.p;
}

/* A seconds figure for a sentence: "9.8 s". */
static const char *secs(double ms, char *buf, size_t size)
{
    snprintf(buf, size, "%.1f s", ms / 1000.0);
    return buf;
}

static const char *size_words(double bytes, char *buf, size_t size)
{
    if (bytes >= 1024.0 * 1024.0 * 1024.0)
        snprintf(buf, size, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    else if (bytes >= 1024.0 * 1024.0)
        snprintf(buf, size, "%.1f MiB", bytes / (1024.0 * 1024.0));
    else if (bytes >= 1024.0)
        snprintf(buf, size, "%.1f KiB", bytes / 1024.0);
    else
        snprintf(buf, size, "%.0f bytes", bytes);
    return buf;
}

/* "; generation 4 (step 1200) stays the newest", or "" when none is known. */
static const char *newest_words(const struct webhook *w, char *buf, size_t size)
{
    buf[0] = '\0';
    if (w->newest_gen >= 0)
        snprintf(buf, size, "; generation %lld (step %lld) stays the newest", w->newest_gen,
                 w->newest_step);
    return buf;
}

static void notice_text(const struct webhook *w, const cJSON *rec, char *text, size_t size)
{
    const char *deadline = log_rec_str(rec, "deadline", "?"), *kind = log_rec_str(rec, "kind", "?"),
               *source = log_rec_str(rec, "source", "?");
    bool terminating = cJSON_IsTrue(field(rec, "terminating"));
    char when[96], s[32];
    double in;

    if (!log_rec_num(rec, "deadline_in_ms", &in))
        snprintf(when, sizeof(when), "at %s", deadline);
    else if (in >= 0)
        snprintf(when, sizeof(when), "in %s (%s)", secs(in, s, sizeof(s)), deadline);
    else
        snprintf(when, sizeof(when), "%s ago (%s)", secs(-in, s, sizeof(s)), deadline);
    /* "drill notice", "terminate notice from aws", "drill: terminate notice from signal" */
    snprintf(text, size, "%s%s notice%s%s%s%s: deadline %s; %s",
             cJSON_IsTrue(field(rec, "drill")) && strcmp(source, "drill") != 0 ? "drill: " : "",
             kind, strcmp(kind, source) != 0 ? " from " : "",
             strcmp(kind, source) != 0 ? source : "", w->job ? " for job " : "",
             w->job ? w->job : "", when,
             !terminating ? "advisory, the command runs on"
             : w->job     ? "spotd checkpoints the job and stops the command"
                          : "spotd stops the command");
}

static void commit_text(const struct webhook *w, const cJSON *rec, char *text, size_t size)
{
    double gen = 0, step = 0, bytes = 0, ms = 0, margin;
    char margin_words[64] = "", sz[32], s[32];

    log_rec_num(rec, "gen", &gen);
    log_rec_num(rec, "step", &step);
    log_rec_num(rec, "bytes", &bytes);
    log_rec_num(rec, "total_ms", &ms);
    if (log_rec_num(rec, "margin_ms", &margin))
        snprintf(margin_words, sizeof(margin_words), ", %s %s its deadline",
                 secs(margin < 0 ? -margin : margin, s, sizeof(s)),
                 margin < 0 ? "after" : "before");
    snprintf(text, size, "generation %.0f of job %s committed at step %.0f (%s, %s, %.0f ms%s)",
             gen, w->job ? w->job : "?", step, log_rec_str(rec, "reason", "?"),
             size_words(bytes, sz, sizeof(sz)), ms, margin_words);
}

/* rec is the record that showed the miss (see the top of the file). */
static void missed_text(const struct webhook *w, const cJSON *rec, char *text, size_t size)
{
    const char *ev = log_rec_str(rec, "event", ""), *job = w->job ? w->job : "?";
    double a = 0, b = 0, lost;
    char newest[128], s1[32], s2[32], more[64] = "";

    newest_words(w, newest, sizeof(newest));
    if (strcmp(ev, "plan") == 0) {
        log_rec_num(rec, "predicted_ms", &a);
        log_rec_num(rec, "left_ms", &b);
        if (log_rec_num(rec, "steps_lost", &lost))
            snprintf(more, sizeof(more), ", about %.0f steps lost", lost);
        snprintf(text, size, "job %s misses the notice's deadline: a checkpoint takes about %s, "
                 "only %s are left%s%s", job, secs(a, s1, sizeof(s1)), secs(b, s2, sizeof(s2)),
                 newest, more);
    } else if (strcmp(ev, "checkpoint_failed") == 0) {
        log_rec_num(rec, "gen", &a);
        snprintf(text, size, "job %s missed the notice's deadline: the checkpoint of generation "
                 "%.0f failed while %s (%s)%s", job, a, log_rec_str(rec, "phase", "?"),
                 log_rec_str(rec, "error", "?"), newest);
    } else if (strcmp(ev, "commit") == 0) {
        log_rec_num(rec, "gen", &a);
        log_rec_num(rec, "margin_ms", &b);
        snprintf(text, size, "job %s missed the notice's deadline: generation %.0f was committed "
                 "%s after its deadline", job, a, secs(-b, s1, sizeof(s1)));
    } else {
        log_rec_num(rec, "pgid", &a);
        snprintf(text, size, "the command%s%s did not stop before the notice's deadline and was "
                 "killed (SIGKILL to process group %.0f)%s", w->job ? " of job " : "",
                 w->job ? w->job : "", a, w->job ? "; no checkpoint was committed for it" : "");
    }
}

static void describe(const struct webhook *w, enum kind k, const cJSON *rec, char *text,
                     size_t size)
{
    double gen = 0, step = 0;

    switch (k) {
    case K_NOTICE:
        notice_text(w, rec, text, size);
        break;
    case K_COMMIT:
        commit_text(w, rec, text, size);
        break;
    case K_DEADLINE_MISSED:
        missed_text(w, rec, text, size);
        break;
    case K_RESUME:
        log_rec_num(rec, "gen", &gen);
        log_rec_num(rec, "step", &step);
        snprintf(text, size, "job %s resumed from generation %.0f at step %.0f",
                 w->job ? w->job : "?", gen, step);
        break;
    }
    /* One line, whatever an error message held. */
    for (char *p = text; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
}

static char *document(const struct webhook *w, enum kind k, const cJSON *rec, const char *text,
                      size_t *ret_len)
{
    cJSON *d = cJSON_CreateObject(), *record;
    char *s;

    if (!d)
        return NULL;
    cJSON_AddNumberToObject(d, "v", 1);
    cJSON_AddStringToObject(d, "event", kind_name[k]);
    if (w->job)
        cJSON_AddStringToObject(d, "job", w->job);
    else
        cJSON_AddNullToObject(d, "job");
    cJSON_AddStringToObject(d, "node", w->host);
    if (w->rank >= 0)
        cJSON_AddNumberToObject(d, "rank", (double)w->rank);
    cJSON_AddStringToObject(d, "ts", log_rec_str(rec, "ts", ""));
    cJSON_AddStringToObject(d, "text", text);
    /* The record as the event log has it: stderr's additions go. */
    record = cJSON_Duplicate(rec, true);
    cJSON_DeleteItemFromObjectCaseSensitive(record, "msg");
    cJSON_DeleteItemFromObjectCaseSensitive(record, "level");
    cJSON_AddItemToObject(d, "record", record);
    s = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
    if (s)
        *ret_len = strlen(s);
    return s;
}

static void whole(double v, bool have, char *buf, size_t size)
{
    buf[0] = '\0';
    if (have)
        snprintf(buf, size, "%lld", (long long)v);
}

static char *from_template(const struct webhook *w, enum kind k, const cJSON *rec,
                           const char *text, size_t *ret_len)
{
    const char *v[PH__COUNT];
    char gen[32], step[32], margin[32];
    bool watching = w->watch != W_NONE, have;
    double d = 0;

    /* A missed deadline without a commit: the generation that stays. */
    if (k == K_DEADLINE_MISSED && strcmp(log_rec_str(rec, "event", ""), "commit") != 0) {
        whole((double)w->newest_gen, w->newest_gen >= 0, gen, sizeof(gen));
        whole((double)w->newest_step, w->newest_gen >= 0, step, sizeof(step));
    } else {
        have = log_rec_num(rec, "gen", &d);
        whole(d, have, gen, sizeof(gen));
        have = log_rec_num(rec, "step", &d);
        whole(d, have, step, sizeof(step));
    }
    have = log_rec_num(rec, "margin_ms", &d);
    whole(d, have, margin, sizeof(margin));
    v[PH_EVENT] = kind_name[k];
    v[PH_JOB] = w->job;
    v[PH_HOST] = w->host;
    v[PH_TEXT] = text;
    v[PH_TS] = log_rec_str(rec, "ts", NULL);
    v[PH_GEN] = gen;
    v[PH_STEP] = step;
    v[PH_MARGIN] = margin;
    v[PH_KIND] = log_rec_str(rec, "kind", watching ? w->notice_kind : NULL);
    v[PH_SOURCE] = log_rec_str(rec, "source", watching ? w->notice_source : NULL);
    return fill(w->tmpl, w->tmpl_len, v, ret_len);
}

/* ---- delivery ----------------------------------------------------------- */

static void pop(struct target *t)
{
    free(t->q[t->head].body);
    t->q[t->head].body = NULL;
    t->head = (t->head + 1) % WEBHOOK_QUEUE_MAX;
    t->count--;
    t->tries = 0;
}

/* A full queue: the oldest delivery that is not in flight goes. */
static void drop_oldest(struct target *t)
{
    unsigned next = (t->head + 1) % WEBHOOK_QUEUE_MAX;

    if (!t->req) {
        pop(t);
    } else {
        free(t->q[next].body);
        t->q[next] = t->q[t->head];
        t->q[t->head].body = NULL;
        t->head = next;
        t->count--;
    }
    t->full_drops++;
}

static void push(struct target *t, enum kind k, const char *body, size_t len)
{
    struct delivery *d;
    char *copy = malloc(len + 1);

    if (!copy) {
        t->full_drops++;
        return;
    }
    memcpy(copy, body, len + 1);
    if (t->count == WEBHOOK_QUEUE_MAX)
        drop_oldest(t);
    d = &t->q[(t->head + t->count) % WEBHOOK_QUEUE_MAX];
    d->body = copy;
    d->len = len;
    d->kind = k;
    t->count++;
}

/* Given up: one webhook_dropped record.  kind < 0: several kinds. */
static void dropped(struct target *t, int kind, const char *reason, const char *error,
                    unsigned count)
{
    cJSON *e = log_event_new("webhook_dropped");

    cJSON_AddStringToObject(e, "target", t->where);
    if (t->w->n > 1)
        cJSON_AddNumberToObject(e, "url", (double)(t - t->w->t) + 1);
    if (kind >= 0)
        cJSON_AddStringToObject(e, "webhook", kind_name[kind]);
    cJSON_AddStringToObject(e, "reason", reason);
    if (error)
        cJSON_AddStringToObject(e, "error", error);
    if (kind >= 0)
        cJSON_AddNumberToObject(e, "tries", t->tries);
    cJSON_AddNumberToObject(e, "count", count);
    if (strcmp(reason, "rejected") == 0)
        log_event(LOGL_WARN, e, "webhook %s: the receiver refused the %s delivery (%s); it is "
                  "not retried: check the URL and the receiver", t->label, kind_name[kind],
                  error);
    else if (strcmp(reason, "tries") == 0)
        log_event(LOGL_WARN, e, "webhook %s: the %s delivery failed %u times (last: %s); given "
                  "up", t->label, kind_name[kind], t->tries, error);
    else if (strcmp(reason, "queue full") == 0)
        log_event(LOGL_WARN, e, "webhook %s: %u deliveries dropped, the oldest, from a full "
                  "queue of %d (the receiver is down or slow)", t->label, count,
                  WEBHOOK_QUEUE_MAX);
    else
        log_event(LOGL_WARN, e, "webhook %s: %u deliveries still queued at exit given up%s%s",
                  t->label, count, error ? "; last failure: " : "", error ? error : "");
}

static void deliver(struct target *t);

static void next(struct target *t)
{
    if (t->count && !t->req && !evtimer_pending(t->retry, NULL))
        deliver(t);
}

/* A failure, told at most every WEBHOOK_TELL_EVERY_MS; the rest counted. */
static void tell(struct target *t, const char *why, uint64_t delay_ms)
{
    int64_t now = mono_ms();
    char more[80] = "";

    if (t->told && now - t->told_ms < WEBHOOK_TELL_EVERY_MS) {
        t->untold++;
        return;
    }
    if (t->untold)
        snprintf(more, sizeof(more), " (%u more failures since the last message)", t->untold);
    log_msg(LOGL_WARN, "webhook %s: the %s delivery failed (%s), try %u of %d; next try in "
            "%llu s%s", t->label, kind_name[t->q[t->head].kind], why, t->tries, WEBHOOK_TRIES,
            (unsigned long long)(delay_ms / 1000), more);
    t->told = true;
    t->told_ms = now;
    t->untold = 0;
}

/* A try of q[head] failed in a way that another may not: back off, or
 * give up after the last. */
static void failed(struct target *t, const char *why)
{
    uint64_t delay = WEBHOOK_BACKOFF_MIN_MS;
    struct timeval tv;

    snprintf(t->last_error, sizeof(t->last_error), "%s", why);
    if (t->tries >= WEBHOOK_TRIES) {
        dropped(t, (int)t->q[t->head].kind, "tries", why, 1);
        pop(t);
        next(t);
        return;
    }
    for (unsigned i = 1; i < t->tries && delay < WEBHOOK_BACKOFF_MAX_MS; i++)
        delay *= 2;
    if (delay > WEBHOOK_BACKOFF_MAX_MS)
        delay = WEBHOOK_BACKOFF_MAX_MS;
    tell(t, why, delay);
    tv.tv_sec = (time_t)(delay / 1000);
    tv.tv_usec = (suseconds_t)(delay % 1000) * 1000;
    evtimer_add(t->retry, &tv);
}

/* What went wrong, in words that never hold the URL (curl's may). */
static void failure_words(const struct target *t, const struct http_result *res, char *buf,
                          size_t size)
{
    switch (res->error) {
    case 0:
        snprintf(buf, size, "HTTP %ld", res->status);
        break;
    case -ETIMEDOUT:
        snprintf(buf, size, "no answer within %ld ms", t->w->timeout_ms);
        break;
    case -ECONNREFUSED:
        snprintf(buf, size, "connection refused");
        break;
    case -EHOSTUNREACH:
        snprintf(buf, size, "host not found or unreachable");
        break;
    case -ECONNRESET:
        snprintf(buf, size, "connection closed without a whole answer");
        break;
    case -EKEYREJECTED:
        snprintf(buf, size, "the server's TLS certificate was refused (its CA, host name "
                 "or dates)");
        break;
    case -ENOKEY:
        snprintf(buf, size, "the TLS setup (the CA file) cannot be used");
        break;
    default:
        snprintf(buf, size, "%s", strerror(-res->error));
        break;
    }
}

static void on_done(void *arg, const struct http_result *res)
{
    struct target *t = arg;
    char why[96];

    t->req = NULL;
    t->tries++;
    /* A 2xx status is the receiver's word, whatever came after it. */
    if (res->status >= 200 && res->status < 300) {
        t->last_error[0] = '\0';
        pop(t);
        next(t);
        return;
    }
    failure_words(t, res, why, sizeof(why));
    /* A redirect or a 4xx would answer the same again; 408 and 429 ask
     * for another try. */
    if (res->error == 0 && res->status >= 300 && res->status < 500 && res->status != 408 &&
        res->status != 429) {
        dropped(t, (int)t->q[t->head].kind, "rejected", why, 1);
        pop(t);
        next(t);
        return;
    }
    failed(t, why);
}

static void deliver(struct target *t)
{
    static const char *const headers[] = { "Content-Type: application/json",
                                           "User-Agent: spotd/" SPOT_VERSION, NULL };
    const struct delivery *d = &t->q[t->head];

    t->req = http_start(t->w->http,
                        &(struct http_req_opts){
                            .method = "POST",
                            .url = t->url,
                            .headers = headers,
                            .body = d->body,
                            .body_len = d->len,
                            .timeout_ms = t->w->timeout_ms,
                            .max_body = WEBHOOK_ANSWER_MAX,
                            .proxy = true,
                        },
                        on_done, t);
    if (!t->req) {
        t->tries++;
        failed(t, "cannot start the request (out of memory)");
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct target *t = arg;

    if (t->count && !t->req)
        deliver(t);
}

/* On the loop, after on_event() queued: start what can go, tell drops. */
static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct webhook *w = arg;

    for (size_t i = 0; i < w->n; i++) {
        struct target *t = &w->t[i];

        if (t->full_drops) {
            unsigned n = t->full_drops;

            t->full_drops = 0;
            dropped(t, -1, "queue full", NULL, n);
        }
        next(t);
    }
}

/* ---- the events --------------------------------------------------------- */

static void queue(struct webhook *w, enum kind k, const cJSON *rec)
{
    char text[TEXT_MAX], *body;
    size_t len = 0;

    describe(w, k, rec, text, sizeof(text));
    body = w->tmpl ? from_template(w, k, rec, text, &len) : document(w, k, rec, text, &len);
    if (!body) {
        log_msg(LOGL_WARN, "webhook: the %s body cannot be built (out of memory, or over "
                "%d bytes from the template); it is not sent", kind_name[k], WEBHOOK_BODY_MAX);
        return;
    }
    for (size_t i = 0; i < w->n; i++)
        push(&w->t[i], k, body, len);
    free(body);
    event_active(w->kick, EV_TIMEOUT, 0);
}

static void missed(struct webhook *w, const cJSON *rec)
{
    w->watch = W_SETTLED;
    queue(w, K_DEADLINE_MISSED, rec);
}

static void newest(struct webhook *w, const cJSON *rec)
{
    double gen, step = -1;

    if (!log_rec_num(rec, "gen", &gen))
        return;
    log_rec_num(rec, "step", &step);
    w->newest_gen = (long long)gen;
    w->newest_step = (long long)step;
}

/* The log's observer: runs inside log_event(), so it queues and returns. */
static void on_event(void *arg, const cJSON *rec, enum log_level level)
{
    struct webhook *w = arg;
    const char *ev = log_rec_str(rec, "event", "");
    double d;

    if (strcmp(ev, "notice") == 0) {
        if (w->watch == W_NONE && cJSON_IsTrue(field(rec, "terminating"))) {
            w->watch = W_NOTICE;
            snprintf(w->notice_kind, sizeof(w->notice_kind), "%s", log_rec_str(rec, "kind", ""));
            snprintf(w->notice_source, sizeof(w->notice_source), "%s", log_rec_str(rec, "source", ""));
        }
        queue(w, K_NOTICE, rec);
    } else if (strcmp(ev, "commit") == 0) {
        newest(w, rec);
        queue(w, K_COMMIT, rec);
        if (w->watch == W_NOTICE && log_rec_num(rec, "margin_ms", &d) && d < 0)
            missed(w, rec);
        else if (w->watch == W_NOTICE)
            w->watch = W_SETTLED;
    } else if (strcmp(ev, "resume") == 0) {
        newest(w, rec);
        queue(w, K_RESUME, rec);
    } else if (w->watch == W_NOTICE &&
               (strcmp(ev, "checkpoint_failed") == 0 ||
                (strcmp(ev, "plan") == 0 && cJSON_IsFalse(field(rec, "fits")) &&
                 field(rec, "kept_gen")) ||
                (strcmp(ev, "kill") == 0 && !field(rec, "reason")))) {
        missed(w, rec);
    } else if (strcmp(ev, "world_resume") == 0) {
        /* "node" is this node's rank when the trainers' differs. */
        if (log_rec_num(rec, "node", &d) || log_rec_num(rec, "rank", &d))
            w->rank = (long)d;
    }
}

/* ---- set-up ------------------------------------------------------------- */

/* The host[:port] of a URL's authority, which starts at host: returns
 * where it starts, past any user:password@, and sets *ret_end to its end. */
static const char *authority(const char *host, const char **ret_end)
{
    const char *end = host + strcspn(host, "/?#");

    for (const char *p = host; p < end; p++)
        if (*p == '@')
            host = p + 1;
    *ret_end = end;
    return host;
}

/* What a message may show of a URL: "https://hooks.slack.com" for
 * "https://user:pw@hooks.slack.com/services/T/B/X"; with cut, "/..."
 * follows when something was left out after the host. */
static void url_where(const char *url, bool cut, char *buf, size_t size)
{
    const char *sep = strstr(url, "://"), *start = url, *host, *end;
    int scheme = 0;

    if (sep && sep > url &&
        strspn(url, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.") ==
            (size_t)(sep - url)) {
        scheme = (int)(sep - url);
        start = sep + 3;
    }
    host = authority(start, &end);
    snprintf(buf, size, "%.*s%s%.*s%s", scheme > 16 ? 16 : scheme, url, scheme ? "://" : "",
             end - host > 100 ? 100 : (int)(end - host), host,
             cut && (*end || host > start || end - host > 100) ? "/..." : "");
    for (char *p = buf; *p; p++)
        if (!isprint((unsigned char)*p))
            *p = '?';
}

/* http:// or https://, a host, no control characters. */
static bool url_valid(const char *url)
{
    const char *host, *end;

    if (strncasecmp(url, "http://", 7) == 0)
        host = url + 7;
    else if (strncasecmp(url, "https://", 8) == 0)
        host = url + 8;
    else
        return false;
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return false;
    host = authority(host, &end);
    return end > host && *host != ':';
}

/* Read the file path, named key in messages (origin: where the path came
 * from), into buf (max + 1 bytes, terminated): a regular file of at most
 * max bytes without NUL bytes; hint says what it should be.  O_NONBLOCK: a
 * FIFO must not hold spotd's start.  Returns its length with its mode in
 * *ret_mode, or -errno / -EINVAL with err set. */
static ssize_t read_small_file(const char *key, const char *path, const char *origin,
                               const char *hint, char *buf, size_t max, mode_t *ret_mode,
                               char *err, size_t errlen)
{
    struct stat st;
    ssize_t r = -EINVAL;
    size_t len = 0;
    int fd;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot read %s '%s' (from %s): %s", key, path, origin,
                 strerror((int)-r));
        return r;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s '%s' (from %s) is not a regular file", key, path, origin);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, max + 1 - len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            snprintf(err, errlen, "cannot read %s '%s' (from %s): %s", key, path, origin,
                     strerror((int)-r));
            goto out;
        }
        len += (size_t)n;
        if (n == 0 || len > max)
            break;
    }
    if (len > max) {
        snprintf(err, errlen, "%s '%s' (from %s) is larger than %zu KiB: %s", key, path,
                 origin, max / 1024, hint);
        goto out;
    }
    if (memchr(buf, '\0', len)) {
        snprintf(err, errlen, "%s '%s' (from %s) holds NUL bytes: %s", key, path, origin, hint);
        goto out;
    }
    buf[len] = '\0';
    *ret_mode = st.st_mode;
    r = (ssize_t)len;
out:
    close(fd);
    return r;
}

/* The URLs' file (webhook_file), its comment lines blanked, appended to
 * w->urls after a newline.  The file is a secret like the URLs. */
static int read_urls_file(struct webhook *w, const struct webhook_opts *o, char *err,
                          size_t errlen)
{
    size_t have = strlen(w->urls);
    char *buf, *text;
    mode_t mode;
    ssize_t n;

    if (!(buf = realloc(w->urls, have + 1 + WEBHOOK_URLS_FILE_MAX + 1))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    w->urls = buf;
    buf[have] = '\n';
    text = buf + have + 1;
    n = read_small_file("webhook_file", o->urls_file, o->urls_file_origin,
                        "it holds URLs, one a line", text, WEBHOOK_URLS_FILE_MAX, &mode, err,
                        errlen);
    if (n < 0)
        return (int)n;
    for (char *line = text; *line;) {
        size_t end = strcspn(line, "\n");

        if (line[strspn(line, " \t")] == '#')
            memset(line, ' ', end);
        line += end + (line[end] == '\n');
    }
    w->urls_split = have + 1;
    if (mode & 077)
        log_msg(LOGL_WARN, "webhook_file '%s' can be read by other users (mode %04o): its "
                "URLs may hold tokens; chmod 600 it", o->urls_file, (unsigned)(mode & 07777));
    return 0;
}

/* Where the URL at tok came from: the option, or the URLs' file. */
static const char *url_origin(const struct webhook *w, const struct webhook_opts *o,
                              const char *tok)
{
    return w->urls_split && tok >= w->urls + w->urls_split ? o->urls_file_origin
                                                           : o->urls_origin;
}

static int split_urls(struct webhook *w, const struct webhook_opts *o, char *err, size_t errlen)
{
    char *list[WEBHOOK_URLS_MAX], *tok, *save = NULL, shown[160];
    size_t n = 0;
    int r;

    if (!(w->urls = strdup(o->urls ? o->urls : "")))
        goto oom;
    if (o->urls_file && (r = read_urls_file(w, o, err, errlen)) < 0)
        return r;
    for (tok = strtok_r(w->urls, " \t\r\n\f\v", &save); tok;
         tok = strtok_r(NULL, " \t\r\n\f\v", &save)) {
        if (n == WEBHOOK_URLS_MAX) {
            snprintf(err, errlen, "too many webhook URLs (from %s): at most %d",
                     url_origin(w, o, tok), WEBHOOK_URLS_MAX);
            return -EINVAL;
        }
        list[n++] = tok;
    }
    if (n == 0) {
        snprintf(err, errlen, "no webhook URL (from %s%s%s)", o->urls ? o->urls_origin : "",
                 o->urls && o->urls_file ? " and " : "",
                 o->urls_file ? o->urls_file_origin : "");
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (url_valid(list[i]))
            continue;
        url_where(list[i], true, shown, sizeof(shown));
        snprintf(err, errlen, "invalid webhook URL '%s' (URL %zu of %zu, from %s): expected "
                 "http:// or https:// and a host (only its scheme and host are shown: the "
                 "rest of a webhook URL may hold a token)", shown, i + 1, n,
                 url_origin(w, o, list[i]));
        return -EINVAL;
    }
    if (!(w->t = calloc(n, sizeof(*w->t))))
        goto oom;
    w->n = n;
    for (size_t i = 0; i < n; i++) {
        struct target *t = &w->t[i];

        t->w = w;
        t->url = list[i];
        url_where(list[i], false, t->where, sizeof(t->where));
        snprintf(t->label, sizeof(t->label), "%s", t->where);
        if (n > 1)
            snprintf(t->label + strlen(t->label), sizeof(t->label) - strlen(t->label),
                     " (URL %zu of %zu)", i + 1, n);
        if (!(t->retry = evtimer_new(w->base, on_retry, t)))
            goto oom;
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
}

/* Is the template, filled with v, one JSON document?  Returns 1, or 0
 * with the line where it stops being one in *ret_line, or -EFBIG when it
 * cannot be filled. */
static int filled_json(const struct webhook *w, const char *const v[PH__COUNT],
                       unsigned *ret_line)
{
    const char *end = NULL;
    size_t len = 0;
    char *s = fill(w->tmpl, w->tmpl_len, v, &len);
    cJSON *j;
    bool ok;

    if (!s)
        return -EFBIG;
    j = cJSON_ParseWithLengthOpts(s, len, &end, false);
    if (!end || end < s || end > s + len)
        end = s + len;
    while (j && end < s + len && isspace((unsigned char)*end))
        end++;
    ok = j && end == s + len;
    cJSON_Delete(j);
    *ret_line = 1;
    for (const char *p = s; p < end; p++)
        *ret_line += *p == '\n';
    free(s);
    return ok;
}

/* The line of the template's first "{name}" of placeholder i; 0: none. */
static unsigned placeholder_line(const struct webhook *w, int i)
{
    char pat[16];
    const char *at;
    unsigned line = 1;

    snprintf(pat, sizeof(pat), "{%s}", ph_name[i]);
    at = memmem(w->tmpl, w->tmpl_len, pat, strlen(pat));
    if (!at)
        return 0;
    for (const char *p = w->tmpl; p < at; p++)
        line += *p == '\n';
    return line;
}

/* The template must be JSON once filled: with sample values, and with a
 * placeholder empty, as an event that lacks its value leaves it (a notice
 * has no {gen}): each one in turn, then all of them. */
static int check_template(const struct webhook *w, const struct webhook_opts *o, char *err,
                          size_t errlen)
{
    static const char *const sample[PH__COUNT] = {
        "commit", "llama", "ip-10-0-0-5", "generation 12 of job \"llama\" committed \\ at step 3400",
        "2026-11-30T10:44:25.382Z", "12", "3400", "terminate", "aws", "-250",
    };
    const char *v[PH__COUNT];
    unsigned line;
    int r = filled_json(w, sample, &line);

    if (r < 0) {
        snprintf(err, errlen, "invalid webhook_template '%s' (from %s): filled, it is over %d "
                 "bytes", o->template_path, o->template_origin, WEBHOOK_BODY_MAX);
        return -EINVAL;
    }
    if (r == 0) {
        snprintf(err, errlen, "invalid webhook_template '%s' (from %s): with its placeholders "
                 "filled it is not JSON (line %u); placeholders go inside JSON strings, like "
                 "{\"text\": \"spot {event} on {host}: {text}\"}", o->template_path,
                 o->template_origin, line);
        return -EINVAL;
    }
    for (int i = 0; i <= PH__COUNT; i++) {
        unsigned at = i < PH__COUNT ? placeholder_line(w, i) : 1;

        if (at == 0)
            continue;
        for (int k = 0; k < PH__COUNT; k++)
            v[k] = i == PH__COUNT || k == i ? NULL : sample[k];
        if (filled_json(w, v, &line) == 1)
            continue;
        if (i < PH__COUNT)
            snprintf(err, errlen, "invalid webhook_template '%s' (from %s): with {%s} empty, as "
                     "events without that value leave it, it is not JSON (line %u); put it "
                     "inside a JSON string, like \"%s\": \"{%s}\"", o->template_path,
                     o->template_origin, ph_name[i], at, ph_name[i], ph_name[i]);
        else
            snprintf(err, errlen, "invalid webhook_template '%s' (from %s): with its "
                     "placeholders empty, as events without their values leave them, it is "
                     "not JSON (line %u); put each inside a JSON string", o->template_path,
                     o->template_origin, line);
        return -EINVAL;
    }
    return 0;
}

static int read_template(struct webhook *w, const struct webhook_opts *o, char *err,
                         size_t errlen)
{
    mode_t mode;
    ssize_t n;

    if (!(w->tmpl = malloc(WEBHOOK_TEMPLATE_MAX + 1))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    n = read_small_file("webhook_template", o->template_path, o->template_origin,
                        "a webhook body is a small JSON text", w->tmpl, WEBHOOK_TEMPLATE_MAX,
                        &mode, err, errlen);
    if (n < 0)
        return (int)n;
    w->tmpl_len = (size_t)n;
    return check_template(w, o, err, errlen);
}

struct webhook *webhook_new(const struct webhook_opts *o, char *err, size_t errlen)
{
    struct webhook *w = calloc(1, sizeof(*w));
    char herr[256];

    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->base = o->base;
    w->timeout_ms = (long)o->timeout_ms;
    w->rank = o->rank;
    w->newest_gen = w->newest_step = -1;
    if (split_urls(w, o, err, errlen) < 0)
        return webhook_free(w);
    if (o->template_path && read_template(w, o, err, errlen) < 0)
        return webhook_free(w);
    if (o->timeout_ms == 0) {
        snprintf(err, errlen, "webhook_timeout must be more than 0: a receiver that never "
                 "answers would hold its deliveries for good");
        return webhook_free(w);
    }
    if (o->job && !(w->job = strdup(o->job))) {
        snprintf(err, errlen, "out of memory");
        return webhook_free(w);
    }
    if (gethostname(w->host, sizeof(w->host) - 1) < 0)
        snprintf(w->host, sizeof(w->host), "unknown");
    w->http = http_new(o->base, herr, sizeof(herr));
    if (!w->http) {
        snprintf(err, errlen, "cannot send webhooks: %s", herr);
        return webhook_free(w);
    }
    w->kick = event_new(o->base, -1, 0, on_kick, w);
    if (!w->kick) {
        snprintf(err, errlen, "out of memory");
        return webhook_free(w);
    }
    if (log_observe(on_event, w) < 0) {
        snprintf(err, errlen, "cannot observe the events for webhooks: %d observers already",
                 LOG_OBSERVERS_MAX);
        return webhook_free(w);
    }
    return w;
}

static size_t queued(const struct webhook *w)
{
    size_t n = 0;

    for (size_t i = 0; i < w->n; i++)
        n += w->t[i].count;
    return n;
}

static void on_drain_end(evutil_socket_t fd, short what, void *arg)
{
    *(bool *)arg = true;
}

void webhook_drain(struct webhook *w, uint64_t limit_ms)
{
    struct timeval tv = { (time_t)(limit_ms / 1000), (suseconds_t)(limit_ms % 1000) * 1000 };
    struct event *end;
    bool over = false;

    if (!w || queued(w) == 0)
        return;
    end = evtimer_new(w->base, on_drain_end, &over);
    if (end && evtimer_add(end, &tv) == 0) {
        log_msg(LOGL_INFO, "waiting up to %llu ms for %zu webhook deliveries",
                (unsigned long long)limit_ms, queued(w));
        while (!over && queued(w) && event_base_loop(w->base, EVLOOP_ONCE) == 0)
            ;
    }
    if (end)
        event_free(end);
    for (size_t i = 0; i < w->n; i++) {
        struct target *t = &w->t[i];
        unsigned n = t->count;

        if (n == 0)
            continue;
        http_cancel(t->req);
        t->req = NULL;
        evtimer_del(t->retry);
        while (t->count)
            pop(t);
        dropped(t, -1, "exit", t->last_error[0] ? t->last_error : NULL, n);
    }
}

struct webhook *webhook_free(struct webhook *w)
{
    if (!w)
        return NULL;
    log_unobserve(on_event, w);
    for (size_t i = 0; i < w->n; i++) {
        struct target *t = &w->t[i];

        http_cancel(t->req);
        if (t->retry)
            event_free(t->retry);
        while (t->count)
            pop(t);
    }
    free(w->t);
    if (w->kick)
        event_free(w->kick);
    http_free(w->http);
    free(w->tmpl);
    free(w->job);
    free(w->urls);
    free(w);
    return NULL;
}
