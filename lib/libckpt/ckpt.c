/* libckpt: the trainer's side of the control protocol (docs/protocols.md).
 *
 * DESIGN.  No thread and no dependency: the library lives inside the
 * trainer's process and does work only inside its calls.  ckpt_step() reads
 * whatever spotd sent with one non-blocking recv(), parses complete lines,
 * answers questions at once and remembers a checkpoint request until the
 * trainer reaches its step.  Messages are flat JSON objects; jsonl.c reads
 * and writes them. */
#include "ckpt.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <time.h>
#include <unistd.h>

#include "jsonl.h"

#define CKPT_API __attribute__((visibility("default")))

#define STR_(x) #x
#define STR(x) STR_(x)

#define WELCOME_TIMEOUT_MS 10000

static const char *const messages[] = {
    [0] = "success",
    [1] = "invalid argument",
    [2] = "out of memory",
    [3] = "cannot connect to spotd's control socket",
    [4] = "protocol error: unexpected message from spotd",
    [5] = "spotd speaks an unsupported protocol version",
    [6] = "call not valid in the current state",
    [7] = "spotd closed the connection",
    [8] = "system call failed (see errno)",
    [9] = "spotd did not answer in time",
    [10] = "the checkpoint to resume from could not be restored",
};

CKPT_API const char *ckpt_strerror(int err)
{
    unsigned idx = err <= 0 ? (unsigned)-(long)err : ~0u;

    if (idx < sizeof(messages) / sizeof(messages[0]) && messages[idx])
        return messages[idx];
    return "unknown error";
}

CKPT_API const char *ckpt_version(void)
{
    return STR(CKPT_VERSION_MAJOR) "." STR(CKPT_VERSION_MINOR) "." STR(CKPT_VERSION_PATCH);
}

/* Time between two progress reports of ckpt_step(). */
#define PROGRESS_MS 1000
/* After answering a query, how long the next ckpt_step() waits for the
 * checkpoint it announces (the other workers answer meanwhile). */
#define AWAIT_MS 10000
/* The longest hold a query may ask for (a terminating notice's: the
 * trainer waits at the step it answers, so that it saves that step). */
#define HOLD_MAX_MS 60000

struct ckpt {
    int fd;                       /* -1: inert */
    int err;                      /* sticky: CKPT_E_CLOSED, CKPT_E_PROTOCOL, CKPT_E_IO */
    char *resume_dir;
    long long resume_step;
    bool restoring;               /* resume_dir is not there yet (--early-start) */
    bool restore_failed;
    long long step;               /* the last step ckpt_step() saw */
    long long progress_ms;        /* when the last progress went (coarse monotonic) */
    bool stop;
    bool query;                   /* spotd asked for the step: answer it */
    long long query_id;
    long long query_hold;         /* ms to wait at the answered step; 0: none */
    bool awaiting;                /* answered: the checkpoint (or cancel) is coming */
    /* the checkpoint spotd asked for, and whether the trainer is on it */
    bool pending, saving;
    long long ck_id, ck_step;     /* ck_step -1: at once */
    char *ck_dir;
    /* what recv() brought that is not a whole line yet, and the line being
     * parsed (the message's strings point into it) */
    char in[JSONL_LINE_MAX];
    size_t in_len;
    char line[JSONL_LINE_MAX];
};

static int send_line(struct ckpt *c, const char *line, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(c->fd, line + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = { .fd = c->fd, .events = POLLOUT };
            /* spotd reads its sockets continuously; a full buffer clears. */
            if (poll(&p, 1, 1000) <= 0) {
                c->err = CKPT_E_TIMEOUT;
                return c->err;
            }
            continue;
        }
        if (n < 0) {
            c->err = errno == EPIPE || errno == ECONNRESET ? CKPT_E_CLOSED : CKPT_E_IO;
            return c->err;
        }
        off += (size_t)n;
    }
    return 0;
}

