/* The frame decoder on arbitrary bytes, with a fixed key.  Besides the
 * sanitizers, it aborts when a promise of frame.h is broken: an answer in
 * {0, 1, -EPROTO, -EMSGSIZE, -EBADMSG}, *f untouched unless 1, a decoded
 * frame within the input and the cap, and the same frame re-encoded from
 * its fields byte for byte.  Inputs that start with "MAC!" get a valid MAC
 * appended first, so that the fuzzer reaches past the MAC check. */
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
        if (r != 0 && r != -EPROTO && r != -EMSGSIZE && r != -EBADMSG)
            abort();
        if (!fuzz_poisoned(&f, sizeof(f)))
            abort();
        return;
    }
    if (f.size > size || f.size > FRAME_MAX || f.body_len > FRAME_BODY_MAX ||
        f.size != FRAME_HEADER + f.body_len + FRAME_MAC ||
        f.body != (const char *)data + FRAME_HEADER)
        abort();
    if (frame_encode(&key, f.seq, f.ts_ms, f.body, f.body_len, again, sizeof(again)) !=
            (int)f.size ||
        memcmp(again, data, f.size) != 0)
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
        int64_t ts = 0;

        if (body > FRAME_BODY_MAX)
            body = FRAME_BODY_MAX;
        memcpy(&seq, data + 4 + 12, 8);
        memcpy(&ts, data + 4 + 20, 8);
        if (frame_encode(&key, seq, ts, (const char *)data + 4 + FRAME_HEADER, body, buf,
                         sizeof(buf)) < 0)
            abort();
        check(buf, FRAME_HEADER + body + FRAME_MAC);
    }
    return 0;
}
