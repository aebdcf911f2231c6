/* chunk: hash, compress and frame chunks; check and decode them. */
#include "spot/chunk.h"

#include <errno.h>
#include <openssl/evp.h>
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

int chunk_sha256(const void *data, size_t len, uint8_t out[CHUNK_HASH_LEN])
{
    unsigned int n = 0;

    if (!EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) || n != CHUNK_HASH_LEN)
        return -EIO;
    return 0;
}

void chunk_hex(const uint8_t hash[CHUNK_HASH_LEN], char hex[2 * CHUNK_HASH_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < CHUNK_HASH_LEN; i++) {
        hex[2 * i] = digits[hash[i] >> 4];
        hex[2 * i + 1] = digits[hash[i] & 15];
    }
    hex[2 * CHUNK_HASH_LEN] = '\0';
}

int chunk_parse_hex(const char *s, uint8_t out[CHUNK_HASH_LEN])
{
    uint8_t tmp[CHUNK_HASH_LEN];

    if (strlen(s) != 2 * CHUNK_HASH_LEN)
        return -EINVAL;
    for (size_t i = 0; i < CHUNK_HASH_LEN; i++) {
        int v = 0;

        for (int j = 0; j < 2; j++) {
            char c = s[2 * i + j];
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= c - '0';
            else if (c >= 'a' && c <= 'f')
                v |= c - 'a' + 10;
            else
                return -EINVAL; /* lowercase only: one spelling per hash */
        }
        tmp[i] = (uint8_t)v;
    }
    memcpy(out, tmp, sizeof(tmp));
    return 0;
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
    if (chunk_sha256(plain, len, hash) < 0)
        return -EIO;
    buf = malloc(len + CHUNK_TRAILER_LEN);
    if (!buf)
        return -ENOMEM;
    if (len)
        memcpy(buf, plain, len);
    r = chunk_encode_buf(buf, len, hash, level, min_saving, out);
    if (r < 0)
        free(buf);
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
    chunk_hex(c.hash, c.hex);
    if (worth_compressing(z, plain, len, level, min_saving)) {
        size_t bound = ZSTD_compressBound(len), n;
        uint8_t *zb = malloc(bound + CHUNK_TRAILER_LEN);

        if (!zb)
            return -ENOMEM;
        n = ZSTD_compressCCtx(z, zb, bound, plain, len, level);
        if (!ZSTD_isError(n) && (double)n <= (double)len * (1.0 - min_saving)) {
            put_trailer(zb + n, CHUNK_ZSTD, len);
            c.encoding = CHUNK_ZSTD;
            c.data = zb;
            c.len = n + CHUNK_TRAILER_LEN;
            free(buf);
            *out = c;
            return 0;
        }
        free(zb);
    }
    put_trailer(buf + len, CHUNK_RAW, len);
    c.encoding = CHUNK_RAW;
    c.data = buf;
    c.len = len + CHUNK_TRAILER_LEN;
    *out = c;
    return 0;
}

int chunk_hash_plain(const void *plain, size_t len, uint8_t hash[CHUNK_HASH_LEN],
                     struct chunk_hasher *keep)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new(), *copy = NULL;
    unsigned int n = 0;

    if (!ctx)
        return -ENOMEM;
    if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) || !EVP_DigestUpdate(ctx, plain, len))
        goto fail;
    if (keep) {
        if (!(copy = EVP_MD_CTX_new()) || !EVP_MD_CTX_copy_ex(copy, ctx))
            goto fail;
    }
    if (!EVP_DigestFinal_ex(ctx, hash, &n) || n != CHUNK_HASH_LEN)
        goto fail;
    EVP_MD_CTX_free(ctx);
    if (keep)
        keep->ctx = copy;
    return 0;
fail:
    EVP_MD_CTX_free(ctx);
    EVP_MD_CTX_free(copy);
    return -EIO;
}

int chunk_raw_payload_sha256(struct chunk_hasher *h, const struct chunk_enc *enc,
                             uint8_t out[CHUNK_HASH_LEN])
{
    unsigned int n = 0;
    int r = 0;

    if (!h->ctx || enc->encoding != CHUNK_RAW || enc->len < CHUNK_TRAILER_LEN ||
        !EVP_DigestUpdate(h->ctx, enc->data + enc->len - CHUNK_TRAILER_LEN, CHUNK_TRAILER_LEN) ||
        !EVP_DigestFinal_ex(h->ctx, out, &n) || n != CHUNK_HASH_LEN)
        r = -EIO;
    chunk_hasher_release(h);
    return r;
}

void chunk_hasher_release(struct chunk_hasher *h)
{
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
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
    free(c->data);
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
    if (expect && (chunk_sha256(enc, plain_len, hash) < 0 ||
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
    plain = malloc(plain_len ? plain_len : 1);
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
            free(plain);
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
        if (chunk_sha256(plain, plain_len, hash) < 0 || memcmp(hash, expect, CHUNK_HASH_LEN) != 0)
            goto out_bad;
    }
    *ret_plain = plain;
    *ret_len = plain_len;
    return 0;

out_bad:
    free(plain);
    return -EBADMSG;
}
