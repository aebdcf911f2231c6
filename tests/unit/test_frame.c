#include <errno.h>
#include <string.h>

#include "harness.h"
#include "spot/frame.h"

#define BODY "{\"v\":1,\"type\":\"heartbeat\",\"rank\":2}"
#define NOW 1796050000000LL

static struct frame_key key_of(const char *text)
{
    struct frame_key k;
    const char *why = NULL;

    memset(&k, 0, sizeof(k));
    if (frame_key_parse(text, strlen(text), &k, &why) != 0)
        k.len = 0;
    return k;
}

TEST(frame_key_parse)
{
    struct frame_key k;
    const char *why = NULL;
    const char *hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";

    CHECK_INT(frame_key_parse(hex, strlen(hex), &k, &why), 0);
    CHECK_INT((int)k.len, 32);
    CHECK_INT(k.k[0], 0x00);
    CHECK_INT(k.k[31], 0xff);
    /* Not hex: the bytes themselves, whitespace around them dropped. */
    CHECK_INT(frame_key_parse("  a passphrase of some length\n", 30, &k, &why), 0);
    CHECK_INT((int)k.len, 27);
    CHECK(memcmp(k.k, "a passphrase", 12) == 0);
    memset(&k, 0xa5, sizeof(k));
    CHECK_INT(frame_key_parse("short\n", 6, &k, &why), -EINVAL);
    CHECK_HAS(why, "openssl rand -hex 32");
    CHECK_INT(k.k[0], 0xa5);
    CHECK_INT(frame_key_parse("", 0, &k, &why), -EINVAL);
}

TEST(frame_round_trip)
{
    struct frame_key k = key_of("world key number one, long enough");
    uint8_t buf[FRAME_MAX];
    struct frame f;
    int n = frame_encode(&k, 7, NOW, BODY, strlen(BODY), buf, sizeof(buf));

    CHECK_INT(n, FRAME_HEADER + (int)strlen(BODY) + FRAME_MAC);
    CHECK(memcmp(buf, "SPF1\x01\0\0\0", 8) == 0);
    /* Every prefix asks for more; the whole decodes. */
    for (int i = 0; i < n; i++)
        CHECK_INT(frame_decode(&k, buf, (size_t)i, &f), 0);
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), 1);
    CHECK_INT((int)f.size, n);
    CHECK_INT((int)f.seq, 7);
    CHECK(f.ts_ms == NOW);
    CHECK_INT((int)f.body_len, (int)strlen(BODY));
    CHECK(memcmp(f.body, BODY, f.body_len) == 0);
    /* Two frames back to back: the first is read alone. */
    CHECK_INT(frame_encode(&k, 8, NOW, "{}", 2, buf + n, sizeof(buf) - (size_t)n),
              FRAME_HEADER + 2 + FRAME_MAC);
    CHECK_INT(frame_decode(&k, buf, (size_t)n + 10, &f), 1);
    CHECK_INT((int)f.size, n);
    /* An empty key (--insecure) still checks for damage. */
    k.len = 0;
    n = frame_encode(&k, 1, NOW, "{}", 2, buf, sizeof(buf));
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), 1);
}

TEST(frame_refused)
{
    struct frame_key k = key_of("world key number one, long enough");
    struct frame_key other = key_of("world key number two, long enough");
    uint8_t buf[FRAME_MAX], big[FRAME_BODY_MAX + 1];
    struct frame f;
    int n = frame_encode(&k, 7, NOW, BODY, strlen(BODY), buf, sizeof(buf));

    /* Another key, or any byte changed: the MAC does not match. */
    memset(&f, 0xa5, sizeof(f));
    CHECK_INT(frame_decode(&other, buf, (size_t)n, &f), -EBADMSG);
    CHECK_INT(((uint8_t *)&f)[0], 0xa5);
    for (int i = 12; i < n; i++) {
        buf[i] ^= 0x01;
        CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), -EBADMSG);
        buf[i] ^= 0x01;
    }
    /* Not a frame at all, from its first bytes on. */
    CHECK_INT(frame_decode(&k, (const uint8_t *)"GET / HTTP/1.1\r\n", 16, &f), -EPROTO);
    CHECK_INT(frame_decode(&k, (const uint8_t *)"SX", 2, &f), -EPROTO);
    buf[4] = 2;
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), -EPROTO);
    buf[4] = 1;
    buf[5] = 0x80;
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), -EPROTO);
    buf[5] = 0;
    /* A length over the cap is refused from the header alone. */
    buf[8] = 0x7f;
    CHECK_INT(frame_decode(&k, buf, FRAME_HEADER, &f), -EMSGSIZE);
    buf[8] = 0;
    memset(big, ' ', sizeof(big));
    CHECK_INT(frame_encode(&k, 1, NOW, (const char *)big, sizeof(big), buf, sizeof(buf)),
              -EMSGSIZE);
    CHECK_INT(frame_encode(&k, 1, NOW, BODY, strlen(BODY), buf, 40), -ENOBUFS);
}

TEST(frame_replay)
{
    struct frame_replay r = { 0 };
    struct frame f = { .seq = 5, .ts_ms = NOW };

    CHECK_INT(frame_replay_check(&r, &f, NOW + 1000, 30000), 0);
    CHECK_INT(frame_replay_check(&r, &f, NOW + 1000, 30000), -EALREADY);
    f.seq = 4;
    CHECK_INT(frame_replay_check(&r, &f, NOW + 1000, 30000), -EALREADY);
    f.seq = 6;
    f.ts_ms = NOW - 31000;
    CHECK_INT(frame_replay_check(&r, &f, NOW, 30000), -ETIME);
    f.ts_ms = NOW + 31000;
    CHECK_INT(frame_replay_check(&r, &f, NOW, 30000), -ETIME);
    /* Refused frames leave the state alone: 6 in time is still new. */
    f.ts_ms = NOW;
    CHECK_INT(frame_replay_check(&r, &f, NOW, 30000), 0);
    f.ts_ms = (int64_t)0x8000000000000000ull;
    f.seq = 7;
    CHECK_INT(frame_replay_check(&r, &f, NOW, 30000), -ETIME);
}
