/* supervisord/control.c with real libckpt clients in child processes. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

    ctl = control_free(ctl);
    event_base_free(base);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CHECK_INT(system(cmd), 0);
    }
}
