/* Fuzz targets: each defines LLVMFuzzerTestOneInput.  Built with replay.c
 * they run every file of a corpus directory once (make check); built with
 * clang -fsanitize=fuzzer they are libFuzzer targets. */
#ifndef FUZZ_H
#define FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Outputs are filled with 0xa5 before a call: still all 0xa5 after a
 * failure means the parser left them untouched, as it promises. */
static inline bool fuzz_poisoned(const void *p, size_t size)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < size; i++)
        if (b[i] != 0xa5)
            return false;
    return true;
}

#endif
