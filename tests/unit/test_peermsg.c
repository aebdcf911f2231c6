#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spot/peermsg.h"

#define SHA "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static int parse(const char *text, struct peermsg *m, const char **why)
{
    return peermsg_parse(text, strlen(text), m, why);
}

/* m through peermsg_to_json() and back. */
static bool round_trip(const struct peermsg *m)
{
    cJSON *o = peermsg_to_json(m);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    struct peermsg back;
    const char *why = NULL;
    bool ok = text && peermsg_parse(text, strlen(text), &back, &why) == 0 &&
              memcmp(&back, m, sizeof(back)) == 0;

    free(text);
    cJSON_Delete(o);
    return ok;
}

TEST(peermsg_parse)
{
    struct peermsg m;
    const char *why = NULL;

    CHECK_INT(parse("{\"v\":1,\"type\":\"saved\",\"gen\":12,\"rank\":3,\"step\":1200,"
                    "\"sha256\":\"" SHA "\",\"bytes\":4096,\"future\":[1]}", &m, &why), 0);
    CHECK_INT(m.type, PEERMSG_SAVED);
    CHECK_INT((int)m.gen, 12);
    CHECK_INT((int)m.rank, 3);
    CHECK_INT((int)m.step, 1200);
    CHECK_INT(m.sha256[31], 0xff);
    CHECK_INT((int)m.bytes, 4096);
    /* A shard that holds no checkpoint (only global rank 0 writes): no step. */
    CHECK_INT(parse("{\"v\":1,\"type\":\"saved\",\"gen\":12,\"rank\":1,"
                    "\"sha256\":\"" SHA "\",\"bytes\":0}", &m, &why), 0);
    CHECK_INT((int)m.step, -1);
    CHECK_INT((int)m.bytes, 0);
    /* A terminating notice's round says so; an older coordinator's does not. */
    CHECK_INT(parse("{\"v\":1,\"type\":\"query\",\"gen\":4,\"deadline_ms\":1,"
                    "\"terminating\":true}", &m, &why), 0);
    CHECK(m.terminating);
    CHECK_INT(parse("{\"v\":1,\"type\":\"query\",\"gen\":4,\"deadline_ms\":1}", &m, &why), 0);
    CHECK(!m.terminating);
    CHECK_INT(parse("{\"v\":1,\"type\":\"notice\",\"kind\":\"terminate\",\"terminating\":true,"
                    "\"deadline_ms\":1796050000000,\"reason\":\"aws terminate\"}", &m, &why), 0);
    CHECK(m.terminating);
    CHECK_STR(m.kind, "terminate");
    CHECK_STR(m.reason, "aws terminate");
    CHECK_INT(parse("{\"v\":1,\"type\":\"resume\",\"gen\":4,\"world_size\":8,"
                    "\"master_addr\":\"10.0.0.5\",\"master_port\":29500}", &m, &why), 0);
    CHECK_STR(m.master_addr, "10.0.0.5");
    CHECK_INT(m.master_port, 29500);
    CHECK_INT(parse("{\"v\":1,\"type\":\"leave\"}", &m, &why), 0);
    CHECK_INT((int)m.step, -1);
    /* A world's first start: resume with no generation. */
    CHECK_INT(parse("{\"v\":1,\"type\":\"resume\",\"world_size\":2,"
                    "\"master_addr\":\"127.0.0.1\",\"master_port\":29500}", &m, &why), 0);
    CHECK_INT((int)m.gen, 0);
    CHECK_INT(parse("{\"v\":1,\"type\":\"ready\",\"gen\":3}", &m, &why), 0);
    CHECK_INT((int)m.type, PEERMSG_READY);
    CHECK_INT((int)m.gen, 3);
    /* An elastic world runs on ranks 0, 2 and 1023 of its slots. */
    CHECK_INT(parse("{\"v\":1,\"type\":\"resume\",\"gen\":5,\"world_size\":3,"
                    "\"master_addr\":\"10.0.0.5\",\"master_port\":29500,"
                    "\"members\":[0,2,1023]}", &m, &why), 0);
    CHECK_INT((int)m.nmembers, 3);
    CHECK(peermsg_member(&m, 0) && !peermsg_member(&m, 1) && peermsg_member(&m, 2));
    CHECK(peermsg_member(&m, 1023) && !peermsg_member(&m, 1024));
    CHECK_INT(parse("{\"v\":1,\"type\":\"state\",\"live\":false}", &m, &why), 0);
    CHECK_INT((int)m.type, PEERMSG_STATE);
    CHECK(!m.live);
    CHECK_INT((int)m.nmembers, 0);
    CHECK_INT(parse("{\"v\":1,\"type\":\"pause\",\"reason\":\"rank 3 joins\"}", &m, &why), 0);
    CHECK_STR(m.reason, "rank 3 joins");
}

