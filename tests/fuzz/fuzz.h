/* Fuzz targets: each defines LLVMFuzzerTestOneInput.  Built with replay.c
 * they run every file of a corpus directory once (make check); built with
 * clang -fsanitize=fuzzer they are libFuzzer targets. */
#ifndef FUZZ_H
#define FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
