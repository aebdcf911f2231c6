/* hash: SHA-256 and HMAC-SHA256 over OpenSSL's EVP, and their hex. */
#include "spot/hash.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <xxhash.h>

int hash_sha256(const void *data, size_t len, uint8_t out[HASH_LEN])
{
    unsigned int n = 0;

    if (!EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) || n != HASH_LEN)
        return -EIO;
    return 0;
}

int hash_hmac(const void *key, size_t key_len, const void *data, size_t len,
              uint8_t out[HASH_LEN])
{
    static const uint8_t none[1];
    unsigned int n = 0;

    if (!HMAC(EVP_sha256(), key_len ? key : none, (int)key_len, data, len, out, &n) ||
        n != HASH_LEN)
        return -EIO;
    return 0;
}

int hash_begin(struct hash_state *h)
{
    if (!(h->ctx = EVP_MD_CTX_new()))
        return -ENOMEM;
    if (!EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL)) {
        hash_release(h);
        return -EIO;
    }
    return 0;
}

int hash_update(struct hash_state *h, const void *data, size_t len)
{
    return h->ctx && EVP_DigestUpdate(h->ctx, data, len) ? 0 : -EIO;
}

int hash_finish(struct hash_state *h, uint8_t out[HASH_LEN])
{
    unsigned int n = 0;
    int r = h->ctx && EVP_DigestFinal_ex(h->ctx, out, &n) && n == HASH_LEN ? 0 : -EIO;

    hash_release(h);
    return r;
}

int hash_copy(struct hash_state *dst, const struct hash_state *src)
{
    if (!(dst->ctx = EVP_MD_CTX_new()))
        return -ENOMEM;
    if (!src->ctx || !EVP_MD_CTX_copy_ex(dst->ctx, src->ctx)) {
        hash_release(dst);
        return -EIO;
    }
    return 0;
}

void hash_release(struct hash_state *h)
{
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
}

void hash_check(const void *data, size_t len, struct hash_check *out)
{
    XXH128_hash_t h = XXH3_128bits(data, len);

    out->lo = h.low64;
    out->hi = h.high64;
}

void hash_hex(const uint8_t hash[HASH_LEN], char hex[HASH_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < HASH_LEN; i++) {
        hex[2 * i] = digits[hash[i] >> 4];
        hex[2 * i + 1] = digits[hash[i] & 15];
    }
    hex[HASH_HEX_LEN] = '\0';
}

int hash_parse_hex(const char *s, uint8_t out[HASH_LEN])
{
    uint8_t tmp[HASH_LEN];

    if (strlen(s) != HASH_HEX_LEN)
        return -EINVAL;
    for (size_t i = 0; i < HASH_LEN; i++) {
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
