/* supervisord/control.c with real libckpt clients in child processes. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "harness.h"
#include "../../supervisord/control.h"
#include "spot/notice.h"

enum trainer_kind { SAVES, FAILS, DIES };

/* A trainer: steps every millisecond; saves a file, fails, or dies when
 * asked to save; exits 75 on STOP. */
static void trainer(const char *path, enum trainer_kind kind, const char *rank)
{
    struct ckpt *k;

    setenv("LOCAL_RANK", rank, 1);
    if (ckpt_open_at(path, &k) != 0)
        _exit(10);
    for (long long step = 0; step < 20000; step++) {
        int a = ckpt_step(k, step);

        if (a == CKPT_SAVE) {
            char file[4096];
            FILE *f;

            if (kind == DIES)
                _exit(12);
            if (kind == FAILS) {
                ckpt_failed(k, "disk full");
                continue;
            }
            snprintf(file, sizeof(file), "%s/state", ckpt_save_dir(k));
            if (!(f = fopen(file, "w")))
                _exit(13);
            fprintf(f, "step %lld\n", step - 1);
            fclose(f);
            ckpt_saved(k, step - 1);
            continue;
        }
        if (a == CKPT_STOP)
            _exit(75);
        usleep(1000);
    }
    _exit(11);
}

struct result {
    struct event_base *base;
    int calls, err;
    long long step;
    char msg[1024];
};

static void on_saved(void *arg, int err, const char *msg, int64_t step)
{
    struct result *r = arg;

    r->calls++;
    r->err = err;
    r->step = step;
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
    event_base_loopbreak(r->base);
}

/* Run the loop until cond holds or 10 s pass. */
static void run_until(struct event_base *base, int (*cond)(void *), void *arg)
{
    struct timeval tick = { 0, 10000 };

    for (int i = 0; i < 1000 && !cond(arg); i++)
        event_base_loopexit(base, &tick), event_base_dispatch(base);
}

static struct control *ctl;
static unsigned want_workers;

static int enough_workers(void *arg)
{
    return control_workers(ctl) >= want_workers;
}

static int no_workers(void *arg)
{
    return control_workers(ctl) == 0;
}

static int got_result(void *arg)
{
    return ((struct result *)arg)->calls > 0;
}

static pid_t spawn(const char *path, enum trainer_kind kind, const char *rank)
{
    pid_t pid = fork();

    if (pid == 0)
        trainer(path, kind, rank);
    return pid;
}

/* The end of a test: the control, the loop and the scratch folder. */
static void teardown(struct event_base *base, const char *dir)
{
    char cmd[128];

    ctl = control_free(ctl);
    event_base_free(base);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK_INT(system(cmd), 0);
}

