#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spot/bigbuf.h"
#include "spot/chunk.h"

/* Deterministic bytes: xorshift. */
static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        p[i] = (uint8_t)seed;
    }
}

static void round_trip(const char *what, const uint8_t *data, size_t len,
                       enum chunk_encoding want)
{
    struct chunk_enc c;
    void *plain = NULL;
    size_t plain_len = 0;

    if (chunk_encode(data, len, 1, 0.05, &c) != 0) {
        printf("  %s: encode failed\n", what);
        harness_failed = 1;
        return;
    }
    if (c.encoding != want) {
        printf("  %s: encoding %d, expected %d (%zu -> %zu)\n", what, c.encoding, want, len, c.len);
        harness_failed = 1;
    }
    if (chunk_decode(c.data, c.len, c.hash, &plain, &plain_len) != 0 || plain_len != len ||
        (len && memcmp(plain, data, len) != 0)) {
        printf("  %s: does not decode to the original\n", what);
        harness_failed = 1;
    }
    free(plain);
    chunk_enc_release(&c);
}

TEST(chunk_round_trip)
{
    size_t n = 1024 * 1024;
    uint8_t *buf = malloc(n);
    float *f = (float *)(void *)buf;

    memset(buf, 0, n);
    round_trip("zeros", buf, n, CHUNK_ZSTD);
    fill_random(buf, n, 42);
    round_trip("random", buf, n, CHUNK_RAW);
    /* Smooth float32 values: low mantissa bits vary, exponents repeat. */
    for (size_t i = 0; i < n / 4; i++)
        f[i] = (float)(i % 1000) * 0.001f;
    round_trip("floats", buf, n, CHUNK_ZSTD);
    round_trip("empty", buf, 0, CHUNK_RAW);
    round_trip("one byte", buf, 1, CHUNK_RAW);
    free(buf);
}

TEST(chunk_corrupt)
{
    uint8_t data[4096], *copy;
    struct chunk_enc z, r;
    void *plain;
    size_t len;

    memset(data, 'a', sizeof(data));
    CHECK_INT(chunk_encode(data, sizeof(data), 3, 0.05, &z), 0);
    fill_random(data, sizeof(data), 7);
    CHECK_INT(chunk_encode(data, sizeof(data), 3, 0.05, &r), 0);
    CHECK_INT(z.encoding, CHUNK_ZSTD);
    CHECK_INT(r.encoding, CHUNK_RAW);

    /* Every single flipped byte of either encoding is caught. */
    for (int which = 0; which < 2; which++) {
        struct chunk_enc *c = which ? &r : &z;
        copy = malloc(c->len);
        for (size_t i = 0; i < c->len; i++) {
            memcpy(copy, c->data, c->len);
            copy[i] ^= 0x40;
            plain = NULL;
            if (chunk_decode(copy, c->len, c->hash, &plain, &len) != -EBADMSG) {
                printf("  flipped byte %zu of a %s chunk went unnoticed\n", i,
                       which ? "raw" : "zstd");
                harness_failed = 1;
                free(plain);
                break;
            }
        }
        /* Truncated, and with bytes appended. */
        for (size_t cut = 0; cut < c->len; cut += c->len / 16 + 1)
            CHECK_INT(chunk_decode(c->data, cut, c->hash, &plain, &len), -EBADMSG);
        copy = realloc(copy, c->len + 1);
        memcpy(copy, c->data, c->len);
        copy[c->len] = 0;
        CHECK_INT(chunk_decode(copy, c->len + 1, c->hash, &plain, &len), -EBADMSG);
        free(copy);
    }
    /* The wrong hash. */
    CHECK_INT(chunk_decode(z.data, z.len, r.hash, &plain, &len), -EBADMSG);
    /* Without a hash to check, the encoding alone is still checked. */
    CHECK_INT(chunk_decode(z.data, z.len, NULL, &plain, &len), 0);
    free(plain);
    /* A declared length over the cap is refused before any allocation. */
    z.data[z.len - 1] = 0x7f;
    CHECK_INT(chunk_decode(z.data, z.len, NULL, &plain, &len), -EBADMSG);
    CHECK_INT(chunk_encode(data, (size_t)CHUNK_MAX_PLAIN + 1, 1, 0.05, &r), -EINVAL);
    chunk_enc_release(&z);
    chunk_enc_release(&r);
}

/* bigbuf keeps what it frees for the next buffer of about its size, on
 * the boundary that size asks for, and never a small one. */
TEST(bigbuf_keep)
{
    size_t mib = 1024 * 1024;
    void *a, *b, *c, *d;

    bigbuf_trim();                      /* what other tests left */
    a = bigbuf_alloc(8 * mib);
    CHECK(a != NULL);
    if (!a)
        return;
    CHECK((uintptr_t)a % BIGBUF_HUGE == 0);
    memset(a, 1, 8 * mib);
    bigbuf_free(a);
    b = bigbuf_alloc(3 * mib);          /* less than half: a new one */
    CHECK(b != a);
    c = bigbuf_alloc(5 * mib);          /* the kept one */
    CHECK(c == a);
    CHECK((uintptr_t)c % BIGBUF_HUGE == 0);
    bigbuf_free(c);
    bigbuf_free(b);
    d = bigbuf_alloc(3 * mib);          /* the better fit of the two */
    CHECK(d == b);
    bigbuf_free(d);
    /* A small buffer is malloc()'s, and freeing it keeps nothing. */
    d = bigbuf_alloc(1000);
    CHECK(d != NULL);
    bigbuf_free(d);
    bigbuf_free(NULL);
    bigbuf_trim();
    CHECK_INT(bigbuf_kept(), 0);
    /* Freeing more than the cap keeps the cap's worth, no more. */
    for (int round = 0; round < 2; round++) {
        void *many[40];

        for (int i = 0; i < 40; i++)
            many[i] = bigbuf_alloc(BIGBUF_HUGE);
        for (int i = 0; i < 40; i++)
            bigbuf_free(many[i]);
    }
    CHECK(bigbuf_kept() * BIGBUF_HUGE <= BIGBUF_KEEP_BYTES);
    CHECK(bigbuf_kept() > 0);
    bigbuf_trim();
    CHECK_INT(bigbuf_kept(), 0);
}
