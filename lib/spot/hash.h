/* hash: SHA-256 and HMAC-SHA256, the one place spotd hashes (over
 * OpenSSL's EVP), and the one spelling of a hash in text: 64 lowercase hex
 * digits.  Chunks are addressed by it (chunk.h), manifests and commit
 * records name chunks and shards by it, S3 requests carry it
 * (x-amz-content-sha256), and frames and commit records are signed with
 * its HMAC. */
#ifndef SPOT_HASH_H
#define SPOT_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_LEN 32
#define HASH_HEX_LEN (2 * HASH_LEN)

/* SHA-256 of data.  Returns 0 or -EIO. */
int hash_sha256(const void *data, size_t len, uint8_t out[HASH_LEN]);

/* HMAC-SHA256 of data with a key of key_len bytes (0: the empty key).
 * Returns 0 or -EIO. */
int hash_hmac(const void *key, size_t key_len, const void *data, size_t len,
              uint8_t out[HASH_LEN]);

/* A SHA-256 computed in parts, whose state can be kept part way
 * (hash_copy) and finished later. */
struct hash_state {
    void *ctx;                       /* EVP_MD_CTX; NULL when none */
};
/* Begin, add, finish (which frees the state, also on failure).  Each
 * returns 0, -ENOMEM or -EIO; after a failure only hash_release() is
 * safe. */
int hash_begin(struct hash_state *h);
int hash_update(struct hash_state *h, const void *data, size_t len);
int hash_finish(struct hash_state *h, uint8_t out[HASH_LEN]);
/* A second state where src is now.  Returns 0 or -ENOMEM. */
int hash_copy(struct hash_state *dst, const struct hash_state *src);
/* Free the state (when it was not finished); NULL ctx is fine. */
void hash_release(struct hash_state *h);

/* A fast check of data, XXH3's 128 bits (not a cryptographic hash): it
 * tells whether bytes read twice are the same, where their SHA-256 is
 * known from the first read.  It never names anything. */
struct hash_check {
    uint64_t lo, hi;
};
void hash_check(const void *data, size_t len, struct hash_check *out);

/* Lowercase hex of a hash into hex (HASH_HEX_LEN + 1 bytes). */
void hash_hex(const uint8_t hash[HASH_LEN], char hex[HASH_HEX_LEN + 1]);
/* The reverse: exactly 64 lowercase hex digits (one spelling per hash).
 * Returns 0, or -EINVAL with out untouched. */
int hash_parse_hex(const char *s, uint8_t out[HASH_LEN]);

#endif