TEST(control_checkpoint)
{
    char dir[] = "/tmp/spotd-control.XXXXXX", path[64], ck[64], file[128], text[64] = "";
    struct event_base *base = event_base_new();
    struct control_opts o = { .base = base };
    struct result r = { .base = base };
    char err[256];
    pid_t a, b;
    int status;
    FILE *f;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/ctl.sock", dir);
    snprintf(ck, sizeof(ck), "%s/g1", dir);
    mkdir(ck, 0700);
    o.path = path;
    ctl = control_new(&o, err, sizeof(err));
    CHECK(ctl != NULL);
    if (!ctl)
        return;

    /* Nobody connected by the deadline: a clear failure, from the loop. */
    CHECK_INT(control_checkpoint(ctl, 1, ck, 0, NULL, on_saved, &r), -EINVAL);
    CHECK_INT(control_checkpoint(ctl, 1, ck, notice_now_ms() + 300, NULL, on_saved, &r), 0);
    CHECK_INT(r.calls, 0);
    run_until(base, got_result, &r);
    CHECK_INT(r.err, -ENOTCONN);
    CHECK_HAS(r.msg, "libckpt");

    /* Two workers save at one step, each in its own directory. */
    a = spawn(path, SAVES, "0");
    b = spawn(path, SAVES, "1");
    want_workers = 2;
    run_until(base, enough_workers, NULL);
    CHECK_INT(control_workers(ctl), 2);
    memset(&r, 0, sizeof(r));
    r.base = base;
    CHECK_INT(control_checkpoint(ctl, 1, ck, notice_now_ms() + 10000, NULL, on_saved, &r), 0);
    CHECK_INT(control_checkpoint(ctl, 1, ck, notice_now_ms() + 10000, NULL, on_saved, &r), -EBUSY);
    run_until(base, got_result, &r);
    CHECK_INT(r.calls, 1);
    CHECK_INT(r.err, 0);
    CHECK(r.step >= 0);
    for (int w = 0; w < 2; w++) {
        snprintf(file, sizeof(file), "%s/w%d/state", ck, w);
        f = fopen(file, "r");
        CHECK(f != NULL);
        if (f) {
            CHECK(fgets(text, sizeof(text), f) != NULL);
            fclose(f);
        }
        {
            char want[64];
            snprintf(want, sizeof(want), "step %lld\n", r.step);
            CHECK_STR(text, want);
        }
    }
    control_stop(ctl, "test");
    waitpid(a, &status, 0);
    CHECK_INT(WEXITSTATUS(status), 75);
    waitpid(b, &status, 0);
    CHECK_INT(WEXITSTATUS(status), 75);
    run_until(base, no_workers, NULL);
    CHECK_INT(control_workers(ctl), 0);

    /* The socket again: what was connected before (two) is what a
     * checkpoint waits for otherwise. */
    ctl = control_free(ctl);
    ctl = control_new(&o, err, sizeof(err));
    CHECK(ctl != NULL);
    if (!ctl)
        return;

    /* A worker that cannot save fails the checkpoint with its reason. */
    a = spawn(path, FAILS, "0");
    want_workers = 1;
    run_until(base, enough_workers, NULL);
    memset(&r, 0, sizeof(r));
    r.base = base;
    CHECK_INT(control_checkpoint(ctl, 2, ck, notice_now_ms() + 10000, NULL, on_saved, &r), 0);
    run_until(base, got_result, &r);
    CHECK_INT(r.err, -EIO);
    CHECK_HAS(r.msg, "disk full");
    control_stop(ctl, "test");
    waitpid(a, &status, 0);
    CHECK_INT(WEXITSTATUS(status), 75);
    run_until(base, no_workers, NULL);

    /* A worker that dies during the checkpoint fails it. */
    a = spawn(path, DIES, "0");
    run_until(base, enough_workers, NULL);
    memset(&r, 0, sizeof(r));
    r.base = base;
    CHECK_INT(control_checkpoint(ctl, 3, ck, notice_now_ms() + 10000, NULL, on_saved, &r), 0);
    run_until(base, got_result, &r);
    CHECK_INT(r.err, -EPIPE);
    CHECK_HAS(r.msg, "went away");
    waitpid(a, &status, 0);
    CHECK_INT(WEXITSTATUS(status), 12);

    teardown(base, dir);
}

/* ---- clients that are not trainers -------------------------------------------------------- */

/* In a child process: connect to path and say hello as a worker of rank,
 * with the members in more (each after a comma), within 10 s.  Returns
 * the connection; exits 10 when it cannot. */
static int hello_by_hand(const char *path, int rank, const char *more)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char line[256];
    int fd, n;

    alarm(10);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        _exit(10);
    n = snprintf(line, sizeof(line), "{\"v\":1,\"type\":\"hello\",\"pid\":%d,\"local_rank\":%d%s,"
                 "\"lib\":\"by hand\"}\n", (int)getpid(), rank, more);
    if (write(fd, line, (size_t)n) != n)
        _exit(10);
    return fd;
}

enum stray_kind { LEAVES, STEPS_AND_LEAVES, SILENT };

/* A stray client in a child process: says hello as a worker of rank (with
 * local_world_size 2), reads the welcome, then leaves (after a progress
 * report, with STEPS_AND_LEAVES), or says nothing more until spotd closes
 * the connection (exit 0) or 10 s pass (exit 9). */
static pid_t spawn_stray(const char *path, enum stray_kind kind, int rank)
{
    pid_t pid = fork();
    char line[256];
    int fd, n;

    if (pid != 0)
        return pid;
    fd = hello_by_hand(path, rank, ",\"local_world_size\":2");
    if (read(fd, line, sizeof(line)) <= 0)
        _exit(11);
    if (kind == STEPS_AND_LEAVES) {
        n = snprintf(line, sizeof(line), "{\"v\":1,\"type\":\"progress\",\"step\":5}\n");
        if (write(fd, line, (size_t)n) != n)
            _exit(12);
    }
    if (kind != SILENT)
        _exit(0);
    /* a query may come; nothing else but the end */
    while ((n = (int)read(fd, line, sizeof(line))) > 0)
        ;
    _exit(n == 0 ? 0 : 13);
}

