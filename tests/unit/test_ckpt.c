#include "ckpt.h"
#include "harness.h"

TEST(ckpt_strerror)
{
    CHECK_STR(ckpt_strerror(CKPT_OK), "success");
    CHECK_STR(ckpt_strerror(CKPT_E_CONNECT), "cannot connect to spotd's control socket");
    CHECK_STR(ckpt_strerror(CKPT_E_IO), "system call failed (see errno)");
    CHECK_STR(ckpt_strerror(CKPT_E_TIMEOUT), "spotd did not answer in time");
    CHECK_STR(ckpt_strerror(-11), "unknown error");
    CHECK_STR(ckpt_strerror(1), "unknown error");
    CHECK_STR(ckpt_strerror(-2147483647 - 1), "unknown error");
    CHECK_STR(ckpt_version(), "0.2.0");
}

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libckpt/jsonl.h"

TEST(ckpt_inert)
{
    struct ckpt *c = NULL;

    unsetenv("SPOT_SOCKET");
    CHECK_INT(ckpt_open(&c), 0);
    CHECK(c != NULL);
    CHECK_INT(ckpt_inert(c), 1);
    CHECK(ckpt_resume_dir(c) == NULL);
    CHECK_INT(ckpt_resume_step(c), -1);
    for (long long s = 0; s < 1000; s++)
        CHECK_INT(ckpt_step(c, s), CKPT_CONTINUE);
    CHECK(ckpt_save_dir(c) == NULL);
    CHECK_INT(ckpt_saved(c, 5), CKPT_E_STATE);
    CHECK_INT(ckpt_request_save(c), 0);
    CHECK_INT(ckpt_file_done(c, "state.bin"), 0);
    CHECK_INT(ckpt_file_done(NULL, "state.bin"), CKPT_E_INVAL);
    CHECK_INT(ckpt_fd(c), -1);
    CHECK_INT(ckpt_step(c, -1), CKPT_E_INVAL);
    CHECK_INT(ckpt_open_at("/nonexistent/spotd.sock", &c), CKPT_E_CONNECT);
    ckpt_close(c);
    ckpt_close(NULL);
}

/* The spotd side of one scripted conversation, in a child process: exits
 * 0 when every line from the trainer was the one expected.  heard_path:
 * the "path" of the last line heard, when it had one. */
static char heard_path[256];

static int script_line(FILE *in, const char *type, const char *key, long long want)
{
    char line[4096];
    struct jsonl_msg m;
    const struct jsonl_value *v;

    /* Progress reports (one a second) may come between any two. */
    do {
        if (!fgets(line, sizeof(line), in) || !strchr(line, '\n'))
            return 1;
    } while (strstr(line, "\"type\":\"progress\""));
    if (jsonl_parse(line, strlen(line) - 1, &m) < 0 || !jsonl_type(&m) ||
        strcmp(jsonl_type(&m), type) != 0)
        return 2;
    if ((v = jsonl_get(&m, "path")) && v->type == JSONL_STRING)
        snprintf(heard_path, sizeof(heard_path), "%s", v->str);
    if (key && (!(v = jsonl_get(&m, key)) || (v->type != JSONL_INT && v->type != JSONL_BOOL) ||
                v->num != want))
        return 3;
    return 0;
}

/* One conversation on lfd's first connection: script (which returns 0
 * when all went as written), then the trainer's close.  Its exit code. */
static int converse(int lfd, int (*script)(int fd, FILE *in))
{
    int fd = accept(lfd, NULL, NULL);
    FILE *in = fd >= 0 ? fdopen(dup(fd), "r") : NULL;
    int r;

    if (!in)
        return 10;
    r = script(fd, in);
    /* Wait for the trainer to close, then end. */
    if (!r && fgetc(in) != EOF)
        r = 11;
    fclose(in);
    close(fd);
    return r;
}

/* The fake spotd in pid ended its conversation as scripted. */
static void converse_ok(pid_t pid)
{
    int status = -1;

    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK_INT(WEXITSTATUS(status), 0);
}

#define SAY(s) (r = r ? r : (write(fd, s "\n", sizeof(s)) == (ssize_t)sizeof(s) ? 0 : 9))
#define HEAR(t, k, v) (r = r ? r : script_line(in, t, k, v))

