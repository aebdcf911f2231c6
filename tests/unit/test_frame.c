#include <errno.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "harness.h"
#include "spot/frame.h"

#define BODY "{\"v\":1,\"type\":\"heartbeat\",\"rank\":2}"

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
    int n = frame_encode(&k, 7, BODY, strlen(BODY), buf, sizeof(buf));

    CHECK_INT(n, 20 + (int)strlen(BODY) + FRAME_MAC);
    CHECK(memcmp(buf, "SPF1\x02\0\0\0", 8) == 0);
    /* Every prefix asks for more; the whole decodes. */
    for (int i = 0; i < n; i++)
        CHECK_INT(frame_decode(&k, buf, (size_t)i, &f), 0);
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), 1);
    CHECK_INT((int)f.size, n);
    CHECK_INT((int)f.seq, 7);
    CHECK_INT((int)f.body_len, (int)strlen(BODY));
    CHECK(memcmp(f.body, BODY, f.body_len) == 0);
    /* Two frames back to back: the first is read alone. */
    CHECK_INT(frame_encode(&k, 8, "{}", 2, buf + n, sizeof(buf) - (size_t)n),
              FRAME_HEADER + 2 + FRAME_MAC);
    CHECK_INT(frame_decode(&k, buf, (size_t)n + 10, &f), 1);
    CHECK_INT((int)f.size, n);
    /* An empty key (--insecure) still checks for damage. */
    k.len = 0;
    n = frame_encode(&k, 1, "{}", 2, buf, sizeof(buf));
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), 1);
}

TEST(frame_refused)
{
    struct frame_key k = key_of("world key number one, long enough");
    struct frame_key other = key_of("world key number two, long enough");
    uint8_t buf[FRAME_MAX], big[FRAME_BODY_MAX + 1];
    struct frame f;
    int n = frame_encode(&k, 7, BODY, strlen(BODY), buf, sizeof(buf));

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
    /* Another version (an older spotd's hello is version 1): refused as
     * such from its fifth byte on. */
    buf[4] = 1;
    CHECK_INT(frame_decode(&k, buf, 5, &f), -EPROTONOSUPPORT);
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), -EPROTONOSUPPORT);
    buf[4] = 3;
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), -EPROTONOSUPPORT);
    buf[4] = 2;
    buf[5] = 0x80;
    CHECK_INT(frame_decode(&k, buf, (size_t)n, &f), -EPROTO);
    buf[5] = 0;
    /* A length over the cap is refused from the header alone. */
    buf[8] = 0x7f;
    CHECK_INT(frame_decode(&k, buf, FRAME_HEADER, &f), -EMSGSIZE);
    buf[8] = 0;
    memset(big, ' ', sizeof(big));
    CHECK_INT(frame_encode(&k, 1, (const char *)big, sizeof(big), buf, sizeof(buf)), -EMSGSIZE);
    CHECK_INT(frame_encode(&k, 1, BODY, strlen(BODY), buf, 40), -ENOBUFS);
}

TEST(frame_replay)
{
    struct frame_replay r = { 0 };
    struct frame f = { .seq = 1 };

    /* 1, 2, 3...: nothing else, with no clock involved. */
    CHECK_INT(frame_replay_check(&r, &f), 0);
    CHECK_INT(frame_replay_check(&r, &f), -EALREADY);
    f.seq = 2;
    CHECK_INT(frame_replay_check(&r, &f), 0);
    f.seq = 1;
    CHECK_INT(frame_replay_check(&r, &f), -EALREADY);
    f.seq = 4;
    CHECK_INT(frame_replay_check(&r, &f), -ENOMSG);
    /* Refused frames leave the state alone: 3 is still the next. */
    f.seq = 3;
    CHECK_INT(frame_replay_check(&r, &f), 0);
    f.seq = 0;
    CHECK_INT(frame_replay_check(&r, &f), -EALREADY);
    f.seq = UINT64_MAX;
    CHECK_INT(frame_replay_check(&r, &f), -ENOMSG);
}