static pid_t waited;
static int waited_status;

static int child_done(void *arg)
{
    return waitpid(waited, &waited_status, WNOHANG) == waited;
}

/* Wait (running the loop) for a child to end; its exit status, or -1. */
static int wait_child(struct event_base *base, pid_t pid)
{
    waited = pid;
    waited_status = -1;
    run_until(base, child_done, NULL);
    return waited_status >= 0 && WIFEXITED(waited_status) ? WEXITSTATUS(waited_status) : -1;
}

static void answer(void *arg, const char *cmd, const struct jsonl_msg *m, char *reply, size_t len)
{
    snprintf(reply, len, "{\"v\":1,\"type\":\"result\",\"ok\":true,\"cmd\":\"%s\"}", cmd);
}

/* A non-blocking connection to path, accepted by running the loop while
 * the listen queue is full.  Returns the fd, or -1. */
static int raw_connect(struct event_base *base, const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct timeval tick = { 0, 1000 };

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    for (int i = 0; fd >= 0 && i < 1000; i++) {
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        if (errno != EAGAIN)
            break;
        event_base_loopexit(base, &tick);
        event_base_dispatch(base);
    }
    if (fd >= 0)
        close(fd);
    return -1;
}

/* 1 when spotd closed fd, 0 when it is open, -1 on another error. */
static int raw_closed(int fd)
{
    char b[4096];
    ssize_t n;

    while ((n = recv(fd, b, sizeof(b), MSG_DONTWAIT)) > 0)
        ;
    return n == 0 ? 1 : errno == EAGAIN ? 0 : errno == ECONNRESET ? 1 : -1;
}

static int *raw_fds;
static int raw_n;

static int all_closed(void *arg)
{
    for (int i = 0; i < raw_n; i++)
        if (raw_fds[i] >= 0 && raw_closed(raw_fds[i]) != 1)
            return 0;
    return 1;
}

static char reply[512];

static int got_reply(void *arg)
{
    int fd = *(int *)arg;
    ssize_t n = recv(fd, reply, sizeof(reply) - 1, MSG_DONTWAIT);

    if (n > 0)
        reply[n] = '\0';
    return n >= 0 || errno != EAGAIN;
}

static struct control *new_control(struct control_opts *o, const char *path)
{
    char err[256];
    struct control *c;

    o->path = path;
    c = control_new(o, err, sizeof(err));
    if (!c)
        printf("  control_new: %s\n", err);
    return c;
}

static unsigned exactly;

static int workers_are(void *arg)
{
    return control_workers(ctl) == exactly;
}

/* A stray that ran to its end, and spotd saw it leave: n workers are left. */
static int stray_done(struct event_base *base, pid_t pid, unsigned n)
{
    int rc = wait_child(base, pid);

    exactly = n;
    run_until(base, workers_are, NULL);
    return rc;
}

/* A new control on path with one trainer (rank 0) connected: its pid, or
 * -1. */
static pid_t open_with_trainer(struct control_opts *o, const char *path)
{
    pid_t pid;

    if (!(ctl = new_control(o, path)))
        return -1;
    pid = spawn(path, SAVES, "0");
    want_workers = 1;
    run_until(o->base, enough_workers, NULL);
    return pid;
}

/* Checkpoint gen into dir within ms, and wait for its result in r. */
static void checkpoint_now(struct result *r, struct event_base *base, uint64_t gen,
                           const char *dir, int ms)
{
    memset(r, 0, sizeof(*r));
    r->base = base;
    CHECK_INT(control_checkpoint(ctl, gen, dir, notice_now_ms() + ms, NULL, on_saved, r), 0);
    run_until(base, got_result, r);
}

/* A stray hello does not make a checkpoint wait for a worker that is not
 * there: one that leaves without a step stops counting at once, one that
 * reported a step once gone_ms has passed or its rank comes back, one that
 * stays silent once quiet_ms has passed. */
