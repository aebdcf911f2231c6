/* chunk: compress and frame chunks (hashed by hash.c); check and decode them. */
#include "spot/chunk.h"
#include "spot/bigbuf.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define SAMPLE_LEN (64 * 1024)

static const uint8_t magic[4] = { 'S', 'P', 'C', '1' };

/* One compression and one decompression context per thread, freed when
 * the thread ends. */
static pthread_key_t cctx_key, dctx_key;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void free_cctx(void *p)
{
    ZSTD_freeCCtx(p);
}

static void free_dctx(void *p)
{
    ZSTD_freeDCtx(p);
}

static void make_keys(void)
{
    pthread_key_create(&cctx_key, free_cctx);
    pthread_key_create(&dctx_key, free_dctx);
}

static ZSTD_CCtx *cctx(void)
{
    ZSTD_CCtx *c;

    pthread_once(&keys_once, make_keys);
    c = pthread_getspecific(cctx_key);
    if (!c) {
        c = ZSTD_createCCtx();
        if (c)
            pthread_setspecific(cctx_key, c);
    }
    return c;
}

static ZSTD_DCtx *dctx(void)
{
    ZSTD_DCtx *d;

    pthread_once(&keys_once, make_keys);
    d = pthread_getspecific(dctx_key);
    if (!d) {
        d = ZSTD_createDCtx();
        if (d)
            pthread_setspecific(dctx_key, d);
    }
    return d;
}

/* The trailer, at h (just after the payload). */
static void put_trailer(uint8_t *h, enum chunk_encoding enc, uint64_t plain_len)
{
    memcpy(h, magic, 4);
    h[4] = (uint8_t)enc;
    h[5] = h[6] = h[7] = 0;
    for (int i = 0; i < 8; i++)
        h[8 + i] = (uint8_t)(plain_len >> (8 * i));
}

/* Would compressing save at least min_saving?  Compressing a sample
 * decides without paying for the whole chunk. */
static bool worth_compressing(ZSTD_CCtx *c, const void *plain, size_t len, int level,
                              double min_saving)
{
    size_t n = len < SAMPLE_LEN ? len : SAMPLE_LEN;
    uint8_t *tmp;
    size_t out;

    if (len == 0)
        return false;
    tmp = malloc(ZSTD_compressBound(n));
    if (!tmp)
        return true; /* let the real attempt fail or succeed */
    out = ZSTD_compressCCtx(c, tmp, ZSTD_compressBound(n), plain, n, level);
    free(tmp);
    return !ZSTD_isError(out) && (double)out <= (double)n * (1.0 - min_saving);
}

int chunk_encode(const void *plain, size_t len, int level, double min_saving,
                 struct chunk_enc *out)
{
    uint8_t hash[CHUNK_HASH_LEN], *buf;
    int r;

    if (len > CHUNK_MAX_PLAIN || (len && !plain))
        return -EINVAL;
    if (hash_sha256(plain, len, hash) < 0)
        return -EIO;
    buf = bigbuf_alloc(len + CHUNK_TRAILER_LEN);
    if (!buf)
        return -ENOMEM;
    if (len)
        memcpy(buf, plain, len);
    r = chunk_encode_buf(buf, len, hash, level, min_saving, out);
    if (r < 0)
        bigbuf_free(buf);
    return r;
}

int chunk_encode_buf(uint8_t *buf, size_t len, const uint8_t hash[CHUNK_HASH_LEN], int level,
                     double min_saving, struct chunk_enc *out)
{
    const uint8_t *plain = buf;
    struct chunk_enc c;
    ZSTD_CCtx *z = cctx();

    if (len > CHUNK_MAX_PLAIN || !buf)
        return -EINVAL;
    if (!z)
        return -ENOMEM;
    memset(&c, 0, sizeof(c));
    memcpy(c.hash, hash, CHUNK_HASH_LEN);
    hash_hex(c.hash, c.hex);
    if (worth_compressing(z, plain, len, level, min_saving)) {
        size_t bound = ZSTD_compressBound(len), n;
        uint8_t *zb = bigbuf_alloc(bound + CHUNK_TRAILER_LEN);

        if (!zb)
            return -ENOMEM;
        n = ZSTD_compressCCtx(z, zb, bound, plain, len, level);
        if (!ZSTD_isError(n) && (double)n <= (double)len * (1.0 - min_saving)) {
            put_trailer(zb + n, CHUNK_ZSTD, len);
            c.encoding = CHUNK_ZSTD;
            c.data = zb;
            c.len = n + CHUNK_TRAILER_LEN;
            bigbuf_free(buf);
            *out = c;
            return 0;
        }
        bigbuf_free(zb);
    }
    put_trailer(buf + len, CHUNK_RAW, len);
    c.encoding = CHUNK_RAW;
    c.data = buf;
    c.len = len + CHUNK_TRAILER_LEN;
    *out = c;
    return 0;
}

int chunk_hash_plain(const void *plain, size_t len, uint8_t hash[CHUNK_HASH_LEN],
                     struct hash_state *keep)
{
    struct hash_state h;
    int r;

