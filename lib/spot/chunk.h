/* chunk: the encoding of one stored chunk (store format version 1).
 *
 * A chunk is addressed by the SHA-256 of its plaintext and says how it is
 * encoded, so a reader needs nothing else.  The description is a trailer,
 * so that a raw chunk is its plaintext as it lies in memory: it is stored
 * and written back without a copy, and the SHA-256 of the stored object
 * (which S3 requests carry) continues the plaintext's own instead of
 * reading it a second time.
 *
 *   offset 0     n bytes   payload: the plaintext, or its zstd frame
 *   offset n     4 bytes   magic "SPC1"
 *   offset n+4   1 byte    encoding: 0 raw, 1 zstd (one frame)
 *   offset n+5   3 bytes   zero
 *   offset n+8   8 bytes   plaintext length, little-endian
 *
 * Chunks that do not compress well are stored raw: a sample is compressed
 * first, so incompressible data (float32 weights compress to ~92 %) costs
 * little CPU.  Encoding and decoding run in the worker pool; each thread
 * keeps its own zstd contexts. */
#ifndef SPOT_CHUNK_H
#define SPOT_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/hash.h"

#define CHUNK_TRAILER_LEN 16
#define CHUNK_MAX_PLAIN (64u * 1024 * 1024)
#define CHUNK_HASH_LEN HASH_LEN

enum chunk_encoding { CHUNK_RAW = 0, CHUNK_ZSTD = 1 };

struct chunk_enc {
    uint8_t hash[CHUNK_HASH_LEN];    /* SHA-256 of the plaintext */
    char hex[2 * CHUNK_HASH_LEN + 1];
    enum chunk_encoding encoding;
    uint8_t *data;                   /* payload + trailer, owned */
    size_t len;
};

/* Hash and encode len bytes (at most CHUNK_MAX_PLAIN) with zstd at level;
 * stored raw when compression would save less than min_saving (0.0..1.0,
 * e.g. 0.05).  Returns 0, -EINVAL or -ENOMEM; out is untouched on failure. */
int chunk_encode(const void *plain, size_t len, int level, double min_saving,
                 struct chunk_enc *out);
void chunk_enc_release(struct chunk_enc *c);

/* The same without copying: buf holds the len bytes of plaintext and
 * CHUNK_TRAILER_LEN free bytes after them; the caller already has the
 * plaintext's hash.  On success buf is consumed: out->data is buf itself
 * with the trailer written after the plaintext (raw), or a new buffer and
 * buf is freed (zstd).  On failure buf stays the caller's. */
int chunk_encode_buf(uint8_t *buf, size_t len, const uint8_t hash[CHUNK_HASH_LEN], int level,
                     double min_saving, struct chunk_enc *out);

/* Check and decode a stored chunk: header, payload, and, when expect is
 * not NULL, the plaintext's SHA-256.  Returns 0 with a malloc'ed plaintext
 * (the caller frees it), -EBADMSG for anything malformed or corrupt,
 * -ENOMEM. */
int chunk_decode(const void *enc, size_t len, const uint8_t expect[CHUNK_HASH_LEN],
                 void **ret_plain, size_t *ret_len);

/* The same without copying a raw payload: *ret_plain is enc itself
 * (raw) or to a malloc'ed plaintext that *ret_owned also holds (zstd;
 * NULL for raw).  The caller frees *ret_owned. */
int chunk_decode_view(const void *enc, size_t len, const uint8_t expect[CHUNK_HASH_LEN],
                      const void **ret_plain, size_t *ret_len, void **ret_owned);

/* All len bytes of data are zero. */
bool chunk_is_zero(const void *data, size_t len);

/* The SHA-256 of a plaintext, and, when keep is not NULL, the hash state
 * after it, from which chunk_raw_payload_sha256() finishes the SHA-256 of
 * the plaintext's raw encoding without reading the plaintext again.
 * Returns 0, -EIO or -ENOMEM. */
int chunk_hash_plain(const void *plain, size_t len, uint8_t hash[CHUNK_HASH_LEN],
                     struct hash_state *keep);
/* The SHA-256 of raw chunk enc, from the state kept when its plaintext
 * was hashed; the state is used up.  Returns 0 or -EIO. */
int chunk_raw_payload_sha256(struct hash_state *h, const struct chunk_enc *enc,
                             uint8_t out[CHUNK_HASH_LEN]);

#endif
