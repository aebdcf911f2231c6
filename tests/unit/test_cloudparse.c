#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spot/cloudparse.h"
#include "spot/notice.h"

typedef int (*notice_fn)(const char *, size_t, struct notice *, const char **);

struct notice_case {
    notice_fn fn;
    const char *fn_name;
    const char *body;
    size_t len;                   /* 0: strlen(body) */
    int ret;
    enum notice_kind kind;
    bool terminating;
    int64_t deadline_ms;
    const char *event_id;
    const char *raw;              /* NULL: the body without trailing whitespace */
};

#define F(fn) fn, #fn
#define DETECTED 777

/* A notice filled with a pattern, to see which fields a parser wrote. */
static void poison(struct notice *n)
{
    memset(n, 0x5a, sizeof(*n));
    n->detected_ms = DETECTED;
}

static bool poisoned(const struct notice *n)
{
    struct notice p;

    poison(&p);
    return memcmp(&p, n, sizeof(p)) == 0;
}

static void run_notice_cases(const struct notice_case *cases, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const struct notice_case *c = &cases[i];
        size_t len = c->len ? c->len : strlen(c->body);
        const char *why = NULL;
        char raw[NOTICE_RAW_LEN];
        struct notice n;
        int r;

        poison(&n);
        r = c->fn(c->body, len, &n, &why);
        if (r != c->ret) {
            printf("  case %zu: %s(\"%.*s\") = %d (%s), expected %d\n", i, c->fn_name,
                   (int)(len > 80 ? 80 : len), c->body, r, why ? why : "no reason", c->ret);
            harness_failed = 1;
            continue;
        }
        if (r < 0) {
            if (!why || !*why) {
                printf("  case %zu: %s gave -EINVAL without a reason\n", i, c->fn_name);
                harness_failed = 1;
            }
            if (!poisoned(&n)) {
                printf("  case %zu: %s wrote the notice and failed\n", i, c->fn_name);
                harness_failed = 1;
            }
            continue;
        }
        if (r == 0) {
            CHECK(poisoned(&n));
            continue;
        }
        if (c->raw) {
            snprintf(raw, sizeof(raw), "%s", c->raw);
        } else {
            while (len > 0 && c->body[len - 1] && strchr(" \t\r\n", c->body[len - 1]))
                len--;
            notice_copy_raw(raw, sizeof(raw), c->body, len);
        }
        if (n.kind != c->kind || n.terminating != c->terminating ||
            n.deadline_ms != c->deadline_ms || strcmp(n.event_id, c->event_id) != 0 ||
            strcmp(n.raw, raw) != 0 || n.drill || n.detected_ms != DETECTED) {
            printf("  case %zu: %s(\"%s\") gave kind %d term %d deadline %lld id \"%s\" raw \"%s\""
                   " detected %lld; expected kind %d term %d deadline %lld id \"%s\" raw \"%s\"\n",
                   i, c->fn_name, c->body, n.kind, n.terminating, (long long)n.deadline_ms,
                   n.event_id, n.raw, (long long)n.detected_ms, c->kind, c->terminating,
                   (long long)c->deadline_ms, c->event_id, raw);
            harness_failed = 1;
        }
    }
}

#define RUN_CASES(cases) run_notice_cases(cases, sizeof(cases) / sizeof(cases[0]))

#define AWS_OK "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\"}"
#define T_AWS 1505722920000

/* When a terminating notice's stop begins: SIGKILL margin before the
 * deadline; with a checkpoint first, a grace of at most 2 s and the
 * checkpoint given up 250 ms before; a notice seen late stops at once with
 * what is left. */
TEST(notice_stop_plan)
{
    const int64_t now = 1000000, deadline = now + 120000;
    struct notice_stop st;

    /* spotd alone: --grace 30s, --notice-margin 5s. */
    st = notice_stop_plan(deadline, now, 5000, 30000, false);
    CHECK_INT(st.stop_at_ms, deadline - 5000 - 30000);
    CHECK_INT(st.grace_ms, 30000);
    /* Checkpointing first: the fallback's grace is 2 s. */
    st = notice_stop_plan(deadline, now, 5000, 30000, true);
    CHECK_INT(st.stop_at_ms, deadline - 5000 - 2000);
    CHECK_INT(st.grace_ms, 2000);
    CHECK_INT(st.give_up_ms, deadline - 5000 - 2000 - 250);
    /* A grace under 2 s stays. */
    st = notice_stop_plan(deadline, now, 5000, 500, true);
    CHECK_INT(st.stop_at_ms, deadline - 5500);
    CHECK_INT(st.grace_ms, 500);
    /* Seen with 10 s left: at once, with the 5 s that remain before the
     * margin as the grace. */
    st = notice_stop_plan(now + 10000, now, 5000, 30000, false);
    CHECK(st.stop_at_ms <= now);
    CHECK_INT(st.grace_ms, 5000);
    /* Seen past the margin: at once, SIGKILL with no grace. */
    st = notice_stop_plan(now + 3000, now, 5000, 30000, true);
    CHECK(st.stop_at_ms <= now);
    CHECK_INT(st.grace_ms, 0);
    CHECK(st.give_up_ms < now);
    /* A stop sent later (a checkpoint failed or committed): what is left. */
    CHECK_INT(notice_grace_left(deadline, now, 5000, 30000), 30000);
    CHECK_INT(notice_grace_left(deadline, deadline - 7250, 5000, 30000), 2250);
    CHECK_INT(notice_grace_left(deadline, deadline - 1000, 5000, 30000), 0);
}

TEST(notice_kinds)
{
    static const char *const names[] = { "terminate", "stop", "hibernate", "rebalance",
                                         "maintenance", "signal", "drill" };

    CHECK_INT(sizeof(names) / sizeof(names[0]), NOTICE__COUNT);
    for (int i = 0; i < NOTICE__COUNT; i++) {
        CHECK_STR(notice_kind_name((enum notice_kind)i), names[i]);
        CHECK_INT(notice_kind_parse(names[i]), i);
    }
    CHECK(notice_kind_name(NOTICE__COUNT) == NULL);
    CHECK(notice_kind_name((enum notice_kind)-1) == NULL);
    CHECK_INT(notice_kind_parse("Terminate"), -EINVAL);
    CHECK_INT(notice_kind_parse(""), -EINVAL);
    CHECK_INT(notice_kind_parse(NULL), -EINVAL);
}

