#include <cjson/cJSON.h>
#include <regex.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "spot/log.h"

TEST(log_timestamp)
{
    char ts[LOG_TS_LEN];
    regex_t re;

    CHECK_INT(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$",
                      REG_EXTENDED | REG_NOSUB), 0);
    CHECK_INT(regexec(&re, log_timestamp(ts), 0, NULL, 0), 0);
    regfree(&re);
}

TEST(log_format_text)
{
    cJSON *rec = cJSON_CreateObject();
    const char *argv[] = { "sh", "-c", "exit 3" };
    char buf[512];

    cJSON_AddStringToObject(rec, "event", "child_start");
    cJSON_AddNumberToObject(rec, "pid", 42);
    cJSON_AddItemToObject(rec, "argv", cJSON_CreateStringArray(argv, 3));
    cJSON_AddStringToObject(rec, "msg", "say \"hi\"\n");
    cJSON_AddBoolToObject(rec, "ok", 1);
    cJSON_AddNumberToObject(rec, "ratio", 0.5);
    cJSON_AddStringToObject(rec, "empty", "");
    cJSON *sub = cJSON_AddObjectToObject(rec, "settings");
    cJSON_AddStringToObject(sub, "grace", "30s");
    cJSON_AddNullToObject(sub, "store");
    log_format_text(rec, buf, sizeof(buf));
    CHECK_STR(buf, "event=child_start pid=42 argv=\"sh -c 'exit 3'\" msg=\"say \\\"hi\\\"\\n\" "
                   "ok=true ratio=0.5 empty=\"\" settings.grace=30s");
    /* Truncation keeps the buffer terminated. */
    CHECK_INT(log_format_text(rec, buf, 10), 9);
    CHECK_INT(strlen(buf), 9);
    cJSON_Delete(rec);
}

TEST(log_event_file)
{
    char path[] = "/tmp/spotd-unit-events.XXXXXX", line[1024];
    int fd = mkstemp(path);
    FILE *f;
    cJSON *e, *back;

    CHECK(fd >= 0);
    close(fd);
    /* Threshold error: nothing reaches stderr, the event still reaches the file. */
    CHECK_INT(log_open(LOG_TEXT, LOGL_ERROR, path), 0);
    e = log_event_new("child_exit");
    cJSON_AddNumberToObject(e, "code", 3);
    log_event(LOGL_INFO, e, "command exited with code %d", 3);
    log_event(LOGL_INFO, log_event_new("exit"), "bye");
    log_close();
    f = fopen(path, "r");
    CHECK(f != NULL);
    if (f && fgets(line, sizeof(line), f)) {
        back = cJSON_Parse(line);
        CHECK(back != NULL);
        CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(back, "event")), "child_exit");
        CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(back, "code")) == 3);
        CHECK(cJSON_GetObjectItem(back, "ts") != NULL);
        CHECK(cJSON_GetObjectItem(back, "msg") == NULL);   /* messages stay on stderr */
        CHECK(cJSON_GetObjectItem(back, "level") == NULL);
        cJSON_Delete(back);
        CHECK(fgets(line, sizeof(line), f) != NULL);
        CHECK_HAS(line, "\"event\":\"exit\"");
        CHECK(fgets(line, sizeof(line), f) == NULL);
    }
    if (f)
        fclose(f);
    unlink(path);
    CHECK(log_open(LOG_TEXT, LOGL_INFO, "/nonexistent/dir/events") < 0);
}

/* The lines of path that are whole JSON objects with "event" ev, in
 * order, as "a b c"; a line that is not one counts as "?". */
static void events_in(const char *path, char *out, size_t size)
{
    char line[4096];
    FILE *f = fopen(path, "r");

    out[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        cJSON *rec = strchr(line, '\n') ? cJSON_Parse(line) : NULL;
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "event"));

        snprintf(out + strlen(out), size - strlen(out), "%s%s", out[0] ? " " : "",
                 ev ? ev : "?");
        cJSON_Delete(rec);
    }
    if (f)
        fclose(f);
}

static int count_in(const char *path, const char *needle)
{
    char line[4096];
    FILE *f = fopen(path, "r");
    int n = 0;

    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* One record of about 200 bytes. */
static void padded_event(const char *name)
{
    cJSON *e = log_event_new(name);
    char pad[141];

    memset(pad, 'x', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    cJSON_AddStringToObject(e, "pad", pad);
    log_event(LOGL_DEBUG, e, "%s", name);
}

/* A file that takes only part of a record (RLIMIT_FSIZE makes the short
 * write a full disk makes): the part is taken back, the record dropped
 * and counted, said once on stderr until a record is written again. */
TEST(log_event_full)
{
    char path[] = "/tmp/spotd-unit-events.XXXXXX", errs[] = "/tmp/spotd-unit-stderr.XXXXXX";
    int fd = mkstemp(path), efd = mkstemp(errs), status = -1;
    pid_t pid;

    CHECK(fd >= 0 && efd >= 0);
    close(fd);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        struct rlimit rl;
        struct stat st;
        char seq[256];

        dup2(efd, STDERR_FILENO);
        signal(SIGXFSZ, SIG_IGN);
        CHECK_INT(log_open(LOG_TEXT, LOGL_INFO, path), 0);
        /* bigger than what stderr gets, which the limit binds too */
        for (int i = 0; i < 5; i++)
            padded_event("a");
        CHECK_INT(stat(path, &st), 0);
        getrlimit(RLIMIT_FSIZE, &rl);
        rl.rlim_cur = (rlim_t)st.st_size + 100;
        CHECK_INT(setrlimit(RLIMIT_FSIZE, &rl), 0);
        padded_event("b"); /* 100 bytes of it fit */
        padded_event("c");
        CHECK_INT(log_events_dropped(), 2);
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_FSIZE, &rl);
        padded_event("d");
        CHECK_INT(stat(path, &st), 0);
        rl.rlim_cur = (rlim_t)st.st_size + 50;
        setrlimit(RLIMIT_FSIZE, &rl);
        padded_event("e");
        CHECK_INT(log_events_dropped(), 3);
        log_close();
        events_in(path, seq, sizeof(seq));
        CHECK_STR(seq, "a a a a a d");
        CHECK_INT(count_in(errs, "cannot write the event log"), 2);
        CHECK_INT(count_in(errs, "': it took 100 of a record's "), 1);
        CHECK_INT(count_in(errs, "is written again; 2 records were dropped"), 1);
        fflush(stdout);
        _exit(harness_failed);
    }
    CHECK(pid > 0);
    waitpid(pid, &status, 0);
    CHECK_INT(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
    close(efd);
    unlink(path);
    unlink(errs);
}

/* /dev/full: nothing is written, every record is counted, one warning. */
TEST(log_event_dev_full)
{
    char errs[] = "/tmp/spotd-unit-stderr.XXXXXX";
    int efd = mkstemp(errs), saved = dup(STDERR_FILENO);
    uint64_t before = log_events_dropped();

    CHECK(efd >= 0 && saved >= 0);
    dup2(efd, STDERR_FILENO);
    CHECK_INT(log_open(LOG_TEXT, LOGL_INFO, "/dev/full"), 0);
    for (int i = 0; i < 3; i++)
        padded_event("x");
    log_close();
    dup2(saved, STDERR_FILENO);
    close(saved);
    CHECK_INT(log_events_dropped() - before, 3);
    CHECK_INT(count_in(errs, "cannot write the event log '/dev/full': No space left on device"), 1);
    close(efd);
    unlink(errs);
}
