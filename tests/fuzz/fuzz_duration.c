/* Durations, numbers and signal names, and the duration round trip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[64], back[32];
    uint64_t ms, again, n;

    if (size >= sizeof(s))
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (parse_duration(s, &ms) == 0) {
        if (ms > PARSE_DURATION_MAX_MS)
            abort();
        parse_format_duration(ms, back, sizeof(back));
        if (parse_duration(back, &again) != 0 || again != ms)
            abort();
    }
    if (parse_u64(s, 0, UINT64_MAX, &n) == 0) {
        const char *digits = s;
        while (digits[0] == '0' && digits[1])
            digits++;
        snprintf(back, sizeof(back), "%llu", (unsigned long long)n);
        if (strcmp(back, digits) != 0)
            abort();
    }
    int sig = parse_signal(s);
    if (sig != -22 && (sig < 1 || sig > 64))
        abort();
    return 0;
}