TEST(notice_copy)
{
    char buf[8];

    notice_copy(buf, sizeof(buf), "abc", 3);
    CHECK_STR(buf, "abc");
    notice_copy(buf, sizeof(buf), "a\nb\tc\x7f\xc3\xa9", 8);
    CHECK_STR(buf, "a?b?c??");
    notice_copy(buf, sizeof(buf), "0123456789", 10);
    CHECK_STR(buf, "0123456");
    notice_copy(buf, sizeof(buf), "ab\0cd", 5);
    CHECK_STR(buf, "ab?cd");
    notice_copy(buf, 1, "abc", 3);
    CHECK_STR(buf, "");
    notice_copy(buf, sizeof(buf), NULL, 5);
    CHECK_STR(buf, "");
    buf[0] = 'x';
    notice_copy(buf, 0, "abc", 3);
    CHECK_INT(buf[0], 'x');
    /* raw keeps tabs and line ends (JSON escapes them), nothing else. */
    notice_copy_raw(buf, sizeof(buf), "a\nb\tc\r\x01", 7);
    CHECK_STR(buf, "a\nb\tc\r?");
    notice_copy_raw(buf, sizeof(buf), "\x7f\xc3\xa9\0", 4);
    CHECK_STR(buf, "????");
}

TEST(notice_to_json)
{
    struct notice n = { .kind = NOTICE_STOP, .terminating = true, .deadline_ms = T_AWS,
                        .detected_ms = T_AWS - 120000 };
    cJSON *obj = cJSON_CreateObject();
    char *text;

    snprintf(n.source, sizeof(n.source), "aws");
    snprintf(n.event_id, sizeof(n.event_id), "aws:instance-action:stop:2017-09-18T08:22:00Z");
    snprintf(n.raw, sizeof(n.raw), "{\"action\": \"stop\"}");
    notice_to_json(&n, obj);
    text = cJSON_PrintUnformatted(obj);
    CHECK_STR(text, "{\"source\":\"aws\",\"kind\":\"stop\",\"deadline\":\"2017-09-18T08:22:00.000Z\","
                    "\"event_id\":\"aws:instance-action:stop:2017-09-18T08:22:00Z\","
                    "\"raw\":\"{\\\"action\\\": \\\"stop\\\"}\",\"drill\":false,"
                    "\"terminating\":true,\"detected\":\"2017-09-18T08:20:00.000Z\"}");
    free(text);
    cJSON_Delete(obj);

    /* A raw answer's line ends and tabs are escaped, not lost. */
    snprintf(n.raw, sizeof(n.raw), "[\n\t{\"Code\": 1}\r\n]");
    obj = cJSON_CreateObject();
    notice_to_json(&n, obj);
    text = cJSON_PrintUnformatted(obj);
    CHECK_HAS(text, "\"raw\":\"[\\n\\t{\\\"Code\\\": 1}\\r\\n]\"");
    free(text);
    cJSON_Delete(obj);

    /* An unset deadline is null; a field without its terminator is cut. */
    n.deadline_ms = 0;
    n.drill = true;
    memset(n.source, 'x', sizeof(n.source));
    obj = cJSON_CreateObject();
    notice_to_json(&n, obj);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(obj, "deadline")));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(obj, "drill")));
    CHECK_INT(strlen(cJSON_GetObjectItem(obj, "source")->valuestring), NOTICE_SOURCE_LEN);
    cJSON_Delete(obj);
}

TEST(cloud_aws_instance_action)
{
    static const char nul_body[] = "{\"action\": \"terminate\",\0 \"time\": \"2017-09-18T08:22:00Z\"}";
    static const struct notice_case cases[] = {
        { F(aws_parse_instance_action), AWS_OK, 0, 1, NOTICE_TERMINATE, true, T_AWS,
          "aws:instance-action:terminate:2017-09-18T08:22:00Z", NULL },
        { F(aws_parse_instance_action), AWS_OK "\n", 0, 1, NOTICE_TERMINATE, true, T_AWS,
          "aws:instance-action:terminate:2017-09-18T08:22:00Z", NULL },
        { F(aws_parse_instance_action), "\r\n " AWS_OK " \r\n\t", 0, 1, NOTICE_TERMINATE, true,
          T_AWS, "aws:instance-action:terminate:2017-09-18T08:22:00Z", NULL },
        { F(aws_parse_instance_action), "{\"action\":\"stop\",\"time\":\"2017-09-18T08:22:00Z\"}",
          0, 1, NOTICE_STOP, true, T_AWS, "aws:instance-action:stop:2017-09-18T08:22:00Z", NULL },
        { F(aws_parse_instance_action),
          "{\"time\":\"2017-09-18T08:22:00.500Z\",\"action\":\"hibernate\",\"extra\":[1e999,{}]}",
          0, 1, NOTICE_HIBERNATE, false, T_AWS + 500,
          "aws:instance-action:hibernate:2017-09-18T08:22:00.500Z", NULL },
        /* garbage */
        { F(aws_parse_instance_action), "{\"action\": \"Terminate\", \"time\": \"2017-09-18T08:22:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"reboot\", \"time\": \"2017-09-18T08:22:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": 1, \"time\": \"2017-09-18T08:22:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": 1505722920}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": null}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": [\"terminate\"], \"time\": \"2017-09-18T08:22:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\"}", 0, -EINVAL, 0, 0, 0, NULL,
          NULL },
        { F(aws_parse_instance_action), "{\"time\": \"2017-09-18T08:22:00Z\"}", 0, -EINVAL, 0, 0, 0,
          NULL, NULL },
        { F(aws_parse_instance_action), "{\"Action\": \"terminate\", \"Time\": \"2017-09-18T08:22:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": \"2019-02-29T08:22:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": \"2017-09-18T24:00:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": \"2017-13-18T08:22:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": \" 2017-09-18T08:22:00Z\"}",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action),
          "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\\u0000junk\"}", 0, -EINVAL,
          0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action),
          "{\"action\": \"stop\", \"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\"}", 0,
          -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\"",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:2",
          0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), AWS_OK " x", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), AWS_OK AWS_OK, 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "[" AWS_OK "]", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "\"terminate\"", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "null", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), "<html>404 - Not Found</html>", 0, -EINVAL, 0, 0, 0, NULL,
          NULL },
        { F(aws_parse_instance_action), "", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), " \n", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_instance_action), nul_body, sizeof(nul_body) - 1, -EINVAL, 0, 0, 0, NULL,
          NULL },
        { F(aws_parse_instance_action), AWS_OK, sizeof(AWS_OK) - 2, -EINVAL, 0, 0, 0, NULL, NULL },
    };

    RUN_CASES(cases);
}

