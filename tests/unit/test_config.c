#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "spot/config.h"
#include "spot/log.h"

static int load(struct config *c, const char *json, char *err, size_t errlen)
{
    return config_load_json(c, "test.json", json, strlen(json), err, errlen);
}

TEST(config_defaults)
{
    struct config c;

    CHECK_INT(config_init(&c), 0);
    CHECK_INT(config_num(&c, OPT_RESTART), RESTART_NEVER);
    CHECK_INT(config_num(&c, OPT_MAX_RESTARTS), 10);
    CHECK_INT(config_num(&c, OPT_GRACE), 30000);
    CHECK_INT(config_num(&c, OPT_STOP_SIGNAL), SIGTERM);
    CHECK(config_str(&c, OPT_EVENTS) == NULL);
    CHECK(config_str(&c, OPT_STORE) == NULL);
    for (int i = 0; i < OPT__COUNT; i++) {
        CHECK(config_options[i].key != NULL);
        CHECK(config_options[i].help != NULL);
        CHECK_INT(c.v[i].source, CONFIG_DEFAULT);
    }
    config_release(&c);
}

TEST(config_set_errors)
{
    struct config c;
    char err[512];

    config_init(&c);
    CHECK_INT(config_set(&c, OPT_GRACE, "5x", CONFIG_FLAG, "--grace", err, sizeof(err)), -EINVAL);
    CHECK_STR(err, "invalid grace '5x' (from --grace): expected a duration such as 500ms, 30s, "
                   "5m or 1h, at most 720h");
    CHECK_INT(config_num(&c, OPT_GRACE), 30000); /* untouched */
    CHECK_INT(config_set(&c, OPT_RESTART, "sometimes", CONFIG_ENV, "SPOTD_RESTART", err,
                         sizeof(err)), -EINVAL);
    CHECK_STR(err, "invalid restart 'sometimes' (from SPOTD_RESTART): expected one of: never, "
                   "on-failure, always");
    CHECK_INT(config_set(&c, OPT_MAX_RESTARTS, "1000001", CONFIG_FLAG, "--max-restarts", err,
                         sizeof(err)), -EINVAL);
    CHECK_HAS(err, "from 0 to 1000000");
    CHECK_INT(config_set(&c, OPT_STOP_SIGNAL, "BOGUS", CONFIG_FLAG, "--stop-signal", err,
                         sizeof(err)), -EINVAL);
    CHECK_HAS(err, "signal name");
    /* Control characters in a value never reach the message raw. */
    CHECK_INT(config_set(&c, OPT_GRACE, "1\n2", CONFIG_FLAG, "--grace", err, sizeof(err)),
              -EINVAL);
    CHECK(strchr(err, '\n') == NULL);
    /* Secrets are not echoed even when wrong. */
    CHECK_INT(config_set(&c, OPT_WORLD_KEY, "", CONFIG_ENV, "SPOTD_WORLD_KEY", err, sizeof(err)),
              -EINVAL);
    CHECK_HAS(err, "<redacted>");

    CHECK_INT(config_set(&c, OPT_RESTART, "on-failure", CONFIG_FLAG, "--restart", err,
                         sizeof(err)), 0);
    CHECK_INT(config_num(&c, OPT_RESTART), RESTART_ON_FAILURE);
    CHECK_INT(config_set(&c, OPT_STOP_SIGNAL, "SIGINT", CONFIG_FLAG, "--stop-signal", err,
                         sizeof(err)), 0);
    CHECK_INT(config_num(&c, OPT_STOP_SIGNAL), SIGINT);
    CHECK_STR(c.v[OPT_STOP_SIGNAL].origin, "--stop-signal");
    /* spotd casts these indexes to the log enums. */
    CHECK_INT(config_set(&c, OPT_LOG_LEVEL, "warn", CONFIG_FLAG, "--log-level", err, sizeof(err)), 0);
    CHECK_INT(config_num(&c, OPT_LOG_LEVEL), LOGL_WARN);
    CHECK_INT(config_set(&c, OPT_LOG_LEVEL, "error", CONFIG_FLAG, "--log-level", err, sizeof(err)), 0);
    CHECK_INT(config_num(&c, OPT_LOG_LEVEL), LOGL_ERROR);
    CHECK_INT(config_set(&c, OPT_LOG_FORMAT, "json", CONFIG_FLAG, "--log-format", err, sizeof(err)), 0);
    CHECK_INT(config_num(&c, OPT_LOG_FORMAT), LOG_JSON);
    config_release(&c);
}