TEST(control_stray_hello)
{
    char dir[] = "/tmp/spotd-control.XXXXXX", path[64], ck[64], file[128];
    struct event_base *base = event_base_new();
    struct control_opts o = { .base = base, .quiet_ms = 500, .gone_ms = 800 };
    struct result r = { .base = base };
    struct stat st;
    pid_t a, b, s;
    int64_t t0;
    int status;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/ctl.sock", dir);
    snprintf(ck, sizeof(ck), "%s/g1", dir);
    mkdir(ck, 0700);
    if ((a = open_with_trainer(&o, path)) < 0)
        return;

    /* Hello, welcome, gone: nothing to wait for. */
    s = spawn_stray(path, LEAVES, 1);
    CHECK_INT(stray_done(base, s, 1), 0);
    CHECK_INT(control_workers(ctl), 1);
    checkpoint_now(&r, base, 1, ck, 5000);
    CHECK_INT(r.err, 0);
    CHECK_STR(r.msg, "");

    /* A worker that reported a step and left counts until gone_ms has
     * passed: the checkpoint goes ahead only then. */
    t0 = notice_mono_ms();
    s = spawn_stray(path, STEPS_AND_LEAVES, 1);
    CHECK_INT(stray_done(base, s, 1), 0);
    checkpoint_now(&r, base, 2, ck, 8000);
    CHECK_INT(r.err, 0);
    CHECK(notice_mono_ms() - t0 >= 800);

    /* Hello and silence: once quiet_ms has passed it counts no more, and
     * the checkpoint it was asked into goes ahead without it; its
     * connection stays open. */
    s = spawn_stray(path, SILENT, 1);
    want_workers = 2;
    run_until(base, enough_workers, NULL);
    CHECK_INT(control_workers(ctl), 2);
    checkpoint_now(&r, base, 3, ck, 8000);
    CHECK_INT(r.err, 0);
    CHECK_INT(control_workers(ctl), 1);
    CHECK_INT(waitpid(s, &status, WNOHANG), 0);
    control_stop(ctl, "test");
    CHECK_INT(wait_child(base, a), 75);
    ctl = control_free(ctl);
    CHECK_INT(wait_child(base, s), 0); /* closed with the socket */

    /* With the default gone_ms: a checkpoint says whom it waited for... */
    o.gone_ms = 0;
    if ((a = open_with_trainer(&o, path)) < 0)
        return;
    s = spawn_stray(path, STEPS_AND_LEAVES, 1);
    CHECK_INT(stray_done(base, s, 1), 0);
    checkpoint_now(&r, base, 4, ck, 300);
    CHECK_INT(r.err, -ETIMEDOUT);
    CHECK_HAS(r.msg, "only 1 of the 2 local workers took part (local rank 1 left 0 s ago");

    /* ... and a worker of that rank that comes back takes part. */
    b = spawn(path, SAVES, "1");
    want_workers = 2;
    run_until(base, enough_workers, NULL);
    checkpoint_now(&r, base, 5, ck, 8000);
    CHECK_INT(r.err, 0);
    snprintf(file, sizeof(file), "%s/w1/state", ck);
    CHECK(stat(file, &st) == 0);
    control_stop(ctl, "test");
    CHECK_INT(wait_child(base, a), 75);
    CHECK_INT(wait_child(base, b), 75);

    teardown(base, dir);
}

/* Connections that say nothing are closed after hello_ms, the oldest at
 * once when every slot is taken; a command always gets an answer. */
TEST(control_silent_connections)
{
    char dir[] = "/tmp/spotd-control.XXXXXX", path[64];
    struct event_base *base = event_base_new();
    struct control_opts o = { .base = base, .hello_ms = 300, .on_command = answer };
    const char cmd[] = "{\"v\":1,\"type\":\"command\",\"cmd\":\"status\"}\n";
    int fds[400], n_open = 0, fd;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/ctl.sock", dir);
    if (!(ctl = new_control(&o, path)))
        return;
    for (int i = 0; i < 400; i++)
        fds[i] = raw_connect(base, path);
    for (int i = 0; i < 400; i++)
        n_open += fds[i] >= 0;
    CHECK_INT(n_open, 400);

    /* Every slot is taken: the command still gets in, and answered. */
    fd = raw_connect(base, path);
    CHECK(fd >= 0);
    CHECK_INT(send(fd, cmd, strlen(cmd), MSG_NOSIGNAL), (long long)strlen(cmd));
    reply[0] = '\0';
    run_until(base, got_reply, &fd);
    CHECK_HAS(reply, "\"ok\":true,\"cmd\":\"status\"");
    if (fd >= 0)
        close(fd);

    /* ... and the silent ones are closed, all of them. */
    raw_fds = fds;
    raw_n = 400;
    run_until(base, all_closed, NULL);
    CHECK(all_closed(NULL));
    for (int i = 0; i < 400; i++)
        if (fds[i] >= 0)
            close(fds[i]);

    ctl = control_free(ctl);
    event_base_free(base);
    rmdir(dir);
}