/* Send a message built from (key, value) pairs; see jsonl_build(). */
static int send_msg(struct ckpt *c, const struct jsonl_kv *kv, size_t n)
{
    char line[JSONL_LINE_MAX + 2];
    int len = jsonl_build(line, sizeof(line), kv, n);

    if (len < 0)
        return CKPT_E_INVAL;
    return send_line(c, line, (size_t)len);
}

static char *dup_string(const struct jsonl_msg *m, const char *key, bool *bad)
{
    const struct jsonl_value *v = jsonl_get(m, key);
    char *s;

    if (!v || v->type == JSONL_NULL)
        return NULL;
    if (v->type != JSONL_STRING || !v->str[0]) {
        *bad = true;
        return NULL;
    }
    if (!(s = strdup(v->str)))
        *bad = true;
    return s;
}

/* An integer member; -1 when null or absent and allowed. */
static bool get_int(const struct jsonl_msg *m, const char *key, bool nullable, long long *ret)
{
    const struct jsonl_value *v = jsonl_get(m, key);

    if ((!v || v->type == JSONL_NULL) && nullable) {
        *ret = -1;
        return true;
    }
    if (!v || v->type != JSONL_INT)
        return false;
    *ret = v->num;
    return true;
}

/* One message from spotd.  Returns 0 or a CKPT_E_*. */
static int handle(struct ckpt *c, const struct jsonl_msg *m)
{
    const char *type = jsonl_type(m);
    long long id, step;
    bool bad = false;

    if (!type)
        return CKPT_E_PROTOCOL;
    if (strcmp(type, "query") == 0) {
        /* Answered at the next ckpt_step(), with the step it is given. */
        if (!get_int(m, "id", false, &c->query_id) ||
            !get_int(m, "hold_ms", true, &c->query_hold))
            return CKPT_E_PROTOCOL;
        if (c->query_hold < 0)
            c->query_hold = 0;
        if (c->query_hold > HOLD_MAX_MS)
            c->query_hold = HOLD_MAX_MS;
        c->query = true;
        return 0;
    }
    if (strcmp(type, "checkpoint") == 0) {
        char *dir;

        if (!get_int(m, "id", false, &id) || !get_int(m, "step", true, &step))
            return CKPT_E_PROTOCOL;
        dir = dup_string(m, "dir", &bad);
        if (bad || !dir) {
            free(dir);
            return CKPT_E_PROTOCOL;
        }
        if (c->saving) {
            /* One save at a time: the open one is reported first. */
            free(dir);
            return CKPT_E_PROTOCOL;
        }
        free(c->ck_dir);
        c->ck_dir = dir;
        c->ck_id = id;
        c->ck_step = step;
        c->pending = true;
        c->awaiting = false;
        return 0;
    }
    if (strcmp(type, "cancel") == 0) {
        if (!get_int(m, "id", false, &id))
            return CKPT_E_PROTOCOL;
        if (c->pending && c->ck_id == id && !c->saving)
            c->pending = false;
        c->awaiting = false;
        return 0;
    }
    if (strcmp(type, "stop") == 0) {
        c->stop = true;
        c->awaiting = false;
        return 0;
    }
    if (strcmp(type, "restored") == 0) {
        const struct jsonl_value *e = jsonl_get(m, "error");

        if (!c->restoring || !e || (e->type != JSONL_NULL && e->type != JSONL_STRING))
            return CKPT_E_PROTOCOL;
        c->restoring = false;
        c->restore_failed = e->type == JSONL_STRING;
        return 0;
    }
    return CKPT_E_PROTOCOL;
}

/* Read what has arrived: without waiting (wait_ms 0), or for up to
 * wait_ms.  Returns 0 (also when nothing came) or a CKPT_E_*. */