/* The keys of frame.h, as documented (docs/protocols.md): another
 * connection's nonces or the other direction fail the MAC. */
TEST(frame_keys)
{
    struct frame_key w = key_of("world key number one, long enough");
    struct frame_key hs, da, ad, other, again;
    uint8_t nd[FRAME_NONCE_LEN], na[FRAME_NONCE_LEN], buf[FRAME_MAX];
    uint8_t in[13 + 2 * FRAME_NONCE_LEN + 18], want[32];
    unsigned int len = 0;
    struct frame f;
    int n;

    memset(nd, 0x11, sizeof(nd));
    memset(na, 0x22, sizeof(na));
    CHECK_INT(frame_key_handshake(&w, &hs), 0);
    CHECK_INT(frame_key_connection(&w, nd, na, FRAME_DIALER_TO_ACCEPTOR, &da), 0);
    CHECK_INT(frame_key_connection(&w, nd, na, FRAME_ACCEPTOR_TO_DIALER, &ad), 0);
    CHECK_INT((int)hs.len, 32);
    CHECK_INT((int)da.len, 32);
    /* The construction, spelled out: HMAC-SHA256(world key, "spotd peer v2"
     * || dialer nonce || acceptor nonce || "dialer to acceptor"). */
    memcpy(in, "spotd peer v2", 13);
    memcpy(in + 13, nd, FRAME_NONCE_LEN);
    memcpy(in + 13 + FRAME_NONCE_LEN, na, FRAME_NONCE_LEN);
    memcpy(in + 13 + 2 * FRAME_NONCE_LEN, "dialer to acceptor", 18);
    HMAC(EVP_sha256(), w.k, (int)w.len, in, sizeof(in), want, &len);
    CHECK(memcmp(da.k, want, 32) == 0);
    HMAC(EVP_sha256(), w.k, (int)w.len, (const uint8_t *)"spotd peer v2 handshake", 23, want,
         &len);
    CHECK(memcmp(hs.k, want, 32) == 0);
    /* The same inputs, the same key. */
    CHECK_INT(frame_key_connection(&w, nd, na, FRAME_DIALER_TO_ACCEPTOR, &again), 0);
    CHECK(memcmp(again.k, da.k, 32) == 0);

    n = frame_encode(&da, 5, BODY, strlen(BODY), buf, sizeof(buf));
    CHECK_INT(frame_decode(&da, buf, (size_t)n, &f), 1);
    /* Reflected back to its sender, who reads with the other direction's key. */
    CHECK_INT(frame_decode(&ad, buf, (size_t)n, &f), -EBADMSG);
    /* On another connection: another nonce on either side. */
    na[0] ^= 1;
    CHECK_INT(frame_key_connection(&w, nd, na, FRAME_DIALER_TO_ACCEPTOR, &other), 0);
    CHECK_INT(frame_decode(&other, buf, (size_t)n, &f), -EBADMSG);
    na[0] ^= 1;
    nd[15] ^= 1;
    CHECK_INT(frame_key_connection(&w, nd, na, FRAME_DIALER_TO_ACCEPTOR, &other), 0);
    CHECK_INT(frame_decode(&other, buf, (size_t)n, &f), -EBADMSG);
    /* The nonces swapped are another connection too. */
    nd[15] ^= 1;
    CHECK_INT(frame_key_connection(&w, na, nd, FRAME_DIALER_TO_ACCEPTOR, &other), 0);
    CHECK_INT(frame_decode(&other, buf, (size_t)n, &f), -EBADMSG);
    /* Neither the handshake key nor the world key itself opens it. */
    CHECK_INT(frame_decode(&hs, buf, (size_t)n, &f), -EBADMSG);
    CHECK_INT(frame_decode(&w, buf, (size_t)n, &f), -EBADMSG);
}