static int conversation(int fd, FILE *in)
{
    int r = 0;

    HEAR("hello", "local_rank", 3);
    SAY("{\"v\":1,\"type\":\"welcome\",\"resume_dir\":\"/ck/g7\",\"resume_step\":700,\"gen\":7}"
        "\n{\"v\":1,\"type\":\"query\",\"id\":1}");
    HEAR("step", "step", 701);
    SAY("{\"v\":1,\"type\":\"checkpoint\",\"id\":2,\"gen\":8,\"step\":705,\"dir\":\"/ck/g8/w3\","
        "\"deadline\":null,\"future\":\"ignored\"}");
    HEAR("file_done", NULL, 0);
    r = r ? r : strcmp(heard_path, "sub/\"a\".bin") != 0 ? 12 : 0;
    HEAR("saved", "step", 705);
    HEAR("saved", "id", 0);
    HEAR("request", "step", 710);
    SAY("{\"v\":1,\"type\":\"checkpoint\",\"id\":3,\"gen\":9,\"step\":null,\"dir\":\"/ck/g9/w3\","
        "\"deadline\":\"2026-11-30T10:00:00Z\"}");
    HEAR("failed", "id", 3);
    SAY("{\"v\":1,\"type\":\"stop\",\"reason\":\"notice\"}");
    return r;
}

/* A listening socket at dir/ctl.sock, dir made from its template; path
 * (64 bytes) gets the socket's path. */
static int listen_in(char *dir, char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int lfd;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, 64, "%s/ctl.sock", dir);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 4) == 0);
    return lfd;
}

TEST(ckpt_conversation)
{
    char dir[] = "/tmp/spotd-ckpt.XXXXXX", path[64];
    struct ckpt *c = NULL;
    int lfd = listen_in(dir, path), a;
    pid_t pid;

    pid = fork();
    if (pid == 0)
        _exit(converse(lfd, conversation));
    setenv("LOCAL_RANK", "3", 1);
    setenv("SPOT_SOCKET", path, 1);
    CHECK_INT(ckpt_open(&c), 0);
    unsetenv("SPOT_SOCKET");
    unsetenv("LOCAL_RANK");
    if (c) {
        CHECK_INT(ckpt_inert(c), 0);
        CHECK(ckpt_fd(c) >= 0);
        CHECK_STR(ckpt_resume_dir(c), "/ck/g7");
        CHECK_INT(ckpt_resume_step(c), 700);
        /* The query that came with the welcome is answered at step 701. */
        CHECK_INT(ckpt_step(c, 701), CKPT_CONTINUE);
        /* The checkpoint at step 705 arrives; steps before it go on. */
        for (long long s = 702, n = 0; s < 705; s++) {
            while ((a = ckpt_step(c, s)) == CKPT_CONTINUE && n++ < 2000 && s == 704)
                usleep(1000);
            if (s < 704)
                CHECK_INT(a, CKPT_CONTINUE);
        }
        CHECK_INT(ckpt_step(c, 705), CKPT_SAVE);
        CHECK_STR(ckpt_save_dir(c), "/ck/g8/w3");
        CHECK_INT(ckpt_step(c, 706), CKPT_E_STATE);
        /* A finished file is said, its name escaped; one that is not
         * UTF-8 cannot be, and nothing goes. */
        CHECK_INT(ckpt_file_done(c, "sub/\"a\".bin"), 0);
        CHECK_INT(ckpt_file_done(c, "bad\xff"), CKPT_E_INVAL);
        CHECK_INT(ckpt_file_done(c, ""), CKPT_E_INVAL);
        CHECK_INT(ckpt_saved(c, 705), 0);
        CHECK(ckpt_save_dir(c) == NULL);
        /* No save open, connected: the signal method's report (id 0). */
        CHECK_INT(ckpt_saved(c, 705), 0);
        CHECK_INT(ckpt_step(c, 710), CKPT_CONTINUE);
        CHECK_INT(ckpt_request_save(c), 0);
        /* A checkpoint with no step: the next step saves. */
        for (int n = 0; (a = ckpt_step(c, 711)) == CKPT_CONTINUE && n < 2000; n++)
            usleep(1000);
        CHECK_INT(a, CKPT_SAVE);
        CHECK_STR(ckpt_save_dir(c), "/ck/g9/w3");
        CHECK_INT(ckpt_failed(c, "disk \"full\"\n"), 0);
        for (int n = 0; (a = ckpt_step(c, 712)) == CKPT_CONTINUE && n < 2000; n++)
            usleep(1000);
        CHECK_INT(a, CKPT_STOP);
        ckpt_close(c);
    }
    converse_ok(pid);
    close(lfd);
    unlink(path);
    rmdir(dir);
}

/* A terminating notice's query: the trainer holds at the step it answers
 * until the checkpoint comes (and saves that step), or says it trains on
 * once the hold ran out, and then waits at its next step as after any
 * answer. */