static int fill(struct ckpt *c, int wait_ms)
{
    ssize_t n;

    if (c->in_len == JSONL_LINE_MAX)
        return CKPT_E_PROTOCOL; /* a line over the cap */
    if (wait_ms > 0) {
        struct pollfd p = { .fd = c->fd, .events = POLLIN };
        int r = poll(&p, 1, wait_ms);

        if (r == 0)
            return CKPT_E_TIMEOUT;
        if (r < 0)
            return errno == EINTR ? 0 : CKPT_E_IO;
    }
    do
        n = recv(c->fd, c->in + c->in_len, JSONL_LINE_MAX - c->in_len, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n < 0)
        return errno == ECONNRESET ? CKPT_E_CLOSED : CKPT_E_IO;
    if (n == 0)
        return CKPT_E_CLOSED;
    c->in_len += (size_t)n;
    return 0;
}

/* The next complete line, parsed into m (its strings live in c->line
 * until the next call).  Returns 1 with m set, 0 when no line is complete,
 * or CKPT_E_PROTOCOL / CKPT_E_VERSION. */
static int next_msg(struct ckpt *c, struct jsonl_msg *m)
{
    char *nl = memchr(c->in, '\n', c->in_len);
    size_t len;
    long long v;

    if (!nl)
        return c->in_len == JSONL_LINE_MAX ? CKPT_E_PROTOCOL : 0;
    len = (size_t)(nl - c->in);
    memcpy(c->line, c->in, len);
    c->in_len -= len + 1;
    memmove(c->in, nl + 1, c->in_len);
    if (jsonl_parse(c->line, len, m) < 0 || !get_int(m, "v", false, &v) || !jsonl_type(m))
        return CKPT_E_PROTOCOL;
    if (v != 1)
        return CKPT_E_VERSION;
    return 1;
}

/* Handle every complete line there is. */
static int handle_all(struct ckpt *c)
{
    struct jsonl_msg m;
    int r;

    while ((r = next_msg(c, &m)) > 0)
        if ((r = handle(c, &m)) < 0)
            return r;
    return r;
}

static int env_int(const char *name)
{
    const char *v = getenv(name);
    char *end;
    long n;

    if (!v || !*v)
        return -1;
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || *end || n < 0 || n > 1 << 20)
        return -1;
    return (int)n;
}

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

CKPT_API int ckpt_open_at(const char *path, struct ckpt **ret)
{
    struct ckpt *c;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct jsonl_msg w;
    long long deadline;
    bool bad = false;
    int r;

    if (!ret)
        return CKPT_E_INVAL;
    if (!(c = calloc(1, sizeof(*c))))
        return CKPT_E_NOMEM;
    c->fd = -1;
    c->resume_step = -1;
    if (!path || !*path) {
        *ret = c;
        return 0;
    }
    if (strlen(path) >= sizeof(sa.sun_path)) {
        free(c);
        return CKPT_E_CONNECT;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        r = CKPT_E_CONNECT;
        goto fail;
    }
    {
        char lib[32];
        struct jsonl_kv kv[] = {
            JSONL_STR("type", "hello"),
            JSONL_INT("pid", (long long)getpid()),
            JSONL_INT("local_rank", env_int("LOCAL_RANK")),
            JSONL_INT("local_world_size", env_int("LOCAL_WORLD_SIZE")),
            JSONL_STR("lib", lib),
            JSONL_BOOLV("resume_wait", true),
        };
        snprintf(lib, sizeof(lib), "libckpt-c %s", ckpt_version());
        if ((r = send_msg(c, kv, 6)) < 0)
            goto fail;
    }
    deadline = now_ms() + WELCOME_TIMEOUT_MS;
    while ((r = next_msg(c, &w)) == 0) {
        long long left = deadline - now_ms();

        if (left <= 0) {
            r = CKPT_E_TIMEOUT;
            goto fail;
        }
        if ((r = fill(c, (int)left)) < 0)
            goto fail;
    }
    if (r < 0)
        goto fail;
    if (strcmp(jsonl_type(&w), "welcome") != 0) {
        r = CKPT_E_PROTOCOL;
        goto fail;
    }
    c->resume_dir = dup_string(&w, "resume_dir", &bad);
    if (bad || !get_int(&w, "resume_step", true, &c->resume_step)) {
        r = CKPT_E_PROTOCOL;
        goto fail;
    }
    {
        const struct jsonl_value *v = jsonl_get(&w, "restoring");

        if (v && v->type != JSONL_BOOL) {
            r = CKPT_E_PROTOCOL;
            goto fail;
        }
        c->restoring = v && v->num && c->resume_dir;
    }
    /* What came after the welcome in the same read is handled now. */
    if ((r = handle_all(c)) < 0)
        goto fail;
    *ret = c;
    return 0;
fail:
    ckpt_close(c);
    return r;
}

