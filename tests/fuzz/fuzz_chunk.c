/* The chunk decoder on arbitrary bytes, and the encoder's round trip. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/chunk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct chunk_enc c;
    void *plain = NULL;
    size_t len = 0;

    /* Whatever it is, it decodes to at most the cap, or not at all. */
    if (chunk_decode(data, size, NULL, &plain, &len) == 0) {
        if (len > CHUNK_MAX_PLAIN)
            abort();
        free(plain);
    }
    if (chunk_encode(data, size, 1, 0.05, &c) != 0)
        abort();
    if (chunk_decode(c.data, c.len, c.hash, &plain, &len) != 0 || len != size ||
        (size && memcmp(plain, data, size) != 0))
        abort();
    free(plain);
    chunk_enc_release(&c);
    return 0;
}