/* ---- the save at once --------------------------------------------------------------------- */

/* A worker spoken by hand, so that the test sees what spotd sends it:
 * hello as local rank rank (no local_world_size), a progress report of
 * step 5 when stepped, then the first message after the welcome says its
 * exit: 20 a checkpoint to save at once ("step":null), 21 a query, 22
 * anything else.  It answers neither. */
static pid_t spawn_asked(const char *path, int rank, bool stepped)
{
    static const char progress[] = "{\"v\":1,\"type\":\"progress\",\"step\":5}\n";
    pid_t pid = fork();
    char in[4096];
    size_t len = 0;
    char *second;
    int fd;

    if (pid != 0)
        return pid;
    fd = hello_by_hand(path, rank, "");
    if (stepped && write(fd, progress, sizeof(progress) - 1) != (ssize_t)sizeof(progress) - 1)
        _exit(12);
    /* the welcome, then one more line */
    for (;;) {
        char *nl = memchr(in, '\n', len);
        ssize_t got;

        if (nl && memchr(nl + 1, '\n', len - (size_t)(nl + 1 - in))) {
            second = nl + 1;
            break;
        }
        if (len == sizeof(in) || (got = read(fd, in + len, sizeof(in) - len)) <= 0)
            _exit(13);
        len += (size_t)got;
    }
    if (strstr(second, "\"type\":\"checkpoint\"") && strstr(second, "\"step\":null"))
        _exit(20);
    _exit(strstr(second, "\"type\":\"query\"") ? 21 : 22);
}

static int stepped_5(void *arg)
{
    return control_step(ctl) == 5;
}

/* One worker and no world: the worker that trains is told to save at the
 * next step it reaches, without the query (one to two steps of waiting);
 * one that has reported no step, or one of two, is asked its step. */
TEST(control_at_once)
{
    char dir[] = "/tmp/spotd-control.XXXXXX", path[64], ck[64];
    struct event_base *base = event_base_new();
    struct control_opts o = { .base = base, .gone_ms = 1 };
    struct result r = { .base = base };
    pid_t a, b;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/ctl.sock", dir);
    snprintf(ck, sizeof(ck), "%s/g1", dir);
    mkdir(ck, 0700);
    if (!(ctl = new_control(&o, path)))
        return;

    /* It trains: at once.  It then leaves, which ends the checkpoint. */
    a = spawn_asked(path, 0, true);
    run_until(base, stepped_5, NULL);
    CHECK_INT(control_step(ctl), 5);
    checkpoint_now(&r, base, 1, ck, 5000);
    CHECK_INT(wait_child(base, a), 20);
    CHECK_INT(r.err, -EPIPE);
    ctl = control_free(ctl);

    /* It has said hello and no step: asked. */
    if (!(ctl = new_control(&o, path)))
        return;
    a = spawn_asked(path, 0, false);
    want_workers = 1;
    run_until(base, enough_workers, NULL);
    checkpoint_now(&r, base, 2, ck, 5000);
    CHECK_INT(wait_child(base, a), 21);
    ctl = control_free(ctl);

    /* Two that train: both asked, so that they save one step. */
    if (!(ctl = new_control(&o, path)))
        return;
    a = spawn_asked(path, 0, true);
    b = spawn_asked(path, 1, true);
    want_workers = 2;
    run_until(base, enough_workers, NULL);
    run_until(base, stepped_5, NULL);
    checkpoint_now(&r, base, 3, ck, 5000);
    CHECK_INT(wait_child(base, a), 21);
    CHECK_INT(wait_child(base, b), 21);

    teardown(base, dir);
}