TEST(cloud_aws_rebalance)
{
    static const struct notice_case cases[] = {
        { F(aws_parse_rebalance), "{\"noticeTime\": \"2020-10-27T08:22:00Z\"}", 0, 1,
          NOTICE_REBALANCE, false, 1603786920000, "aws:rebalance:2020-10-27T08:22:00Z", NULL },
        { F(aws_parse_rebalance), "{\"noticeTime\":\"2020-10-27T08:22:00Z\"}\n", 0, 1,
          NOTICE_REBALANCE, false, 1603786920000, "aws:rebalance:2020-10-27T08:22:00Z", NULL },
        { F(aws_parse_rebalance), "{\"noticetime\": \"2020-10-27T08:22:00Z\"}", 0, -EINVAL, 0, 0,
          0, NULL, NULL },
        { F(aws_parse_rebalance), "{\"noticeTime\": 1603786920}", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_rebalance), "{\"noticeTime\": \"2020-10-27\"}", 0, -EINVAL, 0, 0, 0, NULL,
          NULL },
        { F(aws_parse_rebalance), "{\"noticeTime\": \"2020-10-32T08:22:00Z\"}", 0, -EINVAL, 0, 0, 0,
          NULL, NULL },
        { F(aws_parse_rebalance), "{}", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_rebalance), "{\"noticeTime\": \"2020-10-27T08:22:00Z\",}", 0, -EINVAL, 0, 0,
          0, NULL, NULL },
        { F(aws_parse_rebalance), "{\"noticeTime\": \"2020-10-27T08:22:00Z\"}}", 0, -EINVAL, 0, 0,
          0, NULL, NULL },
    };

    RUN_CASES(cases);
}

TEST(cloud_aws_lifecycle)
{
    static const struct notice_case cases[] = {
        { F(aws_parse_lifecycle), "Terminated", 0, 1, NOTICE_TERMINATE, true, 0,
          "aws:lifecycle:Terminated", NULL },
        { F(aws_parse_lifecycle), "Terminated\n", 0, 1, NOTICE_TERMINATE, true, 0,
          "aws:lifecycle:Terminated", NULL },
        { F(aws_parse_lifecycle), "InService", 0, 0, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "Warmed:Stopped", 0, 0, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "Warmed:Running\n", 0, 0, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "Detached", 0, 0, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "terminated", 0, 0, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "TerminatedX", 0, 0, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "Terminated Terminated", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), " Terminated", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "{\"state\": \"Terminated\"}", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "In-Service", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle), "Terminated\0", 11, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(aws_parse_lifecycle),
          "Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0,
          -EINVAL, 0, 0, 0, NULL, NULL },
    };

    RUN_CASES(cases);
}

/* A case whose body parses, with an event skipped: 0, and a reason. */
#define SKIP 1