TEST(config_names)
{
    char buf[64];

    CHECK_INT(config_find_key("max_restarts"), OPT_MAX_RESTARTS);
    CHECK_INT(config_find_key("max-restarts"), -ENOENT);
    CHECK_INT(config_find_flag("--max-restarts"), OPT_MAX_RESTARTS);
    CHECK_INT(config_find_flag("--max_restarts"), -ENOENT);
    CHECK_INT(config_find_flag("--Grace"), -ENOENT);
    CHECK_INT(config_find_flag("-grace"), -ENOENT);
    CHECK_INT(config_find_flag("--world-key-file"), OPT_WORLD_KEY_FILE);
    CHECK_STR(config_flag_name(OPT_WORLD_KEY_FILE, buf, sizeof(buf)), "--world-key-file");
    CHECK_STR(config_env_name(OPT_WORLD_KEY_FILE, buf, sizeof(buf)), "SPOTD_WORLD_KEY_FILE");
    for (int i = 0; i < OPT__COUNT; i++)
        CHECK_INT(config_find_flag(config_flag_name((enum config_id)i, buf, sizeof(buf))), i);
}

TEST(config_json)
{
    struct config c;
    char err[512] = "";

    config_init(&c);
    CHECK_INT(load(&c, "{\"grace\": \"5m\", \"restart\": \"always\", \"max_restarts\": 3,\n"
                       " \"_comment\": [1, 2], \"stop_signal\": \"USR1\", \"events\": \"/tmp/e\"}",
                   err, sizeof(err)), 0);
    CHECK_STR(err, "");
    CHECK_INT(config_num(&c, OPT_GRACE), 300000);
    CHECK_INT(config_num(&c, OPT_RESTART), RESTART_ALWAYS);
    CHECK_INT(config_num(&c, OPT_MAX_RESTARTS), 3);
    CHECK_INT(config_num(&c, OPT_STOP_SIGNAL), SIGUSR1);
    CHECK_STR(config_str(&c, OPT_EVENTS), "/tmp/e");
    CHECK_INT(c.v[OPT_GRACE].source, CONFIG_FILE);
    CHECK_STR(c.v[OPT_GRACE].origin, "key 'grace' in test.json");
    /* null puts the default back. */
    CHECK_INT(load(&c, "{\"grace\": null, \"events\": null}", err, sizeof(err)), 0);
    CHECK_INT(config_num(&c, OPT_GRACE), 30000);
    CHECK(config_str(&c, OPT_EVENTS) == NULL);
    CHECK_INT(load(&c, "  {}  \n", err, sizeof(err)), 0);
    config_release(&c);
}

TEST(config_json_errors)
{
    static const struct {
        const char *json;
        const char *msg;
    } cases[] = {
        { "", "test.json:1:1: invalid JSON" },
        { "{\"grace\": \"1s\",\n \"restart\": }", "test.json:2:13: invalid JSON" },
        { "[]", "must be a JSON object" },
        { "\"grace\"", "must be a JSON object" },
        { "{} {}", "test.json:1:4: unexpected text after the JSON object" },
        { "{\"gracee\": \"1s\"}", "unknown key 'gracee' (did you mean 'grace'?)" },
        { "{\"zzzzzzzz\": \"1s\"}", "unknown key 'zzzzzzzz'; 'spotd help'" },
        { "{\"grace\": \"1s\", \"grace\": \"2s\"}", "key 'grace' appears twice" },
        { "{\"grace\": 30}", "invalid grace in test.json: expected a JSON string" },
        { "{\"max_restarts\": \"3\"}", "invalid max_restarts in test.json: expected a whole number" },
        { "{\"max_restarts\": 1.5}", "expected a whole number" },
        { "{\"max_restarts\": -1}", "expected a whole number" },
        { "{\"max_restarts\": 1e300}", "expected a whole number" },
        { "{\"restart\": \"sometimes\"}", "invalid restart 'sometimes' (from key 'restart' in test.json)" },
        { "{\"events\": \"\"}", "expected a non-empty string" },
        { "{\"events\": true}", "expected a JSON string" },
        /* "\u0000" would cut a string short: "3s\u0000junk" would be 3s. */
        { "{\"grace\": \"3s\\u0000junk\"}", "test.json:1:14: the value of key 'grace' holds a NUL" },
        { "{\"events\": \"\\u0000\"}", "the value of key 'events' holds a NUL character" },
        { "{\"command\": [\"sh\", \"-c\", \"a\\u0000b\"]}", "the value of key 'command' holds" },
        { "{\n  \"grace\\u0000x\": \"3s\"}", "test.json:2:9: the key 'grace\\u0000x' holds a NUL" },
        { "{\"_c\": \"x\", \"webhook\": \"http://h/\\u0000\"}", "key 'webhook' holds a NUL" },
    };
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct config c;
        config_init(&c);
        err[0] = '\0';
        if (load(&c, cases[i].json, err, sizeof(err)) != -EINVAL || !strstr(err, cases[i].msg)) {
            printf("  json %s: got \"%s\", expected \"%s\"\n", cases[i].json, err, cases[i].msg);
            harness_failed = 1;
        }
        CHECK_INT(config_num(&c, OPT_GRACE), 30000);
        CHECK(config_str(&c, OPT_EVENTS) == NULL && c.command == NULL);
        config_release(&c);
    }
    {
        struct config c;
        config_init(&c);
        CHECK_INT(config_load_json(&c, "nul.json", "{}\0{}", 5, err, sizeof(err)), -EINVAL);
        CHECK_HAS(err, "NUL");
        CHECK_INT(config_load_file(&c, "/nonexistent/spotd.json", err, sizeof(err)), -ENOENT);
        CHECK_HAS(err, "cannot open config file '/nonexistent/spotd.json'");
        CHECK_INT(config_load_file(&c, "/", err, sizeof(err)), -EINVAL);
        config_release(&c);
    }
}

