/* bigbuf: chunk-sized buffers on huge pages where the kernel allows. */
#include "spot/bigbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

void *bigbuf_alloc(size_t len)
{
    size_t align = len >= BIGBUF_HUGE ? BIGBUF_HUGE : 4096;
    void *b;
    int e;

    if (len < BIGBUF_MIN)
        return malloc(len);
    if ((e = posix_memalign(&b, align, len)) != 0) {
        errno = e;
        return NULL;
    }
    /* Only advice: without transparent huge pages it fails or does
     * nothing, and the buffer works the same. */
    if (align == BIGBUF_HUGE)
        (void)madvise(b, len, MADV_HUGEPAGE);
    return b;
}
