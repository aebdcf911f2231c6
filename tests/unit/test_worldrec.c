/* lib/spot/worldrec.c: rendezvous records. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spot/worldrec.h"

static int parse(const char *text, struct worldrec *r, const char **why)
{
    return worldrec_parse(text, strlen(text), r, why);
}

TEST(worldrec_parse)
{
    struct worldrec r, back;
    const char *why;
    char key[256], *text;
    size_t len;

    CHECK_INT(parse("{\"v\":1,\"type\":\"rank\",\"job\":\"llama\",\"node\":\"0123456789abcdef\","
                    "\"rank\":3,\"addr\":\"10.0.0.5:7400\",\"ts_ms\":1796067128258,\"x\":1}",
                    &r, &why), 0);
    CHECK_INT((int)r.type, WORLDREC_RANK);
    CHECK_INT((int)r.rank, 3);
    CHECK_STR(r.addr, "10.0.0.5:7400");
    worldrec_key(key, sizeof(key), &r);
    CHECK_STR(key, "llama/world/rank-3.json");
    text = worldrec_to_json(&r, &len);
    CHECK(text != NULL);
    memset(&back, 0, sizeof(back));
    CHECK_INT(worldrec_parse(text, len, &back, &why), 0);
    CHECK_INT(memcmp(&back, &r, sizeof(r)), 0);
    free(text);
    CHECK_INT(parse("{\"v\":1,\"type\":\"join\",\"job\":\"j\",\"node\":"
                    "\"00112233445566778899aabbccddeeff\",\"addr\":\"[fd00::5]:7400\",\"ts_ms\":1}",
                    &r, &why), 0);
    worldrec_key(key, sizeof(key), &r);
    CHECK_STR(key, "j/world/join-00112233445566778899aabbccddeeff.json");
    CHECK_INT(parse("{\"v\":1,\"type\":\"assign\",\"job\":\"j\",\"node\":"
                    "\"00112233445566778899aabbccddeeff\",\"rank\":1,\"ts_ms\":2}", &r, &why), 0);
    CHECK_INT((int)r.rank, 1);
}

TEST(worldrec_refused)
{
    static const char *const bad[] = {
        "", "{}", "[]", "{\"v\":2,\"type\":\"rank\"}",
        "{\"v\":1,\"type\":\"leader\",\"job\":\"j\",\"node\":\"0123456789abcdef\",\"ts_ms\":1}",
        /* a name, not an address */
        "{\"v\":1,\"type\":\"rank\",\"job\":\"j\",\"node\":\"0123456789abcdef\",\"rank\":1,"
        "\"addr\":\"host.example:7400\",\"ts_ms\":1}",
        /* port 0 */
        "{\"v\":1,\"type\":\"rank\",\"job\":\"j\",\"node\":\"0123456789abcdef\",\"rank\":1,"
        "\"addr\":\"10.0.0.1:0\",\"ts_ms\":1}",
        /* a job that is not a job name */
        "{\"v\":1,\"type\":\"join\",\"job\":\"../x\",\"node\":\"0123456789abcdef\","
        "\"addr\":\"10.0.0.1:1\",\"ts_ms\":1}",
        /* a short node name */
        "{\"v\":1,\"type\":\"join\",\"job\":\"j\",\"node\":\"abc\",\"addr\":\"10.0.0.1:1\","
        "\"ts_ms\":1}",
        /* a negative rank */
        "{\"v\":1,\"type\":\"assign\",\"job\":\"j\",\"node\":\"0123456789abcdef\",\"rank\":-1,"
        "\"ts_ms\":1}",
    };
    struct worldrec r;
    const char *why;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&r, 0x5a, sizeof(r));
        CHECK_INT(parse(bad[i], &r, &why), -EINVAL);
        CHECK(why != NULL);
        CHECK_INT(((unsigned char *)&r)[0], 0x5a);
    }
}