CKPT_API int ckpt_open(struct ckpt **ret)
{
    return ckpt_open_at(getenv("SPOT_SOCKET"), ret);
}

CKPT_API void ckpt_close(struct ckpt *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c->resume_dir);
    free(c->ck_dir);
    free(c);
}

CKPT_API int ckpt_inert(const struct ckpt *c)
{
    return !c || c->fd < 0;
}

CKPT_API const char *ckpt_resume_dir(const struct ckpt *c)
{
    return c ? c->resume_dir : NULL;
}

CKPT_API long long ckpt_resume_step(const struct ckpt *c)
{
    return c && c->resume_dir ? c->resume_step : -1;
}

CKPT_API int ckpt_resume_wait(struct ckpt *c, int timeout_ms)
{
    long long deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    int r = 0;

    if (!c)
        return CKPT_E_INVAL;
    while (c->restoring && !c->err) {
        long long left = deadline < 0 ? 1000 : deadline - now_ms();

        if ((r = handle_all(c)) < 0) {
            c->err = r;
            break;
        }
        if (!c->restoring)
            break;
        if (left <= 0)
            return CKPT_E_TIMEOUT;
        r = fill(c, (int)left);
        if (r < 0 && r != CKPT_E_TIMEOUT)
            c->err = r;
    }
    if (c->err)
        return c->err;
    return c->restore_failed ? CKPT_E_RESTORE : 0;
}

static long long coarse_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The step was answered: spotd announces the step to save at once every
 * worker has answered.  A fast trainer would run past it: wait here, up to
 * ms, for the checkpoint (or a cancel, or a stop).  c->awaiting is still
 * set when none came.  Returns 0 or a CKPT_E_*. */
static int await_checkpoint(struct ckpt *c, long long ms)
{
    long long until = coarse_ms() + ms;
    int r = 0;

    while (r == 0 && c->awaiting) {
        long long left = until - coarse_ms();

        /* At the end, what has arrived still counts. */
        r = fill(c, left > 0 ? (int)left : 0);
        if (r == 0)
            r = handle_all(c);
        if (left <= 0)
            break;
    }
    return r == CKPT_E_TIMEOUT ? 0 : r;
}

/* Answer the query at step.  A terminating notice's query holds the
 * trainer here, so that the step it saves is this one, not the next: the
 * hold ends with the checkpoint (saved at once when it names this step),
 * or after query_hold ms, when the trainer says it trains on ("released":
 * another worker may need this one's next step to reach its own, a
 * collective) and waits again at the next step, as without a hold. */
static int answer_query(struct ckpt *c, long long step)
{
    struct jsonl_kv kv[] = {
        JSONL_STR("type", "step"),
        JSONL_INT("id", c->query_id),
        JSONL_INT("step", step),
        JSONL_INT("hold_ms", c->query_hold),
    };
    struct jsonl_kv rel[] = {
        JSONL_STR("type", "released"),
        JSONL_INT("id", c->query_id),
        JSONL_INT("step", step),
    };
    int r;

    c->query = false;
    r = send_msg(c, kv, c->query_hold > 0 ? 4 : 3);
    c->awaiting = r == 0;
    if (r == 0 && c->query_hold > 0) {
        r = await_checkpoint(c, c->query_hold);
        if (r == 0 && c->awaiting)
            r = send_msg(c, rel, 3);
    }
    return r;
}

