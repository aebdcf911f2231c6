/* lib/spot/hash.c: SHA-256 and HMAC-SHA256 against published vectors
 * (FIPS 180-2, RFC 4231), in one part and in several, and the hex. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "spot/hash.h"

static void check_hex(const uint8_t h[HASH_LEN], const char *want)
{
    char hex[HASH_HEX_LEN + 1];

    hash_hex(h, hex);
    CHECK_STR(hex, want);
}

TEST(hash_sha256)
{
    uint8_t h[HASH_LEN];

    CHECK_INT(hash_sha256("abc", 3, h), 0);
    check_hex(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK_INT(hash_sha256("", 0, h), 0);
    check_hex(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* In parts, and a state kept part way finishes on its own. */
TEST(hash_parts)
{
    static const char msg[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    struct hash_state h = { 0 }, kept = { 0 };
    uint8_t out[HASH_LEN];

    CHECK_INT(hash_begin(&h), 0);
    CHECK_INT(hash_update(&h, "ab", 2), 0);
    CHECK_INT(hash_copy(&kept, &h), 0);
    CHECK_INT(hash_update(&h, msg + 2, strlen(msg) - 2), 0);
    CHECK_INT(hash_finish(&h, out), 0);
    CHECK(h.ctx == NULL);
    check_hex(out, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    CHECK_INT(hash_update(&kept, "c", 1), 0);
    CHECK_INT(hash_finish(&kept, out), 0);
    check_hex(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* A finished (or never begun) state fails instead of crashing. */
    CHECK_INT(hash_update(&h, "x", 1), -EIO);
    CHECK_INT(hash_finish(&h, out), -EIO);
    hash_release(&h);
}

TEST(hash_hmac)
{
    uint8_t out[HASH_LEN], key[20];

    /* RFC 4231 test cases 1 and 2. */
    memset(key, 0x0b, sizeof(key));
    CHECK_INT(hash_hmac(key, sizeof(key), "Hi There", 8, out), 0);
    check_hex(out, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    CHECK_INT(hash_hmac("Jefe", 4, "what do ya want for nothing?", 28, out), 0);
    check_hex(out, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* The empty key (an unsigned world). */
    CHECK_INT(hash_hmac(NULL, 0, "", 0, out), 0);
    check_hex(out, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(hash_hex)
{
    static const char good[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    uint8_t out[HASH_LEN], before[HASH_LEN];

    CHECK_INT(hash_parse_hex(good, out), 0);
    check_hex(out, good);
    memcpy(before, out, sizeof(out));
    /* One spelling: uppercase, short, long, not hex; out untouched. */
    CHECK_INT(hash_parse_hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
                             out), -EINVAL);
    CHECK_INT(hash_parse_hex("ba7816", out), -EINVAL);
    CHECK_INT(hash_parse_hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad0",
                             out), -EINVAL);
    CHECK_INT(hash_parse_hex("za7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                             out), -EINVAL);
    CHECK(memcmp(out, before, sizeof(out)) == 0);
}