TEST(peermsg_refused)
{
    static const char *const bad[] = {
        "", "[]", "{}", "not json", "{\"v\":2,\"type\":\"leave\"}", "{\"v\":1,\"type\":7}",
        "{\"v\":1,\"type\":\"launch\"}",
        "{\"v\":1,\"type\":\"commit\",\"gen\":3}",                         /* no step */
        "{\"v\":1,\"type\":\"commit\",\"gen\":0,\"step\":1}",              /* gen 0 */
        "{\"v\":1,\"type\":\"commit\",\"gen\":1,\"step\":-1}",
        "{\"v\":1,\"type\":\"commit\",\"gen\":1,\"step\":1.5}",
        "{\"v\":1,\"type\":\"commit\",\"gen\":1,\"step\":1e300}",
        "{\"v\":1,\"type\":\"commit\",\"gen\":\"1\",\"step\":1}",
        "{\"v\":1,\"type\":\"saved\",\"gen\":1,\"rank\":70000,\"step\":1,\"sha256\":\"" SHA
        "\",\"bytes\":1}",
        "{\"v\":1,\"type\":\"saved\",\"gen\":1,\"rank\":1,\"step\":1,\"sha256\":\"" SHA
        "0\",\"bytes\":1}",
        "{\"v\":1,\"type\":\"saved\",\"gen\":1,\"rank\":1,\"step\":1,\"sha256\":\"XX"
        "112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\"bytes\":1}",
        "{\"v\":1,\"type\":\"abort\",\"gen\":1,\"reason\":\"a\\u0001b\"}",
        "{\"v\":1,\"type\":\"saved\",\"gen\":1,\"rank\":1,\"step\":-1,\"sha256\":\"" SHA
        "\",\"bytes\":0}",                                               /* -1 is absent */
        "{\"v\":1,\"type\":\"query\",\"gen\":1,\"deadline_ms\":1,\"terminating\":\"yes\"}",
        "{\"v\":1,\"type\":\"notice\",\"kind\":\"terminate\",\"deadline_ms\":1,"
        "\"terminating\":1}",
        "{\"v\":1,\"type\":\"resume\",\"gen\":4,\"world_size\":8,\"master_port\":29500}",
        "{\"v\":1,\"type\":\"state\"}",                                  /* no live */
        "{\"v\":1,\"type\":\"state\",\"live\":1}",
        "{\"v\":1,\"type\":\"state\",\"live\":true,\"members\":[]}",
        "{\"v\":1,\"type\":\"state\",\"live\":true,\"members\":[1,1]}",   /* twice */
        "{\"v\":1,\"type\":\"state\",\"live\":true,\"members\":[2,1]}",   /* order */
        "{\"v\":1,\"type\":\"state\",\"live\":true,\"members\":[1024]}",
        "{\"v\":1,\"type\":\"state\",\"live\":true,\"members\":[-1]}",
        "{\"v\":1,\"type\":\"state\",\"live\":true,\"members\":[0.5]}",
        "{\"v\":1,\"type\":\"state\",\"live\":true,\"members\":[\"0\"]}",
        "{\"v\":1,\"type\":\"state\",\"live\":true,\"members\":{\"0\":1}}",
    };
    struct peermsg m;
    const char *why = NULL;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&m, 0xa5, sizeof(m));
        why = NULL;
        CHECK_INT(parse(bad[i], &m, &why), -EINVAL);
        CHECK(why != NULL);
        CHECK_INT(((unsigned char *)&m)[0], 0xa5);
    }
}

TEST(peermsg_round_trip)
{
    struct peermsg m;

    for (int t = 0; t < PEERMSG__COUNT; t++) {
        memset(&m, 0, sizeof(m));
        m.type = (enum peermsg_type)t;
        m.step = t == PEERMSG_LEAVE || t == PEERMSG_NOTICE || t == PEERMSG_QUERY ||
                         t == PEERMSG_ABORT || t == PEERMSG_RESUME || t == PEERMSG_READY ||
                         t == PEERMSG_HASHED || t == PEERMSG_STATE || t == PEERMSG_PAUSE
                     ? -1
                     : 1234;
        m.gen = t == PEERMSG_NOTICE || t == PEERMSG_LEAVE || t == PEERMSG_PAUSE ? 0 : 9;
        if (t == PEERMSG_HASHED) {
            m.rank = 3;
            memset(m.sha256, 0xa5, sizeof(m.sha256));
        }
        if (t == PEERMSG_SAVED) {
            m.rank = 5;
            m.bytes = 1ull << 40;
            memset(m.sha256, 0x3c, sizeof(m.sha256));
        }
        if (t == PEERMSG_NOTICE || t == PEERMSG_QUERY || t == PEERMSG_PREPARE)
            m.deadline_ms = 1796050000000LL;
        if (t == PEERMSG_QUERY)
            m.terminating = true;
        if (t == PEERMSG_NOTICE) {
            snprintf(m.kind, sizeof(m.kind), "rebalance");
            m.terminating = false;
        }
        if (t == PEERMSG_RESUME) {
            m.world_size = 4;
            snprintf(m.master_addr, sizeof(m.master_addr), "10.0.0.9");
            m.master_port = 29500;
        }
        if (t == PEERMSG_RESUME || t == PEERMSG_STATE) {
            peermsg_add_member(&m, 0);
            peermsg_add_member(&m, 7);
            peermsg_add_member(&m, 1000);
            m.live = t == PEERMSG_STATE;
        }
        if (t == PEERMSG_ABORT || t == PEERMSG_LEAVE || t == PEERMSG_PAUSE)
            snprintf(m.reason, sizeof(m.reason), "rank 2 did not save before the deadline");
        CHECK(round_trip(&m));
    }
}