CKPT_API int ckpt_step(struct ckpt *c, long long step)
{
    int r;

    if (!c || step < 0)
        return CKPT_E_INVAL;
    if (c->fd < 0)
        return CKPT_CONTINUE;
    if (c->err)
        return c->err;
    if (c->saving)
        return CKPT_E_STATE;
    c->step = step;
    r = fill(c, 0);
    if (r == 0)
        r = handle_all(c);
    if (r == 0 && c->awaiting) {
        r = await_checkpoint(c, AWAIT_MS);
        c->awaiting = false;
    }
    if (r == 0 && c->query)
        r = answer_query(c, step);
    if (r == 0) {
        /* The coarse clock costs a few ns (vDSO): progress goes at most
         * once per PROGRESS_MS, for spotctl status and the step rate. */
        long long now = coarse_ms();

        if (now - c->progress_ms >= PROGRESS_MS) {
            struct jsonl_kv kv[] = { JSONL_STR("type", "progress"), JSONL_INT("step", step) };
            c->progress_ms = now;
            r = send_msg(c, kv, 2);
        }
    }
    if (r < 0) {
        c->err = r;
        return r;
    }
    if (c->pending && (c->ck_step < 0 || step >= c->ck_step)) {
        c->saving = true;
        return CKPT_SAVE;
    }
    return c->stop ? CKPT_STOP : CKPT_CONTINUE;
}

CKPT_API const char *ckpt_save_dir(const struct ckpt *c)
{
    return c && c->saving ? c->ck_dir : NULL;
}

static int report(struct ckpt *c, const struct jsonl_kv *kv, size_t n)
{
    int r;

    c->saving = false;
    c->pending = false;
    if (c->err)
        return c->err;
    r = send_msg(c, kv, n);
    return r;
}

CKPT_API int ckpt_saved(struct ckpt *c, long long step)
{
    if (!c || step < 0)
        return CKPT_E_INVAL;
    if (!c->saving && c->fd >= 0 && !c->err) {
        /* The signal method's report: id 0, no save was open. */
        struct jsonl_kv kv[] = {
            JSONL_STR("type", "saved"),
            JSONL_INT("id", 0),
            JSONL_INT("step", step),
        };
        return send_msg(c, kv, 3);
    }
    if (!c->saving)
        return c->err ? c->err : CKPT_E_STATE;
    {
        struct jsonl_kv kv[] = {
            JSONL_STR("type", "saved"),
            JSONL_INT("id", c->ck_id),
            JSONL_INT("step", step),
        };
        return report(c, kv, 3);
    }
}

CKPT_API int ckpt_failed(struct ckpt *c, const char *reason)
{
    if (!c)
        return CKPT_E_INVAL;
    if (!c->saving)
        return CKPT_E_STATE;
    {
        struct jsonl_kv kv[] = {
            JSONL_STR("type", "failed"),
            JSONL_INT("id", c->ck_id),
            JSONL_STR("reason", reason ? reason : "unspecified"),
        };
        return report(c, kv, 3);
    }
}

/* A message that needs no save open: nothing on an inert handle. */
static int send_any(struct ckpt *c, const struct jsonl_kv *kv, size_t n)
{
    if (c->fd < 0)
        return 0;
    if (c->err)
        return c->err;
    return send_msg(c, kv, n);
}

CKPT_API int ckpt_file_done(struct ckpt *c, const char *path)
{
    if (!c || !path || !*path)
        return CKPT_E_INVAL;
    return send_any(c, (const struct jsonl_kv[]){ JSONL_STR("type", "file_done"),
                                                  JSONL_STR("path", path) }, 2);
}

CKPT_API int ckpt_request_save(struct ckpt *c)
{
    if (!c)
        return CKPT_E_INVAL;
    return send_any(c, (const struct jsonl_kv[]){ JSONL_STR("type", "request"),
                                                  JSONL_INT("step", c->step) }, 2);
}

CKPT_API int ckpt_fd(const struct ckpt *c)
{
    return c ? c->fd : -1;
}
