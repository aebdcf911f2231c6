#include <cjson/cJSON.h>
#include <regex.h>
#include <stdlib.h>
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
