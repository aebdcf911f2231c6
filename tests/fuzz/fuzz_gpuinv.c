/* The criu method's GPU record on arbitrary bytes (it comes from the
 * store): 0 or -EINVAL with a reason and *ret untouched, bounded printable
 * strings, pids > 0, and a comparison that always terminates its message. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/gpuinv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gpuinv g, here;
    const char *why = NULL;
    char msg[256];
    int e;

    memset(&g, 0xa5, sizeof(g));
    e = gpuinv_parse_images((const char *)data, size, &g, &why);
    if (e != 0) {
        if (e != -EINVAL || !why || !fuzz_poisoned(&g, sizeof(g)))
            abort();
        return 0;
    }
    if (g.nprocs > GPUINV_MAX_PROCS || g.ngpus > GPUINV_MAX_GPUS)
        abort();
    for (uint32_t i = 0; i < g.nprocs; i++)
        if (g.procs[i] <= 0)
            abort();
    fuzz_check_string(g.driver, sizeof(g.driver), false, true);
    for (uint32_t i = 0; i < g.ngpus; i++)
        fuzz_check_string(g.model[i], sizeof(g.model[0]), true, true);
    memset(&here, 0, sizeof(here));
    here.known = true;
    if (gpuinv_compare(&g, &here, msg, sizeof(msg)) < 0 && !memchr(msg, '\0', sizeof(msg)))
        abort();
    return 0;
}
