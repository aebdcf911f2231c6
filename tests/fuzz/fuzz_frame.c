/* The frame decoder on arbitrary bytes, with a fixed key.  Besides the
 * sanitizers, it aborts when a promise of frame.h is broken: an answer in
 * {0, 1, -EPROTO, -EPROTONOSUPPORT, -EMSGSIZE, -EBADMSG}, *f untouched
 * unless 1, a decoded frame within the input and the cap, and the same
 * frame re-encoded from its fields byte for byte.  Inputs that start with
 * "MAC!" get a valid MAC appended first, so that the fuzzer reaches past
 * the MAC check; those that start with "KEY!" are two nonces and a body:
 * sealed with that connection's dialer-to-acceptor key, the frame decodes
 * with it and with no other (the other direction, the handshake key). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/frame.h"

static const struct frame_key key = { .k = "fuzzing world key, 32 bytes long", .len = 32 };

static void check(const uint8_t *data, size_t size)
{
    static uint8_t again[FRAME_MAX];
    struct frame f;
    int r;

    memset(&f, 0xa5, sizeof(f));
    r = frame_decode(&key, data, size, &f);
    if (r != 1) {
        if (r != 0 && r != -EPROTO && r != -EPROTONOSUPPORT && r != -EMSGSIZE &&
            r != -EBADMSG)
            abort();
        if (!fuzz_poisoned(&f, sizeof(f)))
            abort();
        return;
    }
    if (f.size > size || f.size > FRAME_MAX || f.body_len > FRAME_BODY_MAX ||
        f.size != FRAME_HEADER + f.body_len + FRAME_MAC ||
        f.body != (const char *)data + FRAME_HEADER)
        abort();
    if (frame_encode(&key, f.seq, f.body, f.body_len, again, sizeof(again)) !=
            (int)f.size ||
        memcmp(again, data, f.size) != 0)
        abort();
}

/* "KEY!" + dialer nonce + acceptor nonce + body. */
static void check_keys(const uint8_t *data, size_t size)
{
    static uint8_t buf[FRAME_MAX];
    const uint8_t *nd = data + 4, *na = data + 4 + FRAME_NONCE_LEN;
    const char *body = (const char *)data + 4 + 2 * FRAME_NONCE_LEN;
    size_t len = size - 4 - 2 * FRAME_NONCE_LEN;
    struct frame_key da, ad, hs;
    struct frame f;
    int n;

    if (len > FRAME_BODY_MAX)
        len = FRAME_BODY_MAX;
    if (frame_key_connection(&key, nd, na, FRAME_DIALER_TO_ACCEPTOR, &da) < 0 ||
        frame_key_connection(&key, nd, na, FRAME_ACCEPTOR_TO_DIALER, &ad) < 0 ||
        frame_key_handshake(&key, &hs) < 0 || da.len != FRAME_MAC)
        abort();
    n = frame_encode(&da, 1, body, len, buf, sizeof(buf));
    if (n < 0 || frame_decode(&da, buf, (size_t)n, &f) != 1 ||
        frame_decode(&ad, buf, (size_t)n, &f) != -EBADMSG ||
        frame_decode(&hs, buf, (size_t)n, &f) != -EBADMSG ||
        frame_decode(&key, buf, (size_t)n, &f) != -EBADMSG)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t buf[FRAME_MAX + 64];

    check(data, size);
    /* "MAC!" + header + body: sealed with the key, then decoded. */
    if (size >= 4 + FRAME_HEADER && memcmp(data, "MAC!", 4) == 0) {
        size_t body = size - 4 - FRAME_HEADER;
        uint64_t seq = 0;

        if (body > FRAME_BODY_MAX)
            body = FRAME_BODY_MAX;
        memcpy(&seq, data + 4 + 12, 8);
        if (frame_encode(&key, seq, (const char *)data + 4 + FRAME_HEADER, body, buf,
                         sizeof(buf)) < 0)
            abort();
        check(buf, FRAME_HEADER + body + FRAME_MAC);
    }
    if (size >= 4 + 2 * FRAME_NONCE_LEN && memcmp(data, "KEY!", 4) == 0)
        check_keys(data, size);
    return 0;
}
