/* zipgrid on arbitrary bytes taken as a whole file.  Besides the
 * sanitizers, it aborts when a promise of zipgrid.h is broken: 0, -EINVAL
 * or -ENOMEM; on 0, restart points sorted, unique and inside (0, size);
 * on failure, none. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/zipgrid.h"

struct mem {
    const uint8_t *data;
    size_t size;
};

static ssize_t mem_read(void *ctx, void *buf, size_t len, uint64_t off)
{
    const struct mem *m = ctx;

    if (off > m->size)
        return -1;
    if (len > m->size - off)
        len = (size_t)(m->size - off);
    memcpy(buf, m->data + off, len);
    return (ssize_t)len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mem m = { data, size };
    uint64_t *r = NULL;
    size_t n = 99;
    int rc = zipgrid_restarts(mem_read, &m, size, 1, &r, &n);

    if (rc != 0 && rc != -EINVAL && rc != -ENOMEM)
        abort();
    if (rc != 0 && (r || n))
        abort();
    for (size_t i = 0; i < n; i++)
        if (r[i] == 0 || r[i] >= size || (i > 0 && r[i] <= r[i - 1]))
            abort();
    free(r);
    return 0;
}