TEST(cloud_aws_maintenance)
{
    static const char doc[] =
        "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"system-reboot\","
        "\"Description\":\"scheduled reboot\",\"EventId\":\"instance-event-0d59937288b749b32\","
        "\"NotAfter\":\"21 Jan 2019 09:17:23 GMT\",\"State\":\"active\"},"
        "{\"NotBefore\":\"1 Feb 2019 09:00:43 GMT\",\"Code\":\"system-maintenance\","
        "\"Description\":\"maintenance\",\"EventId\":\"instance-event-2\","
        "\"NotAfter\":\"1 Feb 2019 10:00:43 GMT\",\"State\":\"active\"},"
        "{\"NotBefore\":\"1 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
        "\"Description\":\"[Completed] stop\",\"EventId\":\"instance-event-3\","
        "\"NotAfter\":\"1 Jan 2019 10:00:43 GMT\",\"State\":\"completed\"},"
        "{\"NotBefore\":\"whenever\",\"Code\":\"instance-retirement\","
        "\"Description\":\"[Canceled] retirement\",\"EventId\":\"\",\"State\":\"canceled\"}]\n";
    static const struct {
        const char *body;
        int ret;
        size_t n;
    } cases[] = {
        { "[]", 0, 0 },
        { " [ ] \n", 0, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"active\"}]", 0, 1 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"completed\"}]", 0, 0 },
        /* garbage */
        { "{}", -EINVAL, 0 },
        /* an event that cannot be read: skipped, and said (why) */
        { "[1]", SKIP, 0 },
        { "[[]]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"active\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"29 Feb 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"active\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"2019-01-21T09:00:43Z\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"active\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"NotAfter\":\"soon\","
          "\"Code\":\"instance-stop\",\"EventId\":\"e1\",\"State\":\"active\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"\",\"State\":\"active\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e 1\",\"State\":\"active\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":42,\"State\":\"active\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":true}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"completed\",\"Description\":7}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"active\",\"State\":\"completed\"}]", SKIP, 0 },
        { "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"active\"}", -EINVAL, 0 },
        /* the others are read */
        { "[1, {\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
          "\"EventId\":\"e1\",\"State\":\"active\"}, {\"EventId\":7}]", SKIP + 1, 1 },
        { "[] []", -EINVAL, 0 },
        { "", -EINVAL, 0 },
    };
    struct notice out[4];
    const char *why = NULL;
    size_t n = 99;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int r;
        n = 99;
        why = NULL;
        r = aws_parse_maintenance(cases[i].body, strlen(cases[i].body), T_AWS, out, 4, &n, &why);
        if ((cases[i].ret >= SKIP && (r != 0 || n != cases[i].n || !why)) ||
            (cases[i].ret < SKIP && (r != cases[i].ret || (r == 0 && (n != cases[i].n || why)) ||
                                     (r < 0 && (n != 99 || !why))))) {
            printf("  case %zu: aws_parse_maintenance(\"%s\") = %d, n %zu (%s); expected %d, %zu\n",
                   i, cases[i].body, r, n, why ? why : "no reason", cases[i].ret, cases[i].n);
            harness_failed = 1;
        }
    }

    for (size_t i = 0; i < 4; i++)
        poison(&out[i]);
    CHECK_INT(aws_parse_maintenance(doc, strlen(doc), T_AWS, out, 4, &n, &why), 0);
    CHECK_INT(n, 2);
    CHECK_STR(out[0].source, "aws");
    CHECK_INT(out[0].kind, NOTICE_MAINTENANCE);
    CHECK(out[0].terminating);                 /* system-reboot */
    CHECK_INT(out[0].deadline_ms, 1548061243000);
    CHECK_STR(out[0].event_id, "instance-event-0d59937288b749b32");
    CHECK_HAS(out[0].raw, "\"Code\":\"system-reboot\"");
    CHECK_INT(out[0].detected_ms, DETECTED);
    CHECK_INT(out[1].kind, NOTICE_MAINTENANCE);
    CHECK(!out[1].terminating);                /* system-maintenance */
    CHECK_INT(out[1].deadline_ms, 1549011643000);
    CHECK_STR(out[1].event_id, "instance-event-2");
    CHECK(poisoned(&out[2]));

    /* max caps what is written. */
    poison(&out[1]);
    CHECK_INT(aws_parse_maintenance(doc, strlen(doc), T_AWS, out, 1, &n, &why), 0);
    CHECK_INT(n, 1);
    CHECK_STR(out[0].event_id, "instance-event-0d59937288b749b32");
    CHECK(poisoned(&out[1]));

    /* NotBefore passed: AWS may take until NotAfter, and the command gets
     * at least AWS_EVENT_MIN_WINDOW_MS, never "now" (no grace). */
    {
        static const char *const open_doc =
            "[{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\",\"Code\":\"instance-stop\","
            "\"EventId\":\"e1\",\"NotAfter\":\"21 Jan 2019 09:17:23 GMT\","
            "\"State\":\"active\"},{\"NotBefore\":\"21 Jan 2019 09:00:43 GMT\","
            "\"Code\":\"instance-stop\",\"EventId\":\"e2\",\"State\":\"active\"}]";
        const int64_t before = 1548061243000, after = 1548062243000;

        CHECK_INT(aws_parse_maintenance(open_doc, strlen(open_doc), before + 60000, out, 4, &n,
                                        &why), 0);
        CHECK_INT(n, 2);
        CHECK_INT(out[0].deadline_ms, after);
        CHECK_INT(out[1].deadline_ms, before + 60000 + AWS_EVENT_MIN_WINDOW_MS);
        CHECK_INT(aws_parse_maintenance(open_doc, strlen(open_doc), after - 10000, out, 4, &n,
                                        &why), 0);
        CHECK_INT(out[0].deadline_ms, after - 10000 + AWS_EVENT_MIN_WINDOW_MS);
        CHECK_INT(aws_parse_maintenance(open_doc, strlen(open_doc), before - 1, out, 4, &n,
                                        &why), 0);
        CHECK_INT(out[0].deadline_ms, before);
    }
    CHECK_INT(aws_parse_maintenance(doc, strlen(doc), T_AWS, NULL, 0, &n, &why), 0);
    CHECK_INT(n, 0);
}

TEST(cloud_gcp)
{
    static const struct {
        const char *body;
        size_t len;
        int ret;
    } preempted[] = {
        { "TRUE", 0, 1 },     { "FALSE", 0, 0 },      { "TRUE\n", 0, 1 },   { "FALSE\n", 0, 0 },
        { "true", 0, -EINVAL }, { "True", 0, -EINVAL }, { "1", 0, -EINVAL },  { "", 0, -EINVAL },
        { "\n", 0, -EINVAL }, { " TRUE", 0, -EINVAL }, { "TRUEX", 0, -EINVAL },
        { "TRUE\nFALSE", 0, -EINVAL }, { "TRUE\0", 5, -EINVAL }, { "TRU", 0, -EINVAL },
        { "TRUE", 3, -EINVAL },
    };
    static const struct notice_case cases[] = {
        { F(gcp_parse_maintenance), "NONE", 0, 0, 0, 0, 0, NULL, NULL },
        { F(gcp_parse_maintenance), "NONE\n", 0, 0, 0, 0, 0, NULL, NULL },
        { F(gcp_parse_maintenance), "MIGRATE_ON_HOST_MAINTENANCE", 0, 1, NOTICE_MAINTENANCE, false,
          0, "gcp:maintenance:MIGRATE_ON_HOST_MAINTENANCE", NULL },
        { F(gcp_parse_maintenance), "TERMINATE_ON_HOST_MAINTENANCE\n", 0, 1, NOTICE_MAINTENANCE,
          true, 0, "gcp:maintenance:TERMINATE_ON_HOST_MAINTENANCE", NULL },
        { F(gcp_parse_maintenance), "none", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(gcp_parse_maintenance), "TERMINATE", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(gcp_parse_maintenance), "\"NONE\"", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(gcp_parse_maintenance), "NONE NONE", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(gcp_parse_maintenance), "", 0, -EINVAL, 0, 0, 0, NULL, NULL },
    };

    for (size_t i = 0; i < sizeof(preempted) / sizeof(preempted[0]); i++) {
        size_t len = preempted[i].len ? preempted[i].len : strlen(preempted[i].body);
        const char *why = NULL;
        int r = gcp_parse_preempted(preempted[i].body, len, &why);
        if (r != preempted[i].ret || (r < 0 && !why)) {
            printf("  gcp_parse_preempted(\"%.*s\") = %d, expected %d\n", (int)len,
                   preempted[i].body, r, preempted[i].ret);
            harness_failed = 1;
        }
    }
    CHECK_INT(gcp_parse_preempted("TRUE", 4, NULL), 1);
    CHECK_INT(gcp_parse_preempted("yes", 3, NULL), -EINVAL);
    RUN_CASES(cases);
}