    if ((r = hash_begin(&h)) < 0)
        return r;
    if ((r = hash_update(&h, plain, len)) < 0 || (keep && (r = hash_copy(keep, &h)) < 0)) {
        hash_release(&h);
        return r;
    }
    if ((r = hash_finish(&h, hash)) < 0 && keep)
        hash_release(keep);
    return r;
}

int chunk_raw_payload_sha256(struct hash_state *h, const struct chunk_enc *enc,
                             uint8_t out[CHUNK_HASH_LEN])
{
    if (enc->encoding != CHUNK_RAW || enc->len < CHUNK_TRAILER_LEN ||
        hash_update(h, enc->data + enc->len - CHUNK_TRAILER_LEN, CHUNK_TRAILER_LEN) < 0) {
        hash_release(h);
        return -EIO;
    }
    return hash_finish(h, out);
}

bool chunk_is_zero(const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t i = 0;

    /* Checkpoint data is rarely zero: the first word usually decides. */
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w)
            return false;
    }
    for (; i < len; i++)
        if (p[i])
            return false;
    return true;
}

void chunk_enc_release(struct chunk_enc *c)
{
    bigbuf_free(c->data);
    c->data = NULL;
    c->len = 0;
}

/* Check the trailer of a stored chunk: its encoding, plaintext length
 * and payload length.  Returns 0 or -EBADMSG. */
static int read_trailer(const uint8_t *enc, size_t len, int *ret_enc, uint64_t *ret_plain,
                        size_t *ret_payload)
{
    const uint8_t *t;
    uint64_t plain_len = 0;

    if (!enc || len < CHUNK_TRAILER_LEN)
        return -EBADMSG;
    t = enc + len - CHUNK_TRAILER_LEN;
    if (memcmp(t, magic, 4) != 0 || t[5] || t[6] || t[7])
        return -EBADMSG;
    for (int i = 0; i < 8; i++)
        plain_len |= (uint64_t)t[8 + i] << (8 * i);
    if (plain_len > CHUNK_MAX_PLAIN)
        return -EBADMSG;
    *ret_enc = t[4];
    *ret_plain = plain_len;
    *ret_payload = len - CHUNK_TRAILER_LEN;
    return 0;
}

int chunk_decode_view(const void *enc, size_t len, const uint8_t expect[CHUNK_HASH_LEN],
                      const void **ret_plain, size_t *ret_len, void **ret_owned)
{
    uint8_t hash[CHUNK_HASH_LEN];
    uint64_t plain_len;
    size_t payload, n;
    void *plain;
    int e, r;

    if (read_trailer(enc, len, &e, &plain_len, &payload) < 0)
        return -EBADMSG;
    if (e != CHUNK_RAW) {
        r = chunk_decode(enc, len, expect, &plain, &n);
        if (r < 0)
            return r;
        *ret_plain = plain;
        *ret_len = n;
        *ret_owned = plain;
        return 0;
    }
    if (payload != plain_len)
        return -EBADMSG;
    if (expect && (hash_sha256(enc, plain_len, hash) < 0 ||
                   memcmp(hash, expect, CHUNK_HASH_LEN) != 0))
        return -EBADMSG;
    *ret_plain = enc;
    *ret_len = plain_len;
    *ret_owned = NULL;
    return 0;
}

int chunk_decode(const void *enc, size_t len, const uint8_t expect[CHUNK_HASH_LEN],
                 void **ret_plain, size_t *ret_len)
{
    const uint8_t *h = enc;
    uint8_t hash[CHUNK_HASH_LEN];
    uint64_t plain_len;
    size_t payload;
    uint8_t *plain;
    int e;

    if (read_trailer(enc, len, &e, &plain_len, &payload) < 0)
        return -EBADMSG;
    plain = bigbuf_alloc(plain_len ? plain_len : 1);
    if (!plain)
        return -ENOMEM;

    if (e == CHUNK_RAW) {
        if (payload != plain_len)
            goto out_bad;
        memcpy(plain, h, payload);
    } else if (e == CHUNK_ZSTD) {
        ZSTD_DCtx *d = dctx();
        unsigned long long frame;
        size_t n;

        if (!d) {
            bigbuf_free(plain);
            return -ENOMEM;
        }
        /* Exactly one frame, of exactly the declared size. */
        frame = ZSTD_getFrameContentSize(h, payload);
        if (frame != plain_len || ZSTD_findFrameCompressedSize(h, payload) != payload)
            goto out_bad;
        n = ZSTD_decompressDCtx(d, plain, plain_len, h, payload);
        if (ZSTD_isError(n) || n != plain_len)
            goto out_bad;
    } else {
        goto out_bad;
    }
    if (expect) {
        if (hash_sha256(plain, plain_len, hash) < 0 || memcmp(hash, expect, CHUNK_HASH_LEN) != 0)
            goto out_bad;
    }
    *ret_plain = plain;
    *ret_len = plain_len;
    return 0;

out_bad:
    bigbuf_free(plain);
    return -EBADMSG;
}