/* ---- a terminating notice's hold -------------------------------------------------------- */

enum hold_kind {
    HOLDS,                         /* answers with hold_ms: it waits at its step */
    HOLDS_ON,                      /* so, and stays until the checkpoint's cancel */
    OLD,                           /* answers without (an older libckpt) */
    RELEASES,                      /* holds; trains on once the test writes to go[1] */
    RELEASES_LATE,                 /* holds; trains on once the checkpoint came */
    NO_HOLD,                       /* expects a query without hold_ms */
};

/* A line from fd into buf (up to the newline, which is cut); exits 13 at
 * the end of the stream. */
static void read_line(int fd, char *buf, size_t size)
{
    size_t len = 0;

    while (len + 1 < size) {
        if (read(fd, buf + len, 1) != 1)
            _exit(13);
        if (buf[len] == '\n')
            break;
        len++;
    }
    buf[len] = '\0';
}

static long long member(const char *line, const char *key)
{
    const char *p = strstr(line, key);

    return p ? atoll(p + strlen(key)) : -1;
}

/* A worker by hand, in a child process: hello as local rank rank, a
 * progress report, then the answer to the query (step 7) as kind says;
 * its exit: 40 plus the step of the checkpoint less 7, 50 a cancel, 30 a
 * query with no hold_ms where one was due, 31 one where none was, 23 no
 * cancel after the checkpoint (HOLDS_ON). */
static int go[2];

static pid_t spawn_holder(const char *path, int rank, enum hold_kind kind)
{
    static const char progress[] = "{\"v\":1,\"type\":\"progress\",\"step\":6}\n";
    pid_t pid = fork();
    char line[4096], out[256];
    long long id;
    int fd, n;

    if (pid != 0)
        return pid;
    fd = hello_by_hand(path, rank, "");
    if (write(fd, progress, sizeof(progress) - 1) != (ssize_t)sizeof(progress) - 1)
        _exit(12);
    read_line(fd, line, sizeof(line)); /* the welcome */
    read_line(fd, line, sizeof(line));
    if (!strstr(line, "\"type\":\"query\""))
        _exit(22);
    if (kind == NO_HOLD ? strstr(line, "hold_ms") != NULL : member(line, "\"hold_ms\":") <= 0)
        _exit(kind == NO_HOLD ? 31 : 30);
    id = member(line, "\"id\":");
    n = snprintf(out, sizeof(out), "{\"v\":1,\"type\":\"step\",\"id\":%lld,\"step\":7%s}\n", id,
                 kind == OLD || kind == NO_HOLD ? "" : ",\"hold_ms\":1000");
    if (write(fd, out, (size_t)n) != n)
        _exit(12);
    n = snprintf(out, sizeof(out), "{\"v\":1,\"type\":\"released\",\"id\":%lld,\"step\":7}\n", id);
    if (kind == RELEASES && (read(go[0], line, 1) != 1 || write(fd, out, (size_t)n) != n))
        _exit(12);
    read_line(fd, line, sizeof(line));
    if (kind == RELEASES_LATE) {
        if (write(fd, out, (size_t)n) != n)
            _exit(12);
        read_line(fd, line, sizeof(line));
    }
    if (strstr(line, "\"type\":\"cancel\""))
        _exit(50);
    if (!strstr(line, "\"type\":\"checkpoint\""))
        _exit(22);
    n = (int)(40 + member(line, "\"step\":") - 7);
    if (kind == HOLDS_ON)
        read_line(fd, line, sizeof(line));
    _exit(kind == HOLDS_ON && !strstr(line, "\"type\":\"cancel\"") ? 23 : n);
}

static long long asked[4];
static int n_asked;

static void on_asked(void *arg, int64_t step)
{
    if (n_asked < 4)
        asked[n_asked] = step;
    n_asked++;
}

static int asked_n(void *arg)
{
    return n_asked >= *(int *)arg;
}

/* A control at path with two workers started by hand (ka, kb); the
 * checkpoint of generation hold_gen holds.  false when it cannot open. */