TEST(cloud_termination)
{
    static const struct notice_case cases[] = {
        { F(alibaba_parse_termination), "2015-01-05T18:02:00Z", 0, 1, NOTICE_TERMINATE, true,
          1420480920000, "alibaba:termination:2015-01-05T18:02:00Z", NULL },
        { F(alibaba_parse_termination), "2015-01-05T18:02:00Z\n", 0, 1, NOTICE_TERMINATE, true,
          1420480920000, "alibaba:termination:2015-01-05T18:02:00Z", NULL },
        { F(alibaba_parse_termination), "2015-01-06T02:02:00+08:00", 0, 1, NOTICE_TERMINATE, true,
          1420480920000, "alibaba:termination:2015-01-06T02:02:00+08:00", NULL },
        { F(alibaba_parse_termination), "2015-01-05T18:02:00", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(alibaba_parse_termination), "2015-01-05 18:02:00", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(alibaba_parse_termination), "2015-02-29T18:02:00Z", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(alibaba_parse_termination), "\"2015-01-05T18:02:00Z\"", 0, -EINVAL, 0, 0, 0, NULL,
          NULL },
        { F(alibaba_parse_termination), "2015-01-05T18:02:00Z 2015-01-05T18:02:00Z", 0, -EINVAL, 0,
          0, 0, NULL, NULL },
        { F(alibaba_parse_termination), "", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(tencent_parse_termination), "2018-08-18 12:05:33", 0, 1, NOTICE_TERMINATE, true,
          1534565133000, "tencent:termination:2018-08-18 12:05:33", NULL },
        { F(tencent_parse_termination), "2018-08-18 12:05:33\r\n", 0, 1, NOTICE_TERMINATE, true,
          1534565133000, "tencent:termination:2018-08-18 12:05:33", NULL },
        { F(tencent_parse_termination), "2018-08-18T12:05:33Z", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(tencent_parse_termination), "2018-08-18 25:05:33", 0, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(tencent_parse_termination), "2018-08-18 12:05:33\0", 20, -EINVAL, 0, 0, 0, NULL, NULL },
        { F(tencent_parse_termination), "1970-01-01 00:00:00", 0, -EINVAL, 0, 0, 0, NULL, NULL },
    };

    RUN_CASES(cases);
}

/* Size limits, on every parser: a body at the cap is read, one byte more
 * is refused before anything else, 1 MB too. */
TEST(cloud_body_size)
{
    size_t big = 1024 * 1024;
    char *body = malloc(big);
    const char *why = NULL;
    struct notice n;
    struct azure_doc *doc = malloc(sizeof(*doc));
    size_t count;

    if (!body || !doc) {
        CHECK(!"out of memory");
        free(body);
        free(doc);
        return;
    }
    memset(body, ' ', big);
    memcpy(body, AWS_OK, strlen(AWS_OK));
    CHECK_INT(aws_parse_instance_action(body, CLOUDPARSE_MAX_BODY, &n, &why), 1);
    CHECK_INT(aws_parse_instance_action(body, CLOUDPARSE_MAX_BODY + 1, &n, &why), -EINVAL);
    CHECK_HAS(why, "64 KiB");
    why = NULL;
    CHECK_INT(aws_parse_instance_action(body, big, &n, &why), -EINVAL);
    CHECK_HAS(why, "64 KiB");
    memset(body, '\n', big);
    memcpy(body, "TRUE", 4);
    CHECK_INT(gcp_parse_preempted(body, CLOUDPARSE_MAX_BODY, &why), 1);
    CHECK_INT(gcp_parse_preempted(body, big, &why), -EINVAL);
    CHECK_INT(aws_parse_rebalance(body, big, &n, &why), -EINVAL);
    CHECK_INT(aws_parse_lifecycle(body, big, &n, &why), -EINVAL);
    CHECK_INT(aws_parse_maintenance(body, big, T_AWS, &n, 1, &count, &why), -EINVAL);
    CHECK_INT(gcp_parse_maintenance(body, big, &n, &why), -EINVAL);
    CHECK_INT(azure_parse_events(body, big, "vm", doc, &why), -EINVAL);
    CHECK_INT(alibaba_parse_termination(body, big, &n, &why), -EINVAL);
    CHECK_INT(tencent_parse_termination(body, big, &n, &why), -EINVAL);
    /* Deep nesting is just garbage. */
    memset(body, '[', big);
    CHECK_INT(aws_parse_maintenance(body, CLOUDPARSE_MAX_BODY, T_AWS, &n, 1, &count, &why),
              -EINVAL);
    CHECK_INT(aws_parse_instance_action(NULL, 0, &n, &why), -EINVAL);
    free(body);
    free(doc);
}

#define AZ_EVENT(id, type, status, resources, not_before, extra)                          \
    "{\"EventId\": \"" id "\", \"EventStatus\": \"" status "\", \"EventType\": \"" type   \
    "\", \"ResourceType\": \"VirtualMachine\", \"Resources\": " resources                 \
    ", \"NotBefore\": \"" not_before "\", \"Description\": \"d\", \"EventSource\": "      \
    "\"Platform\"" extra "}"