TEST(config_env)
{
    const char *env[] = { "PATH=/bin",          "SPOTD_GRACE=5s",    "SPOTD_RESTART=",
                    "SPOTD_FOO=1",        "SPOTD_CONFIG=/x",   "SPOTD_MAX_RESTARTS=4",
                    "SPOTD_max_restarts=9", "SPOTD_=1",        "SPOTD_TEST_S3_MAX_KEYS=3",
                    NULL };
    const char *bad[] = { "SPOTD_GRACE=soon", NULL };
    char err[512], warn[512];
    struct config c;

    config_init(&c);
    CHECK_INT(config_load_env(&c, env, err, sizeof(err), warn, sizeof(warn)), 0);
    CHECK_INT(config_num(&c, OPT_GRACE), 5000);
    CHECK_STR(c.v[OPT_GRACE].origin, "SPOTD_GRACE");
    CHECK_INT(config_num(&c, OPT_RESTART), RESTART_NEVER); /* empty: skipped */
    CHECK_INT(config_num(&c, OPT_MAX_RESTARTS), 4);
    CHECK_HAS(warn, "SPOTD_FOO");
    CHECK_HAS(warn, "SPOTD_max_restarts");
    CHECK(strstr(warn, "SPOTD_CONFIG") == NULL);
    CHECK(strstr(warn, "SPOTD_TEST_") == NULL); /* the test suite's knobs */
    CHECK_INT(config_load_env(&c, bad, err, sizeof(err), warn, sizeof(warn)), -EINVAL);
    CHECK_STR(err, "invalid grace 'soon' (from SPOTD_GRACE): expected a duration such as "
                   "500ms, 30s, 5m or 1h, at most 720h");
    config_release(&c);
}

TEST(config_later)
{
    struct config c;
    char err[512];

    config_init(&c);
    CHECK_INT(config_check_implemented(&c, err, sizeof(err)), 0);
    /* Implemented since the world: no longer refused. */
    CHECK_INT(config_set(&c, OPT_PEERS, "a:1", CONFIG_FLAG, "--peers", err, sizeof(err)), 0);
    CHECK_INT(config_check_implemented(&c, err, sizeof(err)), 0);
    CHECK_INT(config_set(&c, OPT_PEERS, NULL, CONFIG_DEFAULT, "default", err, sizeof(err)), 0);
    /* Implemented since the orchestrator: no longer refused. */
    CHECK_INT(config_set(&c, OPT_STORE, "s3://b/p", CONFIG_FLAG, "--store", err, sizeof(err)), 0);
    CHECK_INT(config_check_implemented(&c, err, sizeof(err)), 0);
    CHECK_INT(config_set(&c, OPT_STORE, NULL, CONFIG_DEFAULT, "default", err, sizeof(err)), 0);
    CHECK_INT(config_check_implemented(&c, err, sizeof(err)), 0);
    /* A bad rank is a bad rank. */
    CHECK_INT(config_set(&c, OPT_RANK, "x", CONFIG_FLAG, "--rank", err, sizeof(err)), -EINVAL);
    CHECK_INT(config_set(&c, OPT_CLOUD, "oracle", CONFIG_FLAG, "--cloud", err, sizeof(err)),
              -EINVAL);
    CHECK_HAS(err, "aws, gcp, azure, alibaba, tencent");
    config_release(&c);
}

/* A secret option is refused from a flag: every user can read a command
 * line.  The file and the environment still give it. */