static int holding_conversation(int fd, FILE *in)
{
    int r = 0;

    HEAR("hello", NULL, 0);
    SAY("{\"v\":1,\"type\":\"welcome\",\"resume_dir\":null,\"resume_step\":null,\"gen\":null}"
        "\n{\"v\":1,\"type\":\"query\",\"id\":1,\"hold_ms\":20000}");
    HEAR("step", "step", 10);
    usleep(200 * 1000);
    SAY("{\"v\":1,\"type\":\"checkpoint\",\"id\":1,\"gen\":1,\"step\":10,\"dir\":\"/ck/g1/w0\","
        "\"deadline\":null}");
    HEAR("saved", "step", 10);
    SAY("{\"v\":1,\"type\":\"query\",\"id\":2,\"hold_ms\":300}");
    HEAR("step", "hold_ms", 300);
    HEAR("released", "step", 11);
    SAY("{\"v\":1,\"type\":\"checkpoint\",\"id\":2,\"gen\":2,\"step\":12,\"dir\":\"/ck/g2/w0\","
        "\"deadline\":null}");
    HEAR("saved", "step", 12);
    SAY("{\"v\":1,\"type\":\"stop\",\"reason\":\"notice\"}");
    return r;
}
/* --early-start: the welcome says the folder is being restored; the
 * trainer waits in ckpt_resume_wait() until "restored" (a first
 * connection: verified; a second: failed). */
static int restoring_conversation(int fd, FILE *in)
{
    int r = 0;

    HEAR("hello", "resume_wait", 1);
    SAY("{\"v\":1,\"type\":\"welcome\",\"resume_dir\":\"/ck/g3/w0\",\"resume_step\":30,"
        "\"gen\":3,\"restoring\":true}");
    HEAR("request", NULL, 0); /* the trainer's sign that it waits (below) */
    SAY("{\"v\":1,\"type\":\"restored\",\"error\":null}");
    return r;
}

static int failed_restore_conversation(int fd, FILE *in)
{
    int r = 0;

    HEAR("hello", NULL, 0);
    SAY("{\"v\":1,\"type\":\"welcome\",\"resume_dir\":\"/ck/g3/w0\",\"resume_step\":30,"
        "\"gen\":3,\"restoring\":true}\n{\"v\":1,\"type\":\"restored\","
        "\"error\":\"chunk 5 is corrupt\"}");
    return r;
}
#undef SAY
#undef HEAR

TEST(ckpt_resume_wait)
{
    char dir[] = "/tmp/spotd-ckpt.XXXXXX", path[64];
    struct ckpt *c = NULL;
    int lfd = listen_in(dir, path);
    pid_t pid;

    /* Inert, or not restoring: no wait. */
    CHECK_INT(ckpt_open_at(NULL, &c), 0);
    CHECK_INT(ckpt_resume_wait(c, 0), 0);
    ckpt_close(c);
    CHECK_INT(ckpt_resume_wait(NULL, 0), CKPT_E_INVAL);

    pid = fork();
    if (pid == 0)
        _exit(converse(lfd, restoring_conversation));
    CHECK_INT(ckpt_open_at(path, &c), 0);
    if (c) {
        CHECK_STR(ckpt_resume_dir(c), "/ck/g3/w0");
        /* Nothing yet: the wait times out, and may be tried again. */
        CHECK_INT(ckpt_resume_wait(c, 50), CKPT_E_TIMEOUT);
        /* The fake spotd says "restored" once it hears a request. */
        CHECK_INT(ckpt_request_save(c), 0);
        CHECK_INT(ckpt_resume_wait(c, 10000), 0);
        CHECK_INT(ckpt_resume_wait(c, 0), 0);
        ckpt_close(c);
    }
    converse_ok(pid);

    pid = fork();
    if (pid == 0)
        _exit(converse(lfd, failed_restore_conversation));
    CHECK_INT(ckpt_open_at(path, &c), 0);
    if (c) {
        CHECK_INT(ckpt_resume_wait(c, -1), CKPT_E_RESTORE);
        CHECK_STR(ckpt_strerror(CKPT_E_RESTORE),
                  "the checkpoint to resume from could not be restored");
        ckpt_close(c);
    }
    converse_ok(pid);
    close(lfd);
    unlink(path);
    rmdir(dir);
}