#define AZ_DOC(inc, events) "{\"DocumentIncarnation\": " inc ", \"Events\": [" events "]}"
#define AZ_NB "Mon, 11 Apr 2022 22:26:58 GMT"
#define T_AZ 1649716018000

TEST(cloud_azure_events)
{
    static const char sample[] =
        "{\"DocumentIncarnation\": 2, \"Events\": [{\"EventId\": "
        "\"C7061BAC-AFDC-4513-B24B-AA5F13A16123\", \"EventStatus\": \"Scheduled\", \"EventType\": "
        "\"Freeze\", \"ResourceType\": \"VirtualMachine\", \"Resources\": [\"WestNO_0\", "
        "\"WestNO_1\"], \"NotBefore\": \"Mon, 11 Apr 2022 22:26:58 GMT\", \"Description\": "
        "\"Virtual machine is being paused because of a memory-preserving Live Migration "
        "operation.\", \"EventSource\": \"Platform\", \"DurationInSeconds\": 5}]}\n";
    struct azure_doc doc;
    const char *why = NULL;

    CHECK_INT(azure_parse_events(sample, strlen(sample), "WestNO_0", &doc, &why), 0);
    CHECK_INT(doc.incarnation, 2);
    CHECK_INT(doc.n, 1);
    CHECK_STR(doc.ev[0].id, "C7061BAC-AFDC-4513-B24B-AA5F13A16123");
    CHECK_STR(doc.ev[0].type, "Freeze");
    CHECK_STR(doc.ev[0].status, "Scheduled");
    CHECK_INT(doc.ev[0].not_before_ms, T_AZ);
    CHECK_INT(doc.ev[0].duration_s, 5);
    CHECK_INT(doc.ev[0].for_us, 1);
    CHECK_INT(doc.ev[0].only_us, 0);           /* WestNO_1 too */
    CHECK_HAS(doc.ev[0].description, "Virtual machine is being paused");
    /* Azure VM names compare case-insensitively. */
    CHECK_INT(azure_parse_events(sample, strlen(sample), "westno_1", &doc, &why), 0);
    CHECK_INT(doc.ev[0].for_us, 1);
    /* Another VM's event: counted, not kept. */
    CHECK_INT(azure_parse_events(sample, strlen(sample), "WestNO_2", &doc, &why), 0);
    CHECK_INT(doc.n, 0);
    CHECK_INT(doc.others, 1);
    CHECK_INT(doc.total, 1);
    CHECK_INT(azure_parse_events(sample, strlen(sample), "WestNO", &doc, &why), 0);
    CHECK_INT(doc.n, 0);
    /* The name not known: two resources are no guess. */
    CHECK_INT(azure_parse_events(sample, strlen(sample), NULL, &doc, &why), 0);
    CHECK_INT(doc.n, 0);
    CHECK_INT(azure_parse_events(sample, strlen(sample), "", &doc, &why), 0);
    CHECK_INT(doc.n, 0);

    static const char ours[] = AZ_DOC("17", AZ_EVENT("e1", "Preempt", "Scheduled", "[\"VM1\"]",
                                                     AZ_NB, ", \"DurationInSeconds\": -1")
                                      "," AZ_EVENT("e2", "Reboot", "Started", "[\"vm1\", \"VM1\"]",
                                                   "", ""));
    CHECK_INT(azure_parse_events(ours, strlen(ours), "vm1", &doc, &why), 0);
    CHECK_INT(doc.incarnation, 17);
    CHECK_INT(doc.n, 2);
    CHECK_INT(doc.ev[0].for_us, 1);
    CHECK_INT(doc.ev[0].only_us, 1);
    CHECK_INT(doc.ev[0].duration_s, -1);
    CHECK_INT(doc.ev[1].for_us, 1);
    CHECK_INT(doc.ev[1].only_us, 1);
    CHECK_INT(doc.ev[1].not_before_ms, 0);     /* Started: NotBefore "" */
    CHECK_INT(doc.ev[1].duration_s, -1);       /* absent */
    CHECK_STR(doc.ev[1].status, "Started");

    static const char empty[] = "{\"DocumentIncarnation\": 0, \"Events\": []}";
    CHECK_INT(azure_parse_events(empty, strlen(empty), "vm1", &doc, &why), 0);
    CHECK_INT(doc.incarnation, 0);
    CHECK_INT(doc.n, 0);
    static const char big_inc[] = "{\"Events\": [], \"DocumentIncarnation\": 9007199254740991}";
    CHECK_INT(azure_parse_events(big_inc, strlen(big_inc), "vm1", &doc, &why), 0);
    CHECK_INT(doc.incarnation, 9007199254740991LL);
    static const char unknown[] = AZ_DOC("3", AZ_EVENT("e1", "Hibernate", "Pending", "[]", "",
                                                       ", \"NewField\": {\"a\": [1]}"));
    CHECK_INT(azure_parse_events(unknown, strlen(unknown), "vm1", &doc, &why), 0);
    CHECK_INT(doc.n, 0);
    CHECK_INT(doc.others, 1);
    static const char unknown_ours[] = AZ_DOC("3", AZ_EVENT("e1", "Hibernate", "Pending",
                                                            "[\"vm1\"]", "",
                                                            ", \"NewField\": {\"a\": [1]}"));
    CHECK_INT(azure_parse_events(unknown_ours, strlen(unknown_ours), "vm1", &doc, &why), 0);
    CHECK_INT(doc.n, 1);
    CHECK_STR(doc.ev[0].type, "Hibernate");

    /* The name not known: an event that lists one resource is taken as
     * ours, guessed, and never ours alone (no acknowledgment). */
    CHECK_INT(azure_parse_events(ours, strlen(ours), NULL, &doc, &why), 0);
    CHECK_INT(doc.n, 1);
    CHECK_STR(doc.ev[0].id, "e1");
    CHECK_INT(doc.ev[0].for_us, 1);
    CHECK_INT(doc.ev[0].guessed, 1);
    CHECK_INT(doc.ev[0].only_us, 0);
    CHECK_INT(doc.others, 1);                  /* e2 lists two */
    CHECK_INT(azure_parse_events(ours, strlen(ours), "vm1", &doc, &why), 0);
    CHECK_INT(doc.ev[0].guessed, 0);

    /* NotBefore as ISO 8601 (Microsoft's emulator) or RFC 1123. */
    static const char iso[] = AZ_DOC("4", AZ_EVENT("e1", "Preempt", "Scheduled", "[\"vm1\"]",
                                                   "2022-04-11T22:26:58Z", "")
                                     "," AZ_EVENT("e2", "Preempt", "Scheduled", "[\"vm1\"]",
                                                  "2022-04-11T22:26:58.000+00:00", ""));
    CHECK_INT(azure_parse_events(iso, strlen(iso), "vm1", &doc, &why), 0);
    CHECK_INT(doc.n, 2);
    CHECK_INT(doc.ev[0].not_before_ms, T_AZ);
    CHECK_INT(doc.ev[1].not_before_ms, T_AZ);
    CHECK_INT(doc.ev[0].not_before_bad, 0);
}