static bool two_holders(struct control_opts *o, const char *path, uint64_t hold_gen,
                        enum hold_kind ka, enum hold_kind kb, pid_t *a, pid_t *b)
{
    if (!(ctl = new_control(o, path)))
        return false;
    control_hold_next(ctl, hold_gen);
    *a = spawn_holder(path, 0, ka);
    *b = spawn_holder(path, 1, kb);
    want_workers = 2;
    run_until(o->base, enough_workers, NULL);
    CHECK_INT(control_workers(ctl), 2);
    return true;
}

/* A checkpoint of gen without a caller's step, the workers ka and kb, the
 * hold for hold_gen: both must say they were asked for 7 + want. */
static void hold_case(struct control_opts *o, const char *path, const char *ck,
                      uint64_t hold_gen, uint64_t gen, enum hold_kind ka, enum hold_kind kb,
                      int want)
{
    struct result r;
    pid_t a, b;

    if (!two_holders(o, path, hold_gen, ka, kb, &a, &b))
        return;
    checkpoint_now(&r, o->base, gen, ck, 20000);
    CHECK_INT(wait_child(o->base, a), 40 + want);
    CHECK_INT(wait_child(o->base, b), 40 + want);
    ctl = control_free(ctl);
}

/* At a terminating notice (control_hold_next()) the workers wait at the
 * step they answer, so that the checkpoint names that step, not the next;
 * a worker that does not hold (an older libckpt), or that trains on, moves
 * the step to the next; one that trains on after the step was named fails
 * the checkpoint. */
TEST(control_hold)
{
    char dir[] = "/tmp/spotd-control.XXXXXX", path[64], ck[64];
    struct event_base *base = event_base_new();
    struct control_opts o = { .base = base, .gone_ms = 1 };
    struct result r = { .base = base };
    int two = 2, one = 1;
    pid_t a, b;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/ctl.sock", dir);
    snprintf(ck, sizeof(ck), "%s/g1", dir);
    mkdir(ck, 0700);

    /* Both hold at 7: they save 7.  One holds, one cannot: 8, which both
     * reach.  Without the notice no one holds (the hold is its
     * generation's only). */
    hold_case(&o, path, ck, 1, 1, HOLDS, HOLDS, 0);
    hold_case(&o, path, ck, 2, 2, HOLDS, OLD, 1);
    hold_case(&o, path, ck, 2, 3, NO_HOLD, NO_HOLD, 1);

    /* A world's: the caller hears 6 (it adds one); a worker that trains
     * on makes it 7, and 7 can no longer be saved. */
    CHECK_INT(pipe(go), 0);
    if (!two_holders(&o, path, 4, HOLDS, RELEASES, &a, &b))
        return;
    memset(&r, 0, sizeof(r));
    r.base = base;
    n_asked = 0;
    CHECK_INT(control_checkpoint(ctl, 4, ck, notice_now_ms() + 20000, on_asked, on_saved, &r), 0);
    run_until(base, asked_n, &one);
    CHECK_INT(write(go[1], "x", 1), 1);
    run_until(base, asked_n, &two);
    close(go[0]);
    close(go[1]);
    CHECK_INT(n_asked, 2);
    CHECK_INT(asked[0], 6);
    CHECK_INT(asked[1], 7);
    CHECK_INT(control_save_at(ctl, 7), -ERANGE);
    CHECK_INT(control_save_at(ctl, 8), 0);
    CHECK_INT(wait_child(base, a), 41);
    CHECK_INT(wait_child(base, b), 41);
    ctl = control_free(ctl);

    /* One trains on once 7 was named: the checkpoint fails, with why. */
    if (!two_holders(&o, path, 5, HOLDS_ON, RELEASES_LATE, &a, &b))
        return;
    memset(&r, 0, sizeof(r));
    r.base = base;
    n_asked = 0;
    CHECK_INT(control_checkpoint(ctl, 5, ck, notice_now_ms() + 20000, on_asked, on_saved, &r), 0);
    run_until(base, asked_n, &one);
    CHECK_INT(asked[0], 6);
    CHECK_INT(control_save_at(ctl, 7), 0);
    run_until(base, got_result, &r);
    CHECK_INT(r.err, -ERANGE);
    CHECK_HAS(r.msg, "trained on from step 7");
    CHECK_INT(wait_child(base, a), 40);
    CHECK_INT(wait_child(base, b), 50);

    teardown(base, dir);
}