TEST(ckpt_hold)
{
    char dir[] = "/tmp/spotd-ckpt.XXXXXX", path[64];
    struct ckpt *c = NULL;
    int lfd = listen_in(dir, path), a;
    pid_t pid;

    pid = fork();
    if (pid == 0)
        _exit(converse(lfd, holding_conversation));
    CHECK_INT(ckpt_open_at(path, &c), 0);
    if (c) {
        /* Held at 10 until the checkpoint named 10: saved at once. */
        CHECK_INT(ckpt_step(c, 10), CKPT_SAVE);
        CHECK_STR(ckpt_save_dir(c), "/ck/g1/w0");
        CHECK_INT(ckpt_saved(c, 10), 0);
        /* Held at 11 for 300 ms, nothing came: it trains on, and 12 waits
         * for the checkpoint that follows. */
        for (int n = 0; (a = ckpt_step(c, 11)) == CKPT_CONTINUE && n < 2000; n++)
            usleep(1000);
        CHECK_INT(a, CKPT_CONTINUE);
        CHECK_INT(ckpt_step(c, 12), CKPT_SAVE);
        CHECK_STR(ckpt_save_dir(c), "/ck/g2/w0");
        CHECK_INT(ckpt_saved(c, 12), 0);
        for (int n = 0; (a = ckpt_step(c, 13)) == CKPT_CONTINUE && n < 2000; n++)
            usleep(1000);
        CHECK_INT(a, CKPT_STOP);
        ckpt_close(c);
    }
    converse_ok(pid);
    close(lfd);
    unlink(path);
    rmdir(dir);
}

TEST(ckpt_bad_peer)
{
    /* A peer that speaks another version, or garbage, is refused. */
    static const char *const answers[] = {
        "{\"v\":2,\"type\":\"welcome\"}\n",
        "not json\n",
        "{\"v\":1,\"type\":\"checkpoint\",\"id\":1,\"dir\":\"/x\"}\n",
        "{\"v\":1,\"type\":\"welcome\",\"resume_dir\":5}\n",
    };
    static const int want[] = { CKPT_E_VERSION, CKPT_E_PROTOCOL, CKPT_E_PROTOCOL,
                                CKPT_E_PROTOCOL };

    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        char dir[] = "/tmp/spotd-ckpt.XXXXXX", path[64];
        struct ckpt *c = NULL;
        int lfd = listen_in(dir, path), status;
        pid_t pid;

        pid = fork();
        if (pid == 0) {
            int fd = accept(lfd, NULL, NULL);
            char buf[512];
            ssize_t n = read(fd, buf, sizeof(buf));
            _exit(n > 0 && write(fd, answers[i], strlen(answers[i])) > 0 ? 0 : 1);
        }
        CHECK_INT(ckpt_open_at(path, &c), want[i]);
        CHECK(c == NULL);
        waitpid(pid, &status, 0);
        close(lfd);
        unlink(path);
        rmdir(dir);
    }
}

TEST(jsonl_parse_build)
{
    char line[256], out[256];
    struct jsonl_msg m;
    struct jsonl_kv kv[] = { JSONL_STR("type", "failed"), JSONL_INT("id", -3),
                             JSONL_STR("reason", "a \"b\"\\\n\x01 é") };
    int len = jsonl_build(out, sizeof(out), kv, 3);

    CHECK(len > 0);
    CHECK_STR(out, "{\"v\":1,\"type\":\"failed\",\"id\":-3,\"reason\":\"a \\\"b\\\"\\\\\\u000a\\u0001 é\"}\n");
    CHECK_INT(jsonl_parse(out, (size_t)len - 1, &m), 0);
    CHECK_STR(jsonl_type(&m), "failed");
    CHECK_INT(jsonl_get(&m, "id")->num, -3);
    CHECK_STR(jsonl_get(&m, "reason")->str, "a \"b\"\\\n\x01 é");
    CHECK_INT(jsonl_build(out, 10, kv, 3), -1);
    snprintf(line, sizeof(line), "{ \"a\" : \"\\ud83d\\ude00\", \"b\":true,\"c\":null }");
    CHECK_INT(jsonl_parse(line, strlen(line), &m), 0);
    CHECK_STR(jsonl_get(&m, "a")->str, "\xf0\x9f\x98\x80");
    CHECK_INT(jsonl_get(&m, "b")->type, JSONL_BOOL);
    CHECK_INT(jsonl_get(&m, "c")->type, JSONL_NULL);
    static const char *const bad[] = {
        "", "{", "[]", "{\"a\":1,}", "{\"a\":1}x", "{\"a\":1,\"a\":2}", "{\"a\":1.5}",
        "{\"a\":1e3}", "{\"a\":01}", "{\"a\":{}}", "{\"a\":[1]}", "{\"a\":\"\\u0000\"}",
        "{\"a\":\"\\ud800\"}", "{\"a\":\"\xc3\"}", "{\"a\":\"\xc0\x80\"}", "{\"a\":\"x\ty\"}",
        "{\"a\":9007199254740992}", "{\"a\":tru}", "{a:1}", "{\"a\":\"\\x\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(line, sizeof(line), "%s", bad[i]);
        if (jsonl_parse(line, strlen(line), &m) != -1) {
            printf("  accepted: %s\n", bad[i]);
            harness_failed = 1;
        }
    }
}
