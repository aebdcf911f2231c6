/* Fuzz targets: each defines LLVMFuzzerTestOneInput.  Built with replay.c
 * they run every file of a corpus directory once (make check); built with
 * clang -fsanitize=fuzzer they are libFuzzer targets. */
#ifndef FUZZ_H
#define FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* A string field of a parser's output: NUL-terminated within size, not
 * empty when nonempty, printable ASCII when printable.  Aborts if not. */
static inline void fuzz_check_string(const char *s, size_t size, bool nonempty, bool printable)
{
    const char *end = memchr(s, '\0', size);

    if (!end || (nonempty && end == s))
        abort();
    for (; printable && s < end; s++)
        if (*s < 0x20 || *s > 0x7e)
            abort();
}

#endif
