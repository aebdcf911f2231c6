/* frame: the peer protocol's frames (see frame.h). */
#include "spot/frame.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <string.h>

#include "spot/hash.h"

_Static_assert(FRAME_MAC == HASH_LEN, "a frame's MAC is an HMAC-SHA256");

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int frame_key_parse(const char *text, size_t len, struct frame_key *ret, const char **why)
{
    struct frame_key k;
    bool hex = true;

    while (len > 0 && (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r'))
        text++, len--;
    while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\t' ||
                       text[len - 1] == '\n' || text[len - 1] == '\r'))
        len--;
    for (size_t i = 0; i < len && hex; i++)
        hex = hex_value((unsigned char)text[i]) >= 0;
    hex = hex && len >= 64 && len % 2 == 0;
    k.len = hex ? len / 2 : len;
    if (k.len < FRAME_KEY_MIN) {
        *why = "the key is shorter than 16 bytes; make one with "
               "'openssl rand -hex 32'";
        return -EINVAL;
    }
    if (k.len > FRAME_KEY_MAX) {
        *why = "the key is longer than 256 bytes";
        return -EINVAL;
    }
    for (size_t i = 0; i < k.len; i++)
        k.k[i] = hex ? (uint8_t)(hex_value((unsigned char)text[2 * i]) << 4 |
                                 hex_value((unsigned char)text[2 * i + 1]))
                     : (uint8_t)text[i];
    *ret = k;
    return 0;
}

/* HMAC-SHA256(world, data) as a key of FRAME_MAC bytes. */
static int derive(const struct frame_key *world, const uint8_t *data, size_t len,
                  struct frame_key *ret)
{
    struct frame_key k = { .len = FRAME_MAC };

    if (hash_hmac(world->k, world->len, data, len, k.k) < 0)
        return -EIO;
    *ret = k;
    return 0;
}

int frame_key_handshake(const struct frame_key *world, struct frame_key *ret)
{
    static const char label[] = "spotd peer v2 handshake";

    return derive(world, (const uint8_t *)label, sizeof(label) - 1, ret);
}

int frame_key_connection(const struct frame_key *world, const uint8_t dialer[FRAME_NONCE_LEN],
                         const uint8_t acceptor[FRAME_NONCE_LEN], enum frame_dir dir,
                         struct frame_key *ret)
{
    static const char prefix[] = "spotd peer v2";
    const char *label = dir == FRAME_DIALER_TO_ACCEPTOR ? "dialer to acceptor"
                                                        : "acceptor to dialer";
    uint8_t in[sizeof(prefix) - 1 + 2 * FRAME_NONCE_LEN + 32];
    size_t n = 0, llen = strlen(label);

    memcpy(in + n, prefix, sizeof(prefix) - 1);
    n += sizeof(prefix) - 1;
    memcpy(in + n, dialer, FRAME_NONCE_LEN);
    n += FRAME_NONCE_LEN;
    memcpy(in + n, acceptor, FRAME_NONCE_LEN);
    n += FRAME_NONCE_LEN;
    memcpy(in + n, label, llen);
    n += llen;
    return derive(world, in, n, ret);
}

int frame_encode(const struct frame_key *key, uint64_t seq, const char *body, size_t len,
                 uint8_t *out, size_t outlen)
{
    size_t size = FRAME_HEADER + len + FRAME_MAC;

    if (len > FRAME_BODY_MAX)
        return -EMSGSIZE;
    if (outlen < size)
        return -ENOBUFS;
    memcpy(out, FRAME_MAGIC, 4);
    out[4] = FRAME_VERSION;
    out[5] = 0;
    out[6] = out[7] = 0;
    put_u32(out + 8, (uint32_t)len);
    put_u64(out + 12, seq);
    memcpy(out + FRAME_HEADER, body, len);
    if (hash_hmac(key->k, key->len, out, FRAME_HEADER + len, out + FRAME_HEADER + len) < 0)
        return -EIO;
    return (int)size;
}

int frame_decode(const struct frame_key *key, const uint8_t *buf, size_t len, struct frame *f)
{
    uint8_t mac[FRAME_MAC];
    uint64_t body_len;
    size_t size;

    /* What has come so far must already look like a frame, of this
     * version: an old peer's hello is refused as such at once. */
    if (memcmp(buf, FRAME_MAGIC, len < 4 ? len : 4) != 0)
        return -EPROTO;
    if (len > 4 && buf[4] != FRAME_VERSION)
        return -EPROTONOSUPPORT;
    if (len < FRAME_HEADER)
        return 0;
    if (buf[5] != 0 || buf[6] != 0 || buf[7] != 0)
        return -EPROTO;
    body_len = get_be(buf + 8, 4);
    if (body_len > FRAME_BODY_MAX)
        return -EMSGSIZE;
    size = FRAME_HEADER + (size_t)body_len + FRAME_MAC;
    if (len < size)
        return 0;
    if (hash_hmac(key->k, key->len, buf, FRAME_HEADER + (size_t)body_len, mac) < 0 ||
        CRYPTO_memcmp(mac, buf + FRAME_HEADER + body_len, FRAME_MAC) != 0)
        return -EBADMSG;
    f->seq = get_be(buf + 12, 8);
    f->body = (const char *)buf + FRAME_HEADER;
    f->body_len = (size_t)body_len;
    f->size = size;
    return 1;
}

int frame_replay_check(struct frame_replay *r, const struct frame *f)
{
    if (f->seq <= r->last_seq)
        return -EALREADY;
    if (f->seq != r->last_seq + 1)
        return -ENOMSG;
    r->last_seq = f->seq;
    return 0;
}
