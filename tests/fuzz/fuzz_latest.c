/* The pointer <job>/LATEST's parser (snap_latest_parse()) on arbitrary
 * bytes: 0 with a generation number in range, or -EINVAL with a reason
 * and the number untouched; a document it accepts names the job asked. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/snap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why = NULL;
    uint64_t gen = 12345678901ull;
    char doc[160];
    int e = snap_latest_parse((const char *)data, size, "job-1", &gen, &why);

    if (e != 0) {
        if (e != -EINVAL || !why || gen != 12345678901ull)
            abort();
        return 0;
    }
    if (gen < 1 || gen > GEN_MAX)
        abort();
    /* What a writer puts for that number parses back to it. */
    snprintf(doc, sizeof(doc), "{\"format\":1,\"kind\":\"latest\",\"job\":\"job-1\",\"gen\":%llu}",
             (unsigned long long)gen);
    if (snap_latest_parse(doc, strlen(doc), "job-1", &gen, &why) != 0 ||
        snap_latest_parse(doc, strlen(doc), "job-2", &gen, &why) != -EINVAL)
        abort();
    return 0;
}
