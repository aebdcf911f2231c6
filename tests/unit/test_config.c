#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>

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
                    "SPOTD_max_restarts=9", "SPOTD_=1",        NULL };
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

/* --webhook A --webhook B: the second flag adds to the first; every other
 * option, and a flag after the file or the environment, replaces. */
TEST(config_repeat)
{
    struct config c;
    char err[512], big[4080];

    config_init(&c);
    CHECK(config_options[OPT_WEBHOOK].repeat);
    CHECK(!config_options[OPT_GRACE].repeat);
    CHECK_INT(load(&c, "{\"webhook\": \"http://file/x\"}", err, sizeof(err)), 0);
    CHECK_INT(config_set(&c, OPT_WEBHOOK, "http://env/x", CONFIG_ENV, "SPOTD_WEBHOOK", err,
                         sizeof(err)), 0);
    CHECK_STR(config_str(&c, OPT_WEBHOOK), "http://env/x");
    CHECK_INT(config_set(&c, OPT_WEBHOOK, "http://a/1", CONFIG_FLAG, "--webhook", err,
                         sizeof(err)), 0);
    CHECK_STR(config_str(&c, OPT_WEBHOOK), "http://a/1");
    CHECK_INT(config_set(&c, OPT_WEBHOOK, "http://b/2", CONFIG_FLAG, "--webhook", err,
                         sizeof(err)), 0);
    CHECK_STR(config_str(&c, OPT_WEBHOOK), "http://a/1 http://b/2");
    CHECK_INT(c.v[OPT_WEBHOOK].source, CONFIG_FLAG);
    /* Together they must still fit a value, and the refusal redacts them. */
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    CHECK_INT(config_set(&c, OPT_WEBHOOK, big, CONFIG_FLAG, "--webhook", err, sizeof(err)),
              -EINVAL);
    CHECK_HAS(err, "invalid webhook '<redacted>' (from --webhook, with the values before it)");
    CHECK(strstr(err, "http://a/1") == NULL);
    CHECK_STR(config_str(&c, OPT_WEBHOOK), "http://a/1 http://b/2");
    /* Not repeatable: the last flag wins. */
    CHECK_INT(config_set(&c, OPT_GRACE, "1s", CONFIG_FLAG, "--grace", err, sizeof(err)), 0);
    CHECK_INT(config_set(&c, OPT_GRACE, "2s", CONFIG_FLAG, "--grace", err, sizeof(err)), 0);
    CHECK_STR(config_str(&c, OPT_GRACE), "2s");
    CHECK_INT(config_num(&c, OPT_GRACE), 2000);
    /* Implemented: no longer refused. */
    CHECK_INT(config_check_implemented(&c, err, sizeof(err)), 0);
    config_release(&c);
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