TEST(config_secret_flag)
{
    struct config c;
    char err[512];

    config_init(&c);
    CHECK_INT(config_set(&c, OPT_WEBHOOK, "http://h/T0KEN", CONFIG_FLAG, "--webhook", err,
                         sizeof(err)), -EINVAL);
    CHECK_HAS(err, "--webhook cannot be given on the command line");
    CHECK_HAS(err, "/proc/PID/cmdline");
    CHECK_HAS(err, "a file named by --webhook-file, the configuration file (\"webhook\") or "
                   "SPOTD_WEBHOOK");
    CHECK(strstr(err, "T0KEN") == NULL);
    CHECK(config_str(&c, OPT_WEBHOOK) == NULL);
    CHECK_INT(config_set(&c, OPT_WORLD_KEY, "k3y", CONFIG_FLAG, "--world-key", err,
                         sizeof(err)), -EINVAL);
    CHECK_HAS(err, "a file named by --world-key-file, the configuration file (\"world_key\") "
                   "or SPOTD_WORLD_KEY");
    CHECK(strstr(err, "k3y") == NULL);
    CHECK_INT(load(&c, "{\"webhook\": \"http://file/x\"}", err, sizeof(err)), 0);
    CHECK_STR(config_str(&c, OPT_WEBHOOK), "http://file/x");
    CHECK_INT(config_set(&c, OPT_WEBHOOK, "http://env/x", CONFIG_ENV, "SPOTD_WEBHOOK", err,
                         sizeof(err)), 0);
    CHECK_STR(config_str(&c, OPT_WEBHOOK), "http://env/x");
    /* The file of URLs is not a secret itself: a flag names it. */
    CHECK_INT(config_set(&c, OPT_WEBHOOK_FILE, "/etc/spotd/webhooks", CONFIG_FLAG,
                         "--webhook-file", err, sizeof(err)), 0);
    CHECK(!config_options[OPT_WEBHOOK_FILE].secret);
    /* A flag given twice: the last wins. */
    CHECK_INT(config_set(&c, OPT_GRACE, "1s", CONFIG_FLAG, "--grace", err, sizeof(err)), 0);
    CHECK_INT(config_set(&c, OPT_GRACE, "2s", CONFIG_FLAG, "--grace", err, sizeof(err)), 0);
    CHECK_INT(config_num(&c, OPT_GRACE), 2000);
    CHECK_INT(config_num(&c, OPT_PASS_CREDENTIALS), 0);
    CHECK_INT(config_set(&c, OPT_PASS_CREDENTIALS, "true", CONFIG_FLAG, "--pass-credentials",
                         err, sizeof(err)), 0);
    CHECK_INT(config_num(&c, OPT_PASS_CREDENTIALS), 1);
    config_release(&c);
}

/* "\u0000" in a string would cut it short (config_json_errors has those
 * refused); an escaped backslash before "u0000" is no NUL. */
TEST(config_json_nul)
{
    struct config c;
    char err[512];

    config_init(&c);
    CHECK_INT(load(&c, "{\"events\": \"a\\\\u0000b\"}", err, sizeof(err)), 0);
    CHECK_STR(config_str(&c, OPT_EVENTS), "a\\u0000b");
    config_release(&c);
}

/* --config names a FIFO, a device, a directory: refused at once, a FIFO
 * without waiting for a writer. */
TEST(config_file_kinds)
{
    char dir[] = "/tmp/spotd-unit.XXXXXX", fifo[64], err[512];
    struct config c;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    CHECK_INT(mkfifo(fifo, 0600), 0);
    config_init(&c);
    CHECK_INT(config_load_file(&c, fifo, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "is a FIFO; --config takes a regular file");
    CHECK_INT(config_load_file(&c, "/dev/null", err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "config file '/dev/null' is a character device");
    CHECK_INT(config_load_file(&c, dir, err, sizeof(err)), -EINVAL);
    CHECK_HAS(err, "is a directory");
    CHECK(c.file == NULL);
    config_release(&c);
    unlink(fifo);
    rmdir(dir);
}

TEST(config_to_json_redacts)
{
    struct config c;
    char err[512], *text;
    cJSON *j;

    config_init(&c);
    config_set(&c, OPT_WORLD_KEY, "hunter2", CONFIG_ENV, "SPOTD_WORLD_KEY", err, sizeof(err));
    config_set(&c, OPT_GRACE, "90s", CONFIG_FLAG, "--grace", err, sizeof(err));
    config_set(&c, OPT_STOP_SIGNAL, "2", CONFIG_FLAG, "--stop-signal", err, sizeof(err));
    j = config_to_json(&c);
    text = cJSON_PrintUnformatted(j);
    CHECK(text && strstr(text, "hunter2") == NULL);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "world_key")), "<redacted>");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "grace")), "90s");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "stop_signal")), "INT");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "restart")), "never");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "max_restarts")) == 10);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "events")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "command")));
    CHECK_INT(cJSON_GetArraySize(j), OPT__COUNT + 1); /* the options and "command" */
    free(text);
    cJSON_Delete(j);
    config_release(&c);
}