TEST(cloud_azure_garbage)
{
    /* The document itself is wrong: nothing can be read. */
    static const char *const bad[] = {
        AZ_DOC("\"2\"", ""),
        AZ_DOC("1.5", ""),
        AZ_DOC("-1", ""),
        AZ_DOC("1e300", ""),
        AZ_DOC("1e999", ""),
        AZ_DOC("9007199254740993", ""),
        AZ_DOC("null", ""),
        "{\"DocumentIncarnation\": 1}",
        "{\"Events\": []}",
        "{\"DocumentIncarnation\": 1, \"Events\": {}}",
        "{\"DocumentIncarnation\": 1, \"Events\": null}",
        "{\"DocumentIncarnation\": 1, \"DocumentIncarnation\": 2, \"Events\": []}",
        "[]",
        "{\"DocumentIncarnation\": 1, \"Events\": []",
        "{\"DocumentIncarnation\": 1, \"Events\": []} {}",
        "{\"DocumentIncarnation\": 1, \"Events\": [{\"EventId\": \"e1\\u0000\", \"EventStatus\": "
        "\"Scheduled\", \"EventType\": \"Preempt\", \"Resources\": [], \"NotBefore\": \"\"}]}",
    };
    /* One event is wrong: it alone is skipped, and said by its EventId
     * when it has a readable one. */
    static const struct {
        const char *event;
        const char *id;
    } bad_event[] = {
        { "1", "" },
        { "\"e1\"", "" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "\"VM1\"", AZ_NB, ""), "e1" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "[\"VM1\", 2]", AZ_NB, ""), "e1" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "[null]", AZ_NB, ""), "e1" },
        { AZ_EVENT("", "Preempt", "Scheduled", "[\"VM1\"]", AZ_NB, ""), "" },
        { AZ_EVENT("C7061BAC-AFDC-4513-B24B-AA5F13A16123-C7061BAC-AFDC-4513-B24B-AA5F13",
                   "Preempt", "Scheduled", "[\"VM1\"]", AZ_NB, ""),
          "C7061BAC-AFDC-4513-B24B-AA5F13A16123-C7061BAC-AFDC-4513-B24B-AA" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "[\"VM1\"]", AZ_NB, ", \"DurationInSeconds\": -2"),
          "e1" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "[\"VM1\"]", AZ_NB,
                   ", \"DurationInSeconds\": \"5\""), "e1" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "[\"VM1\"]", AZ_NB,
                   ", \"DurationInSeconds\": 1e30"), "e1" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "[\"VM1\"]", AZ_NB,
                   ", \"DurationInSeconds\": 2.5"), "e1" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "[\"VM1\"]", AZ_NB, ", \"EventType\": \"Freeze\""),
          "e1" },
        { AZ_EVENT("e1", "Preempt", "Scheduled", "[\"VM1\"]", AZ_NB, ", \"ResourceType\": 1"),
          "e1" },
        { "{\"EventId\": \"e1\", \"EventStatus\": \"Scheduled\", \"EventType\": \"Preempt\", "
          "\"Resources\": [\"VM1\"], \"NotBefore\": null}", "e1" },
        { "{\"EventId\": \"e1\", \"EventStatus\": \"Scheduled\", \"EventType\": \"Preempt\", "
          "\"NotBefore\": \"\"}", "e1" },
        { "{\"EventId\": 7, \"EventStatus\": \"Scheduled\", \"EventType\": \"Preempt\", "
          "\"Resources\": [], \"NotBefore\": \"\"}", "" },
        { "{\"EventId\": \"e1\", \"EventType\": \"Preempt\", \"Resources\": [], \"NotBefore\": "
          "\"\"}", "e1" },
    };
    static const char good[] = AZ_EVENT("ours", "Preempt", "Scheduled", "[\"vm1\"]", AZ_NB, "");
    struct azure_doc doc;
    char *many, text[2048];
    size_t len = 0;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *why = NULL;
        doc.incarnation = 4242;
        int r = azure_parse_events(bad[i], strlen(bad[i]), "vm1", &doc, &why);
        if (r != -EINVAL || !why || doc.incarnation != 4242) {
            printf("  case %zu: azure_parse_events(\"%s\") = %d (%s), expected -EINVAL\n", i, bad[i],
                   r, why ? why : "no reason");
            harness_failed = 1;
        }
    }
    /* Each bad event beside a good one of ours, on either side: the good
     * one is read. */
    for (size_t i = 0; i < sizeof(bad_event) / sizeof(bad_event[0]); i++) {
        for (int first = 0; first < 2; first++) {
            const char *why = NULL;
            snprintf(text, sizeof(text), "{\"DocumentIncarnation\": 7, \"Events\": [%s, %s]}",
                     first ? bad_event[i].event : good, first ? good : bad_event[i].event);
            int r = azure_parse_events(text, strlen(text), "vm1", &doc, &why);
            if (r != 0 || doc.n != 1 || strcmp(doc.ev[0].id, "ours") != 0 || doc.n_bad != 1 ||
                doc.total != 2 || !doc.bad[0].why || strcmp(doc.bad[0].id, bad_event[i].id) != 0) {
                printf("  case %zu/%d: azure_parse_events(\"%s\") = %d, n %zu, bad %zu (%s, "
                       "\"%s\"): expected our event read and one bad one, \"%s\"\n", i, first,
                       text, r, doc.n, doc.n_bad, doc.n_bad ? doc.bad[0].why : "-",
                       doc.n_bad ? doc.bad[0].id : "-", bad_event[i].id);
                harness_failed = 1;
            }
        }
    }
    /* A NotBefore that is no date keeps the event, without a NotBefore
     * (the caller takes the shortest window). */
    static const char *const bad_dates[] = { "Tue, 11 Apr 2022 22:26:58 GMT",
                                             "Mon, 11 Apr 2022 22:26:58", "2022-04-11 22:26:58",
                                             "2022-04-11T22:26:58", "tomorrow" };
    for (size_t i = 0; i < sizeof(bad_dates) / sizeof(bad_dates[0]); i++) {
        const char *why = NULL;
        snprintf(text, sizeof(text), AZ_DOC("1", AZ_EVENT("e1", "Preempt", "Scheduled",
                                                           "[\"VM1\"]", "%s", "")), bad_dates[i]);
        CHECK_INT(azure_parse_events(text, strlen(text), "vm1", &doc, &why), 0);
        CHECK_INT(doc.n, 1);
        CHECK_INT(doc.ev[0].not_before_bad, 1);
        CHECK_INT(doc.ev[0].not_before_ms, 0);
    }

    /* Hundreds of events of other VMs, then ours: ours is read; past
     * AZURE_MAX_EVENTS of ours, the rest are counted, not refused. */
    many = malloc(AZURE_MAX_BODY);
    if (!many) {
        CHECK(!"out of memory");
        return;
    }
    len = (size_t)sprintf(many, "{\"DocumentIncarnation\": 5, \"Events\": [");
    for (int i = 0; i < 400; i++)
        len += (size_t)sprintf(many + len, "%s" AZ_EVENT("o%d", "Freeze", "Scheduled",
                                                         "[\"vm-%d\"]", AZ_NB, ""),
                               i ? "," : "", i, i + 2);
    len += (size_t)sprintf(many + len, "," AZ_EVENT("e0", "Preempt", "Scheduled", "[\"vm1\"]",
                                                    AZ_NB, ""));
    strcpy(many + len, "]}");
    const char *why = NULL;
    CHECK(len + 2 > CLOUDPARSE_MAX_BODY);
    CHECK_INT(azure_parse_events(many, len + 2, "vm1", &doc, &why), 0);
    CHECK_INT(doc.total, 401);
    CHECK_INT(doc.others, 400);
    CHECK_INT(doc.n, 1);
    CHECK_STR(doc.ev[0].id, "e0");
    len = (size_t)sprintf(many, "{\"DocumentIncarnation\": 5, \"Events\": [");
    for (int i = 0; i < AZURE_MAX_EVENTS + 3; i++)
        len += (size_t)sprintf(many + len, "%s" AZ_EVENT("e%d", "Freeze", "Scheduled", "[\"vm1\"]",
                                                         AZ_NB, ""), i ? "," : "", i);
    strcpy(many + len, "]}");
    CHECK_INT(azure_parse_events(many, len + 2, "vm1", &doc, &why), 0);
    CHECK_INT(doc.n, AZURE_MAX_EVENTS);
    CHECK_INT(doc.dropped, 3);
    CHECK_STR(doc.ev[AZURE_MAX_EVENTS - 1].id, "e63");
    free(many);
}

TEST(cloud_azure_notice)
{
    static const struct {
        const char *type;
        int ret;
        enum notice_kind kind;
        bool terminating;
    } cases[] = {
        { "Preempt", 1, NOTICE_TERMINATE, true },
        { "Terminate", 1, NOTICE_TERMINATE, true },
        { "Reboot", 1, NOTICE_MAINTENANCE, true },
        { "Redeploy", 1, NOTICE_MAINTENANCE, true },
        { "Freeze", 1, NOTICE_MAINTENANCE, false },
        { "Hibernate", 0, 0, false },
        { "preempt", 0, 0, false },
        { "", 0, 0, false },
    };
    struct azure_event ev = { .id = "C7061BAC-AFDC-4513-B24B-AA5F13A16123", .status = "Scheduled",
                              .not_before_ms = T_AZ, .duration_s = 5, .for_us = 1,
                              .only_us = 1, .description = "paused" };
    struct notice n;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(ev.type, sizeof(ev.type), "%s", cases[i].type);
        poison(&n);
        int r = azure_event_notice(&ev, 1000, 2000, &n);
        CHECK_INT(r, cases[i].ret);
        if (r != 1) {
            CHECK(poisoned(&n));
            continue;
        }
        CHECK_STR(n.source, "azure");
        CHECK_INT(n.kind, cases[i].kind);
        CHECK_INT(n.terminating, cases[i].terminating);
        CHECK_INT(n.deadline_ms, T_AZ);
        CHECK_STR(n.event_id, "C7061BAC-AFDC-4513-B24B-AA5F13A16123");
        CHECK_HAS(n.raw, cases[i].type);
        CHECK_HAS(n.raw, "2022-04-11T22:26:58.000Z");
        CHECK_INT(n.detected_ms, DETECTED);
        CHECK(!n.drill);
    }
    /* Started: NotBefore is empty, so the deadline is now + window. */
    snprintf(ev.type, sizeof(ev.type), "Preempt");
    snprintf(ev.status, sizeof(ev.status), "Started");
    ev.not_before_ms = 0;
    CHECK_INT(azure_event_notice(&ev, 1700000000000, 30000, &n), 1);
    CHECK_INT(n.deadline_ms, 1700000030000);
    CHECK_INT(azure_event_notice(&ev, INT64_MAX - 5, 30000, &n), 1);
    CHECK(n.deadline_ms == INT64_MAX);
}
